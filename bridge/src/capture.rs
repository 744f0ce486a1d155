//! Capture taps: copies of the frames a worker receives on or sends to a
//! port, for `mpbridge capture`. One hub per worker (so that a capture can
//! follow one queue, as a multiqueue BPF can). While nobody captures, the
//! worker pays one relaxed load per batch; while someone does, a copy per
//! frame into a channel bounded in frames and in bytes, and a reader too
//! slow for the traffic loses capture frames (counted), never forwarded
//! ones.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::port::Outgoing;
use crate::port_id::PortId;

/// Which way a captured frame went through the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received on the port.
    In,
    /// Sent out of the port.
    Out,
}

/// Which frames a tap wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Filter {
    /// The port.
    pub port: PortId,
    /// Received frames.
    pub inbound: bool,
    /// Sent frames.
    pub outbound: bool,
}

impl Filter {
    fn wants(&self, port: PortId, direction: Direction) -> bool {
        self.port == port
            && match direction {
                Direction::In => self.inbound,
                Direction::Out => self.outbound,
            }
    }
}

/// One captured frame.
#[derive(Debug, Clone)]
pub struct Captured {
    /// When its batch was received or sent.
    pub time: SystemTime,
    /// In or out.
    pub direction: Direction,
    /// The worker (queue) that handled it.
    pub queue: usize,
    /// The Ethernet frame.
    pub frame: Vec<u8>,
}

/// Where a tap's frames go, and what bounds them.
#[derive(Debug, Clone)]
pub struct Sink {
    /// The reader's channel (bounded in frames).
    pub sender: SyncSender<Captured>,
    /// Frames lost: no room in the channel or in the byte budget.
    pub lost: Arc<AtomicU64>,
    /// Bytes of frames in the channel now: the hub adds a frame's length
    /// as it sends it, the reader takes it off as it writes it.
    pub queued: Arc<AtomicUsize>,
    /// The most bytes the channel may hold.
    pub max_bytes: usize,
}

impl Sink {
    fn offer(&self, captured: Captured) {
        let len = captured.frame.len();
        // Relaxed: a budget, not a handover; the channel orders the frames.
        if self.queued.load(Ordering::Relaxed) + len > self.max_bytes {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.queued.fetch_add(len, Ordering::Relaxed);
        match self.sender.try_send(captured) {
            Ok(()) => {}
            // Full, or the reader left (it detaches soon).
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(len, Ordering::Relaxed);
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

struct Tap {
    id: u64,
    filter: Filter,
    sink: Sink,
}

/// The taps of one worker.
#[derive(Default)]
pub struct CaptureHub {
    /// Whether any tap is attached: what the worker reads once per batch.
    active: AtomicBool,
    taps: Mutex<Vec<Tap>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for CaptureHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureHub")
            .field("active", &self.active.load(Ordering::Relaxed))
            .finish()
    }
}

impl CaptureHub {
    /// Whether a tap is attached. Relaxed: a worker that sees a new tap one
    /// batch late misses one batch of a capture that just started.
    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    fn taps(&self) -> std::sync::MutexGuard<'_, Vec<Tap>> {
        self.taps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Attaches a tap that sends matching frames to `sink`; returns its
    /// id.
    pub fn attach(&self, filter: Filter, sink: Sink) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut taps = self.taps();
        taps.push(Tap { id, filter, sink });
        self.active.store(true, Ordering::Relaxed);
        id
    }

    /// Detaches tap `id`.
    pub fn detach(&self, id: u64) {
        let mut taps = self.taps();
        taps.retain(|tap| tap.id != id);
        self.active.store(!taps.is_empty(), Ordering::Relaxed);
    }

    /// Offers the frames of one batch that went `direction` through `port`.
    pub fn offer<'a>(
        &self,
        queue: usize,
        port: PortId,
        direction: Direction,
        frames: impl Iterator<Item = Outgoing<'a>> + Clone,
    ) {
        let taps = self.taps();
        let time = SystemTime::now();
        for tap in taps.iter().filter(|tap| tap.filter.wants(port, direction)) {
            for frame in frames.clone() {
                let mut bytes = Vec::new();
                let frame = frame.ethernet(&mut bytes).to_vec();
                let captured = Captured {
                    time,
                    direction,
                    queue,
                    frame,
                };
                tap.sink.offer(captured);
            }
        }
    }
}
