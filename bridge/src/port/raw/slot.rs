//! The TPACKET_V2 frame slot, parsed from bytes: a frame header, the
//! virtio-net header and the frame. Every offset and length the kernel
//! wrote is checked against the slot before a slice is made. The frame ring
//! (`ring.rs`) hands each slot the kernel filled to this parser.

use super::block::{taken_tag, RingFrame};
use crate::port::VNET_HDR_LEN;

mod field {
    use std::ops::Range;

    // struct tpacket2_hdr.
    pub const STATUS: Range<usize> = 0..4;
    pub const LEN: Range<usize> = 4..8;
    pub const SNAPLEN: Range<usize> = 8..12;
    pub const MAC: Range<usize> = 12..14;
    pub const VLAN_TCI: Range<usize> = 24..26;
    pub const VLAN_TPID: Range<usize> = 26..28;
    pub const SLOT_HDR_LEN: usize = 32;
}

/// The offset of the slot status word, which the ring reads and writes
/// atomically.
pub const SLOT_STATUS_OFFSET: usize = field::STATUS.start;

/// A slot whose header contradicts the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The slot is shorter than its header.
    #[error("slot of {0} bytes is shorter than its header")]
    Short(usize),
    /// The frame (virtio-net header included) lies outside the slot.
    #[error("frame at {mac} of {snaplen} bytes is outside the {len}-byte slot")]
    DataOutside {
        /// Where the frame would start.
        mac: usize,
        /// Its length in the slot.
        snaplen: usize,
        /// The slot's length.
        len: usize,
    },
}

/// One filled slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot<'a> {
    /// What the slot holds of the frame.
    pub frame: RingFrame<'a>,
    /// Whether the whole frame waits in the socket's receive queue (it was
    /// longer than a slot and the socket keeps such frames:
    /// `PACKET_COPY_THRESH`); the slot holds its first part.
    pub copied: bool,
    /// The frame's whole length, however much of it the slot holds.
    pub len: usize,
}

fn u16_at(bytes: &[u8], range: std::ops::Range<usize>) -> u16 {
    u16::from_ne_bytes(bytes[range].try_into().expect("2 bytes"))
}

fn u32_at(bytes: &[u8], range: std::ops::Range<usize>) -> u32 {
    u32::from_ne_bytes(bytes[range].try_into().expect("4 bytes"))
}

/// Parses one slot the kernel filled.
pub fn parse(slot: &[u8]) -> Result<Slot<'_>, SlotError> {
    let len = slot.len();
    if len < field::SLOT_HDR_LEN {
        return Err(SlotError::Short(len));
    }
    let status = u32_at(slot, field::STATUS);
    let mac = usize::from(u16_at(slot, field::MAC));
    let snaplen = u32_at(slot, field::SNAPLEN) as usize;
    let outside = SlotError::DataOutside { mac, snaplen, len };
    if mac < field::SLOT_HDR_LEN + VNET_HDR_LEN {
        return Err(outside);
    }
    let end = mac.checked_add(snaplen).ok_or(outside)?;
    if end > len {
        return Err(outside);
    }
    let vlan = taken_tag(
        status,
        u16_at(slot, field::VLAN_TPID),
        u16_at(slot, field::VLAN_TCI),
    );
    Ok(Slot {
        frame: RingFrame {
            vnet: &slot[mac - VNET_HDR_LEN..mac],
            frame: &slot[mac..end],
            vlan,
            truncated: snaplen < u32_at(slot, field::LEN) as usize,
            in_ring: true,
        },
        copied: status & libc::TP_STATUS_COPY != 0,
        len: u32_at(slot, field::LEN) as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Tag;

    fn put16(bytes: &mut [u8], at: usize, value: u16) {
        bytes[at..at + 2].copy_from_slice(&value.to_ne_bytes());
    }

    fn put32(bytes: &mut [u8], at: usize, value: u32) {
        bytes[at..at + 4].copy_from_slice(&value.to_ne_bytes());
    }

    /// A 2 KiB slot as the kernel fills it: the frame at `mac`, the
    /// virtio-net header before it.
    fn slot(status: u32, len: u32, snaplen: u32, mac: u16, frame: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; 2048];
        put32(&mut bytes, 0, status);
        put32(&mut bytes, 4, len);
        put32(&mut bytes, 8, snaplen);
        put16(&mut bytes, 12, mac);
        let mac = usize::from(mac);
        bytes[mac - VNET_HDR_LEN..mac].fill(0xee);
        bytes[mac..mac + frame.len()].copy_from_slice(frame);
        bytes
    }

    #[test]
    fn a_slot_yields_its_frame_tag_and_flags() {
        let frame: Vec<u8> = (0..60).collect();
        let plain = slot(libc::TP_STATUS_USER, 60, 60, 82, &frame);
        let parsed = parse(&plain).unwrap();
        assert_eq!(parsed.frame.frame, &frame[..]);
        assert_eq!(parsed.frame.vnet, &[0xee; VNET_HDR_LEN]);
        assert_eq!(parsed.frame.vlan, None);
        assert!(!parsed.frame.truncated && !parsed.copied);

        let status = libc::TP_STATUS_USER
            | libc::TP_STATUS_VLAN_VALID
            | libc::TP_STATUS_VLAN_TPID_VALID
            | libc::TP_STATUS_COPY;
        let mut tagged = slot(status, 9000, 60, 82, &frame);
        put16(&mut tagged, 24, 0xa02a);
        put16(&mut tagged, 26, 0x88a8);
        let parsed = parse(&tagged).unwrap();
        assert_eq!(
            parsed.frame.vlan,
            Some(Tag {
                tpid: 0x88a8,
                tci: 0xa02a
            })
        );
        assert!(parsed.frame.truncated && parsed.copied);
        assert_eq!(parsed.len, 9000);

        // A tag without a TPID is 802.1Q.
        let mut old = slot(
            libc::TP_STATUS_USER | libc::TP_STATUS_VLAN_VALID,
            60,
            60,
            82,
            &frame,
        );
        put16(&mut old, 24, 7);
        assert_eq!(parse(&old).unwrap().frame.vlan, Some(Tag::dot1q(7)));
    }

    #[test]
    fn headers_that_point_outside_the_slot_are_errors() {
        let frame = [0u8; 60];
        assert_eq!(parse(&[0u8; 31]), Err(SlotError::Short(31)));
        // The frame would start inside the header or the vnet header.
        let mut early = slot(libc::TP_STATUS_USER, 60, 60, 82, &frame);
        put16(&mut early, 12, 40);
        assert!(matches!(parse(&early), Err(SlotError::DataOutside { .. })));
        // Or end past the slot, or wrap around.
        for snaplen in [2048, u32::MAX] {
            let mut long = slot(libc::TP_STATUS_USER, 60, 60, 82, &frame);
            put32(&mut long, 8, snaplen);
            assert!(matches!(parse(&long), Err(SlotError::DataOutside { .. })));
        }
        // Every length of a slot, cut anywhere: an error or a frame inside.
        let whole = slot(libc::TP_STATUS_USER, 60, 60, 82, &frame);
        for cut in 0..200 {
            if let Ok(parsed) = parse(&whole[..cut]) {
                assert!(82 + parsed.frame.frame.len() <= cut);
            }
        }
    }
}
