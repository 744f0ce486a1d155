//! What the pipeline knows of a port: what spanning tree lets through it
//! ([`Gate`]), Linux's port flags ([`PortFlags`]), and the plain views the
//! stages take of the ingress port ([`IngressPort`]) and of the egress
//! ports ([`EgressPorts`]).

use super::DropReason;
use crate::port_id::PortId;
use crate::vlan::PortVlans;

/// What spanning tree's port state lets through a port (802.1D-2004 7.4):
/// whether its frames' sources are learned, and whether frames come in
/// from it and go out of it. Open without spanning tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Sources are learned (learning and forwarding states).
    pub learning: bool,
    /// Frames are forwarded in and out (the forwarding state).
    pub forwarding: bool,
}

impl Gate {
    /// Forwarding.
    pub const OPEN: Gate = Gate {
        learning: true,
        forwarding: true,
    };
    /// Learning, not forwarding.
    pub const LEARNING: Gate = Gate {
        learning: true,
        forwarding: false,
    };
    /// Discarding.
    pub const CLOSED: Gate = Gate {
        learning: false,
        forwarding: false,
    };
}

impl Default for Gate {
    fn default() -> Self {
        Gate::OPEN
    }
}

/// The Linux bridge's port flags (`bridge link set dev X NAME on|off`),
/// with its semantics (net/bridge/br_forward.c, br_input.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortFlags {
    /// `isolated`: frames from an isolated port never leave by another.
    pub isolated: bool,
    /// `hairpin`: a frame may leave by the port it came in on.
    pub hairpin: bool,
    /// `learning`: sources of frames from the port are learned.
    pub learning: bool,
    /// `flood`: unknown unicast is flooded to the port.
    pub flood: bool,
    /// `mcast_flood`: multicast is flooded to the port.
    pub mcast_flood: bool,
    /// `bcast_flood`: broadcast is flooded to the port.
    pub bcast_flood: bool,
    /// `locked`: only stations with a static entry on the port may send
    /// from it; nothing is learned there.
    pub locked: bool,
}

impl Default for PortFlags {
    /// As a new port of the Linux bridge: learning and every flood on.
    fn default() -> Self {
        PortFlags {
            isolated: false,
            hairpin: false,
            learning: true,
            flood: true,
            mcast_flood: true,
            bcast_flood: true,
            locked: false,
        }
    }
}

/// The port a batch came in on, as the stages see it.
#[derive(Clone, Copy, Debug)]
pub struct IngressPort<'a> {
    /// Its id.
    pub port: PortId,
    /// Its VLANs, with VLAN filtering.
    pub vlans: Option<&'a PortVlans>,
    /// What becomes of a BPDU on it, when it does not reach the lookup
    /// (taken by spanning tree, a guard or a filter; see
    /// [`IngressPort::intercept_for`]).
    pub intercept: Option<DropReason>,
    /// Its flags (`locked` is the ingress stage's).
    pub flags: PortFlags,
    /// What spanning tree lets through it.
    pub gate: Gate,
    /// Disabled by its guard: nothing in or out.
    pub disabled: bool,
}

impl IngressPort<'_> {
    /// What becomes of a BPDU on a port with `bpdu_filter=on` (dropped),
    /// `guard=on` (the port disabled), on a bridge running spanning tree
    /// (`stp`, taken by it); `None`: it reaches the lookup, which floods it
    /// (the Linux bridge with `stp_state 0`).
    pub fn intercept_for(bpdu_filter: bool, guard: bool, stp: bool) -> Option<DropReason> {
        if bpdu_filter {
            Some(DropReason::BpduFilter)
        } else if guard {
            Some(DropReason::Guard)
        } else {
            stp.then_some(DropReason::Stp)
        }
    }

    /// Whether frames from the port reach the lookup at all: not while it
    /// is disabled or spanning tree has it discarding, when no read
    /// section of the table is needed.
    #[inline]
    pub fn looks_up(&self) -> bool {
        !self.disabled && self.gate.learning
    }
}

/// An egress port as the fan-out sees it.
#[derive(Clone, Copy, Debug)]
pub struct EgressPort<'a> {
    /// Its VLANs, with VLAN filtering.
    pub vlans: &'a PortVlans,
    /// Its flags.
    pub flags: PortFlags,
    /// `bpdu_filter=on`: flooded BPDUs skip it.
    pub bpdu_filter: bool,
}

/// The bridge's ports as the fan-out walks them, by port index.
pub trait EgressPorts {
    /// One past the highest port index.
    fn count(&self) -> usize;
    /// Port `index`; `None` for an index not in use.
    fn port(&self, index: usize) -> Option<EgressPort<'_>>;
}

impl EgressPorts for [Option<EgressPort<'_>>] {
    fn count(&self) -> usize {
        self.len()
    }

    fn port(&self, index: usize) -> Option<EgressPort<'_>> {
        self.get(index).copied().flatten()
    }
}
