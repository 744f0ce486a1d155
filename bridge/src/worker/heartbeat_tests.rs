//! The worker's heartbeat: it moves while the worker sleeps with nothing to
//! do (so an idle worker never looks stuck), and a ping is answered by a
//! worker that runs its loop.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::fdb::FdbConfig;
use crate::port::{RxReport, SendReport};

/// A port that never has a frame, with a descriptor that never polls
/// readable: the worker sleeps in `poll(2)` for its longest sleep, round
/// after round.
struct Silent(OwnedFd);

impl Queue for Silent {
    fn name(&self) -> &str {
        "silent"
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.0.as_raw_fd())
    }

    fn recv_batch(&mut self, _batch: &mut RxBatch) -> Result<RxReport, PortError> {
        Ok(RxReport::default())
    }

    fn send_batch<'a>(
        &mut self,
        frames: impl Iterator<Item = crate::port::Outgoing<'a>>,
    ) -> SendReport {
        SendReport {
            sent: frames.count(),
            ..SendReport::default()
        }
    }
}

fn idle_worker() -> Worker<locks::Mutex, Silent> {
    let ports = (0..2)
        .map(|_| Silent(wake::eventfd().expect("an eventfd")))
        .collect();
    let fdb = Arc::new(MacTable::new(FdbConfig::default()));
    Worker::new(fdb, ports, WorkerConfig::default())
}

#[test]
fn an_idle_worker_beats_at_least_once_per_sleep() {
    let mut worker = idle_worker();
    let totals = worker.totals();
    let stopper = Arc::new(Stopper::new().unwrap());
    let running = {
        let stopper = Arc::clone(&stopper);
        std::thread::spawn(move || worker.run(&stopper))
    };
    // Over three longest sleeps, the heartbeat never stands still for
    // longer than one sleep and a margin for the scheduler.
    let mut last = (totals.heartbeat(), Instant::now());
    let mut longest = Duration::ZERO;
    let mut moves = 0;
    let end = Instant::now() + 3 * MAX_SLEEP;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
        let beat = totals.heartbeat();
        if beat != last.0 {
            longest = longest.max(last.1.elapsed());
            last = (beat, Instant::now());
            moves += 1;
        }
    }
    longest = longest.max(last.1.elapsed());
    stopper.stop();
    running.join().expect("the worker ran");
    assert!(moves >= 2, "the heartbeat moved {moves} times in 1.5 s");
    assert!(
        longest < MAX_SLEEP + Duration::from_millis(400),
        "the heartbeat stood still for {longest:?}"
    );
}

#[test]
fn a_running_worker_answers_a_ping_and_a_stopped_one_does_not() {
    let mut worker = idle_worker();
    let control = worker.control();
    let stopper = Arc::new(Stopper::new().unwrap());
    let running = {
        let stopper = Arc::clone(&stopper);
        std::thread::spawn(move || worker.run(&stopper))
    };
    // Asleep in poll(2): the ping wakes it, well before its sleep ends.
    let asked = Instant::now();
    let answer = control.ping().expect("the worker takes changes");
    answer
        .recv_timeout(Duration::from_secs(5))
        .expect("a running worker answers");
    assert!(
        asked.elapsed() < MAX_SLEEP,
        "answered after {:?}",
        asked.elapsed()
    );
    stopper.stop();
    running.join().expect("the worker ran");
    // Its loop ended and the worker is gone with it: nobody answers.
    assert!(control.ping().is_err());
}
