//! The fan-out on plain port views: every rule, with and without VLAN
//! filtering, and what each verdict settles to.

use super::*;
use crate::forward::admit;
use crate::forward::port::IngressPort;
use crate::forward::Gate;
use crate::port_id::PortSet;
use crate::vlan::{PortVlans, Tag, VlanSet};
use crate::wire::{FrameSpec, MacAddr};

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const MCAST: MacAddr = MacAddr([0x01, 0x00, 0x5e, 0, 0, 1]);

fn frame(dst: MacAddr) -> Vec<u8> {
    FrameSpec::new(dst, A).build()
}

/// Ports 0..n with default flags and VLANs, port `vacant` not in use.
fn views(vlans: &[PortVlans], vacant: Option<usize>) -> Vec<Option<EgressPort<'_>>> {
    vlans
        .iter()
        .enumerate()
        .map(|(index, vlans)| {
            (Some(index) != vacant).then_some(EgressPort {
                vlans,
                flags: PortFlags::default(),
                bpdu_filter: false,
            })
        })
        .collect()
}

/// Fans out one frame with `verdict` from port 0: the (port, form) pairs
/// and the settled decision, and the count of missing ports.
fn one(
    verdict: Verdict,
    frame: &[u8],
    from: PortFlags,
    ports: &[Option<EgressPort<'_>>],
    flag_rules: bool,
) -> (Vec<(usize, Egress)>, Decision, u64) {
    let mut verdicts = [verdict];
    let mut deliveries = Vec::new();
    let egresses = Egresses {
        ports,
        flag_rules,
        bpdu_filters: ports.iter().flatten().any(|p| p.bpdu_filter),
    };
    let missing = fan_out(
        &mut verdicts,
        |_| frame,
        0,
        from,
        &egresses,
        |frame, port, form| deliveries.push((frame, port, form)),
    );
    let sent = deliveries
        .iter()
        .map(|&(frame, port, form)| {
            assert_eq!(frame, 0);
            (port, form)
        })
        .collect();
    (sent, verdicts[0].decision, missing)
}

fn plain(n: usize) -> Vec<PortVlans> {
    vec![PortVlans::default(); n]
}

#[test]
fn known_unicast_goes_to_its_port_or_counts_why_not() {
    let vlans = plain(4);
    let ports = views(&vlans, Some(2));
    let to = |port: u16| Verdict::decided(Decision::Unicast(PortId(port)));
    let f = frame(B);
    let none = PortFlags::default();
    assert_eq!(
        one(to(1), &f, none, &ports, false),
        (vec![(1, Egress::AsIs)], Decision::Unicast(PortId(1)), 0)
    );
    // A port id not in use: nothing sent, nothing counted.
    assert_eq!(
        one(to(2), &f, none, &ports, false),
        (vec![], Decision::Unicast(PortId(2)), 0)
    );
    // Beyond the bridge's ports: counted as missing.
    assert_eq!(
        one(to(9), &f, none, &ports, false),
        (vec![], Decision::Unicast(PortId(9)), 1)
    );
    // Isolated to isolated is dropped; isolated to a plain port is not.
    let isolated = PortFlags {
        isolated: true,
        ..PortFlags::default()
    };
    let mut ports = views(&vlans, None);
    ports[3].as_mut().unwrap().flags = isolated;
    assert_eq!(
        one(to(3), &f, isolated, &ports, true),
        (vec![], Decision::Drop(DropReason::Isolated), 0)
    );
    assert_eq!(
        one(to(1), &f, isolated, &ports, true).0,
        vec![(1, Egress::AsIs)]
    );
}

#[test]
fn hairpin_turns_a_same_port_drop_into_unicast_back() {
    let vlans = plain(2);
    let ports = views(&vlans, None);
    let same = Verdict::drop(DropReason::SamePort);
    let f = frame(B);
    let hairpin = PortFlags {
        hairpin: true,
        ..PortFlags::default()
    };
    assert_eq!(
        one(same, &f, hairpin, &ports, true),
        (vec![(0, Egress::AsIs)], Decision::Unicast(PortId(0)), 0)
    );
    assert_eq!(
        one(same, &f, PortFlags::default(), &ports, false),
        (vec![], Decision::Drop(DropReason::SamePort), 0)
    );
}

#[test]
fn floods_follow_the_flood_flags_of_their_class() {
    let vlans = plain(4);
    let mut ports = views(&vlans, Some(3));
    let flood = Verdict::decided(Decision::Flood);
    let none = PortFlags::default();
    let everywhere = vec![(1, Egress::AsIs), (2, Egress::AsIs)];
    assert_eq!(one(flood, &frame(B), none, &ports, false).0, everywhere);
    ports[1].as_mut().unwrap().flags.flood = false;
    ports[2].as_mut().unwrap().flags.mcast_flood = false;
    assert_eq!(
        one(flood, &frame(B), none, &ports, true).0,
        vec![(2, Egress::AsIs)]
    );
    assert_eq!(
        one(flood, &frame(MCAST), none, &ports, true).0,
        vec![(1, Egress::AsIs)]
    );
    ports[2].as_mut().unwrap().flags.bcast_flood = false;
    assert_eq!(
        one(flood, &frame(MacAddr::BROADCAST), none, &ports, true).0,
        vec![(1, Egress::AsIs)]
    );
    // BPDUs skip a port that filters them.
    let vlans = plain(3);
    let mut ports = views(&vlans, None);
    ports[2].as_mut().unwrap().bpdu_filter = true;
    assert_eq!(
        one(flood, &frame(MacAddr::BRIDGE_GROUP), none, &ports, false).0,
        vec![(1, Egress::AsIs)]
    );
    assert_eq!(
        one(flood, &frame(MCAST), none, &ports, false).0,
        vec![(1, Egress::AsIs), (2, Egress::AsIs)]
    );
}

#[test]
fn a_narrowed_flood_goes_only_to_its_ports_whatever_their_flood_flags() {
    let vlans = plain(4);
    let mut ports = views(&vlans, None);
    ports[2].as_mut().unwrap().flags.mcast_flood = false;
    let mut target = PortSet::new();
    for port in [0, 2, 7] {
        target.insert(PortId(port));
    }
    let verdict = Verdict {
        narrowed: Some(target),
        ..Verdict::decided(Decision::Flood)
    };
    assert_eq!(
        one(verdict, &frame(MCAST), PortFlags::default(), &ports, true).0,
        vec![(2, Egress::AsIs)]
    );
}

#[test]
fn with_vlans_frames_leave_member_ports_in_their_form() {
    let trunk = PortVlans::trunk(VlanSet::parse("10,20").unwrap(), None);
    let vlans = vec![
        PortVlans::access(10),
        trunk,
        PortVlans::access(20),
        PortVlans::access(10),
    ];
    let ports = views(&vlans, None);
    let ingress = IngressPort {
        port: PortId(0),
        vlans: Some(&vlans[0]),
        intercept: None,
        flags: PortFlags::default(),
        gate: Gate::OPEN,
        disabled: false,
    };
    let f = frame(B);
    let admitted = admit(&ingress, &f).unwrap();
    let tag = Tag {
        tpid: 0x8100,
        tci: 10,
    };
    let flood = Verdict {
        vlan: admitted,
        ..Verdict::decided(Decision::Flood)
    };
    assert_eq!(
        one(flood, &f, PortFlags::default(), &ports, false).0,
        vec![(1, Egress::Tagged(tag)), (3, Egress::AsIs)]
    );
    let to = |port: u16| Verdict {
        vlan: admitted,
        ..Verdict::decided(Decision::Unicast(PortId(port)))
    };
    assert_eq!(
        one(to(2), &f, PortFlags::default(), &ports, false),
        (vec![], Decision::Drop(DropReason::VlanEgress), 0)
    );
    assert_eq!(
        one(to(1), &f, PortFlags::default(), &ports, false).0,
        vec![(1, Egress::Tagged(tag))]
    );
}

#[test]
fn drops_stay_drops_and_deliveries_keep_frame_order() {
    let vlans = plain(3);
    let ports = views(&vlans, None);
    let mut verdicts = [
        Verdict::decided(Decision::Unicast(PortId(2))),
        Verdict::drop(DropReason::Runt),
        Verdict::decided(Decision::Flood),
    ];
    let frames = [frame(B), vec![0; 4], frame(MacAddr::BROADCAST)];
    let mut deliveries = Vec::new();
    let egresses = Egresses {
        ports: &ports[..],
        flag_rules: false,
        bpdu_filters: false,
    };
    fan_out(
        &mut verdicts,
        |index| &frames[index][..],
        0,
        PortFlags::default(),
        &egresses,
        |frame, port, _| deliveries.push((frame, port)),
    );
    let order = deliveries;
    assert_eq!(order, [(0, 2), (2, 1), (2, 2)]);
    assert_eq!(verdicts[1].decision, Decision::Drop(DropReason::Runt));
}
