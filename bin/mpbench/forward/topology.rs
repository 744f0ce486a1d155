//! What is measured and how it is wired: the setups (port kind, forwarder,
//! placement), the CPUs each part runs on, and building a setup's
//! namespaces and links (veth pairs, taps, the VXLAN underlay and the
//! kernel's VTEPs), starting mpbridge or a reference forwarder in them, and
//! switching a running mpbridge's lock.

use std::thread;
use std::time::Duration;

use bridge::port::{Outgoing, Queue, RawQueue, VNET_HDR_LEN};
use bridge::wire::{EtherType, FrameSpec, MacAddr, Payload};
use locks::StrategyKind;

use super::args::{Placement, PortKindArg};
use lab::{self, Netns, Process};

pub(super) const GENERATOR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub(super) const SINK_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const ETHERTYPE: u16 = 0x88b5;

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Target {
    Direct,
    Kernel,
    Vde,
    Loop,
    /// The C TPACKET_V3 loop (`mpbench tpacket-loop`) between the veths.
    Tpacket,
    Relay {
        poll: bool,
    },
    Mpbridge {
        lock: StrategyKind,
        workers: usize,
        poll: bool,
    },
}

/// One configuration to measure: the ports, what forwards, and where the
/// ingress receive work runs.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) struct Setup {
    pub(super) ports: PortKindArg,
    pub(super) target: Target,
    /// Where the ingress receive work runs; None where there is none to
    /// place (a tap's ingress is the generator's own send) or no forwarder.
    pub(super) placement: Option<Placement>,
}

impl Setup {
    pub(super) fn label(&self) -> String {
        let ports = match self.ports {
            PortKindArg::Raw => "raw",
            PortKindArg::Tap => "tap",
            PortKindArg::Vxlan => "vxlan",
            PortKindArg::Vhost => "vhost",
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
            Target::Tpacket => "C TPACKET_V3 loop (veth)".to_owned(),
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
pub(super) struct Bench {
    pub(super) generator: Netns,
    pub(super) sink: Netns,
    _process: Option<Process>,
    _daemon: Option<lab::Daemon>,
    _bridge: Option<Netns>,
    /// A second VTEP's mpbridge and the VTEPs' namespaces (VXLAN).
    _far: Option<Process>,
    _vteps: Vec<Netns>,
}

pub(super) fn cpus() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU that takes the ingress receive work: the forwarder's first CPU
/// (shared), or one that is neither the forwarder's nor the generator's
/// where there is one, else the generator's (apart).
pub(super) fn receive_cpu(placement: Placement, workers: usize) -> usize {
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
pub(super) struct Program {
    pub(super) path: String,
    pub(super) rx_ring: String,
    /// Raw ports' `ring=` option, if given.
    pub(super) ring: Option<String>,
}

impl Program {
    /// `--port=raw:NAME` with the raw ports' options.
    fn raw_port(&self, name: &str) -> String {
        match &self.ring {
            Some(size) => format!("--port=raw:{name},ring={size}"),
            None => format!("--port=raw:{name}"),
        }
    }
}

pub(super) fn build(setup: Setup, mpbridge: &Program) -> Result<Bench, String> {
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
        (Target::Tpacket, PortKindArg::Tap) => {
            return Err("the C TPACKET_V3 loop is measured on raw ports only".to_owned())
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
                Target::Tpacket => {
                    for dev in ["p0", "p1"] {
                        b.ip(&["link", "set", dev, "up"])?;
                    }
                    let mpbench = std::env::current_exe().map_err(|e| e.to_string())?;
                    process = Some(Process::start(
                        &b,
                        &forwarder_cpus(1),
                        &mpbench.to_string_lossy(),
                        &["tpacket-loop", "p0", "p1"],
                    )?);
                }
                _ => {
                    let ports = [mpbridge.raw_port("p0"), mpbridge.raw_port("p1")];
                    let ports: Vec<&str> = ports.iter().map(String::as_str).collect();
                    process = Some(start_mpbridge(
                        &b,
                        target,
                        &ports,
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
        (_, PortKindArg::Vhost) => {
            return Err("vhost ports are measured by forward/vhost.rs".to_owned())
        }
    }
    for (ns, mac) in [(&generator, GENERATOR_MAC), (&sink, SINK_MAC)] {
        ns.ip(&["link", "set", "eth0", "address", &mac_string(mac)])?;
        ns.ip(&["link", "set", "eth0", "up"])?;
    }
    // The sink speaks first, so that the bridge knows where it is and the
    // measured traffic is known unicast.
    sink.run(|| -> Result<(), String> {
        let mut port = RawQueue::open("eth0", 1)
            .map_err(|e| format!("sink socket: {e}"))?
            .remove(0);
        let frame = with_header(&frame([0xff; 6], SINK_MAC, 64));
        for _ in 0..3 {
            let outgoing = Outgoing::split(&frame, VNET_HDR_LEN);
            port.send_batch(std::iter::once(outgoing))
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
pub(super) fn switch_lock(
    program: &str,
    lock: StrategyKind,
    ports: PortKindArg,
) -> Result<(), String> {
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
pub(super) fn switch_groups(setups: &[Setup], switch: bool) -> Vec<Vec<usize>> {
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
pub(super) fn frame(dst: [u8; 6], src: [u8; 6], size: usize) -> Vec<u8> {
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
