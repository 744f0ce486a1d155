//! Ports: where frames come from and go to, in batches.
//!
//! A worker owns one queue of every port and moves frames between them
//! through a [`Port`]. Receiving fills a reusable [`RxBatch`], so the
//! forwarding path allocates nothing per frame. Each kind of port keeps its
//! own system calls beside it (`tap/sys.rs`, `raw/sys.rs`); what they share
//! is in `fd.rs` (descriptors), `netdev.rs` (interface ioctls) and
//! `wake.rs` (the worker's poll and eventfd).

mod fd;
pub mod link;
pub mod memory;
pub mod netdev;
pub mod placement;
pub mod raw;
pub mod tap;
pub(crate) mod wake;

pub use link::LinkPort;
pub use memory::{MemoryPeer, MemoryPort};
pub use raw::RawPort;
pub use tap::TapPort;

/// The length of the virtio-net header before every frame of a real port.
pub const VNET_HDR_LEN: usize = crate::wire::VnetHeader::<&[u8]>::LEN;

use std::io;
use std::os::fd::RawFd;

/// A fixed set of reusable receive buffers.
#[derive(Debug)]
pub struct RxBatch {
    slab: Box<[u8]>,
    frame_capacity: usize,
    lens: Box<[usize]>,
    count: usize,
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
            slab: vec![0; frames * frame_capacity].into_boxed_slice(),
            frame_capacity,
            lens: vec![0; frames].into_boxed_slice(),
            count: 0,
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
    }

    /// Frame `index`.
    ///
    /// # Panics
    /// When `index >= self.len()`.
    #[inline]
    pub fn frame(&self, index: usize) -> &[u8] {
        assert!(index < self.count, "frame {index} of {}", self.count);
        let start = index * self.frame_capacity;
        &self.slab[start..start + self.lens[index]]
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
        let start = self.count * self.frame_capacity;
        Some(&mut self.slab[start..start + self.frame_capacity])
    }

    /// Adds the frame of `len` bytes written into [`next_buffer`](Self::next_buffer).
    ///
    /// # Panics
    /// When the batch is full or `len` exceeds the buffer size.
    pub fn commit(&mut self, len: usize) {
        assert!(!self.is_full() && len <= self.frame_capacity);
        self.lens[self.count] = len;
        self.count += 1;
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

/// What happened to the frames of one [`Port::send_batch`]: each frame
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
pub trait Port: Send {
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
}
