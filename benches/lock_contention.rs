//! MAC table contention under each lock strategy: lookup-only, 99% lookups
//! with 1% new stations, and a station-move storm, at 1, 2, 4 and 8 threads,
//! with tables of 64 and 8192 stations, against an unsynchronised
//! single-thread hash map as the floor.
//!
//! Each measurement runs `iters` operations split over the threads, started
//! together by a barrier, and reports wall time per operation: criterion's
//! "thrpt" is the aggregate operations per second of all threads.
//!
//! On a machine with fewer cores than threads, the higher thread counts
//! measure preemption, not parallelism.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use bridge::fdb::{FdbKey, FdbLookup, PortId};
use bridge::wire::MacAddr;
use bridge::{FdbConfig, MacTable};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use hashbrown::HashMap;
use locks::{Strategy, StrategyKind};

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
const SIZES: [usize; 2] = [64, 8192];
/// Lookups per read section: one receive batch's worth.
const BATCH: usize = 32;
/// Stations that arrive in the mixed workload, per thread, before their
/// departures start.
const ARRIVALS_IN_FLIGHT: usize = 64;

fn key(n: u64) -> FdbKey {
    let b = n.to_be_bytes();
    FdbKey::new(0, MacAddr([0x02, b[3], b[4], b[5], b[6], b[7]]))
}

/// The keys of a table of `size` stations, shuffled so that consecutive
/// lookups hit unrelated buckets.
fn station_keys(size: usize) -> Arc<[FdbKey]> {
    let mut keys: Vec<FdbKey> = (0..size as u64).map(key).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..keys.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        keys.swap(i, (state % (i as u64 + 1)) as usize);
    }
    keys.into()
}

fn filled<S: Strategy>(keys: &[FdbKey]) -> Arc<MacTable<S>> {
    let table = MacTable::new(FdbConfig {
        max_entries: keys.len() * 2 + ARRIVALS_IN_FLIGHT * 16,
        age_secs: 300,
    });
    let sources: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, PortId((i % 4) as u16)))
        .collect();
    table.learn_batch(&sources, 0);
    Arc::new(table)
}

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Lookup { per_frame: bool },
    Mixed,
    Moves,
}

/// Runs `iters` operations of `workload` over `threads` threads; returns the
/// wall time from the common start to the last thread's end.
fn run<S: Strategy>(
    table: &Arc<MacTable<S>>,
    keys: &Arc<[FdbKey]>,
    workload: Workload,
    threads: usize,
    iters: u64,
) -> Duration {
    let per_thread = iters.div_ceil(threads as u64) as usize;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (table, keys, barrier) =
                (Arc::clone(table), Arc::clone(keys), Arc::clone(&barrier));
            thread::spawn(move || {
                let n = keys.len();
                let mut at = t * n / threads;
                barrier.wait();
                match workload {
                    Workload::Lookup { per_frame: false } => {
                        let mut done = 0;
                        while done < per_thread {
                            let count = BATCH.min(per_thread - done);
                            table.read(|r| {
                                for _ in 0..count {
                                    black_box(r.lookup(&keys[at]));
                                    at = if at + 1 == n { 0 } else { at + 1 };
                                }
                            });
                            done += count;
                        }
                    }
                    Workload::Lookup { per_frame: true } => {
                        for _ in 0..per_thread {
                            black_box(table.lookup(&keys[at]));
                            at = if at + 1 == n { 0 } else { at + 1 };
                        }
                    }
                    Workload::Mixed => {
                        // Arrivals get keys no other thread uses; each
                        // arrival is paired with the departure of this
                        // thread's arrival from ARRIVALS_IN_FLIGHT ago, so
                        // the table keeps its size.
                        let base = (1 << 32) + ((t as u64) << 24);
                        let mut arrivals = 0u64;
                        let mut done = 0;
                        while done < per_thread {
                            // 99 lookups in three read sections of 33, then
                            // one arrival: 100 operations.
                            for _ in 0..3 {
                                table.read(|r| {
                                    for _ in 0..33 {
                                        black_box(r.lookup(&keys[at]));
                                        at = if at + 1 == n { 0 } else { at + 1 };
                                    }
                                });
                            }
                            table.learn(key(base + arrivals), PortId(1), 0);
                            if arrivals >= ARRIVALS_IN_FLIGHT as u64 {
                                table.forget(key(base + arrivals - ARRIVALS_IN_FLIGHT as u64));
                            }
                            arrivals += 1;
                            done += 100;
                        }
                    }
                    Workload::Moves => {
                        for i in 0..per_thread {
                            // The port shifts with every pass over the
                            // stations, so each learn is a move.
                            let port = PortId(((i + i / n + t) % 4) as u16);
                            black_box(table.learn(keys[at], port, 0));
                            at = if at + 1 == n { 0 } else { at + 1 };
                        }
                    }
                }
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
    keys: &Arc<[FdbKey]>,
    workload: Workload,
    suffix: &str,
) {
    for threads in thread_counts() {
        let table = filled::<S>(keys);
        group.bench_function(format!("{}{suffix}/{threads}", S::KIND), |b| {
            b.iter_custom(|iters| run(&table, keys, workload, threads, iters))
        });
    }
}

/// The floor: the same operations on a hash map nobody else touches.
fn bench_floor(group: &mut BenchmarkGroup<'_, WallTime>, keys: &Arc<[FdbKey]>, workload: Workload) {
    let mut map: HashMap<FdbKey, (PortId, u32), locks::HashBuilder> = HashMap::default();
    for (i, k) in keys.iter().enumerate() {
        map.insert(*k, (PortId((i % 4) as u16), 0));
    }
    let n = keys.len();
    group.bench_function("unsync/1", |b| {
        b.iter_custom(|iters| {
            let mut at = 0;
            let mut arrivals = 0u64;
            let start = Instant::now();
            for i in 0..iters {
                match workload {
                    Workload::Lookup { .. } => {
                        black_box(map.get(&keys[at]).map(|e| e.0));
                    }
                    Workload::Mixed if i % 100 == 99 => {
                        map.insert(key((1 << 32) + arrivals), (PortId(1), 0));
                        if arrivals >= ARRIVALS_IN_FLIGHT as u64 {
                            map.remove(&key((1 << 32) + arrivals - ARRIVALS_IN_FLIGHT as u64));
                        }
                        arrivals += 1;
                    }
                    Workload::Mixed => {
                        black_box(map.get(&keys[at]).map(|e| e.0));
                    }
                    Workload::Moves => {
                        let i = i as usize;
                        black_box(map.insert(keys[at], (PortId(((i + i / n) % 4) as u16), 0)));
                    }
                }
                at = if at + 1 == n { 0 } else { at + 1 };
            }
            start.elapsed()
        })
    });
}

fn contention(c: &mut Criterion) {
    let workloads = [
        ("lookup", Workload::Lookup { per_frame: false }),
        ("mixed", Workload::Mixed),
        ("moves", Workload::Moves),
    ];
    for size in SIZES {
        let keys = station_keys(size);
        for (name, workload) in workloads {
            let mut group = c.benchmark_group(format!("{name}/{size}"));
            group.throughput(Throughput::Elements(1));
            bench_floor(&mut group, &keys, workload);
            for kind in StrategyKind::ALL {
                locks::with_strategy!(kind, S => bench_strategy::<S>(&mut group, &keys, workload, ""));
                if workload == (Workload::Lookup { per_frame: false }) && kind.is_lock_based() {
                    let per_frame = Workload::Lookup { per_frame: true };
                    locks::with_strategy!(kind, S => bench_strategy::<S>(&mut group, &keys, per_frame, "-per-frame"));
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
