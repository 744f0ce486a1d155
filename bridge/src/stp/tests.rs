//! Scenarios on simulated networks (see `sim`): elections, convergence,
//! failures, edge ports, topology changes, and 802.1D neighbours.

use super::bpdu::{flags, Bpdu, BpduKind};
use super::sim::{bridge_mac, Sim};
use super::*;

/// A ring of three RSTP bridges, 0 (root), 1 and 2, links down:
/// 0.0-1.0, 1.1-2.0, 2.1-0.1.
fn ring3(sim: &mut Sim) -> [usize; 3] {
    sim.bridges(3);
    [
        sim.link((0, 0), (1, 0)),
        sim.link((1, 1), (2, 0)),
        sim.link((2, 1), (0, 1)),
    ]
}

fn legacy() -> StpConfig {
    StpConfig {
        force_version: 0,
        ..StpConfig::default()
    }
}

fn with_priority(config: StpConfig, priority: u16) -> StpConfig {
    StpConfig { priority, ..config }
}

#[test]
fn bridge_id_display() {
    let stp = Stp::new(StpConfig::default(), MacAddr([0x02, 0xac, 0, 0, 0, 1]));
    assert_eq!(
        stp.bridge_status().bridge_id.to_string(),
        "8000.02ac00000001"
    );
    let stp = Stp::new(
        with_priority(StpConfig::default(), 4096),
        MacAddr([0x52, 0x54, 0, 0xab, 0xcd, 0xef]),
    );
    assert_eq!(
        stp.bridge_status().bridge_id.to_string(),
        "1000.525400abcdef"
    );
    assert_eq!(stp.config().priority, 4096);
}

#[test]
fn new_port_is_disabled_and_discarding() {
    let mut stp = Stp::new(StpConfig::default(), bridge_mac(0));
    stp.add_port(
        PortId(3),
        PortConfig::default(),
        MacAddr([2, 0, 0, 0, 0, 3]),
    );
    let s = stp.port_status(PortId(3)).unwrap();
    assert_eq!(
        (s.role, s.state, s.oper_edge),
        (Role::Disabled, PortState::Discarding, false)
    );
    assert!(
        stp.take_actions().is_empty(),
        "nothing is sent on a down link"
    );
    assert_eq!(stp.ports().collect::<Vec<_>>(), [PortId(3)]);
    assert!(stp.port_status(PortId(4)).is_none());
    let b = stp.bridge_status();
    assert_eq!(
        (b.root_id, b.root_port, b.root_cost),
        (b.bridge_id, None, 0)
    );
    stp.remove_port(PortId(3));
    assert_eq!(stp.ports().count(), 0);
}

#[test]
fn bad_frames_are_counted_and_ignored() {
    let mut sim = Sim::new();
    sim.bridges(2);
    sim.link((0, 0), (1, 0));
    sim.all_up();
    let before = sim.status((1, 0));
    let stp = &mut sim.nodes[1].stp;
    let good = Bpdu::tcn().to_frame(MacAddr([2, 0, 0, 1, 0, 1]));
    let mut tagged = good.clone();
    tagged[12..14].copy_from_slice(&[0x81, 0x00]);
    let mut other_type = good.clone();
    other_type[20] = 0x01;
    for junk in [
        &good[..10],
        &[0u8; 60][..],
        &tagged[..],
        &other_type[..],
        &good[..18],
    ] {
        stp.receive(PortId(0), junk);
    }
    let after = sim.status((1, 0));
    assert_eq!(after.bad_bpdus, before.bad_bpdus + 5);
    assert_eq!(
        (after.rx_bpdus, after.rx_tcns),
        (before.rx_bpdus, before.rx_tcns)
    );
    assert_eq!((after.role, after.state), (before.role, before.state));
    // A port's own BPDU reflected back to it is dropped too.
    let own = match sim.sent((1, 0), 0).last() {
        Some((_, bpdu)) => bpdu.to_frame(MacAddr([2, 0, 0, 2, 0, 1])),
        None => panic!("bridge 1 sent nothing"),
    };
    sim.nodes[1].stp.receive(PortId(0), &own);
    assert_eq!(sim.status((1, 0)).bad_bpdus, before.bad_bpdus + 6);
    assert_eq!(sim.role((1, 0)), Role::Root);
}

#[test]
fn chain_elects_lowest_id_with_costs() {
    let mut sim = Sim::new();
    // Priorities: bridge 1 is best, so it is root in the middle.
    sim.bridge(with_priority(StpConfig::default(), 32768));
    sim.bridge(with_priority(StpConfig::default(), 4096));
    sim.bridge(with_priority(StpConfig::default(), 32768));
    sim.bridge(with_priority(StpConfig::default(), 32768));
    sim.port(
        (2, 0),
        PortConfig {
            path_cost: 2000,
            ..PortConfig::default()
        },
    );
    sim.link((0, 0), (1, 0));
    sim.link((1, 1), (2, 0));
    sim.link((2, 1), (3, 0));
    sim.all_up();
    assert!(sim.converged());
    let root = sim.nodes[1].stp.bridge_status();
    assert_eq!(root.root_id, root.bridge_id);
    assert_eq!((root.root_port, root.root_cost), (None, 0));
    for n in [0, 2, 3] {
        assert_eq!(sim.nodes[n].stp.bridge_status().root_id, root.bridge_id);
    }
    let b0 = sim.nodes[0].stp.bridge_status();
    assert_eq!((b0.root_port, b0.root_cost), (Some(PortId(0)), 20000));
    let b2 = sim.nodes[2].stp.bridge_status();
    assert_eq!((b2.root_port, b2.root_cost), (Some(PortId(0)), 2000));
    let b3 = sim.nodes[3].stp.bridge_status();
    assert_eq!((b3.root_port, b3.root_cost), (Some(PortId(0)), 22000));
    assert!(sim.blocking().is_empty());
    let s = sim.status((3, 0));
    assert_eq!(
        s.designated_bridge,
        sim.nodes[2].stp.bridge_status().bridge_id
    );
    assert_eq!(s.designated_cost, 2000);
    assert_eq!(s.designated_port, 0x8002);
    assert_eq!(s.designated_root, root.bridge_id);
    assert_eq!(sim.role((2, 1)), Role::Designated);
}

#[test]
fn ring_of_three_converges_in_two_seconds() {
    let mut sim = Sim::new();
    ring3(&mut sim);
    sim.all_up();
    let took = sim
        .run_until(2, Sim::converged)
        .expect("converged within 2 s");
    assert!(took <= 2);
    assert_eq!(sim.blocking(), vec![(2, 0)]);
    assert_eq!(sim.role((2, 0)), Role::Alternate);
    assert_eq!(sim.state((2, 0)), PortState::Discarding);
    assert_eq!(sim.role((1, 1)), Role::Designated);
    for end in [(0, 0), (0, 1), (1, 0), (1, 1), (2, 1)] {
        assert_eq!(sim.state(end), PortState::Forwarding, "{end:?}");
    }
    let b2 = sim.nodes[2].stp.bridge_status();
    assert_eq!((b2.root_port, b2.root_cost), (Some(PortId(1)), 20000));
    assert_eq!(b2.root_id, sim.nodes[0].stp.bridge_status().bridge_id);
    // And it stays that way.
    sim.run(30);
    assert!(sim.converged());
    assert_eq!(sim.blocking(), vec![(2, 0)]);
}

#[test]
fn better_bridge_takes_over_as_root() {
    let mut sim = Sim::new();
    ring3(&mut sim);
    sim.all_up();
    sim.run(5);
    let best = sim.bridge(with_priority(StpConfig::default(), 4096));
    let link = sim.link((1, 2), (best, 0));
    sim.up(link);
    let took = sim
        .run_until(3, Sim::converged)
        .expect("converged within 3 s");
    assert!(took <= 3);
    let root = sim.nodes[best].stp.bridge_status().bridge_id;
    for n in 0..4 {
        assert_eq!(sim.nodes[n].stp.bridge_status().root_id, root, "bridge {n}");
    }
    assert_eq!(sim.nodes[1].stp.bridge_status().root_port, Some(PortId(2)));
    // Bridges 0 and 2 are both one hop from bridge 1: their link blocks
    // at bridge 2, the higher identifier.
    assert_eq!(sim.blocking(), vec![(2, 1)]);
}

#[test]
fn ring_of_four() {
    let mut sim = Sim::new();
    sim.bridges(4);
    sim.link((0, 0), (1, 0));
    sim.link((1, 1), (2, 0));
    sim.link((2, 1), (3, 0));
    sim.link((3, 1), (0, 1));
    sim.all_up();
    sim.run_until(2, Sim::converged)
        .expect("converged within 2 s");
    // Bridge 2 is two hops both ways; it reaches the root through bridge
    // 1 (lower id than 3). On the link 2-3, bridge 3 is one hop from the
    // root and designated: bridge 2 blocks toward 3.
    assert_eq!(sim.blocking(), vec![(2, 1)]);
    assert_eq!(sim.role((3, 0)), Role::Designated);
    assert_eq!(sim.nodes[2].stp.bridge_status().root_cost, 40000);
    assert_eq!(sim.nodes[2].stp.bridge_status().root_port, Some(PortId(0)));
}

#[test]
fn full_mesh_of_four() {
    let mut sim = Sim::new();
    sim.bridges(4);
    let mut next = [0u16; 4];
    for a in 0..4 {
        for b in a + 1..4 {
            let (pa, pb) = (next[a], next[b]);
            next[a] += 1;
            next[b] += 1;
            sim.link((a, pa), (b, pb));
        }
    }
    sim.all_up();
    sim.run_until(2, Sim::converged)
        .expect("converged within 2 s");
    // Six links, three in the tree: each of the other three blocks at
    // one end, the end of the bridge with the higher identifier.
    let blocking = sim.blocking();
    assert_eq!(blocking.len(), 3, "{blocking:?}");
    for n in 1..4 {
        let b = sim.nodes[n].stp.bridge_status();
        assert_eq!(b.root_cost, 20000, "bridge {n} goes straight to the root");
    }
    assert_eq!(blocking.iter().filter(|e| e.0 == 3).count(), 2);
    assert_eq!(blocking.iter().filter(|e| e.0 == 2).count(), 1);
}

#[test]
fn two_ports_on_one_segment_make_a_backup() {
    let shared = PortConfig {
        point_to_point: false,
        ..PortConfig::default()
    };
    // One bridge alone with two ports on a hub.
    let mut sim = Sim::new();
    sim.bridges(1);
    sim.port((0, 0), shared);
    sim.port((0, 1), shared);
    sim.segment(&[(0, 0), (0, 1)]);
    sim.all_up();
    sim.run(1);
    assert_eq!(sim.role((0, 0)), Role::Designated);
    assert_eq!(sim.role((0, 1)), Role::Backup);
    // No agreement on a shared segment: the designated port waits Max Age
    // (fdWhile from DISABLED_PORT), then learns for forwardDelay.
    assert_eq!(sim.state((0, 0)), PortState::Discarding);
    let took = sim.run_until(30, Sim::converged).expect("converged");
    assert!((20..=25).contains(&(took + 1)), "took {took} s");
    assert_eq!(sim.blocking(), vec![(0, 1)]);

    // Another bridge on the hub: the root's second port is a backup for
    // the segment; the other bridge's port is its root port.
    let mut sim = Sim::new();
    sim.bridges(2);
    sim.port((0, 0), shared);
    sim.port((0, 1), shared);
    sim.port((1, 0), shared);
    sim.segment(&[(0, 0), (0, 1), (1, 0)]);
    sim.all_up();
    sim.run_until(30, Sim::converged).expect("converged");
    assert_eq!(sim.role((0, 0)), Role::Designated);
    assert_eq!(sim.role((0, 1)), Role::Backup);
    assert_eq!(sim.role((1, 0)), Role::Root);
    assert_eq!(sim.blocking(), vec![(0, 1)]);

    // Where another bridge is designated for the segment, a bridge's
    // second port on it is an alternate, not a backup (17.7).
    let mut sim = Sim::new();
    sim.bridges(2);
    sim.port((0, 0), shared);
    sim.port((1, 0), shared);
    sim.port((1, 1), shared);
    sim.segment(&[(0, 0), (1, 0), (1, 1)]);
    sim.all_up();
    sim.run_until(30, Sim::converged).expect("converged");
    assert_eq!(sim.role((1, 0)), Role::Root);
    assert_eq!(sim.role((1, 1)), Role::Alternate);
}

/// A ring of one RSTP bridge (0) and two legacy ones (1, 2):
/// 0.0-1.0, 1.1-2.0, 2.1-0.1.
fn mixed_ring(root: usize) -> Sim {
    let mut sim = Sim::new();
    for n in 0..3 {
        let config = if n == 0 {
            StpConfig::default()
        } else {
            legacy()
        };
        let priority = if n == root { 4096 } else { 32768 };
        sim.bridge(with_priority(config, priority));
    }
    sim.link((0, 0), (1, 0));
    sim.link((1, 1), (2, 0));
    sim.link((2, 1), (0, 1));
    sim.all_up();
    sim
}

fn check_mixed_ring(root: usize) {
    let mut sim = mixed_ring(root);
    sim.run(5);
    assert!(!sim.converged(), "802.1D ports wait out the forward delays");
    // Forwarding without agreement waits fdWhile: Max Age after the link
    // comes up, then Forward Delay learning.
    let took = sim.run_until(40, Sim::converged).expect("converged") + 5;
    assert!(took <= 20 + 15 + 3, "took {took} s");
    assert_eq!(sim.blocking().len(), 1, "{:?}", sim.blocking());
    for end in [(0, 0), (0, 1)] {
        assert!(!sim.status(end).send_rstp, "{end:?} speaks 802.1D");
    }
    // Only Configuration and TCN BPDUs reach the legacy bridges.
    let late = sim.now - 5;
    for end in [(0, 0), (0, 1)] {
        assert!(sim
            .sent(end, late)
            .iter()
            .all(|(_, b)| b.kind != BpduKind::Rst));
    }
    let root_id = sim.nodes[root].stp.bridge_status().bridge_id;
    for n in 0..3 {
        assert_eq!(sim.nodes[n].stp.bridge_status().root_id, root_id);
    }
    sim.run(60);
    assert!(sim.converged());
    assert_eq!(sim.blocking().len(), 1);
}

#[test]
fn mixed_ring_with_rstp_root() {
    check_mixed_ring(0);
}

#[test]
fn mixed_ring_with_legacy_root() {
    check_mixed_ring(1);
    check_mixed_ring(2);
}

#[test]
fn failed_link_fails_over_to_the_alternate() {
    let mut sim = Sim::new();
    let links = ring3(&mut sim);
    sim.all_up();
    sim.run(5);
    assert_eq!(sim.blocking(), vec![(2, 0)]);
    let changes = sim.topology_changes(2);
    // Bridge 2 loses its root port.
    let t = sim.now;
    sim.down(links[2]);
    let took = sim.run_until(3, |s| s.state((2, 0)) == PortState::Forwarding);
    assert!(took.expect("the alternate forwards within 3 s") < 3);
    assert_eq!(sim.role((2, 0)), Role::Root);
    assert!(sim.converged());
    assert!(sim.blocking().is_empty());
    let mut flushed = sim.flushes(t);
    flushed.sort();
    // The ports that lost the link (INACTIVE), and bridge 1's port toward
    // the root (PROPAGATING the change bridge 2 reported). A port that
    // detects or hears of a change does not flush itself.
    assert_eq!(flushed, [(0, 1), (1, 0), (2, 1)]);
    assert!(sim.topology_changes(2) > changes);
    // The link comes back: exactly one port blocks again.
    sim.up(links[2]);
    sim.run_until(3, Sim::converged)
        .expect("converged within 3 s");
    assert_eq!(sim.blocking(), vec![(2, 0)]);
}

#[test]
fn failed_root_port_link_on_legacy_side_recovers() {
    let mut sim = mixed_ring(0);
    sim.run(45);
    assert!(sim.converged());
    let blocked = sim.blocking();
    assert_eq!(blocked.len(), 1);
    // Break the link between the two legacy bridges, or whatever link
    // carries the blocked port.
    let seg = (0..3)
        .find(|&s| !sim.segments[s].ends.contains(&blocked[0]))
        .unwrap();
    sim.down(seg);
    sim.run_until(60, Sim::converged).expect("converged again");
    assert!(sim.blocking().is_empty());
}

#[test]
fn silent_neighbour_ages_out() {
    let mut sim = Sim::new();
    let links = ring3(&mut sim);
    sim.all_up();
    sim.run(5);
    assert_eq!(sim.role((2, 1)), Role::Root);
    // The root's BPDUs to bridge 2 are lost; the link stays up.
    sim.segments[links[2]].silent.push((0, 1));
    let start = sim.now;
    sim.run_until(10, |s| s.role((2, 1)) != Role::Root)
        .expect("the information ages out");
    let aged = sim.now - start;
    // Three hellos (6 s) after the last BPDU, which came at most a hello
    // before the silence.
    assert!((5..=6).contains(&aged), "aged after {aged} s");
    assert_eq!(sim.role((2, 0)), Role::Root);
    assert_eq!(sim.nodes[2].stp.bridge_status().root_cost, 40000);
    sim.run_until(5, |s| s.state((2, 0)) == PortState::Forwarding)
        .expect("the alternate takes over");
}

#[test]
fn admin_edge_forwards_at_once_without_topology_change() {
    let mut sim = Sim::new();
    sim.bridges(1);
    sim.port(
        (0, 0),
        PortConfig {
            admin_edge: true,
            ..PortConfig::default()
        },
    );
    assert!(sim.status((0, 0)).oper_edge);
    sim.nodes[0].stp.set_link(PortId(0), true);
    sim.settle();
    let s = sim.status((0, 0));
    assert_eq!(
        (s.role, s.state, s.oper_edge),
        (Role::Designated, PortState::Forwarding, true)
    );
    assert_eq!(sim.topology_changes(0), 0);
    sim.run(10);
    assert!(sim.flushes(0).is_empty());
    assert_eq!(sim.topology_changes(0), 0);
    assert!(!sim.nodes[0].stp.bridge_status().topology_change);
    // The edge port still sends BPDUs, once a hello.
    let sent = sim.sent((0, 0), 1);
    assert!(
        (5..=6).contains(&sent.len()),
        "{} BPDUs in 10 s",
        sent.len()
    );
}

#[test]
fn auto_edge_after_migrate_time_and_cleared_by_a_bpdu() {
    let mut sim = Sim::new();
    sim.bridges(2);
    sim.port((0, 0), PortConfig::default());
    sim.nodes[0].stp.set_link(PortId(0), true);
    sim.settle();
    assert_eq!(sim.state((0, 0)), PortState::Discarding);
    let took = sim
        .run_until(5, |s| s.status((0, 0)).oper_edge)
        .expect("becomes an edge port");
    assert_eq!(took, 3, "after Migrate Time");
    assert_eq!(sim.state((0, 0)), PortState::Forwarding);
    assert_eq!(sim.topology_changes(0), 0);
    // A bridge appears on the port: not an edge port any more.
    let link = sim.link((0, 0), (1, 0));
    sim.segments[link].up = true;
    sim.nodes[1].stp.set_link(PortId(0), true);
    sim.settle();
    assert!(!sim.status((0, 0)).oper_edge);
    assert!(sim.converged());

    // Without AutoEdge a silent port waits for the forward delays.
    let mut sim = Sim::new();
    sim.bridges(1);
    sim.port(
        (0, 0),
        PortConfig {
            auto_edge: false,
            ..PortConfig::default()
        },
    );
    sim.nodes[0].stp.set_link(PortId(0), true);
    sim.settle();
    sim.run(10);
    assert!(!sim.status((0, 0)).oper_edge);
    assert_eq!(sim.state((0, 0)), PortState::Discarding);
}

#[test]
fn admin_edge_cleared_by_a_bpdu() {
    let mut sim = Sim::new();
    sim.bridges(2);
    let edge = PortConfig {
        admin_edge: true,
        ..PortConfig::default()
    };
    sim.port((1, 0), edge);
    let link = sim.link((0, 0), (1, 0));
    sim.up(link);
    assert!(!sim.status((1, 0)).oper_edge);
    assert_eq!(sim.role((1, 0)), Role::Root);
    assert!(sim.converged());
    // Link down and up: AdminEdge makes it an edge port again.
    sim.down(link);
    assert!(sim.status((1, 0)).oper_edge);
}

#[test]
fn new_link_flushes_and_counts_a_topology_change() {
    let mut sim = Sim::new();
    sim.bridges(3);
    let a = sim.link((0, 0), (1, 0));
    let b = sim.link((1, 1), (2, 0));
    sim.up(a);
    sim.run(5);
    let changes: Vec<u64> = (0..3).map(|n| sim.topology_changes(n)).collect();
    let t = sim.now;
    sim.up(b);
    sim.run(1);
    // Bridge 2's root port and bridge 1's designated port started
    // forwarding: both are topology changes. Bridge 1's other port
    // flushes (tcProp); bridges 0 and 2 have no other port.
    assert!(sim.converged());
    let flushed = sim.flushes(t);
    assert!(
        !flushed.is_empty() && flushed.iter().all(|&e| e == (1, 0)),
        "{flushed:?}"
    );
    for (n, &before) in changes.iter().enumerate().skip(1) {
        assert!(sim.topology_changes(n) > before, "bridge {n}");
        assert!(sim.nodes[n].stp.bridge_status().topology_change);
    }
    // The root hears of it, but has no other port to pass it to: its
    // tcWhile does not start.
    assert!(sim.status((0, 0)).rx_bpdus > 0);
    assert_eq!(sim.topology_changes(0), changes[0]);
    // The TC flag travels in RST BPDUs toward the root.
    assert!(sim
        .sent((1, 0), t)
        .iter()
        .any(|(_, b)| b.flags & flags::TC != 0));
    // A count per change, not per second: no more while it lasts.
    let counted: Vec<u64> = (0..3).map(|n| sim.topology_changes(n)).collect();
    sim.run(10);
    for (n, &count) in counted.iter().enumerate() {
        assert_eq!(sim.topology_changes(n), count, "bridge {n}");
        assert!(!sim.nodes[n].stp.bridge_status().topology_change);
    }
}

#[test]
fn legacy_tcn_is_acknowledged_and_propagated() {
    // RSTP root 0 - RSTP 1 - legacy 2 - (a stub port of bridge 2).
    let mut sim = Sim::new();
    sim.bridge(with_priority(StpConfig::default(), 4096));
    sim.bridge(StpConfig::default());
    sim.bridge(legacy());
    sim.link((0, 0), (1, 0));
    sim.link((1, 1), (2, 0));
    sim.all_up();
    sim.run(45);
    assert!(sim.converged());
    assert!(!sim.status((1, 1)).send_rstp);
    assert_eq!(sim.role((2, 0)), Role::Root);
    // A new port on the legacy bridge, with a link but no neighbour and
    // no AutoEdge: when it forwards, that is a topology change.
    sim.port(
        (2, 1),
        PortConfig {
            auto_edge: false,
            ..PortConfig::default()
        },
    );
    sim.nodes[2].stp.set_link(PortId(1), true);
    sim.settle();
    let t = sim.now;
    sim.run_until(40, |s| s.state((2, 1)) == PortState::Forwarding)
        .expect("the new port forwards");
    let detected = sim.now;
    sim.run(6);
    // The legacy bridge's root port sends TCNs...
    let tcns = sim.status((2, 0)).tx_tcns;
    assert!(tcns >= 1);
    assert!(sim.status((1, 1)).rx_tcns >= 1);
    // ...bridge 1 acknowledges with the TCA flag in a Configuration BPDU...
    let acks: Vec<u32> = sim
        .sent((1, 1), detected)
        .iter()
        .filter(|(_, b)| b.kind == BpduKind::Config && b.flags & flags::TC_ACK != 0)
        .map(|(time, _)| *time)
        .collect();
    assert!(!acks.is_empty(), "a TC acknowledgment");
    // ...and propagates the change to the root, which flushes.
    assert!(sim
        .sent((1, 0), detected)
        .iter()
        .any(|(_, b)| b.kind == BpduKind::Rst && b.flags & flags::TC != 0));
    let flushed = sim.flushes(t);
    assert!(flushed.contains(&(1, 0)), "{flushed:?}");
    assert!(flushed.contains(&(2, 0)), "{flushed:?}");
    assert!(sim.status((0, 0)).rx_bpdus > 0);
    assert!(sim.topology_changes(0) >= 1);
    // Acknowledged, the TCNs stop.
    sim.run(10);
    assert_eq!(sim.status((2, 0)).tx_tcns, tcns);
    // The legacy bridge hears the topology change from its designated
    // bridge: the TC flag in Configuration BPDUs while tcWhile runs.
    assert!(sim
        .sent((1, 1), detected)
        .iter()
        .any(|(_, b)| b.kind == BpduKind::Config && b.flags & flags::TC != 0));
}

#[test]
fn transmit_hold_count_limits_bpdus_per_second() {
    for hold in [1u8, 2, 6] {
        let mut sim = Sim::new();
        for n in 0..4 {
            sim.bridge(StpConfig {
                priority: 32768 + 4096 * n,
                tx_hold_count: hold,
                ..StpConfig::default()
            });
        }
        let mut next = [0u16; 4];
        for a in 0..4 {
            for b in a + 1..4 {
                let (pa, pb) = (next[a], next[b]);
                next[a] += 1;
                next[b] += 1;
                sim.link((a, pa), (b, pb));
            }
        }
        sim.all_up();
        sim.run_until(60, Sim::converged).expect("converged");
        sim.run(3);
        assert!(sim.converged());
        let mut per_second: std::collections::HashMap<(usize, u16, u32), usize> =
            Default::default();
        for l in &sim.log {
            if let super::sim::Event::Sent { bridge, port, .. } = l.event {
                *per_second.entry((bridge, port, l.time)).or_default() += 1;
            }
        }
        let most = per_second.values().copied().max().unwrap();
        assert!(
            most <= usize::from(hold),
            "hold {hold}: {most} BPDUs in a second"
        );
    }

    // Many changes within one second on one port.
    let mut stp = Stp::new(StpConfig::default(), bridge_mac(0));
    let port = PortId(0);
    stp.add_port(port, PortConfig::default(), MacAddr([2, 0, 0, 0, 0, 1]));
    stp.set_link(port, true);
    for n in 0..20u8 {
        let priority = if n % 2 == 0 { 16 } else { 32 };
        stp.set_port_config(
            port,
            PortConfig {
                priority,
                ..PortConfig::default()
            },
        );
    }
    let sent = |actions: Vec<Action>| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::Send { .. }))
            .count()
    };
    assert_eq!(sent(stp.take_actions()), 6);
    // txCount counts down one a second: then one BPDU a second.
    stp.set_port_config(port, PortConfig::default());
    assert_eq!(sent(stp.take_actions()), 0);
    stp.tick();
    assert_eq!(sent(stp.take_actions()), 1);
}

#[test]
fn link_down_disables_and_flushes() {
    let mut sim = Sim::new();
    let links = ring3(&mut sim);
    sim.all_up();
    sim.run(3);
    let t = sim.now;
    sim.down(links[0]);
    for end in [(0, 0), (1, 0)] {
        let s = sim.status(end);
        assert_eq!((s.role, s.state), (Role::Disabled, PortState::Discarding));
    }
    let flushed = sim.flushes(t);
    assert!(
        flushed.contains(&(0, 0)) && flushed.contains(&(1, 0)),
        "{flushed:?}"
    );
    // Bridge 1 now reaches the root through bridge 2.
    sim.run_until(3, Sim::converged).expect("converged");
    assert_eq!(sim.nodes[1].stp.bridge_status().root_cost, 40000);
    assert_eq!(sim.role((1, 1)), Role::Root);
}

#[test]
fn removing_a_port_reselects() {
    let mut sim = Sim::new();
    ring3(&mut sim);
    sim.all_up();
    sim.run(3);
    sim.nodes[2].stp.remove_port(PortId(1));
    sim.segments[2].up = false;
    sim.settle();
    sim.nodes[2].told.remove(&1);
    sim.run_until(3, Sim::converged).expect("converged");
    assert_eq!(sim.nodes[2].stp.bridge_status().root_port, Some(PortId(0)));
    assert_eq!(sim.nodes[2].stp.bridge_status().root_cost, 40000);
}

#[test]
fn port_priority_breaks_ties_between_parallel_links() {
    let mut sim = Sim::new();
    sim.bridges(2);
    // Two links between the same bridges: bridge 1 takes the one whose
    // designated port (on bridge 0) has the better identifier.
    sim.port(
        (0, 1),
        PortConfig {
            priority: 64,
            ..PortConfig::default()
        },
    );
    sim.link((0, 0), (1, 0));
    sim.link((0, 1), (1, 1));
    sim.all_up();
    sim.run_until(2, Sim::converged).expect("converged");
    assert_eq!(sim.role((1, 1)), Role::Root);
    assert_eq!(sim.role((1, 0)), Role::Alternate);
}

/// A small deterministic generator for the randomised networks.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Whether the links whose ends both forward contain a loop.
fn forwarding_loop(sim: &Sim) -> bool {
    let mut parent: Vec<usize> = (0..sim.nodes.len()).collect();
    fn find(parent: &mut [usize], x: usize) -> usize {
        let mut x = x;
        while parent[x] != x {
            x = parent[x];
        }
        x
    }
    for seg in sim.segments.iter().filter(|s| s.up) {
        if seg
            .ends
            .iter()
            .all(|&e| sim.state(e) == PortState::Forwarding)
        {
            let (a, b) = (
                find(&mut parent, seg.ends[0].0),
                find(&mut parent, seg.ends[1].0),
            );
            if a == b {
                return true;
            }
            parent[a] = b;
        }
    }
    false
}

/// Whether the links that are up connect every bridge.
fn connected(sim: &Sim) -> bool {
    let mut reached = vec![false; sim.nodes.len()];
    reached[0] = true;
    for _ in 0..sim.nodes.len() {
        for seg in sim.segments.iter().filter(|s| s.up) {
            let (a, b) = (seg.ends[0].0, seg.ends[1].0);
            if reached[a] || reached[b] {
                reached[a] = true;
                reached[b] = true;
            }
        }
    }
    reached.iter().all(|&r| r)
}

#[test]
fn random_networks_converge_to_a_tree() {
    for seed in 1..=40u64 {
        let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut sim = Sim::new();
        let count = 3 + rng.below(4);
        // Every third network has legacy bridges in it.
        let mixed = seed % 3 == 0;
        for _ in 0..count {
            let legacy_bridge = mixed && rng.below(2) == 0;
            let config = if legacy_bridge {
                legacy()
            } else {
                StpConfig::default()
            };
            let priority = 4096 * (1 + rng.below(14) as u16);
            sim.bridge(with_priority(config, priority));
        }
        let mut next = vec![0u16; count];
        let mut link = |sim: &mut Sim, a: usize, b: usize| {
            let (pa, pb) = (next[a], next[b]);
            next[a] += 1;
            next[b] += 1;
            sim.link((a, pa), (b, pb));
        };
        // A spanning chain, then extra links.
        for n in 1..count {
            let to = rng.below(n);
            link(&mut sim, n, to);
        }
        for _ in 0..1 + rng.below(count) {
            let a = rng.below(count);
            let b = (a + 1 + rng.below(count - 1)) % count;
            link(&mut sim, a, b);
        }
        sim.all_up();
        let limit = if mixed { 45 } else { 3 };
        for round in 0..6 {
            let took = sim.run_until(limit, |s| {
                assert!(
                    mixed || !forwarding_loop(s),
                    "seed {seed}: a forwarding loop"
                );
                s.converged()
            });
            assert!(took.is_some(), "seed {seed} round {round}: not converged");
            let up = sim.segments.iter().filter(|s| s.up).count();
            assert_eq!(
                sim.blocking().len(),
                up + 1 - count,
                "seed {seed} round {round}"
            );
            assert!(!forwarding_loop(&sim), "seed {seed}");
            // Fail or restore a link, keeping the network connected.
            let seg = rng.below(sim.segments.len());
            if sim.segments[seg].up {
                sim.segments[seg].up = false;
                let ok = connected(&sim);
                sim.segments[seg].up = true;
                if ok {
                    sim.down(seg);
                }
            } else {
                sim.up(seg);
            }
        }
    }
}

#[test]
fn root_loss_elects_a_new_root_at_once() {
    let mut sim = Sim::new();
    sim.bridges(5);
    let ring: Vec<usize> = (0..5).map(|n| sim.link((n, 0), ((n + 1) % 5, 1))).collect();
    sim.all_up();
    sim.run(5);
    // The root's links both fail: the other four form a chain, rooted at
    // bridge 1, the next best.
    sim.down(ring[0]);
    sim.down(ring[4]);
    let new_root = sim.nodes[1].stp.bridge_status().bridge_id;
    let took = sim.run_until(3, |s| {
        (1..5).all(|n| s.nodes[n].stp.bridge_status().root_id == new_root)
    });
    assert!(took.expect("a new root within 3 s") <= 3);
    for end in [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (4, 1)] {
        assert_eq!(sim.state(end), PortState::Forwarding, "{end:?}");
    }
    assert!(sim.blocking().is_empty());
}

/// A port configuration with restricted_role or restricted_tcn.
fn restricted(role: bool, tcn: bool) -> PortConfig {
    PortConfig {
        restricted_role: role,
        restricted_tcn: tcn,
        ..PortConfig::default()
    }
}

/// Ring 0 (root) - 1 - 2 - 0: bridge 1's root port is its port facing
/// the root, 1.0, unless that port has restricted_role; then it is 1.1,
/// the way through bridge 2, and 1.0 is an alternate port.
#[test]
fn restricted_role_keeps_a_port_from_becoming_root_port() {
    for restrict in [false, true] {
        let mut sim = Sim::new();
        sim.bridges(3);
        sim.port((1, 0), restricted(restrict, false));
        sim.link((0, 0), (1, 0));
        sim.link((1, 1), (2, 0));
        sim.link((2, 1), (0, 1));
        sim.all_up();
        sim.run(10);
        assert!(sim.converged(), "restricted_role={restrict}");
        let b = sim.nodes[1].stp.bridge_status();
        assert_eq!(b.root_id, sim.nodes[0].stp.bridge_status().bridge_id);
        if restrict {
            assert_eq!(b.root_port, Some(PortId(1)));
            assert_eq!(sim.role((1, 0)), Role::Alternate);
            assert_eq!(sim.state((1, 0)), PortState::Discarding);
            assert_eq!(sim.role((1, 1)), Role::Root);
            assert_eq!(sim.blocking(), [(1, 0)]);
        } else {
            assert_eq!(b.root_port, Some(PortId(0)));
            assert_eq!(sim.role((1, 0)), Role::Root);
            assert_ne!(sim.blocking(), [(1, 0)]);
        }
    }
}

/// A bridge of the best priority appears behind a port with
/// restricted_role (a VM that sends BPDUs claiming to be root): the tree
/// keeps its root, and the port blocks as an alternate port.
#[test]
fn restricted_role_keeps_a_better_bridge_from_taking_over() {
    let mut sim = Sim::new();
    let ring = ring3(&mut sim);
    for seg in ring {
        sim.up(seg);
    }
    sim.run(10);
    assert!(sim.converged());
    let root = sim.nodes[0].stp.bridge_status().bridge_id;
    let blocked = sim.blocking();
    let hostile = sim.bridge(with_priority(StpConfig::default(), 0));
    sim.port((1, 2), restricted(true, false));
    let link = sim.link((1, 2), (hostile, 0));
    sim.up(link);
    sim.run(10);
    for (n, node) in sim.nodes.iter().take(3).enumerate() {
        assert_eq!(node.stp.bridge_status().root_id, root, "bridge {n}");
    }
    assert_eq!(sim.role((1, 2)), Role::Alternate);
    assert_eq!(sim.state((1, 2)), PortState::Discarding);
    // The hostile bridge hears nothing from a blocked port and calls
    // itself root; the rest of the tree is as it was.
    let mut now = sim.blocking();
    now.retain(|&end| end != (1, 2));
    assert_eq!(now, blocked);
    // Without the restriction, it would be everyone's root.
    sim.nodes[1]
        .stp
        .set_port_config(PortId(2), PortConfig::default());
    sim.settle();
    sim.run(10);
    let hostile_id = sim.nodes[hostile].stp.bridge_status().bridge_id;
    for (n, node) in sim.nodes.iter().take(3).enumerate() {
        assert_eq!(node.stp.bridge_status().root_id, hostile_id, "bridge {n}");
    }
    assert_eq!(sim.role((1, 2)), Role::Root);
}

/// The last BPDU `end` sent, with the TC flag set, as a frame from it.
fn tc_flagged(sim: &Sim, end: (usize, u16)) -> Vec<u8> {
    let (_, mut bpdu) = sim.sent(end, 0).last().cloned().expect("a BPDU sent");
    bpdu.flags |= flags::TC;
    bpdu.to_frame(MacAddr([2, 0, 0, end.0 as u8, 0, end.1 as u8]))
}

/// Bridge 1 between root 0 (1.0) and bridges 2 (1.1) and 3 (1.2), all
/// converged; bridge 1's port 1.2 configured as `config`.
fn star(config: PortConfig) -> Sim {
    let mut sim = Sim::new();
    sim.bridges(4);
    sim.port((1, 2), config);
    sim.link((0, 0), (1, 0));
    sim.link((1, 1), (2, 0));
    sim.link((1, 2), (3, 0));
    sim.all_up();
    sim.run(10);
    assert!(sim.converged());
    assert_eq!(sim.role((1, 2)), Role::Designated);
    sim
}

/// A TC from bridge 3 on bridge 1's port 1.2 flushes bridge 1's other
/// ports and travels on, unless 1.2 has restricted_tcn: then nothing is
/// flushed and no TC leaves by the other ports; the event is counted.
#[test]
fn restricted_tcn_keeps_a_change_to_its_port() {
    for restrict in [false, true] {
        let mut sim = star(restricted(false, restrict));
        sim.run(10);
        let t = sim.now;
        let events = sim.nodes[1].stp.bridge_status().tc_events;
        let frame = tc_flagged(&sim, (3, 0));
        sim.nodes[1].stp.receive(PortId(2), &frame);
        sim.settle();
        sim.run(1);
        let b = sim.nodes[1].stp.bridge_status();
        assert_eq!(b.tc_events, events + 1, "restricted_tcn={restrict}");
        let flushed = sim.flushes(t);
        let tc_out = |sim: &Sim, end| {
            sim.sent(end, t)
                .iter()
                .any(|(_, b)| b.flags & flags::TC != 0)
        };
        if restrict {
            assert!(flushed.is_empty(), "{flushed:?}");
            assert!(!tc_out(&sim, (1, 0)) && !tc_out(&sim, (1, 1)));
        } else {
            assert!(flushed.contains(&(1, 0)), "{flushed:?}");
            assert!(flushed.contains(&(1, 1)), "{flushed:?}");
            assert!(tc_out(&sim, (1, 0)) && tc_out(&sim, (1, 1)));
        }
        // Neither way does the tree move.
        assert!(sim.converged());
        assert_eq!(sim.role((1, 2)), Role::Designated);
    }
}

/// A port with restricted_tcn still flushes for changes elsewhere.
#[test]
fn restricted_tcn_port_flushes_for_other_ports_changes() {
    let mut sim = star(restricted(false, true));
    sim.run(10);
    let t = sim.now;
    let frame = tc_flagged(&sim, (2, 0));
    sim.nodes[1].stp.receive(PortId(1), &frame);
    sim.settle();
    let flushed = sim.flushes(t);
    assert!(flushed.contains(&(1, 2)), "{flushed:?}");
    assert!(flushed.contains(&(1, 0)), "{flushed:?}");
}

/// A hundred TC-flagged BPDUs and TCNs within one second: each asks for a
/// flush of the other ports, but each port is flushed once at once and
/// once more at the next tick; a quiet tick flushes nothing, and the next
/// change after it flushes at once again.
#[test]
fn a_flood_of_tcs_costs_one_flush_per_port_per_tick() {
    let mut sim = star(PortConfig::default());
    sim.run(10);
    let t = sim.now;
    let before = sim.nodes[1].stp.bridge_status();
    let tc = tc_flagged(&sim, (3, 0));
    let tcn = Bpdu::tcn().to_frame(MacAddr([2, 0, 0, 3, 0, 0]));
    for n in 0..100 {
        let frame = if n % 2 == 0 { &tc } else { &tcn };
        sim.nodes[1].stp.receive(PortId(2), frame);
        sim.settle();
    }
    let count = |flushed: &[(usize, u16)], end| flushed.iter().filter(|&&e| e == end).count();
    let flushed = sim.flushes(t);
    assert_eq!(count(&flushed, (1, 0)), 1, "{flushed:?}");
    assert_eq!(count(&flushed, (1, 1)), 1, "{flushed:?}");
    assert_eq!(count(&flushed, (1, 2)), 0, "{flushed:?}");
    let b = sim.nodes[1].stp.bridge_status();
    assert_eq!(b.tc_events - before.tc_events, 100);
    assert!(b.flush_requests - before.flush_requests >= 200, "{b:?}");
    assert_eq!(b.flushes - before.flushes, 2, "{b:?}");
    // The held-back flushes come at the next tick, once per port.
    sim.tick();
    let flushed = sim.flushes(t + 1);
    assert_eq!(count(&flushed, (1, 0)), 1, "{flushed:?}");
    assert_eq!(count(&flushed, (1, 1)), 1, "{flushed:?}");
    // A change within that tick waits for the next one.
    sim.nodes[1].stp.receive(PortId(2), &tcn);
    sim.settle();
    assert!(sim.flushes(t + 1).len() == 2, "{:?}", sim.flushes(t + 1));
    sim.tick();
    assert_eq!(sim.flushes(t + 2).len(), 2, "{:?}", sim.flushes(t + 2));
    // Nothing held back: a quiet tick flushes nothing...
    sim.tick();
    assert!(sim.flushes(t + 3).is_empty(), "{:?}", sim.flushes(t + 3));
    // ...and the next change flushes at once.
    sim.nodes[1].stp.receive(PortId(2), &tc);
    sim.settle();
    assert_eq!(sim.flushes(t + 3).len(), 2, "{:?}", sim.flushes(t + 3));
    let s = sim.status((1, 0));
    assert!(s.flush_requests > s.flushes, "{s:?}");
    // The tree did not move.
    assert!(sim.converged());
}
