//! Multicast snooping on the owner thread: the bridge crate's I/O-free
//! snooping (`bridge::mcast::Snooping`) fed with the IGMP and MLD messages
//! the workers hand over, the ports' links and its own timers; what it
//! decides goes to the group table the workers read (under the bridge's
//! lock strategy) and, for its queries, out through a worker's queue.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bridge::mcast::{Action, Family, Groups, PortGroups, RouterMode, SnoopConfig, Snooping};
use bridge::port::LinkQueue;
use bridge::wire::MacAddr;
use bridge::worker::PortControl;
use bridge::PortId;

use crate::ports::PortSpec;
use crate::protocol;

/// Snooping, the table it publishes to, and what it knows of the ports.
pub struct Snooper {
    snooping: Snooping,
    table: Arc<dyn Groups>,
    /// Per port: whether its link is up (and no guard disabled it), as
    /// last told; a port down loses its groups.
    up: BTreeMap<PortId, bool>,
    /// Per port: whether spanning tree lets it forward; a blocked port
    /// keeps its groups (as Linux's) but is sent no query.
    forwarding: BTreeMap<PortId, bool>,
    /// The router ports and queriers last published, for a table that
    /// takes over (after a lock switch).
    published: BTreeMap<(u8, Family), Action>,
    /// Whether snooping's turning itself off was logged.
    warned_off: bool,
}

/// Linux's `mcast_router` value as snooping's mode.
fn router_mode(value: u8) -> RouterMode {
    match value {
        0 => RouterMode::Disabled,
        2 => RouterMode::Permanent,
        _ => RouterMode::Learned,
    }
}

impl Snooper {
    /// Snooping with `config`, its queries from `mac`, publishing to
    /// `table`.
    pub fn new(config: SnoopConfig, mac: MacAddr, table: Arc<dyn Groups>) -> Snooper {
        log::info!(
            "multicast snooping{}: query interval {:?}, response {:?}, membership {:?}, \
             last member {} x {:?}",
            if config.querier { " with querier" } else { "" },
            config.query_interval,
            config.query_response_interval,
            config.membership_interval,
            config.last_member_count,
            config.last_member_interval
        );
        Snooper {
            snooping: Snooping::new(config, mac, Instant::now()),
            table,
            up: BTreeMap::new(),
            forwarding: BTreeMap::new(),
            published: BTreeMap::new(),
            warned_off: false,
        }
    }

    /// Adds `port`, down until told.
    pub fn add(&mut self, port: PortId, spec: &PortSpec) {
        let options = &spec.options;
        self.snooping.add_port(
            port,
            router_mode(options.mcast_router),
            options.mcast_fast_leave,
            Instant::now(),
        );
        self.snooping
            .set_port_max_groups(port, options.mcast_max_groups);
        self.snooping.set_port_up(port, false, Instant::now());
        self.up.insert(port, false);
    }

    /// Removes `port`.
    pub fn remove(&mut self, port: PortId) {
        self.snooping.remove_port(port);
        self.up.remove(&port);
        self.forwarding.remove(&port);
    }

    /// Tells it whether `port`'s link is up and whether spanning tree
    /// lets it forward.
    pub fn set_up(&mut self, port: PortId, up: bool, forwarding: bool) {
        if self.up.contains_key(&port) {
            self.forwarding.insert(port, forwarding);
        }
        if let Some(known) = self.up.get_mut(&port) {
            if *known != up {
                *known = up;
                self.snooping.set_port_up(port, up, Instant::now());
            }
        }
    }

    /// An IGMP or MLD message the workers handed over.
    pub fn receive(&mut self, port: PortId, vlan: u16, frame: &[u8]) {
        if self.up.contains_key(&port) {
            self.snooping.receive(port, vlan, frame, Instant::now());
        }
    }

    /// Fires the timers that are due.
    pub fn tick(&mut self) {
        self.snooping.tick(Instant::now());
    }

    /// When snooping next has a timer to fire.
    pub fn deadline(&self) -> Option<Instant> {
        self.snooping.next_deadline()
    }

    /// Carries out what snooping decided: the table's groups, router ports
    /// and queriers; queries out of the ports that forward, through the
    /// first worker's queue.
    pub fn apply(&mut self, controls: &[PortControl<LinkQueue>], label: impl Fn(PortId) -> String) {
        for action in self.snooping.take_actions() {
            match &action {
                Action::Send { port, frame } => {
                    let Some(control) = controls.first() else {
                        continue;
                    };
                    let ports: Vec<PortId> = match port {
                        Some(port) => vec![*port],
                        None => self
                            .up
                            .iter()
                            .filter(|(_, up)| **up)
                            .map(|(port, _)| *port)
                            .collect(),
                    };
                    for port in ports {
                        let sendable = self.up.get(&port) == Some(&true)
                            && self.forwarding.get(&port) != Some(&false);
                        if !sendable {
                            continue;
                        }
                        if let Err(error) = control.send_frame(port, frame.clone()) {
                            log::debug!("{}: cannot send a query: {error}", label(port));
                        }
                    }
                }
                Action::Routers { family, .. } => {
                    self.published.insert((0, *family), action.clone());
                    self.table.apply(&action);
                }
                Action::Querier { family, present } => {
                    log::info!(
                        "multicast snooping: {} querier {}",
                        family_name(*family),
                        if *present { "present" } else { "absent" }
                    );
                    self.published.insert((1, *family), action.clone());
                    self.table.apply(&action);
                }
                Action::Group { .. } => self.table.apply(&action),
            }
        }
        if !self.snooping.enabled() && !self.warned_off {
            self.warned_off = true;
            self.table.set_enabled(false);
            log::warn!(
                "multicast snooping: more groups than --mcast-hash-max; snooping is off, \
                 multicast floods"
            );
        }
    }

    /// Moves publishing to `table` (of another lock strategy), giving it
    /// every group, router port and querier.
    pub fn replace_table(&mut self, table: Arc<dyn Groups>) {
        for (key, ports) in self.table.records() {
            table.apply(&Action::Group { key, ports });
        }
        for action in self.published.values() {
            table.apply(action);
        }
        table.set_enabled(self.snooping.enabled());
        self.table = table;
    }

    /// `port`'s groups against its `mcast_max_groups`, for `stats` and
    /// `port show`.
    pub fn port_groups(&self, port: PortId) -> Option<PortGroups> {
        self.snooping.port_groups(port)
    }

    /// Its figures, for `stats`.
    pub fn stats(&self) -> protocol::McastStats {
        protocol::McastStats {
            enabled: self.snooping.enabled(),
            // Counted, not listed: `stats` comes often, groups are many.
            groups: self.snooping.group_count(),
            messages: self.snooping.stats(),
        }
    }

    /// `mdb show`.
    pub fn show(&self, label: impl Fn(PortId) -> String) -> protocol::Mdb {
        let now = Instant::now();
        let groups = self
            .snooping
            .groups(now)
            .into_iter()
            .map(|record| protocol::MdbGroup {
                port: label(record.port),
                grp: record.key.group.to_string(),
                vid: record.key.vlan,
                state: "temp".to_owned(),
                timer: round(record.expires_in.as_secs_f64()),
            })
            .collect();
        let routers = self
            .snooping
            .routers(now)
            .into_iter()
            .map(|record| protocol::MdbRouter {
                port: label(record.port),
                family: family_name(record.family).to_owned(),
                kind: if record.permanent {
                    "permanent"
                } else {
                    "temp"
                }
                .to_owned(),
                timer: record.expires_in.map(|t| round(t.as_secs_f64())),
            })
            .collect();
        let querier = |family| {
            let status = self.snooping.querier(family, now);
            protocol::MdbQuerier {
                present: status.present,
                own: status.own,
                address: status.address.map(|a| a.to_string()),
                port: status.port.map(&label),
                timer: status.expires_in.map(|t| round(t.as_secs_f64())),
            }
        };
        let ports = self
            .up
            .keys()
            .filter_map(|&port| {
                let groups = self.snooping.port_groups(port)?;
                Some(protocol::MdbPort {
                    port: label(port),
                    mcast_n_groups: groups.n_groups,
                    mcast_max_groups: groups.max_groups,
                    mcast_max_groups_refused: groups.refused,
                })
            })
            .collect();
        protocol::Mdb {
            enabled: self.snooping.enabled(),
            groups,
            routers,
            querier: protocol::MdbQueriers {
                ipv4: querier(Family::V4),
                ipv6: querier(Family::V6),
            },
            ports,
        }
    }
}

/// "ipv4" or "ipv6".
fn family_name(family: Family) -> &'static str {
    match family {
        Family::V4 => "ipv4",
        Family::V6 => "ipv6",
    }
}

/// Seconds to hundredths, as `bridge -s mdb show` prints timers.
fn round(secs: f64) -> f64 {
    (secs * 100.0).round() / 100.0
}
