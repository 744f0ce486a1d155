//! Hints to the processor's caches about lines another core shares.
//!
//! A switch's frames lie in lines another core just wrote (a guest's
//! buffers, its descriptors): each first touch waits for that core's
//! cache. Loops of a few hundred instructions a frame leave the processor
//! no room to overlap those waits on its own, so a port names the lines of
//! the frames it will touch next before it touches the first ([`fetch`]).
//! The other way, the lines a port writes for another core to read next
//! stay in this core's own caches until that core asks for them, and each
//! of its reads then waits on this core; handed to the shared cache as
//! they are written ([`demote`]), they are there when it asks. Lines
//! this core will write that the other core last read are asked for with
//! the right to write them ([`own`]): a write to a line another core
//! shares waits for that core to give it up, and stores wait behind it.
#![allow(unsafe_code)]

/// Asks for the line at `at` to be read into the first-level cache.
/// Never faults, whatever `at` is, and changes nothing a program can see.
#[inline(always)]
pub fn fetch(at: *const u8) {
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

/// Asks for the line at `at` to be read into this core's cache with the
/// right to write it (x86's `prefetchw`), so that a write to it later
/// need not wait for the other cores to give it up; as [`fetch`] on a
/// processor without `prefetchw`. Never faults, whatever `at` is, and
/// changes nothing a program can see.
#[inline(always)]
pub fn own(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    if has_prefetchw() {
        // SAFETY: prefetchw is a hint: it reads and writes nothing the
        // program sees and does not fault on any address; it is run only
        // where the processor says it has it (elsewhere its opcode need
        // not be a no-op).
        unsafe {
            std::arch::asm!(
                "prefetchw [{0}]",
                in(reg) at,
                options(nostack, preserves_flags, readonly)
            );
        }
        return;
    }
    fetch(at);
}

/// Whether the processor has `prefetchw` (CPUID 8000_0001h, ECX bit 8,
/// PRFCHW), asked once: the standard library's feature detection does
/// not name it.
#[cfg(target_arch = "x86_64")]
fn has_prefetchw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        // `__cpuid` became safe to call in later toolchains.
        #[allow(unused_unsafe)]
        // SAFETY: CPUID exists on every x86_64 processor, and leaf
        // 8000_0001h on every one, Intel's and AMD's alike.
        let leaf = unsafe { std::arch::x86_64::__cpuid(0x8000_0001) };
        leaf.ecx & (1 << 8) != 0
    })
}

/// Asks for the line at `at` to be moved from this core's private caches
/// to the one all cores share (x86's `cldemote`; a no-op on processors
/// without it, and elsewhere). Never faults, whatever `at` is, and
/// changes nothing a program can see.
#[inline(always)]
pub fn demote(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: cldemote is a hint: it reads and writes nothing the program
    // sees and does not fault on any address; a processor without it runs
    // it as a no-op (its opcode lies in the hint no-op space).
    unsafe {
        std::arch::asm!(
            "cldemote [{0}]",
            in(reg) at,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_never_fault_and_change_nothing() {
        let bytes = [7u8; 128];
        fetch(bytes.as_ptr());
        own(bytes.as_ptr());
        demote(bytes.as_ptr());
        // Addresses nothing is mapped at.
        for at in [0, 0x10, usize::MAX - 63] {
            fetch(at as *const u8);
            own(at as *const u8);
            demote(at as *const u8);
        }
        assert!(bytes.iter().all(|&b| b == 7));
    }
}
