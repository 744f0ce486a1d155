//! The frontend's kick and call descriptors, used without ever blocking.
//!
//! Both belong to the frontend: it may pass something that is not an
//! eventfd, and it shares the open file description with the bridge, so
//! it can clear `O_NONBLOCK` on it at any moment, or fill a call eventfd's
//! counter so that the next write would wait for it to be read. A worker
//! holds a vring's lock while it uses them, so one that blocked would stop
//! every worker behind that lock. Hence:
//!
//! - each must be an eventfd (anything else is refused when it arrives);
//! - a kick is emptied with `preadv2(RWF_NOWAIT)`, which does not wait
//!   whatever the descriptor's flags say;
//! - a call is written only after `poll(2)` says a write will not wait
//!   (the counter has room), and "would wait" is taken as "the frontend
//!   has a notification pending already", which is what a full counter
//!   means. The frontend could still fill the counter *and* clear
//!   `O_NONBLOCK` between the look and the write; a worker caught so is
//!   what the workers' heartbeat reports (docs/design.md).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use crate::port::fd;

/// A frontend's eventfd, as it arrived (kick or call).
#[derive(Debug)]
pub struct FrontendEventfd {
    file: File,
}

/// Why a descriptor the frontend sent was refused.
#[derive(Debug, thiserror::Error)]
pub enum EventfdError {
    /// It is some other kind of file.
    #[error("a {what} descriptor that is not an eventfd ({kind})")]
    NotEventfd {
        /// Kick or call.
        what: &'static str,
        /// What it is instead, as /proc names it.
        kind: String,
    },
    /// Looking at it failed.
    #[error("a {what} descriptor: {source}")]
    Io {
        /// Kick or call.
        what: &'static str,
        /// What the system said.
        source: io::Error,
    },
}

/// What /proc says descriptor `fd` of this process is.
fn kind_of(fd: RawFd) -> io::Result<String> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))?;
    Ok(link.to_string_lossy().into_owned())
}

impl FrontendEventfd {
    /// Takes `file` as the frontend's `what` ("kick" or "call") if it is
    /// an eventfd, made non-blocking (which is not relied on).
    pub fn new(file: File, what: &'static str) -> Result<FrontendEventfd, EventfdError> {
        let kind = kind_of(file.as_raw_fd()).map_err(|source| EventfdError::Io { what, source })?;
        if kind != "anon_inode:[eventfd]" {
            return Err(EventfdError::NotEventfd { what, kind });
        }
        nix::fcntl::fcntl(
            file.as_fd(),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .map_err(|e| EventfdError::Io {
            what,
            source: e.into(),
        })?;
        Ok(FrontendEventfd { file })
    }

    /// Another handle on the same eventfd.
    pub fn try_clone(&self) -> io::Result<FrontendEventfd> {
        Ok(FrontendEventfd {
            file: self.file.try_clone()?,
        })
    }

    /// The descriptor, to poll.
    pub fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The descriptor, to add to an epoll set.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Empties the counter (a kick), without waiting when it is empty.
    pub fn drain(&self) {
        let mut count = [0u8; 8];
        let iov = libc::iovec {
            iov_base: count.as_mut_ptr().cast(),
            iov_len: count.len(),
        };
        // SAFETY: `iov` describes `count`, live and writable for its
        // length; offset -1 is the file position, which eventfds ignore.
        let ret = unsafe { libc::preadv2(self.as_raw_fd(), &iov, 1, -1, libc::RWF_NOWAIT) };
        if ret >= 0 {
            return;
        }
        // Kernels before 5.10 do not take RWF_NOWAIT on an eventfd: read
        // only what poll(2) says is there.
        if io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP)
            && self.ready(libc::POLLIN)
        {
            let _ = fd::read(self.as_raw_fd(), &mut count);
        }
    }

    /// Adds one to the counter (a call), unless that would wait: then the
    /// counter is full, and the frontend has a notification pending.
    pub fn signal(&self) {
        if self.ready(libc::POLLOUT) {
            let _ = fd::write(self.as_raw_fd(), &1u64.to_ne_bytes());
        }
    }

    /// Whether the eventfd polls `events` now.
    fn ready(&self, events: libc::c_short) -> bool {
        let mut fds = [libc::pollfd {
            fd: self.as_raw_fd(),
            events,
            revents: 0,
        }];
        matches!(crate::port::wake::poll(&mut fds, 0), Ok(1)) && fds[0].revents & events != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn eventfd(flags: libc::c_int) -> File {
        // SAFETY: constant arguments; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
        assert!(fd >= 0);
        // SAFETY: `fd` was just made and is owned by nobody else.
        unsafe { File::from_raw_fd(fd) }
    }

    fn clear_nonblock(file: &File) {
        nix::fcntl::fcntl(
            file.as_fd(),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
        )
        .unwrap();
    }

    #[test]
    fn only_eventfds_are_taken() {
        let (pipe, _w) = nix::unistd::pipe().unwrap();
        let err = FrontendEventfd::new(File::from(pipe), "kick").unwrap_err();
        assert!(err.to_string().contains("not an eventfd"), "{err}");
        let regular = File::open("/proc/self/stat").unwrap();
        assert!(FrontendEventfd::new(regular, "call").is_err());
        assert!(FrontendEventfd::new(eventfd(0), "kick").is_ok());
    }

    /// Runs `f` on `fd` on a thread of its own, failing if it has not
    /// returned within 5 s (it blocked); gives `fd` back.
    fn returns_with(
        fd: FrontendEventfd,
        f: impl FnOnce(&FrontendEventfd) + Send + 'static,
    ) -> FrontendEventfd {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f(&fd);
            let _ = done.send(fd);
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("blocked on the frontend's descriptor")
    }

    #[test]
    fn an_empty_kick_made_blocking_again_does_not_block() {
        let kick = FrontendEventfd::new(eventfd(0), "kick").unwrap();
        // The frontend shares the file description and clears the flag.
        clear_nonblock(kick.file());
        let kick = returns_with(kick, |kick| {
            kick.drain();
            fd::write(kick.as_raw_fd(), &3u64.to_ne_bytes()).unwrap();
            kick.drain();
            kick.drain();
        });
        assert!(!kick.ready(libc::POLLIN), "drained");
    }

    #[test]
    fn a_full_call_made_blocking_again_does_not_block() {
        let call = FrontendEventfd::new(eventfd(0), "call").unwrap();
        clear_nonblock(call.file());
        // The largest count an eventfd holds: any further write waits.
        fd::write(call.as_raw_fd(), &(u64::MAX - 1).to_ne_bytes()).unwrap();
        let call = returns_with(call, |call| {
            call.signal();
            call.signal();
        });
        let mut count = [0u8; 8];
        fd::read(call.as_raw_fd(), &mut count).unwrap();
        assert_eq!(u64::from_ne_bytes(count), u64::MAX - 1);
        call.signal();
        fd::read(call.as_raw_fd(), &mut count).unwrap();
        assert_eq!(u64::from_ne_bytes(count), 1, "signalled once room was back");
    }
}
