//! The worker's receive batch: reusable buffers the ports fill, or the
//! first bytes of frames a port lends where they lie.
#![allow(unsafe_code)]

use std::any::Any;
use std::sync::Arc;

use super::{Frame, Lent};
use crate::wire::vxlan::Vtep;

/// A fixed set of reusable receive buffers, and the frames ports lend.
///
/// Frames are packed one after the other (each at a 64-byte boundary), and
/// the next buffer is whatever room follows the last frame: a batch of
/// 64-byte frames spans a few KiB, not `frames * frame_capacity` bytes, and
/// the room behind it (enough for every frame at full size) is touched only
/// by large frames. Each buffer holds the port's metadata
/// ([`Queue::METADATA_LEN`](super::Queue::METADATA_LEN) bytes, the batch's [`metadata`](Self::metadata))
/// and then the frame, or only the frame's first bytes when its port lends
/// the rest ([`lend_rest`](Self::lend_rest)).
#[derive(Debug)]
pub struct RxBatch {
    slab: Box<[u8]>,
    frame_capacity: usize,
    metadata: usize,
    /// Per frame, where it starts in the slab and its length there.
    spans: Box<[(usize, usize)]>,
    /// Per frame, where the rest of a lent frame lies and its length;
    /// empty until a port lends one, of length 0 for a frame all in the
    /// slab.
    lent: Vec<(*const u8, usize)>,
    /// What keeps the lent frames' memory mapped until the batch is
    /// cleared (a vhost-user guest's memory table).
    owners: Vec<Arc<dyn Any + Send + Sync>>,
    /// Per frame, the VTEP it came from: empty until a port names one (a
    /// VXLAN port's frames), so that other ports' batches pay nothing.
    vteps: Vec<Option<Vtep>>,
    count: usize,
    /// Where the next frame goes.
    end: usize,
}

/// Frame starts are aligned to a cache line.
const FRAME_ALIGN: usize = 64;

fn align_frame(offset: usize) -> usize {
    offset.next_multiple_of(FRAME_ALIGN)
}

/// A frame longer than a batch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame of {len} bytes exceeds the {capacity}-byte buffer")]
pub struct Oversize {
    /// The frame's length.
    pub len: usize,
    /// The buffer's size.
    pub capacity: usize,
}

impl RxBatch {
    /// Room for `frames` frames of up to `frame_capacity` bytes each (with
    /// their metadata), of no metadata (see [`with_metadata`](Self::with_metadata)).
    pub fn new(frames: usize, frame_capacity: usize) -> RxBatch {
        assert!(
            frames > 0 && frame_capacity > 0,
            "an empty batch holds nothing"
        );
        RxBatch {
            // Room for every frame at full size, each aligned: the pages of
            // that room a batch of small frames never reaches stay untouched.
            slab: vec![0; frames * align_frame(frame_capacity)].into_boxed_slice(),
            frame_capacity,
            metadata: 0,
            spans: vec![(0, 0); frames].into_boxed_slice(),
            lent: Vec::new(),
            owners: Vec::new(),
            vteps: Vec::new(),
            count: 0,
            end: 0,
        }
    }

    /// The batch, its buffers starting with `metadata` bytes of a port's
    /// metadata ([`Queue::METADATA_LEN`](super::Queue::METADATA_LEN)) before each frame.
    pub fn with_metadata(mut self, metadata: usize) -> RxBatch {
        self.metadata = metadata;
        self
    }

    /// The bytes of metadata before each frame.
    pub fn metadata(&self) -> usize {
        self.metadata
    }

    /// How many frames the batch holds when full.
    pub fn capacity(&self) -> usize {
        self.spans.len()
    }

    /// The largest frame a buffer holds.
    pub fn frame_capacity(&self) -> usize {
        self.frame_capacity
    }

    /// How many frames the batch holds now.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch holds no frame.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether no more frames fit.
    pub fn is_full(&self) -> bool {
        self.count == self.spans.len()
    }

    /// Forgets every frame, keeping the buffers; the lent frames' memory
    /// is no longer held. A port that lent frames takes them back first
    /// ([`Queue::release`](super::Queue::release)).
    pub fn clear(&mut self) {
        self.count = 0;
        self.end = 0;
        self.vteps.clear();
        self.lent.clear();
        self.owners.clear();
    }

    /// Frame `index`.
    ///
    /// # Panics
    /// When `index >= self.len()`.
    #[inline(always)]
    pub fn frame(&self, index: usize) -> Frame<'_> {
        assert!(index < self.count, "frame {index} of {}", self.count);
        let (start, len) = self.spans[index];
        let meta = self.metadata.min(len);
        let mut frame = Frame {
            meta: &self.slab[start..start + meta],
            eth: &self.slab[start + meta..start + len],
            rest: Lent::NONE,
        };
        if self.lent.is_empty() {
            return frame;
        }
        if let Some(&(at, len)) = self.lent.get(index) {
            // SAFETY: `lend_rest`'s caller promised `len` readable bytes at
            // `at` until the batch is cleared (an owner in `owners` keeps
            // them mapped); they are only ever copied (`Lent`).
            frame.rest = unsafe { Lent::new(at, len) };
        }
        frame
    }

    /// The Ethernet bytes of frame `index` in the batch (all of the frame,
    /// or the first bytes of a lent one): what the pipeline reads.
    ///
    /// # Panics
    /// When `index >= self.len()`.
    #[inline(always)]
    pub fn eth(&self, index: usize) -> &[u8] {
        assert!(index < self.count, "frame {index} of {}", self.count);
        let (start, len) = self.spans[index];
        let meta = self.metadata.min(len);
        &self.slab[start + meta..start + len]
    }

    /// The Ethernet length of frame `index`, lent bytes included.
    #[inline(always)]
    pub fn frame_len(&self, index: usize) -> usize {
        let lent = self.lent.get(index).map_or(0, |&(_, len)| len);
        self.spans[index].1.saturating_sub(self.metadata) + lent
    }

    /// The Ethernet bytes of every frame in the batch, in order (see
    /// [`eth`](Self::eth)).
    #[inline]
    pub fn eths(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        (0..self.count).map(|index| self.eth(index))
    }

    /// Whether a port lent part of frame `index` rather than copy it into
    /// the batch.
    #[inline]
    pub fn is_lent(&self, index: usize) -> bool {
        self.lent.get(index).is_some_and(|&(_, len)| len > 0)
    }

    /// Says that the last frame goes on, past the bytes in its buffer,
    /// with `len` bytes at `at` that its port lends until the batch is
    /// cleared.
    ///
    /// # Safety
    /// `at` must be valid for reads of `len` bytes until the batch is
    /// cleared, its mapping kept alive by an owner handed to
    /// [`keep`](Self::keep). Another party (a guest) may write those bytes
    /// meanwhile: they are only ever copied, never read through a
    /// reference ([`Lent`]).
    ///
    /// # Panics
    /// When the batch is empty.
    pub unsafe fn lend_rest(&mut self, at: *const u8, len: usize) {
        assert!(self.count > 0, "no frame to go on");
        let last = self.count - 1;
        self.lent.resize(last, (std::ptr::null(), 0));
        self.lent.push((at, len));
    }

    /// Holds `owner` (what keeps a lent frame's memory mapped) until the
    /// batch is cleared; the same owner twice in a row is held once (and
    /// not cloned: no atomic count per frame).
    #[inline]
    pub fn keep<T: Any + Send + Sync>(&mut self, owner: &Arc<T>) {
        let same = self
            .owners
            .last()
            .is_some_and(|last| std::ptr::addr_eq(Arc::as_ptr(last), Arc::as_ptr(owner)));
        if !same {
            self.owners.push(Arc::clone(owner) as _);
        }
    }

    /// The VTEP frame `index` came from, if a VXLAN port said.
    #[inline]
    pub fn vtep(&self, index: usize) -> Option<Vtep> {
        debug_assert!(index < self.count, "frame {index} of {}", self.count);
        self.vteps.get(index).copied().flatten()
    }

    /// Says that the last frame came from `vtep`.
    ///
    /// # Panics
    /// When the batch is empty.
    pub fn set_last_vtep(&mut self, vtep: Vtep) {
        assert!(self.count > 0, "no frame to name a VTEP of");
        self.vteps.resize(self.count, None);
        self.vteps[self.count - 1] = Some(vtep);
    }

    /// The frames, in order of arrival.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Frame<'_>> + Clone + '_ {
        (0..self.count).map(|index| self.frame(index))
    }

    /// The next free buffer, for a port to receive into; `None` when full.
    /// Nothing is added until [`commit`](Self::commit).
    pub fn next_buffer(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        // In bounds: each of the `count` frames before took at most
        // align_frame(frame_capacity) bytes.
        Some(&mut self.slab[self.end..self.end + self.frame_capacity])
    }

    /// Adds the frame of `len` bytes written into [`next_buffer`](Self::next_buffer).
    ///
    /// # Panics
    /// When the batch is full or `len` exceeds the buffer size.
    pub fn commit(&mut self, len: usize) {
        assert!(!self.is_full() && len <= self.frame_capacity);
        self.spans[self.count] = (self.end, len);
        self.count += 1;
        self.end = align_frame(self.end + len);
    }

    /// The last frame's buffer, with the room it may grow into (a whole
    /// buffer from its start), and its length: for a port that joins
    /// segments of one flow into one frame.
    pub fn last_mut(&mut self) -> Option<(&mut [u8], usize)> {
        let last = self.count.checked_sub(1)?;
        if self.is_lent(last) {
            return None;
        }
        let (start, len) = self.spans[last];
        Some((&mut self.slab[start..start + self.frame_capacity], len))
    }

    /// Sets the last frame's length, after [`last_mut`](Self::last_mut)
    /// grew it.
    ///
    /// # Panics
    /// When the batch is empty or `len` exceeds the buffer size.
    pub fn set_last_len(&mut self, len: usize) {
        assert!(self.count > 0 && len <= self.frame_capacity);
        assert!(!self.is_lent(self.count - 1), "a lent frame cannot grow");
        let last = self.count - 1;
        self.spans[last].1 = len;
        self.end = align_frame(self.spans[last].0 + len);
    }

    /// Copies `frame` into the next free buffer. Returns `Ok(false)` when the
    /// batch is full.
    pub fn push(&mut self, frame: &[u8]) -> Result<bool, Oversize> {
        let capacity = self.frame_capacity;
        let Some(buffer) = self.next_buffer() else {
            return Ok(false);
        };
        if frame.len() > capacity {
            return Err(Oversize {
                len: frame.len(),
                capacity,
            });
        }
        buffer[..frame.len()].copy_from_slice(frame);
        self.commit(frame.len());
        Ok(true)
    }
}

// SAFETY: the lent frames' pointers are only read, and point into memory
// that the owners held beside them (Send + Sync) keep mapped; the rest is
// owned data.
unsafe impl Send for RxBatch {}

#[cfg(test)]
mod tests {
    use super::RxBatch;

    fn fill(batch: &mut RxBatch, lens: &[usize]) {
        let capacity = batch.frame_capacity();
        for (n, &len) in lens.iter().enumerate() {
            let buffer = batch.next_buffer().expect("room for the frame");
            assert_eq!(buffer.len(), capacity);
            buffer[..len].fill(n as u8);
            batch.commit(len);
        }
    }

    #[test]
    fn small_frames_are_packed_and_read_back_whole() {
        let mut batch = RxBatch::new(64, 65_600);
        let lens: Vec<usize> = (0..64).map(|n| 60 + n).collect();
        fill(&mut batch, &lens);
        assert!(batch.is_full() && batch.next_buffer().is_none());
        for (n, frame) in batch.iter().enumerate() {
            assert_eq!(frame.eth.len(), lens[n]);
            assert!(frame.eth.iter().all(|&b| b == n as u8), "frame {n} changed");
        }
        // 64 small frames, each at a 64-byte boundary: a few KiB, not 4 MiB.
        let first = batch.frame(0).eth.as_ptr() as usize;
        let last = batch.frame(63).eth.as_ptr() as usize;
        assert!(
            last - first < 64 * 192,
            "frames spread over {} bytes",
            last - first
        );
        batch.clear();
        assert!(batch.is_empty());
        assert_eq!(batch.next_buffer().unwrap().as_ptr() as usize, first);
    }

    #[test]
    fn every_frame_may_be_full_size() {
        let capacity = 1000; // not a multiple of the alignment
        let mut batch = RxBatch::new(8, capacity);
        fill(&mut batch, &[capacity; 8]);
        for (n, frame) in batch.iter().enumerate() {
            assert_eq!(frame.eth.len(), capacity);
            assert!(frame.eth.iter().all(|&b| b == n as u8));
        }
        batch.clear();
        fill(
            &mut batch,
            &[1, capacity, 7, capacity, 0, capacity, 3, capacity],
        );
        assert_eq!(batch.frame(4).eth.len(), 0);
        assert!(batch.frame(7).eth.iter().all(|&b| b == 7));
    }

    #[test]
    fn lent_frames_are_read_where_they_lie_beside_copied_ones() {
        let mut batch = RxBatch::new(4, 2048).with_metadata(2);
        batch.push(b"HHcopied").unwrap();
        let lender: std::sync::Arc<Vec<u8>> = std::sync::Arc::new(b" frame".to_vec());
        batch.keep(&lender);
        batch.keep(&lender);
        batch.push(b"MMlent").unwrap();
        // SAFETY: `lender`'s bytes live in the batch's owners until clear.
        unsafe { batch.lend_rest(lender.as_ptr(), lender.len()) };
        batch.push(b"HHagain").unwrap();
        assert_eq!(batch.len(), 3);
        assert!(!batch.is_lent(0) && batch.is_lent(1) && !batch.is_lent(2));
        assert_eq!(batch.frame(0).eth, b"copied");
        let lent = batch.frame(1);
        assert_eq!((lent.meta, lent.eth), (&b"MM"[..], &b"lent"[..]));
        assert_eq!(lent.rest.as_ptr(), lender.as_ptr(), "not copied");
        assert_eq!((lent.len(), lent.ethernet()), (10, b"lent frame".to_vec()));
        assert_eq!(batch.frame(2).eth, b"again");
        assert_eq!(std::sync::Arc::strong_count(&lender), 2, "held once");
        batch.clear();
        assert_eq!(std::sync::Arc::strong_count(&lender), 1, "let go");
        batch.push(b"HHnew").unwrap();
        assert!(!batch.is_lent(0));
    }
}
