//! Why a frame is not forwarded: one reason per rule, each produced by one
//! stage of the pipeline (the table in docs/design.md) and counted per
//! ingress port.

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
