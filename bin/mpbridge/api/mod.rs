//! The bridge's state and its one owner. `BridgeState` holds what the
//! control plane knows of a running bridge (ports, workers, the MAC table of
//! the chosen strategy, the configuration file, the link monitor) in plain
//! fields, and only the owner thread (the daemon's main thread) touches it:
//! the control socket, `/metrics`, signals and the once-a-second tick reach
//! it as `Event`s on one queue (`queue.rs`: bounded, in lanes by kind),
//! so port changes, reloads, lock switches and link events happen one
//! after another by construction.
//!
//! The owner's work is split by topic: `ports`, `links`, `fdb`, `stats`,
//! `stp`, `snooping`, `reload`, `lock`, `capture`, the workers' `health`,
//! and the `board` it publishes for other threads.

mod board;
mod capture;
mod evpn;
mod fdb;
mod health;
mod links;
mod lock;
mod ports;
mod reload;
mod snooping;
mod stats;
mod stp;

pub use board::{Board, FdbView, Published};
pub use evpn::evpn_vlan;
pub use links::apply_links;
use ports::{find_port, live_ports_of, port_label};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bridge::capture::CaptureHub;
use bridge::counters::{PortCounters, WorkerCounters};
use bridge::fdb::Table;
use bridge::monitor::LinkMonitor;
use bridge::port::placement::CpuSet;
use bridge::port::vhost::Device as VhostDevice;
use bridge::port::vxlan::VxlanShared;
use bridge::port::LinkQueue;
use bridge::worker::{PortControl, PortEvent};
use bridge::{PortId, WorkerConfig};

use crate::api_error::ApiError;
use crate::capture::CaptureGrant;
use crate::config::Config;
use crate::mcast::Snooper;
use crate::ports::{PortSettings, PortSpec};
use crate::protocol::{self, Request, Response};
use crate::queue::{Event, EventQueue, Refused, Reply};
use crate::stp::SpanningTree;
use crate::watchdog::{self, Watchdog};
use crate::workers::Generation;

/// How long the workers may take to stop (a lock switch, the bridge's
/// stop); one still running then is stuck and left behind.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(3);

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
        Refused::Closed => ApiError::Stopping,
        Refused::Full => ApiError::Busy,
    }
}

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
    /// EVPN ports' mirrors; `None` where rtnetlink could not be opened.
    evpn: Option<crate::evpn::Evpn>,
    /// The owner's queue, for its figures.
    queue: Arc<EventQueue>,
    /// Per port with `guard=on`: whether a BPDU disabled it, and how often
    /// one did.
    guards: BTreeMap<PortId, (bool, u64)>,
    /// Whom each port `port add` named an owner for was added for.
    owners: BTreeMap<PortId, protocol::PortOwner>,
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
    /// EVPN ports' mirrors, those of the first ports made.
    pub evpn: Option<crate::evpn::Evpn>,
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
            owners: BTreeMap::new(),
            links_known: None,
            stp: parts.stp,
            mcast: parts.mcast,
            evpn: parts.evpn,
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
            Request::PortAdd { port, owner } => {
                let added = self.add_port(&port)?;
                if let Some(owner) = owner {
                    self.owners.insert(PortId(added.id as u16), owner);
                }
                Response::PortAdded(added)
            }
            Request::PortDel { port } => Response::PortRemoved(self.remove_port(&port)?),
            Request::PortShow => Response::Ports(self.port_list()),
            Request::PortEnable { port } => Response::PortEnabled(self.enable_port(&port)?),
            Request::MdbShow => Response::Mdb(self.mdb_show()?),
            Request::Reload => Response::Reloaded(self.reload()?),
            Request::LockSet { lock } => Response::LockSwitched(self.switch_lock(lock)?),
            Request::Capture { .. } => return Err(ApiError::CaptureNotStreamed),
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
        self.reconcile_evpn();
        self.watch_workers();
        self.check_workers()
    }

    /// The MAC table now.
    pub fn fdb(&self) -> &Arc<dyn Table> {
        &self.fdb
    }

    /// Each worker's port counters.
    pub fn counters(&self) -> &[Arc<[PortCounters]>] {
        &self.counters
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
    pub(super) fn port(&self, name: &str) -> Result<PortId, ApiError> {
        find_port(&self.ports, name)
    }

    /// What `fdb show` reads, for any thread.
    pub(super) fn fdb_view(&self) -> FdbView {
        FdbView {
            fdb: Arc::clone(&self.fdb),
            ports: self.ports.clone(),
            vxlans: self.vxlans.clone(),
        }
    }
}
