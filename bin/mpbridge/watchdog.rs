//! Noticing a worker that stopped making progress: each worker bumps a
//! heartbeat once per round of its loop and once after each sleep
//! (`WorkerCounters::beat`); the owner looks at every heartbeat once a
//! second, and a worker whose heartbeat stood still for longer than
//! [`STALL_AFTER`] is stuck (blocked in a system call, say, on a descriptor
//! a hostile vhost-user frontend controls) until it moves again.
//!
//! The detector is plain logic over (heartbeat, time) observations, so its
//! rules are tested without threads: a worker is judged by how long the
//! owner has seen the *same* value, never by how long since the owner last
//! looked, so an owner that was busy (a port change waits up to 5 s) cannot
//! make a running worker look stuck.

use std::time::{Duration, Instant};

/// How long a heartbeat may stand still before its worker is stuck: six of
/// the worker's longest sleeps, so that an idle worker (which beats at
/// least once per sleep) or one descheduled for a while on a busy machine
/// is never taken as stuck, and short enough that an operator hears of a
/// stall within a few seconds.
pub const STALL_AFTER: Duration = Duration::from_secs(3);

// An idle worker must never look stuck.
const _: () = assert!(STALL_AFTER.as_millis() >= 4 * bridge::worker::MAX_SLEEP.as_millis());

/// What the owner tells the log: a worker became stuck, or runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Worker `worker`'s heartbeat has stood still for `silent`.
    Stuck { worker: usize, silent: Duration },
    /// Worker `worker`, stuck before, beats again after `silent` without.
    Recovered { worker: usize, silent: Duration },
}

/// One worker as the watchdog sees it now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Health {
    /// Its heartbeat stood still for longer than [`STALL_AFTER`].
    pub stuck: bool,
    /// How long the heartbeat has shown the value it shows now, as far as
    /// the owner saw (looking once a second, so up to about a second for a
    /// worker that runs).
    pub silent: Duration,
    /// Times it became stuck since the bridge started.
    pub stalls: u64,
}

/// One worker's heartbeat as last seen.
#[derive(Debug, Clone, Copy)]
struct Watch {
    beat: u64,
    /// When the owner first saw `beat`.
    since: Instant,
    stuck: bool,
    stalls: u64,
}

/// The workers' heartbeats, as the owner last saw them.
#[derive(Debug)]
pub struct Watchdog {
    threshold: Duration,
    workers: Vec<Watch>,
}

impl Watchdog {
    /// Watches workers whose heartbeats are `beats` now, with `threshold`
    /// ([`STALL_AFTER`] in the daemon).
    pub fn new(beats: impl IntoIterator<Item = u64>, now: Instant, threshold: Duration) -> Self {
        Watchdog {
            threshold,
            workers: beats
                .into_iter()
                .map(|beat| Watch {
                    beat,
                    since: now,
                    stuck: false,
                    stalls: 0,
                })
                .collect(),
        }
    }

    /// Takes the heartbeats seen at `now` (one per worker, in worker
    /// order) and returns the workers that became stuck or recovered since
    /// the last look.
    pub fn observe(&mut self, beats: impl IntoIterator<Item = u64>, now: Instant) -> Vec<Change> {
        let mut changes = Vec::new();
        for (worker, (watch, beat)) in self.workers.iter_mut().zip(beats).enumerate() {
            let silent = now.saturating_duration_since(watch.since);
            if beat != watch.beat {
                if watch.stuck {
                    watch.stuck = false;
                    changes.push(Change::Recovered { worker, silent });
                }
                watch.beat = beat;
                watch.since = now;
            } else if !watch.stuck && silent > self.threshold {
                watch.stuck = true;
                watch.stalls += 1;
                changes.push(Change::Stuck { worker, silent });
            }
        }
        changes
    }

    /// Worker `worker` as last seen, its silence measured at `now`.
    pub fn health(&self, worker: usize, now: Instant) -> Option<Health> {
        self.workers.get(worker).map(|watch| Health {
            stuck: watch.stuck,
            silent: now.saturating_duration_since(watch.since),
            stalls: watch.stalls,
        })
    }

    /// The workers stuck as last seen.
    pub fn stuck(&self) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|&worker| self.workers[worker].stuck)
            .collect()
    }
}

/// Worker ids for a message: `worker 1`, `workers 0, 2`.
pub fn name_workers(ids: &[usize]) -> String {
    let list: Vec<String> = ids.iter().map(usize::to_string).collect();
    match ids.len() {
        1 => format!("worker {}", list[0]),
        _ => format!("workers {}", list.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// Looks once a second for `seconds` seconds, the heartbeats given by
    /// `beat(second, worker)`; returns every change with the second it came.
    fn run(
        dog: &mut Watchdog,
        start: Instant,
        seconds: u32,
        beat: impl Fn(u32, usize) -> u64,
    ) -> Vec<(u32, Change)> {
        let workers = dog.workers.len();
        (1..=seconds)
            .flat_map(|s| {
                let beats: Vec<u64> = (0..workers).map(|w| beat(s, w)).collect();
                dog.observe(beats, start + s * SECOND)
                    .into_iter()
                    .map(move |change| (s, change))
            })
            .collect()
    }

    #[test]
    fn an_idle_worker_is_never_stuck() {
        // An idle worker beats twice per 500 ms sleep; the slowest one
        // allowed beats once per sleep. Either way its value moves between
        // two looks a second apart, for an hour.
        let start = Instant::now();
        let mut dog = Watchdog::new([0, 0], start, STALL_AFTER);
        let changes = run(&mut dog, start, 3600, |s, w| u64::from(s) * (w as u64 + 1));
        assert_eq!(changes, []);
        assert_eq!(dog.stuck(), Vec::<usize>::new());
        let health = dog.health(0, start + 3600 * SECOND).unwrap();
        assert!(!health.stuck);
        assert_eq!(health.stalls, 0);
        assert_eq!(health.silent, Duration::ZERO);
    }

    #[test]
    fn a_worker_is_stuck_once_its_heartbeat_stands_still_past_the_threshold() {
        let start = Instant::now();
        let mut dog = Watchdog::new([0, 0], start, STALL_AFTER);
        // Worker 1 stops beating after second 2; worker 0 runs on.
        let changes = run(&mut dog, start, 20, |s, w| match w {
            0 => u64::from(s),
            _ => u64::from(s.min(2)),
        });
        // Last moved at second 2; at 5 it has stood still for 3 s, not
        // longer; at 6 for 4 s: stuck, and said once, not once per look.
        assert_eq!(
            changes,
            [(
                6,
                Change::Stuck {
                    worker: 1,
                    silent: 4 * SECOND
                }
            )]
        );
        assert_eq!(dog.stuck(), [1]);
        let health = dog.health(1, start + 20 * SECOND).unwrap();
        assert!(health.stuck);
        assert_eq!(health.silent, 18 * SECOND);
        assert_eq!(health.stalls, 1);
        assert!(!dog.health(0, start + 20 * SECOND).unwrap().stuck);
    }

    #[test]
    fn a_stuck_worker_that_beats_again_recovers_once_and_counts_each_stall() {
        let start = Instant::now();
        let mut dog = Watchdog::new([7], start, STALL_AFTER);
        // Stands still from 0 to 10, runs 10 to 15, stands still again.
        let beat = |s: u32, _| match s {
            0..10 => 7,
            10..15 => u64::from(s),
            _ => 14,
        };
        let changes = run(&mut dog, start, 30, beat);
        assert_eq!(
            changes,
            [
                (
                    4,
                    Change::Stuck {
                        worker: 0,
                        silent: 4 * SECOND
                    }
                ),
                (
                    10,
                    Change::Recovered {
                        worker: 0,
                        silent: 10 * SECOND
                    }
                ),
                (
                    18,
                    Change::Stuck {
                        worker: 0,
                        silent: 4 * SECOND
                    }
                ),
            ]
        );
        assert_eq!(dog.health(0, start + 30 * SECOND).unwrap().stalls, 2);
    }

    #[test]
    fn an_owner_that_looked_late_does_not_make_a_running_worker_stuck() {
        // The owner was busy for 10 s (a port change waiting on workers):
        // the heartbeat moved meanwhile, so the worker ran.
        let start = Instant::now();
        let mut dog = Watchdog::new([1], start, STALL_AFTER);
        assert_eq!(dog.observe([500], start + 10 * SECOND), []);
        assert_eq!(dog.stuck(), Vec::<usize>::new());
    }

    #[test]
    fn workers_are_named() {
        assert_eq!(name_workers(&[1]), "worker 1");
        assert_eq!(name_workers(&[0, 2]), "workers 0, 2");
    }
}
