//! The `LockedMap` contract, written once and run for every strategy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;

use locks::{LockedMap, ReadSection, Strategy, Update, WriteSection};

type Map<S> = <S as Strategy>::Map<u32, u64>;

fn get<S: Strategy>(map: &Map<S>, key: u32) -> Option<u64> {
    map.read(|r| r.get_with(&key, |v| *v))
}

fn put<S: Strategy>(map: &Map<S>, key: u32, value: u64) {
    map.write(|w| w.update(key, |_| (Update::Put(value), ())));
}

fn updates_insert_replace_keep_and_remove<S: Strategy>() {
    let map = Map::<S>::with_capacity(16);
    assert!(map.is_empty());
    let seen = map.write(|w| w.update(1, |old| (Update::Put(10), old.copied())));
    assert_eq!(seen, None);
    let seen = map.write(|w| w.update(1, |old| (Update::Put(11), old.copied())));
    assert_eq!(seen, Some(10));
    let seen = map.write(|w| w.update(1, |old| (Update::Keep, old.copied())));
    assert_eq!(seen, Some(11));
    map.write(|w| w.update(2, |_| (Update::<u64>::Keep, ())));
    assert_eq!(
        (get::<S>(&map, 1), get::<S>(&map, 2), map.len()),
        (Some(11), None, 1)
    );
    map.write(|w| w.update(2, |_| (Update::<u64>::Remove, ())));
    map.write(|w| w.update(1, |_| (Update::<u64>::Remove, ())));
    assert_eq!((get::<S>(&map, 1), map.len()), (None, 0));
}

fn one_write_section_applies_many_updates<S: Strategy>() {
    let map = Map::<S>::with_capacity(100);
    map.write(|w| {
        for key in 0..1000 {
            w.update(key, |_| (Update::Put(u64::from(key) * 3), ()));
        }
        // Later updates in the same section see the earlier ones.
        w.update(7, |old| {
            assert_eq!(old, Some(&21));
            (Update::Remove, ())
        });
    });
    assert_eq!(map.len(), 999);
    let mut sum = 0;
    let mut count = 0;
    map.read(|r| {
        r.for_each(|k, v| {
            assert_eq!(*v, u64::from(*k) * 3);
            sum += *v;
            count += 1;
        })
    });
    assert_eq!(count, 999);
    assert_eq!(sum, (0..1000u64).map(|k| k * 3).sum::<u64>() - 21);
}

fn retain_asks_once_per_entry<S: Strategy>() {
    let map = Map::<S>::with_capacity(64);
    map.write(|w| {
        for key in 0..200 {
            w.update(key, |_| (Update::Put(u64::from(key)), ()));
        }
    });
    let mut asked = 0;
    let removed = map.write(|w| {
        // Touch a bucket first, so `rcu` retains over a copied bucket too.
        w.update(3, |_| (Update::Put(3), ()));
        w.retain(|_, v| {
            asked += 1;
            v % 2 == 0
        })
    });
    assert_eq!((asked, removed, map.len()), (200, 100, 100));
    assert_eq!(get::<S>(&map, 3), None);
    assert_eq!(get::<S>(&map, 4), Some(4));
}

/// Readers racing a writer that replaces values see each key's old value
/// or new value, never a torn or missing one. Bounded by count.
fn readers_see_whole_values_during_writes<S: Strategy>() {
    const KEYS: u32 = 64;
    const ROUNDS: u64 = 300;
    let map = Map::<S>::with_capacity(KEYS as usize);
    for key in 0..KEYS {
        put::<S>(&map, key, 0);
    }
    let start = Barrier::new(3);
    let done = AtomicBool::new(false);
    thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                start.wait();
                let mut last = vec![0u64; KEYS as usize];
                for _ in 0..100_000 {
                    if done.load(Ordering::Relaxed) {
                        break;
                    }
                    map.read(|r| {
                        for key in 0..KEYS {
                            let value = r.get_with(&key, |v| *v).expect("key vanished");
                            // Values only grow, and each is a whole round number.
                            assert!(value >= last[key as usize], "a value went back");
                            assert!(value <= ROUNDS);
                            last[key as usize] = last[key as usize].max(value);
                        }
                    });
                }
            });
        }
        start.wait();
        for round in 1..=ROUNDS {
            map.write(|w| {
                for key in 0..KEYS {
                    w.update(key, |_| (Update::Put(round), ()));
                }
            });
        }
        done.store(true, Ordering::Relaxed);
    });
    for key in 0..KEYS {
        assert_eq!(get::<S>(&map, key), Some(ROUNDS));
    }
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

for_each_strategy!(
    updates_insert_replace_keep_and_remove,
    one_write_section_applies_many_updates,
    retain_asks_once_per_entry,
    readers_see_whole_values_during_writes,
);
