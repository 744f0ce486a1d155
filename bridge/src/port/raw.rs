//! Raw ports: an existing interface (a NIC, a veth) through AF_PACKET, one
//! socket per worker joined in a hash fanout group, so that a flow stays on
//! one worker and its frames keep their order.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sys::{self, RxRing, VNET_HDR_LEN};
use super::{Port, PortError, RxBatch, RxReport};

/// One packet socket on an interface.
#[derive(Debug)]
pub struct RawPort {
    name: String,
    fd: OwnedFd,
    ring: RxRing,
}

impl RawPort {
    /// Opens `queues` sockets on interface `name`, in one fanout group, and
    /// brings the interface up.
    pub fn open(name: &str, queues: usize) -> io::Result<Vec<RawPort>> {
        let ifindex = sys::if_index(name)?;
        // Fanout groups are per network namespace; this process and
        // interface make a group id that other bridges will not pick.
        // A single socket needs no fanout, and skips its per-frame flow hash.
        let group =
            (queues > 1).then(|| (std::process::id() as u16) ^ (ifindex as u16).rotate_left(8));
        sys::set_link_up(name)?;
        (0..queues.max(1))
            .map(|_| {
                sys::open_packet_socket(ifindex, group).map(|(fd, ring)| RawPort {
                    name: name.to_owned(),
                    fd,
                    ring,
                })
            })
            .collect()
    }
}

impl Port for RawPort {
    const METADATA_LEN: usize = VNET_HDR_LEN;

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    /// Copies frames out of the receive ring, putting back VLAN tags the
    /// kernel took off.
    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        let mut report = RxReport::default();
        if batch.is_full() {
            return Ok(report);
        }
        self.ring.read(|frame| {
            let buffer = batch.next_buffer().expect("checked before each frame");
            match sys::copy_ring_frame(&frame, buffer) {
                Some(len) => {
                    batch.commit(len);
                    report.received += 1;
                }
                None => report.oversize += 1,
            }
            !batch.is_full()
        });
        Ok(report)
    }

    fn send_batch<'a>(
        &mut self,
        frames: impl Iterator<Item = &'a [u8]>,
    ) -> Result<usize, PortError> {
        sys::send_packets(self.fd.as_raw_fd(), frames).map_err(|source| PortError::Send {
            port: self.name.clone(),
            source,
        })
    }
}
