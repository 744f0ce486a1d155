//! Ports added, removed and enabled while the bridge runs, and each
//! port's worker setup and learning limit.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bridge::fdb::FdbKey;
use bridge::port::LinkQueue;
use bridge::worker::PortSetup;
use bridge::PortId;
use bridge::MAX_PORTS;

use crate::api_error::ApiError;
use crate::ports::{self, PortKind, PortSpec};
use crate::protocol;
use crate::stp::SpanningTree;
use crate::watchdog::name_workers;

use super::health::await_answers;
use super::BridgeState;

/// How long the workers together may take to apply a port change.
pub(super) const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// The ports of `ports` (by id, `None` where removed) that are there.
pub(super) fn live_ports_of(ports: &[Option<PortSpec>]) -> Vec<(PortId, PortSpec)> {
    ports
        .iter()
        .enumerate()
        .filter_map(|(id, spec)| Some((PortId(id as u16), spec.clone()?)))
        .collect()
}

/// Port `id` as `--port` gives it, or `#id` for one since removed.
pub(super) fn port_label(ports: &[Option<PortSpec>], id: PortId) -> String {
    match ports.get(id.index()) {
        Some(Some(spec)) => spec.label(),
        _ => format!("#{}", id.0),
    }
}

/// The port named `name`: its `--port` form or its interface name.
pub(super) fn find_port(ports: &[Option<PortSpec>], name: &str) -> Result<PortId, ApiError> {
    let live = live_ports_of(ports);
    let by_label = live.iter().find(|(_, spec)| spec.label() == name);
    let by_interface = || {
        let mut matches = live.iter().filter(|(_, spec)| spec.name == name);
        match (matches.next(), matches.next()) {
            (Some(found), None) => Some(found),
            _ => None,
        }
    };
    by_label
        .or_else(by_interface)
        .map(|(id, _)| *id)
        .ok_or_else(|| ApiError::NoSuchPort {
            name: name.to_owned(),
            ports: live.iter().map(|(_, spec)| spec.label()).collect(),
        })
}

/// Runs `f` with CAP_NET_ADMIN and CAP_NET_RAW in this thread's effective
/// set (they stay in its permitted set when the rest are dropped), and
/// drops them again after.
pub(super) fn with_port_caps<T>(keep_caps: bool, f: impl FnOnce() -> T) -> T {
    use caps::{CapSet, Capability};
    if keep_caps {
        return f();
    }
    for cap in [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW] {
        // Without the capability the open fails with a clear error.
        let _ = caps::raise(None, CapSet::Effective, cap);
    }
    let result = f();
    if let Err(error) = caps::clear(None, CapSet::Effective) {
        log::warn!("cannot drop the capabilities raised to open a port: {error}");
    }
    result
}

impl BridgeState {
    /// The worker setup of a port: its VLANs, BPDU and storm options, and
    /// what spanning tree lets through it at first.
    pub fn setup(spec: &PortSpec, workers: usize, stp: bool) -> PortSetup {
        let mut policy = spec.options.policy(workers);
        if matches!(&spec.kind, PortKind::Vxlan(config) if config.evpn) {
            // FRR gives an EVPN port its stations: none is learned from
            // its frames (Linux's `learning off` on the port).
            policy.flags.learning = false;
        }
        PortSetup {
            vlans: spec.vlans(),
            policy,
            gate: match stp {
                true => SpanningTree::first_gate(spec),
                false => bridge::worker::Gate::OPEN,
            },
            disabled: false,
        }
    }

    /// Gives the table every port's `max_learned`.
    pub(super) fn apply_port_limits(&self) {
        for (id, spec) in self.live_ports() {
            self.fdb
                .set_port_limit(id, spec.options.max_learned.unwrap_or(0));
        }
    }

    /// Takes port `port` back from the first `count` workers after an
    /// addition that failed (`what`), waiting for all but those in
    /// `silent`: those apply the removal after the addition, once they run
    /// again.
    pub(super) fn take_back(&self, what: &str, port: PortId, count: usize, silent: &[usize]) {
        let undone = self.controls[..count]
            .iter()
            .enumerate()
            .filter(|(worker, _)| !silent.contains(worker))
            .filter_map(|(worker, control)| Some((worker, control.remove(port).ok()?)))
            .collect::<Vec<_>>();
        for worker in silent {
            // The answer comes when nobody waits any more.
            let _ = self.controls[*worker].remove(port);
        }
        let late = await_answers(undone, CHANGE_TIMEOUT);
        if !late.is_empty() {
            log::warn!(
                "{what}: {} did not give the port back within {} s either",
                name_workers(&late),
                CHANGE_TIMEOUT.as_secs()
            );
        }
    }

    /// Adds a port while the bridge runs: opens one queue per worker, hands
    /// each worker its queue and waits until all use it. A port that cannot
    /// be handed to every worker is taken back from those that had it.
    pub(super) fn add_port(&mut self, spec: &PortSpec) -> Result<protocol::PortAdded, ApiError> {
        if self.relay {
            return Err(ApiError::RelayPortAdd);
        }
        if spec.vlans.is_some() && !self.worker_config.vlan_filtering {
            return Err(ApiError::VlanFilteringNeeded {
                port: spec.describe(),
            });
        }
        if self
            .ports
            .iter()
            .flatten()
            .any(|port| port.name == spec.name)
        {
            return Err(ApiError::PortExists {
                name: spec.name.clone(),
            });
        }
        let id = self
            .ports
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.ports.len());
        if id >= MAX_PORTS {
            return Err(ApiError::TooManyPorts);
        }
        let what = format!("port add {}", spec.label());
        self.check_responsive(&what)?;
        let queues = with_port_caps(self.keep_caps, || {
            ports::open_queues(spec, self.controls.len(), self.port_settings)
        })
        .map_err(ApiError::PortOpen)?;
        let shared = match queues.first() {
            Some(LinkQueue::Vxlan(port)) => Some(Arc::clone(port.shared())),
            _ => None,
        };
        let vhost = match queues.first() {
            Some(LinkQueue::Vhost(port)) => Some(Arc::clone(port.device())),
            _ => None,
        };
        let raised = matches!(queues.first(), Some(LinkQueue::Raw(port)) if port.raised_link());
        let port = PortId(id as u16);
        let mut answers = Vec::new();
        let setup = Self::setup(spec, self.controls.len(), self.stp.is_some());
        // Before any worker learns on it.
        self.fdb
            .set_port_limit(port, spec.options.max_learned.unwrap_or(0));
        for (control, queue) in self.controls.iter().zip(queues) {
            match control.add_with(port, queue, setup.clone()) {
                Ok(answer) => answers.push(answer),
                Err(error) => {
                    // Those that took the port give it back.
                    self.take_back(&what, port, answers.len(), &[]);
                    self.fdb.set_port_limit(port, 0);
                    return Err(ApiError::HandOver {
                        reason: error.to_string(),
                    });
                }
            }
        }
        let silent = await_answers(answers.into_iter().enumerate(), CHANGE_TIMEOUT);
        if !silent.is_empty() {
            // A worker that got stuck since it answered the ping: every
            // worker gives the port back (a stuck one once it runs again,
            // its removal queued behind the addition), and the bridge runs
            // on without it.
            self.take_back(&what, port, self.controls.len(), &silent);
            self.fdb.set_port_limit(port, 0);
            if raised {
                self.put_down(&spec.name);
            }
            let error = ApiError::PortNotTaken {
                what,
                workers: silent,
                within_s: CHANGE_TIMEOUT.as_secs(),
            };
            log::warn!("{error}");
            return Err(error);
        }
        if let Some(shared) = &shared {
            if let Err(error) = self.add_evpn(spec, port, shared) {
                self.take_back(&what, port, self.controls.len(), &[]);
                self.fdb.set_port_limit(port, 0);
                return Err(ApiError::PortOpen(error));
            }
        }
        if id == self.ports.len() {
            self.ports.push(Some(spec.clone()));
        } else {
            self.ports[id] = Some(spec.clone());
        }
        if let Some(shared) = shared {
            self.vxlans.insert(spec.label(), shared);
        }
        if let Some(device) = vhost {
            self.vhosts.insert(spec.label(), device);
        }
        if raised {
            self.raised.insert(spec.name.clone());
        }
        if spec.kind == PortKind::Raw {
            self.monitor.watch(port, &spec.name);
            let events = self.monitor.tick();
            self.take_links(events);
        }
        if spec.kind == PortKind::Tap {
            self.monitor.watch_tap(port, &spec.name);
        }
        if spec.options.guard {
            self.guards.insert(port, (false, 0));
        }
        self.apply_port_limits();
        if let Some(stp) = &mut self.stp {
            stp.add(port, spec, crate::stp::port_mac(&self.name, spec));
        }
        if let Some(mcast) = &mut self.mcast {
            mcast.add(port, spec);
        }
        self.links_changed();
        self.refresh_stp();
        self.refresh_mcast();
        log::info!("{}: added as port {id}", spec.label());
        Ok(protocol::PortAdded {
            port: spec.label(),
            id,
        })
    }

    /// Removes a port while the bridge runs, the last one too: every
    /// worker closes its queue between batches, and once all have, the
    /// port's entries go.
    pub(super) fn remove_port(&mut self, name: &str) -> Result<protocol::PortRemoved, ApiError> {
        if self.relay {
            return Err(ApiError::RelayPortRemove);
        }
        let port = self.port(name)?;
        let what = format!("port del {name}");
        self.check_responsive(&what)?;
        let answers = self
            .controls
            .iter()
            .map(|control| control.remove(port))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| ApiError::WorkersUnreachable {
                reason: e.to_string(),
            })?;
        // A worker that got stuck since it answered the ping closes its
        // queue when it runs again (the removal waits in its queue of
        // changes); the others have closed theirs, so the port leaves the
        // bridge either way.
        let silent = await_answers(answers.into_iter().enumerate(), CHANGE_TIMEOUT);
        let spec = self.ports[port.index()].take().expect("a live port");
        self.guards.remove(&port);
        self.owners.remove(&port);
        self.links_changed();
        if let Some(mcast) = &mut self.mcast {
            mcast.remove(port);
        }
        self.apply_mcast();
        if let Some(stp) = &mut self.stp {
            stp.remove(port);
        }
        self.apply_stp();
        if let Some(addr) = self.monitor.unwatch(port) {
            self.fdb.remove_static(FdbKey::new(0, addr));
        }
        // Its routes withdrawn with its mirror, before its entries go.
        self.remove_evpn(&spec.label());
        let flushed = self.fdb.purge_port(port);
        self.fdb.set_port_limit(port, 0);
        self.vxlans.remove(&spec.label());
        self.vhosts.remove(&spec.label());
        if spec.kind == PortKind::Raw && self.raised.remove(&spec.name) {
            self.put_down(&spec.name);
        }
        log::info!(
            "{}: removed (port {}), {flushed} entries flushed",
            spec.label(),
            port.0
        );
        if !silent.is_empty() {
            let error = ApiError::QueueNotClosed {
                what,
                workers: silent,
                within_s: CHANGE_TIMEOUT.as_secs(),
            };
            log::warn!("{error}");
            return Err(error);
        }
        Ok(protocol::PortRemoved {
            removed: spec.label(),
            flushed,
        })
    }

    /// A BPDU came in on a port with `guard=on`: nothing goes in or out of
    /// it until `port enable`. Logged once per trip.
    pub(super) fn trip_guard(&mut self, port: PortId) {
        let Some(guard) = self.guards.get_mut(&port) else {
            return;
        };
        if guard.0 {
            // Another worker's report of the same trip.
            return;
        }
        *guard = (true, guard.1 + 1);
        self.links_changed();
        for control in &self.controls {
            let _ = control.set_disabled(port, true);
        }
        let flushed = self.fdb.flush_port(port);
        let label = self.label(port);
        log::warn!(
            "{label}: BPDU guard: a BPDU came in; the port is disabled ({flushed} learned \
             stations flushed) until `mpbridge port enable {label}`"
        );
        self.refresh_stp();
        self.refresh_mcast();
    }

    /// `port enable`: a port its guard disabled forwards again.
    pub(super) fn enable_port(&mut self, name: &str) -> Result<protocol::PortEnabled, ApiError> {
        let port = self.port(name)?;
        let label = self.label(port);
        let was_disabled = match self.guards.get_mut(&port) {
            Some(guard) if guard.0 => {
                guard.0 = false;
                true
            }
            _ => false,
        };
        if was_disabled {
            self.links_changed();
            for control in &self.controls {
                control
                    .set_disabled(port, false)
                    .map_err(|e| ApiError::WorkersUnreachable {
                        reason: e.to_string(),
                    })?;
            }
            log::info!("{label}: enabled again");
            self.refresh_stp();
            self.refresh_mcast();
        }
        Ok(protocol::PortEnabled {
            enabled: label,
            was_disabled,
        })
    }
}
