//! Asking the processor for a cache line ahead of its use.
//!
//! A switch's frames lie in lines another core just wrote (a guest's
//! buffers, its descriptors): each first touch waits for that core's
//! cache. Loops of a few hundred instructions a frame leave the processor
//! no room to overlap those waits on its own, so a port names the lines of
//! the frames it will touch next before it touches the first.
#![allow(unsafe_code)]

/// Asks for the line at `at` to be read into the first-level cache.
/// Never faults, whatever `at` is, and changes nothing a program can see.
#[inline(always)]
pub fn line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing into the program,
    // writes nothing, and does not fault on any address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
