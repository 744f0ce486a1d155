//! The Rapid Spanning Tree Protocol of IEEE 802.1D-2004 clause 17
//! (formerly 802.1w), with 802.1D-1998 compatibility per port through the
//! Port Protocol Migration machine.
//!
//! [`Stp`] is one bridge's protocol instance. It does no I/O and reads no
//! clock: the caller feeds it received BPDUs ([`Stp::receive`]), link
//! events ([`Stp::set_link`]) and a tick every second ([`Stp::tick`]), and
//! collects what it must do ([`Stp::take_actions`]): frames to send, port
//! forwarding states to apply, and per-port flushes of learned addresses.
//!
//! The code follows the standard's state machines (17.22-17.31), their
//! variables (17.17-17.19) and procedures (17.21) under the standard's
//! names, so a reader can follow it with the clause at hand:
//!
//! - `bpdu`: BPDU frames, validation (9.3.4) and encoding (9.3).
//! - `priority`: bridge and port identifiers, priority vectors (17.5, 17.6).
//! - `port`, `bridge`: the per-port and per-bridge variables.
//! - `machines`: one module per state machine.
//! - `config`: the parameters and their ranges.

mod bpdu;
mod bridge;
mod config;
mod machines;
mod port;
mod priority;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use config::{path_cost, PortConfig, StpConfig};
pub use priority::BridgeId;

use bpdu::{Bpdu, BpduKind};
use bridge::Bridge;
use port::Port;
use priority::{port_identifier, port_number};

use crate::port_id::PortId;
use crate::wire::MacAddr;

/// A port's role in the spanning tree (17.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The port toward the root bridge.
    Root,
    /// The port that connects its segment toward the root.
    Designated,
    /// A blocked alternative path toward the root, through another bridge.
    Alternate,
    /// A blocked redundant connection to a segment this bridge already
    /// serves through another port.
    Backup,
    /// Not part of the active topology: link down.
    Disabled,
}

impl Role {
    /// The role's name in lower case: "root", "designated", "alternate",
    /// "backup", "disabled".
    pub fn name(self) -> &'static str {
        match self {
            Role::Root => "root",
            Role::Designated => "designated",
            Role::Alternate => "alternate",
            Role::Backup => "backup",
            Role::Disabled => "disabled",
        }
    }
}

/// A port's forwarding state (17.10, 7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// Neither learns nor forwards frames (BPDUs still flow).
    Discarding,
    /// Learns source addresses but forwards nothing.
    Learning,
    /// Learns and forwards.
    Forwarding,
}

impl PortState {
    /// The state's name in lower case: "discarding", "learning",
    /// "forwarding".
    pub fn name(self) -> &'static str {
        match self {
            PortState::Discarding => "discarding",
            PortState::Learning => "learning",
            PortState::Forwarding => "forwarding",
        }
    }

    /// Whether frames received on the port are learned from.
    pub fn learns(self) -> bool {
        self != PortState::Discarding
    }

    /// Whether frames are forwarded to and from the port.
    pub fn forwards(self) -> bool {
        self == PortState::Forwarding
    }
}

/// Something the caller must do, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Transmit `frame` on `port`: a whole Ethernet frame (to
    /// 01:80:C2:00:00:00 from the port's address, 802.3 length, LLC, the
    /// BPDU, padded to 60 bytes).
    Send {
        /// The port to send on.
        port: PortId,
        /// The frame.
        frame: Vec<u8>,
    },
    /// `port`'s forwarding state is now `state`.
    State {
        /// The port.
        port: PortId,
        /// Its new state.
        state: PortState,
    },
    /// Remove the addresses learned on `port` (fdbFlush, 17.19): the
    /// stations behind it may have moved. At most one per port per tick:
    /// requests beyond the first in a tick are coalesced into one given
    /// out at the next [`Stp::tick`].
    Flush {
        /// The port.
        port: PortId,
    },
}

/// The bridge's view of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeStatus {
    /// This bridge's identifier.
    pub bridge_id: BridgeId,
    /// The root bridge's identifier (this bridge's when it is root).
    pub root_id: BridgeId,
    /// The port toward the root; `None` when this bridge is root.
    pub root_port: Option<PortId>,
    /// The cost of the path to the root.
    pub root_cost: u32,
    /// How many times a topology change began (tcWhile started on some
    /// port while it ran on none; 14.8.1.1).
    pub topology_changes: u64,
    /// Whether a topology change is being signalled (tcWhile runs on some
    /// port).
    pub topology_change: bool,
    /// Topology change events: a change a port detected, or a TC or TCN
    /// it received while taking part, each one (a port with
    /// restricted_tcn counts them but does not pass them on).
    pub tc_events: u64,
    /// Flushes of a port's learned addresses the machines asked for.
    pub flush_requests: u64,
    /// [`Action::Flush`]es given out: at most one per port per tick, the
    /// requests beyond that coalesced into one at the next tick.
    pub flushes: u64,
}

/// One port's view of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortStatus {
    /// The port's role.
    pub role: Role,
    /// The port's forwarding state.
    pub state: PortState,
    /// Whether the port is an edge port now (operEdge).
    pub oper_edge: bool,
    /// Whether the port sends RST BPDUs (false: it speaks 802.1D to a
    /// legacy neighbour).
    pub send_rstp: bool,
    /// The root of the port's priority vector (the best information on
    /// its segment: received, or this bridge's when designated).
    pub designated_root: BridgeId,
    /// The bridge that is designated for the port's segment.
    pub designated_bridge: BridgeId,
    /// The designated port's identifier.
    pub designated_port: u16,
    /// The designated bridge's cost to the root.
    pub designated_cost: u32,
    /// Configuration and RST BPDUs received and accepted.
    pub rx_bpdus: u64,
    /// Configuration and RST BPDUs sent.
    pub tx_bpdus: u64,
    /// TCN BPDUs received.
    pub rx_tcns: u64,
    /// TCN BPDUs sent.
    pub tx_tcns: u64,
    /// Frames given to [`Stp::receive`] that were not valid BPDUs
    /// (9.3.4), or that were this port's own BPDU looped back.
    pub bad_bpdus: u64,
    /// Flushes of the port the machines asked for.
    pub flush_requests: u64,
    /// [`Action::Flush`]es of the port given out (at most one a tick).
    pub flushes: u64,
}

/// One bridge's RSTP instance.
#[derive(Debug, Clone)]
pub struct Stp {
    config: StpConfig,
    bridge: Bridge,
}

impl Stp {
    /// A bridge with no ports. `bridge_mac` is the low 48 bits of the
    /// bridge identifier.
    pub fn new(config: StpConfig, bridge_mac: MacAddr) -> Stp {
        Stp {
            bridge: Bridge::new(&config, bridge_mac),
            config,
        }
    }

    /// The bridge's parameters.
    pub fn config(&self) -> &StpConfig {
        &self.config
    }

    /// Adds a port whose BPDUs come from `mac`. Its link starts down
    /// (Disabled, discarding). Its 802.1D port number is `port.0 + 1`
    /// (in 12 bits). Adding a port that exists replaces it.
    pub fn add_port(&mut self, port: PortId, config: PortConfig, mac: MacAddr) {
        let times = self.bridge.bridge_times;
        self.bridge.add_port(Port::new(port, config, mac, times));
    }

    /// Removes a port. Actions about it may still be queued.
    pub fn remove_port(&mut self, port: PortId) {
        if let Some(i) = self.bridge.index(port) {
            self.bridge.remove_port(i);
        }
    }

    /// The port's link went up or down (portEnabled).
    pub fn set_link(&mut self, port: PortId, up: bool) {
        let Some(i) = self.bridge.index(port) else {
            return;
        };
        if self.bridge.ports[i].port_enabled != up {
            self.bridge.ports[i].port_enabled = up;
            self.bridge.run();
        }
    }

    /// Changes a port's parameters. A new priority, path cost or
    /// restricted_role makes the bridge choose roles again; a new AdminEdge sets operEdge to it.
    pub fn set_port_config(&mut self, port: PortId, config: PortConfig) {
        let Some(i) = self.bridge.index(port) else {
            return;
        };
        let p = &mut self.bridge.ports[i];
        let old = std::mem::replace(&mut p.config, config);
        if old.priority != config.priority
            || old.path_cost != config.path_cost
            || old.restricted_role != config.restricted_role
        {
            p.port_id = port_identifier(config.priority, Port::number(port));
            p.reselect = true;
            p.selected = false;
        }
        if old.admin_edge != config.admin_edge {
            machines::detection::begin(&mut self.bridge, i);
        }
        self.bridge.run();
    }

    /// A frame to 01:80:C2:00:00:00 arrived on `port`. Valid BPDUs
    /// (9.3.4) go to the state machines; anything else, and this port's
    /// own BPDU come back, is counted in `bad_bpdus` and dropped. Frames
    /// on a port whose link is down are ignored.
    pub fn receive(&mut self, port: PortId, frame: &[u8]) {
        let Some(i) = self.bridge.index(port) else {
            return;
        };
        let own_bridge = self.bridge.bridge_identifier;
        let p = &mut self.bridge.ports[i];
        if !p.port_enabled {
            return;
        }
        let bpdu = match Bpdu::from_frame(frame) {
            Ok(bpdu) => bpdu,
            Err(_) => {
                p.counters.bad_bpdus += 1;
                return;
            }
        };
        if bpdu.kind != BpduKind::Tcn
            && bpdu.priority.designated_bridge.address() == own_bridge.address()
            && port_number(bpdu.priority.designated_port) == port_number(p.port_id)
        {
            p.counters.bad_bpdus += 1;
            return;
        }
        match bpdu.kind {
            BpduKind::Tcn => p.counters.rx_tcns += 1,
            BpduKind::Config | BpduKind::Rst => p.counters.rx_bpdus += 1,
        }
        // The machines consume each BPDU before receive() returns, so
        // rcvdBpdu is never still set here.
        p.bpdu = bpdu;
        p.rcvd_bpdu = true;
        self.bridge.run();
    }

    /// One second passed.
    pub fn tick(&mut self) {
        self.bridge.tick();
    }

    /// Everything to do since the last call, in order. The last
    /// [`Action::State`] for a port is its current state.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.bridge.actions)
    }

    /// The bridge's view of the tree.
    pub fn bridge_status(&self) -> BridgeStatus {
        let b = &self.bridge;
        BridgeStatus {
            bridge_id: b.bridge_identifier,
            root_id: b.root_priority.root_bridge,
            root_port: b.root_port,
            root_cost: b.root_priority.root_path_cost,
            topology_changes: b.topology_changes,
            topology_change: b.topology_change,
            tc_events: b.tc_events,
            flush_requests: b.flush_requests,
            flushes: b.flushes,
        }
    }

    /// A port's view of the tree; `None` for an unknown port.
    pub fn port_status(&self, port: PortId) -> Option<PortStatus> {
        let p = &self.bridge.ports[self.bridge.index(port)?];
        Some(PortStatus {
            role: p.role,
            state: p.state(),
            oper_edge: p.oper_edge,
            send_rstp: p.send_rstp,
            designated_root: p.port_priority.root_bridge,
            designated_bridge: p.port_priority.designated_bridge,
            designated_port: p.port_priority.designated_port,
            designated_cost: p.port_priority.root_path_cost,
            rx_bpdus: p.counters.rx_bpdus,
            tx_bpdus: p.counters.tx_bpdus,
            rx_tcns: p.counters.rx_tcns,
            tx_tcns: p.counters.tx_tcns,
            bad_bpdus: p.counters.bad_bpdus,
            flush_requests: p.counters.flush_requests,
            flushes: p.counters.flushes,
        })
    }

    /// The ports, in order.
    pub fn ports(&self) -> impl Iterator<Item = PortId> + '_ {
        self.bridge.ports.iter().map(|p| p.id)
    }
}
