//! IPv6 headers (RFC 8200), without extension headers.

use super::Truncated;

/// The length of the fixed header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

mod field {
    use std::ops::Range;

    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// A view of an IPv6 packet: its fixed header and what follows.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// A view of a buffer that holds the fixed header.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the 40-byte fixed header, which every
    /// accessor reads within. Whether the payload length and the buffer
    /// agree is the caller's to check.
    pub fn check_len(&self) -> Result<(), Truncated> {
        Truncated::check(self.buffer.as_ref().len(), HEADER_LEN)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version (6).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW.start] >> 4
    }

    /// The length of what follows the fixed header.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// The protocol of the next header (see `wire::ip`).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// The hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
}

/// Accessors whose bytes outlive the view.
impl<'a> Ipv6Packet<&'a [u8]> {
    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> &'a [u8] {
        &self.buffer[field::SRC_ADDR]
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> &'a [u8] {
        &self.buffer[field::DST_ADDR]
    }

    /// Source and destination address, as they lie: the addresses of the
    /// pseudo-header TCP and UDP checksums cover.
    #[inline]
    pub fn addrs(&self) -> &'a [u8] {
        &self.buffer[field::SRC_ADDR.start..field::DST_ADDR.end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the length of what follows the fixed header.
    #[inline]
    pub fn set_payload_len(&mut self, value: u16) {
        self.buffer.as_mut()[field::PAYLOAD_LEN].copy_from_slice(&value.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP packet's header: 20 bytes of payload, hop limit 64,
    /// 2001:db8::1 to 2001:db8::2.
    static HEADER: [u8; 42] = [
        0x60, 0x01, 0x23, 0x45, // version 6, class 0, flow 0x12345
        0x00, 0x14, 0x06, 0x40, // payload 20, TCP, hop limit 64
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // source
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // destination
        0x04, 0xd2, // payload
    ];

    #[test]
    fn fields_read_back() {
        let packet = Ipv6Packet::new_checked(&HEADER[..]).unwrap();
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.payload_len(), 20);
        assert_eq!(packet.next_header(), super::super::ip::TCP);
        assert_eq!(packet.hop_limit(), 64);
        assert_eq!(packet.src_addr(), &HEADER[8..24]);
        assert_eq!(packet.dst_addr()[15], 2);
        assert_eq!(packet.addrs(), &HEADER[8..40]);
    }

    #[test]
    fn short_headers_are_rejected() {
        assert_eq!(
            Ipv6Packet::new_checked(&HEADER[..39]).unwrap_err(),
            Truncated {
                len: 39,
                needed: 40
            }
        );
        assert!(Ipv6Packet::new_checked(&HEADER[..40]).is_ok());
    }

    #[test]
    fn setters_write_the_fields() {
        let mut bytes = HEADER;
        Ipv6Packet::new_unchecked(&mut bytes[..]).set_payload_len(0x0102);
        assert_eq!(&bytes[4..6], &[1, 2]);
        assert_eq!(&bytes[6..], &HEADER[6..]);
    }
}
