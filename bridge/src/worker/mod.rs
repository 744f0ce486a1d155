//! The forwarding loop, generic over the lock strategy and the port type so
//! that each combination is compiled into its own direct-call hot path.
//!
//! Per batch received on one port: one read section of the MAC table in
//! which every frame is decided and every known source refreshed; then one
//! send per output port; then one write section that learns the batch's new
//! and moved sources. Learning therefore takes effect from the next batch.
//!
//! Where each frame goes is the forwarding pipeline's verdict
//! (`crate::forward`); the worker does the I/O and keeps the state around
//! it. The loop is here; a port's health and back-off in `health.rs`,
//! ports added and removed while running in `changes.rs`, the frames
//! rewritten for egress in `egress.rs`, the events for the control plane
//! in `policy.rs` and `snooping.rs`, and each port's per-worker state in
//! one `PortSlot` (`slot.rs`).

mod changes;
mod config;
mod egress;
mod health;
mod memo;
mod policy;
mod slot;
mod snooping;
mod stopper;

use std::io;
use std::os::fd::AsRawFd;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use locks::{ReadSection, Strategy};

pub use crate::forward::MoveLimit;
pub use changes::{PortControl, WorkerParts, WorkerWake};
pub use config::{Mode, SectionMode, WorkerConfig, DEFAULT_BATCH};
pub use policy::{EventSink, Gate, PortEvent, PortFlags, PortPolicy, PortSetup, BPDUS_PER_SECOND};
pub use snooping::MCAST_EVENTS_PER_SECOND;
pub use stopper::Stopper;

use crate::capture::{self, CaptureHub};
use crate::counters::{PortCounters, PortStats, WorkerCounters};
use crate::fdb::{FdbEntry, FdbKey, MacTable, Seconds, Source, SourceState};
use crate::forward::{self, Decision, DropReason, Egresses, IngressPort, Movers, Verdict};
use crate::mcast::GroupTable;
use crate::port::{wake, Outgoing, PortError, Queue, RxBatch};
use crate::port_id::PortId;
use crate::vlan::PortVlans;
use crate::wire::VlanId;
use changes::Change;
use egress::{Outputs, Rewrites};
use health::{Direction, Health, LOG_INTERVAL};
use memo::Memo;
use slot::PortSlot;

/// The longest a worker sleeps without looking at its stop flag.
const MAX_SLEEP_MS: i32 = 500;
/// The longest a worker sleeps in `poll(2)`: its heartbeat
/// ([`WorkerCounters::beat`]) moves at least this often while it runs.
pub const MAX_SLEEP: Duration = Duration::from_millis(MAX_SLEEP_MS as u64);
/// Station moves onto one port within one second beyond which the worker
/// warns of a flapping station (a loop, or two stations claiming one
/// address).
const FLAP_MOVES_PER_SEC: u32 = 20;
/// How long a worker that found no frames goes on looking before it
/// sleeps, after a round that brought some. A busy driver's ring empties
/// for moments between its bursts; a worker that slept at each would ask
/// the driver to kick (a vhost-user driver's system call per kick) and pay
/// its own sleep and wake-up, which with few frames in flight cut what
/// got through by half or more (docs/benchmarks.md). The cost: up to
/// this much spinning after each round with frames, which a bridge with a
/// frame a millisecond pays as a fifth of a core.
const LINGER: Duration = Duration::from_micros(200);
/// A busy-polling worker looks for port errors once per this many idle
/// rounds (the sleeping one sees them in `poll(2)`).
const BUSY_POLL_ERROR_CHECK: u32 = 1024;
/// How often a worker asks its ports whether their link went down with
/// nothing failing (see [`Queue::link_lost`]): the fallback for a tap whose
/// link the monitor cannot hear (rtnetlink tells it of the others as they
/// happen, and it tells the workers, [`PortControl::link_changed`]).
const LINK_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The most ports a bridge has at once; port ids run from 0 below it.
use crate::port_id::MAX_PORTS;

/// A forwarding thread's state: one queue of every port, and the table.
pub struct Worker<S: Strategy, P: Queue> {
    fdb: Arc<MacTable<S>>,
    /// Each port as this worker holds it, by port id (see [`PortSlot`]).
    slots: Vec<PortSlot<P>>,
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
    /// Per frame of the batch, its verdict.
    verdicts: Vec<Verdict>,
    /// Whether a verdict of the batch names a VTEP, so that a batch
    /// without VXLAN stations pays nothing for them.
    any_vtep: bool,
    /// The batch's sources to learn, once each, with what the fast path saw.
    to_learn: Vec<(Source, SourceState)>,
    learn_buffer: Vec<Source>,
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
    /// Per port, the batch's frames to send out of it (output indices:
    /// a frame of the batch, or past them a rewrite).
    outputs: Vec<Vec<usize>>,
    /// Frames rewritten for egress (a tag removed, added or changed).
    rewrites: Rewrites,
    /// The batch's IGMP and MLD messages for the control plane.
    handed: Vec<(usize, VlanId)>,
    /// Where BPDUs and tripped guards are reported.
    events: Option<EventSink>,
    /// Stations moving lately, for the move limit.
    movers: Movers,
    /// Whether a port has `bpdu_filter=on` (BPDUs flooded skip it).
    bpdu_filters: bool,
    /// Whether a port's flags differ from the default (floods and unicast
    /// then look at them).
    flag_rules: bool,
    /// The multicast group table, with multicast snooping.
    groups: Option<Arc<GroupTable<S>>>,
}

impl<S: Strategy, P: Queue> Worker<S, P> {
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
    ///
    /// Panics where an eventfd cannot be made (no free descriptor); a
    /// caller that must not fail there makes a [`WorkerWake`] first and
    /// uses [`resume_with`](Self::resume_with).
    pub fn resume(
        fdb: Arc<MacTable<S>>,
        ports: Vec<Option<P>>,
        config: WorkerConfig,
        parts: WorkerParts,
    ) -> Self {
        let wake = WorkerWake::new().expect("an eventfd for port changes");
        Self::resume_with(fdb, ports, config, parts, wake)
    }

    /// [`resume`](Self::resume) with the eventfd made beforehand, so that
    /// nothing here asks the system for a descriptor: a bridge switching
    /// strategies makes every new worker's wake-up first, while the old
    /// workers still forward, and fails with them untouched if it cannot.
    pub fn resume_with(
        fdb: Arc<MacTable<S>>,
        ports: Vec<Option<P>>,
        config: WorkerConfig,
        parts: WorkerParts,
        wake: WorkerWake,
    ) -> Self {
        assert!(ports.len() <= MAX_PORTS, "too many ports");
        assert!(
            config.mode == Mode::Bridge || ports.len() == 2,
            "a relay has exactly two ports"
        );
        let n = ports.len();
        let mut setups = parts.setups.unwrap_or_default();
        setups.resize(n, PortSetup::default());
        let slots: Vec<PortSlot<P>> = ports
            .into_iter()
            .zip(setups)
            .map(|(queue, setup)| PortSlot::new(queue, setup))
            .collect();
        let bpdu_filters = slots.iter().any(|slot| slot.policy.bpdu_filter);
        let flag_rules = slots
            .iter()
            .any(|slot| slot.policy.flags != PortFlags::default());
        let (sender, changes) = mpsc::channel();
        let wake = Arc::new(wake.0);
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
            batch: RxBatch::new(config.batch_size, config.frame_capacity)
                .with_metadata(P::METADATA_LEN),
            verdicts: Vec::with_capacity(config.batch_size),
            any_vtep: false,
            to_learn: Vec::with_capacity(config.batch_size),
            learn_buffer: Vec::with_capacity(config.batch_size),
            own_source_warned: None,
            next_link_check: Instant::now() + LINK_CHECK_INTERVAL,
            polled: Vec::with_capacity(n),
            readable: None,
            drained_by_syscalls: false,
            outputs: Vec::new(),
            rewrites: Rewrites::default(),
            handed: Vec::new(),
            events: parts.events,
            movers: Movers::default(),
            bpdu_filters,
            flag_rules,
            groups: None,
            slots,
        }
    }

    /// Snoops multicast with `groups` (IGMP and MLD messages go to the
    /// events sink; floods of IP multicast narrow to the table's ports once
    /// a querier is present), or not (`None`).
    pub fn set_groups(&mut self, groups: Option<Arc<GroupTable<S>>>) {
        self.groups = groups;
    }

    /// Stops being a worker: its queues (by port id) and its counters, for
    /// [`resume`](Self::resume). Port changes sent but not applied are
    /// applied first.
    pub fn into_parts(mut self) -> (Vec<Option<P>>, WorkerParts) {
        self.apply_changes();
        let (ports, setups) = self
            .slots
            .into_iter()
            .map(|slot| {
                let setup = slot.setup();
                (slot.queue, setup)
            })
            .unzip();
        let parts = WorkerParts {
            counters: Some(self.counters),
            totals: Some(self.totals),
            capture: Some(self.capture),
            id: self.id,
            setups: Some(setups),
            events: self.events,
        };
        (ports, parts)
    }

    /// Sets port `port`'s VLANs (used with VLAN filtering), before the
    /// worker runs; a running worker takes them with
    /// [`PortControl::add_with_vlans`].
    pub fn set_vlans(&mut self, port: PortId, vlans: PortVlans) {
        let index = port.index();
        if index >= self.slots.len() {
            self.slots
                .resize_with(index + 1, || PortSlot::new(None, PortSetup::default()));
        }
        self.slots[index].vlans = vlans;
    }

    /// Sets port `port`'s whole setup, before the worker runs; a running
    /// worker takes it with [`PortControl::add_with`].
    pub fn set_setup(&mut self, port: PortId, setup: PortSetup) {
        self.set_vlans(port, setup.vlans.clone());
        self.slots[port.index()].set_up(setup);
        self.policies_changed();
    }

    /// Looks again at whether any port filters BPDUs or has flags of its
    /// own.
    pub(super) fn policies_changed(&mut self) {
        let live = || self.slots.iter().filter(|slot| slot.queue.is_some());
        self.bpdu_filters = live().any(|slot| slot.policy.bpdu_filter);
        self.flag_rules = live().any(|slot| slot.policy.flags != PortFlags::default());
    }

    /// Sends one of spanning tree's frames out of port `id`, with the
    /// port's metadata (zero: no offload) before it.
    fn send_own(&mut self, id: PortId, frame: &[u8]) {
        let Some(slot) = self.slots.get_mut(id.index()) else {
            return;
        };
        // Tried even while the port backs off after a fault: a neighbour
        // that stops hearing this bridge's BPDUs ages its information out
        // and may unblock a loop, while the other workers still forward
        // on the port.
        if slot.queue.is_none() || slot.disabled {
            return;
        }
        let meta = [0u8; 16];
        debug_assert!(P::METADATA_LEN <= meta.len());
        let own = Outgoing {
            meta: &meta[..P::METADATA_LEN.min(meta.len())],
            pieces: [frame, &[], &[]],
            ..Outgoing::default()
        };
        let queue = slot.queue.as_mut().expect("sendable ports are in use");
        let report = queue.send_batch(std::iter::once(own));
        slot.stats.tx_frames += report.sent as u64;
        slot.stats.tx_bytes += report.sent_bytes;
        slot.stats.tx_errors += report.refused as u64;
        slot.stats.tx_dropped += (1 - report.sent.min(1) - report.refused.min(1)) as u64;
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

    /// This worker's queue of port `port`, if the port is in use.
    pub fn queue(&self, port: PortId) -> Option<&P> {
        self.slots.get(port.index())?.queue.as_ref()
    }

    fn port(&self, index: usize) -> &P {
        self.slots[index].queue.as_ref().expect("a port in use")
    }

    fn port_mut(&mut self, index: usize) -> &mut P {
        self.slots[index].queue.as_mut().expect("a port in use")
    }

    /// The table.
    pub fn fdb(&self) -> &Arc<MacTable<S>> {
        &self.fdb
    }

    /// Receives one batch from every port in turn and forwards it; returns
    /// how many frames were received.
    pub fn poll(&mut self) -> usize {
        self.poll_at(Instant::now())
    }

    /// [`poll`](Self::poll) in a round that began at `now`: the loop reads
    /// the clock once a round, for its busy time and the ports' retries.
    fn poll_at(&mut self, now: Instant) -> usize {
        let mut received = 0;
        let mut batches = 0;
        if now >= self.next_link_check {
            self.next_link_check = now + LINK_CHECK_INTERVAL;
            self.check_links();
        }
        let readable = self.readable.take();
        let mut drained_by_syscalls = true;
        for ingress in 0..self.slots.len() {
            match self.slots[ingress].fault.health {
                Health::Up | Health::Retrying => {
                    let unreadable = readable
                        .as_ref()
                        .is_some_and(|r| r.get(ingress) == Some(&false));
                    let queue = self.slots[ingress].queue.as_ref();
                    if unreadable && !queue.is_some_and(Queue::pending) {
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
            let slot = &mut self.slots[ingress];
            let port = slot.queue.as_mut().expect("a port in use");
            drained_by_syscalls &= port.empty_read_is_syscall();
            match port.recv_batch(&mut self.batch) {
                Ok(report) => {
                    let stats = &mut slot.stats;
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
                // The frames the port lent go back to it now that they
                // have been copied to where they leave.
                if let Some(port) = self.slots[ingress].queue.as_mut() {
                    port.release();
                }
                self.batch.clear();
            }
        }
        self.drained_by_syscalls = drained_by_syscalls;
        self.totals.add_batches(batches);
        if self.config.lockstat && batches > 0 {
            let locks = locks::lockstat::take();
            self.totals
                .add_locks(locks.acquisitions, locks.contended, locks.wait_ns);
        }
        for (counters, slot) in self.counters.iter().zip(&mut self.slots) {
            if slot.stats != PortStats::default() {
                counters.add(&slot.stats);
                slot.stats = PortStats::default();
            }
        }
        received
    }

    /// Forwards until `stopper` says stop, sleeping in `poll(2)` on the
    /// ports' descriptors when none has frames.
    pub fn run(&mut self, stopper: &Stopper) {
        let mut fds = Vec::with_capacity(self.slots.len() + 2);
        let mut idle_rounds = 0u32;
        let mut last_frames = None;
        while !stopper.is_stopped() {
            // Before anything of the round can block: a worker that stops
            // here for long is seen stuck by the owner.
            self.totals.beat();
            self.apply_changes();
            let round = Instant::now();
            let received = self.poll_at(round);
            if received > 0 {
                let busy = round.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
                self.totals.add_busy(busy);
                idle_rounds = 0;
                last_frames = Some(round);
                // Taps drained: poll(2) is one call, another round would be
                // one empty read per port.
                if self.drained_by_syscalls && !self.config.busy_poll {
                    self.wait(stopper, &mut fds, true);
                }
                continue;
            }
            // Frames set aside inside a port show on no descriptor (a port
            // out of forwarding is not read, so it does not count).
            let pending = self.slots.iter().any(|slot| {
                matches!(slot.fault.health, Health::Up | Health::Retrying)
                    && slot.queue.as_ref().is_some_and(Queue::pending)
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
            // Queues whose empty look costs no system call are looked at
            // again for a while after frames came (`LINGER`).
            let lingering = !self.drained_by_syscalls
                && last_frames.is_some_and(|at| round.duration_since(at) < LINGER);
            if lingering {
                continue;
            }
            self.wait(stopper, &mut fds, true);
        }
    }

    /// Readies each port that is up for a sleep on its descriptor
    /// ([`Queue::before_sleep`]); false at the first that has frames.
    fn ready_to_sleep(&mut self) -> bool {
        self.slots.iter_mut().all(|slot| {
            !matches!(slot.fault.health, Health::Up | Health::Retrying)
                || slot.queue.as_mut().is_none_or(Queue::before_sleep)
        })
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
        for (index, slot) in self.slots.iter().enumerate() {
            let Some(port) = &slot.queue else { continue };
            match slot.fault.health {
                Health::Gone | Health::Vacant => continue,
                Health::Backoff(until) => {
                    let wait = until.saturating_duration_since(now).as_millis() as i32 + 1;
                    timeout = timeout.min(wait);
                    if let Some(fd) = port.link_fd() {
                        fds.push(libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        self.polled.push(index);
                    }
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
        if sleep && !self.ready_to_sleep() {
            // Frames came while the ports were readied: another round.
            return;
        }
        let slept = wake::poll(fds, timeout);
        // Awake again: a sleep (at most MAX_SLEEP_MS) is no stall.
        self.totals.beat();
        if let Err(error) = slept {
            log::warn!("poll failed: {error}");
            std::thread::sleep(Duration::from_millis(10));
            return;
        }
        if fds[1].revents & libc::POLLIN != 0 {
            wake::eventfd_drain(&self.control.wake);
        }
        if sleep {
            let mut readable = vec![false; self.slots.len()];
            for (slot, &index) in self.polled.iter().enumerate() {
                readable[index] = fds[slot + 2].revents & libc::POLLIN != 0;
            }
            self.readable = Some(readable);
        }
        // POLLERR stays set until the error is read: read it here, or the
        // next poll returns at once, and the next, and the core spins.
        for slot in 0..self.polled.len() {
            let (index, revents) = (self.polled[slot], fds[slot + 2].revents);
            if let Health::Backoff(_) = self.slots[index].fault.health {
                // Its link may be back: tried in the next round.
                if revents != 0 {
                    self.slots[index].fault.health = Health::Backoff(now);
                }
                continue;
            }
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

    /// Forwards the batch received on `ingress`: the pipeline's verdicts,
    /// then the sends, then the learning; one way through for every batch.
    fn forward(&mut self, ingress: usize) {
        // The clock is read once per batch; entries are refreshed only when
        // this second differs from the one they hold.
        let now = self.fdb.clock().now();
        let port = PortId(ingress as u16);
        // The one load a batch pays for capture while nobody captures.
        self.capturing = self.capture.is_active();
        if self.capturing {
            let frames = self.batch.iter().map(Outgoing::from);
            self.capture
                .offer(self.id, port, capture::Direction::In, frames);
        }
        self.verdicts.clear();
        self.any_vtep = false;
        if self.config.mode == Mode::Relay {
            let other = Verdict::decided(Decision::Unicast(PortId(1 - port.0)));
            self.verdicts
                .extend(std::iter::repeat_n(other, self.batch.len()));
        } else {
            self.decide(ingress, now);
            self.police(ingress);
        }
        self.dispatch(ingress);
        self.learn(ingress, now);
    }

    /// The ingress and lookup stages for the batch, in one read section of
    /// the table (none where the port looks nothing up); the batch's
    /// sources refreshed or queued for learning.
    fn decide(&mut self, ingress: usize, now: Seconds) {
        let Worker {
            fdb,
            batch,
            verdicts,
            to_learn,
            slots,
            config,
            any_vtep,
            ..
        } = self;
        let slot = &slots[ingress];
        let port = IngressPort {
            port: PortId(ingress as u16),
            vlans: config.vlan_filtering.then_some(&slot.vlans),
            intercept: IngressPort::intercept_for(
                slot.policy.bpdu_filter,
                slot.policy.guard,
                config.stp,
            ),
            flags: slot.policy.flags,
            gate: slot.gate,
            disabled: slot.disabled,
        };
        let batch = &*batch;
        if !port.looks_up() {
            let verdicts_of = batch
                .eths()
                .map(|frame| forward::without_lookup(&port, frame));
            verdicts.extend(verdicts_of);
            return;
        }
        let mut out = Decided {
            verdicts,
            to_learn,
            any_vtep,
        };
        match config.section {
            SectionMode::PerBatch => fdb.read(|section| {
                if memo::one_conversation(batch) {
                    decide_all(
                        &mut Memo::<_, true>::new(section),
                        &port,
                        batch,
                        now,
                        &mut out,
                    );
                } else {
                    decide_all(
                        &mut Memo::<_, false>::new(section),
                        &port,
                        batch,
                        now,
                        &mut out,
                    );
                }
            }),
            SectionMode::PerFrame => {
                for (index, frame) in batch.eths().enumerate() {
                    fdb.read(|section| {
                        let mut section = Memo::<_, false>::new(section);
                        decide_one(&mut section, &port, batch, index, frame, now, &mut out)
                    });
                }
            }
        }
    }

    /// The batch-wide part of the ingress stage and the policy stage, with
    /// what they tell the worker to do: BPDUs handed to spanning tree, a
    /// guard tripped, IGMP and MLD messages handed over, moves counted.
    fn police(&mut self, ingress: usize) {
        if self.config.stp {
            self.hand_over_bpdus(ingress);
        }
        if self.slots[ingress].policy.guard && forward::trip_guard(&mut self.verdicts).is_some() {
            // Nothing in or out from here on, and nothing of the batch
            // learned.
            self.slots[ingress].disabled = true;
            self.to_learn.clear();
            if let Some(events) = &self.events {
                events(PortEvent::GuardTripped {
                    port: PortId(ingress as u16),
                });
            }
        }
        let batch = &self.batch;
        // A port that is not forwarding floods no link-local group either
        // (br_handle_frame_finish drops them in the learning state).
        if self.slots[ingress].gate.forwarding {
            let frames = batch.eths();
            forward::forward_groups(&mut self.verdicts, frames, self.config.group_fwd_mask);
        }
        if let Some(groups) = &self.groups {
            self.handed.clear();
            let frame_of = |index: usize| batch.eth(index);
            forward::narrow(&mut self.verdicts, frame_of, groups, &mut self.handed);
            if !self.handed.is_empty() {
                let handed = std::mem::take(&mut self.handed);
                self.hand_over(ingress, &handed);
                self.handed = handed;
            }
        }
        if let Some(bucket) = &mut self.slots[ingress].storm {
            forward::limit_storm(&mut self.verdicts, bucket, Instant::now());
        }
        if let Some(limit) = self.config.move_limit {
            self.limit_moves(&limit, ingress, Instant::now());
        }
        if self.movers.any_held() {
            let now = Instant::now();
            let frames = self.batch.eths();
            forward::hold_movers(&mut self.verdicts, frames, &self.movers, now);
            let movers = &self.movers;
            self.to_learn
                .retain(|(source, _)| !movers.is_held(&source.key, now));
        }
    }

    /// Hands the batch's BPDUs to spanning tree, within
    /// [`BPDUS_PER_SECOND`].
    fn hand_over_bpdus(&mut self, ingress: usize) {
        let Some(events) = &self.events else { return };
        let slot = &mut self.slots[ingress];
        for (index, verdict) in self.verdicts.iter().enumerate() {
            if verdict.decision != Decision::Drop(DropReason::Stp) {
                continue;
            }
            let now = Instant::now();
            let (count, since) = &mut slot.bpdus;
            if since.is_none_or(|at| now >= at + Duration::from_secs(1)) {
                *since = Some(now);
                *count = 0;
            }
            if *count >= BPDUS_PER_SECOND {
                continue;
            }
            *count += 1;
            events(PortEvent::Bpdu {
                port: PortId(ingress as u16),
                frame: self.batch.eth(index).to_vec(),
            });
        }
    }

    /// Learns the batch's new and moved sources in one write section, and
    /// watches the rate of station moves.
    fn learn(&mut self, ingress: usize, now: Seconds) {
        if !self.slots[ingress].policy.flags.learning {
            // learning off: nothing of the port is learned (br_input.c).
            self.to_learn.clear();
        }
        if self.to_learn.is_empty() {
            return;
        }
        // A port's own address as a source: never learned (br_fdb_update
        // ignores it too), counted, and reported at a bounded rate.
        let before = self.to_learn.len();
        self.to_learn
            .retain(|(_, state)| *state != SourceState::Local);
        let own = before - self.to_learn.len();
        if own > 0 {
            self.fdb.refuse_own(own);
            self.warn_own_source(ingress);
        }
        // A full table refuses new stations without a write section;
        // moves still go through, since they take no new place.
        if self.fdb.is_full() || self.fdb.port_is_full(PortId(ingress as u16)) {
            let before = self.to_learn.len();
            self.to_learn
                .retain(|(_, state)| *state == SourceState::Moved);
            let refused = before - self.to_learn.len();
            self.fdb.refuse(refused);
            self.slots[ingress].stats.refused += refused as u64;
        }
        let mut moves = 0u32;
        let mut last_move = None;
        let sources = self.to_learn.iter().map(|&(source, _)| source);
        self.learn_buffer.clear();
        self.learn_buffer.extend(sources);
        let refused = self
            .fdb
            .learn_batch_with(&self.learn_buffer, now, |key, from, to| {
                moves += 1;
                last_move = Some((key, from, to));
            });
        self.slots[ingress].stats.refused += refused as u64;
        self.to_learn.clear();
        if moves == 0 {
            return;
        }
        self.slots[ingress].stats.moves += u64::from(moves);
        let now = Instant::now();
        if self.config.move_limit.is_some() {
            // The move limit acts on moves instead (see `limit_moves`).
            return;
        }
        let flaps = &mut self.slots[ingress].flaps;
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
            flaps.warned_at = Some(now);
            let recent = flaps.moves;
            if let Some((key, from, to)) = last_move {
                let slots = &self.slots;
                let name = |port: PortId| {
                    slots
                        .get(port.index())
                        .and_then(|slot| slot.queue.as_ref())
                        .map_or("?".to_owned(), |p| p.name().to_owned())
                };
                log::warn!(
                    "station {} (vlan {}) moved from {} to {}; {} station moves onto {} \
                     within a second: a forwarding loop, or two stations using one address?",
                    key.mac,
                    key.vlan,
                    name(from),
                    name(to),
                    recent,
                    name(to)
                );
            }
        }
    }

    /// Counts the batch's moves against the move limit before its frames
    /// are sent: a station over it is held (its frames dropped, nothing of
    /// it learned) for the hold time, from the move that went over on;
    /// logged once when held and once when released.
    fn limit_moves(&mut self, limit: &MoveLimit, ingress: usize, now: Instant) {
        for key in self.movers.expire(now) {
            log::info!(
                "station {} (vlan {}): its move limit hold is over",
                key.mac,
                key.vlan
            );
        }
        let mut held = Vec::new();
        for (source, state) in &self.to_learn {
            if *state == SourceState::Moved && self.movers.moved(source.key, limit, now) {
                held.push(source.key);
            }
        }
        for key in held {
            log::warn!(
                "station {} (vlan {}) moved more than {} times within a second, last onto {}: \
                 its frames are dropped for {} s (a forwarding loop, or two stations using one \
                 address?)",
                key.mac,
                key.vlan,
                limit.moves,
                self.port_name(PortId(ingress as u16)),
                limit.hold.as_secs()
            );
        }
    }

    /// A port's name, for logs.
    fn port_name(&self, port: PortId) -> String {
        self.slots
            .get(port.index())
            .and_then(|slot| slot.queue.as_ref())
            .map_or("?".to_owned(), |p| p.name().to_owned())
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

    /// The fan-out stage for the batch, its counts, and one send per
    /// egress port.
    fn dispatch(&mut self, ingress: usize) {
        let n = self.slots.len();
        let egresses = Egresses {
            ports: &self.slots[..],
            flag_rules: self.flag_rules,
            bpdu_filters: self.bpdu_filters,
        };
        let from = self.slots[ingress].policy.flags;
        if self.outputs.len() < n {
            self.outputs.resize_with(n, Vec::new);
        }
        self.rewrites.clear();
        let (batch, rewrites, outputs) = (&self.batch, &mut self.rewrites, &mut self.outputs);
        let frame_of = |index: usize| batch.eth(index);
        // Each form of a frame made once, whichever ports it goes to.
        let deliver = |index: usize, egress: usize, form| {
            let out = rewrites.frame_for(batch, index, form);
            outputs[egress].push(out);
        };
        let missing = forward::fan_out(
            &mut self.verdicts,
            frame_of,
            ingress,
            from,
            &egresses,
            deliver,
        );
        // The ingress port's counts.
        let mut rx = PortStats::default();
        for (index, verdict) in self.verdicts.iter().enumerate() {
            rx.rx_frames += 1;
            rx.rx_bytes += self.batch.frame_len(index) as u64;
            if let Decision::Drop(reason) = verdict.decision {
                rx.drops[reason.index()] += 1;
            }
        }
        // A static entry naming a port this bridge lacks.
        rx.tx_errors += missing;
        self.slots[ingress].stats += rx;
        for egress in 0..n {
            let (slot, output) = (&mut self.slots[egress], &mut self.outputs[egress]);
            if output.is_empty() {
                continue;
            }
            // A faulted port is out of forwarding until it is retried, as a
            // disabled port of the Linux bridge is: nothing is sent there
            // (nor to a port id not in use, which floods also name, nor to
            // one that spanning tree or a guard keeps from forwarding).
            if !slot.forwards() {
                output.clear();
                continue;
            }
            let (batch, rewrites) = (&self.batch, &self.rewrites);
            let frames = Outputs {
                batch,
                rewrites,
                outs: output.iter(),
            };
            let offered = output.len() as u64;
            let queue = slot.queue.as_mut().expect("sendable ports are in use");
            // Only a batch with frames to VTEPs hands them over.
            let report = if !self.any_vtep {
                queue.send_batch(frames.clone())
            } else {
                let verdicts = &self.verdicts;
                queue.send_batch_to(output.iter().map(|&out| {
                    let (frame, of) = rewrites.frame(batch, out);
                    (frame, verdicts[of].vtep)
                }))
            };
            if self.capturing && report.sent > 0 {
                // The frames offered up to the last one the port took (a
                // refused or dropped one among them shows too).
                self.capture.offer(
                    self.id,
                    PortId(egress as u16),
                    capture::Direction::Out,
                    frames.take(report.sent + report.refused),
                );
            }
            output.clear();
            let tx = &mut slot.stats;
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

/// Where one batch's verdicts go.
struct Decided<'a> {
    verdicts: &'a mut Vec<Verdict>,
    to_learn: &'a mut Vec<(Source, SourceState)>,
    any_vtep: &'a mut bool,
}

/// [`decide_one`] for every frame of the batch, in one read section.
#[inline(always)]
fn decide_all<R: ReadSection<FdbKey, FdbEntry>, const REMEMBER: bool>(
    section: &mut Memo<'_, '_, R, REMEMBER>,
    port: &IngressPort<'_>,
    batch: &RxBatch,
    now: Seconds,
    out: &mut Decided<'_>,
) {
    for (index, frame) in batch.eths().enumerate() {
        decide_one(section, port, batch, index, frame, now, out);
    }
}

/// Decides frame `index` of the batch (`frame`)
/// received on `port`, and refreshes or queues its source for learning.
#[inline(always)]
fn decide_one<R: ReadSection<FdbKey, FdbEntry>, const REMEMBER: bool>(
    section: &mut Memo<'_, '_, R, REMEMBER>,
    port: &IngressPort<'_>,
    batch: &RxBatch,
    index: usize,
    frame: &[u8],
    now: Seconds,
    out: &mut Decided<'_>,
) {
    let (verdict, source) = forward::ingress_and_lookup(port, frame, &*section);
    if let Some(key) = source {
        let vtep = batch.vtep(index);
        // A station sends many frames of a batch: learn it once (the
        // frame before was its, or an earlier one, queued then).
        let state = section.source_state(&key, port.port, vtep, now);
        if let Some(state) = state.filter(|&state| state != SourceState::Known) {
            if !out.to_learn.iter().any(|(s, _)| s.key == key) {
                let source = Source {
                    key,
                    port: port.port,
                    vtep,
                };
                out.to_learn.push((source, state));
            }
        }
    }
    *out.any_vtep |= verdict.vtep.is_some();
    out.verdicts.push(verdict);
}

#[cfg(test)]
mod heartbeat_tests;
#[cfg(test)]
mod tests;
