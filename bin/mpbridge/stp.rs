//! Spanning tree on the owner thread: the bridge crate's I/O-free state
//! machines (`bridge::stp`) fed with the BPDUs the workers hand over, the
//! ports' links and a one-second tick; what they decide goes back to the
//! workers as port changes do (a gate per port, a BPDU to send through a
//! worker's queue) and to the table (a port's entries flushed).

use std::collections::BTreeMap;

use bridge::fdb::Table;
use bridge::port::LinkQueue;
use bridge::stp::{Action, PortConfig, PortState, Role, Stp, StpConfig};
use bridge::wire::MacAddr;
use bridge::worker::{Gate, PortControl};
use bridge::PortId;

use crate::ports::{PortKind, PortSpec};
use crate::protocol::{BpduCounts, BridgeStp, FlushCounts, PortStp};

/// Spanning tree and what it knows of the ports' links.
pub struct SpanningTree {
    stp: Stp,
    /// Per port taking part: whether its link was up when last told.
    links: BTreeMap<PortId, bool>,
}

/// What a port state lets through.
pub fn gate(state: PortState) -> Gate {
    match state {
        PortState::Discarding => Gate::CLOSED,
        PortState::Learning => Gate::LEARNING,
        PortState::Forwarding => Gate::OPEN,
    }
}

impl SpanningTree {
    /// Spanning tree with `config`, its bridge address `mac`.
    pub fn new(config: StpConfig, mac: MacAddr) -> SpanningTree {
        log::info!(
            "spanning tree: bridge id {}, hello {} s, forward delay {} s, max age {} s",
            bridge::stp::BridgeId(u64::from(config.priority) << 48 | mac.to_u64()),
            config.hello_time,
            config.forward_delay,
            config.max_age
        );
        SpanningTree {
            stp: Stp::new(config, mac),
            links: BTreeMap::new(),
        }
    }

    /// Whether a port takes part (one with `bpdu_filter=on` does not).
    pub fn takes_part(spec: &PortSpec) -> bool {
        !spec.options.bpdu_filter
    }

    /// What the workers start a port with: discarding until spanning tree
    /// says otherwise, where it takes part.
    pub fn first_gate(spec: &PortSpec) -> Gate {
        match Self::takes_part(spec) {
            true => Gate::CLOSED,
            false => Gate::OPEN,
        }
    }

    /// Adds `port`, its link down until told.
    pub fn add(&mut self, port: PortId, spec: &PortSpec, mac: MacAddr) {
        if !Self::takes_part(spec) {
            return;
        }
        let config = PortConfig {
            priority: spec.options.priority.unwrap_or(128),
            path_cost: spec
                .options
                .cost
                .unwrap_or_else(|| bridge::stp::path_cost(link_speed(spec))),
            admin_edge: spec.options.edge,
            restricted_role: spec.options.restricted_role,
            restricted_tcn: spec.options.restricted_tcn,
            ..PortConfig::default()
        };
        self.stp.add_port(port, config, mac);
        self.links.insert(port, false);
    }

    /// Removes `port`.
    pub fn remove(&mut self, port: PortId) {
        if self.links.remove(&port).is_some() {
            self.stp.remove_port(port);
        }
    }

    /// Tells it of `port`'s link (or a guard's disabling), when it changed.
    pub fn link(&mut self, port: PortId, up: bool) {
        if let Some(known) = self.links.get_mut(&port) {
            if *known != up {
                *known = up;
                self.stp.set_link(port, up);
            }
        }
    }

    /// A BPDU the workers handed over.
    pub fn receive(&mut self, port: PortId, frame: &[u8]) {
        if self.links.contains_key(&port) {
            self.stp.receive(port, frame);
        }
    }

    /// One second passed.
    pub fn tick(&mut self) {
        self.stp.tick();
    }

    /// Carries out what spanning tree decided: gates to every worker,
    /// BPDUs through the first worker's queue, flushes on the table.
    pub fn apply(
        &mut self,
        controls: &[PortControl<LinkQueue>],
        fdb: &dyn Table,
        label: impl Fn(PortId) -> String,
    ) {
        for action in self.stp.take_actions() {
            match action {
                Action::Send { port, frame } => {
                    if let Some(control) = controls.first() {
                        if let Err(error) = control.send_frame(port, frame) {
                            log::debug!("{}: cannot send a BPDU: {error}", label(port));
                        }
                    }
                }
                Action::State { port, state } => {
                    let status = self.stp.port_status(port);
                    log::info!(
                        "{}: spanning tree {} {}",
                        label(port),
                        status.map_or("?", |s| role_name(s.role, s.oper_edge)),
                        state.name()
                    );
                    for control in controls {
                        let _ = control.set_gate(port, gate(state));
                    }
                }
                Action::Flush { port } => {
                    let flushed = fdb.flush_port(port);
                    if flushed > 0 {
                        log::debug!(
                            "{}: topology change: flushed {flushed} learned stations",
                            label(port)
                        );
                    }
                }
            }
        }
    }

    /// The bridge's figures for `stats`.
    pub fn bridge(&self, label: impl Fn(PortId) -> String) -> BridgeStp {
        let status = self.stp.bridge_status();
        BridgeStp {
            bridge_id: status.bridge_id.to_string(),
            root_id: status.root_id.to_string(),
            root_port: status.root_port.map(label),
            root_cost: status.root_cost,
            topology_changes: status.topology_changes,
            topology_change: status.topology_change,
            tc_events: status.tc_events,
            flush_requests: status.flush_requests,
            flushes: status.flushes,
        }
    }

    /// A port's figures for `stats` and `port show`.
    /// Whether `port` forwards (one not taking part always does).
    pub fn forwarding(&self, port: PortId) -> bool {
        self.stp
            .port_status(port)
            .is_none_or(|status| status.state == PortState::Forwarding)
    }

    pub fn port(&self, port: PortId) -> Option<PortStp> {
        let status = self.stp.port_status(port)?;
        Some(PortStp {
            role: Some(role_name(status.role, status.oper_edge).to_owned()),
            state: Some(status.state.name().to_owned()),
            guard_tripped: None,
            guard_trips: None,
            rstp: Some(status.send_rstp),
            bpdus: Some(BpduCounts {
                rx_bpdus: status.rx_bpdus,
                tx_bpdus: status.tx_bpdus,
                rx_tcns: status.rx_tcns,
                tx_tcns: status.tx_tcns,
                bad_bpdus: status.bad_bpdus,
            }),
            flushes: Some(FlushCounts {
                requested: status.flush_requests,
                done: status.flushes,
            }),
        })
    }
}

/// A role as `stats` names it: a designated edge port is an edge port.
fn role_name(role: Role, edge: bool) -> &'static str {
    match (role, edge) {
        (Role::Designated, true) => "edge",
        (role, _) => role.name(),
    }
}

/// A port's link speed in Mb/s, where its interface says.
fn link_speed(spec: &PortSpec) -> Option<u32> {
    if !matches!(spec.kind, PortKind::Raw | PortKind::Tap) {
        return None;
    }
    let path = format!("/sys/class/net/{}/speed", spec.name);
    let speed: i64 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    u32::try_from(speed).ok().filter(|&s| s > 0)
}

/// The bridge's own address, as the Linux bridge takes it: the lowest of
/// its ports' ([`port_mac`]); for a bridge started with none, one made
/// from its name (locally administered, the same at every start).
pub fn bridge_mac(bridge: &str, specs: &[PortSpec]) -> MacAddr {
    specs
        .iter()
        .map(|spec| port_mac(bridge, spec))
        .min_by_key(|mac| mac.to_u64())
        .unwrap_or_else(|| named_mac(bridge, ""))
}

/// The address spanning tree sends a port's BPDUs from: a raw or tap
/// port's interface address, or one made from the bridge's and the port's
/// names (locally administered, the same at every start).
pub fn port_mac(bridge: &str, spec: &PortSpec) -> MacAddr {
    if matches!(spec.kind, PortKind::Raw | PortKind::Tap) {
        if let Ok(mac) = bridge::port::netdev::hw_addr(&spec.name) {
            if mac.is_valid_source() {
                return mac;
            }
        }
    }
    named_mac(bridge, &spec.label())
}

/// A locally administered address from the bridge's and a port's names:
/// FNV-1a over them, stable, and different per port.
fn named_mac(bridge: &str, port: &str) -> MacAddr {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bridge.bytes().chain([0]).chain(port.bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    let b = hash.to_be_bytes();
    MacAddr([0x02, b[1], b[2], b[3], b[4], b[5]])
}
