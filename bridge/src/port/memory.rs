//! An in-memory port, for tests and benchmarks: the bridge side is a
//! [`MemoryQueue`], the other side a [`MemoryPeer`] that injects frames and
//! collects what the bridge sent. Buffers are recycled, so a benchmark that
//! drains what it injects allocates nothing in steady state.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Outgoing, PortError, Queue, RxBatch, RxReport, SendReport};

#[derive(Debug, Default)]
struct Queues {
    to_bridge: VecDeque<Vec<u8>>,
    from_bridge: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
    /// The most frames `from_bridge` holds; the bridge's sends beyond it are
    /// dropped, as a full transmit ring drops them.
    limit: usize,
    /// The link is down (see [`MemoryPeer::set_link`]).
    down: bool,
}

impl Queues {
    fn buffer(&mut self, frame: &[u8]) -> Vec<u8> {
        let mut buffer = self.spare.pop().unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(frame);
        buffer
    }
}

/// The bridge's side of an in-memory link.
#[derive(Debug)]
pub struct MemoryQueue {
    name: String,
    queues: Arc<Mutex<Queues>>,
}

/// The far side of an in-memory link: a station, or a whole segment.
#[derive(Debug, Clone)]
pub struct MemoryPeer {
    queues: Arc<Mutex<Queues>>,
}

fn lock(queues: &Mutex<Queues>) -> MutexGuard<'_, Queues> {
    // A panic elsewhere while holding the lock leaves plain queues behind,
    // still consistent: carry on with them.
    queues
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MemoryQueue {
    /// The default number of sent frames a peer can leave uncollected.
    pub const DEFAULT_LIMIT: usize = 1 << 16;

    /// A linked port and peer.
    pub fn pair(name: impl Into<String>) -> (MemoryQueue, MemoryPeer) {
        Self::pair_with_limit(name, Self::DEFAULT_LIMIT)
    }

    /// A linked port and peer whose peer holds at most `limit` sent frames.
    pub fn pair_with_limit(name: impl Into<String>, limit: usize) -> (MemoryQueue, MemoryPeer) {
        let queues = Arc::new(Mutex::new(Queues {
            limit,
            ..Queues::default()
        }));
        let port = MemoryQueue {
            name: name.into(),
            queues: Arc::clone(&queues),
        };
        (port, MemoryPeer { queues })
    }
}

impl Queue for MemoryQueue {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        let mut queues = lock(&self.queues);
        let mut report = RxReport::default();
        while !batch.is_full() {
            let Some(frame) = queues.to_bridge.pop_front() else {
                break;
            };
            match batch.push(&frame) {
                Ok(_) => report.received += 1,
                Err(_) => report.oversize += 1,
            }
            queues.spare.push(frame);
        }
        Ok(report)
    }

    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = Outgoing<'a>>) -> SendReport {
        let mut queues = lock(&self.queues);
        let mut report = SendReport::default();
        for frame in frames {
            if queues.from_bridge.len() >= queues.limit {
                report.dropped += 1;
                continue;
            }
            let buffer = match frame.whole() {
                // No metadata here: the frame itself.
                Some(whole) if frame.meta.is_empty() => queues.buffer(whole),
                _ => {
                    let mut buffer = queues.spare.pop().unwrap_or_default();
                    buffer.clear();
                    frame.extend_into(&mut buffer);
                    buffer
                }
            };
            report.sent += 1;
            report.sent_bytes += (buffer.len() - frame.meta.len()) as u64;
            queues.from_bridge.push_back(buffer);
        }
        report
    }

    fn link_ready(&self) -> bool {
        !lock(&self.queues).down
    }

    fn link_lost(&self) -> bool {
        lock(&self.queues).down
    }
}

impl MemoryPeer {
    /// Queues a frame for the bridge to receive.
    pub fn inject(&self, frame: &[u8]) {
        let mut queues = lock(&self.queues);
        let buffer = queues.buffer(frame);
        queues.to_bridge.push_back(buffer);
    }

    /// Queues several frames for the bridge to receive.
    pub fn inject_all<'a>(&self, frames: impl IntoIterator<Item = &'a [u8]>) {
        let mut queues = lock(&self.queues);
        for frame in frames {
            let buffer = queues.buffer(frame);
            queues.to_bridge.push_back(buffer);
        }
    }

    /// Takes the link down or brings it up, as `ip link set DEV down` does
    /// to a tap's device: nothing fails, the port just stops passing
    /// frames.
    pub fn set_link(&self, up: bool) {
        lock(&self.queues).down = !up;
    }

    /// Frames injected but not yet received by the bridge.
    pub fn pending(&self) -> usize {
        lock(&self.queues).to_bridge.len()
    }

    /// Takes every frame the bridge sent here, oldest first.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        lock(&self.queues).from_bridge.drain(..).collect()
    }

    /// Hands every frame the bridge sent here to `f`, oldest first, and
    /// recycles the buffers; returns how many there were.
    pub fn drain_sent(&self, mut f: impl FnMut(&[u8])) -> usize {
        let mut queues = lock(&self.queues);
        let mut count = 0;
        while let Some(frame) = queues.from_bridge.pop_front() {
            f(&frame);
            queues.spare.push(frame);
            count += 1;
        }
        count
    }
}
