//! The workers' health: heartbeats, pings before a change, a worker
//! that ended, and stopping them.

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::api_error::ApiError;
use crate::watchdog;

use super::{BridgeState, STOP_TIMEOUT};

/// How long the workers together may take to answer a ping, before a
/// change that needs all of them: an idle worker wakes at once, a busy one
/// answers after its batch.
pub(super) const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// Waits for each worker's answer, all within `within` (together, not
/// each); returns the workers that did not answer in time, in order.
pub(super) fn await_answers(
    answers: impl IntoIterator<Item = (usize, mpsc::Receiver<()>)>,
    within: Duration,
) -> Vec<usize> {
    let deadline = Instant::now() + within;
    answers
        .into_iter()
        .filter(|(_, answer)| {
            let left = deadline.saturating_duration_since(Instant::now());
            answer.recv_timeout(left).is_err()
        })
        .map(|(worker, _)| worker)
        .collect()
}

impl BridgeState {
    /// Looks at the workers' heartbeats: a worker whose heartbeat stood
    /// still for longer than [`watchdog::STALL_AFTER`] is logged once as
    /// stuck, and once more when it runs again.
    pub fn watch_workers(&mut self) {
        let beats = self.workers.iter().map(|totals| totals.heartbeat());
        for change in self.watchdog.observe(beats, Instant::now()) {
            match change {
                watchdog::Change::Stuck { worker, silent } => log::warn!(
                    "worker {worker} is stuck: no heartbeat for {:.1} s; its queues' traffic \
                     is not forwarded, and port changes and lock set are refused until it runs \
                     again",
                    silent.as_secs_f64()
                ),
                watchdog::Change::Recovered { worker, silent } => log::warn!(
                    "worker {worker} runs again, after {:.1} s without a heartbeat",
                    silent.as_secs_f64()
                ),
            }
        }
    }

    /// Makes sure that every worker runs its loop before a change that
    /// needs all of them (`what`): a worker the watchdog found stuck, or
    /// one that does not answer a ping within [`PING_TIMEOUT`], fails the
    /// request with nothing changed, and the bridge runs on.
    pub(super) fn check_responsive(&mut self, what: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        let stuck = self.watchdog.stuck();
        if !stuck.is_empty() {
            let silent = stuck
                .iter()
                .filter_map(|&worker| self.watchdog.health(worker, now))
                .map(|health| health.silent.as_secs())
                .max()
                .unwrap_or_default();
            return Err(ApiError::WorkersStuck {
                what: what.to_owned(),
                workers: stuck,
                silent_s: silent,
            });
        }
        let pings = self
            .controls
            .iter()
            .map(|control| control.ping())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| ApiError::PingUnsent {
                what: what.to_owned(),
                reason: e.to_string(),
            })?;
        let silent = await_answers(pings.into_iter().enumerate(), PING_TIMEOUT);
        if !silent.is_empty() {
            return Err(ApiError::PingUnanswered {
                what: what.to_owned(),
                workers: silent,
                within_s: PING_TIMEOUT.as_secs(),
            });
        }
        Ok(())
    }

    /// An error naming why the bridge cannot go on: a worker that ended on
    /// its own (workers run until told to stop, so one that ended
    /// panicked, and part of the traffic would be black-holed), or a fault
    /// recorded earlier.
    pub fn check_workers(&self) -> Result<(), String> {
        if let Some(fatal) = &self.fatal {
            return Err(fatal.clone());
        }
        match self.generation.handles.iter().position(|h| h.is_finished()) {
            Some(id) => Err(format!(
                "worker {id} stopped unexpectedly (panicked); stopping the bridge"
            )),
            None => Ok(()),
        }
    }

    /// Asks the workers to stop for good, without waiting: the bridge
    /// stops its other threads meanwhile.
    pub fn ask_workers_to_stop(&mut self) {
        self.generation.ask_to_stop();
        self.stop_asked.get_or_insert_with(Instant::now);
    }

    /// Stops the workers for good, waiting at most [`STOP_TIMEOUT`] from
    /// when they were asked: a worker still running then is stuck, named
    /// in the error, and left behind (the process's exit ends it).
    pub fn stop_workers(&mut self) -> Result<(), String> {
        let asked = *self.stop_asked.get_or_insert_with(Instant::now);
        self.generation
            .stop_by(asked + STOP_TIMEOUT, STOP_TIMEOUT)
            .map(|_| ())
    }
}
