//! Zero-copy views over Ethernet frames, the VLAN tags, IPv4, IPv6 and
//! TCP headers inside them, and the virtio-net header that real ports put
//! before them.
//!
//! A view such as [`EthernetFrame`] wraps any `T: AsRef<[u8]>` without
//! copying it. Build one with `new_checked`, which checks the length once;
//! after that no accessor panics. `new_unchecked` skips the check for
//! callers that have done it. Getters need `AsRef<[u8]>`, setters
//! `AsMut<[u8]>`. Byte ranges live in a private `field` module per format.

mod build;
pub mod checksum;
mod ethernet;
mod flow;
pub mod igmp;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
mod mac;
pub mod mld;
pub mod segment;
pub mod tag;
pub mod tcp;
pub mod udp;
pub mod vnet;
pub mod vxlan;

pub use build::{FrameSpec, Payload};
pub use ethernet::{EtherType, EthernetFrame, VlanId};
pub use flow::flow_hash;
pub use ipv4::Ipv4Packet;
pub use ipv6::Ipv6Packet;
pub use mac::{MacAddr, MacKind, ParseMacError, StationMac, StationMacError};
pub use tag::{Tag, VlanTag};
pub use tcp::TcpPacket;
pub use vnet::VnetHeader;

/// A frame too short for the headers it claims to carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame truncated: {len} bytes, header needs {needed}")]
pub struct Truncated {
    /// The frame's length.
    pub len: usize,
    /// The length its headers need.
    pub needed: usize,
}

impl Truncated {
    /// Whether a buffer of `len` bytes holds the `needed` a header takes:
    /// every view's length check.
    pub(crate) fn check(len: usize, needed: usize) -> Result<(), Truncated> {
        match len < needed {
            true => Err(Truncated { len, needed }),
            false => Ok(()),
        }
    }
}

/// The big-endian (network order) `u16` at `at` of `bytes`.
#[inline]
pub(crate) fn be_u16(bytes: &[u8], at: std::ops::Range<usize>) -> u16 {
    let b = &bytes[at];
    u16::from_be_bytes([b[0], b[1]])
}

/// The big-endian `u32` at `at` of `bytes`.
#[inline]
pub(crate) fn be_u32(bytes: &[u8], at: std::ops::Range<usize>) -> u32 {
    let b = &bytes[at];
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
