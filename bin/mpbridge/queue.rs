//! The owner thread's queue: every `Event` for the owner goes through it,
//! in three lanes taken in order of kind, each bounded. What the network
//! sends (IGMP and MLD messages) waits in the last lane, so it never
//! delays a BPDU, a link change or a control request, and its bounds keep
//! a flood from growing the queue or the owner's work without end:
//!
//! 1. `urgent`: signals, link news, BPDUs and tripped guards;
//! 2. `control`: requests from the control socket and `/metrics`;
//! 3. `mcast`: IGMP and MLD messages for snooping, within a bridge-wide
//!    budget per second on top of the workers' per port, worker and
//!    second.
//!
//! A lane that is full sheds what comes (counted); a signal and a tripped
//! guard are never shed (one per signal delivered, one per trip and
//! worker), and a request shed is answered at once ("busy"). Shedding an
//! IGMP or MLD message takes nothing from forwarding: the worker has
//! forwarded it already; only snooping does not see it.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bridge::worker::PortEvent;

use crate::api_error::ApiError;
use crate::capture::CaptureGrant;
use crate::protocol::{OwnerQueueStats, Request, Response};

/// Where the owner's answer goes: called once, on the owner thread, so it
/// must not wait (a channel's `send`, a wake-up).
pub type Reply<T> = Box<dyn FnOnce(Result<T, ApiError>) + Send>;

/// What reaches the owner thread.
pub enum Event {
    /// A request, and where its reply goes.
    Call(Request, Reply<Response>),
    /// A capture request: the reply is what the capture thread follows.
    Capture(Request, Reply<CaptureGrant>),
    /// A signal (SIGHUP, SIGINT, SIGTERM).
    Signal(libc::c_int),
    /// What rtnetlink said of interfaces.
    Links(bridge::monitor::Received),
    /// What a worker reported: a BPDU for spanning tree, a guard tripped.
    Port(PortEvent),
}

/// How many events and bytes (of the frames they carry) a lane holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneLimit {
    /// Events.
    pub events: usize,
    /// Bytes of frames.
    pub bytes: usize,
}

/// The queue's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Signals, link news, BPDUs, tripped guards.
    pub urgent: LaneLimit,
    /// Control requests.
    pub control: LaneLimit,
    /// IGMP and MLD messages waiting.
    pub mcast: LaneLimit,
    /// IGMP and MLD messages taken per second, bridge-wide (every port
    /// and worker together); beyond, shed before they are queued.
    pub mcast_per_second: LaneLimit,
}

/// The daemon's bounds. BPDUs come at most 64 per port, worker and
/// second, a few bytes each; requests one at a time from the control
/// thread and one from `/metrics`. IGMP and MLD: a host answers a general
/// query with a report or one per group, so 2048 messages and 512 KiB a
/// second are room for thousands of hosts answering within the query
/// response interval; the lane holds half a second of that. With at most
/// `bridge::mcast::MAX_REPORT_RECORDS` read per report, and at least 8
/// bytes per record, the budget bounds snooping's records to 65536 a
/// second.
pub const LIMITS: Limits = Limits {
    urgent: LaneLimit {
        events: 4096,
        bytes: 4 << 20,
    },
    control: LaneLimit {
        events: 256,
        bytes: 0,
    },
    mcast: LaneLimit {
        events: 1024,
        bytes: 1 << 20,
    },
    mcast_per_second: LaneLimit {
        events: 2048,
        bytes: 512 << 10,
    },
};

/// The lanes, in the order the owner takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Signals, link news, BPDUs, tripped guards.
    Urgent = 0,
    /// Control requests.
    Control = 1,
    /// IGMP and MLD messages.
    Mcast = 2,
}

impl Lane {
    /// The lane `event` waits in.
    pub fn of(event: &Event) -> Lane {
        match event {
            Event::Signal(_) | Event::Links(_) => Lane::Urgent,
            Event::Port(PortEvent::Bpdu { .. } | PortEvent::GuardTripped { .. }) => Lane::Urgent,
            Event::Call(..) | Event::Capture(..) => Lane::Control,
            Event::Port(PortEvent::Mcast { .. }) => Lane::Mcast,
        }
    }
}

/// Why an event was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its lane is full, or (IGMP and MLD) the second's budget is spent.
    Full,
    /// The bridge is stopping.
    Closed,
}

/// Whether `event` is queued even into a full lane: a signal (the
/// kernel coalesces pending ones) and a tripped guard (once per trip and
/// worker) must reach the owner.
fn never_shed(event: &Event) -> bool {
    matches!(
        event,
        Event::Signal(_) | Event::Port(PortEvent::GuardTripped { .. })
    )
}

/// The bytes of frame an event carries.
fn bytes(event: &Event) -> usize {
    match event {
        Event::Port(PortEvent::Bpdu { frame, .. } | PortEvent::Mcast { frame, .. }) => frame.len(),
        _ => 0,
    }
}

struct Inner {
    lanes: [VecDeque<Event>; 3],
    bytes: [usize; 3],
    closed: bool,
    /// The current second of the IGMP and MLD budget: its start, and the
    /// events and bytes taken in it.
    budget: (Option<Instant>, usize, usize),
    stats: OwnerQueueStats,
}

/// The owner's queue (see the module's documentation).
pub struct EventQueue {
    limits: Limits,
    inner: Mutex<Inner>,
    ready: Condvar,
}

impl EventQueue {
    /// An empty queue with `limits`.
    pub fn new(limits: Limits) -> EventQueue {
        EventQueue {
            limits,
            inner: Mutex::new(Inner {
                lanes: Default::default(),
                bytes: [0; 3],
                closed: false,
                budget: (None, 0, 0),
                stats: OwnerQueueStats::default(),
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding it leaves plain counters and queues, still
        // consistent: take them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `event` in its lane, or says why not (and counts it).
    pub fn push(&self, event: Event) -> Result<(), Refused> {
        self.push_at(event, Instant::now())
    }

    /// [`push`](Self::push) at `now` (the budget's clock).
    pub fn push_at(&self, event: Event, now: Instant) -> Result<(), Refused> {
        let lane = Lane::of(&event);
        let size = bytes(&event);
        let mut inner = self.lock();
        if inner.closed {
            return Err(Refused::Closed);
        }
        if lane == Lane::Mcast {
            let budget = self.limits.mcast_per_second;
            let (since, events, taken) = &mut inner.budget;
            if since.is_none_or(|at| now >= at + Duration::from_secs(1)) {
                *since = Some(now);
                *events = 0;
                *taken = 0;
            }
            if *events >= budget.events || *taken + size > budget.bytes {
                inner.stats.mcast_over_budget += 1;
                return Err(Refused::Full);
            }
            *events += 1;
            *taken += size;
        }
        let limit = match lane {
            Lane::Urgent => self.limits.urgent,
            Lane::Control => self.limits.control,
            Lane::Mcast => self.limits.mcast,
        };
        let i = lane as usize;
        let full = inner.lanes[i].len() >= limit.events || inner.bytes[i] + size > limit.bytes;
        if full && !never_shed(&event) {
            let counter = match lane {
                Lane::Urgent => &mut inner.stats.urgent_queue_full,
                Lane::Control => &mut inner.stats.control_queue_full,
                Lane::Mcast => &mut inner.stats.mcast_queue_full,
            };
            *counter += 1;
            return Err(Refused::Full);
        }
        inner.lanes[i].push_back(event);
        inner.bytes[i] += size;
        drop(inner);
        self.ready.notify_one();
        Ok(())
    }

    /// The next event, the first lane's first; waits at most `wait` for
    /// one.
    pub fn recv_timeout(&self, wait: Duration) -> Option<Event> {
        let deadline = Instant::now().checked_add(wait);
        let mut inner = self.lock();
        loop {
            for i in 0..inner.lanes.len() {
                if let Some(event) = inner.lanes[i].pop_front() {
                    inner.bytes[i] -= bytes(&event);
                    return Some(event);
                }
            }
            let left = match deadline {
                Some(at) => at.saturating_duration_since(Instant::now()),
                None => wait,
            };
            if left.is_zero() {
                return None;
            }
            inner = match self.ready.wait_timeout(inner, left) {
                Ok((inner, _)) => inner,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Refuses every later event and drops the waiting ones: a request
    /// among them is dropped unanswered, which its caller sees as the
    /// bridge stopping.
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        let lanes = std::mem::take(&mut inner.lanes);
        inner.bytes = [0; 3];
        drop(inner);
        // Dropped outside the lock: a reply sender's drop wakes its caller.
        drop(lanes);
    }

    /// The figures for `stats`: what waits now, and what was shed.
    pub fn stats(&self) -> OwnerQueueStats {
        let inner = self.lock();
        OwnerQueueStats {
            urgent_queued: inner.lanes[0].len(),
            control_queued: inner.lanes[1].len(),
            mcast_queued: inner.lanes[2].len(),
            ..inner.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};
    use std::thread;

    use bridge::PortId;

    use super::*;
    use crate::protocol::Request;

    fn mcast(len: usize) -> Event {
        Event::Port(PortEvent::Mcast {
            port: PortId(0),
            vlan: 0,
            frame: vec![0; len],
        })
    }

    fn bpdu() -> Event {
        Event::Port(PortEvent::Bpdu {
            port: PortId(1),
            frame: vec![0; 60],
        })
    }

    /// A `stats` request whose answer (or the lack of one) comes out of
    /// the receiver.
    fn call() -> (
        Event,
        mpsc::Receiver<Result<crate::protocol::Response, crate::api_error::ApiError>>,
    ) {
        let (tx, answer) = mpsc::sync_channel(1);
        let reply: Reply<crate::protocol::Response> = Box::new(move |result| {
            let _ = tx.send(result);
        });
        (Event::Call(Request::Stats, reply), answer)
    }
    fn name(event: &Event) -> &'static str {
        match event {
            Event::Signal(_) => "signal",
            Event::Links(_) => "links",
            Event::Call(..) => "call",
            Event::Capture(..) => "capture",
            Event::Port(PortEvent::Bpdu { .. }) => "bpdu",
            Event::Port(PortEvent::GuardTripped { .. }) => "guard",
            Event::Port(PortEvent::Mcast { .. }) => "mcast",
        }
    }

    fn drain(queue: &EventQueue) -> Vec<&'static str> {
        std::iter::from_fn(|| queue.recv_timeout(Duration::ZERO))
            .map(|e| name(&e))
            .collect()
    }

    const ROOMY: Limits = Limits {
        urgent: LaneLimit {
            events: 100,
            bytes: 1 << 20,
        },
        control: LaneLimit {
            events: 100,
            bytes: 0,
        },
        mcast: LaneLimit {
            events: 100,
            bytes: 1 << 20,
        },
        mcast_per_second: LaneLimit {
            events: 1000,
            bytes: 1 << 20,
        },
    };

    #[test]
    fn urgent_then_control_then_mcast_each_in_order() {
        let queue = EventQueue::new(ROOMY);
        let (first, _a) = call();
        let (second, _b) = call();
        for event in [
            mcast(100),
            first,
            mcast(100),
            bpdu(),
            Event::Signal(1),
            second,
        ] {
            queue.push(event).unwrap();
        }
        queue
            .push(Event::Port(PortEvent::GuardTripped { port: PortId(2) }))
            .unwrap();
        assert_eq!(
            drain(&queue),
            ["bpdu", "signal", "guard", "call", "call", "mcast", "mcast"]
        );
        assert_eq!(queue.stats(), OwnerQueueStats::default());
    }

    #[test]
    fn a_full_mcast_lane_sheds_and_counts_without_touching_the_others() {
        let limits = Limits {
            mcast: LaneLimit {
                events: 3,
                bytes: 250,
            },
            ..ROOMY
        };
        let queue = EventQueue::new(limits);
        for _ in 0..3 {
            queue.push(mcast(100)).unwrap_or(());
        }
        // The third did not fit the bytes.
        assert_eq!(queue.stats().mcast_queued, 2);
        assert_eq!(queue.stats().mcast_queue_full, 1);
        assert_eq!(queue.push(mcast(10)), Ok(()));
        assert_eq!(queue.push(mcast(1)), Err(Refused::Full));
        let (request, _answer) = call();
        assert_eq!(queue.push(request), Ok(()));
        assert_eq!(queue.push(bpdu()), Ok(()));
        let stats = queue.stats();
        assert_eq!((stats.mcast_queued, stats.mcast_queue_full), (3, 2));
        assert_eq!(drain(&queue), ["bpdu", "call", "mcast", "mcast", "mcast"]);
        // Room again.
        assert_eq!(queue.push(mcast(200)), Ok(()));
    }

    #[test]
    fn the_bridge_wide_budget_is_per_second() {
        let limits = Limits {
            mcast_per_second: LaneLimit {
                events: 5,
                bytes: 1000,
            },
            ..ROOMY
        };
        let queue = EventQueue::new(limits);
        let t0 = Instant::now();
        let results: Vec<bool> = (0..8)
            .map(|i| {
                queue
                    .push_at(mcast(10), t0 + Duration::from_millis(i * 10))
                    .is_ok()
            })
            .collect();
        assert_eq!(results, [true, true, true, true, true, false, false, false]);
        assert_eq!(queue.stats().mcast_over_budget, 3);
        // Bytes count too, in the next second.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(queue.push_at(mcast(900), t1), Ok(()));
        assert_eq!(queue.push_at(mcast(200), t1), Err(Refused::Full));
        assert_eq!(queue.push_at(mcast(100), t1), Ok(()));
        assert_eq!(queue.stats().mcast_over_budget, 4);
        // What the budget refused never took room in the lane.
        assert_eq!(queue.stats().mcast_queued, 7);
        assert_eq!(queue.stats().mcast_queue_full, 0);
    }

    #[test]
    fn signals_and_guards_pass_a_full_lane_bpdus_do_not() {
        let limits = Limits {
            urgent: LaneLimit {
                events: 1,
                bytes: 1 << 20,
            },
            control: LaneLimit {
                events: 1,
                bytes: 0,
            },
            ..ROOMY
        };
        let queue = EventQueue::new(limits);
        assert_eq!(queue.push(bpdu()), Ok(()));
        assert_eq!(queue.push(bpdu()), Err(Refused::Full));
        assert_eq!(queue.push(Event::Signal(15)), Ok(()));
        let guard = Event::Port(PortEvent::GuardTripped { port: PortId(0) });
        assert_eq!(queue.push(guard), Ok(()));
        let (a, _a) = call();
        let (b, _b) = call();
        assert_eq!(queue.push(a), Ok(()));
        assert_eq!(queue.push(b), Err(Refused::Full));
        let stats = queue.stats();
        assert_eq!((stats.urgent_queue_full, stats.control_queue_full), (1, 1));
        assert_eq!(drain(&queue), ["bpdu", "signal", "guard", "call"]);
    }

    #[test]
    fn a_waiting_owner_wakes_for_an_event_and_times_out_without() {
        let queue = Arc::new(EventQueue::new(ROOMY));
        let start = Instant::now();
        assert!(queue.recv_timeout(Duration::from_millis(50)).is_none());
        assert!(start.elapsed() >= Duration::from_millis(50));
        let pusher = {
            let queue = Arc::clone(&queue);
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(20));
                queue.push(Event::Signal(1)).unwrap();
            })
        };
        let got = queue.recv_timeout(Duration::from_secs(10));
        assert!(matches!(got, Some(Event::Signal(1))));
        pusher.join().unwrap();
    }

    #[test]
    fn closing_answers_the_waiting_requests_and_refuses_more() {
        let queue = EventQueue::new(ROOMY);
        let (request, answer) = call();
        queue.push(request).unwrap();
        queue.push(mcast(10)).unwrap();
        queue.close();
        assert!(matches!(
            answer.recv_timeout(Duration::from_secs(1)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        ));
        assert_eq!(queue.push(Event::Signal(1)), Err(Refused::Closed));
        assert!(queue.recv_timeout(Duration::ZERO).is_none());
    }
}
