//! Read and write sections over a plain hash map held behind a lock guard:
//! the shared half of `mutex`, `rwlock` and `rmlock`, which differ only in
//! the lock.

use std::ops::{Deref, DerefMut};

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use crate::{HashBuilder, Key, ReadSection, Update, WriteSection};

/// The map every lock-based strategy protects.
pub(crate) type PlainMap<K, V> = HashMap<K, V, HashBuilder>;

pub(crate) fn new_map<K, V>(capacity: usize) -> PlainMap<K, V> {
    HashMap::with_capacity_and_hasher(capacity, HashBuilder::default())
}

/// A section that holds lock guard `G` over a [`PlainMap`].
pub struct Guarded<G>(pub(crate) G);

impl<K: Key, V, G: Deref<Target = PlainMap<K, V>>> ReadSection<K, V> for Guarded<G> {
    #[inline]
    fn get_with<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        self.0.get(key).map(f)
    }

    fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        self.0.iter().for_each(|(k, v)| f(k, v));
    }
}

impl<K: Key, V, G: DerefMut<Target = PlainMap<K, V>>> WriteSection<K, V> for Guarded<G> {
    fn update<R>(&mut self, key: K, f: impl FnOnce(Option<&V>) -> (Update<V>, R)) -> R {
        match self.0.entry(key) {
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
        let before = self.0.len();
        self.0.retain(|k, v| keep(k, v));
        before - self.0.len()
    }
}
