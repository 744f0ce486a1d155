//! UDP headers (RFC 768): what mpbridge needs of them, where the checksum
//! lies and what a zero there means.

/// The header's length.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// Where the checksum lies from the header's start: a virtio-net header's
/// `csum_offset` for UDP.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

/// A checksum of zero means none was computed (over IPv4; IPv6 requires
/// one): a computed checksum of zero is sent as all ones.
pub const NO_CHECKSUM: u16 = 0;

mod field {
    use std::ops::Range;

    pub const CHECKSUM: Range<usize> = 6..8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_ends_the_header() {
        // Source port, destination port, length, checksum.
        static HEADER: [u8; 8] = [0x30, 0x39, 0x12, 0xb5, 0x00, 0x10, 0xab, 0xcd];
        assert_eq!(HEADER_LEN, HEADER.len());
        assert_eq!(&HEADER[CHECKSUM_OFFSET..], &[0xab, 0xcd]);
    }
}
