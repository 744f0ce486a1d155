//! MAC table workloads, shared by `mpbench locks` and the criterion
//! benchmark `benches/lock_contention.rs`: one definition of each workload,
//! run by a number of threads against any strategy, or against an
//! unsynchronised map as the floor.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bridge::fdb::{FdbKey, FdbLookup};
use bridge::wire::MacAddr;
use bridge::PortId;
use bridge::{FdbConfig, MacTable};
use hashbrown::HashMap;
use locks::Strategy;

/// Lookups per read section: one receive batch's worth.
pub const BATCH: usize = 32;
/// Station moves per write section in the batched-moves workload: as many
/// as a worker learns after one full receive batch (64 frames).
pub const MOVE_BATCH: usize = 64;
/// Stations that arrive in the mixed workload, per thread, before their
/// departures start.
const ARRIVALS_IN_FLIGHT: u64 = 64;

/// What the threads do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Destination lookups only.
    Lookup,
    /// 99 lookups then one station arrival (learned) and one departure
    /// (forgotten), so the table keeps its size.
    Mixed,
    /// Every operation learns a known station on another port.
    Moves,
    /// Every operation learns a known station on another port, in write
    /// sections of [`MOVE_BATCH`] moves, as the worker learns a batch's
    /// sources: what two ports sending the same sources cause. Each move
    /// replaces an entry, so this is where garbage not yet reclaimed shows.
    BatchedMoves,
    /// The table is full and every operation is a new source MAC that is
    /// refused: a MAC flood against the learning limit (RFC 2889, address
    /// caching).
    Capacity,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 5] = [
        Workload::Lookup,
        Workload::Mixed,
        Workload::Moves,
        Workload::BatchedMoves,
        Workload::Capacity,
    ];

    /// The command-line and report name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Lookup => "lookup",
            Workload::Mixed => "mixed",
            Workload::Moves => "moves",
            Workload::BatchedMoves => "batched-moves",
            Workload::Capacity => "capacity",
        }
    }

    /// What the name stands for, for table titles.
    pub fn describe(self) -> &'static str {
        match self {
            Workload::Lookup => "lookup only",
            Workload::Mixed => "99% lookups, 1% new stations",
            Workload::Moves => "station-move storm",
            Workload::BatchedMoves => "station-move storm, 64 moves per write section",
            Workload::Capacity => "learning at capacity (MAC flood)",
        }
    }
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let valid: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
                format!("unknown workload '{s}' (valid: {})", valid.join(", "))
            })
    }
}

/// How long a thread runs.
#[derive(Clone, Copy)]
pub enum Budget<'a> {
    /// This many operations (what criterion's benchmarks use).
    #[allow(dead_code)]
    Ops(u64),
    /// Until the flag is set (checked every hundred operations or so).
    Until(&'a AtomicBool),
}

impl Budget<'_> {
    fn more(&self, done: u64) -> bool {
        match *self {
            Budget::Ops(ops) => done < ops,
            // Relaxed: a stop flag; nothing is published through it.
            Budget::Until(stop) => !stop.load(Ordering::Relaxed),
        }
    }
}

/// The key of station `n`.
pub fn key(n: u64) -> FdbKey {
    let b = n.to_be_bytes();
    FdbKey::new(0, MacAddr([0x02, b[3], b[4], b[5], b[6], b[7]]))
}

/// The keys of a table of `size` stations, shuffled so that consecutive
/// lookups hit unrelated buckets.
pub fn station_keys(size: usize) -> Arc<[FdbKey]> {
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

/// A table holding `keys`, limited so that `workload` behaves as described:
/// exactly full for `Capacity`, with room for the arrivals otherwise.
pub fn filled<S: Strategy>(
    keys: &[FdbKey],
    workload: Workload,
    threads: usize,
) -> Arc<MacTable<S>> {
    let max_entries = match workload {
        Workload::Capacity => keys.len(),
        _ => keys.len() + (ARRIVALS_IN_FLIGHT as usize + 1) * threads.max(1) * 2,
    };
    let table = MacTable::new(FdbConfig {
        max_entries,
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

/// Keys no other thread and no table station uses.
fn fresh_key(thread: usize, n: u64) -> FdbKey {
    key((1 << 40) + ((thread as u64) << 32) + n)
}

/// One thread's share of `workload`; returns the operations it did.
pub fn run_thread<S: Strategy>(
    table: &MacTable<S>,
    keys: &[FdbKey],
    workload: Workload,
    per_frame: bool,
    thread: usize,
    threads: usize,
    budget: Budget<'_>,
) -> u64 {
    let n = keys.len();
    let mut at = thread * n / threads.max(1);
    let next = |at: &mut usize| {
        let k = keys[*at];
        *at = if *at + 1 == n { 0 } else { *at + 1 };
        k
    };
    let mut done = 0u64;
    let mut fresh = 0u64;
    let mut moves = Vec::with_capacity(MOVE_BATCH);
    while budget.more(done) {
        match workload {
            Workload::Lookup if per_frame => {
                for _ in 0..BATCH {
                    black_box(table.lookup(&next(&mut at)));
                }
                done += BATCH as u64;
            }
            Workload::Lookup => {
                table.read(|r| {
                    for _ in 0..BATCH {
                        black_box(r.lookup(&next(&mut at)));
                    }
                });
                done += BATCH as u64;
            }
            Workload::Mixed => {
                // 99 lookups in three read sections of 33, then one arrival.
                for _ in 0..3 {
                    table.read(|r| {
                        for _ in 0..33 {
                            black_box(r.lookup(&next(&mut at)));
                        }
                    });
                }
                table.learn(fresh_key(thread, fresh), PortId(1), 0);
                if fresh >= ARRIVALS_IN_FLIGHT {
                    table.forget(fresh_key(thread, fresh - ARRIVALS_IN_FLIGHT));
                }
                fresh += 1;
                done += 100;
            }
            Workload::Moves => {
                for _ in 0..BATCH {
                    // The port shifts with every pass over the stations, so
                    // each learn is a move.
                    let pass = done as usize / n;
                    let port = PortId(((done as usize + pass + thread) % 4) as u16);
                    black_box(table.learn(next(&mut at), port, 0));
                    done += 1;
                }
            }
            Workload::BatchedMoves => {
                // The same moves as `Moves`, learned a batch at a time.
                moves.clear();
                for _ in 0..MOVE_BATCH {
                    let pass = done as usize / n;
                    let port = PortId(((done as usize + pass + thread) % 4) as u16);
                    moves.push((next(&mut at), port));
                    done += 1;
                }
                black_box(table.learn_batch(&moves, 0));
            }
            Workload::Capacity => {
                for _ in 0..BATCH {
                    black_box(table.learn(fresh_key(thread, fresh), PortId(1), 0));
                    fresh += 1;
                }
                done += BATCH as u64;
            }
        }
    }
    done
}

/// A hash map that only one thread touches: the floor every strategy is
/// compared with.
pub struct Floor {
    map: HashMap<FdbKey, (PortId, u32), locks::HashBuilder>,
}

impl Floor {
    /// A map holding `keys`.
    pub fn new(keys: &[FdbKey]) -> Floor {
        let mut map = HashMap::default();
        for (i, k) in keys.iter().enumerate() {
            map.insert(*k, (PortId((i % 4) as u16), 0));
        }
        Floor { map }
    }

    /// Runs `workload`'s operations on it; returns how many.
    pub fn run(&mut self, keys: &[FdbKey], workload: Workload, budget: Budget<'_>) -> u64 {
        run_floor(&mut self.map, keys, workload, budget)
    }
}

fn run_floor(
    map: &mut HashMap<FdbKey, (PortId, u32), locks::HashBuilder>,
    keys: &[FdbKey],
    workload: Workload,
    budget: Budget<'_>,
) -> u64 {
    let capacity = keys.len();
    let n = keys.len();
    let mut at = 0;
    let mut done = 0u64;
    let mut fresh = 0u64;
    while budget.more(done) {
        for _ in 0..100 {
            let k = keys[at];
            at = if at + 1 == n { 0 } else { at + 1 };
            match workload {
                Workload::Lookup => {
                    black_box(map.get(&k).map(|e| e.0));
                }
                Workload::Mixed if done % 100 == 99 => {
                    map.insert(fresh_key(0, fresh), (PortId(1), 0));
                    if fresh >= ARRIVALS_IN_FLIGHT {
                        map.remove(&fresh_key(0, fresh - ARRIVALS_IN_FLIGHT));
                    }
                    fresh += 1;
                }
                Workload::Mixed => {
                    black_box(map.get(&k).map(|e| e.0));
                }
                Workload::Moves | Workload::BatchedMoves => {
                    let i = done as usize;
                    black_box(map.insert(k, (PortId(((i + i / n) % 4) as u16), 0)));
                }
                Workload::Capacity => {
                    let new = fresh_key(0, fresh);
                    fresh += 1;
                    if !map.contains_key(&new) && map.len() < capacity {
                        map.insert(new, (PortId(1), 0));
                    }
                    black_box(&*map);
                }
            }
            done += 1;
        }
    }
    done
}
