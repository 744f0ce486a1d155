//! `lock set`: moving the MAC table to another strategy while traffic
//! flows.

use std::sync::Arc;
use std::time::Instant;

use bridge::fdb::Table;
use bridge::PortId;

use crate::api_error::ApiError;
use crate::mcast::Snooper;
use crate::protocol;

use super::{BridgeState, STOP_TIMEOUT};

/// What a prepared lock switch does once the old workers have stopped:
/// takes their queues and parts, the old table's entries and totals and
/// the snooper, and starts the new workers over the new table.
pub(super) type Switch = Box<
    dyn FnOnce(
        Vec<crate::workers::Returned>,
        &[bridge::fdb::FdbRecord],
        bridge::fdb::FdbStatsSnapshot,
        Option<&mut Snooper>,
    ) -> Result<(crate::workers::Started, Arc<dyn Table>), String>,
>;

impl BridgeState {
    /// Moves the bridge to a MAC table of strategy `kind` while it runs:
    /// the workers finish their batch and stop, the table's entries (ages,
    /// kinds) move into a table of the new strategy, and workers of that
    /// strategy take over the same queues and counters. If the old workers
    /// cannot all be taken back, or the new ones cannot start, the bridge
    /// cannot forward all its traffic any more and stops (non-zero).
    pub(super) fn switch_lock(
        &mut self,
        kind: locks::StrategyKind,
    ) -> Result<protocol::LockSwitched, ApiError> {
        if self.relay {
            return Err(ApiError::NoMacTable);
        }
        let old = Arc::clone(&self.fdb);
        if old.kind() == kind {
            return Ok(protocol::LockSwitched {
                lock: kind.name().to_owned(),
                entries: old.len(),
                pause_us: 0,
            });
        }
        if let Err(error) = self.check_responsive(&format!("lock set {kind}")) {
            self.lock_set_failed += 1;
            return Err(error);
        }
        // Everything the new strategy needs from the system (its table's
        // memory, the eventfds, the threads) is made while the old workers
        // still forward: a failure here leaves them untouched. What follows
        // the stop only moves memory around.
        let snooping = self.mcast.is_some();
        let limits: Vec<(PortId, u32)> = self
            .live_ports()
            .into_iter()
            .map(|(id, spec)| (id, spec.options.max_learned.unwrap_or(0)))
            .collect();
        let count = self.controls.len();
        let prepared: Result<Switch, String> = locks::with_strategy!(kind, S => {
            let table = Arc::new(bridge::MacTable::<S>::with_clock(old.config(), old.clock()));
            let groups = snooping.then(|| Arc::new(bridge::mcast::GroupTable::<S>::new()));
            crate::workers::prepare::<S>(
                Arc::clone(&table),
                groups.clone(),
                count,
                self.worker_config,
                &self.placement,
                None,
            )
            .map(|prepared| {
                Box::new(move |sets, entries: &[bridge::fdb::FdbRecord], totals, mcast: Option<&mut Snooper>| {
                    table.import(entries, totals);
                    for &(port, limit) in &limits {
                        table.set_port_limit(port, limit);
                    }
                    if let (Some(mcast), Some(groups)) = (mcast, &groups) {
                        mcast.replace_table(Arc::clone(groups) as Arc<dyn bridge::mcast::Groups>);
                    }
                    prepared
                        .start(sets)
                        .map(|started| (started, table as Arc<dyn Table>))
                }) as Switch
            })
        });
        let switch = match prepared {
            Ok(switch) => switch,
            Err(error) => {
                self.lock_set_failed += 1;
                let error = ApiError::LockPrepare {
                    lock: kind,
                    reason: error,
                    kept: old.kind(),
                };
                log::warn!("{error}");
                return Err(error);
            }
        };
        let paused = Instant::now();
        // Every worker answered a moment ago; one that does not stop now
        // got stuck since, and the others have stopped already.
        let sets = match self.generation.stop(STOP_TIMEOUT) {
            Ok(sets) => sets,
            Err(error) => return Err(self.fail(kind, error)),
        };
        let entries = old.records();
        let totals = old.stats();
        let (started, table) = match switch(sets, &entries, totals, self.mcast.as_mut()) {
            Ok(started) => started,
            Err(error) => return Err(self.fail(kind, error)),
        };
        let pause = paused.elapsed();
        self.fdb = table;
        self.apply_port_limits();
        self.generation = started.generation;
        self.controls = started.controls;
        for worker in &self.workers {
            worker.reset_locks();
        }
        log::info!(
            "lock {} -> {}: {} entries moved, forwarding paused {:?}",
            old.kind(),
            kind,
            entries.len(),
            pause
        );
        Ok(protocol::LockSwitched {
            lock: kind.name().to_owned(),
            entries: entries.len(),
            pause_us: pause.as_micros() as u64,
        })
    }

    /// Records a fault the bridge cannot carry on after; the main loop
    /// stops the bridge on its next look. Returns the error for the reply.
    pub(super) fn fail(&mut self, lock: locks::StrategyKind, reason: String) -> ApiError {
        let error = ApiError::LockSwitchLost { lock, reason };
        log::error!("{error}");
        self.fatal = Some(error.to_string());
        error
    }
}
