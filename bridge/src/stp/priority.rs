//! Bridge identifiers, port identifiers, priority vectors and timer
//! values (802.1D-2004 17.5, 17.6, 9.2.5, 9.2.7).

use std::cmp::Ordering;
use std::fmt;

use crate::wire::MacAddr;

/// A bridge identifier (9.2.5): the 16-bit priority (4-bit Bridge
/// Priority and the 12-bit system id extension, here 0) above the
/// bridge's 48-bit MAC address. Numerically lower is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BridgeId(pub u64);

impl BridgeId {
    /// The identifier of the bridge with `priority` and address `mac`.
    pub fn new(priority: u16, mac: MacAddr) -> BridgeId {
        BridgeId(u64::from(priority) << 48 | mac.to_u64())
    }

    /// The 16-bit priority part.
    pub const fn priority(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// The bridge's MAC address part.
    pub fn mac(self) -> MacAddr {
        MacAddr::from_bytes(&self.0.to_be_bytes()[2..])
    }

    /// The address part as an integer, for 17.6's "Bridge Address"
    /// comparisons that ignore the priority.
    pub(crate) const fn address(self) -> u64 {
        self.0 & 0xffff_ffff_ffff
    }
}

/// As Linux writes `bridge_id` in sysfs: `8000.02ac00000001`.
impl fmt::Display for BridgeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}.{:012x}", self.priority(), self.address())
    }
}

/// A port identifier (9.2.7, 17.19 portId): the 4-bit Port Priority
/// (priority / 16) above the 12-bit Port Number.
pub(crate) fn port_identifier(priority: u8, number: u16) -> u16 {
    u16::from(priority >> 4) << 12 | (number & 0x0fff)
}

/// The Port Number part of a port identifier.
pub(crate) const fn port_number(port_id: u16) -> u16 {
    port_id & 0x0fff
}

/// A spanning tree priority vector (17.5): root bridge, root path cost,
/// designated bridge, designated port, and the port that received it
/// (the last used only to choose among a bridge's own ports, 17.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PriorityVector {
    pub root_bridge: BridgeId,
    pub root_path_cost: u32,
    pub designated_bridge: BridgeId,
    pub designated_port: u16,
    pub bridge_port: u16,
}

impl PriorityVector {
    /// The bridge priority vector (17.18.3): this bridge as root, at
    /// cost 0.
    pub fn bridge(id: BridgeId) -> PriorityVector {
        PriorityVector {
            root_bridge: id,
            root_path_cost: 0,
            designated_bridge: id,
            designated_port: 0,
            bridge_port: 0,
        }
    }

    /// The four components that a BPDU conveys, compared in order.
    fn conveyed(&self) -> (BridgeId, u32, BridgeId, u16) {
        (
            self.root_bridge,
            self.root_path_cost,
            self.designated_bridge,
            self.designated_port,
        )
    }

    /// Compares the conveyed components (not the receiving port's):
    /// `Less` is better.
    pub fn cmp_conveyed(&self, other: &PriorityVector) -> Ordering {
        self.conveyed().cmp(&other.conveyed())
    }

    /// Whether the conveyed components are better (lower) than `other`'s.
    pub fn better(&self, other: &PriorityVector) -> bool {
        self.cmp_conveyed(other) == Ordering::Less
    }

    /// Whether the conveyed components equal `other`'s.
    pub fn same(&self, other: &PriorityVector) -> bool {
        self.cmp_conveyed(other) == Ordering::Equal
    }

    /// Whether the conveyed components are better than or the same as
    /// `other`'s (17.21.1).
    pub fn better_or_same(&self, other: &PriorityVector) -> bool {
        self.cmp_conveyed(other) != Ordering::Greater
    }

    /// All five components compared, as among root path priority vectors
    /// (17.6): `Less` is better.
    pub fn cmp_all(&self, other: &PriorityVector) -> Ordering {
        self.conveyed()
            .cmp(&other.conveyed())
            .then(self.bridge_port.cmp(&other.bridge_port))
    }

    /// 17.6: a message priority vector is superior to a port priority
    /// vector when it is better, or when it comes from the same
    /// designated bridge (address) and designated port (number), whose
    /// newer information replaces the older even when worse.
    pub fn superior(&self, port: &PriorityVector) -> bool {
        self.better(port)
            || (self.designated_bridge.address() == port.designated_bridge.address()
                && port_number(self.designated_port) == port_number(port.designated_port))
    }
}

/// Timer values carried in BPDUs (17.19 msgTimes, portTimes), in whole seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Times {
    pub message_age: u16,
    pub max_age: u16,
    pub forward_delay: u16,
    pub hello_time: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: MacAddr = MacAddr([0x02, 0xac, 0, 0, 0, 1]);

    #[test]
    fn bridge_id_parts_and_display() {
        let id = BridgeId::new(32768, MAC);
        assert_eq!(id.0, 0x8000_02ac_0000_0001);
        assert_eq!(id.priority(), 32768);
        assert_eq!(id.mac(), MAC);
        assert_eq!(id.to_string(), "8000.02ac00000001");
        assert_eq!(
            BridgeId::new(0, MacAddr([0xff; 6])).to_string(),
            "0000.ffffffffffff"
        );
        assert!(BridgeId::new(4096, MacAddr([0xff; 6])) < id);
    }

    #[test]
    fn port_identifiers() {
        assert_eq!(port_identifier(128, 1), 0x8001);
        assert_eq!(port_identifier(240, 0x0fff), 0xffff);
        assert_eq!(port_identifier(0, 0x1002), 0x0002);
        assert_eq!(port_number(0x8003), 3);
    }

    #[test]
    fn superior_and_same() {
        let a = BridgeId::new(32768, MAC);
        let b = BridgeId::new(32768, MacAddr([0x02, 0xac, 0, 0, 0, 2]));
        let v = |root, cost, bridge, port| PriorityVector {
            root_bridge: root,
            root_path_cost: cost,
            designated_bridge: bridge,
            designated_port: port,
            bridge_port: 0,
        };
        let port = v(a, 20000, b, 0x8002);
        assert!(v(a, 0, a, 0x8001).superior(&port));
        assert!(!v(b, 0, b, 0x8001).superior(&port));
        // Worse, but from the same designated port: it replaces.
        assert!(v(b, 0, b, 0x8002).superior(&port));
        // Same address, other priority, same port number: still the same port.
        assert!(v(b, 0, BridgeId::new(61440, b.mac()), 0x1002).superior(&port));
        assert!(port.same(&v(a, 20000, b, 0x8002)));
        assert!(port.better_or_same(&port));
        let mut other = port;
        other.bridge_port = 1;
        assert_eq!(port.cmp_all(&other), Ordering::Less);
        assert!(port.same(&other));
    }
}
