//! `mpbench locks`: MAC table contention across strategies, thread counts,
//! workloads and table sizes, with lockstat-style figures for the
//! lock-based strategies and the process's resident memory per run. Needs
//! no privileges.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use bridge::{FdbKey, MacTable};
use locks::lockstat::{self, LockStats};
use locks::{Strategy, StrategyKind};
use procfs::process::{ClearRefs, Process};

use crate::flags;
use crate::report::{self, Field, Plot, Record};
use lab::workload::{self, Budget, Floor, Workload};

#[derive(clap::Args)]
// --seconds: 0.15 s here, not the 1 s of the other subcommands.
#[command(mut_arg("seconds", |arg| arg.default_value("0.15")))]
// --out: this subcommand's own help text.
#[command(mut_arg("out", |arg| arg.help("Where the CSV, JSON and SVG files go")))]
pub struct LocksArgs {
    #[command(flatten)]
    strategies: flags::Strategies,
    /// Thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    threads: Vec<usize>,
    /// Workloads, comma-separated: lookup, mixed, moves, batched-moves,
    /// capacity. Every row of the CSV and JSON files carries the process's
    /// resident memory around its runs; batched-moves also prints it.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lookup,mixed,moves,batched-moves,capacity"
    )]
    workloads: Vec<Workload>,
    /// Table sizes in stations, comma-separated (the full matrix:
    /// 64,8192,1048576).
    #[arg(long, value_delimiter = ',', default_value = "8192")]
    sizes: Vec<usize>,
    /// Also take the read section per lookup (lookup workload, lock-based
    /// strategies), besides per batch of 32.
    #[arg(long)]
    per_frame: bool,
    #[command(flatten)]
    interval: flags::Interval,
    #[command(flatten)]
    repeats: flags::Repeats,
    #[command(flatten)]
    output: flags::Output,
}

/// One configuration measured: which map, which way.
#[derive(Clone, Copy, PartialEq)]
struct Config {
    kind: Option<StrategyKind>, // None: the unsynchronised floor
    per_frame: bool,
}

impl Config {
    fn label(self) -> String {
        match (self.kind, self.per_frame) {
            (None, _) => "unsync".to_owned(),
            (Some(kind), false) => kind.name().to_owned(),
            (Some(kind), true) => format!("{kind}-per-frame"),
        }
    }
}

struct Sample {
    mops: f64,
    locks: LockStats,
    memory: Memory,
}

/// The process's resident set around one run, in KiB (NaN where
/// /proc/self/status does not say). The whole process: every table of the
/// workload being measured is alive, and freed memory goes back to the
/// allocator, not always to the system.
#[derive(Clone, Copy)]
struct Memory {
    /// VmRSS as the run began.
    start_kib: f64,
    /// VmHWM after the run: the peak during it, where the peak could be
    /// reset as the run began, else the peak since the process began.
    peak_kib: f64,
    /// VmRSS after the run.
    end_kib: f64,
    /// Whether the peak was reset as the run began.
    peak_is_the_runs: bool,
}

impl Memory {
    /// Resets the peak (VmHWM) to the current RSS and reads the RSS; call
    /// as the run begins.
    fn start() -> Memory {
        // Linux >= 4.0: writing 5 to /proc/self/clear_refs resets the
        // process's peak RSS.
        let peak_is_the_runs = Process::myself()
            .and_then(|me| me.clear_refs(ClearRefs::PeakRSS))
            .is_ok();
        let (rss, _) = rss_kib();
        Memory {
            start_kib: rss,
            peak_kib: f64::NAN,
            end_kib: f64::NAN,
            peak_is_the_runs,
        }
    }

    /// Reads the RSS and the peak; call as the run ends.
    fn end(self) -> Memory {
        let (rss, peak) = rss_kib();
        Memory {
            peak_kib: peak,
            end_kib: rss,
            ..self
        }
    }

    /// How far the peak rose above the RSS at the start.
    fn growth_kib(&self) -> f64 {
        self.peak_kib - self.start_kib
    }
}

/// One point's memory over its runs.
struct MemorySummary {
    /// The highest peak of any run.
    peak_kib: f64,
    /// The most any run's peak rose above the RSS at its start.
    growth_kib: f64,
    /// The RSS after the last run.
    end_kib: f64,
}

impl MemorySummary {
    fn of(runs: &[Sample]) -> MemorySummary {
        // f64::max skips NaN, so unknown figures stay unknown only if all are.
        let most =
            |f: fn(&Memory) -> f64| runs.iter().map(|s| f(&s.memory)).fold(f64::NAN, f64::max);
        MemorySummary {
            peak_kib: most(|m| m.peak_kib),
            growth_kib: most(Memory::growth_kib),
            end_kib: runs.last().map_or(f64::NAN, |s| s.memory.end_kib),
        }
    }
}

/// VmRSS and VmHWM of this process in KiB, NaN where unknown.
fn rss_kib() -> (f64, f64) {
    let Ok(status) = Process::myself().and_then(|me| me.status()) else {
        return (f64::NAN, f64::NAN);
    };
    let kib = |field: Option<u64>| field.map_or(f64::NAN, |kib| kib as f64);
    (kib(status.vmrss), kib(status.vmhwm))
}

/// Runs `threads` threads of `workload` on `table` for `seconds`.
fn measure<S: Strategy>(
    table: &Arc<MacTable<S>>,
    keys: &Arc<[FdbKey]>,
    workload: Workload,
    per_frame: bool,
    threads: usize,
    seconds: f64,
) -> Sample {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    lockstat::enable(S::KIND.is_lock_based());
    let (ops, locks, elapsed, memory) = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (table, keys, stop, barrier) = (&**table, &**keys, &stop, &barrier);
                scope.spawn(move || {
                    lockstat::take();
                    barrier.wait();
                    let ops = workload::run_thread(
                        table,
                        keys,
                        workload,
                        per_frame,
                        t,
                        threads,
                        Budget::Until(stop),
                    );
                    (ops, lockstat::take())
                })
            })
            .collect();
        let memory = Memory::start();
        barrier.wait();
        let start = Instant::now();
        thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        let mut ops = 0;
        let mut locks = LockStats::default();
        for handle in handles {
            let (o, l) = handle.join().expect("benchmark thread panicked");
            ops += o;
            locks += l;
        }
        (ops, locks, start.elapsed(), memory.end())
    });
    lockstat::enable(false);
    Sample {
        mops: ops as f64 / elapsed.as_secs_f64() / 1e6,
        locks,
        memory,
    }
}

fn measure_floor(floor: &mut Floor, keys: &[FdbKey], workload: Workload, seconds: f64) -> Sample {
    let stop = AtomicBool::new(false);
    let memory = Memory::start();
    let (ops, elapsed) = thread::scope(|scope| {
        let start = Instant::now();
        let handle = scope.spawn(|| floor.run(keys, workload, Budget::Until(&stop)));
        thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        (
            handle.join().expect("floor thread panicked"),
            start.elapsed(),
        )
    });
    Sample {
        mops: ops as f64 / elapsed.as_secs_f64() / 1e6,
        locks: LockStats::default(),
        memory: memory.end(),
    }
}

/// Tables kept alive across runs, so large ones are filled once.
enum Table {
    Floor(Floor),
    Map(Box<dyn FnMut(usize, bool, f64) -> Sample>),
}

fn table_for(
    kind: StrategyKind,
    keys: &Arc<[FdbKey]>,
    workload: Workload,
    max_threads: usize,
) -> Table {
    locks::with_strategy!(kind, S => {
        let table = workload::filled::<S>(keys, workload, max_threads);
        let keys = Arc::clone(keys);
        Table::Map(Box::new(move |threads, per_frame, seconds| {
            measure::<S>(&table, &keys, workload, per_frame, threads, seconds)
        }))
    })
}

pub fn run(args: LocksArgs) -> Result<(), String> {
    if !(args.interval.seconds > 0.0 && args.interval.seconds <= 600.0) {
        return Err(format!(
            "--seconds must be between 0 and 600, got {}",
            args.interval.seconds
        ));
    }
    if args.repeats.runs == 0
        || args.threads.is_empty()
        || args.threads.contains(&0)
        || args.sizes.contains(&0)
    {
        return Err("--runs, --threads and --sizes must be positive".to_owned());
    }
    let kinds = if args.strategies.locks.is_empty() {
        StrategyKind::ALL.to_vec()
    } else {
        args.strategies.locks.clone()
    };
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let max_threads = *args.threads.iter().max().unwrap();

    let mut configs = vec![Config {
        kind: None,
        per_frame: false,
    }];
    for &kind in &kinds {
        configs.push(Config {
            kind: Some(kind),
            per_frame: false,
        });
    }
    let points_per_run: usize = args
        .workloads
        .iter()
        .map(|w| {
            let per_frame = if args.per_frame && *w == Workload::Lookup {
                kinds.iter().filter(|k| k.is_lock_based()).count()
            } else {
                0
            };
            1 + (kinds.len() + per_frame) * args.threads.len()
        })
        .sum::<usize>()
        * args.sizes.len();
    let bar = report::progress((points_per_run * args.repeats.runs) as u64);

    println!(
        "MAC table contention: {} core(s), median of {} runs of {} s per point, read sections per batch of {} lookups",
        cores,
        args.repeats.runs,
        args.interval.seconds,
        workload::BATCH
    );
    if max_threads > cores {
        println!("note: thread counts above {cores} measure preemption, not parallelism");
    }
    let mut records = Vec::new();
    let mut files = Vec::new();
    for &size in &args.sizes {
        let keys = workload::station_keys(size);
        for &workload in &args.workloads {
            let mut configs = configs.clone();
            if args.per_frame && workload == Workload::Lookup {
                for &kind in kinds.iter().filter(|k| k.is_lock_based()) {
                    configs.push(Config {
                        kind: Some(kind),
                        per_frame: true,
                    });
                }
            }
            bar.set_message(format!("{} {size}: filling tables", workload.name()));
            let mut tables: Vec<Table> = configs
                .iter()
                .map(|c| match c.kind {
                    None => Table::Floor(Floor::new(&keys)),
                    Some(kind) => table_for(kind, &keys, workload, max_threads),
                })
                .collect();
            // samples[config][threads index] = one Sample per run
            let mut samples: Vec<Vec<Vec<Sample>>> = configs
                .iter()
                .map(|_| args.threads.iter().map(|_| Vec::new()).collect())
                .collect();
            for _ in 0..args.repeats.runs {
                for (c, config) in configs.iter().enumerate() {
                    let thread_counts: &[usize] = if config.kind.is_none() {
                        &args.threads[..1]
                    } else {
                        &args.threads
                    };
                    for (t, &threads) in thread_counts.iter().enumerate() {
                        bar.set_message(format!(
                            "{} {size} {} {threads} thr",
                            workload.name(),
                            config.label()
                        ));
                        let sample = match &mut tables[c] {
                            Table::Floor(floor) => {
                                measure_floor(floor, &keys, workload, args.interval.seconds)
                            }
                            Table::Map(run) => {
                                run(threads, config.per_frame, args.interval.seconds)
                            }
                        };
                        samples[c][t].push(sample);
                        bar.inc(1);
                    }
                }
            }
            drop(tables);
            bar.suspend(|| {
                print_tables(&args, workload, size, &configs, &samples);
            });
            for (config, per_threads) in configs.iter().zip(&samples) {
                for (&threads, runs) in args.threads.iter().zip(per_threads) {
                    if runs.is_empty() {
                        continue;
                    }
                    let mops: Vec<f64> = runs.iter().map(|s| s.mops).collect();
                    let locks = runs[runs.len() / 2].locks;
                    let memory = MemorySummary::of(runs);
                    records.push(Record {
                        fields: vec![
                            ("workload", Field::Text(workload.name().to_owned())),
                            ("stations", Field::Number(size as f64)),
                            ("strategy", Field::Text(config.label())),
                            ("threads", Field::Number(threads as f64)),
                            ("cores", Field::Number(cores as f64)),
                            ("mops_median", Field::Number(report::median(&mops))),
                            (
                                "mops_min",
                                Field::Number(mops.iter().cloned().fold(f64::MAX, f64::min)),
                            ),
                            (
                                "mops_max",
                                Field::Number(mops.iter().cloned().fold(0.0, f64::max)),
                            ),
                            ("runs", Field::Number(runs.len() as f64)),
                            ("acquisitions", Field::Number(locks.acquisitions as f64)),
                            ("contended", Field::Number(locks.contended as f64)),
                            ("wait_ns", Field::Number(locks.wait_ns as f64)),
                            ("rss_peak_kib", Field::Number(memory.peak_kib)),
                            ("rss_growth_kib", Field::Number(memory.growth_kib)),
                            ("rss_end_kib", Field::Number(memory.end_kib)),
                        ],
                    });
                }
            }
            let plot = Plot {
                title: &format!("{}, {size} stations", workload.describe()),
                x_label: "threads",
                y_label: "Mops/s (all threads)",
                series: configs
                    .iter()
                    .zip(&samples)
                    .filter(|(c, _)| c.kind.is_some())
                    .map(|(c, per_threads)| {
                        let points = args
                            .threads
                            .iter()
                            .zip(per_threads)
                            .map(|(&t, runs)| {
                                (
                                    t as f64,
                                    report::median(
                                        &runs.iter().map(|s| s.mops).collect::<Vec<_>>(),
                                    ),
                                )
                            })
                            .collect();
                        (c.label(), points)
                    })
                    .collect(),
            };
            std::fs::create_dir_all(&args.output.out)
                .map_err(|e| format!("{}: {e}", args.output.out.display()))?;
            let stem = args
                .output
                .out
                .join(format!("locks-{}-{size}", workload.name()));
            files.extend(report::write_plot(&plot, &stem)?);
        }
    }
    bar.finish_and_clear();
    files.extend(
        report::write_records(&args.output.out, "locks", &records)
            .map_err(|e| format!("{}: {e}", args.output.out.display()))?,
    );
    report::print_written(&files);
    Ok(())
}

fn print_tables(
    args: &LocksArgs,
    workload: Workload,
    size: usize,
    configs: &[Config],
    samples: &[Vec<Vec<Sample>>],
) {
    let medians: Vec<Vec<f64>> = samples
        .iter()
        .map(|per_threads| {
            per_threads
                .iter()
                .map(|runs| {
                    if runs.is_empty() {
                        f64::NAN
                    } else {
                        report::median(&runs.iter().map(|s| s.mops).collect::<Vec<_>>())
                    }
                })
                .collect()
        })
        .collect();
    let floor = medians[0][0];
    println!();
    println!("{}, {} stations", workload.describe(), size);
    let mut header = format!("{:<18}", "strategy");
    for t in &args.threads {
        header += &format!(" {:>9}", format!("{t} thr"));
    }
    header += " |";
    for t in args.threads.iter().skip(1) {
        header += &format!(" {:>7}", format!("{t}/1"));
    }
    header += " | cost/op";
    println!("{header}");
    println!(
        "{:<18} Mops/s of all threads together | speedup over 1 thread | x unsync at 1 thread",
        ""
    );
    for (config, row) in configs.iter().zip(&medians) {
        let mut line = format!("{:<18}", config.label());
        if config.kind.is_none() {
            line += &format!(" {:>9.1}", row[0]);
            println!("{line}");
            continue;
        }
        for m in row {
            line += &format!(" {:>9.1}", m);
        }
        line += " |";
        for m in row.iter().skip(1) {
            line += &format!(" {:>6.2}x", m / row[0]);
        }
        line += &format!(" | {:>6.2}x", floor / row[0]);
        println!("{line}");
    }
    if workload == Workload::BatchedMoves {
        print_memory(args, configs, samples);
    }
    let locked: Vec<_> = configs
        .iter()
        .zip(samples)
        .filter(|(c, _)| c.kind.is_some_and(StrategyKind::is_lock_based))
        .collect();
    if locked.is_empty() {
        return;
    }
    println!("lock statistics (median run): acquisitions, contended %, mean wait per contended acquisition");
    for (config, per_threads) in locked {
        let mut line = format!("{:<18}", config.label());
        for (t, runs) in args.threads.iter().zip(per_threads) {
            let s = runs[runs.len() / 2].locks;
            let pct = if s.acquisitions > 0 {
                100.0 * s.contended as f64 / s.acquisitions as f64
            } else {
                0.0
            };
            let wait = if s.contended > 0 {
                s.wait_ns as f64 / s.contended as f64
            } else {
                0.0
            };
            line += &format!(
                "  {t} thr: {} acq {:.1}% {}",
                human(s.acquisitions),
                pct,
                nanos(wait)
            );
        }
        println!("{line}");
    }
}

/// The memory table: per point, the highest peak RSS of its runs and the
/// most it rose during one run.
fn print_memory(args: &LocksArgs, configs: &[Config], samples: &[Vec<Vec<Sample>>]) {
    let reset = samples
        .iter()
        .flatten()
        .flatten()
        .all(|s| s.memory.peak_is_the_runs);
    println!(
        "process memory (highest of the runs): peak RSS during a run in MiB, (+ its rise over the RSS at the run's start){}",
        if reset {
            ""
        } else {
            "; peaks since the process began, as /proc/self/clear_refs is not writable"
        }
    );
    for (config, per_threads) in configs.iter().zip(samples) {
        let mut line = format!("{:<18}", config.label());
        for (t, runs) in args.threads.iter().zip(per_threads) {
            if runs.is_empty() {
                continue;
            }
            let memory = MemorySummary::of(runs);
            line += &format!(
                "  {t} thr: {:.1} (+{:.1})",
                memory.peak_kib / 1024.0,
                memory.growth_kib / 1024.0
            );
        }
        println!("{line}");
    }
}

fn human(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=9_999_999 => format!("{:.0}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn nanos(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.1}ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1}us", ns / 1e3)
    } else {
        format!("{ns:.0}ns")
    }
}
