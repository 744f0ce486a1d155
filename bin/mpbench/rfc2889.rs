//! `mpbench rfc2889`: the address learning rate and address caching
//! capacity tests of RFC 2889 (sections 5.7 and 5.8) against mpbridge on
//! three raw (veth) ports, per strategy. Needs root.
//!
//! Three hosts: a learning port L, a test port T and a monitor port M. The
//! test station on T speaks first. Learning frames go from L, from N
//! distinct source addresses to the test station, at a chosen rate; then
//! test frames go from T to each of those N addresses. An address the bridge
//! learned is forwarded to L alone; one it did not is flooded, and so seen
//! on M. The learning rate is the highest rate at which M sees none of the
//! test frames (found by binary search); the caching capacity is how many of
//! more addresses than the table may hold are still forwarded without
//! flooding.

use std::thread;
use std::time::{Duration, Instant};

use bridge::port::{Outgoing, Queue, RawQueue, VNET_HDR_LEN};
use bridge::wire::{EtherType, FrameSpec, MacAddr, Payload};
use locks::StrategyKind;

use crate::flags;
use crate::report::{self, Field, Record};
use lab::{Netns, Process};

const TEST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const ETHERTYPE: u16 = 0x88b5;

#[derive(clap::Args)]
// --lock: this subcommand names all six strategies as its default, with a
// help text of its own.
#[command(mut_arg("locks", |arg| arg
    .default_value("mutex,rwlock,rmlock,sharded,rcu,epoch")
    .help("Strategies to measure, comma-separated or with the flag repeated")))]
// --out: this subcommand's own help text.
#[command(mut_arg("out", |arg| arg.help("Where the CSV and JSON files go")))]
pub struct Rfc2889Args {
    #[command(flatten)]
    strategies: flags::Strategies,
    /// Addresses learned per trial of the learning-rate test.
    #[arg(long, default_value_t = 1000)]
    addresses: u32,
    /// --max-entries for the caching-capacity test; it offers twice as many
    /// addresses.
    #[arg(long, default_value_t = 2048)]
    capacity: u32,
    /// Highest learning rate tried, in frames per second.
    #[arg(long, default_value_t = 1_000_000)]
    max_rate: u64,
    /// Binary search steps for the learning rate.
    #[arg(long, default_value_t = 7)]
    steps: u32,
    #[command(flatten)]
    binary: flags::MpbridgeBinary,
    #[command(flatten)]
    output: flags::Output,
}

fn learned_mac(i: u32) -> [u8; 6] {
    let b = i.to_be_bytes();
    [0x02, 0x10, b[0], b[1], b[2], b[3]]
}

/// A minimum-size test frame after a zero virtio-net header.
fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut buffer = vec![0u8; VNET_HDR_LEN];
    FrameSpec::new(MacAddr(dst), MacAddr(src))
        .ethertype(EtherType(ETHERTYPE))
        .payload(Payload::Fill(0x5a))
        .append_to(&mut buffer);
    buffer
}

/// Three hosts around one mpbridge.
struct Trial {
    hosts: [Netns; 3],
    _bridge: Netns,
    _process: Process,
}

const L: usize = 0;
const T: usize = 1;
const M: usize = 2;

impl Trial {
    fn new(mpbridge: &str, lock: StrategyKind, max_entries: u32) -> Result<Trial, String> {
        let bridge = Netns::new("br")?;
        let hosts = [
            Netns::new("learn")?,
            Netns::new("test")?,
            Netns::new("monitor")?,
        ];
        for (i, host) in hosts.iter().enumerate() {
            host.sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
            host.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
            let port = format!("p{i}");
            host.add_veth(&port, &bridge)?;
            host.ip(&["link", "set", "eth0", "up"])?;
        }
        let max = max_entries.to_string();
        let name = format!("--name=mpbench-{}", std::process::id());
        let process = Process::start(
            &bridge,
            &format!(
                "0-{}",
                thread::available_parallelism().map_or(1, |n| n.get()) - 1
            ),
            mpbridge,
            &[
                "run",
                &name,
                "--port=raw:p0",
                "--port=raw:p1",
                "--port=raw:p2",
                "--lock",
                lock.name(),
                "--max-entries",
                &max,
            ],
        )?;
        let trial = Trial {
            hosts,
            _bridge: bridge,
            _process: process,
        };
        // The test station speaks first.
        trial.send(T, vec![frame([0xff; 6], TEST_MAC)], 0)?;
        thread::sleep(Duration::from_millis(50));
        Ok(trial)
    }

    /// Sends `frames` from host `from`, paced at `rate` per second (0: as
    /// fast as the socket takes them); returns the rate achieved.
    fn send(&self, from: usize, frames: Vec<Vec<u8>>, rate: u64) -> Result<f64, String> {
        self.hosts[from].run(move || -> Result<f64, String> {
            let mut port = RawQueue::open("eth0", 1)
                .map_err(|e| format!("socket: {e}"))?
                .remove(0);
            let start = Instant::now();
            let mut sent = 0usize;
            while sent < frames.len() {
                let due = if rate == 0 {
                    frames.len()
                } else {
                    ((start.elapsed().as_secs_f64() * rate as f64) as usize).min(frames.len())
                };
                if due <= sent {
                    thread::sleep(Duration::from_micros(50));
                    continue;
                }
                let end = due.min(sent + 64);
                let batch = frames[sent..end]
                    .iter()
                    .map(|frame| Outgoing::split(frame, VNET_HDR_LEN));
                let n = port
                    .send_batch(batch)
                    .into_result()
                    .map_err(|e| e.to_string())?;
                // A full socket queue refused some: try those again.
                sent += n;
                if n == 0 {
                    thread::sleep(Duration::from_micros(50));
                }
            }
            Ok(frames.len() as f64 / start.elapsed().as_secs_f64().max(1e-9))
        })?
    }

    /// Learning frames from L at `rate`, then test frames from T; returns
    /// how many test frames the monitor saw (flooded: not learned) and the
    /// rate at which the learning frames actually went out.
    fn flooded(&self, addresses: u32, rate: u64, passes: u32) -> Result<(u64, f64), String> {
        let learning: Vec<Vec<u8>> = (0..addresses)
            .map(|i| frame(TEST_MAC, learned_mac(i)))
            .collect();
        let mut achieved = 0.0;
        for _ in 0..passes {
            achieved = self.send(L, learning.clone(), rate)?;
            thread::sleep(Duration::from_millis(20));
        }
        // Learning is applied after each received batch: let the last one land.
        thread::sleep(Duration::from_millis(100));
        let (before, _) = self.hosts[M].packets("eth0")?;
        let test = (0..addresses)
            .map(|i| frame(learned_mac(i), TEST_MAC))
            .collect();
        self.send(T, test, 100_000)?;
        thread::sleep(Duration::from_millis(100));
        let (after, _) = self.hosts[M].packets("eth0")?;
        Ok((after - before, achieved))
    }
}

pub fn run(args: Rfc2889Args) -> Result<(), String> {
    crate::forward::require_root()?;
    let mpbridge = crate::forward::mpbridge_path(args.binary.mpbridge.as_deref())?;
    if args.addresses == 0 || args.capacity < 2 || args.max_rate < 1000 {
        return Err(
            "--addresses must be positive, --capacity at least 2, --max-rate at least 1000"
                .to_owned(),
        );
    }
    println!(
        "RFC 2889 on three raw ports: learning rate with {} addresses ({} binary-search steps up to {} fps); caching capacity with --max-entries {} and {} addresses offered",
        args.addresses,
        args.steps,
        args.max_rate,
        args.capacity,
        2 * args.capacity
    );
    let bar = report::progress(args.strategies.locks.len() as u64 * (u64::from(args.steps) + 2));
    let mut rows = Vec::new();
    let mut records = Vec::new();
    for &lock in &args.strategies.locks {
        bar.set_message(format!("{lock}: learning rate"));
        // The table holds the addresses and the test station with room to
        // spare, so only the rate can make learning fail.
        let room = args.addresses + 16;
        // The rates searched are those asked of the generator; what is
        // reported is the rate the passing learning frames really went out at.
        let (mut low, mut high) = (0u64, args.max_rate);
        let mut best = 0f64;
        // First the top rate itself: if it passes, that is the answer.
        let trial = Trial::new(&mpbridge, lock, room)?;
        let (flooded, achieved) = trial.flooded(args.addresses, high, 1)?;
        let top_passes = flooded == 0;
        drop(trial);
        bar.inc(1);
        if top_passes {
            best = achieved;
            low = high;
        } else {
            for _ in 0..args.steps {
                let rate = (low + high) / 2;
                let trial = Trial::new(&mpbridge, lock, room)?;
                let (flooded, achieved) = trial.flooded(args.addresses, rate.max(1), 1)?;
                if flooded == 0 {
                    low = rate;
                    best = best.max(achieved);
                } else {
                    high = rate;
                }
                bar.inc(1);
            }
        }
        bar.set_message(format!("{lock}: caching capacity"));
        let trial = Trial::new(&mpbridge, lock, args.capacity)?;
        let offered = 2 * args.capacity;
        // Slowly enough that the rate is not what limits learning.
        let rate = (low / 2).clamp(1000, 50_000);
        // Twice, so that a learning frame lost on the way does not pass for
        // an address the table refused.
        let (flooded, _) = trial.flooded(offered, rate, 2)?;
        drop(trial);
        bar.inc(1);
        // The test station holds one entry too.
        let held = u64::from(offered).saturating_sub(flooded) + 1;
        rows.push((lock, best, top_passes, held));
        records.push(Record {
            fields: vec![
                ("strategy", Field::Text(lock.name().to_owned())),
                ("addresses", Field::Number(f64::from(args.addresses))),
                ("learning_rate_fps", Field::Number(best.round())),
                (
                    "rate_capped",
                    Field::Number(f64::from(u8::from(top_passes))),
                ),
                ("max_entries", Field::Number(f64::from(args.capacity))),
                ("offered_addresses", Field::Number(f64::from(offered))),
                ("held_entries", Field::Number(held as f64)),
            ],
        });
    }
    bar.finish_and_clear();
    println!();
    println!(
        "{:<8} {:>26} {:>28}",
        "strategy", "learning rate (fps)", "capacity held / promised"
    );
    println!("(learning rate: the highest rate the learning frames went out at with no test frame flooded; >= when the top rate tried passed)");
    for (lock, rate, capped, held) in rows {
        let rate = if capped {
            format!(">= {rate:.0}")
        } else {
            format!("{rate:.0}")
        };
        println!(
            "{:<8} {:>26} {:>19} / {:<8}",
            lock.name(),
            rate,
            held,
            args.capacity
        );
    }
    let files =
        report::write_records(&args.output.out, "rfc2889", &records).map_err(|e| e.to_string())?;
    report::print_written(&files);
    Ok(())
}
