//! Multicast snooping on the frame path: once a querier is present, a
//! flood of IP multicast goes only to its group's member ports and the
//! router ports (br_multicast_flood); IGMP and MLD messages are handed to
//! the control plane, which keeps the group table the workers read here.

use std::time::{Duration, Instant};

use locks::Strategy;

use crate::decision::{classify_in, Decision, DropReason};
use crate::mcast::{self, Family, Forward};
use crate::port::Queue;
use crate::port_id::PortId;
use crate::port_id::PortSet;

use super::policy::PortEvent;
use super::Worker;

/// The most IGMP and MLD messages per port and second a worker hands to
/// the control plane: a host sends a report per group and query, so more
/// are a flood, forwarded but not looked at.
pub const MCAST_EVENTS_PER_SECOND: u32 = 1024;

/// Whether `frame` goes to an Ethernet group that IP multicast uses
/// (01:00:5e for IPv4, 33:33 for IPv6): the one test every flood pays.
#[inline(always)]
fn is_ip_group(frame: &[u8]) -> bool {
    matches!(
        frame.get(..3),
        Some([0x01, 0x00, 0x5e]) | Some([0x33, 0x33, _])
    )
}

impl<S: Strategy, P: Queue> Worker<S, P> {
    /// Narrows the batch's multicast floods to their groups' ports, drops
    /// malformed IGMP and MLD messages, and hands the others over.
    pub(super) fn snoop(&mut self, ingress: usize) {
        // Borrowed, not cloned: an Arc's count is a line every worker
        // would write once a batch.
        let Worker {
            groups: Some(groups),
            batch,
            decisions,
            admitted,
            targets,
            ..
        } = self
        else {
            return;
        };
        targets.clear();
        if !groups.enabled() {
            // Snooping turned itself off: multicast floods, as without it.
            return;
        }
        let frame_of = |index: usize| {
            let buffer = batch.frame(index);
            &buffer[P::METADATA_LEN.min(buffer.len())..]
        };
        let floods_a_group = decisions
            .iter()
            .enumerate()
            .any(|(index, d)| *d == Decision::Flood && is_ip_group(frame_of(index)));
        if !floods_a_group {
            return;
        }
        let mut handed = Vec::new();
        groups.read(|reader| {
            for (index, decision) in decisions.iter_mut().enumerate() {
                let frame = frame_of(index);
                if *decision != Decision::Flood || !is_ip_group(frame) {
                    continue;
                }
                let vlan = match admitted.get(index).copied().flatten() {
                    Some(admitted) => admitted.vid,
                    None => classify_in(frame, None).map_or(0, |(dst, _)| dst.vlan),
                };
                let classified = mcast::classify(frame, vlan);
                if classified.control {
                    handed.push((index, vlan));
                }
                let target = match classified.forward {
                    Forward::Flood => continue,
                    Forward::Drop => {
                        *decision = Decision::Drop(DropReason::McastParse);
                        continue;
                    }
                    Forward::Group(key) => {
                        let family = family_of(&key);
                        if !groups.querier_present(family) {
                            continue;
                        }
                        reader
                            .members(&key)
                            .unwrap_or_default()
                            .union(groups.routers(family))
                    }
                    Forward::Routers(family) => {
                        if !groups.querier_present(family) {
                            continue;
                        }
                        groups.routers(family)
                    }
                };
                if target.is_empty() {
                    *decision = Decision::Drop(DropReason::Snooped);
                    continue;
                }
                targets.resize(index, None);
                targets.push(Some(target));
            }
        });
        if !handed.is_empty() {
            self.hand_over(ingress, &handed);
        }
    }

    /// Hands the IGMP and MLD messages at `handed` (frame index, VLAN) to
    /// the control plane, within [`MCAST_EVENTS_PER_SECOND`].
    fn hand_over(&mut self, ingress: usize, handed: &[(usize, u16)]) {
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
            let buffer = self.batch.frame(index);
            events(PortEvent::Mcast {
                port: PortId(ingress as u16),
                vlan,
                frame: buffer[P::METADATA_LEN.min(buffer.len())..].to_vec(),
            });
        }
    }

    /// The ports a flooded frame `index` is narrowed to, if snooping
    /// narrowed it.
    #[inline(always)]
    pub(super) fn target(&self, index: usize) -> Option<PortSet> {
        self.targets.get(index).copied().flatten()
    }
}

/// The address family of a group.
fn family_of(key: &mcast::GroupKey) -> Family {
    match key.group {
        std::net::IpAddr::V4(_) => Family::V4,
        std::net::IpAddr::V6(_) => Family::V6,
    }
}
