//! Ports: where frames come from and go to, in batches.
//!
//! A port is the bridge's (it has an id, an fdb, options); each worker owns
//! one queue of every port, a [`Queue`] (`TapQueue`, `RawQueue`,
//! `VxlanQueue`, or `LinkQueue` for any of them), and moves frames between
//! them. Receiving fills a reusable [`RxBatch`], so the
//! forwarding path allocates nothing per frame. Each kind of port keeps its
//! own system calls beside it (`tap/sys.rs`, `raw/sys.rs`, `vxlan/sys.rs`); what they share
//! is in `fd.rs` (descriptors), `netdev.rs` (interface ioctls) and
//! `wake.rs` (the worker's poll and eventfd).

mod fd;
pub mod link;
pub mod memory;
pub mod netdev;
pub mod placement;
pub mod raw;
pub mod tap;
pub mod vhost;
pub mod vxlan;
pub(crate) mod wake;

pub use link::LinkQueue;
pub use memory::{MemoryPeer, MemoryQueue};
pub use raw::RawQueue;
pub use tap::TapQueue;
pub use vhost::VhostQueue;
pub use vxlan::VxlanQueue;

/// The length of the virtio-net header before every frame of a real port.
pub use crate::wire::vnet::VNET_HDR_LEN;

use std::io;
use std::os::fd::RawFd;

use crate::wire::vxlan::Vtep;

/// A fixed set of reusable receive buffers.
///
/// Frames are packed one after the other (each at a 64-byte boundary), and
/// the next buffer is whatever room follows the last frame: a batch of
/// 64-byte frames spans a few KiB, not `frames * frame_capacity` bytes, and
/// the room behind it (enough for every frame at full size) is touched only
/// by large frames.
#[derive(Debug)]
pub struct RxBatch {
    slab: Box<[u8]>,
    frame_capacity: usize,
    starts: Box<[usize]>,
    lens: Box<[usize]>,
    /// Per frame, the VTEP it came from: empty until a port names one (a
    /// VXLAN port's frames), so that other ports' batches pay nothing.
    vteps: Vec<Option<Vtep>>,
    count: usize,
    /// Where the next frame goes.
    end: usize,
}

/// Frame starts are aligned to a cache line.
const FRAME_ALIGN: usize = 64;

fn align_frame(offset: usize) -> usize {
    offset.next_multiple_of(FRAME_ALIGN)
}

/// A frame longer than a batch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame of {len} bytes exceeds the {capacity}-byte buffer")]
pub struct Oversize {
    /// The frame's length.
    pub len: usize,
    /// The buffer's size.
    pub capacity: usize,
}

impl RxBatch {
    /// Room for `frames` frames of up to `frame_capacity` bytes each.
    pub fn new(frames: usize, frame_capacity: usize) -> RxBatch {
        assert!(
            frames > 0 && frame_capacity > 0,
            "an empty batch holds nothing"
        );
        RxBatch {
            // Room for every frame at full size, each aligned: the pages of
            // that room a batch of small frames never reaches stay untouched.
            slab: vec![0; frames * align_frame(frame_capacity)].into_boxed_slice(),
            frame_capacity,
            starts: vec![0; frames].into_boxed_slice(),
            lens: vec![0; frames].into_boxed_slice(),
            vteps: Vec::new(),
            count: 0,
            end: 0,
        }
    }

    /// How many frames the batch holds when full.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// The largest frame a buffer holds.
    pub fn frame_capacity(&self) -> usize {
        self.frame_capacity
    }

    /// How many frames the batch holds now.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch holds no frame.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether no more frames fit.
    pub fn is_full(&self) -> bool {
        self.count == self.lens.len()
    }

    /// Forgets every frame, keeping the buffers.
    pub fn clear(&mut self) {
        self.count = 0;
        self.end = 0;
        self.vteps.clear();
    }

    /// Frame `index`.
    ///
    /// # Panics
    /// When `index >= self.len()`.
    #[inline]
    pub fn frame(&self, index: usize) -> &[u8] {
        assert!(index < self.count, "frame {index} of {}", self.count);
        let start = self.starts[index];
        &self.slab[start..start + self.lens[index]]
    }

    /// The VTEP frame `index` came from, if a VXLAN port said.
    #[inline]
    pub fn vtep(&self, index: usize) -> Option<Vtep> {
        debug_assert!(index < self.count, "frame {index} of {}", self.count);
        self.vteps.get(index).copied().flatten()
    }

    /// Says that the last frame came from `vtep`.
    ///
    /// # Panics
    /// When the batch is empty.
    pub fn set_last_vtep(&mut self, vtep: Vtep) {
        assert!(self.count > 0, "no frame to name a VTEP of");
        self.vteps.resize(self.count, None);
        self.vteps[self.count - 1] = Some(vtep);
    }

    /// The frames, in order of arrival.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        (0..self.count).map(|index| self.frame(index))
    }

    /// The next free buffer, for a port to receive into; `None` when full.
    /// Nothing is added until [`commit`](Self::commit).
    pub fn next_buffer(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        // In bounds: each of the `count` frames before took at most
        // align_frame(frame_capacity) bytes.
        Some(&mut self.slab[self.end..self.end + self.frame_capacity])
    }

    /// Adds the frame of `len` bytes written into [`next_buffer`](Self::next_buffer).
    ///
    /// # Panics
    /// When the batch is full or `len` exceeds the buffer size.
    pub fn commit(&mut self, len: usize) {
        assert!(!self.is_full() && len <= self.frame_capacity);
        self.starts[self.count] = self.end;
        self.lens[self.count] = len;
        self.count += 1;
        self.end = align_frame(self.end + len);
    }

    /// The last frame's buffer, with the room it may grow into (a whole
    /// buffer from its start), and its length: for a port that joins
    /// segments of one flow into one frame.
    pub fn last_mut(&mut self) -> Option<(&mut [u8], usize)> {
        let last = self.count.checked_sub(1)?;
        let start = self.starts[last];
        let len = self.lens[last];
        Some((&mut self.slab[start..start + self.frame_capacity], len))
    }

    /// Sets the last frame's length, after [`last_mut`](Self::last_mut)
    /// grew it.
    ///
    /// # Panics
    /// When the batch is empty or `len` exceeds the buffer size.
    pub fn set_last_len(&mut self, len: usize) {
        assert!(self.count > 0 && len <= self.frame_capacity);
        let last = self.count - 1;
        self.lens[last] = len;
        self.end = align_frame(self.starts[last] + len);
    }

    /// Copies `frame` into the next free buffer. Returns `Ok(false)` when the
    /// batch is full.
    pub fn push(&mut self, frame: &[u8]) -> Result<bool, Oversize> {
        let capacity = self.frame_capacity;
        let Some(buffer) = self.next_buffer() else {
            return Ok(false);
        };
        if frame.len() > capacity {
            return Err(Oversize {
                len: frame.len(),
                capacity,
            });
        }
        buffer[..frame.len()].copy_from_slice(frame);
        self.commit(frame.len());
        Ok(true)
    }
}

/// What a port reports about one receive call beyond the frames themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxReport {
    /// Frames added to the batch.
    pub received: usize,
    /// Frames dropped because they did not fit a buffer.
    pub oversize: usize,
    /// Frames the port handed over malformed (a ring entry whose offsets
    /// point outside its block, say), dropped.
    pub malformed: usize,
}

/// What happened to the frames of one [`Queue::send_batch`]: each frame
/// offered is counted in exactly one of `sent`, `dropped`, `refused`, or,
/// when a `fault` stopped the batch, left unsent.
#[derive(Debug, Default)]
pub struct SendReport {
    /// Frames the port took.
    pub sent: usize,
    /// Their Ethernet bytes (without the port's metadata).
    pub sent_bytes: u64,
    /// Frames dropped because the port's queue was full (EAGAIN, ENOBUFS).
    pub dropped: usize,
    /// Frames the port refused one by one (larger than the egress MTU, an
    /// offload header the egress kernel rejects): counted, and the rest of
    /// the batch still goes.
    pub refused: usize,
    /// An error that says the port itself cannot send now (link down,
    /// device gone); the frames after it were not tried.
    pub fault: Option<io::Error>,
}

impl SendReport {
    /// How many frames were sent, or the fault that stopped the batch: for
    /// callers that only care whether the port works.
    pub fn into_result(self) -> io::Result<usize> {
        match self.fault {
            Some(error) => Err(error),
            None => Ok(self.sent),
        }
    }

    /// Files one frame's outcome: `Ok(len)` sent, or the error it got.
    /// Returns false when the error is a port fault, which ends the batch.
    pub fn record(&mut self, outcome: io::Result<usize>) -> bool {
        match outcome {
            Ok(len) => {
                self.sent += 1;
                self.sent_bytes += len as u64;
                true
            }
            Err(error) => match FaultKind::of(&error) {
                FaultKind::QueueFull => {
                    self.dropped += 1;
                    true
                }
                FaultKind::Frame => {
                    self.refused += 1;
                    true
                }
                FaultKind::Port | FaultKind::Gone => {
                    self.fault = Some(error);
                    false
                }
            },
        }
    }
}

/// What an error from a port means for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The queue is full: this frame is dropped, the next may pass.
    QueueFull,
    /// This frame was refused (EMSGSIZE, EINVAL, ...); others may pass.
    Frame,
    /// The port cannot pass frames now (ENETDOWN, EIO): back off, retry.
    Port,
    /// The device is gone (ENXIO, ENODEV, EBADFD): it will not come back.
    Gone,
}

impl FaultKind {
    /// Classifies `error` as a send or receive on a port returned it.
    pub fn of(error: &io::Error) -> FaultKind {
        match error.raw_os_error() {
            Some(libc::EAGAIN | libc::ENOBUFS) => FaultKind::QueueFull,
            Some(libc::ENXIO | libc::ENODEV | libc::EBADFD | libc::EBADF) => FaultKind::Gone,
            Some(libc::ENETDOWN | libc::EIO) => FaultKind::Port,
            _ => FaultKind::Frame,
        }
    }
}

/// An I/O failure on a port.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// Receiving failed.
    #[error("{port}: receive failed: {source}")]
    Recv {
        /// The port's name.
        port: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// Sending failed.
    #[error("{port}: send failed: {source}")]
    Send {
        /// The port's name.
        port: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The port reported an error of its own (POLLERR, SO_ERROR).
    #[error("{port}: {source}")]
    Pending {
        /// The port's name.
        port: String,
        /// What the system said.
        source: std::io::Error,
    },
}

impl PortError {
    /// What the system said.
    pub fn source_error(&self) -> &io::Error {
        match self {
            PortError::Recv { source, .. }
            | PortError::Send { source, .. }
            | PortError::Pending { source, .. } => source,
        }
    }
}

/// One queue of a bridge port, owned by one worker.
pub trait Queue: Send {
    /// Bytes before the Ethernet frame in every buffer (the virtio-net
    /// header of real ports), passed through unchanged.
    const METADATA_LEN: usize = 0;

    /// The port's name, for counters and logs.
    fn name(&self) -> &str;

    /// A descriptor that polls readable when frames wait, if there is one;
    /// without one the worker polls the port without sleeping.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }

    /// Receives frames into the batch's free buffers without blocking.
    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError>;

    /// Sends the frames, in order, and says what became of each.
    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = &'a [u8]>) -> SendReport;

    /// [`send_batch`](Self::send_batch) of frames each with the VTEP its
    /// destination's fdb entry names: a VXLAN port sends a frame there, or
    /// to its flood list for `None`; other ports have no VTEPs.
    fn send_batch_to<'a>(
        &mut self,
        frames: impl Iterator<Item = (&'a [u8], Option<Vtep>)>,
    ) -> SendReport {
        self.send_batch(frames.map(|(frame, _)| frame))
    }

    /// Reads and clears an error the port signals out of band (POLLERR on
    /// its descriptor): a packet socket's SO_ERROR, a tap's detached queue.
    fn take_error(&mut self) -> Option<io::Error> {
        None
    }

    /// Whether the port's link can pass frames now; asked before a port in
    /// back-off is tried again.
    fn link_ready(&self) -> bool {
        true
    }

    /// A descriptor that polls readable when the port's link may have come
    /// back, if there is one: a worker sleeping while the port backs off
    /// then tries it at once rather than at the back-off's end. It is
    /// emptied by [`link_ready`](Self::link_ready).
    fn link_fd(&self) -> Option<RawFd> {
        None
    }

    /// Whether the port's link went down with nothing failing on the
    /// port: asked about once a second of ports passing frames. A tap
    /// whose device was set down (in whatever namespace it lives) fails no
    /// receive, and no send that is not tried; a raw port's link is the
    /// link monitor's to watch.
    fn link_lost(&self) -> bool {
        false
    }

    /// Whether finding the port's queue empty costs a system call (a read
    /// that fails with EAGAIN) rather than a look at shared memory. When
    /// every port is so and a round drained them all, the worker sleeps in
    /// poll(2), which returns at once if frames came meanwhile, instead of
    /// paying an empty read per port for another round.
    fn empty_read_is_syscall(&self) -> bool {
        false
    }

    /// Whether frames wait inside the port that its descriptor does not
    /// show: taken from a socket it shares with another port (VXLAN ports
    /// of one address). The worker reads such a port before it sleeps.
    fn pending(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::RxBatch;

    fn fill(batch: &mut RxBatch, lens: &[usize]) {
        let capacity = batch.frame_capacity();
        for (n, &len) in lens.iter().enumerate() {
            let buffer = batch.next_buffer().expect("room for the frame");
            assert_eq!(buffer.len(), capacity);
            buffer[..len].fill(n as u8);
            batch.commit(len);
        }
    }

    #[test]
    fn small_frames_are_packed_and_read_back_whole() {
        let mut batch = RxBatch::new(64, 65_600);
        let lens: Vec<usize> = (0..64).map(|n| 60 + n).collect();
        fill(&mut batch, &lens);
        assert!(batch.is_full() && batch.next_buffer().is_none());
        for (n, frame) in batch.iter().enumerate() {
            assert_eq!(frame.len(), lens[n]);
            assert!(frame.iter().all(|&b| b == n as u8), "frame {n} changed");
        }
        // 64 small frames, each at a 64-byte boundary: a few KiB, not 4 MiB.
        let first = batch.frame(0).as_ptr() as usize;
        let last = batch.frame(63).as_ptr() as usize;
        assert!(
            last - first < 64 * 192,
            "frames spread over {} bytes",
            last - first
        );
        batch.clear();
        assert!(batch.is_empty());
        assert_eq!(batch.next_buffer().unwrap().as_ptr() as usize, first);
    }

    #[test]
    fn every_frame_may_be_full_size() {
        let capacity = 1000; // not a multiple of the alignment
        let mut batch = RxBatch::new(8, capacity);
        fill(&mut batch, &[capacity; 8]);
        for (n, frame) in batch.iter().enumerate() {
            assert_eq!(frame.len(), capacity);
            assert!(frame.iter().all(|&b| b == n as u8));
        }
        batch.clear();
        fill(
            &mut batch,
            &[1, capacity, 7, capacity, 0, capacity, 3, capacity],
        );
        assert_eq!(batch.frame(4).len(), 0);
        assert!(batch.frame(7).iter().all(|&b| b == 7));
    }
}
