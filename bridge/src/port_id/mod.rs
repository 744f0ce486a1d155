//! Port identity: what names a bridge port everywhere below the daemon.
//! The MAC table, the forwarding pipeline, spanning tree, snooping, capture
//! and the link monitor all name ports with these, and none of them needs
//! another's types to do so.
//!
//! - [`PortId`]: a port's index on the bridge.
//! - [`PortSet`]: a set of ports by value (`set.rs`).
//! - [`MAX_PORTS`]: how many ports a bridge can have.

use std::fmt;

mod set;

pub use set::{Iter as PortSetIter, PortSet};

/// The most ports a bridge has; port ids run from 0 below it. Per-port
/// arrays (the table's learning counts, the workers' counters) and
/// [`PortSet`] are this size.
pub const MAX_PORTS: usize = 256;

/// A bridge port's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u16);

impl PortId {
    /// The index as a `usize`, for indexing per-port arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
