//! The VXLAN header (RFC 7348): eight bytes in front of the inner Ethernet
//! frame, in a UDP datagram to port 4789.
//!
//! ```text
//! |R|R|R|R|I|R|R|R|            Reserved (24 bits)                 |
//! |            VXLAN Network Identifier (VNI)     |   Reserved    |
//! ```
//!
//! As the Linux vxlan device does (with no extensions configured), a
//! datagram is refused when the I flag is clear or any reserved bit is set.

/// The header's length.
pub const HEADER_LEN: usize = 8;

/// The IANA port.
pub const DEFAULT_PORT: u16 = 4789;

/// The "VNI is valid" flag, the only one defined.
const FLAG_I: u8 = 0x08;

/// A 24-bit VXLAN network identifier.
pub type Vni = u32;

/// The largest VNI.
pub const MAX_VNI: Vni = (1 << 24) - 1;

/// One of a VXLAN port's tunnel endpoints, as the fdb and the workers
/// carry it: a small handle that the port maps to the VTEP's address, so
/// that an fdb entry of any port stays small and a lookup returns it in a
/// register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Vtep(std::num::NonZeroU16);

impl Vtep {
    /// The most VTEPs one port names.
    pub const MAX: usize = u16::MAX as usize;

    /// The handle of the port's `index`th VTEP (from 0), if below
    /// [`MAX`](Self::MAX).
    pub fn from_index(index: usize) -> Option<Vtep> {
        u16::try_from(index + 1)
            .ok()
            .and_then(std::num::NonZeroU16::new)
            .map(Vtep)
    }

    /// Its place in the port's list, from 0.
    pub fn index(self) -> usize {
        usize::from(self.0.get()) - 1
    }
}

/// Why a datagram is not a VXLAN frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VxlanError {
    /// Shorter than the header and an Ethernet header.
    #[error("shorter than a VXLAN header and an Ethernet header")]
    Short,
    /// The I flag is clear.
    #[error("the I flag is clear")]
    NoVni,
    /// A reserved bit is set.
    #[error("a reserved bit is set")]
    Reserved,
}

impl VxlanError {
    /// A short name for counters.
    pub const fn name(self) -> &'static str {
        match self {
            VxlanError::Short => "short",
            VxlanError::NoVni => "flags",
            VxlanError::Reserved => "reserved",
        }
    }
}

/// The VNI and the inner frame of a datagram.
pub fn parse(datagram: &[u8]) -> Result<(Vni, &[u8]), VxlanError> {
    if datagram.len() < HEADER_LEN + 14 {
        return Err(VxlanError::Short);
    }
    let h = &datagram[..HEADER_LEN];
    if h[0] & FLAG_I == 0 {
        return Err(VxlanError::NoVni);
    }
    if h[0] & !FLAG_I != 0 || h[1..4] != [0, 0, 0] || h[7] != 0 {
        return Err(VxlanError::Reserved);
    }
    let vni = u32::from_be_bytes([0, h[4], h[5], h[6]]);
    Ok((vni, &datagram[HEADER_LEN..]))
}

/// The header for `vni`.
pub fn header(vni: Vni) -> [u8; HEADER_LEN] {
    let v = (vni & MAX_VNI).to_be_bytes();
    [FLAG_I, 0, 0, 0, v[1], v[2], v[3], 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(header: [u8; 8]) -> Vec<u8> {
        let mut d = header.to_vec();
        d.extend_from_slice(&[0xab; 14]);
        d
    }

    #[test]
    fn headers_round_trip() {
        for vni in [0, 1, 42, 0x12_3456, MAX_VNI] {
            let d = datagram(header(vni));
            assert_eq!(parse(&d), Ok((vni, &[0xab; 14][..])));
        }
        assert_eq!(header(42), [0x08, 0, 0, 0, 0, 0, 42, 0]);
    }

    #[test]
    fn bad_headers_are_refused() {
        assert_eq!(parse(&[0x08; 21]), Err(VxlanError::Short));
        assert_eq!(
            parse(&datagram([0, 0, 0, 0, 0, 0, 1, 0])),
            Err(VxlanError::NoVni)
        );
        for bad in [
            [0x0c, 0, 0, 0, 0, 0, 1, 0],
            [0x08, 0, 1, 0, 0, 0, 1, 0],
            [0x08, 0, 0, 0, 0, 0, 1, 1],
            [0x88, 0, 0, 0, 0, 0, 1, 0],
        ] {
            assert_eq!(parse(&datagram(bad)), Err(VxlanError::Reserved), "{bad:?}");
        }
    }
}
