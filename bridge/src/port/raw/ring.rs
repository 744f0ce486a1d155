//! A TPACKET_V3 receive ring mapped into this process: the kernel fills
//! blocks of frames and hands each over through its status word; we parse
//! the block (`block.rs`), copy the frames out, and hand the block back.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::block::{Block, BlockError, Cursor, Frames, RingFrame, BLOCK_STATUS_OFFSET};
use crate::port::fd;

/// Ring geometry: blocks large enough for a 64 KiB offloaded segment with
/// its headers, so that no frame is ever cut short.
const BLOCK_SIZE: usize = 1 << 18;
const BLOCKS: usize = 16;
const FRAME_SIZE: usize = 1 << 11;
/// How long the kernel fills a block before handing it over anyway, in
/// milliseconds: the latency bound on a quiet link.
const BLOCK_TIMEOUT_MS: u32 = 1;

/// The mapped ring of one packet socket.
#[derive(Debug)]
pub struct RxRing {
    base: *mut u8,
    /// The block being read.
    current: usize,
    /// Where reading the current block stopped, when it did midway.
    cursor: Option<Cursor>,
}

// SAFETY: the mapping belongs to this ring alone (one ring per socket, and
// the ring is not Clone); moving it to another thread moves that ownership.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Makes the ring of socket `fd` and maps it.
    pub fn new(socket: &OwnedFd) -> io::Result<RxRing> {
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        fd::set_option(
            socket.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
        )?;
        let req = libc::tpacket_req3 {
            tp_block_size: BLOCK_SIZE as u32,
            tp_block_nr: BLOCKS as u32,
            tp_frame_size: FRAME_SIZE as u32,
            tp_frame_nr: (BLOCK_SIZE * BLOCKS / FRAME_SIZE) as u32,
            tp_retire_blk_tov: BLOCK_TIMEOUT_MS,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        fd::set_option(socket.as_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
        // SAFETY: maps the ring the kernel just made for this socket, at a
        // place of the kernel's choosing; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BLOCK_SIZE * BLOCKS,
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
            current: 0,
            cursor: None,
        })
    }

    fn status(&self, index: usize) -> &AtomicU32 {
        // SAFETY: index < BLOCKS, so the word lies inside the mapping, which
        // lives as long as `self`; it is 4-aligned (blocks are page-aligned)
        // and the kernel only ever accesses it as a whole u32.
        unsafe {
            &*self
                .base
                .add(index * BLOCK_SIZE + BLOCK_STATUS_OFFSET)
                .cast::<AtomicU32>()
        }
    }

    /// Hands each waiting frame to `f` while it returns true, and each
    /// malformed block entry to `bad`; returns how many frames `f` got.
    pub fn read(
        &mut self,
        mut f: impl FnMut(RingFrame<'_>) -> bool,
        mut bad: impl FnMut(BlockError),
    ) -> usize {
        let mut handed = 0;
        loop {
            // Acquire: the kernel fills the block, then publishes it by
            // setting TP_STATUS_USER; our reads of the frames come after.
            if self.status(self.current).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return handed;
            }
            // SAFETY: the block is ours while its status says USER: the
            // kernel writes none of it until we hand it back below, after
            // the last use of this slice.
            let bytes = unsafe {
                std::slice::from_raw_parts(self.base.add(self.current * BLOCK_SIZE), BLOCK_SIZE)
            };
            // The ring's blocks are BLOCK_SIZE long, more than a descriptor.
            let block = Block::new_checked(bytes).expect("a ring block holds its descriptor");
            let mut frames = match self.cursor.take() {
                Some(cursor) => Frames::resume(block, cursor),
                None => block.frames(),
            };
            let mut more = true;
            while more {
                match frames.next() {
                    None => break,
                    Some(Err(error)) => bad(error),
                    Some(Ok(frame)) => {
                        handed += 1;
                        more = f(frame);
                    }
                }
            }
            if !frames.is_done() {
                self.cursor = Some(frames.cursor());
                return handed;
            }
            // Release: our reads of the block happen before the kernel may
            // see it as its own again and refill it.
            self.status(self.current)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.current = (self.current + 1) % BLOCKS;
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
            libc::munmap(self.base.cast(), BLOCK_SIZE * BLOCKS);
        }
    }
}
