//! Model checks of the hand-written concurrent code: the `rmlock` lock and
//! the `epoch` map. Run with
//!
//! ```text
//! RUSTFLAGS="--cfg mpbridge_loom --cfg crossbeam_loom" \
//!     cargo test -p locks --features loom --test loom --release
//! ```
#![cfg(mpbridge_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use locks::epoch::EpochMap;
use locks::rmlock::ReadMostlyLock;
use locks::{LockedMap, ReadSection, Update, Value, WriteSection};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// A writer updates two fields under the write lock; readers in two slots
/// never see them differ, and loom sees no unsynchronised access.
#[test]
fn rmlock_writer_excludes_readers_of_every_slot() {
    model(|| {
        let lock = Arc::new(ReadMostlyLock::with_slots((0u32, 0u32), 2));
        let reader = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                let guard = lock.read();
                assert_eq!(guard.0, guard.1);
            })
        };
        let writer = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                let mut guard = lock.write();
                guard.0 += 1;
                guard.1 += 1;
            })
        };
        {
            let guard = lock.read();
            assert_eq!(guard.0, guard.1);
        }
        reader.join().unwrap();
        writer.join().unwrap();
        let guard = lock.read();
        assert_eq!(*guard, (1, 1));
    });
}

type Map = EpochMap<u8, u64>;

fn get(map: &Map, key: u8) -> Option<u64> {
    map.read(|r| r.get_with(&key, |v| *v))
}

/// The first `n` keys that share one bucket list of `map`, chosen by the
/// map's own bucket function; the hasher is fixed under loom, so they are
/// the same keys in every run of a model.
fn keys_sharing_a_list<V: Value>(map: &EpochMap<u8, V>, n: usize) -> Vec<u8> {
    let list = map.bucket_index(&0);
    let keys: Vec<u8> = (0..=u8::MAX)
        .filter(|key| map.bucket_index(key) == list)
        .take(n)
        .collect();
    assert_eq!(keys.len(), n, "fewer than {n} keys share list {list}");
    assert!(keys.iter().all(|key| map.bucket_index(key) == list));
    keys
}

/// A reader walking a bucket while a writer replaces and removes entries
/// sees each key's old value or new value, never anything else.
#[test]
fn epoch_readers_see_old_or_new_entries() {
    model(|| {
        // Keys 0..3 lie in three different lists (under loom's hasher):
        // this model checks replacing and removing at a list's head; the
        // model below checks unlinking in the middle of one list.
        let map = Arc::new(Map::with_capacity(1));
        map.write(|w| {
            for key in 0..3 {
                w.update(key, |_| (Update::Put(u64::from(key) * 10), ()));
            }
        });
        let writer = {
            let map = Arc::clone(&map);
            thread::spawn(move || {
                map.write(|w| {
                    w.update(1, |_| (Update::Put(11), ()));
                    w.update(0, |_| (Update::<u64>::Remove, ()));
                });
            })
        };
        let seen1 = get(&map, 1);
        let seen0 = get(&map, 0);
        let seen2 = get(&map, 2);
        assert!(matches!(seen1, Some(10) | Some(11)), "{seen1:?}");
        assert!(matches!(seen0, Some(0) | None), "{seen0:?}");
        assert_eq!(seen2, Some(20));
        writer.join().unwrap();
        assert_eq!(get(&map, 1), Some(11));
        assert_eq!(get(&map, 0), None);
        assert_eq!(map.len(), 2);
    });
}

/// Two writers inserting different keys into one list lose neither.
#[test]
fn epoch_writers_do_not_lose_inserts() {
    model(|| {
        let map = Arc::new(Map::with_capacity(1));
        let [one, two] = keys_sharing_a_list(&map, 2)[..] else {
            unreachable!()
        };
        let other = {
            let map = Arc::clone(&map);
            thread::spawn(move || map.write(|w| w.update(one, |_| (Update::Put(1), ()))))
        };
        map.write(|w| w.update(two, |_| (Update::Put(2), ())));
        other.join().unwrap();
        assert_eq!(get(&map, one), Some(1));
        assert_eq!(get(&map, two), Some(2));
        assert_eq!(map.len(), 2);
    });
}

/// A value that records its own destruction, one bit per value, so that a
/// reader can tell whether what it stands on was freed.
struct Tracked {
    bit: usize,
    value: u64,
    freed: std::sync::Arc<AtomicUsize>,
}

impl Tracked {
    fn new(freed: &std::sync::Arc<AtomicUsize>, bit: usize, value: u64) -> Self {
        Tracked {
            bit,
            value,
            freed: std::sync::Arc::clone(freed),
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.freed.fetch_or(1 << self.bit, Ordering::SeqCst);
    }
}

/// One list P -> A -> B -> C. A reader walks it while a writer removes A,
/// then A's successor B (both unlinked from the middle, after P), then
/// replaces C, collecting after each section. A reader that reached A
/// still goes on through A and B to the old C, and nothing it reaches is
/// freed before its section ends; a reader that came later skips them.
#[test]
fn epoch_reader_on_a_node_outlives_its_removal_and_its_successors() {
    model(|| {
        let map = Arc::new(EpochMap::<u8, Tracked>::with_capacity(1));
        let [p, a, b, c] = keys_sharing_a_list(&map, 4)[..] else {
            unreachable!()
        };
        let freed = std::sync::Arc::new(AtomicUsize::new(0));
        // Each insert goes to the head of the list: insert C, B, A, P.
        map.write(|w| {
            for (bit, key) in [(3, c), (2, b), (1, a), (0, p)] {
                let value = Tracked::new(&freed, bit, u64::from(key));
                w.update(key, |_| (Update::Put(value), ()));
            }
        });
        const NEW_C: usize = 4;
        let writer = {
            let map = Arc::clone(&map);
            let freed = std::sync::Arc::clone(&freed);
            thread::spawn(move || {
                map.write(|w| w.update(a, |_| (Update::Remove, ())));
                map.write(|w| w.update(b, |_| (Update::Remove, ())));
                let value = Tracked::new(&freed, NEW_C, 100);
                map.write(|w| w.update(c, |_| (Update::Put(value), ())));
            })
        };
        let seen = map.read(|r| {
            let mut seen = Vec::new();
            let mut stood_on = 0;
            r.for_each(|key, value| {
                assert_eq!(freed.load(Ordering::SeqCst) & 1 << value.bit, 0);
                assert_eq!(
                    value.value,
                    if value.bit == NEW_C {
                        100
                    } else {
                        u64::from(*key)
                    }
                );
                stood_on |= 1 << value.bit;
                seen.push(*key);
            });
            // Still in the section: nothing reached in it is freed yet.
            assert_eq!(freed.load(Ordering::SeqCst) & stood_on, 0);
            (seen, stood_on & 1 << NEW_C != 0)
        });
        // A's next still leads to B and B's to the old C: a reader past P
        // sees a suffix of what was there when it got there.
        let expected = match seen {
            (_, true) => vec![p, c],
            (ref keys, false) if keys.len() == 4 => vec![p, a, b, c],
            (ref keys, false) if keys.len() == 3 => vec![p, b, c],
            _ => vec![p, c],
        };
        assert_eq!(seen.0, expected, "seen {seen:?}");
        writer.join().unwrap();
        map.read(|r| {
            assert!(r.get_with(&a, |_| ()).is_none());
            assert!(r.get_with(&b, |_| ()).is_none());
            assert_eq!(r.get_with(&p, |v| v.value), Some(u64::from(p)));
            assert_eq!(r.get_with(&c, |v| v.value), Some(100));
        });
        assert_eq!(freed.load(Ordering::SeqCst) & (1 | 1 << NEW_C), 0);
        assert_eq!(map.len(), 2);
    });
}
