//! Frames per second through the worker loop on in-memory ports, per
//! strategy, with read sections per batch and per frame: 64-byte frames of
//! known unicast between 64 stations on each of two ports.
//!
//! With `MPBRIDGE_ROUNDS=N` and a strategy as its argument it runs N
//! rounds of that strategy (per batch) inside [`rounds`] instead, for
//! `benches/instructions.sh` to count the instructions per frame under
//! callgrind: a figure this machine's drifting speed does not blur.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bridge::port::{MemoryPeer, MemoryQueue};
use bridge::wire::{FrameSpec, MacAddr};
use bridge::{FdbConfig, MacTable, SectionMode, Worker, WorkerConfig};
use criterion::{criterion_group, Criterion, Throughput};
use locks::{Strategy, StrategyKind};

const STATIONS: u32 = 64;
const FRAME_LEN: usize = 60;

fn frame(dst: MacAddr, src: MacAddr) -> Vec<u8> {
    FrameSpec::new(dst, src).len(FRAME_LEN).build()
}

fn station(side: u8, n: u32) -> MacAddr {
    let b = n.to_be_bytes();
    MacAddr([0x02, side, b[0], b[1], b[2], b[3]])
}

struct Bench<S: Strategy> {
    worker: Worker<S, MemoryQueue>,
    peers: [MemoryPeer; 2],
    frames: Vec<Vec<u8>>,
}

impl<S: Strategy> Bench<S> {
    fn new(section: SectionMode) -> Self {
        let table = Arc::new(MacTable::<S>::new(FdbConfig::default()));
        let (p0, peer0) = MemoryQueue::pair("a");
        let (p1, peer1) = MemoryQueue::pair("b");
        let config = WorkerConfig {
            section,
            ..WorkerConfig::default()
        };
        let mut bench = Bench {
            worker: Worker::new(table, vec![p0, p1], config),
            peers: [peer0, peer1],
            frames: (0..STATIONS)
                .map(|n| frame(station(1, n), station(0, n)))
                .collect(),
        };
        // Every station on side 1 speaks once, so traffic to it is known.
        for n in 0..STATIONS {
            bench.peers[1].inject(&frame(MacAddr::BROADCAST, station(1, n)));
        }
        bench.round();
        bench
    }

    /// One batch from side 0 to side 1, through the worker.
    fn round(&mut self) -> usize {
        self.peers[0].inject_all(self.frames.iter().map(Vec::as_slice));
        while self.worker.poll() > 0 {}
        self.peers[0].drain_sent(|f| {
            black_box(f);
        });
        self.peers[1].drain_sent(|f| {
            black_box(f);
        })
    }
}

fn forwarding(c: &mut Criterion) {
    let mut group = c.benchmark_group("forward/memory");
    group.throughput(Throughput::Elements(u64::from(STATIONS)));
    for kind in StrategyKind::ALL {
        for (mode, name) in [
            (SectionMode::PerBatch, ""),
            (SectionMode::PerFrame, "-per-frame"),
        ] {
            locks::with_strategy!(kind, S => {
                let mut bench = Bench::<S>::new(mode);
                assert_eq!(bench.round(), STATIONS as usize, "known unicast was flooded or lost");
                group.bench_function(format!("{kind}{name}"), |b| b.iter(|| bench.round()));
            });
        }
    }
    group.finish();
}

/// `count` rounds, in one function callgrind can be told to count in.
#[inline(never)]
fn rounds<S: Strategy>(bench: &mut Bench<S>, count: usize) -> usize {
    (0..count).map(|_| bench.round()).sum()
}

/// `MPBRIDGE_ROUNDS` rounds of one strategy, after a warm-up.
fn count_rounds(count: usize, kind: StrategyKind) {
    locks::with_strategy!(kind, S => {
        let mut bench = Bench::<S>::new(SectionMode::PerBatch);
        // The warm-up outside `rounds`, which alone is counted.
        for _ in 0..100 {
            bench.round();
        }
        let sent = rounds(&mut bench, count);
        assert_eq!(sent, count * STATIONS as usize, "known unicast was flooded or lost");
        println!("{kind}: {count} rounds, {sent} frames");
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = forwarding
}

fn main() {
    if let Ok(count) = std::env::var("MPBRIDGE_ROUNDS") {
        let count = count.parse().expect("MPBRIDGE_ROUNDS: a number of rounds");
        let kind = std::env::args()
            .skip(1)
            .find_map(|arg| arg.parse().ok())
            .expect("a strategy to count");
        count_rounds(count, kind);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
