//! A VXLAN port's second learned table: which VTEP (remote IP address) each
//! station behind the port was last heard from, as the Linux vxlan device
//! learns it, with the same ageing; and the listed remotes that broadcast,
//! multicast and unknown unicast go to (head-end replication).
//!
//! It is read for every frame the port sends and written only when a
//! station is new, moves to another VTEP, or its entry's second changes:
//! the read-mostly pattern of the MAC table. A reader-writer lock guards it;
//! the lookups of one send batch take it once.
//!
//! A full table refuses a new station in constant time, without the write
//! lock: every datagram from a new inner source asks, and a peer can send
//! as many as it likes. Stations that aged out make room again through a
//! sweep of the table, at most once per [`SWEEP_INTERVAL`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockWriteGuard};
use std::time::{Duration, Instant};

use crate::fdb::FdbKey;

/// How often a full table may be swept for stations that aged out.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Where a station behind the port was heard from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    /// The VTEP's address.
    pub addr: IpAddr,
    /// When it was last heard (learned entries).
    pub seen: Instant,
    /// Added by hand: never aged, never moved by learning.
    pub fixed: bool,
}

/// One row of [`RemoteTable::entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEntry {
    /// The station.
    pub key: FdbKey,
    /// Its VTEP.
    pub addr: IpAddr,
    /// Static or learned.
    pub fixed: bool,
    /// Seconds since it was last heard.
    pub idle_secs: u64,
}

/// The stations behind a VXLAN port and their VTEPs.
#[derive(Debug)]
pub struct RemoteTable {
    entries: RwLock<HashMap<FdbKey, Remote>>,
    /// Where floods go.
    flood: Vec<IpAddr>,
    max_entries: usize,
    age: Duration,
    /// The entries' count, kept beside the map (written under the write
    /// lock) so that a full table is told without any lock.
    len: AtomicUsize,
    /// What the sweep clock counts from.
    epoch: Instant,
    /// When, in milliseconds from `epoch`, a full table may be swept next.
    sweep_at: AtomicU64,
    /// New stations not learned because the table was full.
    pub refused: AtomicU64,
    /// Write sections taken, to tell what a refusal costs.
    #[cfg(test)]
    writes: AtomicU64,
}

impl RemoteTable {
    /// A table flooding to `flood`, holding at most `max_entries` learned
    /// stations (0: no limit), forgetting those silent for `age`.
    pub fn new(flood: Vec<IpAddr>, max_entries: usize, age: Duration) -> RemoteTable {
        RemoteTable {
            entries: RwLock::new(HashMap::new()),
            flood,
            max_entries,
            age,
            len: AtomicUsize::new(0),
            epoch: Instant::now(),
            sweep_at: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            #[cfg(test)]
            writes: AtomicU64::new(0),
        }
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<FdbKey, Remote>> {
        #[cfg(test)]
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.entries.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The listed remotes.
    pub fn flood_list(&self) -> &[IpAddr] {
        &self.flood
    }

    /// Whether `addr` is a listed remote or the VTEP of a static entry.
    pub fn is_known_vtep(&self, addr: IpAddr) -> bool {
        self.flood.contains(&addr)
            || self
                .entries
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .any(|r| r.fixed && r.addr == addr)
    }

    /// Looks up every key of `keys` under one read lock: the VTEP of each
    /// known, live station.
    pub fn lookup_all(&self, keys: &[FdbKey], out: &mut Vec<Option<IpAddr>>) {
        let now = Instant::now();
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        out.clear();
        out.extend(keys.iter().map(|key| {
            entries
                .get(key)
                .filter(|r| r.fixed || now.duration_since(r.seen) < self.age)
                .map(|r| r.addr)
        }));
    }

    /// Whether the table holds as many entries as it may (relaxed: a
    /// writer that finds room re-checks under the write lock).
    fn is_full(&self) -> bool {
        self.max_entries != 0 && self.len.load(Ordering::Relaxed) >= self.max_entries
    }

    /// `now` on the sweep clock.
    fn millis(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Refuses a new station: one count.
    fn refuse(&self) {
        // Relaxed: a statistic.
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Learns that `key` was heard from `addr`. A write lock is taken only
    /// when the entry is new, moved, or last refreshed a second ago or more;
    /// a new station in a full table is refused without it, but for one
    /// sweep per [`SWEEP_INTERVAL`].
    pub fn learn(&self, key: FdbKey, addr: IpAddr, now: Instant) {
        {
            let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
            match entries.get(&key) {
                Some(r)
                    if r.fixed
                        || (r.addr == addr
                            && now.duration_since(r.seen) < Duration::from_secs(1)) =>
                {
                    return
                }
                Some(_) => {}
                None if self.is_full()
                    && self.millis(now) < self.sweep_at.load(Ordering::Relaxed) =>
                {
                    self.refuse();
                    return;
                }
                None => {}
            }
        }
        let mut entries = self.write();
        if let Some(r) = entries.get_mut(&key) {
            if !r.fixed {
                r.addr = addr;
                r.seen = now;
            }
            return;
        }
        if self.max_entries != 0 && entries.len() >= self.max_entries {
            // Make room from stations that aged out before refusing, at
            // most once per interval: the refusals until then take no
            // write lock.
            let at = self.millis(now);
            if at >= self.sweep_at.load(Ordering::Relaxed) {
                let interval = SWEEP_INTERVAL.as_millis() as u64;
                self.sweep_at.store(at + interval, Ordering::Relaxed);
                let age = self.age;
                entries.retain(|_, r| r.fixed || now.duration_since(r.seen) < age);
                self.len.store(entries.len(), Ordering::Relaxed);
            }
            if entries.len() >= self.max_entries {
                self.refuse();
                return;
            }
        }
        entries.insert(
            key,
            Remote {
                addr,
                seen: now,
                fixed: false,
            },
        );
        self.len.store(entries.len(), Ordering::Relaxed);
    }

    /// Adds (or replaces) a static entry.
    pub fn add_static(&self, key: FdbKey, addr: IpAddr) {
        let mut entries = self.write();
        entries.insert(
            key,
            Remote {
                addr,
                seen: Instant::now(),
                fixed: true,
            },
        );
        self.len.store(entries.len(), Ordering::Relaxed);
    }

    /// Removes an entry; returns whether there was one.
    pub fn remove(&self, key: &FdbKey) -> bool {
        let mut entries = self.write();
        let removed = entries.remove(key).is_some();
        self.len.store(entries.len(), Ordering::Relaxed);
        removed
    }

    /// Every live entry.
    pub fn entries(&self) -> Vec<RemoteEntry> {
        let now = Instant::now();
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        let mut rows: Vec<RemoteEntry> = entries
            .iter()
            .filter(|(_, r)| r.fixed || now.duration_since(r.seen) < self.age)
            .map(|(key, r)| RemoteEntry {
                key: *key,
                addr: r.addr,
                fixed: r.fixed,
                idle_secs: now.duration_since(r.seen).as_secs(),
            })
            .collect();
        rows.sort_by_key(|r| (r.key.vlan, r.key.mac.0));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::MacAddr;

    fn key(n: u8) -> FdbKey {
        FdbKey::new(0, MacAddr([2, 0, 0, 0, 0, n]))
    }

    fn station(n: u16) -> FdbKey {
        let [a, b] = n.to_be_bytes();
        FdbKey::new(0, MacAddr([2, 0, 0, 1, a, b]))
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([198, 18, 1, n])
    }

    #[test]
    fn stations_are_learned_moved_and_aged() {
        let table = RemoteTable::new(vec![ip(1), ip(2)], 0, Duration::from_secs(300));
        let now = Instant::now();
        table.learn(key(1), ip(1), now);
        let mut out = Vec::new();
        table.lookup_all(&[key(1), key(2)], &mut out);
        assert_eq!(out, [Some(ip(1)), None]);
        table.learn(key(1), ip(2), now);
        table.lookup_all(&[key(1)], &mut out);
        assert_eq!(out, [Some(ip(2))], "a station that moved VTEP follows");
        let old = now - Duration::from_secs(301);
        let aged = RemoteTable::new(vec![], 0, Duration::from_secs(300));
        aged.learn(key(3), ip(3), old);
        aged.lookup_all(&[key(3)], &mut out);
        assert_eq!(out, [None], "silent past the ageing time");
        assert!(aged.entries().is_empty());
    }

    #[test]
    fn static_entries_stay_and_the_limit_holds() {
        let table = RemoteTable::new(vec![ip(1)], 2, Duration::from_secs(300));
        let now = Instant::now();
        table.add_static(key(9), ip(9));
        table.learn(key(9), ip(1), now);
        let mut out = Vec::new();
        table.lookup_all(&[key(9)], &mut out);
        assert_eq!(out, [Some(ip(9))], "learning does not move a static entry");
        assert!(table.is_known_vtep(ip(9)) && table.is_known_vtep(ip(1)));
        assert!(!table.is_known_vtep(ip(7)));
        table.learn(key(1), ip(1), now);
        table.learn(key(2), ip(1), now);
        assert_eq!(table.refused.load(Ordering::Relaxed), 1);
        assert_eq!(table.entries().len(), 2);
        assert!(table.remove(&key(9)));
        table.learn(key(2), ip(1), now);
        assert_eq!(table.entries().len(), 2);
    }

    /// A full table under a flood of new inner sources: each refusal is an
    /// atomic load and a count, never the write lock or a scan of the
    /// table; stations that aged out still make room, found by a sweep at
    /// most once a second.
    #[test]
    fn a_full_table_refuses_in_constant_time() {
        let age = Duration::from_secs(300);
        let table = RemoteTable::new(vec![ip(1)], 64, age);
        let start = Instant::now();
        for n in 0..64 {
            table.learn(station(n), ip(1), start);
        }
        let writes = table.writes.load(Ordering::Relaxed);
        // Within one second: at most one sweep for all of them.
        for n in 0..10_000 {
            let now = start + Duration::from_micros(n.into());
            table.learn(station(1000 + n), ip(2), now);
        }
        assert_eq!(table.refused.load(Ordering::Relaxed), 10_000);
        let taken = table.writes.load(Ordering::Relaxed) - writes;
        assert!(taken <= 1, "{taken} write sections for 10000 refusals");
        // Known stations still move and refresh in a full table.
        table.learn(station(3), ip(3), start + Duration::from_secs(2));
        let mut out = Vec::new();
        table.lookup_all(&[station(3)], &mut out);
        assert_eq!(out, [Some(ip(3))]);
        // Once the others aged out, a new station takes the place of one.
        let later = start + age + Duration::from_secs(1);
        table.learn(station(60_000), ip(4), later);
        table.lookup_all(&[station(60_000)], &mut out);
        assert_eq!(out, [Some(ip(4))]);
        assert_eq!(table.refused.load(Ordering::Relaxed), 10_000);
    }
}
