//! The group table the workers read: each group's member ports in a map
//! under the bridge's lock strategy, and per family the router ports and
//! whether a querier is present, in atomics. The control plane writes it
//! by applying [`Action`]s in order.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use locks::{LockedMap, ReadSection, Strategy, Update, WriteSection};

use super::classify::{Family, GroupKey};
use super::snooping::{Action, SnoopConfig};
use crate::port_id::PortSet;

/// The map a [`GroupTable`] keeps under strategy `S`.
pub type GroupMap<S> = <S as Strategy>::Map<GroupKey, PortSet>;

/// The read section of [`GroupMap<S>`].
pub type GroupSection<'a, S> = <GroupMap<S> as LockedMap<GroupKey, PortSet>>::Reader<'a>;

/// A [`PortSet`] in four atomic words.
///
/// Each word is stored with `Release` and loaded with `Acquire`, so that a
/// reader that sees a published set also sees the map writes applied
/// before it (the actions' order). The set as a whole is not one atomic
/// value: a reader racing a change may see some words old and some new,
/// which puts each port either in its old or its new state, as a change
/// made port by port would.
#[derive(Debug, Default)]
struct AtomicPortSet([AtomicU64; 4]);

impl AtomicPortSet {
    fn load(&self) -> PortSet {
        PortSet::from_words(std::array::from_fn(|i| self.0[i].load(Ordering::Acquire)))
    }

    fn store(&self, set: PortSet) {
        for (word, value) in self.0.iter().zip(set.to_words()) {
            word.store(value, Ordering::Release);
        }
    }
}

/// The group table over strategy `S`.
pub struct GroupTable<S: Strategy> {
    map: GroupMap<S>,
    routers: [AtomicPortSet; 2],
    /// Stored `Release`, loaded `Acquire`: a worker that sees a querier
    /// present sees the groups published before it.
    querier: [AtomicBool; 2],
    /// Set when snooping turned itself off (beyond `hash_max`): workers
    /// then leave multicast alone, malformed IGMP and MLD included.
    off: AtomicBool,
}

/// A read section of a [`GroupTable`]: group lookups, for a batch of frames.
pub struct GroupReader<'r, R> {
    section: &'r R,
}

impl<R: ReadSection<GroupKey, PortSet>> GroupReader<'_, R> {
    /// The member ports of `key`, if it has any.
    #[inline]
    pub fn members(&self, key: &GroupKey) -> Option<PortSet> {
        self.section.get_with(key, |ports| *ports)
    }
}

impl<S: Strategy> GroupTable<S> {
    /// An empty table sized for `hash_max` groups.
    pub fn new() -> Self {
        Self::with_capacity(SnoopConfig::default().hash_max)
    }

    /// An empty table sized for about `capacity` groups (the `rcu` and
    /// `epoch` maps fix their bucket count from it).
    pub fn with_capacity(capacity: usize) -> Self {
        GroupTable {
            map: LockedMap::with_capacity(capacity.max(1)),
            routers: Default::default(),
            querier: Default::default(),
            off: AtomicBool::new(false),
        }
    }

    /// Whether snooping runs: false once it turned itself off.
    #[inline]
    pub fn enabled(&self) -> bool {
        !self.off.load(Ordering::Relaxed)
    }

    /// Says that snooping turned itself off (or on again).
    pub fn set_enabled(&self, enabled: bool) {
        self.off.store(!enabled, Ordering::Relaxed);
    }

    /// Runs `f` inside one read section; hold it across a batch of frames.
    #[inline]
    pub fn read<T>(&self, f: impl FnOnce(&GroupReader<'_, GroupSection<'_, S>>) -> T) -> T {
        self.map.read(|section| f(&GroupReader { section }))
    }

    /// Whether a querier is present for `family`: whether its traffic may
    /// go by the table rather than flood.
    #[inline]
    pub fn querier_present(&self, family: Family) -> bool {
        self.querier[family.index()].load(Ordering::Acquire)
    }

    /// The router ports of `family`.
    #[inline]
    pub fn routers(&self, family: Family) -> PortSet {
        self.routers[family.index()].load()
    }

    /// Applies one action of [`Snooping::take_actions`](super::Snooping::take_actions):
    /// a group's members (an empty set removes it), a family's router
    /// ports or querier presence. [`Action::Send`] is not the table's.
    pub fn apply(&self, action: &Action) {
        match *action {
            Action::Group { key, ports } => self.map.write(|w| {
                w.update(key, |_| match ports.is_empty() {
                    true => (Update::Remove, ()),
                    false => (Update::Put(ports), ()),
                })
            }),
            Action::Routers { family, ports } => self.routers[family.index()].store(ports),
            Action::Querier { family, present } => {
                self.querier[family.index()].store(present, Ordering::Release)
            }
            Action::Send { .. } => {}
        }
    }

    /// The number of groups. Exact when no writer is running.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no groups.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every group and its members, sorted by group.
    pub fn records(&self) -> Vec<(GroupKey, PortSet)> {
        let mut records = Vec::with_capacity(self.len());
        self.map
            .read(|r| r.for_each(|key, ports| records.push((*key, *ports))));
        records.sort_unstable_by_key(|(key, _)| *key);
        records
    }

    /// Empties the table: no groups, no router ports, no querier.
    pub fn clear(&self) {
        for family in Family::ALL {
            self.querier[family.index()].store(false, Ordering::Release);
            self.routers[family.index()].store(PortSet::EMPTY);
        }
        self.map.write(|w| w.retain(|_, _| false));
    }
}

impl<S: Strategy> Default for GroupTable<S> {
    fn default() -> Self {
        Self::new()
    }
}

/// A group table of any strategy, for the control plane, which may hold
/// it as a trait object (it is not the packet path).
pub trait Groups: Send + Sync {
    /// See [`GroupTable::apply`].
    fn apply(&self, action: &Action);
    /// See [`GroupTable::records`].
    fn records(&self) -> Vec<(GroupKey, PortSet)>;
    /// See [`GroupTable::clear`].
    fn clear(&self);
    /// See [`GroupTable::set_enabled`].
    fn set_enabled(&self, enabled: bool);
}

impl<S: Strategy> Groups for GroupTable<S> {
    fn apply(&self, action: &Action) {
        GroupTable::apply(self, action);
    }
    fn records(&self) -> Vec<(GroupKey, PortSet)> {
        GroupTable::records(self)
    }
    fn clear(&self) {
        GroupTable::clear(self);
    }
    fn set_enabled(&self, enabled: bool) {
        GroupTable::set_enabled(self, enabled);
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;
    use crate::port_id::PortId;

    /// Instantiates `fn name<S: Strategy>()` once per strategy.
    macro_rules! for_each_strategy {
        ($($test:ident),* $(,)?) => {
            for_each_strategy!(@one mutex, locks::Mutex, $($test),*);
            for_each_strategy!(@one rwlock, locks::Rwlock, $($test),*);
            for_each_strategy!(@one rmlock, locks::Rmlock, $($test),*);
            for_each_strategy!(@one sharded, locks::Sharded, $($test),*);
            for_each_strategy!(@one rcu, locks::Rcu, $($test),*);
            for_each_strategy!(@one epoch, locks::Epoch, $($test),*);
        };
        (@one $module:ident, $strategy:ty, $($test:ident),*) => {
            mod $module {
                $(
                    #[test]
                    fn $test() {
                        super::$test::<$strategy>();
                    }
                )*
            }
        };
    }

    for_each_strategy!(
        groups_are_put_and_removed,
        routers_and_queriers_are_per_family,
        clear_empties_everything,
        works_as_a_trait_object,
        readers_see_whole_sets,
    );

    fn key(vlan: u16, group: &str) -> GroupKey {
        GroupKey::new(vlan, group.parse::<IpAddr>().unwrap())
    }

    fn set(ports: &[u16]) -> PortSet {
        ports.iter().map(|&p| PortId(p)).collect()
    }

    fn group(key: GroupKey, ports: PortSet) -> Action {
        Action::Group { key, ports }
    }

    fn groups_are_put_and_removed<S: Strategy>() {
        let table = GroupTable::<S>::new();
        assert!(table.is_empty());
        let a = key(0, "239.1.1.1");
        let b = key(10, "239.1.1.1");
        let c = key(0, "ff0e::1");
        table.apply(&group(a, set(&[1, 2])));
        table.apply(&group(b, set(&[3])));
        table.apply(&group(c, set(&[200])));
        assert_eq!(table.len(), 3);
        table.read(|r| {
            assert_eq!(r.members(&a), Some(set(&[1, 2])));
            assert_eq!(r.members(&b), Some(set(&[3])));
            assert_eq!(r.members(&c), Some(set(&[200])));
            assert_eq!(r.members(&key(0, "239.1.1.2")), None);
        });
        table.apply(&group(a, set(&[2])));
        table.apply(&group(b, PortSet::EMPTY));
        assert_eq!(table.records(), vec![(a, set(&[2])), (c, set(&[200]))]);
        table.apply(&Action::Send {
            port: None,
            frame: vec![1, 2, 3],
        });
        assert_eq!(table.len(), 2);
    }

    fn routers_and_queriers_are_per_family<S: Strategy>() {
        let table = GroupTable::<S>::new();
        for family in Family::ALL {
            assert!(!table.querier_present(family));
            assert!(table.routers(family).is_empty());
        }
        table.apply(&Action::Routers {
            family: Family::V6,
            ports: set(&[0, 65, 255]),
        });
        table.apply(&Action::Querier {
            family: Family::V4,
            present: true,
        });
        assert_eq!(table.routers(Family::V6), set(&[0, 65, 255]));
        assert!(table.routers(Family::V4).is_empty());
        assert!(table.querier_present(Family::V4));
        assert!(!table.querier_present(Family::V6));
        table.apply(&Action::Querier {
            family: Family::V4,
            present: false,
        });
        assert!(!table.querier_present(Family::V4));
    }

    fn clear_empties_everything<S: Strategy>() {
        let table = GroupTable::<S>::with_capacity(4);
        for n in 0..100u16 {
            table.apply(&group(key(n, "239.0.0.9"), set(&[n])));
        }
        table.apply(&Action::Routers {
            family: Family::V4,
            ports: set(&[1]),
        });
        table.apply(&Action::Querier {
            family: Family::V6,
            present: true,
        });
        assert_eq!(table.len(), 100);
        table.clear();
        assert!(table.is_empty());
        assert!(table.records().is_empty());
        assert!(table.routers(Family::V4).is_empty());
        assert!(!table.querier_present(Family::V6));
    }

    fn works_as_a_trait_object<S: Strategy>() {
        let table: Box<dyn Groups> = Box::new(GroupTable::<S>::new());
        let a = key(1, "239.9.9.9");
        table.apply(&group(a, set(&[4])));
        assert_eq!(table.records(), vec![(a, set(&[4]))]);
        table.clear();
        assert!(table.records().is_empty());
    }

    /// A reader sees each group's set as one writer published it, never a
    /// mix: sets live whole in the map.
    fn readers_see_whole_sets<S: Strategy>() {
        let table = Arc::new(GroupTable::<S>::new());
        let a = key(0, "239.1.2.3");
        let (low, high) = (set(&[1, 2, 3]), set(&[100, 200, 250]));
        table.apply(&group(a, low));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (table, stop) = (Arc::clone(&table), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut reads = 0u32;
                while !stop.load(Ordering::Relaxed) || reads == 0 {
                    let seen = table.read(|r| r.members(&a));
                    assert!(seen == Some(low) || seen == Some(high), "{seen:?}");
                    reads += 1;
                }
            })
        };
        for i in 0..2000 {
            table.apply(&group(a, if i % 2 == 0 { high } else { low }));
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
    }
}
