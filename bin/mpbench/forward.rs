//! `mpbench forward`: frames per second through mpbridge on real ports,
//! side by side with references measured in the same run with the same
//! generator and the same sink: the Linux kernel bridge, mpbridge's own
//! forwarding loop as a relay without a MAC table, and the generator wired
//! straight to the sink. Needs root.
//!
//! The generator is a thread of this process, pinned to CPU 0, sending one
//! known-unicast frame over and over with sendmmsg through a packet socket
//! in its own namespace. The sink is the far interface in another
//! namespace: what it received is read from its counters, and what was
//! offered from the generator interface's counters, never from what the
//! generator believes it sent. The forwarder (mpbridge, or the kernel
//! bridge through RPS on its ingress) gets the last CPU.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bridge::port::{Port, RawPort, VNET_HDR_LEN};
use bridge::wire::{EtherType, FrameSpec, MacAddr, Payload};
use locks::StrategyKind;

use crate::report::{self, Field, Plot, Record};
use lab::{self, Netns, Process};

const GENERATOR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const SINK_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const ETHERTYPE: u16 = 0x88b5;
const WARMUP: Duration = Duration::from_millis(300);
const SETTLE: Duration = Duration::from_millis(700);

#[derive(clap::Args)]
pub struct ForwardArgs {
    /// Port kinds: raw (veth pairs through AF_PACKET), tap, or both.
    #[arg(long, value_delimiter = ',', default_value = "raw")]
    ports: Vec<PortKindArg>,
    /// Strategies to measure, comma-separated or with the flag repeated.
    #[arg(
        long = "lock",
        value_name = "STRATEGY",
        value_delimiter = ',',
        default_value = "epoch"
    )]
    locks: Vec<StrategyKind>,
    /// mpbridge worker counts (a worker-scaling table when more than one).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    workers: Vec<usize>,
    /// Frame sizes on the wire, FCS included (64 is 60 bytes in memory).
    #[arg(long, value_delimiter = ',', default_value = "64,1518")]
    sizes: Vec<usize>,
    /// I/O modes of mpbridge: interrupt (sleep in poll(2)) and/or poll
    /// (busy-poll).
    #[arg(long, value_delimiter = ',', default_value = "interrupt")]
    io: Vec<IoArg>,
    /// References to measure beside mpbridge: kernel (veth ports), relay,
    /// direct (veth ports), vde (tap ports, when vde_switch is installed).
    #[arg(long, value_delimiter = ',', default_value = "kernel,relay,direct,vde")]
    references: Vec<ReferenceArg>,
    /// Seconds per measurement (after a 0.3 s warm-up).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Runs per point, the configurations interleaved; the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Offered rate in frames per second; 0 sends flat out.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// The mpbridge binary (default: the one beside mpbench).
    #[arg(long)]
    mpbridge: Option<PathBuf>,
    /// Measure every strategy on one running mpbridge per configuration,
    /// switching its table with `mpbridge lock set` between measurements,
    /// so that the comparison is not disturbed by restarts and re-learning.
    #[arg(long)]
    switch: bool,
    /// Where the CSV, JSON and plot files go.
    #[arg(long, default_value = "mpbench-results")]
    out: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum PortKindArg {
    Raw,
    Tap,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum IoArg {
    Interrupt,
    Poll,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum ReferenceArg {
    Kernel,
    Relay,
    Direct,
    /// vde_switch (Debian's vde2) between two taps, when it is installed.
    Vde,
}

/// What forwards the frames.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Target {
    Direct,
    Kernel,
    Vde,
    Relay {
        poll: bool,
    },
    Mpbridge {
        lock: StrategyKind,
        workers: usize,
        poll: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Debug)]
struct Setup {
    ports: PortKindArg,
    target: Target,
}

impl Setup {
    fn label(&self) -> String {
        let ports = match self.ports {
            PortKindArg::Raw => "raw",
            PortKindArg::Tap => "tap",
        };
        let io = |poll: bool| if poll { ", poll" } else { "" };
        match self.target {
            Target::Direct => "direct (generator to sink)".to_owned(),
            Target::Kernel => "kernel bridge (veth, RPS)".to_owned(),
            Target::Vde => "vde_switch (tap)".to_owned(),
            Target::Relay { poll } => format!("relay ({ports}{})", io(poll)),
            Target::Mpbridge {
                lock,
                workers,
                poll,
            } => {
                format!(
                    "mpbridge {lock} ({ports}, {workers} worker{}{})",
                    if workers == 1 { "" } else { "s" },
                    io(poll)
                )
            }
        }
    }
}

/// A built topology: generator and sink namespaces, and whatever forwards.
struct Bench {
    generator: Netns,
    sink: Netns,
    _process: Option<Process>,
    _daemon: Option<lab::Daemon>,
    _bridge: Option<Netns>,
}

fn cpus() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPUs the forwarder runs on: all but the generator's CPU 0, as many as
/// it has workers, shared when there are not enough.
fn forwarder_cpus(workers: usize) -> String {
    let n = cpus();
    if n == 1 {
        "0".to_owned()
    } else if workers < n {
        format!("1-{workers}")
    } else {
        format!("0-{}", n - 1)
    }
}

fn build(setup: Setup, mpbridge: &str) -> Result<Bench, String> {
    let generator = Netns::new("gen")?;
    let sink = Netns::new("sink")?;
    for ns in [&generator, &sink] {
        ns.sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
        ns.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
    }
    let last_cpu_mask = 1u64 << (cpus() - 1).min(63);
    let mut bridge = None;
    let mut process = None;
    let mut daemon = None;
    match (setup.target, setup.ports) {
        (Target::Direct, _) => {
            generator.add_veth("eth0", &sink)?;
            sink.rps("eth0", last_cpu_mask)?;
        }
        (Target::Vde, PortKindArg::Raw) => {
            return Err("vde_switch is measured on tap ports only".to_owned())
        }
        (target, PortKindArg::Raw) => {
            let b = Netns::new("br")?;
            b.sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
            b.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
            generator.add_veth("p0", &b)?;
            sink.add_veth("p1", &b)?;
            // Receive work on the forwarder's ingress runs on the forwarder's
            // CPU, not inside the generator's sends.
            b.rps("p0", last_cpu_mask)?;
            match target {
                Target::Kernel => {
                    b.ip(&["link", "add", "br0", "type", "bridge"])?;
                    for dev in ["p0", "p1"] {
                        b.ip(&["link", "set", dev, "master", "br0"])?;
                        b.ip(&["link", "set", dev, "up"])?;
                    }
                    b.ip(&["link", "set", "br0", "up"])?;
                }
                _ => {
                    process = Some(start_mpbridge(
                        &b,
                        target,
                        &["--port=raw:p0", "--port=raw:p1"],
                        mpbridge,
                    )?)
                }
            }
            bridge = Some(b);
        }
        (Target::Kernel, PortKindArg::Tap) => {
            return Err("the kernel bridge is measured on veth (raw) ports only".to_owned())
        }
        (Target::Vde, PortKindArg::Tap) => {
            let b = Netns::new("br")?;
            daemon = Some(lab::Daemon::start(
                &b,
                &forwarder_cpus(1),
                "vde_switch",
                |ctl, pidfile| {
                    vec![
                        "-d".into(),
                        "-s".into(),
                        ctl.display().to_string(),
                        "-p".into(),
                        pidfile.display().to_string(),
                        "-t".into(),
                        "t0".into(),
                        "-t".into(),
                        "t1".into(),
                    ]
                },
                &["t0", "t1"],
            )?);
            move_taps(&b, &generator, &sink)?;
            bridge = Some(b);
        }
        (target, PortKindArg::Tap) => {
            let b = Netns::new("br")?;
            process = Some(start_mpbridge(
                &b,
                target,
                &["--port=tap:t0", "--port=tap:t1"],
                mpbridge,
            )?);
            move_taps(&b, &generator, &sink)?;
            bridge = Some(b);
        }
    }
    for (ns, mac) in [(&generator, GENERATOR_MAC), (&sink, SINK_MAC)] {
        ns.ip(&["link", "set", "eth0", "address", &mac_string(mac)])?;
        ns.ip(&["link", "set", "eth0", "up"])?;
    }
    // The sink speaks first, so that the bridge knows where it is and the
    // measured traffic is known unicast.
    sink.run(|| -> Result<(), String> {
        let mut port = RawPort::open("eth0", 1)
            .map_err(|e| format!("sink socket: {e}"))?
            .remove(0);
        let frame = with_header(&frame([0xff; 6], SINK_MAC, 64));
        for _ in 0..3 {
            port.send_batch(std::iter::once(&frame[..]))
                .into_result()
                .map_err(|e| e.to_string())?;
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    })??;
    thread::sleep(Duration::from_millis(100));
    Ok(Bench {
        generator,
        sink,
        _process: process,
        _daemon: daemon,
        _bridge: bridge,
    })
}

/// Moves taps t0 and t1 from the bridge's namespace to the generator's and
/// the sink's, where each becomes eth0.
fn move_taps(bridge: &Netns, generator: &Netns, sink: &Netns) -> Result<(), String> {
    for (tap, ns) in [("t0", generator), ("t1", sink)] {
        bridge.ip(&["link", "set", tap, "netns", &ns.name])?;
        ns.ip(&["link", "set", tap, "name", "eth0"])?;
    }
    Ok(())
}

fn start_mpbridge(
    b: &Netns,
    target: Target,
    ports: &[&str],
    program: &str,
) -> Result<Process, String> {
    // A name of its own, so that a bridge already running on the machine
    // (the default name) is left alone.
    let name = format!("--name={}", bridge_name());
    let mut args: Vec<String> = vec!["run".into(), name];
    args.extend(ports.iter().map(|p| p.to_string()));
    let workers = match target {
        Target::Relay { poll } => {
            args.extend(["--mode".into(), "relay".into()]);
            if poll {
                args.push("--poll".into());
            }
            1
        }
        Target::Mpbridge {
            lock,
            workers,
            poll,
        } => {
            args.extend([
                "--lock".into(),
                lock.name().into(),
                "--workers".into(),
                workers.to_string(),
            ]);
            if poll {
                args.push("--poll".into());
            }
            workers
        }
        _ => unreachable!("only mpbridge targets start a process"),
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Process::start(b, &forwarder_cpus(workers), program, &args)
}

/// The name mpbench gives the mpbridge it runs.
fn bridge_name() -> String {
    format!("mpbench-{}", std::process::id())
}

/// Moves the running mpbridge's table to `lock` (`mpbridge lock set`).
fn switch_lock(program: &str, lock: StrategyKind) -> Result<(), String> {
    let output = std::process::Command::new(program)
        .args(["--name", &bridge_name(), "lock", "set", lock.name()])
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(format!("mpbridge lock set {lock}: {}", stderr.trim()))
    }
}

/// With `--switch`, the setups measured on one running mpbridge: those that
/// differ only in their lock. Every other setup is a group of its own.
fn switch_groups(setups: &[Setup], switch: bool) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (index, setup) in setups.iter().enumerate() {
        let same_bridge = |other: &Setup| match (setup.target, other.target) {
            (
                Target::Mpbridge { workers, poll, .. },
                Target::Mpbridge {
                    workers: w,
                    poll: p,
                    ..
                },
            ) => switch && setup.ports == other.ports && workers == w && poll == p,
            _ => false,
        };
        match groups
            .iter_mut()
            .find(|group| same_bridge(&setups[group[0]]))
        {
            Some(group) => group.push(index),
            None => groups.push(vec![index]),
        }
    }
    groups
}

fn mac_string(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A test frame of `size` bytes on the wire (`size - 4` in memory).
fn frame(dst: [u8; 6], src: [u8; 6], size: usize) -> Vec<u8> {
    FrameSpec::new(MacAddr(dst), MacAddr(src))
        .ethertype(EtherType(ETHERTYPE))
        .len(size - 4)
        .payload(Payload::Fill(0x5a))
        .build()
}

fn with_header(frame: &[u8]) -> Vec<u8> {
    let mut buffer = vec![0u8; VNET_HDR_LEN];
    buffer.extend_from_slice(frame);
    buffer
}

/// One measurement's result, in frames per second.
#[derive(Clone, Copy, Debug)]
struct Rates {
    offered: f64,
    delivered: f64,
}

fn measure(bench: &Bench, size: usize, seconds: f64, rate: u64) -> Result<Rates, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let generator = {
        let stop = Arc::clone(&stop);
        bench.generator.spawn(move || -> Result<u64, String> {
            lab::pin_to(0)?;
            let mut port = RawPort::open("eth0", 1)
                .map_err(|e| format!("generator socket: {e}"))?
                .remove(0);
            let buffer = with_header(&frame(SINK_MAC, GENERATOR_MAC, size));
            let batch: Vec<&[u8]> = vec![&buffer[..]; 64];
            let start = Instant::now();
            let mut sent = 0u64;
            // Relaxed: a stop flag; nothing is published through it.
            while !stop.load(Ordering::Relaxed) {
                if rate > 0 {
                    let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
                    if sent >= due {
                        thread::sleep(Duration::from_micros(100));
                        continue;
                    }
                    let n = (due - sent).min(64) as usize;
                    sent += port
                        .send_batch(batch[..n].iter().copied())
                        .into_result()
                        .map_err(|e| e.to_string())? as u64;
                } else {
                    sent += port
                        .send_batch(batch.iter().copied())
                        .into_result()
                        .map_err(|e| e.to_string())? as u64;
                }
            }
            Ok(sent)
        })
    };
    thread::sleep(WARMUP);
    let t0 = Instant::now();
    let (_, tx0) = bench.generator.packets("eth0")?;
    let (rx0, _) = bench.sink.packets("eth0")?;
    thread::sleep(Duration::from_secs_f64(seconds));
    let (_, tx1) = bench.generator.packets("eth0")?;
    let (rx1, _) = bench.sink.packets("eth0")?;
    let dt = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    generator
        .join()
        .map_err(|_| "the generator panicked".to_owned())???;
    Ok(Rates {
        offered: (tx1 - tx0) as f64 / dt,
        delivered: (rx1 - rx0) as f64 / dt,
    })
}

/// Fails with one line unless this process runs as root.
pub fn require_root() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    #[allow(unsafe_code)]
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        Ok(())
    } else {
        Err("this experiment needs root (network namespaces, veth, packet sockets): run it with sudo".to_owned())
    }
}

/// The mpbridge binary: the one given, or the one beside this program.
pub fn mpbridge_path(given: Option<&std::path::Path>) -> Result<String, String> {
    let path = match given {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("mpbridge"),
    };
    if path.exists() {
        Ok(path.to_string_lossy().into_owned())
    } else {
        Err(format!(
            "{} not found (build it, or pass --mpbridge)",
            path.display()
        ))
    }
}

/// Mbit/s on the wire: each frame plus 8 bytes of preamble and 12 of gap.
fn mbps(pps: f64, size: usize) -> f64 {
    pps * (size + 20) as f64 * 8.0 / 1e6
}

pub fn run(args: ForwardArgs) -> Result<(), String> {
    require_root()?;
    if args.sizes.iter().any(|&s| !(64..=1518).contains(&s)) {
        return Err("--sizes must be between 64 and 1518".to_owned());
    }
    if args.runs == 0 || args.workers.contains(&0) || !(args.seconds > 0.0 && args.seconds <= 600.0)
    {
        return Err(
            "--runs, --workers and --seconds must be positive (seconds at most 600)".to_owned(),
        );
    }
    for needed in ["ip", "taskset"] {
        if std::process::Command::new(needed)
            .arg("-V")
            .output()
            .is_err()
        {
            return Err(format!(
                "{needed} not found (install iproute2 and util-linux)"
            ));
        }
    }
    let mpbridge = mpbridge_path(args.mpbridge.as_deref())?;

    let mut setups = Vec::new();
    for &ports in &args.ports {
        for &reference in &args.references {
            match reference {
                ReferenceArg::Direct if ports == PortKindArg::Raw => setups.push(Setup {
                    ports,
                    target: Target::Direct,
                }),
                ReferenceArg::Kernel if ports == PortKindArg::Raw => setups.push(Setup {
                    ports,
                    target: Target::Kernel,
                }),
                ReferenceArg::Vde if ports == PortKindArg::Tap => {
                    let installed = std::process::Command::new("vde_switch")
                        .arg("--help")
                        .output()
                        .is_ok();
                    if installed {
                        setups.push(Setup {
                            ports,
                            target: Target::Vde,
                        });
                    } else {
                        println!(
                            "note: vde_switch is not installed (Debian's vde2): no vde reference"
                        );
                    }
                }
                ReferenceArg::Relay => {
                    for &io in &args.io {
                        setups.push(Setup {
                            ports,
                            target: Target::Relay {
                                poll: io == IoArg::Poll,
                            },
                        });
                    }
                }
                _ => {}
            }
        }
        for &lock in &args.locks {
            for &workers in &args.workers {
                for &io in &args.io {
                    setups.push(Setup {
                        ports,
                        target: Target::Mpbridge {
                            lock,
                            workers,
                            poll: io == IoArg::Poll,
                        },
                    });
                }
            }
        }
    }
    let points = setups.len() * args.sizes.len() * args.runs;
    if args.switch {
        println!("Strategies switched on one running mpbridge per configuration (mpbridge lock set), not restarted");
    }
    println!(
        "Forwarding: {} CPU(s); generator on CPU 0, forwarder on CPU {}; median of {} interleaved runs of {} s per point; offered {}",
        cpus(),
        forwarder_cpus(1),
        args.runs,
        args.seconds,
        if args.rate == 0 { "flat out".to_owned() } else { format!("{} fps", args.rate) }
    );
    if args.workers.iter().any(|&w| w + 1 > cpus()) {
        println!("note: with more workers than free CPUs, worker threads share CPUs: those figures include preemption");
    }
    let bar = report::progress(points as u64);
    // samples[setup][size] = one Rates per run
    let mut samples: Vec<Vec<Vec<Rates>>> = setups
        .iter()
        .map(|_| args.sizes.iter().map(|_| Vec::new()).collect())
        .collect();
    let groups = switch_groups(&setups, args.switch);
    for run in 0..args.runs {
        // Each run starts one configuration later, so that no configuration
        // always follows the same one (and the tear-down of its namespaces).
        for k in 0..groups.len() {
            let group = &groups[(run + k) % groups.len()];
            // Within a group (one mpbridge, its table switched), the
            // strategies take turns going first too.
            let first = group[run % group.len()];
            bar.set_message(setups[first].label());
            let bench = build(setups[first], &mpbridge)?;
            // Deleting the previous namespaces goes on in the kernel after
            // `ip netns del` returns; let it finish before measuring.
            thread::sleep(SETTLE);
            for turn in 0..group.len() {
                let s = group[(run + turn) % group.len()];
                let setup = &setups[s];
                if let (true, Target::Mpbridge { lock, .. }) = (turn > 0, setup.target) {
                    bar.set_message(setup.label());
                    switch_lock(&mpbridge, lock)?;
                    thread::sleep(WARMUP);
                }
                for (z, &size) in args.sizes.iter().enumerate() {
                    samples[s][z].push(measure(&bench, size, args.seconds, args.rate)?);
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();

    let med = |runs: &[Rates], f: fn(&Rates) -> f64| {
        report::median(&runs.iter().map(f).collect::<Vec<_>>())
    };
    let best_mbps = setups
        .iter()
        .enumerate()
        .flat_map(|(s, _)| {
            args.sizes
                .iter()
                .enumerate()
                .map(move |(z, &size)| (s, z, size))
        })
        .map(|(s, z, size)| mbps(med(&samples[s][z], |r| r.delivered), size))
        .fold(0.0, f64::max);
    let mut records = Vec::new();
    for (s, setup) in setups.iter().enumerate() {
        println!();
        println!("{}", setup.label());
        println!(
            "{:>5} |{:<50}| {:>9} | delivered/offered pps",
            "size", "", "Mbit/s"
        );
        for (z, &size) in args.sizes.iter().enumerate() {
            let delivered = med(&samples[s][z], |r| r.delivered);
            let offered = med(&samples[s][z], |r| r.offered);
            let rate = mbps(delivered, size);
            let bar = "#".repeat(((rate / best_mbps.max(1e-9)) * 50.0).round() as usize);
            println!("{size:>5} |{bar:<50}| {rate:>9.2} | {delivered:>9.0}/{offered:.0}");
            for run in &samples[s][z] {
                records.push(record(setup, size, run));
            }
        }
    }
    print_ratios(&args, &setups, &samples);
    print_scaling(&args, &setups, &samples);
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut files =
        report::write_records(&args.out, "forward", &records).map_err(|e| e.to_string())?;
    let plot = Plot {
        title: "delivered throughput against frame size",
        x_label: "frame size (bytes)",
        y_label: "Mbit/s on the wire",
        series: setups
            .iter()
            .enumerate()
            .map(|(s, setup)| {
                let points = args
                    .sizes
                    .iter()
                    .enumerate()
                    .map(|(z, &size)| {
                        (
                            size as f64,
                            mbps(med(&samples[s][z], |r| r.delivered), size),
                        )
                    })
                    .collect();
                (setup.label(), points)
            })
            .collect(),
    };
    files.extend(report::write_plot(&plot, &args.out.join("forward-sizes"))?);
    if args.workers.len() > 1 {
        let series = args
            .locks
            .iter()
            .flat_map(|&lock| args.ports.iter().map(move |&ports| (lock, ports)))
            .map(|(lock, ports)| {
                let points = args
                    .workers
                    .iter()
                    .filter_map(|&w| {
                        let s = setups.iter().position(|x| {
                            x.ports == ports && matches!(x.target, Target::Mpbridge { lock: l, workers, poll: false } if l == lock && workers == w)
                        })?;
                        Some((w as f64, med(&samples[s][0], |r| r.delivered) / 1e3))
                    })
                    .collect();
                (format!("{lock} ({ports:?})").to_lowercase(), points)
            })
            .collect();
        let plot = Plot {
            title: &format!("{}-byte frames against workers", args.sizes[0]),
            x_label: "workers",
            y_label: "Kpps delivered",
            series,
        };
        files.extend(report::write_plot(
            &plot,
            &args.out.join("forward-workers"),
        )?);
    }
    println!();
    report::print_written(&files);
    Ok(())
}

fn record(setup: &Setup, size: usize, rates: &Rates) -> Record {
    let (name, lock, workers, poll) = match setup.target {
        Target::Direct => ("direct", String::new(), 0, false),
        Target::Kernel => ("kernel", String::new(), 0, false),
        Target::Vde => ("vde", String::new(), 0, false),
        Target::Relay { poll } => ("relay", String::new(), 1, poll),
        Target::Mpbridge {
            lock,
            workers,
            poll,
        } => ("mpbridge", lock.name().to_owned(), workers, poll),
    };
    Record {
        fields: vec![
            ("target", Field::Text(name.to_owned())),
            (
                "ports",
                Field::Text(format!("{:?}", setup.ports).to_lowercase()),
            ),
            ("strategy", Field::Text(lock)),
            ("workers", Field::Number(workers as f64)),
            ("poll", Field::Number(f64::from(u8::from(poll)))),
            ("size", Field::Number(size as f64)),
            ("offered_pps", Field::Number(rates.offered.round())),
            ("delivered_pps", Field::Number(rates.delivered.round())),
            ("mbps", Field::Number(mbps(rates.delivered, size))),
            ("cpus", Field::Number(cpus() as f64)),
        ],
    }
}

/// mpbridge's delivered rate as a fraction of each reference's, per size.
fn print_ratios(args: &ForwardArgs, setups: &[Setup], samples: &[Vec<Vec<Rates>>]) {
    let delivered = |s: usize, z: usize| {
        report::median(
            &samples[s][z]
                .iter()
                .map(|r| r.delivered)
                .collect::<Vec<_>>(),
        )
    };
    let find = |ports: PortKindArg, target: Target| {
        setups
            .iter()
            .position(|x| x.ports == ports && x.target == target)
    };
    let mut lines = Vec::new();
    for (s, setup) in setups.iter().enumerate() {
        let Target::Mpbridge { poll, .. } = setup.target else {
            continue;
        };
        for (name, reference) in [
            ("relay", find(setup.ports, Target::Relay { poll })),
            ("kernel bridge", find(PortKindArg::Raw, Target::Kernel)),
            ("direct", find(PortKindArg::Raw, Target::Direct)),
            ("vde_switch", find(PortKindArg::Tap, Target::Vde)),
        ] {
            let Some(r) = reference else { continue };
            let same_kind = match name {
                "relay" => true,
                "vde_switch" => setup.ports == PortKindArg::Tap,
                _ => setup.ports == PortKindArg::Raw,
            };
            if !same_kind {
                continue;
            }
            let ratios: Vec<String> = args
                .sizes
                .iter()
                .enumerate()
                .map(|(z, size)| format!("{size}: {:.2}", delivered(s, z) / delivered(r, z)))
                .collect();
            lines.push(format!(
                "  {} / {name}: {}",
                setup.label(),
                ratios.join(", ")
            ));
        }
    }
    if !lines.is_empty() {
        println!();
        println!("mpbridge as a fraction of each reference (delivered pps, by frame size):");
        lines.iter().for_each(|l| println!("{l}"));
    }
}

/// Workers against strategies at the first frame size, as OpenBSD's
/// NET_TASKQ tables.
fn print_scaling(args: &ForwardArgs, setups: &[Setup], samples: &[Vec<Vec<Rates>>]) {
    if args.workers.len() < 2 {
        return;
    }
    for &ports in &args.ports {
        println!();
        println!(
            "{}-byte frames, {:?} ports: Kpps delivered by workers",
            args.sizes[0], ports
        );
        let mut header = format!("{:>7}", "workers");
        for lock in &args.locks {
            header += &format!(" {:>9}", lock.name());
        }
        println!("{header}");
        for &w in &args.workers {
            let mut line = format!("{w:>7}");
            for &lock in &args.locks {
                let s = setups.iter().position(|x| {
                    x.ports == ports && matches!(x.target, Target::Mpbridge { lock: l, workers, poll: false } if l == lock && workers == w)
                });
                match s {
                    Some(s) => {
                        let kpps = report::median(
                            &samples[s][0]
                                .iter()
                                .map(|r| r.delivered)
                                .collect::<Vec<_>>(),
                        ) / 1e3;
                        line += &format!(" {kpps:>9.0}");
                    }
                    None => line += &format!(" {:>9}", "-"),
                }
            }
            println!("{line}");
        }
    }
}
