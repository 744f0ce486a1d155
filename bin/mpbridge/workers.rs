//! Starting the forwarding threads over a table of one strategy: at start,
//! and again when `mpbridge lock set` moves the bridge to a table of
//! another strategy (the workers are monomorphised per strategy, so a new
//! strategy means new workers; they take over the old ones' queues and
//! counters).

use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bridge::counters::{PortCounters, WorkerCounters};
use bridge::port::placement::CpuSet;
use bridge::port::LinkQueue;
use bridge::worker::{PortControl, WorkerParts, WorkerWake};
use bridge::{MacTable, Stopper, Worker, WorkerConfig};
use locks::Strategy;

use crate::watchdog::name_workers;

/// What a worker thread hands back when it stops.
pub type Returned = (Vec<Option<LinkQueue>>, WorkerParts);

/// The workers running now, and what stops them.
pub struct Generation {
    /// Stops these workers (and only them).
    pub stopper: Arc<Stopper>,
    /// One per worker, in worker order.
    pub handles: Vec<JoinHandle<Returned>>,
}

impl Generation {
    /// Asks the workers to stop without waiting for them: they stop while
    /// the caller does other work, and [`stop_by`](Self::stop_by) collects
    /// them.
    pub fn ask_to_stop(&self) {
        self.stopper.stop();
    }

    /// Stops the workers and takes back what each held, waiting at most
    /// `within` for all of them. Every worker that ends in time is joined,
    /// also after one that panicked, so that none is left running unseen;
    /// the error names those that panicked (their queues are lost with
    /// them) and those still running at the deadline (stuck: they are left
    /// behind, detached, holding their queues until they end or the
    /// process does).
    pub fn stop(&mut self, within: Duration) -> Result<Vec<Returned>, String> {
        self.stop_by(Instant::now() + within, within)
    }

    /// [`stop`](Self::stop), waiting until `deadline`, which is `within`
    /// of the moment the workers were asked to stop (see
    /// [`ask_to_stop`](Self::ask_to_stop)).
    pub fn stop_by(
        &mut self,
        deadline: Instant,
        within: Duration,
    ) -> Result<Vec<Returned>, String> {
        self.stopper.stop();
        while self.handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        let mut returned = Vec::new();
        let mut panicked = Vec::new();
        let mut running = Vec::new();
        for (id, handle) in self.handles.drain(..).enumerate() {
            if !handle.is_finished() {
                running.push(id);
                continue;
            }
            match handle.join() {
                Ok(parts) => returned.push(parts),
                Err(_) => panicked.push(id),
            }
        }
        let mut faults = Vec::new();
        if !panicked.is_empty() {
            faults.push(format!("{} panicked", name_workers(&panicked)));
        }
        if !running.is_empty() {
            faults.push(format!(
                "{} did not stop within {} s (stuck)",
                name_workers(&running),
                within.as_secs_f64()
            ));
        }
        match faults.is_empty() {
            true => Ok(returned),
            false => Err(faults.join("; ")),
        }
    }
}

/// Workers just started.
pub struct Started {
    /// The threads.
    pub generation: Generation,
    /// Each worker's port handle.
    pub controls: Vec<PortControl<LinkQueue>>,
    /// Each worker's port counters.
    pub counters: Vec<Arc<[PortCounters]>>,
    /// Each worker's own counters.
    pub totals: Vec<Arc<WorkerCounters>>,
    /// Each worker's capture hub.
    pub captures: Vec<Arc<bridge::capture::CaptureHub>>,
    /// Yields once per worker that started; ends when all have started or
    /// died.
    pub started: mpsc::Receiver<()>,
}

/// Faults the daemon's tests inject into worker 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// It panics as soon as it starts.
    PanicAtStart,
    /// It panics when told to stop.
    PanicAtStop,
    /// Once started, it blocks in a sleep for `STALL_SLEEP` before it runs
    /// its loop: a worker stuck in a system call, as the owner sees one.
    Stall,
}

/// How long an injected stall lasts: longer than any test waits, so that
/// only the process's exit ends it.
const STALL_SLEEP: Duration = Duration::from_secs(3600);

/// Starts one worker over `table` (and `groups`, with multicast snooping)
/// per set of queues and parts, worker `i`
/// pinned to `placement[i]` when given. `inject` makes worker 0 fail (the
/// daemon's fault-injection hook).
pub fn start<S: Strategy>(
    table: Arc<MacTable<S>>,
    groups: Option<Arc<bridge::mcast::GroupTable<S>>>,
    sets: Vec<Returned>,
    config: WorkerConfig,
    placement: &[Option<CpuSet>],
    inject: Option<Injected>,
) -> Result<Started, String> {
    prepare(table, groups, sets.len(), config, placement, inject)?.start(sets)
}

/// A worker's thread started before its worker exists, waiting to be
/// handed it.
struct Seat<S: Strategy> {
    wake: Option<WorkerWake>,
    hand: Option<mpsc::SyncSender<Worker<S, LinkQueue>>>,
    handle: Option<JoinHandle<Returned>>,
}

/// Everything a generation of workers needs from the system, made while
/// the generation before still forwards: the stopper's eventfd, each
/// worker's wake-up eventfd and each worker's thread (started, waiting for
/// its worker). What is left is plain memory moves, which cannot fail for
/// want of a descriptor or a thread: [`start`](Self::start) hands the
/// stopped workers' queues to the waiting threads. Dropped unused, it
/// ends its threads and closes its descriptors.
pub struct Prepared<S: Strategy> {
    table: Arc<MacTable<S>>,
    groups: Option<Arc<bridge::mcast::GroupTable<S>>>,
    config: WorkerConfig,
    stopper: Arc<Stopper>,
    seats: Vec<Seat<S>>,
    started: Option<mpsc::Receiver<()>>,
}

/// Makes what `count` workers over `table` need (see [`Prepared`]), or
/// says what could not be made; nothing of it is left behind then.
pub fn prepare<S: Strategy>(
    table: Arc<MacTable<S>>,
    groups: Option<Arc<bridge::mcast::GroupTable<S>>>,
    count: usize,
    config: WorkerConfig,
    placement: &[Option<CpuSet>],
    inject: Option<Injected>,
) -> Result<Prepared<S>, String> {
    let stopper = Arc::new(Stopper::new().map_err(|e| format!("cannot create an eventfd: {e}"))?);
    let (started_tx, started) = mpsc::channel::<()>();
    let mut prepared = Prepared {
        table,
        groups,
        config,
        stopper: Arc::clone(&stopper),
        seats: Vec::with_capacity(count),
        started: Some(started),
    };
    for id in 0..count {
        // Dropping `prepared` on an error ends the threads started so far.
        let wake = WorkerWake::new()
            .map_err(|e| format!("cannot create an eventfd for worker {id}: {e}"))?;
        let (hand, take) = mpsc::sync_channel::<Worker<S, LinkQueue>>(1);
        let stopper = Arc::clone(&stopper);
        let started = started_tx.clone();
        let cpus = placement.get(id).cloned().flatten();
        let inject = inject.filter(|_| id == 0);
        let handle = thread::Builder::new()
            .name(format!("worker{id}"))
            .spawn(move || {
                let Ok(mut worker) = take.recv() else {
                    // Not needed after all: the switch it was made for failed.
                    return (Vec::new(), WorkerParts::default());
                };
                if inject == Some(Injected::PanicAtStart) {
                    panic!("injected fault");
                }
                if let Some(cpus) = &cpus {
                    crate::system::pin_to(cpus);
                }
                let _ = started.send(());
                drop(started);
                if inject == Some(Injected::Stall) {
                    thread::sleep(STALL_SLEEP);
                }
                worker.run(&stopper);
                if inject == Some(Injected::PanicAtStop) {
                    panic!("injected fault at stop");
                }
                worker.into_parts()
            })
            .map_err(|e| format!("cannot start worker {id}: {e}"))?;
        prepared.seats.push(Seat {
            wake: Some(wake),
            hand: Some(hand),
            handle: Some(handle),
        });
    }
    Ok(prepared)
}

impl<S: Strategy> Prepared<S> {
    /// Hands each waiting thread its worker, over the queues and parts of
    /// one stopped worker each (as many sets as were prepared).
    pub fn start(mut self, sets: Vec<Returned>) -> Result<Started, String> {
        if sets.len() != self.seats.len() {
            return Err(format!(
                "{} workers prepared for {} sets of queues",
                self.seats.len(),
                sets.len()
            ));
        }
        let mut result = Started {
            generation: Generation {
                stopper: Arc::clone(&self.stopper),
                handles: Vec::new(),
            },
            controls: Vec::new(),
            counters: Vec::new(),
            totals: Vec::new(),
            captures: Vec::new(),
            started: self.started.take().expect("taken once"),
        };
        for (id, ((ports, parts), seat)) in sets.into_iter().zip(&mut self.seats).enumerate() {
            let wake = seat.wake.take().expect("taken once");
            let mut worker =
                Worker::resume_with(Arc::clone(&self.table), ports, self.config, parts, wake);
            worker.set_id(id);
            worker.set_groups(self.groups.clone());
            result.controls.push(worker.control());
            result.counters.push(worker.counters());
            result.totals.push(worker.totals());
            result.captures.push(worker.capture());
            let hand = seat.hand.take().expect("taken once");
            // The thread waits in `recv` until it gets its worker or this
            // sender goes: it cannot have ended.
            hand.send(worker)
                .map_err(|_| format!("worker {id}'s thread ended before it got its queues"))?;
            result
                .generation
                .handles
                .push(seat.handle.take().expect("taken once"));
        }
        Ok(result)
    }
}

impl<S: Strategy> Drop for Prepared<S> {
    fn drop(&mut self) {
        // Threads not handed a worker end once their sender goes.
        for seat in &mut self.seats {
            seat.hand = None;
        }
        for seat in &mut self.seats {
            if let Some(handle) = seat.handle.take() {
                if seat.wake.is_some() {
                    let _ = handle.join();
                }
            }
        }
    }
}
