//! A VXLAN port's VTEPs: the remote addresses its stations are behind,
//! each named by a small handle ([`Vtep`]) that the fdb and the workers
//! carry in its place. The receive path turns a datagram's outer source
//! into its handle; the send path turns a frame's handle back into the
//! address it goes to.
//!
//! Both maps are read on every batch and written only when a VTEP is first
//! heard or configured: each is copied on write and read through arc-swap,
//! so readers take no lock. The list only grows, up to [`MAX_VTEPS`]: the
//! fdb's entries may name any handle given out, and ageing an entry does
//! not tell which handles are still named. Beyond the limit a VTEP heard
//! gets no handle: its stations are learned on the port without one, so
//! frames to them go to the flood list, and [`Vteps::refused`] counts it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::{ArcSwap, Guard};

use crate::wire::vxlan::Vtep;

/// The most VTEPs one port names: enough for any full mesh we know of, and
/// a bound on what a peer spraying outer source addresses can make us hold.
pub const MAX_VTEPS: usize = 4096;

/// A VXLAN port's VTEPs and their handles.
#[derive(Debug)]
pub struct Vteps {
    handles: ArcSwap<HashMap<IpAddr, Vtep>>,
    addrs: ArcSwap<Vec<IpAddr>>,
    /// Taken by writers only, so that two new VTEPs are not given one
    /// handle.
    writer: Mutex<()>,
    limit: usize,
    /// VTEPs heard that got no handle, the list being full.
    pub refused: AtomicU64,
}

impl Default for Vteps {
    fn default() -> Self {
        Vteps::with_limit(MAX_VTEPS)
    }
}

impl Vteps {
    /// A list that names at most `limit` VTEPs (at most [`Vtep::MAX`]).
    pub fn with_limit(limit: usize) -> Vteps {
        Vteps {
            handles: ArcSwap::from_pointee(HashMap::new()),
            addrs: ArcSwap::from_pointee(Vec::new()),
            writer: Mutex::new(()),
            limit: limit.min(Vtep::MAX),
            refused: AtomicU64::new(0),
        }
    }

    /// The handle of `addr`, if it has one.
    pub fn find(&self, addr: IpAddr) -> Option<Vtep> {
        self.handles.load().get(&addr).copied()
    }

    /// The handle of `addr`, given now if it has none; `None` when the
    /// list is full.
    pub fn handle(&self, addr: IpAddr) -> Option<Vtep> {
        if let Some(vtep) = self.find(addr) {
            return Some(vtep);
        }
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(vtep) = self.find(addr) {
            return Some(vtep);
        }
        let addrs = self.addrs.load();
        let Some(vtep) = Vtep::from_index(addrs.len()).filter(|_| addrs.len() < self.limit) else {
            // Relaxed: a statistic.
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let mut grown = Vec::clone(&addrs);
        grown.push(addr);
        let mut handles = HashMap::clone(&self.handles.load());
        handles.insert(addr, vtep);
        // The address first: a reader that finds the handle finds its
        // address too.
        self.addrs.store(Arc::new(grown));
        self.handles.store(Arc::new(handles));
        Some(vtep)
    }

    /// The addresses by handle, for a batch of lookups with [`addr_in`].
    pub fn addrs(&self) -> Guard<Arc<Vec<IpAddr>>> {
        self.addrs.load()
    }

    /// The address of `vtep`.
    pub fn addr(&self, vtep: Vtep) -> Option<IpAddr> {
        addr_in(&self.addrs(), vtep)
    }
}

/// The address of `vtep` in `addrs` (from [`Vteps::addrs`]).
pub fn addr_in(addrs: &[IpAddr], vtep: Vtep) -> Option<IpAddr> {
    addrs.get(vtep.index()).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([198, 18, 0, n])
    }

    #[test]
    fn each_address_gets_one_handle_and_back() {
        let vteps = Vteps::default();
        let a = vteps.handle(ip(1)).unwrap();
        let b = vteps.handle(ip(2)).unwrap();
        assert_ne!(a, b);
        assert_eq!(
            vteps.handle(ip(1)),
            Some(a),
            "the same address, the same handle"
        );
        assert_eq!(vteps.find(ip(2)), Some(b));
        assert_eq!(vteps.find(ip(3)), None, "find gives none out");
        assert_eq!((vteps.addr(a), vteps.addr(b)), (Some(ip(1)), Some(ip(2))));
    }

    #[test]
    fn a_full_list_refuses_and_counts() {
        let vteps = Vteps::with_limit(2);
        let a = vteps.handle(ip(1)).unwrap();
        vteps.handle(ip(2)).unwrap();
        assert_eq!(vteps.handle(ip(3)), None);
        assert_eq!(vteps.handle(ip(4)), None);
        assert_eq!(vteps.refused.load(Ordering::Relaxed), 2);
        assert_eq!(vteps.handle(ip(1)), Some(a), "known ones still have theirs");
    }
}
