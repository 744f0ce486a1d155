//! `mpbench rtt`: the round-trip time of a small UDP request and its
//! answer between two hosts joined by a forwarder (the kernel bridge, or
//! mpbridge on raw ports with either receive ring, sleeping or polling):
//! the latency a forwarder adds, which frames per second do not show.
//!
//! Both hosts' threads run on CPU 0; mpbridge runs on CPU 1 ("apart": each
//! hop wakes another CPU) or on CPU 0 with them ("shared"); the kernel
//! bridge forwards inside the sending thread's own system call (veth hands
//! the frame to the bridge on the same CPU), so it has no placement.
//! Requests go one at a time, each after the answer to the last.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab::{Netns, Process};

use crate::cpuload::{self, CoreUse};
use crate::flags;
use crate::report::{self, Field, Record};

const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PORT: u16 = 7000;

#[derive(clap::Args)]
// --seconds: this subcommand's own help text.
#[command(mut_arg("seconds", |arg| arg.help(
    "Seconds of timed round trips per run (after `--warmup` untimed ones)"
)))]
// --runs: this subcommand's own help text, and 1 to 99 runs.
#[command(mut_arg("runs", |arg| arg
    .help("Runs per forwarder, interleaved; the median of each statistic is reported")
    .value_parser(flags::one_to_99_runs())))]
// --out: this subcommand's own help text.
#[command(mut_arg("out", |arg| arg.help("Where rtt.csv and rtt.json go")))]
pub struct RttArgs {
    /// Forwarders to measure: kernel (the kernel bridge), frame (mpbridge
    /// on raw ports with frame rings), block (with block rings), poll
    /// (frame rings, busy-polling workers).
    #[arg(long, value_delimiter = ',', default_value = "kernel,frame,block,poll")]
    targets: Vec<RttTarget>,
    /// Where mpbridge runs: apart (CPU 1, the hosts on CPU 0) and/or
    /// shared (CPU 0, with the hosts).
    #[arg(long, value_delimiter = ',', default_value = "apart,shared")]
    placement: Vec<RttPlacement>,
    #[command(flatten)]
    interval: flags::Interval,
    /// Untimed round trips first (ARP, learning, caches).
    #[arg(long, default_value_t = 300)]
    warmup: u32,
    /// UDP payload bytes of each request and answer.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1400))]
    payload: u16,
    #[command(flatten)]
    repeats: flags::Repeats,
    #[command(flatten)]
    binary: flags::MpbridgeBinary,
    #[command(flatten)]
    output: flags::Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RttPlacement {
    Apart,
    Shared,
}

impl RttPlacement {
    fn label(self) -> &'static str {
        match self {
            RttPlacement::Apart => "(a) apart",
            RttPlacement::Shared => "(b) shared",
        }
    }

    /// The CPUs mpbridge runs on.
    fn cpus(self) -> String {
        match self {
            RttPlacement::Apart => crate::forward::forwarder_cpus(1),
            RttPlacement::Shared => "0".to_owned(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RttTarget {
    Kernel,
    Frame,
    Block,
    Poll,
}

impl RttTarget {
    fn label(self) -> &'static str {
        match self {
            RttTarget::Kernel => "kernel bridge (veth)",
            RttTarget::Frame => "mpbridge epoch (raw, frame ring)",
            RttTarget::Block => "mpbridge epoch (raw, block ring)",
            RttTarget::Poll => "mpbridge epoch (raw, frame ring, poll)",
        }
    }

    fn name(self) -> &'static str {
        match self {
            RttTarget::Kernel => "kernel",
            RttTarget::Frame => "frame",
            RttTarget::Block => "block",
            RttTarget::Poll => "poll",
        }
    }
}

/// One run's figures, in microseconds.
#[derive(Clone, Copy, Debug)]
struct RunFigures {
    median: f64,
    p90: f64,
    p99: f64,
    /// Every core's busy time over the timed round trips, per round trip.
    cpu_per_round: f64,
    /// Round trips timed.
    rounds: usize,
    /// Round trips lost (no answer within a second).
    lost: u32,
}

pub fn run(args: RttArgs) -> Result<(), String> {
    crate::forward::require_root()?;
    if args.targets.is_empty() || args.placement.is_empty() {
        return Err("--targets and --placement must name one at least".to_owned());
    }
    if !(args.interval.seconds > 0.0 && args.interval.seconds <= 600.0) {
        return Err("--seconds must be more than 0 and at most 600".to_owned());
    }
    // Every forwarder in every placement; the kernel bridge has none.
    let mut setups: Vec<(RttTarget, Option<RttPlacement>)> = Vec::new();
    for &target in &args.targets {
        if target == RttTarget::Kernel {
            setups.push((target, None));
        } else {
            setups.extend(args.placement.iter().map(|&p| (target, Some(p))));
        }
    }
    let mpbridge = crate::forward::mpbridge_path(args.binary.mpbridge.as_deref())?;
    println!(
        "Round trips of a {}-byte UDP request and its answer through two raw ports: both hosts' \
         threads on CPU 0, mpbridge on CPU {} in placement (a) \"apart\", on CPU 0 with them in (b) \
         \"shared\"; {} s of timed round trips after {} untimed, median of {} interleaved runs",
        args.payload,
        RttPlacement::Apart.cpus(),
        args.interval.seconds,
        args.warmup,
        args.repeats.runs
    );
    let bar = report::progress(args.repeats.runs as u64 * setups.len() as u64);
    let mut runs: Vec<Vec<RunFigures>> = setups.iter().map(|_| Vec::new()).collect();
    for run in 0..args.repeats.runs {
        // Rotated, so that no forwarder always goes first.
        for k in 0..setups.len() {
            let s = (k + run) % setups.len();
            let (target, placement) = setups[s];
            bar.set_message(target.name());
            runs[s].push(measure(target, placement, &mpbridge, &args)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    println!(
        "{:<54} {:>10} {:>10} {:>10} {:>13} {:>8} {:>5}",
        "", "median us", "p90 us", "p99 us", "CPU us/round", "rounds", "lost"
    );
    let mut records = Vec::new();
    for (&(target, placement), figures) in setups.iter().zip(&runs) {
        let pick =
            |f: fn(&RunFigures) -> f64| report::median(&figures.iter().map(f).collect::<Vec<_>>());
        let (median, p90, p99, cpu) = (
            pick(|f| f.median),
            pick(|f| f.p90),
            pick(|f| f.p99),
            pick(|f| f.cpu_per_round),
        );
        let lost: u32 = figures.iter().map(|f| f.lost).sum();
        let rounds = report::median(&figures.iter().map(|f| f.rounds as f64).collect::<Vec<_>>());
        let label = match placement {
            Some(p) => format!("{} {}", target.label(), p.label()),
            None => target.label().to_owned(),
        };
        println!(
            "{label:<54} {median:>10.1} {p90:>10.1} {p99:>10.1} {cpu:>13.1} {rounds:>8} {lost:>5}"
        );
        records.push(Record {
            fields: vec![
                ("target", Field::Text(target.name().to_owned())),
                (
                    "placement",
                    Field::Text(
                        placement
                            .map_or("", |p| match p {
                                RttPlacement::Apart => "apart",
                                RttPlacement::Shared => "shared",
                            })
                            .to_owned(),
                    ),
                ),
                ("payload", Field::Number(f64::from(args.payload))),
                ("rounds", Field::Number(rounds)),
                ("runs", Field::Number(args.repeats.runs as f64)),
                ("median_us", Field::Number(median)),
                ("p90_us", Field::Number(p90)),
                ("p99_us", Field::Number(p99)),
                ("cpu_us_per_round", Field::Number(cpu)),
                ("lost", Field::Number(f64::from(lost))),
            ],
        });
    }
    println!(
        "CPU us/round: every core's busy time over the timed round trips, per round trip (the \
         busy-polling worker's core counts whole)."
    );
    let files =
        report::write_records(&args.output.out, "rtt", &records).map_err(|e| e.to_string())?;
    report::print_written(&files);
    Ok(())
}

/// Builds two hosts and the forwarder, and times the round trips.
fn measure(
    target: RttTarget,
    placement: Option<RttPlacement>,
    mpbridge: &str,
    args: &RttArgs,
) -> Result<RunFigures, String> {
    let h1 = Netns::new("client")?;
    let h2 = Netns::new("server")?;
    let b = Netns::new("bridge")?;
    h1.add_veth("p1", &b)?;
    h2.add_veth("p2", &b)?;
    crate::tcp::address(&h1, &h2)?;
    for host in [&h1, &h2] {
        host.ip(&["link", "set", "eth0", "up"])?;
    }
    for port in ["p1", "p2"] {
        b.ip(&["link", "set", port, "up"])?;
    }
    let _process = match target {
        RttTarget::Kernel => {
            b.ip(&["link", "add", "b0", "type", "bridge"])?;
            b.ip(&["link", "set", "b0", "up"])?;
            for port in ["p1", "p2"] {
                b.ip(&["link", "set", port, "master", "b0"])?;
            }
            None
        }
        RttTarget::Frame | RttTarget::Block | RttTarget::Poll => {
            let name = format!("--name=mpbench-rtt-{}", std::process::id());
            let ring = if target == RttTarget::Block {
                "block"
            } else {
                "frame"
            };
            let mut daemon_args = vec![
                "run",
                name.as_str(),
                "--port=raw:p1",
                "--port=raw:p2",
                "--rx-ring",
                ring,
            ];
            if target == RttTarget::Poll {
                daemon_args.push("--poll");
            }
            let cpus = placement.unwrap_or(RttPlacement::Apart).cpus();
            Some(Process::start(&b, &cpus, mpbridge, &daemon_args)?)
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = {
        let stop = Arc::clone(&stop);
        h2.spawn(move || -> Result<(), String> {
            lab::pin_to(0)?;
            let socket = UdpSocket::bind(SocketAddrV4::new(SERVER, PORT))
                .map_err(|e| format!("server: {e}"))?;
            socket
                .set_read_timeout(Some(Duration::from_millis(100)))
                .map_err(|e| e.to_string())?;
            let _ = ready_tx.send(());
            let mut buffer = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((len, peer)) = socket.recv_from(&mut buffer) {
                    let _ = socket.send_to(&buffer[..len], peer);
                }
            }
            Ok(())
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| "the echo server did not start".to_owned())?;
    let (warmup, payload) = (args.warmup, usize::from(args.payload));
    let span = Duration::from_secs_f64(args.interval.seconds);
    let client = h1.run(move || -> Result<(Vec<f64>, u32, Vec<CoreUse>), String> {
        lab::pin_to(0)?;
        let socket = UdpSocket::bind("198.18.0.1:0").map_err(|e| format!("client: {e}"))?;
        socket
            .connect(SocketAddrV4::new(SERVER, PORT))
            .map_err(|e| e.to_string())?;
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(|e| e.to_string())?;
        let request = vec![0x5a; payload];
        let mut answer = [0u8; 2048];
        let mut lost = 0;
        let mut rtts = Vec::new();
        for _ in 0..warmup {
            socket.send(&request).map_err(|e| e.to_string())?;
            let _ = socket.recv(&mut answer);
        }
        // Timed for a span, not a count: the CPU figures come from
        // /proc/stat in clock ticks (10 ms), too coarse for a short run.
        let before = cpuload::sample().map_err(|e| e.to_string())?;
        let began = Instant::now();
        while began.elapsed() < span {
            let start = Instant::now();
            socket.send(&request).map_err(|e| e.to_string())?;
            match socket.recv(&mut answer) {
                Ok(_) => rtts.push(start.elapsed().as_secs_f64() * 1e6),
                Err(_) => lost += 1,
            }
        }
        let after = cpuload::sample().map_err(|e| e.to_string())?;
        Ok((rtts, lost, cpuload::between(&before, &after)))
    });
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    let (mut rtts, lost, cores) = client??;
    if rtts.is_empty() {
        return Err(format!("{}: no answer came back", target.label()));
    }
    rtts.sort_by(f64::total_cmp);
    let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize];
    let busy: f64 = cores.iter().map(CoreUse::busy_ns).sum();
    Ok(RunFigures {
        median: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        cpu_per_round: busy / 1e3 / rtts.len() as f64,
        rounds: rtts.len(),
        lost,
    })
}
