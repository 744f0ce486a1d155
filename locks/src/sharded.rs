//! `sharded`: dashmap, a hash map split into shards each behind its own
//! reader-writer lock. There is no batch-wide section: every lookup takes one
//! shard's read lock, so readers on different shards never meet, while
//! readers of the same shard share that lock's cache line.

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::{
    HashBuilder, Key, LockedMap, ReadSection, Strategy, StrategyKind, Update, Value, WriteSection,
};

/// The `sharded` strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sharded;

impl Strategy for Sharded {
    const KIND: StrategyKind = StrategyKind::Sharded;
    type Map<K: Key, V: Value> = ShardedMap<K, V>;
}

/// A [`DashMap`] with the common hasher.
pub struct ShardedMap<K, V> {
    inner: DashMap<K, V, HashBuilder>,
}

/// Read and write sections of a [`ShardedMap`]: each operation locks the one
/// shard it needs, for as long as it needs it.
pub struct ShardedSection<'a, K, V> {
    inner: &'a DashMap<K, V, HashBuilder>,
}

impl<K: Key, V: Value> LockedMap<K, V> for ShardedMap<K, V> {
    type Reader<'a> = ShardedSection<'a, K, V>;
    type Writer<'a> = ShardedSection<'a, K, V>;

    fn with_capacity(capacity: usize) -> Self {
        ShardedMap {
            inner: DashMap::with_capacity_and_hasher(capacity, HashBuilder::default()),
        }
    }

    #[inline]
    fn read<R>(&self, f: impl FnOnce(&Self::Reader<'_>) -> R) -> R {
        f(&ShardedSection { inner: &self.inner })
    }

    fn write<R>(&self, f: impl FnOnce(&mut Self::Writer<'_>) -> R) -> R {
        f(&mut ShardedSection { inner: &self.inner })
    }

    fn len(&self) -> usize {
        self.inner.len()
    }
}

impl<K: Key, V: Value> ReadSection<K, V> for ShardedSection<'_, K, V> {
    #[inline]
    fn get_with<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        self.inner.get(key).map(|entry| f(entry.value()))
    }

    fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        self.inner
            .iter()
            .for_each(|entry| f(entry.key(), entry.value()));
    }
}

impl<K: Key, V: Value> WriteSection<K, V> for ShardedSection<'_, K, V> {
    fn update<R>(&mut self, key: K, f: impl FnOnce(Option<&V>) -> (Update<V>, R)) -> R {
        // The entry holds the shard's write lock, which makes look-and-decide
        // atomic against other writers of the same key.
        match self.inner.entry(key) {
            Entry::Occupied(mut entry) => {
                let (update, result) = f(Some(entry.get()));
                match update {
                    Update::Keep => {}
                    Update::Put(value) => {
                        entry.insert(value);
                    }
                    Update::Remove => {
                        entry.remove();
                    }
                }
                result
            }
            Entry::Vacant(entry) => {
                let (update, result) = f(None);
                if let Update::Put(value) = update {
                    entry.insert(value);
                }
                result
            }
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) -> usize {
        let mut removed = 0;
        self.inner.retain(|k, v| {
            let kept = keep(k, v);
            removed += usize::from(!kept);
            kept
        });
        removed
    }
}
