//! The internet checksum (RFC 1071) that IPv4 headers, IGMP and ICMPv6
//! carry, and the IPv6 pseudo-header ICMPv6 adds to it (RFC 8200 8.1).
//!
//! A message whose checksum field holds the right value sums, field
//! included, to a checksum of zero: that is how these functions verify.

/// The ones' complement sum of `data` as big-endian 16-bit words (an odd
/// last byte padded with zero), added to `initial` and folded to 16 bits.
pub fn sum(data: &[u8], initial: u32) -> u16 {
    let mut words = data.chunks_exact(2);
    // 64 bits hold the sum of any slice's words: no carry is lost before
    // the fold.
    let mut total = u64::from(initial);
    for word in &mut words {
        total += u64::from(u16::from_be_bytes([word[0], word[1]]));
    }
    if let [last] = words.remainder() {
        total += u64::from(*last) << 8;
    }
    while total > 0xffff {
        total = (total & 0xffff) + (total >> 16);
    }
    total as u16
}

/// The checksum of `data`: the ones' complement of its sum. Zero when
/// `data` holds a correct checksum.
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data, 0)
}

/// The sum of the IPv6 pseudo-header for an upper-layer message of `len`
/// bytes of protocol `next_header` from `src` to `dst`.
pub fn pseudo_header_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, len: u32) -> u32 {
    let addrs = u32::from(sum(src, 0)) + u32::from(sum(dst, 0));
    addrs + (len >> 16) + (len & 0xffff) + u32::from(next_header)
}

/// The checksum of `data`, an upper-layer message (ICMPv6, say) of
/// protocol `next_header` from `src` to `dst`, pseudo-header included.
/// Zero when `data` holds a correct checksum.
pub fn checksum_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, data: &[u8]) -> u16 {
    // An IPv6 payload is at most 64 KiB without a jumbogram, which the
    // snooping path refuses; the length saturates rather than wraps.
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    !sum(data, pseudo_header_v6(src, dst, next_header, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data, 0), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_lengths_pad_with_zero() {
        assert_eq!(sum(&[0x12], 0), 0x1200);
        assert_eq!(sum(&[0x12, 0x34, 0x56], 0), 0x1234 + 0x5600);
    }

    #[test]
    fn an_ipv4_header_verifies() {
        // A header whose checksum (0xb861) is correct.
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&header), 0);
        let mut zeroed = header;
        zeroed[10..12].fill(0);
        assert_eq!(checksum(&zeroed), 0xb861);
    }

    #[test]
    fn carries_fold_back() {
        let data = [0xff; 1000];
        assert_eq!(sum(&data, 0), 0xffff);
        assert_eq!(sum(&[0xff, 0xff], 0xffff_ffff), 0xffff);
    }

    #[test]
    fn the_pseudo_header_counts() {
        let src = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut message = [130, 0, 0, 0, 0x27, 0x10, 0, 0];
        let value = checksum_v6(&src, &dst, 58, &message);
        message[2..4].copy_from_slice(&value.to_be_bytes());
        assert_eq!(checksum_v6(&src, &dst, 58, &message), 0);
        assert_ne!(checksum(&message), 0, "without the pseudo-header it fails");
        assert_ne!(checksum_v6(&dst, &src, 17, &message), 0);
    }
}
