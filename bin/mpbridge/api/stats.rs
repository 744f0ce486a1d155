//! `stats`, `port show`, and what the owner publishes of them.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bridge::counters::{self, PortCounters};

use bridge::PortId;

use crate::mcast::Snooper;
use crate::ports::PortKind;
use crate::protocol::{self};

use super::{BridgeState, Published};

impl BridgeState {
    /// What the owner publishes (see [`Board`]).
    pub fn published(&self) -> Published {
        Published {
            stats: self.stats(),
            ports: self.port_list(),
            mdb: self.mdb_show(),
            fdb: self.fdb_view(),
        }
    }

    pub(super) fn port_states(&self) -> Vec<counters::PortState> {
        let sets: Vec<&[PortCounters]> = self.counters.iter().map(|set| &set[..]).collect();
        counters::states(sets.iter().copied())
    }

    pub(super) fn port_list(&self) -> Vec<protocol::PortInfo> {
        let states = self.port_states();
        self.live_ports()
            .into_iter()
            .map(|(id, spec)| {
                let state = states.get(id.index()).copied().unwrap_or_default();
                let groups = self.mcast.as_ref().and_then(|m| m.port_groups(id));
                protocol::PortInfo {
                    id: id.index(),
                    name: spec.label(),
                    kind: spec.kind.name().to_owned(),
                    options: spec.describe(),
                    link: self.link(id, &spec, state),
                    stp: self.port_stp(id),
                    flags: spec.options.flag_map(),
                    max_learned: spec.options.max_learned,
                    owner: self.owners.get(&id).cloned(),
                    learned: self.fdb.port_learned(id),
                    mcast_n_groups: groups.map(|g| g.n_groups),
                    mcast_max_groups: groups.map(|g| g.max_groups),
                    mcast_max_groups_refused: groups.map(|g| g.refused),
                }
            })
            .collect()
    }

    /// A port's spanning tree figures and guard, where it has either.
    pub(super) fn port_stp(&self, id: PortId) -> Option<protocol::PortStp> {
        let mut stp = self.stp.as_ref().and_then(|stp| stp.port(id));
        if let Some(&(tripped, trips)) = self.guards.get(&id) {
            let stp = stp.get_or_insert(protocol::PortStp {
                role: None,
                state: None,
                guard_tripped: None,
                guard_trips: None,
                rstp: None,
                bpdus: None,
                flushes: None,
            });
            stp.guard_tripped = Some(tripped);
            stp.guard_trips = Some(trips);
        }
        stp
    }

    /// The bridge's counters, as `stats` returns them.
    pub fn stats(&self) -> protocol::Stats {
        let sets: Vec<&[PortCounters]> = self.counters.iter().map(|set| &set[..]).collect();
        let totals = counters::sum(sets.iter().copied());
        let states = self.port_states();
        // Per VXLAN port, its stations that have a VTEP.
        let records = match self.vxlans.is_empty() {
            true => Vec::new(),
            false => self.fdb.records(),
        };
        let remotes = |port: PortId| {
            records
                .iter()
                .filter(|r| r.port == port && r.vtep.is_some())
                .count() as u64
        };
        let ports = self
            .live_ports()
            .into_iter()
            .map(|(id, spec)| {
                let index = id.index();
                let stats = totals.get(index).copied().unwrap_or_default();
                let state = states.get(index).copied().unwrap_or_default();
                let groups = self.mcast.as_ref().and_then(|m| m.port_groups(id));
                protocol::PortStats {
                    name: spec.label(),
                    vlans: self
                        .worker_config
                        .vlan_filtering
                        .then(|| spec.vlans().to_string()),
                    vxlan: self.vxlans.get(&spec.label()).map(|shared| {
                        let mut counters: BTreeMap<String, u64> = shared
                            .counters
                            .named()
                            .into_iter()
                            .map(|(name, n)| (name.to_owned(), n))
                            .collect();
                        counters.insert("remotes_refused".to_owned(), stats.refused);
                        counters.insert("remotes".to_owned(), remotes(id));
                        counters.insert(
                            "vteps_refused".to_owned(),
                            shared.vteps.refused.load(Ordering::Relaxed),
                        );
                        counters
                    }),
                    vhost: self.vhosts.get(&spec.label()).map(|device| {
                        device
                            .counters
                            .named()
                            .into_iter()
                            .map(|(name, n)| (name.to_owned(), n))
                            .collect()
                    }),
                    evpn: self
                        .evpn_figures(&spec.label())
                        .map(|f| protocol::PortEvpn {
                            local_macs: f.local_macs,
                            remote_macs: f.remote_macs,
                            vteps: f.vteps.iter().map(ToString::to_string).collect(),
                        }),
                    link: self.link(id, &spec, state),
                    state: state.into(),
                    stp: self.port_stp(id),
                    flags: {
                        let mut flags = spec.options.flag_map();
                        if matches!(&spec.kind, PortKind::Vxlan(c) if c.evpn) {
                            // As the workers have it (`BridgeState::setup`).
                            flags.insert("learning".to_owned(), false);
                        }
                        flags
                    },
                    max_learned: spec.options.max_learned,
                    owner: self.owners.get(&id).cloned(),
                    learned: self.fdb.port_learned(id),
                    mcast_n_groups: groups.map(|g| g.n_groups),
                    mcast_max_groups: groups.map(|g| g.max_groups),
                    mcast_max_groups_refused: groups.map(|g| g.refused),
                    counters: stats,
                }
            })
            .collect();
        let uptime = self.started.elapsed();
        let now = Instant::now();
        let mut lockstat = protocol::LockStats {
            enabled: self.lockstat,
            acquisitions: 0,
            contended: 0,
            wait_ns: 0,
        };
        let workers = self
            .workers
            .iter()
            .zip(&self.counters)
            .enumerate()
            .map(|(id, (worker, set))| {
                let own = worker.snapshot();
                lockstat.acquisitions += own.lock_acquisitions;
                lockstat.contended += own.lock_contended;
                lockstat.wait_ns += own.lock_wait_ns;
                let frames = set.iter().map(|port| port.snapshot().rx_frames).sum();
                let lifetime = uptime.as_nanos().max(1) as f64;
                let busy = (own.busy_ns as f64 / lifetime).clamp(0.0, 1.0);
                let health = self.watchdog.health(id, now);
                protocol::WorkerStats {
                    id,
                    frames,
                    batches: own.batches,
                    busy_percent: (busy * 1000.0).round() / 10.0,
                    busy_ns: own.busy_ns,
                    stuck: health.is_some_and(|h| h.stuck),
                    heartbeat_age_s: health
                        .map_or(0.0, |h| (h.silent.as_secs_f64() * 10.0).round() / 10.0),
                    stalls: health.map_or(0, |h| h.stalls),
                }
            })
            .collect();
        let fdb = &self.fdb;
        let records = fdb.records();
        let local = records.iter().filter(|r| r.is_local).count() as u64;
        let configured = records.iter().filter(|r| r.is_static).count() as u64;
        let totals = fdb.stats();
        let config = fdb.config();
        protocol::Stats {
            name: self.name.clone(),
            lock: fdb.kind().name().to_owned(),
            uptime_s: uptime.as_secs(),
            ports,
            workers,
            fdb: protocol::FdbStats {
                entries: records.len() as u64,
                learned: fdb.learned_len() as u64,
                r#static: configured - local,
                local,
                max_entries: config.max_entries as u64,
                age_s: config.age_secs,
                totals,
            },
            lockstat,
            lock_set_failed: self.lock_set_failed,
            stp: self.stp.as_ref().map(|stp| stp.bridge(|id| self.label(id))),
            mcast: self.mcast.as_ref().map(Snooper::stats),
            owner_queue: self.queue.stats(),
        }
    }
}
