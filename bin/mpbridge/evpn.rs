//! The bridge's EVPN ports (`vxlan:...,evpn=on`) and their kernel mirrors
//! (`bridge::evpn`): each port's mirror is made when the port is, removed
//! when it goes and when the bridge stops (what a crash left, when the
//! bridge starts again), and reconciled once a tick:
//!
//! - what zebra installed on the mirror's vxlan device becomes the port's:
//!   remote stations as `extern_learn` entries at their VTEP, the VTEPs of
//!   type-3 routes as its flood list;
//! - the stations the bridge learned in the port's VLAN on its other ports
//!   are written to the mirror as static entries, which zebra advertises;
//!   ageing, `fdb del`, flushes, port removal and a station moving onto
//!   the VXLAN port take them off again.
//!
//! A reconcile reads the kernel's fdb once (one dump) and compares: nothing
//! is lost to a dropped notification, and a zebra that starts late is
//! caught up at the next tick.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use bridge::evpn::fdb::{installed, static_station};
use bridge::evpn::{mirror, Installed, Mirror, MirrorConfig};
use bridge::fdb::{FdbKey, Table};
use bridge::port::vxlan::VxlanShared;
use bridge::rtnl::Rtnl;
use bridge::wire::MacAddr;
use bridge::PortId;

use crate::ports::{PortKind, PortSpec};

/// Ticks without a route from zebra before the bridge says so (once).
const QUIET_TICKS: u32 = 30;

/// One EVPN port and its mirror.
#[derive(Debug)]
struct EvpnPort {
    id: PortId,
    /// The VLAN its stations are in (0: VLAN-unaware).
    vlan: u16,
    mirror: Mirror,
    shared: Arc<VxlanShared>,
    /// Stations written to the mirror.
    advertised: BTreeSet<MacAddr>,
    /// Remote stations installed in the table, at their VTEP.
    remote: BTreeMap<MacAddr, IpAddr>,
    /// The VTEPs of the flood list zebra gave.
    vteps: Vec<IpAddr>,
    /// Ticks since the port was made while zebra gave nothing.
    quiet: u32,
}

/// The figures `stats` gives of an EVPN port.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EvpnFigures {
    /// Local stations advertised.
    pub local_macs: usize,
    /// Remote stations installed.
    pub remote_macs: usize,
    /// The flood list zebra gave.
    pub vteps: Vec<IpAddr>,
}

/// The bridge's EVPN ports.
#[derive(Debug)]
pub struct Evpn {
    bridge: String,
    /// Opened while the bridge is privileged: the kernel checks the
    /// opener's capabilities too (and the caller's, which raises
    /// CAP_NET_ADMIN around its requests).
    rtnl: Rtnl,
    ports: BTreeMap<String, EvpnPort>,
}

/// Refuses EVPN ports that cannot be: two of one VNI, or a VNI another
/// device in the namespace carries (not a mirror this bridge left, which
/// goes when it starts).
pub fn check(specs: &[PortSpec], bridge: &str) -> Result<(), String> {
    let vnis: Vec<(String, u32)> = specs
        .iter()
        .filter_map(|spec| match &spec.kind {
            PortKind::Vxlan(config) if config.evpn => Some((spec.label(), config.vni)),
            _ => None,
        })
        .collect();
    for (i, (label, vni)) in vnis.iter().enumerate() {
        if let Some((other, _)) = vnis[..i].iter().find(|(_, v)| v == vni) {
            return Err(format!(
                "ports {other} and {label} are both EVPN ports of VNI {vni}"
            ));
        }
    }
    if vnis.is_empty() {
        return Ok(());
    }
    let mut rtnl = Rtnl::open().map_err(|e| format!("rtnetlink: {e}"))?;
    for (label, vni) in &vnis {
        let carrier = mirror::vni_carrier(&mut rtnl, *vni, bridge)
            .map_err(|e| format!("listing interfaces: {e}"))?;
        if let Some(device) = carrier {
            return Err(format!(
                "port {label}: VNI {vni} is carried by {device} already (an EVPN port's \
                 mirror needs it in this namespace)"
            ));
        }
    }
    Ok(())
}

impl Evpn {
    /// No EVPN ports yet, for bridge `bridge` (`--name`).
    pub fn open(bridge: &str) -> Result<Evpn, String> {
        Ok(Evpn {
            bridge: bridge.to_owned(),
            rtnl: Rtnl::open().map_err(|e| format!("rtnetlink: {e}"))?,
            ports: BTreeMap::new(),
        })
    }

    /// Removes what an earlier run of this bridge left (it was killed).
    pub fn remove_stale(&mut self) -> Result<(), String> {
        let removed = mirror::remove_stale(&mut self.rtnl, &self.bridge)
            .map_err(|e| format!("removing the EVPN mirrors an earlier run left: {e}"))?;
        if !removed.is_empty() {
            log::warn!(
                "removed the EVPN mirror devices an earlier run left (it did not stop \
                 cleanly): {}",
                removed.join(" ")
            );
        }
        Ok(())
    }

    /// Makes the mirror of EVPN port `label` (interface `name`, port
    /// `id`; VNI, local address and mirror port from `shared`), whose
    /// stations are in `vlan` (0: VLAN-unaware).
    pub fn add(
        &mut self,
        label: &str,
        name: &str,
        id: PortId,
        vlan: u16,
        shared: Arc<VxlanShared>,
    ) -> Result<(), String> {
        let config = MirrorConfig {
            bridge: self.bridge.clone(),
            port: name.to_owned(),
            vni: shared.config.vni,
            local: shared.config.local.ip(),
            udp_port: shared.config.mirror_port,
        };
        let mirror = Mirror::make(&mut self.rtnl, &config)
            .map_err(|e| format!("cannot make the EVPN mirror of port {label}: {e}"))?;
        log::info!(
            "port {label}: EVPN mirror {} (vxlan {} on UDP {}, stations on {})",
            mirror.bridge.name,
            mirror.vxlan.name,
            config.udp_port,
            mirror.stations.name
        );
        self.ports.insert(
            label.to_owned(),
            EvpnPort {
                id,
                vlan,
                mirror,
                shared,
                advertised: BTreeSet::new(),
                remote: BTreeMap::new(),
                vteps: Vec::new(),
                quiet: 0,
            },
        );
        Ok(())
    }

    /// Removes port `label`'s mirror (its routes are withdrawn with it) and
    /// the remote stations it installed in `fdb`.
    pub fn remove(&mut self, label: &str, fdb: &dyn Table) {
        let Some(port) = self.ports.remove(label) else {
            return;
        };
        for mac in port.remote.keys() {
            fdb.uninstall(FdbKey::new(port.vlan, *mac));
        }
        if let Err(error) = port.mirror.remove(&mut self.rtnl) {
            log::warn!("port {label}: cannot remove its EVPN mirror: {error}");
        }
    }

    /// Whether the bridge has EVPN ports.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// The figures of port `label`, if it is an EVPN port.
    pub fn figures(&self, label: &str) -> Option<EvpnFigures> {
        self.ports.get(label).map(|port| EvpnFigures {
            local_macs: port.advertised.len(),
            remote_macs: port.remote.len(),
            vteps: port.vteps.clone(),
        })
    }

    /// Brings every mirror and the table in step (see the module's doc).
    pub fn reconcile(&mut self, fdb: &dyn Table) {
        if self.ports.is_empty() {
            return;
        }
        let dump = match self.rtnl.fdb() {
            Ok(dump) => dump,
            Err(error) => {
                log::warn!("EVPN: cannot read the kernel's fdb: {error}");
                return;
            }
        };
        let rtnl = &mut self.rtnl;
        for (label, port) in &mut self.ports {
            // What zebra installed, and what of ours the mirror holds.
            let mut remote = BTreeMap::new();
            let mut vteps = Vec::new();
            let mut written = BTreeSet::new();
            for entry in &dump {
                if entry.header.ifindex == port.mirror.vxlan.index {
                    match installed(entry) {
                        Some(Installed::Station { mac, vtep }) => {
                            remote.insert(mac, vtep);
                        }
                        Some(Installed::Flood { vtep }) => vteps.push(vtep),
                        None => {}
                    }
                } else if entry.header.ifindex == port.mirror.stations.index {
                    written.extend(static_station(entry));
                }
            }
            vteps.sort_unstable();
            vteps.dedup();

            // Remote stations into the table, first: a new route (one that
            // moved away from here) takes the learned entry over, and is
            // not advertised below. A route as it was at the last tick is
            // not installed again: where learning took its entry over since,
            // the station moved here (it is advertised below, with the next
            // sequence number, and zebra removes the route); where the
            // entry is gone (`fdb del`), it comes back.
            for (&mac, &vtep) in &remote {
                let key = FdbKey::new(port.vlan, mac);
                if port.remote.get(&mac) == Some(&vtep) && fdb.locate(&key).is_some() {
                    continue;
                }
                let handle = port.shared.vteps.handle(vtep);
                fdb.install(key, port.id, handle);
            }
            for mac in port.remote.keys() {
                if !remote.contains_key(mac) {
                    fdb.uninstall(FdbKey::new(port.vlan, *mac));
                }
            }
            if vteps != port.vteps {
                log::info!("port {label}: EVPN flood list {vteps:?}");
                port.shared.set_flood_vteps(&vteps);
            }
            if remote.is_empty() && vteps.is_empty() {
                port.quiet = port.quiet.saturating_add(1);
                if port.quiet == QUIET_TICKS {
                    log::warn!(
                        "port {label}: no EVPN routes from zebra in {QUIET_TICKS} s (is FRR \
                         running in this namespace, with advertise-all-vni?); forwarding \
                         to the listed remotes meanwhile"
                    );
                }
            }
            port.remote = remote;
            port.vteps = vteps;

            // Local stations: learned in the port's VLAN on another port.
            let local: BTreeSet<MacAddr> = fdb
                .records()
                .into_iter()
                .filter(|r| {
                    r.key.vlan == port.vlan && r.port != port.id && !r.is_local && !r.is_extern
                })
                .map(|r| r.key.mac)
                .collect();
            for mac in local.difference(&written) {
                if let Err(error) = rtnl.add_station(port.mirror.stations.index, *mac) {
                    log::warn!("port {label}: cannot advertise {mac}: {error}");
                }
            }
            for mac in written.difference(&local) {
                if let Err(error) = rtnl.del_station(port.mirror.stations.index, *mac) {
                    log::warn!("port {label}: cannot withdraw {mac}: {error}");
                }
            }
            port.advertised = local;
        }
    }
}

impl Drop for Evpn {
    /// The bridge stops (or did not start): every mirror goes, its routes
    /// withdrawn. CAP_NET_ADMIN is raised for it (it stays permitted when
    /// the rest are dropped); a bridge that cannot has it already or fails
    /// with a warning.
    fn drop(&mut self) {
        if self.ports.is_empty() {
            return;
        }
        let _ = caps::raise(
            None,
            caps::CapSet::Effective,
            caps::Capability::CAP_NET_ADMIN,
        );
        for (label, port) in &self.ports {
            if let Err(error) = port.mirror.remove(&mut self.rtnl) {
                log::warn!("port {label}: cannot remove its EVPN mirror: {error}");
            }
        }
    }
}
