//! Helpers shared by the bridge's test suites.
#![allow(dead_code)]

use std::sync::Arc;

use bridge::counters::PortStats;
use bridge::port::{MemoryPeer, MemoryQueue};
use bridge::wire::{FrameSpec, MacAddr, Payload};
use bridge::{FdbConfig, MacTable, SectionMode, Worker, WorkerConfig};
use locks::Strategy;

/// Instantiates generic test functions `fn name<S: Strategy>()` once per
/// strategy, as `mutex::name`, `rwlock::name`, and so on.
#[macro_export]
macro_rules! for_each_strategy {
    ($($test:ident),* $(,)?) => {
        $crate::for_each_strategy!(@one mutex, locks::Mutex, $($test),*);
        $crate::for_each_strategy!(@one rwlock, locks::Rwlock, $($test),*);
        $crate::for_each_strategy!(@one rmlock, locks::Rmlock, $($test),*);
        $crate::for_each_strategy!(@one sharded, locks::Sharded, $($test),*);
        $crate::for_each_strategy!(@one rcu, locks::Rcu, $($test),*);
        $crate::for_each_strategy!(@one epoch, locks::Epoch, $($test),*);
    };
    (@one $module:ident, $strategy:ty, $($test:ident),*) => {
        mod $module {
            $(
                #[test]
                fn $test() {
                    super::$test::<$strategy>();
                }
            )*
        }
    };
}

/// A locally administered unicast address ending in `n`.
pub fn station(n: u32) -> MacAddr {
    let b = n.to_be_bytes();
    MacAddr([0x02, 0x00, b[0], b[1], b[2], b[3]])
}

/// An untagged IPv4 frame of `len` bytes (at least 14) from `src` to `dst`,
/// its payload a pattern that tells frames apart.
pub fn frame(dst: MacAddr, src: MacAddr, len: usize) -> Vec<u8> {
    FrameSpec::new(dst, src)
        .len(len)
        .payload(Payload::Pattern)
        .build()
}

/// An 802.1Q-tagged frame in `vlan`.
pub fn tagged(dst: MacAddr, src: MacAddr, vlan: u16, len: usize) -> Vec<u8> {
    FrameSpec::new(dst, src)
        .tagged(0x2000 | vlan)
        .len(len)
        .payload(Payload::Pattern)
        .build()
}

/// A bridge over in-memory ports, with one worker driven by hand.
pub struct Rig<S: Strategy> {
    pub fdb: Arc<MacTable<S>>,
    pub worker: Worker<S, MemoryQueue>,
    pub peers: Vec<MemoryPeer>,
}

impl<S: Strategy> Rig<S> {
    pub fn new(ports: usize) -> Self {
        Self::with(ports, FdbConfig::default(), WorkerConfig::default())
    }

    pub fn with(ports: usize, fdb: FdbConfig, config: WorkerConfig) -> Self {
        let fdb = Arc::new(MacTable::new(fdb));
        let (ports, peers): (Vec<_>, Vec<_>) = (0..ports)
            .map(|i| MemoryQueue::pair(format!("mem{i}")))
            .unzip();
        Rig {
            worker: Worker::new(Arc::clone(&fdb), ports, config),
            fdb,
            peers,
        }
    }

    pub fn per_frame(ports: usize) -> Self {
        Self::with(
            ports,
            FdbConfig::default(),
            WorkerConfig {
                section: SectionMode::PerFrame,
                ..WorkerConfig::default()
            },
        )
    }

    /// Injects `frame` on `port` and lets the worker forward it.
    pub fn send(&mut self, port: usize, frame: &[u8]) {
        self.peers[port].inject(frame);
        while self.worker.poll() > 0 {}
    }

    /// What each port sent since the last call.
    pub fn sent(&self) -> Vec<Vec<Vec<u8>>> {
        self.peers.iter().map(|peer| peer.take_sent()).collect()
    }

    /// Which ports sent something since the last call.
    pub fn ports_that_sent(&self) -> Vec<usize> {
        self.sent()
            .iter()
            .enumerate()
            .filter(|(_, frames)| !frames.is_empty())
            .map(|(port, _)| port)
            .collect()
    }

    pub fn stats(&self, port: usize) -> PortStats {
        self.worker.counters()[port].snapshot()
    }
}
