//! The copy a frame's bytes take where they cross from one owner to
//! another (a guest's buffer, the worker's batch), inlined for the small
//! frames that are most of a switch's work.
//!
//! A 64-byte frame's copy through `memmove` costs a call and its size
//! dispatch, about as many instructions as the copy; here a copy of up to
//! 64 bytes is two loads and two stores of the widest size that fits,
//! overlapping in the middle, and a longer one calls `memmove`. Every
//! load comes before any store, so the source and the destination may
//! overlap (a guest may post a receive buffer over the one it sends from).
#![allow(unsafe_code)]

use std::ptr::{read_unaligned, write_unaligned};

/// Copies `len` bytes from `from` to `to`, which may overlap, as
/// `std::ptr::copy` does.
///
/// # Safety
/// `from` must be valid for reads and `to` for writes of `len` bytes.
/// The bytes are copied as they are when read: another party may write
/// either range meanwhile, since no reference to them is made.
#[inline(always)]
pub unsafe fn copy_bytes(from: *const u8, to: *mut u8, len: usize) {
    /// Copies `len` bytes, between `N` and `2 * N`, as the first and last
    /// `N`.
    ///
    /// # Safety
    /// As `copy_bytes`, with `N <= len <= 2 * N`.
    #[inline(always)]
    unsafe fn ends<const N: usize>(from: *const u8, to: *mut u8, len: usize) {
        // SAFETY: both `N`-byte ranges lie within the `len` bytes the
        // caller vouches for; both loads happen before either store.
        unsafe {
            let head = read_unaligned(from.cast::<[u8; N]>());
            let tail = read_unaligned(from.add(len - N).cast::<[u8; N]>());
            write_unaligned(to.cast::<[u8; N]>(), head);
            write_unaligned(to.add(len - N).cast::<[u8; N]>(), tail);
        }
    }
    // SAFETY: the caller's contract; each branch's length bounds hold.
    // Largest first: a frame's copy takes one or two comparisons.
    unsafe {
        if len > 64 {
            std::ptr::copy(from, to, len);
        } else if len >= 32 {
            ends::<32>(from, to, len);
        } else if len >= 16 {
            ends::<16>(from, to, len);
        } else if len >= 8 {
            ends::<8>(from, to, len);
        } else if len >= 4 {
            ends::<4>(from, to, len);
        } else if len >= 2 {
            ends::<2>(from, to, len);
        } else if len == 1 {
            to.write(from.read());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_small_length_and_overlap_copies_as_memmove() {
        let source: Vec<u8> = (0..=255).collect();
        for len in 0..=130 {
            for shift in [0usize, 1, 7, 31, 33] {
                // Apart, and overlapping either way.
                let mut apart = vec![0xaa; 300];
                let mut expected = apart.clone();
                // SAFETY: both ranges lie in their vectors.
                unsafe { copy_bytes(source.as_ptr(), apart[shift..].as_mut_ptr(), len) };
                expected[shift..shift + len].copy_from_slice(&source[..len]);
                assert_eq!(apart, expected, "len {len} to +{shift}");
                for (from, to) in [(0, shift), (shift, 0)] {
                    let mut ours = source.clone();
                    let mut theirs = source.clone();
                    // SAFETY: both ranges lie in the vector (len + shift < 256).
                    unsafe {
                        copy_bytes(ours.as_ptr().add(from), ours.as_mut_ptr().add(to), len);
                        std::ptr::copy(theirs.as_ptr().add(from), theirs.as_mut_ptr().add(to), len);
                    }
                    assert_eq!(ours, theirs, "len {len} from {from} to {to}");
                }
            }
        }
    }
}
