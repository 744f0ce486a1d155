//! MAC table contention under each lock strategy: lookup-only, 99% lookups
//! with 1% new stations, and a station-move storm, at 1, 2, 4 and 8 threads,
//! with tables of 64 and 8192 stations, against an unsynchronised
//! single-thread hash map as the floor. The workloads are `mpbench locks`'s
//! (bin/mpbench/workload.rs).
//!
//! Each measurement runs `iters` operations split over the threads, started
//! together by a barrier, and reports wall time per operation: criterion's
//! "thrpt" is the aggregate operations per second of all threads.
//!
//! On a machine with fewer cores than threads, the higher thread counts
//! measure preemption, not parallelism.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use lab::workload::{self, Budget, Floor, Workload};
use locks::{Strategy, StrategyKind};

const SIZES: [usize; 2] = [64, 8192];

/// Thread counts; `MPBRIDGE_BENCH_THREADS=1,2,4,8,16` overrides them (for
/// a machine with more cores).
fn thread_counts() -> Vec<usize> {
    match std::env::var("MPBRIDGE_BENCH_THREADS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("MPBRIDGE_BENCH_THREADS: a comma-separated list of counts")
            })
            .collect(),
        Err(_) => vec![1, 2, 4, 8],
    }
}

/// Runs `iters` operations over `threads` threads; returns the wall time
/// from the common start to the last thread's end.
fn run<S: Strategy>(
    table: &Arc<bridge::MacTable<S>>,
    keys: &Arc<[bridge::FdbKey]>,
    workload: Workload,
    per_frame: bool,
    threads: usize,
    iters: u64,
) -> Duration {
    let per_thread = iters.div_ceil(threads as u64);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (table, keys, barrier) =
                (Arc::clone(table), Arc::clone(keys), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                workload::run_thread(
                    &table,
                    &keys,
                    workload,
                    per_frame,
                    t,
                    threads,
                    Budget::Ops(per_thread),
                );
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for handle in handles {
        handle.join().expect("benchmark thread panicked");
    }
    start.elapsed()
}

fn bench_strategy<S: Strategy>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    keys: &Arc<[bridge::FdbKey]>,
    workload: Workload,
    per_frame: bool,
) {
    let suffix = if per_frame { "-per-frame" } else { "" };
    for threads in thread_counts() {
        let table = workload::filled::<S>(keys, workload, threads);
        group.bench_function(format!("{}{suffix}/{threads}", S::KIND), |b| {
            b.iter_custom(|iters| run(&table, keys, workload, per_frame, threads, iters))
        });
    }
}

fn contention(c: &mut Criterion) {
    for size in SIZES {
        let keys = workload::station_keys(size);
        for workload in [Workload::Lookup, Workload::Mixed, Workload::Moves] {
            let mut group = c.benchmark_group(format!("{}/{size}", workload.name()));
            group.throughput(Throughput::Elements(1));
            let mut floor = Floor::new(&keys);
            group.bench_function("unsync/1", |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    floor.run(&keys, workload, Budget::Ops(iters));
                    start.elapsed()
                })
            });
            for kind in StrategyKind::ALL {
                locks::with_strategy!(kind, S => bench_strategy::<S>(&mut group, &keys, workload, false));
                if workload == Workload::Lookup && kind.is_lock_based() {
                    locks::with_strategy!(kind, S => bench_strategy::<S>(&mut group, &keys, workload, true));
                }
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = contention
}
criterion_main!(benches);
