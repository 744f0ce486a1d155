//! Raw ports: an existing interface (a NIC, a veth, a VM's tap on its host
//! side) through AF_PACKET, one socket per worker joined in a hash fanout
//! group, so that a flow stays on one worker and its frames keep their
//! order.

pub mod block;
mod ring;
pub mod slot;
mod sys;

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use super::{
    fd, netdev, Outgoing, PortError, Queue, RxBatch, RxReport, SendReport, LENT_HEAD, VNET_HDR_LEN,
};
use crate::wire::tag::{push_into, EmitError};
use block::RingFrame;
use ring::{RxRing, Taken};
pub use ring::{DEFAULT_RING_BYTES, MAX_RING_BYTES, MIN_RING_BYTES};
use sys::Fanout;

/// How a raw port's receive ring hands frames over (`--rx-ring`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RingKind {
    /// TPACKET_V2: each frame as it arrives, waking the worker at once;
    /// frames longer than a 2 KiB slot come through the socket's queue.
    #[default]
    Frame,
    /// TPACKET_V3: blocks of frames, handed over when full or after 1 ms:
    /// fewer wake-ups under load, up to 1 ms more latency per frame on a
    /// quiet link.
    Block,
}

impl RingKind {
    /// Its name on the command line and in the config file.
    pub fn name(self) -> &'static str {
        match self {
            RingKind::Frame => "frame",
            RingKind::Block => "block",
        }
    }
}

/// One packet socket on an interface.
#[derive(Debug)]
pub struct RawQueue {
    name: String,
    ifindex: u32,
    /// Whether opening it brought the interface up (it was down).
    raised: bool,
    fd: OwnedFd,
    ring: RxRing,
}

impl RawQueue {
    /// Opens `queues` sockets on interface `name` with frame rings, in one
    /// fanout group when there are several, and brings the interface up.
    pub fn open(name: &str, queues: usize) -> io::Result<Vec<RawQueue>> {
        Self::open_with(name, queues, RingKind::default(), DEFAULT_RING_BYTES)
    }

    /// Whether opening it brought its interface up: the interface was down
    /// before, and whoever closes the port for good may put it back.
    pub fn raised_link(&self) -> bool {
        self.raised
    }

    /// The same, with receive rings of layout `ring` and `ring_bytes`
    /// each (rounded up to whole kernel blocks: [`RxRing::new`]).
    pub fn open_with(
        name: &str,
        queues: usize,
        ring: RingKind,
        ring_bytes: usize,
    ) -> io::Result<Vec<RawQueue>> {
        let ifindex = netdev::if_index(name)?;
        let raised = netdev::set_link_up(name)?;
        // A single socket needs no fanout, and skips its per-frame flow hash.
        let mut fanout = if queues > 1 {
            Fanout::New
        } else {
            Fanout::None
        };
        (0..queues.max(1))
            .map(|_| {
                let (fd, ring, group) = sys::open_packet_socket(ifindex, fanout, ring, ring_bytes)?;
                if let Some(id) = group {
                    fanout = Fanout::Join(id);
                }
                Ok(RawQueue {
                    name: name.to_owned(),
                    ifindex,
                    raised,
                    fd,
                    ring,
                })
            })
            .collect()
    }
}

impl Queue for RawQueue {
    const METADATA_LEN: usize = VNET_HDR_LEN;

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    /// Takes frames from the receive ring, putting back VLAN tags the
    /// kernel took off. A unicast frame longer than [`LENT_HEAD`] is lent:
    /// its header and first bytes (with the tag) copied, the rest read
    /// where it lies until [`release`](Queue::release) hands its slot or
    /// block back. Any other frame is copied whole.
    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        let mut report = RxReport::default();
        // Frames lent by an earlier receive whose batch was not released
        // (a worker that stopped between).
        self.ring.release();
        if batch.is_full() {
            return Ok(report);
        }
        let mut malformed = 0;
        self.ring.read(
            &self.fd,
            |frame, mapping| {
                let lent = take(frame, batch, mapping, &mut report);
                Taken {
                    lent,
                    more: !batch.is_full(),
                }
            },
            |error| {
                malformed += 1;
                log::debug!("{}: malformed ring entry: {error}", self.name);
            },
        );
        report.malformed += malformed;
        Ok(report)
    }

    /// Hands back the slots and blocks of the frames the last receive
    /// lent.
    fn release(&mut self) {
        self.ring.release();
    }

    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = Outgoing<'a>>) -> SendReport {
        sys::send_packets(&self.fd, frames)
    }

    /// The socket's SO_ERROR: ENETDOWN when the link went down or the
    /// interface went away, which this tells apart as ENODEV.
    fn take_error(&mut self) -> Option<io::Error> {
        let error = self
            .ring
            .take_error()
            .or_else(|| fd::take_socket_error(self.fd.as_fd()))?;
        // Gone only when the kernel says so: a look that fails for want of
        // descriptors leaves it a link down, retried.
        if error.raw_os_error() == Some(libc::ENETDOWN)
            && matches!(netdev::is_still(&self.name, self.ifindex), Ok(false))
        {
            return Some(io::Error::from_raw_os_error(libc::ENODEV));
        }
        Some(error)
    }

    fn link_ready(&self) -> bool {
        matches!(netdev::is_still(&self.name, self.ifindex), Ok(true))
            && netdev::link_state(&self.name).is_ok_and(|state| state.running)
    }
}

/// Takes `frame` into `batch`'s next buffer, lending its bytes past
/// [`LENT_HEAD`] when it is a unicast frame in the ring (group-addressed
/// frames are read further by snooping and spanning tree: copied whole).
/// Returns whether it was lent; counts it in `report`.
#[inline]
fn take(
    frame: RingFrame<'_>,
    batch: &mut RxBatch,
    mapping: &std::sync::Arc<ring::Mapping>,
    report: &mut RxReport,
) -> bool {
    let buffer = batch.next_buffer().expect("checked before each frame");
    if frame.truncated {
        report.oversize += 1;
        return false;
    }
    // The ring's parsers cut the header to its length.
    debug_assert_eq!(frame.vnet.len(), VNET_HDR_LEN);
    let bytes = frame.frame;
    let lend = frame.in_ring && bytes.len() > LENT_HEAD && bytes[0] & 1 == 0;
    let kept = if lend { &bytes[..LENT_HEAD] } else { bytes };
    match push_into(frame.vnet, kept, frame.vlan, buffer) {
        Ok(len) => {
            batch.commit(len);
            report.received += 1;
            if lend {
                ring::Mapping::lend(mapping, batch, &bytes[LENT_HEAD..]);
            }
            lend
        }
        Err(EmitError::Oversize { .. }) => {
            report.oversize += 1;
            false
        }
        Err(EmitError::Runt) => {
            report.malformed += 1;
            false
        }
    }
}
