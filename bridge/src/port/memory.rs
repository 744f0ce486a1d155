//! An in-memory port, for tests and benchmarks: the bridge side is a
//! [`MemoryQueue`], the other side a [`MemoryPeer`] that injects frames and
//! collects what the bridge sent. Buffers are recycled, so a benchmark that
//! drains what it injects allocates nothing in steady state.
//!
//! Like a vhost-user port, an in-memory port lends the worker the unicast
//! frames longer than [`LENT_HEAD`]: their first bytes are copied into the
//! batch and the rest stays in the injected buffer until the batch has
//! been forwarded, so that the tests and benchmarks that use these ports
//! take the same path through the pipeline as a guest's frames.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Outgoing, PortError, Queue, RxBatch, RxReport, SendReport, LENT_HEAD};

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
    /// The buffers whose frames a receive lent to the batch, held (the
    /// batch holds this too) until no batch refers to them.
    lent: Arc<Mutex<Vec<Vec<u8>>>>,
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

fn lock_lent(lent: &Mutex<Vec<Vec<u8>>>) -> MutexGuard<'_, Vec<Vec<u8>>> {
    lent.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
            lent: Arc::default(),
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
        // The buffers lent before go back to the peer once no batch holds
        // them (the worker clears its batch before each receive).
        let mut lent = lock_lent(&self.lent);
        if Arc::strong_count(&self.lent) == 1 {
            queues.spare.append(&mut lent);
        }
        while !batch.is_full() {
            let Some(frame) = queues.to_bridge.pop_front() else {
                break;
            };
            let lends = frame.len() > LENT_HEAD && frame[0] & 1 == 0;
            if lends && frame.len() <= batch.frame_capacity() {
                batch.push(&frame[..LENT_HEAD]).expect("room for the head");
                batch.keep(&self.lent);
                let rest = &frame[LENT_HEAD..];
                // SAFETY: the buffer goes into `lent`, which the batch now
                // holds, and leaves it only when no batch holds `lent`:
                // its heap bytes stay put until the batch is cleared
                // (moving a `Vec` does not move them).
                unsafe { batch.lend_rest(rest.as_ptr(), rest.len()) };
                lent.push(frame);
                report.received += 1;
                continue;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst0: u8, len: usize) -> Vec<u8> {
        let mut frame: Vec<u8> = (0..len).map(|n| n as u8).collect();
        frame[0] = dst0;
        frame
    }

    #[test]
    fn long_unicast_frames_are_lent_until_no_batch_holds_them() {
        let (mut port, peer) = MemoryQueue::pair("m0");
        let (long, group, short) = (frame(2, 300), frame(1, 300), frame(2, 64));
        peer.inject_all([&long[..], &group[..], &short[..]]);
        let mut batch = RxBatch::new(8, 2048);
        assert_eq!(port.recv_batch(&mut batch).unwrap().received, 3);
        assert!(batch.is_lent(0), "a long unicast frame is lent");
        assert!(!batch.is_lent(1), "a group-addressed frame is copied");
        assert!(!batch.is_lent(2), "a frame of LENT_HEAD bytes is copied");
        let lent = batch.frame(0);
        assert_eq!(lent.eth, &long[..LENT_HEAD]);
        assert_eq!(lent.ethernet(), long);
        assert_eq!(batch.frame(1).ethernet(), group);
        // Sent on as it came: the lent bytes copied once, to the peer.
        let sent = port.send_batch(batch.iter().map(Outgoing::from));
        assert_eq!(sent.sent, 3);
        assert_eq!(peer.take_sent(), vec![long.clone(), group, short]);
        // Held while the batch is: a receive meanwhile recycles nothing.
        let spare = lock(&port.queues).spare.len();
        port.recv_batch(&mut batch).unwrap();
        assert_eq!(lock(&port.queues).spare.len(), spare);
        assert_eq!(lock_lent(&port.lent).len(), 1);
        assert_eq!(batch.frame(0).ethernet(), long, "still readable");
        batch.clear();
        port.recv_batch(&mut batch).unwrap();
        assert!(lock_lent(&port.lent).is_empty(), "back to the peer");
        assert_eq!(lock(&port.queues).spare.len(), spare + 1);
    }
}
