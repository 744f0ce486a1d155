//! The packet socket of a raw port: its setup and its batched sends.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use super::ring::RxRing;
use super::RingKind;
use crate::port::{fd, Outgoing, SendReport};

/// How a socket takes part in a fanout group, which spreads an interface's
/// frames over the sockets of several workers by flow hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// No group: the only socket on its interface.
    None,
    /// Start a group with an id the kernel picks, unique in the namespace.
    New,
    /// Join the group with this id.
    Join(u16),
}

/// The receive queue a frame ring's socket asks for.
const COPY_QUEUE_BYTES: libc::c_int = 4 << 20;

const FANOUT_MODE: libc::c_int =
    (libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG) as libc::c_int;

/// A packet socket on interface `ifindex`: virtio-net headers, a receive
/// ring of layout `kind` and `ring_bytes` ([`RxRing::new`]), its own transmissions not received, the interface
/// promiscuous, and the socket in a fanout group as `fanout` says. Returns
/// the group's id too, when it has one.
pub fn open_packet_socket(
    ifindex: u32,
    fanout: Fanout,
    kind: RingKind,
    ring_bytes: usize,
) -> io::Result<(OwnedFd, RxRing, Option<u16>)> {
    // Protocol 0: the socket receives nothing until bound to one interface
    // below, so no frame of another interface lands in its ring first.
    // SAFETY: constant arguments; the result is checked at once.
    let socket = fd::owned(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    let on: libc::c_int = 1;
    // The header must be asked for before the ring exists.
    fd::set_option(socket.as_fd(), libc::SOL_PACKET, libc::PACKET_VNET_HDR, &on)?;
    fd::set_option(
        socket.as_fd(),
        libc::SOL_PACKET,
        libc::PACKET_IGNORE_OUTGOING,
        &on,
    )?;
    if kind == RingKind::Frame {
        // Room in the receive queue for the frames longer than a slot
        // (offloaded segments of up to 64 KiB): beyond net.core.rmem_max
        // where the process may.
        let room: libc::c_int = COPY_QUEUE_BYTES;
        if fd::set_option(
            socket.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &room,
        )
        .is_err()
        {
            let _ = fd::set_option(socket.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, &room);
        }
    }
    let ring = RxRing::new(&socket, kind, ring_bytes)?;
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    addr.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `addr` is a sockaddr_ll of the size passed.
    fd::check(unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    // SAFETY: packet_mreq is plain old data; all zeroes is a valid value.
    let mut mreq: libc::packet_mreq = unsafe { zeroed() };
    mreq.mr_ifindex = ifindex as libc::c_int;
    mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
    fd::set_option(
        socket.as_fd(),
        libc::SOL_PACKET,
        libc::PACKET_ADD_MEMBERSHIP,
        &mreq,
    )?;
    let group = match fanout {
        Fanout::None => None,
        Fanout::New => {
            let arg = (FANOUT_MODE | libc::PACKET_FANOUT_FLAG_UNIQUEID as libc::c_int) << 16;
            fd::set_option(socket.as_fd(), libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)?;
            Some(fanout_id(&socket)?)
        }
        Fanout::Join(id) => {
            let arg = libc::c_int::from(id) | (FANOUT_MODE << 16);
            fd::set_option(socket.as_fd(), libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)?;
            Some(id)
        }
    };
    Ok((socket, ring, group))
}

/// The id of the fanout group the socket is in.
fn fanout_id(socket: &OwnedFd) -> io::Result<u16> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` describe an int-sized buffer.
    fd::check(unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value as u16)
}

/// Sends `frames` on a packet socket with as few `sendmmsg` calls as it
/// takes, each frame gathered from its pieces by the kernel (the one copy
/// it makes). A frame the kernel refuses (too large for the link, a bad
/// offload header) or drops (full queue) is counted and skipped; an error
/// of the port itself ends the batch.
pub fn send_packets<'a>(
    socket: &OwnedFd,
    frames: impl Iterator<Item = Outgoing<'a>>,
) -> SendReport {
    const CHUNK: usize = 64;
    /// The metadata, up to three pieces of the frame and its lent rest.
    const PARTS: usize = 5;
    let mut frames = frames.peekable();
    let mut report = SendReport::default();
    while frames.peek().is_some() {
        // SAFETY: iovec and mmsghdr are plain old data; zeroes are valid.
        let mut iovs: [[libc::iovec; PARTS]; CHUNK] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; CHUNK] = unsafe { zeroed() };
        let mut lens = [0usize; CHUNK];
        let mut count = 0;
        while count < CHUNK {
            let Some(frame) = frames.next() else { break };
            msgs[count].msg_hdr.msg_iovlen = frame.iovecs(&mut iovs[count]);
            lens[count] = frame.len();
            count += 1;
        }
        for (msg, iov) in msgs.iter_mut().zip(iovs.iter_mut()).take(count) {
            msg.msg_hdr.msg_iov = iov.as_mut_ptr();
        }
        let mut done = 0;
        while done < count {
            // SAFETY: `msgs[done..count]` point at iovecs over frames that
            // live for this call; the kernel only reads them.
            let ret = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    msgs.as_mut_ptr().add(done),
                    (count - done) as libc::c_uint,
                    0,
                )
            };
            if ret > 0 {
                for &len in &lens[done..done + ret as usize] {
                    report.record(Ok(len));
                }
                done += ret as usize;
                continue;
            }
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The error is the first unsent frame's.
            done += 1;
            if !report.record(Err(error)) {
                return report;
            }
        }
    }
    report
}
