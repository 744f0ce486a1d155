//! A real `Worker` over in-memory ports, driven by a sequence of events
//! (frames injected on ports, table edits), compared after every event with
//! a small reference bridge written here: which frames come out of which
//! port, in which order, byte for byte; the table's entries; the per-port
//! counters; the table's totals. A single frame is also put through the
//! forwarding pipeline directly, without a worker (`bridge::forward`: the
//! ingress and lookup stages in a read section, then the fan-out over
//! plain views of the ports), and its verdict and egress ports compared
//! with the reference's.
//!
//! The reference follows docs/design.md: drop runts and frames from group
//! or zero sources; drop frames to 01:80:C2:00:00:0x; flood group and
//! unknown destinations; drop frames to the host's own (local) addresses
//! and to stations on the ingress port; send known unicast to its port.
//! Per received batch every frame is decided against the table as it was
//! before the batch, then the batch's valid sources are learned (new
//! stations up to the limit, station moves always, static entries never
//! changed).

#![no_main]

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use arbitrary::Arbitrary;
use bridge::counters::PortStats;
use bridge::fdb::{FdbKey, FdbRecord};
use bridge::forward::{self, DropReason, EgressPort, Egresses, Gate, IngressPort, PortFlags};
use bridge::port::{MemoryPeer, MemoryQueue};
use bridge::vlan::PortVlans;
use bridge::wire::MacAddr;
use bridge::PortId;
use bridge::{FdbConfig, MacTable, SectionMode, Worker, WorkerConfig};
use libfuzzer_sys::fuzz_target;
use locks::{Strategy, StrategyKind};

/// The addresses frames and table entries use: a few stations, so that
/// they meet and move often, and every kind of group address.
const MACS: [[u8; 6]; 12] = [
    [0x02, 0, 0, 0, 0, 0x01],
    [0x02, 0, 0, 0, 0, 0x02],
    [0x02, 0, 0, 0, 0, 0x03],
    [0x00, 0x1b, 0x21, 0x0a, 0x0b, 0x0c],
    [0xff; 6],
    [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01],
    [0x33, 0x33, 0x00, 0x00, 0x00, 0x01],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x00],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0f],
    [0x01, 0x80, 0xc2, 0x00, 0x00, 0x10],
    [0; 6],
];

/// VLAN ids a tag may carry: 0 (priority-tagged), two ordinary ones, and
/// the highest.
const VIDS: [u16; 4] = [0, 1, 7, 4095];

const ETHERTYPES: [u16; 6] = [0x0800, 0x0806, 0x86dd, 0x0000, 0x8100, 0x88a8];

/// The worker's receive buffer size (`WorkerConfig::default()`).
const FRAME_CAPACITY: usize = 2048;

#[derive(Debug, Clone, Arbitrary)]
struct Tag {
    /// 802.1ad rather than 802.1Q.
    qinq: bool,
    vid: u8,
    /// Priority and DEI bits, which do not matter to learning.
    pcp: u8,
}

#[derive(Debug, Clone, Arbitrary)]
enum Length {
    /// As built, header and a short payload.
    Natural,
    /// Cut or padded to this, runts included.
    Short(u8),
    /// Around the receive buffer's size and beyond.
    Long(u8),
}

#[derive(Debug, Clone, Arbitrary)]
struct FrameSpec {
    dst: u8,
    src: u8,
    tag: Option<Tag>,
    ethertype: u8,
    length: Length,
    fill: u8,
}

impl FrameSpec {
    fn build(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(&MACS[usize::from(self.dst) % MACS.len()]);
        bytes.extend_from_slice(&MACS[usize::from(self.src) % MACS.len()]);
        if let Some(tag) = &self.tag {
            let tpid: u16 = if tag.qinq { 0x88a8 } else { 0x8100 };
            let vid = VIDS[usize::from(tag.vid) % VIDS.len()];
            let tci = (u16::from(tag.pcp & 0xf0) << 8) | vid;
            bytes.extend_from_slice(&tpid.to_be_bytes());
            bytes.extend_from_slice(&tci.to_be_bytes());
        }
        let ethertype = ETHERTYPES[usize::from(self.ethertype) % ETHERTYPES.len()];
        bytes.extend_from_slice(&ethertype.to_be_bytes());
        let len = match self.length {
            Length::Natural => bytes.len() + usize::from(self.fill % 8),
            Length::Short(n) => usize::from(n % 64),
            Length::Long(n) => FRAME_CAPACITY - 8 + usize::from(n % 16),
        };
        // A payload that tells frames apart.
        let mut i = 0u8;
        bytes.resize_with(len, || {
            i = i.wrapping_add(1);
            self.fill ^ i
        });
        bytes.truncate(len);
        bytes
    }
}

#[derive(Debug, Clone, Arbitrary)]
enum Event {
    /// One frame on one port, then the worker polls.
    Frame {
        port: u8,
        frame: FrameSpec,
    },
    /// Frames queued on several ports, then the worker polls until idle:
    /// each port's frames make batches, port after port.
    Burst {
        frames: Vec<(u8, FrameSpec)>,
    },
    AddStatic {
        mac: u8,
        vid: u8,
        port: u8,
    },
    AddLocal {
        mac: u8,
        vid: u8,
        port: u8,
    },
    RemoveStatic {
        mac: u8,
        vid: u8,
    },
    Forget {
        mac: u8,
        vid: u8,
    },
    FlushPort {
        port: u8,
    },
}

#[derive(Debug, Arbitrary)]
struct Input {
    /// 0 is `epoch`, the default; then mutex, rwlock, rmlock, sharded, rcu.
    strategy: u8,
    ports: u8,
    batch_size: u8,
    per_frame: bool,
    max_entries: u8,
    events: Vec<Event>,
}

/// The most frames one burst queues, and events one input runs.
const MAX_BURST: usize = 24;
const MAX_EVENTS: usize = 64;

fn key(mac: u8, vid: u8) -> FdbKey {
    FdbKey::new(
        VIDS[usize::from(vid) % VIDS.len()],
        MacAddr(MACS[usize::from(mac) % MACS.len()]),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Learned,
    Static,
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Drop(DropReason),
    Unicast(u16),
    Flood,
}

/// A frame's keys as the reference reads them from its bytes.
fn classify(frame: &[u8]) -> Result<(FdbKey, FdbKey), DropReason> {
    if frame.len() < 14 {
        return Err(DropReason::Runt);
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let tagged = ethertype == 0x8100 || ethertype == 0x88a8;
    if tagged && frame.len() < 18 {
        return Err(DropReason::Runt);
    }
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(&frame[..6]);
    src.copy_from_slice(&frame[6..12]);
    if src[0] & 1 != 0 || src == [0; 6] {
        return Err(DropReason::BadSource);
    }
    let vlan = if tagged {
        u16::from_be_bytes([frame[14], frame[15]]) & 0x0fff
    } else {
        0
    };
    Ok((
        FdbKey::new(vlan, MacAddr(dst)),
        FdbKey::new(vlan, MacAddr(src)),
    ))
}

/// 01:80:C2:00:00:01 to 0F: never forwarded. (00, the BPDUs' address,
/// floods when no spanning tree takes it.)
fn is_reserved(mac: &MacAddr) -> bool {
    mac.0[..5] == [0x01, 0x80, 0xc2, 0, 0] && (1..0x10).contains(&mac.0[5])
}

#[derive(Debug, Default)]
struct Model {
    ports: usize,
    max_entries: usize,
    table: BTreeMap<FdbKey, (u16, Kind)>,
    learned: usize,
    stats: Vec<PortStats>,
    /// The table's totals: learned, moved, refused.
    totals: (u64, u64, u64),
}

impl Model {
    fn decide(&self, ingress: u16, frame: &[u8]) -> Verdict {
        let (dst, _) = match classify(frame) {
            Ok(keys) => keys,
            Err(reason) => return Verdict::Drop(reason),
        };
        if is_reserved(&dst.mac) {
            return Verdict::Drop(DropReason::Reserved);
        }
        if dst.mac.0[0] & 1 != 0 {
            return Verdict::Flood;
        }
        match self.table.get(&dst) {
            Some((_, Kind::Local)) => Verdict::Drop(DropReason::Local),
            Some((port, _)) if *port == ingress => Verdict::Drop(DropReason::SamePort),
            Some((port, _)) => Verdict::Unicast(*port),
            None => match self.table.get(&FdbKey::new(0, dst.mac)) {
                Some((_, Kind::Local)) => Verdict::Drop(DropReason::Local),
                _ => Verdict::Flood,
            },
        }
    }

    fn learn(&mut self, key: FdbKey, port: u16) {
        // The host's own address is never learned, in any VLAN (a local
        // entry at VLAN 0 stands for every VLAN).
        if let Some((_, Kind::Local)) = self.table.get(&FdbKey::new(0, key.mac)) {
            return;
        }
        match self.table.get_mut(&key) {
            Some((_, Kind::Static | Kind::Local)) => {}
            Some((old, Kind::Learned)) if *old == port => {}
            Some((old, Kind::Learned)) => {
                *old = port;
                self.totals.1 += 1;
                self.stats[usize::from(port)].moves += 1;
            }
            None if self.max_entries == 0 || self.learned < self.max_entries => {
                self.table.insert(key, (port, Kind::Learned));
                self.learned += 1;
                self.totals.0 += 1;
            }
            None => {
                self.totals.2 += 1;
                self.stats[usize::from(port)].refused += 1;
            }
        }
    }

    /// One received batch: decide every frame, send, then learn.
    fn batch(&mut self, ingress: usize, frames: &[Vec<u8>], out: &mut [Vec<Vec<u8>>]) {
        let verdicts: Vec<Verdict> = frames
            .iter()
            .map(|frame| self.decide(ingress as u16, frame))
            .collect();
        for (frame, verdict) in frames.iter().zip(&verdicts) {
            let rx = &mut self.stats[ingress];
            rx.rx_frames += 1;
            rx.rx_bytes += frame.len() as u64;
            match *verdict {
                Verdict::Drop(reason) => rx.drops[reason.index()] += 1,
                Verdict::Unicast(port) if usize::from(port) >= self.ports => rx.tx_errors += 1,
                _ => {}
            }
            let egress = self.egress(ingress, *verdict);
            for port in egress {
                self.stats[port].tx_frames += 1;
                self.stats[port].tx_bytes += frame.len() as u64;
                out[port].push(frame.clone());
            }
        }
        // Each source once per batch, in order of first appearance.
        let mut seen = Vec::new();
        for frame in frames {
            if let Ok((_, src)) = classify(frame) {
                if !seen.contains(&src) {
                    seen.push(src);
                    self.learn(src, ingress as u16);
                }
            }
        }
    }

    /// The worker polling until idle over `queues` (frames waiting on each
    /// port), `batch_size` frames per port per round.
    fn poll(
        &mut self,
        queues: &mut [VecDeque<Vec<u8>>],
        batch_size: usize,
        out: &mut [Vec<Vec<u8>>],
    ) {
        while queues.iter().any(|q| !q.is_empty()) {
            for port in 0..self.ports {
                let mut batch = Vec::new();
                while batch.len() < batch_size {
                    let Some(frame) = queues[port].pop_front() else {
                        break;
                    };
                    if frame.len() > FRAME_CAPACITY {
                        self.stats[port].rx_oversize += 1;
                    } else {
                        batch.push(frame);
                    }
                }
                if !batch.is_empty() {
                    self.batch(port, &batch, out);
                }
            }
        }
    }

    fn configure(&mut self, key: FdbKey, port: u16, kind: Kind) {
        if let Some((_, Kind::Learned)) = self.table.insert(key, (port, kind)) {
            self.learned -= 1;
        }
        // A local address at VLAN 0 is forgotten wherever it was learned.
        if kind == Kind::Local && key.vlan == 0 {
            let before = self.table.len();
            self.table
                .retain(|other, (_, kind)| *kind != Kind::Learned || other.mac != key.mac);
            self.learned -= before - self.table.len();
        }
    }

    fn records(&self) -> Vec<(FdbKey, PortId, bool, bool)> {
        self.table
            .iter()
            .map(|(key, &(port, kind))| {
                (
                    *key,
                    PortId(port),
                    kind != Kind::Learned,
                    kind == Kind::Local,
                )
            })
            .collect()
    }
}

impl Model {
    /// The ports a frame with `verdict` from `ingress` leaves by.
    fn egress(&self, ingress: usize, verdict: Verdict) -> Vec<usize> {
        match verdict {
            Verdict::Drop(_) => vec![],
            Verdict::Unicast(port) if usize::from(port) >= self.ports => vec![],
            Verdict::Unicast(port) => vec![usize::from(port)],
            Verdict::Flood => (0..self.ports).filter(|&p| p != ingress).collect(),
        }
    }
}

/// One frame through the pipeline without a worker, against the table as
/// it is: its verdict and the ports it leaves by.
fn pipeline<S: Strategy>(
    fdb: &MacTable<S>,
    ports: usize,
    ingress: usize,
    frame: &[u8],
) -> (Verdict, Vec<usize>) {
    let port = IngressPort {
        port: PortId(ingress as u16),
        vlans: None,
        intercept: None,
        flags: PortFlags::default(),
        gate: Gate::OPEN,
        disabled: false,
    };
    let (verdict, _) = fdb.read(|section| forward::ingress_and_lookup(&port, frame, section));
    let decided = match verdict.decision {
        forward::Decision::Drop(reason) => Verdict::Drop(reason),
        forward::Decision::Unicast(port) => Verdict::Unicast(port.0),
        forward::Decision::Flood => Verdict::Flood,
    };
    let vlans = PortVlans::default();
    let views: Vec<Option<EgressPort<'_>>> = (0..ports)
        .map(|_| {
            Some(EgressPort {
                vlans: &vlans,
                flags: PortFlags::default(),
                bpdu_filter: false,
            })
        })
        .collect();
    let egresses = Egresses {
        ports: &views[..],
        flag_rules: false,
        bpdu_filters: false,
    };
    let mut verdicts = [verdict];
    let mut deliveries = Vec::new();
    forward::fan_out(
        &mut verdicts,
        |_| frame,
        ingress,
        PortFlags::default(),
        &egresses,
        |_, port, _| deliveries.push(port),
    );
    (decided, deliveries)
}

fn run<S: Strategy>(input: &Input) {
    let ports = 2 + usize::from(input.ports % 3);
    let batch_size = [64, 1, 2, 3][usize::from(input.batch_size % 4)];
    let max_entries = [0, 2, 3, 8192][usize::from(input.max_entries % 4)];
    let fdb = Arc::new(MacTable::<S>::new(FdbConfig {
        max_entries,
        ..FdbConfig::default()
    }));
    let (memory, peers): (Vec<MemoryQueue>, Vec<MemoryPeer>) = (0..ports)
        .map(|i| MemoryQueue::pair(format!("mem{i}")))
        .unzip();
    let config = WorkerConfig {
        batch_size,
        frame_capacity: FRAME_CAPACITY,
        section: if input.per_frame {
            SectionMode::PerFrame
        } else {
            SectionMode::PerBatch
        },
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(Arc::clone(&fdb), memory, config);
    let mut model = Model {
        ports,
        max_entries,
        stats: vec![PortStats::default(); ports],
        ..Model::default()
    };
    let port_of = |p: u8| usize::from(p) % ports;
    // Static entries may name a port the bridge lacks.
    let any_port = |p: u8| u16::from(p % 6);

    for (step, event) in input.events.iter().take(MAX_EVENTS).enumerate() {
        let mut queues: Vec<VecDeque<Vec<u8>>> = vec![VecDeque::new(); ports];
        match event {
            Event::Frame { port, frame } => queues[port_of(*port)].push_back(frame.build()),
            Event::Burst { frames } => {
                for (port, frame) in frames.iter().take(MAX_BURST) {
                    queues[port_of(*port)].push_back(frame.build());
                }
            }
            Event::AddStatic { mac, vid, port } => {
                let key = key(*mac, *vid);
                fdb.add_static(key, PortId(any_port(*port)));
                model.configure(key, any_port(*port), Kind::Static);
            }
            Event::AddLocal { mac, vid, port } => {
                let key = key(*mac, *vid);
                fdb.add_local(key, PortId(any_port(*port)));
                model.configure(key, any_port(*port), Kind::Local);
            }
            Event::RemoveStatic { mac, vid } => {
                let key = key(*mac, *vid);
                let want = matches!(model.table.get(&key), Some((_, Kind::Static | Kind::Local)));
                if want {
                    model.table.remove(&key);
                }
                assert_eq!(fdb.remove_static(key), want, "step {step}");
            }
            Event::Forget { mac, vid } => {
                let key = key(*mac, *vid);
                let want = matches!(model.table.get(&key), Some((_, Kind::Learned)));
                if want {
                    model.table.remove(&key);
                    model.learned -= 1;
                }
                assert_eq!(fdb.forget(key), want, "step {step}");
            }
            Event::FlushPort { port } => {
                let port = any_port(*port);
                let before = model.table.len();
                model
                    .table
                    .retain(|_, &mut (p, kind)| kind != Kind::Learned || p != port);
                let removed = before - model.table.len();
                model.learned -= removed;
                assert_eq!(fdb.flush_port(PortId(port)), removed, "step {step}");
            }
        }

        if let Event::Frame { port, frame } = event {
            let (ingress, frame) = (port_of(*port), frame.build());
            if frame.len() <= FRAME_CAPACITY {
                let verdict = model.decide(ingress as u16, &frame);
                let want = (verdict, model.egress(ingress, verdict));
                let got = pipeline(&fdb, ports, ingress, &frame);
                assert_eq!(got, want, "step {step}: the pipeline on {frame:02x?}");
            }
        }

        let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); ports];
        if queues.iter().any(|q| !q.is_empty()) {
            for (peer, queue) in peers.iter().zip(&queues) {
                for frame in queue {
                    peer.inject(frame);
                }
            }
            model.poll(&mut queues, batch_size, &mut want);
            let mut polls = 0;
            while worker.poll() > 0 {
                polls += 1;
                assert!(polls <= 2 * MAX_BURST, "the worker does not go idle");
            }
        }
        for (port, peer) in peers.iter().enumerate() {
            assert_eq!(peer.pending(), 0, "step {step}: port {port} not drained");
            let got = peer.take_sent();
            assert!(
                got == want[port],
                "step {step} ({event:?}): port {port} sent {} frames, the model {}:\n{:02x?}\nwanted\n{:02x?}",
                got.len(),
                want[port].len(),
                got,
                want[port]
            );
        }
        let counters = worker.counters();
        for (port, expected) in model.stats.iter().enumerate() {
            assert_eq!(
                counters[port].snapshot(),
                *expected,
                "step {step}: port {port}'s counters"
            );
        }
        let table: Vec<_> = fdb
            .records()
            .into_iter()
            .map(|r: FdbRecord| (r.key, r.port, r.is_static, r.is_local))
            .collect();
        assert_eq!(table, model.records(), "step {step}: the table");
        assert_eq!(fdb.learned_len(), model.learned, "step {step}");
        let stats = fdb.stats();
        assert_eq!(
            (stats.learned, stats.moved, stats.refused),
            model.totals,
            "step {step}: the table's totals"
        );
    }
}

fuzz_target!(|input: Input| {
    let kind = StrategyKind::ALL[(usize::from(input.strategy) + 5) % StrategyKind::ALL.len()];
    locks::with_strategy!(kind, S => run::<S>(&input));
});
