//! Ports added and removed while a worker runs: the messages that carry
//! them, the handle that sends them, and the worker applying them between
//! two batches; and what a worker hands over when it stops, for one of
//! another strategy to take over.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{mpsc, Arc};

use locks::Strategy;

use super::policy::{EventSink, Gate, PortSetup};
use super::slot::PortSlot;
use super::Worker;
use crate::capture::CaptureHub;
use crate::counters::{PortCounters, WorkerCounters};
use crate::port::{wake, Queue};
use crate::port_id::PortId;
use crate::vlan::PortVlans;

/// The eventfd that wakes a worker for port changes, made before the
/// worker is (see [`Worker::resume_with`](super::Worker::resume_with)).
#[derive(Debug)]
pub struct WorkerWake(pub(super) OwnedFd);

impl WorkerWake {
    /// A new one; fails where no descriptor is free.
    pub fn new() -> io::Result<WorkerWake> {
        wake::eventfd().map(WorkerWake)
    }
}

/// What a worker keeps across a change of table: its counters, totals,
/// capture taps, index, ports' setups and where its events go. The
/// default is a fresh set.
#[derive(Default)]
pub struct WorkerParts {
    pub(super) counters: Option<Arc<[PortCounters]>>,
    pub(super) totals: Option<Arc<WorkerCounters>>,
    pub(super) capture: Option<Arc<CaptureHub>>,
    pub(super) id: usize,
    pub(super) setups: Option<Vec<PortSetup>>,
    pub(super) events: Option<EventSink>,
}

impl std::fmt::Debug for WorkerParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerParts")
            .field("id", &self.id)
            .field("setups", &self.setups)
            .field("events", &self.events.is_some())
            .finish_non_exhaustive()
    }
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
    pub fn with_vlans(self, vlans: Vec<PortVlans>) -> WorkerParts {
        self.with_setups(vlans.into_iter().map(PortSetup::with_vlans).collect())
    }

    /// The same, with the ports' setups (by port id).
    pub fn with_setups(mut self, setups: Vec<PortSetup>) -> WorkerParts {
        self.setups = Some(setups);
        self
    }

    /// The same, with `events` told of BPDUs and tripped guards.
    pub fn with_events(mut self, events: EventSink) -> WorkerParts {
        self.events = Some(events);
        self
    }
}

/// A port change for one worker, with the channel it answers on once done.
pub(super) enum Change<P> {
    Add {
        id: PortId,
        queue: P,
        setup: PortSetup,
        done: mpsc::Sender<()>,
    },
    Remove {
        id: PortId,
        done: mpsc::Sender<()>,
    },
    /// Spanning tree's port state changed.
    Gate {
        id: PortId,
        gate: Gate,
    },
    /// A guard disabled the port, or `port enable` enabled it.
    Disable {
        id: PortId,
        disabled: bool,
    },
    /// A frame of spanning tree's to send out of the port.
    Send {
        id: PortId,
        frame: Vec<u8>,
    },
    /// The port's link went down (`up: false`), or came back: as the
    /// kernel told the control plane, which logged it.
    Link {
        id: PortId,
        up: bool,
    },
    /// Nothing to change: answered at once, to show the worker applies
    /// changes.
    Ping {
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
    pub(super) sender: mpsc::Sender<Change<P>>,
    pub(super) wake: Arc<OwnedFd>,
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
        self.add_with(id, queue, PortSetup::with_vlans(vlans))
    }

    /// [`add`](Self::add), set up as `setup` says.
    pub fn add_with(
        &self,
        id: PortId,
        queue: P,
        setup: PortSetup,
    ) -> io::Result<mpsc::Receiver<()>> {
        let (done, answer) = mpsc::channel();
        self.send(Change::Add {
            id,
            queue,
            setup,
            done,
        })?;
        Ok(answer)
    }

    /// Sets what spanning tree lets through port `id`, from the worker's
    /// next batch on.
    pub fn set_gate(&self, id: PortId, gate: Gate) -> io::Result<()> {
        self.send(Change::Gate { id, gate })
    }

    /// Disables port `id` (nothing in or out), or enables it again.
    pub fn set_disabled(&self, id: PortId, disabled: bool) -> io::Result<()> {
        self.send(Change::Disable { id, disabled })
    }

    /// Tells the worker that port `id`'s link went down, however briefly
    /// (`up: false`: the port is faulted, counted and flushed once, as
    /// when the worker finds it down itself), or is up again (a port
    /// backing off is retried at once).
    pub fn link_changed(&self, id: PortId, up: bool) -> io::Result<()> {
        self.send(Change::Link { id, up })
    }

    /// Sends `frame` (an Ethernet frame; the worker adds the port's
    /// metadata) out of port `id`, whatever its gate: spanning tree's
    /// BPDUs.
    pub fn send_frame(&self, id: PortId, frame: Vec<u8>) -> io::Result<()> {
        self.send(Change::Send { id, frame })
    }

    /// Asks the worker to answer between two batches, changing nothing:
    /// the receiver answers once it has, which shows that it still runs
    /// its loop (a caller asks every worker before a change that needs all
    /// of them).
    pub fn ping(&self) -> io::Result<mpsc::Receiver<()>> {
        let (done, answer) = mpsc::channel();
        self.send(Change::Ping { done })?;
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

impl<S: Strategy, P: Queue> Worker<S, P> {
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
                    setup,
                    done,
                } => {
                    let index = id.index();
                    if index >= self.slots.len() {
                        self.slots
                            .resize_with(index + 1, || PortSlot::new(None, PortSetup::default()));
                    }
                    self.counters[index].reset();
                    self.slots[index].fill(queue, setup);
                    let _ = done.send(());
                }
                Change::Gate { id, gate } => {
                    if let Some(slot) = self.slots.get_mut(id.index()) {
                        // A port that stops learning loses what it learned
                        // here too: a batch this worker decided before the
                        // change may have learned after the control plane's
                        // flush, and nothing would send to those stations
                        // any more.
                        let stops_learning = slot.gate.learning && !gate.learning;
                        slot.gate = gate;
                        if stops_learning {
                            self.fdb.flush_port(id);
                        }
                    }
                }
                Change::Disable { id, disabled } => {
                    if let Some(slot) = self.slots.get_mut(id.index()) {
                        slot.disabled = disabled;
                    }
                }
                Change::Send { id, frame } => self.send_own(id, &frame),
                Change::Link { id, up } => {
                    if id.index() < self.slots.len() {
                        match up {
                            false => self.lose_link(id.index(), false),
                            true => self.link_back(id.index()),
                        }
                    }
                }
                Change::Ping { done } => {
                    let _ = done.send(());
                }
                Change::Remove { id, done } => {
                    if let Some(slot) = self.slots.get_mut(id.index()) {
                        // Dropping the queue closes it: nothing of this
                        // worker uses it any more, and no other worker ever
                        // did.
                        slot.vacate();
                    }
                    let _ = done.send(());
                }
            }
        }
        if applied > 0 {
            self.policies_changed();
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fdb::{FdbConfig, MacTable};
    use crate::port::memory::MemoryQueue;
    use crate::worker::health::Health;
    use crate::WorkerConfig;

    fn worker(ports: usize) -> Worker<locks::Mutex, MemoryQueue> {
        let ports = (0..ports).map(|_| MemoryQueue::pair("m").0).collect();
        let fdb = Arc::new(MacTable::new(FdbConfig::default()));
        Worker::new(fdb, ports, WorkerConfig::default())
    }

    #[test]
    fn a_port_added_past_the_end_grows_the_slots_and_one_removed_is_vacant() {
        let mut worker = worker(2);
        let control = worker.control();
        let added = control
            .add_with_vlans(PortId(4), MemoryQueue::pair("m").0, PortVlans::access(5))
            .unwrap();
        assert_eq!(worker.apply_changes(), 1);
        added.try_recv().expect("answered once applied");
        assert_eq!(worker.slots.len(), 5);
        assert!(worker.slots[4].queue.is_some());
        assert!(worker.slots[4].vlans.is_member(5));
        assert_eq!(worker.slots[4].fault.health, Health::Up);
        for vacant in 2..4 {
            assert!(worker.slots[vacant].queue.is_none());
            assert_eq!(worker.slots[vacant].fault.health, Health::Vacant);
        }
        let removed = control.remove(PortId(0)).unwrap();
        assert_eq!(worker.apply_changes(), 1);
        removed.try_recv().expect("answered once applied");
        assert!(worker.queue(PortId(0)).is_none());
        assert_eq!(worker.slots[0].fault.health, Health::Vacant);
        // Nothing more to apply.
        assert_eq!(worker.apply_changes(), 0);
    }

    #[test]
    fn a_link_down_heard_by_the_control_plane_faults_the_port_once() {
        let (q0, _p0) = MemoryQueue::pair("m0");
        let (q1, p1) = MemoryQueue::pair("m1");
        let fdb = Arc::new(MacTable::<locks::Mutex>::new(FdbConfig::default()));
        let mut worker = Worker::new(Arc::clone(&fdb), vec![q0, q1], WorkerConfig::default());
        let mut frame = vec![0u8; crate::port::VNET_HDR_LEN];
        frame.extend([0xff; 6]);
        frame.extend([0x02, 0, 0, 0, 0, 2]);
        frame.extend([0x88, 0xb5]);
        frame.resize(crate::port::VNET_HDR_LEN + 60, 0);
        p1.inject(&frame);
        worker.poll();
        assert_eq!(fdb.learned_len(), 1);
        let control = worker.control();
        // Down and up again before the worker looked: its link is up, the
        // down is taken all the same; a second down of the same event is
        // not counted again.
        control.link_changed(PortId(1), false).unwrap();
        control.link_changed(PortId(1), false).unwrap();
        assert_eq!(worker.apply_changes(), 2);
        assert_eq!(fdb.learned_len(), 0);
        assert!(matches!(worker.slots[1].fault.health, Health::Backoff(_)));
        assert_eq!(worker.slots[1].stats.rx_errors, 1);
        assert_eq!(worker.slots[0].fault.health, Health::Up);
        // Up: retried in the next round, and passing frames again.
        control.link_changed(PortId(1), true).unwrap();
        worker.apply_changes();
        p1.inject(&frame);
        worker.poll();
        assert_eq!(worker.slots[1].fault.health, Health::Up);
        assert_eq!(fdb.learned_len(), 1);
        assert_eq!(worker.counters()[1].snapshot().rx_errors, 1);
    }

    #[test]
    fn parts_carry_the_counters_and_vlans_over() {
        let mut worker = worker(2);
        worker.set_vlans(PortId(1), PortVlans::access(7));
        worker.counters()[1].add(&crate::counters::PortStats {
            rx_frames: 3,
            ..Default::default()
        });
        let (ports, parts) = worker.into_parts();
        assert_eq!(ports.len(), 2);
        let fdb = Arc::new(MacTable::<locks::Rcu>::new(FdbConfig::default()));
        let resumed = Worker::resume(fdb, ports, WorkerConfig::default(), parts);
        assert_eq!(resumed.counters()[1].snapshot().rx_frames, 3);
        assert!(resumed.slots[1].vlans.is_member(7));
    }
}
