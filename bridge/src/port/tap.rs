//! Tap ports: one multi-queue tap queue per worker, with virtio-net headers
//! so that the kernel's checksum and segmentation offloads pass through.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sys::{self, VNET_HDR_LEN};
use super::{Port, PortError, RxBatch, RxReport};

/// One queue of a tap device.
#[derive(Debug)]
pub struct TapPort {
    name: String,
    fd: OwnedFd,
}

/// The queues of one tap, and whether it existed before they were opened.
#[derive(Debug)]
pub struct TapQueues {
    /// One per worker.
    pub queues: Vec<TapPort>,
    /// Whether the tap existed before (a persistent tap, which stays); one
    /// that did not vanishes when its last queue is closed.
    pub existed: bool,
}

impl TapPort {
    /// Opens `queues` queues of tap `name`, creating it if needed, and
    /// brings it up.
    pub fn open(name: &str, queues: usize) -> io::Result<TapQueues> {
        let existed = sys::if_index(name).is_ok();
        let queues = (0..queues.max(1))
            .map(|_| {
                sys::open_tap_queue(name).map(|fd| TapPort {
                    name: name.to_owned(),
                    fd,
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        sys::set_link_up(name)?;
        Ok(TapQueues { queues, existed })
    }
}

pub(super) fn recv_into(
    name: &str,
    batch: &mut RxBatch,
    mut recv: impl FnMut(&mut [u8]) -> io::Result<usize>,
) -> Result<RxReport, PortError> {
    let mut report = RxReport::default();
    while let Some(buffer) = batch.next_buffer() {
        match recv(buffer) {
            Ok(len) => {
                batch.commit(len);
                report.received += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if report.received > 0 => {
                // Report what arrived; the error shows again on the next call.
                log::trace!("{name}: receive: {e}");
                break;
            }
            Err(source) => {
                return Err(PortError::Recv {
                    port: name.to_owned(),
                    source,
                })
            }
        }
    }
    Ok(report)
}

pub(super) fn send_each<'a>(
    name: &str,
    frames: impl Iterator<Item = &'a [u8]>,
    mut send: impl FnMut(&[u8]) -> io::Result<usize>,
) -> Result<usize, PortError> {
    let mut sent = 0;
    for frame in frames {
        match send(frame) {
            Ok(_) => sent += 1,
            // A full queue drops the frame, as a full ring would.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) => {}
            Err(source) => {
                return Err(PortError::Send {
                    port: name.to_owned(),
                    source,
                })
            }
        }
    }
    Ok(sent)
}

impl Port for TapPort {
    const METADATA_LEN: usize = VNET_HDR_LEN;

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        let fd = self.fd.as_raw_fd();
        recv_into(&self.name, batch, |buf| sys::read(fd, buf))
    }

    fn send_batch<'a>(
        &mut self,
        frames: impl Iterator<Item = &'a [u8]>,
    ) -> Result<usize, PortError> {
        let fd = self.fd.as_raw_fd();
        send_each(&self.name, frames, |frame| sys::write(fd, frame))
    }
}
