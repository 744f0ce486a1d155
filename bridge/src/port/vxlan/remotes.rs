//! A VXLAN port's second learned table: which VTEP (remote IP address) each
//! station behind the port was last heard from, as the Linux vxlan device
//! learns it, with the same ageing; and the listed remotes that broadcast,
//! multicast and unknown unicast go to (head-end replication).
//!
//! It is read for every frame the port sends and written only when a
//! station is new, moves to another VTEP, or its entry's second changes:
//! the read-mostly pattern of the MAC table. A reader-writer lock guards it;
//! the lookups of one send batch take it once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::fdb::FdbKey;

/// Where a station behind the port was heard from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    /// The VTEP's address.
    pub addr: IpAddr,
    /// When it was last heard (learned entries).
    pub seen: Instant,
    /// Added by hand: never aged, never moved by learning.
    pub fixed: bool,
}

/// One row of [`RemoteTable::entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEntry {
    /// The station.
    pub key: FdbKey,
    /// Its VTEP.
    pub addr: IpAddr,
    /// Static or learned.
    pub fixed: bool,
    /// Seconds since it was last heard.
    pub idle_secs: u64,
}

/// The stations behind a VXLAN port and their VTEPs.
#[derive(Debug)]
pub struct RemoteTable {
    entries: RwLock<HashMap<FdbKey, Remote>>,
    /// Where floods go.
    flood: Vec<IpAddr>,
    max_entries: usize,
    age: Duration,
    /// New stations not learned because the table was full.
    pub refused: AtomicU64,
}

impl RemoteTable {
    /// A table flooding to `flood`, holding at most `max_entries` learned
    /// stations (0: no limit), forgetting those silent for `age`.
    pub fn new(flood: Vec<IpAddr>, max_entries: usize, age: Duration) -> RemoteTable {
        RemoteTable {
            entries: RwLock::new(HashMap::new()),
            flood,
            max_entries,
            age,
            refused: AtomicU64::new(0),
        }
    }

    /// The listed remotes.
    pub fn flood_list(&self) -> &[IpAddr] {
        &self.flood
    }

    /// Whether `addr` is a listed remote or the VTEP of a static entry.
    pub fn is_known_vtep(&self, addr: IpAddr) -> bool {
        self.flood.contains(&addr)
            || self
                .entries
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .any(|r| r.fixed && r.addr == addr)
    }

    /// Looks up every key of `keys` under one read lock: the VTEP of each
    /// known, live station.
    pub fn lookup_all(&self, keys: &[FdbKey], out: &mut Vec<Option<IpAddr>>) {
        let now = Instant::now();
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        out.clear();
        out.extend(keys.iter().map(|key| {
            entries
                .get(key)
                .filter(|r| r.fixed || now.duration_since(r.seen) < self.age)
                .map(|r| r.addr)
        }));
    }

    /// Learns that `key` was heard from `addr`. A write lock is taken only
    /// when the entry is new, moved, or last refreshed a second ago or more.
    pub fn learn(&self, key: FdbKey, addr: IpAddr, now: Instant) {
        {
            let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(r) = entries.get(&key) {
                if r.fixed
                    || (r.addr == addr && now.duration_since(r.seen) < Duration::from_secs(1))
                {
                    return;
                }
            }
        }
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = entries.get_mut(&key) {
            if !r.fixed {
                r.addr = addr;
                r.seen = now;
            }
            return;
        }
        if self.max_entries != 0 && entries.len() >= self.max_entries {
            // Make room from stations that aged out before refusing.
            let age = self.age;
            entries.retain(|_, r| r.fixed || now.duration_since(r.seen) < age);
            if entries.len() >= self.max_entries {
                // Relaxed: a statistic.
                self.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        entries.insert(
            key,
            Remote {
                addr,
                seen: now,
                fixed: false,
            },
        );
    }

    /// Adds (or replaces) a static entry.
    pub fn add_static(&self, key: FdbKey, addr: IpAddr) {
        self.entries
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                key,
                Remote {
                    addr,
                    seen: Instant::now(),
                    fixed: true,
                },
            );
    }

    /// Removes an entry; returns whether there was one.
    pub fn remove(&self, key: &FdbKey) -> bool {
        self.entries
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
            .is_some()
    }

    /// Every live entry.
    pub fn entries(&self) -> Vec<RemoteEntry> {
        let now = Instant::now();
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        let mut rows: Vec<RemoteEntry> = entries
            .iter()
            .filter(|(_, r)| r.fixed || now.duration_since(r.seen) < self.age)
            .map(|(key, r)| RemoteEntry {
                key: *key,
                addr: r.addr,
                fixed: r.fixed,
                idle_secs: now.duration_since(r.seen).as_secs(),
            })
            .collect();
        rows.sort_by_key(|r| (r.key.vlan, r.key.mac.0));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::MacAddr;

    fn key(n: u8) -> FdbKey {
        FdbKey::new(0, MacAddr([2, 0, 0, 0, 0, n]))
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([198, 18, 1, n])
    }

    #[test]
    fn stations_are_learned_moved_and_aged() {
        let table = RemoteTable::new(vec![ip(1), ip(2)], 0, Duration::from_secs(300));
        let now = Instant::now();
        table.learn(key(1), ip(1), now);
        let mut out = Vec::new();
        table.lookup_all(&[key(1), key(2)], &mut out);
        assert_eq!(out, [Some(ip(1)), None]);
        table.learn(key(1), ip(2), now);
        table.lookup_all(&[key(1)], &mut out);
        assert_eq!(out, [Some(ip(2))], "a station that moved VTEP follows");
        let old = now - Duration::from_secs(301);
        let aged = RemoteTable::new(vec![], 0, Duration::from_secs(300));
        aged.learn(key(3), ip(3), old);
        aged.lookup_all(&[key(3)], &mut out);
        assert_eq!(out, [None], "silent past the ageing time");
        assert!(aged.entries().is_empty());
    }

    #[test]
    fn static_entries_stay_and_the_limit_holds() {
        let table = RemoteTable::new(vec![ip(1)], 2, Duration::from_secs(300));
        let now = Instant::now();
        table.add_static(key(9), ip(9));
        table.learn(key(9), ip(1), now);
        let mut out = Vec::new();
        table.lookup_all(&[key(9)], &mut out);
        assert_eq!(out, [Some(ip(9))], "learning does not move a static entry");
        assert!(table.is_known_vtep(ip(9)) && table.is_known_vtep(ip(1)));
        assert!(!table.is_known_vtep(ip(7)));
        table.learn(key(1), ip(1), now);
        table.learn(key(2), ip(1), now);
        assert_eq!(table.refused.load(Ordering::Relaxed), 1);
        assert_eq!(table.entries().len(), 2);
        assert!(table.remove(&key(9)));
        table.learn(key(2), ip(1), now);
        assert_eq!(table.entries().len(), 2);
    }
}
