//! One port as one worker holds it: its queue, the counts of the round in
//! progress, its health, its station moves, its VLANs and options. One
//! struct per port, so that the worker's per-port state is resized, reset
//! and dropped in one piece. (The batch's frames for each port are the
//! worker's `outputs`, beside the slots: the fan-out reads the slots as
//! egress views while it fills them.)

use crate::counters::PortStats;
use crate::forward::{EgressPort, EgressPorts};
use crate::vlan::PortVlans;

use super::health::Fault;
use super::policy::{Gate, PortPolicy, PortSetup};
use crate::forward::StormBucket;

/// Station moves onto one port in the current one-second window.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Flaps {
    pub(super) window: Option<std::time::Instant>,
    pub(super) moves: u32,
    pub(super) warned_at: Option<std::time::Instant>,
}

/// One port of one worker; a slot with no queue is a port id not in use.
#[derive(Debug)]
pub(super) struct PortSlot<P> {
    /// This worker's queue of the port.
    pub(super) queue: Option<P>,
    /// Counts of the round in progress, added to the shared counters at
    /// its end.
    pub(super) stats: PortStats,
    /// Its health.
    pub(super) fault: Fault,
    /// Station moves onto it.
    pub(super) flaps: Flaps,
    /// Its VLANs (with VLAN filtering).
    pub(super) vlans: PortVlans,
    /// Its BPDU and storm options.
    pub(super) policy: PortPolicy,
    /// What spanning tree lets through it.
    pub(super) gate: Gate,
    /// Disabled by its guard.
    pub(super) disabled: bool,
    /// Its storm limit's bucket, with `storm=`.
    pub(super) storm: Option<StormBucket>,
    /// BPDUs handed to spanning tree in the current second, and when it
    /// began.
    pub(super) bpdus: (u32, Option<std::time::Instant>),
    /// IGMP and MLD messages handed over in the current second, and when
    /// it began.
    pub(super) mcast_events: (u32, Option<std::time::Instant>),
}

impl<P> PortSlot<P> {
    /// A slot holding `queue` (or none), set up as `setup` says.
    pub(super) fn new(queue: Option<P>, setup: PortSetup) -> PortSlot<P> {
        let fault = match queue {
            Some(_) => Fault::default(),
            None => Fault::VACANT,
        };
        let mut slot = PortSlot {
            queue,
            stats: PortStats::default(),
            fault,
            flaps: Flaps::default(),
            vlans: PortVlans::default(),
            policy: PortPolicy::default(),
            gate: Gate::OPEN,
            disabled: false,
            storm: None,
            bpdus: (0, None),
            mcast_events: (0, None),
        };
        slot.set_up(setup);
        slot
    }

    /// Takes `setup`'s VLANs, options and state.
    pub(super) fn set_up(&mut self, setup: PortSetup) {
        self.vlans = setup.vlans;
        self.policy = setup.policy;
        self.gate = setup.gate;
        self.disabled = setup.disabled;
        self.storm = setup.policy.storm.map(StormBucket::new);
    }

    /// The slot's setup, for a worker that takes over.
    pub(super) fn setup(&self) -> PortSetup {
        PortSetup {
            vlans: self.vlans.clone(),
            policy: self.policy,
            gate: self.gate,
            disabled: self.disabled,
        }
    }

    /// Puts `queue` in the slot, afresh: no counts, no fault, no moves.
    pub(super) fn fill(&mut self, queue: P, setup: PortSetup) {
        self.queue = Some(queue);
        self.set_up(setup);
        self.stats = PortStats::default();
        self.fault = Fault::default();
        self.flaps = Flaps::default();
        self.bpdus = (0, None);
    }

    /// Empties the slot: dropping the queue closes it.
    pub(super) fn vacate(&mut self) {
        self.queue = None;
        self.fault = Fault::VACANT;
        self.stats = PortStats::default();
    }

    /// Whether frames may be sent out of it now (spanning tree's own
    /// frames may leave a port that does not forward).
    pub(super) fn sendable(&self) -> bool {
        self.queue.is_some() && self.fault.sendable() && !self.disabled
    }

    /// Whether forwarded frames may be sent out of it now.
    pub(super) fn forwards(&self) -> bool {
        self.sendable() && self.gate.forwarding
    }
}

/// The worker's ports as the fan-out sees them: a slot without a queue is
/// an index not in use.
impl<P> EgressPorts for [PortSlot<P>] {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }

    #[inline]
    fn port(&self, index: usize) -> Option<EgressPort<'_>> {
        let slot = self.get(index)?;
        slot.queue.as_ref()?;
        Some(EgressPort {
            vlans: &slot.vlans,
            flags: slot.policy.flags,
            bpdu_filter: slot.policy.bpdu_filter,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::health::Health;

    #[test]
    fn filling_and_vacating_a_slot_starts_it_afresh() {
        let mut slot: PortSlot<u8> = PortSlot::new(None, PortSetup::default());
        assert!(!slot.sendable());
        assert_eq!(slot.fault.health, Health::Vacant);
        slot.fill(7, PortSetup::with_vlans(PortVlans::access(10)));
        assert!(slot.sendable());
        assert!(slot.vlans.is_member(10));
        slot.stats.rx_frames = 3;
        slot.flaps.moves = 9;
        slot.fault.back_off();
        assert!(!slot.sendable());
        slot.vacate();
        assert_eq!(slot.queue, None);
        assert_eq!(slot.stats, PortStats::default());
        slot.fill(8, PortSetup::default());
        assert_eq!(slot.fault.health, Health::Up);
        assert_eq!(slot.flaps.moves, 0);
        assert_eq!(slot.stats, PortStats::default());
    }
}
