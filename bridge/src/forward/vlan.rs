//! VLAN admission and egress, as the Linux bridge with `vlan_filtering 1`
//! does them (br_allowed_ingress, br_allowed_egress, br_handle_vlan): pure
//! functions of a frame and a port's VLANs (`crate::vlan`). Admission is
//! part of the ingress stage, the egress form part of the fan-out.

use super::DropReason;
use crate::vlan::{outer_tag, Egress, PortVlans, Tag, MAX_VID};
use crate::wire::VlanId;

/// A frame admitted on a port: its VLAN, and the tag it leaves tagged
/// ports with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The VLAN the frame belongs to.
    pub vid: VlanId,
    /// The tag the frame carried in (None: untagged).
    pub tag_in: Option<Tag>,
    /// The tag it carries out of a port where its VLAN is tagged: the
    /// ingress tag with the VLAN id set (a priority tag takes the PVID),
    /// or an 802.1Q tag of priority 0.
    pub tag_out: Tag,
}

/// Admits a frame on a port, as br_allowed_ingress does: a tagged frame
/// (802.1Q, or 802.1ad as the outer tag of QinQ) belongs to its tag's
/// VLAN if the port is a member of it; an untagged or priority-tagged
/// (VLAN id 0) frame belongs to the port's PVID, if it has one.
#[inline]
pub fn admit(port: &PortVlans, frame: &[u8]) -> Result<Admitted, DropReason> {
    let tag_in = outer_tag(frame);
    let vid = match tag_in {
        Some(tag) if tag.vid() != 0 => {
            let vid = tag.vid();
            if vid > MAX_VID || !port.is_member(vid) {
                return Err(DropReason::VlanIngress);
            }
            vid
        }
        _ => port.pvid().ok_or(DropReason::VlanUntagged)?,
    };
    // A tag keeps its protocol, priority and DEI (a priority tag takes the
    // PVID in place of its zero VLAN id); an untagged frame gets 802.1Q.
    let tag_out = tag_in.map_or(Tag::dot1q(vid), |tag| tag.with_vid(vid));
    Ok(Admitted {
        vid,
        tag_in,
        tag_out,
    })
}

/// How an admitted frame leaves `port`, as br_handle_vlan does; `None`
/// when the port is not a member of the frame's VLAN (br_allowed_egress).
#[inline]
pub fn egress(port: &PortVlans, frame: &Admitted) -> Option<Egress> {
    if !port.is_member(frame.vid) {
        return None;
    }
    Some(if port.is_untagged(frame.vid) {
        if frame.tag_in.is_none() {
            Egress::AsIs
        } else {
            Egress::Untagged
        }
    } else if frame.tag_in == Some(frame.tag_out) {
        Egress::AsIs
    } else {
        Egress::Tagged(frame.tag_out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vlan::{VlanSet, TAG_LEN};
    use crate::wire::tag::{push_into, rewrite};
    use crate::wire::{FrameSpec, MacAddr};

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn untagged() -> Vec<u8> {
        FrameSpec::new(B, A).build()
    }

    fn tagged(tpid: u16, tci: u16) -> Vec<u8> {
        let mut frame = Vec::new();
        rewrite(
            &untagged(),
            0,
            Egress::Tagged(Tag { tpid, tci }),
            &mut frame,
        );
        frame
    }

    #[test]
    fn untagged_frames_take_the_pvid_or_are_dropped() {
        let access = PortVlans::access(10);
        let admitted = admit(&access, &untagged()).unwrap();
        assert_eq!(admitted.vid, 10);
        assert_eq!(
            admitted.tag_out,
            Tag {
                tpid: 0x8100,
                tci: 10
            }
        );
        let trunk = PortVlans::trunk(VlanSet::parse("10").unwrap(), None);
        assert_eq!(admit(&trunk, &untagged()), Err(DropReason::VlanUntagged));
        let native = PortVlans::trunk(VlanSet::parse("10").unwrap(), Some(20));
        assert_eq!(admit(&native, &untagged()).unwrap().vid, 20);
    }

    #[test]
    fn priority_tags_take_the_pvid_and_keep_their_priority() {
        let access = PortVlans::access(10);
        let frame = tagged(0x8100, 0xa000);
        let admitted = admit(&access, &frame).unwrap();
        assert_eq!(admitted.vid, 10);
        assert_eq!(
            admitted.tag_out,
            Tag {
                tpid: 0x8100,
                tci: 0xa00a
            }
        );
        // Out of an untagged port the tag goes; out of a tagged one it
        // carries the VLAN id.
        assert_eq!(egress(&access, &admitted), Some(Egress::Untagged));
        let trunk = PortVlans::trunk(VlanSet::parse("10").unwrap(), None);
        assert_eq!(
            egress(&trunk, &admitted),
            Some(Egress::Tagged(Tag {
                tpid: 0x8100,
                tci: 0xa00a
            }))
        );
    }

    #[test]
    fn tagged_frames_enter_only_member_ports() {
        let trunk = PortVlans::trunk(VlanSet::parse("10,20").unwrap(), None);
        assert_eq!(admit(&trunk, &tagged(0x8100, 20)).unwrap().vid, 20);
        assert_eq!(
            admit(&trunk, &tagged(0x8100, 30)),
            Err(DropReason::VlanIngress)
        );
        assert_eq!(
            admit(&trunk, &tagged(0x8100, 4095)),
            Err(DropReason::VlanIngress)
        );
        // An access port takes tagged frames of its own VLAN, as Linux's
        // member check does.
        let access = PortVlans::access(10);
        assert_eq!(admit(&access, &tagged(0x8100, 10)).unwrap().vid, 10);
        assert_eq!(
            admit(&access, &tagged(0x8100, 11)),
            Err(DropReason::VlanIngress)
        );
    }

    #[test]
    fn qinq_frames_belong_to_their_outer_vlan() {
        let trunk = PortVlans::trunk(VlanSet::parse("100").unwrap(), None);
        let mut frame = vec![0; untagged().len() + 2 * TAG_LEN];
        let inner = tagged(0x8100, 5);
        let outer = Tag {
            tpid: 0x88a8,
            tci: 100,
        };
        push_into(&[], &inner, Some(outer), &mut frame).unwrap();
        let admitted = admit(&trunk, &frame).unwrap();
        assert_eq!(admitted.vid, 100);
        assert_eq!(egress(&trunk, &admitted), Some(Egress::AsIs));
        assert_eq!(
            egress(&PortVlans::access(100), &admitted),
            Some(Egress::Untagged)
        );
    }

    #[test]
    fn frames_leave_only_member_ports_tagged_as_the_port_says() {
        let access10 = PortVlans::access(10);
        let access20 = PortVlans::access(20);
        let trunk = PortVlans::trunk(VlanSet::parse("10,20").unwrap(), None);
        let from_access = admit(&access10, &untagged()).unwrap();
        assert_eq!(egress(&access10, &from_access), Some(Egress::AsIs));
        assert_eq!(egress(&access20, &from_access), None);
        assert_eq!(
            egress(&trunk, &from_access),
            Some(Egress::Tagged(Tag {
                tpid: 0x8100,
                tci: 10
            }))
        );
        let from_trunk = admit(&trunk, &tagged(0x8100, 20)).unwrap();
        assert_eq!(egress(&trunk, &from_trunk), Some(Egress::AsIs));
        assert_eq!(egress(&access20, &from_trunk), Some(Egress::Untagged));
        assert_eq!(egress(&access10, &from_trunk), None);
    }
}
