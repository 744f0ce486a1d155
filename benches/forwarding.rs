//! Frames per second through the worker loop on in-memory ports, per
//! strategy, with read sections per batch and per frame: 64-byte frames of
//! known unicast between 64 stations on each of two ports.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bridge::port::{MemoryPeer, MemoryQueue};
use bridge::wire::{FrameSpec, MacAddr};
use bridge::{FdbConfig, MacTable, SectionMode, Worker, WorkerConfig};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
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

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = forwarding
}
criterion_main!(benches);
