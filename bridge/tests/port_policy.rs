//! What a port lets through besides the table's say (spanning tree's port
//! state, BPDU guard and filter, the storm limit) and the move limit,
//! written once and run for every lock strategy.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bridge::fdb::FdbKey;
use bridge::forward::DropReason;
use bridge::wire::MacAddr;
use bridge::worker::{
    EventSink, Gate, MoveLimit, PortEvent, PortFlags, PortPolicy, PortSetup, WorkerParts,
    BPDUS_PER_SECOND,
};
use bridge::PortId;
use bridge::{FdbConfig, MacTable, Worker, WorkerConfig};
use common::{frame, station, Rig};
use locks::Strategy;

const A: u32 = 1;
const B: u32 = 2;

fn key(n: u32) -> FdbKey {
    FdbKey::new(0, station(n))
}

fn bpdu(src: MacAddr) -> Vec<u8> {
    frame(MacAddr::BRIDGE_GROUP, src, 60)
}

/// A rig whose worker reports its events into the returned list, with
/// `config` and port `i` set up as `setups[i]`.
fn rig_with<S: Strategy>(
    setups: Vec<PortSetup>,
    config: WorkerConfig,
) -> (Rig<S>, Arc<Mutex<Vec<PortEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink: EventSink = {
        let events = Arc::clone(&events);
        Arc::new(move |event| events.lock().unwrap().push(event))
    };
    let n = setups.len();
    let fdb = Arc::new(MacTable::<S>::new(FdbConfig::default()));
    let (ports, peers): (Vec<_>, Vec<_>) = (0..n)
        .map(|i| bridge::port::MemoryQueue::pair(format!("mem{i}")))
        .unzip();
    let parts = WorkerParts::new(0).with_setups(setups).with_events(sink);
    let ports = ports.into_iter().map(Some).collect();
    let worker = Worker::resume(Arc::clone(&fdb), ports, config, parts);
    (Rig { fdb, worker, peers }, events)
}

fn stp() -> WorkerConfig {
    WorkerConfig {
        stp: true,
        ..WorkerConfig::default()
    }
}

fn gated(gates: &[Gate]) -> Vec<PortSetup> {
    gates
        .iter()
        .map(|&gate| PortSetup {
            gate,
            ..PortSetup::default()
        })
        .collect()
}

fn with_policy(policy: PortPolicy, ports: usize) -> Vec<PortSetup> {
    let mut setups = vec![PortSetup::default(); ports];
    setups[0].policy = policy;
    setups
}

/// With spanning tree, BPDUs go to it, whatever the port's state, and
/// never to another port.
fn bpdus_go_to_spanning_tree<S: Strategy>() {
    let (mut rig, events) = rig_with::<S>(gated(&[Gate::CLOSED, Gate::OPEN, Gate::OPEN]), stp());
    rig.send(0, &bpdu(station(A)));
    rig.send(1, &bpdu(station(B)));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    let events = events.lock().unwrap();
    assert_eq!(
        *events,
        vec![
            PortEvent::Bpdu {
                port: PortId(0),
                frame: bpdu(station(A)),
            },
            PortEvent::Bpdu {
                port: PortId(1),
                frame: bpdu(station(B)),
            },
        ]
    );
    assert_eq!(rig.stats(0).dropped(DropReason::Stp), 1);
    // BPDUs teach the table nothing.
    assert!(rig.fdb.is_empty());
}

/// The BPDUs handed to spanning tree are limited per port: a flood on
/// port 0 gets BPDUS_PER_SECOND a second through, and port 1's BPDUs,
/// within the same second, all get through.
fn a_bpdu_flood_on_one_port_leaves_the_others_theirs<S: Strategy>() {
    let (mut rig, events) = rig_with::<S>(gated(&[Gate::OPEN, Gate::OPEN]), stp());
    let start = std::time::Instant::now();
    let flood = 10 * BPDUS_PER_SECOND as usize;
    for n in 0..flood {
        rig.peers[0].inject(&bpdu(MacAddr([2, 0, 0, 0, (n >> 8) as u8, n as u8])));
        if n % 32 == 31 {
            while rig.worker.poll() > 0 {}
        }
    }
    while rig.worker.poll() > 0 {}
    for _ in 0..3 {
        rig.send(1, &bpdu(station(B)));
    }
    // The limit's window is a second: as many windows may have begun as
    // seconds passed, plus one.
    let windows = start.elapsed().as_secs() as usize + 1;
    let events = events.lock().unwrap();
    let from = |port: u16| {
        events
            .iter()
            .filter(|e| matches!(e, PortEvent::Bpdu { port: p, .. } if *p == PortId(port)))
            .count()
    };
    assert!(from(0) >= BPDUS_PER_SECOND as usize, "{}", from(0));
    assert!(
        from(0) <= windows * BPDUS_PER_SECOND as usize,
        "{} handed over in {windows} windows",
        from(0)
    );
    assert_eq!(from(1), 3, "port 1's BPDUs during port 0's flood");
    assert_eq!(rig.stats(0).dropped(DropReason::Stp), flood as u64);
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
}

/// A discarding port learns and forwards nothing; a learning port learns
/// but forwards nothing; neither is sent to.
fn port_states_gate_learning_and_forwarding<S: Strategy>() {
    let (mut rig, _) = rig_with::<S>(gated(&[Gate::OPEN, Gate::CLOSED, Gate::LEARNING]), stp());
    rig.send(1, &frame(MacAddr::BROADCAST, station(A), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(
        rig.fdb.lookup(&key(A)),
        None,
        "learned on a discarding port"
    );
    rig.send(2, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.fdb.lookup(&key(B)), Some(PortId(2)));
    assert_eq!(rig.stats(1).dropped(DropReason::PortState), 1);
    assert_eq!(rig.stats(2).dropped(DropReason::PortState), 1);
    // Nothing leaves by them: a flood reaches neither, unicast to the
    // station behind the learning port goes nowhere.
    rig.send(0, &frame(MacAddr::BROADCAST, station(3), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    rig.send(0, &frame(station(B), station(3), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    // The state changes while running.
    let control = rig.worker.control();
    control.set_gate(PortId(2), Gate::OPEN).unwrap();
    rig.worker.apply_changes();
    rig.send(0, &frame(station(B), station(3), 60));
    assert_eq!(rig.ports_that_sent(), vec![2]);
    // BPDUs of spanning tree leave a port that does not forward.
    control
        .send_frame(PortId(1), bpdu(MacAddr([2, 0, 0, 0, 0, 0x11])))
        .unwrap();
    rig.worker.apply_changes();
    let sent = rig.sent();
    assert_eq!(sent[1], vec![bpdu(MacAddr([2, 0, 0, 0, 0, 0x11]))]);
}

/// A BPDU on a guarded port disables it, with or without spanning tree:
/// nothing of it is forwarded or learned, nothing is sent to it, until it
/// is enabled again.
fn a_guard_disables_its_port<S: Strategy>() {
    for config in [WorkerConfig::default(), stp()] {
        let policy = PortPolicy {
            guard: true,
            ..PortPolicy::default()
        };
        let (mut rig, events) = rig_with::<S>(with_policy(policy, 3), config);
        rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
        assert_eq!(rig.ports_that_sent(), vec![1, 2]);
        rig.send(0, &bpdu(station(A)));
        assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
        assert_eq!(
            *events.lock().unwrap(),
            vec![PortEvent::GuardTripped { port: PortId(0) }]
        );
        rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
        rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
        assert_eq!(
            rig.ports_that_sent(),
            vec![2],
            "in or out of a tripped port"
        );
        assert_eq!(rig.stats(0).dropped(DropReason::Guard), 1);
        assert_eq!(rig.stats(0).dropped(DropReason::PortState), 1);
        // A second BPDU trips nothing more.
        rig.send(0, &bpdu(station(A)));
        assert_eq!(events.lock().unwrap().len(), 1);
        let control = rig.worker.control();
        control.set_disabled(PortId(0), false).unwrap();
        rig.worker.apply_changes();
        rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
        assert_eq!(rig.ports_that_sent(), vec![0, 2]);
    }
}

/// A filtered port drops BPDUs coming in and gets none flooded to it.
fn a_bpdu_filter_drops_bpdus_in_and_out<S: Strategy>() {
    let policy = PortPolicy {
        bpdu_filter: true,
        ..PortPolicy::default()
    };
    let (mut rig, events) = rig_with::<S>(with_policy(policy, 3), WorkerConfig::default());
    rig.send(0, &bpdu(station(A)));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(0).dropped(DropReason::BpduFilter), 1);
    rig.send(1, &bpdu(station(B)));
    assert_eq!(
        rig.ports_that_sent(),
        vec![2],
        "flooded to the filtered port"
    );
    // Other frames pass both ways.
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.ports_that_sent(), vec![0, 2]);
    assert!(events.lock().unwrap().is_empty());
}

/// The filter holds with VLAN filtering, and on a port added while the
/// worker runs.
fn a_bpdu_filter_holds_with_vlans_and_on_added_ports<S: Strategy>() {
    let config = WorkerConfig {
        vlan_filtering: true,
        ..WorkerConfig::default()
    };
    let setup = PortSetup::with_vlans(bridge::vlan::PortVlans::access(1));
    let (mut rig, _) = rig_with::<S>(vec![setup.clone(); 3], config);
    rig.send(1, &bpdu(station(B)));
    assert_eq!(rig.ports_that_sent(), vec![0, 2], "no filter yet");
    let control = rig.worker.control();
    let (port, peer) = bridge::port::MemoryQueue::pair("mem3");
    let filtered = PortSetup {
        policy: PortPolicy {
            bpdu_filter: true,
            ..PortPolicy::default()
        },
        ..setup
    };
    let answer = control.add_with(PortId(3), port, filtered).unwrap();
    rig.worker.apply_changes();
    answer.try_recv().expect("the worker answered");
    rig.peers.push(peer);
    rig.send(1, &bpdu(station(B)));
    assert_eq!(
        rig.ports_that_sent(),
        vec![0, 2],
        "flooded to the filtered port"
    );
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.ports_that_sent(), vec![0, 2, 3]);
}

/// A port whose gate closes forgets what it learned, whatever a batch in
/// flight learned after the control plane's flush.
fn a_closing_gate_flushes_its_port<S: Strategy>() {
    let (mut rig, _) = rig_with::<S>(gated(&[Gate::OPEN, Gate::OPEN]), stp());
    rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.fdb.lookup(&key(A)), Some(PortId(0)));
    let control = rig.worker.control();
    control.set_gate(PortId(0), Gate::LEARNING).unwrap();
    rig.worker.apply_changes();
    assert_eq!(
        rig.fdb.lookup(&key(A)),
        Some(PortId(0)),
        "learning keeps it"
    );
    control.set_gate(PortId(0), Gate::CLOSED).unwrap();
    rig.worker.apply_changes();
    assert_eq!(rig.fdb.lookup(&key(A)), None);
    assert_eq!(rig.fdb.lookup(&key(B)), Some(PortId(1)));
}

fn flagged(flags: &[PortFlags], vlans: bool) -> Vec<PortSetup> {
    flags
        .iter()
        .map(|&flags| PortSetup {
            policy: PortPolicy {
                flags,
                ..PortPolicy::default()
            },
            vlans: match vlans {
                true => bridge::vlan::PortVlans::access(1),
                false => bridge::vlan::PortVlans::default(),
            },
            ..PortSetup::default()
        })
        .collect()
}

fn filtering(vlans: bool) -> WorkerConfig {
    WorkerConfig {
        vlan_filtering: vlans,
        ..WorkerConfig::default()
    }
}

const ISOLATED: PortFlags = PortFlags {
    isolated: true,
    hairpin: false,
    learning: true,
    flood: true,
    mcast_flood: true,
    bcast_flood: true,
    locked: false,
};

/// Frames from an isolated port never leave by another isolated one
/// (br_forward.c's should_deliver), flooded or known; other ports are
/// reached both ways. With and without VLAN filtering.
fn isolated_ports_reach_only_others<S: Strategy>() {
    for vlans in [false, true] {
        let flags = [ISOLATED, ISOLATED, PortFlags::default()];
        let (mut rig, _) = rig_with::<S>(flagged(&flags, vlans), filtering(vlans));
        rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
        assert_eq!(rig.ports_that_sent(), vec![2], "vlans {vlans}");
        rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
        assert_eq!(rig.ports_that_sent(), vec![2]);
        rig.send(2, &frame(MacAddr::BROADCAST, station(3), 60));
        assert_eq!(rig.ports_that_sent(), vec![0, 1]);
        rig.send(0, &frame(station(B), station(A), 60));
        assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
        assert_eq!(rig.stats(0).dropped(DropReason::Isolated), 1);
        rig.send(0, &frame(station(3), station(A), 60));
        assert_eq!(rig.ports_that_sent(), vec![2]);
    }
}

/// With hairpin, a frame may leave by the port it came in on: floods and
/// unicast to a station on the same port.
fn hairpin_sends_back_out_of_the_ingress_port<S: Strategy>() {
    for vlans in [false, true] {
        let hairpin = PortFlags {
            hairpin: true,
            ..PortFlags::default()
        };
        let flags = [hairpin, PortFlags::default()];
        let (mut rig, _) = rig_with::<S>(flagged(&flags, vlans), filtering(vlans));
        rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
        assert_eq!(rig.ports_that_sent(), vec![0, 1], "vlans {vlans}");
        rig.send(0, &frame(MacAddr::BROADCAST, station(B), 60));
        rig.sent();
        rig.send(0, &frame(station(B), station(A), 60));
        assert_eq!(rig.ports_that_sent(), vec![0]);
        assert_eq!(rig.stats(0).dropped(DropReason::SamePort), 0);
        // Without it, the port that sent gets nothing back.
        rig.send(1, &frame(MacAddr::BROADCAST, station(3), 60));
        assert_eq!(rig.ports_that_sent(), vec![0]);
    }
}

/// learning off: nothing is learned from the port, so frames to its
/// stations flood.
fn learning_off_learns_nothing_of_the_port<S: Strategy>() {
    let off = PortFlags {
        learning: false,
        ..PortFlags::default()
    };
    let (mut rig, _) = rig_with::<S>(
        flagged(&[off, PortFlags::default(), PortFlags::default()], false),
        filtering(false),
    );
    rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
    assert_eq!(rig.ports_that_sent(), vec![1, 2]);
    assert_eq!(rig.fdb.lookup(&key(A)), None);
    rig.send(1, &frame(station(A), station(B), 60));
    assert_eq!(rig.ports_that_sent(), vec![0, 2], "unknown, flooded");
    assert_eq!(rig.fdb.lookup(&key(B)), Some(PortId(1)));
}

/// flood, mcast_flood and bcast_flood off keep unknown unicast, multicast
/// and broadcast floods off the port; known unicast still reaches it.
fn flood_flags_keep_floods_off_a_port<S: Strategy>() {
    let multicast: MacAddr = "01:00:5e:00:00:01".parse().unwrap();
    for (flags, kept_off) in [
        (
            PortFlags {
                flood: false,
                ..PortFlags::default()
            },
            [true, false, false],
        ),
        (
            PortFlags {
                mcast_flood: false,
                ..PortFlags::default()
            },
            [false, true, false],
        ),
        (
            PortFlags {
                bcast_flood: false,
                ..PortFlags::default()
            },
            [false, false, true],
        ),
    ] {
        let setups = flagged(&[PortFlags::default(), flags, PortFlags::default()], false);
        let (mut rig, _) = rig_with::<S>(setups, filtering(false));
        for (dst, off) in [station(9), multicast, MacAddr::BROADCAST]
            .into_iter()
            .zip(kept_off)
        {
            rig.send(0, &frame(dst, station(A), 60));
            let expected = if off { vec![2] } else { vec![1, 2] };
            assert_eq!(rig.ports_that_sent(), expected, "{flags:?} {dst}");
        }
        rig.send(1, &frame(station(A), station(B), 60));
        rig.sent();
        rig.send(0, &frame(station(B), station(A), 60));
        assert_eq!(rig.ports_that_sent(), vec![1], "known unicast {flags:?}");
    }
}

/// The group forward mask floods the link-local groups whose bit it sets
/// (LLDP is bit 14, 802.1X bit 3); the others stay local.
fn the_group_forward_mask_floods_its_groups<S: Strategy>() {
    for vlans in [false, true] {
        let config = WorkerConfig {
            group_fwd_mask: 1 << 14 | 1 << 3,
            ..filtering(vlans)
        };
        let setups = flagged(&[PortFlags::default(); 3], vlans);
        let (mut rig, _) = rig_with::<S>(setups, config);
        for last in 1..=0x0f {
            let dst = MacAddr([0x01, 0x80, 0xc2, 0, 0, last]);
            rig.send(0, &frame(dst, station(A), 60));
            let expected = match last {
                0x03 | 0x0e => vec![1, 2],
                _ => vec![],
            };
            assert_eq!(rig.ports_that_sent(), expected, "{dst} vlans {vlans}");
        }
        assert_eq!(rig.stats(0).dropped(DropReason::Reserved), 13);
    }
}

/// A port that spanning tree has learning floods no link-local group the
/// mask names either (br_handle_frame_finish drops what a learning port
/// receives, link-local groups the mask forwards among it).
fn a_learning_port_forwards_no_masked_group<S: Strategy>() {
    let config = WorkerConfig {
        group_fwd_mask: 1 << 14,
        ..stp()
    };
    let (mut rig, _) = rig_with::<S>(gated(&[Gate::LEARNING, Gate::OPEN, Gate::OPEN]), config);
    let lldp = frame(MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x0e]), station(A), 60);
    rig.send(0, &lldp);
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(0).dropped(DropReason::Reserved), 1);
    // Its source is learned all the same.
    assert_eq!(rig.fdb.lookup(&key(A)), Some(PortId(0)));
    // From a forwarding port the group floods, to the forwarding ports.
    rig.send(1, &lldp);
    assert_eq!(rig.ports_that_sent(), vec![2]);
}

/// A locked port passes only stations with a static entry on it, learns
/// nothing, and a static entry opens it for one station.
fn a_locked_port_passes_only_its_static_stations<S: Strategy>() {
    for vlans in [false, true] {
        let locked = PortFlags {
            locked: true,
            ..PortFlags::default()
        };
        let flags = [locked, PortFlags::default(), PortFlags::default()];
        let (mut rig, _) = rig_with::<S>(flagged(&flags, vlans), filtering(vlans));
        rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
        assert_eq!(rig.ports_that_sent(), Vec::<usize>::new(), "vlans {vlans}");
        assert_eq!(rig.stats(0).dropped(DropReason::Locked), 1);
        let vid = if vlans { 1 } else { 0 };
        assert_eq!(rig.fdb.lookup(&FdbKey::new(vid, station(A))), None);
        rig.fdb.add_static(FdbKey::new(vid, station(A)), PortId(0));
        rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
        assert_eq!(rig.ports_that_sent(), vec![1, 2]);
        // Another station, or the same one static on another port, not.
        rig.send(0, &frame(MacAddr::BROADCAST, station(B), 60));
        rig.fdb.add_static(FdbKey::new(vid, station(3)), PortId(1));
        rig.send(0, &frame(MacAddr::BROADCAST, station(3), 60));
        assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
        assert_eq!(rig.fdb.lookup(&FdbKey::new(vid, station(B))), None);
        // Frames to the locked port's stations still reach it.
        rig.send(1, &frame(station(A), station(B), 60));
        assert_eq!(rig.ports_that_sent(), vec![0]);
    }
}

/// Floods beyond the storm limit are dropped and counted; known unicast
/// never is.
fn the_storm_limit_holds_floods_only<S: Strategy>() {
    let policy = PortPolicy {
        storm: Some(100),
        ..PortPolicy::default()
    };
    let (mut rig, _) = rig_with::<S>(with_policy(policy, 2), WorkerConfig::default());
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    rig.sent();
    // 64 frames of burst pass (a tenth of the rate, at least 64); the
    // refill over the few milliseconds this takes adds at most a frame or
    // two, so most of the rest are dropped.
    let sent = 500;
    for _ in 0..sent {
        rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
    }
    let forwarded = rig.sent()[1].len() as u64;
    let storm = rig.stats(0).dropped(DropReason::Storm);
    assert_eq!(forwarded + storm, sent);
    assert!((64..sent / 2).contains(&forwarded), "{forwarded} forwarded");
    for _ in 0..sent {
        rig.send(0, &frame(station(B), station(A), 60));
    }
    assert_eq!(rig.sent()[1].len() as u64, sent, "known unicast limited");
    assert_eq!(rig.stats(0).dropped(DropReason::Storm), storm);
}

/// A station moving beyond the move limit has its frames dropped, and is
/// not learned, for the hold time.
fn the_move_limit_holds_a_flapping_station<S: Strategy>() {
    let config = WorkerConfig {
        move_limit: Some(MoveLimit {
            moves: 5,
            hold: Duration::from_secs(60),
        }),
        ..WorkerConfig::default()
    };
    let (mut rig, _) = rig_with::<S>(vec![PortSetup::default(); 3], config);
    for n in 0..20 {
        rig.send(n % 2, &frame(MacAddr::BROADCAST, station(A), 60));
    }
    rig.sent();
    let held: u64 = (0..2)
        .map(|p| rig.stats(p).dropped(DropReason::MoveLimit))
        .sum();
    // Five moves a second are allowed (the first frame is no move): the
    // sixth move's frame and every one after it are dropped.
    assert_eq!(held, 20 - 6);
    rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    // Other stations are not held.
    rig.send(0, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.ports_that_sent(), vec![1, 2]);
}

/// `max_learned`: a port learns at most its limit; further sources are
/// forwarded, not learned, and counted; a station moving onto a full port
/// is forgotten rather than left on its old one; room comes back as
/// entries go.
fn a_port_learns_at_most_its_max_learned<S: Strategy>() {
    let (mut rig, _) = rig_with::<S>(vec![PortSetup::default(); 3], WorkerConfig::default());
    rig.fdb.set_port_limit(PortId(0), 4);
    for n in 0..10 {
        rig.send(0, &frame(MacAddr::BROADCAST, station(100 + n), 60));
        assert_eq!(rig.ports_that_sent(), vec![1, 2], "source {n} forwarded");
    }
    let learned: Vec<u32> = (0..10)
        .filter(|n| rig.fdb.lookup(&key(100 + n)) == Some(PortId(0)))
        .collect();
    assert_eq!(learned, [0, 1, 2, 3]);
    assert_eq!(rig.fdb.port_learned(PortId(0)), 4);
    assert_eq!(rig.stats(0).refused, 6);
    // Another port learns freely.
    for n in 0..10 {
        rig.send(1, &frame(MacAddr::BROADCAST, station(200 + n), 60));
    }
    assert_eq!(rig.fdb.port_learned(PortId(1)), 10);
    // A station of port 1 moving onto the full port 0 is forgotten.
    rig.send(0, &frame(MacAddr::BROADCAST, station(200), 60));
    rig.sent();
    assert_eq!(rig.fdb.lookup(&key(200)), None);
    assert_eq!(rig.fdb.port_learned(PortId(1)), 9);
    // A flush of the port makes room again.
    rig.fdb.flush_port(PortId(0));
    assert_eq!(rig.fdb.port_learned(PortId(0)), 0);
    rig.send(0, &frame(MacAddr::BROADCAST, station(109), 60));
    rig.sent();
    assert_eq!(rig.fdb.lookup(&key(109)), Some(PortId(0)));
    // A station of port 0 moving to port 1 frees its place.
    rig.send(1, &frame(MacAddr::BROADCAST, station(109), 60));
    rig.sent();
    assert_eq!(rig.fdb.port_learned(PortId(0)), 0);
    assert_eq!(rig.fdb.port_learned(PortId(1)), 10);
}

for_each_strategy!(
    bpdus_go_to_spanning_tree,
    a_bpdu_flood_on_one_port_leaves_the_others_theirs,
    port_states_gate_learning_and_forwarding,
    a_guard_disables_its_port,
    a_bpdu_filter_drops_bpdus_in_and_out,
    a_bpdu_filter_holds_with_vlans_and_on_added_ports,
    a_closing_gate_flushes_its_port,
    isolated_ports_reach_only_others,
    hairpin_sends_back_out_of_the_ingress_port,
    learning_off_learns_nothing_of_the_port,
    flood_flags_keep_floods_off_a_port,
    the_group_forward_mask_floods_its_groups,
    a_learning_port_forwards_no_masked_group,
    a_locked_port_passes_only_its_static_stations,
    the_storm_limit_holds_floods_only,
    the_move_limit_holds_a_flapping_station,
    a_port_learns_at_most_its_max_learned,
);
