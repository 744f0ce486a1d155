//! mpbridge: a learning bridge between taps and existing interfaces, with a
//! MAC table under the lock strategy of your choice.

use std::fmt::Write as _;
use std::io;
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use bridge::counters::{self, PortCounters};
use bridge::fdb::Seconds;
use bridge::port::{LinkPort, RawPort, TapPort};
use bridge::{DropReason, FdbConfig, MacTable, Mode, Stopper, Worker, WorkerConfig};
use clap::{Args, Parser, Subcommand};
use locks::{Strategy, StrategyKind};

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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Bridge two or more ports until SIGTERM or SIGINT.
    Run(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// A port: tap:NAME (a tap, created if it does not exist and removed at
    /// exit if mpbridge created it) or raw:IFNAME (an existing interface
    /// through AF_PACKET, promiscuous). Repeat for each port; at least two.
    #[arg(long = "port", value_name = "tap:NAME|raw:IFNAME", required = true)]
    ports: Vec<String>,
    /// MAC table lock strategy: mutex, rwlock, rmlock, sharded, rcu or epoch.
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
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum ModeArg {
    Bridge,
    Relay,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Tap,
    Raw,
}

struct PortSpec {
    kind: Kind,
    name: String,
}

impl PortSpec {
    fn parse(spec: &str) -> Result<PortSpec, String> {
        let (kind, name) = match spec.split_once(':') {
            Some(("tap", name)) => (Kind::Tap, name),
            Some(("raw", name)) => (Kind::Raw, name),
            _ => {
                return Err(format!(
                    "invalid port '{spec}' (expected tap:NAME or raw:IFNAME)"
                ))
            }
        };
        if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ', ':']) {
            return Err(format!(
                "invalid interface name in port '{spec}' (1 to 15 characters)"
            ));
        }
        Ok(PortSpec {
            kind,
            name: name.to_owned(),
        })
    }

    fn label(&self) -> String {
        match self.kind {
            Kind::Tap => format!("tap:{}", self.name),
            Kind::Raw => format!("raw:{}", self.name),
        }
    }
}

/// One line saying why a port could not be opened.
fn open_error(spec: &PortSpec, error: &io::Error) -> String {
    let reason = match error.raw_os_error() {
        Some(libc::ENODEV) => "no such interface".to_owned(),
        Some(libc::EPERM | libc::EACCES) => "permission denied (needs CAP_NET_ADMIN)".to_owned(),
        Some(libc::EBUSY) => "busy (a tap already opened without multi-queue?)".to_owned(),
        _ => error.to_string(),
    };
    format!("cannot open port {}: {reason}", spec.label())
}

/// Opens `workers` queues of each port: `result[w]` is worker `w`'s set.
fn open_ports(specs: &[PortSpec], workers: usize) -> Result<Vec<Vec<LinkPort>>, String> {
    let mut per_worker: Vec<Vec<LinkPort>> = (0..workers).map(|_| Vec::new()).collect();
    for spec in specs {
        let queues: Vec<LinkPort> = match spec.kind {
            Kind::Tap => {
                let tap = TapPort::open(&spec.name, workers).map_err(|e| open_error(spec, &e))?;
                if tap.existed {
                    log::info!("tap {} existed before and will stay", spec.name);
                }
                tap.queues.into_iter().map(LinkPort::Tap).collect()
            }
            Kind::Raw => RawPort::open(&spec.name, workers)
                .map_err(|e| open_error(spec, &e))?
                .into_iter()
                .map(LinkPort::Raw)
                .collect(),
        };
        for (set, queue) in per_worker.iter_mut().zip(queues) {
            set.push(queue);
        }
    }
    Ok(per_worker)
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

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts
/// later, so that they arrive only through `wait_for_signal`.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset and sigaddset initialise
    // it, and pthread_sigmask only reads it.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
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

fn report(specs: &[PortSpec], sets: &[Arc<[PortCounters]>], fdb: String) -> String {
    let totals = counters::sum(sets.iter().map(|set| &set[..]));
    let mut out = String::from("final counters:\n");
    for (spec, stats) in specs.iter().zip(&totals) {
        let drops: Vec<String> = DropReason::ALL
            .iter()
            .map(|r| format!("{}={}", r.name(), stats.dropped(*r)))
            .collect();
        let _ = writeln!(
            out,
            "  {}: rx {} frames {} bytes, tx {} frames {} bytes, drops {}, rx_oversize {}, rx_errors {}, tx_dropped {}, tx_errors {}",
            spec.label(),
            stats.rx_frames,
            stats.rx_bytes,
            stats.tx_frames,
            stats.tx_bytes,
            drops.join(" "),
            stats.rx_oversize,
            stats.rx_errors,
            stats.tx_dropped,
            stats.tx_errors
        );
    }
    out.push_str(&fdb);
    out
}

fn run<S: Strategy>(
    args: &RunArgs,
    specs: &[PortSpec],
    signals: &libc::sigset_t,
) -> Result<(), String> {
    let workers = usize::from(args.workers);
    let config = FdbConfig {
        max_entries: args.max_entries,
        age_secs: args.age,
    };
    let fdb = Arc::new(MacTable::<S>::new(config));
    let port_sets = open_ports(specs, workers)?;
    let stopper = Arc::new(Stopper::new().map_err(|e| format!("cannot create an eventfd: {e}"))?);
    let worker_config = WorkerConfig {
        frame_capacity: FRAME_CAPACITY,
        mode: match args.mode {
            ModeArg::Bridge => Mode::Bridge,
            ModeArg::Relay => Mode::Relay,
        },
        busy_poll: args.poll,
        ..WorkerConfig::default()
    };
    let mut counter_sets = Vec::new();
    let mut handles = Vec::new();
    for (id, ports) in port_sets.into_iter().enumerate() {
        let mut worker = Worker::new(Arc::clone(&fdb), ports, worker_config);
        counter_sets.push(worker.counters());
        let stopper = Arc::clone(&stopper);
        let handle = thread::Builder::new()
            .name(format!("worker{id}"))
            .spawn(move || worker.run(&stopper))
            .map_err(|e| format!("cannot start worker {id}: {e}"))?;
        handles.push(handle);
    }
    let labels: Vec<String> = specs.iter().map(PortSpec::label).collect();
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
    eprintln!(
        "mpbridge: ready: ports {} lock {} workers {}{mode}{poll}",
        labels.join(","),
        S::KIND,
        workers
    );
    notify_ready();

    let signal = loop {
        if let Some(signal) = wait_for_signal(signals, Duration::from_secs(1)) {
            break signal;
        }
        let aged = fdb.age(fdb.clock().now());
        if aged > 0 {
            log::debug!("aged out {aged} stations");
        }
    };
    log::info!("signal {signal}: stopping");
    stopper.stop();
    for handle in handles {
        if handle.join().is_err() {
            log::error!("a worker panicked");
        }
    }
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
    eprint!("{}", report(specs, &counter_sets, fdb_line));
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => {
            // --help and --version.
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            // One line, never the usage dump.
            let text = error.to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("mpbridge: {}", line.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
    let Command::Run(args) = cli.command;

    let lock: StrategyKind = match args.lock.parse() {
        Ok(lock) => lock,
        Err(error) => {
            eprintln!("mpbridge: {error}");
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
            eprintln!("mpbridge: {error}");
            return ExitCode::from(2);
        }
    };
    if specs.len() < 2 {
        eprintln!(
            "mpbridge: a bridge needs at least two ports (got {})",
            specs.len()
        );
        return ExitCode::from(2);
    }
    if args.mode == ModeArg::Relay && specs.len() != 2 {
        eprintln!(
            "mpbridge: --mode relay needs exactly two ports (got {})",
            specs.len()
        );
        return ExitCode::from(2);
    }
    let signals = block_signals();
    match locks::with_strategy!(lock, S => run::<S>(&args, &specs, &signals)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mpbridge: {error}");
            ExitCode::FAILURE
        }
    }
}
