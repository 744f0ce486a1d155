//! EVPN ports (`crate::evpn`) as the owner keeps them: a mirror made with
//! a port added, removed with a port removed, and every mirror reconciled
//! once a tick.

use std::sync::Arc;

use bridge::port::vxlan::VxlanShared;
use bridge::PortId;

use super::ports::with_port_caps;
use super::BridgeState;
use crate::evpn::EvpnFigures;
use crate::ports::{PortKind, PortSpec};

/// The VLAN an EVPN port's stations are in: 0 on a VLAN-unaware bridge,
/// its untagged VLAN with VLAN filtering.
pub fn evpn_vlan(spec: &PortSpec, vlan_filtering: bool) -> Result<u16, String> {
    if !vlan_filtering {
        return Ok(0);
    }
    spec.vlans().pvid().ok_or_else(|| {
        format!(
            "port {}: an EVPN port carries one VLAN, untagged: give it access= (or native=)",
            spec.label()
        )
    })
}

impl BridgeState {
    /// Makes the mirror of `spec` when it is an EVPN port (`port`, its
    /// queues' `shared`).
    pub(super) fn add_evpn(
        &mut self,
        spec: &PortSpec,
        port: PortId,
        shared: &Arc<VxlanShared>,
    ) -> Result<(), String> {
        if !matches!(&spec.kind, PortKind::Vxlan(config) if config.evpn) {
            return Ok(());
        }
        let vlan = evpn_vlan(spec, self.worker_config.vlan_filtering)?;
        let evpn = self
            .evpn
            .as_mut()
            .ok_or("EVPN ports need rtnetlink, which this bridge could not open")?;
        with_port_caps(self.keep_caps, || {
            evpn.add(&spec.label(), &spec.name, port, vlan, Arc::clone(shared))
        })
    }

    /// Removes the mirror of port `label`, if it has one.
    pub(super) fn remove_evpn(&mut self, label: &str) {
        if let Some(evpn) = &mut self.evpn {
            let fdb = &*self.fdb;
            with_port_caps(self.keep_caps, || evpn.remove(label, fdb));
        }
    }

    /// Brings every mirror and the table in step.
    pub(super) fn reconcile_evpn(&mut self) {
        if let Some(evpn) = &mut self.evpn {
            if !evpn.is_empty() {
                let fdb = &*self.fdb;
                with_port_caps(self.keep_caps, || evpn.reconcile(fdb));
            }
        }
    }

    /// Port `label`'s EVPN figures, if it is an EVPN port.
    pub(super) fn evpn_figures(&self, label: &str) -> Option<EvpnFigures> {
        self.evpn.as_ref()?.figures(label)
    }
}
