//! Model checks of the hand-written concurrent code: the `rmlock` lock and
//! the `epoch` map. Run with
//!
//! ```text
//! RUSTFLAGS="--cfg mpbridge_loom --cfg crossbeam_loom" \
//!     cargo test -p locks --features loom --test loom --release
//! ```
#![cfg(mpbridge_loom)]

use loom::sync::Arc;
use loom::thread;

use locks::rmlock::RmLock;
use locks::{LockedMap, ReadSection, Update, WriteSection};

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
        let lock = Arc::new(RmLock::with_slots((0u32, 0u32), 2));
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

type Map = locks::epoch::EpochMap<u8, u64>;

fn get(map: &Map, key: u8) -> Option<u64> {
    map.read(|r| r.get_with(&key, |v| *v))
}

/// A reader walking a bucket while a writer replaces and removes entries
/// sees each key's old value or new value, never anything else.
#[test]
fn epoch_readers_see_old_or_new_entries() {
    model(|| {
        // Capacity 1 gives the minimum bucket count; keys 0..3 still share
        // lists often enough to exercise unlinking in the middle of a list.
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
        let other = {
            let map = Arc::clone(&map);
            thread::spawn(move || map.write(|w| w.update(1, |_| (Update::Put(1), ()))))
        };
        map.write(|w| w.update(17, |_| (Update::Put(17), ())));
        other.join().unwrap();
        assert_eq!(get(&map, 1), Some(1));
        assert_eq!(get(&map, 17), Some(17));
        assert_eq!(map.len(), 2);
    });
}
