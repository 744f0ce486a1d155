//! `rcu`: read-copy-update over arc-swap. Readers load one immutable
//! snapshot per section and never write shared memory; writers copy what
//! they change and publish a new snapshot.
//!
//! Copying a whole table per learned station would cost O(entries) per
//! write. Instead a snapshot is a fixed array of buckets, each shared between
//! snapshots through an `Arc`; a write section copies only the buckets it
//! changes (each about 8 entries at the sized capacity) plus the array of
//! bucket pointers, and publishes once at the end of the section however
//! many updates it made. Values sit behind their own `Arc`, so that a copied
//! bucket shares them with the old one and in-place atomic updates made by
//! readers of the old snapshot are not lost.

use std::hash::BuildHasher;
use std::sync::Arc;

use arc_swap::ArcSwap;
use hashbrown::hash_table::Entry;
use hashbrown::{HashMap, HashTable};

use crate::{
    HashBuilder, Key, LockedMap, ReadSection, Strategy, StrategyKind, Update, Value, WriteSection,
};

/// The `rcu` strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rcu;

impl Strategy for Rcu {
    const KIND: StrategyKind = StrategyKind::Rcu;
    type Map<K: Key, V: Value> = RcuMap<K, V>;
}

/// Entries per bucket at the capacity the map was sized for.
const ENTRIES_PER_BUCKET: usize = 8;
const MIN_BUCKETS: usize = 16;
const MAX_BUCKETS: usize = 1 << 16;

type Bucket<K, V> = HashTable<(K, Arc<V>)>;

struct Snapshot<K, V> {
    buckets: Box<[Arc<Bucket<K, V>>]>,
    len: usize,
}

/// A copy-on-write hash map published through an [`ArcSwap`].
pub struct RcuMap<K, V> {
    current: ArcSwap<Snapshot<K, V>>,
    /// Serialises writers, so that no published update is lost.
    writer: parking_lot::Mutex<()>,
    hasher: HashBuilder,
    bucket_mask: usize,
}

impl<K: Key, V: Value> RcuMap<K, V> {
    #[inline]
    fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Buckets are chosen by the middle bits of the hash: hashbrown places
    /// entries by the low bits and tags them with the top seven, so those
    /// must still vary within a bucket.
    #[inline]
    fn bucket_of(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.bucket_mask
    }
}

/// A read section of an [`RcuMap`]: one snapshot, kept alive until the
/// section ends.
pub struct RcuReader<'a, K, V> {
    map: &'a RcuMap<K, V>,
    snapshot: arc_swap::Guard<Arc<Snapshot<K, V>>>,
}

/// A write section of an [`RcuMap`]: the buckets it changed, published as a
/// new snapshot when the section ends.
pub struct RcuWriter<'a, K, V> {
    map: &'a RcuMap<K, V>,
    base: Arc<Snapshot<K, V>>,
    copied: HashMap<usize, Bucket<K, V>>,
    len: usize,
}

impl<K: Key, V: Value> LockedMap<K, V> for RcuMap<K, V> {
    type Reader<'a> = RcuReader<'a, K, V>;
    type Writer<'a> = RcuWriter<'a, K, V>;

    fn with_capacity(capacity: usize) -> Self {
        let buckets = (capacity / ENTRIES_PER_BUCKET)
            .next_power_of_two()
            .clamp(MIN_BUCKETS, MAX_BUCKETS);
        let snapshot = Snapshot {
            buckets: (0..buckets).map(|_| Arc::new(HashTable::new())).collect(),
            len: 0,
        };
        RcuMap {
            current: ArcSwap::from_pointee(snapshot),
            writer: parking_lot::Mutex::new(()),
            hasher: HashBuilder::default(),
            bucket_mask: buckets - 1,
        }
    }

    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Self::Reader<'_>) -> R) -> R {
        f(&RcuReader {
            map: self,
            snapshot: self.current.load(),
        })
    }

    fn write<R>(&self, f: impl FnOnce(&mut Self::Writer<'_>) -> R) -> R {
        let _serialised = self.writer.lock();
        let base = self.current.load_full();
        let mut writer = RcuWriter {
            map: self,
            len: base.len,
            base,
            copied: HashMap::new(),
        };
        let result = f(&mut writer);
        writer.publish();
        result
    }

    fn len(&self) -> usize {
        self.current.load().len
    }
}

impl<K: Key, V: Value> ReadSection<K, V> for RcuReader<'_, K, V> {
    #[inline]
    fn get_with<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        let hash = self.map.hash(key);
        self.snapshot.buckets[self.map.bucket_of(hash)]
            .find(hash, |(k, _)| k == key)
            .map(|(_, value)| f(value))
    }

    fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for bucket in self.snapshot.buckets.iter() {
            bucket.iter().for_each(|(k, v)| f(k, v));
        }
    }
}

impl<K: Key, V: Value> RcuWriter<'_, K, V> {
    fn publish(self) {
        if self.copied.is_empty() {
            return;
        }
        let mut copied = self.copied;
        let buckets = self
            .base
            .buckets
            .iter()
            .enumerate()
            .map(|(index, old)| {
                copied
                    .remove(&index)
                    .map_or_else(|| Arc::clone(old), Arc::new)
            })
            .collect();
        self.map.current.store(Arc::new(Snapshot {
            buckets,
            len: self.len,
        }));
    }
}

impl<K: Key, V: Value> WriteSection<K, V> for RcuWriter<'_, K, V> {
    fn update<R>(&mut self, key: K, f: impl FnOnce(Option<&V>) -> (Update<V>, R)) -> R {
        let map = self.map;
        let hash = map.hash(&key);
        let index = map.bucket_of(hash);
        let rehash = |(k, _): &(K, Arc<V>)| map.hash(k);

        let bucket = match self.copied.get_mut(&index) {
            Some(bucket) => bucket,
            None => {
                // Decide on the shared bucket first: most updates that find
                // nothing to change must not pay for a copy.
                let current = self.base.buckets[index].find(hash, |(k, _)| *k == key);
                let (update, result) = f(current.map(|(_, v)| &**v));
                match (update, current.is_some()) {
                    (Update::Keep, _) | (Update::Remove, false) => return result,
                    (update, _) => {
                        let mut copy = (*self.base.buckets[index]).clone();
                        self.len = apply(&mut copy, hash, key, update, rehash, self.len);
                        self.copied.insert(index, copy);
                        return result;
                    }
                }
            }
        };
        let current = bucket.find(hash, |(k, _)| *k == key);
        let (update, result) = f(current.map(|(_, v)| &**v));
        self.len = apply(bucket, hash, key, update, rehash, self.len);
        result
    }

    fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) -> usize {
        let mut removed = 0;
        let mut verdicts = Vec::new();
        for index in 0..self.base.buckets.len() {
            if let Some(bucket) = self.copied.get_mut(&index) {
                let before = bucket.len();
                bucket.retain(|(k, v)| keep(k, v));
                removed += before - bucket.len();
                continue;
            }
            let shared = &self.base.buckets[index];
            verdicts.clear();
            verdicts.extend(shared.iter().map(|(k, v)| keep(k, v)));
            if verdicts.iter().all(|kept| *kept) {
                continue;
            }
            let mut copy = HashTable::with_capacity(shared.len());
            for ((k, v), _) in shared.iter().zip(&verdicts).filter(|(_, kept)| **kept) {
                copy.insert_unique(self.map.hash(k), (k.clone(), Arc::clone(v)), |(k, _)| {
                    self.map.hash(k)
                });
            }
            removed += shared.len() - copy.len();
            self.copied.insert(index, copy);
        }
        self.len -= removed;
        removed
    }
}

/// Applies one decided update to an owned bucket; returns the new length.
fn apply<K: Key, V>(
    bucket: &mut Bucket<K, V>,
    hash: u64,
    key: K,
    update: Update<V>,
    rehash: impl Fn(&(K, Arc<V>)) -> u64,
    len: usize,
) -> usize {
    match (bucket.entry(hash, |(k, _)| *k == key, rehash), update) {
        (_, Update::Keep) => len,
        (Entry::Occupied(mut entry), Update::Put(value)) => {
            entry.get_mut().1 = Arc::new(value);
            len
        }
        (Entry::Occupied(entry), Update::Remove) => {
            entry.remove();
            len - 1
        }
        (Entry::Vacant(entry), Update::Put(value)) => {
            entry.insert((key, Arc::new(value)));
            len + 1
        }
        (Entry::Vacant(_), Update::Remove) => len,
    }
}
