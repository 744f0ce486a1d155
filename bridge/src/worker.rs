//! The forwarding loop, generic over the lock strategy and the port type so
//! that each combination is compiled into its own direct-call hot path.
//!
//! Per batch received on one port: one read section of the MAC table in
//! which every frame is decided and every known source refreshed; then one
//! send per output port; then one write section that learns the batch's new
//! and moved sources. Learning therefore takes effect from the next batch.

use std::sync::Arc;

use locks::Strategy;

use crate::counters::{PortCounters, PortStats};
use crate::decision::{classify, decide, Decision};
use crate::fdb::{FdbKey, FdbReader, FdbSection, MacTable, PortId, Seconds};
use crate::port::{Port, RxBatch};

/// How long a read section lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SectionMode {
    /// One section per received batch: one lock acquisition, snapshot load or
    /// epoch pin for up to a batch of frames.
    #[default]
    PerBatch,
    /// One section per frame: the fine-grained alternative, to measure what
    /// batching saves.
    PerFrame,
}

/// Worker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Frames received from one port per batch.
    pub batch_size: usize,
    /// The largest frame a receive buffer holds.
    pub frame_capacity: usize,
    /// How long read sections last.
    pub section: SectionMode,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            batch_size: 64,
            frame_capacity: 2048,
            section: SectionMode::PerBatch,
        }
    }
}

/// A forwarding thread's state: one queue of every port, and the table.
pub struct Worker<S: Strategy, P: Port> {
    fdb: Arc<MacTable<S>>,
    ports: Vec<P>,
    config: WorkerConfig,
    counters: Arc<[PortCounters]>,
    batch: RxBatch,
    decisions: Vec<Decision>,
    /// Per output port, the indices of the batch's frames to send there.
    outputs: Vec<Vec<usize>>,
    to_learn: Vec<(FdbKey, PortId)>,
    stats: Vec<PortStats>,
}

impl<S: Strategy, P: Port> Worker<S, P> {
    /// A worker over `ports` (at most 65536; port `i` has [`PortId`] `i`).
    pub fn new(fdb: Arc<MacTable<S>>, ports: Vec<P>, config: WorkerConfig) -> Self {
        assert!(ports.len() <= usize::from(u16::MAX) + 1, "too many ports");
        let n = ports.len();
        Worker {
            fdb,
            config,
            counters: (0..n).map(|_| PortCounters::default()).collect(),
            batch: RxBatch::new(config.batch_size, config.frame_capacity),
            decisions: Vec::with_capacity(config.batch_size),
            outputs: (0..n)
                .map(|_| Vec::with_capacity(config.batch_size))
                .collect(),
            to_learn: Vec::with_capacity(config.batch_size),
            stats: vec![PortStats::default(); n],
            ports,
        }
    }

    /// This worker's counters, one per port.
    pub fn counters(&self) -> Arc<[PortCounters]> {
        Arc::clone(&self.counters)
    }

    /// The ports.
    pub fn ports(&self) -> &[P] {
        &self.ports
    }

    /// The table.
    pub fn fdb(&self) -> &Arc<MacTable<S>> {
        &self.fdb
    }

    /// Receives one batch from every port in turn and forwards it; returns
    /// how many frames were received.
    pub fn poll(&mut self) -> usize {
        let mut received = 0;
        for ingress in 0..self.ports.len() {
            self.batch.clear();
            match self.ports[ingress].recv_batch(&mut self.batch) {
                Ok(report) => self.stats[ingress].rx_oversize += report.oversize as u64,
                Err(_) => self.stats[ingress].rx_errors += 1,
            }
            if !self.batch.is_empty() {
                received += self.batch.len();
                self.forward(ingress);
            }
        }
        for (counters, stats) in self.counters.iter().zip(&mut self.stats) {
            if *stats != PortStats::default() {
                counters.add(stats);
                *stats = PortStats::default();
            }
        }
        received
    }

    fn forward(&mut self, ingress: usize) {
        // The clock is read once per batch; entries are refreshed only when
        // this second differs from the one they hold.
        let now = self.fdb.clock().now();
        let port = PortId(ingress as u16);
        let Worker {
            fdb,
            batch,
            decisions,
            to_learn,
            ..
        } = self;
        decisions.clear();
        match self.config.section {
            SectionMode::PerBatch => fdb.read(|section| {
                for frame in batch.iter() {
                    decisions.push(decide_and_refresh::<S>(section, port, frame, now, to_learn));
                }
            }),
            SectionMode::PerFrame => {
                for frame in batch.iter() {
                    let decision = fdb.read(|section| {
                        decide_and_refresh::<S>(section, port, frame, now, to_learn)
                    });
                    decisions.push(decision);
                }
            }
        }
        self.dispatch(ingress);
        if !self.to_learn.is_empty() {
            self.fdb.learn_batch(&self.to_learn, now);
            self.to_learn.clear();
        }
    }

    /// Sends the decided frames, one batch per output port.
    fn dispatch(&mut self, ingress: usize) {
        let n = self.ports.len();
        let rx = &mut self.stats[ingress];
        for (index, decision) in self.decisions.iter().enumerate() {
            rx.rx_frames += 1;
            rx.rx_bytes += self.batch.frame(index).len() as u64;
            match *decision {
                Decision::Drop(reason) => rx.drops[reason.index()] += 1,
                Decision::Unicast(port) => match self.outputs.get_mut(port.index()) {
                    Some(output) => output.push(index),
                    // A static entry naming a port this bridge lacks.
                    None => rx.tx_errors += 1,
                },
                Decision::Flood => {
                    for (egress, output) in self.outputs.iter_mut().enumerate() {
                        if egress != ingress {
                            output.push(index);
                        }
                    }
                }
            }
        }
        for egress in 0..n {
            let output = &mut self.outputs[egress];
            if output.is_empty() {
                continue;
            }
            let batch = &self.batch;
            let frames = output.iter().map(|&index| batch.frame(index));
            let offered = output.len() as u64;
            let tx = &mut self.stats[egress];
            match self.ports[egress].send_batch(frames) {
                Ok(sent) => {
                    let sent = sent as u64;
                    tx.tx_frames += sent;
                    tx.tx_bytes += output
                        .iter()
                        .take(sent as usize)
                        .map(|&index| batch.frame(index).len() as u64)
                        .sum::<u64>();
                    tx.tx_dropped += offered - sent;
                }
                Err(_) => tx.tx_errors += offered,
            }
            output.clear();
        }
    }
}

/// Decides one frame and refreshes or queues its source for learning.
#[inline]
fn decide_and_refresh<S: Strategy>(
    section: &FdbReader<'_, FdbSection<'_, S>>,
    ingress: PortId,
    frame: &[u8],
    now: Seconds,
    to_learn: &mut Vec<(FdbKey, PortId)>,
) -> Decision {
    if let Ok((_, source)) = classify(frame) {
        if !section.refresh_source(&source, ingress, now) {
            to_learn.push((source, ingress));
        }
    }
    decide(ingress, frame, section)
}
