//! The synchronisation primitives under the hand-written concurrent code
//! (`rmlock`, `epoch`), switched to loom's model-checked versions when built
//! with `--cfg mpbridge_loom`, as crossbeam does with its `primitive` module.

#[cfg(not(mpbridge_loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(mpbridge_loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};

#[cfg(not(mpbridge_loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(mpbridge_loom)]
pub(crate) use self::loom_locks::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// loom's locks with parking_lot's signatures (no poisoning).
#[cfg(mpbridge_loom)]
mod loom_locks {
    pub(crate) use loom::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().expect("loom mutex poisoned")
        }
    }

    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            RwLock(loom::sync::RwLock::new(value))
        }
        pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().expect("loom rwlock poisoned")
        }
        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().expect("loom rwlock poisoned")
        }
        pub(crate) fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
            self.0.try_read().ok()
        }
        pub(crate) fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
            self.0.try_write().ok()
        }
    }
}

/// The index of the calling thread, counting threads from 0 in the order
/// they first asked. Used to spread readers over `rmlock` slots.
#[cfg(not(mpbridge_loom))]
pub(crate) fn thread_index() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        // Relaxed: the counter only hands out distinct numbers; it orders nothing.
        static INDEX: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    INDEX.with(|index| *index)
}

#[cfg(mpbridge_loom)]
pub(crate) fn thread_index() -> usize {
    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    loom::thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|index| *index)
}

/// An `UnsafeCell` whose references are tracked by loom under
/// `--cfg mpbridge_loom`, so that the model checker sees every access.
#[cfg(not(mpbridge_loom))]
pub(crate) mod cell {
    /// Interior mutability whose users promise the aliasing rules.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    /// A shared reference handed out by [`UnsafeCell::shared`].
    pub(crate) type SharedRef<'a, T> = &'a T;
    /// A unique reference handed out by [`UnsafeCell::unique`].
    pub(crate) type UniqueRef<'a, T> = &'a mut T;

    #[allow(unsafe_code)]
    impl<T> UnsafeCell<T> {
        pub(crate) fn new(value: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }

        /// # Safety
        /// No unique reference may exist while the result lives.
        pub(crate) unsafe fn shared(&self) -> SharedRef<'_, T> {
            // SAFETY: the caller promises no unique reference exists.
            unsafe { &*self.0.get() }
        }

        /// # Safety
        /// No other reference may exist while the result lives.
        pub(crate) unsafe fn unique(&self) -> UniqueRef<'_, T> {
            // SAFETY: the caller promises no other reference exists.
            unsafe { &mut *self.0.get() }
        }
    }
}

#[cfg(mpbridge_loom)]
pub(crate) mod cell {
    use std::marker::PhantomData;
    use std::ops::{Deref, DerefMut};

    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(loom::cell::UnsafeCell<T>);

    pub(crate) struct SharedRef<'a, T>(loom::cell::ConstPtr<T>, PhantomData<&'a T>);
    pub(crate) struct UniqueRef<'a, T>(loom::cell::MutPtr<T>, PhantomData<&'a mut T>);

    #[allow(unsafe_code)]
    impl<T> UnsafeCell<T> {
        pub(crate) fn new(value: T) -> Self {
            UnsafeCell(loom::cell::UnsafeCell::new(value))
        }
        pub(crate) unsafe fn shared(&self) -> SharedRef<'_, T> {
            SharedRef(self.0.get(), PhantomData)
        }
        pub(crate) unsafe fn unique(&self) -> UniqueRef<'_, T> {
            UniqueRef(self.0.get_mut(), PhantomData)
        }
    }

    #[allow(unsafe_code)]
    impl<T> Deref for SharedRef<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: loom checks the caller's promise made in `shared`.
            unsafe { self.0.deref() }
        }
    }

    #[allow(unsafe_code)]
    impl<T> Deref for UniqueRef<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: loom checks the caller's promise made in `unique`.
            unsafe { self.0.deref() }
        }
    }

    #[allow(unsafe_code)]
    impl<T> DerefMut for UniqueRef<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: loom checks the caller's promise made in `unique`.
            unsafe { self.0.deref() }
        }
    }
}
