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
//!
//! This file holds the entry point and the order of the measurements; the
//! flags are in `args`, the setups and their wiring in `topology`, one
//! measurement in `measure`, the tables and files in `report`, and the
//! `--tcp` mode in `tcp`.

mod args;
mod measure;
mod report;
mod tcp;
mod topology;
mod vhost;

use std::thread;
use std::time::Duration;

use crate::report::{print_written, progress};

pub use args::ForwardArgs;
use args::{IoArg, Load, Placement, PortKindArg, ReferenceArg};
use measure::{measure, Samples, WARMUP};
pub use topology::forwarder_cpus;
use topology::{build, cpus, receive_cpu, switch_groups, switch_lock, Program, Setup, Target};

/// Time for the kernel to finish deleting the previous setup's namespaces.
const SETTLE: Duration = Duration::from_millis(700);

/// Fails with one line unless this process runs as root.
pub fn require_root() -> Result<(), String> {
    if nix::unistd::geteuid().is_root() {
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
                (ReferenceArg::Tpacket, PortKindArg::Raw) => targets.push((ports, Target::Tpacket)),
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
        for &lock in &args.strategies.locks {
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
    if args.repeats.runs == 0
        || args.workers.contains(&0)
        || !(args.interval.seconds > 0.0 && args.interval.seconds <= 600.0)
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
        path: mpbridge_path(args.binary.mpbridge.as_deref())?,
        rx_ring: args.rx_ring.clone(),
        ring: args.ring.clone(),
    };
    if args.ports.contains(&PortKindArg::Vhost) {
        if args.ports.len() > 1 || args.tcp {
            return Err("--ports vhost runs alone, without --tcp".to_owned());
        }
        return vhost::run(&args, &mpbridge.path);
    }
    let setups = setups(&args);
    if args.tcp {
        return tcp::run(&args, &setups, &mpbridge);
    }
    let loads = load_points(&args);
    let points = setups.len() * args.sizes.len() * loads.len() * args.repeats.runs;
    if args.switch {
        println!("Strategies switched on one running mpbridge per configuration (mpbridge lock set), not restarted");
    }
    println!(
        "Forwarding: {} CPU(s); generator (PACKET_TX_RING, qdisc bypass) on CPU 0, forwarder on CPU {}; \
         ingress receive work on CPU {} in placement (a) \"rx apart\", on the forwarder's CPU {} in (b) \"rx shared\"; \
         mpbridge's raw ports with {} receive rings of {}; median of {} interleaved runs of {} s per point; offered {}",
        cpus(),
        forwarder_cpus(1),
        receive_cpu(Placement::Apart, 1),
        receive_cpu(Placement::Shared, 1),
        args.rx_ring,
        args.ring.as_deref().unwrap_or("4M"),
        args.repeats.runs,
        args.interval.seconds,
        match loads.as_slice() {
            [Load::Rate(r)] => format!("{r} fps"),
            [_] => "flat out".to_owned(),
            _ => "flat out, then the sweep's shares of what flat out delivered".to_owned(),
        }
    );
    if args.workers.iter().any(|&w| w + 1 > cpus()) {
        println!("note: with more workers than free CPUs, worker threads share CPUs: those figures include preemption");
    }
    let bar = progress(points as u64);
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
    for run in 0..args.repeats.runs {
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
                        let rates = measure(&bench, size, args.interval.seconds, rate)?;
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

    report::print_sizes(&args, &setups, &samples);
    if loads.len() > 1 {
        report::print_sweep(&args, &setups, &samples, &loads);
    }
    report::print_ratios(&args, &setups, &samples);
    report::print_scaling(&args, &setups, &samples);
    let files = report::write_files(&args, &setups, &samples, &loads)?;
    println!();
    print_written(&files);
    Ok(())
}
