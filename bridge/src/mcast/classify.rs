//! The forwarding path's question about a multicast frame: flood it, send
//! it to a group's members, to the router ports only, or drop it; and
//! whether the snooping state machine must see it.
//!
//! One parser serves both sides: [`classify`] on the workers, and
//! [`Snooping::receive`](super::Snooping::receive), which parses the
//! control frames again on the control plane. It validates what Linux's
//! `ip_mc_check_igmp` and `ipv6_mc_check_mld` validate, and what they
//! refuse is [`Forward::Drop`]: `br_multicast_rcv` returns their error
//! and the bridge drops the frame.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::checksum::checksum;
use crate::wire::igmp::{self, IgmpPacket};
use crate::wire::mld::{self, MldPacket};
use crate::wire::tag::{TAG_LEN, TAG_OFFSET};
use crate::wire::{ipv4, ipv6, EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, MacAddr};

/// An IP family, and with it the snooping protocol: IGMP for IPv4, MLD for
/// IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4 and IGMP.
    V4,
    /// IPv6 and MLD.
    V6,
}

impl Family {
    /// Both families, in order.
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    /// The family of `addr`.
    pub const fn of(addr: IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// "ipv4" or "ipv6".
    pub const fn name(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }

    /// 0 or 1, for per-family arrays.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

/// A multicast group within a VLAN: what the group table is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The VLAN the bridge has the frame in (0 when untagged).
    pub vlan: u16,
    /// The group address.
    pub group: IpAddr,
}

impl GroupKey {
    /// `group` in `vlan`.
    pub const fn new(vlan: u16, group: IpAddr) -> GroupKey {
        GroupKey { vlan, group }
    }

    /// The group's family.
    pub const fn family(&self) -> Family {
        Family::of(self.group)
    }
}

/// Where a multicast frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Forward {
    /// Everywhere, as without snooping.
    Flood,
    /// To the group's member ports and the family's router ports, once a
    /// querier is present for the family; flooded until then.
    Group(GroupKey),
    /// To the family's router ports only, once a querier is present;
    /// flooded until then. Linux's `mrouters_only` for reports.
    Routers(Family),
    /// Nowhere: a malformed IP header, IGMP or MLD message, which Linux
    /// drops while snooping.
    Drop,
}

/// The answer for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Classified {
    /// Where it goes.
    pub forward: Forward,
    /// Whether to hand a copy to [`Snooping::receive`](super::Snooping::receive).
    pub control: bool,
}

/// Classifies a whole Ethernet frame (with up to two VLAN tags, 802.1Q or
/// 802.1ad) that the bridge has in `vlan`. Never panics and never
/// allocates; it reads the headers and, for IGMP and MLD messages, sums
/// their checksum.
///
/// - Not IPv4 or IPv6, a destination MAC that is not the IP destination's
///   multicast MAC, or an IP destination that is not multicast: flood.
/// - A malformed IPv4 or IPv6 header, or a malformed IGMP or MLD message
///   (bad checksum, too short, a general query not to all-systems or
///   all-nodes, an MLD query from other than a link-local address, group
///   records that do not fit): drop.
/// - IGMPv1, IGMPv2 and MLDv1 reports: the router ports, and control.
///   Queries, leaves, dones, IGMPv3 and MLDv2 reports: flood, and control.
/// - Any other packet to 224.0.0.0/24 or ff02::1: flood; to any other
///   group: the group. IPv6 packets are MLD only behind a Hop-by-Hop
///   header, as Linux has it.
pub fn classify(frame: &[u8], vlan: u16) -> Classified {
    let (forward, control) = match parse(frame) {
        Packet::Other => (Forward::Flood, false),
        Packet::Malformed(_) => (Forward::Drop, false),
        Packet::Data(group) if is_local(group) => (Forward::Flood, false),
        Packet::Data(group) => (Forward::Group(GroupKey::new(vlan, group)), false),
        Packet::Igmp(m) => match m.msg.msg_type() {
            igmp::kind::V1_REPORT | igmp::kind::V2_REPORT => (Forward::Routers(Family::V4), true),
            _ => (Forward::Flood, true),
        },
        Packet::Mld(m) => match m.msg.msg_type() {
            mld::kind::V1_REPORT => (Forward::Routers(Family::V6), true),
            _ => (Forward::Flood, true),
        },
    };
    Classified { forward, control }
}

/// Groups that snooping leaves alone: IPv4's local network control block
/// 224.0.0.0/24, and IPv6's link-local all-nodes ff02::1 (only that one,
/// as Linux's `ipv6_addr_is_ll_all_nodes`). Their traffic floods and they
/// are never joined.
pub(crate) fn is_local(group: IpAddr) -> bool {
    match group {
        IpAddr::V4(g) => g.octets()[..3] == [224, 0, 0],
        IpAddr::V6(g) => g == mld::ALL_NODES,
    }
}

/// What a frame is, to snooping.
#[derive(Debug)]
pub(crate) enum Packet<'a> {
    /// Not an IP multicast packet snooping looks at.
    Other,
    /// Broken where Linux's checks refuse it.
    Malformed(Family),
    /// A multicast packet that is not a snooping message, to this group.
    Data(IpAddr),
    /// An IGMP message snooping acts on.
    Igmp(Igmp<'a>),
    /// An MLD message snooping acts on.
    Mld(Mld<'a>),
}

/// A checked IGMP message and the addresses of its packet.
#[derive(Debug)]
pub(crate) struct Igmp<'a> {
    pub src: Ipv4Addr,
    pub msg: IgmpPacket<&'a [u8]>,
}

/// A checked MLD message and the addresses of its packet.
#[derive(Debug)]
pub(crate) struct Mld<'a> {
    pub src: Ipv6Addr,
    pub msg: MldPacket<&'a [u8]>,
}

/// Up to this many VLAN tags are skipped to the EtherType.
const MAX_TAGS: usize = 2;

/// IPv6 extension headers (RFC 8200 4) that Linux's `ipv6_skip_exthdr`
/// walks.
mod next {
    pub const HOP_BY_HOP: u8 = 0;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const AUTH: u8 = 51;
    pub const NONE: u8 = 59;
    pub const DEST_OPTS: u8 = 60;
}

/// Parses `frame` as far as snooping needs.
pub(crate) fn parse(frame: &[u8]) -> Packet<'_> {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Packet::Other;
    };
    let dst_mac = eth.dst_addr();
    // Linux snoops frames to group addresses other than broadcast.
    if !dst_mac.is_group() || dst_mac.is_broadcast() {
        return Packet::Other;
    }
    match network(frame) {
        Some((EtherType::IPV4, ip)) => parse_ipv4(dst_mac, ip),
        Some((EtherType::IPV6, ip)) => parse_ipv6(dst_mac, ip),
        _ => Packet::Other,
    }
}

/// The EtherType after up to [`MAX_TAGS`] VLAN tags, and the bytes after it.
fn network(frame: &[u8]) -> Option<(EtherType, &[u8])> {
    let mut at = TAG_OFFSET;
    for _ in 0..=MAX_TAGS {
        let ethertype = EtherType(crate::wire::be_u16(frame.get(at..at + 2)?, 0..2));
        if !ethertype.is_vlan_tag() {
            return Some((ethertype, frame.get(at + 2..)?));
        }
        at += TAG_LEN;
    }
    None
}

/// An IPv4 packet: Linux's `ip_mc_check_igmp`.
fn parse_ipv4(dst_mac: MacAddr, ip: &[u8]) -> Packet<'_> {
    let malformed = Packet::Malformed(Family::V4);
    let Ok(packet) = Ipv4Packet::new_checked(ip) else {
        return malformed;
    };
    let header_len = packet.header_len();
    if packet.version() != 4 || header_len < ipv4::HEADER_LEN || ip.len() < header_len {
        return malformed;
    }
    if checksum(&ip[..header_len]) != 0 {
        return malformed;
    }
    let total = usize::from(packet.total_len());
    if total < header_len || total > ip.len() {
        return malformed;
    }
    let dst = Ipv4Addr::from(packet.dst_addr());
    if !dst.is_multicast() || igmp::multicast_mac(dst) != dst_mac {
        return Packet::Other;
    }
    if packet.protocol() != igmp::PROTOCOL {
        return Packet::Data(dst.into());
    }
    let Ok(msg) = IgmpPacket::new_checked(&ip[header_len..total]) else {
        return malformed;
    };
    if !msg.verify_checksum() {
        return malformed;
    }
    match msg.msg_type() {
        igmp::kind::QUERY => {
            let len = msg.msg_len();
            if len != igmp::HEADER_LEN && len < igmp::V3_QUERY_LEN {
                return malformed;
            }
            // RFC 2236 and 3376: general queries go to all-systems.
            if msg.group_addr().is_unspecified() && dst != igmp::ALL_SYSTEMS {
                return malformed;
            }
        }
        igmp::kind::V1_REPORT | igmp::kind::V2_REPORT | igmp::kind::LEAVE => {}
        igmp::kind::V3_REPORT => {
            if msg.records().any(|r| r.is_err()) {
                return malformed;
            }
        }
        // Other IGMP messages (DVMRP, mtrace...) are traffic like any other.
        _ => return Packet::Data(dst.into()),
    }
    Packet::Igmp(Igmp {
        src: Ipv4Addr::from(packet.src_addr()),
        msg,
    })
}

/// An IPv6 packet: Linux's `ipv6_mc_check_mld`.
fn parse_ipv6(dst_mac: MacAddr, ip: &[u8]) -> Packet<'_> {
    let malformed = Packet::Malformed(Family::V6);
    let Ok(packet) = Ipv6Packet::new_checked(ip) else {
        return malformed;
    };
    let end = ipv6::HEADER_LEN + usize::from(packet.payload_len());
    // A zero payload length is a jumbogram's, which Linux refuses here.
    if packet.version() != 6 || end == ipv6::HEADER_LEN || end > ip.len() {
        return malformed;
    }
    let (Ok(src), Ok(dst)) = (
        <[u8; 16]>::try_from(packet.src_addr()),
        <[u8; 16]>::try_from(packet.dst_addr()),
    ) else {
        return malformed;
    };
    let dst_addr = Ipv6Addr::from(dst);
    if !dst_addr.is_multicast() || mld::multicast_mac(dst_addr) != dst_mac {
        return Packet::Other;
    }
    if packet.next_header() != next::HOP_BY_HOP {
        return Packet::Data(dst_addr.into());
    }
    let payload = &ip[ipv6::HEADER_LEN..end];
    let Some((next_header, at)) = skip_extension_headers(payload) else {
        return malformed;
    };
    if next_header != mld::ICMPV6 {
        return Packet::Data(dst_addr.into());
    }
    let Some(Ok(msg)) = payload.get(at..).map(MldPacket::new_checked) else {
        return malformed;
    };
    if !msg.verify_checksum(&src, &dst) {
        return malformed;
    }
    // Too short for MLD: some other ICMPv6 message.
    let Some(mcast) = msg.mcast_addr() else {
        return Packet::Data(dst_addr.into());
    };
    let src_addr = Ipv6Addr::from(src);
    match msg.msg_type() {
        mld::kind::QUERY => {
            // RFC 2710 and 3810: queries come from link-local addresses.
            if !is_link_local(src_addr) {
                return malformed;
            }
            let len = msg.msg_len();
            if len != mld::V1_LEN && len < mld::V2_QUERY_LEN {
                return malformed;
            }
            if mcast.is_unspecified() && dst_addr != mld::ALL_NODES {
                return malformed;
            }
        }
        mld::kind::V1_REPORT | mld::kind::DONE => {}
        mld::kind::V2_REPORT => {
            if msg.records().any(|r| r.is_err()) {
                return malformed;
            }
        }
        _ => return Packet::Data(dst_addr.into()),
    }
    Packet::Mld(Mld { src: src_addr, msg })
}

/// fe80::/10.
fn is_link_local(addr: Ipv6Addr) -> bool {
    addr.segments()[0] & 0xffc0 == 0xfe80
}

/// Walks the extension headers at the start of `payload`, the first a
/// Hop-by-Hop header, as Linux's `ipv6_skip_exthdr`: the protocol after
/// them and where it starts (which may be past the payload: only an
/// extension header's first two bytes, and a fragment header's offset,
/// are read); `None` for an extension header cut short there or for No
/// Next Header. Each header takes at least 8 bytes, so the walk ends.
/// A fragment other than the first ends it at the fragment header.
fn skip_extension_headers(payload: &[u8]) -> Option<(u8, usize)> {
    let mut next_header = next::HOP_BY_HOP;
    let mut at = 0;
    loop {
        if !matches!(
            next_header,
            next::HOP_BY_HOP
                | next::ROUTING
                | next::DEST_OPTS
                | next::AUTH
                | next::FRAGMENT
                | next::NONE
        ) {
            // An upper-layer header: its bytes are its parser's business.
            return Some((next_header, at));
        }
        let header = payload.get(at..at + 2)?;
        let len = match next_header {
            next::HOP_BY_HOP | next::ROUTING | next::DEST_OPTS => (usize::from(header[1]) + 1) * 8,
            next::AUTH => (usize::from(header[1]) + 2) * 4,
            next::FRAGMENT => {
                let offset = crate::wire::be_u16(payload.get(at + 2..at + 4)?, 0..2);
                if offset & !0x7 != 0 {
                    return Some((next_header, at));
                }
                8
            }
            next::NONE => return None,
            _ => return Some((next_header, at)),
        };
        next_header = header[0];
        at += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_groups() {
        assert!(is_local("224.0.0.1".parse().unwrap()));
        assert!(is_local("224.0.0.251".parse().unwrap()));
        assert!(!is_local("224.0.1.1".parse().unwrap()));
        assert!(!is_local("239.1.1.1".parse().unwrap()));
        assert!(is_local("ff02::1".parse().unwrap()));
        assert!(!is_local("ff02::2".parse().unwrap()));
        assert!(!is_local("ff02::fb".parse().unwrap()));
        assert!(!is_local("ff01::1".parse().unwrap()));
    }

    #[test]
    fn link_local_sources() {
        assert!(is_link_local("fe80::1".parse().unwrap()));
        assert!(is_link_local("febf::1".parse().unwrap()));
        assert!(!is_link_local("fec0::1".parse().unwrap()));
        assert!(!is_link_local("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn extension_headers_are_walked() {
        // Hop-by-Hop (8 bytes) -> destination options (16) -> ICMPv6.
        let mut payload = vec![0u8; 24 + 8];
        payload[0] = next::DEST_OPTS;
        payload[8] = mld::ICMPV6;
        payload[9] = 1;
        assert_eq!(skip_extension_headers(&payload), Some((mld::ICMPV6, 24)));
        // Cut inside the second header: its length byte is missing.
        assert_eq!(skip_extension_headers(&payload[..9]), None);
        // No Next Header after Hop-by-Hop.
        payload[0] = next::NONE;
        assert_eq!(skip_extension_headers(&payload), None);
        // A later fragment stops the walk at the fragment header.
        payload[0] = next::FRAGMENT;
        payload[8..12].copy_from_slice(&[mld::ICMPV6, 0, 0x00, 0x08]);
        assert_eq!(skip_extension_headers(&payload), Some((next::FRAGMENT, 8)));
        // A first fragment is skipped.
        payload[10..12].copy_from_slice(&[0, 1]);
        assert_eq!(skip_extension_headers(&payload), Some((mld::ICMPV6, 16)));
    }

    #[test]
    fn an_upper_layer_header_past_the_payload_is_not_read() {
        // Hop-by-Hop filling the payload, then UDP with no bytes left: data
        // to Linux (`ipv6_skip_exthdr` reads extension headers only), not a
        // malformed packet.
        let mut payload = [0u8; 8];
        payload[0] = 17;
        assert_eq!(skip_extension_headers(&payload), Some((17, 8)));
        // Hop-by-Hop claiming more than the payload holds, then UDP.
        payload[1] = 255;
        assert_eq!(skip_extension_headers(&payload), Some((17, 2048)));
        // The same before ICMPv6: found where it cannot be, so malformed.
        payload[0] = mld::ICMPV6;
        assert_eq!(skip_extension_headers(&payload), Some((mld::ICMPV6, 2048)));
        // An extension header cut short stays `None`.
        payload[0] = next::ROUTING;
        assert_eq!(skip_extension_headers(&payload), None);
    }

    #[test]
    fn too_many_tags_are_not_looked_into() {
        let mut frame = vec![0x01, 0x00, 0x5e, 0, 0, 1, 2, 0, 0, 0, 0, 1];
        for _ in 0..3 {
            frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        frame.extend_from_slice(&[0x08, 0x00]);
        assert_eq!(network(&frame), None);
        assert_eq!(network(&frame[4..]).map(|(t, _)| t), Some(EtherType::IPV4));
    }
}
