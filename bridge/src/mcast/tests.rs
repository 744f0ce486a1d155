//! Scenarios: the classification table on literal frames, truncated and
//! damaged input, and the state machine driven through time against
//! Linux's behaviour.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use super::query::{igmp_query, link_local, mld_query};
use super::*;
use crate::port_id::{PortId, PortSet};
use crate::wire::checksum::{checksum, checksum_v6};
use crate::wire::igmp::{self, IgmpPacket};
use crate::wire::mld::{self, MldPacket};
use crate::wire::MacAddr;

// Literal frames.

/// An IGMPv2 report for 239.1.1.1 from 10.0.0.10 (02:00:00:00:00:0a), as
/// a host sends it: Router Alert, TTL 1, padded to 60 bytes.
#[rustfmt::skip]
static IGMPV2_REPORT: [u8; 60] = [
    0x01, 0x00, 0x5e, 0x01, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x08, 0x00,
    0x46, 0x00, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0xea, 0xcb,
    0x0a, 0x00, 0x00, 0x0a, 0xef, 0x01, 0x01, 0x01, 0x94, 0x04, 0x00, 0x00,
    0x16, 0x00, 0xf9, 0xfc, 0xef, 0x01, 0x01, 0x01,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// An IGMPv3 report from 10.0.0.10 to 224.0.0.22 with one record:
/// CHANGE_TO_INCLUDE {} for 239.1.1.1, a leave.
#[rustfmt::skip]
static IGMPV3_TO_IN_NONE: [u8; 60] = [
    0x01, 0x00, 0x5e, 0x00, 0x00, 0x16, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x08, 0x00,
    0x46, 0xc0, 0x00, 0x28, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0xf9, 0xef,
    0x0a, 0x00, 0x00, 0x0a, 0xe0, 0x00, 0x00, 0x16, 0x94, 0x04, 0x00, 0x00,
    0x22, 0x00, 0xea, 0xfb, 0x00, 0x00, 0x00, 0x01,
    0x03, 0x00, 0x00, 0x00, 0xef, 0x01, 0x01, 0x01,
    0, 0, 0, 0, 0, 0,
];

/// An MLDv1 report for ff05::1:3 from fe80::a (02:00:00:00:00:0a): a
/// Hop-by-Hop header with Router Alert (MLD) and a PadN, hop limit 1.
#[rustfmt::skip]
static MLDV1_REPORT: [u8; 86] = [
    0x33, 0x33, 0x00, 0x01, 0x00, 0x03, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x86, 0xdd,
    0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x01,
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a,
    0xff, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0x03,
    0x3a, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00,
    0x83, 0x00, 0x80, 0x0e, 0x00, 0x00, 0x00, 0x00,
    0xff, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0x03,
];

/// [`IGMPV2_REPORT`] with its IGMP checksum broken.
fn bad_checksum() -> Vec<u8> {
    let mut frame = IGMPV2_REPORT.to_vec();
    frame[40] ^= 0x01;
    frame
}

// Frame builders, for the scenarios.

const BRIDGE: MacAddr = MacAddr([0x02, 0xbb, 0, 0, 0, 1]);

fn host_mac(host: u8) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0, host])
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn key(vlan: u16, group: &str) -> GroupKey {
    GroupKey::new(vlan, group.parse::<IpAddr>().unwrap())
}

fn set(ports: &[u16]) -> PortSet {
    ports.iter().map(|&p| PortId(p)).collect()
}

/// An untagged IPv4 packet with Router Alert from `src_mac`/`src` to
/// `dst` (and its multicast MAC), valid checksum.
fn ipv4(src_mac: MacAddr, src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&igmp::multicast_mac(dst).0);
    frame.extend_from_slice(&src_mac.0);
    frame.extend_from_slice(&[0x08, 0x00]);
    let total = (24 + payload.len()) as u16;
    let mut header = vec![0x46, 0, 0, 0, 0, 0, 0x40, 0, 1, protocol, 0, 0];
    header[2..4].copy_from_slice(&total.to_be_bytes());
    header.extend_from_slice(&src.octets());
    header.extend_from_slice(&dst.octets());
    header.extend_from_slice(&[0x94, 0x04, 0, 0]);
    let sum = checksum(&header);
    header[10..12].copy_from_slice(&sum.to_be_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(payload);
    frame
}

/// An 8-byte IGMP message, checksum filled.
fn igmp_msg(kind: u8, code: u8, group: Ipv4Addr) -> Vec<u8> {
    let mut msg = vec![kind, code, 0, 0];
    msg.extend_from_slice(&group.octets());
    IgmpPacket::new_unchecked(&mut msg[..]).fill_checksum();
    msg
}

fn report(host: u8, group: &str) -> Vec<u8> {
    let g = v4(group);
    let msg = igmp_msg(igmp::kind::V2_REPORT, 0, g);
    ipv4(host_mac(host), Ipv4Addr::new(10, 0, 0, host), g, 2, &msg)
}

fn leave(host: u8, group: &str) -> Vec<u8> {
    let msg = igmp_msg(igmp::kind::LEAVE, 0, v4(group));
    ipv4(
        host_mac(host),
        Ipv4Addr::new(10, 0, 0, host),
        igmp::ALL_ROUTERS,
        2,
        &msg,
    )
}

/// An IGMPv2 query from another querier at `src`: general when `group` is
/// 0.0.0.0 (to 224.0.0.1), group-specific otherwise (to the group).
fn foreign_query(src: &str, group: &str, code: u8) -> Vec<u8> {
    let g = v4(group);
    let dst = if g.is_unspecified() {
        igmp::ALL_SYSTEMS
    } else {
        g
    };
    let msg = igmp_msg(igmp::kind::QUERY, code, g);
    ipv4(MacAddr([0x02, 0xee, 0, 0, 0, 1]), v4(src), dst, 2, &msg)
}

/// An IGMPv3 report with records of (type, group, sources).
fn v3_report(host: u8, records: &[(u8, &str, u16)]) -> Vec<u8> {
    let mut msg = vec![igmp::kind::V3_REPORT, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&(records.len() as u16).to_be_bytes());
    for &(kind, group, sources) in records {
        msg.extend_from_slice(&[kind, 0]);
        msg.extend_from_slice(&sources.to_be_bytes());
        msg.extend_from_slice(&v4(group).octets());
        for s in 0..sources {
            msg.extend_from_slice(&[10, 1, 0, s as u8]);
        }
    }
    IgmpPacket::new_unchecked(&mut msg[..]).fill_checksum();
    let src = Ipv4Addr::new(10, 0, 0, host);
    ipv4(host_mac(host), src, igmp::V3_REPORTS, 2, &msg)
}

/// A UDP packet to `dst` (checksums beside the point: none).
fn udp4(dst: &str) -> Vec<u8> {
    ipv4(
        host_mac(9),
        v4("10.0.0.9"),
        v4(dst),
        17,
        &[0x30, 0x39, 0x30, 0x39, 0, 8, 0, 0],
    )
}

/// An IPv6 packet from `src_mac`/`src` to `dst`: with `hop_by_hop`, the
/// ICMPv6 message `icmp` (its checksum filled) behind a Hop-by-Hop header
/// with Router Alert; without, `icmp` as a UDP payload.
fn ipv6(src_mac: MacAddr, src: Ipv6Addr, dst: Ipv6Addr, icmp: &[u8], hop_by_hop: bool) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&mld::multicast_mac(dst).0);
    frame.extend_from_slice(&src_mac.0);
    frame.extend_from_slice(&[0x86, 0xdd]);
    let mut message = icmp.to_vec();
    if hop_by_hop {
        MldPacket::new_unchecked(&mut message[..]).fill_checksum(&src.octets(), &dst.octets());
    }
    let ext = if hop_by_hop { 8 } else { 0 };
    let len = (ext + message.len()) as u16;
    let next = if hop_by_hop { 0 } else { 17 };
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&[next, 1]);
    frame.extend_from_slice(&src.octets());
    frame.extend_from_slice(&dst.octets());
    if hop_by_hop {
        frame.extend_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
    }
    frame.extend_from_slice(&message);
    frame
}

/// A 24-byte MLDv1 message.
fn mld_msg(kind: u8, delay: u16, addr: Ipv6Addr) -> Vec<u8> {
    let mut msg = vec![kind, 0, 0, 0];
    msg.extend_from_slice(&delay.to_be_bytes());
    msg.extend_from_slice(&[0, 0]);
    msg.extend_from_slice(&addr.octets());
    msg
}

fn host6(host: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, u16::from(host))
}

fn mld_report(host: u8, group: &str) -> Vec<u8> {
    let g = v6(group);
    let msg = mld_msg(mld::kind::V1_REPORT, 0, g);
    ipv6(host_mac(host), host6(host), g, &msg, true)
}

fn mld_done(host: u8, group: &str) -> Vec<u8> {
    let msg = mld_msg(mld::kind::DONE, 0, v6(group));
    ipv6(host_mac(host), host6(host), mld::ALL_ROUTERS, &msg, true)
}

fn mld_foreign_query(src: &str, group: &str, delay: u16) -> Vec<u8> {
    let g = v6(group);
    let dst = if g.is_unspecified() {
        mld::ALL_NODES
    } else {
        g
    };
    let msg = mld_msg(mld::kind::QUERY, delay, g);
    ipv6(MacAddr([0x02, 0xee, 0, 0, 0, 1]), v6(src), dst, &msg, true)
}

/// `frame` with a VLAN tag (`tpid`, `vid`) after its addresses.
fn tagged(frame: &[u8], tpid: u16, vid: u16) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    out.extend_from_slice(&tpid.to_be_bytes());
    out.extend_from_slice(&vid.to_be_bytes());
    out.extend_from_slice(&frame[12..]);
    out
}

// Classification.

fn class(forward: Forward, control: bool) -> Classified {
    Classified { forward, control }
}

#[test]
fn literal_frames_are_valid() {
    // The literals' checksums are right (the builders agree with them).
    assert_eq!(IGMPV2_REPORT[..46], report(10, "239.1.1.1")[..]);
    assert_eq!(
        IGMPV3_TO_IN_NONE[16..18],
        v3_report(10, &[(3, "239.1.1.1", 0)])[16..18],
        "the same length"
    );
    assert_eq!(checksum(&IGMPV3_TO_IN_NONE[14..38]), 0);
    assert_eq!(checksum(&IGMPV3_TO_IN_NONE[38..54]), 0);
    let src: [u8; 16] = MLDV1_REPORT[22..38].try_into().unwrap();
    let dst: [u8; 16] = MLDV1_REPORT[38..54].try_into().unwrap();
    assert_eq!(checksum_v6(&src, &dst, 58, &MLDV1_REPORT[62..]), 0);
}

#[test]
fn classification_table() {
    let other_ieee = {
        let mut arp = IGMPV2_REPORT.to_vec();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        arp
    };
    let mismatched_mac = {
        let mut frame = report(1, "239.1.1.1");
        frame[5] = 0x02;
        frame
    };
    let broadcast = {
        let mut frame = report(1, "239.1.1.1");
        frame[..6].fill(0xff);
        frame
    };
    let unicast_dst = {
        let mut frame = udp4("239.1.1.1");
        frame[30..34].copy_from_slice(&[10, 0, 0, 1]);
        let mut header = frame[14..38].to_vec();
        header[10..12].fill(0);
        let sum = checksum(&header);
        frame[24..26].copy_from_slice(&sum.to_be_bytes());
        frame
    };
    let bad_ip_checksum = {
        let mut frame = udp4("239.1.1.1");
        frame[24] ^= 0x10;
        frame
    };
    let general_to_group = {
        let msg = igmp_msg(igmp::kind::QUERY, 100, Ipv4Addr::UNSPECIFIED);
        ipv4(host_mac(1), v4("10.0.0.1"), v4("239.1.1.1"), 2, &msg)
    };
    let mld_query_global = {
        let msg = mld_msg(mld::kind::QUERY, 1000, Ipv6Addr::UNSPECIFIED);
        ipv6(host_mac(1), v6("2001:db8::1"), mld::ALL_NODES, &msg, true)
    };
    let mld_bad_checksum = {
        let mut frame = MLDV1_REPORT.to_vec();
        frame[85] ^= 1;
        frame
    };
    let dvmrp = ipv4(
        host_mac(1),
        v4("10.0.0.1"),
        v4("224.0.0.4"),
        2,
        &igmp_msg(0x13, 0, v4("0.0.0.0")),
    );
    let mtrace = ipv4(
        host_mac(1),
        v4("10.0.0.1"),
        v4("239.1.1.1"),
        2,
        &igmp_msg(0x1f, 0, v4("239.1.1.1")),
    );
    let udp6 = |dst: &str| {
        ipv6(
            host_mac(1),
            host6(1),
            v6(dst),
            &[0x30, 0x39, 0x30, 0x39, 0, 8, 0, 0],
            false,
        )
    };
    let echo_behind_hop_by_hop = {
        let mut echo = vec![128, 0, 0, 0, 0, 1, 0, 1];
        echo.extend_from_slice(&[0; 16]);
        ipv6(host_mac(1), host6(1), v6("ff05::1"), &echo, true)
    };
    let mld_v2_report = {
        let mut msg = vec![mld::kind::V2_REPORT, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0];
        msg.extend_from_slice(&v6("ff05::2").octets());
        ipv6(host_mac(1), host6(1), mld::V2_REPORTS, &msg, true)
    };

    let cases: Vec<(&str, Vec<u8>, Classified)> = vec![
        (
            "IGMPv2 report",
            IGMPV2_REPORT.to_vec(),
            class(Forward::Routers(Family::V4), true),
        ),
        (
            "802.1Q tagged report",
            tagged(&IGMPV2_REPORT, 0x8100, 7),
            class(Forward::Routers(Family::V4), true),
        ),
        (
            "802.1ad + 802.1Q tagged report",
            tagged(&tagged(&IGMPV2_REPORT, 0x8100, 7), 0x88a8, 100),
            class(Forward::Routers(Family::V4), true),
        ),
        (
            "IGMPv1 report",
            ipv4(
                host_mac(1),
                v4("10.0.0.1"),
                v4("239.1.1.1"),
                2,
                &igmp_msg(0x12, 0, v4("239.1.1.1")),
            ),
            class(Forward::Routers(Family::V4), true),
        ),
        (
            "IGMPv3 TO_IN {}",
            IGMPV3_TO_IN_NONE.to_vec(),
            class(Forward::Flood, true),
        ),
        (
            "IGMPv2 leave",
            leave(1, "239.1.1.1"),
            class(Forward::Flood, true),
        ),
        (
            "IGMP general query",
            foreign_query("10.0.0.1", "0.0.0.0", 100),
            class(Forward::Flood, true),
        ),
        (
            "IGMP group query",
            foreign_query("10.0.0.1", "239.1.1.1", 10),
            class(Forward::Flood, true),
        ),
        (
            "own IGMP query",
            igmp_query(
                BRIDGE,
                igmp::ALL_SYSTEMS,
                v4("0.0.0.0"),
                Duration::from_secs(10),
            ),
            class(Forward::Flood, true),
        ),
        (
            "MLDv1 report",
            MLDV1_REPORT.to_vec(),
            class(Forward::Routers(Family::V6), true),
        ),
        (
            "tagged MLDv1 report",
            tagged(&MLDV1_REPORT, 0x8100, 7),
            class(Forward::Routers(Family::V6), true),
        ),
        (
            "MLD done",
            mld_done(1, "ff05::1:3"),
            class(Forward::Flood, true),
        ),
        ("MLDv2 report", mld_v2_report, class(Forward::Flood, true)),
        (
            "MLD query",
            mld_foreign_query("fe80::1", "::", 10000),
            class(Forward::Flood, true),
        ),
        (
            "own MLD query",
            mld_query(
                BRIDGE,
                link_local(BRIDGE),
                mld::ALL_NODES,
                Ipv6Addr::UNSPECIFIED,
                Duration::from_secs(10),
            ),
            class(Forward::Flood, true),
        ),
        (
            "UDP to 239.1.1.1",
            udp4("239.1.1.1"),
            class(Forward::Group(key(7, "239.1.1.1")), false),
        ),
        (
            "tagged UDP to 239.1.1.1",
            tagged(&udp4("239.1.1.1"), 0x8100, 7),
            class(Forward::Group(key(7, "239.1.1.1")), false),
        ),
        (
            "UDP to 224.0.0.251 (mDNS)",
            udp4("224.0.0.251"),
            class(Forward::Flood, false),
        ),
        (
            "UDP to 224.0.1.1",
            udp4("224.0.1.1"),
            class(Forward::Group(key(7, "224.0.1.1")), false),
        ),
        ("DVMRP to 224.0.0.4", dvmrp, class(Forward::Flood, false)),
        (
            "other IGMP type to a group",
            mtrace,
            class(Forward::Group(key(7, "239.1.1.1")), false),
        ),
        (
            "UDP to ff02::1",
            udp6("ff02::1"),
            class(Forward::Flood, false),
        ),
        (
            "UDP to ff02::fb (mDNS)",
            udp6("ff02::fb"),
            class(Forward::Group(key(7, "ff02::fb")), false),
        ),
        (
            "UDP to ff05::1:3",
            udp6("ff05::1:3"),
            class(Forward::Group(key(7, "ff05::1:3")), false),
        ),
        (
            "ICMPv6 echo behind Hop-by-Hop",
            echo_behind_hop_by_hop,
            class(Forward::Group(key(7, "ff05::1")), false),
        ),
        ("ARP", other_ieee, class(Forward::Flood, false)),
        (
            "MAC not the group's",
            mismatched_mac,
            class(Forward::Flood, false),
        ),
        ("broadcast MAC", broadcast, class(Forward::Flood, false)),
        (
            "unicast IP destination",
            unicast_dst,
            class(Forward::Flood, false),
        ),
        (
            "bad IGMP checksum",
            bad_checksum(),
            class(Forward::Drop, false),
        ),
        (
            "bad IPv4 header checksum",
            bad_ip_checksum,
            class(Forward::Drop, false),
        ),
        (
            "general query not to 224.0.0.1",
            general_to_group,
            class(Forward::Drop, false),
        ),
        (
            "MLD query from a global address",
            mld_query_global,
            class(Forward::Drop, false),
        ),
        (
            "bad ICMPv6 checksum",
            mld_bad_checksum,
            class(Forward::Drop, false),
        ),
        ("empty", Vec::new(), class(Forward::Flood, false)),
    ];
    for (name, frame, expected) in cases {
        assert_eq!(classify(&frame, 7), expected, "{name}");
    }
}

#[test]
fn truncated_and_damaged_frames_never_panic() {
    let samples: Vec<Vec<u8>> = vec![
        IGMPV2_REPORT.to_vec(),
        IGMPV3_TO_IN_NONE.to_vec(),
        MLDV1_REPORT.to_vec(),
        tagged(&tagged(&MLDV1_REPORT, 0x8100, 3), 0x88a8, 4),
        v3_report(1, &[(2, "239.1.1.1", 3), (6, "239.2.2.2", 1)]),
        foreign_query("10.0.0.1", "0.0.0.0", 100),
        mld_foreign_query("fe80::1", "::", 1000),
        igmp_query(
            BRIDGE,
            igmp::ALL_SYSTEMS,
            v4("239.1.1.1"),
            Duration::from_secs(1),
        ),
        udp4("239.1.1.1"),
    ];
    let t0 = Instant::now();
    let mut snooping = Snooping::new(
        SnoopConfig {
            querier: true,
            ..SnoopConfig::default()
        },
        BRIDGE,
        t0,
    );
    snooping.add_port(PortId(1), RouterMode::Learned, false, t0);
    for sample in &samples {
        for len in 0..=sample.len() {
            let prefix = &sample[..len];
            let _ = classify(prefix, 1);
            snooping.receive(PortId(1), 1, prefix, t0);
        }
        for at in 0..sample.len() {
            for bit in [0x01, 0x80] {
                let mut damaged = sample.clone();
                damaged[at] ^= bit;
                let _ = classify(&damaged, 1);
                snooping.receive(PortId(1), 1, &damaged, t0);
            }
        }
    }
    assert!(snooping.stats().igmp_parse_errors > 0);
    assert!(snooping.stats().mld_parse_errors > 0);
}

#[test]
fn every_prefix_of_the_report_is_dropped_or_flooded() {
    // Until the IGMP message is whole: the IP header fits but the total
    // length does not, or the header itself does not.
    for len in 15..46 {
        assert_eq!(
            classify(&IGMPV2_REPORT[..len], 0).forward,
            Forward::Drop,
            "{len}"
        );
    }
    for len in 0..14 {
        assert_eq!(
            classify(&IGMPV2_REPORT[..len], 0).forward,
            Forward::Flood,
            "{len}"
        );
    }
    for len in 46..=60 {
        assert_eq!(
            classify(&IGMPV2_REPORT[..len], 0).forward,
            Forward::Routers(Family::V4)
        );
    }
}

// The state machine.

/// A bridge's snooping, driven through time, its actions applied to a
/// table as a control plane would.
struct Sim {
    s: Snooping,
    t0: Instant,
    now: Instant,
    table: GroupTable<locks::Rwlock>,
    /// Actions not yet looked at, with their time since `t0`.
    log: Vec<(Duration, Action)>,
}

impl Sim {
    /// Snooping on ports 1 to 3 (Learned routers, no fast leave).
    fn new(config: SnoopConfig) -> Sim {
        let t0 = Instant::now();
        let mut sim = Sim {
            s: Snooping::new(config, BRIDGE, t0),
            t0,
            now: t0,
            table: GroupTable::new(),
            log: Vec::new(),
        };
        for p in 1..=3 {
            sim.s.add_port(PortId(p), RouterMode::Learned, false, t0);
        }
        sim.collect();
        sim
    }

    fn querier() -> Sim {
        Sim::new(SnoopConfig {
            querier: true,
            ..SnoopConfig::default()
        })
    }

    fn collect(&mut self) {
        let at = self.now - self.t0;
        for action in self.s.take_actions() {
            self.table.apply(&action);
            self.log.push((at, action));
        }
    }

    /// Runs the clock to `secs` after the start, ticking at every deadline
    /// on the way, as a control loop would.
    fn at(&mut self, secs: f64) {
        let target = self.t0 + Duration::from_secs_f64(secs);
        assert!(target >= self.now, "time runs forward");
        while let Some(deadline) = self.s.next_deadline() {
            if deadline > target {
                break;
            }
            self.now = self.now.max(deadline);
            self.s.tick(self.now);
            self.collect();
        }
        self.now = target;
        self.s.tick(target);
        self.collect();
    }

    fn rx(&mut self, port: u16, frame: &[u8]) {
        self.s.receive(PortId(port), 0, frame, self.now);
        self.collect();
    }

    /// The actions since the last call.
    fn take(&mut self) -> Vec<(Duration, Action)> {
        std::mem::take(&mut self.log)
    }

    /// The queries sent since the last call: time, port, frame.
    fn sends(&mut self) -> Vec<(Duration, Option<PortId>, Vec<u8>)> {
        self.take()
            .into_iter()
            .filter_map(|(at, a)| match a {
                Action::Send { port, frame } => Some((at, port, frame)),
                _ => None,
            })
            .collect()
    }

    fn members(&self, group: &str) -> PortSet {
        self.table
            .read(|r| r.members(&key(0, group)))
            .unwrap_or_default()
    }

    fn secs(&self, secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What kind of query a sent frame is: family, group, max response.
fn query_of(frame: &[u8]) -> (Family, IpAddr, Duration) {
    if frame[12..14] == [0x08, 0x00] {
        let msg = IgmpPacket::new_checked(&frame[38..46]).unwrap();
        assert_eq!(msg.msg_type(), igmp::kind::QUERY);
        assert!(msg.verify_checksum());
        let code = u64::from(msg.max_resp_code());
        (Family::V4, msg.group_addr().into(), ms(code * 100))
    } else {
        let msg = MldPacket::new_checked(&frame[62..86]).unwrap();
        assert_eq!(msg.msg_type(), mld::kind::QUERY);
        let ms_ = u64::from(msg.max_resp_code());
        (Family::V6, msg.mcast_addr().unwrap().into(), ms(ms_))
    }
}

#[test]
fn without_a_querier_reports_are_recorded_but_not_trusted() {
    let mut sim = Sim::new(SnoopConfig::default());
    let first = sim.take();
    assert_eq!(
        first.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
        vec![
            Action::Querier {
                family: Family::V4,
                present: false
            },
            Action::Querier {
                family: Family::V6,
                present: false
            },
        ]
    );
    sim.rx(1, &IGMPV2_REPORT);
    sim.rx(2, &MLDV1_REPORT);
    assert_eq!(
        sim.take().into_iter().map(|(_, a)| a).collect::<Vec<_>>(),
        vec![
            Action::Group {
                key: key(0, "239.1.1.1"),
                ports: set(&[1])
            },
            Action::Group {
                key: key(0, "ff05::1:3"),
                ports: set(&[2])
            },
        ]
    );
    assert_eq!(sim.members("239.1.1.1"), set(&[1]));
    for family in Family::ALL {
        assert!(!sim.table.querier_present(family));
        let q = sim.s.querier(family, sim.now);
        assert_eq!(
            q,
            QuerierStatus {
                present: false,
                own: false,
                address: None,
                port: None,
                expires_in: None
            }
        );
    }
    assert_eq!(
        sim.s.groups(sim.now),
        vec![
            GroupRecord {
                key: key(0, "239.1.1.1"),
                port: PortId(1),
                expires_in: Duration::from_secs(260)
            },
            GroupRecord {
                key: key(0, "ff05::1:3"),
                port: PortId(2),
                expires_in: Duration::from_secs(260)
            },
        ]
    );
    assert_eq!(sim.s.stats().igmp_v2_reports, 1);
    assert_eq!(sim.s.stats().mld_v1_reports, 1);
    // No own querier, no queries, ever.
    sim.at(1000.0);
    assert!(sim.sends().is_empty());
}

#[test]
fn the_own_querier_sends_startup_then_regular_queries() {
    let mut sim = Sim::querier();
    sim.at(0.0);
    sim.at(400.0);
    let sends = sim.sends();
    let times: Vec<(Duration, Family)> = sends
        .iter()
        .map(|(at, port, frame)| {
            assert_eq!(*port, None, "every port at once");
            let (family, group, max_resp) = query_of(frame);
            assert!(match group {
                IpAddr::V4(g) => g.is_unspecified(),
                IpAddr::V6(g) => g.is_unspecified(),
            });
            assert_eq!(max_resp, Duration::from_secs(10));
            (*at, family)
        })
        .collect();
    let expected: Vec<(Duration, Family)> = [0.0, 31.25, 156.25, 281.25]
        .iter()
        .flat_map(|&t| [(sim.secs(t), Family::V4), (sim.secs(t), Family::V6)])
        .collect();
    assert_eq!(times, expected);
    // Three ports, four rounds, per family.
    assert_eq!(sim.s.stats().igmp_tx_queries, 12);
    assert_eq!(sim.s.stats().mld_tx_queries, 12);
    let q = sim.s.querier(Family::V6, sim.now);
    assert!(q.own && q.present);
    assert_eq!(q.address, Some(IpAddr::V6(link_local(BRIDGE))));
    assert_eq!(
        sim.s.querier(Family::V4, sim.now).address,
        Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    );
}

#[test]
fn the_querier_is_present_only_after_the_response_delay() {
    let mut sim = Sim::querier();
    sim.at(9.999);
    assert!(!sim.table.querier_present(Family::V4));
    assert!(!sim.table.querier_present(Family::V6));
    sim.take();
    sim.at(10.0);
    let querier: Vec<_> = sim
        .take()
        .into_iter()
        .filter(|(_, a)| matches!(a, Action::Querier { .. }))
        .collect();
    assert_eq!(
        querier,
        vec![
            (
                sim.secs(10.0),
                Action::Querier {
                    family: Family::V4,
                    present: true
                }
            ),
            (
                sim.secs(10.0),
                Action::Querier {
                    family: Family::V6,
                    present: true
                }
            ),
        ]
    );
    assert!(sim.table.querier_present(Family::V4));
}

#[test]
fn a_lower_foreign_querier_silences_the_own_one() {
    let mut sim = Sim::querier();
    sim.at(20.0);
    sim.take();
    // IPv4: the own queries come from 0.0.0.0, which every querier beats.
    sim.rx(2, &foreign_query("10.0.0.254", "0.0.0.0", 100));
    assert_eq!(
        sim.take().into_iter().map(|(_, a)| a).collect::<Vec<_>>(),
        vec![
            Action::Routers {
                family: Family::V4,
                ports: set(&[2])
            },
            // Linux waits the new querier's response time again.
            Action::Querier {
                family: Family::V4,
                present: false
            },
        ]
    );
    let q = sim.s.querier(Family::V4, sim.now);
    assert_eq!(
        q,
        QuerierStatus {
            present: false,
            own: false,
            address: Some(v4("10.0.0.254").into()),
            port: Some(PortId(2)),
            expires_in: Some(Duration::from_secs(255)),
        }
    );
    sim.at(30.0);
    assert!(sim.table.querier_present(Family::V4));
    // The own IGMP queries stop; MLD goes on.
    sim.at(274.0);
    let families: Vec<Family> = sim.sends().iter().map(|(_, _, f)| query_of(f).0).collect();
    assert_eq!(families, vec![Family::V6, Family::V6]);
    assert_eq!(sim.table.routers(Family::V4), set(&[2]));
    // 255 s after the query the other querier is gone: the router port
    // goes, and the own querier starts over at once.
    sim.at(275.0);
    let log = sim.take();
    assert!(log.contains(&(
        sim.secs(275.0),
        Action::Routers {
            family: Family::V4,
            ports: PortSet::EMPTY
        }
    )));
    let sent: Vec<_> = log
        .iter()
        .filter_map(|(at, a)| match a {
            Action::Send { port: None, frame } => Some((*at, query_of(frame).0)),
            _ => None,
        })
        .collect();
    assert_eq!(sent, vec![(sim.secs(275.0), Family::V4)]);
    assert!(sim.s.querier(Family::V4, sim.now).own);
    assert!(
        sim.table.querier_present(Family::V4),
        "own querier, no delay"
    );
    sim.at(306.25);
    let sends: Vec<_> = sim
        .sends()
        .iter()
        .map(|(at, p, f)| (*at, *p, query_of(f).0))
        .filter(|(_, _, family)| *family == Family::V4)
        .collect();
    assert_eq!(
        sends,
        vec![(sim.secs(306.25), None, Family::V4)],
        "a startup query"
    );
}

#[test]
fn an_mld_querier_wins_with_a_lower_address_only() {
    let mut sim = Sim::querier();
    sim.at(20.0);
    sim.take();
    // Above the bridge's fe80::bb:ff:fe00:1: refused while the own one runs.
    sim.rx(3, &mld_foreign_query("fe80::ff00:0:0:0", "::", 10000));
    assert!(sim.take().is_empty());
    assert!(sim.s.querier(Family::V6, sim.now).own);
    sim.rx(3, &mld_foreign_query("fe80::1", "::", 10000));
    assert_eq!(
        sim.take().into_iter().map(|(_, a)| a).collect::<Vec<_>>(),
        vec![
            Action::Routers {
                family: Family::V6,
                ports: set(&[3])
            },
            Action::Querier {
                family: Family::V6,
                present: false
            },
        ]
    );
    let q = sim.s.querier(Family::V6, sim.now);
    assert_eq!(q.address, Some(v6("fe80::1").into()));
    assert!(!q.own);
    assert_eq!(sim.s.stats().mld_v1_queries, 2);
    // A query from a global address is malformed for Linux: dropped, not
    // taken.
    let mut from_global = mld_foreign_query("fe80::1", "::", 10000);
    from_global[22] = 0x20;
    assert_eq!(classify(&from_global, 0).forward, Forward::Drop);
}

#[test]
fn a_leave_with_the_own_querier_sends_a_group_query() {
    let mut sim = Sim::querier();
    sim.at(15.0);
    sim.rx(1, &report(10, "239.1.1.1"));
    sim.rx(2, &report(11, "239.1.1.1"));
    sim.at(20.0);
    sim.take();
    sim.rx(1, &leave(10, "239.1.1.1"));
    let sends = sim.sends();
    assert_eq!(sends.len(), 1);
    let (_, port, frame) = &sends[0];
    assert_eq!(*port, Some(PortId(1)));
    assert_eq!(
        query_of(frame),
        (Family::V4, v4("239.1.1.1").into(), Duration::from_secs(1))
    );
    // As Linux: to all-systems, with the group in the message.
    assert_eq!(&frame[..6], &[0x01, 0x00, 0x5e, 0, 0, 1]);
    assert_eq!(&frame[30..34], &[224, 0, 0, 1]);
    // The member waits last_member_count x last_member_interval.
    sim.at(21.999);
    assert_eq!(sim.members("239.1.1.1"), set(&[1, 2]));
    sim.take();
    sim.at(22.0);
    let log = sim.take();
    assert!(log.contains(&(
        sim.secs(22.0),
        Action::Group {
            key: key(0, "239.1.1.1"),
            ports: set(&[2])
        }
    )));
    // And port 1's next general query came forward to then.
    let general: Vec<_> = log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Send { port, frame } => Some((*port, query_of(frame).0)),
            _ => None,
        })
        .collect();
    assert_eq!(general, vec![(Some(PortId(1)), Family::V4)]);
    assert_eq!(sim.s.stats().igmp_leaves, 1);
}

#[test]
fn an_mld_done_with_the_own_querier() {
    let mut sim = Sim::querier();
    sim.at(15.0);
    sim.rx(3, &mld_report(5, "ff05::1:3"));
    sim.take();
    sim.rx(3, &mld_done(5, "ff05::1:3"));
    let sends = sim.sends();
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].1, Some(PortId(3)));
    assert_eq!(
        query_of(&sends[0].2),
        (Family::V6, v6("ff05::1:3").into(), Duration::from_secs(1))
    );
    assert_eq!(&sends[0].2[..6], &[0x33, 0x33, 0, 0, 0, 1]);
    sim.at(17.0);
    assert!(sim.members("ff05::1:3").is_empty());
    assert_eq!(sim.s.stats().mld_leaves, 1);
}

#[test]
fn leaves_are_ignored_while_another_querier_is_present() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.rx(3, &foreign_query("10.0.0.254", "0.0.0.0", 100));
    sim.at(1.0);
    sim.rx(1, &report(10, "239.1.1.1"));
    sim.at(2.0);
    sim.take();
    sim.rx(1, &leave(10, "239.1.1.1"));
    sim.rx(1, &IGMPV3_TO_IN_NONE);
    assert!(sim.take().is_empty());
    sim.at(100.0);
    assert_eq!(sim.members("239.1.1.1"), set(&[1]));
    assert_eq!(
        sim.s.groups(sim.now)[0].expires_in,
        Duration::from_secs(161)
    );
}

#[test]
fn without_any_querier_a_leave_still_shortens_the_membership() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.rx(1, &report(10, "239.1.1.1"));
    sim.at(5.0);
    sim.rx(1, &leave(10, "239.1.1.1"));
    assert!(sim.sends().is_empty(), "no querier, no query");
    sim.at(6.999);
    assert_eq!(sim.members("239.1.1.1"), set(&[1]));
    sim.at(7.0);
    assert!(sim.members("239.1.1.1").is_empty());
}

#[test]
fn a_foreign_group_query_shortens_the_timers() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.rx(1, &report(10, "239.1.1.1"));
    sim.rx(2, &report(11, "239.1.1.1"));
    sim.rx(2, &report(11, "239.2.2.2"));
    sim.at(5.0);
    // Max Resp Time 1 s, times last_member_count.
    sim.rx(3, &foreign_query("10.0.0.254", "239.1.1.1", 10));
    sim.rx(3, &mld_foreign_query("fe80::1", "ff05::9", 1000));
    sim.at(6.999);
    assert_eq!(sim.members("239.1.1.1"), set(&[1, 2]));
    sim.take();
    sim.at(7.0);
    assert_eq!(
        sim.take().into_iter().map(|(_, a)| a).collect::<Vec<_>>(),
        vec![Action::Group {
            key: key(0, "239.1.1.1"),
            ports: PortSet::EMPTY
        }]
    );
    assert_eq!(
        sim.members("239.2.2.2"),
        set(&[2]),
        "another group is untouched"
    );
    // A group query is not a general one: no querier elected, no router.
    assert!(sim.table.routers(Family::V4).is_empty());
    assert!(!sim.s.querier(Family::V4, sim.now).present);
}

#[test]
fn fast_leave_removes_at_once() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.s
        .add_port(PortId(4), RouterMode::Learned, true, sim.now);
    // Even with another querier in charge, as Linux.
    sim.rx(3, &foreign_query("10.0.0.254", "0.0.0.0", 100));
    sim.rx(4, &report(10, "239.1.1.1"));
    sim.rx(1, &report(11, "239.1.1.1"));
    sim.take();
    sim.rx(4, &leave(10, "239.1.1.1"));
    assert_eq!(
        sim.take().into_iter().map(|(_, a)| a).collect::<Vec<_>>(),
        vec![Action::Group {
            key: key(0, "239.1.1.1"),
            ports: set(&[1])
        }]
    );
    // An IGMPv3 TO_IN {} record is a leave too.
    sim.rx(4, &report(10, "239.1.1.1"));
    sim.take();
    sim.rx(4, &IGMPV3_TO_IN_NONE);
    assert_eq!(sim.members("239.1.1.1"), set(&[1]));
}

#[test]
fn memberships_expire_unless_refreshed() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.rx(1, &report(10, "239.1.1.1"));
    sim.rx(2, &report(11, "239.1.1.1"));
    sim.at(100.0);
    sim.rx(2, &report(11, "239.1.1.1"));
    sim.at(259.999);
    assert_eq!(sim.members("239.1.1.1"), set(&[1, 2]));
    sim.take();
    sim.at(260.0);
    assert_eq!(
        sim.take(),
        vec![(
            sim.secs(260.0),
            Action::Group {
                key: key(0, "239.1.1.1"),
                ports: set(&[2])
            }
        )]
    );
    sim.at(360.0);
    assert!(sim.members("239.1.1.1").is_empty());
    assert!(sim.s.groups(sim.now).is_empty());
}

#[test]
fn learned_router_ports_expire() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.s
        .add_port(PortId(5), RouterMode::Disabled, false, sim.now);
    sim.rx(2, &foreign_query("10.0.0.254", "0.0.0.0", 100));
    sim.at(10.0);
    assert_eq!(sim.table.routers(Family::V4), set(&[2]));
    assert!(sim.table.querier_present(Family::V4));
    assert_eq!(
        sim.s.routers(sim.now),
        vec![RouterRecord {
            port: PortId(2),
            family: Family::V4,
            permanent: false,
            expires_in: Some(Duration::from_secs(245)),
        }]
    );
    // Refreshed by the next query, at 125 s.
    sim.at(125.0);
    sim.rx(2, &foreign_query("10.0.0.254", "0.0.0.0", 100));
    sim.at(379.999);
    assert_eq!(sim.table.routers(Family::V4), set(&[2]));
    sim.take();
    sim.at(380.0);
    let log: Vec<Action> = sim.take().into_iter().map(|(_, a)| a).collect();
    assert_eq!(
        log,
        vec![
            Action::Routers {
                family: Family::V4,
                ports: PortSet::EMPTY
            },
            Action::Querier {
                family: Family::V4,
                present: false
            },
        ]
    );
    // A port that may not be a router port elects a querier but is none.
    sim.rx(5, &foreign_query("10.0.0.253", "0.0.0.0", 100));
    assert!(sim.table.routers(Family::V4).is_empty());
    assert_eq!(sim.s.querier(Family::V4, sim.now).port, Some(PortId(5)));
}

#[test]
fn permanent_router_ports_follow_the_link() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.take();
    sim.s
        .add_port(PortId(7), RouterMode::Permanent, false, sim.now);
    sim.collect();
    assert_eq!(
        sim.take().into_iter().map(|(_, a)| a).collect::<Vec<_>>(),
        vec![
            Action::Routers {
                family: Family::V4,
                ports: set(&[7])
            },
            Action::Routers {
                family: Family::V6,
                ports: set(&[7])
            },
        ]
    );
    assert!(sim
        .s
        .routers(sim.now)
        .iter()
        .all(|r| r.permanent && r.expires_in.is_none()));
    sim.s.set_port_up(PortId(7), false, sim.now);
    sim.collect();
    assert!(sim.table.routers(Family::V4).is_empty());
    sim.s.set_port_up(PortId(7), true, sim.now);
    sim.collect();
    assert_eq!(sim.table.routers(Family::V6), set(&[7]));
    // Queries do not make it a learned one.
    sim.rx(7, &foreign_query("10.0.0.254", "0.0.0.0", 100));
    sim.at(300.0);
    assert_eq!(sim.table.routers(Family::V4), set(&[7]));
    sim.s.remove_port(PortId(7));
    sim.collect();
    assert!(sim.table.routers(Family::V4).is_empty());
    assert!(sim.table.routers(Family::V6).is_empty());
}

#[test]
fn a_port_going_down_loses_its_groups_and_router_entries() {
    let mut sim = Sim::querier();
    sim.at(15.0);
    sim.rx(1, &report(10, "239.1.1.1"));
    sim.rx(2, &report(11, "239.1.1.1"));
    sim.rx(1, &mld_report(10, "ff05::1:3"));
    sim.rx(1, &foreign_query("10.0.0.254", "0.0.0.0", 100));
    sim.take();
    sim.s.set_port_up(PortId(1), false, sim.now);
    sim.collect();
    let log: Vec<Action> = sim.take().into_iter().map(|(_, a)| a).collect();
    assert_eq!(
        log,
        vec![
            Action::Group {
                key: key(0, "239.1.1.1"),
                ports: set(&[2])
            },
            Action::Group {
                key: key(0, "ff05::1:3"),
                ports: PortSet::EMPTY
            },
            Action::Routers {
                family: Family::V4,
                ports: PortSet::EMPTY
            },
        ]
    );
    // Frames on a port that is down are not looked at.
    sim.rx(1, &report(10, "239.5.5.5"));
    assert!(sim.take().is_empty());
    // Back up, it is due an MLD general query at once (IGMP has another
    // querier).
    sim.s.set_port_up(PortId(1), true, sim.now);
    sim.at(15.0);
    let sends = sim.sends();
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].1, Some(PortId(1)));
    assert_eq!(query_of(&sends[0].2).0, Family::V6);
}

#[test]
fn frames_from_unknown_ports_are_ignored() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.take();
    sim.rx(9, &IGMPV2_REPORT);
    sim.s.remove_port(PortId(1));
    sim.rx(1, &IGMPV2_REPORT);
    assert!(sim.take().is_empty());
    assert_eq!(sim.s.stats().igmp_v2_reports, 0);
}

#[test]
fn removing_a_port_removes_its_memberships() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.rx(1, &report(10, "239.1.1.1"));
    sim.rx(2, &report(11, "239.1.1.1"));
    sim.take();
    sim.s.remove_port(PortId(1));
    sim.collect();
    assert_eq!(sim.members("239.1.1.1"), set(&[2]));
}

#[test]
fn igmpv3_reports_in_compatibility_mode() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.rx(
        1,
        &v3_report(
            10,
            &[
                (igmp::record::IS_EXCLUDE, "239.0.0.1", 0),
                (igmp::record::TO_EXCLUDE, "239.0.0.2", 0),
                (igmp::record::ALLOW, "239.0.0.3", 1),
                // BLOCK joins too, as Linux in IGMPv2 mode.
                (igmp::record::BLOCK, "239.0.0.4", 1),
                // INCLUDE of some sources is a join.
                (igmp::record::IS_INCLUDE, "239.0.0.5", 2),
                // Unknown record types are skipped.
                (9, "239.0.0.6", 0),
                // Local groups are never joined.
                (igmp::record::IS_EXCLUDE, "224.0.0.251", 0),
            ],
        ),
    );
    let groups: Vec<IpAddr> = sim.s.groups(sim.now).iter().map(|g| g.key.group).collect();
    let expected: Vec<IpAddr> = [
        "239.0.0.1",
        "239.0.0.2",
        "239.0.0.3",
        "239.0.0.4",
        "239.0.0.5",
    ]
    .iter()
    .map(|g| g.parse().unwrap())
    .collect();
    assert_eq!(groups, expected);
    sim.at(1.0);
    sim.rx(
        1,
        &v3_report(10, &[(igmp::record::TO_INCLUDE, "239.0.0.1", 0)]),
    );
    sim.at(3.0);
    assert!(sim.members("239.0.0.1").is_empty());
    assert_eq!(sim.s.stats().igmp_v3_reports, 2);
}

#[test]
fn mldv2_reports_join() {
    let mut sim = Sim::new(SnoopConfig::default());
    let mut msg = vec![mld::kind::V2_REPORT, 0, 0, 0, 0, 0, 0, 2];
    msg.extend_from_slice(&[mld::record::IS_EXCLUDE, 0, 0, 0]);
    msg.extend_from_slice(&v6("ff05::1").octets());
    msg.extend_from_slice(&[mld::record::IS_EXCLUDE, 0, 0, 0]);
    msg.extend_from_slice(&mld::ALL_NODES.octets());
    sim.rx(2, &ipv6(host_mac(5), host6(5), mld::V2_REPORTS, &msg, true));
    assert_eq!(sim.members("ff05::1"), set(&[2]));
    assert!(
        sim.members("ff02::1").is_empty(),
        "all-nodes is never joined"
    );
    assert_eq!(sim.s.stats().mld_v2_reports, 1);
}

#[test]
fn own_queries_come_back_ignored() {
    let mut sim = Sim::querier();
    sim.at(0.0);
    let sends = sim.sends();
    for (_, _, frame) in &sends {
        sim.rx(2, frame);
    }
    assert!(sim.take().is_empty());
    assert!(sim.table.routers(Family::V4).is_empty());
    assert!(sim.s.querier(Family::V4, sim.now).own);
    assert!(sim.s.querier(Family::V6, sim.now).own);
    assert_eq!(sim.s.stats().igmp_v2_queries, 0);
}

#[test]
fn query_versions_and_their_delays() {
    // An IGMPv1 query: no Max Resp Time, 10 s.
    let mut sim = Sim::new(SnoopConfig::default());
    let v1 = ipv4(
        host_mac(1),
        v4("10.0.0.1"),
        igmp::ALL_SYSTEMS,
        2,
        &igmp_msg(0x11, 0, v4("0.0.0.0")),
    );
    sim.rx(1, &v1);
    sim.at(9.999);
    assert!(!sim.table.querier_present(Family::V4));
    sim.at(10.0);
    assert!(sim.table.querier_present(Family::V4));
    // An IGMPv3 query with code 0x81: (1 | 0x10) << 3 tenths = 13.6 s.
    let mut sim = Sim::new(SnoopConfig::default());
    let mut msg = vec![0x11, 0x81, 0, 0, 0, 0, 0, 0, 0x02, 125, 0, 0];
    IgmpPacket::new_unchecked(&mut msg[..]).fill_checksum();
    sim.rx(
        1,
        &ipv4(host_mac(1), v4("10.0.0.1"), igmp::ALL_SYSTEMS, 2, &msg),
    );
    sim.at(13.599);
    assert!(!sim.table.querier_present(Family::V4));
    sim.at(13.6);
    assert!(sim.table.querier_present(Family::V4));
    assert_eq!(sim.s.stats().igmp_v3_queries, 1);
    // A source-specific IGMPv3 query is counted and otherwise ignored.
    let mut msg = vec![0x11, 100, 0, 0, 239, 1, 1, 1, 0x02, 125, 0, 1, 10, 0, 0, 1];
    IgmpPacket::new_unchecked(&mut msg[..]).fill_checksum();
    sim.rx(1, &report(10, "239.1.1.1"));
    sim.rx(
        2,
        &ipv4(host_mac(1), v4("10.0.0.1"), v4("239.1.1.1"), 2, &msg),
    );
    assert_eq!(
        sim.s.groups(sim.now)[0].expires_in,
        Duration::from_secs(260)
    );
    assert_eq!(sim.s.stats().igmp_v3_queries, 2);
    // An MLDv1 query with a zero delay is ignored, as Linux does.
    let mut sim = Sim::new(SnoopConfig::default());
    sim.rx(1, &mld_foreign_query("fe80::1", "::", 0));
    sim.at(1.0);
    assert_eq!(sim.s.querier(Family::V6, sim.now).address, None);
    // An MLDv2 general query: 28 bytes, code 0x8000 = 32.768 s.
    let mut msg = mld_msg(mld::kind::QUERY, 0x8000, Ipv6Addr::UNSPECIFIED);
    msg.extend_from_slice(&[0x02, 125, 0, 0]);
    sim.rx(
        1,
        &ipv6(host_mac(1), v6("fe80::1"), mld::ALL_NODES, &msg, true),
    );
    sim.at(33.767);
    assert!(!sim.table.querier_present(Family::V6));
    sim.at(33.768);
    assert!(sim.table.querier_present(Family::V6));
    assert_eq!(sim.s.stats().mld_v2_queries, 1);
}

#[test]
fn exceeding_hash_max_turns_snooping_off() {
    let mut sim = Sim::new(SnoopConfig {
        querier: true,
        hash_max: 2,
        ..SnoopConfig::default()
    });
    sim.at(10.0);
    sim.rx(1, &report(10, "239.0.0.1"));
    sim.rx(2, &report(11, "239.0.0.2"));
    sim.rx(3, &report(12, "239.0.0.1"));
    sim.rx(2, &foreign_query("10.0.0.254", "0.0.0.0", 100));
    sim.at(30.0);
    assert_eq!(sim.table.len(), 2);
    assert!(sim.s.enabled());
    sim.take();
    sim.rx(3, &report(12, "239.0.0.3"));
    assert!(!sim.s.enabled());
    assert_eq!(
        sim.take().into_iter().map(|(_, a)| a).collect::<Vec<_>>(),
        vec![
            // Forwarding floods first, then the table empties.
            Action::Querier {
                family: Family::V4,
                present: false
            },
            Action::Querier {
                family: Family::V6,
                present: false
            },
            Action::Group {
                key: key(0, "239.0.0.1"),
                ports: PortSet::EMPTY
            },
            Action::Group {
                key: key(0, "239.0.0.2"),
                ports: PortSet::EMPTY
            },
            Action::Routers {
                family: Family::V4,
                ports: PortSet::EMPTY
            },
        ]
    );
    assert!(sim.table.is_empty());
    assert!(!sim.table.querier_present(Family::V4));
    assert_eq!(sim.s.next_deadline(), None);
    assert!(sim.s.groups(sim.now).is_empty());
    assert!(sim.s.routers(sim.now).is_empty());
    assert!(!sim.s.querier(Family::V4, sim.now).present);
    assert_eq!(sim.s.stats().groups_refused, 1);
    // Later messages are ignored and counted; time does nothing.
    sim.rx(1, &report(10, "239.0.0.1"));
    sim.rx(1, &MLDV1_REPORT);
    sim.at(1000.0);
    assert!(sim.take().is_empty());
    assert_eq!(sim.s.stats().ignored, 2);
    // Existing groups may still be refreshed at the limit: no new one.
    let mut sim = Sim::new(SnoopConfig {
        hash_max: 1,
        ..SnoopConfig::default()
    });
    sim.rx(1, &report(10, "239.0.0.1"));
    sim.rx(2, &report(11, "239.0.0.1"));
    assert!(sim.s.enabled());
    assert_eq!(sim.members("239.0.0.1"), set(&[1, 2]));
}

#[test]
fn malformed_control_frames_are_counted() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.rx(1, &bad_checksum());
    let mut mld_bad = MLDV1_REPORT.to_vec();
    mld_bad[70] ^= 0xff;
    sim.rx(1, &mld_bad);
    assert_eq!(sim.s.stats().igmp_parse_errors, 1);
    assert_eq!(sim.s.stats().mld_parse_errors, 1);
    assert!(sim.s.groups(sim.now).is_empty());
}

#[test]
fn groups_are_per_vlan() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.s.receive(PortId(1), 10, &IGMPV2_REPORT, sim.now);
    sim.s
        .receive(PortId(2), 20, &tagged(&IGMPV2_REPORT, 0x8100, 20), sim.now);
    sim.collect();
    assert_eq!(
        sim.table.read(|r| r.members(&key(10, "239.1.1.1"))),
        Some(set(&[1]))
    );
    assert_eq!(
        sim.table.read(|r| r.members(&key(20, "239.1.1.1"))),
        Some(set(&[2]))
    );
    assert_eq!(sim.members("239.1.1.1"), PortSet::EMPTY);
}

/// `port`'s groups against its limit.
fn port_groups(sim: &Sim, port: u16) -> PortGroups {
    sim.s.port_groups(PortId(port)).expect("a port")
}

#[test]
fn max_groups_refuses_new_groups_on_that_port_only() {
    let mut sim = Sim::querier();
    sim.s.set_port_max_groups(PortId(1), 2);
    sim.collect();
    sim.rx(1, &report(10, "239.0.0.1"));
    sim.rx(1, &report(10, "239.0.0.2"));
    assert_eq!(
        port_groups(&sim, 1),
        PortGroups {
            n_groups: 2,
            max_groups: 2,
            refused: 0
        }
    );
    // A third group is not added on port 1, and is counted.
    sim.take();
    sim.rx(1, &report(10, "239.0.0.3"));
    assert!(sim.members("239.0.0.3").is_empty());
    assert!(sim
        .take()
        .iter()
        .all(|(_, a)| !matches!(a, Action::Group { .. })));
    assert_eq!(port_groups(&sim, 1).n_groups, 2);
    assert_eq!(port_groups(&sim, 1).refused, 1);
    assert_eq!(sim.s.stats().max_groups_refused, 1);
    // Snooping stays on (unlike at hash_max).
    assert!(sim.s.enabled());
    assert_eq!(sim.s.stats().groups_refused, 0);
    // Another port is not limited, for that group or any.
    for group in ["239.0.0.1", "239.0.0.3", "239.0.0.4"] {
        sim.rx(2, &report(11, group));
    }
    assert_eq!(sim.members("239.0.0.3"), set(&[2]));
    assert_eq!(sim.members("239.0.0.1"), set(&[1, 2]));
    assert_eq!(port_groups(&sim, 2).n_groups, 3);
    assert_eq!(port_groups(&sim, 2).max_groups, 0);
    // Port 1 may still refresh the groups it has, at the limit; a group
    // others are in is still new to it.
    sim.rx(1, &report(10, "239.0.0.1"));
    sim.rx(1, &report(10, "239.0.0.4"));
    assert_eq!(sim.members("239.0.0.4"), set(&[2]));
    assert_eq!(port_groups(&sim, 1).refused, 2);
    assert_eq!(sim.s.stats().max_groups_refused, 2);
    // MLD counts against the same limit.
    sim.rx(1, &mld_report(10, "ff05::1:3"));
    assert!(sim
        .s
        .groups(sim.now)
        .iter()
        .all(|g| g.port != PortId(1) || g.key.group != IpAddr::V6(v6("ff05::1:3"))));
    assert_eq!(port_groups(&sim, 1).refused, 3);
}

#[test]
fn leaving_and_expiry_make_room_under_max_groups() {
    let mut sim = Sim::querier();
    sim.s.set_port_max_groups(PortId(1), 1);
    sim.at(1.0);
    sim.rx(1, &report(10, "239.0.0.1"));
    sim.rx(1, &report(10, "239.0.0.2"));
    assert!(sim.members("239.0.0.2").is_empty());
    // A leave with the own querier prunes after the last member time.
    sim.rx(1, &leave(10, "239.0.0.1"));
    sim.at(4.0);
    assert!(sim.members("239.0.0.1").is_empty());
    assert_eq!(port_groups(&sim, 1).n_groups, 0);
    sim.rx(1, &report(10, "239.0.0.2"));
    assert_eq!(sim.members("239.0.0.2"), set(&[1]));
    assert_eq!(port_groups(&sim, 1).n_groups, 1);
    // Expiry gives the place back too.
    sim.at(4.0 + 261.0);
    assert!(sim.members("239.0.0.2").is_empty());
    assert_eq!(port_groups(&sim, 1).n_groups, 0);
    sim.rx(1, &report(10, "239.0.0.3"));
    assert_eq!(sim.members("239.0.0.3"), set(&[1]));
    // So does the link going down.
    sim.s.set_port_up(PortId(1), false, sim.now);
    sim.collect();
    assert_eq!(port_groups(&sim, 1).n_groups, 0);
    assert_eq!(port_groups(&sim, 1).refused, 1);
}

#[test]
fn max_groups_stops_an_igmpv3_report_at_the_first_refused_record() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.s.set_port_max_groups(PortId(1), 2);
    sim.rx(1, &report(10, "239.0.0.9"));
    sim.rx(
        1,
        &v3_report(
            10,
            &[
                (igmp::record::IS_EXCLUDE, "239.0.0.1", 0),
                (igmp::record::IS_EXCLUDE, "239.0.0.2", 0),
                // Not read: Linux's report loop stops at the refusal.
                (igmp::record::TO_INCLUDE, "239.0.0.9", 0),
                (igmp::record::IS_EXCLUDE, "239.0.0.3", 0),
            ],
        ),
    );
    let groups: Vec<IpAddr> = sim.s.groups(sim.now).iter().map(|g| g.key.group).collect();
    assert_eq!(groups, [v4("239.0.0.1"), v4("239.0.0.9")]);
    assert_eq!(port_groups(&sim, 1).refused, 1);
    assert_eq!(port_groups(&sim, 1).n_groups, 2);
    // The leave of 239.0.0.9 was not read: no shortened timer.
    let nine = sim.s.groups(sim.now)[1];
    assert!(nine.expires_in > Duration::from_secs(250), "{nine:?}");
}

#[test]
fn a_lower_max_groups_keeps_the_groups_a_port_has() {
    let mut sim = Sim::new(SnoopConfig::default());
    for group in ["239.0.0.1", "239.0.0.2", "239.0.0.3"] {
        sim.rx(1, &report(10, group));
    }
    sim.s.set_port_max_groups(PortId(1), 2);
    assert_eq!(sim.s.groups(sim.now).len(), 3);
    assert_eq!(port_groups(&sim, 1).n_groups, 3);
    sim.rx(1, &report(10, "239.0.0.4"));
    assert_eq!(sim.s.groups(sim.now).len(), 3);
    // Two leave (no querier: the leave shortens to the last member time).
    sim.rx(1, &leave(10, "239.0.0.1"));
    sim.rx(1, &leave(10, "239.0.0.2"));
    sim.at(3.0);
    assert_eq!(port_groups(&sim, 1).n_groups, 1);
    sim.rx(1, &report(10, "239.0.0.4"));
    assert_eq!(sim.members("239.0.0.4"), set(&[1]));
    // 0 is no limit.
    sim.s.set_port_max_groups(PortId(1), 0);
    sim.rx(1, &report(10, "239.0.0.5"));
    sim.rx(1, &report(10, "239.0.0.6"));
    assert_eq!(port_groups(&sim, 1).n_groups, 4);
    assert_eq!(sim.s.port_groups(PortId(9)), None);
}

#[test]
fn max_groups_counts_every_vlan_of_the_port() {
    let mut sim = Sim::new(SnoopConfig::default());
    sim.s.set_port_max_groups(PortId(1), 1);
    sim.s.receive(PortId(1), 10, &IGMPV2_REPORT, sim.now);
    sim.s
        .receive(PortId(1), 20, &tagged(&IGMPV2_REPORT, 0x8100, 20), sim.now);
    sim.collect();
    assert_eq!(
        sim.table.read(|r| r.members(&key(10, "239.1.1.1"))),
        Some(set(&[1]))
    );
    assert_eq!(sim.table.read(|r| r.members(&key(20, "239.1.1.1"))), None);
    assert_eq!(port_groups(&sim, 1).refused, 1);
}

#[test]
fn hash_max_turning_snooping_off_empties_the_port_counts() {
    let mut sim = Sim::new(SnoopConfig {
        hash_max: 2,
        ..SnoopConfig::default()
    });
    sim.s.set_port_max_groups(PortId(1), 5);
    sim.rx(1, &report(10, "239.0.0.1"));
    sim.rx(1, &report(10, "239.0.0.2"));
    assert_eq!(port_groups(&sim, 1).n_groups, 2);
    sim.rx(2, &report(11, "239.0.0.3"));
    assert!(!sim.s.enabled());
    assert_eq!(port_groups(&sim, 1).n_groups, 0);
    assert_eq!(port_groups(&sim, 1).refused, 0);
}

// Bounded work: the records of one report, the timers' heap.

#[test]
fn a_report_is_read_for_at_most_max_report_records() {
    let mut sim = Sim::new(SnoopConfig::default());
    let groups: Vec<String> = (0..MAX_REPORT_RECORDS + 76)
        .map(|i| format!("239.2.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let records: Vec<(u8, &str, u16)> = groups
        .iter()
        .map(|g| (igmp::record::TO_EXCLUDE, g.as_str(), 0))
        .collect();
    sim.rx(1, &v3_report(10, &records));
    let stats = sim.s.stats();
    assert_eq!(stats.igmp_v3_reports, 1);
    assert_eq!(stats.records_ignored, 76);
    assert_eq!(sim.s.groups(sim.now).len(), MAX_REPORT_RECORDS);
    assert_eq!(sim.members(&groups[MAX_REPORT_RECORDS - 1]), set(&[1]));
    assert_eq!(sim.members(&groups[MAX_REPORT_RECORDS]), PortSet::EMPTY);
}

/// One step of a random run of snooping.
#[derive(Debug, Clone)]
enum Step {
    /// An IGMPv2 report from a host on `port` for group `group`.
    Report {
        port: u16,
        group: u8,
    },
    /// An IGMPv3 report of joins and leaves (CHANGE_TO_INCLUDE {}).
    V3 {
        port: u16,
        records: Vec<(bool, u8)>,
    },
    Leave {
        port: u16,
        group: u8,
    },
    /// A foreign querier's group-specific query, max response in tenths.
    GroupQuery {
        group: u8,
        code: u8,
    },
    GeneralQuery {
        code: u8,
    },
    Link {
        port: u16,
        up: bool,
    },
    /// The clock moves on, in milliseconds, ticking at each deadline.
    Wait(u32),
}

fn group_addr(group: u8) -> String {
    format!("239.3.0.{}", group + 1)
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    let port = 1u16..=3;
    let group = 0u8..24;
    prop_oneof![
        4 => (port.clone(), group.clone()).prop_map(|(port, group)| Step::Report { port, group }),
        2 => (port.clone(), prop::collection::vec((any::<bool>(), group.clone()), 1..12))
            .prop_map(|(port, records)| Step::V3 { port, records }),
        2 => (port.clone(), group.clone()).prop_map(|(port, group)| Step::Leave { port, group }),
        1 => (group, 1u8..50).prop_map(|(group, code)| Step::GroupQuery { group, code }),
        1 => (1u8..100).prop_map(|code| Step::GeneralQuery { code }),
        1 => (port, any::<bool>()).prop_map(|(port, up)| Step::Link { port, up }),
        4 => (0u32..40_000).prop_map(Step::Wait),
    ]
}

impl Sim {
    fn run(&mut self, step: &Step) {
        match step {
            Step::Report { port, group } => self.rx(*port, &report(10, &group_addr(*group))),
            Step::V3 { port, records } => {
                let groups: Vec<(u8, String)> = records
                    .iter()
                    .map(|&(join, g)| {
                        let kind = match join {
                            true => igmp::record::TO_EXCLUDE,
                            false => igmp::record::TO_INCLUDE,
                        };
                        (kind, group_addr(g))
                    })
                    .collect();
                let records: Vec<(u8, &str, u16)> =
                    groups.iter().map(|(k, g)| (*k, g.as_str(), 0)).collect();
                self.rx(*port, &v3_report(10, &records));
            }
            Step::Leave { port, group } => self.rx(*port, &leave(10, &group_addr(*group))),
            Step::GroupQuery { group, code } => {
                self.rx(1, &foreign_query("10.0.0.1", &group_addr(*group), *code))
            }
            Step::GeneralQuery { code } => self.rx(1, &foreign_query("10.0.0.1", "0.0.0.0", *code)),
            Step::Link { port, up } => {
                self.s.set_port_up(PortId(*port), *up, self.now);
                self.collect();
            }
            Step::Wait(ms) => {
                let secs = (self.now - self.t0).as_secs_f64() + f64::from(*ms) / 1000.0;
                self.at(secs);
            }
        }
    }
}

proptest::proptest! {
    /// The heap's deadline is the one a look at every timer finds, after
    /// any run of reports, leaves, queries, links and time; due
    /// memberships are gone after each tick; and the heap stays within
    /// its bound of the live memberships.
    #[test]
    fn the_timer_heap_agrees_with_a_scan(
        querier in proptest::prelude::any::<bool>(),
        fast in 0u8..3,
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let config = SnoopConfig {
            querier,
            // Short, so that memberships expire within a run.
            membership_interval: Duration::from_secs(30),
            ..SnoopConfig::default()
        };
        let mut sim = Sim::new(config);
        if fast != 0 {
            sim.s.add_port(PortId(u16::from(fast)), RouterMode::Learned, true, sim.now);
            sim.collect();
        }
        for step in &steps {
            sim.run(step);
            proptest::prop_assert_eq!(sim.s.next_deadline(), sim.s.scan_deadline(), "after {:?}", step);
            let (heap, live) = sim.s.timer_counts();
            proptest::prop_assert_eq!(live, sim.s.groups(sim.now).len());
            proptest::prop_assert!(heap <= 2 * live + 1024 + 1, "heap {} for {} memberships", heap, live);
            if matches!(step, Step::Wait(_)) {
                let expired = sim.s.groups(sim.now).iter().filter(|g| g.expires_in.is_zero()).count();
                proptest::prop_assert_eq!(expired, 0, "memberships due at {:?} left", sim.now - sim.t0);
            }
        }
    }
}

#[test]
fn refreshes_do_not_grow_the_heap_without_bound() {
    let mut sim = Sim::new(SnoopConfig::default());
    let groups: Vec<String> = (0..64).map(|i| format!("239.4.0.{}", i + 1)).collect();
    for round in 0..400 {
        for g in &groups {
            sim.rx(1 + (round % 3) as u16, &report(10, g));
        }
        sim.at(f64::from(round) * 0.01);
    }
    let (heap, live) = sim.s.timer_counts();
    assert_eq!(live, 3 * 64);
    assert!(
        heap <= 2 * live + 1024 + 1,
        "heap {heap} for {live} memberships"
    );
}
