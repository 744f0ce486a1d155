//! A frame as ports hand it over and take it, without copying it on the
//! way.
//!
//! A received frame is its metadata (the virtio-net header of real ports)
//! and its Ethernet bytes in the worker's batch, which is all the
//! forwarding pipeline reads; a port may leave the bytes after the first
//! [`LENT_HEAD`] where they arrived (a vhost-user guest's own buffer),
//! lent until the batch has been forwarded ([`Lent`]). A frame leaving
//! with its VLAN tag pushed, popped or changed is the received bytes cut
//! around the new tag. Either way the egress port copies the pieces, once,
//! into where the frame leaves.
#![allow(unsafe_code)]

use std::marker::PhantomData;

/// The bytes of a lent frame that are copied into the batch: every byte
/// the pipeline reads of a frame a port may lend (a unicast frame's
/// addresses and VLAN tags; group-addressed frames, which snooping and
/// spanning tree read further, are not lent). What the pipeline decided
/// on is then what leaves, whatever the lender writes meanwhile.
pub const LENT_HEAD: usize = 64;

/// Bytes a port lends where they lie, which the lender may write at any
/// moment: never read through a reference, only copied with raw copies
/// (as the vhost-user ports copy guest memory), so that their changing
/// changes what is copied, not whether the copy is sound.
#[derive(Debug, Clone, Copy)]
pub struct Lent<'a> {
    at: *const u8,
    len: usize,
    _batch: PhantomData<&'a [u8]>,
}

impl Default for Lent<'_> {
    fn default() -> Self {
        Lent::NONE
    }
}

impl PartialEq for Lent<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.is_empty() && other.is_empty()) || (self.at == other.at && self.len == other.len)
    }
}

impl Eq for Lent<'_> {}

impl<'a> Lent<'a> {
    /// No bytes.
    pub const NONE: Lent<'static> = Lent {
        at: std::ptr::null(),
        len: 0,
        _batch: PhantomData,
    };

    /// `len` bytes at `at`.
    ///
    /// # Safety
    /// `at` must be valid for reads of `len` bytes for `'a` (others may
    /// write them meanwhile).
    pub unsafe fn new(at: *const u8, len: usize) -> Lent<'a> {
        Lent {
            at,
            len,
            _batch: PhantomData,
        }
    }

    /// A slice's bytes, as lent bytes.
    pub fn of(bytes: &'a [u8]) -> Lent<'a> {
        Lent {
            at: bytes.as_ptr(),
            len: bytes.len(),
            _batch: PhantomData,
        }
    }

    /// How many bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first `n` bytes (all, if fewer).
    #[inline]
    pub fn take(&self, n: usize) -> Lent<'a> {
        Lent {
            at: self.at,
            len: self.len.min(n),
            _batch: PhantomData,
        }
    }

    /// The bytes after the first `n` (none past the end).
    #[inline]
    pub fn skip(&self, n: usize) -> Lent<'a> {
        let n = n.min(self.len);
        Lent {
            at: self.at.wrapping_add(n),
            len: self.len - n,
            _batch: PhantomData,
        }
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where they lie, for a gathering write's iovec.
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.at
    }

    /// Copies them to `to`.
    ///
    /// # Safety
    /// `to` must be valid for writes of [`len`](Self::len) bytes; it may
    /// overlap the lent bytes (a guest may post a receive buffer over the
    /// one it sends from).
    #[inline]
    pub unsafe fn copy_to(&self, to: *mut u8) {
        if self.len > 0 {
            // SAFETY: the bytes are readable (the constructor's contract),
            // `to` is writable (ours); `copy` allows overlap.
            unsafe { super::copy::copy_bytes(self.at, to, self.len) };
        }
    }

    /// Appends them to `out`.
    #[inline]
    pub fn extend_into(&self, out: &mut Vec<u8>) {
        if self.len == 0 {
            return;
        }
        out.reserve(self.len);
        let end = out.len();
        // SAFETY: `out` has room for `len` more bytes past `end`, its own
        // heap memory, which no lender can map; once copied, they are
        // initialised.
        unsafe {
            self.copy_to(out.as_mut_ptr().add(end));
            out.set_len(end + self.len);
        }
    }
}

/// A received frame: the port's metadata and the Ethernet frame, its first
/// bytes in `eth` and, when a port lent the frame, the rest in `rest`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The port's metadata: a virtio-net header, or nothing.
    pub meta: &'a [u8],
    /// The Ethernet frame, or its first [`LENT_HEAD`] bytes when lent:
    /// what the pipeline reads.
    pub eth: &'a [u8],
    /// The rest of a lent frame.
    pub rest: Lent<'a>,
}

impl<'a> Frame<'a> {
    /// A buffer of `meta_len` bytes of metadata (all of it, if shorter)
    /// followed by the Ethernet frame.
    #[inline]
    pub fn split(buffer: &'a [u8], meta_len: usize) -> Frame<'a> {
        let (meta, eth) = buffer.split_at(meta_len.min(buffer.len()));
        Frame {
            meta,
            eth,
            rest: Lent::NONE,
        }
    }

    /// The Ethernet frame's length.
    #[inline]
    pub fn len(&self) -> usize {
        self.eth.len() + self.rest.len()
    }

    /// Whether the Ethernet frame has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The Ethernet frame, copied.
    pub fn ethernet(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        out.extend_from_slice(self.eth);
        self.rest.extend_into(&mut out);
        out
    }

    /// The metadata and the frame in one buffer, as a port's read gives
    /// them.
    pub fn to_vec(&self) -> Vec<u8> {
        Outgoing::from(*self).to_vec()
    }
}

/// A frame to send: the metadata, then the Ethernet frame in up to three
/// pieces (the bytes before the outer tag's place, the tag written there,
/// the bytes after it) and the rest of a lent frame, which the port copies
/// one after the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outgoing<'a> {
    /// The port's metadata: a virtio-net header, or nothing.
    pub meta: &'a [u8],
    /// The Ethernet frame's pieces in the batch, in order; the last ones
    /// may be empty.
    pub pieces: [&'a [u8]; 3],
    /// The rest of a lent frame, after the pieces.
    pub rest: Lent<'a>,
}

impl<'a> From<Frame<'a>> for Outgoing<'a> {
    #[inline]
    fn from(frame: Frame<'a>) -> Outgoing<'a> {
        Outgoing {
            meta: frame.meta,
            pieces: [frame.eth, &[], &[]],
            rest: frame.rest,
        }
    }
}

impl<'a> Outgoing<'a> {
    /// A buffer of `meta_len` bytes of metadata then the frame, in one
    /// piece.
    #[inline]
    pub fn split(buffer: &'a [u8], meta_len: usize) -> Outgoing<'a> {
        Frame::split(buffer, meta_len).into()
    }

    /// The Ethernet frame's length.
    #[inline]
    pub fn len(&self) -> usize {
        self.pieces.iter().map(|piece| piece.len()).sum::<usize>() + self.rest.len()
    }

    /// Whether the Ethernet frame has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The Ethernet frame, when it is one piece in the batch.
    #[inline]
    pub fn whole(&self) -> Option<&'a [u8]> {
        match self.pieces {
            [whole, [], []] if self.rest.is_empty() => Some(whole),
            _ => None,
        }
    }

    /// The Ethernet frame in one slice: itself when it is one piece in the
    /// batch, or its pieces copied into `scratch`.
    pub fn ethernet<'s>(&self, scratch: &'s mut Vec<u8>) -> &'s [u8]
    where
        'a: 's,
    {
        match self.whole() {
            Some(whole) => whole,
            None => {
                scratch.clear();
                self.pieces
                    .iter()
                    .for_each(|p| scratch.extend_from_slice(p));
                self.rest.extend_into(scratch);
                scratch
            }
        }
    }

    /// Appends the metadata and the frame to `out`.
    #[inline]
    pub fn extend_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.meta.len() + self.len());
        out.extend_from_slice(self.meta);
        if let Some(whole) = self.whole() {
            out.extend_from_slice(whole);
            return;
        }
        self.pieces.iter().for_each(|p| out.extend_from_slice(p));
        self.rest.extend_into(out);
    }

    /// The metadata and the frame in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.extend_into(&mut out);
        out
    }

    /// The metadata, then the frame's parts that have bytes, as iovecs for
    /// a gathering write (writev, sendmmsg); returns how many of `iovs`
    /// it set. Parts that follow each other in memory (the metadata and
    /// the frame of a batch's buffer) are one iovec, so that a frame as it
    /// came is handed over as one buffer, as before it was cut.
    #[inline]
    pub fn iovecs(&self, iovs: &mut [libc::iovec; 5]) -> usize {
        let mut count: usize = 0;
        let parts = std::iter::once(self.meta)
            .chain(self.pieces)
            .map(|part| (part.as_ptr(), part.len()))
            .chain(std::iter::once((self.rest.as_ptr(), self.rest.len())));
        for (at, len) in parts.filter(|&(_, len)| len > 0) {
            if let Some(last) = count.checked_sub(1).map(|last| &mut iovs[last]) {
                let end = (last.iov_base as *const u8).wrapping_add(last.iov_len);
                if std::ptr::eq(end, at) {
                    last.iov_len += len;
                    continue;
                }
            }
            iovs[count] = libc::iovec {
                iov_base: at as *mut libc::c_void,
                iov_len: len,
            };
            count += 1;
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_read_as_one_frame() {
        let frame = Frame::split(b"HHframe", 2);
        assert_eq!((frame.meta, frame.eth), (&b"HH"[..], &b"frame"[..]));
        assert_eq!(frame.to_vec(), b"HHframe");
        let whole = Outgoing::from(frame);
        assert_eq!(whole.whole(), Some(&b"frame"[..]));
        let lent = b"LENT".to_vec();
        let (meta, fr, tag, ame) = (
            b"HH".to_vec(),
            b"fr".to_vec(),
            b"TAG".to_vec(),
            b"ame".to_vec(),
        );
        let cut = Outgoing {
            meta: &meta,
            pieces: [&fr, &tag, &ame],
            rest: Lent::of(&lent),
        };
        assert_eq!(cut.len(), 12);
        assert_eq!(cut.whole(), None);
        let mut scratch = Vec::new();
        assert_eq!(cut.ethernet(&mut scratch), b"frTAGameLENT");
        assert_eq!(cut.to_vec(), b"HHfrTAGameLENT");
        let mut iovs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 5];
        assert_eq!(cut.iovecs(&mut iovs), 5);
        assert_eq!(iovs[4].iov_base as *const u8, lent.as_ptr(), "not copied");
        let bare = Outgoing::split(b"frame", 0);
        assert_eq!(bare.iovecs(&mut iovs), 1, "no empty part");
        // Parts that follow each other in memory are one iovec.
        let buffer = b"HHframe".to_vec();
        let tag = b"TAG".to_vec();
        let retagged = Outgoing {
            meta: &buffer[..2],
            pieces: [&buffer[2..4], &tag, &buffer[4..]],
            rest: Lent::of(&lent),
        };
        assert_eq!(retagged.iovecs(&mut iovs), 4);
        assert_eq!(
            (iovs[0].iov_base as *const u8, iovs[0].iov_len),
            (buffer.as_ptr(), 4)
        );
        assert_eq!(Outgoing::split(&buffer, 2).iovecs(&mut iovs), 1);
        assert_eq!(iovs[0].iov_len, 7);
        assert!(Outgoing::default().is_empty());
        let received = Frame {
            meta: b"HH",
            eth: b"head",
            rest: Lent::of(&lent),
        };
        assert_eq!(received.len(), 8);
        assert_eq!(received.ethernet(), b"headLENT");
        assert_eq!(received.to_vec(), b"HHheadLENT");
    }
}
