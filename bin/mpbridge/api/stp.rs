//! Spanning tree's part in the owner: telling it of links, carrying out
//! what it decides.

use bridge::PortId;

use super::BridgeState;

impl BridgeState {
    /// Tells spanning tree of every port's link (a port its guard
    /// disabled counts as down), and carries out what it decides.
    pub(super) fn refresh_stp(&mut self) {
        if self.stp.is_none() {
            return;
        }
        let links = self.port_links();
        if let Some(stp) = &mut self.stp {
            for (id, up) in links {
                stp.link(id, up);
            }
        }
        self.apply_stp();
    }

    /// Carries out what spanning tree decided.
    pub(super) fn apply_stp(&mut self) {
        let Some(stp) = &mut self.stp else { return };
        let ports = &self.ports;
        let label = |id: PortId| match ports.get(id.index()) {
            Some(Some(spec)) => spec.label(),
            _ => format!("#{}", id.0),
        };
        stp.apply(&self.controls, &*self.fdb, label);
    }
}
