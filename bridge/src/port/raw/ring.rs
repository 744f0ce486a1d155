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
//! A frame is copied out, and its slot or block handed back at once, or
//! lent to the worker's batch: then the slot or block stays ours, the
//! kernel writing none of it, until [`RxRing::release`].
#![allow(unsafe_code)]

use std::fmt::Display;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::block::{Block, Cursor, Frames, RingFrame, BLOCK_STATUS_OFFSET};
use super::slot::{self, SLOT_STATUS_OFFSET};
use super::RingKind;
use crate::port::{fd, RxBatch, VNET_HDR_LEN};

/// A receive ring's size unless its port asks for another (`ring=`):
/// 2048 frame slots, or 16 blocks.
pub const DEFAULT_RING_BYTES: usize = 4 << 20;
/// The smallest ring a port may ask for: 32 frame slots.
pub const MIN_RING_BYTES: usize = 64 << 10;
/// The largest ring a port may ask for.
pub const MAX_RING_BYTES: usize = 256 << 20;

/// Block ring geometry: blocks large enough for a 64 KiB offloaded segment
/// with its headers, so that no frame is ever cut short; at least four:
/// with two, after the ring had been full with one block lent, Linux 6.18
/// was seen (one run in ten of `bin/tests/raw.rs`) to leave a partly
/// filled block unretired, its frames waiting until it filled.
const BLOCK_SIZE: usize = 1 << 18;
const MIN_BLOCKS: usize = 4;
const BLOCK_FRAME_SIZE: usize = 1 << 11;
/// How long the kernel fills a block before handing it over anyway, in
/// milliseconds: the latency bound on a quiet link (the least it takes).
const BLOCK_TIMEOUT_MS: u32 = 1;

/// Frame ring geometry: 2 KiB slots (a 1500-byte frame with its headers),
/// 32 to a kernel block.
const SLOT_SIZE: usize = 1 << 11;
const SLOT_BLOCK_SIZE: usize = 1 << 16;
/// The largest frame read from the receive queue: a 64 KiB offloaded
/// segment with its Ethernet header and the virtio-net header.
const COPY_MAX: usize = VNET_HDR_LEN + 65_600;

/// The mapped ring of one packet socket.
#[derive(Debug)]
pub struct RxRing {
    /// Shared with the batches that frames are lent to, which keep it
    /// mapped while they hold them.
    mapping: Arc<Mapping>,
    reader: Reader,
    /// The status words (their offsets) of the slots or blocks read whole
    /// whose frames were lent: handed back at [`release`](Self::release).
    held: Vec<usize>,
}

/// What became of a frame the ring handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// Its bytes were lent: its slot or block is not handed back before
    /// [`RxRing::release`].
    pub lent: bool,
    /// The next frame is wanted too.
    pub more: bool,
}

/// Where reading stands, by layout.
#[derive(Debug)]
enum Reader {
    Blocks(BlockReader),
    Slots(SlotReader),
}

/// The ring's memory, shared with the kernel.
#[derive(Debug)]
pub struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping belongs to one ring (one ring per socket); moving it
// to another thread moves that ownership.
unsafe impl Send for Mapping {}
// SAFETY: besides its ring, only batches share it, as what keeps lent
// frames mapped: they call nothing on it and read the lent bytes, which
// the kernel does not write while their slot or block is held, by raw
// copies.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The status word at byte `offset`.
    fn status(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= self.len && offset % 4 == 0);
        // SAFETY: callers pass the offset of a block's or slot's status
        // word, inside the mapping, which lives as long as `self`; it is
        // 4-aligned (blocks and slots are) and the kernel only ever
        // accesses it as a whole u32.
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    /// The `len` bytes at `offset`, a block or slot whose status says it
    /// is ours: the kernel writes none of it until it is handed back, and
    /// callers drop the slice before they hand it back.
    fn owned(&self, offset: usize, len: usize) -> &[u8] {
        debug_assert!(offset + len <= self.len);
        // SAFETY: inside the mapping, which lives as long as `self`, and
        // not written by the kernel while the caller owns it (above).
        unsafe { std::slice::from_raw_parts(self.base.add(offset), len) }
    }
}

impl Mapping {
    /// Lends `rest`, the end of a frame in this ring, to the batch's last
    /// frame; the batch holds the mapping until it is cleared. The frame's
    /// slot or block must stay ours until then: its reader is told so
    /// ([`Taken::lent`]) and hands it back at [`RxRing::release`].
    ///
    /// # Panics
    /// When `rest` does not lie in the ring.
    pub fn lend(this: &Arc<Mapping>, batch: &mut RxBatch, rest: &[u8]) {
        let start = rest.as_ptr() as usize;
        let base = this.base as usize;
        assert!(
            start >= base && start + rest.len() <= base + this.len,
            "lent bytes lie in the ring"
        );
        batch.keep(this);
        // SAFETY: `rest` lies in the mapping (checked), which the batch
        // holds until it is cleared; the kernel writes none of its slot or
        // block before `RxRing::release`, which the worker calls once the
        // batch has been sent.
        unsafe { batch.lend_rest(rest.as_ptr(), rest.len()) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `RxRing::new`, which
        // nothing references once the ring is dropped.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

impl RxRing {
    /// Makes the ring of socket `fd` in layout `kind`, of `bytes` rounded
    /// up to whole kernel blocks (64 KiB of frame slots; 256 KiB blocks,
    /// at least four), and maps it.
    pub fn new(socket: &OwnedFd, kind: RingKind, bytes: usize) -> io::Result<RxRing> {
        let version = match kind {
            RingKind::Block => libc::tpacket_versions::TPACKET_V3,
            RingKind::Frame => libc::tpacket_versions::TPACKET_V2,
        } as libc::c_int;
        fd::set_option(
            socket.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
        )?;
        let (len, reader) = match kind {
            RingKind::Block => {
                let blocks = bytes.div_ceil(BLOCK_SIZE).max(MIN_BLOCKS);
                let req = libc::tpacket_req3 {
                    tp_block_size: BLOCK_SIZE as u32,
                    tp_block_nr: blocks as u32,
                    tp_frame_size: BLOCK_FRAME_SIZE as u32,
                    tp_frame_nr: (BLOCK_SIZE * blocks / BLOCK_FRAME_SIZE) as u32,
                    tp_retire_blk_tov: BLOCK_TIMEOUT_MS,
                    tp_sizeof_priv: 0,
                    tp_feature_req_word: 0,
                };
                fd::set_option(socket.as_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
                (
                    BLOCK_SIZE * blocks,
                    Reader::Blocks(BlockReader {
                        current: 0,
                        blocks,
                        cursor: None,
                    }),
                )
            }
            RingKind::Frame => {
                let len = bytes.div_ceil(SLOT_BLOCK_SIZE).max(1) * SLOT_BLOCK_SIZE;
                let slots = len / SLOT_SIZE;
                let req = libc::tpacket_req {
                    tp_block_size: SLOT_BLOCK_SIZE as u32,
                    tp_block_nr: (len / SLOT_BLOCK_SIZE) as u32,
                    tp_frame_size: SLOT_SIZE as u32,
                    tp_frame_nr: slots as u32,
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
                (
                    len,
                    Reader::Slots(SlotReader {
                        current: 0,
                        slots,
                        copy: vec![0; COPY_MAX],
                        taken_error: None,
                    }),
                )
            }
        };
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
            mapping: Arc::new(Mapping {
                base: base.cast(),
                len,
            }),
            reader,
            held: Vec::new(),
        })
    }

    /// Hands back to the kernel the slots and blocks whose frames were
    /// lent, once the batch they were lent to is done with them.
    pub fn release(&mut self) {
        for &offset in &self.held {
            // Release: our reads of the lent frames happen before the
            // kernel may refill their slot or block.
            self.mapping
                .status(offset)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        self.held.clear();
    }

    /// A socket error that reading the receive queue took, if any.
    pub fn take_error(&mut self) -> Option<io::Error> {
        match &mut self.reader {
            Reader::Slots(slots) => slots.taken_error.take(),
            Reader::Blocks(_) => None,
        }
    }

    /// Hands each waiting frame to `f` while it wants more, and each
    /// malformed ring entry to `bad`; returns how many frames `f` got.
    /// `socket` is the ring's own, whose receive queue holds the frames
    /// longer than a slot. `f` may lend a frame that lies in the ring: it is
    /// given the mapping, which a batch holds while frames are lent to it.
    pub fn read(
        &mut self,
        socket: &OwnedFd,
        f: impl FnMut(RingFrame<'_>, &Arc<Mapping>) -> Taken,
        bad: impl FnMut(&dyn Display),
    ) -> usize {
        match &mut self.reader {
            Reader::Blocks(blocks) => blocks.read(&self.mapping, &mut self.held, f, bad),
            Reader::Slots(slots) => slots.read(&self.mapping, &mut self.held, socket, f, bad),
        }
    }
}

/// Reading a block ring.
#[derive(Debug)]
struct BlockReader {
    /// The block being read.
    current: usize,
    /// How many the ring has.
    blocks: usize,
    /// Where reading the current block stopped, when it did midway.
    cursor: Option<Cursor>,
}

impl BlockReader {
    fn read(
        &mut self,
        ring: &Arc<Mapping>,
        held: &mut Vec<usize>,
        mut f: impl FnMut(RingFrame<'_>, &Arc<Mapping>) -> Taken,
        mut bad: impl FnMut(&dyn Display),
    ) -> usize {
        let mut handed = 0;
        loop {
            let offset = self.current * BLOCK_SIZE + BLOCK_STATUS_OFFSET;
            let status = ring.status(offset);
            // Acquire: the kernel fills the block, then publishes it by
            // setting TP_STATUS_USER; our reads of the frames come after.
            if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return handed;
            }
            let bytes = ring.owned(self.current * BLOCK_SIZE, BLOCK_SIZE);
            // The ring's blocks are BLOCK_SIZE long, more than a descriptor.
            let block = Block::new_checked(bytes).expect("a ring block holds its descriptor");
            let mut frames = match self.cursor.take() {
                Some(cursor) => Frames::resume(block, cursor),
                None => block.frames(),
            };
            let mut more = true;
            // Frames of this block lent in this read: frames lent in an
            // earlier one (it stopped midway) are released already.
            let mut lent = false;
            while more {
                match frames.next() {
                    None => break,
                    Some(Err(error)) => bad(&error),
                    Some(Ok(frame)) => {
                        handed += 1;
                        let taken = f(frame, ring);
                        lent |= taken.lent;
                        more = taken.more;
                    }
                }
            }
            if !frames.is_done() {
                // Not handed back before it is read to its end.
                self.cursor = Some(frames.cursor());
                return handed;
            }
            self.current = (self.current + 1) % self.blocks;
            if lent {
                held.push(offset);
            } else {
                // Release: our reads of the block happen before the kernel
                // may see it as its own again and refill it.
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            }
            if !more {
                return handed;
            }
        }
    }
}

/// Reading a frame ring.
#[derive(Debug)]
struct SlotReader {
    /// The slot to read next.
    current: usize,
    /// How many the ring has.
    slots: usize,
    /// A frame longer than a slot, read from the receive queue.
    copy: Vec<u8>,
    /// A socket error a `recv` on the receive queue took (and so cleared)
    /// before its frame, kept for `take_error`.
    taken_error: Option<io::Error>,
}

impl SlotReader {
    fn read(
        &mut self,
        ring: &Arc<Mapping>,
        held: &mut Vec<usize>,
        socket: &OwnedFd,
        mut f: impl FnMut(RingFrame<'_>, &Arc<Mapping>) -> Taken,
        mut bad: impl FnMut(&dyn Display),
    ) -> usize {
        let mut handed = 0;
        loop {
            let offset = self.current * SLOT_SIZE + SLOT_STATUS_OFFSET;
            let status = ring.status(offset);
            // Acquire: as for blocks, per slot.
            let word = status.load(Ordering::Acquire);
            if word & libc::TP_STATUS_USER == 0 {
                return handed;
            }
            let bytes = ring.owned(self.current * SLOT_SIZE, SLOT_SIZE);
            self.current = (self.current + 1) % self.slots;
            // A slot marked COPY has its whole frame next in the receive
            // queue: taken whatever the slot holds, so that the queue stays
            // in step with the ring.
            let whole = if word & libc::TP_STATUS_COPY != 0 {
                recv_whole(socket, &mut self.copy, &mut self.taken_error)
            } else {
                None
            };
            let taken = match slot::parse(bytes) {
                Err(error) => {
                    bad(&error);
                    Taken {
                        lent: false,
                        more: true,
                    }
                }
                Ok(slot) => {
                    handed += 1;
                    let copy = &self.copy;
                    match whole {
                        // The frame's own length: this slot's frame. The
                        // slot's tag is its tag.
                        Some(len) if len >= VNET_HDR_LEN && len - VNET_HDR_LEN == slot.len => f(
                            RingFrame {
                                vnet: &copy[..VNET_HDR_LEN],
                                frame: &copy[VNET_HDR_LEN..len.min(copy.len())],
                                vlan: slot.frame.vlan,
                                truncated: len > copy.len(),
                                in_ring: false,
                            },
                            ring,
                        ),
                        // Another frame: the queue is out of step (nothing
                        // the kernel does, but then no later slot could
                        // trust it). Emptied, it is in step again.
                        Some(_) => {
                            drain(socket, &mut self.copy, &mut self.taken_error, self.slots);
                            f(slot.frame, ring)
                        }
                        // The slot's cut copy, counted as oversize.
                        None => f(slot.frame, ring),
                    }
                }
            };
            if taken.lent {
                held.push(offset);
            } else {
                // Release: as for blocks, per slot.
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            }
            if !taken.more {
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

/// Empties the socket's receive queue (bounded: more than a ring of
/// `slots` holds).
fn drain(socket: &OwnedFd, buffer: &mut [u8], taken: &mut Option<io::Error>, slots: usize) {
    for _ in 0..2 * slots {
        if recv_whole(socket, buffer, taken).is_none() {
            return;
        }
    }
}
