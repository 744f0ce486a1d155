//! The ingress stage, in br_handle_frame's and br_handle_frame_finish's
//! order: a disabled port takes nothing; BPDUs are taken before anything
//! else looks at a frame (by spanning tree, a guard or a filter, before
//! VLAN admission too, as the Linux bridge takes link-local frames); a
//! port spanning tree has discarding takes nothing more; VLAN filtering
//! admits the frame into a VLAN (`vlan.rs`). A locked port's check needs
//! the table and is the lookup's (`lookup.rs`); a port that is learning
//! forwards nothing it looked up ([`gate_out`]).

use super::port::IngressPort;
use super::vlan::{self, Admitted};
use super::{Decision, DropReason, Verdict};
use crate::wire::MacAddr;

/// Whether `frame` (an Ethernet frame) goes to the Bridge Group Address.
#[inline(always)]
pub fn is_bpdu(frame: &[u8]) -> bool {
    frame.len() >= 6 && frame[..6] == MacAddr::BRIDGE_GROUP.0
}

/// Takes `frame` in on `port`: its VLAN (with VLAN filtering), or why it
/// goes no further.
#[inline(always)]
pub fn admit(port: &IngressPort<'_>, frame: &[u8]) -> Result<Option<Admitted>, DropReason> {
    if let Some(reason) = port.intercept {
        if !port.disabled && is_bpdu(frame) {
            return Err(reason);
        }
    }
    if !port.looks_up() {
        return Err(DropReason::PortState);
    }
    match port.vlans {
        Some(vlans) => vlan::admit(vlans, frame).map(Some),
        None => Ok(None),
    }
}

/// The verdict of a frame on a port that looks nothing up
/// ([`IngressPort::looks_up`] false): a BPDU's interception or the port's
/// state.
#[inline]
pub fn without_lookup(port: &IngressPort<'_>, frame: &[u8]) -> Verdict {
    let reason = admit(port, frame).err().unwrap_or(DropReason::PortState);
    Verdict::drop(reason)
}

/// A frame looked up on a port spanning tree has learning (its source
/// learned) is not forwarded (802.1D-2004 7.4).
#[inline(always)]
pub fn gate_out(port: &IngressPort<'_>, decision: Decision) -> Decision {
    if port.gate.forwarding || matches!(decision, Decision::Drop(_)) {
        decision
    } else {
        Decision::Drop(DropReason::PortState)
    }
}

/// A BPDU guard that tripped on frame `at` disables its port at once:
/// the frames after it are dropped too. Returns `at`, for the worker to
/// disable the port, learn nothing of the batch and tell the owner.
pub fn trip_guard(verdicts: &mut [Verdict]) -> Option<usize> {
    let at = verdicts
        .iter()
        .position(|v| v.decision == Decision::Drop(DropReason::Guard))?;
    for verdict in &mut verdicts[at + 1..] {
        verdict.decision = Decision::Drop(DropReason::PortState);
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::port::{Gate, PortFlags};
    use crate::port_id::PortId;
    use crate::vlan::PortVlans;
    use crate::wire::FrameSpec;

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

    fn port(vlans: Option<&PortVlans>) -> IngressPort<'_> {
        IngressPort {
            port: PortId(0),
            vlans,
            intercept: None,
            flags: PortFlags::default(),
            gate: Gate::OPEN,
            disabled: false,
        }
    }

    #[test]
    fn only_frames_to_the_bridge_group_are_bpdus() {
        assert!(is_bpdu(&[0x01, 0x80, 0xc2, 0, 0, 0, 1, 2]));
        assert!(!is_bpdu(&[0x01, 0x80, 0xc2, 0, 0, 0x0e, 1, 2]));
        assert!(!is_bpdu(&[0x01, 0x80]));
    }

    #[test]
    fn bpdus_are_taken_before_vlans_and_port_state() {
        let bpdu = FrameSpec::new(MacAddr::BRIDGE_GROUP, A).build();
        let plain = FrameSpec::new(MacAddr::BROADCAST, A).build();
        let trunk = PortVlans::trunk(crate::vlan::VlanSet::parse("10").unwrap(), None);
        let mut ingress = port(Some(&trunk));
        // Untagged on a trunk without a native VLAN.
        assert_eq!(admit(&ingress, &bpdu), Err(DropReason::VlanUntagged));
        ingress.intercept = IngressPort::intercept_for(false, false, true);
        assert_eq!(admit(&ingress, &bpdu), Err(DropReason::Stp));
        ingress.gate = Gate::CLOSED;
        assert_eq!(admit(&ingress, &bpdu), Err(DropReason::Stp));
        assert_eq!(admit(&ingress, &plain), Err(DropReason::PortState));
        assert!(!ingress.looks_up());
        assert_eq!(
            without_lookup(&ingress, &bpdu).decision,
            Decision::Drop(DropReason::Stp)
        );
        // A disabled port takes not even BPDUs.
        ingress.disabled = true;
        assert_eq!(admit(&ingress, &bpdu), Err(DropReason::PortState));
        assert_eq!(
            IngressPort::intercept_for(true, true, true),
            Some(DropReason::BpduFilter)
        );
        assert_eq!(
            IngressPort::intercept_for(false, true, true),
            Some(DropReason::Guard)
        );
        assert_eq!(IngressPort::intercept_for(false, false, false), None);
    }

    #[test]
    fn a_learning_port_forwards_nothing_it_looked_up() {
        let mut ingress = port(None);
        ingress.gate = Gate::LEARNING;
        assert!(ingress.looks_up());
        assert_eq!(
            gate_out(&ingress, Decision::Flood),
            Decision::Drop(DropReason::PortState)
        );
        assert_eq!(
            gate_out(&ingress, Decision::Drop(DropReason::SamePort)),
            Decision::Drop(DropReason::SamePort)
        );
        ingress.gate = Gate::OPEN;
        assert_eq!(gate_out(&ingress, Decision::Flood), Decision::Flood);
    }

    #[test]
    fn a_tripped_guard_drops_the_rest_of_its_batch() {
        let mut verdicts = vec![
            Verdict::decided(Decision::Flood),
            Verdict::drop(DropReason::Guard),
            Verdict::decided(Decision::Flood),
            Verdict::drop(DropReason::Guard),
        ];
        assert_eq!(trip_guard(&mut verdicts), Some(1));
        let decisions: Vec<_> = verdicts.iter().map(|v| v.decision).collect();
        assert_eq!(
            decisions,
            [
                Decision::Flood,
                Decision::Drop(DropReason::Guard),
                Decision::Drop(DropReason::PortState),
                Decision::Drop(DropReason::PortState)
            ]
        );
        assert_eq!(trip_guard(&mut [Verdict::decided(Decision::Flood)]), None);
    }
}
