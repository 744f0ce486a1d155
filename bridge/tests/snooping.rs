//! Multicast snooping on the frame path: floods of IP multicast narrowed
//! to a group's member and router ports once a querier is present, IGMP
//! messages handed over, malformed ones dropped; written once and run for
//! every lock strategy.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use bridge::forward::DropReason;
use bridge::mcast::{Action, Family, GroupKey, GroupTable};
use bridge::wire::MacAddr;
use bridge::worker::{EventSink, PortEvent, WorkerParts};
use bridge::PortId;
use bridge::PortSet;
use bridge::{FdbConfig, MacTable, Worker, WorkerConfig};
use common::{station, Rig};
use locks::Strategy;

/// The internet checksum of `data`.
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

/// An IPv4 frame from `src` to group `group` carrying `protocol`'s
/// `payload`, with a right header checksum.
fn ipv4(src: MacAddr, group: Ipv4Addr, protocol: u8, payload: &[u8]) -> Vec<u8> {
    let g = group.octets();
    let mut frame = vec![0x01, 0x00, 0x5e, g[1] & 0x7f, g[2], g[3]];
    frame.extend_from_slice(&src.0);
    frame.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + payload.len()) as u16;
    let mut header = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 1, protocol, 0, 0];
    header[2..4].copy_from_slice(&total.to_be_bytes());
    header.extend_from_slice(&[198, 18, 0, 1]);
    header.extend_from_slice(&g);
    let sum = checksum(&header);
    header[10..12].copy_from_slice(&sum.to_be_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(payload);
    frame.resize(frame.len().max(60), 0);
    frame
}

/// A UDP datagram to `group`.
fn data(src: MacAddr, group: Ipv4Addr) -> Vec<u8> {
    ipv4(
        src,
        group,
        17,
        &[0x30, 0x39, 0x30, 0x39, 0, 12, 0, 0, 1, 2, 3, 4],
    )
}

/// An IGMPv2 report of `group`; with `bad`, its checksum wrong.
fn report(src: MacAddr, group: Ipv4Addr, bad: bool) -> Vec<u8> {
    let mut igmp = vec![0x16, 0, 0, 0];
    igmp.extend_from_slice(&group.octets());
    let sum = checksum(&igmp) ^ u16::from(bad);
    igmp[2..4].copy_from_slice(&sum.to_be_bytes());
    ipv4(src, group, 2, &igmp)
}

/// A UDP datagram to IPv6 group `group`.
fn data6(src: MacAddr, group: Ipv6Addr) -> Vec<u8> {
    let g = group.octets();
    let mut frame = vec![0x33, 0x33, g[12], g[13], g[14], g[15]];
    frame.extend_from_slice(&src.0);
    frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 1]);
    frame.extend_from_slice(&[0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    frame.extend_from_slice(&g);
    frame.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 8, 0, 0]);
    frame
}

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 1, 1);
const OTHER: Ipv4Addr = Ipv4Addr::new(239, 1, 1, 2);

fn key(group: Ipv4Addr) -> GroupKey {
    GroupKey {
        vlan: 0,
        group: IpAddr::V4(group),
    }
}

fn ports(ids: &[u16]) -> PortSet {
    let mut set = PortSet::default();
    for &id in ids {
        set.insert(PortId(id));
    }
    set
}

/// The events a worker reported.
type Events = Arc<Mutex<Vec<PortEvent>>>;

/// A rig of four ports snooping with the group table returned, its events
/// in a list.
fn snooping<S: Strategy>() -> (Rig<S>, Arc<GroupTable<S>>, Events) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink: EventSink = {
        let events = Arc::clone(&events);
        Arc::new(move |event| events.lock().unwrap().push(event))
    };
    let fdb = Arc::new(MacTable::<S>::new(FdbConfig::default()));
    let (queues, peers): (Vec<_>, Vec<_>) = (0..4)
        .map(|i| bridge::port::MemoryQueue::pair(format!("mem{i}")))
        .unzip();
    let parts = WorkerParts::new(0).with_events(sink);
    let queues = queues.into_iter().map(Some).collect();
    let mut worker = Worker::resume(Arc::clone(&fdb), queues, WorkerConfig::default(), parts);
    let groups = Arc::new(GroupTable::<S>::new());
    worker.set_groups(Some(Arc::clone(&groups)));
    (Rig { fdb, worker, peers }, groups, events)
}

fn querier(groups: &dyn bridge::mcast::Groups, family: Family, present: bool) {
    groups.apply(&Action::Querier { family, present });
}

/// Without a querier every group floods; with one, a group goes to its
/// members and the router ports, one nobody joined to the router ports,
/// and with neither it is dropped as `snooped`.
fn groups_narrow_floods_once_a_querier_is_present<S: Strategy>() {
    let (mut rig, groups, _) = snooping::<S>();
    groups.apply(&Action::Group {
        key: key(GROUP),
        ports: ports(&[1]),
    });
    rig.send(0, &data(station(1), GROUP));
    assert_eq!(rig.ports_that_sent(), vec![1, 2, 3], "no querier: flood");
    querier(&*groups, Family::V4, true);
    rig.send(0, &data(station(1), GROUP));
    assert_eq!(rig.ports_that_sent(), vec![1], "members");
    groups.apply(&Action::Routers {
        family: Family::V4,
        ports: ports(&[3]),
    });
    rig.send(0, &data(station(1), GROUP));
    assert_eq!(rig.ports_that_sent(), vec![1, 3], "members and routers");
    rig.send(0, &data(station(1), OTHER));
    assert_eq!(rig.ports_that_sent(), vec![3], "unjoined: routers");
    // Link-local groups always flood.
    rig.send(0, &data(station(1), Ipv4Addr::new(224, 0, 0, 251)));
    assert_eq!(rig.ports_that_sent(), vec![1, 2, 3], "link-local");
    // A member sending to its own group reaches the others, not itself.
    rig.send(1, &data(station(2), GROUP));
    assert_eq!(rig.ports_that_sent(), vec![3]);
    groups.apply(&Action::Routers {
        family: Family::V4,
        ports: PortSet::default(),
    });
    rig.send(0, &data(station(1), OTHER));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(0).dropped(DropReason::Snooped), 1);
    // IPv6 has its own querier: absent, its groups flood.
    rig.send(0, &data6(station(1), "ff0e::1".parse().unwrap()));
    assert_eq!(rig.ports_that_sent(), vec![1, 2, 3], "ipv6 without querier");
    // The group leaves: no member, no router, nothing sent.
    groups.apply(&Action::Group {
        key: key(GROUP),
        ports: PortSet::default(),
    });
    rig.send(0, &data(station(1), GROUP));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
}

/// Reports are handed to the control plane and go to router ports only
/// while a querier is present; a malformed one is dropped, not handed.
fn reports_are_handed_over_and_bad_ones_dropped<S: Strategy>() {
    let (mut rig, groups, events) = snooping::<S>();
    rig.send(2, &report(station(3), GROUP, false));
    assert_eq!(rig.ports_that_sent(), vec![0, 1, 3], "no querier: flood");
    querier(&*groups, Family::V4, true);
    groups.apply(&Action::Routers {
        family: Family::V4,
        ports: ports(&[0]),
    });
    rig.send(2, &report(station(3), GROUP, false));
    assert_eq!(rig.ports_that_sent(), vec![0], "to the router port");
    let handed: Vec<_> = events
        .lock()
        .unwrap()
        .drain(..)
        .filter_map(|event| match event {
            PortEvent::Mcast { port, vlan, frame } => Some((port, vlan, frame)),
            _ => None,
        })
        .collect();
    assert_eq!(handed.len(), 2);
    assert_eq!((handed[0].0, handed[0].1), (PortId(2), 0));
    assert_eq!(handed[0].2, report(station(3), GROUP, false));
    rig.send(2, &report(station(3), GROUP, true));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(2).dropped(DropReason::McastParse), 1);
    assert!(events.lock().unwrap().is_empty());
    // Snooping turned itself off (beyond hash_max): multicast floods, a
    // malformed report too, and nothing is handed over.
    groups.set_enabled(false);
    rig.send(2, &report(station(3), GROUP, true));
    assert_eq!(rig.ports_that_sent(), vec![0, 1, 3]);
    rig.send(2, &report(station(3), GROUP, false));
    assert_eq!(rig.ports_that_sent(), vec![0, 1, 3]);
    assert!(events.lock().unwrap().is_empty());
}

/// Without snooping nothing of this happens: a worker without a group
/// table floods multicast and hands nothing over.
fn without_snooping_multicast_floods<S: Strategy>() {
    let (mut rig, _, events) = snooping::<S>();
    rig.worker.set_groups(None);
    rig.send(0, &report(station(1), GROUP, true));
    assert_eq!(rig.ports_that_sent(), vec![1, 2, 3]);
    rig.send(0, &data(station(1), GROUP));
    assert_eq!(rig.ports_that_sent(), vec![1, 2, 3]);
    assert!(events.lock().unwrap().is_empty());
}

for_each_strategy!(
    groups_narrow_floods_once_a_querier_is_present,
    reports_are_handed_over_and_bad_ones_dropped,
    without_snooping_multicast_floods,
);
