//! The MAC learning table (forwarding database), generic over a lock
//! strategy.
//!
//! Keys are (VLAN id, MAC address); values say which port the station was
//! last seen on, when, and whether the entry is static. The hot path follows
//! the Linux bridge (`br_fdb.c`): a frame from a known station on the same
//! port only refreshes the entry's last-seen second, with a relaxed atomic
//! store and only when the second changed, inside a read section. New
//! stations and stations that moved go through the write path, which callers
//! batch ([`MacTable::learn_batch`]).
//!
//! A station behind a VXLAN port also has its VTEP in its entry, as in
//! Linux's vxlan fdb (`bridge fdb ... dst`): the remote address a frame to
//! it is sent to. The VTEP is learned from the outer source of the
//! station's frames; a station heard from another VTEP has moved.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use locks::{LockedMap, ReadSection, Strategy, Update, WriteSection};

use crate::port_id::{PortId, MAX_PORTS};
pub use crate::wire::vxlan::Vtep;
use crate::wire::{MacAddr, VlanId};

/// Seconds on the table's coarse clock.
pub type Seconds = u32;

/// What the table is keyed by: a station within a VLAN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FdbKey {
    /// The VLAN (0 for untagged frames).
    pub vlan: VlanId,
    /// The station's address.
    pub mac: MacAddr,
}

impl FdbKey {
    /// A key for `mac` in `vlan`.
    pub const fn new(vlan: VlanId, mac: MacAddr) -> FdbKey {
        FdbKey { vlan, mac }
    }
}

impl Hash for FdbKey {
    /// One 64-bit write instead of eight small ones: the key packs into a
    /// word, and hashing it is on every lookup.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.mac.to_u64() | (u64::from(self.vlan) << 48));
    }
}

/// One table entry.
#[derive(Debug)]
pub struct FdbEntry {
    port: PortId,
    /// Where behind the port (a VXLAN port's VTEP); `None` for every other
    /// port, and for a VXLAN station sent to the port's flood list.
    vtep: Option<Vtep>,
    is_static: bool,
    /// The address of the port's own interface: frames to it are the
    /// host's, never forwarded. Local entries are static.
    is_local: bool,
    /// Installed by a control plane (EVPN; Linux's `extern_learn`): it
    /// never ages and does not count as learned, and learning the station
    /// on another port takes it over (the station moved there).
    is_extern: bool,
    /// Written by readers in place (relaxed: a timestamp that orders no other
    /// memory; a reader that sees a slightly old value ages an entry at most
    /// one refresh late).
    last_seen: AtomicU32,
}

impl FdbEntry {
    fn learned(port: PortId, vtep: Option<Vtep>, now: Seconds) -> FdbEntry {
        FdbEntry {
            port,
            vtep,
            is_static: false,
            is_local: false,
            is_extern: false,
            last_seen: AtomicU32::new(now),
        }
    }

    fn installed(port: PortId, vtep: Option<Vtep>) -> FdbEntry {
        FdbEntry {
            port,
            vtep,
            is_static: false,
            is_local: false,
            is_extern: true,
            last_seen: AtomicU32::new(0),
        }
    }

    fn configured(port: PortId, vtep: Option<Vtep>, is_local: bool) -> FdbEntry {
        FdbEntry {
            port,
            vtep,
            is_static: true,
            is_local,
            is_extern: false,
            last_seen: AtomicU32::new(0),
        }
    }

    /// The port the station is reached through.
    pub fn port(&self) -> PortId {
        self.port
    }

    /// The VTEP behind the port, for a VXLAN port's station.
    pub fn vtep(&self) -> Option<Vtep> {
        self.vtep
    }

    /// Whether the entry was configured rather than learned.
    pub fn is_static(&self) -> bool {
        self.is_static
    }

    /// Whether the entry is the address of a port's own interface.
    pub fn is_local(&self) -> bool {
        self.is_local
    }

    /// Whether a control plane installed the entry.
    pub fn is_extern(&self) -> bool {
        self.is_extern
    }

    /// Whether the entry counts as learned: not configured, not installed.
    fn is_learned(&self) -> bool {
        !self.is_static && !self.is_extern
    }

    /// When a frame from the station was last seen.
    pub fn last_seen(&self) -> Seconds {
        self.last_seen.load(Ordering::Relaxed)
    }
}

/// Table settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbConfig {
    /// The most learned entries; 0 means no limit. Static entries do not
    /// count. Beyond the limit new stations are not learned (their frames are
    /// still forwarded, flooded), and [`FdbStats::refused`] counts them.
    pub max_entries: usize,
    /// Seconds after which an entry not refreshed is removed by [`MacTable::age`].
    pub age_secs: Seconds,
}

impl FdbConfig {
    /// The default learning limit; docs/design.md says why this number.
    pub const DEFAULT_MAX_ENTRIES: usize = 8192;
    /// The default ageing time, as in IEEE 802.1D and every kernel bridge.
    pub const DEFAULT_AGE_SECS: Seconds = 300;
}

impl Default for FdbConfig {
    fn default() -> Self {
        FdbConfig {
            max_entries: Self::DEFAULT_MAX_ENTRIES,
            age_secs: Self::DEFAULT_AGE_SECS,
        }
    }
}

/// What learning a source did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// A new station was added.
    New,
    /// A known station moved to another port, or to another VTEP behind
    /// its port.
    Moved,
    /// A known station on the same port; only its time was refreshed.
    Refreshed,
    /// The station has a static entry, which learning never changes.
    Static,
    /// A new station beyond the learning limit; nothing was added.
    Refused,
    /// The address is a port's own (a local entry), which no frame's
    /// source takes, in any VLAN; nothing was learned.
    Local,
}

/// Running totals of the table's write path.
#[derive(Debug, Default)]
pub struct FdbStats {
    learned: AtomicU64,
    moved: AtomicU64,
    refused: AtomicU64,
    aged: AtomicU64,
    own_sources: AtomicU64,
}

/// A copy of [`FdbStats`] at one moment (with the `serde` feature, under
/// the names the daemon reports them by).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FdbStatsSnapshot {
    /// Stations learned.
    #[cfg_attr(feature = "serde", serde(rename = "learned_total"))]
    pub learned: u64,
    /// Station moves.
    #[cfg_attr(feature = "serde", serde(rename = "moves"))]
    pub moved: u64,
    /// New stations not learned because the table was full.
    pub refused: u64,
    /// Entries removed by ageing.
    pub aged: u64,
    /// Sources not learned because they were a port's own address: a
    /// frame of the host's coming back (a loop), or a station claiming
    /// the host's address. Once per station and batch, as `refused`.
    pub own_sources: u64,
}

/// One entry with everything it holds: for display, and for a table of
/// another strategy to take over ([`MacTable::import`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FdbRecord {
    /// VLAN and address.
    pub key: FdbKey,
    /// The port.
    pub port: PortId,
    /// The VTEP behind a VXLAN port.
    pub vtep: Option<Vtep>,
    /// Whether the entry is static.
    pub is_static: bool,
    /// Whether the entry is a port's own address (static too).
    pub is_local: bool,
    /// Whether a control plane installed it (`extern_learn`).
    pub is_extern: bool,
    /// When last seen, on the table's clock.
    pub last_seen: Seconds,
}

impl FdbRecord {
    /// Seconds since the station was last seen at `now` (0 for static
    /// and installed entries, which do not age).
    pub fn idle_secs(&self, now: Seconds) -> Seconds {
        if self.is_static || self.is_extern {
            0
        } else {
            now.saturating_sub(self.last_seen)
        }
    }
}

/// A source to learn: a station heard on a port, from a VTEP there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// VLAN and address.
    pub key: FdbKey,
    /// The port it was heard on.
    pub port: PortId,
    /// The outer source of its frame, on a VXLAN port that learns VTEPs.
    pub vtep: Option<Vtep>,
}

/// A MAC table of any strategy, for the control plane (which may work
/// through a trait object: it is not the packet path, and a table can be
/// replaced by one of another strategy while the bridge runs).
pub trait Table: Send + Sync {
    /// The table's strategy.
    fn kind(&self) -> locks::StrategyKind;
    /// See [`MacTable::config`].
    fn config(&self) -> FdbConfig;
    /// The table's clock now.
    fn now(&self) -> Seconds;
    /// The table's clock, for a table that takes over its entries.
    fn clock(&self) -> CoarseClock;
    /// See [`MacTable::len`].
    fn len(&self) -> usize;
    /// Whether the table is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// See [`MacTable::learned_len`].
    fn learned_len(&self) -> usize;
    /// See [`MacTable::stats`].
    fn stats(&self) -> FdbStatsSnapshot;
    /// See [`MacTable::records`].
    fn records(&self) -> Vec<FdbRecord>;
    /// Where `key` is, telling local entries apart.
    fn locate(&self, key: &FdbKey) -> Option<Location>;
    /// See [`MacTable::add_static_at`].
    fn add_static(&self, key: FdbKey, port: PortId, vtep: Option<Vtep>) -> bool;
    /// See [`MacTable::add_local`].
    fn add_local(&self, key: FdbKey, port: PortId) -> bool;
    /// See [`MacTable::remove_static`].
    fn remove_static(&self, key: FdbKey) -> bool;
    /// See [`MacTable::install`].
    fn install(&self, key: FdbKey, port: PortId, vtep: Option<Vtep>) -> bool;
    /// See [`MacTable::uninstall`].
    fn uninstall(&self, key: FdbKey) -> bool;
    /// See [`MacTable::forget`].
    fn forget(&self, key: FdbKey) -> bool;
    /// See [`MacTable::flush`].
    fn flush(&self) -> usize;
    /// See [`MacTable::flush_port`].
    fn flush_port(&self, port: PortId) -> usize;
    /// See [`MacTable::purge_port`].
    fn purge_port(&self, port: PortId) -> usize;
    /// See [`MacTable::age`].
    fn age(&self, now: Seconds) -> usize;
    /// See [`MacTable::set_port_limit`].
    fn set_port_limit(&self, port: PortId, limit: u32);
    /// See [`MacTable::port_limit`].
    fn port_limit(&self, port: PortId) -> u32;
    /// See [`MacTable::port_learned`].
    fn port_learned(&self, port: PortId) -> usize;
}

impl<S: Strategy> Table for MacTable<S> {
    fn kind(&self) -> locks::StrategyKind {
        S::KIND
    }
    fn config(&self) -> FdbConfig {
        MacTable::config(self)
    }
    fn now(&self) -> Seconds {
        self.clock.now()
    }
    fn clock(&self) -> CoarseClock {
        self.clock
    }
    fn len(&self) -> usize {
        MacTable::len(self)
    }
    fn learned_len(&self) -> usize {
        MacTable::learned_len(self)
    }
    fn stats(&self) -> FdbStatsSnapshot {
        MacTable::stats(self)
    }
    fn records(&self) -> Vec<FdbRecord> {
        MacTable::records(self)
    }
    fn locate(&self, key: &FdbKey) -> Option<Location> {
        self.read(|r| r.locate(key))
    }
    fn add_static(&self, key: FdbKey, port: PortId, vtep: Option<Vtep>) -> bool {
        MacTable::add_static_at(self, key, port, vtep)
    }
    fn add_local(&self, key: FdbKey, port: PortId) -> bool {
        MacTable::add_local(self, key, port)
    }
    fn remove_static(&self, key: FdbKey) -> bool {
        MacTable::remove_static(self, key)
    }
    fn install(&self, key: FdbKey, port: PortId, vtep: Option<Vtep>) -> bool {
        MacTable::install(self, key, port, vtep)
    }
    fn uninstall(&self, key: FdbKey) -> bool {
        MacTable::uninstall(self, key)
    }
    fn forget(&self, key: FdbKey) -> bool {
        MacTable::forget(self, key)
    }
    fn flush(&self) -> usize {
        MacTable::flush(self)
    }
    fn flush_port(&self, port: PortId) -> usize {
        MacTable::flush_port(self, port)
    }
    fn purge_port(&self, port: PortId) -> usize {
        MacTable::purge_port(self, port)
    }
    fn age(&self, now: Seconds) -> usize {
        MacTable::age(self, now)
    }
    fn set_port_limit(&self, port: PortId, limit: u32) {
        MacTable::set_port_limit(self, port, limit)
    }
    fn port_limit(&self, port: PortId) -> u32 {
        MacTable::port_limit(self, port)
    }
    fn port_learned(&self, port: PortId) -> usize {
        MacTable::port_learned(self, port)
    }
}

/// The table's coarse clock: whole seconds since the table was made.
#[derive(Debug, Clone, Copy)]
pub struct CoarseClock {
    start: Instant,
}

impl CoarseClock {
    /// A clock that reads 0 now.
    pub fn new() -> CoarseClock {
        CoarseClock {
            start: Instant::now(),
        }
    }

    /// Whole seconds since the clock was made.
    pub fn now(&self) -> Seconds {
        Seconds::try_from(self.start.elapsed().as_secs()).unwrap_or(Seconds::MAX)
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

/// The map a [`MacTable`] keeps under strategy `S`.
pub type FdbMap<S> = <S as Strategy>::Map<FdbKey, FdbEntry>;

/// The read section of [`FdbMap<S>`].
pub type FdbSection<'a, S> = <FdbMap<S> as LockedMap<FdbKey, FdbEntry>>::Reader<'a>;

/// The MAC learning table over strategy `S`.
pub struct MacTable<S: Strategy> {
    map: FdbMap<S>,
    config: FdbConfig,
    /// Learned (non-static) entries, kept within `config.max_entries` by
    /// reserving a place before inserting.
    learned_len: AtomicUsize,
    /// Per port: its learned entries, and the most it may have.
    quotas: PortQuotas,
    stats: FdbStats,
    clock: CoarseClock,
}

/// Per port, learned entries and the most it may have (`max_learned`, 0:
/// no limit): switches call it port security's maximum. Relaxed, as the
/// bridge-wide count: the counts bound memory and publish nothing.
struct PortQuotas {
    learned: Box<[AtomicU32]>,
    limit: Box<[AtomicU32]>,
}

impl PortQuotas {
    fn new() -> PortQuotas {
        let zeros = || (0..MAX_PORTS).map(|_| AtomicU32::new(0)).collect();
        PortQuotas {
            learned: zeros(),
            limit: zeros(),
        }
    }

    /// Takes a place on `port`, if its limit allows.
    fn reserve(&self, port: PortId) -> bool {
        let (Some(learned), Some(limit)) =
            (self.learned.get(port.index()), self.limit.get(port.index()))
        else {
            return true;
        };
        let max = limit.load(Ordering::Relaxed);
        learned
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (max == 0 || n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn release(&self, port: PortId, entries: u32) {
        if let Some(learned) = self.learned.get(port.index()) {
            // Saturating: a limit set while entries existed counts them from
            // then on only where they were counted before.
            let _ = learned.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(entries))
            });
        }
    }

    fn add(&self, port: PortId, entries: u32) {
        if let Some(learned) = self.learned.get(port.index()) {
            learned.fetch_add(entries, Ordering::Relaxed);
        }
    }

    fn is_full(&self, port: PortId) -> bool {
        let index = port.index();
        match (self.learned.get(index), self.limit.get(index)) {
            (Some(learned), Some(limit)) => {
                let max = limit.load(Ordering::Relaxed);
                max != 0 && learned.load(Ordering::Relaxed) >= max
            }
            _ => false,
        }
    }
}

/// A read section of a [`MacTable`]: lookups, and the in-place refresh of
/// known stations.
pub struct FdbReader<'r, R> {
    section: &'r R,
}

/// Where a known destination is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// A station reached through this port.
    Port(PortId),
    /// The address of this port's own interface: the host's.
    Local(PortId),
}

/// Where a destination lookup led.
pub trait FdbLookup {
    /// The port `key` was learned on, if it is known.
    fn lookup(&self, key: &FdbKey) -> Option<PortId>;

    /// Where `key` is, telling the host's own addresses apart.
    fn locate(&self, key: &FdbKey) -> Option<Location> {
        self.lookup(key).map(Location::Port)
    }

    /// [`locate`](Self::locate), with the VTEP behind the port.
    fn locate_vtep(&self, key: &FdbKey) -> Option<(Location, Option<Vtep>)> {
        self.locate(key).map(|location| (location, None))
    }

    /// Whether `key` has a static entry on `port` (what a locked port lets
    /// send).
    fn is_static_on(&self, key: &FdbKey, port: PortId) -> bool;
}

impl<R: ReadSection<FdbKey, FdbEntry>> FdbLookup for FdbReader<'_, R> {
    #[inline]
    fn lookup(&self, key: &FdbKey) -> Option<PortId> {
        self.section.get_with(key, |entry| entry.port)
    }

    #[inline]
    fn locate(&self, key: &FdbKey) -> Option<Location> {
        self.section.get_with(key, FdbEntry::location)
    }

    #[inline]
    fn locate_vtep(&self, key: &FdbKey) -> Option<(Location, Option<Vtep>)> {
        self.section
            .get_with(key, |entry| (entry.location(), entry.vtep))
    }

    #[inline]
    fn is_static_on(&self, key: &FdbKey, port: PortId) -> bool {
        self.section
            .get_with(key, |entry| entry.is_static && entry.port == port)
            .unwrap_or(false)
    }
}

impl FdbEntry {
    #[inline]
    fn location(&self) -> Location {
        match self.is_local {
            true => Location::Local(self.port),
            false => Location::Port(self.port),
        }
    }
}

/// How a frame's source stands in the table, as the fast path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceState {
    /// Known on this port (or static): refreshed, nothing to learn.
    Known,
    /// A port's own address, in this VLAN or (a VLAN 0 local entry) in
    /// every VLAN: never learned.
    Local,
    /// Known on another port: a move, for the write path.
    Moved,
    /// Not in the table: a new station, for the write path.
    Unknown,
}

impl<R: ReadSection<FdbKey, FdbEntry>> FdbReader<'_, R> {
    /// The whole entry for `key`, copied out.
    pub fn entry(&self, key: &FdbKey) -> Option<(PortId, bool, Seconds)> {
        self.section
            .get_with(key, |e| (e.port, e.is_static, e.last_seen()))
    }

    /// Handles a frame's source on the fast path. A known station on the
    /// same port (or a static or local one) gets its last-seen time
    /// refreshed, if the second moved, and `true` comes back. `false` means
    /// the source is new or moved and must go through [`MacTable::learn`].
    #[inline]
    pub fn refresh_source(&self, key: &FdbKey, port: PortId, now: Seconds) -> bool {
        matches!(
            self.source_state(key, port, None, now),
            SourceState::Known | SourceState::Local
        )
    }

    /// [`refresh_source`](Self::refresh_source) of a station heard from
    /// `vtep` (a VXLAN port's), telling a move from a new station.
    #[inline(always)]
    pub fn source_state(
        &self,
        key: &FdbKey,
        port: PortId,
        vtep: Option<Vtep>,
        now: Seconds,
    ) -> SourceState {
        let state = self.section.get_with(key, |entry| {
            if entry.is_local {
                return SourceState::Local;
            }
            if entry.is_static {
                return SourceState::Known;
            }
            if entry.port != port || entry.vtep != vtep {
                return SourceState::Moved;
            }
            // Only a changed second is written, so a busy station dirties
            // the entry's cache line once a second, not once a frame.
            if entry.last_seen.load(Ordering::Relaxed) != now {
                entry.last_seen.store(now, Ordering::Relaxed);
            }
            SourceState::Known
        });
        match state {
            Some(state) => state,
            // A new station in a VLAN: the host's addresses (local at VLAN
            // 0) are local in every VLAN. One more lookup, for new stations
            // only: a learned one is found above.
            None if key.vlan != 0 && self.is_local(&FdbKey::new(0, key.mac)) => SourceState::Local,
            None => SourceState::Unknown,
        }
    }

    /// Whether `key` is a local entry.
    #[inline]
    fn is_local(&self, key: &FdbKey) -> bool {
        self.section
            .get_with(key, |entry| entry.is_local)
            .unwrap_or(false)
    }
}

impl<S: Strategy> MacTable<S> {
    /// An empty table.
    pub fn new(config: FdbConfig) -> Self {
        Self::with_clock(config, CoarseClock::new())
    }

    /// An empty table on `clock`: a table that takes over another's
    /// entries keeps its clock, so that their ages carry over.
    pub fn with_clock(config: FdbConfig, clock: CoarseClock) -> Self {
        let capacity = match config.max_entries {
            0 => FdbConfig::DEFAULT_MAX_ENTRIES,
            n => n,
        };
        MacTable {
            map: LockedMap::with_capacity(capacity),
            config,
            learned_len: AtomicUsize::new(0),
            quotas: PortQuotas::new(),
            stats: FdbStats::default(),
            clock,
        }
    }

    /// Takes over `entries` (from [`records`](Self::records)) in one write
    /// section, ages and kinds kept, and the totals of the table they came
    /// from.
    pub fn import(&self, entries: &[FdbRecord], totals: FdbStatsSnapshot) {
        let learned = self.map.write(|w| {
            let mut learned = 0;
            for entry in entries {
                let value = FdbEntry {
                    port: entry.port,
                    vtep: entry.vtep,
                    is_static: entry.is_static,
                    is_local: entry.is_local,
                    is_extern: entry.is_extern,
                    last_seen: AtomicU32::new(entry.last_seen),
                };
                let learned_entry = value.is_learned();
                w.update(entry.key, |_| (Update::Put(value), ()));
                if learned_entry {
                    learned += 1;
                    self.quotas.add(entry.port, 1);
                }
            }
            learned
        });
        self.learned_len.fetch_add(learned, Ordering::Relaxed);
        self.stats.learned.store(totals.learned, Ordering::Relaxed);
        self.stats.moved.store(totals.moved, Ordering::Relaxed);
        self.stats.refused.store(totals.refused, Ordering::Relaxed);
        self.stats.aged.store(totals.aged, Ordering::Relaxed);
        self.stats
            .own_sources
            .store(totals.own_sources, Ordering::Relaxed);
    }

    /// The table's settings.
    pub fn config(&self) -> FdbConfig {
        self.config
    }

    /// The table's clock, which workers read once per batch.
    pub fn clock(&self) -> &CoarseClock {
        &self.clock
    }

    /// All entries, static ones included.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Learned entries, the ones the limit applies to.
    pub fn learned_len(&self) -> usize {
        self.learned_len.load(Ordering::Relaxed)
    }

    /// The write path's totals.
    pub fn stats(&self) -> FdbStatsSnapshot {
        FdbStatsSnapshot {
            learned: self.stats.learned.load(Ordering::Relaxed),
            moved: self.stats.moved.load(Ordering::Relaxed),
            refused: self.stats.refused.load(Ordering::Relaxed),
            aged: self.stats.aged.load(Ordering::Relaxed),
            own_sources: self.stats.own_sources.load(Ordering::Relaxed),
        }
    }

    /// Runs `f` inside one read section; hold it across a batch of frames.
    #[inline]
    pub fn read<T>(&self, f: impl FnOnce(&FdbReader<'_, FdbSection<'_, S>>) -> T) -> T {
        self.map.read(|section| f(&FdbReader { section }))
    }

    /// The port `key` is known on, in a read section of its own.
    pub fn lookup(&self, key: &FdbKey) -> Option<PortId> {
        self.read(|r| r.lookup(key))
    }

    /// Learns that `key` was seen on `port` at `now`.
    pub fn learn(&self, key: FdbKey, port: PortId, now: Seconds) -> Learned {
        let source = Source {
            key,
            port,
            vtep: None,
        };
        self.map.write(|w| self.learn_in(w, source, now).0)
    }

    /// Learns a batch of sources in one write section; returns how many were
    /// refused for lack of room.
    pub fn learn_batch(&self, sources: &[(FdbKey, PortId)], now: Seconds) -> usize {
        if sources.is_empty() {
            return 0;
        }
        self.map.write(|w| {
            let mut refused = 0;
            for &(key, port) in sources {
                let source = Source {
                    key,
                    port,
                    vtep: None,
                };
                refused += usize::from(self.learn_in(w, source, now).0 == Learned::Refused);
            }
            refused
        })
    }

    /// [`learn_batch`](Self::learn_batch) of sources that may name their
    /// VTEP, calling `moved(key, from, to)` for each station that moved to
    /// another port (one that moved to another VTEP behind the same port
    /// is counted as moved, but calls nothing).
    pub fn learn_batch_with(
        &self,
        sources: &[Source],
        now: Seconds,
        mut moved: impl FnMut(FdbKey, PortId, PortId),
    ) -> usize {
        if sources.is_empty() {
            return 0;
        }
        self.map.write(|w| {
            let mut refused = 0;
            for &source in sources {
                match self.learn_in(w, source, now) {
                    (Learned::Refused, _) => refused += 1,
                    (Learned::Moved, Some(from)) if from != source.port => {
                        moved(source.key, from, source.port)
                    }
                    _ => {}
                }
            }
            refused
        })
    }

    /// Whether the learning limit is reached: a new station would be refused.
    pub fn is_full(&self) -> bool {
        let max = self.config.max_entries;
        max != 0 && self.learned_len() >= max
    }

    /// Counts `stations` new stations refused without a write section, as
    /// a caller that saw [`is_full`](Self::is_full) does.
    pub fn refuse(&self, stations: usize) {
        if stations > 0 {
            self.stats
                .refused
                .fetch_add(stations as u64, Ordering::Relaxed);
        }
    }

    /// Counts `stations` sources not learned because they were a port's
    /// own address, as a caller that saw [`SourceState::Local`] does.
    pub fn refuse_own(&self, stations: usize) {
        if stations > 0 {
            self.stats
                .own_sources
                .fetch_add(stations as u64, Ordering::Relaxed);
        }
    }

    /// Learns one source; says what happened and, for a move, where from.
    fn learn_in(
        &self,
        w: &mut impl WriteSection<FdbKey, FdbEntry>,
        source: Source,
        now: Seconds,
    ) -> (Learned, Option<PortId>) {
        let Source { key, port, vtep } = source;
        // The host's addresses are local in every VLAN (see `source_state`).
        let host = key.vlan != 0
            && w.update(FdbKey::new(0, key.mac), |old| {
                (Update::Keep, old.is_some_and(|e| e.is_local))
            });
        let (outcome, from) = w.update(key, |old| match old {
            _ if host => (Update::Keep, (Learned::Local, None)),
            Some(entry) if entry.is_local => (Update::Keep, (Learned::Local, None)),
            None if self.reserve(port) => (
                Update::Put(FdbEntry::learned(port, vtep, now)),
                (Learned::New, None),
            ),
            None => (Update::Keep, (Learned::Refused, None)),
            Some(entry) if entry.is_static => (Update::Keep, (Learned::Static, None)),
            // An installed entry, heard elsewhere: the station moved here,
            // and is learned here (it counted as learned nowhere before).
            Some(entry) if entry.is_extern && (entry.port != port || entry.vtep != vtep) => {
                if self.reserve(port) {
                    (
                        Update::Put(FdbEntry::learned(port, vtep, now)),
                        (Learned::Moved, Some(entry.port)),
                    )
                } else {
                    (Update::Keep, (Learned::Refused, None))
                }
            }
            Some(entry) if entry.port == port && entry.vtep == vtep => {
                entry.last_seen.store(now, Ordering::Relaxed);
                (Update::Keep, (Learned::Refreshed, None))
            }
            Some(entry) if entry.port == port => (
                Update::Put(FdbEntry::learned(port, vtep, now)),
                (Learned::Moved, Some(entry.port)),
            ),
            // A move replaces the entry rather than editing it, so that
            // readers of `rcu` and `epoch` see the old entry or the new one.
            Some(entry) if self.quotas.reserve(port) => {
                self.quotas.release(entry.port, 1);
                (
                    Update::Put(FdbEntry::learned(port, vtep, now)),
                    (Learned::Moved, Some(entry.port)),
                )
            }
            // Onto a port at its limit: the station is not learned there,
            // and its old entry would send its frames astray, so it goes
            // (its frames flood, and reach it).
            Some(entry) => {
                self.quotas.release(entry.port, 1);
                self.release(1);
                (Update::Remove, (Learned::Refused, None))
            }
        });
        let counter = match outcome {
            Learned::New => &self.stats.learned,
            Learned::Moved => &self.stats.moved,
            Learned::Refused => &self.stats.refused,
            Learned::Local => &self.stats.own_sources,
            Learned::Refreshed | Learned::Static => return (outcome, from),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        (outcome, from)
    }

    /// Takes a place for one learned entry on `port`, if the table's limit
    /// and the port's allow.
    fn reserve(&self, port: PortId) -> bool {
        let max = self.config.max_entries;
        // Relaxed: the count bounds memory; it publishes nothing.
        let room = self
            .learned_len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (max == 0 || n < max).then_some(n + 1)
            })
            .is_ok();
        if room && !self.quotas.reserve(port) {
            self.release(1);
            return false;
        }
        room
    }

    /// Sets the most entries `port` may have learned (`max_learned`; 0: no
    /// limit). Entries beyond a new, lower limit stay until they age.
    pub fn set_port_limit(&self, port: PortId, limit: u32) {
        if let Some(slot) = self.quotas.limit.get(port.index()) {
            slot.store(limit, Ordering::Relaxed);
        }
    }

    /// The most entries `port` may have learned (0: no limit).
    pub fn port_limit(&self, port: PortId) -> u32 {
        self.quotas
            .limit
            .get(port.index())
            .map_or(0, |limit| limit.load(Ordering::Relaxed))
    }

    /// Entries learned on `port` now.
    pub fn port_learned(&self, port: PortId) -> usize {
        self.quotas
            .learned
            .get(port.index())
            .map_or(0, |n| n.load(Ordering::Relaxed) as usize)
    }

    /// Whether `port` is at its limit: a new station there would be
    /// refused.
    pub fn port_is_full(&self, port: PortId) -> bool {
        self.quotas.is_full(port)
    }

    /// Removes the learned entries `keep` refuses, releasing their places.
    fn retain_learned(
        &self,
        w: &mut impl WriteSection<FdbKey, FdbEntry>,
        mut keep: impl FnMut(&FdbKey, &FdbEntry) -> bool,
    ) -> usize {
        let quotas = &self.quotas;
        let removed = w.retain(|key, entry| {
            let kept = !entry.is_learned() || keep(key, entry);
            if !kept {
                quotas.release(entry.port, 1);
            }
            kept
        });
        self.release(removed);
        removed
    }

    fn release(&self, entries: usize) {
        self.learned_len.fetch_sub(entries, Ordering::Relaxed);
    }

    /// Adds or replaces a static entry: it never ages, and learning never
    /// overwrites it. Returns `true` when it replaced a learned entry.
    pub fn add_static(&self, key: FdbKey, port: PortId) -> bool {
        self.add_configured(key, port, None, false)
    }

    /// [`add_static`](Self::add_static) of a station behind a VXLAN port,
    /// at `vtep` (`None`: sent to the port's flood list).
    pub fn add_static_at(&self, key: FdbKey, port: PortId, vtep: Option<Vtep>) -> bool {
        self.add_configured(key, port, vtep, false)
    }

    /// Adds the address of port `port`'s own interface as a local entry:
    /// frames to it belong to the host and are never forwarded, and no
    /// frame's source moves it or is learned with it. At VLAN 0 it is the
    /// host's in every VLAN, as a Linux bridge keeps a local entry in each
    /// VLAN of the port: stations learned with the address in any VLAN
    /// before it became the port's are forgotten. Returns `true` when it
    /// replaced or removed a learned entry.
    pub fn add_local(&self, key: FdbKey, port: PortId) -> bool {
        let replaced = self.add_configured(key, port, None, true);
        if key.vlan != 0 {
            return replaced;
        }
        // Rare (an interface's address is set or changed): a scan is fine.
        let removed = self
            .map
            .write(|w| self.retain_learned(w, |other, _| other.mac != key.mac));
        replaced || removed > 0
    }

    fn add_configured(
        &self,
        key: FdbKey,
        port: PortId,
        vtep: Option<Vtep>,
        is_local: bool,
    ) -> bool {
        let replaced = self.map.write(|w| {
            w.update(key, |old| {
                let entry = FdbEntry::configured(port, vtep, is_local);
                let learned = old.filter(|e| e.is_learned()).map(|e| e.port);
                (Update::Put(entry), learned)
            })
        });
        if let Some(on) = replaced {
            self.quotas.release(on, 1);
            self.release(1);
        }
        replaced.is_some()
    }

    /// Removes a static entry; learned entries are left alone. Returns
    /// whether there was one.
    pub fn remove_static(&self, key: FdbKey) -> bool {
        self.map.write(|w| {
            w.update(key, |old| match old {
                Some(entry) if entry.is_static => (Update::Remove, true),
                _ => (Update::Keep, false),
            })
        })
    }

    /// Removes a learned or installed entry (the station left); static
    /// entries are left alone. Returns whether there was one.
    pub fn forget(&self, key: FdbKey) -> bool {
        let removed = self.map.write(|w| {
            w.update(key, |old| match old {
                Some(entry) if !entry.is_static => {
                    (Update::Remove, Some((entry.port, entry.is_learned())))
                }
                _ => (Update::Keep, None),
            })
        });
        if let Some((on, true)) = removed {
            self.quotas.release(on, 1);
            self.release(1);
        }
        removed.is_some()
    }

    /// Adds or replaces an entry a control plane installed (EVPN's remote
    /// station; Linux's `extern_learn`), at `vtep` behind a VXLAN port: it
    /// never ages, flushes keep it, learning the station on another port
    /// takes it over. A static or local entry of the station stays, and
    /// `false` comes back; `true` when the entry was added or changed.
    pub fn install(&self, key: FdbKey, port: PortId, vtep: Option<Vtep>) -> bool {
        let (changed, learned_on) = self.map.write(|w| {
            w.update(key, |old| match old {
                Some(entry) if entry.is_static => (Update::Keep, (false, None)),
                Some(entry) if entry.is_extern && entry.port == port && entry.vtep == vtep => {
                    (Update::Keep, (false, None))
                }
                Some(entry) => (
                    Update::Put(FdbEntry::installed(port, vtep)),
                    (true, entry.is_learned().then_some(entry.port)),
                ),
                None => (Update::Put(FdbEntry::installed(port, vtep)), (true, None)),
            })
        });
        if let Some(on) = learned_on {
            self.quotas.release(on, 1);
            self.release(1);
        }
        changed
    }

    /// Removes an installed entry; learned and static ones are left alone.
    /// Returns whether there was one.
    pub fn uninstall(&self, key: FdbKey) -> bool {
        self.map.write(|w| {
            w.update(key, |old| match old {
                Some(entry) if entry.is_extern => (Update::Remove, true),
                _ => (Update::Keep, false),
            })
        })
    }

    /// Removes learned entries not refreshed for the ageing time; returns
    /// how many.
    pub fn age(&self, now: Seconds) -> usize {
        let age = self.config.age_secs;
        let removed = self.map.write(|w| {
            self.retain_learned(w, |_, entry| now.saturating_sub(entry.last_seen()) < age)
        });
        self.stats.aged.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// Removes the learned entries of one port (its link went down, say);
    /// static entries stay. Returns how many were removed.
    pub fn flush_port(&self, port: PortId) -> usize {
        self.map
            .write(|w| self.retain_learned(w, |_, entry| entry.port != port))
    }

    /// Removes every entry of one port, static and local ones too: the
    /// port left the bridge. Returns how many were removed.
    pub fn purge_port(&self, port: PortId) -> usize {
        let mut learned = 0;
        let removed = self.map.write(|w| {
            w.retain(|_, entry| {
                let keep = entry.port != port;
                if !keep && entry.is_learned() {
                    learned += 1;
                }
                keep
            })
        });
        self.release(learned);
        self.quotas.release(port, learned as u32);
        removed
    }

    /// Removes every learned entry.
    pub fn flush(&self) -> usize {
        self.map.write(|w| self.retain_learned(w, |_, _| false))
    }

    /// Every entry, sorted by VLAN and address.
    pub fn records(&self) -> Vec<FdbRecord> {
        let mut records = Vec::with_capacity(self.len());
        self.map.read(|r| {
            r.for_each(|key, entry| {
                records.push(FdbRecord {
                    key: *key,
                    port: entry.port,
                    vtep: entry.vtep,
                    is_static: entry.is_static,
                    is_local: entry.is_local,
                    is_extern: entry.is_extern,
                    last_seen: entry.last_seen(),
                })
            })
        });
        records.sort_unstable();
        records
    }
}
