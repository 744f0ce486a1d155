//! What a worker is told of a port besides its queue (its VLANs, flags,
//! BPDU and storm options, spanning tree's state), and the events it
//! reports to the control plane (BPDUs for spanning tree, a guard tripped,
//! IGMP and MLD messages). The rules that act on them are the forwarding
//! pipeline's (`crate::forward`).

use std::sync::Arc;

pub use crate::forward::{Gate, PortFlags};
use crate::port_id::PortId;
use crate::vlan::PortVlans;

/// A port's flags, BPDU and storm options, as `--port` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortPolicy {
    /// Linux's port flags.
    pub flags: PortFlags,
    /// `guard=on`: a BPDU disables the port until it is enabled again.
    pub guard: bool,
    /// `bpdu_filter=on`: BPDUs are dropped in and out.
    pub bpdu_filter: bool,
    /// `storm=PPS`: broadcast, multicast and unknown unicast beyond this
    /// many frames a second (of this worker's share) are dropped.
    pub storm: Option<u32>,
}

/// Everything a worker is told of a port beside its queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortSetup {
    /// Its VLANs (with VLAN filtering).
    pub vlans: PortVlans,
    /// Its BPDU and storm options.
    pub policy: PortPolicy,
    /// What spanning tree lets through it now.
    pub gate: Gate,
    /// Disabled by its guard: nothing in or out.
    pub disabled: bool,
}

impl PortSetup {
    /// A port with `vlans` and nothing else set.
    pub fn with_vlans(vlans: PortVlans) -> PortSetup {
        PortSetup {
            vlans,
            ..PortSetup::default()
        }
    }
}

/// What a worker tells the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortEvent {
    /// A BPDU for spanning tree (the Ethernet frame, without the port's
    /// metadata).
    Bpdu {
        /// The port it came in on.
        port: PortId,
        /// The frame.
        frame: Vec<u8>,
    },
    /// A BPDU came in on a port with `guard=on`; the worker stopped
    /// forwarding on it.
    GuardTripped {
        /// The port.
        port: PortId,
    },
    /// An IGMP or MLD message for multicast snooping (the Ethernet frame).
    Mcast {
        /// The port it came in on.
        port: PortId,
        /// Its VLAN (0 without VLAN filtering and untagged).
        vlan: u16,
        /// The frame.
        frame: Vec<u8>,
    },
}

/// Where a worker's events go: called rarely (a BPDU a second per port
/// from a neighbour, bounded by [`BPDUS_PER_SECOND`]; IGMP and MLD
/// messages, bounded by `MCAST_EVENTS_PER_SECOND`), never per frame.
/// These bounds are per port and worker; the daemon's sink bounds the
/// events again for the whole bridge (its owner's queue).
pub type EventSink = Arc<dyn Fn(PortEvent) + Send + Sync>;

/// The most BPDUs per port and second a worker hands to spanning tree; a
/// neighbour sends a few (802.1D-2004's transmit hold count is 6), so more
/// are a flood, dropped (and counted) rather than queued.
pub const BPDUS_PER_SECOND: u32 = 64;
