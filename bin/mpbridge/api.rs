//! The bridge's state and its one owner. `BridgeState` holds what the
//! control plane knows of a running bridge (ports, workers, the MAC table of
//! the chosen strategy, the configuration file, the link monitor) in plain
//! fields, and only the owner thread (the daemon's main thread) touches it:
//! the control socket, `/metrics`, signals and the once-a-second tick reach
//! it as `Event`s on one queue (`queue.rs`: bounded, in lanes by kind),
//! so port changes, reloads, lock switches and link events happen one
//! after another by construction.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bridge::capture::CaptureHub;
use bridge::counters::{self, PortCounters, WorkerCounters};
use bridge::fdb::{FdbKey, Location, Table, Vtep};
use bridge::monitor::{LinkEvent, LinkMonitor};
use bridge::port::placement::CpuSet;
use bridge::port::vhost::Device as VhostDevice;
use bridge::port::vxlan::VxlanShared;
use bridge::port::{netdev, LinkQueue};
use bridge::vlan::FdbVlan;
use bridge::wire::StationMac;
use bridge::worker::{PortControl, PortEvent, PortSetup};
use bridge::MAX_PORTS;
use bridge::{PortId, WorkerConfig};

use crate::config::{Config, StaticEntry};
use crate::mcast::Snooper;
use crate::ports::{self, Kind, PortSettings, PortSpec};
use crate::protocol::{self, ApiError, FdbEntry, Request, Response};
use crate::queue::{EventQueue, Refused};
use crate::stp::SpanningTree;
use crate::watchdog::{self, name_workers, Watchdog};
use crate::workers::Generation;

/// Captures running at once, per bridge: each makes every worker copy the
/// port's frames once more, so they are few.
pub const MAX_CAPTURES: usize = 4;

/// How long the workers together may take to apply a port change.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the workers together may take to answer a ping, before a
/// change that needs all of them: an idle worker wakes at once, a busy one
/// answers after its batch.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the workers may take to stop (a lock switch, the bridge's
/// stop); one still running then is stuck and left behind.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(3);

/// Where the owner's answer goes: called once, on the owner thread, so it
/// must not wait (a channel's `send`, a wake-up).
pub type Reply<T> = Box<dyn FnOnce(Result<T, ApiError>) + Send>;

/// What reaches the owner thread.
pub enum Event {
    /// A request, and where its reply goes.
    Call(Request, Reply<Response>),
    /// A capture request: the reply is what the capture thread follows.
    Capture(Request, Reply<CaptureGrant>),
    /// A signal (SIGHUP, SIGINT, SIGTERM).
    Signal(libc::c_int),
    /// What rtnetlink said of interfaces.
    Links(bridge::monitor::Received),
    /// What a worker reported: a BPDU for spanning tree, a guard tripped.
    Port(PortEvent),
}

/// What a capture follows, and its place among the bridge's captures
/// (given back when dropped).
pub struct CaptureGrant {
    /// The port and directions.
    pub request: crate::capture::Request,
    /// The workers' hubs to attach to.
    pub hubs: Vec<Arc<CaptureHub>>,
    /// Holds one of [`MAX_CAPTURES`] places.
    pub slot: CaptureSlot,
}

/// One running capture's place; dropping it frees the place.
pub struct CaptureSlot(Arc<AtomicUsize>);

impl Drop for CaptureSlot {
    fn drop(&mut self) {
        // Relaxed: a count, read only to refuse the next capture.
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A handle for sending requests to the owner.
#[derive(Clone)]
pub struct Caller {
    events: Arc<EventQueue>,
}

/// How long the control socket waits for the owner's answer: longer than
/// any request takes (a port change waits at most [`CHANGE_TIMEOUT`] per
/// worker round).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl Caller {
    /// A caller over `events`.
    pub fn new(events: Arc<EventQueue>) -> Caller {
        Caller { events }
    }

    /// Sends `request` to the owner without waiting: `reply` gets the
    /// answer, on the owner's thread.
    pub fn call_then(&self, request: Request, reply: Reply<Response>) -> Result<(), ApiError> {
        self.send(Event::Call(request, reply))
    }

    /// Asks the owner for a capture without waiting: `reply` gets the
    /// grant or the refusal, on the owner's thread.
    pub fn capture_then(
        &self,
        request: Request,
        reply: Reply<CaptureGrant>,
    ) -> Result<(), ApiError> {
        self.send(Event::Capture(request, reply))
    }

    fn send(&self, event: Event) -> Result<(), ApiError> {
        self.events.push(event).map_err(refused)
    }

    /// Hands a signal to the owner; false once the owner is gone.
    pub fn signal(&self, signal: libc::c_int) -> bool {
        self.events.push(Event::Signal(signal)) != Err(Refused::Closed)
    }

    /// Hands link news to the owner; false once the owner is gone.
    pub fn links(&self, news: bridge::monitor::Received) -> bool {
        self.events.push(Event::Links(news)) != Err(Refused::Closed)
    }
}

/// A request the queue did not take, as the caller's error.
fn refused(refused: Refused) -> ApiError {
    match refused {
        Refused::Closed => ApiError::from("the bridge is stopping"),
        Refused::Full => ApiError::from("the bridge is busy: too many requests waiting"),
    }
}

/// What the owner publishes for the threads that must answer without
/// waiting on it (`/metrics`; the control socket's reads while the owner
/// is busy with a slow request): the figures of `stats`, `port show` and
/// `mdb show` as of the owner's last look (each tick, once a second, and
/// after each request and signal it handled), and a view of the MAC table
/// itself, which readers read live. Only the owner writes it.
#[derive(Default)]
pub struct Board {
    published: arc_swap::ArcSwapOption<Published>,
    /// Set while the owner handles a request or a signal.
    busy: std::sync::atomic::AtomicBool,
}

/// One publication of the owner's (see [`Board`]).
pub struct Published {
    /// `stats` then.
    pub stats: protocol::Stats,
    /// `port show` then.
    pub ports: Vec<protocol::PortInfo>,
    /// `mdb show` then.
    pub mdb: Result<protocol::Mdb, ApiError>,
    /// The MAC table and the port names: `fdb show`, read live.
    pub fdb: FdbView,
}

impl Board {
    /// The latest publication; `None` before the first.
    pub fn latest(&self) -> Option<Arc<Published>> {
        self.published.load_full()
    }

    /// Replaces the publication.
    pub fn publish(&self, published: Published) {
        self.published.store(Some(Arc::new(published)));
    }

    /// Says whether the owner is busy with a request or a signal.
    pub fn set_busy(&self, busy: bool) {
        // Relaxed: a hint for the control thread, which only chooses
        // between asking the owner and reading the publication by it.
        self.busy.store(busy, Ordering::Relaxed);
    }

    /// Whether the owner is busy with a request or a signal now.
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }
}

/// The MAC table with what names its ports: what `fdb show` needs, for a
/// thread other than the owner to answer it.
pub struct FdbView {
    fdb: Arc<dyn Table>,
    ports: Vec<Option<PortSpec>>,
    vxlans: BTreeMap<String, Arc<VxlanShared>>,
}

impl FdbView {
    /// `fdb show`: every entry, or those on port `port` and VLAN `vlan`.
    pub fn show(
        &self,
        port: Option<&str>,
        vlan: Option<FdbVlan>,
    ) -> Result<Vec<FdbEntry>, ApiError> {
        let port = port.map(|p| find_port(&self.ports, p)).transpose()?;
        let now = self.fdb.now();
        Ok(self
            .fdb
            .records()
            .into_iter()
            .filter(|r| {
                port.is_none_or(|p| r.port == p) && vlan.is_none_or(|v| r.key.vlan == v.get())
            })
            .map(|r| {
                let label = port_label(&self.ports, r.port);
                let dst = self
                    .vxlans
                    .get(&label)
                    .and_then(|shared| shared.vteps.addr(r.vtep?));
                FdbEntry {
                    mac: r.key.mac.to_string(),
                    vlan: r.key.vlan,
                    state: match (r.is_local, r.is_static) {
                        (true, _) => "local",
                        (false, true) => "static",
                        (false, false) => "learned",
                    }
                    .to_owned(),
                    age_s: r.idle_secs(now),
                    dst: dst.map(|ip| ip.to_string()),
                    port: label,
                }
            })
            .collect())
    }
}

/// The ports of `ports` (by id, `None` where removed) that are there.
fn live_ports_of(ports: &[Option<PortSpec>]) -> Vec<(PortId, PortSpec)> {
    ports
        .iter()
        .enumerate()
        .filter_map(|(id, spec)| Some((PortId(id as u16), spec.clone()?)))
        .collect()
}

/// Port `id` as `--port` gives it, or `#id` for one since removed.
fn port_label(ports: &[Option<PortSpec>], id: PortId) -> String {
    match ports.get(id.index()) {
        Some(Some(spec)) => spec.label(),
        _ => format!("#{}", id.0),
    }
}

/// The port named `name`: its `--port` form or its interface name.
fn find_port(ports: &[Option<PortSpec>], name: &str) -> Result<PortId, ApiError> {
    let live = live_ports_of(ports);
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
            ApiError(format!("no port '{name}' (ports: {})", labels.join(", ")))
        })
}

/// What a prepared lock switch does once the old workers have stopped:
/// takes their queues and parts, the old table's entries and totals and
/// the snooper, and starts the new workers over the new table.
type Switch = Box<
    dyn FnOnce(
        Vec<crate::workers::Returned>,
        &[bridge::fdb::FdbRecord],
        bridge::fdb::FdbStatsSnapshot,
        Option<&mut Snooper>,
    ) -> Result<(crate::workers::Started, Arc<dyn Table>), String>,
>;

/// A running bridge, as the owner thread sees it.
pub struct BridgeState {
    /// The bridge's name.
    pub name: String,
    /// The ports, by port id; `None` where no port has the id (removed).
    ports: Vec<Option<PortSpec>>,
    /// Each worker's handle for adding and removing its queues.
    controls: Vec<PortControl<LinkQueue>>,
    /// The workers running now.
    generation: Generation,
    /// The workers' settings, for a new generation.
    worker_config: WorkerConfig,
    /// Each worker's CPUs, for a new generation.
    placement: Vec<Option<CpuSet>>,
    /// Raw ports' links and own addresses.
    monitor: LinkMonitor,
    /// A relay: exactly two ports, none added or removed.
    relay: bool,
    /// Whether capabilities were kept (`--keep-caps`); otherwise the two
    /// that opening a port needs are raised for as long as it takes.
    keep_caps: bool,
    /// The MAC table; replaced by one of another strategy by `lock set`.
    fdb: Arc<dyn Table>,
    /// Each worker's port counters.
    counters: Vec<Arc<[PortCounters]>>,
    /// Each worker's own counters.
    workers: Vec<Arc<WorkerCounters>>,
    /// The workers' heartbeats as last seen: which are stuck.
    watchdog: Watchdog,
    /// When the workers were asked to stop for good.
    stop_asked: Option<Instant>,
    /// When the bridge started.
    started: Instant,
    /// Whether lock statistics are counted.
    lockstat: bool,
    /// Each worker's capture hub.
    captures: Vec<Arc<CaptureHub>>,
    /// Captures running now.
    running_captures: Arc<AtomicUsize>,
    /// The configuration file and what of it is applied, with `--config`.
    config: Option<(PathBuf, Config)>,
    /// What ports are opened with.
    port_settings: PortSettings,
    /// The VXLAN ports' settings, static VTEPs and counters, by port label.
    vxlans: BTreeMap<String, Arc<VxlanShared>>,
    vhosts: BTreeMap<String, Arc<VhostDevice>>,
    /// Whether rtnetlink tells the monitor of link changes; without it the
    /// monitor looks at every link once a second.
    link_events: bool,
    /// Raw ports whose interfaces were down until the bridge opened them:
    /// put back down when they leave the bridge or the bridge stops.
    raised: std::collections::BTreeSet<String>,
    /// `lock set` requests that failed with the bridge left as it was.
    lock_set_failed: u64,
    /// Why the bridge must stop, once something left it unable to forward
    /// (a worker lost while switching strategies).
    fatal: Option<String>,
    /// Spanning tree, with `--stp`.
    stp: Option<SpanningTree>,
    /// Multicast snooping, with `--mcast-snooping`.
    mcast: Option<Snooper>,
    /// The owner's queue, for its figures.
    queue: Arc<EventQueue>,
    /// Per port with `guard=on`: whether a BPDU disabled it, and how often
    /// one did.
    guards: BTreeMap<PortId, (bool, u64)>,
    /// Every live port's link as `port_links` last found it: asked of the
    /// kernel (getifaddrs(3) per port) at most once a tick and after a
    /// link, port or guard change, never per BPDU or IGMP message.
    links_known: Option<Vec<(PortId, bool)>>,
}

/// What the bridge starts with.
pub struct Parts {
    /// The bridge's name.
    pub name: String,
    /// The ports, in `--port` order.
    pub specs: Vec<PortSpec>,
    /// The workers just started.
    pub started: crate::workers::Started,
    /// The MAC table they share.
    pub fdb: Arc<dyn Table>,
    /// The workers' settings.
    pub worker_config: WorkerConfig,
    /// Each worker's CPUs.
    pub placement: Vec<Option<CpuSet>>,
    /// The link monitor, watching the raw ports already.
    pub monitor: LinkMonitor,
    /// A relay.
    pub relay: bool,
    /// `--keep-caps`.
    pub keep_caps: bool,
    /// `--lockstat`.
    pub lockstat: bool,
    /// `--config`'s file and contents.
    pub config: Option<(PathBuf, Config)>,
    /// What ports are opened with.
    pub port_settings: PortSettings,
    /// The VXLAN ports' shared state, by label.
    pub vxlans: BTreeMap<String, Arc<VxlanShared>>,
    /// The vhost-user ports' shared state, by label.
    pub vhosts: BTreeMap<String, Arc<VhostDevice>>,
    /// Raw ports whose links opening them brought up.
    pub raised: std::collections::BTreeSet<String>,
    /// Whether rtnetlink link news will come.
    pub link_events: bool,
    /// Spanning tree, with `--stp`, its ports added.
    pub stp: Option<SpanningTree>,
    /// Multicast snooping, with `--mcast-snooping`, its ports added.
    pub mcast: Option<Snooper>,
    /// The owner's queue, for its figures.
    pub queue: Arc<EventQueue>,
}

impl BridgeState {
    /// The state of a bridge whose workers have just started.
    pub fn new(parts: Parts) -> BridgeState {
        let started = parts.started;
        let watchdog = Watchdog::new(
            started.totals.iter().map(|totals| totals.heartbeat()),
            Instant::now(),
            watchdog::STALL_AFTER,
        );
        let mut state = BridgeState {
            name: parts.name,
            ports: parts.specs.into_iter().map(Some).collect(),
            controls: started.controls,
            generation: started.generation,
            worker_config: parts.worker_config,
            placement: parts.placement,
            monitor: parts.monitor,
            relay: parts.relay,
            keep_caps: parts.keep_caps,
            fdb: parts.fdb,
            counters: started.counters,
            workers: started.totals,
            watchdog,
            stop_asked: None,
            started: Instant::now(),
            lockstat: parts.lockstat,
            captures: started.captures,
            running_captures: Arc::new(AtomicUsize::new(0)),
            config: parts.config,
            port_settings: parts.port_settings,
            vxlans: parts.vxlans,
            vhosts: parts.vhosts,
            raised: parts.raised,
            link_events: parts.link_events,
            fatal: None,
            lock_set_failed: 0,
            guards: BTreeMap::new(),
            links_known: None,
            stp: parts.stp,
            mcast: parts.mcast,
            queue: parts.queue,
        };
        for (id, spec) in state.live_ports() {
            if spec.options.guard {
                state.guards.insert(id, (false, 0));
            }
        }
        state.apply_port_limits();
        state.refresh_stp();
        state.refresh_mcast();
        state
    }

    /// Gives the table every port's `max_learned`.
    fn apply_port_limits(&self) {
        for (id, spec) in self.live_ports() {
            self.fdb
                .set_port_limit(id, spec.options.max_learned.unwrap_or(0));
        }
    }

    /// The worker setup of a port: its VLANs, BPDU and storm options, and
    /// what spanning tree lets through it at first.
    pub fn setup(spec: &PortSpec, workers: usize, stp: bool) -> PortSetup {
        PortSetup {
            vlans: spec.vlans(),
            policy: spec.options.policy(workers),
            gate: match stp {
                true => SpanningTree::first_gate(spec),
                false => bridge::worker::Gate::OPEN,
            },
            disabled: false,
        }
    }

    /// Per live port, whether its link is up and no guard disabled it:
    /// as last found, where nothing changed since (see `links_known`).
    fn port_links(&mut self) -> Vec<(PortId, bool)> {
        if let Some(links) = &self.links_known {
            return links.clone();
        }
        let links = self.look_at_links();
        self.links_known = Some(links.clone());
        links
    }

    /// Forgets the links found: the next `port_links` looks again.
    fn links_changed(&mut self) {
        self.links_known = None;
    }

    /// Per live port, whether its link is up and no guard disabled it,
    /// asked of the kernel.
    fn look_at_links(&self) -> Vec<(PortId, bool)> {
        let states = self.port_states();
        self.live_ports()
            .into_iter()
            .map(|(id, spec)| {
                let state = states.get(id.index()).copied().unwrap_or_default();
                let tripped = self.guards.get(&id).is_some_and(|g| g.0);
                // A tap whose kernel side moved to another namespace
                // shows no link here ("unknown" until its news is heard), yet forwards.
                let link = self.link(id, &spec, state);
                (id, !tripped && !matches!(link, "down" | "gone"))
            })
            .collect()
    }

    /// Tells spanning tree of every port's link (a port its guard
    /// disabled counts as down), and carries out what it decides.
    fn refresh_stp(&mut self) {
        if self.stp.is_none() {
            return;
        }
        let links = self.port_links();
        if let Some(stp) = &mut self.stp {
            for (id, up) in links {
                stp.link(id, up);
            }
        }
        self.apply_stp();
    }

    /// Tells multicast snooping which ports are up (link up, not disabled
    /// by a guard) and which spanning tree lets forward, and carries out
    /// what it decides.
    fn refresh_mcast(&mut self) {
        if self.mcast.is_none() {
            return;
        }
        let links = self.port_links();
        if let Some(mcast) = &mut self.mcast {
            for (id, up) in links {
                let forwarding = self.stp.as_ref().is_none_or(|stp| stp.forwarding(id));
                mcast.set_up(id, up, forwarding);
            }
        }
        self.apply_mcast();
    }

    /// Carries out what multicast snooping decided.
    fn apply_mcast(&mut self) {
        let Some(mcast) = &mut self.mcast else { return };
        let ports = &self.ports;
        let label = |id: PortId| match ports.get(id.index()) {
            Some(Some(spec)) => spec.label(),
            _ => format!("#{}", id.0),
        };
        mcast.apply(&self.controls, label);
    }

    /// Fires multicast snooping's timers that are due.
    pub fn mcast_tick(&mut self) {
        if let Some(mcast) = &mut self.mcast {
            mcast.tick();
        }
        self.apply_mcast();
    }

    /// When multicast snooping next has a timer to fire.
    pub fn mcast_deadline(&self) -> Option<Instant> {
        self.mcast.as_ref().and_then(Snooper::deadline)
    }

    /// `mdb show`.
    fn mdb_show(&self) -> Result<protocol::Mdb, ApiError> {
        let Some(mcast) = &self.mcast else {
            return Err(ApiError::from(
                "multicast snooping is off (start the bridge with --mcast-snooping)",
            ));
        };
        Ok(mcast.show(|id| self.label(id)))
    }

    /// Carries out what spanning tree decided.
    fn apply_stp(&mut self) {
        let Some(stp) = &mut self.stp else { return };
        let ports = &self.ports;
        let label = |id: PortId| match ports.get(id.index()) {
            Some(Some(spec)) => spec.label(),
            _ => format!("#{}", id.0),
        };
        stp.apply(&self.controls, &*self.fdb, label);
    }

    /// Takes what a worker reported.
    pub fn port_event(&mut self, event: PortEvent) {
        match event {
            PortEvent::Bpdu { port, frame } => {
                if let Some(stp) = &mut self.stp {
                    stp.receive(port, &frame);
                }
                self.apply_stp();
                // A port spanning tree just blocked gets no more queries.
                self.refresh_mcast();
            }
            PortEvent::GuardTripped { port } => self.trip_guard(port),
            PortEvent::Mcast { port, vlan, frame } => {
                if let Some(mcast) = &mut self.mcast {
                    mcast.receive(port, vlan, &frame);
                }
                self.apply_mcast();
            }
        }
    }

    /// A BPDU came in on a port with `guard=on`: nothing goes in or out of
    /// it until `port enable`. Logged once per trip.
    fn trip_guard(&mut self, port: PortId) {
        let Some(guard) = self.guards.get_mut(&port) else {
            return;
        };
        if guard.0 {
            // Another worker's report of the same trip.
            return;
        }
        *guard = (true, guard.1 + 1);
        self.links_changed();
        for control in &self.controls {
            let _ = control.set_disabled(port, true);
        }
        let flushed = self.fdb.flush_port(port);
        let label = self.label(port);
        log::warn!(
            "{label}: BPDU guard: a BPDU came in; the port is disabled ({flushed} learned \
             stations flushed) until `mpbridge port enable {label}`"
        );
        self.refresh_stp();
        self.refresh_mcast();
    }

    /// `port enable`: a port its guard disabled forwards again.
    fn enable_port(&mut self, name: &str) -> Result<protocol::PortEnabled, ApiError> {
        let port = self.port(name)?;
        let label = self.label(port);
        let was_disabled = match self.guards.get_mut(&port) {
            Some(guard) if guard.0 => {
                guard.0 = false;
                true
            }
            _ => false,
        };
        if was_disabled {
            self.links_changed();
            for control in &self.controls {
                control
                    .set_disabled(port, false)
                    .map_err(|e| format!("cannot reach the workers: {e}"))?;
            }
            log::info!("{label}: enabled again");
            self.refresh_stp();
            self.refresh_mcast();
        }
        Ok(protocol::PortEnabled {
            enabled: label,
            was_disabled,
        })
    }

    /// Answers one request.
    pub fn handle(&mut self, request: Request) -> Result<Response, ApiError> {
        Ok(match request {
            Request::FdbShow { port, vlan } => {
                Response::Fdb(self.fdb_view().show(port.as_deref(), vlan)?)
            }
            Request::FdbAdd {
                mac,
                port,
                vlan,
                dst,
            } => Response::FdbAdded(self.fdb_add(mac, &port, vlan, dst.as_deref())?),
            Request::FdbDel { mac, vlan } => Response::FdbRemoved(self.fdb_del(mac, vlan)?),
            Request::FdbFlush { port } => {
                let flushed = match port {
                    Some(port) => self.fdb.flush_port(self.port(&port)?),
                    None => self.fdb.flush(),
                };
                Response::Flushed(protocol::Flushed { flushed })
            }
            Request::Stats => Response::Stats(Box::new(self.stats())),
            Request::PortAdd { port } => {
                Response::PortAdded(self.add_port(&PortSpec::parse(&port)?)?)
            }
            Request::PortDel { port } => Response::PortRemoved(self.remove_port(&port)?),
            Request::PortShow => Response::Ports(self.port_list()),
            Request::PortEnable { port } => Response::PortEnabled(self.enable_port(&port)?),
            Request::MdbShow => Response::Mdb(self.mdb_show()?),
            Request::Reload => Response::Reloaded(self.reload()?),
            Request::LockSet { lock } => Response::LockSwitched(self.switch_lock(&lock)?),
            Request::Capture { .. } => {
                return Err(ApiError::from(
                    "a capture is asked for on a stream of its own",
                ))
            }
        })
    }

    /// The once-a-second work: ageing, the link monitor, the workers'
    /// health. An error names why the bridge must stop.
    pub fn tick(&mut self) -> Result<(), String> {
        self.links_changed();
        let aged = self.fdb.age(self.fdb.now());
        if aged > 0 {
            log::debug!("aged out {aged} stations");
        }
        if !self.link_events {
            let events = self.monitor.tick();
            self.take_links(events);
        }
        if let Some(stp) = &mut self.stp {
            stp.tick();
        }
        self.refresh_stp();
        self.refresh_mcast();
        self.watch_workers();
        self.check_workers()
    }

    /// Looks at the workers' heartbeats: a worker whose heartbeat stood
    /// still for longer than [`watchdog::STALL_AFTER`] is logged once as
    /// stuck, and once more when it runs again.
    pub fn watch_workers(&mut self) {
        let beats = self.workers.iter().map(|totals| totals.heartbeat());
        for change in self.watchdog.observe(beats, Instant::now()) {
            match change {
                watchdog::Change::Stuck { worker, silent } => log::warn!(
                    "worker {worker} is stuck: no heartbeat for {:.1} s; its queues' traffic \
                     is not forwarded, and port changes and lock set are refused until it runs \
                     again",
                    silent.as_secs_f64()
                ),
                watchdog::Change::Recovered { worker, silent } => log::warn!(
                    "worker {worker} runs again, after {:.1} s without a heartbeat",
                    silent.as_secs_f64()
                ),
            }
        }
    }

    /// Makes sure that every worker runs its loop before a change that
    /// needs all of them (`what`): a worker the watchdog found stuck, or
    /// one that does not answer a ping within [`PING_TIMEOUT`], fails the
    /// request with nothing changed, and the bridge runs on.
    fn check_responsive(&mut self, what: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        let stuck = self.watchdog.stuck();
        if !stuck.is_empty() {
            let silent = stuck
                .iter()
                .filter_map(|&worker| self.watchdog.health(worker, now))
                .map(|health| health.silent.as_secs())
                .max()
                .unwrap_or_default();
            return Err(ApiError(format!(
                "{what}: {} stuck (no heartbeat for {silent} s or more); nothing changed",
                name_workers(&stuck)
            )));
        }
        let pings = self
            .controls
            .iter()
            .map(|control| control.ping())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| format!("{what}: cannot reach the workers: {e}"))?;
        let silent = await_answers(pings.into_iter().enumerate(), PING_TIMEOUT);
        if !silent.is_empty() {
            return Err(ApiError(format!(
                "{what}: {} did not answer within {} s (stuck?); nothing changed",
                name_workers(&silent),
                PING_TIMEOUT.as_secs()
            )));
        }
        Ok(())
    }

    /// Applies link news from rtnetlink; after an overrun, looks at every
    /// watched link again.
    pub fn links(&mut self, news: bridge::monitor::Received) {
        self.links_changed();
        let events = match news {
            bridge::monitor::Received::Updates(updates) => self.monitor.apply(&updates),
            bridge::monitor::Received::Overrun => {
                log::info!("link news overran; looking at every link again");
                self.monitor.tick()
            }
        };
        // Flushed before the workers hear of it, as they flush a faulted
        // port themselves: the count logged is the owner's.
        let applied = apply_links(&*self.fdb, events);
        self.tell_workers(&applied);
        self.report_links(applied);
        self.refresh_stp();
        self.refresh_mcast();
    }

    /// Tells the workers of a tap's link going down or coming back, as
    /// rtnetlink said: they fault the port (counted once per worker, as
    /// when one finds the link down itself) until it is back, however
    /// briefly it was down. A raw port's workers hear it from their
    /// sockets.
    fn tell_workers(&self, applied: &[(LinkEvent, usize)]) {
        for (event, _) in applied {
            let (port, up) = match *event {
                LinkEvent::Down { port } => (port, false),
                LinkEvent::Up { port } => (port, true),
                _ => continue,
            };
            if !matches!(self.ports.get(port.index()), Some(Some(spec)) if spec.kind == Kind::Tap) {
                continue;
            }
            for control in &self.controls {
                if let Err(error) = control.link_changed(port, up) {
                    log::debug!(
                        "{}: cannot tell a worker of its link: {error}",
                        self.label(port)
                    );
                }
            }
        }
    }

    /// Applies what the link monitor saw to the MAC table, and logs it.
    fn take_links(&self, events: Vec<LinkEvent>) {
        let applied = apply_links(&*self.fdb, events);
        self.report_links(applied);
    }

    /// Logs what the link monitor saw, with what applying it flushed.
    pub fn report_links(&self, applied: Vec<(LinkEvent, usize)>) {
        for (event, flushed) in applied {
            match event {
                LinkEvent::Down { port } => log::warn!(
                    "{}: link down; flushed {flushed} learned stations",
                    self.label(port)
                ),
                LinkEvent::Up { port } => log::info!("{}: link up", self.label(port)),
                LinkEvent::Address { port, addr, .. } => {
                    log::info!("{}: own address {addr}, kept for the host", self.label(port))
                }
                LinkEvent::Gone { port, .. } => log::warn!(
                    "{}: interface deleted; the port is out of the bridge (flushed {flushed} stations)",
                    self.label(port)
                ),
            }
        }
    }

    /// An error naming why the bridge cannot go on: a worker that ended on
    /// its own (workers run until told to stop, so one that ended
    /// panicked, and part of the traffic would be black-holed), or a fault
    /// recorded earlier.
    pub fn check_workers(&self) -> Result<(), String> {
        if let Some(fatal) = &self.fatal {
            return Err(fatal.clone());
        }
        match self.generation.handles.iter().position(|h| h.is_finished()) {
            Some(id) => Err(format!(
                "worker {id} stopped unexpectedly (panicked); stopping the bridge"
            )),
            None => Ok(()),
        }
    }

    /// Asks the workers to stop for good, without waiting: the bridge
    /// stops its other threads meanwhile.
    pub fn ask_workers_to_stop(&mut self) {
        self.generation.ask_to_stop();
        self.stop_asked.get_or_insert_with(Instant::now);
    }

    /// Stops the workers for good, waiting at most [`STOP_TIMEOUT`] from
    /// when they were asked: a worker still running then is stuck, named
    /// in the error, and left behind (the process's exit ends it).
    pub fn stop_workers(&mut self) -> Result<(), String> {
        let asked = *self.stop_asked.get_or_insert_with(Instant::now);
        self.generation
            .stop_by(asked + STOP_TIMEOUT, STOP_TIMEOUT)
            .map(|_| ())
    }

    /// Puts the links the bridge brought up back down, once their queues
    /// are closed (the bridge stops).
    pub fn restore_links(&mut self) {
        for name in std::mem::take(&mut self.raised) {
            self.put_down(&name);
        }
    }

    /// Sets interface `name` down again: the bridge raised it.
    fn put_down(&self, name: &str) {
        match with_port_caps(self.keep_caps, || netdev::set_link_down(name)) {
            Ok(_) => log::info!("{name}: link set down again, as it was before the bridge"),
            // Deleted meanwhile, say: nothing to put back.
            Err(error) => log::debug!("{name}: cannot set the link down again: {error}"),
        }
    }

    /// The MAC table now.
    pub fn fdb(&self) -> &Arc<dyn Table> {
        &self.fdb
    }

    /// Each worker's port counters.
    pub fn counters(&self) -> &[Arc<[PortCounters]>] {
        &self.counters
    }

    /// Adds the static entries of the configuration file.
    pub fn add_statics(&mut self, statics: &[StaticEntry]) -> Result<(), String> {
        for entry in statics {
            let port = self.port(&entry.port).map_err(|e| e.0)?;
            self.fdb
                .add_static(FdbKey::new(entry.vlan.get(), entry.mac.get()), port, None);
        }
        Ok(())
    }

    /// Checks a capture request and picks the hubs it follows.
    pub fn capture(&self, request: Request) -> Result<CaptureGrant, ApiError> {
        let Request::Capture {
            port,
            direction,
            count,
            queue,
        } = request
        else {
            return Err(ApiError::from("not a capture request"));
        };
        let id = self.port(&port)?;
        let (inbound, outbound) = direction.takes();
        let hubs = match queue {
            None => self.captures.clone(),
            Some(queue) => vec![self.captures.get(queue).cloned().ok_or_else(|| {
                format!(
                    "no queue {queue} (the bridge has {} workers, queues 0 to {})",
                    self.captures.len(),
                    self.captures.len() - 1
                )
            })?],
        };
        // Relaxed: only the owner thread takes places, so the check and the
        // increment cannot race another taker; drops only free places.
        if self.running_captures.load(Ordering::Relaxed) >= MAX_CAPTURES {
            return Err(ApiError(format!(
                "{MAX_CAPTURES} captures are running already (the most a bridge runs at once); \
                 stop one first"
            )));
        }
        self.running_captures.fetch_add(1, Ordering::Relaxed);
        let slot = CaptureSlot(Arc::clone(&self.running_captures));
        Ok(CaptureGrant {
            request: crate::capture::Request {
                port: id,
                label: self.label(id),
                inbound,
                outbound,
                count,
            },
            hubs,
            slot,
        })
    }

    fn fdb_add(
        &mut self,
        mac: StationMac,
        port: &str,
        vlan: FdbVlan,
        dst: Option<&str>,
    ) -> Result<protocol::FdbAdded, ApiError> {
        let key = FdbKey::new(vlan.get(), mac.get());
        let port = self.port(port)?;
        if let Some(local) = self.local_port(&key) {
            return Err(ApiError(format!(
                "{mac} is the address of {}'s own interface",
                self.label(local)
            )));
        }
        let label = self.label(port);
        let vtep = match (dst, self.vxlans.get(&label)) {
            (Some(dst), Some(vxlan)) => {
                let ip: std::net::IpAddr = dst
                    .parse()
                    .map_err(|_| format!("invalid dst address '{dst}'"))?;
                if ip.is_unspecified() {
                    return Err(ApiError(format!("dst {ip}: name the VTEP's own address")));
                }
                ports::unscoped_unicast(ip, "dst")?;
                if ip.is_ipv4() != vxlan.config.local.is_ipv4() {
                    return Err(ApiError(format!("dst {ip} is not of {label}'s IP version")));
                }
                let vtep = vxlan.vteps.handle(ip).ok_or_else(|| {
                    format!(
                        "{label} names {} VTEPs already, its most",
                        bridge::port::vxlan::vteps::MAX_VTEPS
                    )
                })?;
                Some(vtep)
            }
            (Some(_), None) => {
                return Err(ApiError(format!(
                    "dst is for VXLAN ports; {label} is not one"
                )))
            }
            (None, _) => None,
        };
        let replaced_learned = self.fdb.add_static(key, port, vtep);
        self.sync_static_vteps();
        Ok(protocol::FdbAdded { replaced_learned })
    }

    fn fdb_del(
        &mut self,
        mac: StationMac,
        vlan: FdbVlan,
    ) -> Result<protocol::FdbRemoved, ApiError> {
        let key = FdbKey::new(vlan.get(), mac.get());
        if let Some(local) = self.local_port(&key) {
            return Err(ApiError(format!(
                "{mac} is the address of {}'s own interface, which stays",
                self.label(local)
            )));
        }
        if self.fdb.remove_static(key) || self.fdb.forget(key) {
            self.sync_static_vteps();
            Ok(protocol::FdbRemoved { removed: true })
        } else {
            Err(ApiError(format!("no entry for {mac} in vlan {vlan}")))
        }
    }

    /// Moves the bridge to a MAC table of strategy `name` while it runs:
    /// the workers finish their batch and stop, the table's entries (ages,
    /// kinds) move into a table of the new strategy, and workers of that
    /// strategy take over the same queues and counters. If the old workers
    /// cannot all be taken back, or the new ones cannot start, the bridge
    /// cannot forward all its traffic any more and stops (non-zero).
    fn switch_lock(&mut self, name: &str) -> Result<protocol::LockSwitched, ApiError> {
        let kind: locks::StrategyKind = name
            .parse()
            .map_err(|e: locks::UnknownStrategy| e.to_string())?;
        if self.relay {
            return Err(ApiError::from("a relay has no MAC table"));
        }
        let old = Arc::clone(&self.fdb);
        if old.kind() == kind {
            return Ok(protocol::LockSwitched {
                lock: kind.name().to_owned(),
                entries: old.len(),
                pause_us: 0,
            });
        }
        if let Err(error) = self.check_responsive(&format!("lock set {kind}")) {
            self.lock_set_failed += 1;
            return Err(error);
        }
        // Everything the new strategy needs from the system (its table's
        // memory, the eventfds, the threads) is made while the old workers
        // still forward: a failure here leaves them untouched. What follows
        // the stop only moves memory around.
        let snooping = self.mcast.is_some();
        let limits: Vec<(PortId, u32)> = self
            .live_ports()
            .into_iter()
            .map(|(id, spec)| (id, spec.options.max_learned.unwrap_or(0)))
            .collect();
        let count = self.controls.len();
        let prepared: Result<Switch, String> = locks::with_strategy!(kind, S => {
            let table = Arc::new(bridge::MacTable::<S>::with_clock(old.config(), old.clock()));
            let groups = snooping.then(|| Arc::new(bridge::mcast::GroupTable::<S>::new()));
            crate::workers::prepare::<S>(
                Arc::clone(&table),
                groups.clone(),
                count,
                self.worker_config,
                &self.placement,
                None,
            )
            .map(|prepared| {
                Box::new(move |sets, entries: &[bridge::fdb::FdbRecord], totals, mcast: Option<&mut Snooper>| {
                    table.import(entries, totals);
                    for &(port, limit) in &limits {
                        table.set_port_limit(port, limit);
                    }
                    if let (Some(mcast), Some(groups)) = (mcast, &groups) {
                        mcast.replace_table(Arc::clone(groups) as Arc<dyn bridge::mcast::Groups>);
                    }
                    prepared
                        .start(sets)
                        .map(|started| (started, table as Arc<dyn Table>))
                }) as Switch
            })
        });
        let switch = match prepared {
            Ok(switch) => switch,
            Err(error) => {
                self.lock_set_failed += 1;
                let message = format!(
                    "lock set {kind}: {error}; nothing changed, the bridge forwards on with {}",
                    old.kind()
                );
                log::warn!("{message}");
                return Err(ApiError(message));
            }
        };
        let paused = Instant::now();
        // Every worker answered a moment ago; one that does not stop now
        // got stuck since, and the others have stopped already.
        let sets = match self.generation.stop(STOP_TIMEOUT) {
            Ok(sets) => sets,
            Err(error) => return Err(self.fail(format!("lock set {kind}: {error}"))),
        };
        let entries = old.records();
        let totals = old.stats();
        let (started, table) = match switch(sets, &entries, totals, self.mcast.as_mut()) {
            Ok(started) => started,
            Err(error) => return Err(self.fail(format!("lock set {kind}: {error}"))),
        };
        let pause = paused.elapsed();
        self.fdb = table;
        self.apply_port_limits();
        self.generation = started.generation;
        self.controls = started.controls;
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
        Ok(protocol::LockSwitched {
            lock: kind.name().to_owned(),
            entries: entries.len(),
            pause_us: pause.as_micros() as u64,
        })
    }

    /// Records a fault the bridge cannot carry on after; the main loop
    /// stops the bridge on its next look. Returns the error for the reply.
    fn fail(&mut self, message: String) -> ApiError {
        let fatal = format!("{message}; stopping the bridge");
        log::error!("{fatal}");
        self.fatal = Some(fatal.clone());
        ApiError(fatal)
    }

    /// Takes port `port` back from the first `count` workers after an
    /// addition that failed (`what`), waiting for all but those in
    /// `silent`: those apply the removal after the addition, once they run
    /// again.
    fn take_back(&self, what: &str, port: PortId, count: usize, silent: &[usize]) {
        let undone = self.controls[..count]
            .iter()
            .enumerate()
            .filter(|(worker, _)| !silent.contains(worker))
            .filter_map(|(worker, control)| Some((worker, control.remove(port).ok()?)))
            .collect::<Vec<_>>();
        for worker in silent {
            // The answer comes when nobody waits any more.
            let _ = self.controls[*worker].remove(port);
        }
        let late = await_answers(undone, CHANGE_TIMEOUT);
        if !late.is_empty() {
            log::warn!(
                "{what}: {} did not give the port back within {} s either",
                name_workers(&late),
                CHANGE_TIMEOUT.as_secs()
            );
        }
    }

    /// Adds a port while the bridge runs: opens one queue per worker, hands
    /// each worker its queue and waits until all use it. A port that cannot
    /// be handed to every worker is taken back from those that had it.
    fn add_port(&mut self, spec: &PortSpec) -> Result<protocol::PortAdded, ApiError> {
        if self.relay {
            return Err(ApiError::from(
                "a relay has exactly two ports; none can be added",
            ));
        }
        if spec.vlans.is_some() && !self.worker_config.vlan_filtering {
            return Err(ApiError(format!(
                "port {} has VLAN options: they need a bridge run with --vlan-filtering",
                spec.describe()
            )));
        }
        if self
            .ports
            .iter()
            .flatten()
            .any(|port| port.name == spec.name)
        {
            return Err(ApiError(format!(
                "{} is already a port of this bridge",
                spec.name
            )));
        }
        let id = self
            .ports
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.ports.len());
        if id >= MAX_PORTS {
            return Err(ApiError(format!("a bridge has at most {MAX_PORTS} ports")));
        }
        let what = format!("port add {}", spec.label());
        self.check_responsive(&what)?;
        let queues = with_port_caps(self.keep_caps, || {
            ports::open_queues(spec, self.controls.len(), self.port_settings)
        })?;
        let shared = match queues.first() {
            Some(LinkQueue::Vxlan(port)) => Some(Arc::clone(port.shared())),
            _ => None,
        };
        let vhost = match queues.first() {
            Some(LinkQueue::Vhost(port)) => Some(Arc::clone(port.device())),
            _ => None,
        };
        let raised = matches!(queues.first(), Some(LinkQueue::Raw(port)) if port.raised_link());
        let port = PortId(id as u16);
        let mut answers = Vec::new();
        let setup = Self::setup(spec, self.controls.len(), self.stp.is_some());
        // Before any worker learns on it.
        self.fdb
            .set_port_limit(port, spec.options.max_learned.unwrap_or(0));
        for (control, queue) in self.controls.iter().zip(queues) {
            match control.add_with(port, queue, setup.clone()) {
                Ok(answer) => answers.push(answer),
                Err(error) => {
                    // Those that took the port give it back.
                    self.take_back(&what, port, answers.len(), &[]);
                    self.fdb.set_port_limit(port, 0);
                    return Err(ApiError(format!(
                        "cannot hand the port to the workers: {error}"
                    )));
                }
            }
        }
        let silent = await_answers(answers.into_iter().enumerate(), CHANGE_TIMEOUT);
        if !silent.is_empty() {
            // A worker that got stuck since it answered the ping: every
            // worker gives the port back (a stuck one once it runs again,
            // its removal queued behind the addition), and the bridge runs
            // on without it.
            self.take_back(&what, port, self.controls.len(), &silent);
            self.fdb.set_port_limit(port, 0);
            if raised {
                self.put_down(&spec.name);
            }
            let message = format!(
                "{what}: {} did not take the port within {} s (stuck?); the port was not added",
                name_workers(&silent),
                CHANGE_TIMEOUT.as_secs()
            );
            log::warn!("{message}");
            return Err(ApiError(message));
        }
        if id == self.ports.len() {
            self.ports.push(Some(spec.clone()));
        } else {
            self.ports[id] = Some(spec.clone());
        }
        if let Some(shared) = shared {
            self.vxlans.insert(spec.label(), shared);
        }
        if let Some(device) = vhost {
            self.vhosts.insert(spec.label(), device);
        }
        if raised {
            self.raised.insert(spec.name.clone());
        }
        if spec.kind == Kind::Raw {
            self.monitor.watch(port, &spec.name);
            let events = self.monitor.tick();
            self.take_links(events);
        }
        if spec.kind == Kind::Tap {
            self.monitor.watch_tap(port, &spec.name);
        }
        if spec.options.guard {
            self.guards.insert(port, (false, 0));
        }
        self.apply_port_limits();
        if let Some(stp) = &mut self.stp {
            stp.add(port, spec, crate::stp::port_mac(&self.name, spec));
        }
        if let Some(mcast) = &mut self.mcast {
            mcast.add(port, spec);
        }
        self.links_changed();
        self.refresh_stp();
        self.refresh_mcast();
        log::info!("{}: added as port {id}", spec.label());
        Ok(protocol::PortAdded {
            port: spec.label(),
            id,
        })
    }

    /// Removes a port while the bridge runs: every worker closes its queue
    /// between batches, and once all have, the port's entries go.
    fn remove_port(&mut self, name: &str) -> Result<protocol::PortRemoved, ApiError> {
        if self.ports.iter().flatten().count() <= 2 && !self.relay {
            return Err(ApiError(format!(
                "a bridge keeps at least two ports; add another before removing {name}"
            )));
        }
        self.take_port(name)
    }

    /// Removes a port, however many stay (to add it again at once).
    fn take_port(&mut self, name: &str) -> Result<protocol::PortRemoved, ApiError> {
        if self.relay {
            return Err(ApiError::from(
                "a relay has exactly two ports; none can be removed",
            ));
        }
        let port = self.port(name)?;
        let what = format!("port del {name}");
        self.check_responsive(&what)?;
        let answers = self
            .controls
            .iter()
            .map(|control| control.remove(port))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| format!("cannot reach the workers: {e}"))?;
        // A worker that got stuck since it answered the ping closes its
        // queue when it runs again (the removal waits in its queue of
        // changes); the others have closed theirs, so the port leaves the
        // bridge either way.
        let silent = await_answers(answers.into_iter().enumerate(), CHANGE_TIMEOUT);
        let spec = self.ports[port.index()].take().expect("a live port");
        self.guards.remove(&port);
        self.links_changed();
        if let Some(mcast) = &mut self.mcast {
            mcast.remove(port);
        }
        self.apply_mcast();
        if let Some(stp) = &mut self.stp {
            stp.remove(port);
        }
        self.apply_stp();
        if let Some(addr) = self.monitor.unwatch(port) {
            self.fdb.remove_static(FdbKey::new(0, addr));
        }
        let flushed = self.fdb.purge_port(port);
        self.fdb.set_port_limit(port, 0);
        self.vxlans.remove(&spec.label());
        self.vhosts.remove(&spec.label());
        if spec.kind == Kind::Raw && self.raised.remove(&spec.name) {
            self.put_down(&spec.name);
        }
        log::info!(
            "{}: removed (port {}), {flushed} entries flushed",
            spec.label(),
            port.0
        );
        if !silent.is_empty() {
            let message = format!(
                "{what}: {} did not close its queue within {} s (stuck?): the port is out \
                 of the bridge, and that queue closes when the worker runs again",
                name_workers(&silent),
                CHANGE_TIMEOUT.as_secs()
            );
            log::warn!("{message}");
            return Err(ApiError(message));
        }
        Ok(protocol::PortRemoved {
            removed: spec.label(),
            flushed,
        })
    }

    /// Reads the configuration file again and applies what changed in its
    /// ports and static entries; a file with an error changes nothing. A
    /// port whose options changed (VLANs, a VXLAN port's VTEPs) leaves and
    /// comes back with them, keeping the static entries that still fit it.
    pub fn reload(&mut self) -> Result<protocol::Reloaded, ApiError> {
        let Some((path, old)) = self.config.clone() else {
            return Err(ApiError::from(
                "the bridge runs without --config: nothing to reload",
            ));
        };
        let new = crate::config::load(&path)?;
        if new.ports.len() < 2 {
            return Err(ApiError(format!(
                "{}: a bridge needs at least two ports (the file has {})",
                path.display(),
                new.ports.len()
            )));
        }
        if let Some(spec) = new.ports.iter().find(|s| s.vlans.is_some()) {
            if !self.worker_config.vlan_filtering {
                return Err(ApiError(format!(
                    "{}: port {} has VLAN options: they need a bridge run with --vlan-filtering",
                    path.display(),
                    spec.describe()
                )));
            }
        }
        let mut restart = Vec::new();
        let settings: [(&str, bool); 11] = [
            ("stp", new.stp != old.stp),
            ("mcast", new.mcast != old.mcast),
            ("move_limit", new.move_limit != old.move_limit),
            ("move_hold", new.move_hold != old.move_hold),
            ("group_fwd_mask", new.group_fwd_mask != old.group_fwd_mask),
            ("name", new.name != old.name),
            ("lock", new.lock != old.lock),
            ("workers", new.workers != old.workers),
            ("age", new.age != old.age),
            ("max_entries", new.max_entries != old.max_entries),
            ("vlan_filtering", new.vlan_filtering != old.vlan_filtering),
        ];
        for (setting, changed) in settings {
            if changed {
                restart.push(setting.to_owned());
            }
        }
        let live: Vec<PortSpec> = self.live_ports().into_iter().map(|(_, s)| s).collect();
        let mut reply = protocol::Reloaded {
            ports_added: Vec::new(),
            ports_removed: Vec::new(),
            ports_changed: Vec::new(),
            static_added: 0,
            static_removed: 0,
            needs_restart: restart,
        };
        let ports_change = new.ports.iter().any(|spec| !live.contains(spec))
            || live.iter().any(|spec| !new.ports.contains(spec));
        if ports_change {
            self.check_responsive("reload")?;
        }
        // Additions first, so that two ports stay throughout.
        for spec in new
            .ports
            .iter()
            .filter(|spec| !live.iter().any(|l| l.label() == spec.label()))
        {
            self.add_port(spec)?;
            reply.ports_added.push(spec.describe());
        }
        let changed: Vec<&PortSpec> = new
            .ports
            .iter()
            .filter(|spec| live.iter().any(|l| l.label() == spec.label() && l != *spec))
            .collect();
        let stale_statics: Vec<&StaticEntry> = old
            .statics
            .iter()
            .filter(|entry| !new.statics.contains(entry))
            .collect();
        for entry in &stale_statics {
            self.fdb
                .remove_static(FdbKey::new(entry.vlan.get(), entry.mac.get()));
        }
        reply.static_removed = stale_statics.len();
        for spec in live
            .iter()
            .filter(|l| !new.ports.iter().any(|s| s.label() == l.label()))
        {
            self.remove_port(&spec.label())?;
            reply.ports_removed.push(spec.label());
        }
        for spec in changed {
            let statics = self.statics_of(&spec.label());
            self.take_port(&spec.label())?;
            let added = self.add_port(spec)?;
            let port = PortId(added.id as u16);
            let vlans = spec.vlans();
            for (key, dst) in statics {
                let fits = !self.worker_config.vlan_filtering || vlans.is_member(key.vlan);
                if !fits {
                    log::info!(
                        "{}: static entry {} vlan {} dropped: the port is no longer in that VLAN",
                        spec.label(),
                        key.mac,
                        key.vlan
                    );
                    continue;
                }
                // The VTEP's handle of the port as it is now.
                let vtep = dst.and_then(|ip| self.vxlans.get(&spec.label())?.vteps.handle(ip));
                self.fdb.add_static(key, port, vtep);
            }
            self.sync_static_vteps();
            reply.ports_changed.push(spec.describe());
        }
        let fresh: Vec<StaticEntry> = new
            .statics
            .iter()
            .filter(|entry| !old.statics.contains(entry))
            .cloned()
            .collect();
        self.add_statics(&fresh).map_err(ApiError)?;
        reply.static_added = fresh.len();
        self.config = Some((path, new));
        Ok(reply)
    }

    /// The static entries (not local ones) on port `label`, with a VXLAN
    /// port's VTEP for each where one is set.
    fn statics_of(&self, label: &str) -> Vec<(FdbKey, Option<std::net::IpAddr>)> {
        let Ok(port) = self.port(label) else {
            return Vec::new();
        };
        self.fdb
            .records()
            .into_iter()
            .filter(|r| r.port == port && r.is_static && !r.is_local)
            .map(|r| (r.key, self.vtep_addr(label, r.vtep)))
            .collect()
    }

    /// Tells each VXLAN port the VTEPs of its static entries, which a port
    /// that does not learn hears beside its listed remotes.
    fn sync_static_vteps(&self) {
        if self.vxlans.is_empty() {
            return;
        }
        let records = self.fdb.records();
        for (label, shared) in &self.vxlans {
            let Ok(port) = self.port(label) else {
                continue;
            };
            let addrs = shared.vteps.addrs();
            let vteps = records
                .iter()
                .filter(|r| r.port == port && r.is_static)
                .filter_map(|r| bridge::port::vxlan::vteps::addr_in(&addrs, r.vtep?))
                .collect();
            shared.set_static_vteps(vteps);
        }
    }

    /// The address of VTEP `vtep` of VXLAN port `label`.
    fn vtep_addr(&self, label: &str, vtep: Option<Vtep>) -> Option<std::net::IpAddr> {
        self.vxlans.get(label)?.vteps.addr(vtep?)
    }

    /// The port whose own address `key` is, if it is a local entry.
    fn local_port(&self, key: &FdbKey) -> Option<PortId> {
        [key.vlan, 0].into_iter().find_map(|vlan| {
            match self.fdb.locate(&FdbKey::new(vlan, key.mac)) {
                Some(Location::Local(port)) => Some(port),
                _ => None,
            }
        })
    }

    /// The ports now, by id.
    pub fn live_ports(&self) -> Vec<(PortId, PortSpec)> {
        live_ports_of(&self.ports)
    }

    /// Port `id` as `--port` gives it, or `#id` for one since removed.
    pub fn label(&self, id: PortId) -> String {
        port_label(&self.ports, id)
    }

    /// The port named `name`: its `--port` form or its interface name.
    fn port(&self, name: &str) -> Result<PortId, ApiError> {
        find_port(&self.ports, name)
    }

    /// What `fdb show` reads, for any thread.
    fn fdb_view(&self) -> FdbView {
        FdbView {
            fdb: Arc::clone(&self.fdb),
            ports: self.ports.clone(),
            vxlans: self.vxlans.clone(),
        }
    }

    /// What the owner publishes (see [`Board`]).
    pub fn published(&self) -> Published {
        Published {
            stats: self.stats(),
            ports: self.port_list(),
            mdb: self.mdb_show(),
            fdb: self.fdb_view(),
        }
    }

    /// The link of a port, as `stats` and `port show` give it.
    fn link(&self, id: PortId, spec: &PortSpec, state: counters::PortState) -> &'static str {
        if let Some(device) = self.vhosts.get(&spec.label()) {
            // Up while a frontend runs the port's first queue pair.
            return if device.link_up() { "up" } else { "down" };
        }
        match netdev::link_state(&spec.name) {
            _ if state == counters::PortState::Gone => "gone",
            // No interface of its own: its underlay is the host's.
            _ if spec.kind == Kind::Vxlan => "up",
            Ok(link) if link.running => "up",
            Ok(_) => "down",
            Err(_) if spec.kind == Kind::Raw => "gone",
            // A tap whose kernel side moved to another namespace: as its
            // last news there said.
            Err(_) => match self.monitor.tap_running(id) {
                Some(true) => "up",
                Some(false) => "down",
                None => "unknown",
            },
        }
    }

    fn port_states(&self) -> Vec<counters::PortState> {
        let sets: Vec<&[PortCounters]> = self.counters.iter().map(|set| &set[..]).collect();
        counters::states(sets.iter().copied())
    }

    fn port_list(&self) -> Vec<protocol::PortInfo> {
        let states = self.port_states();
        self.live_ports()
            .into_iter()
            .map(|(id, spec)| {
                let state = states.get(id.index()).copied().unwrap_or_default();
                let groups = self.mcast.as_ref().and_then(|m| m.port_groups(id));
                protocol::PortInfo {
                    id: id.index(),
                    name: spec.label(),
                    kind: match spec.kind {
                        Kind::Tap => "tap",
                        Kind::Raw => "raw",
                        Kind::Vxlan => "vxlan",
                        Kind::Vhost => "vhost",
                    }
                    .to_owned(),
                    options: spec.describe(),
                    link: self.link(id, &spec, state).to_owned(),
                    stp: self.port_stp(id),
                    flags: spec.options.flag_map(),
                    max_learned: spec.options.max_learned,
                    learned: self.fdb.port_learned(id),
                    mcast_n_groups: groups.map(|g| g.n_groups),
                    mcast_max_groups: groups.map(|g| g.max_groups),
                    mcast_max_groups_refused: groups.map(|g| g.refused),
                }
            })
            .collect()
    }

    /// A port's spanning tree figures and guard, where it has either.
    fn port_stp(&self, id: PortId) -> Option<protocol::PortStp> {
        let mut stp = self.stp.as_ref().and_then(|stp| stp.port(id));
        if let Some(&(tripped, trips)) = self.guards.get(&id) {
            let stp = stp.get_or_insert(protocol::PortStp {
                role: None,
                state: None,
                guard_tripped: None,
                guard_trips: None,
                rstp: None,
                bpdus: None,
                flushes: None,
            });
            stp.guard_tripped = Some(tripped);
            stp.guard_trips = Some(trips);
        }
        stp
    }

    /// The bridge's counters, as `stats` returns them.
    pub fn stats(&self) -> protocol::Stats {
        let sets: Vec<&[PortCounters]> = self.counters.iter().map(|set| &set[..]).collect();
        let totals = counters::sum(sets.iter().copied());
        let states = self.port_states();
        // Per VXLAN port, its stations that have a VTEP.
        let records = match self.vxlans.is_empty() {
            true => Vec::new(),
            false => self.fdb.records(),
        };
        let remotes = |port: PortId| {
            records
                .iter()
                .filter(|r| r.port == port && r.vtep.is_some())
                .count() as u64
        };
        let ports = self
            .live_ports()
            .into_iter()
            .map(|(id, spec)| {
                let index = id.index();
                let stats = totals.get(index).copied().unwrap_or_default();
                let state = states.get(index).copied().unwrap_or_default();
                let groups = self.mcast.as_ref().and_then(|m| m.port_groups(id));
                protocol::PortStats {
                    name: spec.label(),
                    vlans: self
                        .worker_config
                        .vlan_filtering
                        .then(|| spec.vlans().to_string()),
                    vxlan: self.vxlans.get(&spec.label()).map(|shared| {
                        let mut counters: BTreeMap<String, u64> = shared
                            .counters
                            .named()
                            .into_iter()
                            .map(|(name, n)| (name.to_owned(), n))
                            .collect();
                        counters.insert("remotes_refused".to_owned(), stats.refused);
                        counters.insert("remotes".to_owned(), remotes(id));
                        counters.insert(
                            "vteps_refused".to_owned(),
                            shared.vteps.refused.load(Ordering::Relaxed),
                        );
                        counters
                    }),
                    vhost: self.vhosts.get(&spec.label()).map(|device| {
                        device
                            .counters
                            .named()
                            .into_iter()
                            .map(|(name, n)| (name.to_owned(), n))
                            .collect()
                    }),
                    link: self.link(id, &spec, state).to_owned(),
                    state: state.name().to_owned(),
                    stp: self.port_stp(id),
                    flags: spec.options.flag_map(),
                    max_learned: spec.options.max_learned,
                    learned: self.fdb.port_learned(id),
                    mcast_n_groups: groups.map(|g| g.n_groups),
                    mcast_max_groups: groups.map(|g| g.max_groups),
                    mcast_max_groups_refused: groups.map(|g| g.refused),
                    counters: stats,
                }
            })
            .collect();
        let uptime = self.started.elapsed();
        let now = Instant::now();
        let mut lockstat = protocol::LockStats {
            enabled: self.lockstat,
            acquisitions: 0,
            contended: 0,
            wait_ns: 0,
        };
        let workers = self
            .workers
            .iter()
            .zip(&self.counters)
            .enumerate()
            .map(|(id, (worker, set))| {
                let own = worker.snapshot();
                lockstat.acquisitions += own.lock_acquisitions;
                lockstat.contended += own.lock_contended;
                lockstat.wait_ns += own.lock_wait_ns;
                let frames = set.iter().map(|port| port.snapshot().rx_frames).sum();
                let lifetime = uptime.as_nanos().max(1) as f64;
                let busy = (own.busy_ns as f64 / lifetime).clamp(0.0, 1.0);
                let health = self.watchdog.health(id, now);
                protocol::WorkerStats {
                    id,
                    frames,
                    batches: own.batches,
                    busy_percent: (busy * 1000.0).round() / 10.0,
                    stuck: health.is_some_and(|h| h.stuck),
                    heartbeat_age_s: health
                        .map_or(0.0, |h| (h.silent.as_secs_f64() * 10.0).round() / 10.0),
                    stalls: health.map_or(0, |h| h.stalls),
                }
            })
            .collect();
        let fdb = &self.fdb;
        let records = fdb.records();
        let local = records.iter().filter(|r| r.is_local).count() as u64;
        let configured = records.iter().filter(|r| r.is_static).count() as u64;
        let totals = fdb.stats();
        let config = fdb.config();
        protocol::Stats {
            name: self.name.clone(),
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
                totals,
            },
            lockstat,
            lock_set_failed: self.lock_set_failed,
            stp: self.stp.as_ref().map(|stp| stp.bridge(|id| self.label(id))),
            mcast: self.mcast.as_ref().map(Snooper::stats),
            owner_queue: self.queue.stats(),
        }
    }
}

/// Applies the link monitor's events to `fdb`, in order: a link down or
/// an interface gone has the port's learned stations flushed (a gone one
/// its local entry too), a new address replaces the port's local entry at
/// VLAN 0. Returns each event with the stations it flushed.
pub fn apply_links(fdb: &dyn Table, events: Vec<LinkEvent>) -> Vec<(LinkEvent, usize)> {
    events
        .into_iter()
        .map(|event| {
            let flushed = match event {
                LinkEvent::Down { port } => fdb.flush_port(port),
                LinkEvent::Up { .. } => 0,
                LinkEvent::Address { port, addr, old } => {
                    if let Some(old) = old {
                        fdb.remove_static(FdbKey::new(0, old));
                    }
                    fdb.add_local(FdbKey::new(0, addr), port);
                    0
                }
                LinkEvent::Gone { port, local } => {
                    if let Some(addr) = local {
                        fdb.remove_static(FdbKey::new(0, addr));
                    }
                    fdb.flush_port(port)
                }
            };
            (event, flushed)
        })
        .collect()
}

/// Waits for each worker's answer, all within `within` (together, not
/// each); returns the workers that did not answer in time, in order.
fn await_answers(
    answers: impl IntoIterator<Item = (usize, mpsc::Receiver<()>)>,
    within: Duration,
) -> Vec<usize> {
    let deadline = Instant::now() + within;
    answers
        .into_iter()
        .filter(|(_, answer)| {
            let left = deadline.saturating_duration_since(Instant::now());
            answer.recv_timeout(left).is_err()
        })
        .map(|(worker, _)| worker)
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use bridge::wire::MacAddr;

    const OWN: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
    const NEW: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);
    const STATION: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
    const ELSEWHERE: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);

    fn locate(fdb: &dyn Table, mac: MacAddr) -> Option<Location> {
        fdb.locate(&FdbKey::new(0, mac))
    }

    #[test]
    fn link_events_are_applied_to_the_table_by_their_owner() {
        let fdb = bridge::MacTable::<locks::Mutex>::new(bridge::FdbConfig::default());
        let (port, other) = (PortId(0), PortId(1));
        let learn = |mac| fdb.learn(FdbKey::new(0, mac), port, fdb.now());
        let address = |addr, old| LinkEvent::Address { port, addr, old };
        apply_links(&fdb, vec![address(OWN, None)]);
        assert_eq!(locate(&fdb, OWN), Some(Location::Local(port)));
        learn(STATION);
        fdb.learn(FdbKey::new(0, ELSEWHERE), other, fdb.now());
        // A link down flushes the port's learned stations, not its own
        // address, nor another port's stations.
        let applied = apply_links(&fdb, vec![LinkEvent::Down { port }]);
        assert_eq!(applied, [(LinkEvent::Down { port }, 1)]);
        assert_eq!(locate(&fdb, STATION), None);
        assert_eq!(locate(&fdb, OWN), Some(Location::Local(port)));
        assert_eq!(fdb.learned_len(), 1);
        // A new address replaces the old one's local entry.
        apply_links(&fdb, vec![address(NEW, Some(OWN))]);
        assert_eq!(locate(&fdb, OWN), None);
        assert_eq!(locate(&fdb, NEW), Some(Location::Local(port)));
        // Gone: the learned stations and the local entry go.
        learn(STATION);
        let gone = LinkEvent::Gone {
            port,
            local: Some(NEW),
        };
        assert_eq!(apply_links(&fdb, vec![gone.clone()]), [(gone, 1)]);
        assert_eq!(locate(&fdb, NEW), None);
        assert_eq!(fdb.learned_len(), 1);
    }
}
