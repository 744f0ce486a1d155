//! What `mpbench forward` reports of frame measurements: the table per
//! setup, the offered-load sweep, mpbridge as a fraction of each reference,
//! the worker-scaling table, and the records and plots written to --out.

use std::path::PathBuf;

use locks::StrategyKind;

use crate::report::{self, Field, Plot, Record};

use super::args::{ForwardArgs, Load, Placement, PortKindArg};
use super::measure::{median_of, median_run, Rates, Samples};
use super::topology::{cpus, Setup, Target};

/// Mbit/s on the wire: each frame plus 8 bytes of preamble and 12 of gap.
fn mbps(pps: f64, size: usize) -> f64 {
    pps * (size + 20) as f64 * 8.0 / 1e6
}

/// Each core's busy share over the interval, split: "cpu0 97% u3 s60 si34".
pub(super) fn core_split(rates: &Rates) -> String {
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
pub(super) fn print_sizes(args: &ForwardArgs, setups: &[Setup], samples: &Samples) {
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
pub(super) fn print_sweep(args: &ForwardArgs, setups: &[Setup], samples: &Samples, loads: &[Load]) {
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

pub(super) fn record(setup: &Setup, size: usize, load: Load, rates: &Rates) -> Record {
    let (name, lock, workers, poll) = match setup.target {
        Target::Direct => ("direct", String::new(), 0, false),
        Target::Kernel => ("kernel", String::new(), 0, false),
        Target::Vde => ("vde", String::new(), 0, false),
        Target::Loop => ("loop", String::new(), 0, false),
        Target::Tpacket => ("tpacket", String::new(), 0, false),
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
pub(super) fn print_ratios(args: &ForwardArgs, setups: &[Setup], samples: &Samples) {
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
                "C TPACKET_V3 loop",
                find(PortKindArg::Raw, Target::Tpacket, placed),
            ),
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
pub(super) fn print_scaling(args: &ForwardArgs, setups: &[Setup], samples: &Samples) {
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
            for lock in &args.strategies.locks {
                header += &format!(" {:>9}", lock.name());
            }
            println!("{header}");
            for &w in &args.workers {
                let mut line = format!("{w:>7}");
                for &lock in &args.strategies.locks {
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

/// Writes forward.csv and forward.json (one record per run) and the plots:
/// delivered against frame size, against offered load (with a sweep) and
/// against workers (with several); returns the files written.
pub(super) fn write_files(
    args: &ForwardArgs,
    setups: &[Setup],
    samples: &Samples,
    loads: &[Load],
) -> Result<Vec<PathBuf>, String> {
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
    std::fs::create_dir_all(&args.output.out)
        .map_err(|e| format!("{}: {e}", args.output.out.display()))?;
    let mut files =
        report::write_records(&args.output.out, "forward", &records).map_err(|e| e.to_string())?;
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
    files.extend(report::write_plot(
        &plot,
        &args.output.out.join("forward-sizes"),
    )?);
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
        files.extend(report::write_plot(
            &plot,
            &args.output.out.join("forward-sweep"),
        )?);
    }
    if args.workers.len() > 1 {
        let series = args
            .strategies
            .locks
            .iter()
            .flat_map(|&lock| args.ports.iter().map(move |&ports| (lock, ports)))
            .map(|(lock, ports)| {
                let points = args
                    .workers
                    .iter()
                    .filter_map(|&w| {
                        let s = scaling_setup(args.placement[0], setups, ports, lock, w)?;
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
            &args.output.out.join("forward-workers"),
        )?);
    }
    Ok(files)
}
