//! Model-based property test: random sequences of table operations on every
//! strategy, compared step by step with a plain sequential model.

mod common;

use std::collections::BTreeMap;

use bridge::fdb::{FdbKey, FdbRecord, Learned, Seconds};
use bridge::PortId;
use bridge::{FdbConfig, MacTable};
use common::station;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const MAX_ENTRIES: usize = 6;
const AGE_SECS: Seconds = 5;

#[derive(Debug, Clone)]
enum Op {
    Learn(u8, u16),
    Refresh(u8, u16),
    Lookup(u8),
    Tick(Seconds),
    Age,
    FlushPort(u16),
    AddStatic(u8, u16),
    RemoveStatic(u8),
}

/// 16 stations in two VLANs: enough to overflow the limit of 6 and to
/// collide, few enough that operations often meet the same entry.
fn key(n: u8) -> FdbKey {
    FdbKey::new(u16::from(n % 2) * 7, station(u32::from(n / 2)))
}

fn op() -> impl Strategy<Value = Op> {
    let station = 0u8..16;
    let port = 0u16..3;
    prop_oneof![
        4 => (station.clone(), port.clone()).prop_map(|(s, p)| Op::Learn(s, p)),
        3 => (station.clone(), port.clone()).prop_map(|(s, p)| Op::Refresh(s, p)),
        3 => station.clone().prop_map(Op::Lookup),
        2 => (1u32..4).prop_map(Op::Tick),
        1 => Just(Op::Age),
        1 => port.clone().prop_map(Op::FlushPort),
        1 => (station.clone(), port).prop_map(|(s, p)| Op::AddStatic(s, p)),
        1 => station.prop_map(Op::RemoveStatic),
    ]
}

#[derive(Default)]
struct Model {
    entries: BTreeMap<FdbKey, (PortId, bool, Seconds)>,
    refused: u64,
}

impl Model {
    fn learned(&self) -> usize {
        self.entries.values().filter(|(_, s, _)| !s).count()
    }

    fn learn(&mut self, key: FdbKey, port: PortId, now: Seconds) -> Learned {
        let learned = self.learned();
        match self.entries.get_mut(&key) {
            None if learned < MAX_ENTRIES => {
                self.entries.insert(key, (port, false, now));
                Learned::New
            }
            None => {
                self.refused += 1;
                Learned::Refused
            }
            Some((_, true, _)) => Learned::Static,
            Some((p, false, seen)) if *p == port => {
                *seen = now;
                Learned::Refreshed
            }
            Some(entry) => {
                *entry = (port, false, now);
                Learned::Moved
            }
        }
    }

    fn refresh(&mut self, key: FdbKey, port: PortId, now: Seconds) -> bool {
        match self.entries.get_mut(&key) {
            Some((_, true, _)) => true,
            Some((p, false, seen)) if *p == port => {
                *seen = now;
                true
            }
            _ => false,
        }
    }

    fn retain(&mut self, keep: impl Fn(&(PortId, bool, Seconds)) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| keep(e));
        before - self.entries.len()
    }

    fn records(&self) -> Vec<FdbRecord> {
        self.entries
            .iter()
            .map(|(key, &(port, is_static, seen))| FdbRecord {
                key: *key,
                port,
                vtep: None,
                is_static,
                is_local: false,
                is_extern: false,
                last_seen: if is_static { 0 } else { seen },
            })
            .collect()
    }
}

fn check<S: locks::Strategy>(ops: &[Op]) -> Result<(), TestCaseError> {
    let table = MacTable::<S>::new(FdbConfig {
        max_entries: MAX_ENTRIES,
        age_secs: AGE_SECS,
    });
    let mut model = Model::default();
    let mut now: Seconds = 0;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Learn(s, p) => {
                let got = table.learn(key(s), PortId(p), now);
                prop_assert_eq!(got, model.learn(key(s), PortId(p), now), "step {}", step);
            }
            Op::Refresh(s, p) => {
                let got = table.read(|r| r.refresh_source(&key(s), PortId(p), now));
                prop_assert_eq!(got, model.refresh(key(s), PortId(p), now), "step {}", step);
            }
            Op::Lookup(s) => {
                let want = model.entries.get(&key(s)).map(|e| e.0);
                prop_assert_eq!(table.lookup(&key(s)), want, "step {}", step);
            }
            Op::Tick(secs) => now += secs,
            Op::Age => {
                let want = model.retain(|&(_, is_static, seen)| is_static || now - seen < AGE_SECS);
                prop_assert_eq!(table.age(now), want, "step {}", step);
            }
            Op::FlushPort(p) => {
                let want = model.retain(|&(port, is_static, _)| is_static || port != PortId(p));
                prop_assert_eq!(table.flush_port(PortId(p)), want, "step {}", step);
            }
            Op::AddStatic(s, p) => {
                let replaced = matches!(model.entries.get(&key(s)), Some((_, false, _)));
                model.entries.insert(key(s), (PortId(p), true, 0));
                prop_assert_eq!(
                    table.add_static(key(s), PortId(p)),
                    replaced,
                    "step {}",
                    step
                );
            }
            Op::RemoveStatic(s) => {
                let was_static = matches!(model.entries.get(&key(s)), Some((_, true, _)));
                if was_static {
                    model.entries.remove(&key(s));
                }
                prop_assert_eq!(table.remove_static(key(s)), was_static, "step {}", step);
            }
        }
        prop_assert_eq!(table.len(), model.entries.len(), "len after step {}", step);
        prop_assert_eq!(
            table.learned_len(),
            model.learned(),
            "learned after step {}",
            step
        );
    }
    prop_assert_eq!(table.records(), model.records());
    prop_assert_eq!(table.stats().refused, model.refused);
    Ok(())
}

fn matches_the_model<S: locks::Strategy>() {
    let mut runner = TestRunner::new(Config {
        cases: 256,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(op(), 1..120), |ops| check::<S>(&ops))
        .unwrap();
}

for_each_strategy!(matches_the_model);
