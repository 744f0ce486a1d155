//! Stopping the workers: a flag, and an eventfd that wakes those asleep in
//! `poll(2)`.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::port::wake;

/// Tells workers to stop, waking those asleep in `poll`.
#[derive(Debug)]
pub struct Stopper {
    stopped: AtomicBool,
    pub(super) wake: OwnedFd,
}

impl Stopper {
    /// A stopper not yet triggered.
    pub fn new() -> io::Result<Stopper> {
        Ok(Stopper {
            stopped: AtomicBool::new(false),
            wake: wake::eventfd()?,
        })
    }

    /// Asks every worker to stop and wakes them.
    pub fn stop(&self) {
        // Release: pairs with the workers' acquire load.
        self.stopped.store(true, Ordering::Release);
        // The flag is what counts; a failed wake-up only delays the stop
        // by at most the workers' longest sleep.
        let _ = wake::eventfd_signal(&self.wake);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}
