//! `rcu`: read-copy-update over arc-swap. Readers load one immutable
//! snapshot per section and never write shared memory; writers copy what
//! they change and publish a new snapshot.
//!
//! Copying a whole table per learned station would cost O(entries) per
//! write. Instead a snapshot is a two-level tree of shared pieces: an array
//! of chunks, each an array of buckets, each a small array of entries, every
//! piece behind an `Arc` so that snapshots share what they do not change. A
//! write section copies the buckets it changes (about 8 entries each at the
//! sized capacity), the chunks that hold them and the chunk array: for a
//! table of B buckets that is about 2 x sqrt(B) pointer copies (64 for the
//! default 8192 entries) plus the entries of the changed buckets, however
//! large the table. It publishes once at the end of the section, however
//! many updates it made. Values sit behind their own `Arc`, so that a copied
//! bucket shares them with the old one and in-place atomic updates made by
//! readers of the old snapshot are not lost.

use std::hash::BuildHasher;
use std::sync::Arc;

use arc_swap::ArcSwap;
use hashbrown::HashMap;

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

type Slot<K, V> = (K, Arc<V>);
type Bucket<K, V> = Arc<[Slot<K, V>]>;

/// One level of the tree: a run of buckets.
struct Chunk<K, V> {
    buckets: Box<[Bucket<K, V>]>,
}

struct Snapshot<K, V> {
    chunks: Box<[Arc<Chunk<K, V>>]>,
    len: usize,
}

/// A copy-on-write hash map published through an [`ArcSwap`].
pub struct RcuMap<K, V> {
    current: ArcSwap<Snapshot<K, V>>,
    /// Serialises writers, so that no published update is lost.
    writer: parking_lot::Mutex<()>,
    hasher: HashBuilder,
    bucket_mask: usize,
    chunk_bits: u32,
}

impl<K: Key, V: Value> RcuMap<K, V> {
    /// The bucket `key` lives in. Buckets are chosen by the middle bits of
    /// the hash, which no other part of the map uses.
    #[inline]
    fn bucket_of(&self, key: &K) -> usize {
        (self.hasher.hash_one(key) >> 32) as usize & self.bucket_mask
    }

    /// Which chunk, and which bucket in it, holds bucket `index`.
    #[inline]
    fn split(&self, index: usize) -> (usize, usize) {
        (
            index >> self.chunk_bits,
            index & ((1 << self.chunk_bits) - 1),
        )
    }
}

impl<K, V> Snapshot<K, V> {
    #[inline]
    fn bucket(&self, (chunk, bucket): (usize, usize)) -> &[Slot<K, V>] {
        &self.chunks[chunk].buckets[bucket]
    }
}

/// A read section of an [`RcuMap`]: one snapshot, kept alive until the
/// section ends.
pub struct RcuReader<'a, K, V> {
    map: &'a RcuMap<K, V>,
    snapshot: arc_swap::Guard<Arc<Snapshot<K, V>>>,
}

/// A write section of an [`RcuMap`]: private copies of the buckets it
/// changed, published as a new snapshot when the section ends.
pub struct RcuWriter<'a, K, V> {
    map: &'a RcuMap<K, V>,
    base: Arc<Snapshot<K, V>>,
    copied: HashMap<usize, Vec<Slot<K, V>>>,
    len: usize,
}

impl<K: Key, V: Value> LockedMap<K, V> for RcuMap<K, V> {
    type Reader<'a> = RcuReader<'a, K, V>;
    type Writer<'a> = RcuWriter<'a, K, V>;

    fn with_capacity(capacity: usize) -> Self {
        let buckets = (capacity / ENTRIES_PER_BUCKET)
            .next_power_of_two()
            .clamp(MIN_BUCKETS, MAX_BUCKETS);
        let bucket_bits = buckets.trailing_zeros();
        let chunk_bits = bucket_bits / 2;
        let empty: Bucket<K, V> = Arc::from(Vec::new());
        let chunk = Arc::new(Chunk {
            buckets: (0..1 << chunk_bits).map(|_| Arc::clone(&empty)).collect(),
        });
        let snapshot = Snapshot {
            chunks: (0..buckets >> chunk_bits)
                .map(|_| Arc::clone(&chunk))
                .collect(),
            len: 0,
        };
        RcuMap {
            current: ArcSwap::from_pointee(snapshot),
            writer: parking_lot::Mutex::new(()),
            hasher: HashBuilder::default(),
            bucket_mask: buckets - 1,
            chunk_bits,
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
        let at = self.map.split(self.map.bucket_of(key));
        self.snapshot
            .bucket(at)
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| f(value))
    }

    fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for chunk in self.snapshot.chunks.iter() {
            for bucket in chunk.buckets.iter() {
                bucket.iter().for_each(|(k, v)| f(k, v));
            }
        }
    }
}

impl<K: Key, V: Value> RcuWriter<'_, K, V> {
    /// Builds the new snapshot from the old one and the copied buckets.
    fn publish(self) {
        if self.copied.is_empty() {
            return;
        }
        let map = self.map;
        let mut chunks: Vec<Arc<Chunk<K, V>>> = self.base.chunks.to_vec();
        let mut copied: Vec<_> = self.copied.into_iter().collect();
        copied.sort_unstable_by_key(|(index, _)| *index);
        let mut copied = copied.into_iter().peekable();
        while let Some((index, bucket)) = copied.next() {
            let (chunk, _) = map.split(index);
            let mut buckets = chunks[chunk].buckets.to_vec();
            buckets[map.split(index).1] = Arc::from(bucket);
            while let Some((index, bucket)) = copied.next_if(|(i, _)| map.split(*i).0 == chunk) {
                buckets[map.split(index).1] = Arc::from(bucket);
            }
            chunks[chunk] = Arc::new(Chunk {
                buckets: buckets.into_boxed_slice(),
            });
        }
        map.current.store(Arc::new(Snapshot {
            chunks: chunks.into_boxed_slice(),
            len: self.len,
        }));
    }
}

impl<K: Key, V: Value> WriteSection<K, V> for RcuWriter<'_, K, V> {
    fn update<R>(&mut self, key: K, f: impl FnOnce(Option<&V>) -> (Update<V>, R)) -> R {
        let index = self.map.bucket_of(&key);
        if let Some(bucket) = self.copied.get_mut(&index) {
            let at = bucket.iter().position(|(k, _)| *k == key);
            let (update, result) = f(at.map(|i| &*bucket[i].1));
            self.len = apply(bucket, at, key, update, self.len);
            return result;
        }
        // Decide on the shared bucket first: an update that changes nothing
        // must not pay for a copy.
        let shared = self.base.bucket(self.map.split(index));
        let at = shared.iter().position(|(k, _)| *k == key);
        let (update, result) = f(at.map(|i| &*shared[i].1));
        if matches!((&update, at), (Update::Keep, _) | (Update::Remove, None)) {
            return result;
        }
        let mut copy = shared.to_vec();
        self.len = apply(&mut copy, at, key, update, self.len);
        self.copied.insert(index, copy);
        result
    }

    fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) -> usize {
        let before = self.len;
        let mut verdicts = Vec::new();
        for index in 0..=self.map.bucket_mask {
            if let Some(bucket) = self.copied.get_mut(&index) {
                bucket.retain(|(k, v)| keep(k, v));
                continue;
            }
            let shared = self.base.bucket(self.map.split(index));
            verdicts.clear();
            verdicts.extend(shared.iter().map(|(k, v)| keep(k, v)));
            if verdicts.iter().all(|kept| *kept) {
                continue;
            }
            let copy: Vec<_> = shared
                .iter()
                .zip(&verdicts)
                .filter(|(_, kept)| **kept)
                .map(|(slot, _)| slot.clone())
                .collect();
            self.copied.insert(index, copy);
        }
        self.len = self.copied_len();
        before - self.len
    }
}

impl<K: Key, V: Value> RcuWriter<'_, K, V> {
    /// The length after this section: the base's, corrected by every copied
    /// bucket's change.
    fn copied_len(&self) -> usize {
        let mut len = self.base.len;
        for (index, bucket) in &self.copied {
            len = len + bucket.len() - self.base.bucket(self.map.split(*index)).len();
        }
        len
    }
}

/// Applies one decided update to a private bucket; returns the new length.
fn apply<K, V>(
    bucket: &mut Vec<Slot<K, V>>,
    at: Option<usize>,
    key: K,
    update: Update<V>,
    len: usize,
) -> usize {
    match (update, at) {
        (Update::Keep, _) | (Update::Remove, None) => len,
        (Update::Put(value), Some(i)) => {
            bucket[i].1 = Arc::new(value);
            len
        }
        (Update::Put(value), None) => {
            bucket.push((key, Arc::new(value)));
            len + 1
        }
        (Update::Remove, Some(i)) => {
            bucket.swap_remove(i);
            len - 1
        }
    }
}
