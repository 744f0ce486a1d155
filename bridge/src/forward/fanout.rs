//! The fan-out stage (br_forward, br_flood, br_multicast_flood): which
//! egress ports each frame of a batch leaves by, and in which form. One
//! function for every kind of frame, with and without VLAN filtering:
//! hairpin, isolation, a flood narrowed by snooping, the flood flags of
//! each class, BPDU filters, and the VLAN egress rules (membership, tagged
//! or untagged). It takes plain views of the egress ports
//! ([`EgressPorts`]) and hands each frame to send, with its port and
//! form, to the worker, which makes each form once and sends.

use super::port::{EgressPort, EgressPorts, PortFlags};
use super::vlan::{self, Admitted};
use super::{is_bpdu, Decision, DropReason, Verdict};
use crate::port_id::PortId;
use crate::vlan::Egress;

/// What a flooded frame is, for the flood flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloodClass {
    /// Unknown unicast.
    Unicast,
    /// Multicast (the BPDUs flooded without spanning tree among it).
    Multicast,
    /// Broadcast.
    Broadcast,
}

impl FloodClass {
    /// The class of `frame` (an Ethernet frame of at least 6 bytes).
    pub fn of(frame: &[u8]) -> FloodClass {
        match frame.get(..6) {
            Some([0xff, 0xff, 0xff, 0xff, 0xff, 0xff]) => FloodClass::Broadcast,
            Some(dst) if dst[0] & 1 == 1 => FloodClass::Multicast,
            _ => FloodClass::Unicast,
        }
    }
}

impl PortFlags {
    /// Whether a frame from a port with flags `self` may leave by one with
    /// `to` (`same`: the same port): br_forward.c's should_deliver.
    pub fn delivers_to(&self, to: &PortFlags, same: bool) -> bool {
        (!same || to.hairpin) && !(self.isolated && to.isolated)
    }

    /// Whether a flood of `class` from `self` goes to `to` (br_flood).
    pub fn floods_to(&self, to: &PortFlags, same: bool, class: FloodClass) -> bool {
        self.delivers_to(to, same)
            && match class {
                FloodClass::Unicast => to.flood,
                FloodClass::Multicast => to.mcast_flood,
                FloodClass::Broadcast => to.bcast_flood,
            }
    }
}

/// The bridge's egress ports, with what lets the fan-out skip rules no
/// port uses.
pub struct Egresses<'a, E: EgressPorts + ?Sized> {
    /// The ports.
    pub ports: &'a E,
    /// Whether any port's flags differ from the default (floods and
    /// unicast then look at them).
    pub flag_rules: bool,
    /// Whether any port has `bpdu_filter=on`.
    pub bpdu_filters: bool,
}

/// The form a frame leaves `to` in: as it came without VLAN filtering
/// (`vlan` none), else as the port's VLANs say (`None`: not a member).
#[inline(always)]
fn form(to: &EgressPort<'_>, vlan: &Option<Admitted>) -> Option<Egress> {
    match vlan {
        None => Some(Egress::AsIs),
        Some(admitted) => vlan::egress(to.vlans, admitted),
    }
}

/// Fans out a batch received on port `ingress` (flags `from`; `frame_of`
/// gives a frame of the batch, looked at only to flood it): calls
/// `deliver(frame index, egress port, form)` for each frame to send, in
/// frame order, and settles each verdict: known unicast refused by isolation or VLAN
/// egress becomes a drop for that reason; a hairpin turn becomes unicast
/// back to the ingress port. Returns how many frames went to a port the
/// bridge lacks (a static entry naming it).
#[inline]
pub fn fan_out<'a, E: EgressPorts + ?Sized>(
    verdicts: &mut [Verdict],
    frame_of: impl Fn(usize) -> &'a [u8],
    ingress: usize,
    from: PortFlags,
    egresses: &Egresses<'_, E>,
    mut deliver: impl FnMut(usize, usize, Egress),
) -> u64 {
    let Egresses {
        ports,
        flag_rules,
        bpdu_filters,
    } = *egresses;
    let mut missing = 0;
    for (index, verdict) in verdicts.iter_mut().enumerate() {
        let mut deliver = |port: usize, form: Egress| deliver(index, port, form);
        match verdict.decision {
            // Hairpin: known unicast may go back out of its port, in the
            // form that port sends.
            Decision::Drop(DropReason::SamePort) if flag_rules && from.hairpin => {
                if let Some(to) = ports.port(ingress) {
                    if let Some(form) = form(&to, &verdict.vlan) {
                        deliver(ingress, form);
                    }
                }
                verdict.decision = Decision::Unicast(PortId(ingress as u16));
            }
            Decision::Drop(_) => {}
            Decision::Unicast(port) => {
                let egress = port.index();
                if egress >= ports.count() {
                    missing += 1;
                    continue;
                }
                // A port id not in use gets nothing, and nothing counts.
                let Some(to) = ports.port(egress) else {
                    continue;
                };
                if flag_rules && !from.delivers_to(&to.flags, false) {
                    verdict.decision = Decision::Drop(DropReason::Isolated);
                    continue;
                }
                match form(&to, &verdict.vlan) {
                    Some(form) => deliver(egress, form),
                    None => verdict.decision = Decision::Drop(DropReason::VlanEgress),
                }
            }
            Decision::Flood => match verdict.narrowed {
                // Snooping's narrowing: the group's members and routers,
                // whatever their flood flags (br_multicast_flood).
                Some(target) => {
                    for egress in target.iter().map(PortId::index) {
                        let Some(to) = ports.port(egress) else {
                            continue;
                        };
                        let same = egress == ingress;
                        let allowed = match flag_rules {
                            false => !same,
                            true => from.delivers_to(&to.flags, same),
                        };
                        if let Some(form) = allowed.then(|| form(&to, &verdict.vlan)).flatten() {
                            deliver(egress, form);
                        }
                    }
                }
                None => {
                    let frame = frame_of(index);
                    let bpdu = bpdu_filters && is_bpdu(frame);
                    let class = flag_rules.then(|| FloodClass::of(frame));
                    for egress in 0..ports.count() {
                        let Some(to) = ports.port(egress) else {
                            continue;
                        };
                        let same = egress == ingress;
                        let allowed = match class {
                            None => !same,
                            Some(class) => from.floods_to(&to.flags, same, class),
                        } && !(bpdu && to.bpdu_filter);
                        if let Some(form) = allowed.then(|| form(&to, &verdict.vlan)).flatten() {
                            deliver(egress, form);
                        }
                    }
                }
            },
        }
    }
    missing
}

#[cfg(test)]
mod tests;
