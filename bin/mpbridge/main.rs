//! mpbridge: a learning bridge between taps and existing interfaces, with a
//! MAC table under the lock strategy of your choice, and the client that
//! operates a running one through its control socket.

mod capture;
mod client;
mod config;
mod control;
mod metrics;
mod ports;
mod protocol;
mod workers;

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use bridge::counters::{self, PortCounters};
use bridge::fdb::Seconds;
use bridge::monitor::{LinkEvent, LinkMonitor};
use bridge::port::raw::RingKind;
use bridge::{DropReason, FdbConfig, MacTable, Mode, PortId, Stopper, WorkerConfig};
use clap::{Args, Parser, Subcommand};
use locks::{Strategy, StrategyKind};
use ports::{open_ports, Kind, PortSpec};

/// The strategy used when `--lock` is not given: the fastest forwarding
/// path in docs/benchmarks.md.
const DEFAULT_LOCK: StrategyKind = StrategyKind::Epoch;
/// Receive buffers hold a whole 64 KiB offloaded segment and its header.
const FRAME_CAPACITY: usize = 65_536 + 64;

#[derive(Parser)]
#[command(
    name = "mpbridge",
    version,
    about = "A software Ethernet learning bridge whose MAC table runs under a chosen lock strategy",
    after_help = "Logging: RUST_LOG (e.g. RUST_LOG=debug) or -v/-vv."
)]
struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// The bridge's name; its control socket is /run/mpbridge/NAME.sock.
    #[arg(long, global = true, default_value = "mpbridge", value_parser = bridge_name)]
    name: String,
    /// The control socket's path, instead of the one --name gives.
    #[arg(long, global = true, value_name = "PATH")]
    ctl: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    fn socket(&self) -> std::path::PathBuf {
        self.ctl
            .clone()
            .unwrap_or_else(|| protocol::default_socket(&self.name))
    }
}

/// A bridge name: what a file name in /run/mpbridge may safely be.
fn bridge_name(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 64
        && !text.starts_with('.')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "invalid bridge name '{text}' (1 to 64 letters, digits, '-', '_' or '.')"
        ))
    }
}

#[derive(Subcommand)]
enum Command {
    /// Bridge two or more ports until SIGTERM or SIGINT.
    Run(RunArgs),
    /// Show or change the MAC table of a running bridge.
    #[command(subcommand)]
    Fdb(FdbCommand),
    /// Add or remove a port of a running bridge.
    #[command(subcommand)]
    Port(PortCommand),
    /// Apply the configuration file's ports and static entries again.
    Reload,
    /// Change the MAC table's lock strategy while traffic flows.
    #[command(subcommand)]
    Lock(LockCommand),
    /// Write a port's frames as pcapng (tcpdump, tshark and Wireshark read
    /// it), with each frame's direction.
    Capture {
        /// The port, as given to --port (or its interface name).
        port: String,
        /// Received frames, sent frames, or both.
        #[arg(long, value_enum, default_value_t = CaptureDirection::Both)]
        direction: CaptureDirection,
        /// Stop after this many frames (otherwise: until interrupted).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Write to FILE instead of stdout.
        #[arg(short = 'w', value_name = "FILE")]
        file: Option<std::path::PathBuf>,
        /// Only the frames of this worker's queue.
        #[arg(long, value_name = "Q")]
        queue: Option<usize>,
    },
    /// A running bridge's counters: ports, workers, the table, the lock.
    Stats {
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum CaptureDirection {
    In,
    Out,
    Both,
}

#[derive(Subcommand)]
enum LockCommand {
    /// Move the table to STRATEGY: workers finish their batch, the entries
    /// move over with their ages, and forwarding resumes.
    Set {
        /// mutex, rwlock, rmlock, sharded, rcu or epoch.
        strategy: String,
    },
}

#[derive(Subcommand)]
enum PortCommand {
    /// Add a port: tap:NAME or raw:IFNAME. Every worker gets a queue of it.
    Add {
        /// tap:NAME or raw:IFNAME.
        #[arg(value_name = "tap:NAME|raw:IFNAME")]
        port: String,
    },
    /// Remove a port (at least two stay); its table entries go with it.
    Del {
        /// The port, as given to --port or port add (or its interface name).
        port: String,
    },
}

#[derive(Subcommand)]
enum FdbCommand {
    /// List the entries: MAC, port, VLAN, state (learned, static, local), age.
    Show {
        /// Only this port's entries.
        #[arg(long)]
        port: Option<String>,
        /// Only this VLAN's entries (0: untagged).
        #[arg(long, value_parser = client::parse_vlan)]
        vlan: Option<u16>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Add a static entry: fdb add MAC port PORT [vlan VID] [dst IP] (dst:
    /// on a VXLAN port, the VTEP the station is behind).
    Add {
        /// The station's address.
        mac: String,
        /// port PORT [vlan VID] [dst IP]
        #[arg(num_args = 0.., value_name = "port PORT [vlan VID] [dst IP]")]
        words: Vec<String>,
    },
    /// Remove an entry: fdb del MAC [vlan VID].
    Del {
        /// The station's address.
        mac: String,
        /// [vlan VID]
        #[arg(num_args = 0.., value_name = "vlan VID")]
        words: Vec<String>,
    },
    /// Remove learned entries: fdb flush [port PORT].
    Flush {
        /// [port PORT]
        #[arg(num_args = 0.., value_name = "port PORT")]
        words: Vec<String>,
    },
}

#[derive(Args)]
struct RunArgs {
    /// A port: tap:NAME (a tap that mpbridge owns: created if it does not
    /// exist, removed at exit if mpbridge created it; needs CAP_NET_ADMIN)
    /// or raw:IFNAME (an existing interface through AF_PACKET, promiscuous:
    /// a NIC, a veth, or a VM's tap on its host side; needs CAP_NET_RAW),
    /// or vxlan:NAME,vni=N,local=IP[,port=4789][,remote=IP]...[,learning=off]
    /// (a VXLAN segment over UDP to the listed VTEPs, RFC 7348). Repeat for
    /// each port; at least two. With --vlan-filtering, VLAN options may
    /// follow: ,access=VID (untagged in and out, in VLAN VID), ,trunk=LIST
    /// (tagged, LIST like 10,20,100-110), ,native=VID (with trunk: untagged
    /// frames belong to VID and leave untagged).
    #[arg(
        long = "port",
        value_name = "tap:NAME|raw:IFNAME|vxlan:NAME,...[,OPTIONS]",
        required_unless_present = "config"
    )]
    ports: Vec<String>,
    /// 802.1Q VLAN filtering, as the Linux bridge's vlan_filtering 1: ports
    /// are members of VLANs (their --port options; without any, VLAN 1
    /// untagged), frames enter and leave only member ports, and learning
    /// and flooding are per VLAN.
    #[arg(long)]
    vlan_filtering: bool,
    /// A TOML file with the bridge's settings, ports and static entries
    /// (docs/control.md); options given on the command line win over it.
    /// SIGHUP or `mpbridge reload` applies its ports and static entries
    /// again.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// MAC table lock strategy [possible values: mutex, rwlock, rmlock,
    /// sharded, rcu, epoch].
    #[arg(long, value_name = "STRATEGY", default_value_t = DEFAULT_LOCK.name().to_owned())]
    lock: String,
    /// Forwarding threads; each owns one queue of every port.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// Seconds after which a silent station is forgotten.
    #[arg(long, value_name = "SECONDS", default_value_t = FdbConfig::DEFAULT_AGE_SECS)]
    age: Seconds,
    /// Most learned stations (0: no limit). Beyond it new stations are not
    /// learned; their frames are still forwarded (flooded).
    #[arg(long, value_name = "N", default_value_t = FdbConfig::DEFAULT_MAX_ENTRIES)]
    max_entries: usize,
    /// bridge: a learning bridge. relay: exactly two ports, every frame to
    /// the other one, no MAC table (a reference for measurements, like
    /// OpenBSD's tpmr).
    #[arg(long, value_enum, default_value_t = ModeArg::Bridge)]
    mode: ModeArg,
    /// Workers busy-poll their queues instead of sleeping until frames
    /// arrive (lower latency, one core per worker always busy).
    #[arg(long)]
    poll: bool,
    /// How raw ports' receive rings hand frames over. frame: each frame as
    /// it arrives (TPACKET_V2). block: in blocks, when one is full or after
    /// 1 ms (TPACKET_V3): fewer wake-ups under load, up to 1 ms more
    /// latency per frame on a quiet link.
    #[arg(long, value_enum, default_value_t = RxRingArg::Frame)]
    rx_ring: RxRingArg,
    /// Keep every capability after the ports are open (by default all are
    /// dropped, and no-new-privileges is set).
    #[arg(long)]
    keep_caps: bool,
    /// The group that may use the control socket besides root.
    #[arg(long, value_name = "GROUP")]
    ctl_group: Option<String>,
    /// Serve the counters for Prometheus at http://ADDR:PORT/metrics
    /// (PORT alone: 127.0.0.1:PORT; [ADDR6]:PORT for IPv6).
    #[arg(long, value_name = "ADDR:PORT", value_parser = metrics::parse_listen)]
    metrics: Option<std::net::SocketAddr>,
    /// CPUs the workers may run on (a list like 0-3,8), each worker pinned
    /// to one in turn. By default workers are pinned away from the CPUs
    /// that take raw ports' receive work, where those are known and others
    /// are free.
    #[arg(long, value_name = "LIST", value_parser = bridge::port::placement::parse_cpu_list)]
    cpus: Option<bridge::port::placement::CpuSet>,
    /// Count the MAC table's lock statistics (lock-based strategies), for
    /// `mpbridge stats`; each lock is then tried before it is taken.
    #[arg(long)]
    lockstat: bool,
    /// Fault injection for tests of the daemon's own fault handling.
    #[arg(long, value_enum, hide = true)]
    inject_fault: Option<InjectedFault>,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum InjectedFault {
    /// Worker 0 panics as soon as it starts.
    WorkerPanic,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum ModeArg {
    Bridge,
    Relay,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RxRingArg {
    Frame,
    Block,
}

/// Tells a service manager we are ready, when one asked (sd_notify).
fn notify_ready() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let path = path.to_string_lossy().into_owned();
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(&path),
    };
    let sent = addr.and_then(|addr| UnixDatagram::unbound()?.send_to_addr(b"READY=1", &addr));
    if let Err(error) = sent {
        log::warn!("cannot notify {path}: {error}");
    }
}

/// Writes `text` to standard error; a closed or broken stderr (a service
/// manager's log gone, a pipe's reader gone) is not a reason to fail.
fn say(text: &str) {
    let _ = io::stderr().write_all(text.as_bytes());
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it
/// starts later, so that they arrive only through `wait_for_signal`.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset and sigaddset initialise
    // it, and pthread_sigmask only reads it.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for a blocked signal in `set`; returns it, if any.
fn wait_for_signal(set: &libc::sigset_t, timeout: Duration) -> Option<libc::c_int> {
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` and `timeout` are valid for the call; no siginfo wanted.
    #[allow(unsafe_code)]
    let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &timeout) };
    (signal > 0).then_some(signal)
}

fn report(ports: &[(PortId, PortSpec)], sets: &[Arc<[PortCounters]>], fdb: String) -> String {
    let totals = counters::sum(sets.iter().map(|set| &set[..]));
    let mut out = String::from("final counters:\n");
    for (id, spec) in ports {
        let stats = totals.get(id.index()).copied().unwrap_or_default();
        let drops: Vec<String> = DropReason::ALL
            .iter()
            .map(|r| format!("{}={}", r.name(), stats.dropped(*r)))
            .collect();
        let _ = writeln!(
            out,
            "  {}: rx {} frames {} bytes, tx {} frames {} bytes, drops {}, rx_oversize {}, rx_errors {}, tx_dropped {}, tx_errors {}, moves {}",
            spec.label(),
            stats.rx_frames,
            stats.rx_bytes,
            stats.tx_frames,
            stats.tx_bytes,
            drops.join(" "),
            stats.rx_oversize,
            stats.rx_errors,
            stats.tx_dropped,
            stats.tx_errors,
            stats.moves
        );
    }
    out.push_str(&fdb);
    out
}

fn run<S: Strategy>(
    args: &RunArgs,
    specs: &[PortSpec],
    signals: &libc::sigset_t,
    name: &str,
    socket: &std::path::Path,
    file: Option<(std::path::PathBuf, config::Config)>,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    let workers = usize::from(args.workers);
    let config = FdbConfig {
        max_entries: args.max_entries,
        age_secs: args.age,
    };
    let fdb = Arc::new(MacTable::<S>::new(config));
    // First, so that a second bridge of the same name touches no port.
    control::ControlSocket::check_free(socket)?;
    // Before any port is opened (an address in use touches none) and before
    // privileges are dropped (a port below 1024 needs them).
    let metrics = args.metrics.map(metrics::MetricsServer::bind).transpose()?;
    let port_settings = ports::PortSettings {
        max_entries: args.max_entries,
        age_secs: args.age,
        rx_ring: match args.rx_ring {
            RxRingArg::Frame => RingKind::Frame,
            RxRingArg::Block => RingKind::Block,
        },
    };
    let port_sets = open_ports(specs, workers, port_settings)?;
    let vxlans: std::collections::BTreeMap<_, _> = specs
        .iter()
        .zip(&port_sets[0])
        .filter_map(|(spec, queue)| match queue {
            bridge::port::LinkPort::Vxlan(port) => Some((spec.label(), Arc::clone(port.shared()))),
            _ => None,
        })
        .collect();
    let placement = place_workers(args.cpus.as_ref(), specs, workers)?;
    let control = control::ControlSocket::bind(socket, args.ctl_group.as_deref())?;
    if !args.keep_caps {
        drop_privileges()?;
    }
    let mut monitor = LinkMonitor::new();
    for (index, spec) in specs.iter().enumerate() {
        if spec.kind == Kind::Raw {
            monitor.watch(PortId(index as u16), &spec.name);
        }
    }
    report_links(|port| specs[port.index()].label(), monitor.tick(&*fdb));
    let monitor = Arc::new(std::sync::Mutex::new(monitor));
    let stopper = Arc::new(Stopper::new().map_err(|e| format!("cannot create an eventfd: {e}"))?);
    let worker_config = WorkerConfig {
        frame_capacity: FRAME_CAPACITY,
        mode: match args.mode {
            ModeArg::Bridge => Mode::Bridge,
            ModeArg::Relay => Mode::Relay,
        },
        busy_poll: args.poll,
        lockstat: args.lockstat,
        vlan_filtering: args.vlan_filtering,
        ..WorkerConfig::default()
    };
    if args.lockstat {
        locks::lockstat::enable(true);
    }
    let sets = port_sets
        .into_iter()
        .enumerate()
        .map(|(id, ports)| {
            let ports = ports.into_iter().map(Some).collect();
            let vlans = specs.iter().map(PortSpec::vlans).collect();
            (
                ports,
                bridge::worker::WorkerParts::new(id).with_vlans(vlans),
            )
        })
        .collect();
    let panic_first = args.inject_fault == Some(InjectedFault::WorkerPanic);
    let first = workers::start(
        Arc::clone(&fdb),
        sets,
        worker_config,
        &placement.workers,
        panic_first,
    )?;
    let counter_sets = first.counters.clone();
    let started_rx = first.started;
    let labels: Vec<String> = specs.iter().map(PortSpec::label).collect();
    let shared = Arc::new(control::Bridge {
        name: name.to_owned(),
        ports: std::sync::Mutex::new(specs.iter().cloned().map(Some).collect()),
        controls: std::sync::Mutex::new(first.controls),
        generation: std::sync::Mutex::new(first.generation),
        worker_config,
        placement: placement.workers.clone(),
        monitor: Arc::clone(&monitor),
        relay: args.mode == ModeArg::Relay,
        captures: first.captures,
        config: std::sync::Mutex::new(file.clone()),
        port_settings,
        vxlans: std::sync::Mutex::new(vxlans),
        keep_caps: args.keep_caps,
        fdb: std::sync::RwLock::new(fdb.clone() as Arc<dyn bridge::fdb::Table>),
        counters: counter_sets.clone(),
        workers: first.totals,
        started,
        lockstat: args.lockstat,
    });
    if let Some((_, file)) = &file {
        shared.add_statics(&file.statics)?;
    }
    let metrics_thread = match metrics {
        Some(server) => {
            let bridge = Arc::clone(&shared);
            let stopper = Arc::clone(&stopper);
            let addr = server.local_addr();
            let thread = thread::Builder::new()
                .name("metrics".to_owned())
                .spawn(move || server.serve(|| control::stats(&bridge), || stopper.is_stopped()))
                .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
            log::info!("metrics at http://{addr}/metrics");
            Some(thread)
        }
        None => None,
    };
    let control_thread = {
        let stopper = Arc::clone(&stopper);
        let bridge = Arc::clone(&shared);
        let path = control.path().display().to_string();
        let thread = thread::Builder::new()
            .name("control".to_owned())
            .spawn(move || control::serve(control, bridge, stopper))
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        log::info!("control socket {path}");
        thread
    };
    log::info!(
        "ageing {} s, at most {} learned stations",
        args.age,
        args.max_entries
    );
    let mode = match args.mode {
        ModeArg::Bridge => "",
        ModeArg::Relay => " mode relay",
    };
    let poll = if args.poll { " poll" } else { "" };
    let rx_ring = match args.rx_ring {
        RxRingArg::Frame => "",
        RxRingArg::Block => " rx-ring block",
    };
    let vlans = if args.vlan_filtering {
        " vlan-filtering"
    } else {
        ""
    };
    // A worker that died before it started must not be announced as ready:
    // the channel ends when every worker has sent or died.
    let started = started_rx.iter().count();
    let mut outcome = shared.check_workers();
    if outcome.is_ok() && started < workers {
        // The dead worker's thread may still be unwinding: wait for it to
        // end so that the error can name it.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while outcome.is_ok() && std::time::Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
            outcome = shared.check_workers();
        }
        if outcome.is_ok() {
            outcome = Err(format!(
                "{} of {workers} workers did not start; stopping the bridge",
                workers - started
            ));
        }
    }
    if outcome.is_ok() {
        say(&format!(
            "mpbridge: ready: ports {} lock {} workers {}{mode}{poll}{rx_ring}{vlans} cpus {}\n",
            labels.join(","),
            shared.fdb().kind(),
            workers,
            placement_text(&placement)
        ));
        notify_ready();
    }
    while outcome.is_ok() {
        match wait_for_signal(signals, Duration::from_secs(1)) {
            Some(libc::SIGHUP) if args.config.is_none() => {
                log::info!("SIGHUP: the bridge runs without --config; nothing to reload");
                continue;
            }
            Some(libc::SIGHUP) => {
                match shared.reload() {
                    Ok(changes) => log::info!("SIGHUP: reloaded: {changes}"),
                    // A bad file keeps the running configuration.
                    Err(error) => log::warn!("SIGHUP: {error}; nothing changed"),
                }
                continue;
            }
            Some(signal) => {
                log::info!("signal {signal}: stopping");
                break;
            }
            None => {}
        }
        let fdb = shared.fdb();
        let aged = fdb.age(fdb.now());
        if aged > 0 {
            log::debug!("aged out {aged} stations");
        }
        let events = monitor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tick(&*fdb);
        report_links(|port| shared.label(port), events);
        outcome = shared.check_workers();
    }
    stopper.stop();
    if control_thread.join().is_err() && outcome.is_ok() {
        outcome = Err("the control thread panicked".to_owned());
    }
    if let Some(thread) = metrics_thread {
        if thread.join().is_err() && outcome.is_ok() {
            outcome = Err("the metrics thread panicked".to_owned());
        }
    }
    // A panic was reported by check_workers (or here, if it came while
    // stopping); its message went to stderr through the panic hook.
    if let Err(error) = shared.stop_workers() {
        if outcome.is_ok() {
            outcome = Err(format!("{error} while stopping"));
        }
    }
    let fdb = shared.fdb();
    let stats = fdb.stats();
    let fdb_line = format!(
        "  fdb: {} entries ({} learned), learned {}, moved {}, refused {}, aged {}\n",
        fdb.len(),
        fdb.learned_len(),
        stats.learned,
        stats.moved,
        stats.refused,
        stats.aged
    );
    say(&report(&shared.live_ports(), &counter_sets, fdb_line));
    outcome
}

/// Logs what the link monitor saw.
fn report_links(label: impl Fn(PortId) -> String, events: Vec<LinkEvent>) {
    for event in events {
        match event {
            LinkEvent::Down { port, flushed } => log::warn!(
                "{}: link down; flushed {flushed} learned stations",
                label(port)
            ),
            LinkEvent::Up { port } => log::info!("{}: link up", label(port)),
            LinkEvent::Address { port, addr } => {
                log::info!("{}: own address {addr}, kept for the host", label(port))
            }
            LinkEvent::Gone { port, flushed } => log::warn!(
                "{}: interface deleted; the port is out of the bridge (flushed {flushed} stations)",
                label(port)
            ),
        }
    }
}

/// Drops capabilities once the ports are open: the effective set is
/// emptied (sends and receives on open descriptors are not checked again,
/// and closing a tap mpbridge made removes it without one), and only
/// CAP_NET_ADMIN and CAP_NET_RAW stay permitted, which the control thread
/// raises for as long as it opens a port added at run time. No-new-privileges
/// is set, so that a compromised daemon cannot gain any through an exec.
fn drop_privileges() -> Result<(), String> {
    use caps::{CapSet, Capability};
    let fail = |what: &str, error: caps::errors::CapsError| format!("cannot drop {what}: {error}");
    let kept: caps::CapsHashSet = [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW]
        .into_iter()
        .filter(|cap| caps::has_cap(None, CapSet::Permitted, *cap).unwrap_or(false))
        .collect();
    // The bounding set first: dropping from it needs CAP_SETPCAP, which the
    // effective set loses below.
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false) {
        for cap in caps::all() {
            if !kept.contains(&cap) {
                caps::drop(None, CapSet::Bounding, cap).map_err(|e| fail("the bounding set", e))?;
            }
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("ambient capabilities", e))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| fail("inheritable capabilities", e))?;
    caps::clear(None, CapSet::Effective).map_err(|e| fail("effective capabilities", e))?;
    caps::set(None, CapSet::Permitted, &kept).map_err(|e| fail("permitted capabilities", e))?;
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers and touches no memory.
    #[allow(unsafe_code)]
    let ret = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if ret != 0 {
        return Err(format!(
            "cannot set no-new-privileges: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let (mut cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) if !error.use_stderr() => {
            // --help and --version.
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            // One line, never the usage dump.
            let text = error.to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            // What the usage dump would have listed on a line of its own.
            let values = match error.get(clap::error::ContextKind::ValidValue) {
                Some(clap::error::ContextValue::Strings(values)) => {
                    format!(" (possible values: {})", values.join(", "))
                }
                _ => String::new(),
            };
            say(&format!(
                "mpbridge: {}{values}\n",
                line.trim_start_matches("error: ")
            ));
            return ExitCode::from(2);
        }
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
    let command = std::mem::replace(&mut cli.command, Command::Reload);
    let mut args = match command {
        Command::Run(args) => args,
        other => {
            let socket = cli.socket();
            return match operate(&cli.name, &socket, other) {
                Ok(()) => ExitCode::SUCCESS,
                Err(failure) => {
                    say(&format!("mpbridge: {}\n", failure.message));
                    ExitCode::from(failure.code)
                }
            };
        }
    };

    let config = match merge_config(&mut cli, &mut args, &matches) {
        Ok(config) => config,
        Err(error) => {
            say(&format!("mpbridge: {error}\n"));
            return ExitCode::from(2);
        }
    };
    let socket = cli.socket();
    let lock: StrategyKind = match args.lock.parse() {
        Ok(lock) => lock,
        Err(error) => {
            say(&format!("mpbridge: {error}\n"));
            return ExitCode::from(2);
        }
    };
    let specs = match args
        .ports
        .iter()
        .map(|s| PortSpec::parse(s))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(specs) => specs,
        Err(error) => {
            say(&format!("mpbridge: {error}\n"));
            return ExitCode::from(2);
        }
    };
    if specs.len() < 2 {
        say(&format!(
            "mpbridge: a bridge needs at least two ports (got {})\n",
            specs.len()
        ));
        return ExitCode::from(2);
    }
    if args.mode == ModeArg::Relay && specs.len() != 2 {
        say(&format!(
            "mpbridge: --mode relay needs exactly two ports (got {})\n",
            specs.len()
        ));
        return ExitCode::from(2);
    }
    if let Some(spec) = specs.iter().find(|s| s.vlans.is_some()) {
        if !args.vlan_filtering || args.mode == ModeArg::Relay {
            say(&format!(
                "mpbridge: port {} has VLAN options: they need --vlan-filtering (and a bridge, not a relay)\n",
                spec.describe()
            ));
            return ExitCode::from(2);
        }
    }
    if args.vlan_filtering && args.mode == ModeArg::Relay {
        say("mpbridge: --vlan-filtering needs --mode bridge\n");
        return ExitCode::from(2);
    }
    let signals = block_signals();
    match locks::with_strategy!(lock, S => run::<S>(&args, &specs, &signals, &cli.name, &socket, config))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            say(&format!("mpbridge: {error}\n"));
            ExitCode::FAILURE
        }
    }
}

/// Runs one client command against the bridge at `socket`.
fn operate(name: &str, socket: &std::path::Path, command: Command) -> Result<(), client::Failure> {
    use protocol::Request;
    match command {
        Command::Run(_) => unreachable!("handled by main"),
        Command::Stats { json } => {
            let result = client::call(name, socket, Request::Stats)?;
            client::print_stats(result, json)
        }
        Command::Capture {
            port,
            direction,
            count,
            file,
            queue,
        } => {
            let direction = match direction {
                CaptureDirection::In => "in",
                CaptureDirection::Out => "out",
                CaptureDirection::Both => "both",
            };
            let request = Request::Capture {
                port,
                direction: direction.to_owned(),
                count,
                queue,
            };
            client::capture(name, socket, request, file.as_deref())
        }
        Command::Port(PortCommand::Add { port }) => {
            PortSpec::parse(&port).map_err(|message| client::Failure { code: 2, message })?;
            let result = client::call(name, socket, Request::PortAdd { port })?;
            println!("added {}", result["port"].as_str().unwrap_or("?"));
            Ok(())
        }
        Command::Lock(LockCommand::Set { strategy }) => {
            strategy
                .parse::<StrategyKind>()
                .map_err(|e| client::Failure {
                    code: 2,
                    message: e.to_string(),
                })?;
            let result = client::call(name, socket, Request::LockSet { lock: strategy })?;
            println!(
                "lock {}: {} entries moved, forwarding paused {} us",
                result["lock"].as_str().unwrap_or("?"),
                result["entries"],
                result["pause_us"]
            );
            Ok(())
        }
        Command::Reload => {
            let result = client::call(name, socket, Request::Reload)?;
            let list = |key: &str| {
                result[key]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default()
            };
            println!(
                "reloaded: ports added [{}], removed [{}]; static entries added {}, removed {}",
                list("ports_added"),
                list("ports_removed"),
                result["static_added"],
                result["static_removed"]
            );
            let restart = list("needs_restart");
            if !restart.is_empty() {
                println!("changed, needs a restart to apply: {restart}");
            }
            Ok(())
        }
        Command::Port(PortCommand::Del { port }) => {
            let result = client::call(name, socket, Request::PortDel { port })?;
            println!("removed {}", result["removed"].as_str().unwrap_or("?"));
            Ok(())
        }
        Command::Fdb(FdbCommand::Show { port, vlan, json }) => {
            let result = client::call(name, socket, Request::FdbShow { port, vlan })?;
            client::print_fdb(result, json)
        }
        Command::Fdb(FdbCommand::Add { mac, mut words }) => {
            let mac = client::check_mac(&mac)?;
            // `dst IP` (a VXLAN port's VTEP), anywhere among the words.
            let dst = match words.iter().position(|w| w == "dst") {
                Some(at) if at + 1 < words.len() => {
                    let ip = words.remove(at + 1);
                    words.remove(at);
                    Some(ip)
                }
                Some(_) => {
                    return Err(client::Failure {
                        code: 2,
                        message: "'dst' needs a value".to_owned(),
                    })
                }
                None => None,
            };
            let (port, vlan) = client::keywords(&words, &["port", "vlan"])?;
            let port = port.ok_or_else(|| client::Failure {
                code: 2,
                message: "fdb add needs 'port PORT'".to_owned(),
            })?;
            let vlan = vlan.unwrap_or(0);
            client::call(
                name,
                socket,
                Request::FdbAdd {
                    mac,
                    port,
                    vlan,
                    dst,
                },
            )
            .map(|_| ())
        }
        Command::Fdb(FdbCommand::Del { mac, words }) => {
            let mac = client::check_mac(&mac)?;
            let (_, vlan) = client::keywords(&words, &["vlan"])?;
            let vlan = vlan.unwrap_or(0);
            client::call(name, socket, Request::FdbDel { mac, vlan }).map(|_| ())
        }
        Command::Fdb(FdbCommand::Flush { words }) => {
            let (port, _) = client::keywords(&words, &["port"])?;
            let result = client::call(name, socket, Request::FdbFlush { port })?;
            if let Some(flushed) = result.get("flushed") {
                println!("flushed {flushed} entries");
            }
            Ok(())
        }
    }
}

/// Reads `--config` and fills in what the command line left to it (an
/// option given on the command line wins); returns the file and its
/// contents for reloads.
fn merge_config(
    cli: &mut Cli,
    args: &mut RunArgs,
    matches: &clap::ArgMatches,
) -> Result<Option<(std::path::PathBuf, config::Config)>, String> {
    use clap::parser::ValueSource;
    let Some(path) = args.config.clone() else {
        return Ok(None);
    };
    let config = config::load(&path)?;
    let run = matches.subcommand_matches("run");
    // Whether option `id` was on the command line (global ones such as
    // --name may stand before or after `run`).
    let given = |id: &str| {
        let source = |m: &clap::ArgMatches| {
            m.ids().any(|known| known.as_str() == id)
                && m.value_source(id) == Some(ValueSource::CommandLine)
        };
        source(matches) || run.is_some_and(source)
    };
    if !args.ports.is_empty() {
        return Err(format!(
            "the ports come from {}: give no --port with --config",
            path.display()
        ));
    }
    args.ports = config.ports.iter().map(PortSpec::describe).collect();
    if !given("vlan_filtering") {
        if let Some(filtering) = config.vlan_filtering {
            args.vlan_filtering = filtering;
        }
    }
    if !given("lock") {
        if let Some(lock) = &config.lock {
            args.lock = lock.clone();
        }
    }
    if !given("workers") {
        if let Some(workers) = config.workers {
            args.workers = workers;
        }
    }
    if !given("age") {
        if let Some(age) = config.age {
            args.age = age;
        }
    }
    if !given("max_entries") {
        if let Some(max) = config.max_entries {
            args.max_entries = max;
        }
    }
    if !given("name") {
        if let Some(name) = &config.name {
            cli.name = name.clone();
        }
    }
    Ok(Some((path, config)))
}

/// Decides the workers' CPUs (see `bridge::port::placement::place`) and
/// warns, once per port, where receive work shares a CPU with a worker.
fn place_workers(
    cpus: Option<&bridge::port::placement::CpuSet>,
    specs: &[PortSpec],
    workers: usize,
) -> Result<bridge::port::placement::Placement, String> {
    use bridge::port::placement::{self, format_cpu_list, ReceiveCpus, System};
    let allowed: placement::CpuSet = {
        let affinity = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
            .map_err(|e| format!("cannot read this process's CPUs: {e}"))?;
        (0..nix::sched::CpuSet::count())
            .filter(|cpu| affinity.is_set(*cpu).unwrap_or(false))
            .collect()
    };
    let allowed = match cpus {
        Some(cpus) => {
            let outside: placement::CpuSet = cpus.difference(&allowed).copied().collect();
            if !outside.is_empty() {
                return Err(format!(
                    "--cpus {}: CPU {} not available to this process (it may use {})",
                    format_cpu_list(cpus),
                    format_cpu_list(&outside),
                    format_cpu_list(&allowed)
                ));
            }
            cpus.clone()
        }
        None => allowed,
    };
    let system = System::default();
    let ports: Vec<(String, ReceiveCpus)> = specs
        .iter()
        .filter(|spec| spec.kind == Kind::Raw)
        .map(|spec| (spec.label(), system.receive_cpus(&spec.name)))
        .collect();
    let plan = placement::place(&allowed, cpus.is_some(), workers, &ports);
    for (port, shared) in &plan.overlaps {
        log::warn!(
            "{port}: its receive work runs on CPU {}, where a worker runs too: under load \
             the worker will livelock; steer the receive work elsewhere (rps_cpus) or pick \
             other CPUs with --cpus",
            format_cpu_list(shared)
        );
    }
    Ok(plan)
}

/// The workers' CPUs for the ready line: `0,1` per worker, `any` unpinned.
fn placement_text(plan: &bridge::port::placement::Placement) -> String {
    plan.workers
        .iter()
        .map(|cpus| match cpus {
            Some(cpus) => bridge::port::placement::format_cpu_list(cpus),
            None => "any".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Pins the calling thread to `cpus`; a failure is logged, not fatal.
pub(crate) fn pin_to(cpus: &bridge::port::placement::CpuSet) {
    let mut set = nix::sched::CpuSet::new();
    for cpu in cpus {
        if set.set(*cpu).is_err() {
            log::warn!("cannot pin to CPU {cpu}: beyond this system's CPU set");
        }
    }
    if let Err(error) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
        log::warn!("cannot pin a worker to CPUs {cpus:?}: {error}");
    }
}
