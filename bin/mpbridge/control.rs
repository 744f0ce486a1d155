//! The control socket: a thread of its own that accepts clients, reads
//! their request lines, and answers from the bridge's shared state (the MAC
//! table, the workers' counters). It never blocks on a client: every
//! socket is non-blocking and served from one `poll(2)` loop, a request
//! line is bounded, a silent client is dropped after a while, and the
//! forwarding path never waits for it (the table is read in read sections,
//! as a worker reads it; `fdb add` and friends take short write sections).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bridge::counters::{self, PortCounters, WorkerCounters};
use bridge::fdb::{FdbKey, Table};
use bridge::monitor::LinkMonitor;
use bridge::port::{netdev, LinkPort};
use bridge::wire::{MacAddr, MacKind};
use bridge::worker::{PortControl, MAX_PORTS};
use bridge::{DropReason, PortId, Stopper};
use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::ports::{self, Kind, PortSpec};
use crate::protocol::{self, FdbEntry, ReplyLine, Request, RequestLine, VERSION};

/// The most clients served at once; one more is told so and closed.
const MAX_CLIENTS: usize = 64;
/// A client that sends nothing for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the loop looks at the stop flag.
const TICK_MS: u16 = 200;

/// What the control thread may read and change of a running bridge.
pub struct Bridge {
    /// The bridge's name.
    pub name: String,
    /// The ports, by port id; `None` where no port has the id (removed).
    pub ports: Mutex<Vec<Option<PortSpec>>>,
    /// Each worker's handle for adding and removing its queues.
    pub controls: Mutex<Vec<PortControl<LinkPort>>>,
    /// The workers running now.
    pub generation: Mutex<crate::workers::Generation>,
    /// The workers' settings, for a new generation.
    pub worker_config: bridge::WorkerConfig,
    /// Each worker's CPUs, for a new generation.
    pub placement: Vec<Option<bridge::port::placement::CpuSet>>,
    /// The link monitor, which the main thread ticks once a second.
    pub monitor: Arc<Mutex<LinkMonitor>>,
    /// A relay: exactly two ports, none added or removed.
    pub relay: bool,
    /// Whether capabilities were kept (`--keep-caps`); otherwise the
    /// control thread raises the two that opening a port needs, for as long
    /// as it takes.
    pub keep_caps: bool,
    /// The MAC table.
    /// The MAC table; replaced by one of another strategy by `lock set`.
    pub fdb: std::sync::RwLock<Arc<dyn Table>>,
    /// Each worker's port counters.
    pub counters: Vec<Arc<[PortCounters]>>,
    /// Each worker's own counters.
    pub workers: Vec<Arc<WorkerCounters>>,
    /// When the bridge started.
    pub started: Instant,
    /// Whether lock statistics are counted.
    pub lockstat: bool,
    /// Each worker's capture taps.
    pub captures: Vec<Arc<bridge::capture::CaptureHub>>,
    /// The configuration file and what of it is applied, with `--config`.
    pub config: Mutex<Option<(std::path::PathBuf, crate::config::Config)>>,
    /// What a VXLAN port's remote table may hold.
    pub port_settings: ports::PortSettings,
    /// The VXLAN ports' remote tables and counters, by port label.
    pub vxlans: Mutex<BTreeMap<String, Arc<bridge::port::vxlan::VxlanShared>>>,
}

/// The listening socket, removed when dropped.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path` (mode 0660, in a directory of mode 0750 made if
    /// missing), owned by `group` when given. A live socket there (another
    /// bridge of that name) is an error; a stale one is replaced.
    pub fn bind(path: &Path, group: Option<&str>) -> Result<ControlSocket, String> {
        let shown = path.display();
        let group = match group {
            Some(name) => Some(
                nix::unistd::Group::from_name(name)
                    .map_err(|e| format!("cannot look up group {name}: {e}"))?
                    .ok_or_else(|| format!("no group named {name}"))?
                    .gid,
            ),
            None => None,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
                    .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))?;
                if let Some(gid) = group {
                    nix::unistd::chown(dir, None, Some(gid))
                        .map_err(|e| format!("cannot give {} to the group: {e}", dir.display()))?;
                }
            }
        }
        if path.exists() {
            Self::check_free(path)?;
            // Nothing listens: left by a bridge that did not exit cleanly.
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove the stale socket {shown}: {e}"))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| format!("cannot bind {shown}: {e}"))?;
        let socket = ControlSocket {
            listener,
            path: path.to_owned(),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
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

    /// An error if a bridge already listens at `path`; asked before any
    /// port is opened, so that a second bridge of one name touches none.
    pub fn check_free(path: &Path) -> Result<(), String> {
        match UnixStream::connect(path) {
            Ok(_) => Err(format!(
                "a bridge is already running with control socket {} (choose another --name)",
                path.display()
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

/// One client: what it sent that is not a whole line yet, and what is
/// still to be written to it.
struct Client {
    stream: UnixStream,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    last_seen: Instant,
    /// Close once the output is written (a line too long, say).
    closing: bool,
    /// A capture it asked for: the client leaves this loop for a thread
    /// that streams to it.
    capture: Option<(
        crate::capture::Request,
        Vec<Arc<bridge::capture::CaptureHub>>,
    )>,
}

impl Client {
    fn reply(&mut self, reply: &ReplyLine) {
        // Serialising our own types cannot fail.
        let line = serde_json::to_string(reply).expect("a reply serialises");
        self.output.extend_from_slice(line.as_bytes());
        self.output.push(b'\n');
    }

    fn wants_to_write(&self) -> bool {
        self.written < self.output.len()
    }
}

/// Serves the control socket until `stopper` says stop.
pub fn serve(socket: ControlSocket, bridge: Arc<Bridge>, stopper: Arc<Stopper>) {
    let mut clients: Vec<Client> = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    while !stopper.is_stopped() {
        let (listener_ready, ready) = {
            let mut fds = Vec::with_capacity(clients.len() + 1);
            fds.push(PollFd::new(socket.listener.as_fd(), PollFlags::POLLIN));
            for client in &clients {
                let events = if client.wants_to_write() {
                    PollFlags::POLLOUT
                } else {
                    PollFlags::POLLIN
                };
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
            let ready: Vec<PollFlags> = fds[1..].iter().map(revents).collect();
            (!revents(&fds[0]).is_empty(), ready)
        };
        let now = Instant::now();
        for (client, events) in clients.iter_mut().zip(ready) {
            if events.is_empty() {
                continue;
            }
            client.last_seen = now;
            if events.contains(PollFlags::POLLOUT) || client.wants_to_write() {
                write_some(client);
            } else {
                read_some(client, &mut buffer, &bridge);
            }
        }
        for index in (0..clients.len()).rev() {
            if clients[index].capture.is_some() {
                let mut client = clients.swap_remove(index);
                let (request, hubs) = client.capture.take().expect("checked");
                let stopper = Arc::clone(&stopper);
                let spawned = std::thread::Builder::new()
                    .name("capture".to_owned())
                    .spawn(move || crate::capture::stream(client.stream, hubs, request, stopper));
                if let Err(error) = spawned {
                    log::warn!("cannot start a capture thread: {error}");
                }
            }
        }
        clients.retain(|client| {
            let done = client.closing && !client.wants_to_write();
            let idle = now.duration_since(client.last_seen) > IDLE_TIMEOUT;
            !(done || idle)
        });
        if listener_ready {
            accept_all(&socket, &mut clients, now);
        }
    }
}

fn accept_all(socket: &ControlSocket, clients: &mut Vec<Client>, now: Instant) {
    loop {
        match socket.listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let mut client = Client {
                    stream,
                    input: Vec::new(),
                    output: Vec::new(),
                    written: 0,
                    last_seen: now,
                    closing: false,
                    capture: None,
                };
                if clients.len() >= MAX_CLIENTS {
                    client.reply(&ReplyLine::error(format!(
                        "too many clients ({MAX_CLIENTS} at once); try again"
                    )));
                    // Best effort: the client is closed either way.
                    let _ = client.stream.write(&client.output);
                    continue;
                }
                clients.push(client);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::warn!("control socket: accept: {e}");
                return;
            }
        }
    }
}

fn write_some(client: &mut Client) {
    while client.wants_to_write() {
        match client.stream.write(&client.output[client.written..]) {
            Ok(0) => {
                client.closing = true;
                client.output.clear();
                client.written = 0;
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
                return;
            }
        }
    }
    client.output.clear();
    client.written = 0;
}

fn read_some(client: &mut Client, buffer: &mut [u8], bridge: &Bridge) {
    loop {
        match client.stream.read(buffer) {
            Ok(0) => {
                // The client closed its side: answer what it asked, then close.
                client.closing = true;
                break;
            }
            Ok(n) => {
                client.input.extend_from_slice(&buffer[..n]);
                if client.input.len() > protocol::MAX_LINE + 1 {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                client.closing = true;
                client.input.clear();
                return;
            }
        }
    }
    while let Some(end) = client.input.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = client.input.drain(..=end).collect();
        let line = &line[..line.len() - 1];
        if line.len() > protocol::MAX_LINE {
            too_long(client);
            return;
        }
        match answer(line, bridge) {
            Answer::Reply(reply) => client.reply(&reply),
            Answer::Capture(request, hubs) => {
                // The stream that follows belongs to the capture thread.
                client.capture = Some((request, hubs));
                client.input.clear();
                return;
            }
        }
    }
    if client.input.len() > protocol::MAX_LINE {
        too_long(client);
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

/// What a request line leads to.
enum Answer {
    /// One reply line.
    Reply(ReplyLine),
    /// A capture stream, from the workers' hubs given.
    Capture(
        crate::capture::Request,
        Vec<Arc<bridge::capture::CaptureHub>>,
    ),
}

/// The reply to one request line.
fn answer(line: &[u8], bridge: &Bridge) -> Answer {
    let request: RequestLine = match serde_json::from_slice(line) {
        Ok(request) => request,
        Err(error) => return Answer::Reply(ReplyLine::error(format!("bad request: {error}"))),
    };
    if request.version != VERSION {
        return Answer::Reply(ReplyLine::error(format!(
            "protocol version {} not spoken here (this daemon speaks {VERSION})",
            request.version
        )));
    }
    if let Request::Capture {
        port,
        direction,
        count,
        queue,
    } = request.request
    {
        return match capture_request(bridge, &port, &direction, count, queue) {
            Ok((request, hubs)) => Answer::Capture(request, hubs),
            Err(error) => Answer::Reply(ReplyLine::error(error)),
        };
    }
    Answer::Reply(match handle(request.request, bridge) {
        Ok(result) => ReplyLine::ok(result),
        Err(error) => ReplyLine::error(error),
    })
}

/// Checks a capture request and picks the hubs it follows.
fn capture_request(
    bridge: &Bridge,
    port: &str,
    direction: &str,
    count: Option<u64>,
    queue: Option<usize>,
) -> Result<
    (
        crate::capture::Request,
        Vec<Arc<bridge::capture::CaptureHub>>,
    ),
    String,
> {
    let id = bridge.port(port)?;
    let (inbound, outbound) = match direction {
        "in" => (true, false),
        "out" => (false, true),
        "both" => (true, true),
        other => return Err(format!("invalid direction '{other}' (in, out or both)")),
    };
    let hubs = match queue {
        None => bridge.captures.clone(),
        Some(queue) => vec![bridge.captures.get(queue).cloned().ok_or_else(|| {
            format!(
                "no queue {queue} (the bridge has {} workers, queues 0 to {})",
                bridge.captures.len(),
                bridge.captures.len() - 1
            )
        })?],
    };
    let request = crate::capture::Request {
        port: id,
        label: bridge.label(id),
        inbound,
        outbound,
        count,
    };
    Ok((request, hubs))
}

fn handle(request: Request, bridge: &Bridge) -> Result<serde_json::Value, String> {
    match request {
        Request::FdbShow { port, vlan } => {
            let port = port.map(|p| bridge.port(&p)).transpose()?;
            let entries = fdb_entries(bridge, port, vlan);
            value(&entries)
        }
        Request::FdbAdd {
            mac,
            port,
            vlan,
            dst,
        } => {
            let key = FdbKey::new(check_vlan(vlan)?, parse_station(&mac)?);
            let port = bridge.port(&port)?;
            if let Some(local) = bridge.local_port(&key) {
                return Err(format!(
                    "{mac} is the address of {}'s own interface",
                    bridge.label(local)
                ));
            }
            let label = bridge.label(port);
            let vxlan = bridge
                .vxlans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&label)
                .cloned();
            match (dst, vxlan) {
                (Some(dst), Some(vxlan)) => {
                    let ip: std::net::IpAddr = dst
                        .parse()
                        .map_err(|_| format!("invalid dst address '{dst}'"))?;
                    if ip.is_unspecified() {
                        return Err(format!("dst {ip}: name the VTEP's own address"));
                    }
                    crate::ports::unscoped_unicast(ip, "dst")?;
                    if ip.is_ipv4() != vxlan.config.local.is_ipv4() {
                        return Err(format!("dst {ip} is not of {label}'s IP version"));
                    }
                    vxlan.remotes.add_static(key, ip);
                }
                (Some(_), None) => {
                    return Err(format!("dst is for VXLAN ports; {label} is not one"))
                }
                (None, _) => {}
            }
            let replaced = bridge.fdb().add_static(key, port);
            value(&serde_json::json!({ "replaced_learned": replaced }))
        }
        Request::FdbDel { mac, vlan } => {
            let key = FdbKey::new(check_vlan(vlan)?, parse_mac(&mac)?);
            if let Some(local) = bridge.local_port(&key) {
                return Err(format!(
                    "{mac} is the address of {}'s own interface, which stays",
                    bridge.label(local)
                ));
            }
            for vxlan in bridge
                .vxlans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
            {
                vxlan.remotes.remove(&key);
            }
            if bridge.fdb().remove_static(key) || bridge.fdb().forget(key) {
                value(&serde_json::json!({ "removed": true }))
            } else {
                Err(format!("no entry for {mac} in vlan {vlan}"))
            }
        }
        Request::FdbFlush { port } => {
            let flushed = match port {
                Some(port) => bridge.fdb().flush_port(bridge.port(&port)?),
                None => bridge.fdb().flush(),
            };
            value(&serde_json::json!({ "flushed": flushed }))
        }
        Request::Stats => value(&stats(bridge)),
        Request::PortAdd { port } => value(&bridge.add_port(&port)?),
        Request::Reload => value(&bridge.reload()?),
        Request::LockSet { lock } => value(&bridge.switch_lock(&lock)?),
        Request::Capture { .. } => unreachable!("answered by answer()"),
        Request::PortDel { port } => value(&bridge.remove_port(&port)?),
    }
}

/// How long a worker may take to apply a port change.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Waits for every worker's answer to a port change.
fn await_workers(answers: Vec<std::sync::mpsc::Receiver<()>>) -> Result<(), String> {
    for (worker, answer) in answers.into_iter().enumerate() {
        answer
            .recv_timeout(CHANGE_TIMEOUT)
            .map_err(|_| format!("worker {worker} did not apply the change"))?;
    }
    Ok(())
}

/// Runs `f` with CAP_NET_ADMIN and CAP_NET_RAW in this thread's effective
/// set (they stay in its permitted set when the rest are dropped), and
/// drops them again after.
fn with_port_caps<T>(keep_caps: bool, f: impl FnOnce() -> T) -> T {
    use caps::{CapSet, Capability};
    if keep_caps {
        return f();
    }
    for cap in [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW] {
        // Without the capability the open fails with a clear error.
        let _ = caps::raise(None, CapSet::Effective, cap);
    }
    let result = f();
    if let Err(error) = caps::clear(None, CapSet::Effective) {
        log::warn!("cannot drop the capabilities raised to open a port: {error}");
    }
    result
}

fn value<T: serde::Serialize>(result: &T) -> Result<serde_json::Value, String> {
    serde_json::to_value(result).map_err(|e| e.to_string())
}

fn check_vlan(vlan: u16) -> Result<u16, String> {
    if vlan <= 4094 {
        Ok(vlan)
    } else {
        Err(format!("invalid vlan {vlan} (0 to 4094)"))
    }
}

fn parse_mac(text: &str) -> Result<MacAddr, String> {
    text.parse()
        .map_err(|_| format!("invalid MAC address '{text}'"))
}

/// A MAC address a station can have: unicast and not zero.
fn parse_station(text: &str) -> Result<MacAddr, String> {
    let mac = parse_mac(text)?;
    match mac.kind() {
        MacKind::Unicast => Ok(mac),
        _ => Err(format!("'{text}' is not a station's (unicast) address")),
    }
}

impl Bridge {
    /// The MAC table now.
    pub fn fdb(&self) -> Arc<dyn Table> {
        Arc::clone(&self.fdb.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn generation(&self) -> MutexGuard<'_, crate::workers::Generation> {
        self.generation.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An error naming the first worker that ended on its own: workers run
    /// until told to stop, so one that ended panicked, and part of the
    /// traffic would be black-holed if the daemon carried on.
    pub fn check_workers(&self) -> Result<(), String> {
        let generation = self.generation();
        match generation.handles.iter().position(|h| h.is_finished()) {
            Some(id) => Err(format!(
                "worker {id} stopped unexpectedly (panicked); stopping the bridge"
            )),
            None => Ok(()),
        }
    }

    /// Stops the workers for good.
    pub fn stop_workers(&self) -> Result<(), String> {
        self.generation().stop().map(|_| ())
    }

    /// Moves the bridge to a MAC table of strategy `kind` while it runs:
    /// the workers finish their batch and stop, the table's entries (ages,
    /// kinds) move into a table of the new strategy, and workers of that
    /// strategy take over the same queues and counters. Returns how long
    /// forwarding paused.
    fn switch_lock(&self, name: &str) -> Result<serde_json::Value, String> {
        let kind: locks::StrategyKind = name
            .parse()
            .map_err(|e: locks::UnknownStrategy| e.to_string())?;
        if self.relay {
            return Err("a relay has no MAC table".to_owned());
        }
        // Port changes wait for the switch, and the switch for them.
        let mut controls = self.controls();
        let mut generation = self.generation();
        let old = self.fdb();
        if old.kind() == kind {
            return Ok(serde_json::json!({
                "lock": kind.name(), "entries": old.len(), "pause_us": 0
            }));
        }
        let paused = Instant::now();
        let sets = generation.stop()?;
        let entries = old.export();
        let totals = old.stats();
        let started = locks::with_strategy!(kind, S => {
            let table = Arc::new(bridge::MacTable::<S>::with_clock(old.config(), old.clock()));
            table.import(&entries, totals);
            *self.fdb.write().unwrap_or_else(|e| e.into_inner()) = table.clone();
            crate::workers::start::<S>(table, sets, self.worker_config, &self.placement, false)
        })?;
        let pause = paused.elapsed();
        *generation = started.generation;
        *controls = started.controls;
        for worker in &self.workers {
            worker.reset_locks();
        }
        log::info!(
            "lock {} -> {}: {} entries moved, forwarding paused {:?}",
            old.kind(),
            kind,
            entries.len(),
            pause
        );
        Ok(serde_json::json!({
            "lock": kind.name(),
            "entries": entries.len(),
            "pause_us": pause.as_micros() as u64,
        }))
    }

    fn controls(&self) -> MutexGuard<'_, Vec<PortControl<LinkPort>>> {
        self.controls.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn table(&self) -> MutexGuard<'_, Vec<Option<PortSpec>>> {
        // A panic elsewhere while holding it leaves the table whole.
        self.ports.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ports now, by id.
    pub fn live_ports(&self) -> Vec<(PortId, PortSpec)> {
        self.table()
            .iter()
            .enumerate()
            .filter_map(|(id, spec)| Some((PortId(id as u16), spec.clone()?)))
            .collect()
    }

    /// Port `id` as `--port` gives it, or `#id` for one since removed.
    pub fn label(&self, id: PortId) -> String {
        match self.table().get(id.index()) {
            Some(Some(spec)) => spec.label(),
            _ => format!("#{}", id.0),
        }
    }

    /// The port named `name`: its `--port` form or its interface name.
    fn port(&self, name: &str) -> Result<PortId, String> {
        let live = self.live_ports();
        let by_label = live.iter().find(|(_, spec)| spec.label() == name);
        let by_interface = || {
            let mut matches = live.iter().filter(|(_, spec)| spec.name == name);
            match (matches.next(), matches.next()) {
                (Some(found), None) => Some(found),
                _ => None,
            }
        };
        by_label
            .or_else(by_interface)
            .map(|(id, _)| *id)
            .ok_or_else(|| {
                let labels: Vec<String> = live.iter().map(|(_, spec)| spec.label()).collect();
                format!("no port '{name}' (ports: {})", labels.join(", "))
            })
    }

    /// Adds a port while the bridge runs: opens one queue per worker, hands
    /// each worker its queue and waits until all use it.
    fn add_port(&self, text: &str) -> Result<serde_json::Value, String> {
        let spec = PortSpec::parse(text)?;
        if self.relay {
            return Err("a relay has exactly two ports; none can be added".to_owned());
        }
        if spec.vlans.is_some() && !self.worker_config.vlan_filtering {
            return Err(format!(
                "port {} has VLAN options: they need a bridge run with --vlan-filtering",
                spec.describe()
            ));
        }
        let mut table = self.table();
        if table.iter().flatten().any(|port| port.name == spec.name) {
            return Err(format!("{} is already a port of this bridge", spec.name));
        }
        let id = table
            .iter()
            .position(Option::is_none)
            .unwrap_or(table.len());
        if id >= MAX_PORTS {
            return Err(format!("a bridge has at most {MAX_PORTS} ports"));
        }
        let queues = with_port_caps(self.keep_caps, || {
            ports::open_queues(&spec, self.controls().len(), self.port_settings)
        })?;
        if let Some(LinkPort::Vxlan(port)) = queues.first() {
            self.vxlans
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(spec.label(), Arc::clone(port.shared()));
        }
        let port = PortId(id as u16);
        let answers = self
            .controls()
            .iter()
            .zip(queues)
            .map(|(control, queue)| control.add_with_vlans(port, queue, spec.vlans()))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| format!("cannot hand the port to the workers: {e}"))?;
        await_workers(answers)?;
        if id == table.len() {
            table.push(Some(spec.clone()));
        } else {
            table[id] = Some(spec.clone());
        }
        drop(table);
        if spec.kind == Kind::Raw {
            let mut monitor = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
            monitor.watch(port, &spec.name);
            monitor.tick(&*self.fdb());
        }
        log::info!("{}: added as port {id}", spec.label());
        Ok(serde_json::json!({ "port": spec.label(), "id": id }))
    }

    /// Adds the static entries of the configuration file.
    pub fn add_statics(&self, statics: &[crate::config::StaticEntry]) -> Result<(), String> {
        for entry in statics {
            let port = self.port(&entry.port)?;
            self.fdb()
                .add_static(FdbKey::new(entry.vlan, entry.mac), port);
        }
        Ok(())
    }

    /// Reads the configuration file again and applies what changed in its
    /// ports and static entries; a file with an error changes nothing.
    pub fn reload(&self) -> Result<serde_json::Value, String> {
        let mut current = self.config.lock().unwrap_or_else(|e| e.into_inner());
        let Some((path, old)) = current.as_ref() else {
            return Err("the bridge runs without --config: nothing to reload".to_owned());
        };
        let new = crate::config::load(path)?;
        if new.ports.len() < 2 {
            return Err(format!(
                "{}: a bridge needs at least two ports (the file has {})",
                path.display(),
                new.ports.len()
            ));
        }
        let mut restart = Vec::new();
        if new.name != old.name {
            restart.push("name");
        }
        if new.lock != old.lock {
            restart.push("lock");
        }
        if new.workers != old.workers {
            restart.push("workers");
        }
        if new.age != old.age {
            restart.push("age");
        }
        if new.max_entries != old.max_entries {
            restart.push("max_entries");
        }
        if new.vlan_filtering != old.vlan_filtering {
            restart.push("vlan_filtering");
        }
        let live: Vec<PortSpec> = self
            .live_ports()
            .into_iter()
            .map(|(_, spec)| spec)
            .collect();
        let live: Vec<String> = live.iter().map(PortSpec::label).collect();
        let mut added = Vec::new();
        let mut removed = Vec::new();
        // Additions first, so that two ports stay throughout.
        for spec in new
            .ports
            .iter()
            .filter(|spec| !live.contains(&spec.label()))
        {
            self.add_port(&spec.describe())?;
            added.push(spec.describe());
        }
        let live_specs: Vec<PortSpec> = self.live_ports().into_iter().map(|(_, s)| s).collect();
        let changed: Vec<&PortSpec> = new
            .ports
            .iter()
            .filter(|spec| {
                live_specs
                    .iter()
                    .any(|p| p.label() == spec.label() && p.vlans != spec.vlans)
            })
            .collect();
        let stale_statics: Vec<_> = old
            .statics
            .iter()
            .filter(|entry| !new.statics.contains(entry))
            .collect();
        for entry in &stale_statics {
            self.fdb().remove_static(FdbKey::new(entry.vlan, entry.mac));
        }
        for label in live
            .iter()
            .filter(|label| !new.ports.iter().any(|s| &s.label() == *label))
        {
            self.remove_port(label)?;
            removed.push(label.clone());
        }
        // A port whose VLANs changed leaves and comes back with them.
        let mut updated = Vec::new();
        for spec in changed {
            self.remove_port(&spec.label())?;
            self.add_port(&spec.describe())?;
            updated.push(spec.describe());
        }
        let fresh: Vec<_> = new
            .statics
            .iter()
            .filter(|entry| !old.statics.contains(entry))
            .cloned()
            .collect();
        self.add_statics(&fresh)?;
        let reply = serde_json::json!({
            "ports_added": added,
            "ports_removed": removed,
            "ports_changed": updated,
            "static_added": fresh.len(),
            "static_removed": stale_statics.len(),
            "needs_restart": restart,
        });
        let path = path.clone();
        *current = Some((path, new));
        Ok(reply)
    }

    /// Removes a port while the bridge runs: every worker closes its queue
    /// between batches, and once all have, the port's entries go.
    fn remove_port(&self, name: &str) -> Result<serde_json::Value, String> {
        if self.relay {
            return Err("a relay has exactly two ports; none can be removed".to_owned());
        }
        let port = self.port(name)?;
        let mut table = self.table();
        if table.iter().flatten().count() <= 2 {
            return Err(format!(
                "a bridge keeps at least two ports; add another before removing {name}"
            ));
        }
        let spec = table[port.index()].take().expect("a live port");
        drop(table);
        self.monitor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwatch(port, &*self.fdb());
        let answers = self
            .controls()
            .iter()
            .map(|control| control.remove(port))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| format!("cannot reach the workers: {e}"))?;
        await_workers(answers)?;
        let flushed = self.fdb().purge_port(port);
        self.vxlans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&spec.label());
        log::info!(
            "{}: removed (port {}), {flushed} entries flushed",
            spec.label(),
            port.0
        );
        Ok(serde_json::json!({ "removed": spec.label(), "flushed": flushed }))
    }

    /// The port whose own address `key` is, if it is a local entry.
    fn local_port(&self, key: &FdbKey) -> Option<PortId> {
        match self.fdb().locate(&FdbKey::new(0, key.mac)) {
            Some(bridge::fdb::Location::Local(port)) => Some(port),
            _ => None,
        }
    }
}

fn fdb_entries(bridge: &Bridge, port: Option<PortId>, vlan: Option<u16>) -> Vec<FdbEntry> {
    let now = bridge.fdb().now();
    // Each VXLAN port's stations and their VTEPs.
    let vteps: BTreeMap<String, Vec<bridge::port::vxlan::RemoteEntry>> = bridge
        .vxlans
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(label, shared)| (label.clone(), shared.remotes.entries()))
        .collect();
    bridge
        .fdb()
        .snapshot(now)
        .into_iter()
        .filter(|r| port.is_none_or(|p| r.port == p) && vlan.is_none_or(|v| r.key.vlan == v))
        .map(|r| FdbEntry {
            mac: r.key.mac.to_string(),
            port: bridge.label(r.port),
            vlan: r.key.vlan,
            state: match (r.is_local, r.is_static) {
                (true, _) => "local",
                (false, true) => "static",
                (false, false) => "learned",
            }
            .to_owned(),
            age_s: r.idle_secs,
            dst: vteps.get(&bridge.label(r.port)).and_then(|entries| {
                entries
                    .iter()
                    .find(|e| e.key == r.key)
                    .map(|e| e.addr.to_string())
            }),
        })
        .collect()
}

/// The bridge's counters, as `stats` returns them.
pub fn stats(bridge: &Bridge) -> protocol::Stats {
    let sets: Vec<&[PortCounters]> = bridge.counters.iter().map(|set| &set[..]).collect();
    let totals = counters::sum(sets.iter().copied());
    let states = counters::states(sets.iter().copied());
    let ports = bridge
        .live_ports()
        .into_iter()
        .map(|(id, spec)| {
            let index = id.index();
            let stats = totals.get(index).copied().unwrap_or_default();
            let state = states.get(index).copied().unwrap_or_default();
            let link = match netdev::link_state(&spec.name) {
                _ if state == counters::PortState::Gone => "gone",
                // No interface of its own: its underlay is the host's.
                _ if spec.kind == Kind::Vxlan => "up",
                Ok(link) if link.running => "up",
                Ok(_) => "down",
                Err(_) if spec.kind == Kind::Raw => "gone",
                // A tap whose kernel side moved to another namespace.
                Err(_) => "unknown",
            };
            let drops: BTreeMap<String, u64> = DropReason::ALL
                .iter()
                .map(|reason| (reason.name().to_owned(), stats.dropped(*reason)))
                .collect();
            protocol::PortStats {
                name: spec.label(),
                vlans: bridge
                    .worker_config
                    .vlan_filtering
                    .then(|| spec.vlans().to_string()),
                vxlan: bridge
                    .vxlans
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&spec.label())
                    .map(|shared| {
                        let mut counters: BTreeMap<String, u64> = shared
                            .counters
                            .named()
                            .into_iter()
                            .map(|(name, n)| (name.to_owned(), n))
                            .collect();
                        counters.insert(
                            "remotes_refused".to_owned(),
                            shared
                                .remotes
                                .refused
                                .load(std::sync::atomic::Ordering::Relaxed),
                        );
                        counters
                            .insert("remotes".to_owned(), shared.remotes.entries().len() as u64);
                        counters
                    }),
                link: link.to_owned(),
                state: state.name().to_owned(),
                rx_frames: stats.rx_frames,
                rx_bytes: stats.rx_bytes,
                tx_frames: stats.tx_frames,
                tx_bytes: stats.tx_bytes,
                drops,
                rx_oversize: stats.rx_oversize,
                rx_errors: stats.rx_errors,
                tx_dropped: stats.tx_dropped,
                tx_errors: stats.tx_errors,
                moves: stats.moves,
            }
        })
        .collect();
    let uptime = bridge.started.elapsed();
    let mut lockstat = protocol::LockStats {
        enabled: bridge.lockstat,
        acquisitions: 0,
        contended: 0,
        wait_ns: 0,
    };
    let workers = bridge
        .workers
        .iter()
        .zip(&bridge.counters)
        .enumerate()
        .map(|(id, (worker, set))| {
            let own = worker.snapshot();
            lockstat.acquisitions += own.lock_acquisitions;
            lockstat.contended += own.lock_contended;
            lockstat.wait_ns += own.lock_wait_ns;
            let frames = set.iter().map(|port| port.snapshot().rx_frames).sum();
            let lifetime = uptime.as_nanos().max(1) as f64;
            let busy = (own.busy_ns as f64 / lifetime).clamp(0.0, 1.0);
            protocol::WorkerStats {
                id,
                frames,
                batches: own.batches,
                busy_percent: (busy * 1000.0).round() / 10.0,
            }
        })
        .collect();
    let fdb = bridge.fdb();
    let records = fdb.snapshot(fdb.now());
    let local = records.iter().filter(|r| r.is_local).count() as u64;
    let configured = records.iter().filter(|r| r.is_static).count() as u64;
    let totals = fdb.stats();
    let config = fdb.config();
    protocol::Stats {
        name: bridge.name.clone(),
        lock: fdb.kind().name().to_owned(),
        uptime_s: uptime.as_secs(),
        ports,
        workers,
        fdb: protocol::FdbStats {
            entries: records.len() as u64,
            learned: fdb.learned_len() as u64,
            r#static: configured - local,
            local,
            max_entries: config.max_entries as u64,
            age_s: config.age_secs,
            learned_total: totals.learned,
            moves: totals.moved,
            refused: totals.refused,
            aged: totals.aged,
        },
        lockstat,
    }
}
