//! `rwlock`: one parking_lot reader-writer lock around a plain hash map.
//! Readers run in parallel but all of them write the lock's one cache line.

use crate::lockstat::acquire;
use crate::plain::{new_map, Guarded, PlainMap};
use crate::{Key, LockedMap, Strategy, StrategyKind, Value};

/// The `rwlock` strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rwlock;

impl Strategy for Rwlock {
    const KIND: StrategyKind = StrategyKind::Rwlock;
    type Map<K: Key, V: Value> = RwlockMap<K, V>;
}

/// A hash map behind one [`parking_lot::RwLock`].
pub struct RwlockMap<K, V> {
    inner: parking_lot::RwLock<PlainMap<K, V>>,
}

impl<K: Key, V: Value> LockedMap<K, V> for RwlockMap<K, V> {
    type Reader<'a> = Guarded<parking_lot::RwLockReadGuard<'a, PlainMap<K, V>>>;
    type Writer<'a> = Guarded<parking_lot::RwLockWriteGuard<'a, PlainMap<K, V>>>;

    fn with_capacity(capacity: usize) -> Self {
        RwlockMap {
            inner: parking_lot::RwLock::new(new_map(capacity)),
        }
    }

    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Self::Reader<'_>) -> R) -> R {
        f(&Guarded(acquire(
            || self.inner.try_read(),
            || self.inner.read(),
        )))
    }

    fn write<R>(&self, f: impl FnOnce(&mut Self::Writer<'_>) -> R) -> R {
        f(&mut Guarded(acquire(
            || self.inner.try_write(),
            || self.inner.write(),
        )))
    }

    fn len(&self) -> usize {
        self.inner.read().len()
    }
}
