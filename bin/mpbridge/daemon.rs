//! The daemon's life: open the ports, start the workers, drop privileges,
//! start the control, metrics and signal threads, then own the bridge's
//! state on this (the main) thread, answering their events one at a time
//! and ticking once a second, until a signal or a fault stops it; then
//! stop everything and report the final counters.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use bridge::counters::{self, PortCounters};
use bridge::monitor::LinkMonitor;
use bridge::port::raw::RingKind;
use bridge::{FdbConfig, MacTable, Mode, PortId, Stopper, WorkerConfig};
use locks::Strategy;
use nix::sys::signal::SigSet;

use crate::api::{self, BridgeState, Caller};
use crate::cli::{self, Cli, InjectedFault, ModeArg, RunArgs, RxRingArg};
use crate::ports::{self, open_ports, PortKind, PortSpec};
use crate::protocol::CounterLine;
use crate::queue::{self, Event, EventQueue};
use crate::system::say;
use crate::{config, control, evpn, metrics, system, workers};

/// Receive buffers hold a whole 64 KiB offloaded segment and its header.
const FRAME_CAPACITY: usize = 65_536 + 64;
/// How often the owner ages the table, looks at links and at the workers.
const TICK: Duration = Duration::from_secs(1);

/// `mpbridge run`: fills in what the configuration file gives, checks the
/// options together, and runs the bridge; the exit code says how it ended
/// (2: the options, 1: the bridge failed).
pub fn main(mut cli: Cli, mut args: RunArgs, matches: &clap::ArgMatches) -> ExitCode {
    let file = match config::merge(&mut cli.name, &mut args, matches) {
        Ok(file) => file,
        Err(error) => {
            say(&format!("mpbridge: {error}\n"));
            return ExitCode::from(2);
        }
    };
    if let Err(error) = cli::check(&args) {
        say(&format!("mpbridge: {error}\n"));
        return ExitCode::from(2);
    }
    if let Err(error) = evpn::check(&args.ports, &cli.name) {
        say(&format!("mpbridge: {error}\n"));
        return ExitCode::from(2);
    }
    let socket = cli.socket();
    let signals = match system::block_signals() {
        Ok(signals) => signals,
        Err(error) => {
            say(&format!("mpbridge: {error}\n"));
            return ExitCode::FAILURE;
        }
    };
    match locks::with_strategy!(args.lock, S => run::<S>(&args, signals, &cli.name, &socket, file))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            say(&format!("mpbridge: {error}\n"));
            ExitCode::FAILURE
        }
    }
}

/// Runs the bridge until SIGINT or SIGTERM, or until a fault stops it.
fn run<S: Strategy>(
    args: &RunArgs,
    signals: SigSet,
    name: &str,
    socket: &std::path::Path,
    file: Option<(std::path::PathBuf, config::Config)>,
) -> Result<(), String> {
    let specs = &args.ports[..];
    let workers = usize::from(args.workers);
    let config = FdbConfig {
        max_entries: args.max_entries,
        age_secs: args.age,
    };
    let fdb = Arc::new(MacTable::<S>::new(config));
    // First, so that a second bridge of the same name touches no port.
    control::ControlSocket::check_free(socket)?;
    let access = control::Access::new(
        args.ctl_group.as_deref(),
        args.ctl_ro_group.as_deref(),
        &args.vhost_dir,
    )?;
    access.make_vhost_dir()?;
    // Before any port is opened (an address in use touches none) and before
    // privileges are dropped (a port below 1024 needs them).
    let metrics = args.metrics.map(metrics::MetricsServer::bind).transpose()?;
    let port_settings = ports::PortSettings {
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
            bridge::port::LinkQueue::Vxlan(port) => Some((spec.label(), Arc::clone(port.shared()))),
            _ => None,
        })
        .collect();
    let vhosts: std::collections::BTreeMap<_, _> = specs
        .iter()
        .zip(&port_sets[0])
        .filter_map(|(spec, queue)| match queue {
            bridge::port::LinkQueue::Vhost(port) => Some((spec.label(), Arc::clone(port.device()))),
            _ => None,
        })
        .collect();
    let raised = specs
        .iter()
        .zip(&port_sets[0])
        .filter_map(|(spec, queue)| match queue {
            bridge::port::LinkQueue::Raw(port) if port.raised_link() => Some(spec.name.clone()),
            _ => None,
        })
        .collect();
    // While privileged: the kernel checks the opener's capabilities as
    // well as the caller's on every request.
    let evpn = first_mirrors(name, specs, &vxlans, args.vlan_filtering)?;
    let placement = place_workers(args.cpus.as_ref(), specs, workers)?;
    let control = control::ControlSocket::bind(socket, &access)?;
    // Opened before the first look, so that no change falls between them,
    // and while privileged: hearing the namespaces that taps are moved to
    // takes CAP_NET_BROADCAST when it is asked for, and the opener's is
    // what counts afterwards.
    let link_news = match bridge::monitor::LinkEvents::open(Duration::from_millis(500)) {
        Ok(news) => Some(news),
        Err(error) => {
            log::warn!("no rtnetlink link news ({error}): looking at links once a second");
            None
        }
    };
    if !args.keep_caps {
        system::drop_privileges()?;
    }
    // Opened while descriptors are plenty, so that links can be asked
    // after when they are not.
    let mut monitor = match bridge::monitor::LinkQuery::open() {
        Ok(query) => LinkMonitor::with_query(query),
        Err(error) => {
            log::warn!("no rtnetlink queries ({error}): interface ioctls instead");
            LinkMonitor::new()
        }
    };
    for (index, spec) in specs.iter().enumerate() {
        match spec.kind {
            PortKind::Raw => monitor.watch(PortId(index as u16), &spec.name),
            PortKind::Tap => monitor.watch_tap(PortId(index as u16), &spec.name),
            _ => {}
        }
    }
    // Before any worker starts, so that no frame to a port's own address
    // is forwarded.
    let first_events = api::apply_links(&*fdb, monitor.tick());
    let stopper = Arc::new(Stopper::new().map_err(|e| format!("cannot create an eventfd: {e}"))?);
    let worker_config = WorkerConfig {
        frame_capacity: FRAME_CAPACITY,
        batch_size: usize::from(args.batch),
        mode: match args.mode {
            ModeArg::Bridge => Mode::Bridge,
            ModeArg::Relay => Mode::Relay,
        },
        busy_poll: args.poll,
        lockstat: args.lockstat,
        vlan_filtering: args.vlan_filtering,
        stp: args.stp,
        group_fwd_mask: args.group_fwd_mask,
        move_limit: args.move_limit.map(|moves| bridge::worker::MoveLimit {
            moves,
            hold: Duration::from_secs(args.move_hold),
        }),
        ..WorkerConfig::default()
    };
    // Workers report BPDUs, tripped guards and IGMP and MLD messages to
    // the owner thread, through its bounded queue.
    let events = Arc::new(EventQueue::new(queue::LIMITS));
    let sink: bridge::worker::EventSink = {
        let events = Arc::clone(&events);
        Arc::new(move |event| {
            // Shed (counted) when its lane is full or, for IGMP and MLD,
            // beyond the second's budget: the worker forwarded it already.
            let _ = events.push(Event::Port(event));
        })
    };
    if args.lockstat {
        locks::lockstat::enable(true);
    }
    let sets = port_sets
        .into_iter()
        .enumerate()
        .map(|(id, ports)| {
            let ports = ports.into_iter().map(Some).collect();
            let setups = specs
                .iter()
                .map(|spec| BridgeState::setup(spec, workers, args.stp))
                .collect();
            (
                ports,
                bridge::worker::WorkerParts::new(id)
                    .with_setups(setups)
                    .with_events(Arc::clone(&sink)),
            )
        })
        .collect();
    let inject = match args.inject_fault {
        Some(InjectedFault::WorkerPanic) => Some(workers::Injected::PanicAtStart),
        Some(InjectedFault::WorkerPanicOnStop) => Some(workers::Injected::PanicAtStop),
        Some(InjectedFault::WorkerStall) => Some(workers::Injected::Stall),
        Some(InjectedFault::OwnerSlow) | None => None,
    };
    // Before any worker learns.
    for (index, spec) in specs.iter().enumerate() {
        fdb.set_port_limit(PortId(index as u16), spec.options.max_learned.unwrap_or(0));
    }
    let snoop_config = cli::snoop_config(args)?;
    let groups = args
        .mcast_snooping
        .then(|| Arc::new(bridge::mcast::GroupTable::<S>::new()));
    let mut first = workers::start(
        Arc::clone(&fdb),
        groups.clone(),
        sets,
        worker_config,
        &placement.workers,
        inject,
    )?;
    let started_rx = std::mem::replace(&mut first.started, mpsc::channel().1);
    let stp = args.stp.then(|| {
        let mac = crate::stp::bridge_mac(name, specs);
        let mut stp = crate::stp::SpanningTree::new(cli::stp_config(args), mac);
        for (index, spec) in specs.iter().enumerate() {
            stp.add(PortId(index as u16), spec, crate::stp::port_mac(name, spec));
        }
        stp
    });
    let mcast = groups.map(|groups| {
        // Queries leave from the bridge's address, as the bridge id's.
        let mac = crate::stp::bridge_mac(name, specs);
        let mut snooper = crate::mcast::Snooper::new(snoop_config, mac, groups);
        for (index, spec) in specs.iter().enumerate() {
            snooper.add(PortId(index as u16), spec);
        }
        snooper
    });
    let mut state = BridgeState::new(api::Parts {
        name: name.to_owned(),
        specs: specs.to_vec(),
        started: first,
        fdb: fdb.clone() as Arc<dyn bridge::fdb::Table>,
        worker_config,
        placement: placement.workers.clone(),
        monitor,
        relay: args.mode == ModeArg::Relay,
        keep_caps: args.keep_caps,
        lockstat: args.lockstat,
        config: file.clone(),
        port_settings,
        vxlans,
        vhosts,
        raised,
        link_events: link_news.is_some(),
        stp,
        mcast,
        evpn,
        queue: Arc::clone(&events),
    });
    state.report_links(first_events);
    if let Some((_, file)) = &file {
        state
            .add_statics(&file.statics)
            .map_err(|e| e.to_string())?;
    }
    let caller = Caller::new(Arc::clone(&events));
    // Published before any other thread starts, so that none finds it empty.
    let board = Arc::new(api::Board::default());
    board.publish(state.published());
    let metrics_thread = match metrics {
        Some(server) => {
            let board = Arc::clone(&board);
            let stopper = Arc::clone(&stopper);
            let addr = server.local_addr();
            let thread = thread::Builder::new()
                .name("metrics".to_owned())
                .spawn(move || {
                    // The owner's latest publication: a scrape never waits
                    // on the owner.
                    let stats = {
                        let stopper = Arc::clone(&stopper);
                        move || match stopper.is_stopped() {
                            true => None,
                            false => board.latest().map(|p| p.stats.clone()),
                        }
                    };
                    server.serve(stats, || stopper.is_stopped())
                })
                .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
            log::info!("metrics at http://{addr}/metrics");
            Some(thread)
        }
        None => None,
    };
    let control_thread = {
        let stopper = Arc::clone(&stopper);
        let caller = caller.clone();
        let board = Arc::clone(&board);
        let path = control.path().display().to_string();
        let thread = thread::Builder::new()
            .name("control".to_owned())
            .spawn(move || control::serve(control, access, caller, board, stopper))
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        log::info!("control socket {path}");
        thread
    };
    {
        let caller = caller.clone();
        system::forward_signals(signals, move |signal| caller.signal(signal))?;
    }
    let links_thread = link_news
        .map(|news| forward_links(news, caller, Arc::clone(&stopper)))
        .transpose()?;
    log::info!(
        "ageing {} s, at most {} learned stations",
        args.age,
        args.max_entries
    );
    // A worker that died before it started must not be announced as ready:
    // the channel ends when every worker has sent or died.
    let started = started_rx.iter().count();
    let mut outcome = state.check_workers();
    if outcome.is_ok() && started < workers {
        // The dead worker's thread may still be unwinding: wait for it to
        // end so that the error can name it.
        let deadline = Instant::now() + Duration::from_secs(2);
        while outcome.is_ok() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
            outcome = state.check_workers();
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
            "mpbridge: ready: ports {} lock {} workers {}{} cpus {}\n",
            specs
                .iter()
                .map(PortSpec::label)
                .collect::<Vec<_>>()
                .join(","),
            state.fdb().kind(),
            workers,
            ready_flags(args),
            placement_text(&placement)
        ));
        system::notify_ready();
    }
    if outcome.is_ok() {
        let slow = args.inject_fault == Some(InjectedFault::OwnerSlow);
        outcome = own(&mut state, &events, &board, args.config.is_some(), slow);
    }
    stopper.stop();
    // They stop while the other threads do.
    state.ask_workers_to_stop();
    // Callers waiting on the owner get their answer: the bridge stops.
    events.close();
    if control_thread.join().is_err() && outcome.is_ok() {
        outcome = Err("the control thread panicked".to_owned());
    }
    if let Some(thread) = metrics_thread {
        if thread.join().is_err() && outcome.is_ok() {
            outcome = Err("the metrics thread panicked".to_owned());
        }
    }
    if let Some(thread) = links_thread {
        if thread.join().is_err() && outcome.is_ok() {
            outcome = Err("the link news thread panicked".to_owned());
        }
    }
    // A panic was reported by check_workers (or here, if it came while
    // stopping); its message went to stderr through the panic hook. A
    // worker stuck in a system call does not stop: it is named, left
    // behind, and the exit (non-zero) ends it.
    if let Err(error) = state.stop_workers() {
        match outcome {
            Ok(()) => outcome = Err(format!("{error} while stopping")),
            Err(_) => log::error!("{error} while stopping"),
        }
    }
    state.restore_links();
    let fdb = state.fdb();
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
    say(&report(&state.live_ports(), state.counters(), fdb_line));
    outcome
}

/// Opens rtnetlink for EVPN ports, removes the mirrors an earlier run of
/// this bridge left, and makes those of the first ports. Without
/// rtnetlink a bridge without EVPN ports runs on.
fn first_mirrors(
    name: &str,
    specs: &[PortSpec],
    vxlans: &std::collections::BTreeMap<String, Arc<bridge::port::vxlan::VxlanShared>>,
    vlan_filtering: bool,
) -> Result<Option<evpn::Evpn>, String> {
    let wanted = specs
        .iter()
        .any(|spec| matches!(&spec.kind, PortKind::Vxlan(config) if config.evpn));
    let mut evpn = match evpn::Evpn::open(name) {
        Ok(evpn) => evpn,
        Err(error) if wanted => return Err(error),
        Err(error) => {
            log::warn!("{error}: EVPN ports cannot be added");
            return Ok(None);
        }
    };
    if let Err(error) = evpn.remove_stale() {
        log::warn!("{error}");
    }
    for (index, spec) in specs.iter().enumerate() {
        if let (PortKind::Vxlan(config), Some(shared)) = (&spec.kind, vxlans.get(&spec.label())) {
            if config.evpn {
                let vlan = api::evpn_vlan(spec, vlan_filtering)?;
                evpn.add(
                    &spec.label(),
                    &spec.name,
                    PortId(index as u16),
                    vlan,
                    Arc::clone(shared),
                )?;
            }
        }
    }
    Ok(Some(evpn))
}

/// How long `--inject-fault owner-slow` makes each changing request take.
const OWNER_SLOW: Duration = Duration::from_secs(3);

/// The owner's loop: one event at a time, and the tick once a second,
/// until SIGINT or SIGTERM (Ok) or a fault (its error).
fn own(
    state: &mut BridgeState,
    events: &EventQueue,
    board: &api::Board,
    reloads: bool,
    slow: bool,
) -> Result<(), String> {
    let mut next_tick = Instant::now() + TICK;
    loop {
        // Multicast snooping's timers (a leave's last member time) are
        // finer than the tick.
        let now = Instant::now();
        if state.mcast_deadline().is_some_and(|at| at <= now) {
            state.mcast_tick();
        }
        let until = state
            .mcast_deadline()
            .map_or(next_tick, |at| at.min(next_tick));
        let wait = until.saturating_duration_since(now);
        // The queue hands out signals, link news and BPDUs first, then
        // requests, then IGMP and MLD messages.
        let event = events.recv_timeout(wait);
        // Requests and signals change what `stats` and the rest say: the
        // owner publishes again after them (and every tick), not after
        // link or port events, which may come in floods.
        let publish = matches!(
            event,
            Some(Event::Call(..) | Event::Capture(..) | Event::Signal(_))
        );
        // What may take a while: readers do not queue behind it.
        let lengthy = matches!(
            &event,
            Some(Event::Call(request, _)) if request.changes()
        ) || matches!(event, Some(Event::Signal(libc::SIGHUP)));
        if lengthy {
            board.set_busy(true);
        }
        let mut published = false;
        match event {
            Some(Event::Call(request, reply)) => {
                let changes = request.changes();
                if slow && changes {
                    // The test hook `--inject-fault owner-slow`.
                    thread::sleep(OWNER_SLOW);
                }
                let response = state.handle(request);
                // Published before the client hears the answer, so that
                // whatever it reads next (`/metrics` too) is at least as
                // new: a change is done, `stats` agrees with a scrape.
                board.publish(state.published());
                board.set_busy(false);
                published = true;
                // The caller may have given up waiting; nothing to do then.
                reply(response);
            }
            Some(Event::Capture(request, reply)) => {
                reply(state.capture(request));
            }
            Some(Event::Links(news)) => state.links(news),
            Some(Event::Port(event)) => state.port_event(event),
            Some(Event::Signal(libc::SIGHUP)) if !reloads => {
                log::info!("SIGHUP: the bridge runs without --config; nothing to reload");
            }
            Some(Event::Signal(libc::SIGHUP)) => match state.reload() {
                Ok(changes) => log::info!("SIGHUP: reloaded: {changes:?}"),
                // A bad file keeps the running configuration.
                Err(error) => log::warn!("SIGHUP: {error}; nothing changed"),
            },
            Some(Event::Signal(signal)) => {
                log::info!("signal {signal}: stopping");
                return Ok(());
            }
            None => {}
        }
        let tick = Instant::now() >= next_tick;
        if tick {
            next_tick = Instant::now() + TICK;
            state.tick()?;
        }
        if tick || (publish && !published) {
            board.publish(state.published());
            board.set_busy(false);
        }
        state.check_workers()?;
    }
}

/// Starts the thread that waits for rtnetlink's link news and hands it to
/// the owner, until the bridge stops.
fn forward_links(
    mut news: bridge::monitor::LinkEvents,
    caller: Caller,
    stopper: Arc<Stopper>,
) -> Result<thread::JoinHandle<()>, String> {
    use bridge::monitor::Received;
    thread::Builder::new()
        .name("links".to_owned())
        .spawn(move || {
            while !stopper.is_stopped() {
                match news.recv() {
                    Ok(Received::Updates(updates)) if updates.is_empty() => {}
                    Ok(received) => {
                        if !caller.links(received) {
                            return;
                        }
                    }
                    Err(error) => {
                        log::warn!("link news: {error}");
                        thread::sleep(Duration::from_millis(500));
                    }
                }
            }
        })
        .map_err(|e| format!("cannot start the link news thread: {e}"))
}

/// The options the ready line names beside ports, lock and workers.
fn ready_flags(args: &RunArgs) -> String {
    let mut flags = String::new();
    if args.mode == ModeArg::Relay {
        flags.push_str(" mode relay");
    }
    if args.poll {
        flags.push_str(" poll");
    }
    if usize::from(args.batch) != bridge::DEFAULT_BATCH {
        flags.push_str(&format!(" batch {}", args.batch));
    }
    if args.rx_ring == RxRingArg::Block {
        flags.push_str(" rx-ring block");
    }
    if args.vlan_filtering {
        flags.push_str(" vlan-filtering");
    }
    if args.stp {
        flags.push_str(" stp");
    }
    flags
}

fn report(ports: &[(PortId, PortSpec)], sets: &[Arc<[PortCounters]>], fdb: String) -> String {
    let totals = counters::sum(sets.iter().map(|set| &set[..]));
    let mut out = String::from("final counters:\n");
    for (id, spec) in ports {
        let stats = totals.get(id.index()).copied().unwrap_or_default();
        let _ = writeln!(out, "  {}: {}", spec.label(), CounterLine(&stats));
    }
    out.push_str(&fdb);
    out
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
        .filter(|spec| spec.kind == PortKind::Raw)
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
