//! Memory stays bounded under station moves, for every strategy.
//!
//! A station that keeps moving between two ports replaces its entry on every
//! frame (`Update::Put` over an existing key). Each replaced value must be
//! freed once no reader can see it any more, soon enough that the values
//! alive at any time stay within a small multiple of the table's size,
//! however many moves there have been. The values here count themselves.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use locks::{LockedMap, ReadSection, Strategy, Update, WriteSection};

/// Stations in the table.
const KEYS: u32 = 4096;
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
    // writer waits for it when it has been in one for more than LAG write
    // sections: a reader the scheduler stalls inside a section holds back
    // reclamation under every deferred-free scheme, for a time the test
    // cannot bound, and that is not what is tested here.
    const LAG: usize = 16;
    const IDLE: usize = usize::MAX;
    let written = AtomicUsize::new(0);
    let reading_since = AtomicUsize::new(IDLE);
    let done = AtomicBool::new(false);
    let mut most = 0;
    thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut key = 0;
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) {
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
        let mut sections = 0;
        'rounds: for round in 1..=ROUNDS {
            // Every station moves to the other port, BATCH per section.
            let port = round % 2;
            for first in (0..KEYS).step_by(BATCH as usize) {
                map.write(|w| {
                    for key in first..first + BATCH {
                        w.update(key, |old| {
                            let old = old.expect("a station vanished");
                            assert_ne!(old.port, port);
                            (Update::Put(Counted::new(&live, key, port)), ())
                        });
                    }
                });
                sections += 1;
                written.store(sections, Ordering::Release);
                let now = live.load(Ordering::Relaxed);
                most = most.max(now);
                if now > BOUND {
                    done.store(true, Ordering::Relaxed);
                    panic!(
                        "{now} values alive after {} moves (bound {BOUND})",
                        sections * BATCH as usize
                    );
                }
                loop {
                    let since = reading_since.load(Ordering::SeqCst);
                    if since == IDLE || sections - since <= LAG {
                        break;
                    }
                    if reader.is_finished() {
                        break 'rounds;
                    }
                    thread::yield_now();
                }
            }
        }
        done.store(true, Ordering::Relaxed);
    });
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
