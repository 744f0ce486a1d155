//! `mpbench forward --ports vhost`: frames per second through mpbridge
//! between two vhost-user ports, beside DPDK's own vhost switch in the
//! same run with the same generator.
//!
//! The generator is one DPDK testpmd with two virtio-user ports, both
//! served by one forwarding lcore pinned to CPU 0 (its main lcore shares
//! CPU 0 and sleeps). It runs macswap with each port looped onto itself,
//! after a first burst (`--tx-first`) from each port to the other's MAC:
//! every frame carries the MAC of the port that sent it, so the switch
//! learns each station once and then looks up and refreshes entries, as
//! it would for two VMs. (testpmd's flowgen mode, in DPDK 22.11, sends
//! every frame from one fixed source MAC on both ports, which makes a
//! learning switch move that station on every batch.) The frames in
//! flight are the first bursts, `--burst` frames per port; what the
//! generator receives per second is the figure.
//!
//! The switch runs on CPU 1: mpbridge with one worker (the strategies in
//! turn), or testpmd with two `net_vhost` ports in io mode, which forwards
//! each port's frames to the other without looking at them: the ceiling.
//! With `--workers P`, both sides use P queue pairs: the generator P
//! forwarding lcores on CPUs 0..P-1, the switch P workers (or lcores) on
//! CPUs P..2P-1. With `--generator-lcores 2` the generator has an lcore
//! per port and queue, 2P of them on CPUs 0..2P-1, and the switch is on
//! CPUs 2P..3P-1. Each figure comes with the switch's CPU time per
//! forwarded frame (its process's user and system time) and the busy
//! share of the generator's and the switch's CPUs.
//!
//! Both sides busy-poll, so a busy CPU says nothing of which side sets
//! the rate. The generator counts its own: with `--record-core-cycles`
//! testpmd adds up the cycles of its forwarding loop's passes that
//! carried frames (an empty poll is not counted) and prints them per
//! frame when it stops. That per frame, times the rate, over its cores'
//! cycles is the share of the generator's cores spent on frames: near all
//! of it, the generator sets the rate, whatever the switch could do.
//!
//! Each switch counts its own the same way, which the generator's limit
//! does not cap: DPDK's switch with `--record-core-cycles` too, mpbridge
//! as its workers' busy time (the rounds of their loop that found frames,
//! `busy_ns` of `mpbridge stats`), both over the whole run. Their ratio,
//! pair by pair, is what the two would forward against each other with a
//! generator that could offer more than either takes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use locks::StrategyKind;

use super::args::ForwardArgs;
use crate::cpuload;

/// Ring entries per virtqueue.
const QUEUE_SIZE: usize = 1024;
/// Statistics periods before the measured ones.
const WARMUP_PERIODS: usize = 1;

/// What switches the frames.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Switch {
    /// DPDK's vhost PMD in testpmd io mode: no lookup, the ceiling.
    Dpdk,
    /// mpbridge with one worker.
    Mpbridge(StrategyKind),
}

impl Switch {
    fn label(self) -> String {
        match self {
            Switch::Dpdk => "DPDK vhost switch (io, no lookup)".to_owned(),
            Switch::Mpbridge(lock) => format!("mpbridge {lock}"),
        }
    }
}

/// One measurement.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// Frames per second the generator received, both ports together.
    fps: f64,
    /// The switch process's CPU nanoseconds per forwarded frame.
    switch_ns: f64,
    /// Busy share of the generator's CPUs and of the switch's.
    generator_busy: f64,
    switch_busy: f64,
    /// The generator's cycles per frame in passes that carried frames.
    generator_cycles: Option<TestpmdCycles>,
    /// The switch's nanoseconds per frame in passes (or rounds) that
    /// carried frames: its cost, whoever sets the rate.
    switch_cost_ns: Option<f64>,
}

/// What a testpmd's forwarding cost it (the generator's, or DPDK's
/// switch's), as it reports when it stops.
#[derive(Clone, Copy, Debug, PartialEq)]
struct TestpmdCycles {
    per_frame: f64,
    /// Its cycle counter's rate.
    mhz: f64,
}

impl TestpmdCycles {
    /// The share of `pairs` cores that forwarding `fps` frames a second
    /// takes.
    fn share(&self, fps: f64, pairs: usize) -> f64 {
        fps * self.per_frame / (self.mhz * 1e6 * pairs as f64)
    }

    /// Nanoseconds per frame.
    fn ns(&self) -> f64 {
        self.per_frame * 1e3 / self.mhz
    }
}

/// What the generator's standard output tells, line by line.
enum Report {
    /// Frames received per second in one period, both ports.
    Period(f64),
    /// Its cycles per frame, printed as it stops.
    Cycles(TestpmdCycles),
}

/// A process of ours, killed (by its pid) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        lab::stop_child(&mut self.0);
    }
}

/// A folder for the sockets, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, String> {
        let dir = std::env::temp_dir().join(lab::unique("mpbench-vhost"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dpdk_installed() -> bool {
    Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Waits (at most 5 s) until `paths` exist.
fn wait_for(paths: &[&Path]) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !paths.iter().all(|p| p.exists()) {
        if Instant::now() > deadline {
            return Err(format!("no socket at {}", paths[0].display()));
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// CPUs `first..first + count` as a list.
fn cpu_list(first: usize, count: usize) -> String {
    match count {
        1 => first.to_string(),
        _ => format!("{first}-{}", first + count - 1),
    }
}

/// testpmd's lcores: the main one and `count` forwarding ones, on CPUs
/// `first..first + count` (the main lcore shares the first, and sleeps).
fn lcores(first: usize, count: usize) -> String {
    let mut list = format!("0@{first}");
    for n in 0..count {
        list += &format!(",{}@{}", n + 1, first + n);
    }
    list
}

/// The switch with `pairs` workers (or lcores) on CPUs `first..`.
fn start_switch(
    switch: Switch,
    (first, pairs): (usize, usize),
    mpbridge: &str,
    dir: &Path,
) -> Result<Running, String> {
    let cpus = cpu_list(first, pairs);
    let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    let child = match switch {
        Switch::Mpbridge(lock) => Command::new("taskset")
            .args(["-c", &cpus, mpbridge, "run", "--lock", lock.name()])
            .arg(format!("--workers={pairs}"))
            .arg(format!("--cpus={cpus}"))
            .arg(format!("--ctl={}", dir.join("ctl").display()))
            .arg(format!("--port=vhost:{}", a.display()))
            .arg(format!("--port=vhost:{}", b.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn(),
        Switch::Dpdk => Command::new("taskset")
            .args([
                "-c",
                &cpus,
                "dpdk-testpmd",
                "--lcores",
                &lcores(first, pairs),
            ])
            .args([
                "--no-huge",
                "-m",
                "1024",
                "--no-pci",
                "--file-prefix",
                "mpbench-switch",
            ])
            .arg(format!(
                "--vdev=net_vhost0,iface={},queues={pairs}",
                a.display()
            ))
            .arg(format!(
                "--vdev=net_vhost1,iface={},queues={pairs}",
                b.display()
            ))
            .args(["--", "--forward-mode=io", "--auto-start"])
            .arg(format!("--nb-cores={pairs}"))
            .arg(format!("--rxq={pairs}"))
            .arg(format!("--txq={pairs}"))
            .args(["--total-num-mbufs=65536", "--record-core-cycles"])
            .arg(format!("--rxd={QUEUE_SIZE}"))
            .arg(format!("--txd={QUEUE_SIZE}"))
            // testpmd runs until its standard input ends: the pipe stays
            // open as long as the child is ours.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn(),
    }
    .map_err(|e| format!("cannot start the switch: {e}"))?;
    let running = Running(child);
    wait_for(&[&a, &b])?;
    Ok(running)
}

/// What the generator sends: frames of `size` bytes, `in_flight` of them
/// per port and queue, over `pairs` queue pairs, with `lcores`
/// forwarding lcores per pair (1: both ports' streams on one; 2: one
/// each), on CPUs from 0 on.
#[derive(Clone, Copy)]
struct Generator {
    size: usize,
    pairs: usize,
    in_flight: u16,
    lcores: usize,
}

impl Generator {
    /// Its CPUs, 0 to this less one; the switch's come next.
    fn cpus(&self) -> usize {
        self.lcores * self.pairs
    }
}

/// The generator, started: one line of its statistics per port and
/// period comes out of its standard output.
fn start_generator(dir: &Path, generator: Generator) -> Result<Running, String> {
    let Generator {
        size,
        pairs,
        in_flight,
        ..
    } = generator;
    let cores = generator.cpus();
    let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
    let port = |n: usize, path: &PathBuf| {
        format!(
            "--vdev=net_virtio_user{n},path={},queues={pairs},queue_size={QUEUE_SIZE},mac=02:00:00:00:00:0{n}",
            path.display()
        )
    };
    let child = Command::new("taskset")
        .args(["-c", &cpu_list(0, cores), "dpdk-testpmd"])
        .args(["--lcores", &lcores(0, cores), "--no-huge", "-m", "1024"])
        .args(["--no-pci", "--file-prefix", "mpbench-generator"])
        .arg(port(0, &a))
        .arg(port(1, &b))
        .args(["--", "--forward-mode=macswap", "--port-topology=loop"])
        .arg(format!("--nb-cores={cores}"))
        .arg(format!("--rxq={pairs}"))
        .arg(format!("--txq={pairs}"))
        .args([
            "--eth-peer=0,02:00:00:00:00:01",
            "--eth-peer=1,02:00:00:00:00:00",
        ])
        .arg(format!("--txpkts={}", size - 4))
        .arg(format!("--burst={in_flight}"))
        .arg(format!("--rxd={QUEUE_SIZE}"))
        .arg(format!("--txd={QUEUE_SIZE}"))
        .args(["--tx-first", "--stats-period=1", "--total-num-mbufs=65536"])
        .arg("--record-core-cycles")
        // Open until it is stopped: testpmd ends when its input does.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the generator: {e}"))?;
    Ok(Running(child))
}

/// The receive rate (both ports) of each statistics period the generator
/// prints, as they come, and its cycles per frame when it stops.
fn reports(generator: &mut Running) -> mpsc::Receiver<Report> {
    let stdout = generator.0.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut ports = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rate) = rx_pps(&line) {
                ports.push(rate);
            }
            let report = if ports.len() == 2 {
                let sum = ports[0] + ports[1];
                ports.clear();
                Report::Period(sum)
            } else if let Some(cycles) = cycles_per_frame(&line) {
                Report::Cycles(cycles)
            } else {
                continue;
            };
            if tx.send(report).is_err() {
                return;
            }
        }
    });
    rx
}

/// The cycles per frame in testpmd's closing statistics (with
/// `--record-core-cycles`): "CPU cycles/packet=211.14 (total cycles=...
/// / total macswap packets=...) at 2600 MHz Clock".
fn cycles_per_frame(line: &str) -> Option<TestpmdCycles> {
    let rest = line.trim().strip_prefix("CPU cycles/packet=")?;
    let per_frame = rest.split_whitespace().next()?.parse().ok()?;
    let mhz = rest
        .rsplit_once(" at ")?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(TestpmdCycles { per_frame, mhz })
}

/// The receive rate in a line of testpmd's periodic statistics.
fn rx_pps(line: &str) -> Option<f64> {
    let rest = line.trim().strip_prefix("Rx-pps:")?;
    rest.split_whitespace().next()?.parse().ok()
}

fn measure(
    switch: Switch,
    mpbridge: &str,
    dir: &Path,
    generator: Generator,
    seconds: usize,
) -> Result<Sample, String> {
    let (pairs, first) = (generator.pairs, generator.cpus());
    let mut running = start_switch(switch, (first, pairs), mpbridge, dir)?;
    let pid = running.0.id();
    let switch_reports = (switch == Switch::Dpdk).then(|| reports(&mut running));
    let mut generator = start_generator(dir, generator)?;
    let reports = reports(&mut generator);
    let within = |limit| loop {
        match reports.recv_timeout(limit) {
            Ok(Report::Period(rate)) => return Ok(rate),
            Ok(Report::Cycles(_)) => continue,
            Err(_) => {
                return Err(format!(
                    "{}: the generator reported no rates",
                    switch.label()
                ));
            }
        }
    };
    let next = || within(Duration::from_secs(20));
    // Frames flow from the first period with any; more warm up. DPDK's
    // switch once took 17 s here to answer the generator's memory table:
    // the first report may be that late.
    while within(Duration::from_secs(90))? == 0.0 {}
    for _ in 0..WARMUP_PERIODS {
        next()?;
    }
    let (cpu_before, cores_before) = (lab::cpu_seconds(pid), cpuload::sample());
    let mut measured = Vec::with_capacity(seconds);
    for _ in 0..seconds {
        measured.push(next()?);
    }
    let (cpu_after, cores_after) = (lab::cpu_seconds(pid), cpuload::sample());
    let workers_busy = match switch {
        Switch::Mpbridge(_) => workers_busy_ns(mpbridge, &dir.join("ctl")),
        Switch::Dpdk => None,
    };
    // Stopped, testpmd prints its cycles and ends its output.
    drop(generator);
    let generator_cycles = closing_cycles(&reports);
    drop(running);
    let switch_cost_ns = match switch_reports {
        Some(reports) => closing_cycles(&reports).map(|c| c.ns()),
        None => workers_busy,
    };
    let cores = match (cores_before, cores_after) {
        (Ok(before), Ok(after)) => cpuload::between(&before, &after),
        _ => Vec::new(),
    };
    let frames: f64 = measured.iter().sum();
    let busy = |first: usize, count: usize| {
        let shares: Vec<f64> = cores
            .iter()
            .skip(first)
            .take(count)
            .map(|c| c.busy_ns() / (c.busy_ns() + c.idle_ns).max(1.0))
            .collect();
        shares.iter().sum::<f64>() / shares.len().max(1) as f64
    };
    Ok(Sample {
        fps: frames / measured.len() as f64,
        switch_ns: (cpu_after - cpu_before) * 1e9 / frames.max(1.0),
        generator_busy: busy(0, first),
        switch_busy: busy(first, pairs),
        generator_cycles,
        switch_cost_ns,
    })
}

/// The cycles per frame a stopped testpmd printed, once its output ends.
fn closing_cycles(reports: &mpsc::Receiver<Report>) -> Option<TestpmdCycles> {
    reports.iter().find_map(|report| match report {
        Report::Cycles(cycles) => Some(cycles),
        Report::Period(_) => None,
    })
}

/// mpbridge's workers' busy nanoseconds per frame received since it
/// started, from `mpbridge stats --json`; none from a build that does not
/// report them.
fn workers_busy_ns(mpbridge: &str, ctl: &Path) -> Option<f64> {
    let output = Command::new(mpbridge)
        .args(["stats", "--json", "--ctl"])
        .arg(ctl)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    busy_per_frame(&String::from_utf8_lossy(&output.stdout))
}

/// [`workers_busy_ns`] of a `stats --json` answer.
fn busy_per_frame(json: &str) -> Option<f64> {
    let stats: serde_json::Value = serde_json::from_str(json).ok()?;
    let (mut busy, mut frames) = (0u64, 0u64);
    for worker in stats.get("workers")?.as_array()? {
        busy += worker.get("busy_ns")?.as_u64()?;
        frames += worker.get("frames")?.as_u64()?;
    }
    (frames > 0).then(|| busy as f64 / frames as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the vhost measurements.
pub(super) fn run(args: &ForwardArgs, mpbridge: &str) -> Result<(), String> {
    if !dpdk_installed() {
        return Err(
            "dpdk-testpmd not found: the vhost benchmark needs Debian's dpdk-dev package"
                .to_owned(),
        );
    }
    let seconds = args.interval.seconds.round().max(1.0) as usize;
    let cpus = super::topology::cpus();
    let mut configs = Vec::new();
    let per_pair = usize::from(args.generator_lcores);
    for &pairs in &args.workers {
        let need = (per_pair + 1) * pairs;
        if need > cpus {
            println!("note: {pairs} queue pairs need {need} CPUs; this machine has {cpus}");
            continue;
        }
        configs.push((Switch::Dpdk, pairs));
        configs.extend(
            args.strategies
                .locks
                .iter()
                .map(|&l| (Switch::Mpbridge(l), pairs)),
        );
    }
    if configs.is_empty() {
        return Err("no --workers count fits this machine".to_owned());
    }
    let dir = Scratch::new()?;
    let (lcores, g) = match per_pair {
        1 => ("one forwarding lcore per queue pair", "P"),
        _ => ("one forwarding lcore per port and queue", "2P"),
    };
    println!(
        "vhost-user: generator testpmd (two virtio-user ports, macswap looped, {in_flight} frames in flight \
         per port and queue, {lcores}) on CPUs 0..{g}-1; the switch (mpbridge: \
         P workers; DPDK: P lcores) on the next P CPUs, for P queue pairs; rings of {QUEUE_SIZE}; \
         mean of {seconds} one-second periods after {WARMUP_PERIODS} of warm-up once frames flow; \
         {} runs, each mpbridge run paired with a run of DPDK's switch next to it (which first \
         alternating), medians over all runs",
        args.repeats.runs,
        in_flight = args.in_flight,
    );
    println!(
        "gen cyc/fr: the generator's cycles per frame in the passes of its loop that carried frames \
         (testpmd --record-core-cycles, the whole run); gen frames: that at the measured rate, as a \
         share of its cores. Both sides poll all the time (gen busy, sw busy); where gen frames \
         is near 100% the generator sets the rate. sw cost ns/fr: the switch's own time per \
         frame in the passes that carried frames (DPDK: --record-core-cycles; mpbridge: its \
         workers' busy_ns), the whole run, which the generator's limit does not cap"
    );
    let mut samples = vec![vec![Vec::new(); args.sizes.len()]; configs.len()];
    // Per mpbridge configuration and size, its rate over DPDK's in the
    // run beside it: what this machine's drifting speed does not blur.
    let mut ratios = vec![vec![Vec::new(); args.sizes.len()]; configs.len()];
    // And DPDK's cost per frame over mpbridge's, pair by pair.
    let mut costs = vec![vec![Vec::new(); args.sizes.len()]; configs.len()];
    let measured = |switch, pairs, size| {
        let generator = Generator {
            size,
            pairs,
            in_flight: args.in_flight,
            lcores: per_pair,
        };
        measure(switch, mpbridge, &dir.0, generator, seconds)
    };
    for run in 0..args.repeats.runs {
        for k in 0..configs.len() {
            let c = (run + k) % configs.len();
            let (switch, pairs) = configs[c];
            if switch == Switch::Dpdk {
                continue;
            }
            let dpdk = configs
                .iter()
                .position(|&config| config == (Switch::Dpdk, pairs))
                .expect("each queue pair count has its DPDK run");
            for (z, &size) in args.sizes.iter().enumerate() {
                let (ours, theirs) = if dpdk_first(run, k) {
                    let theirs = measured(Switch::Dpdk, pairs, size)?;
                    (measured(switch, pairs, size)?, theirs)
                } else {
                    let ours = measured(switch, pairs, size)?;
                    (ours, measured(Switch::Dpdk, pairs, size)?)
                };
                ratios[c][z].push(ours.fps / theirs.fps.max(1.0));
                if let (Some(ours), Some(theirs)) = (ours.switch_cost_ns, theirs.switch_cost_ns) {
                    costs[c][z].push(theirs / ours.max(f64::MIN_POSITIVE));
                }
                samples[c][z].push(ours);
                samples[dpdk][z].push(theirs);
            }
        }
    }
    drop(dir);
    for (z, &size) in args.sizes.iter().enumerate() {
        println!("\n{size}-byte frames:");
        println!(
            "  {:<36} {:>5} {:>9} {:>10} {:>14} {:>14} {:>9} {:>9} {:>11} {:>10}",
            "switch",
            "pairs",
            "Mfps",
            "of DPDK",
            "switch ns/fr",
            "sw cost ns/fr",
            "gen busy",
            "sw busy",
            "gen cyc/fr",
            "gen frames"
        );
        let mut ceiling = 0.0;
        for (c, &(switch, pairs)) in configs.iter().enumerate() {
            let runs = &samples[c][z];
            let fps = median(runs.iter().map(|s| s.fps).collect());
            if switch == Switch::Dpdk {
                ceiling = fps;
            }
            let ns = median(runs.iter().map(|s| s.switch_ns).collect());
            let generator = median(runs.iter().map(|s| s.generator_busy).collect());
            let busy = median(runs.iter().map(|s| s.switch_busy).collect());
            let cycles: Vec<(f64, f64)> = runs
                .iter()
                .filter_map(|s| {
                    let c = s.generator_cycles?;
                    Some((c.per_frame, c.share(s.fps, per_pair * pairs)))
                })
                .collect();
            let (per_frame, share) = match cycles.is_empty() {
                true => ("-".to_owned(), "-".to_owned()),
                false => (
                    format!("{:.0}", median(cycles.iter().map(|c| c.0).collect())),
                    format!(
                        "{:.0}%",
                        100.0 * median(cycles.iter().map(|c| c.1).collect())
                    ),
                ),
            };
            let costs: Vec<f64> = runs.iter().filter_map(|s| s.switch_cost_ns).collect();
            let cost = match costs.is_empty() {
                true => "-".to_owned(),
                false => format!("{:.1}", median(costs)),
            };
            let spread = runs
                .iter()
                .map(|s| format!("{:.2}", s.fps / 1e6))
                .collect::<Vec<_>>()
                .join(" ");
            println!(
                "  {:<36} {:>5} {:>9.2} {:>9.0}% {:>14.0} {cost:>14} {:>8.0}% {:>8.0}% {per_frame:>11} {share:>10}   runs: {spread}",
                switch.label(),
                pairs,
                fps / 1e6,
                100.0 * fps / f64::max(ceiling, 1.0),
                ns,
                100.0 * generator,
                100.0 * busy,
            );
        }
        println!("  paired with DPDK's switch (mpbridge / DPDK, each pair of adjacent runs):");
        println!(
            "  {:<36} {:>5} {:>8} {:>8} {:>8}",
            "switch", "pairs", "median", "min", "max"
        );
        print_pairs(&configs, &ratios, z);
        println!(
            "  cost paired (DPDK's sw cost ns/fr over mpbridge's, each pair: above 1, mpbridge \
             spends less a frame):"
        );
        print_pairs(&configs, &costs, z);
    }
    Ok(())
}

/// One line per mpbridge configuration of its paired figures at size
/// index `z`: their median, extremes and each pair.
fn print_pairs(configs: &[(Switch, usize)], pairs_of: &[Vec<Vec<f64>>], z: usize) {
    for (c, &(switch, pairs)) in configs.iter().enumerate() {
        if switch == Switch::Dpdk {
            continue;
        }
        let each_pair = &pairs_of[c][z];
        let Some(summary) = Summary::of(each_pair) else {
            continue;
        };
        let each = each_pair
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "  {:<36} {:>5} {:>7.2}x {:>7.2}x {:>7.2}x   pairs: {each}",
            switch.label(),
            pairs,
            summary.median,
            summary.min,
            summary.max,
        );
    }
}

/// Whether DPDK's switch runs first in pair `k` of run `run`: the order
/// alternates, so that neither side always meets the machine warmer.
fn dpdk_first(run: usize, k: usize) -> bool {
    (run + k) % 2 == 0
}

/// The median and the extremes of paired ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Summary {
    median: f64,
    min: f64,
    max: f64,
}

impl Summary {
    fn of(ratios: &[f64]) -> Option<Summary> {
        let min = ratios.iter().copied().reduce(f64::min)?;
        let max = ratios.iter().copied().reduce(f64::max)?;
        Some(Summary {
            median: median(ratios.to_vec()),
            min,
            max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_rates_are_read_from_the_statistics() {
        assert_eq!(
            rx_pps("  Rx-pps:      1690335          Rx-bps:    811360984"),
            Some(1690335.0)
        );
        assert_eq!(
            rx_pps("  Tx-pps:      1690380          Tx-bps:    811382488"),
            None
        );
        assert_eq!(rx_pps("  Rx-pps:"), None);
    }

    #[test]
    fn cycles_per_frame_are_read_from_the_closing_statistics() {
        let line = "  CPU cycles/packet=211.14 (total cycles=16980878868 / total macswap \
                    packets=80423296) at 2600 MHz Clock";
        let cycles = cycles_per_frame(line).unwrap();
        assert_eq!(
            cycles,
            TestpmdCycles {
                per_frame: 211.14,
                mhz: 2600.0
            }
        );
        // 10 Mfps at 211.14 cycles a frame on one 2.6 GHz core: 81.2%.
        assert!((cycles.share(10e6, 1) - 0.812).abs() < 1e-3);
        assert!((cycles.share(10e6, 2) - 0.406).abs() < 1e-3);
        assert_eq!(cycles_per_frame("  Rx-pps:      1690335"), None);
        assert_eq!(cycles_per_frame("  CPU cycles/packet=12 (total)"), None);
    }

    #[test]
    fn the_workers_cost_is_their_busy_time_over_their_frames() {
        let json = r#"{"name":"mpbridge","workers":[
            {"id":0,"frames":1000,"batches":20,"busy_percent":50.0,"busy_ns":90000},
            {"id":1,"frames":3000,"batches":60,"busy_percent":50.0,"busy_ns":250000}]}"#;
        assert_eq!(busy_per_frame(json), Some(85.0));
        // A build that does not report its busy time, or no frames yet.
        let old = r#"{"workers":[{"id":0,"frames":1000,"busy_percent":50.0}]}"#;
        assert_eq!(busy_per_frame(old), None);
        let idle = r#"{"workers":[{"id":0,"frames":0,"busy_ns":0}]}"#;
        assert_eq!(busy_per_frame(idle), None);
        assert_eq!(busy_per_frame("not json"), None);
        // DPDK's switch: cycles at its clock.
        let cycles = TestpmdCycles {
            per_frame: 221.0,
            mhz: 2600.0,
        };
        assert!((cycles.ns() - 85.0).abs() < 1e-9);
    }

    #[test]
    fn a_generator_with_a_core_per_port_puts_the_switch_after_it() {
        let generator = |pairs, lcores| Generator {
            size: 64,
            pairs,
            in_flight: 512,
            lcores,
        };
        assert_eq!(generator(1, 1).cpus(), 1);
        assert_eq!(generator(1, 2).cpus(), 2);
        assert_eq!(generator(4, 2).cpus(), 8);
        // The main lcore shares the first forwarding lcore's CPU.
        assert_eq!(lcores(0, 2), "0@0,1@0,2@1");
        assert_eq!(cpu_list(2, 1), "2");
        assert_eq!(lcores(2, 1), "0@2,1@2");
    }

    #[test]
    fn pairs_alternate_and_ratios_summarise() {
        // Over two runs each configuration has DPDK first once and last
        // once; neighbours in a run differ.
        for k in 0..7 {
            assert_ne!(dpdk_first(0, k), dpdk_first(1, k));
            assert_ne!(dpdk_first(0, k), dpdk_first(0, k + 1));
        }
        assert_eq!(Summary::of(&[]), None);
        let summary = Summary::of(&[0.9, 1.3, 1.1, 0.7, 1.2]).unwrap();
        assert_eq!(
            summary,
            Summary {
                median: 1.1,
                min: 0.7,
                max: 1.3
            }
        );
    }
}
