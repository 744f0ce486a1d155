//! Ports: where frames come from and go to, in batches.
//!
//! A port is the bridge's (it has an id, an fdb, options); each worker owns
//! one queue of every port, a [`Queue`] (`TapQueue`, `RawQueue`,
//! `VxlanQueue`, or `LinkQueue` for any of them), and moves frames between
//! them. Receiving fills a reusable [`RxBatch`], so the
//! forwarding path allocates nothing per frame: a port copies its frames
//! into the batch's buffers, or lends them where they arrived (a
//! vhost-user guest's own buffers, a raw port's receive ring) until the
//! batch is forwarded, and then
//! each frame is copied once, into where it leaves (`frame.rs`). Each kind of port keeps its
//! own system calls beside it (`tap/sys.rs`, `raw/sys.rs`, `vxlan/sys.rs`); what they share
//! is in `fd.rs` (descriptors), `netdev.rs` (interface ioctls) and
//! `wake.rs` (the worker's poll and eventfd).

mod batch;
pub(crate) mod cache;
pub mod copy;
mod fd;
mod frame;
pub mod link;
pub mod memory;
pub mod netdev;
pub mod placement;
pub mod raw;
pub mod tap;
pub mod vhost;
pub mod vxlan;
pub(crate) mod wake;

pub use batch::{Oversize, RxBatch};
pub use frame::{Frame, Lent, Outgoing, LENT_HEAD};
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

    /// Takes back the frames the last [`recv_batch`](Self::recv_batch)
    /// lent, once the batch has been forwarded: a vhost-user port returns
    /// the guest's buffers to it, a raw port its ring's slots or blocks to
    /// the kernel. Ports that copy their frames into the batch lend none.
    /// The next `recv_batch` takes them back too.
    fn release(&mut self) {}

    /// Sends the frames, in order, and says what became of each.
    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = Outgoing<'a>>) -> SendReport;

    /// [`send_batch`](Self::send_batch) of frames each with the VTEP its
    /// destination's fdb entry names: a VXLAN port sends a frame there, or
    /// to its flood list for `None`; other ports have no VTEPs.
    fn send_batch_to<'a>(
        &mut self,
        frames: impl Iterator<Item = (Outgoing<'a>, Option<Vtep>)>,
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

    /// Called before the worker sleeps in poll(2) on the port's
    /// descriptor, after a round found the port empty: makes frames that
    /// come from now on poll it readable. False when frames came
    /// meanwhile, and the worker polls again instead of sleeping. A
    /// vhost-user port asks its driver to kick only here: a driver asked
    /// to kick pays a system call per kick, which a busy worker need not
    /// cost it. Ports whose descriptor polls readable by itself need
    /// nothing.
    fn before_sleep(&mut self) -> bool {
        true
    }

    /// Whether frames wait inside the port that its descriptor does not
    /// show: taken from a socket it shares with another port (VXLAN ports
    /// of one address). The worker reads such a port before it sleeps.
    fn pending(&self) -> bool {
        false
    }
}
