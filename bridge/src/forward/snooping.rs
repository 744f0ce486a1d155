//! Multicast snooping's part of the policy stage (br_multicast_flood):
//! once a querier is present, a flood of IP multicast goes only to its
//! group's member ports and the router ports; a malformed IGMP or MLD
//! message is dropped. The group table is read in one section per batch;
//! which messages the control plane must see comes back to the worker,
//! which hands them over.

use locks::Strategy;

use super::{classify_in, Decision, DropReason, Verdict};
use crate::mcast::{self, Family, Forward, GroupTable};
use crate::wire::VlanId;

/// Whether `frame` goes to an Ethernet group that IP multicast uses
/// (01:00:5e for IPv4, 33:33 for IPv6): the one test every flood pays.
#[inline(always)]
fn is_ip_group(frame: &[u8]) -> bool {
    matches!(
        frame.get(..3),
        Some([0x01, 0x00, 0x5e]) | Some([0x33, 0x33, _])
    )
}

/// Narrows the batch's multicast floods to their groups' ports and drops
/// malformed IGMP and MLD messages; `handed` gets the (frame index, VLAN)
/// of each IGMP or MLD message for the control plane.
pub fn narrow<'a, S: Strategy>(
    verdicts: &mut [Verdict],
    frame_of: impl Fn(usize) -> &'a [u8],
    groups: &GroupTable<S>,
    handed: &mut Vec<(usize, VlanId)>,
) {
    if !groups.enabled() {
        // Snooping turned itself off: multicast floods, as without it.
        return;
    }
    let floods_a_group = verdicts
        .iter()
        .enumerate()
        .any(|(index, v)| v.decision == Decision::Flood && is_ip_group(frame_of(index)));
    if !floods_a_group {
        return;
    }
    groups.read(|reader| {
        for (index, verdict) in verdicts.iter_mut().enumerate() {
            let frame = frame_of(index);
            if verdict.decision != Decision::Flood || !is_ip_group(frame) {
                continue;
            }
            let vlan = match verdict.vlan {
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
                    verdict.decision = Decision::Drop(DropReason::McastParse);
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
                verdict.decision = Decision::Drop(DropReason::Snooped);
                continue;
            }
            verdict.narrowed = Some(target);
        }
    });
}

/// The address family of a group.
fn family_of(key: &mcast::GroupKey) -> Family {
    match key.group {
        std::net::IpAddr::V4(_) => Family::V4,
        std::net::IpAddr::V6(_) => Family::V6,
    }
}
