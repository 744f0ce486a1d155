//! The control socket: framing only. A thread of its own accepts clients,
//! reads their request lines, hands each request to the bridge's owner
//! (`api::Caller`) and writes the typed reply back as a line. It never
//! blocks on a client: every socket is non-blocking and served from one
//! `poll(2)` loop; a request line is bounded; a client whose replies back
//! up is not read until it takes them; a silent client is dropped after a
//! while, and when every slot is taken the longest silent one makes room,
//! so that idle connections cannot lock others out; running out of file
//! descriptors backs off instead of spinning.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bridge::Stopper;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::unistd::Gid;

use crate::api::{Board, Caller, CALL_TIMEOUT};
use crate::api_error::ApiError;
use crate::capture::CaptureGrant;
use crate::ports::{PortKind, PortSpec};
use crate::protocol::{self, ReplyLine, Request, Response};
use crate::queue::Reply;

/// The most clients served at once; one more is told so and closed.
pub const MAX_CLIENTS: usize = 64;
/// Of those, the most that members of the read-only group take (with
/// `--ctl-ro-group`): the other 16 are kept for root and `--ctl-group`.
pub const MAX_READ_ONLY_CLIENTS: usize = 48;
/// Replies waiting to be written to one client, beyond which its further
/// requests wait unread (the client pipelines without reading).
pub const MAX_PENDING_REPLIES: usize = 256 * 1024;
/// A client that sends nothing for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request line must be whole this long after its first byte came, or
/// the client is closed (one that trickles a byte at a time).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Replies must be taken this long after they were ready, or the client
/// is closed (one that does not read).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a read may wait for the owner's own answer before the reads
/// that follow are answered from its latest publication instead.
const READ_PATIENCE: Duration = Duration::from_millis(100);
/// How often the loop looks at the stop flag.
const TICK_MS: u16 = 200;
/// How long the listener rests after `accept` failed for want of file
/// descriptors or memory.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(500);

/// Who may do what on the control socket.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Members may send every request (`--ctl-group`).
    pub full: Option<Gid>,
    /// Members may send read-only requests: show, stats (`--ctl-ro-group`).
    pub read_only: Option<Gid>,
    /// Where a client other than root may put a vhost-user port's socket
    /// (`--vhost-dir`): it binds and removes files there.
    pub vhost_dir: PathBuf,
}

/// What one client may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// Root: everything.
    Full,
    /// Another user with every request: vhost-user sockets only in the
    /// vhost socket directory.
    Group,
    ReadOnly,
}

impl Grant {
    /// The kind of client for its places: one that may change the bridge,
    /// or one that only reads.
    fn kind(self) -> bool {
        self == Grant::ReadOnly
    }
}

impl Access {
    /// Looks up `--ctl-group` and `--ctl-ro-group`; `vhost_dir` is
    /// `--vhost-dir`.
    pub fn new(
        full: Option<&str>,
        read_only: Option<&str>,
        vhost_dir: &Path,
    ) -> Result<Access, String> {
        let gid = |name: &str| -> Result<Gid, String> {
            Ok(nix::unistd::Group::from_name(name)
                .map_err(|e| format!("cannot look up group {name}: {e}"))?
                .ok_or_else(|| format!("no group named {name}"))?
                .gid)
        };
        Ok(Access {
            full: full.map(gid).transpose()?,
            read_only: read_only.map(gid).transpose()?,
            vhost_dir: vhost_dir.to_owned(),
        })
    }

    /// Makes the vhost socket directory (mode 0755: the programs that
    /// connect to the sockets there may run as other users), when a group
    /// may control the bridge and it is missing.
    pub fn make_vhost_dir(&self) -> Result<(), String> {
        if self.full.is_none() || self.vhost_dir.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.vhost_dir)
            .and_then(|_| {
                std::fs::set_permissions(&self.vhost_dir, std::fs::Permissions::from_mode(0o755))
            })
            .map_err(|e| format!("cannot make {}: {e}", self.vhost_dir.display()))
    }

    /// Whether a client with `grant` may add `port`: a client other than
    /// root only puts a vhost-user socket directly in the vhost socket
    /// directory, which it names without `..`.
    fn may_add(&self, grant: Grant, port: &PortSpec) -> Result<(), String> {
        if !matches!(port.kind, PortKind::Vhost(_)) || grant != Grant::Group {
            return Ok(());
        }
        // A vhost-user port's name is its socket's path.
        let path = Path::new(&port.name);
        let plain = path.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        });
        if plain && path.is_absolute() && path.parent() == Some(self.vhost_dir.as_path()) {
            return Ok(());
        }
        Err(format!(
            "permission denied: a control group member puts vhost-user sockets in {} only \
             (--vhost-dir)",
            self.vhost_dir.display()
        ))
    }

    /// What the peer of `stream` may do: root and members of the full
    /// group everything, members of the read-only group reads; `None`
    /// refuses it.
    fn grant(&self, stream: &UnixStream) -> Option<Grant> {
        use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
        let creds = getsockopt(stream, PeerCredentials).ok()?;
        if creds.uid() == 0 {
            return Some(Grant::Full);
        }
        let groups = peer_groups(creds.pid(), creds.gid());
        let member = |gid: Option<Gid>| gid.is_some_and(|gid| groups.contains(&gid.as_raw()));
        if member(self.full) {
            Some(Grant::Group)
        } else if member(self.read_only) {
            Some(Grant::ReadOnly)
        } else if self.read_only.is_none() {
            // Without a read-only group the socket's mode decides, as the
            // file system already did when it let the peer connect.
            Some(Grant::Group)
        } else {
            None
        }
    }
}

/// The peer's primary and supplementary groups (from /proc; its primary
/// group alone where that cannot be read).
fn peer_groups(pid: i32, gid: u32) -> Vec<u32> {
    let mut groups = vec![gid];
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        if let Some(line) = status.lines().find(|l| l.starts_with("Groups:")) {
            groups.extend(
                line["Groups:".len()..]
                    .split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok()),
            );
        }
    }
    groups
}

/// The listening socket, removed when dropped.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path` (mode 0660, in a directory of mode 0750 made if
    /// missing, owned by the full group when given; with a read-only group,
    /// modes 0666 and 0755 and each peer checked by its credentials). A
    /// live socket there (another bridge of that name) is an error; a stale
    /// one is replaced; anything else there is refused, never removed.
    pub fn bind(path: &Path, access: &Access) -> Result<ControlSocket, String> {
        let shown = path.display();
        let open = access.read_only.is_some();
        let group = access.full;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
                let mode = if open { 0o755 } else { 0o750 };
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))?;
                if let Some(gid) = group.filter(|_| !open) {
                    nix::unistd::chown(dir, None, Some(gid))
                        .map_err(|e| format!("cannot give {} to the group: {e}", dir.display()))?;
                }
            }
        }
        Self::check_free(path)?;
        if std::fs::symlink_metadata(path).is_ok() {
            // Nothing listens: left by a bridge that did not exit cleanly.
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove the stale socket {shown}: {e}"))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| format!("cannot bind {shown}: {e}"))?;
        let socket = ControlSocket {
            listener,
            path: path.to_owned(),
        };
        let mode = if open { 0o666 } else { 0o660 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot set the mode of {shown}: {e}"))?;
        if let Some(gid) = group {
            nix::unistd::chown(path, None, Some(gid))
                .map_err(|e| format!("cannot give {shown} to the group: {e}"))?;
        }
        socket
            .listener
            .set_nonblocking(true)
            .map_err(|e| format!("{shown}: {e}"))?;
        Ok(socket)
    }

    /// An error if a bridge already listens at `path`, or if something
    /// other than a socket is there; asked before any port is opened, so
    /// that a second bridge of one name touches none.
    pub fn check_free(path: &Path) -> Result<(), String> {
        let shown = path.display();
        match std::fs::symlink_metadata(path) {
            Err(_) => return Ok(()),
            Ok(meta) if !meta.file_type().is_socket() => {
                return Err(format!(
                    "{shown} exists and is not a socket; refusing to replace it (remove it or choose another --ctl)"
                ))
            }
            Ok(_) => {}
        }
        match UnixStream::connect(path) {
            Ok(_) => Err(format!(
                "a bridge is already running with control socket {shown} (choose another --name)"
            )),
            Err(_) => Ok(()),
        }
    }

    /// Where it listens.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A request handed to the owner, not answered yet.
struct Waiting {
    /// Matches the answer to it.
    id: u64,
    /// When it was sent.
    since: Instant,
    /// Whether it changes the bridge (may take the owner seconds).
    changes: bool,
}

/// One client: what it sent that is not answered yet, and what is still to
/// be written to it.
struct Client {
    stream: UnixStream,
    grant: Grant,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    last_seen: Instant,
    /// When the request line in `input` began (its first byte came).
    line_started: Option<Instant>,
    /// Since when replies have waited to be written.
    reply_since: Option<Instant>,
    /// Its request the owner has not answered yet: it is sent nothing
    /// else meanwhile, so that its replies keep their order.
    waiting: Option<Waiting>,
    /// Close once the output is written (a line too long, say).
    closing: bool,
    /// A capture it was granted: the client leaves this loop for a thread
    /// that streams to it.
    capture: Option<CaptureGrant>,
}

impl Client {
    fn new(stream: UnixStream, grant: Grant, now: Instant) -> Client {
        Client {
            stream,
            grant,
            input: Vec::new(),
            output: Vec::new(),
            written: 0,
            last_seen: now,
            line_started: None,
            reply_since: None,
            waiting: None,
            closing: false,
            capture: None,
        }
    }

    fn reply(&mut self, reply: &ReplyLine) {
        // Serialising our own types cannot fail.
        let line = serde_json::to_string(reply).expect("a reply serialises");
        if self.output.is_empty() {
            self.reply_since = Some(Instant::now());
        }
        self.output.extend_from_slice(line.as_bytes());
        self.output.push(b'\n');
    }

    fn wants_to_write(&self) -> bool {
        self.written < self.output.len()
    }

    /// Whether it has a whole request line not answered yet.
    fn has_line(&self) -> bool {
        self.input.contains(&b'\n')
    }

    /// Whether to read more from it: not while replies back up, nor while
    /// a request it sent waits to be answered.
    fn wants_to_read(&self) -> bool {
        !self.closing && !self.wants_to_write() && !self.has_line()
    }

    /// Whether it is silent: nothing asked, nothing to take.
    fn silent(&self) -> bool {
        !self.wants_to_write() && !self.has_line() && self.waiting.is_none()
    }

    /// Why it is to be closed now, if it is: it sent nothing for
    /// [`IDLE_TIMEOUT`], took longer than [`REQUEST_TIMEOUT`] over a
    /// request line, or left a reply unread for [`REPLY_TIMEOUT`].
    fn expired(&self, now: Instant) -> Option<&'static str> {
        let over = |since: Option<Instant>, limit: Duration| {
            since.is_some_and(|since| now.duration_since(since) > limit)
        };
        if over(self.reply_since, REPLY_TIMEOUT) {
            Some("reply not taken in time")
        } else if !self.has_line() && over(self.line_started, REQUEST_TIMEOUT) {
            Some("request line not finished in time")
        } else if self.waiting.is_none() && over(Some(self.last_seen), IDLE_TIMEOUT) {
            Some("idle")
        } else {
            None
        }
    }
}

/// What the owner answered to request `id`.
enum Answer {
    Call(u64, Result<Response, ApiError>),
    Capture(u64, Result<CaptureGrant, ApiError>),
}

/// Where the owner's answers come back to the control thread: a channel,
/// and a socket pair whose readable end wakes the thread's `poll`.
struct Answers {
    sender: mpsc::Sender<Answer>,
    receiver: mpsc::Receiver<Answer>,
    wake: Arc<UnixStream>,
    woken: UnixStream,
    next_id: u64,
}

impl Answers {
    fn new() -> io::Result<Answers> {
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let (sender, receiver) = mpsc::channel();
        Ok(Answers {
            sender,
            receiver,
            wake: Arc::new(wake),
            woken,
            next_id: 0,
        })
    }

    /// A new request id, and what hands the owner's answer back.
    fn reply<T: Send + 'static>(
        &mut self,
        wrap: fn(u64, Result<T, ApiError>) -> Answer,
    ) -> (u64, Reply<T>) {
        self.next_id += 1;
        let id = self.next_id;
        let sender = self.sender.clone();
        let wake = Arc::clone(&self.wake);
        let reply = Box::new(move |result| {
            // The control thread may be gone (the bridge stops): fine.
            let _ = sender.send(wrap(id, result));
            // A full socket means a wake-up is pending already.
            let _ = (&*wake).write(&[1]);
        });
        (id, reply)
    }

    /// Empties the wake-up socket.
    fn drain_wake(&self) {
        let mut bytes = [0u8; 256];
        while matches!((&self.woken).read(&mut bytes), Ok(n) if n > 0) {}
    }
}

/// How many clients of each kind are served at once: with a read-only
/// group, [`MAX_READ_ONLY_CLIENTS`] places are for its members and
/// [`MAX_CLIENTS`] less those for everyone else, so readers cannot take the
/// places of those who may change the bridge (nor these the readers');
/// without one, every client may change the bridge and all places are
/// theirs.
fn places(access: &Access, grant: Grant) -> usize {
    match (access.read_only.is_some(), grant) {
        (false, _) => MAX_CLIENTS,
        (true, Grant::ReadOnly) => MAX_READ_ONLY_CLIENTS,
        (true, Grant::Full | Grant::Group) => MAX_CLIENTS - MAX_READ_ONLY_CLIENTS,
    }
}

/// Serves the control socket until `stopper` says stop.
pub fn serve(
    socket: ControlSocket,
    access: Access,
    caller: Caller,
    board: Arc<Board>,
    stopper: Arc<Stopper>,
) {
    let mut answers = match Answers::new() {
        Ok(answers) => answers,
        Err(error) => {
            log::error!("control socket: cannot make its wake-up socket: {error}; not serving");
            return;
        }
    };
    let mut clients: Vec<Client> = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    let mut listener_rests_until: Option<Instant> = None;
    while !stopper.is_stopped() {
        let now = Instant::now();
        let listening = listener_rests_until.is_none_or(|until| now >= until);
        let (listener_ready, ready) = {
            let mut fds = Vec::with_capacity(clients.len() + 2);
            let listen_events = if listening {
                PollFlags::POLLIN
            } else {
                PollFlags::empty()
            };
            fds.push(PollFd::new(socket.listener.as_fd(), listen_events));
            fds.push(PollFd::new(answers.woken.as_fd(), PollFlags::POLLIN));
            for client in &clients {
                let mut events = PollFlags::empty();
                if client.wants_to_write() {
                    events |= PollFlags::POLLOUT;
                }
                if client.wants_to_read() {
                    events |= PollFlags::POLLIN;
                }
                fds.push(PollFd::new(client.stream.as_fd(), events));
            }
            if let Err(error) = nix::poll::poll(&mut fds, PollTimeout::from(TICK_MS)) {
                if error != nix::errno::Errno::EINTR {
                    log::warn!("control socket: poll: {error}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            let revents = |fd: &PollFd| fd.revents().unwrap_or(PollFlags::empty());
            let ready: Vec<PollFlags> = fds[2..].iter().map(revents).collect();
            (!revents(&fds[0]).is_empty(), ready)
        };
        answers.drain_wake();
        let now = Instant::now();
        while let Ok(answer) = answers.receiver.try_recv() {
            take_answer(&mut clients, answer, now);
        }
        for (client, events) in clients.iter_mut().zip(ready) {
            if !events.is_empty() {
                client.last_seen = now;
            }
            if events.contains(PollFlags::POLLOUT) {
                write_some(client);
            }
            if events.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
                && client.wants_to_read()
            {
                read_some(client, &mut buffer, now);
            }
        }
        // Reads go to the owner, for figures of this moment, unless it is
        // busy with something slow (a change, a reload, or anything it has
        // not answered within READ_PATIENCE): then they are answered from
        // its latest publication, and never wait behind it.
        let owner_slow = board.busy()
            || clients.iter().any(|c| {
                c.waiting
                    .as_ref()
                    .is_some_and(|w| w.changes || now.duration_since(w.since) > READ_PATIENCE)
            });
        for client in &mut clients {
            answer_lines(client, &caller, &access, &board, &mut answers, owner_slow);
        }
        for index in (0..clients.len()).rev() {
            if clients[index].capture.is_some() {
                let mut client = clients.swap_remove(index);
                let grant = client.capture.take().expect("checked");
                let stopper = Arc::clone(&stopper);
                let spawned = std::thread::Builder::new()
                    .name("capture".to_owned())
                    .spawn(move || crate::capture::stream(client.stream, grant, stopper));
                if let Err(error) = spawned {
                    log::warn!("cannot start a capture thread: {error}");
                }
            }
        }
        clients.retain(|client| {
            let done = client.closing && !client.wants_to_write() && !client.has_line();
            if let Some(why) = client.expired(now) {
                log::debug!("control socket: closing a client: {why}");
                return false;
            }
            !done || client.waiting.is_some()
        });
        if listening && listener_ready {
            listener_rests_until = accept_all(&socket, &access, &mut clients, now);
        } else if !listening {
            listener_rests_until = listener_rests_until.filter(|until| now < *until);
        }
    }
}

/// Hands the owner's answer to the client that waits for it, if it is
/// still there.
fn take_answer(clients: &mut [Client], answer: Answer, now: Instant) {
    let id = match &answer {
        Answer::Call(id, _) | Answer::Capture(id, _) => *id,
    };
    let Some(client) = clients
        .iter_mut()
        .find(|c| c.waiting.as_ref().is_some_and(|w| w.id == id))
    else {
        return;
    };
    client.waiting = None;
    client.last_seen = now;
    match answer {
        Answer::Call(_, result) => client.reply(&ReplyLine::of(result)),
        Answer::Capture(_, Ok(grant)) => {
            // The stream that follows belongs to the capture thread.
            client.capture = Some(grant);
            client.input.clear();
        }
        Answer::Capture(_, Err(error)) => client.reply(&ReplyLine::error(error.to_string())),
    }
    write_some(client);
}

/// Accepts every waiting client; returns until when the listener rests,
/// when accepting failed for want of descriptors or memory.
fn accept_all(
    socket: &ControlSocket,
    access: &Access,
    clients: &mut Vec<Client>,
    now: Instant,
) -> Option<Instant> {
    loop {
        match socket.listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let grant = match access.grant(&stream) {
                    Some(granted) => granted,
                    None => {
                        refuse(
                            stream,
                            "permission denied: not in the bridge's control groups",
                        );
                        continue;
                    }
                };
                let places = places(access, grant);
                let taken = clients
                    .iter()
                    .filter(|c| c.grant.kind() == grant.kind())
                    .count();
                if taken >= places && !evict_idlest(clients, grant, now) {
                    refuse(
                        stream,
                        &format!("too many clients ({places} at once, all busy); try again"),
                    );
                    continue;
                }
                clients.push(Client::new(stream, grant, now));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                ) =>
            {
                // The client waits in the backlog; taking it now would fail
                // again at once, so rest rather than spin.
                log::warn!(
                    "control socket: accept: {e}; not accepting for {} ms",
                    ACCEPT_BACKOFF.as_millis()
                );
                return Some(now + ACCEPT_BACKOFF);
            }
            Err(e) => {
                log::warn!("control socket: accept: {e}");
                return None;
            }
        }
    }
}

/// Closes the client of kind `grant` that has been silent longest, if one
/// is silent at all (no request waiting, no reply being written), to make
/// room for a new one of that kind; false if every such client is busy.
fn evict_idlest(clients: &mut Vec<Client>, grant: Grant, now: Instant) -> bool {
    let idlest = clients
        .iter()
        .enumerate()
        .filter(|(_, c)| c.grant.kind() == grant.kind() && c.silent() && c.last_seen < now)
        .min_by_key(|(_, c)| c.last_seen)
        .map(|(index, _)| index);
    match idlest {
        Some(index) => {
            let client = clients.swap_remove(index);
            refuse(
                client.stream,
                "closed: every control slot was taken and this client was the longest silent",
            );
            true
        }
        None => false,
    }
}

/// Tells a client it is not served, and closes it.
fn refuse(mut stream: UnixStream, why: &str) {
    let line = serde_json::to_string(&ReplyLine::error(why)).expect("a reply serialises");
    // Best effort: the client is closed either way.
    let _ = stream.write(format!("{line}\n").as_bytes());
}

fn write_some(client: &mut Client) {
    while client.wants_to_write() {
        match client.stream.write(&client.output[client.written..]) {
            Ok(0) => {
                client.closing = true;
                client.output.clear();
                client.written = 0;
                client.input.clear();
                client.reply_since = None;
                return;
            }
            Ok(n) => client.written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // The client went away mid-reply.
            Err(_) => {
                client.closing = true;
                client.output.clear();
                client.written = 0;
                client.input.clear();
                client.reply_since = None;
                return;
            }
        }
    }
    client.output.clear();
    client.written = 0;
    client.reply_since = None;
}

fn read_some(client: &mut Client, buffer: &mut [u8], now: Instant) {
    loop {
        match client.stream.read(buffer) {
            Ok(0) => {
                // The client closed its side: answer what it asked, then close.
                client.closing = true;
                return;
            }
            Ok(n) => {
                if client.input.is_empty() {
                    client.line_started = Some(now);
                }
                client.input.extend_from_slice(&buffer[..n]);
                if client.has_line() || client.input.len() > protocol::MAX_LINE {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                client.closing = true;
                client.input.clear();
                return;
            }
        }
    }
}

/// A read answered from the owner's latest publication, off the owner.
fn from_board(board: &Board, request: &Request) -> Option<Result<Response, ApiError>> {
    let published = board.latest()?;
    Some(match request {
        Request::Stats => Ok(Response::Stats(Box::new(published.stats.clone()))),
        Request::PortShow => Ok(Response::Ports(published.ports.clone())),
        Request::MdbShow => published.mdb.clone().map(Response::Mdb),
        Request::FdbShow { port, vlan } => published
            .fdb
            .show(port.as_deref(), *vlan)
            .map(Response::Fdb),
        _ => return None,
    })
}

/// Answers the client's whole request lines while its replies fit in
/// [`MAX_PENDING_REPLIES`], one at a time: a request for the owner leaves
/// the rest waiting until it is answered; the rest wait, unread beyond,
/// until the client takes what was written.
fn answer_lines(
    client: &mut Client,
    caller: &Caller,
    access: &Access,
    board: &Board,
    answers: &mut Answers,
    owner_slow: bool,
) {
    while client.waiting.is_none() && client.output.len() < MAX_PENDING_REPLIES {
        let Some(end) = client.input.iter().position(|&b| b == b'\n') else {
            break;
        };
        if end > protocol::MAX_LINE {
            too_long(client);
            return;
        }
        let line: Vec<u8> = client.input.drain(..=end).collect();
        client.line_started = (!client.input.is_empty()).then(Instant::now);
        let line = &line[..line.len() - 1];
        let request = match parse(line, client.grant, access) {
            Err(reply) => {
                client.reply(&reply);
                continue;
            }
            Ok(request) => request,
        };
        if owner_slow && !request.changes() {
            if let Some(answer) = from_board(board, &request) {
                client.reply(&ReplyLine::of(answer));
                continue;
            }
        }
        let changes = request.changes();
        let sent = match request {
            request @ Request::Capture { .. } => {
                let (id, reply) = answers.reply(Answer::Capture);
                caller.capture_then(request, reply).map(|()| id)
            }
            request => {
                let (id, reply) = answers.reply(Answer::Call);
                caller.call_then(request, reply).map(|()| id)
            }
        };
        match sent {
            Ok(id) => {
                client.waiting = Some(Waiting {
                    id,
                    since: Instant::now(),
                    changes,
                });
            }
            Err(error) => client.reply(&ReplyLine::error(error.to_string())),
        }
    }
    if !client.has_line() && client.input.len() > protocol::MAX_LINE {
        too_long(client);
    }
    if let Some(waiting) = &client.waiting {
        if waiting.since.elapsed() > CALL_TIMEOUT {
            // Its answer, should it come, finds nobody waiting.
            client.waiting = None;
            client.reply(&ReplyLine::error("the bridge did not answer in time"));
        }
    }
    if client.wants_to_write() {
        write_some(client);
    }
}

fn too_long(client: &mut Client) {
    client.input.clear();
    client.reply(&ReplyLine::error(format!(
        "request line over {} bytes",
        protocol::MAX_LINE
    )));
    client.closing = true;
    write_some(client);
}

/// A request line, checked: its version, and what the client may ask.
fn parse(line: &[u8], grant: Grant, access: &Access) -> Result<Request, ReplyLine> {
    let request = protocol::read_request(line)?;
    if grant == Grant::ReadOnly && request.changes() {
        return Err(ReplyLine::error(
            "permission denied: the read-only control group may show and read stats only",
        ));
    }
    if let Request::PortAdd { port, .. } = &request {
        access.may_add(grant, port).map_err(ReplyLine::error)?;
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_members_put_vhost_sockets_in_the_vhost_dir_only() {
        let access = Access {
            vhost_dir: PathBuf::from("/run/mpbridge/vhost"),
            ..Access::default()
        };
        let spec = |text: &str| PortSpec::parse(text).unwrap();
        let ok = |grant, port: &str| access.may_add(grant, &spec(port)).is_ok();
        assert!(ok(Grant::Group, "vhost:/run/mpbridge/vhost/vm0.sock"));
        assert!(ok(
            Grant::Group,
            "vhost:/run/mpbridge/vhost/vm0.sock,client"
        ));
        assert!(ok(Grant::Group, "tap:vm0"));
        // The same file.
        assert!(ok(Grant::Group, "vhost:/run/mpbridge/vhost/./vm0.sock"));
        assert!(ok(Grant::Full, "vhost:/etc/passwd"));
        for bad in [
            "vhost:/etc/passwd",
            "vhost:/run/mpbridge/vhost/../x.sock",
            "vhost:/run/mpbridge/vhost/sub/x.sock",
            "vhost:run/mpbridge/vhost/x.sock",
            "vhost:/run/mpbridge/vhost",
        ] {
            let error = access.may_add(Grant::Group, &spec(bad)).unwrap_err();
            assert!(error.contains("--vhost-dir"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_bad_fdb_value_is_a_bad_request_naming_the_rule() {
        let line = br#"{"version":1,"command":"fdb-add","mac":"02:00:00:00:00:01","port":"raw:p0","vlan":5000}"#;
        let access = Access::default();
        let reply = parse(line, Grant::Full, &access).unwrap_err();
        let error = reply.error.unwrap();
        assert!(
            error.starts_with("bad request: invalid vlan '5000' (0 to 4094)"),
            "{error}"
        );
        let line = br#"{"version":1,"command":"fdb-del","mac":"01:00:5e:00:00:01"}"#;
        let error = parse(line, Grant::ReadOnly, &access)
            .unwrap_err()
            .error
            .unwrap();
        assert!(
            error.starts_with(
                "bad request: '01:00:5e:00:00:01' is not a station's (unicast) address"
            ),
            "{error}"
        );
    }
}
