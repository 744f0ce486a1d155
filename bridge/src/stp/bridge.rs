//! The bridge as the state machines see it: the per-bridge variables of
//! 802.1D-2004 17.18, the conditions of 17.20 that look at every port,
//! the ports, and the queue of actions for the caller.

use super::bpdu::{Bpdu, BpduKind};
use super::config::StpConfig;
use super::machines::{
    detection, information, migration, receive, role_transitions, selection, selection::PrsState,
    state_transition, timers, topology_change, transmit,
};
use super::port::Port;
use super::priority::{BridgeId, PriorityVector, Times};
use super::{Action, Role};
use crate::port_id::PortId;
use crate::wire::MacAddr;

/// 17.20.9 MigrateTime (Table 17-1): 3 seconds.
pub(crate) const MIGRATE_TIME: u16 = 3;

/// Rounds of all machines before they must have come to rest.
const MAX_ROUNDS: usize = 256;

/// One bridge's spanning tree state.
#[derive(Debug, Clone)]
pub(crate) struct Bridge {
    /// 17.18.2 BridgeIdentifier.
    pub bridge_identifier: BridgeId,
    /// 17.18.3 BridgePriority: this bridge as root.
    pub bridge_priority: PriorityVector,
    /// 17.18.4 BridgeTimes: this bridge's timer parameters.
    pub bridge_times: Times,
    /// 17.18.5 rootPortId: the root port's identifier, 0 when this bridge
    /// is root.
    pub root_port_id: u16,
    /// The root port, for status.
    pub root_port: Option<PortId>,
    /// 17.18.6 rootPriority.
    pub root_priority: PriorityVector,
    /// 17.18.7 rootTimes.
    pub root_times: Times,
    /// 17.13.4 ForceProtocolVersion.
    pub force_protocol_version: u8,
    /// 17.13.12 TxHoldCount.
    pub tx_hold_count: u16,
    /// The Port Role Selection machine's state.
    pub prs: PrsState,
    /// The ports, in PortId order.
    pub ports: Vec<Port>,
    /// What the caller has yet to do, in order.
    pub actions: Vec<Action>,
    /// 14.8.1.1 Topology Change Count: how often tcWhile went from zero on
    /// every port to running on some port.
    pub topology_changes: u64,
    /// Whether tcWhile ran on some port when last looked at.
    pub topology_change: bool,
    /// Topology change events: changes detected by a port, and TCs and
    /// TCNs received on one, that were to be propagated (setTcPropTree).
    pub tc_events: u64,
    /// Flushes the machines asked for (fdbFlush), before coalescing.
    pub flush_requests: u64,
    /// Flushes queued for the caller: at most one per port per tick.
    pub flushes: u64,
}

impl Bridge {
    /// A bridge without ports, after BEGIN.
    pub fn new(config: &StpConfig, mac: MacAddr) -> Bridge {
        let id = BridgeId::new(config.priority, mac);
        let times = Times {
            message_age: 0,
            max_age: config.max_age.into(),
            forward_delay: config.forward_delay.into(),
            hello_time: config.hello_time.into(),
        };
        let mut bridge = Bridge {
            bridge_identifier: id,
            bridge_priority: PriorityVector::bridge(id),
            bridge_times: times,
            root_port_id: 0,
            root_port: None,
            root_priority: PriorityVector::bridge(id),
            root_times: times,
            force_protocol_version: config.force_version,
            tx_hold_count: config.tx_hold_count.into(),
            prs: PrsState::InitBridge,
            ports: Vec::new(),
            actions: Vec::new(),
            topology_changes: 0,
            topology_change: false,
            tc_events: 0,
            flush_requests: 0,
            flushes: 0,
        };
        selection::begin(&mut bridge);
        bridge.run();
        bridge
    }

    /// The index of a port in `ports`.
    pub fn index(&self, id: PortId) -> Option<usize> {
        self.ports.binary_search_by_key(&id, |p| p.id).ok()
    }

    /// 17.20.11 rstpVersion: ForceProtocolVersion >= 2.
    pub fn rstp_version(&self) -> bool {
        self.force_protocol_version >= 2
    }

    /// 17.20.3 allSynced: every port has its selected role and is synced,
    /// the root port excepted (it is what the others sync to).
    pub fn all_synced(&self) -> bool {
        self.ports.iter().all(|p| {
            p.selected
                && p.role == p.selected_role
                && !p.updt_info
                && (p.synced || p.role == Role::Root)
        })
    }

    /// 17.20.10 reRooted: rrWhile is 0 on every port but port `i`: no
    /// recent root port may still be forwarding.
    pub fn re_rooted(&self, i: usize) -> bool {
        self.ports
            .iter()
            .enumerate()
            .all(|(j, p)| j == i || p.rr_while == 0)
    }

    /// Adds a port (its link down) and runs the per-port BEGIN states.
    pub fn add_port(&mut self, port: Port) {
        let i = match self.ports.binary_search_by_key(&port.id, |p| p.id) {
            Ok(i) => {
                self.ports[i] = port;
                i
            }
            Err(i) => {
                self.ports.insert(i, port);
                i
            }
        };
        let own = PriorityVector {
            designated_port: self.ports[i].port_id,
            bridge_port: self.ports[i].port_id,
            ..self.bridge_priority
        };
        self.ports[i].designated_priority = own;
        self.ports[i].port_priority = own;
        self.ports[i].selected_role = Role::Disabled;
        receive::begin(self, i);
        migration::begin(self, i);
        detection::begin(self, i);
        transmit::begin(self, i);
        information::begin(self, i);
        role_transitions::begin(self, i);
        state_transition::begin(self, i);
        topology_change::begin(self, i);
        self.run();
    }

    /// Removes a port; the others choose their roles again.
    pub fn remove_port(&mut self, i: usize) {
        self.ports.remove(i);
        for p in &mut self.ports {
            p.reselect = true;
            p.selected = false;
        }
        self.run();
    }

    /// One second passed: the flushes held back in the last second are
    /// queued (one per port, which counts as the port's flush of the new
    /// second), then the Port Timers machine of every port runs (17.22).
    pub fn tick(&mut self) {
        for i in 0..self.ports.len() {
            let p = &mut self.ports[i];
            if p.flush_pending {
                p.flush_pending = false;
                self.queue_flush(i);
            } else {
                p.flushed_in_tick = false;
            }
        }
        for p in &mut self.ports {
            timers::tick(p);
        }
        self.run();
    }

    /// Runs every machine until none has a transition to take. Port
    /// Transmit runs after the others have rested, so that a BPDU carries
    /// the outcome of a change rather than a step on the way to it.
    pub fn run(&mut self) {
        for _ in 0..MAX_ROUNDS {
            let mut moved = false;
            for _ in 0..MAX_ROUNDS {
                let mut round = selection::step(self);
                for i in 0..self.ports.len() {
                    round |= receive::step(self, i);
                    round |= migration::step(self, i);
                    round |= detection::step(self, i);
                    round |= information::step(self, i);
                    round |= role_transitions::step(self, i);
                    round |= state_transition::step(self, i);
                    round |= topology_change::step(self, i);
                }
                if !round {
                    break;
                }
                moved = true;
            }
            for i in 0..self.ports.len() {
                moved |= transmit::step(self, i);
            }
            self.note_topology_change();
            if !moved {
                return;
            }
        }
        debug_assert!(
            false,
            "the state machines of {} do not rest",
            self.bridge_identifier
        );
    }

    /// Counts a topology change when tcWhile starts on some port while it
    /// ran on none (14.8.1.1).
    fn note_topology_change(&mut self) {
        let now = self.ports.iter().any(|p| p.tc_while != 0);
        if now && !self.topology_change {
            self.topology_changes += 1;
        }
        self.topology_change = now;
    }

    /// Queues a BPDU for transmission on port `i`.
    pub fn send(&mut self, i: usize, bpdu: &Bpdu) {
        let p = &mut self.ports[i];
        match bpdu.kind {
            BpduKind::Tcn => p.counters.tx_tcns += 1,
            BpduKind::Config | BpduKind::Rst => p.counters.tx_bpdus += 1,
        }
        let frame = bpdu.to_frame(p.mac);
        self.actions.push(Action::Send { port: p.id, frame });
    }

    /// Queues port `i`'s forwarding state if it changed since last told.
    pub fn report_state(&mut self, i: usize) {
        let p = &mut self.ports[i];
        let state = p.state();
        if state != p.reported {
            p.reported = state;
            self.actions.push(Action::State { port: p.id, state });
        }
    }

    /// fdbFlush (17.19): the removal of what port `i` learned; the flush
    /// is complete as far as the machines are concerned. Flushes are
    /// coalesced: the first of a tick is queued at once, any further one
    /// in the same tick is held back and queued once, at the next tick, so
    /// that a flood of TCs or TCNs costs each port at most one flush of
    /// the table a second rather than one per BPDU.
    pub fn flush(&mut self, i: usize) {
        self.flush_requests += 1;
        let p = &mut self.ports[i];
        p.fdb_flush = false;
        p.counters.flush_requests += 1;
        if p.flushed_in_tick {
            p.flush_pending = true;
        } else {
            self.queue_flush(i);
        }
    }

    /// Queues port `i`'s flush for the caller.
    fn queue_flush(&mut self, i: usize) {
        self.flushes += 1;
        let p = &mut self.ports[i];
        p.flushed_in_tick = true;
        p.counters.flushes += 1;
        self.actions.push(Action::Flush { port: p.id });
    }
}
