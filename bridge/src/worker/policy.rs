//! What a port lets through besides the MAC table's say: spanning tree's
//! port state, BPDU guard and filter, the storm limit; the move limit on
//! stations; and the events a worker reports to the control plane (BPDUs
//! for spanning tree, a guard tripped).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fdb::FdbKey;
use crate::port_id::PortId;
use crate::vlan::PortVlans;
use crate::wire::MacAddr;

/// What spanning tree's port state lets through a port (802.1D-2004 7.4):
/// whether its frames' sources are learned, and whether frames come in
/// from it and go out of it. Open without spanning tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Sources are learned (learning and forwarding states).
    pub learning: bool,
    /// Frames are forwarded in and out (the forwarding state).
    pub forwarding: bool,
}

impl Gate {
    /// Forwarding.
    pub const OPEN: Gate = Gate {
        learning: true,
        forwarding: true,
    };
    /// Learning, not forwarding.
    pub const LEARNING: Gate = Gate {
        learning: true,
        forwarding: false,
    };
    /// Discarding.
    pub const CLOSED: Gate = Gate {
        learning: false,
        forwarding: false,
    };
}

impl Default for Gate {
    fn default() -> Self {
        Gate::OPEN
    }
}

/// The Linux bridge's port flags (`bridge link set dev X NAME on|off`),
/// with its semantics (net/bridge/br_forward.c, br_input.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortFlags {
    /// `isolated`: frames from an isolated port never leave by another.
    pub isolated: bool,
    /// `hairpin`: a frame may leave by the port it came in on.
    pub hairpin: bool,
    /// `learning`: sources of frames from the port are learned.
    pub learning: bool,
    /// `flood`: unknown unicast is flooded to the port.
    pub flood: bool,
    /// `mcast_flood`: multicast is flooded to the port.
    pub mcast_flood: bool,
    /// `bcast_flood`: broadcast is flooded to the port.
    pub bcast_flood: bool,
    /// `locked`: only stations with a static entry on the port may send
    /// from it; nothing is learned there.
    pub locked: bool,
}

impl Default for PortFlags {
    /// As a new port of the Linux bridge: learning and every flood on.
    fn default() -> Self {
        PortFlags {
            isolated: false,
            hairpin: false,
            learning: true,
            flood: true,
            mcast_flood: true,
            bcast_flood: true,
            locked: false,
        }
    }
}

/// What a flooded frame is, for the flood flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FloodClass {
    /// Unknown unicast.
    Unicast,
    /// Multicast (the BPDUs flooded without spanning tree among it).
    Multicast,
    /// Broadcast.
    Broadcast,
}

impl FloodClass {
    /// The class of `frame` (an Ethernet frame of at least 6 bytes).
    pub(super) fn of(frame: &[u8]) -> FloodClass {
        match frame.get(..6) {
            Some([0xff, 0xff, 0xff, 0xff, 0xff, 0xff]) => FloodClass::Broadcast,
            Some(dst) if dst[0] & 1 == 1 => FloodClass::Multicast,
            _ => FloodClass::Unicast,
        }
    }
}

impl PortFlags {
    /// Whether a frame from a port with flags `self` may leave by one with
    /// `to` (`same`: the same port): br_forward.c's should_deliver.
    pub(super) fn delivers_to(&self, to: &PortFlags, same: bool) -> bool {
        (!same || to.hairpin) && !(self.isolated && to.isolated)
    }

    /// Whether a flood of `class` from `self` goes to `to` (br_flood).
    pub(super) fn floods_to(&self, to: &PortFlags, same: bool, class: FloodClass) -> bool {
        self.delivers_to(to, same)
            && match class {
                FloodClass::Unicast => to.flood,
                FloodClass::Multicast => to.mcast_flood,
                FloodClass::Broadcast => to.bcast_flood,
            }
    }
}

/// A port's flags, BPDU and storm options, as `--port` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortPolicy {
    /// Linux's port flags.
    pub flags: PortFlags,
    /// `guard=on`: a BPDU disables the port until it is enabled again.
    pub guard: bool,
    /// `bpdu_filter=on`: BPDUs are dropped in and out.
    pub bpdu_filter: bool,
    /// `storm=PPS`: broadcast, multicast and unknown unicast beyond this
    /// many frames a second (of this worker's share) are dropped.
    pub storm: Option<u32>,
}

/// Everything a worker is told of a port beside its queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortSetup {
    /// Its VLANs (with VLAN filtering).
    pub vlans: PortVlans,
    /// Its BPDU and storm options.
    pub policy: PortPolicy,
    /// What spanning tree lets through it now.
    pub gate: Gate,
    /// Disabled by its guard: nothing in or out.
    pub disabled: bool,
}

impl PortSetup {
    /// A port with `vlans` and nothing else set.
    pub fn with_vlans(vlans: PortVlans) -> PortSetup {
        PortSetup {
            vlans,
            ..PortSetup::default()
        }
    }
}

/// What a worker tells the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortEvent {
    /// A BPDU for spanning tree (the Ethernet frame, without the port's
    /// metadata).
    Bpdu {
        /// The port it came in on.
        port: PortId,
        /// The frame.
        frame: Vec<u8>,
    },
    /// A BPDU came in on a port with `guard=on`; the worker stopped
    /// forwarding on it.
    GuardTripped {
        /// The port.
        port: PortId,
    },
    /// An IGMP or MLD message for multicast snooping (the Ethernet frame).
    Mcast {
        /// The port it came in on.
        port: PortId,
        /// Its VLAN (0 without VLAN filtering and untagged).
        vlan: u16,
        /// The frame.
        frame: Vec<u8>,
    },
}

/// Where a worker's events go: called rarely (a BPDU a second per port
/// from a neighbour, bounded by [`BPDUS_PER_SECOND`]; IGMP and MLD
/// messages, bounded by `MCAST_EVENTS_PER_SECOND`), never per frame.
/// These bounds are per port and worker; the daemon's sink bounds the
/// events again for the whole bridge (its owner's queue).
pub type EventSink = Arc<dyn Fn(PortEvent) + Send + Sync>;

/// The most BPDUs per port and second a worker hands to spanning tree; a
/// neighbour sends a few (802.1D-2004's transmit hold count is 6), so more
/// are a flood, dropped (and counted) rather than queued.
pub const BPDUS_PER_SECOND: u32 = 64;

/// Whether `frame` (an Ethernet frame) goes to the Bridge Group Address.
#[inline(always)]
pub(super) fn is_bpdu(frame: &[u8]) -> bool {
    frame.len() >= 6 && frame[..6] == MacAddr::BRIDGE_GROUP.0
}

/// A token bucket of frames: `rate` a second, at most `burst` at once.
/// Counted in nanotokens so that refills need no division.
#[derive(Debug, Clone, Copy)]
pub(super) struct StormBucket {
    rate: u64,
    burst: u64,
    tokens: u64,
    last: Option<Instant>,
}

/// One frame, in nanotokens.
const TOKEN: u64 = 1_000_000_000;

impl StormBucket {
    /// A full bucket for `pps` frames a second, with a burst of a tenth of
    /// that, at least 64.
    pub(super) fn new(pps: u32) -> StormBucket {
        let burst = u64::from((pps / 10).max(64)) * TOKEN;
        StormBucket {
            rate: u64::from(pps),
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// Adds what `now` earned since the last refill.
    pub(super) fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            // At most a second counts: a full bucket is reached by then.
            let elapsed = now
                .saturating_duration_since(last)
                .min(Duration::from_secs(1));
            let earned = elapsed.as_nanos() as u64 * self.rate;
            self.tokens = (self.tokens + earned).min(self.burst);
        }
        self.last = Some(now);
    }

    /// Takes one frame's token; false when there is none.
    #[inline]
    pub(super) fn take(&mut self) -> bool {
        match self.tokens.checked_sub(TOKEN) {
            Some(left) => {
                self.tokens = left;
                true
            }
            None => false,
        }
    }
}

/// The move limit: moves a second per station beyond which its frames are
/// dropped for `hold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveLimit {
    /// Moves in one second that a station may make.
    pub moves: u32,
    /// How long a station over the limit is held.
    pub hold: Duration,
}

/// One station's recent moves.
#[derive(Debug, Clone, Copy)]
struct Moving {
    window: Instant,
    moves: u32,
    held_until: Option<Instant>,
}

/// The stations that moved lately, and those held (one worker's view).
#[derive(Debug, Default)]
pub(super) struct Movers {
    stations: HashMap<FdbKey, Moving>,
    held: usize,
    /// When [`Movers::expire`] last looked.
    expired: Option<Instant>,
}

/// How often held stations are looked at for release.
const EXPIRE_INTERVAL: Duration = Duration::from_millis(100);

/// Stations followed at once: the map is bounded, as the stations of a
/// loop are many.
const MAX_MOVERS: usize = 4096;

impl Movers {
    /// Whether any station is held (the fast path's one check).
    #[inline]
    pub(super) fn any_held(&self) -> bool {
        self.held > 0
    }

    /// Whether `key` is held at `now`.
    pub(super) fn is_held(&self, key: &FdbKey, now: Instant) -> bool {
        self.stations
            .get(key)
            .and_then(|m| m.held_until)
            .is_some_and(|until| now < until)
    }

    /// Counts a move of `key`; true when it just went over the limit.
    pub(super) fn moved(&mut self, key: FdbKey, limit: &MoveLimit, now: Instant) -> bool {
        if self.stations.len() >= MAX_MOVERS && !self.stations.contains_key(&key) {
            self.expired = None;
            self.expire(now);
            if self.stations.len() >= MAX_MOVERS {
                return false;
            }
        }
        let entry = self.stations.entry(key).or_insert(Moving {
            window: now,
            moves: 0,
            held_until: None,
        });
        if now >= entry.window + Duration::from_secs(1) {
            entry.window = now;
            entry.moves = 0;
        }
        entry.moves += 1;
        if entry.moves > limit.moves && entry.held_until.is_none() {
            entry.held_until = Some(now + limit.hold);
            self.held += 1;
            return true;
        }
        false
    }

    /// Releases stations whose hold is over and forgets those whose
    /// window is over too; returns those released. Looks at most every
    /// [`EXPIRE_INTERVAL`]: the map holds up to [`MAX_MOVERS`] stations
    /// while a loop lasts, and a batch should not walk them all.
    pub(super) fn expire(&mut self, now: Instant) -> Vec<FdbKey> {
        if self.expired.is_some_and(|at| now < at + EXPIRE_INTERVAL) {
            return Vec::new();
        }
        self.expired = Some(now);
        let mut released = Vec::new();
        self.stations.retain(|key, moving| {
            if let Some(until) = moving.held_until {
                if now < until {
                    return true;
                }
                // Released once: a station moving on counts afresh.
                moving.held_until = None;
                moving.window = now;
                moving.moves = 0;
                released.push(*key);
            }
            now < moving.window + Duration::from_secs(1)
        });
        self.held -= released.len();
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_passes_its_burst_then_its_rate() {
        let start = Instant::now();
        let mut bucket = StormBucket::new(1000);
        bucket.refill(start);
        // A burst of a tenth of the rate, but at least 64.
        assert_eq!((0..200).filter(|_| bucket.take()).count(), 100);
        bucket.refill(start + Duration::from_millis(50));
        assert_eq!((0..200).filter(|_| bucket.take()).count(), 50);
        // Never more than the burst, however long it rested.
        bucket.refill(start + Duration::from_secs(60));
        assert_eq!((0..200).filter(|_| bucket.take()).count(), 100);
        let mut small = StormBucket::new(10);
        assert_eq!((0..100).filter(|_| small.take()).count(), 64);
    }

    #[test]
    fn a_station_over_the_move_limit_is_held_then_released() {
        let limit = MoveLimit {
            moves: 3,
            hold: Duration::from_secs(5),
        };
        let key = FdbKey::new(0, MacAddr([2, 0, 0, 0, 0, 1]));
        let mut movers = Movers::default();
        let start = Instant::now();
        for n in 0..3 {
            assert!(!movers.moved(key, &limit, start + Duration::from_millis(n)));
        }
        assert!(!movers.any_held());
        assert!(movers.moved(key, &limit, start + Duration::from_millis(10)));
        assert!(movers.any_held());
        assert!(movers.is_held(&key, start + Duration::from_secs(4)));
        // Held once, however often it moves on.
        assert!(!movers.moved(key, &limit, start + Duration::from_millis(20)));
        assert!(movers.expire(start + Duration::from_secs(2)).is_empty());
        assert_eq!(movers.expire(start + Duration::from_secs(6)), vec![key]);
        assert!(!movers.any_held());
        assert!(!movers.is_held(&key, start + Duration::from_secs(6)));
        // Released once, however soon it is looked at again.
        assert!(movers
            .expire(start + Duration::from_millis(6200))
            .is_empty());
        // Moving on as fast, it is held again.
        let again = start + Duration::from_millis(6300);
        for n in 0..3 {
            assert!(!movers.moved(key, &limit, again + Duration::from_millis(n)));
        }
        assert!(movers.moved(key, &limit, again + Duration::from_millis(5)));
        assert!(movers.any_held());
        assert_eq!(movers.expire(again + Duration::from_secs(6)), vec![key]);
        assert!(!movers.any_held());
        // Moves spread over seconds never reach the limit.
        let later = start + Duration::from_secs(20);
        for n in 0..20 {
            assert!(!movers.moved(key, &limit, later + Duration::from_millis(400 * n)));
        }
    }

    #[test]
    fn only_frames_to_the_bridge_group_are_bpdus() {
        assert!(is_bpdu(&[0x01, 0x80, 0xc2, 0, 0, 0, 1, 2]));
        assert!(!is_bpdu(&[0x01, 0x80, 0xc2, 0, 0, 0x0e, 1, 2]));
        assert!(!is_bpdu(&[0x01, 0x80]));
    }
}
