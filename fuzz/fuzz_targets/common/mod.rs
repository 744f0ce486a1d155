//! What the fuzz targets that check a parser against a reference share:
//! reading the kernel's fields (host byte order) and finding where a slice
//! the parser returned lies in the input.

#![allow(dead_code)]

use std::ops::Range;

/// The host-order `u16` at `at`.
pub fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([bytes[at], bytes[at + 1]])
}

/// The host-order `u32` at `at`.
pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Where `slice` lies in `bytes`; panics unless wholly inside it: a parser
/// never hands out bytes beyond its input.
pub fn range_in(bytes: &[u8], slice: &[u8]) -> Range<usize> {
    let base = bytes.as_ptr() as usize;
    let start = slice.as_ptr() as usize;
    assert!(
        start >= base && start + slice.len() <= base + bytes.len(),
        "slice {start:#x}+{} outside the input {base:#x}+{}",
        slice.len(),
        bytes.len()
    );
    start - base..start - base + slice.len()
}
