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

/// The header's length: the 10-byte `struct virtio_net_hdr`, as mpbridge
/// sets it on every tap (TUNSETVNETHDRSZ) and packet socket. The one
/// statement of it; everyone else takes it from here.
pub const VNET_HDR_LEN: usize = field::CSUM_OFFSET.end;

/// The length of the 802.1Q tag that [`copy_with_vlan_tag`] puts back.
pub const VLAN_TAG_LEN: usize = 4;

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
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Whether the checksum is still to be computed from `csum_start` on.
    pub fn needs_csum(&self) -> bool {
        self.flags() & VNET_HDR_F_NEEDS_CSUM != 0
    }

    /// The segmentation offload type (0: none).
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

    /// Sets the length of the headers before the segmented payload.
    pub fn set_hdr_len(&mut self, value: u16) {
        self.set_u16_at(field::HDR_LEN, value);
    }

    /// Sets where the checksum's coverage starts.
    pub fn set_csum_start(&mut self, value: u16) {
        self.set_u16_at(field::CSUM_START, value);
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

/// Why a frame could not be copied with its tag put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    /// The header or the frame is shorter than a header and two addresses.
    #[error("frame too short to carry a tag")]
    Runt,
    /// The result does not fit the buffer.
    #[error("frame of {len} bytes exceeds the {capacity}-byte buffer")]
    Oversize {
        /// The length the result needs.
        len: usize,
        /// The buffer's size.
        capacity: usize,
    },
}

/// Copies a virtio-net header and an Ethernet frame into `out` as header
/// plus frame, with an 802.1Q tag (`tpid`, `tci`) put back after the two
/// addresses when one is given (the kernel hands tags to packet sockets
/// apart from the frame). The header's offsets are moved to match. Returns
/// the length written.
pub fn copy_with_vlan_tag(
    vnet: &[u8],
    frame: &[u8],
    tag: Option<(u16, u16)>,
    out: &mut [u8],
) -> Result<usize, CopyError> {
    const ADDRS: usize = 12;
    if vnet.len() != VNET_HDR_LEN || frame.len() < ADDRS {
        return Err(CopyError::Runt);
    }
    let tag_len = if tag.is_some() { VLAN_TAG_LEN } else { 0 };
    let len = VNET_HDR_LEN + frame.len() + tag_len;
    if len > out.len() {
        return Err(CopyError::Oversize {
            len,
            capacity: out.len(),
        });
    }
    out[..VNET_HDR_LEN].copy_from_slice(vnet);
    let body = &mut out[VNET_HDR_LEN..len];
    let Some((tpid, tci)) = tag else {
        body.copy_from_slice(frame);
        return Ok(len);
    };
    body[..ADDRS].copy_from_slice(&frame[..ADDRS]);
    body[ADDRS..ADDRS + 2].copy_from_slice(&tpid.to_be_bytes());
    body[ADDRS + 2..ADDRS + VLAN_TAG_LEN].copy_from_slice(&tci.to_be_bytes());
    body[ADDRS + VLAN_TAG_LEN..].copy_from_slice(&frame[ADDRS..]);
    VnetHeader::new_unchecked(&mut out[..VNET_HDR_LEN]).shift_offsets(VLAN_TAG_LEN as u16);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(flags: u8, gso: u8, hdr_len: u16, csum_start: u16) -> [u8; VNET_HDR_LEN] {
        let mut bytes = [0u8; VNET_HDR_LEN];
        bytes[0] = flags;
        bytes[1] = gso;
        bytes[2..4].copy_from_slice(&hdr_len.to_ne_bytes());
        bytes[4..6].copy_from_slice(&1448u16.to_ne_bytes());
        bytes[6..8].copy_from_slice(&csum_start.to_ne_bytes());
        bytes[8..10].copy_from_slice(&16u16.to_ne_bytes());
        bytes
    }

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
    fn untagged_copies_unchanged() {
        let vnet = header(VNET_HDR_F_NEEDS_CSUM, 0, 0, 34);
        let frame: Vec<u8> = (0..60).collect();
        let mut out = [0u8; 100];
        let len = copy_with_vlan_tag(&vnet, &frame, None, &mut out).unwrap();
        assert_eq!(len, 70);
        assert_eq!(&out[..10], &vnet);
        assert_eq!(&out[10..70], &frame[..]);
    }

    #[test]
    fn a_tag_goes_back_after_the_addresses_and_offsets_move() {
        let vnet = header(VNET_HDR_F_NEEDS_CSUM, 1, 66, 34);
        let frame: Vec<u8> = (0..60).collect();
        let mut out = [0u8; 100];
        let len = copy_with_vlan_tag(&vnet, &frame, Some((0x8100, 42)), &mut out).unwrap();
        assert_eq!(len, 74);
        assert_eq!(&out[10..22], &frame[..12]);
        assert_eq!(&out[22..26], &[0x81, 0x00, 0x00, 42]);
        assert_eq!(&out[26..74], &frame[12..]);
        let view = VnetHeader::new_checked(&out[..10]).unwrap();
        assert_eq!(view.hdr_len(), 70);
        assert_eq!(view.csum_start(), 38);
    }

    #[test]
    fn offsets_not_in_use_stay() {
        let vnet = header(0, 0, 5, 7);
        let mut out = [0u8; 100];
        copy_with_vlan_tag(&vnet, &[0u8; 20], Some((0x88a8, 1)), &mut out).unwrap();
        let view = VnetHeader::new_checked(&out[..10]).unwrap();
        assert_eq!((view.hdr_len(), view.csum_start()), (5, 7));
    }

    #[test]
    fn short_and_oversize_are_errors() {
        let vnet = header(0, 0, 0, 0);
        let mut out = [0u8; 30];
        assert_eq!(
            copy_with_vlan_tag(&vnet, &[0u8; 11], None, &mut out),
            Err(CopyError::Runt)
        );
        assert_eq!(
            copy_with_vlan_tag(&vnet[..9], &[0u8; 14], None, &mut out),
            Err(CopyError::Runt)
        );
        assert_eq!(
            copy_with_vlan_tag(&vnet, &[0u8; 17], Some((0x8100, 1)), &mut out),
            Err(CopyError::Oversize {
                len: 31,
                capacity: 30
            })
        );
    }
}
