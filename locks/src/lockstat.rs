//! Lock statistics in the manner of lockstat(1), for the lock-based
//! strategies (`mutex`, `rwlock`, `rmlock`): acquisitions, contended
//! acquisitions (the lock was not free at the first try) and time spent
//! waiting. Off unless [`enable`]d, when an acquisition costs one relaxed
//! load more. Counts are kept per thread, so that counting adds no shared
//! cache line; each thread collects its own with [`take`].

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// One thread's lock statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Lock acquisitions (read or write).
    pub acquisitions: u64,
    /// Acquisitions that found the lock taken and had to wait.
    pub contended: u64,
    /// Nanoseconds spent waiting in contended acquisitions.
    pub wait_ns: u64,
}

impl std::ops::AddAssign for LockStats {
    fn add_assign(&mut self, other: LockStats) {
        self.acquisitions += other.acquisitions;
        self.contended += other.contended;
        self.wait_ns += other.wait_ns;
    }
}

thread_local! {
    static STATS: Cell<LockStats> = const { Cell::new(LockStats { acquisitions: 0, contended: 0, wait_ns: 0 }) };
}

/// Turns counting on or off, for every thread.
pub fn enable(on: bool) {
    // Relaxed: a switch read on its own; a thread that sees it late counts
    // a few acquisitions more or less.
    ENABLED.store(on, Ordering::Relaxed);
}

/// The calling thread's statistics since its last `take`, which it resets.
pub fn take() -> LockStats {
    STATS.with(|stats| stats.replace(LockStats::default()))
}

/// Takes a lock through `try_lock` first, to see whether it was free, and
/// `lock` when it was not, timing the wait.
#[inline]
pub(crate) fn acquire<G>(try_lock: impl FnOnce() -> Option<G>, lock: impl FnOnce() -> G) -> G {
    if cfg!(mpbridge_loom) || !ENABLED.load(Ordering::Relaxed) {
        return lock();
    }
    if let Some(guard) = try_lock() {
        record(0, false);
        return guard;
    }
    let start = Instant::now();
    let guard = lock();
    record(start.elapsed().as_nanos() as u64, true);
    guard
}

fn record(wait_ns: u64, contended: bool) {
    STATS.with(|stats| {
        let mut s = stats.get();
        s.acquisitions += 1;
        s.contended += u64::from(contended);
        s.wait_ns += wait_ns;
        stats.set(s);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LockedMap, ReadSection, Strategy, StrategyKind, Update, WriteSection};

    fn count<S: Strategy>() -> LockStats {
        let map = <S::Map<u32, u32>>::with_capacity(8);
        take();
        for key in 0..10 {
            map.read(|r| r.get_with(&key, |v| *v));
        }
        map.write(|w| w.update(1, |_| (Update::Put(1), ())));
        take()
    }

    #[test]
    fn counts_acquisitions_of_the_lock_based_strategies_only_when_enabled() {
        // Other tests may run meanwhile; counts are per thread, so theirs
        // do not show here.
        enable(true);
        for kind in StrategyKind::ALL {
            let stats = crate::with_strategy!(kind, S => count::<S>());
            let expected = if kind.is_lock_based() { 11 } else { 0 };
            assert_eq!(stats.acquisitions, expected, "{kind}");
            assert_eq!(stats.contended, 0, "{kind}: nobody else holds this map");
        }
        enable(false);
        assert_eq!(count::<crate::Mutex>(), LockStats::default());
    }
}
