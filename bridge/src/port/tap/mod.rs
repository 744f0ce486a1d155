//! Tap ports: a tap that mpbridge owns, one queue per worker, with
//! virtio-net headers so that the kernel's checksum and segmentation
//! offloads pass through. The tap's kernel side faces a namespace or the
//! host stack; a VM's tap, whose queues belong to the hypervisor, is
//! bridged as a raw port on its host side instead.

mod sys;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::{netdev, Outgoing, PortError, Queue, RxBatch, RxReport, SendReport, VNET_HDR_LEN};

/// One queue of a tap device.
#[derive(Debug)]
pub struct TapQueue {
    name: String,
    fd: OwnedFd,
}

/// The queues of one tap, and whether it existed before they were opened.
#[derive(Debug)]
pub struct TapQueues {
    /// One per worker.
    pub queues: Vec<TapQueue>,
    /// Whether the tap existed before (a persistent tap, which stays); one
    /// that did not vanishes when its last queue is closed.
    pub existed: bool,
}

/// Why a tap could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// A system call failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// An existing single-queue tap, asked for more than one queue.
    #[error(
        "tap {name} is single-queue and cannot serve {queues} workers; \
         use --workers 1, or make it multi-queue: \
         ip tuntap del mode tap name {name} && ip tuntap add mode tap multi_queue name {name}"
    )]
    SingleQueue {
        /// The tap.
        name: String,
        /// The queues asked for.
        queues: usize,
    },
    /// Another program (a hypervisor) already has a queue of the tap.
    #[error(
        "tap {name} already has a queue attached by another program (a VM?); \
         bridge such a tap as raw:{name}, its host side"
    )]
    InUse {
        /// The tap.
        name: String,
    },
}

impl TapQueue {
    /// Opens `queues` queues of tap `name`, creating it (multi-queue) if it
    /// does not exist, and brings it up. An existing tap made without
    /// multi-queue is opened as such when one queue is asked for.
    pub fn open(name: &str, queues: usize) -> Result<TapQueues, TapError> {
        let queues = queues.max(1);
        let existed = netdev::if_index(name).is_ok();
        let mut multi_queue = true;
        if existed {
            // Up with no queue attached, a tap has no carrier; with one (a
            // hypervisor's), it has. (IFF_RUNNING would tell only once the
            // kernel's link watch has run, up to a second later.)
            netdev::set_link_up(name)?;
            if sys::has_carrier(name) {
                return Err(TapError::InUse {
                    name: name.to_owned(),
                });
            }
            // sysfs shows this namespace's devices only where it was mounted
            // for it (ip netns exec does; nsenter does not): without it,
            // the tap's answer to a multi-queue attach tells.
            multi_queue = match sys::device_flags(name) {
                Ok(flags) => flags & libc::IFF_MULTI_QUEUE != 0,
                Err(_) => match sys::open_queue(name, true) {
                    Ok(fd) => {
                        drop(fd);
                        true
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => false,
                    Err(e) => return Err(e.into()),
                },
            };
            if !multi_queue && queues > 1 {
                return Err(TapError::SingleQueue {
                    name: name.to_owned(),
                    queues,
                });
            }
        }
        let queues = (0..queues)
            .map(|_| {
                sys::open_queue(name, multi_queue).map(|fd| TapQueue {
                    name: name.to_owned(),
                    fd,
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        netdev::set_link_up(name)?;
        Ok(TapQueues { queues, existed })
    }
}

fn recv_into(
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

impl Queue for TapQueue {
    const METADATA_LEN: usize = VNET_HDR_LEN;

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        let fd = self.fd.as_raw_fd();
        recv_into(&self.name, batch, |buf| super::fd::read(fd, buf))
    }

    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = Outgoing<'a>>) -> SendReport {
        let fd = self.fd.as_raw_fd();
        let mut report = SendReport::default();
        for frame in frames {
            let outcome = loop {
                match super::fd::write_frame(fd, &frame) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other.map(|_| frame.len()),
                }
            };
            if !report.record(outcome) {
                break;
            }
        }
        report
    }

    fn empty_read_is_syscall(&self) -> bool {
        true
    }

    /// A tap deleted under its queue makes the queue poll with POLLERR
    /// forever; this says so once as EBADFD.
    fn take_error(&mut self) -> Option<io::Error> {
        sys::check_attached(&self.fd).err()
    }

    fn link_ready(&self) -> bool {
        sys::device_up(&self.fd)
    }

    /// The tap's device was set down, here or in the namespace it was
    /// moved to: no receive fails (nothing arrives), and a send fails only
    /// if one is tried, so the worker asks.
    fn link_lost(&self) -> bool {
        !sys::device_up(&self.fd)
    }
}
