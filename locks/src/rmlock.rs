//! `rmlock`: a read-mostly lock. Each reader takes only the cache-padded
//! slot of its own thread; a writer takes every slot. Readers on different
//! cores therefore never write the same cache line, and a writer pays for
//! that by locking all slots. FreeBSD's rmlock(9), Linux's brlock and
//! crossbeam's `ShardedLock` are the analogs.

use std::ops::{Deref, DerefMut};

use crossbeam_utils::CachePadded;

use crate::lockstat::acquire;
use crate::plain::{new_map, Guarded, PlainMap};
use crate::primitive::cell::{SharedRef, UniqueRef, UnsafeCell};
use crate::primitive::{thread_index, RwLock, RwLockReadGuard, RwLockWriteGuard};
use crate::{Key, LockedMap, Strategy, StrategyKind, Value};

/// The `rmlock` strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rmlock;

impl Strategy for Rmlock {
    const KIND: StrategyKind = StrategyKind::Rmlock;
    type Map<K: Key, V: Value> = RmlockMap<K, V>;
}

/// A read-mostly lock around a `T`.
pub struct ReadMostlyLock<T> {
    /// One lock per slot. Readers hold one slot shared, writers hold all
    /// slots exclusively, so a writer excludes every reader.
    slots: Box<[CachePadded<RwLock<()>>]>,
    /// `slots.len() - 1`; the slot count is a power of two.
    slot_mask: usize,
    data: UnsafeCell<T>,
}

// SAFETY: the data is reached only through guards: shared references under a
// slot's read lock, a unique reference under every slot's write lock. That is
// the contract of `RwLock<T>`, which is Sync when T is Send + Sync.
#[allow(unsafe_code)]
unsafe impl<T: Send + Sync> Sync for ReadMostlyLock<T> {}

// SAFETY: moving the lock moves the `T`; nothing in it is tied to a thread.
#[allow(unsafe_code)]
unsafe impl<T: Send> Send for ReadMostlyLock<T> {}

impl<T> ReadMostlyLock<T> {
    /// A lock with one slot per possible thread of this machine, rounded up
    /// to a power of two.
    pub fn new(data: T) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_slots(data, cpus)
    }

    /// A lock with at least `slots` slots (rounded up to a power of two, at
    /// least 2). Threads beyond the slot count share slots.
    pub fn with_slots(data: T, slots: usize) -> Self {
        let slots = slots.clamp(2, 1024).next_power_of_two();
        ReadMostlyLock {
            slots: (0..slots)
                .map(|_| CachePadded::new(RwLock::new(())))
                .collect(),
            slot_mask: slots - 1,
            data: UnsafeCell::new(data),
        }
    }

    /// How many slots readers are spread over.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Shared access, taking only the calling thread's slot.
    #[inline]
    pub fn read(&self) -> RmLockReadGuard<'_, T> {
        let slot = &self.slots[thread_index() & self.slot_mask];
        let slot = acquire(|| slot.try_read(), || slot.read());
        RmLockReadGuard {
            // SAFETY: we hold a slot's read lock, so no writer holds every
            // slot's write lock, so nobody has a unique reference to the data
            // until the guard (which keeps the slot locked) is dropped.
            #[allow(unsafe_code)]
            data: unsafe { self.data.shared() },
            _slot: slot,
        }
    }

    /// Unique access, taking every slot in order (so writers cannot
    /// deadlock each other).
    pub fn write(&self) -> RmLockWriteGuard<'_, T> {
        let slots = acquire(
            || self.try_write_all(),
            || self.slots.iter().map(|slot| slot.write()).collect(),
        );
        RmLockWriteGuard {
            // SAFETY: we hold every slot's write lock, so no reader holds any
            // slot and no other writer holds them: the reference is unique
            // until the guard (which keeps the slots locked) is dropped.
            #[allow(unsafe_code)]
            data: unsafe { self.data.unique() },
            _slots: slots,
        }
    }
}

impl<T> ReadMostlyLock<T> {
    /// Every slot's write lock, if all are free now; else none of them.
    fn try_write_all(&self) -> Option<Vec<RwLockWriteGuard<'_, ()>>> {
        self.slots.iter().map(|slot| slot.try_write()).collect()
    }
}

/// Shared access to an [`ReadMostlyLock`]'s data; unlocks the reader's slot on drop.
#[must_use = "the slot is unlocked as soon as the guard is dropped"]
pub struct RmLockReadGuard<'a, T> {
    // Field order matters: the reference must go before the slot unlocks.
    data: SharedRef<'a, T>,
    _slot: RwLockReadGuard<'a, ()>,
}

// The explicit reborrows are for loom builds, where `data` is a tracked
// pointer rather than a reference.
#[allow(clippy::borrow_deref_ref)]
impl<T> Deref for RmLockReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &*self.data
    }
}

/// Unique access to an [`ReadMostlyLock`]'s data; unlocks every slot on drop.
#[must_use = "the slots are unlocked as soon as the guard is dropped"]
pub struct RmLockWriteGuard<'a, T> {
    // Field order matters: the reference must go before the slots unlock.
    data: UniqueRef<'a, T>,
    _slots: Vec<RwLockWriteGuard<'a, ()>>,
}

#[allow(clippy::borrow_deref_ref)]
impl<T> Deref for RmLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &*self.data
    }
}

#[allow(clippy::borrow_deref_ref)]
impl<T> DerefMut for RmLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut *self.data
    }
}

/// A hash map behind one [`ReadMostlyLock`].
pub struct RmlockMap<K, V> {
    inner: ReadMostlyLock<PlainMap<K, V>>,
}

impl<K: Key, V: Value> LockedMap<K, V> for RmlockMap<K, V> {
    type Reader<'a> = Guarded<RmLockReadGuard<'a, PlainMap<K, V>>>;
    type Writer<'a> = Guarded<RmLockWriteGuard<'a, PlainMap<K, V>>>;

    fn with_capacity(capacity: usize) -> Self {
        RmlockMap {
            inner: ReadMostlyLock::new(new_map(capacity)),
        }
    }

    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Self::Reader<'_>) -> R) -> R {
        f(&Guarded(self.inner.read()))
    }

    fn write<R>(&self, f: impl FnOnce(&mut Self::Writer<'_>) -> R) -> R {
        f(&mut Guarded(self.inner.write()))
    }

    fn len(&self) -> usize {
        self.inner.read().len()
    }
}
