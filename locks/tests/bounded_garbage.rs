//! Memory stays bounded under station moves, for every strategy.
//!
//! A station that keeps moving between two ports replaces its entry on every
//! frame (`Update::Put` over an existing key). Each replaced value must be
//! freed once no reader can see it any more, soon enough that the values
//! alive at any time stay within a small multiple of the table's size,
//! however many moves there have been. The values here count themselves;
//! two writers take turns, as two workers learning from two ports do, while
//! a reader holds read sections.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use locks::{LockedMap, ReadSection, Strategy, Update, WriteSection};

/// Stations in the table.
const KEYS: u32 = 4096;
/// Writer threads, each moving its own share of the stations.
const WRITERS: u32 = 2;
/// Moves per write section, as the bridge's worker learns one received
/// batch in one section.
const BATCH: u32 = 64;
/// Times every station moves: `KEYS * ROUNDS` (262,144) replacements.
const ROUNDS: u32 = 64;
/// Most values alive at once: the table's own plus room for garbage not yet
/// reclaimed (a reader's snapshot, a few epochs' worth of deferred frees).
const BOUND: usize = 4 * KEYS as usize;

/// A value that counts how many of its kind are alive.
struct Counted {
    live: Arc<AtomicUsize>,
    key: u32,
    port: u32,
}

impl Counted {
    fn new(live: &Arc<AtomicUsize>, key: u32, port: u32) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        Counted {
            live: Arc::clone(live),
            key,
            port,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sets a flag when dropped in a panic: a thread that fails stops the
/// others.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

type Map<S> = <S as Strategy>::Map<u32, Counted>;

fn live_values_stay_bounded_under_batched_moves<S: Strategy>() {
    let live = Arc::new(AtomicUsize::new(0));
    let map = Map::<S>::with_capacity(KEYS as usize);
    map.write(|w| {
        for key in 0..KEYS {
            w.update(key, |_| (Update::Put(Counted::new(&live, key, 0)), ()));
        }
    });
    assert_eq!(live.load(Ordering::Relaxed), KEYS as usize);

    // The reader holds read sections throughout, as the workers do. It says
    // since which write section it has been in its current one, and the
    // writers wait for it when it has been in one for more than LAG write
    // sections: a reader the scheduler stalls inside a section holds back
    // reclamation under every deferred-free scheme, for a time the test
    // cannot bound, and that is not what is tested here.
    const LAG: usize = 16;
    const IDLE: usize = usize::MAX;
    let written = AtomicUsize::new(0);
    let reading_since = AtomicUsize::new(IDLE);
    let stop = AtomicBool::new(false);
    let most = AtomicUsize::new(0);
    thread::scope(|scope| {
        scope.spawn(|| {
            let _stop_all = StopOnPanic(&stop);
            let mut key = 0;
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) {
                // At most one read section per write section, as a worker
                // reads once per batch: pinning is not what reclaims.
                let now = written.load(Ordering::Acquire);
                if reads > now {
                    thread::yield_now();
                    continue;
                }
                reads += 1;
                reading_since.store(now, Ordering::SeqCst);
                map.read(|r| {
                    for _ in 0..BATCH {
                        let (seen, port) = r
                            .get_with(&key, |v| (v.key, v.port))
                            .expect("a station vanished");
                        assert_eq!(seen, key);
                        assert!(port < 2);
                        key = (key + 1) % KEYS;
                    }
                });
                reading_since.store(IDLE, Ordering::Release);
            }
        });
        // Writers of their own halves of the stations, as two workers
        // learning from two ports: they take turns at the write side.
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (map, live, stop, written, reading_since, most) =
                    (&map, &live, &stop, &written, &reading_since, &most);
                scope.spawn(move || {
                    let _stop_all = StopOnPanic(stop);
                    let share = KEYS / WRITERS;
                    let mine = writer * share..(writer + 1) * share;
                    for round in 1..=ROUNDS {
                        // Every station moves to the other port, BATCH per
                        // section.
                        let port = round % 2;
                        for first in mine.clone().step_by(BATCH as usize) {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            map.write(|w| {
                                for key in first..first + BATCH {
                                    w.update(key, |old| {
                                        let old = old.expect("a station vanished");
                                        assert_ne!(old.port, port);
                                        (Update::Put(Counted::new(live, key, port)), ())
                                    });
                                }
                            });
                            let sections = written.fetch_add(1, Ordering::AcqRel) + 1;
                            let now = live.load(Ordering::Relaxed);
                            most.fetch_max(now, Ordering::Relaxed);
                            assert!(
                                now <= BOUND,
                                "{now} values alive after {} moves (bound {BOUND})",
                                sections * BATCH as usize
                            );
                            loop {
                                let since = reading_since.load(Ordering::SeqCst);
                                if since == IDLE
                                    || sections.saturating_sub(since) <= LAG
                                    || stop.load(Ordering::Relaxed)
                                {
                                    break;
                                }
                                thread::yield_now();
                            }
                        }
                    }
                })
            })
            .collect();
        for writer in writers {
            if let Err(panic) = writer.join() {
                std::panic::resume_unwind(panic);
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let most = most.into_inner();
    let end = live.load(Ordering::Relaxed);
    eprintln!("{}: at most {most} values alive, {end} at the end", S::KIND);
    assert!(
        end <= BOUND,
        "{end} values alive at the end (bound {BOUND})"
    );
    assert_eq!(map.len(), KEYS as usize);
}

macro_rules! for_each_strategy {
    ($($test:ident),* $(,)?) => {
        for_each_strategy!(@one mutex, locks::Mutex, $($test),*);
        for_each_strategy!(@one rwlock, locks::Rwlock, $($test),*);
        for_each_strategy!(@one rmlock, locks::Rmlock, $($test),*);
        for_each_strategy!(@one sharded, locks::Sharded, $($test),*);
        for_each_strategy!(@one rcu, locks::Rcu, $($test),*);
        for_each_strategy!(@one epoch, locks::Epoch, $($test),*);
    };
    (@one $module:ident, $strategy:ty, $($test:ident),*) => {
        mod $module {
            $( #[test] fn $test() { super::$test::<$strategy>(); } )*
        }
    };
}

for_each_strategy!(live_values_stay_bounded_under_batched_moves);
