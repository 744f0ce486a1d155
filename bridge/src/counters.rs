//! Per-port counters. Each worker keeps its own set, adds to it once per
//! batch, and readers sum the sets: no cache line is shared between workers
//! on the forwarding path.

use std::ops::AddAssign;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::forward::DropReason;

/// One port's totals at one moment: what workers add up, and what the
/// daemon reports (with the `serde` feature, the drops by reason name).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PortStats {
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Received frames not forwarded, by [`DropReason::index`].
    #[cfg_attr(feature = "serde", serde(with = "drops_by_name"))]
    pub drops: [u64; DropReason::ALL.len()],
    /// Frames received too large for a buffer, dropped.
    pub rx_oversize: u64,
    /// Receive faults (one per event: a link that went down counts once,
    /// however long it stays down) and malformed frames the port handed over.
    pub rx_errors: u64,
    /// Frames to send that the port's queue had no room for, or that a
    /// send fault left unsent.
    pub tx_dropped: u64,
    /// Frames the port refused one by one (larger than its MTU, say), and
    /// send faults (one per event).
    pub tx_errors: u64,
    /// Stations that moved onto this port from another one.
    pub moves: u64,
    /// New stations heard on this port that a full fdb did not learn.
    #[cfg_attr(feature = "serde", serde(default))]
    pub refused: u64,
}

/// [`PortStats::drops`] as a map from [`DropReason::name`] to its count,
/// sorted by name; reasons a reader does not know are skipped.
#[cfg(feature = "serde")]
mod drops_by_name {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serializer};

    use crate::forward::DropReason;

    const N: usize = DropReason::ALL.len();

    pub fn serialize<S: Serializer>(drops: &[u64; N], serializer: S) -> Result<S::Ok, S::Error> {
        let stats = super::PortStats {
            drops: *drops,
            ..Default::default()
        };
        serializer.collect_map(stats.drops_by_name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[u64; N], D::Error> {
        let named = BTreeMap::<String, u64>::deserialize(deserializer)?;
        let mut drops = [0; N];
        for reason in DropReason::ALL {
            if let Some(&count) = named.get(reason.name()) {
                drops[reason.index()] = count;
            }
        }
        Ok(drops)
    }
}

impl PortStats {
    /// Received frames dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// Each reason's name and count, sorted by name (as reports list
    /// them).
    pub fn drops_by_name(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        let mut reasons = DropReason::ALL;
        reasons.sort_unstable_by_key(|reason| reason.name());
        reasons
            .into_iter()
            .map(|reason| (reason.name(), self.dropped(reason)))
    }

    /// Received frames dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }
}

impl AddAssign for PortStats {
    fn add_assign(&mut self, other: PortStats) {
        self.rx_frames += other.rx_frames;
        self.rx_bytes += other.rx_bytes;
        self.tx_frames += other.tx_frames;
        self.tx_bytes += other.tx_bytes;
        for (mine, theirs) in self.drops.iter_mut().zip(other.drops) {
            *mine += theirs;
        }
        self.rx_oversize += other.rx_oversize;
        self.rx_errors += other.rx_errors;
        self.tx_dropped += other.tx_dropped;
        self.tx_errors += other.tx_errors;
        self.moves += other.moves;
        self.refused += other.refused;
    }
}

/// One port's counters as one worker keeps them.
#[derive(Debug, Default)]
pub struct PortCounters {
    rx_frames: AtomicU64,
    rx_bytes: AtomicU64,
    tx_frames: AtomicU64,
    tx_bytes: AtomicU64,
    drops: [AtomicU64; DropReason::ALL.len()],
    rx_oversize: AtomicU64,
    rx_errors: AtomicU64,
    tx_dropped: AtomicU64,
    tx_errors: AtomicU64,
    moves: AtomicU64,
    refused: AtomicU64,
    state: AtomicU8,
}

/// Whether a port passes frames, as one worker sees its queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum PortState {
    /// Passing frames.
    #[default]
    Forwarding,
    /// Faulted (link down, an error), retried until it passes frames again.
    Faulted,
    /// The device is gone; the port is out of the bridge.
    Gone,
}

impl PortState {
    /// The state's name, for reports.
    pub const fn name(self) -> &'static str {
        match self {
            PortState::Forwarding => "forwarding",
            PortState::Faulted => "faulted",
            PortState::Gone => "gone",
        }
    }
}

// Relaxed throughout: counters are totals read for display; they order no
// other memory, and a reader may see one batch's additions partly applied.
impl PortCounters {
    /// Adds one batch's worth.
    pub fn add(&self, stats: &PortStats) {
        let add = |counter: &AtomicU64, value: u64| {
            if value != 0 {
                counter.fetch_add(value, Ordering::Relaxed);
            }
        };
        add(&self.rx_frames, stats.rx_frames);
        add(&self.rx_bytes, stats.rx_bytes);
        add(&self.tx_frames, stats.tx_frames);
        add(&self.tx_bytes, stats.tx_bytes);
        for (counter, value) in self.drops.iter().zip(stats.drops) {
            add(counter, value);
        }
        add(&self.rx_oversize, stats.rx_oversize);
        add(&self.rx_errors, stats.rx_errors);
        add(&self.tx_dropped, stats.tx_dropped);
        add(&self.tx_errors, stats.tx_errors);
        add(&self.moves, stats.moves);
        add(&self.refused, stats.refused);
    }

    /// Zeroes every counter and marks the port forwarding: for a port id
    /// taken again by a new port.
    pub fn reset(&self) {
        let zero = |counter: &AtomicU64| counter.store(0, Ordering::Relaxed);
        for counter in [
            &self.rx_frames,
            &self.rx_bytes,
            &self.tx_frames,
            &self.tx_bytes,
            &self.rx_oversize,
            &self.rx_errors,
            &self.tx_dropped,
            &self.tx_errors,
            &self.moves,
            &self.refused,
        ] {
            zero(counter);
        }
        self.drops.iter().for_each(zero);
        self.set_state(PortState::Forwarding);
    }

    /// Publishes the port's state as this worker sees it.
    pub fn set_state(&self, state: PortState) {
        // Relaxed: a status for display, ordering nothing else.
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// The port's state as this worker last published it.
    pub fn state(&self) -> PortState {
        match self.state.load(Ordering::Relaxed) {
            0 => PortState::Forwarding,
            1 => PortState::Faulted,
            _ => PortState::Gone,
        }
    }

    /// The totals now.
    pub fn snapshot(&self) -> PortStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        PortStats {
            rx_frames: get(&self.rx_frames),
            rx_bytes: get(&self.rx_bytes),
            tx_frames: get(&self.tx_frames),
            tx_bytes: get(&self.tx_bytes),
            drops: std::array::from_fn(|i| get(&self.drops[i])),
            rx_oversize: get(&self.rx_oversize),
            rx_errors: get(&self.rx_errors),
            tx_dropped: get(&self.tx_dropped),
            tx_errors: get(&self.tx_errors),
            moves: get(&self.moves),
            refused: get(&self.refused),
        }
    }
}

/// Sums per-worker counter sets into one [`PortStats`] per port.
pub fn sum<'a>(sets: impl IntoIterator<Item = &'a [PortCounters]>) -> Vec<PortStats> {
    let mut totals: Vec<PortStats> = Vec::new();
    for set in sets {
        if totals.len() < set.len() {
            totals.resize(set.len(), PortStats::default());
        }
        for (total, counters) in totals.iter_mut().zip(set) {
            *total += counters.snapshot();
        }
    }
    totals
}

/// Each port's worst state over the workers' sets.
pub fn states<'a>(sets: impl IntoIterator<Item = &'a [PortCounters]>) -> Vec<PortState> {
    let mut states: Vec<PortState> = Vec::new();
    for set in sets {
        if states.len() < set.len() {
            states.resize(set.len(), PortState::Forwarding);
        }
        for (state, counters) in states.iter_mut().zip(set) {
            *state = (*state).max(counters.state());
        }
    }
    states
}

/// One worker's own totals: its batches, its time at work, and the lock
/// statistics of its MAC table sections when they are being counted.
#[derive(Debug, Default)]
pub struct WorkerCounters {
    batches: AtomicU64,
    busy_ns: AtomicU64,
    lock_acquisitions: AtomicU64,
    lock_contended: AtomicU64,
    lock_wait_ns: AtomicU64,
    /// Rounds of the worker's loop, bumped once per round and once after
    /// each sleep: the owner watches it move (see [`beat`](Self::beat)).
    heartbeat: AtomicU64,
}

/// A copy of [`WorkerCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Batches received and forwarded.
    pub batches: u64,
    /// Nanoseconds spent receiving and forwarding frames (rounds that found
    /// some), as opposed to waiting for them.
    pub busy_ns: u64,
    /// MAC table lock acquisitions (lock-based strategies, when counted).
    pub lock_acquisitions: u64,
    /// Of those, the ones that found the lock taken.
    pub lock_contended: u64,
    /// Nanoseconds spent waiting for the lock.
    pub lock_wait_ns: u64,
}

// Relaxed, as for the port counters.
impl WorkerCounters {
    /// Adds `batches` batches.
    pub fn add_batches(&self, batches: u64) {
        if batches > 0 {
            self.batches.fetch_add(batches, Ordering::Relaxed);
        }
    }

    /// Adds time spent forwarding.
    pub fn add_busy(&self, ns: u64) {
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Adds lock statistics.
    pub fn add_locks(&self, acquisitions: u64, contended: u64, wait_ns: u64) {
        if acquisitions > 0 {
            self.lock_acquisitions
                .fetch_add(acquisitions, Ordering::Relaxed);
            self.lock_contended.fetch_add(contended, Ordering::Relaxed);
            self.lock_wait_ns.fetch_add(wait_ns, Ordering::Relaxed);
        }
    }

    /// Zeroes the lock statistics: the table's strategy changed.
    pub fn reset_locks(&self) {
        self.lock_acquisitions.store(0, Ordering::Relaxed);
        self.lock_contended.store(0, Ordering::Relaxed);
        self.lock_wait_ns.store(0, Ordering::Relaxed);
    }

    /// Says the worker is alive: it made a round of its loop, or woke from
    /// its sleep. Only the worker that owns these counters calls it.
    ///
    /// Relaxed, and a load and a store rather than `fetch_add`: the
    /// heartbeat publishes no other memory (the watcher reads nothing
    /// through it, only compares it with the value it saw a second ago),
    /// coherence of the one location means the watcher never sees it go
    /// back and sees each store soon after it is made, and with one writer
    /// no increment can be lost, so the worker pays two plain moves and no
    /// locked instruction per round.
    #[inline]
    pub fn beat(&self) {
        let beats = self.heartbeat.load(Ordering::Relaxed);
        self.heartbeat
            .store(beats.wrapping_add(1), Ordering::Relaxed);
    }

    /// The heartbeat now: a count that moves while the worker runs its
    /// loop (Relaxed: see [`beat`](Self::beat)).
    pub fn heartbeat(&self) -> u64 {
        self.heartbeat.load(Ordering::Relaxed)
    }

    /// The totals now.
    pub fn snapshot(&self) -> WorkerStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        WorkerStats {
            batches: get(&self.batches),
            busy_ns: get(&self.busy_ns),
            lock_acquisitions: get(&self.lock_acquisitions),
            lock_contended: get(&self.lock_contended),
            lock_wait_ns: get(&self.lock_wait_ns),
        }
    }
}
