//! System calls on descriptors that every kind of port makes: reads and
//! writes, socket options, and the result checks they share.
#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::Outgoing;

/// A negative return is the thread's `errno`.
pub(crate) fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Takes ownership of a descriptor a system call just returned.
pub(crate) fn owned(ret: libc::c_int) -> io::Result<OwnedFd> {
    let fd = check(ret)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody
    // else; callers pass the result of a creating call straight in.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one datagram or frame into `buf`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    check_size(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
}

/// Writes one datagram or frame from `buf`.
pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of its length.
    check_size(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
}

/// Writes `frame`'s metadata and pieces to `fd` as one write (writev):
/// the kernel gathers them into its buffer, the frame's one copy.
pub fn write_frame(fd: RawFd, frame: &Outgoing<'_>) -> io::Result<usize> {
    let mut iovs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 5];
    let count = frame.iovecs(&mut iovs);
    if count == 1 {
        // SAFETY: the iovec points at the frame's bytes, readable for this
        // call; the kernel only reads them. A plain write(2) where the
        // frame is one buffer, as it mostly is.
        return check_size(unsafe { libc::write(fd, iovs[0].iov_base, iovs[0].iov_len) });
    }
    // SAFETY: the first `count` iovecs point at the frame's parts, which
    // are readable for this call; the kernel only reads them.
    check_size(unsafe { libc::writev(fd, iovs.as_ptr(), count as libc::c_int) })
}

/// Sets socket option `name` at `level` to `value`.
pub(crate) fn set_option<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the size passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Reads and clears the socket's pending error (SO_ERROR), if it has one.
pub(crate) fn take_socket_error(fd: BorrowedFd<'_>) -> Option<io::Error> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live and describe an int-sized buffer.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    match check(ret) {
        Ok(_) if value == 0 => None,
        Ok(_) => Some(io::Error::from_raw_os_error(value)),
        Err(error) => Some(error),
    }
}
