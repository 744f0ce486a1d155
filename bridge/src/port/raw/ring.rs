//! The receive ring of a packet socket, mapped into this process, in one
//! of two layouts (`RingKind`):
//!
//! - frames (TPACKET_V2): one slot per frame, each handed over through its
//!   own status word, and the socket made readable, as soon as it is
//!   filled; a frame longer than a slot also waits whole in the socket's
//!   receive queue (`PACKET_COPY_THRESH`), read from there when its slot
//!   comes up (`slot.rs` parses slots);
//! - blocks (TPACKET_V3): the kernel fills blocks of frames and hands each
//!   over when it is full or after `BLOCK_TIMEOUT_MS` (`block.rs` parses
//!   blocks).
//!
//! Either way we copy the frames out and hand the slot or block back.
#![allow(unsafe_code)]

use std::fmt::Display;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::block::{Block, Cursor, Frames, RingFrame, BLOCK_STATUS_OFFSET};
use super::slot::{self, SLOT_STATUS_OFFSET};
use super::RingKind;
use crate::port::{fd, VNET_HDR_LEN};

/// Block ring geometry: blocks large enough for a 64 KiB offloaded segment
/// with its headers, so that no frame is ever cut short.
const BLOCK_SIZE: usize = 1 << 18;
const BLOCKS: usize = 16;
const BLOCK_FRAME_SIZE: usize = 1 << 11;
/// How long the kernel fills a block before handing it over anyway, in
/// milliseconds: the latency bound on a quiet link (the least it takes).
const BLOCK_TIMEOUT_MS: u32 = 1;

/// Frame ring geometry: 2 KiB slots (a 1500-byte frame with its headers),
/// 32 to a kernel block, 2048 in all: the same 4 MiB as the block ring.
const SLOT_SIZE: usize = 1 << 11;
const SLOT_BLOCK_SIZE: usize = 1 << 16;
const SLOTS: usize = 2048;
/// The largest frame read from the receive queue: a 64 KiB offloaded
/// segment with its Ethernet header and the virtio-net header.
const COPY_MAX: usize = VNET_HDR_LEN + 65_600;

/// The mapped ring of one packet socket.
#[derive(Debug)]
pub struct RxRing {
    base: *mut u8,
    len: usize,
    layout: Layout,
    /// A socket error a `recv` on the receive queue took (and so cleared)
    /// before its frame, kept for `take_error`.
    taken_error: Option<io::Error>,
}

#[derive(Debug)]
enum Layout {
    Blocks {
        /// The block being read.
        current: usize,
        /// Where reading the current block stopped, when it did midway.
        cursor: Option<Cursor>,
    },
    Frames {
        /// The slot to read next.
        current: usize,
        /// A frame longer than a slot, read from the receive queue.
        copy: Vec<u8>,
    },
}

// SAFETY: the mapping belongs to this ring alone (one ring per socket, and
// the ring is not Clone); moving it to another thread moves that ownership.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Makes the ring of socket `fd` in layout `kind` and maps it.
    pub fn new(socket: &OwnedFd, kind: RingKind) -> io::Result<RxRing> {
        let (version, len, layout) = match kind {
            RingKind::Block => (
                libc::tpacket_versions::TPACKET_V3,
                BLOCK_SIZE * BLOCKS,
                Layout::Blocks {
                    current: 0,
                    cursor: None,
                },
            ),
            RingKind::Frame => (
                libc::tpacket_versions::TPACKET_V2,
                SLOT_SIZE * SLOTS,
                Layout::Frames {
                    current: 0,
                    copy: vec![0; COPY_MAX],
                },
            ),
        };
        let version = version as libc::c_int;
        fd::set_option(
            socket.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
        )?;
        match kind {
            RingKind::Block => {
                let req = libc::tpacket_req3 {
                    tp_block_size: BLOCK_SIZE as u32,
                    tp_block_nr: BLOCKS as u32,
                    tp_frame_size: BLOCK_FRAME_SIZE as u32,
                    tp_frame_nr: (BLOCK_SIZE * BLOCKS / BLOCK_FRAME_SIZE) as u32,
                    tp_retire_blk_tov: BLOCK_TIMEOUT_MS,
                    tp_sizeof_priv: 0,
                    tp_feature_req_word: 0,
                };
                fd::set_option(socket.as_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
            }
            RingKind::Frame => {
                let req = libc::tpacket_req {
                    tp_block_size: SLOT_BLOCK_SIZE as u32,
                    tp_block_nr: (SLOT_SIZE * SLOTS / SLOT_BLOCK_SIZE) as u32,
                    tp_frame_size: SLOT_SIZE as u32,
                    tp_frame_nr: SLOTS as u32,
                };
                fd::set_option(socket.as_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
                // Any threshold turns the receive queue on for frames
                // longer than a slot.
                let on: libc::c_int = 1;
                fd::set_option(
                    socket.as_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_COPY_THRESH,
                    &on,
                )?;
            }
        }
        // SAFETY: maps the ring the kernel just made for this socket, at a
        // place of the kernel's choosing; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                socket.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RxRing {
            base: base.cast(),
            len,
            layout,
            taken_error: None,
        })
    }

    /// A socket error that reading the receive queue took, if any.
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.taken_error.take()
    }

    /// The status word at byte `offset` of the mapping.
    fn status(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= self.len && offset % 4 == 0);
        // SAFETY: callers pass the offset of a block's or slot's status
        // word, inside the mapping, which lives as long as `self`; it is
        // 4-aligned (blocks and slots are) and the kernel only ever
        // accesses it as a whole u32.
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    /// Hands each waiting frame to `f` while it returns true, and each
    /// malformed ring entry to `bad`; returns how many frames `f` got.
    /// `socket` is the ring's own, whose receive queue holds the frames
    /// longer than a slot.
    pub fn read(
        &mut self,
        socket: &OwnedFd,
        f: impl FnMut(RingFrame<'_>) -> bool,
        bad: impl FnMut(&dyn Display),
    ) -> usize {
        match self.layout {
            Layout::Blocks { .. } => self.read_blocks(f, bad),
            Layout::Frames { .. } => self.read_slots(socket, f, bad),
        }
    }

    fn read_blocks(
        &mut self,
        mut f: impl FnMut(RingFrame<'_>) -> bool,
        mut bad: impl FnMut(&dyn Display),
    ) -> usize {
        let mut handed = 0;
        loop {
            let Layout::Blocks { current, cursor } = &mut self.layout else {
                unreachable!("a block ring");
            };
            let (index, resume) = (*current, cursor.take());
            let status = index * BLOCK_SIZE + BLOCK_STATUS_OFFSET;
            // Acquire: the kernel fills the block, then publishes it by
            // setting TP_STATUS_USER; our reads of the frames come after.
            if self.status(status).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return handed;
            }
            // SAFETY: the block is ours while its status says USER: the
            // kernel writes none of it until we hand it back below, after
            // the last use of this slice.
            let bytes = unsafe {
                std::slice::from_raw_parts(self.base.add(index * BLOCK_SIZE), BLOCK_SIZE)
            };
            // The ring's blocks are BLOCK_SIZE long, more than a descriptor.
            let block = Block::new_checked(bytes).expect("a ring block holds its descriptor");
            let mut frames = match resume {
                Some(cursor) => Frames::resume(block, cursor),
                None => block.frames(),
            };
            let mut more = true;
            while more {
                match frames.next() {
                    None => break,
                    Some(Err(error)) => bad(&error),
                    Some(Ok(frame)) => {
                        handed += 1;
                        more = f(frame);
                    }
                }
            }
            let Layout::Blocks { current, cursor } = &mut self.layout else {
                unreachable!("a block ring");
            };
            if !frames.is_done() {
                *cursor = Some(frames.cursor());
                return handed;
            }
            *current = (index + 1) % BLOCKS;
            // Release: our reads of the block happen before the kernel may
            // see it as its own again and refill it.
            self.status(status)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            if !more {
                return handed;
            }
        }
    }

    fn read_slots(
        &mut self,
        socket: &OwnedFd,
        mut f: impl FnMut(RingFrame<'_>) -> bool,
        mut bad: impl FnMut(&dyn Display),
    ) -> usize {
        let mut handed = 0;
        loop {
            let index = match &self.layout {
                Layout::Frames { current, .. } => *current,
                Layout::Blocks { .. } => unreachable!("a frame ring"),
            };
            let status = index * SLOT_SIZE + SLOT_STATUS_OFFSET;
            // Acquire: as for blocks, per slot.
            let word = self.status(status).load(Ordering::Acquire);
            if word & libc::TP_STATUS_USER == 0 {
                return handed;
            }
            // SAFETY: the slot is ours while its status says USER, until we
            // hand it back below, after the last use of this slice.
            let bytes =
                unsafe { std::slice::from_raw_parts(self.base.add(index * SLOT_SIZE), SLOT_SIZE) };
            let Layout::Frames { current, copy } = &mut self.layout else {
                unreachable!("a frame ring");
            };
            *current = (index + 1) % SLOTS;
            // A slot marked COPY has its whole frame next in the receive
            // queue: taken whatever the slot holds, so that the queue stays
            // in step with the ring.
            let whole = if word & libc::TP_STATUS_COPY != 0 {
                recv_whole(socket, copy, &mut self.taken_error)
            } else {
                None
            };
            let more = match slot::parse(bytes) {
                Err(error) => {
                    bad(&error);
                    true
                }
                Ok(slot) => {
                    handed += 1;
                    match whole {
                        // The frame's own length: this slot's frame. The
                        // slot's tag is its tag.
                        Some(len) if len >= VNET_HDR_LEN && len - VNET_HDR_LEN == slot.len => {
                            f(RingFrame {
                                vnet: &copy[..VNET_HDR_LEN],
                                frame: &copy[VNET_HDR_LEN..len.min(copy.len())],
                                vlan: slot.frame.vlan,
                                truncated: len > copy.len(),
                            })
                        }
                        // Another frame: the queue is out of step (nothing
                        // the kernel does, but then no later slot could
                        // trust it). Emptied, it is in step again.
                        Some(_) => {
                            drain(socket, copy, &mut self.taken_error);
                            f(slot.frame)
                        }
                        // The slot's cut copy, counted as oversize.
                        None => f(slot.frame),
                    }
                }
            };
            // Release: as for blocks, per slot.
            self.status(status)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            if !more {
                return handed;
            }
        }
    }
}

/// What one `recv` on the receive queue got.
enum Received {
    /// A frame of this length (virtio-net header included), however much
    /// of it the buffer took.
    Frame(usize),
    /// Nothing waits.
    Empty,
    /// The call failed (a pending socket error, which it cleared).
    Failed(io::Error),
}

fn recv_once(socket: &OwnedFd, buffer: &mut [u8]) -> Received {
    loop {
        // SAFETY: `buffer` is writable for its length for the call.
        let ret = unsafe {
            libc::recv(
                socket.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if ret >= 0 {
            return Received::Frame(ret as usize);
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Received::Empty,
            _ => return Received::Failed(error),
        }
    }
}

/// Reads the next frame of the socket's receive queue into `buffer`
/// without waiting; returns its whole length (virtio-net header included),
/// or `None` when the queue is empty. A socket error (ENETDOWN when the
/// link goes down) comes before any frame and is cleared by the call that
/// reports it: it goes to `taken`, and the frame is read again.
fn recv_whole(socket: &OwnedFd, buffer: &mut [u8], taken: &mut Option<io::Error>) -> Option<usize> {
    for _ in 0..3 {
        match recv_once(socket, buffer) {
            Received::Frame(len) => return Some(len),
            Received::Empty => return None,
            Received::Failed(error) => {
                taken.get_or_insert(error);
            }
        }
    }
    None
}

/// Empties the socket's receive queue (bounded: more than the ring holds).
fn drain(socket: &OwnedFd, buffer: &mut [u8], taken: &mut Option<io::Error>) {
    for _ in 0..2 * SLOTS {
        if recv_whole(socket, buffer, taken).is_none() {
            return;
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which nothing
        // references once the ring is dropped.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}
