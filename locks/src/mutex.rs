//! `mutex`: one parking_lot mutex around a plain hash map. Readers exclude
//! each other too: the giant lock that the MP-safe kernels started from.

use crate::lockstat::acquire;
use crate::plain::{new_map, Guarded, PlainMap};
use crate::{Key, LockedMap, Strategy, StrategyKind, Value};

/// The `mutex` strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mutex;

impl Strategy for Mutex {
    const KIND: StrategyKind = StrategyKind::Mutex;
    type Map<K: Key, V: Value> = MutexMap<K, V>;
}

/// A hash map behind one [`parking_lot::Mutex`].
pub struct MutexMap<K, V> {
    inner: parking_lot::Mutex<PlainMap<K, V>>,
}

impl<K: Key, V: Value> LockedMap<K, V> for MutexMap<K, V> {
    type Reader<'a> = Guarded<parking_lot::MutexGuard<'a, PlainMap<K, V>>>;
    type Writer<'a> = Guarded<parking_lot::MutexGuard<'a, PlainMap<K, V>>>;

    fn with_capacity(capacity: usize) -> Self {
        MutexMap {
            inner: parking_lot::Mutex::new(new_map(capacity)),
        }
    }

    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Self::Reader<'_>) -> R) -> R {
        f(&Guarded(acquire(
            || self.inner.try_lock(),
            || self.inner.lock(),
        )))
    }

    fn write<R>(&self, f: impl FnOnce(&mut Self::Writer<'_>) -> R) -> R {
        f(&mut Guarded(acquire(
            || self.inner.try_lock(),
            || self.inner.lock(),
        )))
    }

    fn len(&self) -> usize {
        self.inner.lock().len()
    }
}
