//! The frame generator of `mpbench forward`: one frame, copied once into
//! every slot of a PACKET_TX_RING, handed to the kernel in batches with
//! PACKET_QDISC_BYPASS, as trafgen does. Per frame the kernel builds one
//! socket buffer and calls the driver; there is no copy from user space, no
//! system call and no qdisc, so one core offers more than the forwarders
//! under test can take.
//!
//! Hand-written: no maintained crate maps a packet socket's transmit ring.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Ring geometry: 16 blocks of 64 KiB, 2 KiB slots (a 1518-byte frame and
/// the slot header fit), 512 slots.
const BLOCK_SIZE: usize = 1 << 16;
const BLOCKS: usize = 16;
const SLOT_SIZE: usize = 1 << 11;
const SLOTS: usize = BLOCK_SIZE * BLOCKS / SLOT_SIZE;
/// Where a TPACKET_V2 transmit slot's frame starts: the aligned header; the
/// sockaddr_ll that TPACKET2_HDRLEN also counts is not used on transmit.
const DATA_OFFSET: usize = libc::TPACKET2_HDRLEN - size_of::<libc::sockaddr_ll>();

/// A packet socket's transmit ring, every slot holding the same frame.
pub struct TxRing {
    socket: OwnedFd,
    base: *mut u8,
    next: usize,
    /// The oldest slot that may still wait for the kernel to take it.
    pending: usize,
    frame_len: u32,
}

impl TxRing {
    /// Opens a transmit ring on interface `ifname` of the calling thread's
    /// namespace and copies `frame` into every slot.
    pub fn open(ifname: &str, frame: &[u8]) -> io::Result<TxRing> {
        if frame.len() + DATA_OFFSET > SLOT_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame too long for a ring slot",
            ));
        }
        let name = std::ffi::CString::new(ifname)?;
        // SAFETY: `name` is a NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // Protocol 0: a socket that sends only, and receives nothing.
        // SAFETY: constant arguments; the result is checked at once.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        set_option(&socket, libc::PACKET_VERSION, &version)?;
        let on: libc::c_int = 1;
        set_option(&socket, libc::PACKET_QDISC_BYPASS, &on)?;
        // A frame the device refuses is dropped (and counted by it), not
        // retried: offered load is what the device was given.
        set_option(&socket, libc::PACKET_LOSS, &on)?;
        let req = libc::tpacket_req {
            tp_block_size: BLOCK_SIZE as u32,
            tp_block_nr: BLOCKS as u32,
            tp_frame_size: SLOT_SIZE as u32,
            tp_frame_nr: SLOTS as u32,
        };
        set_option(&socket, libc::PACKET_TX_RING, &req)?;
        // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `addr` is a sockaddr_ll of the size passed.
        let ret = unsafe {
            libc::bind(
                fd,
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: maps the ring the kernel just made for this socket, at a
        // place of the kernel's choosing; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BLOCK_SIZE * BLOCKS,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ring = TxRing {
            socket,
            base: base.cast(),
            next: 0,
            pending: 0,
            frame_len: frame.len() as u32,
        };
        for slot in 0..SLOTS {
            // SAFETY: every slot lies inside the mapping and is still the
            // process's (status AVAILABLE): the kernel reads a slot only
            // after its status says SEND_REQUEST. The frame fits (checked
            // above).
            unsafe {
                let header = ring.slot(slot).cast::<libc::tpacket2_hdr>();
                (*header).tp_len = frame.len() as u32;
                std::ptr::copy_nonoverlapping(
                    frame.as_ptr(),
                    ring.slot(slot).add(DATA_OFFSET),
                    frame.len(),
                );
            }
        }
        Ok(ring)
    }

    fn slot(&self, index: usize) -> *mut u8 {
        // SAFETY: index < SLOTS, so the slot lies inside the mapping.
        unsafe { self.base.add(index * SLOT_SIZE) }
    }

    fn status(&self, index: usize) -> &AtomicU32 {
        // SAFETY: the status word is the first field of the slot's header,
        // 4-aligned (slots are 2 KiB-aligned in a page-aligned mapping), and
        // lives as long as `self`; the kernel writes it concurrently, which
        // is why it is read and written only as an atomic.
        unsafe { &*self.slot(index).cast::<AtomicU32>() }
    }

    /// Hands up to `n` frames to the kernel and has it send them; returns
    /// how many it took (fewer when the ring was full of frames still
    /// being sent).
    pub fn send(&mut self, n: usize) -> io::Result<usize> {
        let mut queued = 0;
        while queued < n.min(SLOTS) {
            let status = self.status(self.next);
            // Acquire: the kernel is done with the slot before we reuse it.
            match status.load(Ordering::Acquire) {
                libc::TP_STATUS_AVAILABLE => {}
                s if s & libc::TP_STATUS_WRONG_FORMAT != 0 => {
                    return Err(io::Error::other("the kernel refused the frame's format"))
                }
                _ => break,
            }
            self.set_len(self.next, self.frame_len);
            // Release: the slot's contents are in place before the kernel
            // sees the request.
            self.status(self.next)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.next = (self.next + 1) % SLOTS;
            queued += 1;
        }
        // MSG_DONTWAIT: hand the frames over and return, without waiting
        // for their buffers to be freed downstream (a frame sitting in
        // another CPU's backlog would otherwise hold the generator back and
        // hide receive livelock).
        // SAFETY: a send with no buffer; the ring holds the frames.
        let ret = unsafe {
            libc::send(
                self.socket.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
            )
        };
        if ret >= 0 {
            // The kernel took every requested slot.
            self.pending = self.next;
            return Ok(queued);
        }
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) {
            return Err(e);
        }
        // The device dropped a frame and said so (a tap with a full queue):
        // the kernel stopped at that slot, still requested, and would send
        // it again on the next call. It was offered once (the device counted
        // the drop), so it is given up: a length shorter than an Ethernet
        // header makes the kernel skip it (PACKET_LOSS) without sending.
        // The slots after it wait for the next call.
        while self.pending != self.next {
            let slot = self.pending;
            self.pending = (self.pending + 1) % SLOTS;
            if self.status(slot).load(Ordering::Acquire) == libc::TP_STATUS_SEND_REQUEST {
                self.set_len(slot, 1);
                break;
            }
        }
        Ok(queued)
    }

    /// Sets the length of the frame in `slot`, which the kernel is not
    /// reading: it is ours (available), or requested while no send call
    /// runs (the kernel reads requested slots only inside one).
    fn set_len(&self, slot: usize, len: u32) {
        // SAFETY: the header lies inside the mapping (slot < SLOTS), and
        // the kernel does not touch it now (see above).
        unsafe { (*self.slot(slot).cast::<libc::tpacket2_hdr>()).tp_len = len };
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; nothing refers
        // to it after this.
        unsafe { libc::munmap(self.base.cast(), BLOCK_SIZE * BLOCKS) };
    }
}

fn set_option<T>(socket: &OwnedFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a T of the size passed.
    let ret = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
