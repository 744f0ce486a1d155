//! `reload` (and SIGHUP): the configuration file's ports and static
//! entries applied again.

use bridge::fdb::FdbKey;
use bridge::PortId;

use crate::api_error::ApiError;
use crate::config::StaticEntry;
use crate::ports::PortSpec;
use crate::protocol;

use super::BridgeState;

impl BridgeState {
    /// Reads the configuration file again and applies what changed in its
    /// ports and static entries; a file with an error changes nothing. A
    /// port whose options changed (VLANs, a VXLAN port's VTEPs) leaves and
    /// comes back with them, keeping the static entries that still fit it.
    pub fn reload(&mut self) -> Result<protocol::Reloaded, ApiError> {
        let Some((path, old)) = self.config.clone() else {
            return Err(ApiError::NoConfig);
        };
        let new = crate::config::load(&path).map_err(ApiError::ConfigLoad)?;
        if let Some(spec) = new.ports.iter().find(|s| s.vlans.is_some()) {
            if !self.worker_config.vlan_filtering {
                return Err(ApiError::ConfigVlanFilteringNeeded {
                    path,
                    port: spec.describe(),
                });
            }
        }
        let mut restart = Vec::new();
        let settings: [(&str, bool); 11] = [
            ("stp", new.stp != old.stp),
            ("mcast", new.mcast != old.mcast),
            ("move_limit", new.move_limit != old.move_limit),
            ("move_hold", new.move_hold != old.move_hold),
            ("group_fwd_mask", new.group_fwd_mask != old.group_fwd_mask),
            ("name", new.name != old.name),
            ("lock", new.lock != old.lock),
            ("workers", new.workers != old.workers),
            ("age", new.age != old.age),
            ("max_entries", new.max_entries != old.max_entries),
            ("vlan_filtering", new.vlan_filtering != old.vlan_filtering),
        ];
        for (setting, changed) in settings {
            if changed {
                restart.push(setting.to_owned());
            }
        }
        let live: Vec<PortSpec> = self.live_ports().into_iter().map(|(_, s)| s).collect();
        let mut reply = protocol::Reloaded {
            ports_added: Vec::new(),
            ports_removed: Vec::new(),
            ports_changed: Vec::new(),
            static_added: 0,
            static_removed: 0,
            needs_restart: restart,
        };
        let ports_change = new.ports.iter().any(|spec| !live.contains(spec))
            || live.iter().any(|spec| !new.ports.contains(spec));
        if ports_change {
            self.check_responsive("reload")?;
        }
        // Additions first, so that two ports stay throughout.
        for spec in new
            .ports
            .iter()
            .filter(|spec| !live.iter().any(|l| l.label() == spec.label()))
        {
            self.add_port(spec)?;
            reply.ports_added.push(spec.describe());
        }
        let changed: Vec<&PortSpec> = new
            .ports
            .iter()
            .filter(|spec| live.iter().any(|l| l.label() == spec.label() && l != *spec))
            .collect();
        let stale_statics: Vec<&StaticEntry> = old
            .statics
            .iter()
            .filter(|entry| !new.statics.contains(entry))
            .collect();
        for entry in &stale_statics {
            self.fdb
                .remove_static(FdbKey::new(entry.vlan.get(), entry.mac.get()));
        }
        reply.static_removed = stale_statics.len();
        for spec in live
            .iter()
            .filter(|l| !new.ports.iter().any(|s| s.label() == l.label()))
        {
            self.remove_port(&spec.label())?;
            reply.ports_removed.push(spec.label());
        }
        for spec in changed {
            let statics = self.statics_of(&spec.label());
            self.remove_port(&spec.label())?;
            let added = self.add_port(spec)?;
            let port = PortId(added.id as u16);
            let vlans = spec.vlans();
            for (key, dst) in statics {
                let fits = !self.worker_config.vlan_filtering || vlans.is_member(key.vlan);
                if !fits {
                    log::info!(
                        "{}: static entry {} vlan {} dropped: the port is no longer in that VLAN",
                        spec.label(),
                        key.mac,
                        key.vlan
                    );
                    continue;
                }
                // The VTEP's handle of the port as it is now.
                let vtep = dst.and_then(|ip| self.vxlans.get(&spec.label())?.vteps.handle(ip));
                self.fdb.add_static(key, port, vtep);
            }
            self.sync_static_vteps();
            reply.ports_changed.push(spec.describe());
        }
        let fresh: Vec<StaticEntry> = new
            .statics
            .iter()
            .filter(|entry| !old.statics.contains(entry))
            .cloned()
            .collect();
        self.add_statics(&fresh)?;
        reply.static_added = fresh.len();
        self.config = Some((path, new));
        Ok(reply)
    }
}
