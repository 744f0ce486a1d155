//! The forwarding rules and the table's contract, written once and run for
//! every lock strategy.

mod common;

use bridge::fdb::{FdbKey, FdbRecord, Learned, SourceState};
use bridge::forward::{Decision, DropReason};
use bridge::vlan::PortVlans;
use bridge::wire::MacAddr;
use bridge::PortId;
use bridge::{FdbConfig, MacTable, WorkerConfig};
use common::{frame, station, tagged, Rig};
use locks::Strategy;

const A: u32 = 1;
const B: u32 = 2;
const C: u32 = 3;

fn key(n: u32) -> FdbKey {
    FdbKey::new(0, station(n))
}

fn key_of(mac: MacAddr) -> FdbKey {
    FdbKey::new(0, mac)
}

fn runts_are_dropped<S: Strategy>() {
    let mut rig = Rig::<S>::new(2);
    rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60)[..13]);
    rig.send(0, &tagged(MacAddr::BROADCAST, station(A), 5, 60)[..17]);
    rig.send(0, &[]);
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(0).dropped(DropReason::Runt), 3);
    assert!(rig.fdb.is_empty());
    // The shortest legal header is forwarded.
    rig.send(0, &frame(MacAddr::BROADCAST, station(A), 14));
    assert_eq!(rig.ports_that_sent(), vec![1]);
}

fn bad_sources_are_dropped_and_not_learned<S: Strategy>() {
    let mut rig = Rig::<S>::new(2);
    let multicast: MacAddr = "01:00:5e:00:00:01".parse().unwrap();
    for src in [multicast, MacAddr::BROADCAST, MacAddr::ZERO] {
        rig.send(0, &frame(MacAddr::BROADCAST, src, 60));
    }
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(0).dropped(DropReason::BadSource), 3);
    assert!(rig.fdb.is_empty());
}

fn reserved_destinations_are_never_forwarded<S: Strategy>() {
    let mut rig = Rig::<S>::new(3);
    for last in 0x01..=0x0f {
        let dst = MacAddr([0x01, 0x80, 0xc2, 0, 0, last]);
        rig.send(0, &frame(dst, station(A), 60));
    }
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(0).dropped(DropReason::Reserved), 15);
    // Their sources are still learned, as the kernel bridges do.
    assert_eq!(rig.fdb.lookup(&key(A)), Some(PortId(0)));
    // The next group address is ordinary multicast.
    rig.send(
        0,
        &frame(MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x10]), station(A), 60),
    );
    assert_eq!(rig.ports_that_sent(), vec![1, 2]);
}

fn bpdus_flood_without_spanning_tree<S: Strategy>() {
    // As the Linux bridge with stp_state 0: the bridges around that run
    // spanning tree see a loop through this one.
    let mut rig = Rig::<S>::new(3);
    rig.send(1, &frame(MacAddr::BRIDGE_GROUP, station(A), 60));
    assert_eq!(rig.ports_that_sent(), vec![0, 2]);
    assert_eq!(rig.stats(1).dropped(DropReason::Reserved), 0);
}

fn group_and_unknown_destinations_flood<S: Strategy>() {
    let mut rig = Rig::<S>::new(4);
    let multicast: MacAddr = "33:33:00:00:00:01".parse().unwrap();
    for dst in [MacAddr::BROADCAST, multicast, station(B)] {
        let sent = frame(dst, station(A), 100);
        rig.send(1, &sent);
        let out = rig.sent();
        assert!(out[1].is_empty(), "flooded back out of its ingress port");
        for port in [0, 2, 3] {
            assert_eq!(out[port], vec![sent.clone()], "port {port}, dst {dst}");
        }
    }
}

fn known_unicast_goes_to_its_port_only<S: Strategy>() {
    let mut rig = Rig::<S>::new(3);
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    rig.sent();
    let to_b = frame(station(B), station(A), 200);
    rig.send(0, &to_b);
    let out = rig.sent();
    assert_eq!(out[1], vec![to_b]);
    assert!(out[0].is_empty() && out[2].is_empty());
    // And the reply, now that A is known, too.
    rig.send(1, &frame(station(A), station(B), 60));
    assert_eq!(rig.ports_that_sent(), vec![0]);
}

fn frames_never_go_back_out_of_their_port<S: Strategy>() {
    let mut rig = Rig::<S>::new(3);
    rig.send(0, &frame(MacAddr::BROADCAST, station(B), 60));
    rig.sent();
    rig.send(0, &frame(station(B), station(A), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(0).dropped(DropReason::SamePort), 1);
}

fn stations_move<S: Strategy>() {
    let mut rig = Rig::<S>::new(3);
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    rig.send(2, &frame(MacAddr::BROADCAST, station(B), 60));
    rig.sent();
    assert_eq!(rig.fdb.lookup(&key(B)), Some(PortId(2)));
    rig.send(0, &frame(station(B), station(A), 60));
    assert_eq!(rig.ports_that_sent(), vec![2]);
    let stats = rig.fdb.stats();
    assert_eq!((stats.learned, stats.moved), (2, 1));
    assert_eq!(rig.fdb.len(), 2);
}

fn vlans_separate_learning_and_tags_pass_unchanged<S: Strategy>() {
    let mut rig = Rig::<S>::new(3);
    rig.send(1, &tagged(MacAddr::BROADCAST, station(B), 10, 64));
    rig.sent();
    assert_eq!(
        rig.fdb.lookup(&FdbKey::new(10, station(B))),
        Some(PortId(1))
    );
    assert_eq!(rig.fdb.lookup(&key(B)), None);

    let in_vlan = tagged(station(B), station(A), 10, 80);
    rig.send(0, &in_vlan);
    assert_eq!(
        rig.sent()[1],
        vec![in_vlan],
        "tagged frame changed on its way"
    );

    // Same station, other VLAN or untagged: unknown, flooded.
    rig.send(0, &tagged(station(B), station(A), 20, 80));
    assert_eq!(rig.ports_that_sent(), vec![1, 2]);
    rig.send(0, &frame(station(B), station(A), 80));
    assert_eq!(rig.ports_that_sent(), vec![1, 2]);
}

fn counters_count_frames_and_bytes<S: Strategy>() {
    let mut rig = Rig::<S>::new(3);
    rig.send(0, &frame(MacAddr::BROADCAST, station(A), 100));
    rig.send(1, &frame(station(A), station(B), 60));
    rig.send(
        1,
        &frame(MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x0e]), station(B), 60),
    );
    let (p0, p1, p2) = (rig.stats(0), rig.stats(1), rig.stats(2));
    assert_eq!(
        (p0.rx_frames, p0.rx_bytes, p0.tx_frames, p0.tx_bytes),
        (1, 100, 1, 60)
    );
    assert_eq!(
        (p1.rx_frames, p1.rx_bytes, p1.tx_frames, p1.tx_bytes),
        (2, 120, 1, 100)
    );
    assert_eq!((p2.rx_frames, p2.tx_frames, p2.tx_bytes), (0, 1, 100));
    assert_eq!(p1.dropped_total(), 1);
}

fn oversize_frames_and_full_queues_are_counted<S: Strategy>() {
    let config = WorkerConfig {
        frame_capacity: 256,
        ..WorkerConfig::default()
    };
    let mut rig = Rig::<S>::with(2, FdbConfig::default(), config);
    rig.send(0, &frame(MacAddr::BROADCAST, station(A), 257));
    assert_eq!(rig.stats(0).rx_oversize, 1);
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());

    let fdb = FdbConfig::default();
    let (port0, peer0) = bridge::port::MemoryQueue::pair_with_limit("a", 8);
    let (port1, peer1) = bridge::port::MemoryQueue::pair_with_limit("b", 2);
    let table = std::sync::Arc::new(MacTable::<S>::new(fdb));
    let mut worker = bridge::Worker::new(table, vec![port0, port1], WorkerConfig::default());
    for _ in 0..5 {
        peer0.inject(&frame(MacAddr::BROADCAST, station(A), 60));
    }
    worker.poll();
    let stats = worker.counters()[1].snapshot();
    assert_eq!((stats.tx_frames, stats.tx_dropped), (2, 3));
    assert_eq!(peer1.take_sent().len(), 2);
}

fn per_frame_sections_decide_the_same<S: Strategy>() {
    let mut rig = Rig::<S>::per_frame(3);
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.ports_that_sent(), vec![0, 2]);
    rig.send(0, &frame(station(B), station(A), 60));
    assert_eq!(rig.ports_that_sent(), vec![1]);
    rig.send(1, &frame(station(B), station(A), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
}

fn a_batch_learns_after_it_is_decided<S: Strategy>() {
    // Several frames in one batch: B is learned from the first, and the
    // frames to B later in the same batch are still flooded; the next batch
    // sends them to B's port only.
    let mut rig = Rig::<S>::new(3);
    rig.peers[1].inject(&frame(MacAddr::BROADCAST, station(B), 60));
    rig.peers[1].inject(&frame(station(A), station(B), 60));
    while rig.worker.poll() > 0 {}
    assert_eq!(rig.fdb.lookup(&key(B)), Some(PortId(1)));
    assert_eq!(
        rig.fdb.stats().learned,
        1,
        "one source learned once per batch"
    );
    rig.sent();
    rig.send(0, &frame(station(B), station(A), 60));
    assert_eq!(rig.ports_that_sent(), vec![1]);
}

/// One batch whose frames repeat stations, in runs and apart: each is
/// answered as the table says, whether a section spans the batch or one
/// frame, and whether the batch looks like one conversation (its first,
/// middle and last frames alike: the worker then remembers a section's
/// last answers) or not.
fn repeated_stations_in_a_batch<S: Strategy>() {
    const X: u32 = 10;
    const Y: u32 = 11;
    const Z: u32 = 12;
    let alike = [(A, X), (A, X), (B, Y), (A, X), (B, X), (A, Z), (A, X)];
    let mixed = [(A, X), (A, X), (B, Y), (B, X), (A, X), (A, Z), (A, Y)];
    for (per_frame, batch) in [(false, alike), (false, mixed), (true, alike)] {
        let case = format!("per frame: {per_frame}, {batch:?}");
        let mut rig = match per_frame {
            false => Rig::<S>::new(3),
            true => Rig::<S>::per_frame(3),
        };
        for (port, n) in [(1, X), (2, Y), (2, B)] {
            rig.send(port, &frame(MacAddr::BROADCAST, station(n), 60));
        }
        rig.sent();
        let learned = rig.fdb.stats().learned;
        for &(src, dst) in &batch {
            rig.peers[0].inject(&frame(station(dst), station(src), 60));
        }
        while rig.worker.poll() > 0 {}
        let sent = rig.sent();
        let to = |port: usize| -> Vec<Vec<u8>> {
            batch
                .iter()
                .filter(|(_, dst)| match *dst {
                    X => port == 1,
                    Y => port == 2,
                    _ => true,
                })
                .map(|&(src, dst)| frame(station(dst), station(src), 60))
                .collect()
        };
        assert_eq!(sent[1], to(1), "to X and flooded ({case})");
        assert_eq!(sent[2], to(2), "to Y and flooded ({case})");
        assert!(sent[0].is_empty());
        // A learned once, B moved once, both to port 0.
        assert_eq!(rig.fdb.lookup(&key(A)), Some(PortId(0)));
        assert_eq!(rig.fdb.lookup(&key(B)), Some(PortId(0)));
        assert_eq!(rig.fdb.stats().learned, learned + 1, "{case}");
        assert_eq!(rig.fdb.stats().moved, 1, "{case}");
        assert_eq!(rig.stats(0).rx_frames, batch.len() as u64);
        // The next batch finds them there.
        rig.send(1, &frame(station(B), station(X), 60));
        assert_eq!(rig.ports_that_sent(), vec![0]);
    }
}

fn known_sources_only_refresh<S: Strategy>() {
    let table = MacTable::<S>::new(FdbConfig::default());
    assert_eq!(table.learn(key(A), PortId(0), 10), Learned::New);
    // Same port: the read side refreshes it in place; nothing is learned.
    assert!(table.read(|r| r.refresh_source(&key(A), PortId(0), 15)));
    assert_eq!(
        table.read(|r| r.entry(&key(A))),
        Some((PortId(0), false, 15))
    );
    // Another port, or unknown: the write path is needed.
    assert!(!table.read(|r| r.refresh_source(&key(A), PortId(1), 16)));
    assert!(!table.read(|r| r.refresh_source(&key(B), PortId(0), 16)));
    assert_eq!(
        table.read(|r| r.entry(&key(A))),
        Some((PortId(0), false, 15))
    );
    assert_eq!(table.stats().learned, 1);
    assert_eq!(table.learn(key(A), PortId(0), 17), Learned::Refreshed);
    assert_eq!(
        table.read(|r| r.entry(&key(A))),
        Some((PortId(0), false, 17))
    );
}

fn entries_age<S: Strategy>() {
    let config = FdbConfig {
        age_secs: 10,
        ..FdbConfig::default()
    };
    let table = MacTable::<S>::new(config);
    table.learn(key(A), PortId(0), 0);
    table.learn(key(B), PortId(1), 0);
    table.add_static(key(3), PortId(2));
    assert_eq!(table.age(9), 0);
    assert!(table.read(|r| r.refresh_source(&key(A), PortId(0), 8)));
    assert_eq!(table.age(10), 1, "B idle for the whole ageing time");
    assert_eq!(table.lookup(&key(B)), None);
    assert_eq!(table.lookup(&key(A)), Some(PortId(0)));
    assert_eq!(table.age(17), 0);
    assert_eq!(table.age(18), 1);
    assert_eq!(table.age(100_000), 0, "static entries never age");
    assert_eq!(table.lookup(&key(3)), Some(PortId(2)));
    assert_eq!(table.learned_len(), 0);
    assert_eq!(table.stats().aged, 2);
}

fn the_learning_limit_holds<S: Strategy>() {
    let config = FdbConfig {
        max_entries: 4,
        age_secs: 10,
    };
    let mut rig = Rig::<S>::with(2, config, WorkerConfig::default());
    for n in 0..6 {
        rig.send(0, &frame(MacAddr::BROADCAST, station(100 + n), 60));
    }
    assert_eq!(rig.fdb.learned_len(), 4);
    assert_eq!(rig.fdb.len(), 4);
    assert_eq!(rig.fdb.stats().refused, 2);
    // Frames from refused stations are still forwarded, and frames to them
    // are flooded because they are unknown.
    assert_eq!(rig.sent()[1].len(), 6);
    rig.send(1, &frame(station(105), station(B), 60));
    assert_eq!(rig.ports_that_sent(), vec![0]);
    assert_eq!(rig.fdb.stats().refused, 3, "B did not fit either");
    // Static entries do not count against the limit.
    rig.fdb.add_static(key(7), PortId(1));
    assert_eq!((rig.fdb.len(), rig.fdb.learned_len()), (5, 4));
    // Ageing makes room again.
    rig.fdb.age(u32::MAX);
    assert_eq!(rig.fdb.learn(key(B), PortId(1), 0), Learned::New);
}

fn static_entries_win_over_learning<S: Strategy>() {
    let mut rig = Rig::<S>::new(3);
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.fdb.learned_len(), 1);
    assert!(
        rig.fdb.add_static(key(B), PortId(2)),
        "replaced a learned entry"
    );
    assert_eq!(rig.fdb.learned_len(), 0);
    // B talks from port 1 again: the static entry stays on port 2.
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.fdb.lookup(&key(B)), Some(PortId(2)));
    assert_eq!(rig.fdb.learn(key(B), PortId(0), 0), Learned::Static);
    rig.sent();
    rig.send(0, &frame(station(B), station(A), 60));
    assert_eq!(rig.ports_that_sent(), vec![2]);
    assert!(!rig.fdb.remove_static(key(A)), "A is learned, not static");
    assert_eq!(rig.fdb.lookup(&key(A)), Some(PortId(0)));
    assert!(rig.fdb.remove_static(key(B)));
    assert!(!rig.fdb.remove_static(key(B)));
    assert_eq!(rig.fdb.lookup(&key(B)), None);
}

fn flush_by_port_keeps_static_and_other_ports<S: Strategy>() {
    let table = MacTable::<S>::new(FdbConfig::default());
    for n in 0..10 {
        table.learn(key(n), PortId((n % 2) as u16), 0);
    }
    table.add_static(key(50), PortId(0));
    assert_eq!(table.flush_port(PortId(0)), 5);
    assert_eq!(table.len(), 6);
    assert_eq!(table.lookup(&key(50)), Some(PortId(0)));
    assert_eq!(table.lookup(&key(1)), Some(PortId(1)));
    assert_eq!(table.lookup(&key(0)), None);
    assert_eq!(table.flush(), 5);
    assert_eq!((table.len(), table.learned_len()), (1, 0));
}

fn snapshots_list_every_entry<S: Strategy>() {
    let table = MacTable::<S>::new(FdbConfig::default());
    table.learn(FdbKey::new(5, station(B)), PortId(1), 3);
    table.learn(key(B), PortId(0), 4);
    table.add_static(key(A), PortId(2));
    let expected = vec![
        FdbRecord {
            key: key(A),
            port: PortId(2),
            vtep: None,
            is_static: true,
            is_local: false,
            is_extern: false,
            last_seen: 0,
        },
        FdbRecord {
            key: key(B),
            port: PortId(0),
            vtep: None,
            is_static: false,
            is_local: false,
            is_extern: false,
            last_seen: 4,
        },
        FdbRecord {
            key: FdbKey::new(5, station(B)),
            port: PortId(1),
            vtep: None,
            is_static: false,
            is_local: false,
            is_extern: false,
            last_seen: 3,
        },
    ];
    let records = table.records();
    assert_eq!(records, expected);
    let idle: Vec<u32> = records.iter().map(|r| r.idle_secs(10)).collect();
    assert_eq!(idle, [0, 6, 7], "static entries are never idle");
}

/// Stations behind a VXLAN port keep their VTEP in their entry, as a
/// Linux vxlan fdb entry keeps its `dst`: a frame to one is decided with
/// it, a station heard from another VTEP has moved, a static entry's VTEP
/// stays, and a table of another strategy takes the VTEPs over.
fn stations_keep_their_vtep<S: Strategy>() {
    use bridge::fdb::Source;
    use bridge::forward::decide_to;
    let table = MacTable::<S>::new(FdbConfig::default());
    let vtep = |n: u8| bridge::wire::vxlan::Vtep::from_index(n.into());
    let heard = |port: u16, n: u8| Source {
        key: key(B),
        port: PortId(port),
        vtep: vtep(n),
    };
    assert_eq!(table.learn_batch_with(&[heard(1, 2)], 1, |_, _, _| {}), 0);
    let to_b = frame(station(B), station(A), 60);
    let decided = table.read(|r| decide_to(PortId(0), &to_b, None, r));
    assert_eq!(decided, (Decision::Unicast(PortId(1)), vtep(2)));
    // The same station from the same VTEP is known; from another, moved.
    let state = |n: u8| table.read(|r| r.source_state(&key(B), PortId(1), vtep(n), 1));
    assert_eq!(state(2), SourceState::Known);
    assert_eq!(state(3), SourceState::Moved);
    let mut moves = 0;
    table.learn_batch_with(&[heard(1, 3)], 2, |_, _, _| moves += 1);
    assert_eq!(moves, 0, "a new VTEP behind the same port is no port move");
    assert_eq!(table.stats().moved, 1);
    let decided = table.read(|r| decide_to(PortId(0), &to_b, None, r));
    assert_eq!(decided, (Decision::Unicast(PortId(1)), vtep(3)));
    // A frame to a port without VTEPs, or a flood, names none.
    table.learn(key(A), PortId(0), 2);
    let to_a = frame(station(A), station(B), 60);
    let decided = table.read(|r| decide_to(PortId(1), &to_a, None, r));
    assert_eq!(decided, (Decision::Unicast(PortId(0)), None));
    // A static entry's VTEP: learning moves it neither to another VTEP
    // nor to another port.
    table.add_static_at(key(C), PortId(1), vtep(9));
    table.learn_batch_with(
        &[Source {
            key: key(C),
            port: PortId(1),
            vtep: vtep(4),
        }],
        3,
        |_, _, _| {},
    );
    let to_c = frame(station(C), station(A), 60);
    let decided = table.read(|r| decide_to(PortId(0), &to_c, None, r));
    assert_eq!(decided, (Decision::Unicast(PortId(1)), vtep(9)));
    // Ageing covers remote stations too.
    assert_eq!(table.age(2 + FdbConfig::DEFAULT_AGE_SECS), 2);
    assert_eq!(table.lookup(&key(B)), None);
    // Another strategy's table takes the entries over, VTEPs and all.
    let other = MacTable::<locks::Mutex>::new(FdbConfig::default());
    other.import(&table.records(), table.stats());
    assert_eq!(other.records(), table.records());
}

/// A full table refuses each new station once per batch however many of
/// its frames the batch holds, still moves known stations, and frames to a
/// port's own address (a local entry) go nowhere.
fn refusals_moves_and_local_addresses<S: Strategy>() {
    let config = FdbConfig {
        max_entries: 2,
        age_secs: 10,
    };
    let mut rig = Rig::<S>::with(3, config, WorkerConfig::default());
    rig.send(0, &frame(MacAddr::BROADCAST, station(1), 60));
    rig.send(1, &frame(MacAddr::BROADCAST, station(2), 60));
    assert!(rig.fdb.is_full());
    // One batch: 40 frames from one unknown station, 20 from another.
    for n in 0..60 {
        let source = if n % 3 == 2 { station(4) } else { station(3) };
        rig.peers[2].inject(&frame(MacAddr::BROADCAST, source, 60));
    }
    while rig.worker.poll() > 0 {}
    assert_eq!(rig.fdb.stats().refused, 2, "one refusal per station");
    // A known station still moves into a full table.
    rig.send(2, &frame(MacAddr::BROADCAST, station(1), 60));
    assert_eq!(rig.fdb.lookup(&key(1)), Some(PortId(2)));
    assert_eq!(rig.fdb.stats().moved, 1);
    assert_eq!(
        rig.stats(2).moves,
        1,
        "the move counts on the port it moved to"
    );
    rig.sent();
    // A local entry: frames to it are dropped, and no source moves it.
    rig.fdb.add_local(key(9), PortId(0));
    rig.send(1, &frame(station(9), station(2), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    assert_eq!(rig.stats(1).dropped(DropReason::Local), 1);
    rig.send(2, &frame(MacAddr::BROADCAST, station(9), 60));
    assert_eq!(rig.fdb.lookup(&key(9)), Some(PortId(0)));
}

/// A port's own address (the host's, a local entry at VLAN 0) is local in
/// every VLAN: a frame from a guest that claims it as its source is never
/// learned, in its VLAN or any, and frames to it in a VLAN stay with the
/// host (br_fdb_update never lets learning take a local entry).
fn own_addresses_are_never_learned_in_any_vlan<S: Strategy>() {
    let host = station(0x77);
    let config = WorkerConfig {
        vlan_filtering: true,
        ..WorkerConfig::default()
    };
    let mut rig = Rig::<S>::with(3, FdbConfig::default(), config);
    for port in 0..3 {
        rig.worker.set_vlans(PortId(port), PortVlans::access(10));
    }
    rig.fdb.add_local(key_of(host), PortId(0));
    // A guest sends with the host's address as its source, untagged on
    // its access port: flooded like any frame, but not learned.
    rig.send(1, &frame(MacAddr::BROADCAST, host, 60));
    assert_eq!(rig.ports_that_sent(), vec![0, 2]);
    assert_eq!(rig.fdb.lookup(&FdbKey::new(10, host)), None);
    assert_eq!(rig.fdb.learned_len(), 0);
    assert_eq!(rig.fdb.stats().own_sources, 1, "counted once");
    // Frames to the host in the VLAN go nowhere, batch after batch.
    for _ in 0..2 {
        rig.send(2, &frame(host, station(B), 60));
        assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    }
    assert_eq!(rig.stats(2).dropped(DropReason::Local), 2);

    // Without VLAN filtering a tagged frame is learned in its tag's VLAN:
    // not with the host's address either.
    let mut rig = Rig::<S>::new(3);
    rig.fdb.add_local(key_of(host), PortId(0));
    rig.send(1, &tagged(MacAddr::BROADCAST, host, 20, 64));
    assert_eq!(rig.fdb.lookup(&FdbKey::new(20, host)), None);
    rig.sent();
    rig.send(2, &tagged(host, station(B), 20, 64));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    // The write path refuses it too, whoever calls it.
    assert_eq!(
        rig.fdb.learn(FdbKey::new(30, host), PortId(1), 0),
        Learned::Local
    );
    assert_eq!(rig.fdb.learn(key_of(host), PortId(1), 0), Learned::Local);
    assert_eq!(rig.fdb.lookup(&FdbKey::new(30, host)), None);
    assert_eq!(rig.fdb.lookup(&key_of(host)), Some(PortId(0)));
    assert_eq!(rig.fdb.stats().own_sources, 3);
    // An address learned in a VLAN before it became a port's own is
    // forgotten when it does.
    let other = station(0x78);
    rig.fdb.learn(FdbKey::new(40, other), PortId(1), 0);
    rig.fdb.add_local(key_of(other), PortId(0));
    assert_eq!(rig.fdb.lookup(&FdbKey::new(40, other)), None);
    assert_eq!(rig.fdb.learned_len(), 1, "only station B is learned");
}

/// A port added while running floods and learns at once; a removed one
/// gets nothing more, and its worker let go of its queue.
fn ports_come_and_go<S: Strategy>() {
    let mut rig = Rig::<S>::new(2);
    let control = rig.worker.control();
    let (port, peer) = bridge::port::MemoryQueue::pair("mem2");
    let answer = control.add(PortId(2), port).unwrap();
    rig.worker.apply_changes();
    answer.try_recv().expect("the worker answered");
    rig.peers.push(peer);
    rig.send(0, &frame(MacAddr::BROADCAST, station(1), 60));
    assert_eq!(rig.ports_that_sent(), vec![1, 2], "floods to the new port");
    rig.send(2, &frame(station(1), station(3), 60));
    assert_eq!(rig.ports_that_sent(), vec![0], "learned on the new port");
    assert_eq!(rig.fdb.lookup(&key(3)), Some(PortId(2)));
    let answer = control.remove(PortId(2)).unwrap();
    rig.worker.apply_changes();
    answer.try_recv().expect("the worker answered");
    assert!(
        rig.worker.queue(bridge::PortId(2)).is_none(),
        "the queue was dropped"
    );
    rig.fdb.purge_port(PortId(2));
    rig.send(0, &frame(MacAddr::BROADCAST, station(1), 60));
    assert_eq!(rig.ports_that_sent(), vec![1], "nothing for a removed port");
    rig.send(0, &frame(station(3), station(1), 60));
    assert_eq!(
        rig.ports_that_sent(),
        vec![1],
        "its stations are unknown again"
    );
}

/// A port whose link goes down while nothing fails on it (a tap whose
/// device was set down: no receive or send reports it) has its stations
/// flushed within about a second, once, and is left alone until its link
/// is back; then it passes frames again.
fn a_link_down_that_nothing_reports_is_flushed<S: Strategy>() {
    let mut rig = Rig::<S>::new(2);
    rig.send(1, &frame(MacAddr::BROADCAST, station(B), 60));
    assert_eq!(rig.fdb.lookup(&key(B)), Some(PortId(1)));
    rig.sent();
    rig.peers[1].set_link(false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while rig.fdb.lookup(&key(B)).is_some() {
        assert!(std::time::Instant::now() < deadline, "B not flushed");
        std::thread::sleep(std::time::Duration::from_millis(20));
        rig.worker.poll();
    }
    assert_eq!(rig.stats(1).rx_errors, 1, "one fault for the event");
    // Down: sent nothing, and flushed once however long it stays down.
    rig.send(0, &frame(station(B), station(A), 60));
    assert_eq!(rig.ports_that_sent(), Vec::<usize>::new());
    rig.peers[1].inject(&frame(MacAddr::BROADCAST, station(B), 60));
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        rig.worker.poll();
    }
    assert_eq!(rig.stats(1).rx_errors, 1);
    assert_eq!(rig.fdb.lookup(&key(B)), None, "not read while down");
    // Up again: within the back-off, it passes frames and learns.
    rig.peers[1].set_link(true);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while rig.fdb.lookup(&key(B)).is_none() {
        assert!(std::time::Instant::now() < deadline, "B not learned again");
        std::thread::sleep(std::time::Duration::from_millis(20));
        rig.worker.poll();
    }
    assert_eq!(rig.ports_that_sent(), vec![0]);
}

fn a_thousand_stations_round_trip<S: Strategy>() {
    // Enough entries to span many buckets of every strategy.
    let table = MacTable::<S>::new(FdbConfig {
        max_entries: 1000,
        age_secs: 300,
    });
    table.learn_batch(
        &(0..1000)
            .map(|n| (key(n), PortId((n % 7) as u16)))
            .collect::<Vec<_>>(),
        1,
    );
    assert_eq!(table.len(), 1000);
    for n in 0..1000 {
        assert_eq!(
            table.lookup(&key(n)),
            Some(PortId((n % 7) as u16)),
            "station {n}"
        );
    }
    assert_eq!(table.lookup(&key(1000)), None);
    assert_eq!(table.records().len(), 1000);
}

/// Frames longer than the pipeline reads are lent by their port (the
/// in-memory ports lend as a guest's do) and leave whole, as decided,
/// through every VLAN rewrite: a tag pushed, popped and kept.
fn lent_frames_leave_whole_in_every_vlan_form<S: Strategy>() {
    let config = WorkerConfig {
        vlan_filtering: true,
        ..WorkerConfig::default()
    };
    let mut rig = Rig::<S>::with(3, FdbConfig::default(), config);
    rig.worker.set_vlans(PortId(0), PortVlans::access(10));
    let trunk = PortVlans::trunk(bridge::vlan::VlanSet::parse("10").unwrap(), None);
    rig.worker.set_vlans(PortId(1), trunk.clone());
    rig.worker.set_vlans(PortId(2), trunk);
    // Learn A on port 0 and B on port 1 (both in VLAN 10).
    rig.send(0, &frame(MacAddr::BROADCAST, station(A), 60));
    rig.send(1, &tagged(MacAddr::BROADCAST, station(B), 10, 60));
    rig.sent();
    // The frame with an 802.1Q tag of VLAN 10 (priority 0) pushed.
    let with_tag = |frame: Vec<u8>| -> Vec<u8> {
        [&frame[..12], &[0x81, 0x00, 0x00, 10][..], &frame[12..]].concat()
    };
    for len in [65, 300, 1514] {
        // Access to trunk: the tag pushed into the lent frame's head.
        let to_b = frame(station(B), station(A), len);
        rig.send(0, &to_b);
        let mut sent = rig.sent();
        assert_eq!(sent[1], vec![with_tag(to_b)], "{len} bytes tagged");
        // Trunk to access: the tag popped.
        let to_a = frame(station(A), station(B), len);
        rig.send(1, &with_tag(to_a.clone()));
        sent = rig.sent();
        assert_eq!(sent[0], vec![to_a], "{len} bytes untagged");
        // Trunk to trunk and access, flooded: kept for one, popped for
        // the other, from the same lent frame.
        let to_c = frame(station(C), station(4), len);
        rig.send(2, &with_tag(to_c.clone()));
        sent = rig.sent();
        assert_eq!(sent[1], vec![with_tag(to_c.clone())], "{len} bytes kept");
        assert_eq!(sent[0], vec![to_c], "{len} bytes flooded untagged");
    }
    // B's first broadcast, popped, and two frames of each length.
    assert_eq!(rig.stats(0).tx_bytes, 56 + (65 + 300 + 1514) * 2);
}

/// Entries a control plane installs (EVPN; Linux's `extern_learn`): they
/// do not count as learned, do not age, survive flushes, move with their
/// route, leave static entries alone, take learned entries over, and are
/// taken over by learning on another port (the station moved there).
fn installed_entries_move_with_their_route_and_with_the_station<S: Strategy>() {
    use bridge::wire::vxlan::Vtep;
    let (vtep1, vtep2) = (Vtep::from_index(1).unwrap(), Vtep::from_index(2).unwrap());
    let config = FdbConfig {
        max_entries: 100,
        age_secs: 10,
    };
    let table = MacTable::<S>::new(config);
    assert!(table.install(key(A), PortId(2), Some(vtep1)));
    assert!(!table.install(key(A), PortId(2), Some(vtep1)), "unchanged");
    assert_eq!((table.len(), table.learned_len()), (1, 0));
    assert_eq!(table.port_learned(PortId(2)), 0);
    let record = table.records()[0];
    assert!(record.is_extern && !record.is_static);
    assert_eq!((record.vtep, record.idle_secs(1000)), (Some(vtep1), 0));
    // Never aged, never flushed.
    assert_eq!(table.age(1000), 0);
    assert_eq!(table.flush_port(PortId(2)), 0);
    assert_eq!(table.flush(), 0);
    // Its route moved to another VTEP.
    assert!(table.install(key(A), PortId(2), Some(vtep2)));
    assert_eq!(table.records()[0].vtep, Some(vtep2));
    // A static entry stays; a learned one is taken over, its place freed.
    table.add_static(key(B), PortId(0));
    assert!(!table.install(key(B), PortId(2), Some(vtep1)));
    assert_eq!(table.lookup(&key(B)), Some(PortId(0)));
    table.learn(key(C), PortId(1), 5);
    assert_eq!((table.learned_len(), table.port_learned(PortId(1))), (1, 1));
    assert!(table.install(key(C), PortId(2), Some(vtep1)));
    assert_eq!((table.learned_len(), table.port_learned(PortId(1))), (0, 0));
    // Heard on another port: learned there, an ordinary entry that ages.
    assert_eq!(table.learn(key(A), PortId(1), 20), Learned::Moved);
    let a = table
        .records()
        .into_iter()
        .find(|r| r.key == key(A))
        .unwrap();
    assert!(!a.is_extern && a.port == PortId(1) && a.vtep.is_none());
    assert_eq!((table.learned_len(), table.port_learned(PortId(1))), (1, 1));
    // Removing: only installed entries go; forgetting one frees nothing.
    assert!(!table.uninstall(key(A)), "A is learned now");
    assert!(!table.uninstall(key(B)), "B is static");
    assert!(table.forget(key(C)));
    assert_eq!(table.learned_len(), 1);
    assert!(table.install(key(C), PortId(2), None));
    assert!(table.uninstall(key(C)));
    assert!(!table.uninstall(key(C)));
    // A static entry replaces an installed one; the counts stay right.
    assert!(table.install(key(C), PortId(2), None));
    table.add_static(key(C), PortId(0));
    assert_eq!((table.len(), table.learned_len()), (3, 1));
    assert_eq!(table.age(1000), 1);
    assert_eq!((table.len(), table.learned_len()), (2, 0));
}

for_each_strategy!(
    runts_are_dropped,
    stations_keep_their_vtep,
    bad_sources_are_dropped_and_not_learned,
    reserved_destinations_are_never_forwarded,
    bpdus_flood_without_spanning_tree,
    group_and_unknown_destinations_flood,
    known_unicast_goes_to_its_port_only,
    frames_never_go_back_out_of_their_port,
    stations_move,
    vlans_separate_learning_and_tags_pass_unchanged,
    counters_count_frames_and_bytes,
    oversize_frames_and_full_queues_are_counted,
    per_frame_sections_decide_the_same,
    a_batch_learns_after_it_is_decided,
    repeated_stations_in_a_batch,
    known_sources_only_refresh,
    entries_age,
    the_learning_limit_holds,
    static_entries_win_over_learning,
    flush_by_port_keeps_static_and_other_ports,
    installed_entries_move_with_their_route_and_with_the_station,
    snapshots_list_every_entry,
    a_thousand_stations_round_trip,
    refusals_moves_and_local_addresses,
    own_addresses_are_never_learned_in_any_vlan,
    ports_come_and_go,
    a_link_down_that_nothing_reports_is_flushed,
    lent_frames_leave_whole_in_every_vlan_form,
);
