//! A port's health as one worker sees it: forwarding, backing off after
//! a fault (doubling from 50 ms to 1 s), retrying, gone; and what the
//! worker does on a fault: count it once per event, log it at a bounded
//! rate, flush the port's stations, leave the port alone meanwhile.

use std::time::{Duration, Instant};

use locks::Strategy;

use super::Worker;
use crate::counters::PortState;
use crate::port::{FaultKind, PortError, Queue};
use crate::port_id::PortId;

/// How long a faulted port (link down, a persistent error) is first left
/// alone before it is tried again: short, since most faults are brief (a
/// tap moved to another namespace is down for a moment).
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The back-off doubles while the fault lasts, up to this: a port down for
/// long costs one look a second, and comes back within a second of its
/// link.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// At most one log line per port per this interval.
pub(super) const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Where one port stands for one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Health {
    /// Passing frames.
    Up,
    /// Faulted: left alone until then (not polled, sent nothing).
    Backoff(Instant),
    /// Back from a back-off, not yet proven: a fault now belongs to the
    /// same event and is not counted again.
    Retrying,
    /// The device is gone for good; the port is out of the bridge.
    Gone,
    /// No port has this id (never added, or removed).
    Vacant,
}

/// Per-port fault state: its health and when it last logged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fault {
    pub(super) health: Health,
    /// The back-off the next fault of this event gets.
    pub(super) backoff: Duration,
    logged_at: Option<Instant>,
    suppressed: u64,
}

impl Default for Fault {
    fn default() -> Self {
        Fault {
            health: Health::Up,
            backoff: FIRST_BACKOFF,
            logged_at: None,
            suppressed: 0,
        }
    }
}

impl Fault {
    pub(super) const VACANT: Fault = Fault {
        health: Health::Vacant,
        backoff: FIRST_BACKOFF,
        logged_at: None,
        suppressed: 0,
    };

    /// Leaves the port alone for the current back-off, and doubles it for
    /// the next fault of the same event.
    pub(super) fn back_off(&mut self) {
        self.health = Health::Backoff(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Logs `error` unless this port logged within [`LOG_INTERVAL`].
    pub(super) fn log(&mut self, error: &PortError, what: &str) {
        let now = Instant::now();
        if self.logged_at.is_some_and(|at| now < at + LOG_INTERVAL) {
            self.suppressed += 1;
            return;
        }
        if self.suppressed > 0 {
            log::warn!(
                "{error}{what} (and {} more since the last report)",
                self.suppressed
            );
        } else {
            log::warn!("{error}{what}");
        }
        self.logged_at = Some(now);
        self.suppressed = 0;
    }

    /// Whether frames may be sent to the port now.
    pub(super) fn sendable(&self) -> bool {
        matches!(self.health, Health::Up | Health::Retrying)
    }
}

/// Which counter a port fault is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    Rx,
    Tx,
}

impl<S: Strategy, P: Queue> Worker<S, P> {
    /// Asks the ports passing frames whether their link went down with
    /// nothing failing (a tap whose device was set down, see
    /// [`Queue::link_lost`]). Such a port is faulted as a failed receive
    /// faults it, once per event: counted, its learned stations flushed
    /// (as the Linux bridge flushes a port whose device goes down), one
    /// line logged, and left alone until its link is back, which costs a
    /// look per back-off and nothing else.
    pub(super) fn check_links(&mut self) {
        for index in 0..self.slots.len() {
            let slot = &self.slots[index];
            if !matches!(slot.fault.health, Health::Up | Health::Retrying) {
                continue;
            }
            if slot.queue.as_ref().is_some_and(|port| port.link_lost()) {
                self.lose_link(index, true);
            }
        }
    }

    /// Port `index`'s link went down (see [`check_links`](Self::check_links);
    /// or the control plane heard so from the kernel, and logged it): the
    /// port is faulted once per event, counted and flushed, and left alone
    /// until its link is back. `log`: whether to log it here.
    pub(super) fn lose_link(&mut self, index: usize, log: bool) {
        let slot = &mut self.slots[index];
        let health = slot.fault.health;
        if !matches!(health, Health::Up | Health::Retrying) {
            return;
        }
        let Some(port) = slot.queue.as_ref() else {
            return;
        };
        let name = port.name().to_owned();
        slot.fault.back_off();
        self.counters[index].set_state(PortState::Faulted);
        // Retrying: the same event, and no frame came in since it began,
        // so there is nothing learned to flush.
        if health == Health::Retrying {
            return;
        }
        slot.stats.rx_errors += 1;
        let flushed = self.fdb.flush_port(PortId(index as u16));
        if log {
            log::warn!(
                "{name}: link down; flushed {flushed} learned stations; \
                 retrying until it passes frames again"
            );
        }
    }

    /// Port `index`'s link is up again, the control plane heard: a port
    /// backing off is retried in the next round instead of at the end of
    /// its back-off.
    pub(super) fn link_back(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index) {
            if matches!(slot.fault.health, Health::Backoff(_)) {
                slot.fault.health = Health::Backoff(Instant::now());
            }
        }
    }

    /// A port's back-off ended: clears an error left from the fault (so
    /// that the first send does not fail on a stale one) and looks at the
    /// link. Returns whether the port may be used again.
    pub(super) fn retry(&mut self, index: usize) -> bool {
        if let Some(error) = self.port_mut(index).take_error() {
            let error = PortError::Pending {
                port: self.port(index).name().to_owned(),
                source: error,
            };
            self.slots[index].fault.health = Health::Retrying;
            self.fault(index, error, Direction::Rx);
            return false;
        }
        if !self.port(index).link_ready() {
            self.slots[index].fault.back_off();
            return false;
        }
        self.slots[index].fault.health = Health::Retrying;
        true
    }

    /// A port passed frames: a fault it had is over.
    pub(super) fn recovered(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if slot.fault.health == Health::Retrying {
            slot.fault.health = Health::Up;
            slot.fault.backoff = FIRST_BACKOFF;
            self.counters[index].set_state(PortState::Forwarding);
            if let Some(port) = &slot.queue {
                log::info!("{}: passing frames again", port.name());
            }
        }
    }

    /// Handles an error of port `index`: counts it once per fault event,
    /// logs it at a bounded rate, flushes the stations learned there (as
    /// the Linux bridge does when a port goes down), and leaves the port
    /// alone for a while, or for good when its device is gone.
    pub(super) fn fault(&mut self, index: usize, error: PortError, direction: Direction) {
        let kind = FaultKind::of(error.source_error());
        let slot = &mut self.slots[index];
        let fault = &mut slot.fault;
        let first = fault.health == Health::Up;
        if matches!(fault.health, Health::Gone | Health::Vacant) {
            return;
        }
        let counter = match direction {
            Direction::Rx => &mut slot.stats.rx_errors,
            Direction::Tx => &mut slot.stats.tx_errors,
        };
        if kind == FaultKind::Gone {
            *counter += 1;
            fault.health = Health::Gone;
            self.counters[index].set_state(PortState::Gone);
            log::warn!("{error}: the device is gone; the port is out of the bridge");
        } else {
            if first {
                *counter += 1;
                fault.log(&error, "; retrying until it passes frames again");
            } else {
                log::debug!("{error} (still faulted)");
            }
            fault.back_off();
            self.counters[index].set_state(PortState::Faulted);
        }
        if first || kind == FaultKind::Gone {
            self.fdb.flush_port(PortId(index as u16));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_off_doubles_up_to_its_ceiling() {
        let mut fault = Fault::default();
        let mut waits = Vec::new();
        for _ in 0..8 {
            let before = Instant::now();
            fault.back_off();
            let Health::Backoff(until) = fault.health else {
                panic!("not backing off: {:?}", fault.health);
            };
            waits.push(until.saturating_duration_since(before));
        }
        let expected = [50, 100, 200, 400, 800, 1000, 1000, 1000];
        for (wait, ms) in waits.iter().zip(expected) {
            let want = Duration::from_millis(ms);
            // The deadline was taken a moment after `before`.
            assert!(
                *wait >= want && *wait < want + Duration::from_millis(50),
                "{waits:?}"
            );
        }
        assert_eq!(fault.backoff, MAX_BACKOFF);
    }

    #[test]
    fn only_forwarding_and_retrying_ports_are_sent_to() {
        let mut fault = Fault::default();
        assert!(fault.sendable());
        fault.health = Health::Retrying;
        assert!(fault.sendable());
        fault.back_off();
        assert!(!fault.sendable());
        fault.health = Health::Gone;
        assert!(!fault.sendable());
        assert!(!Fault::VACANT.sendable());
    }

    #[test]
    fn logging_is_bounded_per_interval() {
        let mut fault = Fault::default();
        let error = PortError::Pending {
            port: "p0".to_owned(),
            source: std::io::Error::from_raw_os_error(libc::ENETDOWN),
        };
        fault.log(&error, "");
        let first = fault.logged_at.expect("logged");
        for _ in 0..5 {
            fault.log(&error, "");
        }
        assert_eq!(fault.logged_at, Some(first));
        assert_eq!(fault.suppressed, 5);
    }
}
