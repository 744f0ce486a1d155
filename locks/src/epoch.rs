//! `epoch`: lock-free readers over a fixed array of singly linked lists,
//! writers serialised by a mutex, and unlinked entries freed by crossbeam's
//! epoch-based deferred destruction once no reader can still see them.
//!
//! This is the shape of NetBSD's pslist(9) under pserialize(9) and of Linux's
//! RCU hash lists (hlist_*_rcu): a reader pins an epoch once per section and
//! then only loads pointers; a writer links a fully built node in with one
//! release store, and an entry that changes is replaced by a new node rather
//! than modified, so a reader sees the old entry or the new one, whole.
//!
//! Reclamation keeps pace with writers. crossbeam frees deferred garbage only
//! when a thread collects, which `pin` does on one pin in 128, freeing at
//! most 8 bags of 64 objects, while a write section of 64 station moves
//! retires 64 nodes: two ports that keep sending the same sources would grow
//! the garbage without bound. So writers count what they retire and, once a
//! bag's worth is owed, collect explicitly at the end of the section (see
//! [`reclaim`]).

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

/// Retired nodes owed before a writer collects: one crossbeam bag (64
/// deferred functions), so that a write section of a single move does not
/// push a bag, which is a 2 KiB allocation, of its own. Under loom, one, so
/// that the models check the collecting path too.
#[cfg(not(mpbridge_loom))]
const RECLAIM_AFTER: usize = 64;
#[cfg(mpbridge_loom)]
const RECLAIM_AFTER: usize = 1;

/// Retired nodes per collection round in [`reclaim`]. A round can free up
/// to 8 expired bags (512 nodes) and pushes at most one partly filled bag,
/// so one round per 256 owed can free twice as many nodes as were retired.
const RECLAIM_ROUND: usize = 256;

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
    /// Serialises writers; holds the number of nodes retired since writers
    /// last collected.
    writer: Mutex<usize>,
}

/// A read section of an [`EpochMap`]: the pinned epoch.
pub struct EpochReader<'a, K, V> {
    map: &'a EpochMap<K, V>,
    guard: Guard,
}

/// A write section of an [`EpochMap`]: a pinned epoch, used under the
/// writers' mutex.
pub struct EpochWriter<'a, K, V> {
    map: &'a EpochMap<K, V>,
    guard: Guard,
    /// Nodes unlinked and handed to `defer_destroy` in this section.
    retired: usize,
}

impl<K: Key, V: Value> EpochMap<K, V> {
    #[inline]
    fn bucket(&self, key: &K) -> &Atomic<Node<K, V>> {
        &self.buckets[self.bucket_index(key)]
    }

    /// The index of the bucket list that holds `key`: for tests that need
    /// keys sharing one list (under loom the hasher is fixed, so keys chosen
    /// with it share a list in every run of a model).
    #[doc(hidden)]
    #[inline]
    pub fn bucket_index(&self, key: &K) -> usize {
        self.hasher.hash_one(key) as usize & self.bucket_mask
    }
}

/// Frees garbage at least as fast as writers retire it: after the write
/// sections that retired `owed` nodes, one collection round per
/// [`RECLAIM_ROUND`] of them, and at least one.
///
/// A round is `repin` then `flush`. `flush` pushes this thread's bag of
/// deferred frees to the global queue, tries to advance the global epoch
/// (it advances only if every pinned thread is pinned in the current
/// epoch) and frees up to 8 bags sealed two or more epochs ago. `repin`
/// first moves this thread's own pin up to the current global epoch
/// (harmless: the guard protects no reference here), so that this thread
/// never holds the epoch back itself and a second round can advance it
/// again. A reader pinned in an older epoch still holds everything back, as
/// it must; once it moves on, each later round frees more than it pushes.
fn reclaim(guard: &mut Guard, owed: usize) {
    for _ in 0..=owed / RECLAIM_ROUND {
        guard.repin();
        guard.flush();
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
            writer: Mutex::new(0),
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
        let mut unreclaimed: MutexGuard<'_, usize> = self.writer.lock();
        let mut writer = EpochWriter {
            map: self,
            guard: cepoch::pin(),
            retired: 0,
        };
        let result = f(&mut writer);
        let EpochWriter {
            mut guard, retired, ..
        } = writer;
        *unreclaimed += retired;
        let owed = if *unreclaimed >= RECLAIM_AFTER {
            std::mem::take(&mut *unreclaimed)
        } else {
            0
        };
        // Collect still holding the writers' mutex, and unpin before letting
        // the next writer in: a writer pinned outside the mutex (collecting,
        // or preempted as it wakes the next writer) keeps the epoch from
        // advancing while the next writer goes on retiring nodes. Measured
        // with two writer threads taking turns: 75,000 values alive for 8,192
        // keys that way, at most 8,320 this way. Collecting under the mutex
        // also makes a writer that retires nodes pay for freeing them before
        // it retires more.
        if owed > 0 {
            reclaim(&mut guard, owed);
        }
        drop(guard);
        drop(unreclaimed);
        result
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
                    self.retired += 1;
                }
                Update::Remove => {
                    self.unlink(link, current, next);
                    self.retired += 1;
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
        self.retired += removed;
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
