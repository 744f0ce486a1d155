//! `fdb add`, `fdb del` and the static entries, with a VXLAN port's VTEPs.

use bridge::fdb::{FdbKey, Location, Vtep};
use bridge::vlan::FdbVlan;
use bridge::wire::StationMac;
use bridge::PortId;

use crate::api_error::ApiError;
use crate::config::StaticEntry;
use crate::ports::{self};
use crate::protocol;

use super::BridgeState;

impl BridgeState {
    /// Adds the static entries of the configuration file.
    pub fn add_statics(&mut self, statics: &[StaticEntry]) -> Result<(), ApiError> {
        for entry in statics {
            let port = self.port(&entry.port)?;
            self.fdb
                .add_static(FdbKey::new(entry.vlan.get(), entry.mac.get()), port, None);
        }
        Ok(())
    }

    pub(super) fn fdb_add(
        &mut self,
        mac: StationMac,
        port: &str,
        vlan: FdbVlan,
        dst: Option<&str>,
    ) -> Result<protocol::FdbAdded, ApiError> {
        let key = FdbKey::new(vlan.get(), mac.get());
        let port = self.port(port)?;
        if let Some(local) = self.local_port(&key) {
            return Err(ApiError::LocalEntry {
                mac,
                port: self.label(local),
            });
        }
        let label = self.label(port);
        let vtep = match (dst, self.vxlans.get(&label)) {
            (Some(dst), Some(vxlan)) => {
                let ip: std::net::IpAddr = dst.parse().map_err(|_| ApiError::DstInvalid {
                    dst: dst.to_owned(),
                })?;
                if ip.is_unspecified() {
                    return Err(ApiError::DstUnspecified { ip });
                }
                ports::unscoped_unicast(ip, "dst").map_err(ApiError::DstRefused)?;
                if ip.is_ipv4() != vxlan.config.local.is_ipv4() {
                    return Err(ApiError::DstFamily { ip, port: label });
                }
                let vtep = vxlan
                    .vteps
                    .handle(ip)
                    .ok_or_else(|| ApiError::TooManyVteps {
                        port: label.clone(),
                        most: bridge::port::vxlan::vteps::MAX_VTEPS,
                    })?;
                Some(vtep)
            }
            (Some(_), None) => return Err(ApiError::DstNotVxlan { port: label }),
            (None, _) => None,
        };
        let replaced_learned = self.fdb.add_static(key, port, vtep);
        self.sync_static_vteps();
        Ok(protocol::FdbAdded { replaced_learned })
    }

    pub(super) fn fdb_del(
        &mut self,
        mac: StationMac,
        vlan: FdbVlan,
    ) -> Result<protocol::FdbRemoved, ApiError> {
        let key = FdbKey::new(vlan.get(), mac.get());
        if let Some(local) = self.local_port(&key) {
            return Err(ApiError::LocalEntryStays {
                mac,
                port: self.label(local),
            });
        }
        if self.fdb.remove_static(key) || self.fdb.forget(key) {
            self.sync_static_vteps();
            Ok(protocol::FdbRemoved { removed: true })
        } else {
            Err(ApiError::NoSuchEntry { mac, vlan })
        }
    }

    /// The static entries (not local ones) on port `label`, with a VXLAN
    /// port's VTEP for each where one is set.
    pub(super) fn statics_of(&self, label: &str) -> Vec<(FdbKey, Option<std::net::IpAddr>)> {
        let Ok(port) = self.port(label) else {
            return Vec::new();
        };
        self.fdb
            .records()
            .into_iter()
            .filter(|r| r.port == port && r.is_static && !r.is_local)
            .map(|r| (r.key, self.vtep_addr(label, r.vtep)))
            .collect()
    }

    /// Tells each VXLAN port the VTEPs of its static entries, which a port
    /// that does not learn hears beside its listed remotes.
    pub(super) fn sync_static_vteps(&self) {
        if self.vxlans.is_empty() {
            return;
        }
        let records = self.fdb.records();
        for (label, shared) in &self.vxlans {
            let Ok(port) = self.port(label) else {
                continue;
            };
            let addrs = shared.vteps.addrs();
            let vteps = records
                .iter()
                .filter(|r| r.port == port && r.is_static)
                .filter_map(|r| bridge::port::vxlan::vteps::addr_in(&addrs, r.vtep?))
                .collect();
            shared.set_static_vteps(vteps);
        }
    }

    /// The address of VTEP `vtep` of VXLAN port `label`.
    pub(super) fn vtep_addr(&self, label: &str, vtep: Option<Vtep>) -> Option<std::net::IpAddr> {
        self.vxlans.get(label)?.vteps.addr(vtep?)
    }

    /// The port whose own address `key` is, if it is a local entry.
    pub(super) fn local_port(&self, key: &FdbKey) -> Option<PortId> {
        [key.vlan, 0].into_iter().find_map(|vlan| {
            match self.fdb.locate(&FdbKey::new(vlan, key.mac)) {
                Some(Location::Local(port)) => Some(port),
                _ => None,
            }
        })
    }
}
