//! `mpbench forward`: frames per second through mpbridge on real ports,
//! side by side with references measured in the same run with the same
//! generator and the same sink: the Linux kernel bridge, mpbridge's own
//! forwarding loop as a relay without a MAC table, and the generator wired
//! straight to the sink. Needs root.
//!
//! The generator is a thread of this process, pinned to CPU 0, sending one
//! known-unicast frame over and over from a PACKET_TX_RING with
//! PACKET_QDISC_BYPASS (`generator.rs`) in its own namespace. The sink is
//! the far interface in another namespace: what it received is read from
//! its counters, and what was offered from the generator interface's
//! counters (sent plus dropped there), never from what the generator
//! believes it sent. The forwarder (mpbridge, or the kernel bridge) gets
//! CPU 1 (1..=workers). The ingress veth's receive work is steered with RPS
//! either to a CPU that is not the forwarder's (placement a, "apart") or to
//! the forwarder's own (placement b, "shared"); every core's busy time over
//! the interval is read from /proc/stat, so that each figure comes with the
//! CPU time it cost per delivered frame and where that time went.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bridge::port::{Port, RawPort, VNET_HDR_LEN};
use bridge::wire::{EtherType, FrameSpec, MacAddr, Payload};
use locks::StrategyKind;

use crate::cpuload::{self, CoreUse};
use crate::generator::TxRing;
use crate::report::{self, Field, Plot, Record};
use crate::tcp::{self, TcpRates};
use lab::{self, Netns, Process};

const GENERATOR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const SINK_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const ETHERTYPE: u16 = 0x88b5;
const WARMUP: Duration = Duration::from_millis(300);
const SETTLE: Duration = Duration::from_millis(700);

#[derive(clap::Args)]
pub struct ForwardArgs {
    /// Port kinds: raw (veth pairs through AF_PACKET), tap, vxlan (two
    /// VTEPs across a veth underlay), or several.
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
    /// direct (veth ports), loop (a blocking read/write loop, tap ports),
    /// vde (tap ports, when vde_switch is installed).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kernel,relay,direct,loop,vde"
    )]
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
    /// Where the ingress veth's receive work runs: apart (placement a, a
    /// CPU that is not the forwarder's) and/or shared (placement b, the
    /// forwarder's CPU, as RPS gives the kernel bridge). Raw ports only.
    #[arg(long, value_delimiter = ',', default_value = "apart,shared")]
    placement: Vec<Placement>,
    /// An offered-load sweep: percentages of each configuration's own
    /// flat-out delivered rate (measured first in every run), and `max`
    /// (flat out), e.g. 10,25,50,100,150,max. Plots delivered against
    /// offered at the first frame size; receive livelock shows as a curve
    /// that falls after its peak.
    #[arg(long, value_delimiter = ',', value_parser = parse_load)]
    sweep: Vec<Load>,
    /// Instead of frames, one bulk TCP connection from the generator's
    /// namespace to the sink's (198.18.0.1 to 198.18.0.2), default
    /// offloads: goodput in Mbit/s and CPU time per KiB.
    #[arg(long)]
    tcp: bool,
    /// The mpbridge binary (default: the one beside mpbench).
    #[arg(long)]
    mpbridge: Option<PathBuf>,
    /// How mpbridge's raw ports take frames from the kernel: frame (each
    /// as it arrives, TPACKET_V2) or block (blocks handed over when full or
    /// after 1 ms, TPACKET_V3); passed as `--rx-ring` to every mpbridge.
    #[arg(long, default_value = "frame", value_parser = ["frame", "block"])]
    rx_ring: String,
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
    /// Two VTEPs across a veth underlay (MTU 1600): mpbridge with a tap to
    /// each host and a VXLAN port, or the kernel's vxlan devices and
    /// bridges with a veth to each host.
    Vxlan,
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
    /// Blocking read/write between the two taps, one thread per direction
    /// (`mpbench tap-loop`): the least a tap forwarder can do.
    Loop,
    /// No reference: mpbridge alone (for profiling it).
    None,
}

/// Where the ingress interface's receive work (softirq) runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Placement {
    /// Placement (a): on a CPU that is not the forwarder's.
    Apart,
    /// Placement (b): on the forwarder's CPU.
    Shared,
}

impl Placement {
    fn label(self) -> &'static str {
        match self {
            Placement::Apart => "(a) rx apart",
            Placement::Shared => "(b) rx shared",
        }
    }
}

/// How much the generator offers.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Load {
    /// As fast as it can.
    FlatOut,
    /// This many frames per second.
    Rate(f64),
    /// This fraction of the configuration's flat-out delivered rate.
    Share(f64),
}

fn parse_load(text: &str) -> Result<Load, String> {
    if text == "max" {
        return Ok(Load::FlatOut);
    }
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1000.0 => Ok(Load::Share(p / 100.0)),
        _ => Err(format!("{text}: a percentage between 0 and 1000, or max")),
    }
}

/// What forwards the frames.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Target {
    Direct,
    Kernel,
    Vde,
    Loop,
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
    /// Where the ingress receive work runs; None where there is none to
    /// place (a tap's ingress is the generator's own send) or no forwarder.
    placement: Option<Placement>,
}

impl Setup {
    fn label(&self) -> String {
        let ports = match self.ports {
            PortKindArg::Raw => "raw",
            PortKindArg::Tap => "tap",
            PortKindArg::Vxlan => "vxlan",
        };
        let io = |poll: bool| if poll { ", poll" } else { "" };
        let placed = match self.placement {
            Some(p) => format!(" {}", p.label()),
            None => String::new(),
        };
        self.target_label(ports, io) + &placed
    }

    fn target_label(&self, ports: &str, io: impl Fn(bool) -> &'static str) -> String {
        match self.target {
            Target::Direct => "direct (generator to sink)".to_owned(),
            Target::Kernel if self.ports == PortKindArg::Vxlan => {
                "kernel vxlan devices and bridges (veth hosts)".to_owned()
            }
            Target::Kernel => "kernel bridge (veth)".to_owned(),
            Target::Vde => "vde_switch (tap)".to_owned(),
            Target::Loop => "read/write loop (tap)".to_owned(),
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
    /// A second VTEP's mpbridge and the VTEPs' namespaces (VXLAN).
    _far: Option<Process>,
    _vteps: Vec<Netns>,
}

fn cpus() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU that takes the ingress receive work: the forwarder's first CPU
/// (shared), or one that is neither the forwarder's nor the generator's
/// where there is one, else the generator's (apart).
fn receive_cpu(placement: Placement, workers: usize) -> usize {
    let n = cpus();
    match placement {
        Placement::Shared => 1.min(n - 1),
        Placement::Apart if workers + 1 < n => workers + 1,
        Placement::Apart => 0,
    }
}

/// The CPUs the forwarder runs on: all but the generator's CPU 0, as many as
/// it has workers, shared when there are not enough.
pub fn forwarder_cpus(workers: usize) -> String {
    let n = cpus();
    if n == 1 {
        "0".to_owned()
    } else if workers < n {
        format!("1-{workers}")
    } else {
        format!("0-{}", n - 1)
    }
}

/// The mpbridge binary and the options every instance runs with.
pub struct Program {
    path: String,
    rx_ring: String,
}

fn build(setup: Setup, mpbridge: &Program) -> Result<Bench, String> {
    let generator = Netns::new("gen")?;
    let sink = Netns::new("sink")?;
    for ns in [&generator, &sink] {
        ns.sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
        ns.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
    }
    let forwarder_mask = 1u64 << 1.min(cpus() - 1);
    let workers = match setup.target {
        Target::Mpbridge { workers, .. } => workers,
        _ => 1,
    };
    let ingress_mask =
        1u64 << receive_cpu(setup.placement.unwrap_or(Placement::Shared), workers).min(63);
    let mut bridge = None;
    let mut process = None;
    let mut daemon = None;
    let mut far = None;
    let mut vteps = Vec::new();
    match (setup.target, setup.ports) {
        (Target::Kernel, PortKindArg::Vxlan) => {
            let (a, b) = vxlan_underlay()?;
            generator.add_veth("p0", &a)?;
            sink.add_veth("p1", &b)?;
            a.rps("p0", forwarder_mask)?;
            kernel_vtep(&a, VTEP_A, VTEP_B, "p0")?;
            kernel_vtep(&b, VTEP_B, VTEP_A, "p1")?;
            vteps = vec![a, b];
        }
        (target @ Target::Mpbridge { .. }, PortKindArg::Vxlan) => {
            let (a, b) = vxlan_underlay()?;
            let segment = |local: &str, remote: &str| {
                format!("--port=vxlan:seg,vni=42,local={local},remote={remote}")
            };
            process = Some(start_mpbridge(
                &a,
                target,
                &["--port=tap:t0", &segment(VTEP_A, VTEP_B)],
                mpbridge,
                &bridge_name(),
            )?);
            far = Some(start_mpbridge(
                &b,
                target,
                &["--port=tap:t1", &segment(VTEP_B, VTEP_A)],
                mpbridge,
                &far_bridge_name(),
            )?);
            for (tap, from, to) in [("t0", &a, &generator), ("t1", &b, &sink)] {
                from.ip(&["link", "set", tap, "netns", &to.name])?;
                to.ip(&["link", "set", tap, "name", "eth0"])?;
            }
            vteps = vec![a, b];
        }
        (_, PortKindArg::Vxlan) => {
            return Err("only mpbridge and the kernel are measured on VXLAN".to_owned())
        }
        (Target::Direct, _) => {
            generator.add_veth("eth0", &sink)?;
            sink.rps("eth0", forwarder_mask)?;
        }
        (Target::Vde, PortKindArg::Raw) => {
            return Err("vde_switch is measured on tap ports only".to_owned())
        }
        (Target::Loop, PortKindArg::Raw) => {
            return Err("the read/write loop is measured on tap ports only".to_owned())
        }
        (target, PortKindArg::Raw) => {
            let b = Netns::new("br")?;
            b.sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
            b.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
            generator.add_veth("p0", &b)?;
            sink.add_veth("p1", &b)?;
            // Receive work on the forwarder's ingress runs where the
            // placement says (RPS), not inside the generator's sends.
            b.rps("p0", ingress_mask)?;
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
                        &bridge_name(),
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
        (Target::Loop, PortKindArg::Tap) => {
            let b = Netns::new("br")?;
            let mpbench = std::env::current_exe().map_err(|e| e.to_string())?;
            process = Some(Process::start(
                &b,
                &forwarder_cpus(1),
                &mpbench.to_string_lossy(),
                &["tap-loop", "t0", "t1"],
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
                &bridge_name(),
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
        _far: far,
        _vteps: vteps,
    })
}

/// The underlay addresses of the two VTEPs.
const VTEP_A: &str = "198.18.1.1";
const VTEP_B: &str = "198.18.1.2";

/// Two VTEP namespaces joined by a veth `u0` with room for a 1518-byte
/// frame and the 50 bytes of VXLAN over IPv4.
fn vxlan_underlay() -> Result<(Netns, Netns), String> {
    let (a, b) = (Netns::new("vtepa")?, Netns::new("vtepb")?);
    for ns in [&a, &b] {
        ns.sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
        ns.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
    }
    a.ip(&[
        "link", "add", "u0", "type", "veth", "peer", "name", "u0", "netns", &b.name,
    ])?;
    for (ns, addr) in [(&a, VTEP_A), (&b, VTEP_B)] {
        ns.ip(&["link", "set", "u0", "mtu", "1600"])?;
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", "u0"])?;
        ns.ip(&["link", "set", "u0", "up"])?;
    }
    Ok((a, b))
}

/// The kernel's VTEP: vxlan device `vx0` (VNI 42) and `port` in bridge br0.
fn kernel_vtep(ns: &Netns, local: &str, remote: &str, port: &str) -> Result<(), String> {
    ns.ip(&[
        "link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789", "local", local,
        "remote", remote, "dev", "u0",
    ])?;
    ns.ip(&["link", "add", "br0", "type", "bridge"])?;
    for dev in ["vx0", port] {
        ns.ip(&["link", "set", dev, "master", "br0"])?;
    }
    for dev in ["vx0", port, "br0"] {
        ns.ip(&["link", "set", dev, "up"])?;
    }
    Ok(())
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
    program: &Program,
    name: &str,
) -> Result<Process, String> {
    // A name of its own, so that a bridge already running on the machine
    // (the default name) is left alone.
    let name = format!("--name={name}");
    let mut args: Vec<String> = vec![
        "run".into(),
        name,
        "--rx-ring".into(),
        program.rx_ring.clone(),
    ];
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
    Process::start(b, &forwarder_cpus(workers), &program.path, &args)
}

/// The name mpbench gives the mpbridge it runs.
fn bridge_name() -> String {
    format!("mpbench-{}", std::process::id())
}

/// The name of the far VTEP's mpbridge (VXLAN).
fn far_bridge_name() -> String {
    format!("mpbench-{}-far", std::process::id())
}

/// Moves the running mpbridges' tables to `lock` (`mpbridge lock set`):
/// the one, or both VTEPs' on VXLAN.
fn switch_lock(program: &str, lock: StrategyKind, ports: PortKindArg) -> Result<(), String> {
    let mut names = vec![bridge_name()];
    if ports == PortKindArg::Vxlan {
        names.push(far_bridge_name());
    }
    for name in names {
        let output = std::process::Command::new(program)
            .args(["--name", &name, "lock", "set", lock.name()])
            .output()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(format!("mpbridge lock set {lock}: {}", stderr.trim()));
        }
    }
    Ok(())
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
            ) => {
                switch
                    && setup.ports == other.ports
                    && setup.placement == other.placement
                    && workers == w
                    && poll == p
            }
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

/// One measurement's result: frames per second, and the CPU time spent.
#[derive(Clone, Debug)]
struct Rates {
    offered: f64,
    delivered: f64,
    /// Every core's time over the interval.
    cores: Vec<CoreUse>,
    seconds: f64,
}

impl Rates {
    /// CPU nanoseconds per delivered frame, all cores together.
    fn ns_per_frame(&self) -> f64 {
        let busy: f64 = self.cores.iter().map(CoreUse::busy_ns).sum();
        busy / (self.delivered * self.seconds).max(1.0)
    }

    /// The same without the generator's own work: the user and system
    /// time of the generator's CPU 0, where nothing else runs in process
    /// context. Softirq time there is receive work (placement a, or RPS
    /// dispatch in b) and stays in: it is a cost of forwarding.
    fn forwarding_ns_per_frame(&self) -> f64 {
        let busy: f64 = self.cores.iter().map(CoreUse::busy_ns).sum();
        let generator = self
            .cores
            .first()
            .map_or(0.0, |core| core.user_ns + core.system_ns);
        (busy - generator).max(0.0) / (self.delivered * self.seconds).max(1.0)
    }
}

/// The generator: frames from the transmit ring at `rate` frames per
/// second (0: flat out) until `stop`.
fn generate(size: usize, rate: f64, stop: &AtomicBool) -> Result<u64, String> {
    lab::pin_to(0)?;
    let mut ring = TxRing::open("eth0", &frame(SINK_MAC, GENERATOR_MAC, size))
        .map_err(|e| format!("generator ring: {e}"))?;
    let start = Instant::now();
    let mut sent = 0u64;
    // Relaxed: a stop flag; nothing is published through it.
    while !stop.load(Ordering::Relaxed) {
        let n = if rate > 0.0 {
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            if sent >= due {
                thread::sleep(Duration::from_micros(50));
                continue;
            }
            (due - sent).min(256) as usize
        } else {
            256
        };
        sent += ring.send(n).map_err(|e| format!("generator: {e}"))? as u64;
    }
    Ok(sent)
}

fn measure(bench: &Bench, size: usize, seconds: f64, rate: f64) -> Result<Rates, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let generator = {
        let stop = Arc::clone(&stop);
        bench.generator.spawn(move || generate(size, rate, &stop))
    };
    thread::sleep(WARMUP);
    let gen0 = bench.generator.counters("eth0")?;
    let sink0 = bench.sink.counters("eth0")?;
    let cpu0 = cpuload::sample().map_err(|e| format!("/proc/stat: {e}"))?;
    let t0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(seconds));
    let cpu1 = cpuload::sample().map_err(|e| format!("/proc/stat: {e}"))?;
    let dt = t0.elapsed().as_secs_f64();
    let gen1 = bench.generator.counters("eth0")?;
    let sink1 = bench.sink.counters("eth0")?;
    stop.store(true, Ordering::Relaxed);
    generator
        .join()
        .map_err(|_| "the generator panicked".to_owned())???;
    let offered = (gen1.tx_packets + gen1.tx_dropped) - (gen0.tx_packets + gen0.tx_dropped);
    Ok(Rates {
        offered: offered as f64 / dt,
        delivered: (sink1.rx_packets - sink0.rx_packets) as f64 / dt,
        cores: cpuload::between(&cpu0, &cpu1),
        seconds: dt,
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

/// samples[setup][size][load point] = one Rates per run.
type Samples = Vec<Vec<Vec<Vec<Rates>>>>;

/// The setups to measure, in order: the references, then mpbridge; each raw
/// configuration with a forwarder once per placement.
fn setups(args: &ForwardArgs) -> Vec<Setup> {
    let mut targets: Vec<(PortKindArg, Target)> = Vec::new();
    for &ports in &args.ports {
        for &reference in &args.references {
            match (reference, ports) {
                (ReferenceArg::Direct, PortKindArg::Raw) => targets.push((ports, Target::Direct)),
                (ReferenceArg::Kernel, PortKindArg::Raw | PortKindArg::Vxlan) => {
                    targets.push((ports, Target::Kernel))
                }
                (ReferenceArg::Loop, PortKindArg::Tap) => targets.push((ports, Target::Loop)),
                (ReferenceArg::Vde, PortKindArg::Tap) => {
                    let installed = std::process::Command::new("vde_switch")
                        .arg("--help")
                        .output()
                        .is_ok();
                    if installed {
                        targets.push((ports, Target::Vde));
                    } else {
                        println!(
                            "note: vde_switch is not installed (Debian's vde2): no vde reference"
                        );
                    }
                }
                (ReferenceArg::Relay, _) => {
                    for &io in &args.io {
                        let poll = io == IoArg::Poll;
                        targets.push((ports, Target::Relay { poll }));
                    }
                }
                _ => {}
            }
        }
        for &lock in &args.locks {
            for &workers in &args.workers {
                for &io in &args.io {
                    let poll = io == IoArg::Poll;
                    targets.push((
                        ports,
                        Target::Mpbridge {
                            lock,
                            workers,
                            poll,
                        },
                    ));
                }
            }
        }
    }
    let mut setups = Vec::new();
    for (ports, target) in targets {
        // Only a veth ingress has receive work to place: a tap's ingress is
        // the generator's own send, and the direct link has no forwarder.
        if ports == PortKindArg::Raw && target != Target::Direct {
            for &placement in &args.placement {
                setups.push(Setup {
                    ports,
                    target,
                    placement: Some(placement),
                });
            }
        } else {
            setups.push(Setup {
                ports,
                target,
                placement: None,
            });
        }
    }
    setups
}

/// The load points measured per setup and size; the first is the one the
/// size tables show.
fn load_points(args: &ForwardArgs) -> Vec<Load> {
    if args.sweep.is_empty() {
        return vec![if args.rate == 0 {
            Load::FlatOut
        } else {
            Load::Rate(args.rate as f64)
        }];
    }
    // Flat out first: the shares are of what it delivered.
    let mut points = vec![Load::FlatOut];
    points.extend(args.sweep.iter().filter(|l| **l != Load::FlatOut));
    points
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
    if args.placement.is_empty() {
        return Err("--placement needs apart, shared or both".to_owned());
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
    let mpbridge = Program {
        path: mpbridge_path(args.mpbridge.as_deref())?,
        rx_ring: args.rx_ring.clone(),
    };
    let setups = setups(&args);
    if args.tcp {
        return run_tcp(&args, &setups, &mpbridge);
    }
    let loads = load_points(&args);
    let points = setups.len() * args.sizes.len() * loads.len() * args.runs;
    if args.switch {
        println!("Strategies switched on one running mpbridge per configuration (mpbridge lock set), not restarted");
    }
    println!(
        "Forwarding: {} CPU(s); generator (PACKET_TX_RING, qdisc bypass) on CPU 0, forwarder on CPU {}; \
         ingress receive work on CPU {} in placement (a) \"rx apart\", on the forwarder's CPU {} in (b) \"rx shared\"; \
         mpbridge's raw ports with {} receive rings; median of {} interleaved runs of {} s per point; offered {}",
        cpus(),
        forwarder_cpus(1),
        receive_cpu(Placement::Apart, 1),
        receive_cpu(Placement::Shared, 1),
        args.rx_ring,
        args.runs,
        args.seconds,
        match loads.as_slice() {
            [Load::Rate(r)] => format!("{r} fps"),
            [_] => "flat out".to_owned(),
            _ => "flat out, then the sweep's shares of what flat out delivered".to_owned(),
        }
    );
    if args.workers.iter().any(|&w| w + 1 > cpus()) {
        println!("note: with more workers than free CPUs, worker threads share CPUs: those figures include preemption");
    }
    let bar = report::progress(points as u64);
    let mut samples: Samples = setups
        .iter()
        .map(|_| {
            args.sizes
                .iter()
                .map(|_| loads.iter().map(|_| Vec::new()).collect())
                .collect()
        })
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
                    switch_lock(&mpbridge.path, lock, setup.ports)?;
                    thread::sleep(WARMUP);
                }
                for (z, &size) in args.sizes.iter().enumerate() {
                    let mut peak = 0.0;
                    for (l, &load) in loads.iter().enumerate() {
                        let rate = match load {
                            Load::FlatOut => 0.0,
                            Load::Rate(r) => r,
                            Load::Share(share) => (share * peak).max(1.0),
                        };
                        let rates = measure(&bench, size, args.seconds, rate)?;
                        if load == Load::FlatOut {
                            peak = rates.delivered;
                        }
                        samples[s][z][l].push(rates);
                        bar.inc(1);
                    }
                }
            }
        }
    }
    bar.finish_and_clear();

    let mut records = Vec::new();
    for (s, setup) in setups.iter().enumerate() {
        for (z, &size) in args.sizes.iter().enumerate() {
            for (l, load) in loads.iter().enumerate() {
                for rates in &samples[s][z][l] {
                    records.push(record(setup, size, *load, rates));
                }
            }
        }
    }
    print_sizes(&args, &setups, &samples);
    if loads.len() > 1 {
        print_sweep(&args, &setups, &samples, &loads);
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
                            mbps(median_of(&samples[s][z][0], |r| r.delivered), size),
                        )
                    })
                    .collect();
                (setup.label(), points)
            })
            .collect(),
    };
    files.extend(report::write_plot(&plot, &args.out.join("forward-sizes"))?);
    if loads.len() > 1 {
        let series = setups
            .iter()
            .enumerate()
            .map(|(s, setup)| {
                let mut points: Vec<(f64, f64)> = samples[s][0]
                    .iter()
                    .map(|runs| {
                        (
                            median_of(runs, |r| r.offered) / 1e3,
                            median_of(runs, |r| r.delivered) / 1e3,
                        )
                    })
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                (setup.label(), points)
            })
            .collect();
        let plot = Plot {
            title: &format!("{}-byte frames: delivered against offered", args.sizes[0]),
            x_label: "offered Kpps",
            y_label: "delivered Kpps",
            series,
        };
        files.extend(report::write_plot(&plot, &args.out.join("forward-sweep"))?);
    }
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
                        let s = scaling_setup(args.placement[0], &setups, ports, lock, w)?;
                        Some((
                            w as f64,
                            median_of(&samples[s][0][0], |r| r.delivered) / 1e3,
                        ))
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

fn median_of(runs: &[Rates], f: impl Fn(&Rates) -> f64) -> f64 {
    report::median(&runs.iter().map(f).collect::<Vec<_>>())
}

/// The run whose delivered rate is the median: its per-core split is shown.
fn median_run(runs: &[Rates]) -> &Rates {
    let mut order: Vec<&Rates> = runs.iter().collect();
    order.sort_by(|a, b| a.delivered.total_cmp(&b.delivered));
    order[order.len() / 2]
}

/// Each core's busy share over the interval, split: "cpu0 97% u3 s60 si34".
fn core_split(rates: &Rates) -> String {
    rates
        .cores
        .iter()
        .enumerate()
        .map(|(n, core)| {
            let total = (core.busy_ns() + core.idle_ns).max(1.0);
            let pct = |ns: f64| ns * 100.0 / total;
            format!(
                "cpu{n} {:>3.0}% u{:.0} s{:.0} si{:.0}",
                pct(core.busy_ns()),
                pct(core.user_ns),
                pct(core.system_ns),
                pct(core.softirq_ns + core.irq_ns)
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A table per setup: delivered against frame size at the first load
/// point, with the CPU time per delivered frame and where it went.
fn print_sizes(args: &ForwardArgs, setups: &[Setup], samples: &Samples) {
    let best_mbps = setups
        .iter()
        .enumerate()
        .flat_map(|(s, _)| {
            args.sizes
                .iter()
                .enumerate()
                .map(move |(z, &size)| (s, z, size))
        })
        .map(|(s, z, size)| mbps(median_of(&samples[s][z][0], |r| r.delivered), size))
        .fold(0.0, f64::max);
    for (s, setup) in setups.iter().enumerate() {
        println!();
        println!("{}", setup.label());
        println!(
            "{:>5} |{:<40}| {:>8} | {:>17} | {:>14} | busy per core: user, system, softirq+irq (% of the interval)",
            "size", "", "Mbit/s", "delivered/offered", "CPU ns/frame"
        );
        for (z, &size) in args.sizes.iter().enumerate() {
            let runs = &samples[s][z][0];
            let delivered = median_of(runs, |r| r.delivered);
            let offered = median_of(runs, |r| r.offered);
            let rate = mbps(delivered, size);
            let bar = "#".repeat(((rate / best_mbps.max(1e-9)) * 40.0).round() as usize);
            let cost = format!(
                "{:.0} ({:.0})",
                median_of(runs, Rates::ns_per_frame),
                median_of(runs, Rates::forwarding_ns_per_frame)
            );
            println!(
                "{size:>5} |{bar:<40}| {rate:>8.1} | {:>17} | {cost:>14} | {}",
                format!("{delivered:.0}/{offered:.0}"),
                core_split(median_run(runs))
            );
        }
    }
    println!();
    println!("CPU ns/frame: every core's busy time over the interval per delivered frame; in brackets, without the generator's own sending (user and system time of its CPU 0).");
}

/// Delivered against offered at every load point, per setup and size.
fn print_sweep(args: &ForwardArgs, setups: &[Setup], samples: &Samples, loads: &[Load]) {
    println!();
    println!("Offered-load sweep (load: share of the configuration's own flat-out delivered rate)");
    for (s, setup) in setups.iter().enumerate() {
        for (z, &size) in args.sizes.iter().enumerate() {
            println!();
            println!("{}, {size} bytes", setup.label());
            println!(
                "{:>8} {:>13} {:>15} {:>10} {:>13} {:>19}",
                "load",
                "offered Kpps",
                "delivered Kpps",
                "delivered",
                "CPU ns/frame",
                "without generator"
            );
            let mut order: Vec<usize> = (0..loads.len()).collect();
            order.sort_by(|&a, &b| {
                median_of(&samples[s][z][a], |r| r.offered)
                    .total_cmp(&median_of(&samples[s][z][b], |r| r.offered))
            });
            for l in order {
                let runs = &samples[s][z][l];
                let offered = median_of(runs, |r| r.offered);
                let delivered = median_of(runs, |r| r.delivered);
                let load = match loads[l] {
                    Load::FlatOut => "max".to_owned(),
                    Load::Rate(r) => format!("{r:.0}"),
                    Load::Share(share) => format!("{:.0}%", share * 100.0),
                };
                println!(
                    "{load:>8} {:>13.1} {:>15.1} {:>9.0}% {:>13.0} {:>19.0}",
                    offered / 1e3,
                    delivered / 1e3,
                    delivered * 100.0 / offered.max(1.0),
                    median_of(runs, Rates::ns_per_frame),
                    median_of(runs, Rates::forwarding_ns_per_frame)
                );
            }
        }
    }
}

fn scaling_setup(
    placement: Placement,
    setups: &[Setup],
    ports: PortKindArg,
    lock: StrategyKind,
    w: usize,
) -> Option<usize> {
    setups.iter().position(|x| {
        x.ports == ports
            && (x.placement.is_none() || x.placement == Some(placement))
            && matches!(x.target, Target::Mpbridge { lock: l, workers, poll: false } if l == lock && workers == w)
    })
}

fn record(setup: &Setup, size: usize, load: Load, rates: &Rates) -> Record {
    let (name, lock, workers, poll) = match setup.target {
        Target::Direct => ("direct", String::new(), 0, false),
        Target::Kernel => ("kernel", String::new(), 0, false),
        Target::Vde => ("vde", String::new(), 0, false),
        Target::Loop => ("loop", String::new(), 0, false),
        Target::Relay { poll } => ("relay", String::new(), 1, poll),
        Target::Mpbridge {
            lock,
            workers,
            poll,
        } => ("mpbridge", lock.name().to_owned(), workers, poll),
    };
    let placement = match setup.placement {
        Some(Placement::Apart) => "a",
        Some(Placement::Shared) => "b",
        None => "",
    };
    let load = match load {
        Load::FlatOut => "max".to_owned(),
        Load::Rate(r) => format!("{r:.0}fps"),
        Load::Share(share) => format!("{:.0}%", share * 100.0),
    };
    let mut fields = vec![
        ("target", Field::Text(name.to_owned())),
        (
            "ports",
            Field::Text(format!("{:?}", setup.ports).to_lowercase()),
        ),
        ("placement", Field::Text(placement.to_owned())),
        ("strategy", Field::Text(lock)),
        ("workers", Field::Number(workers as f64)),
        ("poll", Field::Number(f64::from(u8::from(poll)))),
        ("size", Field::Number(size as f64)),
        ("load", Field::Text(load)),
        ("offered_pps", Field::Number(rates.offered.round())),
        ("delivered_pps", Field::Number(rates.delivered.round())),
        ("mbps", Field::Number(mbps(rates.delivered, size))),
        (
            "cpu_ns_per_frame",
            Field::Number(rates.ns_per_frame().round()),
        ),
        (
            "forwarding_ns_per_frame",
            Field::Number(rates.forwarding_ns_per_frame().round()),
        ),
        ("cpus", Field::Number(cpus() as f64)),
    ];
    const CORE_FIELDS: [[&str; 4]; 4] = [
        [
            "cpu0_user_s",
            "cpu0_system_s",
            "cpu0_softirq_s",
            "cpu0_irq_s",
        ],
        [
            "cpu1_user_s",
            "cpu1_system_s",
            "cpu1_softirq_s",
            "cpu1_irq_s",
        ],
        [
            "cpu2_user_s",
            "cpu2_system_s",
            "cpu2_softirq_s",
            "cpu2_irq_s",
        ],
        [
            "cpu3_user_s",
            "cpu3_system_s",
            "cpu3_softirq_s",
            "cpu3_irq_s",
        ],
    ];
    for (core, names) in rates.cores.iter().zip(CORE_FIELDS) {
        for (name, ns) in
            names
                .into_iter()
                .zip([core.user_ns, core.system_ns, core.softirq_ns, core.irq_ns])
        {
            fields.push((name, Field::Number(ns / 1e9)));
        }
    }
    Record { fields }
}

/// mpbridge's delivered rate as a fraction of each reference's, per size,
/// each against the reference in the same placement.
fn print_ratios(args: &ForwardArgs, setups: &[Setup], samples: &Samples) {
    let delivered = |s: usize, z: usize| median_of(&samples[s][z][0], |r| r.delivered);
    let find = |ports: PortKindArg, target: Target, placement: Option<Placement>| {
        setups.iter().position(|x| {
            x.ports == ports
                && x.target == target
                && (x.placement.is_none() || x.placement == placement)
        })
    };
    let mut lines = Vec::new();
    for (s, setup) in setups.iter().enumerate() {
        let Target::Mpbridge { poll, .. } = setup.target else {
            continue;
        };
        let placed = setup.placement;
        for (name, reference) in [
            ("relay", find(setup.ports, Target::Relay { poll }, placed)),
            (
                "kernel bridge",
                find(PortKindArg::Raw, Target::Kernel, placed),
            ),
            (
                "kernel vxlan",
                find(PortKindArg::Vxlan, Target::Kernel, placed),
            ),
            ("direct", find(PortKindArg::Raw, Target::Direct, placed)),
            (
                "read/write loop",
                find(PortKindArg::Tap, Target::Loop, placed),
            ),
            ("vde_switch", find(PortKindArg::Tap, Target::Vde, placed)),
        ] {
            let Some(r) = reference else { continue };
            let same_kind = match name {
                "relay" => true,
                "vde_switch" | "read/write loop" => setup.ports == PortKindArg::Tap,
                "kernel vxlan" => setup.ports == PortKindArg::Vxlan,
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
                "  {} / {}: {}",
                setup.label(),
                setups[r].label(),
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
fn print_scaling(args: &ForwardArgs, setups: &[Setup], samples: &Samples) {
    if args.workers.len() < 2 {
        return;
    }
    for &ports in &args.ports {
        for &placement in &args.placement {
            println!();
            println!(
                "{}-byte frames, {:?} ports{}: Kpps delivered by workers",
                args.sizes[0],
                ports,
                if ports == PortKindArg::Raw {
                    format!(", placement {}", placement.label())
                } else {
                    String::new()
                }
            );
            let mut header = format!("{:>7}", "workers");
            for lock in &args.locks {
                header += &format!(" {:>9}", lock.name());
            }
            println!("{header}");
            for &w in &args.workers {
                let mut line = format!("{w:>7}");
                for &lock in &args.locks {
                    match scaling_setup(placement, setups, ports, lock, w) {
                        Some(s) => {
                            let kpps = median_of(&samples[s][0][0], |r| r.delivered) / 1e3;
                            line += &format!(" {kpps:>9.0}");
                        }
                        None => line += &format!(" {:>9}", "-"),
                    }
                }
                println!("{line}");
            }
            if ports == PortKindArg::Tap {
                break;
            }
        }
    }
}

/// `--tcp`: bulk TCP goodput through every setup, interleaved runs.
fn run_tcp(args: &ForwardArgs, setups: &[Setup], mpbridge: &Program) -> Result<(), String> {
    println!(
        "Bulk TCP: {} CPU(s); sender and receiver threads on CPU 0, forwarder on CPU {}; \
         ingress receive work of the sender's veth on CPU {} in placement (a) \"rx apart\", CPU {} in (b) \"rx shared\"; \
         default offloads; mpbridge's raw ports with {} receive rings; median of {} interleaved runs of {} s",
        cpus(),
        forwarder_cpus(1),
        receive_cpu(Placement::Apart, 1),
        receive_cpu(Placement::Shared, 1),
        mpbridge.rx_ring,
        args.runs,
        args.seconds,
    );
    let bar = report::progress((setups.len() * args.runs) as u64);
    let mut samples: Vec<Vec<TcpRates>> = setups.iter().map(|_| Vec::new()).collect();
    for run in 0..args.runs {
        for k in 0..setups.len() {
            let s = (run + k) % setups.len();
            bar.set_message(setups[s].label());
            let bench = build(setups[s], mpbridge)?;
            tcp::address(&bench.generator, &bench.sink)?;
            thread::sleep(SETTLE);
            samples[s].push(tcp::transfer(&bench.generator, &bench.sink, args.seconds)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let median = |runs: &[TcpRates], f: fn(&TcpRates) -> f64| {
        report::median(&runs.iter().map(f).collect::<Vec<_>>())
    };
    println!();
    println!(
        "{:<52} {:>9} {:>13}  busy per core: user, system, softirq+irq (% of the interval)",
        "", "Mbit/s", "CPU ns/KiB"
    );
    let mut records = Vec::new();
    for (s, setup) in setups.iter().enumerate() {
        let runs = &samples[s];
        let mut order: Vec<&TcpRates> = runs.iter().collect();
        order.sort_by(|a, b| a.bytes_per_s.total_cmp(&b.bytes_per_s));
        let middle = order[order.len() / 2];
        let split = core_split(&Rates {
            offered: 0.0,
            delivered: 0.0,
            cores: middle.cores.clone(),
            seconds: middle.seconds,
        });
        println!(
            "{:<52} {:>9.0} {:>13.0}  {split}",
            setup.label(),
            median(runs, TcpRates::mbit_per_s),
            median(runs, TcpRates::ns_per_kib)
        );
        for rates in runs {
            let mut record = record(
                setup,
                0,
                Load::FlatOut,
                &Rates {
                    offered: 0.0,
                    delivered: 0.0,
                    cores: rates.cores.clone(),
                    seconds: rates.seconds,
                },
            );
            record.fields.retain(|(name, _)| {
                !matches!(
                    *name,
                    "size"
                        | "load"
                        | "offered_pps"
                        | "delivered_pps"
                        | "mbps"
                        | "cpu_ns_per_frame"
                        | "forwarding_ns_per_frame"
                )
            });
            record
                .fields
                .push(("tcp_mbps", Field::Number(rates.mbit_per_s())));
            record
                .fields
                .push(("cpu_ns_per_kib", Field::Number(rates.ns_per_kib().round())));
            records.push(record);
        }
    }
    let kernel = setups
        .iter()
        .position(|x| x.target == Target::Kernel && x.placement == Some(Placement::Shared))
        .or_else(|| setups.iter().position(|x| x.target == Target::Kernel));
    if let Some(k) = kernel {
        println!();
        println!("as a fraction of the {} (Mbit/s):", setups[k].label());
        let reference = median(&samples[k], TcpRates::mbit_per_s);
        for (s, setup) in setups.iter().enumerate() {
            if s != k {
                println!(
                    "  {}: {:.2}",
                    setup.label(),
                    median(&samples[s], TcpRates::mbit_per_s) / reference
                );
            }
        }
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let files =
        report::write_records(&args.out, "forward-tcp", &records).map_err(|e| e.to_string())?;
    println!();
    report::print_written(&files);
    Ok(())
}
