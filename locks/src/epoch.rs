//! `epoch`: lock-free readers over a fixed array of singly linked lists,
//! writers serialised by a mutex, and unlinked entries freed by crossbeam's
//! epoch-based deferred destruction once no reader can still see them.
//!
//! This is the shape of NetBSD's pslist(9) under pserialize(9) and of Linux's
//! RCU hash lists (hlist_*_rcu): a reader pins an epoch once per section and
//! then only loads pointers; a writer links a fully built node in with one
//! release store, and an entry that changes is replaced by a new node rather
//! than modified, so a reader sees the old entry or the new one, whole.

use std::hash::BuildHasher;

use crossbeam_epoch::{self as cepoch, Atomic, Guard, Owned, Shared};

use crate::primitive::{AtomicUsize, Mutex, MutexGuard, Ordering};
use crate::{
    HashBuilder, Key, LockedMap, ReadSection, Strategy, StrategyKind, Update, Value, WriteSection,
};

/// The `epoch` strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Epoch;

impl Strategy for Epoch {
    const KIND: StrategyKind = StrategyKind::Epoch;
    type Map<K: Key, V: Value> = EpochMap<K, V>;
}

const MIN_BUCKETS: usize = 16;
const MAX_BUCKETS: usize = 1 << 20;

struct Node<K, V> {
    key: K,
    value: V,
    next: Atomic<Node<K, V>>,
}

/// A hash map of epoch-protected lists with one bucket per sized entry.
pub struct EpochMap<K, V> {
    buckets: Box<[Atomic<Node<K, V>>]>,
    bucket_mask: usize,
    hasher: HashBuilder,
    /// Changed by writers only, under `writer`.
    len: AtomicUsize,
    writer: Mutex<()>,
}

/// A read section of an [`EpochMap`]: the pinned epoch.
pub struct EpochReader<'a, K, V> {
    map: &'a EpochMap<K, V>,
    guard: Guard,
}

/// A write section of an [`EpochMap`]: the writers' mutex and a pinned epoch.
pub struct EpochWriter<'a, K, V> {
    map: &'a EpochMap<K, V>,
    guard: Guard,
    _serialised: MutexGuard<'a, ()>,
}

impl<K: Key, V: Value> EpochMap<K, V> {
    #[inline]
    fn bucket(&self, key: &K) -> &Atomic<Node<K, V>> {
        let hash = self.hasher.hash_one(key);
        &self.buckets[hash as usize & self.bucket_mask]
    }
}

impl<K: Key, V: Value> LockedMap<K, V> for EpochMap<K, V> {
    type Reader<'a> = EpochReader<'a, K, V>;
    type Writer<'a> = EpochWriter<'a, K, V>;

    fn with_capacity(capacity: usize) -> Self {
        let buckets = capacity.next_power_of_two().clamp(MIN_BUCKETS, MAX_BUCKETS);
        EpochMap {
            buckets: (0..buckets).map(|_| Atomic::null()).collect(),
            bucket_mask: buckets - 1,
            hasher: HashBuilder::default(),
            len: AtomicUsize::new(0),
            writer: Mutex::new(()),
        }
    }

    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Self::Reader<'_>) -> R) -> R {
        f(&EpochReader {
            map: self,
            guard: cepoch::pin(),
        })
    }

    fn write<R>(&self, f: impl FnOnce(&mut Self::Writer<'_>) -> R) -> R {
        let serialised = self.writer.lock();
        f(&mut EpochWriter {
            map: self,
            guard: cepoch::pin(),
            _serialised: serialised,
        })
    }

    fn len(&self) -> usize {
        // Relaxed: a count for display and limits, ordered with nothing else.
        self.len.load(Ordering::Relaxed)
    }
}

/// Walks one list. Acquire pairs with the writers' release stores, so a
/// node's key and value are visible before the node is.
#[inline]
fn first<'g, K, V>(head: &Atomic<Node<K, V>>, guard: &'g Guard) -> Option<&'g Node<K, V>> {
    // SAFETY: a node reachable from a bucket was linked in fully built and is
    // destroyed only through `defer_destroy` after it was unlinked, which
    // waits for every guard pinned before the unlink, `guard` included.
    #[allow(unsafe_code)]
    unsafe {
        head.load(Ordering::Acquire, guard).as_ref()
    }
}

impl<K: Key, V: Value> ReadSection<K, V> for EpochReader<'_, K, V> {
    #[inline]
    fn get_with<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        let mut node = first(self.map.bucket(key), &self.guard);
        while let Some(n) = node {
            if n.key == *key {
                return Some(f(&n.value));
            }
            node = first(&n.next, &self.guard);
        }
        None
    }

    fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for bucket in self.map.buckets.iter() {
            let mut node = first(bucket, &self.guard);
            while let Some(n) = node {
                f(&n.key, &n.value);
                node = first(&n.next, &self.guard);
            }
        }
    }
}

impl<K: Key, V: Value> EpochWriter<'_, K, V> {
    /// Unlinks `node`, which `link` points to, and frees it once no reader
    /// can see it.
    fn unlink(
        &self,
        link: &Atomic<Node<K, V>>,
        node: Shared<'_, Node<K, V>>,
        next: Shared<'_, Node<K, V>>,
    ) {
        // Release: a reader that sees `next` through `link` sees it whole.
        link.store(next, Ordering::Release);
        // SAFETY: `node` is no longer reachable from any bucket, and writers
        // are serialised, so no other writer can unlink or free it again.
        #[allow(unsafe_code)]
        unsafe {
            self.guard.defer_destroy(node)
        };
    }
}

impl<K: Key, V: Value> WriteSection<K, V> for EpochWriter<'_, K, V> {
    fn update<R>(&mut self, key: K, f: impl FnOnce(Option<&V>) -> (Update<V>, R)) -> R {
        let guard = &self.guard;
        let head = self.map.bucket(&key);
        let mut link = head;
        loop {
            // Relaxed is enough among writers: the mutex orders them.
            let current = link.load(Ordering::Relaxed, guard);
            // SAFETY: as in `first`; in addition only this writer unlinks.
            #[allow(unsafe_code)]
            let Some(node) = (unsafe { current.as_ref() }) else {
                let (update, result) = f(None);
                if let Update::Put(value) = update {
                    let node = Owned::new(Node {
                        key,
                        value,
                        next: Atomic::from(head.load(Ordering::Relaxed, guard)),
                    });
                    // Release: publishes the node's fields with the node.
                    head.store(node, Ordering::Release);
                    self.map.len.fetch_add(1, Ordering::Relaxed);
                }
                return result;
            };
            if node.key != key {
                link = &node.next;
                continue;
            }
            let (update, result) = f(Some(&node.value));
            let next = node.next.load(Ordering::Relaxed, guard);
            match update {
                Update::Keep => {}
                Update::Put(value) => {
                    let replacement = Owned::new(Node {
                        key,
                        value,
                        next: Atomic::from(next),
                    })
                    .into_shared(guard);
                    self.unlink(link, current, replacement);
                }
                Update::Remove => {
                    self.unlink(link, current, next);
                    self.map.len.fetch_sub(1, Ordering::Relaxed);
                }
            }
            return result;
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) -> usize {
        let guard = &self.guard;
        let mut removed = 0;
        for bucket in self.map.buckets.iter() {
            let mut link = bucket;
            loop {
                let current = link.load(Ordering::Relaxed, guard);
                // SAFETY: as in `update`.
                #[allow(unsafe_code)]
                let Some(node) = (unsafe { current.as_ref() }) else {
                    break;
                };
                if keep(&node.key, &node.value) {
                    link = &node.next;
                } else {
                    self.unlink(link, current, node.next.load(Ordering::Relaxed, guard));
                    removed += 1;
                }
            }
        }
        self.map.len.fetch_sub(removed, Ordering::Relaxed);
        removed
    }
}

impl<K, V> Drop for EpochMap<K, V> {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no reader or writer is left, so nothing
        // else can reach the nodes; nodes already unlinked were handed to
        // `defer_destroy` and are not reachable from the buckets.
        #[allow(unsafe_code)]
        let guard = unsafe { cepoch::unprotected() };
        for bucket in self.buckets.iter() {
            let mut current = bucket.load(Ordering::Relaxed, guard);
            while !current.is_null() {
                // SAFETY: as above, each node is owned by its list alone and
                // is visited once.
                #[allow(unsafe_code)]
                let node = unsafe { current.into_owned() };
                current = node.next.load(Ordering::Relaxed, guard);
            }
        }
    }
}
