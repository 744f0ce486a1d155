//! IPv4 headers (RFC 791).

use super::Truncated;

/// The length of a header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

mod field {
    use std::ops::Range;

    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;

    // Within FLG_OFF: more fragments, and the fragment offset.
    pub const MF_OFFSET: u16 = 0x3fff;
}

/// A view of an IPv4 packet: its header and what follows.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// A view of a buffer that holds a header without options.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the header's fixed 20 bytes, which
    /// every accessor reads within. Whether the header length, the total
    /// length and the buffer agree is the caller's to check: what a
    /// mismatch means differs from use to use.
    pub fn check_len(&self) -> Result<(), Truncated> {
        Truncated::check(self.buffer.as_ref().len(), HEADER_LEN)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, range: std::ops::Range<usize>) -> u16 {
        super::be_u16(self.buffer.as_ref(), range)
    }

    /// The first byte: version and header length, as they are.
    #[inline]
    pub fn version_and_header_len(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL]
    }

    /// The version (4).
    #[inline]
    pub fn version(&self) -> u8 {
        self.version_and_header_len() >> 4
    }

    /// The header's length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.version_and_header_len() & 0x0f) * 4
    }

    /// The type of service byte (DSCP and ECN).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// The packet's length, header included.
    #[inline]
    pub fn total_len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// The identification of the datagram's fragments.
    #[inline]
    pub fn ident(&self) -> u16 {
        self.u16_at(field::IDENT)
    }

    /// Whether the packet is a fragment: more fragments follow, or it
    /// starts at an offset.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.u16_at(field::FLG_OFF) & field::MF_OFFSET != 0
    }

    /// The time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload (see `wire::ip`).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// The header checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        [b[0], b[1], b[2], b[3]]
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        [b[0], b[1], b[2], b[3]]
    }
}

/// Accessors whose bytes outlive the view.
impl<'a> Ipv4Packet<&'a [u8]> {
    /// Source and destination address, as they lie: the addresses of the
    /// pseudo-header TCP and UDP checksums cover.
    #[inline]
    pub fn addrs(&self) -> &'a [u8] {
        &self.buffer[field::SRC_ADDR.start..field::DST_ADDR.end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_u16_at(&mut self, range: std::ops::Range<usize>, value: u16) {
        self.buffer.as_mut()[range].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the packet's length, header included.
    #[inline]
    pub fn set_total_len(&mut self, value: u16) {
        self.set_u16_at(field::LENGTH, value);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, value: u16) {
        self.set_u16_at(field::IDENT, value);
    }

    /// Sets the header checksum.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.set_u16_at(field::CHECKSUM, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP packet's header: 20 bytes, no options, total length 40,
    /// id 0x1234, don't fragment, TTL 64, 198.18.0.1 to 198.18.0.2.
    static HEADER: [u8; 22] = [
        0x45, 0x10, 0x00, 0x28, // version 4, IHL 5, TOS 0x10, length 40
        0x12, 0x34, 0x40, 0x00, // id, DF
        0x40, 0x06, 0xab, 0xcd, // TTL 64, TCP, checksum
        198, 18, 0, 1, // source
        198, 18, 0, 2, // destination
        0x04, 0xd2, // payload
    ];

    #[test]
    fn fields_read_back() {
        let packet = Ipv4Packet::new_checked(&HEADER[..]).unwrap();
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.version_and_header_len(), 0x45);
        assert_eq!(packet.header_len(), 20);
        assert_eq!(packet.tos(), 0x10);
        assert_eq!(packet.total_len(), 40);
        assert_eq!(packet.ident(), 0x1234);
        assert!(!packet.is_fragment(), "don't fragment is no fragment");
        assert_eq!(packet.ttl(), 64);
        assert_eq!(packet.protocol(), super::super::ip::TCP);
        assert_eq!(packet.checksum(), 0xabcd);
        assert_eq!(packet.src_addr(), [198, 18, 0, 1]);
        assert_eq!(packet.dst_addr(), [198, 18, 0, 2]);
        assert_eq!(packet.addrs(), &HEADER[12..20]);
    }

    #[test]
    fn fragments_are_told_apart() {
        for (flags, fragment) in [
            ([0x40, 0x00], false),
            ([0x20, 0x00], true),
            ([0x00, 0x01], true),
            ([0x1f, 0xff], true),
            ([0x80, 0x00], false),
        ] {
            let mut bytes = HEADER;
            bytes[6..8].copy_from_slice(&flags);
            let packet = Ipv4Packet::new_unchecked(&bytes[..]);
            assert_eq!(packet.is_fragment(), fragment, "{flags:02x?}");
        }
    }

    #[test]
    fn short_headers_are_rejected() {
        assert_eq!(
            Ipv4Packet::new_checked(&HEADER[..19]).unwrap_err(),
            Truncated {
                len: 19,
                needed: 20
            }
        );
        assert!(Ipv4Packet::new_checked(&HEADER[..20]).is_ok());
    }

    #[test]
    fn setters_write_the_fields() {
        let mut bytes = HEADER;
        let mut packet = Ipv4Packet::new_unchecked(&mut bytes[..]);
        packet.set_total_len(0x0102);
        packet.set_ident(0x0304);
        packet.set_checksum(0x0506);
        assert_eq!(
            &bytes[..12],
            &[0x45, 0x10, 1, 2, 3, 4, 0x40, 0, 0x40, 6, 5, 6]
        );
        assert_eq!(&bytes[12..], &HEADER[12..]);
    }
}
