//! A vhost-user port's control thread: it owns the unix socket, takes one
//! frontend at a time (accepting it as a server, or connecting to it as a
//! client, again every second while it is absent), and hands each of its
//! messages to the protocol handler. Workers never touch the socket. A
//! second frontend that connects while one is served waits in the
//! listen queue until the first has gone, as a restarted VM whose old
//! connection is still being torn down would.
//!
//! The frontend is untrusted: a message it leaves half-sent, or replies
//! it does not read, close the connection after a second (the message is
//! read only once it is whole, and only while a reply fits), and any message that breaks the
//! protocol ends the connection, which stops the rings and takes the link
//! down; the next frontend starts afresh.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use vhost::vhost_user::{BackendReqHandler, Error as VhostError};

use super::device::{Device, VhostCounters};
use super::protocol::Handler;
use crate::port::wake;

/// How long a message may take to arrive whole once it has begun.
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a client retries a frontend that is absent.
const RETRY_MS: i32 = 1000;

/// A server socket's owner, group and permissions, set once it is bound
/// (so that a frontend running as another user may connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketAccess {
    /// Its owner's uid.
    pub owner: Option<u32>,
    /// Its group's gid.
    pub group: Option<u32>,
    /// Its permission bits (0 to 0777).
    pub mode: Option<u32>,
}

/// Which side of the socket the port is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// mpbridge listens on the socket; the frontend connects.
    Server,
    /// The frontend listens; mpbridge connects.
    Client,
}

/// The control thread, stopped and joined on drop (when the port's last
/// queue goes); a server's socket is removed then.
#[derive(Debug)]
pub struct Control {
    stop: OwnedFd,
    /// The connection being served, to shut down on stop.
    current: Arc<Mutex<Option<UnixStream>>>,
    thread: Option<JoinHandle<()>>,
    /// A server's socket file, removed on drop.
    socket: Option<Bound>,
}

/// Why a vhost-user socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Something that is not a socket is at the path.
    #[error("{0} exists and is not a socket")]
    NotSocket(PathBuf),
    /// Another program serves on the socket.
    #[error("{0} is in use: a program is listening on it")]
    InUse(PathBuf),
    /// The socket's owner, group or mode could not be set.
    #[error("{path}: cannot set its {what}: {source}{hint}")]
    Access {
        /// The socket's path.
        path: PathBuf,
        /// Owner and group, or mode.
        what: &'static str,
        /// What the system said.
        source: io::Error,
        /// What to do about it.
        hint: &'static str,
    },
    /// A system call failed.
    #[error("{path}: {source}")]
    Io {
        /// The socket's path.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

/// A server's socket file: its directory, held open, its name there and
/// the inode bound, so that it is removed by that directory and only if
/// it is still the socket bound (the directory's path may have been
/// swapped for a symlink since, or the socket replaced by another file).
#[derive(Debug)]
struct Bound {
    dir: OwnedFd,
    name: std::ffi::OsString,
    inode: (u64, u64),
}

/// `name` in directory `dir`, through /proc, for calls that take a path
/// rather than a directory descriptor (bind, connect).
fn in_dir(dir: &OwnedFd, name: &std::ffi::OsStr) -> PathBuf {
    Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name)
}

/// What is at `name` in `dir`, not following a symlink: whether it is a
/// socket, and its device and inode; `None` when nothing is.
fn look(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<Option<(bool, (u64, u64))>> {
    use nix::sys::stat::{fstatat, SFlag};
    match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => {
            let socket = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFSOCK;
            Ok(Some((socket, (stat.st_dev, stat.st_ino))))
        }
        Err(nix::errno::Errno::ENOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl Bound {
    /// Gives the socket file its owner, group and mode; the name must
    /// still be the socket bound, and a symlink put there is not followed.
    fn set_access(&self, access: SocketAccess, path: &Path) -> Result<(), SocketError> {
        use nix::fcntl::AtFlags;
        use nix::unistd::{fchownat, Gid, Uid};
        let fail = |what, source: io::Error| SocketError::Access {
            path: path.to_owned(),
            what,
            hint: if source.raw_os_error() == Some(libc::EPERM) {
                " (changing a socket's owner or group takes CAP_CHOWN, which the bridge \
                 drops once started: give the port at start, or run with --keep-caps)"
            } else {
                ""
            },
            source,
        };
        if access.owner.is_some() || access.group.is_some() {
            fchownat(
                &self.dir,
                self.name.as_os_str(),
                access.owner.map(Uid::from_raw),
                access.group.map(Gid::from_raw),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| fail("owner and group", e.into()))?;
        }
        if let Some(mode) = access.mode {
            if look(&self.dir, &self.name).ok().flatten() != Some((true, self.inode)) {
                return Err(fail("mode", io::Error::other("the socket was replaced")));
            }
            nix::sys::stat::fchmodat(
                &self.dir,
                self.name.as_os_str(),
                nix::sys::stat::Mode::from_bits_truncate(mode),
                nix::sys::stat::FchmodatFlags::FollowSymlink,
            )
            .map_err(|e| fail("mode", e.into()))?;
        }
        Ok(())
    }

    /// Removes the socket file if it is still the one bound.
    fn remove(&self) {
        if let Ok(Some((true, inode))) = look(&self.dir, &self.name) {
            if inode == self.inode {
                let _ = nix::unistd::unlinkat(
                    &self.dir,
                    self.name.as_os_str(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                );
            }
        }
    }
}

/// Binds the server's socket at `path`, by its directory opened once: a
/// stale socket there (nobody listening) is replaced; anything else there
/// is refused.
fn bind(path: &Path, access: SocketAccess) -> Result<(UnixListener, Bound), SocketError> {
    use nix::fcntl::{open, OFlag};
    let io = |source| SocketError::Io {
        path: path.to_owned(),
        source,
    };
    let (parent, name) = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => (parent, name),
        _ => return Err(io(io::Error::from(io::ErrorKind::InvalidInput))),
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let dir = open(
        parent,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let at = in_dir(&dir, name);
    if at.as_os_str().len() > 107 {
        return Err(io(io::Error::other(
            "the socket's name is too long to bind by its directory",
        )));
    }
    match look(&dir, name).map_err(io)? {
        Some((false, _)) => return Err(SocketError::NotSocket(path.to_owned())),
        Some((true, _)) => {
            if UnixStream::connect(&at).is_ok() {
                return Err(SocketError::InUse(path.to_owned()));
            }
            nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir)
                .map_err(|e| io(e.into()))?;
        }
        None => {}
    }
    let listener = UnixListener::bind(&at).map_err(io)?;
    listener.set_nonblocking(true).map_err(io)?;
    let inode = match look(&dir, name).map_err(io)? {
        Some((true, inode)) => inode,
        _ => return Err(io(io::Error::other("the socket vanished as it was bound"))),
    };
    let bound = Bound {
        dir,
        name: name.to_owned(),
        inode,
    };
    if let Err(error) = bound.set_access(access, path) {
        bound.remove();
        return Err(error);
    }
    Ok((listener, bound))
}

impl Control {
    /// Starts the control thread of `device` on the socket at `path`.
    pub fn start(
        path: &Path,
        mode: Mode,
        access: SocketAccess,
        device: Arc<Device>,
    ) -> Result<Control, SocketError> {
        let io = |source| SocketError::Io {
            path: path.to_owned(),
            source,
        };
        let (listener, socket) = match mode {
            Mode::Server => {
                let (listener, bound) = bind(path, access)?;
                (Some(listener), Some(bound))
            }
            Mode::Client => (None, None),
        };
        let stop = wake::eventfd().map_err(io)?;
        let thread_stop = stop.try_clone().map_err(io)?;
        let current = Arc::new(Mutex::new(None));
        let thread_current = Arc::clone(&current);
        let thread_path = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("vhost-control".to_owned())
            .spawn(move || {
                let session = Session {
                    device,
                    stop: thread_stop,
                    current: thread_current,
                    path: thread_path,
                    listener,
                };
                session.run();
            })
            .map_err(io)?;
        Ok(Control {
            stop,
            current,
            thread: Some(thread),
            socket,
        })
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = wake::eventfd_signal(&self.stop);
        // A frontend that stalls mid-message would hold the thread for
        // the message timeout; shutting its socket down ends that at once.
        if let Ok(current) = self.current.lock() {
            if let Some(stream) = current.as_ref() {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if let Some(socket) = &self.socket {
            socket.remove();
        }
    }
}

/// What the control thread works with.
struct Session {
    device: Arc<Device>,
    stop: OwnedFd,
    current: Arc<Mutex<Option<UnixStream>>>,
    path: PathBuf,
    listener: Option<UnixListener>,
}

/// What one wait saw.
enum Woken {
    Stop,
    Ready,
    Timeout,
}

impl Session {
    fn run(self) {
        let mut said_absent = false;
        loop {
            let stream = match &self.listener {
                Some(listener) => match self.wait(Some(listener.as_raw_fd()), -1) {
                    Woken::Stop => return,
                    Woken::Timeout => continue,
                    Woken::Ready => match listener.accept() {
                        Ok((stream, _)) => stream,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => {
                            log::warn!("{}: accept: {e}", self.device.name());
                            if let Woken::Stop = self.wait(None, RETRY_MS) {
                                return;
                            }
                            continue;
                        }
                    },
                },
                None => match UnixStream::connect(&self.path) {
                    Ok(stream) => {
                        said_absent = false;
                        stream
                    }
                    Err(e) => {
                        if !said_absent {
                            log::info!(
                                "{}: no frontend listening ({e}); retrying every second",
                                self.device.name()
                            );
                            said_absent = true;
                        }
                        if let Woken::Stop = self.wait(None, RETRY_MS) {
                            return;
                        }
                        continue;
                    }
                },
            };
            if !self.serve(stream) {
                return;
            }
        }
    }

    /// Waits for `fd` to be readable, the stop signal, or `timeout_ms`.
    fn wait(&self, fd: Option<i32>, timeout_ms: i32) -> Woken {
        let mut fds = vec![libc::pollfd {
            fd: self.stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(fd) = fd {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        match wake::poll(&mut fds, timeout_ms) {
            Ok(_) if fds[0].revents != 0 => Woken::Stop,
            Ok(_) if fds.len() > 1 && fds[1].revents != 0 => Woken::Ready,
            Ok(_) => Woken::Timeout,
            Err(_) => Woken::Timeout,
        }
    }

    /// Serves one frontend until it goes; returns false when told to stop.
    fn serve(&self, stream: UnixStream) -> bool {
        let name = self.device.name().to_owned();
        let counters = &self.device.counters;
        // A reply the frontend does not read times out as a message does.
        if let Err(e) = stream
            .set_nonblocking(false)
            .and_then(|_| stream.set_read_timeout(Some(MESSAGE_TIMEOUT)))
            .and_then(|_| stream.set_write_timeout(Some(MESSAGE_TIMEOUT)))
        {
            log::warn!("{name}: {e}");
            return true;
        }
        VhostCounters::bump(&counters.connects);
        self.device.clear_abort();
        log::info!("{name}: frontend connected");
        let fd = stream.as_raw_fd();
        if let (Ok(mut current), Ok(clone)) = (self.current.lock(), stream.try_clone()) {
            *current = Some(clone);
        }
        let handler = Arc::new(Mutex::new(Handler::new(Arc::clone(&self.device))));
        let mut requests = BackendReqHandler::from_stream(stream, Arc::clone(&handler));
        let mut fds = [
            libc::pollfd {
                fd: self.stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.device.abort_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let keep_going = loop {
            for entry in &mut fds {
                entry.revents = 0;
            }
            if wake::poll(&mut fds, -1).is_err() {
                continue;
            }
            if fds[0].revents != 0 {
                break false;
            }
            if fds[2].revents != 0 {
                log::warn!(
                    "{name}: the frontend's memory shrank under its mapping (SIGBUS, survived); \
                     closing it"
                );
                break true;
            }
            if fds[1].revents == 0 {
                continue;
            }
            if let Err(error) = whole_message(fd) {
                VhostCounters::bump(&counters.bad_messages);
                log::warn!("{name}: {error}; closing the frontend");
                break true;
            }
            match early_enable(fd, &handler) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(error) => {
                    log::info!("{name}: frontend disconnected ({error})");
                    break true;
                }
            }
            match requests.handle_request() {
                Ok(()) => {}
                // QEMU disables rings (SET_VRING_ENABLE) while it sets the
                // device up, before SET_FEATURES: the crate refuses the
                // message, read whole, for want of PROTOCOL_FEATURES. No
                // reply is due and no ring runs yet, so nothing is lost.
                Err(VhostError::InactiveFeature(feature)) => {
                    log::debug!("{name}: a message ignored: it needs {feature:?} acked first");
                }
                Err(VhostError::Disconnected | VhostError::PartialMessage) => {
                    log::info!("{name}: frontend disconnected");
                    break true;
                }
                Err(VhostError::SocketBroken(e)) if e.kind() == io::ErrorKind::ConnectionReset => {
                    log::info!("{name}: frontend disconnected");
                    break true;
                }
                Err(error) => {
                    VhostCounters::bump(&counters.bad_messages);
                    log::warn!("{name}: frontend broke the protocol ({error}); closing it");
                    break true;
                }
            }
        };
        if let Ok(mut current) = self.current.lock() {
            *current = None;
        }
        if let Ok(mut handler) = handler.lock() {
            handler.reset();
        }
        VhostCounters::bump(&counters.disconnects);
        keep_going
    }
}

/// A message's header: request, flags, body size.
const HEADER_LEN: usize = 12;
/// The largest body the `vhost` crate takes (its MAX_MSG_SIZE).
const MAX_BODY: usize = 0x1000;

/// How often a message that has begun is looked at again (it polls
/// readable all the while, so poll(2) cannot wait for the rest).
const PEEK_INTERVAL: Duration = Duration::from_millis(5);

/// Waits (at most [`MESSAGE_TIMEOUT`]) until a whole message is in the
/// socket and the reply can be sent without waiting. The `vhost` crate
/// reads a message, and writes its reply, until done, retrying each
/// timed-out read or write: a frontend that sent half a message, or reads
/// no replies, would hold this thread for ever.
fn whole_message(fd: RawFd) -> io::Result<()> {
    use nix::sys::socket::{recv, MsgFlags};
    let deadline = std::time::Instant::now() + MESSAGE_TIMEOUT;
    let mut message = vec![0u8; HEADER_LEN + MAX_BODY];
    let mut want = HEADER_LEN;
    let mut sized = false;
    let timed_out = |what: &str| io::Error::new(io::ErrorKind::TimedOut, what.to_owned());
    loop {
        let peeked = match recv(
            fd,
            &mut message[..want],
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
        ) {
            // The frontend went: the crate reads what there is and ends.
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => n,
        };
        if peeked >= HEADER_LEN && !sized {
            let size = u32::from_le_bytes(message[8..12].try_into().expect("4 bytes"));
            // A body the crate refuses anyway is its to refuse.
            want = HEADER_LEN + (size as usize).min(MAX_BODY);
            sized = true;
            continue;
        }
        if peeked >= want {
            break;
        }
        if std::time::Instant::now() >= deadline {
            return Err(timed_out("a message left half-sent for a second"));
        }
        std::thread::sleep(PEEK_INTERVAL);
    }
    // Room for the reply: a unix socket polls writable while at least a
    // quarter of its send buffer is free, far more than any reply.
    let mut fds = [libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    }];
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    match wake::poll(&mut fds, left.as_millis() as i32)? {
        0 => Err(timed_out("replies left unread for a second")),
        _ => Ok(()),
    }
}

/// SET_VRING_ENABLE's request code, and the header's flags.
const SET_VRING_ENABLE: u32 = 18;
const FLAG_VERSION: u32 = 0x1;
const FLAG_REPLY: u32 = 0x4;
const FLAG_NEED_REPLY: u32 = 0x8;

/// Takes a SET_VRING_ENABLE that comes before SET_FEATURES, which the
/// `vhost` crate refuses (it wants PROTOCOL_FEATURES acked first) but
/// QEMU sends: its virtio-net enables the rings when the guest's driver
/// sets its features, before the device starts and the features reach the
/// backend. The enable is recorded, and the ring runs once it is set up.
/// Returns whether the waiting message was such a one (and is consumed).
fn early_enable(fd: RawFd, handler: &Mutex<Handler>) -> io::Result<bool> {
    use nix::sys::socket::{recv, send, MsgFlags};
    let Ok(mut handler) = handler.lock() else {
        return Ok(false);
    };
    if handler.protocol_features_acked() {
        return Ok(false);
    }
    // Header (request, flags, size) and the body (index, num).
    let mut message = [0u8; 20];
    let peeked = recv(
        fd,
        &mut message,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    )
    .unwrap_or(0);
    let word = |m: &[u8; 20], at: usize| u32::from_le_bytes(m[at..at + 4].try_into().unwrap());
    if peeked < message.len() || word(&message, 0) != SET_VRING_ENABLE || word(&message, 8) != 8 {
        return Ok(false);
    }
    let taken = recv(fd, &mut message, MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)?;
    if taken != message.len() {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    let (flags, index, num) = (word(&message, 4), word(&message, 12), word(&message, 16));
    let result = match num {
        0 | 1 => handler.enable_early(index, num == 1),
        _ => false,
    };
    if !result {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("SET_VRING_ENABLE of vring {index} with {num}"),
        ));
    }
    if flags & FLAG_NEED_REPLY != 0 && handler.reply_ack() {
        let mut reply = [0u8; 20];
        reply[..4].copy_from_slice(&SET_VRING_ENABLE.to_le_bytes());
        reply[4..8].copy_from_slice(&(FLAG_VERSION | FLAG_REPLY).to_le_bytes());
        reply[8..12].copy_from_slice(&8u32.to_le_bytes());
        send(fd, &reply, MsgFlags::empty()).map_err(io::Error::from)?;
    }
    Ok(true)
}
