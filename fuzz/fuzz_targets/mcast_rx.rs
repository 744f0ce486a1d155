//! Multicast snooping against whatever hosts send: arbitrary frames and
//! well-formed IGMP messages with arbitrary fields (reports, leaves, v3
//! records, queries from other queriers) on four ports, ports going down
//! and up, and time passing, with the bridge's own querier on or off.
//! Checked after every step: the classifier and the state machine never
//! panic; the group table the workers read holds exactly the members the
//! state machine lists, only of ports that are up; every frame it sends
//! is a query the classifier takes for one; after a tick no timer is due.

#![no_main]

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bridge::mcast::{classify, Action, Forward, GroupKey, GroupTable, RouterMode, SnoopConfig, Snooping};
use bridge::PortSet;
use bridge::wire::MacAddr;
use bridge::PortId;
use libfuzzer_sys::fuzz_target;

const PORTS: u16 = 4;

#[derive(Debug, Arbitrary)]
enum Step {
    /// An IGMP message with a right checksum: `kind` picks the type.
    Igmp {
        port: u8,
        vlan: u8,
        kind: u8,
        code: u8,
        group: u8,
        source: u8,
        records: Vec<(u8, u8, u8)>,
    },
    /// Any frame at all.
    Frame { port: u8, vlan: u8, bytes: Vec<u8> },
    Up { port: u8, up: bool },
    /// Time passes, in tenths of a second.
    Wait { tenths: u8 },
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 frame to `dst` carrying IGMP message `igmp`, from `src`.
fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, mut igmp: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&igmp);
    igmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let d = dst.octets();
    let mut frame = vec![0x01, 0x00, 0x5e, d[1] & 0x7f, d[2], d[3]];
    frame.extend_from_slice(&[0x02, 0, 0, 0, 0x30, 1, 0x08, 0x00]);
    let total = (24 + igmp.len()) as u16;
    let mut header = vec![0x46, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0];
    header[2..4].copy_from_slice(&total.to_be_bytes());
    header.extend_from_slice(&src.octets());
    header.extend_from_slice(&d);
    header.extend_from_slice(&[0x94, 0x04, 0, 0]);
    let sum = checksum(&header);
    header[10..12].copy_from_slice(&sum.to_be_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(&igmp);
    frame.resize(frame.len().max(60), 0);
    frame
}

/// One of a few groups, so that reports and leaves meet.
fn group(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(239, 1, 1, n % 8)
}

fn igmp(kind: u8, code: u8, g: u8, source: u8, records: &[(u8, u8, u8)]) -> Vec<u8> {
    let src = Ipv4Addr::new(198, 18, 0, source);
    let g4 = group(g);
    match kind % 6 {
        0 => ipv4(src, g4, [&[0x16, 0, 0, 0][..], &g4.octets()].concat()),
        1 => ipv4(src, Ipv4Addr::new(224, 0, 0, 2), [&[0x17, 0, 0, 0][..], &g4.octets()].concat()),
        2 => ipv4(src, Ipv4Addr::new(224, 0, 0, 1), vec![0x11, code, 0, 0, 0, 0, 0, 0]),
        3 => ipv4(src, g4, [&[0x11, code, 0, 0][..], &g4.octets()].concat()),
        4 => ipv4(src, g4, [&[0x12, 0, 0, 0][..], &g4.octets()].concat()),
        _ => {
            let mut m = vec![0x22, 0, 0, 0, 0, 0];
            m.extend_from_slice(&(records.len().min(8) as u16).to_be_bytes());
            for &(kind, sources, g) in records.iter().take(8) {
                let n = sources % 3;
                m.extend_from_slice(&[kind % 7, 0, 0, n]);
                m.extend_from_slice(&group(g).octets());
                for s in 0..n {
                    m.extend_from_slice(&[198, 18, 1, s]);
                }
            }
            ipv4(src, Ipv4Addr::new(224, 0, 0, 22), m)
        }
    }
}

fn check(
    snooping: &mut Snooping,
    table: &GroupTable<locks::Mutex>,
    up: &[bool],
    now: Instant,
) {
    for action in snooping.take_actions() {
        if let Action::Send { port, frame } = &action {
            assert!(port.is_none_or(|p| p.0 < PORTS), "{port:?}");
            let classified = classify(frame, 0);
            assert!(classified.control, "a query the classifier ignores");
            assert!(
                !matches!(classified.forward, Forward::Drop),
                "a malformed query"
            );
        }
        table.apply(&action);
    }
    let mut listed: BTreeMap<GroupKey, PortSet> = BTreeMap::new();
    for record in snooping.groups(now) {
        assert!(record.port.0 < PORTS && up[record.port.0 as usize], "{record:?}");
        listed.entry(record.key).or_default().insert(record.port);
    }
    let published: BTreeMap<GroupKey, PortSet> = table.records().into_iter().collect();
    if snooping.enabled() {
        assert_eq!(listed, published, "the table and the state machine differ");
    }
}

fuzz_target!(|input: (bool, Vec<Step>)| {
    let (querier, steps) = input;
    let config = SnoopConfig {
        querier,
        hash_max: 6,
        ..SnoopConfig::default()
    };
    let mut now = Instant::now();
    let mac = MacAddr([0x02, 0, 0, 0, 0x10, 0]);
    let mut snooping = Snooping::new(config, mac, now);
    let table = GroupTable::<locks::Mutex>::new();
    let mut up = [true; PORTS as usize];
    for id in 0..PORTS {
        let router = match id {
            2 => RouterMode::Disabled,
            3 => RouterMode::Permanent,
            _ => RouterMode::Learned,
        };
        snooping.add_port(PortId(id), router, id == 1, now);
    }
    check(&mut snooping, &table, &up, now);
    for step in steps.into_iter().take(256) {
        let on = |port: u8| PortId(u16::from(port) % PORTS);
        match step {
            Step::Igmp {
                port,
                vlan,
                kind,
                code,
                group,
                source,
                records,
            } => {
                let frame = igmp(kind, code, group, source, &records);
                let vlan = u16::from(vlan % 3);
                let classified = classify(&frame, vlan);
                if classified.control && up[on(port).0 as usize] {
                    snooping.receive(on(port), vlan, &frame, now);
                }
            }
            Step::Frame { port, vlan, bytes } => {
                let vlan = u16::from(vlan % 3);
                let classified = classify(&bytes, vlan);
                if classified.control && up[on(port).0 as usize] {
                    snooping.receive(on(port), vlan, &bytes, now);
                }
            }
            Step::Up { port, up: state } => {
                up[on(port).0 as usize] = state;
                snooping.set_port_up(on(port), state, now);
            }
            Step::Wait { tenths } => {
                now += Duration::from_millis(100 * u64::from(tenths));
                snooping.tick(now);
                if let Some(next) = snooping.next_deadline() {
                    assert!(next > now, "a timer due at {next:?} after a tick at {now:?}");
                }
            }
        }
        check(&mut snooping, &table, &up, now);
    }
});
