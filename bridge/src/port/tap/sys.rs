//! The tun driver's ioctls for one tap queue.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::port::{fd, netdev};
use crate::wire::vnet::VNET_HDR_LEN;

/// Opens one queue of tap `name` (creating the tap if it does not exist):
/// no packet information, virtio-net headers of exactly the size mpbridge
/// reads, checksum and TSO offloads accepted, multi-queue when asked.
pub fn open_queue(name: &str, multi_queue: bool) -> io::Result<OwnedFd> {
    let mut req = netdev::ifreq(name)?;
    // SAFETY: a constant path and flags; the result is checked at once.
    let fd = fd::owned(unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    })?;
    let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
    if multi_queue {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes an ifreq, which `req` is.
    fd::check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
    // The size is the device's, not the queue's: a tap made by another tool
    // may carry the 12-byte header of virtio 1.0, which would shift every
    // frame by two bytes.
    let size = VNET_HDR_LEN as libc::c_int;
    // SAFETY: TUNSETVNETHDRSZ reads an int through the pointer it is given.
    fd::check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size) })?;
    let offloads = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
    // SAFETY: TUNSETOFFLOAD takes its argument by value.
    fd::check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETOFFLOAD,
            offloads as libc::c_ulong,
        )
    })?;
    Ok(fd)
}

/// Whether the queue is still attached to its tap: a tap deleted under it
/// leaves a queue that answers every call with EBADFD.
pub fn check_attached(queue: &OwnedFd) -> io::Result<()> {
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    // SAFETY: TUNGETIFF fills the ifreq it is given.
    fd::check(unsafe { libc::ioctl(queue.as_raw_fd(), libc::TUNGETIFF, &mut req) })?;
    Ok(())
}

/// Whether the tap's device is up (IFF_UP), wherever it lives now, from
/// its queue alone: the tun driver makes a queue writable only while its
/// device is up (`tun_sock_writeable`, Linux 4.15 on; a write to a down
/// one fails with EIO). Asking the device's namespace instead would need
/// CAP_NET_ADMIN there (TUNGETDEVNETNS), which the workers no longer hold.
/// On an older kernel the queue is always writable, and a tap's link is
/// seen down only when a send to it fails.
pub fn device_up(queue: &OwnedFd) -> bool {
    let mut fds = [libc::pollfd {
        fd: queue.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    }];
    // SAFETY: poll reads and writes the one pollfd it is given, and with a
    // zero timeout does not wait.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
    // A failed poll says nothing of the link, and a queue whose tap was
    // deleted (POLLERR) is for `check_attached` to report as gone: both
    // are taken as up here, so that neither shows as a link down.
    let errors = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
    ready < 0 || fds[0].revents & (libc::POLLOUT | errors) != 0
}

/// The tun flags of existing tap `name` (IFF_MULTI_QUEUE and friends), as
/// the driver shows them in sysfs.
pub fn device_flags(name: &str) -> io::Result<i32> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/tun_flags"))?;
    let hex = text.trim().trim_start_matches("0x");
    i32::from_str_radix(hex, 16).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// Whether up tap `name` has carrier, which the tun driver gives it while
/// at least one queue is attached; false where sysfs does not show this
/// namespace's devices.
pub fn has_carrier(name: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{name}/carrier"))
        .is_ok_and(|text| text.trim() == "1")
}
