//! 802.1Q VLAN filtering with the semantics of the Linux bridge with
//! `vlan_filtering 1` (net/bridge/br_vlan.c): every port is a member of a
//! set of VLANs, untagged frames take the port's PVID, a frame enters only
//! through and leaves only through member ports, and leaves tagged or
//! untagged as the egress port says.
//!
//! Membership is a 4096-bit set per port, so the per-frame checks are a
//! shift and a mask. Here are the ports' VLANs; the rules that admit a
//! frame and choose its form on the way out are stages of the forwarding
//! pipeline (`forward/vlan.rs`).

use std::fmt;

use crate::wire::VlanId;

/// How a frame leaves one port: as it came in, untagged, or with an outer
/// tag (added, or its VLAN id set); `wire::tag::Cut` cuts a frame so.
pub use crate::wire::tag::TagForm as Egress;
pub use crate::wire::tag::{outer_tag, Tag, TAG_LEN};

/// The highest usable VLAN id (4095 is reserved, 0 means untagged).
pub const MAX_VID: VlanId = 4094;

/// A set of VLAN ids, one bit each.
#[derive(Clone, PartialEq, Eq)]
pub struct VlanSet {
    bits: Box<[u64; 64]>,
}

impl Default for VlanSet {
    fn default() -> Self {
        VlanSet {
            bits: Box::new([0; 64]),
        }
    }
}

impl VlanSet {
    /// The empty set.
    pub fn new() -> VlanSet {
        VlanSet::default()
    }

    /// Adds `vid`.
    pub fn insert(&mut self, vid: VlanId) {
        let vid = usize::from(vid & 0x0fff);
        self.bits[vid / 64] |= 1 << (vid % 64);
    }

    /// Whether `vid` is in the set.
    #[inline]
    pub fn contains(&self, vid: VlanId) -> bool {
        let vid = usize::from(vid & 0x0fff);
        self.bits[vid / 64] & (1 << (vid % 64)) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|&word| word == 0)
    }

    /// The ids in the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = VlanId> + '_ {
        (1..=MAX_VID).filter(|&vid| self.contains(vid))
    }

    /// Parses a list such as `10,20,100-110` (ids 1 to 4094).
    pub fn parse(list: &str) -> Result<VlanSet, String> {
        let mut set = VlanSet::new();
        for item in list.split(',') {
            let (first, last) = match item.split_once('-') {
                Some((a, b)) => (parse_vid(a)?, parse_vid(b)?),
                None => {
                    let vid = parse_vid(item)?;
                    (vid, vid)
                }
            };
            if first > last {
                return Err(format!("VLAN range {item} runs backwards"));
            }
            (first..=last).for_each(|vid| set.insert(vid));
        }
        Ok(set)
    }
}

impl fmt::Debug for VlanSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VlanSet({self})")
    }
}

/// Writes the set as ranges: `10,20,100-110`.
impl fmt::Display for VlanSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut ids = self.iter().peekable();
        while let Some(start) = ids.next() {
            let mut end = start;
            while ids.peek() == Some(&(end + 1)) {
                end = ids.next().expect("peeked");
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

/// Parses one VLAN id (1 to 4094).
pub fn parse_vid(text: &str) -> Result<VlanId, String> {
    match text.trim().parse::<u16>() {
        Ok(vid) if (1..=MAX_VID).contains(&vid) => Ok(vid),
        _ => Err(format!("invalid VLAN id '{text}' (1 to {MAX_VID})")),
    }
}

/// The VLAN of a MAC table entry as an operator names one (`fdb add ...
/// vlan VID`, a static entry's `vlan`, a request's `"vlan"`): 0, the
/// entries of untagged frames and of a bridge without VLAN filtering, to
/// [`MAX_VID`]. A port's own VLANs are 1 to 4094 ([`parse_vid`]); frames
/// carry a plain [`VlanId`], and the table keys on one ([`FdbVlan::get`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FdbVlan(VlanId);

/// A number or text that is not a VLAN of the MAC table (0 to 4094): the
/// value as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid vlan '{0}' (0 to {max})", max = MAX_VID)]
pub struct FdbVlanError(pub String);

impl FdbVlan {
    /// VLAN 0: untagged frames, or a bridge without VLAN filtering.
    pub const UNTAGGED: FdbVlan = FdbVlan(0);

    /// `vid`, when it is 0 to [`MAX_VID`].
    pub const fn new(vid: VlanId) -> Option<FdbVlan> {
        if vid <= MAX_VID {
            Some(FdbVlan(vid))
        } else {
            None
        }
    }

    /// The VLAN id.
    pub const fn get(self) -> VlanId {
        self.0
    }
}

impl TryFrom<u16> for FdbVlan {
    type Error = FdbVlanError;

    fn try_from(vid: u16) -> Result<Self, Self::Error> {
        FdbVlan::new(vid).ok_or_else(|| FdbVlanError(vid.to_string()))
    }
}

impl From<FdbVlan> for VlanId {
    fn from(vlan: FdbVlan) -> VlanId {
        vlan.0
    }
}

impl std::str::FromStr for FdbVlan {
    type Err = FdbVlanError;

    /// A decimal number, 0 to 4094; the error quotes `text` as written.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse::<u16>()
            .ok()
            .and_then(FdbVlan::new)
            .ok_or_else(|| FdbVlanError(text.to_owned()))
    }
}

impl fmt::Display for FdbVlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A number on the wire (`"vlan": 10`); any other integer, negative or too
/// large for a `u16` too, is refused with [`FdbVlanError`]'s text.
#[cfg(feature = "serde")]
mod fdb_vlan_serde {
    use super::{FdbVlan, FdbVlanError};
    use std::fmt;

    impl serde::Serialize for FdbVlan {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_u16(self.0)
        }
    }

    impl<'de> serde::Deserialize<'de> for FdbVlan {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visitor;

            impl serde::de::Visitor<'_> for Visitor {
                type Value = FdbVlan;

                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a VLAN id, 0 to 4094")
                }

                fn visit_u64<E: serde::de::Error>(self, vid: u64) -> Result<FdbVlan, E> {
                    u16::try_from(vid)
                        .ok()
                        .and_then(FdbVlan::new)
                        .ok_or_else(|| E::custom(FdbVlanError(vid.to_string())))
                }

                fn visit_i64<E: serde::de::Error>(self, vid: i64) -> Result<FdbVlan, E> {
                    u16::try_from(vid)
                        .ok()
                        .and_then(FdbVlan::new)
                        .ok_or_else(|| E::custom(FdbVlanError(vid.to_string())))
                }
            }

            deserializer.deserialize_u16(Visitor)
        }
    }
}

/// A port's VLANs: which it is a member of, which of them leave it
/// untagged, and which VLAN its untagged frames belong to (the PVID).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortVlans {
    members: VlanSet,
    untagged: VlanSet,
    pvid: Option<VlanId>,
}

impl Default for PortVlans {
    /// What the Linux bridge gives a new port: VLAN 1, PVID, untagged
    /// (`default_pvid 1`).
    fn default() -> Self {
        PortVlans::access(1)
    }
}

impl PortVlans {
    /// An access port: untagged in and out, in VLAN `vid`.
    pub fn access(vid: VlanId) -> PortVlans {
        let mut members = VlanSet::new();
        members.insert(vid);
        PortVlans {
            untagged: members.clone(),
            members,
            pvid: Some(vid),
        }
    }

    /// A trunk: tagged in and out for the VLANs in `tagged`; with a native
    /// VLAN, untagged frames belong to it and its frames leave untagged.
    pub fn trunk(tagged: VlanSet, native: Option<VlanId>) -> PortVlans {
        let mut members = tagged;
        let mut untagged = VlanSet::new();
        if let Some(vid) = native {
            members.insert(vid);
            untagged.insert(vid);
        }
        PortVlans {
            members,
            untagged,
            pvid: native,
        }
    }

    /// Whether the port is a member of `vid`.
    #[inline]
    pub fn is_member(&self, vid: VlanId) -> bool {
        self.members.contains(vid)
    }

    /// Whether frames of `vid` leave the port untagged.
    #[inline]
    pub fn is_untagged(&self, vid: VlanId) -> bool {
        self.untagged.contains(vid)
    }

    /// The VLAN of the port's untagged frames, if it takes any.
    pub fn pvid(&self) -> Option<VlanId> {
        self.pvid
    }

    /// The VLANs the port is a member of.
    pub fn members(&self) -> &VlanSet {
        &self.members
    }

    /// The VLANs that leave the port tagged.
    pub fn tagged(&self) -> VlanSet {
        let mut set = VlanSet::new();
        self.members
            .iter()
            .filter(|&vid| !self.untagged.contains(vid))
            .for_each(|vid| set.insert(vid));
        set
    }
}

/// Writes the port's options as `--port` takes them: `access=10`,
/// `trunk=10,20`, `trunk=10,20,native=30`.
impl fmt::Display for PortVlans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tagged = self.tagged();
        match self.pvid {
            Some(vid) if tagged.is_empty() => write!(f, "access={vid}"),
            Some(vid) => write!(f, "trunk={tagged},native={vid}"),
            None => write!(f, "trunk={tagged}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_as_ranges() {
        let set = VlanSet::parse("10,20,100-110,4094").unwrap();
        assert!(set.contains(10) && set.contains(105) && set.contains(4094));
        assert!(!set.contains(11) && !set.contains(0));
        assert_eq!(set.to_string(), "10,20,100-110,4094");
        for bad in ["0", "4095", "x", "10-5", "", "1,,2", "-3"] {
            assert!(VlanSet::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn port_options_print_as_given() {
        assert_eq!(PortVlans::access(10).to_string(), "access=10");
        let trunk = VlanSet::parse("10,20").unwrap();
        assert_eq!(
            PortVlans::trunk(trunk.clone(), None).to_string(),
            "trunk=10,20"
        );
        assert_eq!(
            PortVlans::trunk(trunk, Some(30)).to_string(),
            "trunk=10,20,native=30"
        );
        assert_eq!(PortVlans::default(), PortVlans::access(1));
    }

    #[test]
    fn fdb_vlans_are_0_to_4094() {
        for vid in [0, 1, 4094] {
            let vlan = FdbVlan::try_from(vid).unwrap();
            assert_eq!(vlan.get(), vid);
            assert_eq!(VlanId::from(vlan), vid);
            assert_eq!(vlan.to_string(), vid.to_string());
            assert_eq!(vid.to_string().parse::<FdbVlan>(), Ok(vlan));
        }
        assert_eq!(FdbVlan::default(), FdbVlan::UNTAGGED);
        assert_eq!(FdbVlan::UNTAGGED.get(), 0);
        for vid in [4095, 5000, u16::MAX] {
            assert_eq!(FdbVlan::new(vid), None);
            assert_eq!(
                FdbVlan::try_from(vid).unwrap_err().to_string(),
                format!("invalid vlan '{vid}' (0 to 4094)")
            );
        }
        for text in ["4095", "5000", "-1", "x", "", "65536", " 5"] {
            assert_eq!(
                text.parse::<FdbVlan>().unwrap_err().to_string(),
                format!("invalid vlan '{text}' (0 to 4094)")
            );
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn fdb_vlans_deserialise_from_numbers_only() {
        use serde::de::value::Error;
        use serde::de::IntoDeserializer;
        use serde::Deserialize;
        let from_u64 = |vid: u64| FdbVlan::deserialize(vid.into_deserializer());
        let from_i64 = |vid: i64| FdbVlan::deserialize(vid.into_deserializer());
        assert_eq!(from_u64(0), Ok(FdbVlan::UNTAGGED));
        assert_eq!(from_u64(4094), Ok(FdbVlan(4094)));
        assert_eq!(from_i64(10), Ok(FdbVlan(10)));
        for (result, text) in [
            (from_u64(4095), "4095"),
            (from_u64(70000), "70000"),
            (from_i64(-1), "-1"),
        ] {
            let error: Error = result.unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("invalid vlan '{text}' (0 to 4094)")
            );
        }
        let error: Error = FdbVlan::deserialize("10".into_deserializer()).unwrap_err();
        assert!(error.to_string().contains("0 to 4094"), "{error}");
    }
}
