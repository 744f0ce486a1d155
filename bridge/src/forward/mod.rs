//! The forwarding pipeline: each frame's whole verdict ([`Verdict`]) as
//! one value, built by stages that are pure functions of the frame, the
//! ingress port's view and the read sections of the tables. No stage does
//! I/O or reads a clock; state a stage needs (a storm bucket, the stations
//! held by the move limit) is handed in with the time. The worker
//! (`crate::worker`) keeps what is I/O and state: receiving, learning,
//! events to the control plane, sending, counters.
//!
//! The stages, in the order a frame meets them (the Linux bridge's
//! `br_handle_frame`, `br_handle_frame_finish`, `br_forward`); every drop
//! reason ([`DropReason`]) is produced by one of them, and docs/design.md
//! lists which:
//!
//! 1. ingress (`ingress.rs`, `vlan.rs`): the port's state, BPDU
//!    interception, VLAN admission; a tripped BPDU guard.
//! 2. lookup (`lookup.rs`): runts and bad sources, locked ports, the MAC
//!    table's say (reserved groups, the host's addresses, the same port,
//!    known unicast, floods); a learning port forwards nothing.
//! 3. policy (`policy.rs`, `snooping.rs`): the group forward mask,
//!    snooping's narrowing, the storm limit, the move limit.
//! 4. fan-out (`fanout.rs`): hairpin, isolation, flood classes, BPDU
//!    filters and the VLAN egress rules, port by port; each frame to send
//!    handed to the worker with its egress port and form.
//!
//! - `port.rs`: what the stages know of a port ([`IngressPort`],
//!   [`EgressPorts`], [`PortFlags`], [`Gate`]).
//! - `reason.rs`: the drop reasons.

mod fanout;
mod ingress;
mod lookup;
mod policy;
mod port;
mod reason;
mod snooping;
mod vlan;

pub use fanout::{fan_out, Egresses, FloodClass};
pub use ingress::{admit, gate_out, is_bpdu, trip_guard, without_lookup};
pub use lookup::{classify, classify_in, decide, decide_in, decide_to, look_up, Decision};
pub use policy::{forward_groups, hold_movers, limit_storm, MoveLimit, Movers, StormBucket};
pub use port::{EgressPort, EgressPorts, Gate, IngressPort, PortFlags};
pub use reason::DropReason;
pub use snooping::narrow;
pub use vlan::{egress, Admitted};

use crate::fdb::{FdbKey, FdbLookup, Vtep};
use crate::port_id::PortSet;

/// A frame's whole verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Where it goes, or why not.
    pub decision: Decision,
    /// The VLAN it was admitted into, with VLAN filtering; its egress
    /// form on each port follows from it.
    pub vlan: Option<Admitted>,
    /// The VTEP its destination's entry names (a VXLAN port's station).
    pub vtep: Option<Vtep>,
    /// The ports multicast snooping narrowed its flood to.
    pub narrowed: Option<PortSet>,
}

impl Verdict {
    /// A frame that goes no further, for `reason`.
    #[inline]
    pub const fn drop(reason: DropReason) -> Verdict {
        Verdict::decided(Decision::Drop(reason))
    }

    /// A frame with `decision` and nothing else.
    #[inline]
    pub const fn decided(decision: Decision) -> Verdict {
        Verdict {
            decision,
            vlan: None,
            vtep: None,
            narrowed: None,
        }
    }
}

/// The ingress and lookup stages for one frame on a port that looks up
/// ([`IngressPort::looks_up`]): its verdict, and the source the worker may
/// learn (`None`: nothing of it is learned).
#[inline(always)]
pub fn ingress_and_lookup(
    port: &IngressPort<'_>,
    frame: &[u8],
    table: &impl FdbLookup,
) -> (Verdict, Option<FdbKey>) {
    let vlan = match admit(port, frame) {
        Ok(vlan) => vlan,
        Err(reason) => return (Verdict::drop(reason), None),
    };
    let (decision, vtep, source) = look_up(port, frame, vlan.map(|a| a.vid), table);
    let verdict = Verdict {
        decision: gate_out(port, decision),
        vlan,
        vtep,
        narrowed: None,
    };
    (verdict, source)
}
