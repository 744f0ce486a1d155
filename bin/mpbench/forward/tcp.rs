//! `mpbench forward --tcp`: bulk TCP goodput through every setup instead
//! of frames, its table and its records (the transfer itself is in
//! `crate::tcp`).

use std::thread;

use crate::report::{self, Field};
use crate::tcp::{address, transfer, TcpRates};

use super::args::{ForwardArgs, Load, Placement};
use super::measure::Rates;
use super::report::{core_split, record};
use super::topology::{build, cpus, forwarder_cpus, receive_cpu, Program, Setup, Target};
use super::SETTLE;

/// `--tcp`: bulk TCP goodput through every setup, interleaved runs.
pub(super) fn run(args: &ForwardArgs, setups: &[Setup], mpbridge: &Program) -> Result<(), String> {
    println!(
        "Bulk TCP: {} CPU(s); sender and receiver threads on CPU 0, forwarder on CPU {}; \
         ingress receive work of the sender's veth on CPU {} in placement (a) \"rx apart\", CPU {} in (b) \"rx shared\"; \
         default offloads; mpbridge's raw ports with {} receive rings of {}; median of {} interleaved runs of {} s",
        cpus(),
        forwarder_cpus(1),
        receive_cpu(Placement::Apart, 1),
        receive_cpu(Placement::Shared, 1),
        mpbridge.rx_ring,
        mpbridge.ring.as_deref().unwrap_or("4M"),
        args.repeats.runs,
        args.interval.seconds,
    );
    let bar = report::progress((setups.len() * args.repeats.runs) as u64);
    let mut samples: Vec<Vec<TcpRates>> = setups.iter().map(|_| Vec::new()).collect();
    for run in 0..args.repeats.runs {
        for k in 0..setups.len() {
            let s = (run + k) % setups.len();
            bar.set_message(setups[s].label());
            let bench = build(setups[s], mpbridge)?;
            address(&bench.generator, &bench.sink)?;
            thread::sleep(SETTLE);
            samples[s].push(transfer(
                &bench.generator,
                &bench.sink,
                args.interval.seconds,
            )?);
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
    std::fs::create_dir_all(&args.output.out)
        .map_err(|e| format!("{}: {e}", args.output.out.display()))?;
    let files = report::write_records(&args.output.out, "forward-tcp", &records)
        .map_err(|e| e.to_string())?;
    println!();
    report::print_written(&files);
    Ok(())
}
