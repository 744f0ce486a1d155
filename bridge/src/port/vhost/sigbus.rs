//! Surviving a frontend that shrinks the file behind its shared memory.
//!
//! A region is mapped from the frontend's file; a memfd sealed against
//! shrinking (QEMU seals its own) cannot shrink, but DPDK without
//! hugepages passes an unsealed memfd and hugetlbfs files cannot be
//! sealed. When such a file shrinks, the next access to a page past its
//! new end raises SIGBUS, whichever thread makes it, and SIGBUS kills the
//! process. So, as Wayland compositors do for their clients' buffers: each
//! mapping of a frontend's file is registered here, and a SIGBUS handler
//! that finds the faulting address in one maps anonymous zero pages over
//! the whole mapping (`MAP_FIXED`) and marks it faulted. The access that
//! faulted then completes on zeros, the port sees the mark after its
//! batch and drops the frontend (see `VhostQueue`), and the bridge goes
//! on. A SIGBUS at any other address goes to the handler there was
//! before (Rust's own, for stack overflows), as if this one did not exist.
//!
//! The handler does only what a signal handler may: atomic loads and
//! stores on a fixed table, mmap(2) and sigaction(2), both plain system
//! calls.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// Mappings watched at once: a few regions per vhost-user port.
const SLOTS: usize = 512;

/// One watched mapping. `len` is 0 while the slot is free; it is set last
/// (Release) when a mapping is registered and cleared first when it goes,
/// so the handler (Acquire) sees a whole entry or none.
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
/// Registrations and removals, one at a time (the handler takes no lock).
static CLAIM: Mutex<()> = Mutex::new(());
static INSTALL: Once = Once::new();
/// The SIGBUS action before ours, where a SIGBUS not ours goes.
static mut PREVIOUS: Option<libc::sigaction> = None;

/// A registered mapping; unregistered on drop.
#[derive(Debug)]
pub struct Watched {
    slot: usize,
}

/// Why a mapping could not be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Every slot is taken.
    #[error("more than {SLOTS} vhost-user memory regions mapped at once")]
    Full,
    /// The handler could not be installed.
    #[error("cannot install the SIGBUS handler: {0}")]
    Install(std::io::Error),
}

/// Watches the mapping of `len` bytes at `start` until the returned value
/// is dropped, which must happen before the mapping is unmapped.
pub fn watch(start: *mut u8, len: usize) -> Result<Watched, WatchError> {
    install()?;
    let _claim = CLAIM.lock().unwrap_or_else(|e| e.into_inner());
    let slot = TABLE
        .iter()
        .position(|slot| slot.len.load(Ordering::Relaxed) == 0)
        .ok_or(WatchError::Full)?;
    let entry = &TABLE[slot];
    entry.faulted.store(false, Ordering::Relaxed);
    entry.start.store(start as usize, Ordering::Relaxed);
    // Publishes start and faulted with it (the handler loads len Acquire).
    entry.len.store(len, Ordering::Release);
    Ok(Watched { slot })
}

impl Watched {
    /// Whether a SIGBUS hit the mapping (it is zero pages since).
    #[inline]
    pub fn faulted(&self) -> bool {
        // Acquire: pairs with the handler's Release, after its mmap.
        TABLE[self.slot].faulted.load(Ordering::Acquire)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _claim = CLAIM.lock().unwrap_or_else(|e| e.into_inner());
        TABLE[self.slot].len.store(0, Ordering::Release);
    }
}

fn install() -> Result<(), WatchError> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid starting value; the
        // handler has the SA_SIGINFO signature; `old` is written by the
        // kernel before it is read. PREVIOUS is written once, here, before
        // the handler can run (it is installed by this very call).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &action, &mut old) != 0 {
                result = Err(WatchError::Install(std::io::Error::last_os_error()));
                return;
            }
            *std::ptr::addr_of_mut!(PREVIOUS) = Some(old);
        }
    });
    result
}

extern "C" fn handler(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let address = unsafe { (*info).si_addr() } as usize;
    for slot in &TABLE {
        let len = slot.len.load(Ordering::Acquire);
        if len == 0 {
            continue;
        }
        let start = slot.start.load(Ordering::Relaxed);
        if address < start || address - start >= len {
            continue;
        }
        // SAFETY: [start, start + len) is a mapping this process made and
        // still holds (it is unwatched before it is unmapped); replacing
        // it with private zero pages leaves every pointer into it valid.
        let mapped = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if mapped != libc::MAP_FAILED {
            slot.faulted.store(true, Ordering::Release);
            return;
        }
        break;
    }
    // Not ours (or the zero pages could not be had): the previous action
    // takes it when the access faults again on return.
    // SAFETY: PREVIOUS was set before this handler was installed and is
    // never written again; restoring it is a plain sigaction(2).
    unsafe {
        match *std::ptr::addr_of!(PREVIOUS) {
            Some(previous) => libc::sigaction(signal, &previous, std::ptr::null_mut()),
            None => libc::signal(signal, libc::SIG_DFL) as libc::c_int,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_shrunk_file_reads_as_zeros_and_is_marked() {
        let fd = nix::sys::memfd::memfd_create(
            c"mpbridge-sigbus",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .unwrap();
        let file = File::from(fd);
        let len = 4 * 4096;
        file.set_len(len as u64).unwrap();
        // SAFETY: a fresh shared mapping of the file, unmapped below.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(start, libc::MAP_FAILED);
        let start = start.cast::<u8>();
        let watched = watch(start, len).unwrap();
        // SAFETY: inside the mapping, which the file still backs.
        unsafe { start.add(3 * 4096).write_volatile(7) };
        assert!(!watched.faulted());
        file.set_len(4096).unwrap();
        // SAFETY: inside the mapping; past the file's end now, so the read
        // raises SIGBUS, which the handler turns into a zero page.
        let byte = unsafe { start.add(3 * 4096).read_volatile() };
        assert_eq!(byte, 0);
        assert!(watched.faulted());
        drop(watched);
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(start.cast(), len) };
    }
}
