//! The forwarding decision: a pure function of the ingress port, the frame
//! and a read section of the MAC table.

use crate::fdb::{FdbKey, FdbLookup, Location, Vtep};
use crate::port_id::PortId;
use crate::wire::{EthernetFrame, MacAddr, MacKind, VlanId};

/// Why a frame is not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than its Ethernet header (14 bytes, 18 when tagged).
    Runt,
    /// The source is a group (multicast, broadcast) or all-zero address.
    BadSource,
    /// The destination is an IEEE 802.1D link-local address
    /// (01:80:C2:00:00:01 to 0F), which bridges never forward.
    Reserved,
    /// The destination was learned on the port the frame came in on: the
    /// stations share a segment and already heard each other.
    SamePort,
    /// The destination is the address of a port's own interface: the frame
    /// is the host's, which receives it on that interface, and no other
    /// port's (the Linux bridge's local entries).
    Local,
    /// VLAN filtering: an untagged or priority-tagged frame on a port with
    /// no PVID (a trunk without a native VLAN).
    VlanUntagged,
    /// VLAN filtering: a tagged frame of a VLAN the ingress port is not a
    /// member of.
    VlanIngress,
    /// VLAN filtering: known unicast towards a port that is not a member of
    /// the frame's VLAN.
    VlanEgress,
    /// A BPDU (to 01:80:C2:00:00:00) taken by spanning tree.
    Stp,
    /// A BPDU on a port with `bpdu_filter=on`.
    BpduFilter,
    /// A BPDU on a port with `guard=on`, which it disabled.
    Guard,
    /// The port is not forwarding: spanning tree has it discarding or
    /// learning, or a guard disabled it.
    PortState,
    /// Broadcast, multicast or unknown unicast beyond the port's storm
    /// limit.
    Storm,
    /// From a station held for moving between ports too often (the move
    /// limit).
    MoveLimit,
    /// Known unicast from an isolated port to another isolated port.
    Isolated,
    /// From a locked port, its source without a static entry there.
    Locked,
    /// Multicast snooping: IP multicast to a group with neither a member
    /// nor a router port, while a querier is present.
    Snooped,
    /// Multicast snooping: a malformed IGMP or MLD message (a bad
    /// checksum, a truncated message), which the Linux bridge drops too.
    McastParse,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 18] = [
        DropReason::Runt,
        DropReason::BadSource,
        DropReason::Reserved,
        DropReason::SamePort,
        DropReason::Local,
        DropReason::VlanUntagged,
        DropReason::VlanIngress,
        DropReason::VlanEgress,
        DropReason::Stp,
        DropReason::BpduFilter,
        DropReason::Guard,
        DropReason::PortState,
        DropReason::Storm,
        DropReason::MoveLimit,
        DropReason::Isolated,
        DropReason::Locked,
        DropReason::Snooped,
        DropReason::McastParse,
    ];

    /// A short name for counters and logs.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::Runt => "runt",
            DropReason::BadSource => "bad_source",
            DropReason::Reserved => "reserved",
            DropReason::SamePort => "same_port",
            DropReason::Local => "local",
            DropReason::VlanUntagged => "vlan_untagged",
            DropReason::VlanIngress => "vlan_ingress",
            DropReason::VlanEgress => "vlan_egress",
            DropReason::Stp => "stp",
            DropReason::BpduFilter => "bpdu_filter",
            DropReason::Guard => "guard",
            DropReason::PortState => "port_state",
            DropReason::Storm => "storm",
            DropReason::MoveLimit => "move_limit",
            DropReason::Isolated => "isolated",
            DropReason::Locked => "locked",
            DropReason::Snooped => "snooped",
            DropReason::McastParse => "mcast_parse",
        }
    }

    /// The reason's position in [`DropReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// What to do with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Do not forward it.
    Drop(DropReason),
    /// Send it out of this port only.
    Unicast(PortId),
    /// Send it out of every port but the ingress one.
    Flood,
}

/// The table keys of a frame's destination and source, or why the frame
/// cannot be forwarded at all. Learning uses the source key of any frame
/// that passes this check, including frames to reserved addresses.
#[inline]
pub fn classify(frame: &[u8]) -> Result<(FdbKey, FdbKey), DropReason> {
    classify_in(frame, None)
}

/// [`classify`], with the frame's VLAN given (by VLAN filtering, which
/// gives untagged frames their port's PVID) rather than read from its tag.
#[inline]
pub fn classify_in(frame: &[u8], vlan: Option<VlanId>) -> Result<(FdbKey, FdbKey), DropReason> {
    let frame = EthernetFrame::new_checked(frame).map_err(|_| DropReason::Runt)?;
    let src = frame.src_addr();
    if !src.is_valid_source() {
        return Err(DropReason::BadSource);
    }
    let vlan = vlan.unwrap_or_else(|| frame.vlan_id());
    Ok((FdbKey::new(vlan, frame.dst_addr()), FdbKey::new(vlan, src)))
}

/// Decides where `frame`, received on `ingress`, goes.
///
/// Rules, in order: drop runts and frames from invalid sources; drop frames
/// to reserved link-local addresses but the Bridge Group Address (BPDUs
/// reaching the decision are flooded, as the Linux bridge does with
/// `stp_state 0`, so that bridges around that run spanning tree see a loop
/// through this one); flood broadcast, multicast and unknown
/// unicast; drop frames to a port's own address (the host's); send known
/// unicast to its port, unless that is the ingress port.
/// A tagged frame is looked up within its VLAN and passes unchanged.
#[inline]
pub fn decide(ingress: PortId, frame: &[u8], fdb: &impl FdbLookup) -> Decision {
    decide_in(ingress, frame, None, fdb)
}

/// [`decide`], with the frame's VLAN given (see [`classify_in`]).
#[inline]
pub fn decide_in(
    ingress: PortId,
    frame: &[u8],
    vlan: Option<VlanId>,
    fdb: &impl FdbLookup,
) -> Decision {
    decide_to(ingress, frame, vlan, fdb).0
}

/// [`decide_in`], with the VTEP of a unicast destination behind a VXLAN
/// port (`None` for every other decision).
#[inline(always)]
pub fn decide_to(
    ingress: PortId,
    frame: &[u8],
    vlan: Option<VlanId>,
    fdb: &impl FdbLookup,
) -> (Decision, Option<Vtep>) {
    let (dst, _) = match classify_in(frame, vlan) {
        Ok(keys) => keys,
        Err(reason) => return (Decision::Drop(reason), None),
    };
    let decision = match dst.mac.kind() {
        MacKind::Reserved if dst.mac == MacAddr::BRIDGE_GROUP => Decision::Flood,
        MacKind::Reserved => Decision::Drop(DropReason::Reserved),
        MacKind::Broadcast | MacKind::Multicast => Decision::Flood,
        // A zero destination is not a station anyone can learn: flooding it
        // is what an unknown unicast gets.
        MacKind::Unicast | MacKind::Zero => match fdb.locate_vtep(&dst) {
            Some((Location::Local(_), _)) => Decision::Drop(DropReason::Local),
            Some((Location::Port(port), _)) if port == ingress => {
                Decision::Drop(DropReason::SamePort)
            }
            Some((Location::Port(port), vtep)) => return (Decision::Unicast(port), vtep),
            // The host's addresses are local in every VLAN, as on a Linux
            // bridge without VLAN filtering.
            None if dst.vlan != 0
                && matches!(
                    fdb.locate(&FdbKey::new(0, dst.mac)),
                    Some(Location::Local(_))
                ) =>
            {
                Decision::Drop(DropReason::Local)
            }
            None => Decision::Flood,
        },
    };
    (decision, None)
}
