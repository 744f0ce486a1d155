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

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::mcast::{Action, GroupKey};
    use crate::port_id::{PortId, PortSet};
    use crate::wire::checksum::checksum;
    use crate::wire::igmp::multicast_mac;

    const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 1, 1);
    const OTHER: Ipv4Addr = Ipv4Addr::new(239, 1, 1, 2);

    /// An IPv4 frame to `group` carrying `protocol`'s `payload`.
    fn ipv4(group: Ipv4Addr, protocol: u8, payload: &[u8]) -> Vec<u8> {
        let mut frame = multicast_mac(group).0.to_vec();
        frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
        let total = (20 + payload.len()) as u16;
        let mut header = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 1, protocol, 0, 0];
        header[2..4].copy_from_slice(&total.to_be_bytes());
        header.extend_from_slice(&[198, 18, 0, 1]);
        header.extend_from_slice(&group.octets());
        let sum = checksum(&header);
        header[10..12].copy_from_slice(&sum.to_be_bytes());
        frame.extend_from_slice(&header);
        frame.extend_from_slice(payload);
        frame.resize(frame.len().max(60), 0);
        frame
    }

    fn data(group: Ipv4Addr) -> Vec<u8> {
        ipv4(
            group,
            17,
            &[0x30, 0x39, 0x30, 0x39, 0, 12, 0, 0, 1, 2, 3, 4],
        )
    }

    /// An IGMPv2 report of `group`; with `bad`, its checksum wrong.
    fn report(group: Ipv4Addr, bad: bool) -> Vec<u8> {
        let mut igmp = vec![0x16, 0, 0, 0];
        igmp.extend_from_slice(&group.octets());
        let sum = checksum(&igmp) ^ u16::from(bad);
        igmp[2..4].copy_from_slice(&sum.to_be_bytes());
        ipv4(group, 2, &igmp)
    }

    fn set(ports: &[u16]) -> PortSet {
        ports.iter().map(|&p| PortId(p)).collect()
    }

    /// The batch's verdicts after narrowing, and the messages handed over.
    fn narrowed(
        frames: &[Vec<u8>],
        groups: &GroupTable<locks::Mutex>,
    ) -> (Vec<Verdict>, Vec<(usize, VlanId)>) {
        let mut verdicts = vec![Verdict::decided(Decision::Flood); frames.len()];
        let mut handed = Vec::new();
        narrow(&mut verdicts, |i| &frames[i][..], groups, &mut handed);
        (verdicts, handed)
    }

    #[test]
    fn floods_narrow_to_members_and_routers_once_a_querier_is_present() {
        let groups = GroupTable::<locks::Mutex>::new();
        groups.apply(&Action::Group {
            key: GroupKey {
                vlan: 0,
                group: IpAddr::V4(GROUP),
            },
            ports: set(&[1]),
        });
        let frames = [
            data(GROUP),
            data(OTHER),
            report(GROUP, false),
            report(GROUP, true),
        ];
        // No querier: everything floods; a report is handed over all the
        // same, a malformed one dropped and not handed.
        let (verdicts, handed) = narrowed(&frames, &groups);
        assert!(verdicts[..3]
            .iter()
            .all(|v| v.decision == Decision::Flood && v.narrowed.is_none()));
        assert_eq!(verdicts[3].decision, Decision::Drop(DropReason::McastParse));
        assert_eq!(handed, [(2, 0)]);
        groups.apply(&Action::Querier {
            family: Family::V4,
            present: true,
        });
        let (verdicts, _) = narrowed(&frames, &groups);
        assert_eq!(verdicts[0].narrowed, Some(set(&[1])));
        // A group nobody joined, with no router port, goes nowhere.
        assert_eq!(verdicts[1].decision, Decision::Drop(DropReason::Snooped));
        groups.apply(&Action::Routers {
            family: Family::V4,
            ports: set(&[3]),
        });
        let (verdicts, _) = narrowed(&frames, &groups);
        assert_eq!(verdicts[0].narrowed, Some(set(&[1, 3])));
        assert_eq!(verdicts[1].narrowed, Some(set(&[3])));
        // Snooping off: nothing is looked at.
        groups.set_enabled(false);
        let (verdicts, handed) = narrowed(&frames, &groups);
        assert!(verdicts
            .iter()
            .all(|v| v.decision == Decision::Flood && v.narrowed.is_none()));
        assert!(handed.is_empty());
    }
}
