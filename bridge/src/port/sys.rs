//! Every system call the real ports make, in one place. Each wrapper owns
//! its file descriptors from the moment they exist (`OwnedFd`, close-on-exec)
//! and turns failures into `io::Error`.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The virtio-net header that taps (IFF_VNET_HDR) and packet sockets
/// (PACKET_VNET_HDR) put before each frame: offload state that travels with
/// the frame, so that large segments stay whole and checksums stay partial.
pub const VNET_HDR_LEN: usize = 10;
const VNET_HDR_F_NEEDS_CSUM: u8 = 1;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// An `ifreq` naming `name`, or an error if the name cannot be one.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
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

/// Opens one queue of tap `name` (creating the tap if it does not exist)
/// with multi-queue, no packet information and virtio-net headers, and
/// accepts checksum and TSO offloads on what it reads.
pub fn open_tap_queue(name: &str) -> io::Result<OwnedFd> {
    let mut req = ifreq(name)?;
    // SAFETY: a constant path and flags; the result is checked at once.
    let fd = check(unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    req.ifr_ifru.ifru_flags =
        (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE | libc::IFF_VNET_HDR)
            as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes an ifreq, which `req` is.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
    let offloads = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
    // SAFETY: TUNSETOFFLOAD takes its argument by value.
    check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETOFFLOAD,
            offloads as libc::c_ulong,
        )
    })?;
    Ok(fd)
}

/// A datagram socket for interface ioctls.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: constant arguments; the result is checked at once.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets interface `name` administratively up.
pub fn set_link_up(name: &str) -> io::Result<()> {
    let socket = control_socket()?;
    let mut req = ifreq(name)?;
    // SAFETY: SIOCGIFFLAGS fills the flags of the ifreq it is given.
    check(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) })?;
    // SAFETY: the union's flags member was just filled by the kernel.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short == 0 {
        req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
        // SAFETY: SIOCSIFFLAGS reads the ifreq it is given.
        check(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &req) })?;
    }
    Ok(())
}

fn set_option<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the size passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// A packet socket on interface `ifindex`: virtio-net headers, VLAN tags
/// reported in auxiliary data, its own transmissions not received, the
/// interface promiscuous, and the socket in fanout group `group` (hash
/// mode), so that each flow stays on one socket.
pub fn open_packet_socket(ifindex: u32, group: u16) -> io::Result<OwnedFd> {
    let protocol = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: constant arguments; the result is checked at once.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::c_int::from(protocol),
        )
    })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let on: libc::c_int = 1;
    set_option(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &on)?;
    set_option(&fd, libc::SOL_PACKET, libc::PACKET_AUXDATA, &on)?;
    set_option(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &on)?;
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol;
    addr.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `addr` is a sockaddr_ll of the size passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    // SAFETY: packet_mreq is plain old data; all zeroes is a valid value.
    let mut mreq: libc::packet_mreq = unsafe { zeroed() };
    mreq.mr_ifindex = ifindex as libc::c_int;
    mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
    set_option(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)?;
    let fanout: libc::c_int = libc::c_int::from(group)
        | (((libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG) as libc::c_int) << 16);
    set_option(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &fanout)?;
    Ok(fd)
}

/// Reads one datagram or frame into `buf`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    check_size(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
}

/// Writes one datagram or frame from `buf`.
pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of its length.
    check_size(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
}

/// Receives one frame from a packet socket into `buf` and, when the kernel
/// took a VLAN tag off it, puts the tag back (the buffer must have 4 bytes
/// to spare). Returns the length, virtio-net header included.
pub fn recv_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    const TAG: usize = 4;
    let room = buf.len().saturating_sub(TAG);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: room,
    };
    // Room for one cmsg holding a tpacket_auxdata, aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain old data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>();
    // SAFETY: `msg` points at a live iovec over `buf` and at `control`.
    let len = check_size(unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_TRUNC) })?;
    if len > room {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame larger than the buffer",
        ));
    }
    let mut tag = None;
    // SAFETY: the CMSG_* helpers walk the control buffer the kernel filled,
    // within `msg_controllen`; each header is read only through them.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_PACKET && (*cmsg).cmsg_type == libc::PACKET_AUXDATA {
                let aux: libc::tpacket_auxdata =
                    std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                if aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                    let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                        aux.tp_vlan_tpid
                    } else {
                        0x8100
                    };
                    tag = Some((tpid, aux.tp_vlan_tci));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    let Some((tpid, tci)) = tag else {
        return Ok(len);
    };
    let macs = VNET_HDR_LEN + 12;
    if len < macs {
        return Ok(len);
    }
    buf.copy_within(macs..len, macs + TAG);
    buf[macs..macs + 2].copy_from_slice(&tpid.to_be_bytes());
    buf[macs + 2..macs + 4].copy_from_slice(&tci.to_be_bytes());
    // The offload offsets count from the frame's start, which is now 4
    // bytes longer before the network header.
    let flags = buf[0];
    let gso_type = buf[1];
    let shift = |bytes: &mut [u8]| {
        let value = u16::from_ne_bytes([bytes[0], bytes[1]]).wrapping_add(TAG as u16);
        bytes.copy_from_slice(&value.to_ne_bytes());
    };
    if gso_type != 0 {
        shift(&mut buf[2..4]);
    }
    if flags & VNET_HDR_F_NEEDS_CSUM != 0 {
        shift(&mut buf[6..8]);
    }
    Ok(len + TAG)
}

/// An eventfd, to wake threads sleeping in `poll`.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: constant arguments; the result is checked at once.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd, waking its pollers.
pub fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    write(fd, &1u64.to_ne_bytes()).map(|_| ())
}

/// Waits until one of `fds` is readable or `timeout_ms` passes; returns how
/// many are ready (their `revents` are set).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a valid array of the length passed.
    match check(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}
