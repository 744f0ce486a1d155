//! Multicast snooping's part in the owner: which ports are up, its timers,
//! `mdb show`.

use std::time::Instant;

use bridge::PortId;

use crate::api_error::ApiError;
use crate::mcast::Snooper;
use crate::protocol;

use super::BridgeState;

impl BridgeState {
    /// Tells multicast snooping which ports are up (link up, not disabled
    /// by a guard) and which spanning tree lets forward, and carries out
    /// what it decides.
    pub(super) fn refresh_mcast(&mut self) {
        if self.mcast.is_none() {
            return;
        }
        let links = self.port_links();
        if let Some(mcast) = &mut self.mcast {
            for (id, up) in links {
                let forwarding = self.stp.as_ref().is_none_or(|stp| stp.forwarding(id));
                mcast.set_up(id, up, forwarding);
            }
        }
        self.apply_mcast();
    }

    /// Carries out what multicast snooping decided.
    pub(super) fn apply_mcast(&mut self) {
        let Some(mcast) = &mut self.mcast else { return };
        let ports = &self.ports;
        let label = |id: PortId| match ports.get(id.index()) {
            Some(Some(spec)) => spec.label(),
            _ => format!("#{}", id.0),
        };
        mcast.apply(&self.controls, label);
    }

    /// Fires multicast snooping's timers that are due.
    pub fn mcast_tick(&mut self) {
        if let Some(mcast) = &mut self.mcast {
            mcast.tick();
        }
        self.apply_mcast();
    }

    /// When multicast snooping next has a timer to fire.
    pub fn mcast_deadline(&self) -> Option<Instant> {
        self.mcast.as_ref().and_then(Snooper::deadline)
    }

    /// `mdb show`.
    pub(super) fn mdb_show(&self) -> Result<protocol::Mdb, ApiError> {
        let Some(mcast) = &self.mcast else {
            return Err(ApiError::SnoopingOff);
        };
        Ok(mcast.show(|id| self.label(id)))
    }
}
