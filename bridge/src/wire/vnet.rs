//! The virtio-net header that taps (IFF_VNET_HDR) and packet sockets
//! (PACKET_VNET_HDR) put before each frame: offload state that travels with
//! the frame, so that large segments stay whole and checksums stay partial.
//!
//! Fields are in the host's byte order: mpbridge never asks a tap for the
//! little-endian layout of virtio 1.0 (TUNSETVNETLE), and packet sockets
//! always use the host's.

use super::Truncated;

/// The header's flags: the checksum from `csum_start` on is still to be
/// computed.
pub const VNET_HDR_F_NEEDS_CSUM: u8 = 1;

/// No segmentation offload.
pub const VNET_HDR_GSO_NONE: u8 = 0;

/// Segmentation offload of TCP over IPv4.
pub const VNET_HDR_GSO_TCPV4: u8 = 1;

/// Segmentation offload of TCP over IPv6.
pub const VNET_HDR_GSO_TCPV6: u8 = 4;

/// A bit beside the GSO type: the segments carry ECN's congestion mark.
pub const VNET_HDR_GSO_ECN: u8 = 0x80;

/// The header's length: the 10-byte `struct virtio_net_hdr`, as mpbridge
/// sets it on every tap (TUNSETVNETHDRSZ) and packet socket. The one
/// statement of it; everyone else takes it from here.
pub const VNET_HDR_LEN: usize = field::CSUM_OFFSET.end;

mod field {
    use std::ops::Range;

    pub const FLAGS: usize = 0;
    pub const GSO_TYPE: usize = 1;
    pub const HDR_LEN: Range<usize> = 2..4;
    pub const GSO_SIZE: Range<usize> = 4..6;
    pub const CSUM_START: Range<usize> = 6..8;
    pub const CSUM_OFFSET: Range<usize> = 8..10;
}

/// A view of a virtio-net header (the 10-byte `struct virtio_net_hdr`).
#[derive(Debug, Clone)]
pub struct VnetHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VnetHeader<T> {
    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        VnetHeader { buffer }
    }

    /// A view of a buffer that holds at least a header.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let len = buffer.as_ref().len();
        if len < VNET_HDR_LEN {
            return Err(Truncated {
                len,
                needed: VNET_HDR_LEN,
            });
        }
        Ok(Self::new_unchecked(buffer))
    }

    fn u16_at(&self, range: std::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[range];
        u16::from_ne_bytes([b[0], b[1]])
    }

    /// The flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Whether the checksum is still to be computed from `csum_start` on.
    #[inline]
    pub fn needs_csum(&self) -> bool {
        self.flags() & VNET_HDR_F_NEEDS_CSUM != 0
    }

    /// The segmentation offload type (0: none).
    #[inline]
    pub fn gso_type(&self) -> u8 {
        self.buffer.as_ref()[field::GSO_TYPE]
    }

    /// The length of the headers before the segmented payload.
    pub fn hdr_len(&self) -> u16 {
        self.u16_at(field::HDR_LEN)
    }

    /// The payload size of each segment.
    pub fn gso_size(&self) -> u16 {
        self.u16_at(field::GSO_SIZE)
    }

    /// Where the checksum's coverage starts, from the frame's first byte.
    pub fn csum_start(&self) -> u16 {
        self.u16_at(field::CSUM_START)
    }

    /// Where, from `csum_start`, the checksum goes.
    pub fn csum_offset(&self) -> u16 {
        self.u16_at(field::CSUM_OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VnetHeader<T> {
    fn set_u16_at(&mut self, range: std::ops::Range<usize>, value: u16) {
        self.buffer.as_mut()[range].copy_from_slice(&value.to_ne_bytes());
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Sets the segmentation offload type.
    pub fn set_gso_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::GSO_TYPE] = value;
    }

    /// Sets the length of the headers before the segmented payload.
    pub fn set_hdr_len(&mut self, value: u16) {
        self.set_u16_at(field::HDR_LEN, value);
    }

    /// Sets the payload size of each segment.
    pub fn set_gso_size(&mut self, value: u16) {
        self.set_u16_at(field::GSO_SIZE, value);
    }

    /// Sets where the checksum's coverage starts.
    pub fn set_csum_start(&mut self, value: u16) {
        self.set_u16_at(field::CSUM_START, value);
    }

    /// Sets where, from `csum_start`, the checksum goes.
    pub fn set_csum_offset(&mut self, value: u16) {
        self.set_u16_at(field::CSUM_OFFSET, value);
    }

    /// Moves the offsets that count from the frame's first byte by `by`
    /// bytes, as when a tag is put in before the network header. Offsets
    /// that are not in use (no segmentation, no partial checksum) stay.
    pub fn shift_offsets(&mut self, by: u16) {
        if self.gso_type() != VNET_HDR_GSO_NONE {
            let value = self.hdr_len().wrapping_add(by);
            self.set_hdr_len(value);
        }
        if self.needs_csum() {
            let value = self.csum_start().wrapping_add(by);
            self.set_csum_start(value);
        }
    }
}

/// Headers for the wire modules' tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::VNET_HDR_LEN;

    /// A virtio-net header (host byte order, as taps and sockets have it)
    /// with these fields, a GSO size of 1448 and a checksum 16 bytes into
    /// its L4 header.
    pub(crate) fn header(flags: u8, gso: u8, hdr_len: u16, csum_start: u16) -> [u8; VNET_HDR_LEN] {
        let mut bytes = [0u8; VNET_HDR_LEN];
        bytes[0] = flags;
        bytes[1] = gso;
        bytes[2..4].copy_from_slice(&hdr_len.to_ne_bytes());
        bytes[4..6].copy_from_slice(&1448u16.to_ne_bytes());
        bytes[6..8].copy_from_slice(&csum_start.to_ne_bytes());
        bytes[8..10].copy_from_slice(&16u16.to_ne_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::testing::header;
    use super::*;

    #[test]
    fn fields_read_back() {
        let bytes = header(VNET_HDR_F_NEEDS_CSUM, 1, 66, 34);
        let view = VnetHeader::new_checked(&bytes[..]).unwrap();
        assert!(view.needs_csum());
        assert_eq!(view.gso_type(), 1);
        assert_eq!(view.hdr_len(), 66);
        assert_eq!(view.gso_size(), 1448);
        assert_eq!(view.csum_start(), 34);
        assert_eq!(view.csum_offset(), 16);
        assert!(VnetHeader::new_checked(&bytes[..9]).is_err());
        // struct virtio_net_hdr, without virtio 1.0's num_buffers.
        assert_eq!(VNET_HDR_LEN, 10);
    }

    #[test]
    fn offsets_in_use_shift_and_others_stay() {
        let mut bytes = header(VNET_HDR_F_NEEDS_CSUM, 1, 66, 34);
        let mut view = VnetHeader::new_unchecked(&mut bytes[..]);
        view.shift_offsets(4);
        assert_eq!((view.hdr_len(), view.csum_start()), (70, 38));
        // Back by a tag's length: the two's complement of 4.
        view.shift_offsets(4u16.wrapping_neg());
        assert_eq!((view.hdr_len(), view.csum_start()), (66, 34));
        let mut bytes = header(0, 0, 5, 7);
        let mut view = VnetHeader::new_unchecked(&mut bytes[..]);
        view.shift_offsets(4);
        assert_eq!((view.hdr_len(), view.csum_start()), (5, 7));
    }

    #[test]
    fn setters_write_the_fields() {
        let mut bytes = [0u8; VNET_HDR_LEN];
        let mut view = VnetHeader::new_unchecked(&mut bytes[..]);
        view.set_flags(VNET_HDR_F_NEEDS_CSUM);
        view.set_gso_type(VNET_HDR_GSO_TCPV6);
        view.set_hdr_len(74);
        view.set_gso_size(1448);
        view.set_csum_start(54);
        view.set_csum_offset(16);
        assert_eq!(bytes, header(VNET_HDR_F_NEEDS_CSUM, 4, 74, 54));
    }
}
