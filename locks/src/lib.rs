//! Concurrent maps under six synchronisation strategies.
//!
//! A [`Strategy`] is a zero-sized marker that names how a map is kept safe
//! under concurrency; its [`Strategy::Map`] is the map. Code that is generic
//! over `S: Strategy` is monomorphised once per strategy, so a hot path pays
//! for exactly one strategy and no dynamic dispatch. The six strategies, named
//! the same everywhere (module, type, command-line value):
//!
//! | name      | readers                                   | writers                          |
//! |-----------|-------------------------------------------|----------------------------------|
//! | `mutex`   | take the one mutex                        | take the one mutex               |
//! | `rwlock`  | share one reader-writer lock              | take it exclusively              |
//! | `rmlock`  | take their own cache-padded slot          | take every slot                  |
//! | `sharded` | take one shard's read lock per lookup     | take one shard's write lock      |
//! | `rcu`     | load one snapshot                         | copy touched buckets, publish    |
//! | `epoch`   | pin an epoch, walk lock-free lists        | serialise on a mutex, defer frees|
//!
//! Reads happen inside a *read section* ([`LockedMap::read`]) that the caller
//! may hold across a whole batch of lookups: one lock acquisition, one
//! snapshot load or one epoch pin per batch. Writes happen inside a *write
//! section* ([`LockedMap::write`]) that applies any number of updates at once,
//! which lets `rcu` publish one new snapshot per batch of updates.
//!
//! Nothing borrowed from a section can escape its closure: the section types
//! are handed out by reference only, as smoltcp hands out its phy tokens.

#![deny(unsafe_code)]

pub mod epoch;
mod kind;
pub mod lockstat;
pub mod mutex;
mod plain;
mod primitive;
pub mod rcu;
pub mod rmlock;
pub mod rwlock;
pub mod sharded;

use std::hash::Hash;

pub use epoch::Epoch;
pub use kind::{StrategyKind, UnknownStrategy};
pub use mutex::Mutex;
pub use rcu::Rcu;
pub use rmlock::Rmlock;
pub use rwlock::Rwlock;
pub use sharded::Sharded;

/// The hasher every map uses, so that strategies differ only in how they
/// synchronise, never in how they hash.
#[cfg(not(mpbridge_loom))]
pub type HashBuilder = hashbrown::DefaultHashBuilder;

/// Under loom every run of a model must behave the same: a fixed hasher.
#[cfg(mpbridge_loom)]
pub type HashBuilder = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// What a map key must be.
pub trait Key: Hash + Eq + Clone + Send + Sync + 'static {}
impl<T: Hash + Eq + Clone + Send + Sync + 'static> Key for T {}

/// What a map value must be. Values may hold atomics that readers update in
/// place (a last-seen time, say): every strategy keeps one copy of each value
/// alive for as long as any reader can see it.
pub trait Value: Send + Sync + 'static {}
impl<T: Send + Sync + 'static> Value for T {}

/// A synchronisation strategy: a marker type that names one kind of map.
pub trait Strategy: Send + Sync + 'static {
    /// The strategy's name and enum value.
    const KIND: StrategyKind;
    /// The map this strategy builds.
    type Map<K: Key, V: Value>: LockedMap<K, V>;
}

/// A concurrent map from `K` to `V` with batched read and write sections.
pub trait LockedMap<K, V>: Send + Sync + Sized {
    /// The read side, held for the duration of one [`read`](Self::read) call.
    type Reader<'a>: ReadSection<K, V>
    where
        Self: 'a;
    /// The write side, held for the duration of one [`write`](Self::write) call.
    type Writer<'a>: WriteSection<K, V>
    where
        Self: 'a;

    /// An empty map sized for about `capacity` entries. Strategies whose
    /// bucket count is fixed at creation (`rcu`, `epoch`) size it from this.
    fn with_capacity(capacity: usize) -> Self;

    /// Runs `f` inside one read section. Hold it across a batch of lookups to
    /// pay the section's entry cost once per batch; call it per lookup to
    /// measure the fine-grained alternative.
    ///
    /// Do not call [`write`](Self::write) from inside `f`: for the lock-based
    /// strategies that deadlocks.
    fn read<R>(&self, f: impl FnOnce(&Self::Reader<'_>) -> R) -> R;

    /// Runs `f` inside one write section. Writers are serialised (per shard
    /// for `sharded`); readers see either none or, once the section ends, all
    /// of its updates to any one key (for `rcu`: to all keys at once).
    fn write<R>(&self, f: impl FnOnce(&mut Self::Writer<'_>) -> R) -> R;

    /// The number of entries. Exact when no writer is running.
    fn len(&self) -> usize;

    /// Whether the map is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Lookups inside a read section.
pub trait ReadSection<K, V> {
    /// Calls `f` with the value for `key`, if there is one.
    fn get_with<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R>;

    /// Calls `f` with every entry, in no particular order.
    fn for_each(&self, f: impl FnMut(&K, &V));
}

/// What a write section does with one key's entry; see [`WriteSection::update`].
#[derive(Debug)]
pub enum Update<V> {
    /// Leave the entry (or its absence) as it is.
    Keep,
    /// Insert or replace the value.
    Put(V),
    /// Remove the entry, if there is one.
    Remove,
}

/// Updates inside a write section.
pub trait WriteSection<K, V> {
    /// Looks at `key`'s current value and decides, atomically with respect to
    /// other writers of `key`, what it becomes. `f` also returns a result for
    /// the caller (whether something was learned, say).
    fn update<R>(&mut self, key: K, f: impl FnOnce(Option<&V>) -> (Update<V>, R)) -> R;

    /// Removes every entry for which `keep` returns false; returns how many.
    fn retain(&mut self, keep: impl FnMut(&K, &V) -> bool) -> usize;
}
