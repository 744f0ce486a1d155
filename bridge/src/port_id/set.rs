//! A set of bridge ports as a 256-bit map: the member ports of a group
//! and the router ports, copied by value on the forwarding path.

use std::fmt;

use super::{PortId, MAX_PORTS};

const WORDS: usize = 4;

// One bit per port a worker can have.
const _: () = assert!(WORDS * 64 == MAX_PORTS);

/// A set of ports `0..MAX_PORTS`. Ports beyond are never members:
/// inserting one does nothing.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PortSet([u64; WORDS]);

impl PortSet {
    /// The empty set.
    pub const EMPTY: PortSet = PortSet([0; WORDS]);

    /// The empty set.
    pub const fn new() -> PortSet {
        Self::EMPTY
    }

    /// The word and bit of `port`, if it fits.
    fn slot(port: PortId) -> Option<(usize, u64)> {
        let i = port.index();
        (i < MAX_PORTS).then(|| (i / 64, 1u64 << (i % 64)))
    }

    /// Adds `port`; whether it was not there (false too for a port beyond
    /// [`MAX_PORTS`], which is not added).
    pub fn insert(&mut self, port: PortId) -> bool {
        let Some((word, bit)) = Self::slot(port) else {
            return false;
        };
        let new = self.0[word] & bit == 0;
        self.0[word] |= bit;
        new
    }

    /// Removes `port`; whether it was there.
    pub fn remove(&mut self, port: PortId) -> bool {
        let Some((word, bit)) = Self::slot(port) else {
            return false;
        };
        let was = self.0[word] & bit != 0;
        self.0[word] &= !bit;
        was
    }

    /// Whether `port` is in the set.
    #[inline]
    pub fn contains(&self, port: PortId) -> bool {
        Self::slot(port).is_some_and(|(word, bit)| self.0[word] & bit != 0)
    }

    /// Whether the set is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0 == [0; WORDS]
    }

    /// How many ports are in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The ports in either set.
    #[inline]
    pub fn union(self, other: PortSet) -> PortSet {
        PortSet(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    /// The ports in both sets.
    #[inline]
    pub fn intersection(self, other: PortSet) -> PortSet {
        PortSet(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }

    /// The ports of this set that are not in `other`.
    #[inline]
    pub fn difference(self, other: PortSet) -> PortSet {
        PortSet(std::array::from_fn(|i| self.0[i] & !other.0[i]))
    }

    /// The ports in ascending order.
    pub fn iter(&self) -> Iter {
        Iter {
            words: self.0,
            word: 0,
        }
    }

    /// The set as its four 64-bit words, port 0 the lowest bit of the
    /// first: for publishing with atomics.
    pub const fn to_words(self) -> [u64; WORDS] {
        self.0
    }

    /// The set with these words (see [`to_words`](Self::to_words)).
    pub const fn from_words(words: [u64; WORDS]) -> PortSet {
        PortSet(words)
    }
}

/// The ports of a [`PortSet`], in ascending order.
#[derive(Debug, Clone)]
pub struct Iter {
    words: [u64; WORDS],
    word: usize,
}

impl Iterator for Iter {
    type Item = PortId;

    fn next(&mut self) -> Option<PortId> {
        while self.word < WORDS {
            let w = &mut self.words[self.word];
            if *w != 0 {
                let bit = w.trailing_zeros() as usize;
                // Clear the lowest set bit.
                *w &= *w - 1;
                return Some(PortId((self.word * 64 + bit) as u16));
            }
            self.word += 1;
        }
        None
    }
}

impl IntoIterator for PortSet {
    type Item = PortId;
    type IntoIter = Iter;

    fn into_iter(self) -> Iter {
        self.iter()
    }
}

impl FromIterator<PortId> for PortSet {
    fn from_iter<I: IntoIterator<Item = PortId>>(ports: I) -> PortSet {
        let mut set = PortSet::new();
        set.extend(ports);
        set
    }
}

impl Extend<PortId> for PortSet {
    fn extend<I: IntoIterator<Item = PortId>>(&mut self, ports: I) {
        for port in ports {
            self.insert(port);
        }
    }
}

/// As a set of port numbers: `{1, 3}`.
impl fmt::Debug for PortSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(|p| p.0)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ports: &[u16]) -> PortSet {
        ports.iter().map(|&p| PortId(p)).collect()
    }

    #[test]
    fn insert_remove_contains() {
        let mut s = PortSet::new();
        assert!(s.is_empty());
        assert!(s.insert(PortId(0)));
        assert!(!s.insert(PortId(0)));
        assert!(s.insert(PortId(63)));
        assert!(s.insert(PortId(64)));
        assert!(s.insert(PortId(255)));
        assert_eq!(s.len(), 4);
        assert!(s.contains(PortId(64)));
        assert!(!s.contains(PortId(65)));
        assert!(s.remove(PortId(64)));
        assert!(!s.remove(PortId(64)));
        assert_eq!(s.len(), 3);
        assert_eq!(format!("{s:?}"), "{0, 63, 255}");
    }

    #[test]
    fn ports_beyond_the_limit_are_never_members() {
        let mut s = PortSet::new();
        assert!(!s.insert(PortId(256)));
        assert!(!s.insert(PortId(u16::MAX)));
        assert!(!s.contains(PortId(256)));
        assert!(!s.remove(PortId(256)));
        assert!(s.is_empty());
    }

    #[test]
    fn iteration_is_ascending() {
        let ports = [200, 3, 64, 0, 127, 128];
        let mut sorted = ports;
        sorted.sort_unstable();
        let got: Vec<u16> = set(&ports).iter().map(|p| p.0).collect();
        assert_eq!(got, sorted);
        assert_eq!(PortSet::new().iter().count(), 0);
        let all: PortSet = (0..256).map(PortId).collect();
        assert_eq!(all.len(), 256);
        assert!(all.iter().map(|p| p.0).eq(0..256));
    }

    #[test]
    fn set_operations() {
        let a = set(&[1, 2, 100]);
        let b = set(&[2, 3, 200]);
        assert_eq!(a.union(b), set(&[1, 2, 3, 100, 200]));
        assert_eq!(a.intersection(b), set(&[2]));
        assert_eq!(a.difference(b), set(&[1, 100]));
        assert_eq!(PortSet::from_words(a.to_words()), a);
    }
}
