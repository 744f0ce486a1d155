//! The lookup stage: where a frame goes by the MAC table alone, as a pure
//! function of the ingress port, the frame and a read section of the
//! table (br_handle_frame_finish's destination lookup).

use super::port::IngressPort;
use super::DropReason;
use crate::fdb::{FdbKey, FdbLookup, Location, Vtep};
use crate::port_id::PortId;
use crate::wire::{EthernetFrame, MacAddr, MacKind, VlanId};

/// What to do with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Do not forward it.
    Drop(DropReason),
    /// Send it out of this port only.
    Unicast(PortId),
    /// Send it out of every port but the ingress one.
    Flood,
}

/// The table keys of a frame's destination and source, or why the frame
/// cannot be forwarded at all. Learning uses the source key of any frame
/// that passes this check, including frames to reserved addresses.
#[inline]
pub fn classify(frame: &[u8]) -> Result<(FdbKey, FdbKey), DropReason> {
    classify_in(frame, None)
}

/// [`classify`], with the frame's VLAN given (by VLAN filtering, which
/// gives untagged frames their port's PVID) rather than read from its tag.
#[inline]
pub fn classify_in(frame: &[u8], vlan: Option<VlanId>) -> Result<(FdbKey, FdbKey), DropReason> {
    let frame = EthernetFrame::new_checked(frame).map_err(|_| DropReason::Runt)?;
    let src = frame.src_addr();
    if !src.is_valid_source() {
        return Err(DropReason::BadSource);
    }
    let vlan = vlan.unwrap_or_else(|| frame.vlan_id());
    Ok((FdbKey::new(vlan, frame.dst_addr()), FdbKey::new(vlan, src)))
}

/// Decides where `frame`, received on `ingress`, goes.
///
/// Rules, in order: drop runts and frames from invalid sources; drop frames
/// to reserved link-local addresses but the Bridge Group Address (BPDUs
/// reaching the decision are flooded, as the Linux bridge does with
/// `stp_state 0`, so that bridges around that run spanning tree see a loop
/// through this one); flood broadcast, multicast and unknown
/// unicast; drop frames to a port's own address (the host's); send known
/// unicast to its port, unless that is the ingress port.
/// A tagged frame is looked up within its VLAN and passes unchanged.
#[inline]
pub fn decide(ingress: PortId, frame: &[u8], fdb: &impl FdbLookup) -> Decision {
    decide_in(ingress, frame, None, fdb)
}

/// [`decide`], with the frame's VLAN given (see [`classify_in`]).
#[inline]
pub fn decide_in(
    ingress: PortId,
    frame: &[u8],
    vlan: Option<VlanId>,
    fdb: &impl FdbLookup,
) -> Decision {
    decide_to(ingress, frame, vlan, fdb).0
}

/// [`decide_in`], with the VTEP of a unicast destination behind a VXLAN
/// port (`None` for every other decision).
#[inline(always)]
pub fn decide_to(
    ingress: PortId,
    frame: &[u8],
    vlan: Option<VlanId>,
    fdb: &impl FdbLookup,
) -> (Decision, Option<Vtep>) {
    match classify_in(frame, vlan) {
        Ok((dst, _)) => decide_dst(ingress, &dst, fdb),
        Err(reason) => (Decision::Drop(reason), None),
    }
}

/// Where a frame to `dst` received on `ingress` goes, and the VTEP of a
/// unicast destination behind a VXLAN port.
#[inline(always)]
fn decide_dst(ingress: PortId, dst: &FdbKey, fdb: &impl FdbLookup) -> (Decision, Option<Vtep>) {
    let decision = match dst.mac.kind() {
        MacKind::Reserved if dst.mac == MacAddr::BRIDGE_GROUP => Decision::Flood,
        MacKind::Reserved => Decision::Drop(DropReason::Reserved),
        MacKind::Broadcast | MacKind::Multicast => Decision::Flood,
        // A zero destination is not a station anyone can learn: flooding it
        // is what an unknown unicast gets.
        MacKind::Unicast | MacKind::Zero => match fdb.locate_vtep(dst) {
            Some((Location::Local(_), _)) => Decision::Drop(DropReason::Local),
            Some((Location::Port(port), _)) if port == ingress => {
                Decision::Drop(DropReason::SamePort)
            }
            Some((Location::Port(port), vtep)) => return (Decision::Unicast(port), vtep),
            // The host's addresses are local in every VLAN, as on a Linux
            // bridge without VLAN filtering.
            None if dst.vlan != 0
                && matches!(
                    fdb.locate(&FdbKey::new(0, dst.mac)),
                    Some(Location::Local(_))
                ) =>
            {
                Decision::Drop(DropReason::Local)
            }
            None => Decision::Flood,
        },
    };
    (decision, None)
}

/// The lookup stage for one frame admitted on `port` (into `vlan`, with
/// VLAN filtering): where it goes, the VTEP of a unicast destination
/// behind a VXLAN port, and the source the worker may learn. On a locked
/// port (Linux's BR_PORT_LOCKED) only a station with a static entry on it
/// may send, and nothing is learned there.
#[inline(always)]
pub fn look_up(
    port: &IngressPort<'_>,
    frame: &[u8],
    vlan: Option<VlanId>,
    table: &impl FdbLookup,
) -> (Decision, Option<Vtep>, Option<FdbKey>) {
    let (dst, source) = match classify_in(frame, vlan) {
        Ok(keys) => keys,
        Err(reason) => return (Decision::Drop(reason), None, None),
    };
    if port.flags.locked {
        if !table.is_static_on(&source, port.port) {
            return (Decision::Drop(DropReason::Locked), None, None);
        }
        let (decision, vtep) = decide_dst(port.port, &dst, table);
        return (decision, vtep, None);
    }
    let (decision, vtep) = decide_dst(port.port, &dst, table);
    (decision, vtep, Some(source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fdb::{FdbConfig, MacTable};
    use crate::forward::{Gate, PortFlags};
    use crate::wire::FrameSpec;

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn port(locked: bool) -> IngressPort<'static> {
        IngressPort {
            port: PortId(0),
            vlans: None,
            intercept: None,
            flags: PortFlags {
                locked,
                ..PortFlags::default()
            },
            gate: Gate::OPEN,
            disabled: false,
        }
    }

    #[test]
    fn a_source_is_learnable_except_on_a_locked_port() {
        let table = MacTable::<locks::Mutex>::new(FdbConfig::default());
        table.learn(FdbKey::new(0, B), PortId(1), 0);
        let frame = FrameSpec::new(B, A).build();
        let looked = table.read(|section| look_up(&port(false), &frame, None, section));
        assert_eq!(
            looked,
            (Decision::Unicast(PortId(1)), None, Some(FdbKey::new(0, A)))
        );
        // Locked: a source without a static entry on the port is dropped;
        // one with it passes, and is not learned.
        let looked = table.read(|section| look_up(&port(true), &frame, None, section));
        assert_eq!(looked, (Decision::Drop(DropReason::Locked), None, None));
        table.add_static(FdbKey::new(0, A), PortId(1));
        let looked = table.read(|section| look_up(&port(true), &frame, None, section));
        assert_eq!(looked, (Decision::Drop(DropReason::Locked), None, None));
        table.add_static(FdbKey::new(0, A), PortId(0));
        let looked = table.read(|section| look_up(&port(true), &frame, None, section));
        assert_eq!(looked, (Decision::Unicast(PortId(1)), None, None));
        // A runt has no source to learn.
        let looked = table.read(|section| look_up(&port(false), &frame[..10], None, section));
        assert_eq!(looked, (Decision::Drop(DropReason::Runt), None, None));
    }
}
