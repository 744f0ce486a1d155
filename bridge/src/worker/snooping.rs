//! Multicast snooping on the worker: the IGMP and MLD messages the
//! pipeline found (`forward/snooping.rs`) handed to the control plane,
//! which keeps the group table the pipeline reads.

use std::time::{Duration, Instant};

use locks::Strategy;

use crate::port::Queue;
use crate::port_id::PortId;
use crate::wire::VlanId;

use super::policy::PortEvent;
use super::Worker;

/// The most IGMP and MLD messages per port and second a worker hands to
/// the control plane: a host sends a report per group and query, so more
/// are a flood, forwarded but not looked at.
pub const MCAST_EVENTS_PER_SECOND: u32 = 1024;

impl<S: Strategy, P: Queue> Worker<S, P> {
    /// Hands the IGMP and MLD messages at `handed` (frame index, VLAN) to
    /// the control plane, within [`MCAST_EVENTS_PER_SECOND`].
    pub(super) fn hand_over(&mut self, ingress: usize, handed: &[(usize, VlanId)]) {
        let Some(events) = &self.events else { return };
        let slot = &mut self.slots[ingress];
        let now = Instant::now();
        let (count, since) = &mut slot.mcast_events;
        if since.is_none_or(|at| now >= at + Duration::from_secs(1)) {
            *since = Some(now);
            *count = 0;
        }
        for &(index, vlan) in handed {
            if *count >= MCAST_EVENTS_PER_SECOND {
                return;
            }
            *count += 1;
            events(PortEvent::Mcast {
                port: PortId(ingress as u16),
                vlan,
                frame: self.batch.eth(index).to_vec(),
            });
        }
    }
}
