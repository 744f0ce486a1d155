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
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use locks::Strategy;

use crate::capture::{self, CaptureHub};
use crate::counters::{PortCounters, PortState, PortStats, WorkerCounters};
use crate::decision::{classify_in, decide_in, Decision, DropReason};
use crate::fdb::{FdbKey, FdbReader, FdbSection, MacTable, PortId, Seconds, SourceState};
use crate::port::{wake, FaultKind, Port, PortError, RxBatch, VNET_HDR_LEN};
use crate::vlan::{self, Admitted, Egress, PortVlans};
use crate::wire::VnetHeader;

/// How long a faulted port (link down, a persistent error) is first left
/// alone before it is tried again: short, since most faults are brief (a
/// tap moved to another namespace is down for a moment).
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The back-off doubles while the fault lasts, up to this: a port down for
/// long costs one look a second, and comes back within a second of its
/// link.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// At most one log line per port per this interval.
const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// The longest a worker sleeps without looking at its stop flag.
const MAX_SLEEP_MS: i32 = 500;
/// Station moves onto one port within one second beyond which the worker
/// warns of a flapping station (a loop, or two stations claiming one
/// address).
const FLAP_MOVES_PER_SEC: u32 = 20;
/// A busy-polling worker looks for port errors once per this many idle
/// rounds (the sleeping one sees them in `poll(2)`).
const BUSY_POLL_ERROR_CHECK: u32 = 1024;
/// How often a worker asks its ports whether their link went down with
/// nothing failing (see [`Port::link_lost`]): as often as the link monitor
/// looks at raw ports.
const LINK_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The most ports a bridge has at once; port ids run from 0 below it.
pub const MAX_PORTS: usize = 256;

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
            wake: wake::eventfd()?,
        })
    }

    /// Asks every worker to stop and wakes them.
    pub fn stop(&self) {
        // Release: pairs with the workers' acquire load.
        self.stopped.store(true, Ordering::Release);
        // The flag is what counts; a failed wake-up only delays the stop
        // by at most the workers' longest sleep.
        let _ = wake::eventfd_signal(&self.wake);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

/// Where one port stands for one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    /// Passing frames.
    Up,
    /// Faulted: left alone until then (not polled, sent nothing).
    Backoff(Instant),
    /// Back from a back-off, not yet proven: a fault now belongs to the
    /// same event and is not counted again.
    Retrying,
    /// The device is gone for good; the port is out of the bridge.
    Gone,
    /// No port has this id (never added, or removed).
    Vacant,
}

/// Per-port fault state: its health and when it last logged.
#[derive(Debug, Clone, Copy)]
struct Fault {
    health: Health,
    /// The back-off the next fault of this event gets.
    backoff: Duration,
    logged_at: Option<Instant>,
    suppressed: u64,
}

impl Default for Fault {
    fn default() -> Self {
        Fault {
            health: Health::Up,
            backoff: FIRST_BACKOFF,
            logged_at: None,
            suppressed: 0,
        }
    }
}

impl Fault {
    const VACANT: Fault = Fault {
        health: Health::Vacant,
        backoff: FIRST_BACKOFF,
        logged_at: None,
        suppressed: 0,
    };

    /// Leaves the port alone for the current back-off, and doubles it for
    /// the next fault of the same event.
    fn back_off(&mut self) {
        self.health = Health::Backoff(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Logs `error` unless this port logged within [`LOG_INTERVAL`].
    fn log(&mut self, error: &PortError, what: &str) {
        let now = Instant::now();
        if self.logged_at.is_some_and(|at| now < at + LOG_INTERVAL) {
            self.suppressed += 1;
            return;
        }
        if self.suppressed > 0 {
            log::warn!(
                "{error}{what} (and {} more since the last report)",
                self.suppressed
            );
        } else {
            log::warn!("{error}{what}");
        }
        self.logged_at = Some(now);
        self.suppressed = 0;
    }

    /// Whether frames may be sent to the port now.
    fn sendable(&self) -> bool {
        matches!(self.health, Health::Up | Health::Retrying)
    }
}

/// Which counter a port fault is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Rx,
    Tx,
}

/// Station moves onto one port in the current one-second window.
#[derive(Debug, Clone, Copy, Default)]
struct Flaps {
    window: Option<Instant>,
    moves: u32,
    warned_at: Option<Instant>,
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
    /// Collect the lock statistics of the MAC table's sections (see
    /// [`locks::lockstat`]; the caller turns counting on).
    pub lockstat: bool,
    /// 802.1Q VLAN filtering (see [`crate::vlan`]): ports are members of
    /// VLANs, set with [`Worker::set_vlans`] or [`PortControl::add_with_vlans`].
    pub vlan_filtering: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            batch_size: 64,
            frame_capacity: 2048,
            section: SectionMode::PerBatch,
            mode: Mode::Bridge,
            busy_poll: false,
            lockstat: false,
            vlan_filtering: false,
        }
    }
}

/// A forwarding thread's state: one queue of every port, and the table.
pub struct Worker<S: Strategy, P: Port> {
    fdb: Arc<MacTable<S>>,
    /// This worker's queue of each port, by port id; `None` where no port
    /// has that id.
    ports: Vec<Option<P>>,
    /// Ports added and removed while running, and the eventfd that wakes
    /// this worker to look (see [`PortControl`]).
    changes: mpsc::Receiver<Change<P>>,
    control: PortControl<P>,
    config: WorkerConfig,
    counters: Arc<[PortCounters]>,
    totals: Arc<WorkerCounters>,
    capture: Arc<CaptureHub>,
    /// This worker's index, as capture reports it.
    id: usize,
    /// Whether a capture was attached when this batch began.
    capturing: bool,
    batch: RxBatch,
    decisions: Vec<Decision>,
    /// Per output port, the indices of the batch's frames to send there.
    outputs: Vec<Vec<usize>>,
    /// The batch's sources to learn, once each, with what the fast path saw.
    to_learn: Vec<(FdbKey, PortId, SourceState)>,
    learn_buffer: Vec<(FdbKey, PortId)>,
    stats: Vec<PortStats>,
    faults: Vec<Fault>,
    flaps: Vec<Flaps>,
    /// When this worker last warned of a port's own address as a source.
    own_source_warned: Option<Instant>,
    /// When the ports' links are to be looked at next.
    next_link_check: Instant,
    /// Per pollfd after the eventfd, the port it belongs to.
    polled: Vec<usize>,
    /// After a sleep in poll(2): per port, whether it polled readable. The
    /// round that follows reads only those, not paying an empty read for
    /// the others; the round after reads every port again.
    readable: Option<Vec<bool>>,
    /// Whether the last round left every port's queue empty (no batch came
    /// back full) and every such empty read cost a system call.
    drained_by_syscalls: bool,
    /// Per port, its VLANs (with VLAN filtering).
    vlans: Vec<PortVlans>,
    /// Per frame of the batch, its VLAN and tags (with VLAN filtering).
    admitted: Vec<Option<Admitted>>,
    /// Frames rewritten for egress (a tag removed, added or changed), one
    /// after the other; an output index past the batch's frames names one.
    rewritten: Vec<u8>,
    rewrites: Vec<(usize, usize)>,
    /// Per frame of the batch, the rewrite index of its untagged and its
    /// tagged form, once made.
    forms: Vec<[Option<usize>; 2]>,
}

impl<S: Strategy, P: Port> Worker<S, P> {
    /// A worker over `ports` (at most [`MAX_PORTS`]; port `i` has
    /// [`PortId`] `i`).
    pub fn new(fdb: Arc<MacTable<S>>, ports: Vec<P>, config: WorkerConfig) -> Self {
        let ports = ports.into_iter().map(Some).collect();
        Self::resume(fdb, ports, config, WorkerParts::default())
    }

    /// A worker that takes over the queues and the counters of one that
    /// stopped (see [`into_parts`](Self::into_parts)): how a bridge moves
    /// to a table of another strategy without closing a port or losing a
    /// count.
    pub fn resume(
        fdb: Arc<MacTable<S>>,
        ports: Vec<Option<P>>,
        config: WorkerConfig,
        parts: WorkerParts,
    ) -> Self {
        assert!(ports.len() <= MAX_PORTS, "too many ports");
        assert!(
            config.mode == Mode::Bridge || ports.len() == 2,
            "a relay has exactly two ports"
        );
        let n = ports.len();
        let (sender, changes) = mpsc::channel();
        let wake = Arc::new(wake::eventfd().expect("an eventfd for port changes"));
        Worker {
            fdb,
            config,
            changes,
            control: PortControl { sender, wake },
            counters: parts
                .counters
                .unwrap_or_else(|| (0..MAX_PORTS).map(|_| PortCounters::default()).collect()),
            totals: parts.totals.unwrap_or_default(),
            capture: parts.capture.unwrap_or_default(),
            id: parts.id,
            capturing: false,
            batch: RxBatch::new(config.batch_size, config.frame_capacity),
            decisions: Vec::with_capacity(config.batch_size),
            outputs: (0..n)
                .map(|_| Vec::with_capacity(config.batch_size))
                .collect(),
            to_learn: Vec::with_capacity(config.batch_size),
            learn_buffer: Vec::with_capacity(config.batch_size),
            stats: vec![PortStats::default(); n],
            faults: ports
                .iter()
                .map(|port| match port {
                    Some(_) => Fault::default(),
                    None => Fault::VACANT,
                })
                .collect(),
            flaps: vec![Flaps::default(); n],
            own_source_warned: None,
            next_link_check: Instant::now() + LINK_CHECK_INTERVAL,
            polled: Vec::with_capacity(n),
            readable: None,
            drained_by_syscalls: false,
            vlans: parts.vlans.unwrap_or_else(|| vec![PortVlans::default(); n]),
            admitted: Vec::with_capacity(config.batch_size),
            rewritten: Vec::new(),
            rewrites: Vec::new(),
            forms: Vec::with_capacity(config.batch_size),
            ports,
        }
    }

    /// Stops being a worker: its queues (by port id) and its counters, for
    /// [`resume`](Self::resume). Port changes sent but not applied are
    /// applied first.
    pub fn into_parts(mut self) -> (Vec<Option<P>>, WorkerParts) {
        self.apply_changes();
        let parts = WorkerParts {
            counters: Some(self.counters),
            totals: Some(self.totals),
            capture: Some(self.capture),
            id: self.id,
            vlans: Some(self.vlans),
        };
        (self.ports, parts)
    }

    /// Sets port `port`'s VLANs (used with VLAN filtering), before the
    /// worker runs; a running worker takes them with
    /// [`PortControl::add_with_vlans`].
    pub fn set_vlans(&mut self, port: PortId, vlans: PortVlans) {
        let index = port.index();
        if index >= self.vlans.len() {
            self.vlans.resize(index + 1, PortVlans::default());
        }
        self.vlans[index] = vlans;
    }

    /// A handle that adds and removes this worker's queues of ports while
    /// it runs.
    pub fn control(&self) -> PortControl<P> {
        self.control.clone()
    }

    /// Applies the port changes sent through [`PortControl`]: a worker
    /// calls this between batches, so no frame of its is in flight on a
    /// queue it drops. Returns how many it applied.
    pub fn apply_changes(&mut self) -> usize {
        let mut applied = 0;
        while let Ok(change) = self.changes.try_recv() {
            applied += 1;
            // A new port was not polled: the next round reads every port.
            self.readable = None;
            match change {
                Change::Add {
                    id,
                    queue,
                    vlans,
                    done,
                } => {
                    let index = id.index();
                    if index >= self.vlans.len() {
                        self.vlans.resize(index + 1, PortVlans::default());
                    }
                    self.vlans[index] = vlans;
                    if index >= self.ports.len() {
                        let n = index + 1;
                        self.ports.resize_with(n, || None);
                        self.stats.resize(n, PortStats::default());
                        self.faults.resize(n, Fault::VACANT);
                        self.flaps.resize(n, Flaps::default());
                        self.outputs
                            .resize_with(n, || Vec::with_capacity(self.config.batch_size));
                    }
                    self.counters[index].reset();
                    self.stats[index] = PortStats::default();
                    self.faults[index] = Fault::default();
                    self.flaps[index] = Flaps::default();
                    self.ports[index] = Some(queue);
                    let _ = done.send(());
                }
                Change::Remove { id, done } => {
                    if let Some(slot) = self.ports.get_mut(id.index()) {
                        // Dropping the queue closes it: nothing of this
                        // worker uses it any more, and no other worker ever
                        // did.
                        *slot = None;
                        self.faults[id.index()] = Fault::VACANT;
                        self.stats[id.index()] = PortStats::default();
                    }
                    let _ = done.send(());
                }
            }
        }
        applied
    }

    /// This worker's counters, one per port.
    pub fn counters(&self) -> Arc<[PortCounters]> {
        Arc::clone(&self.counters)
    }

    /// This worker's capture taps.
    pub fn capture(&self) -> Arc<CaptureHub> {
        Arc::clone(&self.capture)
    }

    /// Sets the index captures report for this worker's frames.
    pub fn set_id(&mut self, id: usize) {
        self.id = id;
    }

    /// This worker's own totals.
    pub fn totals(&self) -> Arc<WorkerCounters> {
        Arc::clone(&self.totals)
    }

    /// This worker's queues, by port id (`None` where no port has the id).
    pub fn ports(&self) -> &[Option<P>] {
        &self.ports
    }

    fn port(&self, index: usize) -> &P {
        self.ports[index].as_ref().expect("a port in use")
    }

    fn port_mut(&mut self, index: usize) -> &mut P {
        self.ports[index].as_mut().expect("a port in use")
    }

    /// The table.
    pub fn fdb(&self) -> &Arc<MacTable<S>> {
        &self.fdb
    }

    /// Receives one batch from every port in turn and forwards it; returns
    /// how many frames were received.
    pub fn poll(&mut self) -> usize {
        let mut received = 0;
        let mut batches = 0;
        let now = Instant::now();
        if now >= self.next_link_check {
            self.next_link_check = now + LINK_CHECK_INTERVAL;
            self.check_links();
        }
        let readable = self.readable.take();
        let mut drained_by_syscalls = true;
        for ingress in 0..self.ports.len() {
            match self.faults[ingress].health {
                Health::Up | Health::Retrying => {
                    let unreadable = readable
                        .as_ref()
                        .is_some_and(|r| r.get(ingress) == Some(&false));
                    if unreadable && !self.ports[ingress].as_ref().is_some_and(Port::pending) {
                        continue;
                    }
                }
                Health::Gone | Health::Vacant => continue,
                Health::Backoff(until) => {
                    if now < until {
                        continue;
                    }
                    if !self.retry(ingress) {
                        continue;
                    }
                }
            }
            self.batch.clear();
            let port = self.ports[ingress].as_mut().expect("a port in use");
            drained_by_syscalls &= port.empty_read_is_syscall();
            match port.recv_batch(&mut self.batch) {
                Ok(report) => {
                    let stats = &mut self.stats[ingress];
                    stats.rx_oversize += report.oversize as u64;
                    stats.rx_errors += report.malformed as u64;
                    if report.received > 0 {
                        self.recovered(ingress);
                    }
                }
                Err(error) => self.fault(ingress, error, Direction::Rx),
            }
            drained_by_syscalls &= !self.batch.is_full();
            if !self.batch.is_empty() {
                received += self.batch.len();
                batches += 1;
                self.forward(ingress);
            }
        }
        self.drained_by_syscalls = drained_by_syscalls;
        self.totals.add_batches(batches);
        if self.config.lockstat && batches > 0 {
            let locks = locks::lockstat::take();
            self.totals
                .add_locks(locks.acquisitions, locks.contended, locks.wait_ns);
        }
        for (counters, stats) in self.counters.iter().zip(&mut self.stats) {
            if *stats != PortStats::default() {
                counters.add(stats);
                *stats = PortStats::default();
            }
        }
        received
    }

    /// Asks the ports passing frames whether their link went down with
    /// nothing failing (a tap whose device was set down, see
    /// [`Port::link_lost`]). Such a port is faulted as a failed receive
    /// faults it, once per event: counted, its learned stations flushed
    /// (as the Linux bridge flushes a port whose device goes down), one
    /// line logged, and left alone until its link is back, which costs a
    /// look per back-off and nothing else.
    fn check_links(&mut self) {
        for index in 0..self.ports.len() {
            let health = self.faults[index].health;
            if !matches!(health, Health::Up | Health::Retrying) {
                continue;
            }
            let Some(port) = self.ports[index].as_ref() else {
                continue;
            };
            if !port.link_lost() {
                continue;
            }
            let name = port.name().to_owned();
            self.faults[index].back_off();
            self.counters[index].set_state(PortState::Faulted);
            // Retrying: the same event, and no frame came in since it
            // began, so there is nothing learned to flush.
            if health == Health::Retrying {
                continue;
            }
            self.stats[index].rx_errors += 1;
            let flushed = self.fdb.flush_port(PortId(index as u16));
            log::warn!(
                "{name}: link down; flushed {flushed} learned stations; \
                 retrying until it passes frames again"
            );
        }
    }

    /// A port's back-off ended: clears an error left from the fault (so
    /// that the first send does not fail on a stale one) and looks at the
    /// link. Returns whether the port may be used again.
    fn retry(&mut self, index: usize) -> bool {
        if let Some(error) = self.port_mut(index).take_error() {
            let error = PortError::Pending {
                port: self.port(index).name().to_owned(),
                source: error,
            };
            self.faults[index].health = Health::Retrying;
            self.fault(index, error, Direction::Rx);
            return false;
        }
        if !self.port(index).link_ready() {
            self.faults[index].back_off();
            return false;
        }
        self.faults[index].health = Health::Retrying;
        true
    }

    /// A port passed frames: a fault it had is over.
    fn recovered(&mut self, index: usize) {
        let fault = &mut self.faults[index];
        if fault.health == Health::Retrying {
            fault.health = Health::Up;
            fault.backoff = FIRST_BACKOFF;
            self.counters[index].set_state(PortState::Forwarding);
            log::info!("{}: passing frames again", self.port(index).name());
        }
    }

    /// Handles an error of port `index`: counts it once per fault event,
    /// logs it at a bounded rate, flushes the stations learned there (as
    /// the Linux bridge does when a port goes down), and leaves the port
    /// alone for a while, or for good when its device is gone.
    fn fault(&mut self, index: usize, error: PortError, direction: Direction) {
        let kind = FaultKind::of(error.source_error());
        let fault = &mut self.faults[index];
        let first = fault.health == Health::Up;
        if matches!(fault.health, Health::Gone | Health::Vacant) {
            return;
        }
        let stats = &mut self.stats[index];
        let counter = match direction {
            Direction::Rx => &mut stats.rx_errors,
            Direction::Tx => &mut stats.tx_errors,
        };
        if kind == FaultKind::Gone {
            *counter += 1;
            fault.health = Health::Gone;
            self.counters[index].set_state(PortState::Gone);
            log::warn!("{error}: the device is gone; the port is out of the bridge");
        } else {
            if first {
                *counter += 1;
                fault.log(&error, "; retrying until it passes frames again");
            } else {
                log::debug!("{error} (still faulted)");
            }
            fault.back_off();
            self.counters[index].set_state(PortState::Faulted);
        }
        if first || kind == FaultKind::Gone {
            self.fdb.flush_port(PortId(index as u16));
        }
    }

    /// Forwards until `stopper` says stop, sleeping in `poll(2)` on the
    /// ports' descriptors when none has frames.
    pub fn run(&mut self, stopper: &Stopper) {
        let mut fds = Vec::with_capacity(self.ports.len() + 1);
        let mut idle_rounds = 0u32;
        while !stopper.is_stopped() {
            self.apply_changes();
            let round = Instant::now();
            if self.poll() > 0 {
                let busy = round.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
                self.totals.add_busy(busy);
                idle_rounds = 0;
                // Taps drained: poll(2) is one call, another round would be
                // one empty read per port.
                if self.drained_by_syscalls && !self.config.busy_poll {
                    self.wait(stopper, &mut fds, true);
                }
                continue;
            }
            // Frames set aside inside a port show on no descriptor (a port
            // out of forwarding is not read, so it does not count).
            let pending = self.ports.iter().zip(&self.faults).any(|(port, fault)| {
                matches!(fault.health, Health::Up | Health::Retrying)
                    && port.as_ref().is_some_and(Port::pending)
            });
            if pending {
                continue;
            }
            if self.config.busy_poll {
                idle_rounds = idle_rounds.wrapping_add(1);
                if idle_rounds % BUSY_POLL_ERROR_CHECK == 0 {
                    self.wait(stopper, &mut fds, false);
                }
                continue;
            }
            self.wait(stopper, &mut fds, true);
        }
    }

    /// Sleeps in `poll(2)` until a port is readable, reports an error, or a
    /// back-off ends (`sleep` false: only looks), then takes the errors.
    fn wait(&mut self, stopper: &Stopper, fds: &mut Vec<libc::pollfd>, sleep: bool) {
        fds.clear();
        self.polled.clear();
        fds.push(libc::pollfd {
            fd: stopper.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.push(libc::pollfd {
            fd: self.control.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let now = Instant::now();
        let mut timeout = if sleep { MAX_SLEEP_MS } else { 0 };
        let mut always_ready = false;
        for (index, (port, fault)) in self.ports.iter().zip(&self.faults).enumerate() {
            let Some(port) = port else { continue };
            match fault.health {
                Health::Gone | Health::Vacant => continue,
                Health::Backoff(until) => {
                    let wait = until.saturating_duration_since(now).as_millis() as i32 + 1;
                    timeout = timeout.min(wait);
                    continue;
                }
                Health::Up | Health::Retrying => {}
            }
            match port.raw_fd() {
                Some(fd) => {
                    fds.push(libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    self.polled.push(index);
                }
                None => always_ready = true,
            }
        }
        if always_ready && sleep {
            std::thread::yield_now();
            return;
        }
        if let Err(error) = wake::poll(fds, timeout) {
            log::warn!("poll failed: {error}");
            std::thread::sleep(Duration::from_millis(10));
            return;
        }
        if fds[1].revents & libc::POLLIN != 0 {
            wake::eventfd_drain(&self.control.wake);
        }
        if sleep {
            let mut readable = vec![false; self.ports.len()];
            for (slot, &index) in self.polled.iter().enumerate() {
                readable[index] = fds[slot + 2].revents & libc::POLLIN != 0;
            }
            self.readable = Some(readable);
        }
        // POLLERR stays set until the error is read: read it here, or the
        // next poll returns at once, and the next, and the core spins.
        for slot in 0..self.polled.len() {
            let (index, revents) = (self.polled[slot], fds[slot + 2].revents);
            if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) == 0 {
                continue;
            }
            let taken = self.port_mut(index).take_error();
            // Ports sharing a descriptor (VXLAN ports of one address) share
            // its error too: the first took it.
            let shared = (0..slot).any(|earlier| fds[earlier + 2].fd == fds[slot + 2].fd);
            if taken.is_none() && shared && revents & (libc::POLLHUP | libc::POLLNVAL) == 0 {
                continue;
            }
            let source =
                taken.unwrap_or_else(|| io::Error::other(format!("poll reported {revents:#x}")));
            let error = PortError::Pending {
                port: self.port(index).name().to_owned(),
                source,
            };
            self.fault(index, error, Direction::Rx);
        }
    }

    fn forward(&mut self, ingress: usize) {
        // The clock is read once per batch; entries are refreshed only when
        // this second differs from the one they hold.
        let now = self.fdb.clock().now();
        let port = PortId(ingress as u16);
        // The one load a batch pays for capture while nobody captures.
        self.capturing = self.capture.is_active();
        if self.capturing {
            let frames = self.batch.iter();
            self.capture.offer(
                self.id,
                port,
                capture::Direction::In,
                P::METADATA_LEN,
                frames,
            );
        }
        let Worker {
            fdb,
            batch,
            decisions,
            to_learn,
            vlans,
            admitted,
            ..
        } = self;
        decisions.clear();
        admitted.clear();
        if self.config.mode == Mode::Relay {
            let other = Decision::Unicast(PortId(1 - port.0));
            decisions.extend(std::iter::repeat_n(other, batch.len()));
            self.dispatch(ingress);
            return;
        }
        let filtering = self.config.vlan_filtering;
        let port_vlans = &vlans[ingress];
        match self.config.section {
            SectionMode::PerBatch => fdb.read(|section| {
                for frame in batch.iter() {
                    let frame = &frame[P::METADATA_LEN.min(frame.len())..];
                    let decision = if filtering {
                        admit_and_decide::<S>(
                            section, port, port_vlans, frame, now, to_learn, admitted,
                        )
                    } else {
                        decide_and_refresh::<S>(section, port, frame, None, now, to_learn)
                    };
                    decisions.push(decision);
                }
            }),
            SectionMode::PerFrame => {
                for frame in batch.iter() {
                    let frame = &frame[P::METADATA_LEN.min(frame.len())..];
                    let decision = fdb.read(|section| {
                        if filtering {
                            admit_and_decide::<S>(
                                section, port, port_vlans, frame, now, to_learn, admitted,
                            )
                        } else {
                            decide_and_refresh::<S>(section, port, frame, None, now, to_learn)
                        }
                    });
                    decisions.push(decision);
                }
            }
        }
        self.dispatch(ingress);
        self.learn(ingress, now);
    }

    /// Learns the batch's new and moved sources in one write section, and
    /// watches the rate of station moves.
    fn learn(&mut self, ingress: usize, now: Seconds) {
        if self.to_learn.is_empty() {
            return;
        }
        // A port's own address as a source: never learned (br_fdb_update
        // ignores it too), counted, and reported at a bounded rate.
        let before = self.to_learn.len();
        self.to_learn
            .retain(|(_, _, state)| *state != SourceState::Local);
        let own = before - self.to_learn.len();
        if own > 0 {
            self.fdb.refuse_own(own);
            self.warn_own_source(ingress);
        }
        // A full table refuses new stations without a write section;
        // moves still go through, since they take no new place.
        if self.fdb.is_full() {
            let before = self.to_learn.len();
            self.to_learn
                .retain(|(_, _, state)| *state == SourceState::Moved);
            self.fdb.refuse(before - self.to_learn.len());
        }
        let mut moves = 0u32;
        let mut last_move = None;
        let sources = self.to_learn.iter().map(|&(key, port, _)| (key, port));
        self.learn_buffer.clear();
        self.learn_buffer.extend(sources);
        self.fdb
            .learn_batch_with(&self.learn_buffer, now, |key, from, to| {
                moves += 1;
                last_move = Some((key, from, to));
            });
        self.to_learn.clear();
        if moves == 0 {
            return;
        }
        self.stats[ingress].moves += u64::from(moves);
        let flaps = &mut self.flaps[ingress];
        let now = Instant::now();
        if flaps
            .window
            .is_none_or(|start| now >= start + Duration::from_secs(1))
        {
            flaps.window = Some(now);
            flaps.moves = 0;
        }
        flaps.moves += moves;
        let warned_lately = flaps.warned_at.is_some_and(|at| now < at + LOG_INTERVAL);
        if flaps.moves > FLAP_MOVES_PER_SEC && !warned_lately {
            if let Some((key, from, to)) = last_move {
                let name = |port: PortId| {
                    self.ports
                        .get(port.index())
                        .and_then(Option::as_ref)
                        .map_or("?".to_owned(), |p| p.name().to_owned())
                };
                log::warn!(
                    "station {} (vlan {}) moved from {} to {}; {} station moves onto {} \
                     within a second: a forwarding loop, or two stations using one address?",
                    key.mac,
                    key.vlan,
                    name(from),
                    name(to),
                    flaps.moves,
                    name(to)
                );
            }
            flaps.warned_at = Some(now);
        }
    }

    /// Warns, at most once per [`LOG_INTERVAL`], of frames that came in
    /// with a port's own address as their source.
    fn warn_own_source(&mut self, ingress: usize) {
        let now = Instant::now();
        if self
            .own_source_warned
            .is_some_and(|at| now < at + LOG_INTERVAL)
        {
            return;
        }
        self.own_source_warned = Some(now);
        log::warn!(
            "{}: received frames with a port's own address as their source; not learned \
             (a forwarding loop, or a station using the host's address?)",
            self.port(ingress).name()
        );
    }

    /// Sends the decided frames, one batch per output port.
    fn dispatch(&mut self, ingress: usize) {
        let n = self.ports.len();
        if self.config.vlan_filtering {
            self.dispatch_in_vlans(ingress);
        } else {
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
        }
        for egress in 0..n {
            let output = &mut self.outputs[egress];
            if output.is_empty() {
                continue;
            }
            // A faulted port is out of forwarding until it is retried, as a
            // disabled port of the Linux bridge is: nothing is sent there.
            if !self.faults[egress].sendable() {
                output.clear();
                continue;
            }
            let (batch, rewritten, rewrites) = (&self.batch, &self.rewritten, &self.rewrites);
            let frames = output
                .iter()
                .map(|&index| match index.checked_sub(batch.len()) {
                    None => batch.frame(index),
                    Some(r) => {
                        let (start, len) = rewrites[r];
                        &rewritten[start..start + len]
                    }
                });
            let offered = output.len() as u64;
            let report = self.ports[egress]
                .as_mut()
                .expect("sendable ports are in use")
                .send_batch(frames.clone());
            if self.capturing && report.sent > 0 {
                // The frames offered up to the last one the port took (a
                // refused or dropped one among them shows too).
                self.capture.offer(
                    self.id,
                    PortId(egress as u16),
                    capture::Direction::Out,
                    P::METADATA_LEN,
                    frames.take(report.sent + report.refused),
                );
            }
            output.clear();
            let tx = &mut self.stats[egress];
            let sent = report.sent as u64;
            let refused = report.refused as u64;
            tx.tx_frames += sent;
            tx.tx_bytes += report.sent_bytes;
            tx.tx_errors += refused;
            tx.tx_dropped += offered - sent - refused;
            if report.sent > 0 {
                self.recovered(egress);
            }
            if let Some(source) = report.fault {
                let error = PortError::Send {
                    port: self.port(egress).name().to_owned(),
                    source,
                };
                self.fault(egress, error, Direction::Tx);
            }
        }
    }
}

impl<S: Strategy, P: Port> Worker<S, P> {
    /// [`dispatch`](Self::dispatch)'s first half with VLAN filtering: a
    /// frame goes only to member ports of its VLAN, each getting the form
    /// (tagged or not) that port sends.
    fn dispatch_in_vlans(&mut self, ingress: usize) {
        self.rewritten.clear();
        self.rewrites.clear();
        self.forms.clear();
        self.forms.resize(self.batch.len(), [None; 2]);
        for index in 0..self.decisions.len() {
            let rx = &mut self.stats[ingress];
            rx.rx_frames += 1;
            rx.rx_bytes += payload_len::<P>(self.batch.frame(index));
            let admitted = self.admitted[index];
            match (self.decisions[index], admitted) {
                (Decision::Drop(reason), _) => rx.drops[reason.index()] += 1,
                (_, None) => unreachable!("a frame not admitted is dropped"),
                (Decision::Unicast(port), Some(admitted)) => {
                    let egress = port.index();
                    if egress >= self.outputs.len() {
                        // A static entry naming a port this bridge lacks.
                        rx.tx_errors += 1;
                        continue;
                    }
                    match vlan::egress(&self.vlans[egress], &admitted) {
                        Some(form) => {
                            let frame = self.frame_for(index, form);
                            self.outputs[egress].push(frame);
                        }
                        None => rx.drops[DropReason::VlanEgress.index()] += 1,
                    }
                }
                (Decision::Flood, Some(admitted)) => {
                    for egress in 0..self.outputs.len() {
                        if egress == ingress || self.ports[egress].is_none() {
                            continue;
                        }
                        if let Some(form) = vlan::egress(&self.vlans[egress], &admitted) {
                            let frame = self.frame_for(index, form);
                            self.outputs[egress].push(frame);
                        }
                    }
                }
            }
        }
    }

    /// The output index of frame `index` in `form`: the frame itself, or
    /// its rewrite (made once per form and batch).
    fn frame_for(&mut self, index: usize, form: Egress) -> usize {
        let slot = match form {
            Egress::AsIs => return index,
            Egress::Untagged => 0,
            Egress::Tagged(_) => 1,
        };
        if let Some(r) = self.forms[index][slot] {
            return self.batch.len() + r;
        }
        let buffer = self.batch.frame(index);
        let meta = P::METADATA_LEN.min(buffer.len());
        let (header, frame) = buffer.split_at(meta);
        let start = self.rewritten.len();
        self.rewritten.extend_from_slice(header);
        let tagged_in = vlan::outer_tag(frame).is_some();
        let shift: i16 = match form {
            Egress::AsIs => unreachable!("returned above"),
            Egress::Untagged => {
                self.rewritten.extend_from_slice(&frame[..12]);
                self.rewritten.extend_from_slice(&frame[16..]);
                -(vlan::TAG_LEN as i16)
            }
            Egress::Tagged(tag) => {
                self.rewritten.extend_from_slice(&frame[..12]);
                self.rewritten.extend_from_slice(&tag.tpid.to_be_bytes());
                self.rewritten.extend_from_slice(&tag.tci.to_be_bytes());
                let rest = if tagged_in { 16 } else { 12 };
                self.rewritten.extend_from_slice(&frame[rest..]);
                if tagged_in {
                    0
                } else {
                    vlan::TAG_LEN as i16
                }
            }
        };
        // Offloaded segments and partial checksums count offsets from the
        // frame's first byte: they move with the tag.
        if meta == VNET_HDR_LEN && shift != 0 {
            VnetHeader::new_unchecked(&mut self.rewritten[start..start + meta])
                .shift_offsets(shift as u16);
        }
        let r = self.rewrites.len();
        self.rewrites.push((start, self.rewritten.len() - start));
        self.forms[index][slot] = Some(r);
        self.batch.len() + r
    }
}

/// Admits a frame on its port's VLANs (see [`vlan::admit`]) and decides it
/// within its VLAN.
#[inline]
fn admit_and_decide<S: Strategy>(
    section: &FdbReader<'_, FdbSection<'_, S>>,
    ingress: PortId,
    vlans: &PortVlans,
    frame: &[u8],
    now: Seconds,
    to_learn: &mut Vec<(FdbKey, PortId, SourceState)>,
    admitted: &mut Vec<Option<Admitted>>,
) -> Decision {
    match vlan::admit(vlans, frame) {
        Ok(frame_vlan) => {
            admitted.push(Some(frame_vlan));
            decide_and_refresh::<S>(section, ingress, frame, Some(frame_vlan.vid), now, to_learn)
        }
        Err(reason) => {
            admitted.push(None);
            Decision::Drop(reason)
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
    vlan: Option<crate::wire::VlanId>,
    now: Seconds,
    to_learn: &mut Vec<(FdbKey, PortId, SourceState)>,
) -> Decision {
    if let Ok((_, source)) = classify_in(frame, vlan) {
        let state = section.source_state(&source, ingress, now);
        // A station sends many frames of a batch: learn it once.
        if state != SourceState::Known && !to_learn.iter().any(|(key, ..)| *key == source) {
            to_learn.push((source, ingress, state));
        }
    }
    decide_in(ingress, frame, vlan, section)
}

/// What a worker keeps across a change of table: its counters, totals,
/// capture taps and index. The default is a fresh set.
#[derive(Debug, Default)]
pub struct WorkerParts {
    counters: Option<Arc<[PortCounters]>>,
    totals: Option<Arc<WorkerCounters>>,
    capture: Option<Arc<CaptureHub>>,
    id: usize,
    vlans: Option<Vec<PortVlans>>,
}

impl WorkerParts {
    /// A fresh set for worker `id`.
    pub fn new(id: usize) -> WorkerParts {
        WorkerParts {
            id,
            ..WorkerParts::default()
        }
    }

    /// The same, with the ports' VLANs (by port id).
    pub fn with_vlans(mut self, vlans: Vec<PortVlans>) -> WorkerParts {
        self.vlans = Some(vlans);
        self
    }
}

/// A port change for one worker, with the channel it answers on once done.
enum Change<P> {
    Add {
        id: PortId,
        queue: P,
        vlans: PortVlans,
        done: mpsc::Sender<()>,
    },
    Remove {
        id: PortId,
        done: mpsc::Sender<()>,
    },
}

/// Adds and removes one worker's queues of ports while it runs.
///
/// The worker reads its port set for every frame it floods, and the set
/// changes rarely: the worker owns its copy, and changes reach it as
/// messages that it applies between batches (its quiescent point, as a
/// pserialize read section's end is in NetBSD's bridge). The answer to a
/// change comes once the worker applied it, so a caller that waits for the
/// answers of every worker knows that none can still use a removed port's
/// queue (which the worker closed) or miss an added one: what NetBSD gets
/// from `psref_target_destroy` and a publish.
pub struct PortControl<P> {
    sender: mpsc::Sender<Change<P>>,
    wake: Arc<OwnedFd>,
}

impl<P> Clone for PortControl<P> {
    fn clone(&self) -> Self {
        PortControl {
            sender: self.sender.clone(),
            wake: Arc::clone(&self.wake),
        }
    }
}

impl<P> PortControl<P> {
    fn send(&self, change: Change<P>) -> io::Result<()> {
        self.sender
            .send(change)
            .map_err(|_| io::Error::other("the worker has stopped"))?;
        wake::eventfd_signal(&self.wake)
    }

    /// Gives the worker `queue` as port `id`; the receiver answers once the
    /// worker uses it.
    pub fn add(&self, id: PortId, queue: P) -> io::Result<mpsc::Receiver<()>> {
        self.add_with_vlans(id, queue, PortVlans::default())
    }

    /// [`add`](Self::add), with the port's VLANs (used with VLAN
    /// filtering).
    pub fn add_with_vlans(
        &self,
        id: PortId,
        queue: P,
        vlans: PortVlans,
    ) -> io::Result<mpsc::Receiver<()>> {
        let (done, answer) = mpsc::channel();
        self.send(Change::Add {
            id,
            queue,
            vlans,
            done,
        })?;
        Ok(answer)
    }

    /// Takes port `id` from the worker, which closes its queue; the
    /// receiver answers once it has.
    pub fn remove(&self, id: PortId) -> io::Result<mpsc::Receiver<()>> {
        let (done, answer) = mpsc::channel();
        self.send(Change::Remove { id, done })?;
        Ok(answer)
    }
}
