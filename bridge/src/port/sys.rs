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

/// A packet socket on interface `ifindex`: virtio-net headers, a TPACKET_V3
/// receive ring, its own transmissions not received, the interface
/// promiscuous, and the socket in fanout group `group` (hash mode), if
/// given, so that each flow stays on one socket.
pub fn open_packet_socket(ifindex: u32, group: Option<u16>) -> io::Result<(OwnedFd, RxRing)> {
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
    // The header must be asked for before the ring exists.
    set_option(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &on)?;
    set_option(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &on)?;
    let ring = RxRing::new(&fd)?;
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
    if let Some(group) = group {
        let mode = (libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG) as libc::c_int;
        let fanout: libc::c_int = libc::c_int::from(group) | (mode << 16);
        set_option(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &fanout)?;
    }
    Ok((fd, ring))
}

/// Ring geometry: blocks large enough for a 64 KiB offloaded segment with
/// its headers, so that no frame is ever cut short.
const RING_BLOCK_SIZE: usize = 1 << 18;
const RING_BLOCKS: usize = 16;
const RING_FRAME_SIZE: usize = 1 << 11;
/// How long the kernel fills a block before handing it over anyway, in
/// milliseconds: the latency bound on a quiet link.
const RING_BLOCK_TIMEOUT_MS: u32 = 1;

/// A TPACKET_V3 receive ring mapped into this process: the kernel fills
/// blocks of frames and hands each over by its status word; we copy the
/// frames out and hand the block back.
#[derive(Debug)]
pub struct RxRing {
    base: *mut u8,
    /// The block being read and, when started, the next frame's offset in
    /// it and how many frames are left.
    current: usize,
    cursor: Option<(usize, u32)>,
}

// SAFETY: the mapping belongs to this ring alone (one ring per socket, and
// the ring is not Clone); moving it to another thread moves that ownership.
unsafe impl Send for RxRing {}

/// One frame found in the ring.
pub struct RingFrame<'a> {
    /// The virtio-net header and the frame as the kernel stored them.
    pub vnet: &'a [u8],
    /// The frame, without the VLAN tag the kernel took off.
    pub frame: &'a [u8],
    /// That tag (TPID, TCI), if there was one.
    pub vlan: Option<(u16, u16)>,
    /// Whether the frame was cut short (longer than a block).
    pub truncated: bool,
}

impl RxRing {
    fn new(fd: &OwnedFd) -> io::Result<RxRing> {
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        set_option(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)?;
        let req = libc::tpacket_req3 {
            tp_block_size: RING_BLOCK_SIZE as u32,
            tp_block_nr: RING_BLOCKS as u32,
            tp_frame_size: RING_FRAME_SIZE as u32,
            tp_frame_nr: (RING_BLOCK_SIZE * RING_BLOCKS / RING_FRAME_SIZE) as u32,
            tp_retire_blk_tov: RING_BLOCK_TIMEOUT_MS,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        set_option(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
        // SAFETY: maps the ring the kernel just made for this socket, at a
        // place of the kernel's choosing; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RING_BLOCK_SIZE * RING_BLOCKS,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RxRing {
            base: base.cast(),
            current: 0,
            cursor: None,
        })
    }

    fn block(&self, index: usize) -> *mut libc::tpacket_block_desc {
        // SAFETY: index < RING_BLOCKS, so the offset stays in the mapping.
        unsafe { self.base.add(index * RING_BLOCK_SIZE).cast() }
    }

    /// Hands each waiting frame to `f` while it returns true; returns how
    /// many frames it was handed.
    pub fn read(&mut self, mut f: impl FnMut(RingFrame<'_>) -> bool) -> usize {
        let mut handed = 0;
        loop {
            let block = self.block(self.current);
            let (offset, left) = match self.cursor {
                Some(cursor) => cursor,
                None => {
                    // SAFETY: the block descriptor lies at the start of the
                    // block, inside the mapping; the status word is shared
                    // with the kernel, so it is read volatile and ordered
                    // before the frames by the acquire fence.
                    let (status, count, first) = unsafe {
                        let header = &raw const (*block).hdr.bh1;
                        let status = std::ptr::read_volatile(&raw const (*header).block_status);
                        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
                        (status, (*header).num_pkts, (*header).offset_to_first_pkt)
                    };
                    if status & libc::TP_STATUS_USER == 0 {
                        return handed;
                    }
                    (first as usize, count)
                }
            };
            if left == 0 {
                // SAFETY: as above; the release fence orders our reads of
                // the block before the kernel may refill it.
                unsafe {
                    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
                    let header = &raw mut (*block).hdr.bh1;
                    std::ptr::write_volatile(
                        &raw mut (*header).block_status,
                        libc::TP_STATUS_KERNEL,
                    );
                }
                self.current = (self.current + 1) % RING_BLOCKS;
                self.cursor = None;
                continue;
            }
            // SAFETY: the kernel put a tpacket3_hdr at `offset` in a block it
            // handed to us, with the frame at `tp_mac` after it and, as
            // PACKET_VNET_HDR asks, the virtio-net header just before that;
            // all inside the block, which stays ours until we hand it back.
            let (frame, next) = unsafe {
                let header = &*(block.cast::<u8>().add(offset).cast::<libc::tpacket3_hdr>());
                let mac = block.cast::<u8>().add(offset + usize::from(header.tp_mac));
                let vnet = std::slice::from_raw_parts(mac.sub(VNET_HDR_LEN), VNET_HDR_LEN);
                let frame = std::slice::from_raw_parts(mac, header.tp_snaplen as usize);
                let vlan = (header.tp_status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
                    let tpid = if header.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                        header.hv1.tp_vlan_tpid
                    } else {
                        0x8100
                    };
                    (tpid, header.hv1.tp_vlan_tci as u16)
                });
                let truncated = header.tp_snaplen < header.tp_len;
                (
                    RingFrame {
                        vnet,
                        frame,
                        vlan,
                        truncated,
                    },
                    header.tp_next_offset as usize,
                )
            };
            let more = f(frame);
            handed += 1;
            self.cursor = Some((offset + next, left - 1));
            if !more {
                return handed;
            }
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which nothing
        // references once the ring is dropped.
        unsafe {
            libc::munmap(self.base.cast(), RING_BLOCK_SIZE * RING_BLOCKS);
        }
    }
}

/// Copies a ring frame into `buffer` as virtio-net header plus frame, with
/// its VLAN tag put back; returns the length, or `None` if it does not fit.
pub fn copy_ring_frame(frame: &RingFrame<'_>, buffer: &mut [u8]) -> Option<usize> {
    const TAG: usize = 4;
    let tag = if frame.vlan.is_some() { TAG } else { 0 };
    let len = VNET_HDR_LEN + frame.frame.len() + tag;
    if frame.truncated || len > buffer.len() || frame.frame.len() < 12 {
        return None;
    }
    buffer[..VNET_HDR_LEN].copy_from_slice(frame.vnet);
    let Some((tpid, tci)) = frame.vlan else {
        buffer[VNET_HDR_LEN..len].copy_from_slice(frame.frame);
        return Some(len);
    };
    let macs = VNET_HDR_LEN + 12;
    buffer[VNET_HDR_LEN..macs].copy_from_slice(&frame.frame[..12]);
    buffer[macs..macs + 2].copy_from_slice(&tpid.to_be_bytes());
    buffer[macs + 2..macs + TAG].copy_from_slice(&tci.to_be_bytes());
    buffer[macs + TAG..len].copy_from_slice(&frame.frame[12..]);
    // The offload offsets count from the frame's start, which is now 4
    // bytes longer before the network header.
    let shift = |bytes: &mut [u8]| {
        let value = u16::from_ne_bytes([bytes[0], bytes[1]]).wrapping_add(TAG as u16);
        bytes.copy_from_slice(&value.to_ne_bytes());
    };
    if buffer[1] != 0 {
        shift(&mut buffer[2..4]);
    }
    if buffer[0] & VNET_HDR_F_NEEDS_CSUM != 0 {
        shift(&mut buffer[6..8]);
    }
    Some(len)
}

/// Sends `frames` on a packet socket with as few `sendmmsg` calls as it
/// takes; returns how many the kernel took. A full queue (EAGAIN, ENOBUFS)
/// drops a frame; any other error ends the batch.
pub fn send_packets<'a>(fd: RawFd, frames: impl Iterator<Item = &'a [u8]>) -> io::Result<usize> {
    const CHUNK: usize = 64;
    let mut frames = frames.peekable();
    let mut sent = 0;
    while frames.peek().is_some() {
        // SAFETY: iovec and mmsghdr are plain old data; zeroes are valid.
        let mut iovs: [libc::iovec; CHUNK] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; CHUNK] = unsafe { zeroed() };
        let mut count = 0;
        while count < CHUNK {
            let Some(frame) = frames.next() else { break };
            iovs[count] = libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            };
            count += 1;
        }
        for (msg, iov) in msgs.iter_mut().zip(iovs.iter_mut()).take(count) {
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
        }
        let mut done = 0;
        while done < count {
            // SAFETY: `msgs[done..count]` point at iovecs over frames that
            // live for this call; the kernel only reads them.
            let ret = unsafe {
                libc::sendmmsg(
                    fd,
                    msgs.as_mut_ptr().add(done),
                    (count - done) as libc::c_uint,
                    0,
                )
            };
            if ret > 0 {
                done += ret as usize;
                sent += ret as usize;
                continue;
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN | libc::ENOBUFS) => done += 1,
                _ => return Err(error),
            }
        }
    }
    Ok(sent)
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
