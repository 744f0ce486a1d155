//! Interface ioctls on a name: its index, whether it is up, its hardware
//! address. Taps and raw ports use them when they open; the link monitor
//! asks them once a second.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, OwnedFd};

use super::fd;
use crate::wire::MacAddr;

/// An `ifreq` naming `name`, or an error if the name cannot be one.
pub(crate) fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name (1 to {} bytes)", libc::IFNAMSIZ - 1),
        ));
    }
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    Ok(req)
}

/// The index of interface `name` in this network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    let cname = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `cname` is a valid NUL-terminated string for the call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(index)
    }
}

/// Whether interface `name` is still the one of index `ifindex`: false
/// when it is gone (or another interface took the name), an error when
/// the kernel could not be asked (out of descriptors, say), which says
/// nothing about the interface.
pub fn is_still(name: &str, ifindex: u32) -> io::Result<bool> {
    match if_index(name) {
        Ok(index) => Ok(index == ifindex),
        Err(error) if is_no_device(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Whether a failed look at an interface means that it does not exist.
pub fn is_no_device(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENODEV | libc::ENXIO))
}

/// A datagram socket for interface ioctls.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: constant arguments; the result is checked at once.
    fd::owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

fn flags(socket: &OwnedFd, req: &mut libc::ifreq) -> io::Result<libc::c_short> {
    // SAFETY: SIOCGIFFLAGS fills the flags of the ifreq it is given.
    fd::check(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut *req) })?;
    // SAFETY: the union's flags member was just filled by the kernel.
    Ok(unsafe { req.ifr_ifru.ifru_flags })
}

/// Sets interface `name` administratively up; true if it was down (so
/// that whoever raised it can put it back).
pub fn set_link_up(name: &str) -> io::Result<bool> {
    set_up_flag(name, true)
}

/// Sets interface `name` administratively down; true if it was up.
pub fn set_link_down(name: &str) -> io::Result<bool> {
    set_up_flag(name, false)
}

fn set_up_flag(name: &str, up: bool) -> io::Result<bool> {
    let socket = control_socket()?;
    let mut req = ifreq(name)?;
    let flags = flags(&socket, &mut req)?;
    let is_up = flags & libc::IFF_UP as libc::c_short != 0;
    if is_up == up {
        return Ok(false);
    }
    req.ifr_ifru.ifru_flags = if up {
        flags | libc::IFF_UP as libc::c_short
    } else {
        flags & !(libc::IFF_UP as libc::c_short)
    };
    // SAFETY: SIOCSIFFLAGS reads the ifreq it is given.
    fd::check(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &req) })?;
    Ok(true)
}

/// Where an interface's link stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkState {
    /// Administratively up (`ip link set NAME up`).
    pub up: bool,
    /// Up and with carrier: frames can pass (IFF_RUNNING).
    pub running: bool,
}

/// The link state of interface `name`.
pub fn link_state(name: &str) -> io::Result<LinkState> {
    let socket = control_socket()?;
    let flags = flags(&socket, &mut ifreq(name)?)?;
    Ok(LinkState {
        up: flags & libc::IFF_UP as libc::c_short != 0,
        running: flags & libc::IFF_RUNNING as libc::c_short != 0,
    })
}

/// The hardware (MAC) address of Ethernet interface `name`.
pub fn hw_addr(name: &str) -> io::Result<MacAddr> {
    let socket = control_socket()?;
    let mut req = ifreq(name)?;
    // SAFETY: SIOCGIFHWADDR fills the hardware address of the ifreq.
    fd::check(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) })?;
    // SAFETY: the union's address member was just filled by the kernel.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    Ok(MacAddr(std::array::from_fn(|i| data[i] as u8)))
}
