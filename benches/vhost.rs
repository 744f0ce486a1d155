//! The vhost-user path through the worker, with no second process: two
//! vhost-user ports whose drivers this benchmark plays over memory of its
//! own (two guests' worth, one per port), so that every instruction
//! between a driver posting a frame on one port's transmit ring and the
//! frame landing in the other port's receive buffers is the bridge's.
//! 64 stations behind each port, known unicast one way, a batch of 64
//! frames per round; the drivers post with VERSION_1, MRG_RXBUF and
//! EVENT_IDX negotiated (a 12-byte header), each frame in one descriptor
//! with its header before it, as DPDK's virtio-user and Linux's
//! virtio-net do.
//!
//! `cargo bench --bench vhost` measures frames per second per strategy
//! and frame size. With `MPBRIDGE_ROUNDS=N` and `STRATEGY [BYTES]` as its
//! arguments it runs N rounds inside [`rounds`] instead, for
//! `benches/instructions.sh` to count the instructions per frame.
//! `MPBRIDGE_STATIONS=K` (1 to 64) has the batch's 64 frames come from K
//! stations per side in turn, to each one's peer: K=1 is one VM talking
//! to one other (as `mpbench forward --ports vhost` does), 64 (the
//! default) a station per frame.

use std::fs::File;
use std::hint::black_box;
use std::os::fd::FromRawFd;
use std::sync::Arc;
use std::time::Duration;

use bridge::port::vhost::fuzzing::{self, Device};
use bridge::port::vhost::memory::GuestMemory;
use bridge::port::vhost::ring::{driver, RingLayout, SplitRing};
use bridge::port::VhostQueue;
use bridge::wire::{FrameSpec, MacAddr};
use bridge::{FdbConfig, MacTable, Worker, WorkerConfig};
use criterion::{criterion_group, Criterion, Throughput};
use locks::{Strategy, StrategyKind};

/// Frames a batch, and the most stations per side.
const STATIONS: u16 = 64;

/// Stations per side: `MPBRIDGE_STATIONS`, or [`STATIONS`].
fn stations() -> u16 {
    std::env::var("MPBRIDGE_STATIONS")
        .ok()
        .map(|k| k.parse().expect("MPBRIDGE_STATIONS: 1 to 64"))
        .filter(|k| (1..=STATIONS).contains(k))
        .unwrap_or(STATIONS)
}
/// Entries per ring: room for four batches.
const RING: u16 = 256;
/// Each guest's memory: the rings, then its transmit and receive buffers.
const BASE: u64 = 0x10_0000;
const MEMORY: usize = 2 << 20;
const TX_RING: u64 = BASE;
const RX_RING: u64 = BASE + 0x1_0000;
const TX_BUFFERS: u64 = BASE + 0x2_0000;
const RX_BUFFERS: u64 = BASE + 0x10_0000;
const BUFFER: u64 = 2048;
const HEADER: usize = 12;
const VERSION_1: u64 = 1 << 32;
const MRG_RXBUF: u64 = 1 << 15;
const EVENT_IDX: u64 = 1 << 29;

fn station(side: u8, n: u16) -> MacAddr {
    let b = n.to_be_bytes();
    MacAddr([0x02, side, 0, 0, b[0], b[1]])
}

fn eventfd() -> File {
    // SAFETY: constant arguments; the descriptor is checked and owned at once.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0, "eventfd");
    // SAFETY: `fd` is a new descriptor nothing else owns.
    unsafe { File::from_raw_fd(fd) }
}

/// One port's driver: its memory, its two rings and where it is in them.
struct Guest {
    memory: Arc<GuestMemory>,
    tx: RingLayout,
    rx: RingLayout,
    tx_avail: u16,
    rx_avail: u16,
    rx_used: u16,
}

impl Guest {
    /// A guest whose transmit descriptor `i` holds `frames[i % len]`
    /// after a header, and whose receive descriptor `i` is a buffer of
    /// [`BUFFER`] bytes; both rings run as `device`'s pair 0.
    fn new(device: &Device, frames: &[Vec<u8>]) -> Guest {
        let memory = Arc::new(GuestMemory::anonymous(BASE, MEMORY).expect("guest memory"));
        let (tx, _) = driver::layout(TX_RING, RING);
        let (rx, _) = driver::layout(RX_RING, RING);
        for i in 0..RING {
            let frame = &frames[usize::from(i) % frames.len()];
            let at = TX_BUFFERS + BUFFER * u64::from(i);
            memory.write(at, &[0; HEADER]);
            memory.write(at + HEADER as u64, frame);
            let len = (HEADER + frame.len()) as u32;
            driver::set_descriptor(&memory, &tx, i, at, len, 0, 0);
            let at = RX_BUFFERS + BUFFER * u64::from(i);
            driver::set_descriptor(&memory, &rx, i, at, BUFFER as u32, driver::WRITE, 0);
        }
        let features = VERSION_1 | MRG_RXBUF | EVENT_IDX;
        for (index, layout) in [(0, rx), (1, tx)] {
            let ring = SplitRing::new(Arc::clone(&memory), layout, 0, true).expect("a ring");
            fuzzing::start(device, index, ring, features, eventfd()).expect("ring started");
        }
        Guest {
            memory,
            tx,
            rx,
            tx_avail: 0,
            rx_avail: 0,
            rx_used: 0,
        }
    }

    /// Makes `count` more transmit chains available (the next descriptors
    /// in turn), as one publication.
    fn send(&mut self, count: u16) {
        for _ in 0..count {
            let head = self.tx_avail & (RING - 1);
            driver::set_avail(&self.memory, &self.tx, self.tx_avail, head);
            self.tx_avail = self.tx_avail.wrapping_add(1);
        }
        driver::set_avail_idx(&self.memory, &self.tx, self.tx_avail);
    }

    /// Posts receive buffers until `RING / 2` are available to the device.
    fn refill(&mut self) {
        while self.rx_avail.wrapping_sub(self.rx_used) < RING / 2 {
            let head = self.rx_avail & (RING - 1);
            driver::set_avail(&self.memory, &self.rx, self.rx_avail, head);
            self.rx_avail = self.rx_avail.wrapping_add(1);
        }
        driver::set_avail_idx(&self.memory, &self.rx, self.rx_avail);
    }

    /// Takes the frames the device returned on the receive ring: how many,
    /// each read back (its first byte after the header) as a driver would.
    fn received(&mut self) -> usize {
        let used = driver::used_idx(&self.memory, &self.rx);
        let count = used.wrapping_sub(self.rx_used);
        for k in 0..count {
            let (head, len) =
                driver::used_elem(&self.memory, &self.rx, self.rx_used.wrapping_add(k));
            let mut first = [0u8; 1];
            let at = RX_BUFFERS + BUFFER * u64::from(head) + HEADER as u64;
            self.memory.read(at, &mut first);
            black_box((first, len));
        }
        self.rx_used = used;
        usize::from(count)
    }
}

struct Bench<S: Strategy> {
    worker: Worker<S, VhostQueue>,
    guests: [Guest; 2],
    _devices: [Arc<Device>; 2],
}

impl<S: Strategy> Bench<S> {
    /// Frames of `len` bytes (without the FCS) from side 0's stations to
    /// side 1's ([`stations`] of each).
    fn new(len: usize) -> Self {
        let stations = stations();
        let frames = |from: u8, to: Option<u8>| -> Vec<Vec<u8>> {
            (0..STATIONS)
                .map(|n| {
                    let n = n % stations;
                    let dst = to.map_or(MacAddr::BROADCAST, |side| station(side, n));
                    FrameSpec::new(dst, station(from, n)).len(len).build()
                })
                .collect()
        };
        let devices = [0, 1]
            .map(|n| Arc::new(Device::new(&format!("vhost{n}"), 1, 1 << 30).expect("a device")));
        let guests = [
            Guest::new(&devices[0], &frames(0, Some(1))),
            Guest::new(&devices[1], &frames(1, None)),
        ];
        let queues = devices
            .iter()
            .map(|device| fuzzing::queue(Arc::clone(device), 0))
            .collect();
        let table = Arc::new(MacTable::<S>::new(FdbConfig::default()));
        let mut bench = Bench {
            worker: Worker::new(table, queues, WorkerConfig::default()),
            guests,
            _devices: devices,
        };
        // Every station on side 1 speaks once, so traffic to it is known.
        bench.guests[0].refill();
        bench.guests[1].refill();
        bench.guests[1].send(STATIONS);
        while bench.worker.poll() > 0 {}
        assert_eq!(bench.guests[0].received(), usize::from(STATIONS));
        bench
    }

    /// One batch from side 0 to side 1, through the worker.
    fn round(&mut self) -> usize {
        self.guests[1].refill();
        self.guests[0].send(STATIONS);
        while self.worker.poll() > 0 {}
        self.guests[1].received()
    }
}

/// `count` rounds, in one function callgrind can be told to count in.
#[inline(never)]
fn rounds<S: Strategy>(bench: &mut Bench<S>, count: usize) -> usize {
    (0..count).map(|_| bench.round()).sum()
}

/// `MPBRIDGE_ROUNDS` rounds of one strategy and frame size, after a
/// warm-up.
fn count_rounds(count: usize, kind: StrategyKind, bytes: usize) {
    locks::with_strategy!(kind, S => {
        let mut bench = Bench::<S>::new(bytes - 4);
        // The warm-up outside `rounds`, which alone is counted.
        for _ in 0..100 {
            bench.round();
        }
        let sent = rounds(&mut bench, count);
        assert_eq!(sent, count * usize::from(STATIONS), "known unicast was flooded or lost");
        println!("{kind} {bytes} bytes: {count} rounds, {sent} frames");
    });
}

fn forwarding(c: &mut Criterion) {
    let mut group = c.benchmark_group("forward/vhost");
    group.throughput(Throughput::Elements(u64::from(STATIONS)));
    for bytes in [64, 1518] {
        for kind in StrategyKind::ALL {
            locks::with_strategy!(kind, S => {
                let mut bench = Bench::<S>::new(bytes - 4);
                assert_eq!(bench.round(), usize::from(STATIONS), "known unicast was flooded or lost");
                group.bench_function(format!("{kind}/{bytes}"), |b| b.iter(|| bench.round()));
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

fn main() {
    if let Ok(count) = std::env::var("MPBRIDGE_ROUNDS") {
        let count = count.parse().expect("MPBRIDGE_ROUNDS: a number of rounds");
        let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
        let kind = args
            .next()
            .and_then(|s| s.parse().ok())
            .expect("a strategy: mutex, rwlock, rmlock, sharded, rcu or epoch");
        let bytes = args
            .next()
            .map_or(64, |s| s.parse().expect("a frame size in bytes"));
        assert!((64..=1518).contains(&bytes), "frames of 64 to 1518 bytes");
        count_rounds(count, kind, bytes);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
