//! MAC addresses and their kinds.

use std::fmt;
use std::str::FromStr;

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

/// What a destination or source address is, for forwarding purposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacKind {
    /// 00:00:00:00:00:00, never a valid station.
    Zero,
    /// An individual station.
    Unicast,
    /// ff:ff:ff:ff:ff:ff.
    Broadcast,
    /// 01:80:C2:00:00:00 to 0F: IEEE 802.1D link-local protocols (STP, LACP,
    /// 802.1X, LLDP...), which a bridge consumes and never forwards.
    Reserved,
    /// Any other group address.
    Multicast,
}

impl MacAddr {
    /// The broadcast address.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// The all-zero address.
    pub const ZERO: MacAddr = MacAddr([0; 6]);
    /// The Bridge Group Address, 01:80:C2:00:00:00, that spanning tree's
    /// BPDUs go to (IEEE 802.1D-2004 table 7-10).
    pub const BRIDGE_GROUP: MacAddr = MacAddr([0x01, 0x80, 0xc2, 0, 0, 0]);

    /// The address in the first six bytes of `bytes`.
    ///
    /// # Panics
    /// When `bytes` is shorter than six bytes.
    pub fn from_bytes(bytes: &[u8]) -> MacAddr {
        let mut mac = [0; 6];
        mac.copy_from_slice(&bytes[..6]);
        MacAddr(mac)
    }

    /// The address's six bytes.
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether the group (I/G) bit is set: multicast, broadcast or reserved.
    pub const fn is_group(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether this is ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Whether this is 00:00:00:00:00:00.
    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }

    /// Whether this is one of 01:80:C2:00:00:00 to 01:80:C2:00:00:0F.
    pub fn is_reserved(&self) -> bool {
        self.0[..5] == [0x01, 0x80, 0xc2, 0x00, 0x00] && self.0[5] & 0xf0 == 0
    }

    /// X of a link-local group 01:80:C2:00:00:0X (802.1D's reserved
    /// addresses), the bit a bridge's group forward mask names it by.
    pub fn link_local_group(&self) -> Option<u8> {
        self.is_reserved().then_some(self.0[5])
    }

    /// Whether a frame from this address may be learned and forwarded: an
    /// individual, non-zero address.
    pub fn is_valid_source(&self) -> bool {
        !self.is_group() && !self.is_zero()
    }

    /// Classifies the address.
    pub fn kind(&self) -> MacKind {
        if !self.is_group() {
            if self.is_zero() {
                MacKind::Zero
            } else {
                MacKind::Unicast
            }
        } else if self.is_broadcast() {
            MacKind::Broadcast
        } else if self.is_reserved() {
            MacKind::Reserved
        } else {
            MacKind::Multicast
        }
    }

    /// The address as one integer, for packing into hash keys.
    pub const fn to_u64(&self) -> u64 {
        let b = self.0;
        u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A string that is not six colon-separated hexadecimal bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address '{0}' (expected six hex bytes like 02:00:00:00:00:01)")]
pub struct ParseMacError(pub String);

impl FromStr for MacAddr {
    type Err = ParseMacError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseMacError(s.to_owned());
        let mut mac = [0u8; 6];
        let mut parts = s.split(':');
        for byte in &mut mac {
            let part = parts.next().ok_or_else(err)?;
            // from_str_radix alone would take a sign ("+1").
            if part.is_empty() || part.len() > 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(mac))
    }
}

/// The address of a station, as an operator names one in a static entry or
/// a request about the MAC table: an individual (unicast), non-zero
/// address, what [`MacAddr::kind`] calls [`MacKind::Unicast`]. The command
/// line, the configuration file and the control protocol all take this
/// type, so the rule is written here once; the table itself keys on the
/// plain [`MacAddr`] ([`StationMac::get`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StationMac(MacAddr);

/// Why a text or an address is not a [`StationMac`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StationMacError {
    /// Not six colon-separated hexadecimal bytes.
    #[error("invalid MAC address '{0}'")]
    Invalid(String),
    /// A group (multicast or broadcast) address, or the zero address.
    #[error("'{0}' is not a station's (unicast) address")]
    NotStation(String),
}

impl StationMac {
    /// `mac`, when it is a station's address.
    pub fn new(mac: MacAddr) -> Option<StationMac> {
        (mac.kind() == MacKind::Unicast).then_some(StationMac(mac))
    }

    /// The address.
    pub const fn get(self) -> MacAddr {
        self.0
    }
}

impl TryFrom<MacAddr> for StationMac {
    type Error = StationMacError;

    fn try_from(mac: MacAddr) -> Result<Self, Self::Error> {
        StationMac::new(mac).ok_or_else(|| StationMacError::NotStation(mac.to_string()))
    }
}

impl From<StationMac> for MacAddr {
    fn from(station: StationMac) -> MacAddr {
        station.0
    }
}

impl FromStr for StationMac {
    type Err = StationMacError;

    /// Parses `02:00:00:00:00:01`; the errors quote `s` as written.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mac: MacAddr = s
            .parse()
            .map_err(|_| StationMacError::Invalid(s.to_owned()))?;
        StationMac::new(mac).ok_or_else(|| StationMacError::NotStation(s.to_owned()))
    }
}

/// As [`MacAddr`] writes it: lower-case `02:ab:00:00:00:01`.
impl fmt::Display for StationMac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A string on the wire (`"02:00:00:00:00:01"`); one that is not a
/// station's address is refused with [`StationMacError`]'s text.
#[cfg(feature = "serde")]
mod station_serde {
    use super::StationMac;
    use std::fmt;

    impl serde::Serialize for StationMac {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_str(self)
        }
    }

    impl<'de> serde::Deserialize<'de> for StationMac {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visitor;

            impl serde::de::Visitor<'_> for Visitor {
                type Value = StationMac;

                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a station's MAC address like \"02:00:00:00:00:01\"")
                }

                fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<StationMac, E> {
                    text.parse().map_err(E::custom)
                }
            }

            deserializer.deserialize_str(Visitor)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(s: &str) -> MacAddr {
        s.parse().unwrap()
    }

    #[test]
    fn signs_are_not_hex_digits() {
        for text in [
            "02:+1:00:00:00:01",
            "02:-1:00:00:00:01",
            "+2:00:00:00:00:01",
        ] {
            assert!(text.parse::<MacAddr>().is_err(), "{text}");
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(mac("00:00:00:00:00:00").kind(), MacKind::Zero);
        assert_eq!(mac("02:00:00:00:00:01").kind(), MacKind::Unicast);
        assert_eq!(mac("ff:ff:ff:ff:ff:ff").kind(), MacKind::Broadcast);
        assert_eq!(mac("01:80:c2:00:00:00").kind(), MacKind::Reserved);
        assert_eq!(mac("01:80:c2:00:00:0f").kind(), MacKind::Reserved);
        assert_eq!(mac("01:80:c2:00:00:0e").link_local_group(), Some(14));
        assert_eq!(mac("01:80:c2:00:00:00").link_local_group(), Some(0));
        assert_eq!(mac("01:80:c2:00:00:10").link_local_group(), None);
        assert_eq!(mac("01:80:c2:00:00:10").kind(), MacKind::Multicast);
        assert_eq!(mac("01:00:5e:00:00:01").kind(), MacKind::Multicast);
        assert_eq!(mac("33:33:00:00:00:01").kind(), MacKind::Multicast);
    }

    #[test]
    fn valid_sources() {
        assert!(mac("02:00:00:00:00:01").is_valid_source());
        assert!(!mac("00:00:00:00:00:00").is_valid_source());
        assert!(!mac("ff:ff:ff:ff:ff:ff").is_valid_source());
        assert!(!mac("01:00:5e:00:00:01").is_valid_source());
    }

    #[test]
    fn parse_and_display_round_trip() {
        let m = mac("02:ab:0c:00:ff:01");
        assert_eq!(m.to_string(), "02:ab:0c:00:ff:01");
        assert_eq!(m.to_u64(), 0x02ab_0c00_ff01);
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
            "zz:00:00:00:00:00",
            "002:0:0:0:0:0",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn station_addresses_are_unicast_and_not_zero() {
        let station: StationMac = "02:AB:00:00:00:01".parse().unwrap();
        assert_eq!(station.get(), mac("02:ab:00:00:00:01"));
        assert_eq!(station.to_string(), "02:ab:00:00:00:01");
        assert_eq!(MacAddr::from(station), station.get());
        assert_eq!(StationMac::try_from(station.get()), Ok(station));
        for group in [
            "ff:ff:ff:ff:ff:ff",
            "01:00:5e:00:00:01",
            "33:33:00:00:00:01",
            "01:80:c2:00:00:00",
            "00:00:00:00:00:00",
        ] {
            assert_eq!(
                group.parse::<StationMac>().unwrap_err().to_string(),
                format!("'{group}' is not a station's (unicast) address")
            );
            assert!(StationMac::new(mac(group)).is_none(), "{group}");
            assert_eq!(
                StationMac::try_from(mac(group)),
                Err(StationMacError::NotStation(group.to_owned()))
            );
        }
        assert_eq!(
            "02:zz:00:00:00:01"
                .parse::<StationMac>()
                .unwrap_err()
                .to_string(),
            "invalid MAC address '02:zz:00:00:00:01'"
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn station_addresses_deserialise_from_strings() {
        use serde::de::value::Error;
        use serde::de::IntoDeserializer;
        use serde::Deserialize;
        let from = |text: &str| StationMac::deserialize(text.into_deserializer());
        assert_eq!(
            from("02:00:00:00:00:01"),
            Ok(StationMac(mac("02:00:00:00:00:01")))
        );
        let refused: Error = from("ff:ff:ff:ff:ff:ff").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "'ff:ff:ff:ff:ff:ff' is not a station's (unicast) address"
        );
        let invalid: Error = from("02:zz:00:00:00:01").unwrap_err();
        assert_eq!(
            invalid.to_string(),
            "invalid MAC address '02:zz:00:00:00:01'"
        );
        let number: Error = StationMac::deserialize(5u64.into_deserializer()).unwrap_err();
        assert!(
            number.to_string().contains("station's MAC address"),
            "{number}"
        );
    }
}
