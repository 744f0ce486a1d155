//! Hooks for the fuzz targets in `fuzz/` (the `fuzzing` feature, off by
//! default): the vhost-user message handler as the control thread drives
//! it, and a queue pair over a ring in memory the target plays the driver
//! of, without a socket or a control thread. Nothing here is for use
//! outside the fuzz targets; the internals stay private to the crate.

use std::fs::File;
use std::io;
use std::sync::Arc;

pub use super::device::{Device, PROTOCOL_FEATURES};
use super::device::{Negotiated, Running};
use super::eventfd::FrontendEventfd;
pub use super::protocol::Handler;
use super::ring::SplitRing;
use super::VhostQueue;
pub use vhost::vhost_user::message::{VhostUserMemoryRegion, VhostUserVringAddrFlags};
pub use vhost::vhost_user::VhostUserBackendReqHandlerMut;

/// Chains one receive call takes at most (good and bad).
pub const CHAIN_BUDGET: usize = super::CHAIN_BUDGET;
/// Descriptors after which a call takes no more chains.
pub const DESCRIPTOR_BUDGET: u64 = super::DESCRIPTOR_BUDGET;
/// Chains one frame to the driver takes at most.
pub const MAX_MERGE_CHAINS: usize = super::MAX_MERGE_CHAINS;

/// Whether vring `index` of `device` runs.
pub fn running(device: &Device, index: usize) -> bool {
    device.vring(index).is_some_and(|v| v.lock().is_some())
}

/// The running vring `index`'s next avail index and the descriptors it has
/// read so far, if it runs.
pub fn position(device: &Device, index: usize) -> Option<(u16, u64)> {
    let slot = device.vring(index)?.lock();
    slot.as_ref()
        .map(|run| (run.ring.next_avail(), run.ring.walked()))
}

/// Runs `ring` as vring `index` of `device`, with `features` negotiated
/// and `kick` (an eventfd) as its kick; no call descriptor.
pub fn start(
    device: &Device,
    index: usize,
    ring: SplitRing,
    features: u64,
    kick: File,
) -> io::Result<()> {
    let kick = FrontendEventfd::new(kick, "kick").map_err(io::Error::other)?;
    device.update(index, |_| {
        Some(Running {
            ring,
            negotiated: Negotiated { features },
            kick,
            call: None,
        })
    });
    Ok(())
}

/// Worker `pair`'s queue of `device`, with no control thread behind it.
pub fn queue(device: Arc<Device>, pair: usize) -> VhostQueue {
    VhostQueue::detached(device, pair)
}
