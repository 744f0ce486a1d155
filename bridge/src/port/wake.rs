//! What a worker sleeps on: `poll(2)` over its ports' descriptors and an
//! eventfd that wakes it to stop.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::fd;

/// An eventfd, to wake threads sleeping in `poll`.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: constant arguments; the result is checked at once.
    fd::owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })
}

/// Adds one to an eventfd, waking its pollers.
pub fn eventfd_signal(eventfd: &OwnedFd) -> io::Result<()> {
    fd::write(eventfd.as_raw_fd(), &1u64.to_ne_bytes()).map(|_| ())
}

/// Empties an eventfd, so that it polls readable again only when signalled
/// again.
pub fn eventfd_drain(eventfd: &OwnedFd) {
    let mut count = [0u8; 8];
    // Non-blocking: an eventfd already empty answers EAGAIN, which is fine.
    let _ = fd::read(eventfd.as_raw_fd(), &mut count);
}

/// Waits until one of `fds` is ready or `timeout_ms` passes; returns how
/// many are ready (their `revents` are set). An interrupted wait returns 0.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a valid array of the length passed.
    match fd::check(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) })
    {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}
