//! mpbench: forwarding and lock-contention experiments on mpbridge's core.

#![deny(unsafe_code)]

mod contention;
mod cpuload;
mod flags;
mod forward;
mod generator;
mod report;
mod rfc2889;
mod rtt;
mod tap_loop;
mod tcp;
mod tpacket_loop;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use bridge::port::{MemoryPeer, MemoryQueue};
use bridge::wire::{FrameSpec, MacAddr};
use bridge::{FdbConfig, MacTable, SectionMode, Worker, WorkerConfig};
use clap::{Parser, Subcommand};
use locks::{Strategy, StrategyKind};

#[derive(Parser)]
#[command(
    name = "mpbench",
    version,
    about = "Forwarding and lock-contention experiments on mpbridge"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// MAC table contention: strategies x threads x workloads x table sizes,
    /// against an unsynchronised map, with lock statistics. No root needed.
    ///
    /// Prints a table per workload and writes locks.csv, locks.json and one
    /// SVG plot per workload to --out.
    Locks(contention::LocksArgs),
    /// Frames per second through mpbridge on real ports, beside the kernel
    /// bridge, mpbridge as a relay and the generator wired to the sink.
    /// Needs root.
    ///
    /// Sets up and tears down its own network namespaces; prints an
    /// ipgen-style table per configuration, mpbridge's rate as a fraction of
    /// each reference, and (with several --workers) a worker-scaling table;
    /// writes forward.csv, forward.json and plots to --out.
    Forward(forward::ForwardArgs),
    /// RFC 2889 address learning rate and address caching capacity of
    /// mpbridge on three veth ports, per strategy. Needs root.
    Rfc2889(rfc2889::Rfc2889Args),
    /// Round-trip time of a small UDP request and its answer through
    /// mpbridge on two raw ports (frame and block receive rings, sleeping
    /// or busy-polling) beside the kernel bridge: the latency a forwarder
    /// adds. Needs root.
    ///
    /// Prints the median, 90th and 99th percentiles and the CPU time per
    /// round trip; writes rtt.csv and rtt.json to --out.
    Rtt(rtt::RttArgs),
    /// Frames per second through the forwarding loop on in-memory ports.
    ///
    /// Each worker thread owns its own pair of in-memory ports and generates
    /// its own traffic (known unicast from side A to side B); all workers
    /// share one MAC table. No root needed. With more workers than cores the
    /// figures measure preemption, not parallelism.
    Memory(MemoryArgs),
    /// The reference tap forwarder of `mpbench forward`: blocking read and
    /// write between two taps, one thread per direction. Runs until killed.
    #[command(hide = true)]
    TapLoop(tap_loop::TapLoopArgs),
    /// The reference raw-port forwarder of `mpbench forward`: a C loop from
    /// a TPACKET_V3 receive ring to a transmit ring, one thread per
    /// direction. Runs until killed.
    #[command(hide = true)]
    TpacketLoop(tpacket_loop::TpacketLoopArgs),
}

#[derive(clap::Args)]
// --runs: this subcommand's own help text, and 1 to 99 runs.
#[command(mut_arg("runs", |arg| arg
    .help(
        "Runs per point; the median is reported. Runs of different strategies are \
         interleaved, so that a slow spell of the machine hits them all"
    )
    .value_parser(flags::one_to_99_runs())))]
struct MemoryArgs {
    #[command(flatten)]
    strategies: flags::Strategies,
    /// Forwarding threads sharing the table.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    #[command(flatten)]
    interval: flags::Interval,
    /// Frame size on the wire, FCS included (64 means 60 bytes in memory).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(64..=1518))]
    frame_size: u16,
    #[command(flatten)]
    repeats: flags::Repeats,
    /// Stations per side.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    stations: u32,
}

fn station(side: u8, worker: u16, n: u32) -> MacAddr {
    let w = worker.to_be_bytes();
    let b = n.to_be_bytes();
    MacAddr([0x02, side, w[1], b[1], b[2], b[3]])
}

fn frame(dst: MacAddr, src: MacAddr, len: usize) -> Vec<u8> {
    FrameSpec::new(dst, src).len(len).build()
}

/// Frames one worker moves from A to B until `stop`; counts what B received.
fn drive<S: Strategy>(
    table: Arc<MacTable<S>>,
    args: &MemoryArgs,
    section: SectionMode,
    id: u16,
    start: &Barrier,
    stop: &AtomicBool,
) -> u64 {
    let (a, peer_a) = MemoryQueue::pair("a");
    let (b, peer_b) = MemoryQueue::pair("b");
    let config = WorkerConfig {
        section,
        // The batch the in-memory figures have always been taken with.
        batch_size: 64,
        ..WorkerConfig::default()
    };
    let batch = config.batch_size;
    let mut worker = Worker::new(table, vec![a, b], config);
    let len = usize::from(args.frame_size) - 4;
    let frames: Vec<Vec<u8>> = (0..args.stations)
        .map(|n| frame(station(1, id, n), station(0, id, n), len))
        .collect();
    for n in 0..args.stations {
        peer_b.inject(&frame(MacAddr::BROADCAST, station(1, id, n), len));
        while worker.poll() > 0 {}
    }
    drain(&peer_a);
    drain(&peer_b);
    start.wait();
    let mut delivered = 0;
    let mut next = frames.iter().cycle();
    while !stop.load(Ordering::Relaxed) {
        peer_a.inject_all(next.by_ref().take(batch).map(Vec::as_slice));
        while worker.poll() > 0 {}
        drain(&peer_a);
        delivered += drain(&peer_b) as u64;
    }
    delivered
}

fn drain(peer: &MemoryPeer) -> usize {
    peer.drain_sent(|frame| {
        std::hint::black_box(frame);
    })
}

/// Forwarded frames per second for one strategy and section mode.
fn measure<S: Strategy>(args: &MemoryArgs, section: SectionMode) -> f64 {
    let table = Arc::new(MacTable::<S>::new(FdbConfig {
        max_entries: (args.stations as usize * 2 * usize::from(args.workers))
            .max(FdbConfig::DEFAULT_MAX_ENTRIES),
        ..FdbConfig::default()
    }));
    let start = Barrier::new(usize::from(args.workers) + 1);
    let stop = AtomicBool::new(false);
    let (delivered, elapsed) = thread::scope(|scope| {
        let handles: Vec<_> = (0..args.workers)
            .map(|id| {
                let (table, start, stop) = (Arc::clone(&table), &start, &stop);
                scope.spawn(move || drive(table, args, section, id, start, stop))
            })
            .collect();
        start.wait();
        let began = Instant::now();
        thread::sleep(Duration::from_secs_f64(args.interval.seconds));
        stop.store(true, Ordering::Relaxed);
        let delivered: u64 = handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .sum();
        (delivered, began.elapsed())
    });
    delivered as f64 / elapsed.as_secs_f64()
}

fn memory(args: MemoryArgs) -> ExitCode {
    if !(args.interval.seconds > 0.0 && args.interval.seconds <= 3600.0) {
        eprintln!(
            "mpbench: --seconds must be between 0 and 3600, got {}",
            args.interval.seconds
        );
        return ExitCode::from(2);
    }
    let locks = if args.strategies.locks.is_empty() {
        StrategyKind::ALL.to_vec()
    } else {
        args.strategies.locks.clone()
    };
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "In-memory forwarding: {}-byte frames, {} stations per side, {} worker(s) on {} core(s), \
         median of {} runs of {} s",
        args.frame_size,
        args.stations,
        args.workers,
        cores,
        args.repeats.runs,
        args.interval.seconds
    );
    if usize::from(args.workers) > cores {
        println!("note: more workers than cores: these figures include preemption");
    }
    println!();
    let mut samples = vec![(Vec::new(), Vec::new()); locks.len()];
    for _ in 0..args.repeats.runs {
        for (kind, (batch, frame)) in locks.iter().zip(&mut samples) {
            locks::with_strategy!(*kind, S => {
                batch.push(measure::<S>(&args, SectionMode::PerBatch));
                frame.push(measure::<S>(&args, SectionMode::PerFrame));
            });
        }
    }
    println!(
        "{:<8} {:>16} {:>16} {:>12}",
        "strategy", "per-batch Mfps", "per-frame Mfps", "batch/frame"
    );
    for (kind, (batch, frame)) in locks.iter().zip(samples) {
        let (batch, frame) = (median(batch), median(frame));
        println!(
            "{:<8} {:>16.3} {:>16.3} {:>11.2}x",
            kind.name(),
            batch / 1e6,
            frame / 1e6,
            batch / frame
        );
    }
    ExitCode::SUCCESS
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Memory(args) => memory(args),
        Command::Rfc2889(args) => match rfc2889::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mpbench: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Rtt(args) => match rtt::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mpbench: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Forward(args) => match forward::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mpbench: {error}");
                ExitCode::FAILURE
            }
        },
        Command::TapLoop(args) => match tap_loop::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mpbench tap-loop: {error}");
                ExitCode::FAILURE
            }
        },
        Command::TpacketLoop(args) => match tpacket_loop::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mpbench tpacket-loop: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Locks(args) => match contention::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mpbench: {error}");
                ExitCode::FAILURE
            }
        },
    }
}
