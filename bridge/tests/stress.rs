//! Several threads learn and look up while another ages and flushes; then
//! the table must be consistent and its static entries intact. Every loop is
//! bounded by a count.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;

use bridge::fdb::{FdbKey, Learned};
use bridge::PortId;
use bridge::{FdbConfig, MacTable};
use common::station;
use locks::Strategy;

const LEARNERS: usize = 3;
const OPS_PER_LEARNER: u32 = 20_000;
const STATIONS: u32 = 600;
const MAX_ENTRIES: usize = 256;
const PORTS: u16 = 4;
const STATIC_PORT: PortId = PortId(3);

fn static_key(n: u32) -> FdbKey {
    FdbKey::new(1, station(1_000_000 + n))
}

fn concurrent_learning_ageing_and_flushing<S: Strategy>() {
    let table = MacTable::<S>::new(FdbConfig {
        max_entries: MAX_ENTRIES,
        age_secs: 3,
    });
    for n in 0..16 {
        table.add_static(static_key(n), STATIC_PORT);
    }
    let barrier = Barrier::new(LEARNERS + 1);
    let learners_done = AtomicBool::new(false);

    thread::scope(|scope| {
        let learners: Vec<_> = (0..LEARNERS as u32)
            .map(|id| {
                let (table, barrier) = (&table, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    let mut rng = id.wrapping_mul(2_654_435_761).wrapping_add(1);
                    for i in 0..OPS_PER_LEARNER {
                        rng ^= rng << 13;
                        rng ^= rng >> 17;
                        rng ^= rng << 5;
                        let key = FdbKey::new(0, station(rng % STATIONS));
                        let port = PortId((rng >> 16) as u16 % (PORTS - 1));
                        let now = i / 1000;
                        if i % 4 == 0 {
                            let outcome = table.learn(key, port, now);
                            assert_ne!(outcome, Learned::Static);
                        } else if !table.read(|r| r.refresh_source(&key, port, now)) {
                            table.learn_batch(&[(key, port)], now);
                        }
                        // Learning never touches the static entries.
                        let probe = static_key(rng % 16);
                        assert_eq!(table.lookup(&probe), Some(STATIC_PORT));
                        if let Some(port) = table.lookup(&key) {
                            assert!(port.0 < PORTS - 1, "learned a port nobody used");
                        }
                    }
                })
            })
            .collect();
        let (table, barrier, done) = (&table, &barrier, &learners_done);
        scope.spawn(move || {
            barrier.wait();
            for round in 0u32..10_000 {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                match round % 3 {
                    0 => table.age(round / 50),
                    1 => table.flush_port(PortId((round % (PORTS as u32 - 1)) as u16)),
                    _ => table.records().len(),
                };
                thread::yield_now();
            }
        });
        for learner in learners {
            learner.join().expect("a learner panicked");
        }
        learners_done.store(true, Ordering::Relaxed);
    });

    let records = table.records();
    assert_eq!(records.len(), table.len());
    let learned = records.iter().filter(|r| !r.is_static).count();
    assert_eq!(learned, table.learned_len(), "learned count drifted");
    assert!(learned <= MAX_ENTRIES);
    let keys: HashSet<_> = records.iter().map(|r| r.key).collect();
    assert_eq!(keys.len(), records.len(), "a key appears twice");
    for n in 0..16 {
        let record = records
            .iter()
            .find(|r| r.key == static_key(n))
            .expect("static entry lost");
        assert!(record.is_static && record.port == STATIC_PORT);
    }
    for record in records.iter().filter(|r| !r.is_static) {
        assert_eq!(table.lookup(&record.key), Some(record.port));
    }
    let stats = table.stats();
    assert!(stats.learned > 0 && stats.moved > 0, "{stats:?}");
}

for_each_strategy!(concurrent_learning_ageing_and_flushing);
