//! The split virtqueue (virtio 1.x, 2.7) from the device's side, over
//! memory the driver owns and may change at any moment.
//!
//! The project's own rather than virtio-queue's: a batch takes one acquire
//! load of the driver's index and publishes its used entries with one
//! release store, where virtio-queue's per-element API loads and stores
//! per frame; and a chain that breaks a rule (a descriptor outside the
//! memory table, a loop, an indirect table that was not negotiated, a
//! length of zero) is reported as such, where virtio-queue ends it
//! silently as a short chain. See docs/design.md.
//!
//! Every field the driver writes is read once into a local before it is
//! checked and used; indices are reduced modulo the ring size; every
//! range is checked to lie in one region of the memory table before a byte
//! of it is touched. Nothing the driver writes can make this code panic
//! or touch memory outside the table.
#![allow(unsafe_code)]

use std::sync::atomic::{fence, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use super::memory::GuestMemory;
use crate::port::cache;
use crate::port::copy::copy_bytes;
use crate::port::{Lent, Outgoing, RxBatch};

/// Descriptor flags (virtio 1.x, 2.7.5).
const DESC_F_NEXT: u16 = 1;
const DESC_F_WRITE: u16 = 2;
const DESC_F_INDIRECT: u16 = 4;
/// The driver asks for no interrupt (without EVENT_IDX).
const AVAIL_F_NO_INTERRUPT: u16 = 1;
/// The device asks for no kick (without EVENT_IDX).
const USED_F_NO_NOTIFY: u16 = 1;

/// The largest ring virtio allows.
pub const MAX_RING_SIZE: u16 = 32_768;

/// The most descriptors one chain may have, as Linux's vhost allows
/// (UIO_MAXIOV): a frame of 64 KiB in 64-byte pieces. A longer chain is
/// dropped, so that a walk costs at most this many reads whatever the
/// ring's size.
pub const MAX_CHAIN_DESCRIPTORS: u16 = 1024;

/// Where a ring lives, in the frontend's virtual addresses (as
/// SET_VRING_ADDR gives them), and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingLayout {
    /// Entries: a power of two up to 32768.
    pub size: u16,
    /// The descriptor table.
    pub desc: u64,
    /// The driver area (avail ring).
    pub avail: u64,
    /// The device area (used ring).
    pub used: u64,
}

/// Why a ring could not be set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Not a power of two, or too large.
    #[error("ring size {0} is not a power of two up to 32768")]
    Size(u16),
    /// A part of the ring is outside the memory table or misaligned.
    #[error("the ring's {0} is outside the memory table or misaligned")]
    Area(&'static str),
}

/// Why a chain was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The avail ring named a head past the ring's end.
    #[error("head {0} outside the ring")]
    Head(u16),
    /// A descriptor's next index is past the ring's end.
    #[error("next index {0} outside the ring")]
    Next(u16),
    /// More descriptors than the ring holds: a loop.
    #[error("chain longer than the ring (a loop)")]
    Loop,
    /// More descriptors than [`MAX_CHAIN_DESCRIPTORS`].
    #[error("chain of more than 1024 descriptors")]
    Descriptors,
    /// An indirect table, which was not negotiated.
    #[error("indirect descriptor (not negotiated)")]
    Indirect,
    /// A buffer outside the memory table.
    #[error("buffer outside the memory table")]
    Outside,
    /// A buffer the device may write where it must read, or the other way.
    #[error("buffer of the wrong direction")]
    Direction,
    /// No bytes at all, or fewer than a header.
    #[error("chain too short")]
    Short,
    /// More bytes than any frame.
    #[error("chain longer than the largest frame")]
    Long,
    /// The driver says more buffers are available than the ring holds.
    #[error("avail index runs {0} entries ahead of the device")]
    Index(u16),
}

/// One buffer of a chain, checked to lie in one region of the memory
/// table and found there once, when the chain is walked: where it lies in
/// this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Where the buffer is mapped here.
    pub at: *mut u8,
    /// Length in bytes.
    pub len: u32,
}

// SAFETY: a segment is an address and a length, read through only by the
// ring that walked it, which holds the memory's mapping; the queue that
// keeps a copy between two calls on its ring (the first chain of a
// mergeable frame) uses it only within the call that made it.
unsafe impl Send for Segment {}

/// A chain taken from the avail ring: its head (to return it by) and its
/// buffers' total length; the buffers are [`SplitRing::segments`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    /// The head descriptor's index.
    pub head: u16,
    /// Bytes in all its buffers.
    pub total: u32,
}

/// What the device reads (driver to device) or writes (device to driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Buffers the device reads: a frame the driver sends.
    Read,
    /// Buffers the device writes: room for a frame to the driver.
    Write,
}

/// Numbers every ring made, so that chains taken from one are never
/// returned to another that replaced it.
static RINGS: AtomicU64 = AtomicU64::new(0);

/// A running split ring.
#[derive(Debug)]
pub struct SplitRing {
    /// Which ring this is: no two rings of the process share it.
    id: u64,
    memory: Arc<GuestMemory>,
    size: u16,
    desc: *mut u8,
    avail: *mut u8,
    used: *mut u8,
    next_avail: u16,
    /// The driver's avail index as last read: chains up to it are taken
    /// without reading the index again, which the driver's core keeps
    /// writing (one load per batch, not per chain).
    avail_end: u16,
    next_used: u16,
    /// The used index the driver was last notified at (EVENT_IDX).
    signalled: u16,
    event_idx: bool,
    /// Whether the driver was asked to kick (without EVENT_IDX: the used
    /// ring's flag is clear), so that a busy device writes the flag only
    /// when it changes.
    kicks: bool,
    /// Used elements (head, length) held back behind a chain whose frame
    /// is lent, in the order their chains were taken: every chain is used
    /// in the order the driver made it available (VIRTIO_F_IN_ORDER).
    held: Vec<(u16, u32)>,
    /// The head of the last chain `pop` refused and returned.
    refused: u16,
    /// The chain just popped.
    segments: Vec<Segment>,
    /// Descriptors read so far, good chains and bad: what a caller's work
    /// budget counts.
    walked: u64,
    /// The guest region (its address, size and mapping) the last buffer
    /// fetched ahead lay in: most lie in the one the last did, and the
    /// ring's memory is the same for its life.
    fetched: (u64, u64, *const u8),
}

// SAFETY: the pointers point into `memory`, which the ring keeps alive and
// which is Send + Sync; the ring is used by one thread at a time (its
// owner holds it under a mutex).
unsafe impl Send for SplitRing {}

#[repr(C)]
#[derive(Clone, Copy)]
struct Descriptor {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

impl SplitRing {
    /// A ring at `layout` in `memory`, starting at avail index `base` and
    /// at the used index the driver left in the ring.
    pub fn new(
        memory: Arc<GuestMemory>,
        layout: RingLayout,
        base: u16,
        event_idx: bool,
    ) -> Result<SplitRing, LayoutError> {
        let size = layout.size;
        if size == 0 || !size.is_power_of_two() || size > MAX_RING_SIZE {
            return Err(LayoutError::Size(size));
        }
        let n = usize::from(size);
        let area = |addr: u64, len: usize, align: usize, what| {
            memory
                .user(addr, len)
                .filter(|p| (*p as usize) % align == 0)
                .ok_or(LayoutError::Area(what))
        };
        let desc = area(layout.desc, 16 * n, 16, "descriptor table")?;
        let avail = area(layout.avail, 6 + 2 * n, 2, "avail ring")?;
        let used = area(layout.used, 6 + 8 * n, 4, "used ring")?;
        let mut ring = SplitRing {
            id: RINGS.fetch_add(1, Ordering::Relaxed),
            memory,
            size,
            desc,
            avail,
            used,
            next_avail: base,
            avail_end: base,
            next_used: 0,
            signalled: 0,
            event_idx,
            kicks: true,
            held: Vec::new(),
            refused: 0,
            segments: Vec::with_capacity(n.min(64)),
            walked: 0,
            fetched: (0, 0, std::ptr::null()),
        };
        ring.next_used = ring.used_idx().load(Ordering::Acquire);
        ring.signalled = ring.next_used;
        Ok(ring)
    }

    /// The memory the ring lives in.
    pub fn memory(&self) -> &GuestMemory {
        &self.memory
    }

    /// The memory the ring lives in, shared: what keeps a lent frame's
    /// bytes mapped.
    pub fn shared_memory(&self) -> &Arc<GuestMemory> {
        &self.memory
    }

    /// This ring's number, unlike any other ring's.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The next avail index the device will take (what GET_VRING_BASE
    /// answers).
    pub fn next_avail(&self) -> u16 {
        self.next_avail
    }

    /// The ring's size.
    pub fn size(&self) -> u16 {
        self.size
    }

    fn avail_idx(&self) -> &AtomicU16 {
        // SAFETY: `avail + 2` is inside the checked avail area and 2-aligned;
        // the driver writes it concurrently, so it is only ever accessed
        // atomically here.
        unsafe { &*self.avail.add(2).cast::<AtomicU16>() }
    }

    fn used_idx(&self) -> &AtomicU16 {
        // SAFETY: `used + 2` is inside the checked used area and 2-aligned.
        unsafe { &*self.used.add(2).cast::<AtomicU16>() }
    }

    fn used_flags(&self) -> &AtomicU16 {
        // SAFETY: `used` starts the checked used area and is 4-aligned.
        unsafe { &*self.used.cast::<AtomicU16>() }
    }

    fn avail_flags(&self) -> u16 {
        // SAFETY: `avail` starts the checked avail area and is 2-aligned.
        let flags = unsafe { &*self.avail.cast::<AtomicU16>() };
        u16::from_le(flags.load(Ordering::Relaxed))
    }

    /// How many chains the driver has made available beyond the device's
    /// position; an error when that is more than the ring holds.
    #[inline]
    pub fn available(&self) -> Result<u16, ChainError> {
        let idx = u16::from_le(self.avail_idx().load(Ordering::Acquire));
        let ahead = idx.wrapping_sub(self.next_avail);
        if ahead > self.size {
            return Err(ChainError::Index(ahead));
        }
        Ok(ahead)
    }

    /// The head the driver put in the avail ring at `index` (taken modulo
    /// the ring's size).
    #[inline(always)]
    fn avail_entry(&self, index: u16) -> u16 {
        let slot = usize::from(index & (self.size - 1));
        // SAFETY: `slot < size`: the entry lies in the checked avail area,
        // 2-aligned; the entries up to the index loaded with Acquire in
        // `available` were published before it.
        u16::from_le(unsafe { self.avail.add(4 + 2 * slot).cast::<u16>().read_volatile() })
    }

    fn descriptor(&self, index: u16) -> Descriptor {
        debug_assert!(index < self.size);
        // SAFETY: `index < size`, so the 16 bytes lie in the checked,
        // 16-aligned descriptor table. A volatile read copies them once;
        // the driver may change them afterwards, which this copy ignores.
        let raw = unsafe {
            self.desc
                .add(16 * usize::from(index))
                .cast::<Descriptor>()
                .read_volatile()
        };
        Descriptor {
            addr: u64::from_le(raw.addr),
            len: u32::from_le(raw.len),
            flags: u16::from_le(raw.flags),
            next: u16::from_le(raw.next),
        }
    }

    /// Takes the next available chain, whose buffers must all go in
    /// `direction` and hold between `min` and `max` bytes; `Ok(None)` when
    /// none is available. A chain that breaks a rule is consumed and
    /// returned to the driver unused (length 0) where its head is valid,
    /// and reported; the ring goes on.
    ///
    /// A chain of one buffer (what drivers make of nearly every frame) is
    /// taken here, inlined into the caller's loop; any other, and every
    /// rule broken, by [`walk`](Self::walk), which reads the chain again
    /// from its head.
    #[inline(always)]
    pub fn pop(
        &mut self,
        direction: Direction,
        min: u32,
        max: u32,
    ) -> Result<Option<Chain>, ChainError> {
        if self.next_avail == self.avail_end && !self.refill()? {
            return Ok(None);
        }
        let head = self.avail_entry(self.next_avail);
        self.next_avail = self.next_avail.wrapping_add(1);
        if head < self.size {
            let desc = self.descriptor(head);
            let writable = desc.flags & DESC_F_WRITE != 0;
            if desc.flags & (DESC_F_NEXT | DESC_F_INDIRECT) == 0
                && writable == (direction == Direction::Write)
                && desc.len >= min.max(1)
                && (direction == Direction::Write || desc.len <= max)
            {
                if let Some(at) = self.memory.guest(desc.addr, desc.len as usize) {
                    self.walked += 1;
                    self.segments.clear();
                    self.segments.push(Segment { at, len: desc.len });
                    return Ok(Some(Chain {
                        head,
                        total: desc.len,
                    }));
                }
            }
        }
        self.pop_chain(head, direction, min, max)
    }

    /// Reads the driver's avail index again when every chain up to the
    /// last one read has been taken; false when there are no more.
    #[inline(never)]
    fn refill(&mut self) -> Result<bool, ChainError> {
        let ahead = self.available()?;
        self.avail_end = self.next_avail.wrapping_add(ahead);
        Ok(ahead > 0)
    }

    /// Fetches ahead of [`pop`](Self::pop) the next `count` chains the
    /// driver has made available (fewer when it made fewer): the first 128
    /// bytes of each chain's buffer (on a transmit ring a frame's header
    /// and the bytes the pipeline reads; on a receive ring the room a small
    /// frame is written to). The misses, on lines the driver's core last
    /// touched, then overlap instead of coming one frame at a time.
    /// Nothing read here is relied on: `pop` reads the chains again and
    /// checks them. Returns how many chains it fetched.
    #[inline(never)]
    pub fn prefetch(&mut self, count: u16) -> u16 {
        if self.next_avail == self.avail_end && !matches!(self.refill(), Ok(true)) {
            return 0;
        }
        self.prefetch_from(0, count);
        count.min(self.avail_end.wrapping_sub(self.next_avail))
    }

    /// Asks for the used ring's lines that the next `count` used elements
    /// go to with the right to write them ([`cache::own`]), before the
    /// first is written. The driver's core read those lines last (it
    /// polls the used ring), so each first write would wait for that core
    /// to give its copy up, and every later store, the frames' own
    /// included, would wait behind it.
    #[inline(never)]
    pub fn own_used(&self, count: u16) {
        // Elements are 8 bytes, eight to a line (not aligned to lines:
        // they start 4 bytes into the area), so one element in eight and
        // the one past the last name every line they lie in. Nothing is
        // asked for while nothing is to be written: the line the driver
        // polls the used index in holds elements too.
        if count == 0 {
            return;
        }
        let count = count.min(self.size);
        let mut i = 0;
        while i <= count {
            let slot = usize::from(self.next_used.wrapping_add(i) & (self.size - 1));
            cache::own(self.used.wrapping_add(4 + 8 * slot));
            i += 8;
        }
    }

    /// As [`prefetch`](Self::prefetch), for the `count` chains from the
    /// one `from` past the next, of those the avail index last read
    /// showed (it is not read again here): a caller that fetches a few
    /// chains ahead as it takes each.
    #[inline(never)]
    fn prefetch_from(&mut self, from: u16, count: u16) {
        let shown = self.avail_end.wrapping_sub(self.next_avail);
        if from >= shown {
            return;
        }
        let n = count.min(shown - from);
        let mut region = self.fetched;
        for i in from..from + n {
            let head = self.avail_entry(self.next_avail.wrapping_add(i));
            let Some(addr) = self.buffer_address(head) else {
                continue;
            };
            let mut offset = addr.wrapping_sub(region.0);
            if offset >= region.1 {
                let Some(found) = self.memory.region_of(addr) else {
                    continue;
                };
                region = found;
                offset = addr.wrapping_sub(region.0);
            }
            let at = region.2.wrapping_add(offset as usize);
            cache::fetch(at);
            cache::fetch(at.wrapping_add(64));
        }
        self.fetched = region;
    }

    /// As [`prefetch_from`](Self::prefetch_from) for the one chain `ahead`
    /// past the next, inlined into a caller that fetches a few chains
    /// ahead as it takes each; a buffer outside the region the last one
    /// lay in is left to `prefetch_from`.
    #[inline(always)]
    pub fn prefetch_ahead(&mut self, ahead: u16) {
        if self.avail_end.wrapping_sub(self.next_avail) <= ahead {
            return;
        }
        let head = self.avail_entry(self.next_avail.wrapping_add(ahead));
        let Some(addr) = self.buffer_address(head) else {
            return;
        };
        let offset = addr.wrapping_sub(self.fetched.0);
        if offset >= self.fetched.1 {
            return self.prefetch_from(ahead, 1);
        }
        let at = self.fetched.2.wrapping_add(offset as usize);
        cache::fetch(at);
        cache::fetch(at.wrapping_add(64));
    }

    /// The address descriptor `head` gives its buffer, as the driver wrote
    /// it (none for a head past the ring): for a prefetch only, which
    /// nothing relies on.
    #[inline(always)]
    fn buffer_address(&self, head: u16) -> Option<u64> {
        if head >= self.size {
            return None;
        }
        // SAFETY: `head < size`: the descriptor's first 8 bytes lie in the
        // checked, 16-aligned descriptor table.
        Some(u64::from_le(unsafe {
            self.desc
                .add(16 * usize::from(head))
                .cast::<u64>()
                .read_volatile()
        }))
    }

    /// The rest of [`pop`](Self::pop): chain `head`, just taken from the
    /// avail ring, walked whole.
    #[inline(never)]
    fn pop_chain(
        &mut self,
        head: u16,
        direction: Direction,
        min: u32,
        max: u32,
    ) -> Result<Option<Chain>, ChainError> {
        if head >= self.size {
            return Err(ChainError::Head(head));
        }
        match self.walk(head, direction, min, max) {
            Ok(total) => Ok(Some(Chain { head, total })),
            Err(error) => {
                self.refused = head;
                self.push_used(head, 0);
                Err(error)
            }
        }
    }

    #[inline]
    fn walk(
        &mut self,
        head: u16,
        direction: Direction,
        min: u32,
        max: u32,
    ) -> Result<u32, ChainError> {
        self.segments.clear();
        let mut index = head;
        let mut total: u32 = 0;
        let limit = self.size.min(MAX_CHAIN_DESCRIPTORS);
        for _ in 0..limit {
            self.walked += 1;
            let desc = self.descriptor(index);
            if desc.flags & DESC_F_INDIRECT != 0 {
                return Err(ChainError::Indirect);
            }
            let writable = desc.flags & DESC_F_WRITE != 0;
            if writable != (direction == Direction::Write) {
                return Err(ChainError::Direction);
            }
            if desc.len > 0 {
                let Some(at) = self.memory.guest(desc.addr, desc.len as usize) else {
                    return Err(ChainError::Outside);
                };
                total = total.checked_add(desc.len).ok_or(ChainError::Long)?;
                // Room for a frame to the driver may be larger than any
                // frame: it is filled up to what the frame needs.
                if direction == Direction::Read && total > max {
                    return Err(ChainError::Long);
                }
                self.segments.push(Segment { at, len: desc.len });
            }
            if desc.flags & DESC_F_NEXT == 0 {
                if total < min || total == 0 {
                    return Err(ChainError::Short);
                }
                return Ok(total);
            }
            if desc.next >= self.size {
                return Err(ChainError::Next(desc.next));
            }
            index = desc.next;
        }
        if limit == self.size {
            Err(ChainError::Loop)
        } else {
            Err(ChainError::Descriptors)
        }
    }

    /// Descriptors read by every [`pop`](Self::pop) so far.
    pub fn walked(&self) -> u64 {
        self.walked
    }

    /// The buffers of the chain [`pop`](Self::pop) returned last.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Puts back the last `count` chains popped (a frame that found too
    /// few buffers): the driver sees them again, untouched.
    pub fn unpop(&mut self, count: u16) {
        self.next_avail = self.next_avail.wrapping_sub(count);
    }

    /// Returns chain `head` to the driver with `len` bytes written (0 for
    /// a chain read); seen by the driver at the next [`publish`](Self::publish),
    /// or, behind a chain held, at the one after [`release_held`](Self::release_held).
    #[inline]
    pub fn push_used(&mut self, head: u16, len: u32) {
        if !self.held.is_empty() {
            return self.held_too(head, len);
        }
        self.write_used(head, len);
    }

    /// The rare path of [`push_used`](Self::push_used): behind a lent chain.
    #[cold]
    #[inline(never)]
    fn held_too(&mut self, head: u16, len: u32) {
        self.held.push((head, len));
    }

    /// Keeps chain `head`, whose frame is lent, from the driver, and with
    /// it every chain returned after it, until [`release_held`](Self::release_held).
    pub fn hold(&mut self, head: u16) {
        self.held.push((head, 0));
    }

    /// Returns the chains held, in the order they were taken.
    pub fn release_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        for &(head, len) in &held {
            self.write_used(head, len);
        }
        self.held = held;
        self.held.clear();
    }

    /// Returns `chains`, taken before the chain [`pop`](Self::pop) just
    /// refused with `error`, ahead of that one, so that chains are used
    /// in the order they were made available: `pop` returns a refused
    /// chain at once, all but one whose head lies outside the ring (which
    /// cannot be returned).
    pub fn push_used_before_refused(&mut self, chains: &[(u16, u32)], error: &ChainError) {
        let returned = !matches!(error, ChainError::Head(_) | ChainError::Index(_));
        if returned && self.held.pop().is_none() {
            // Not yet published: taken back from the used ring.
            self.next_used = self.next_used.wrapping_sub(1);
        }
        for &(head, len) in chains {
            self.push_used(head, len);
        }
        if returned {
            self.push_used(self.refused, 0);
        }
    }

    #[inline]
    fn write_used(&mut self, head: u16, len: u32) {
        let slot = usize::from(self.next_used & (self.size - 1));
        // SAFETY: `slot < size`: the 8-byte element lies in the checked,
        // 4-aligned used area; the driver reads it only after the release
        // store of the index in `publish`.
        unsafe {
            let element = self.used.add(4 + 8 * slot);
            element
                .cast::<u32>()
                .write_volatile(u32::from(head).to_le());
            element.add(4).cast::<u32>().write_volatile(len.to_le());
        }
        self.next_used = self.next_used.wrapping_add(1);
    }

    /// Makes every used element pushed so far visible to the driver, with
    /// one store, and says whether the driver wants to be notified of them.
    pub fn publish(&mut self) -> bool {
        let old = self.signalled;
        let new = self.next_used;
        if old == new {
            return false;
        }
        self.used_idx().store(new.to_le(), Ordering::Release);
        // The driver's used_event (or flags) must be read after the index
        // is visible, or a driver going to sleep meanwhile is missed.
        fence(Ordering::SeqCst);
        self.signalled = new;
        if self.event_idx {
            // SAFETY: used_event follows the avail ring's `size` entries,
            // inside the checked avail area (6 + 2 * size bytes).
            let event = u16::from_le(unsafe {
                self.avail
                    .add(4 + 2 * usize::from(self.size))
                    .cast::<u16>()
                    .read_volatile()
            });
            // virtio 1.x, 2.7.7.2: notify when the new entries pass it.
            new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
        } else {
            self.avail_flags() & AVAIL_F_NO_INTERRUPT == 0
        }
    }

    /// Asks the driver to kick when it makes more chains available, then
    /// looks again: returns whether the ring is still empty (so that
    /// sleeping is safe: a chain made available from now on kicks).
    pub fn enable_notification(&mut self) -> bool {
        if self.event_idx {
            // SAFETY: avail_event follows the used ring's `size` elements,
            // inside the checked used area (6 + 8 * size bytes).
            unsafe {
                self.used
                    .add(4 + 8 * usize::from(self.size))
                    .cast::<u16>()
                    .write_volatile(self.next_avail.to_le());
            }
        } else {
            self.used_flags().store(0, Ordering::Relaxed);
        }
        self.kicks = true;
        fence(Ordering::SeqCst);
        matches!(self.available(), Ok(0))
    }

    /// Asks the driver not to kick while the device is busy anyway. With
    /// EVENT_IDX the avail event left behind does that by itself.
    pub fn disable_notification(&mut self) {
        if !self.event_idx && self.kicks {
            self.used_flags()
                .store(USED_F_NO_NOTIFY.to_le(), Ordering::Relaxed);
        }
        self.kicks = false;
    }

    /// Copies the chain's bytes from `offset` on into `into`, as far as
    /// both go; returns how many. The segments were checked by `pop`.
    pub fn read_chain(&self, mut offset: usize, into: &mut [u8]) -> usize {
        let mut done = 0;
        for segment in &self.segments {
            let len = segment.len as usize;
            if offset >= len {
                offset -= len;
                continue;
            }
            let take = (len - offset).min(into.len() - done);
            // SAFETY: the segment's `len` bytes are mapped (checked when
            // popped) and `offset + take <= len`; `into` is ours, and no
            // reference to guest memory exists.
            unsafe {
                std::ptr::copy(segment.at.add(offset), into[done..].as_mut_ptr(), take);
            }
            done += take;
            offset = 0;
            if done == into.len() {
                break;
            }
        }
        done
    }

    /// Where the chain's `len` bytes from `offset` on lie, when they lie
    /// in one buffer: what a frame may lend (see `RxBatch::lend_rest`).
    #[inline]
    pub fn lendable(&self, mut offset: usize, len: usize) -> Option<*const u8> {
        for segment in &self.segments {
            let size = segment.len as usize;
            if offset >= size {
                offset -= size;
                continue;
            }
            // In the buffer: `offset < size`, and past it nothing is lent.
            return (size - offset >= len).then(|| segment.at.wrapping_add(offset).cast_const());
        }
        None
    }

    /// Lends the chain's `len` bytes from `offset` on to `batch`, when
    /// they lie in one buffer ([`lendable`](Self::lendable)): the batch's
    /// next buffer becomes a frame of its first `kept` bytes (written there
    /// already) that goes on with those. False, and nothing added, when
    /// they do not. The batch holds the memory's mapping until it is
    /// cleared; the chain must not be returned before.
    #[inline]
    pub fn lend_to(&self, batch: &mut RxBatch, kept: usize, offset: usize, len: usize) -> bool {
        let Some(at) = self.lendable(offset, len) else {
            return false;
        };
        batch.commit(kept);
        batch.keep(&self.memory);
        // SAFETY: `at` is valid for `len` bytes of the memory table
        // (checked when the chain was walked), whose mapping the batch now
        // holds until it is cleared; the driver may write them, which
        // `Lent` allows.
        unsafe { batch.lend_rest(at, len) };
        true
    }

    /// Where the chain's first `len` bytes lie, when its first buffer
    /// holds them: the common case, served with one look-up.
    #[inline]
    fn first_holding(&self, len: usize) -> Option<*mut u8> {
        let first = self.segments.first()?;
        ((first.len as usize) >= len).then_some(first.at)
    }

    /// Copies the chain's first bytes into `header` and then `into`, when
    /// its first buffer holds them all; false, and nothing copied, when it
    /// does not.
    #[inline]
    pub fn read_first(&self, header: &mut [u8], into: &mut [u8]) -> bool {
        let Some(from) = self.first_holding(header.len() + into.len()) else {
            return false;
        };
        // SAFETY: `from` is valid for both lengths together (checked by
        // `first_holding`); the destinations are ours; no reference to
        // guest memory exists.
        unsafe {
            copy_bytes(from, header.as_mut_ptr(), header.len());
            copy_bytes(from.add(header.len()), into.as_mut_ptr(), into.len());
        }
        true
    }

    /// Writes `header` and then `frame`'s Ethernet bytes into the chain's
    /// first buffer, when it holds them all; returns the bytes written, or
    /// `None`, and nothing written, when it does not.
    #[inline]
    pub fn write_first(&self, header: &[u8], frame: &Outgoing<'_>) -> Option<usize> {
        let len = header.len() + frame.len();
        let mut to = self.first_holding(len)?;
        let start = to;
        // SAFETY: `to` is valid for `len` bytes (checked by
        // `first_holding`); the header is ours, the pieces are slices and
        // the rest is readable (`Lent`), which may lie under `to`, as
        // `copy` allows.
        unsafe {
            copy_bytes(header.as_ptr(), to, header.len());
            to = to.add(header.len());
            let [whole, tag, tail] = frame.pieces;
            copy_bytes(whole.as_ptr(), to, whole.len());
            if !tag.is_empty() || !tail.is_empty() {
                to = to.add(whole.len());
                copy_bytes(tag.as_ptr(), to, tag.len());
                to = to.add(tag.len());
                copy_bytes(tail.as_ptr(), to, tail.len());
                to = to.add(tail.len());
            } else {
                to = to.add(whole.len());
            }
            frame.rest.copy_to(to);
        }
        // The driver's core reads the frame's first 128 bytes next (its
        // header, then what a driver looks at first): handed to the shared
        // cache, their lines wait there for it, not in this core's own.
        // Not the rest of a long frame: handing on every line of it made
        // the send slower (docs/benchmarks.md, "Handing a frame's first
        // lines on").
        cache::demote(start);
        cache::demote(start.wrapping_add(64));
        Some(len)
    }

    /// Copies the chain's bytes from `offset` on into `into`, one part
    /// after the other, as far as both go; returns how many bytes. One
    /// look-up of each buffer however many parts it fills.
    #[inline]
    pub fn read_parts(&self, offset: usize, into: &mut [&mut [u8]]) -> usize {
        let mut lens = [0usize; 2];
        debug_assert!(into.len() <= lens.len(), "at most two parts");
        for (len, part) in lens.iter_mut().zip(into.iter()) {
            *len = part.len();
        }
        let spans = self.spans(&self.segments, offset);
        merge(spans, &lens, |guest, part, at, n| {
            let to = &mut into[part][at..at + n];
            // SAFETY: `guest` is valid for `n` bytes of guest memory
            // (`spans`), `to` is ours; no reference to guest memory exists,
            // and `copy` allows any overlap.
            unsafe { std::ptr::copy(guest, to.as_mut_ptr(), n) };
        })
    }

    /// Copies `from`, one part after the other, into the buffers
    /// `segments` (of a chain popped and not yet returned) from `offset`
    /// on, as far as both go; returns how many bytes. One look-up of each
    /// buffer however many parts go into it.
    #[inline]
    pub fn write_parts(&self, segments: &[Segment], offset: usize, from: &[Lent<'_>]) -> usize {
        let mut lens = [0usize; 5];
        debug_assert!(from.len() <= lens.len(), "at most five parts");
        for (len, part) in lens.iter_mut().zip(from) {
            *len = part.len();
        }
        let spans = self.spans(segments, offset);
        merge(spans, &lens, |guest, part, at, n| {
            // SAFETY: `guest` is valid for `n` bytes of guest memory
            // (`spans`); the part is readable (`Lent`) and may lie under
            // it, which `copy_to` allows.
            unsafe { from[part].skip(at).take(n).copy_to(guest) };
        })
    }

    /// The buffers `segments` from byte `offset` on, each as a pointer
    /// into this process and the bytes from there to its end.
    fn spans<'s>(
        &'s self,
        segments: &'s [Segment],
        mut offset: usize,
    ) -> impl Iterator<Item = (*mut u8, usize)> + 's {
        segments.iter().filter_map(move |segment| {
            let size = segment.len as usize;
            if offset >= size {
                offset -= size;
                return None;
            }
            let skip = std::mem::take(&mut offset);
            Some((segment.at.wrapping_add(skip), size - skip))
        })
    }

    /// Copies `from` into the chain's buffers from `offset` on, as far as
    /// both go; returns how many bytes.
    pub fn write_chain(&self, offset: usize, from: &[u8]) -> usize {
        self.write_to(&self.segments, offset, from)
    }

    /// [`write_chain`](Self::write_chain) into `segments`, buffers of a
    /// chain popped earlier (and not yet returned).
    pub fn write_to(&self, segments: &[Segment], mut offset: usize, from: &[u8]) -> usize {
        let mut done = 0;
        for segment in segments {
            if done == from.len() {
                break;
            }
            let len = segment.len as usize;
            if offset >= len {
                offset -= len;
                continue;
            }
            let take = (len - offset).min(from.len() - done);
            // SAFETY: the segment's `len` bytes are mapped (checked when
            // popped) and `offset + take <= len`; `from` is ours.
            unsafe {
                std::ptr::copy(from[done..].as_ptr(), segment.at.add(offset), take);
            }
            done += take;
            offset = 0;
        }
        done
    }
}

/// Walks `spans` (buffers in guest memory) and parts of `lens` bytes side
/// by side, in order, calling `copy(guest, part, offset in the part, n)`
/// for each run of `n` bytes where one meets the other; returns the bytes
/// walked, as far as both go.
#[inline]
fn merge(
    spans: impl Iterator<Item = (*mut u8, usize)>,
    lens: &[usize],
    mut copy: impl FnMut(*mut u8, usize, usize, usize),
) -> usize {
    let mut done = 0;
    let mut parts = lens.iter().enumerate().filter(|&(_, &len)| len > 0);
    let Some((mut part, &len)) = parts.next() else {
        return 0;
    };
    let (mut at, mut left) = (0, len);
    for (mut guest, mut room) in spans {
        while room > 0 {
            let n = room.min(left);
            copy(guest, part, at, n);
            guest = guest.wrapping_add(n);
            room -= n;
            at += n;
            left -= n;
            done += n;
            if left == 0 {
                match parts.next() {
                    Some((next, &len)) => (part, at, left) = (next, 0, len),
                    None => return done,
                }
            }
        }
    }
    done
}

/// A driver's side of a ring, over memory this process made: what the
/// tests and the fuzz targets use to post chains and read what the device
/// returned.
pub mod driver {
    use super::*;

    /// Lays out a ring of `size` entries at guest address `base` (desc,
    /// then avail, then used, each aligned), returning the layout and the
    /// first address past it.
    pub fn layout(base: u64, size: u16) -> (RingLayout, u64) {
        let n = u64::from(size);
        let desc = base.next_multiple_of(16);
        let avail = desc + 16 * n;
        let used = (avail + 6 + 2 * n).next_multiple_of(4);
        let end = used + 6 + 8 * n;
        (
            RingLayout {
                size,
                desc,
                avail,
                used,
            },
            end,
        )
    }

    /// Writes descriptor `index`.
    pub fn set_descriptor(
        memory: &GuestMemory,
        layout: &RingLayout,
        index: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    ) {
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&addr.to_le_bytes());
        raw[8..12].copy_from_slice(&len.to_le_bytes());
        raw[12..14].copy_from_slice(&flags.to_le_bytes());
        raw[14..].copy_from_slice(&next.to_le_bytes());
        memory.write(layout.desc + 16 * u64::from(index), &raw);
    }

    /// Puts `head` at avail slot `slot` (modulo the size).
    pub fn set_avail(memory: &GuestMemory, layout: &RingLayout, slot: u16, head: u16) {
        let slot = u64::from(slot & (layout.size - 1));
        memory.write(layout.avail + 4 + 2 * slot, &head.to_le_bytes());
    }

    /// Publishes avail index `idx`.
    pub fn set_avail_idx(memory: &GuestMemory, layout: &RingLayout, idx: u16) {
        fence(Ordering::SeqCst);
        memory.write(layout.avail + 2, &idx.to_le_bytes());
    }

    /// The used index the device published.
    pub fn used_idx(memory: &GuestMemory, layout: &RingLayout) -> u16 {
        let mut raw = [0u8; 2];
        memory.read(layout.used + 2, &mut raw);
        fence(Ordering::SeqCst);
        u16::from_le_bytes(raw)
    }

    /// Whether the device asks not to be kicked (the used ring's flags,
    /// without EVENT_IDX).
    pub fn no_kicks(memory: &GuestMemory, layout: &RingLayout) -> bool {
        let mut raw = [0u8; 2];
        memory.read(layout.used, &mut raw);
        u16::from_le_bytes(raw) & USED_F_NO_NOTIFY != 0
    }

    /// Used element `slot` (modulo the size): (head, length).
    pub fn used_elem(memory: &GuestMemory, layout: &RingLayout, slot: u16) -> (u32, u32) {
        let slot = u64::from(slot & (layout.size - 1));
        let mut raw = [0u8; 8];
        memory.read(layout.used + 4 + 8 * slot, &mut raw);
        (
            u32::from_le_bytes(raw[..4].try_into().unwrap()),
            u32::from_le_bytes(raw[4..].try_into().unwrap()),
        )
    }

    /// The flags of a descriptor: it continues, the device writes it.
    pub const NEXT: u16 = DESC_F_NEXT;
    /// The device writes this buffer.
    pub const WRITE: u16 = DESC_F_WRITE;
    /// An indirect table.
    pub const INDIRECT: u16 = DESC_F_INDIRECT;
}

#[cfg(test)]
mod tests {
    use super::driver::*;
    use super::*;

    const BASE: u64 = 0x1000;

    fn ring(size: u16) -> (Arc<GuestMemory>, RingLayout, SplitRing) {
        let memory = Arc::new(GuestMemory::anonymous(BASE, 1 << 20).unwrap());
        let (layout, _) = layout(BASE, size);
        let ring = SplitRing::new(memory.clone(), layout, 0, true).unwrap();
        (memory, layout, ring)
    }

    const DATA: u64 = BASE + 0x10_000;

    #[test]
    fn chains_are_read_and_returned_in_one_publish() {
        let (memory, layout, mut ring) = ring(8);
        // Two chains: one of two buffers, one of one.
        memory.write(DATA, b"hello ");
        memory.write(DATA + 100, b"world");
        set_descriptor(&memory, &layout, 0, DATA, 6, NEXT, 3);
        set_descriptor(&memory, &layout, 3, DATA + 100, 5, 0, 0);
        set_descriptor(&memory, &layout, 1, DATA + 200, 4, 0, 0);
        set_avail(&memory, &layout, 0, 0);
        set_avail(&memory, &layout, 1, 1);
        set_avail_idx(&memory, &layout, 2);
        let chain = ring.pop(Direction::Read, 1, 100).unwrap().unwrap();
        assert_eq!(chain, Chain { head: 0, total: 11 });
        let mut out = [0u8; 11];
        assert_eq!(ring.read_chain(0, &mut out), 11);
        assert_eq!(&out, b"hello world");
        let mut tail = [0u8; 4];
        assert_eq!(ring.read_chain(8, &mut tail), 3);
        assert_eq!(&tail[..3], b"rld");
        ring.push_used(chain.head, 0);
        let second = ring.pop(Direction::Read, 1, 100).unwrap().unwrap();
        ring.push_used(second.head, 0);
        assert_eq!(ring.pop(Direction::Read, 1, 100), Ok(None));
        assert_eq!(used_idx(&memory, &layout), 0, "nothing published yet");
        ring.publish();
        assert_eq!(used_idx(&memory, &layout), 2);
        assert_eq!(used_elem(&memory, &layout, 1), (1, 0));
        assert_eq!(ring.next_avail(), 2);
    }

    #[test]
    fn broken_chains_are_reported_returned_and_passed() {
        type Setup = fn(&GuestMemory, &RingLayout);
        let cases: [(&str, Setup, ChainError); 7] = [
            (
                "loop",
                |m, l| {
                    set_descriptor(m, l, 0, DATA, 4, NEXT, 1);
                    set_descriptor(m, l, 1, DATA, 4, NEXT, 0);
                },
                ChainError::Loop,
            ),
            (
                "next outside",
                |m, l| set_descriptor(m, l, 0, DATA, 4, NEXT, 9),
                ChainError::Next(9),
            ),
            (
                "outside memory",
                |m, l| set_descriptor(m, l, 0, BASE + (1 << 20) - 2, 4, 0, 0),
                ChainError::Outside,
            ),
            (
                "zero length",
                |m, l| set_descriptor(m, l, 0, DATA, 0, 0, 0),
                ChainError::Short,
            ),
            (
                "too long",
                |m, l| set_descriptor(m, l, 0, DATA, 5000, 0, 0),
                ChainError::Long,
            ),
            (
                "indirect",
                |m, l| set_descriptor(m, l, 0, DATA, 16, INDIRECT, 0),
                ChainError::Indirect,
            ),
            (
                "wrong direction",
                |m, l| set_descriptor(m, l, 0, DATA, 64, WRITE, 0),
                ChainError::Direction,
            ),
        ];
        for (what, setup, expected) in cases {
            let (memory, layout, mut ring) = ring(8);
            setup(&memory, &layout);
            set_descriptor(&memory, &layout, 5, DATA, 60, 0, 0);
            set_avail(&memory, &layout, 0, 0);
            set_avail(&memory, &layout, 1, 5);
            set_avail_idx(&memory, &layout, 2);
            assert_eq!(ring.pop(Direction::Read, 1, 4096), Err(expected), "{what}");
            let good = ring.pop(Direction::Read, 1, 4096).unwrap().unwrap();
            assert_eq!(good.head, 5, "{what}: the ring goes on");
            ring.push_used(good.head, 0);
            ring.publish();
            assert_eq!(used_idx(&memory, &layout), 2, "{what}: both returned");
            assert_eq!(used_elem(&memory, &layout, 0), (0, 0), "{what}");
        }
    }

    #[test]
    fn a_chain_is_walked_no_further_than_its_cap() {
        // A ring of 2048 whose one chain runs through every descriptor,
        // each of zero bytes: dropped after 1024 reads, not 2048.
        let memory = Arc::new(GuestMemory::anonymous(BASE, 1 << 20).unwrap());
        let (layout, _) = layout(BASE, 2048);
        let mut ring = SplitRing::new(memory.clone(), layout, 0, true).unwrap();
        for index in 0..2048u16 {
            let (flags, next) = if index < 2047 {
                (NEXT, index + 1)
            } else {
                (0, 0)
            };
            set_descriptor(&memory, &layout, index, DATA, 0, flags, next);
        }
        set_avail(&memory, &layout, 0, 0);
        set_avail_idx(&memory, &layout, 1);
        assert_eq!(
            ring.pop(Direction::Read, 1, 4096),
            Err(ChainError::Descriptors)
        );
        assert_eq!(ring.walked(), u64::from(MAX_CHAIN_DESCRIPTORS));
        ring.publish();
        assert_eq!(used_idx(&memory, &layout), 1, "returned to the driver");
    }

    #[test]
    fn fetching_ahead_takes_nothing_and_passes_over_what_is_broken() {
        let (memory, layout, mut ring) = ring(8);
        memory.write(DATA, b"frame");
        set_descriptor(&memory, &layout, 0, DATA, 5, 0, 0);
        // A buffer outside the guest's memory, a head past the ring.
        set_descriptor(&memory, &layout, 1, 1 << 40, 64, 0, 0);
        set_avail(&memory, &layout, 0, 1);
        set_avail(&memory, &layout, 1, 8);
        set_avail(&memory, &layout, 2, 0);
        set_avail_idx(&memory, &layout, 3);
        assert_eq!(ring.prefetch(8), 3, "as many as the index shows");
        assert_eq!(ring.prefetch(2), 2, "as many as asked for");
        ring.prefetch_from(1, 8);
        for ahead in 0..4 {
            ring.prefetch_ahead(ahead);
        }
        // The used ring's lines asked for, for none, some, and more
        // elements than the ring has (wrapping past its end).
        for count in [0, 1, 8, 9, 100, u16::MAX] {
            ring.own_used(count);
        }
        assert_eq!(used_idx(&memory, &layout), 0, "nothing returned");
        assert_eq!(ring.next_avail(), 0, "nothing taken");
        assert_eq!(ring.walked(), 0, "no descriptor counted");
        assert_eq!(ring.pop(Direction::Read, 1, 100), Err(ChainError::Outside));
        assert_eq!(ring.pop(Direction::Read, 1, 100), Err(ChainError::Head(8)));
        let chain = ring.pop(Direction::Read, 1, 100).unwrap().unwrap();
        assert_eq!(chain, Chain { head: 0, total: 5 });
        // Past what the index showed, and with nothing available, nothing
        // is fetched and nothing taken.
        ring.prefetch_from(0, 8);
        ring.prefetch_from(3, 1);
        assert_eq!(ring.prefetch(8), 0);
        assert_eq!(ring.pop(Direction::Read, 1, 100), Ok(None));
    }

    #[test]
    fn bad_heads_and_indices_are_refused() {
        let (memory, layout, mut ring) = ring(8);
        set_avail(&memory, &layout, 0, 8);
        set_avail_idx(&memory, &layout, 1);
        assert_eq!(ring.pop(Direction::Read, 1, 100), Err(ChainError::Head(8)));
        set_avail_idx(&memory, &layout, 20);
        assert_eq!(
            ring.pop(Direction::Read, 1, 100),
            Err(ChainError::Index(19))
        );
        assert_eq!(
            ring.next_avail(),
            1,
            "an index that runs ahead takes nothing"
        );
    }

    #[test]
    fn rings_outside_memory_or_of_bad_sizes_are_refused() {
        let memory = Arc::new(GuestMemory::anonymous(BASE, 4096).unwrap());
        let (good, _) = layout(BASE, 64);
        assert!(SplitRing::new(memory.clone(), good, 0, false).is_ok());
        for size in [0, 3, 100] {
            let bad = RingLayout { size, ..good };
            assert_eq!(
                SplitRing::new(memory.clone(), bad, 0, false).unwrap_err(),
                LayoutError::Size(size)
            );
        }
        let (big, _) = layout(BASE, 256);
        assert!(SplitRing::new(memory.clone(), big, 0, false).is_err());
        let misaligned = RingLayout {
            desc: good.desc + 8,
            ..good
        };
        assert!(SplitRing::new(memory, misaligned, 0, false).is_err());
    }

    #[test]
    fn notifications_follow_event_idx() {
        let (memory, layout, mut ring) = ring(8);
        set_descriptor(&memory, &layout, 0, DATA, 60, 0, 0);
        for n in 0..4 {
            set_avail(&memory, &layout, n, 0);
        }
        set_avail_idx(&memory, &layout, 4);
        // used_event = 1: the driver wants to hear once the entry at
        // index 1 is used.
        memory.write(layout.avail + 4 + 2 * 8, &1u16.to_le_bytes());
        let chain = ring.pop(Direction::Read, 1, 100).unwrap().unwrap();
        ring.push_used(chain.head, 0);
        assert!(!ring.publish(), "used idx 1 does not pass used_event 1");
        let chain = ring.pop(Direction::Read, 1, 100).unwrap().unwrap();
        ring.push_used(chain.head, 0);
        assert!(ring.publish(), "used idx 2 passes it");
        // Going idle: the avail event names the next index, and two chains
        // are still there, so sleeping is not safe.
        assert!(!ring.enable_notification());
        let mut event = [0u8; 2];
        memory.read(layout.used + 4 + 8 * 8, &mut event);
        assert_eq!(u16::from_le_bytes(event), 2);
        for _ in 0..2 {
            let chain = ring.pop(Direction::Read, 1, 100).unwrap().unwrap();
            ring.push_used(chain.head, 0);
        }
        assert!(ring.enable_notification());
    }
}
