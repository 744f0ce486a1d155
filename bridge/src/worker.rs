//! The forwarding loop, generic over the lock strategy and the port type so
//! that each combination is compiled into its own direct-call hot path.
//!
//! Per batch received on one port: one read section of the MAC table in
//! which every frame is decided and every known source refreshed; then one
//! send per output port; then one write section that learns the batch's new
//! and moved sources. Learning therefore takes effect from the next batch.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use locks::Strategy;

use crate::counters::{PortCounters, PortStats};
use crate::decision::{classify, decide, Decision};
use crate::fdb::{FdbKey, FdbReader, FdbSection, MacTable, PortId, Seconds};
use crate::port::{Port, PortError, RxBatch};

/// How long a port whose receive failed is left alone, so that a port in a
/// persistent error state (a deleted tap) never spins a core.
const ERROR_BACKOFF: Duration = Duration::from_secs(1);
/// At most one log line per port per this interval.
const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// The longest a worker sleeps without looking at its stop flag.
const MAX_SLEEP_MS: i32 = 500;

/// Tells workers to stop, waking those asleep in `poll`.
#[derive(Debug)]
pub struct Stopper {
    stopped: AtomicBool,
    wake: OwnedFd,
}

impl Stopper {
    /// A stopper not yet triggered.
    pub fn new() -> io::Result<Stopper> {
        Ok(Stopper {
            stopped: AtomicBool::new(false),
            wake: crate::port::sys_eventfd()?,
        })
    }

    /// Asks every worker to stop and wakes them.
    pub fn stop(&self) {
        // Release: pairs with the workers' acquire load.
        self.stopped.store(true, Ordering::Release);
        // The flag is what counts; a failed wake-up only delays the stop
        // by at most the workers' longest sleep.
        let _ = crate::port::sys_eventfd_signal(self.wake.as_raw_fd());
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

/// Per-port fault state: when to look at the port again, when it last logged.
#[derive(Debug, Clone, Copy, Default)]
struct Fault {
    quiet_until: Option<Instant>,
    logged_at: Option<Instant>,
    suppressed: u64,
}

impl Fault {
    /// Logs `error` unless this port logged within [`LOG_INTERVAL`].
    fn log(&mut self, error: &PortError) {
        let now = Instant::now();
        if self.logged_at.is_some_and(|at| now < at + LOG_INTERVAL) {
            self.suppressed += 1;
            return;
        }
        if self.suppressed > 0 {
            log::warn!(
                "{error} (and {} more since the last report)",
                self.suppressed
            );
        } else {
            log::warn!("{error}");
        }
        self.logged_at = Some(now);
        self.suppressed = 0;
    }
}

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

/// What a worker does with frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// A learning bridge: the MAC table decides.
    #[default]
    Bridge,
    /// A two-port MAC relay (like OpenBSD's tpmr(4)): every frame goes out
    /// of the other port, no table, no rule; the forwarding loop alone, as
    /// the reference the bridge is measured against.
    Relay,
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
    /// Bridge or relay.
    pub mode: Mode,
    /// Busy-poll the queues instead of sleeping in `poll(2)` when idle.
    pub busy_poll: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            batch_size: 64,
            frame_capacity: 2048,
            section: SectionMode::PerBatch,
            mode: Mode::Bridge,
            busy_poll: false,
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
    faults: Vec<Fault>,
}

impl<S: Strategy, P: Port> Worker<S, P> {
    /// A worker over `ports` (at most 65536; port `i` has [`PortId`] `i`).
    pub fn new(fdb: Arc<MacTable<S>>, ports: Vec<P>, config: WorkerConfig) -> Self {
        assert!(ports.len() <= usize::from(u16::MAX) + 1, "too many ports");
        assert!(
            config.mode == Mode::Bridge || ports.len() == 2,
            "a relay has exactly two ports"
        );
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
            faults: vec![Fault::default(); n],
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
        let mut now = None;
        for ingress in 0..self.ports.len() {
            if let Some(until) = self.faults[ingress].quiet_until {
                if *now.get_or_insert_with(Instant::now) < until {
                    continue;
                }
                self.faults[ingress].quiet_until = None;
            }
            self.batch.clear();
            match self.ports[ingress].recv_batch(&mut self.batch) {
                Ok(report) => self.stats[ingress].rx_oversize += report.oversize as u64,
                Err(error) => {
                    self.stats[ingress].rx_errors += 1;
                    let fault = &mut self.faults[ingress];
                    fault.quiet_until = Some(Instant::now() + ERROR_BACKOFF);
                    fault.log(&error);
                }
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

    /// Forwards until `stopper` says stop, sleeping in `poll(2)` on the
    /// ports' descriptors when none has frames.
    pub fn run(&mut self, stopper: &Stopper) {
        let mut fds = Vec::with_capacity(self.ports.len() + 1);
        while !stopper.is_stopped() {
            if self.poll() > 0 || self.config.busy_poll {
                continue;
            }
            fds.clear();
            fds.push(libc::pollfd {
                fd: stopper.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            let now = Instant::now();
            let mut timeout = MAX_SLEEP_MS;
            let mut always_ready = false;
            for (port, fault) in self.ports.iter().zip(&self.faults) {
                if let Some(until) = fault.quiet_until {
                    let wait = until.saturating_duration_since(now).as_millis() as i32 + 1;
                    timeout = timeout.min(wait);
                    continue;
                }
                match port.raw_fd() {
                    Some(fd) => fds.push(libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    }),
                    None => always_ready = true,
                }
            }
            if always_ready {
                std::thread::yield_now();
                continue;
            }
            if let Err(error) = crate::port::sys_poll(&mut fds, timeout) {
                log::warn!("poll failed: {error}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
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
        if self.config.mode == Mode::Relay {
            let other = Decision::Unicast(PortId(1 - port.0));
            decisions.extend(std::iter::repeat_n(other, batch.len()));
            self.dispatch(ingress);
            return;
        }
        match self.config.section {
            SectionMode::PerBatch => fdb.read(|section| {
                for frame in batch.iter() {
                    let frame = &frame[P::METADATA_LEN.min(frame.len())..];
                    decisions.push(decide_and_refresh::<S>(section, port, frame, now, to_learn));
                }
            }),
            SectionMode::PerFrame => {
                for frame in batch.iter() {
                    let frame = &frame[P::METADATA_LEN.min(frame.len())..];
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
            rx.rx_bytes += payload_len::<P>(self.batch.frame(index));
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
                        .map(|&index| payload_len::<P>(batch.frame(index)))
                        .sum::<u64>();
                    tx.tx_dropped += offered - sent;
                }
                Err(error) => {
                    tx.tx_errors += offered;
                    self.faults[egress].log(&error);
                }
            }
            output.clear();
        }
    }
}

/// A buffer's Ethernet frame length, without the port's metadata.
#[inline]
fn payload_len<P: Port>(buffer: &[u8]) -> u64 {
    buffer.len().saturating_sub(P::METADATA_LEN) as u64
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
