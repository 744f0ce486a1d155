//! The UDP socket of VXLAN ports: made with socket2 (SO_REUSEPORT, one per
//! worker on the same address; path MTU discovery on, so that a datagram
//! too big for the underlay fails with EMSGSIZE instead of leaving in
//! fragments; UDP GRO on, so that a train of equal datagrams arrives as
//! one), and batched `recvmmsg`/`sendmmsg`, which no maintained crate
//! wraps in a form that reuses its buffers.
#![allow(unsafe_code)]

use std::io;
use std::mem::zeroed;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::port::fd;

/// A non-blocking UDP socket for `local`'s family, with the don't-fragment
/// bit set (and, for IPv6, IPv6 only), not yet bound.
fn udp_socket(local: SocketAddr) -> io::Result<OwnedFd> {
    let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    let socket = OwnedFd::from(socket);
    let fd = std::os::fd::AsFd::as_fd(&socket);
    if local.is_ipv4() {
        let pmtu: libc::c_int = libc::IP_PMTUDISC_DO;
        fd::set_option(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, &pmtu)?;
    } else {
        let pmtu: libc::c_int = libc::IPV6_PMTUDISC_DO;
        fd::set_option(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, &pmtu)?;
        let on: libc::c_int = 1;
        fd::set_option(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &on)?;
    }
    Ok(socket)
}

/// Opens a socket to send from: `local`'s address and a port the kernel
/// picks, so that each such socket is one outer source port.
pub fn open_sender(local: IpAddr) -> io::Result<OwnedFd> {
    let local = SocketAddr::new(local, 0);
    let socket = Socket::from(udp_socket(local)?);
    socket.bind(&SockAddr::from(local))?;
    Ok(OwnedFd::from(socket))
}

/// Opens a non-blocking UDP socket bound to `local`, in the SO_REUSEPORT
/// group of every socket bound there, with the don't-fragment bit set.
pub fn open(local: SocketAddr) -> io::Result<OwnedFd> {
    let socket = Socket::from(udp_socket(local)?);
    socket.set_reuse_port(true)?;
    let socket = OwnedFd::from(socket);
    // A train of datagrams sent with UDP GSO (another mpbridge's sends)
    // then stays one buffer up to the socket instead of being cut into one
    // skb per datagram on arrival; `RecvBuffers` cuts it. Kernels before
    // 5.0 lack the option: datagrams then arrive one by one, as before.
    let on: libc::c_int = 1;
    if let Err(error) = fd::set_option(
        std::os::fd::AsFd::as_fd(&socket),
        libc::SOL_UDP,
        UDP_GRO,
        &on,
    ) {
        log::debug!("UDP_GRO not available on {local}: {error}");
    }
    // Room for the bursts that arrive while the worker writes a batch out
    // (the kernel's own VTEP takes datagrams in softirq work and needs
    // none): beyond net.core.rmem_max where the process may (root).
    let room: libc::c_int = RECV_BUFFER_BYTES;
    if fd::set_option(
        std::os::fd::AsFd::as_fd(&socket),
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        &room,
    )
    .is_err()
    {
        let _ = fd::set_option(
            std::os::fd::AsFd::as_fd(&socket),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &room,
        );
    }
    let socket = Socket::from(socket);
    socket.bind(&SockAddr::from(local))?;
    Ok(OwnedFd::from(socket))
}

/// The receive buffer each VXLAN socket asks for.
const RECV_BUFFER_BYTES: libc::c_int = 4 << 20;

/// The UDP_GRO socket option and control message (linux/udp.h).
const UDP_GRO: libc::c_int = 104;
/// Control buffer words per received message: room for one cmsg with an
/// int (UDP_GRO), 8-byte aligned.
const RECV_CMSG_WORDS: usize = 4;

/// Receive buffers for one `recvmmsg` of up to `count` datagrams.
pub struct RecvBuffers {
    data: Vec<u8>,
    slot: usize,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    addrs: Vec<libc::sockaddr_storage>,
    controls: Vec<[u64; RECV_CMSG_WORDS]>,
}

/// One message of the last receive.
pub struct Received<'a> {
    /// Its payload: one datagram, or with `segment` a train of them.
    pub payload: &'a [u8],
    /// Its sender.
    pub source: Option<IpAddr>,
    /// Whether it was longer than a slot (and cut).
    pub truncated: bool,
    /// With UDP GRO: the length of each datagram the payload joins (the
    /// last may be shorter); `None` for a single datagram.
    pub segment: Option<usize>,
}

// SAFETY: the raw pointers in `iovs` and `msgs` point into `data`, `iovs`,
// `addrs` and `controls`, which the struct owns; they move with it.
unsafe impl Send for RecvBuffers {}

impl RecvBuffers {
    /// Room for `count` datagrams of up to `slot` bytes.
    pub fn new(count: usize, slot: usize) -> RecvBuffers {
        RecvBuffers {
            data: vec![0; count * slot],
            slot,
            // SAFETY: iovec, mmsghdr and sockaddr_storage are plain old
            // data; all zeroes is a valid value of each.
            iovs: vec![unsafe { zeroed() }; count],
            // SAFETY: as above.
            msgs: vec![unsafe { zeroed() }; count],
            // SAFETY: as above.
            addrs: vec![unsafe { zeroed() }; count],
            controls: vec![[0; RECV_CMSG_WORDS]; count],
        }
    }

    /// Receives up to `max` datagrams without blocking; returns how many
    /// (0 when none wait). Datagram `i` is then [`datagram`](Self::datagram).
    pub fn recv(&mut self, socket: &OwnedFd, max: usize) -> io::Result<usize> {
        let count = max.min(self.msgs.len());
        // One base pointer per buffer, taken once, so that no later borrow
        // of a Vec invalidates a pointer handed to the kernel.
        let data = self.data.as_mut_ptr();
        let iovs = self.iovs.as_mut_ptr();
        let addrs = self.addrs.as_mut_ptr();
        let controls = self.controls.as_mut_ptr();
        for i in 0..count {
            // SAFETY: i < count <= the number of slots, iovecs and
            // addresses, so every offset stays inside its Vec.
            unsafe {
                *iovs.add(i) = libc::iovec {
                    iov_base: data.add(i * self.slot).cast(),
                    iov_len: self.slot,
                };
                let msg = &mut self.msgs[i].msg_hdr;
                msg.msg_iov = iovs.add(i);
                msg.msg_iovlen = 1;
                msg.msg_name = addrs.add(i).cast();
                msg.msg_control = controls.add(i).cast();
            }
            let msg = &mut self.msgs[i].msg_hdr;
            msg.msg_controllen = size_of::<[u64; RECV_CMSG_WORDS]>();
            msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msg.msg_flags = 0;
            self.msgs[i].msg_len = 0;
        }
        loop {
            // SAFETY: every message points at its own iovec over its own
            // slot of `data` and its own address storage, all live and
            // unaliased for the call.
            let ret = unsafe {
                libc::recvmmsg(
                    socket.as_raw_fd(),
                    self.msgs.as_mut_ptr(),
                    count as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if ret >= 0 {
                return Ok(ret as usize);
            }
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(error),
            }
        }
    }

    /// Message `i` of the last receive.
    pub fn message(&self, i: usize) -> Received<'_> {
        let len = self.msgs[i].msg_len as usize;
        let hdr = &self.msgs[i].msg_hdr;
        let truncated = hdr.msg_flags & libc::MSG_TRUNC != 0;
        let start = i * self.slot;
        Received {
            payload: &self.data[start..start + len.min(self.slot)],
            source: ip_of(&self.addrs[i]),
            truncated,
            segment: gro_segment(hdr),
        }
    }
}

/// The UDP_GRO segment size in a received message's control data.
fn gro_segment(hdr: &libc::msghdr) -> Option<usize> {
    // SAFETY: `hdr` is a message the kernel filled in: msg_control points
    // at its control buffer (one of `RecvBuffers::controls`) and
    // msg_controllen says how much of it the kernel wrote, so CMSG_FIRSTHDR
    // and CMSG_NXTHDR stay inside it and each header found is whole.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_UDP
                && (*cmsg).cmsg_type == UDP_GRO
                && (*cmsg).cmsg_len as usize
                    >= libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as usize
            {
                let size = libc::CMSG_DATA(cmsg).cast::<libc::c_int>().read_unaligned();
                return usize::try_from(size).ok().filter(|&size| size > 0);
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    None
}

/// The IP address in a socket address the kernel wrote.
fn ip_of(storage: &libc::sockaddr_storage) -> Option<IpAddr> {
    // SAFETY: a sockaddr_storage is room for a socket address of any
    // family, aligned for each.
    unsafe { ip_at((storage as *const libc::sockaddr_storage).cast()) }
}

/// The IP address in the socket address at `addr`, if it is of IPv4 or
/// IPv6.
///
/// # Safety
///
/// `addr` points at a socket address whole for its family (a
/// sockaddr_in for AF_INET, a sockaddr_in6 for AF_INET6, at least the
/// family field otherwise), aligned for it.
unsafe fn ip_at(addr: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: the caller's promise: the family field is there.
    match libc::c_int::from(unsafe { (*addr).sa_family }) {
        libc::AF_INET => {
            // SAFETY: the family says a whole sockaddr_in is there.
            let sin = unsafe { &*addr.cast::<libc::sockaddr_in>() };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*addr.cast::<libc::sockaddr_in6>() };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// Whether an interface of this network namespace has `ip`, in whatever
/// state: an IPv6 address whose duplicate address detection has not
/// finished, or failed, counts (getifaddrs(3) lists those too).
pub fn is_assigned(ip: IpAddr) -> io::Result<bool> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `list` is a valid place for the list's head.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = false;
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is an entry of the list getifaddrs made, not yet
        // freed.
        let entry = unsafe { &*at };
        // SAFETY: an entry's address, where there is one, is whole for its
        // family and aligned for it.
        if !entry.ifa_addr.is_null() && unsafe { ip_at(entry.ifa_addr) } == Some(ip) {
            found = true;
            break;
        }
        at = entry.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once, after the
    // last use of its entries.
    unsafe { libc::freeifaddrs(list) };
    Ok(found)
}

/// The UDP_SEGMENT socket option and control message (linux/udp.h).
const UDP_SEGMENT: libc::c_int = 103;
/// Most frames one UDP GSO send carries, and most bytes: what the kernel
/// takes (UDP_MAX_SEGMENTS is 64 on older kernels), below the 64 KiB IP
/// limit.
pub const GSO_MAX_FRAMES: usize = 64;
pub const GSO_MAX_BYTES: usize = 60_000;

/// One message to send to `to`: frames `first..first + count` of the
/// frames given to [`send_all`], each after its own VXLAN header. Every
/// frame but the last has the same length, so that with more than one the
/// kernel cuts the payload into one datagram per frame (UDP GSO).
pub struct Outgoing<'a> {
    pub first: usize,
    pub count: usize,
    pub to: &'a SockAddr,
}

/// Whether the kernel took UDP GSO sends on a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trains {
    /// It did, or none was tried.
    Taken,
    /// It refused one as no GSO send can go on this path (EIO); it was
    /// sent one datagram at a time.
    Refused,
}

/// Sends the messages with as few `sendmmsg` calls as it takes; calls
/// `outcome(j, result)` for frame `j` of every message, in order (a frame
/// sent to several VTEPs, several times). An error of one message
/// (EMSGSIZE or EINVAL: too big for the underlay) is that message's; the
/// rest still go.
pub fn send_all(
    socket: &OwnedFd,
    header: &[u8],
    frames: &[&[u8]],
    messages: &[Outgoing<'_>],
    mut outcome: impl FnMut(usize, io::Result<()>),
) -> Trains {
    let mut trains = Trains::Taken;
    const CHUNK: usize = 64;
    // One cmsg with a u16 per message, in 8-byte-aligned words.
    const CMSG_WORDS: usize = 4;
    let mut iovs: Vec<libc::iovec> = Vec::new();
    let mut controls: Vec<[u64; CMSG_WORDS]> = Vec::new();
    for chunk in messages.chunks(CHUNK) {
        iovs.clear();
        controls.clear();
        controls.resize(chunk.len(), [0; CMSG_WORDS]);
        for m in chunk {
            for frame in &frames[m.first..m.first + m.count] {
                iovs.push(libc::iovec {
                    iov_base: header.as_ptr() as *mut libc::c_void,
                    iov_len: header.len(),
                });
                iovs.push(libc::iovec {
                    iov_base: frame.as_ptr() as *mut libc::c_void,
                    iov_len: frame.len(),
                });
            }
        }
        // SAFETY: mmsghdr is plain old data; zeroes are valid.
        let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { zeroed() }; chunk.len()];
        // Base pointers taken once the Vecs are filled (see `recv`).
        let iov_base = iovs.as_mut_ptr();
        let control_base = controls.as_mut_ptr();
        let mut at = 0;
        for (i, m) in chunk.iter().enumerate() {
            let msg = &mut msgs[i].msg_hdr;
            // SAFETY: `at` counts the iovecs of the messages before this
            // one, all inside `iovs`.
            msg.msg_iov = unsafe { iov_base.add(at) };
            msg.msg_iovlen = 2 * m.count;
            at += 2 * m.count;
            msg.msg_name = m.to.as_ptr() as *mut libc::c_void;
            msg.msg_namelen = m.to.len();
            if m.count > 1 {
                let segment = (header.len() + frames[m.first].len()) as u16;
                // SAFETY: one control buffer per message of the chunk.
                msg.msg_control = unsafe { control_base.add(i) }.cast();
                // SAFETY: CMSG_SPACE is arithmetic on a constant.
                msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
                // SAFETY: the control buffer is CMSG_SPACE(2) bytes or more
                // (4 words), aligned for cmsghdr, and `msg` points at it, so
                // the first header and its data lie inside it.
                unsafe {
                    let cmsg = libc::CMSG_FIRSTHDR(msg);
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(2) as usize;
                    libc::CMSG_DATA(cmsg).cast::<u16>().write_unaligned(segment);
                }
            }
        }
        let count = chunk.len();
        let mut done = 0;
        while done < count {
            // SAFETY: `msgs[done..count]` point at iovecs over the header
            // and frames, at addresses and at control buffers, all live and
            // unmoved for this call; the kernel only reads them.
            let ret = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    msgs.as_mut_ptr().add(done),
                    (count - done) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if ret > 0 {
                for m in &chunk[done..done + ret as usize] {
                    for j in m.first..m.first + m.count {
                        outcome(j, Ok(()));
                    }
                }
                done += ret as usize;
                continue;
            }
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The error is the first unsent message's. A GSO send the
            // kernel cannot do (EIO: no checksum offload or IPsec on the
            // underlay, on some kernels) goes again one datagram at a time;
            // one too big for the underlay then fails alone (EMSGSIZE).
            let m = &chunk[done];
            if m.count > 1 && matches!(error.raw_os_error(), Some(libc::EIO | libc::EINVAL)) {
                if error.raw_os_error() == Some(libc::EIO) {
                    trains = Trains::Refused;
                }
                let group = &frames[m.first..m.first + m.count];
                for (j, frame) in (m.first..).zip(group) {
                    outcome(j, send_one(socket, header, frame, m.to));
                }
            } else {
                for j in m.first..m.first + m.count {
                    outcome(j, Err(same_error(&error)));
                }
            }
            done += 1;
        }
    }
    trains
}

/// A copy of `error`, for each frame of a message it failed.
fn same_error(error: &io::Error) -> io::Error {
    match error.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(error.kind(), error.to_string()),
    }
}

/// Sends one frame after the header as a datagram of its own to `to`.
fn send_one(socket: &OwnedFd, header: &[u8], frame: &[u8], to: &SockAddr) -> io::Result<()> {
    let mut iov = [
        libc::iovec {
            iov_base: header.as_ptr() as *mut libc::c_void,
            iov_len: header.len(),
        },
        libc::iovec {
            iov_base: frame.as_ptr() as *mut libc::c_void,
            iov_len: frame.len(),
        },
    ];
    // SAFETY: msghdr is plain old data; zeroes are valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = 2;
    msg.msg_name = to.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = to.len();
    loop {
        // SAFETY: `msg` points at the two iovecs and the address, live for
        // the call; the kernel only reads them.
        let ret = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
        if ret >= 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sender of an IPv4 and of an IPv6 datagram, as the kernel writes
    /// it into the address storage.
    #[test]
    fn senders_of_both_families_are_read() {
        for text in ["198.18.1.2:4789", "[2001:2::2]:4789"] {
            let sender: SocketAddr = text.parse().unwrap();
            let from = SockAddr::from(sender);
            // SAFETY: sockaddr_storage is plain old data; zeroes are valid.
            let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
            // SAFETY: `from` holds `from.len()` bytes of a socket address,
            // no more than a sockaddr_storage, which `storage` is.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    from.as_ptr().cast::<u8>(),
                    (&mut storage as *mut libc::sockaddr_storage).cast::<u8>(),
                    from.len() as usize,
                );
            }
            assert_eq!(ip_of(&storage), Some(sender.ip()), "{text}");
        }
        // SAFETY: as above.
        let unknown: libc::sockaddr_storage = unsafe { zeroed() };
        assert_eq!(ip_of(&unknown), None);
    }

    /// The loopback's addresses are found where the loopback is up, and
    /// addresses no interface here has are not.
    #[test]
    fn assigned_addresses_are_found() {
        let lo_up = std::fs::read_to_string("/sys/class/net/lo/flags")
            .ok()
            .and_then(|flags| u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).ok())
            .is_some_and(|flags| flags & libc::IFF_UP as u32 != 0);
        if lo_up {
            assert!(is_assigned(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap());
        }
        for text in ["198.19.255.254", "2001:2:0:ffff::fe"] {
            let ip: IpAddr = text.parse().unwrap();
            assert!(!is_assigned(ip).unwrap(), "{text}");
        }
    }

    /// Both families' sockets take every option (don't-fragment, GRO, the
    /// receive buffer), bound to the unspecified address of each.
    #[test]
    fn sockets_of_both_families_open() {
        for text in ["0.0.0.0:0", "[::]:0"] {
            let local: SocketAddr = text.parse().unwrap();
            match open(local) {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                    eprintln!("skipped {text}: this kernel has no IPv6");
                }
                Err(error) => panic!("{text}: {error}"),
            }
        }
    }
}
