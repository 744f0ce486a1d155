//! The queries the bridge sends as querier, byte for byte as Linux's
//! `br_ip4_multicast_alloc_query` and `br_ip6_multicast_alloc_query`
//! build them in IGMPv2 and MLDv1 mode.
//!
//! Linux sends group-specific queries, like general ones, to all-systems
//! (224.0.0.1) or all-nodes (ff02::1) with the group in the message, and
//! so do these builders: the destination is a parameter only so that
//! tests can build the queries other queriers send.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::wire::igmp::{self, IgmpPacket};
use crate::wire::mld::{self, MldPacket};
use crate::wire::{EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, MacAddr};

/// The shortest Ethernet frame without its FCS; shorter queries are
/// padded to it, as a NIC would.
const MIN_FRAME: usize = 60;

const ETH_LEN: usize = EthernetFrame::<&[u8]>::HEADER_LEN;

/// An IPv4 header with the Router Alert option (RFC 2113): 24 bytes.
const IPV4_RA_LEN: usize = 24;

/// An IPv6 Hop-by-Hop header with Router Alert (RFC 2711) for MLD: next
/// header ICMPv6, length 0 (8 bytes), option 5 of length 2 and value 0,
/// then two Pad1 options, as Linux writes it.
const HOP_BY_HOP_RA: [u8; 8] = [mld::ICMPV6, 0, 5, 2, 0, 0, 0, 0];

/// The IPv6 link-local address Linux's default address generation gives
/// an interface with `mac`: fe80:: and the modified EUI-64 (RFC 4291
/// appendix A: ff:fe in the middle, the universal/local bit flipped). The
/// source of the bridge's MLD queries.
pub fn link_local(mac: MacAddr) -> Ipv6Addr {
    let m = mac.0;
    let mut addr = [0u8; 16];
    addr[..2].copy_from_slice(&[0xfe, 0x80]);
    addr[8..].copy_from_slice(&[m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
    Ipv6Addr::from(addr)
}

/// An IGMPv2 membership query from `src` (MAC; the IPv4 source is
/// 0.0.0.0, Linux's default without `multicast_query_use_ifaddr`) to
/// `dst`: general when `group` is 0.0.0.0, group-specific otherwise. Its
/// Max Resp Time is `max_resp` in tenths of a second, at most 255. TTL 1,
/// DSCP CS6, don't fragment, Router Alert; 60 bytes with padding.
pub fn igmp_query(src: MacAddr, dst: Ipv4Addr, group: Ipv4Addr, max_resp: Duration) -> Vec<u8> {
    let ip_len = IPV4_RA_LEN + igmp::HEADER_LEN;
    let mut frame = vec![0u8; (ETH_LEN + ip_len).max(MIN_FRAME)];
    ethernet(&mut frame, igmp::multicast_mac(dst), src, EtherType::IPV4);

    let ip = &mut frame[ETH_LEN..ETH_LEN + ip_len];
    ip[..IPV4_RA_LEN].copy_from_slice(&[
        0x46,
        0xc0,
        0,
        0, // version 4, IHL 6; CS6; total length below
        0,
        0,
        0x40,
        0, // id 0, don't fragment
        1,
        igmp::PROTOCOL,
        0,
        0, // TTL 1, IGMP, checksum below
        0,
        0,
        0,
        0, // source 0.0.0.0
        0,
        0,
        0,
        0, // destination below
        0x94,
        0x04,
        0,
        0, // Router Alert
    ]);
    ip[16..20].copy_from_slice(&dst.octets());
    let mut header = Ipv4Packet::new_unchecked(&mut ip[..IPV4_RA_LEN]);
    header.set_total_len(ip_len as u16);
    let sum = crate::wire::checksum::checksum(header.into_inner());
    Ipv4Packet::new_unchecked(&mut ip[..IPV4_RA_LEN]).set_checksum(sum);

    let mut msg = IgmpPacket::new_unchecked(&mut ip[IPV4_RA_LEN..]);
    msg.set_msg_type(igmp::kind::QUERY);
    let tenths = max_resp.as_millis() / 100;
    msg.set_max_resp_code(u8::try_from(tenths).unwrap_or(u8::MAX));
    msg.set_group_addr(group);
    msg.fill_checksum();
    frame
}

/// An MLDv1 query from `src` (MAC) and `src_ip` (the bridge's link-local
/// address, [`link_local`]) to `dst`: general when `group` is ::,
/// multicast-address-specific otherwise. Its Maximum Response Delay is
/// `max_resp` in milliseconds, at most 65535. Hop limit 1, a Hop-by-Hop
/// header with Router Alert; 86 bytes.
pub fn mld_query(
    src: MacAddr,
    src_ip: Ipv6Addr,
    dst: Ipv6Addr,
    group: Ipv6Addr,
    max_resp: Duration,
) -> Vec<u8> {
    let payload_len = HOP_BY_HOP_RA.len() + mld::V1_LEN;
    let mut frame = vec![0u8; ETH_LEN + crate::wire::ipv6::HEADER_LEN + payload_len];
    ethernet(&mut frame, mld::multicast_mac(dst), src, EtherType::IPV6);

    let ip = &mut frame[ETH_LEN..];
    ip[..8].copy_from_slice(&[0x60, 0, 0, 0, 0, 0, 0, 1]); // next header 0, hop limit 1
    ip[8..24].copy_from_slice(&src_ip.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    Ipv6Packet::new_unchecked(&mut ip[..]).set_payload_len(payload_len as u16);
    let payload = &mut ip[crate::wire::ipv6::HEADER_LEN..];
    payload[..HOP_BY_HOP_RA.len()].copy_from_slice(&HOP_BY_HOP_RA);

    let mut msg = MldPacket::new_unchecked(&mut payload[HOP_BY_HOP_RA.len()..]);
    msg.set_msg_type(mld::kind::QUERY);
    let ms = max_resp.as_millis();
    msg.set_max_resp_code(u16::try_from(ms).unwrap_or(u16::MAX));
    msg.set_mcast_addr(group);
    msg.fill_checksum(&src_ip.octets(), &dst.octets());
    frame
}

fn ethernet(frame: &mut [u8], dst: MacAddr, src: MacAddr, ethertype: EtherType) {
    let mut eth = EthernetFrame::new_unchecked(frame);
    eth.set_dst_addr(dst);
    eth.set_src_addr(src);
    eth.set_ethertype(ethertype);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcast::classify::{classify, parse, Forward, Packet};

    const MAC: MacAddr = MacAddr([0x02, 0x00, 0x00, 0xab, 0xcd, 0xef]);

    #[test]
    fn eui64_link_local() {
        assert_eq!(
            link_local(MAC),
            "fe80::ff:feab:cdef".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            link_local(MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])),
            "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn igmp_general_query_bytes() {
        let frame = igmp_query(
            MAC,
            igmp::ALL_SYSTEMS,
            Ipv4Addr::UNSPECIFIED,
            Duration::from_secs(10),
        );
        assert_eq!(frame.len(), 60);
        #[rustfmt::skip]
        let expected: [u8; 46] = [
            0x01, 0x00, 0x5e, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0xab, 0xcd, 0xef, 0x08, 0x00,
            0x46, 0xc0, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0x04, 0x17,
            0x00, 0x00, 0x00, 0x00, 0xe0, 0x00, 0x00, 0x01, 0x94, 0x04, 0x00, 0x00,
            0x11, 0x64, 0xee, 0x9b, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(&frame[..46], &expected[..]);
        assert!(frame[46..].iter().all(|&b| b == 0));
    }

    #[test]
    fn igmp_queries_parse_back() {
        let group = Ipv4Addr::new(239, 1, 1, 1);
        let frame = igmp_query(MAC, igmp::ALL_SYSTEMS, group, Duration::from_secs(1));
        let Packet::Igmp(m) = parse(&frame) else {
            panic!("not a query: {:?}", parse(&frame));
        };
        assert_eq!(m.src, Ipv4Addr::UNSPECIFIED);
        assert_eq!(m.msg.msg_type(), igmp::kind::QUERY);
        assert_eq!(m.msg.max_resp_code(), 10);
        assert_eq!(m.msg.group_addr(), group);
        assert_eq!(classify(&frame, 0).forward, Forward::Flood);
        // Long intervals saturate.
        let frame = igmp_query(MAC, igmp::ALL_SYSTEMS, group, Duration::from_secs(100));
        assert_eq!(frame[14 + 24 + 1], 255);
    }

    #[test]
    fn mld_general_query_bytes() {
        let src_ip = link_local(MAC);
        let frame = mld_query(
            MAC,
            src_ip,
            mld::ALL_NODES,
            Ipv6Addr::UNSPECIFIED,
            Duration::from_secs(10),
        );
        assert_eq!(frame.len(), 86);
        assert_eq!(&frame[..6], &[0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        assert_eq!(&frame[14..22], &[0x60, 0, 0, 0, 0, 32, 0, 1]);
        assert_eq!(&frame[22..38], &src_ip.octets());
        assert_eq!(&frame[38..54], &mld::ALL_NODES.octets());
        assert_eq!(&frame[54..62], &HOP_BY_HOP_RA);
        assert_eq!(&frame[62..64], &[130, 0]);
        assert_eq!(&frame[66..70], &[0x27, 0x10, 0, 0]);
        assert!(frame[70..].iter().all(|&b| b == 0));
        let Packet::Mld(m) = parse(&frame) else {
            panic!("not a query: {:?}", parse(&frame));
        };
        assert_eq!(m.src, src_ip);
        assert_eq!(m.msg.max_resp_code(), 10000);
        assert_eq!(m.msg.mcast_addr(), Some(Ipv6Addr::UNSPECIFIED));
    }

    #[test]
    fn mld_specific_queries_parse_back() {
        let group: Ipv6Addr = "ff05::1:3".parse().unwrap();
        let frame = mld_query(
            MAC,
            link_local(MAC),
            mld::ALL_NODES,
            group,
            Duration::from_secs(1),
        );
        let Packet::Mld(m) = parse(&frame) else {
            panic!("not a query");
        };
        assert_eq!(m.msg.mcast_addr(), Some(group));
        assert_eq!(m.msg.max_resp_code(), 1000);
        // Another querier's, to the group itself.
        let frame = mld_query(
            MAC,
            "fe80::1".parse().unwrap(),
            group,
            group,
            Duration::from_secs(70),
        );
        assert_eq!(&frame[..6], &[0x33, 0x33, 0, 1, 0, 3]);
        assert!(matches!(parse(&frame), Packet::Mld(_)));
        assert_eq!(frame[66..68], [0xff, 0xff], "saturated at 65535 ms");
    }
}
