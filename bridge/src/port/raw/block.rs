//! The TPACKET_V3 block format, parsed from bytes: a block descriptor and a
//! chain of frame headers, each followed by a frame. Every offset and length
//! the kernel wrote is checked against the block before a slice is made, so
//! a corrupt block yields errors, never an out-of-bounds read. The receive
//! ring (`ring.rs`) hands each block the kernel filled to this parser.

use crate::port::VNET_HDR_LEN;
use crate::wire::{EtherType, Tag};

mod field {
    use std::ops::Range;

    // struct tpacket_block_desc with its tpacket_hdr_v1.
    pub const BLOCK_STATUS: Range<usize> = 8..12;
    pub const NUM_PKTS: Range<usize> = 12..16;
    pub const OFFSET_TO_FIRST_PKT: Range<usize> = 16..20;
    pub const BLOCK_DESC_LEN: usize = 48;

    // struct tpacket3_hdr.
    pub const NEXT_OFFSET: Range<usize> = 0..4;
    pub const SNAPLEN: Range<usize> = 12..16;
    pub const LEN: Range<usize> = 16..20;
    pub const STATUS: Range<usize> = 20..24;
    pub const MAC: Range<usize> = 24..26;
    pub const VLAN_TCI: Range<usize> = 32..36;
    pub const VLAN_TPID: Range<usize> = 36..38;
    pub const FRAME_HDR_LEN: usize = 48;
}

/// The offset of the block status word, which the ring reads and writes
/// atomically.
pub const BLOCK_STATUS_OFFSET: usize = field::BLOCK_STATUS.start;

/// One frame found in a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingFrame<'a> {
    /// The virtio-net header the kernel stored before the frame.
    pub vnet: &'a [u8],
    /// The frame, without the VLAN tag the kernel took off.
    pub frame: &'a [u8],
    /// That tag, if there was one.
    pub vlan: Option<Tag>,
    /// Whether the frame was cut short (longer than the ring keeps).
    pub truncated: bool,
    /// Whether it lies in the ring itself, where it may be lent until its
    /// slot or block is handed back (not a copy read from the socket).
    pub in_ring: bool,
}

/// The tag the kernel took off a frame, from a frame header's status word
/// and its `tp_vlan_tpid` and `tp_vlan_tci` fields, which are valid only as
/// the status says: no TPID (kernels before 3.14) means 802.1Q.
pub(super) fn taken_tag(status: u32, tpid: u16, tci: u16) -> Option<Tag> {
    (status & libc::TP_STATUS_VLAN_VALID != 0).then_some(Tag {
        tpid: if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
            tpid
        } else {
            EtherType::VLAN.0
        },
        tci,
    })
}

/// A block whose contents contradict themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// The block is smaller than its descriptor.
    #[error("block of {0} bytes is shorter than its descriptor")]
    Short(usize),
    /// A frame header would start outside the block, or past its end.
    #[error("frame header at {offset} is outside the {len}-byte block")]
    HeaderOutside {
        /// Where the header would start.
        offset: usize,
        /// The block's length.
        len: usize,
    },
    /// A frame's data (virtio-net header included) lies outside the block
    /// or overlaps its own header.
    #[error("frame at {offset} has its data outside the block")]
    DataOutside {
        /// Where the frame header starts.
        offset: usize,
    },
    /// The next frame's header would start inside this frame's data: the
    /// kernel always links forward, past the frame.
    #[error("frame at {offset} links back into its own data")]
    LinkBack {
        /// Where the frame header starts.
        offset: usize,
    },
    /// More frames announced, but the last header links to none.
    #[error("frame at {offset} links to no next frame, {left} more announced")]
    BrokenChain {
        /// Where the frame header starts.
        offset: usize,
        /// Frames still announced.
        left: u32,
    },
}

fn u16_at(bytes: &[u8], range: std::ops::Range<usize>) -> u16 {
    u16::from_ne_bytes([bytes[range.start], bytes[range.start + 1]])
}

fn u32_at(bytes: &[u8], range: std::ops::Range<usize>) -> u32 {
    let b = &bytes[range];
    u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

/// A view of one block the kernel handed over.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    bytes: &'a [u8],
}

impl<'a> Block<'a> {
    /// A view of `bytes`, checked to hold the block descriptor.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Block<'a>, BlockError> {
        if bytes.len() < field::BLOCK_DESC_LEN {
            return Err(BlockError::Short(bytes.len()));
        }
        Ok(Block { bytes })
    }

    /// The status word, as the kernel left it (read it atomically in place
    /// while the kernel may still own the block; this copy is for tests).
    pub fn status(&self) -> u32 {
        u32_at(self.bytes, field::BLOCK_STATUS)
    }

    /// How many frames the block says it holds.
    pub fn frame_count(&self) -> u32 {
        u32_at(self.bytes, field::NUM_PKTS)
    }

    /// The frames, in order. After the first error the iterator ends: the
    /// chain cannot be trusted past a bad link.
    pub fn frames(&self) -> Frames<'a> {
        Frames {
            bytes: self.bytes,
            offset: u32_at(self.bytes, field::OFFSET_TO_FIRST_PKT) as usize,
            left: self.frame_count(),
            pending: None,
        }
    }
}

/// The frames of a [`Block`].
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    bytes: &'a [u8],
    offset: usize,
    left: u32,
    pending: Option<BlockError>,
}

/// Where a [`Frames`] iterator stands, to pick it up again later over the
/// same block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    offset: usize,
    left: u32,
    pending: Option<BlockError>,
}

impl<'a> Frames<'a> {
    /// Whether no frame or error is left.
    pub fn is_done(&self) -> bool {
        self.left == 0 && self.pending.is_none()
    }

    /// Where the iterator stands.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            offset: self.offset,
            left: self.left,
            pending: self.pending,
        }
    }

    /// Picks up, over `block`, where `cursor` was taken.
    pub fn resume(block: Block<'a>, cursor: Cursor) -> Frames<'a> {
        Frames {
            bytes: block.bytes,
            offset: cursor.offset,
            left: cursor.left,
            pending: cursor.pending,
        }
    }

    /// The frame at the cursor, where its data ends, and its link.
    fn parse(&self) -> Result<(RingFrame<'a>, usize, usize), BlockError> {
        let bytes = self.bytes;
        let offset = self.offset;
        let len = bytes.len();
        let header_end = offset
            .checked_add(field::FRAME_HDR_LEN)
            .filter(|&end| offset >= field::BLOCK_DESC_LEN && end <= len)
            .ok_or(BlockError::HeaderOutside { offset, len })?;
        let header = &bytes[offset..header_end];
        let outside = BlockError::DataOutside { offset };
        let mac = offset + usize::from(u16_at(header, field::MAC));
        let snaplen = u32_at(header, field::SNAPLEN) as usize;
        // The virtio-net header sits just before the frame, after ours.
        let vnet_start = mac
            .checked_sub(VNET_HDR_LEN)
            .filter(|&start| start >= header_end)
            .ok_or(outside)?;
        let frame_end = mac
            .checked_add(snaplen)
            .filter(|&end| end <= len)
            .ok_or(outside)?;
        let vlan = taken_tag(
            u32_at(header, field::STATUS),
            u16_at(header, field::VLAN_TPID),
            // A u32 in tpacket3_hdr; a TCI is 16 bits.
            u32_at(header, field::VLAN_TCI) as u16,
        );
        let frame = RingFrame {
            vnet: &bytes[vnet_start..mac],
            frame: &bytes[mac..frame_end],
            vlan,
            truncated: (snaplen as u64) < u64::from(u32_at(header, field::LEN)),
            in_ring: true,
        };
        Ok((
            frame,
            frame_end,
            u32_at(header, field::NEXT_OFFSET) as usize,
        ))
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<RingFrame<'a>, BlockError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.pending.take() {
            return Some(Err(error));
        }
        if self.left == 0 {
            return None;
        }
        let result = self.parse();
        self.left -= 1;
        match result {
            Ok((frame, frame_end, next)) => {
                let error = if self.left == 0 {
                    None
                } else if next == 0 {
                    Some(BlockError::BrokenChain {
                        offset: self.offset,
                        left: self.left,
                    })
                } else if self.offset.saturating_add(next) < frame_end {
                    Some(BlockError::LinkBack {
                        offset: self.offset,
                    })
                } else {
                    None
                };
                if error.is_some() {
                    // The frame itself is sound; the error comes next.
                    self.left = 0;
                    self.pending = error;
                }
                self.offset = self.offset.saturating_add(next);
                Some(Ok(frame))
            }
            Err(error) => {
                self.left = 0;
                Some(Err(error))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lays frames out as the kernel does: descriptor, then per frame a
    /// header, a gap, the virtio-net header and the frame, 16-aligned.
    /// A frame and the tag the kernel took off it.
    type Entry<'a> = (&'a [u8], Option<Tag>);

    fn block(frames: &[Entry<'_>]) -> Vec<u8> {
        let mut bytes = vec![0u8; 4096];
        let put32 = |bytes: &mut [u8], at: usize, v: u32| {
            bytes[at..at + 4].copy_from_slice(&v.to_ne_bytes())
        };
        put32(&mut bytes, 8, libc::TP_STATUS_USER);
        put32(&mut bytes, 12, frames.len() as u32);
        put32(&mut bytes, 16, 48);
        let mut offset = 48;
        for (i, (frame, vlan)) in frames.iter().enumerate() {
            let mac = 48 + 32 + VNET_HDR_LEN;
            let total = (mac + frame.len()).next_multiple_of(16);
            let next = if i + 1 == frames.len() { 0 } else { total };
            put32(&mut bytes, offset, next as u32);
            put32(&mut bytes, offset + 12, frame.len() as u32);
            put32(&mut bytes, offset + 16, frame.len() as u32);
            let mut status = 0;
            if let Some(Tag { tpid, tci }) = vlan {
                status |= libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID;
                put32(&mut bytes, offset + 32, u32::from(*tci));
                bytes[offset + 36..offset + 38].copy_from_slice(&tpid.to_ne_bytes());
            }
            put32(&mut bytes, offset + 20, status);
            bytes[offset + 24..offset + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
            bytes[offset + mac - VNET_HDR_LEN] = 0x77;
            bytes[offset + mac..offset + mac + frame.len()].copy_from_slice(frame);
            offset += total;
        }
        bytes
    }

    #[test]
    fn frames_come_out_in_order_with_their_tags() {
        let a = [1u8; 60];
        let b = [2u8; 100];
        let bytes = block(&[(&a, None), (&b, Some(Tag::dot1q(42)))]);
        let parsed = Block::new_checked(&bytes).unwrap();
        assert_eq!(parsed.status(), libc::TP_STATUS_USER);
        let frames: Vec<_> = parsed.frames().collect::<Result<_, _>>().unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].frame, &a);
        assert_eq!(frames[0].vnet.len(), VNET_HDR_LEN);
        assert_eq!(frames[0].vnet[0], 0x77);
        assert_eq!(frames[0].vlan, None);
        assert_eq!(frames[1].frame, &b);
        assert_eq!(frames[1].vlan, Some(Tag::dot1q(42)));
        assert!(!frames[1].truncated);
    }

    #[test]
    fn a_short_block_is_refused() {
        assert_eq!(
            Block::new_checked(&[0u8; 47]).unwrap_err(),
            BlockError::Short(47)
        );
    }

    #[test]
    fn a_first_frame_outside_the_block_is_an_error() {
        let mut bytes = block(&[(&[1u8; 60], None)]);
        bytes[16..20].copy_from_slice(&5000u32.to_ne_bytes());
        let mut frames = Block::new_checked(&bytes).unwrap().frames();
        assert!(matches!(
            frames.next(),
            Some(Err(BlockError::HeaderOutside { .. }))
        ));
        assert!(frames.next().is_none());
        // Inside the descriptor is outside too.
        bytes[16..20].copy_from_slice(&8u32.to_ne_bytes());
        let mut frames = Block::new_checked(&bytes).unwrap().frames();
        assert!(matches!(
            frames.next(),
            Some(Err(BlockError::HeaderOutside { .. }))
        ));
    }

    #[test]
    fn a_snaplen_past_the_end_is_an_error() {
        let mut bytes = block(&[(&[1u8; 60], None)]);
        bytes[48 + 12..48 + 16].copy_from_slice(&u32::MAX.to_ne_bytes());
        let mut frames = Block::new_checked(&bytes).unwrap().frames();
        assert_eq!(
            frames.next(),
            Some(Err(BlockError::DataOutside { offset: 48 }))
        );
    }

    #[test]
    fn a_mac_offset_inside_the_header_is_an_error() {
        let mut bytes = block(&[(&[1u8; 60], None)]);
        bytes[48 + 24..48 + 26].copy_from_slice(&20u16.to_ne_bytes());
        let mut frames = Block::new_checked(&bytes).unwrap().frames();
        assert_eq!(
            frames.next(),
            Some(Err(BlockError::DataOutside { offset: 48 }))
        );
    }

    #[test]
    fn a_broken_chain_ends_after_the_sound_frame() {
        let mut bytes = block(&[(&[1u8; 60], None), (&[2u8; 60], None)]);
        bytes[48..52].copy_from_slice(&0u32.to_ne_bytes());
        let mut frames = Block::new_checked(&bytes).unwrap().frames();
        assert!(matches!(frames.next(), Some(Ok(_))));
        assert_eq!(
            frames.next(),
            Some(Err(BlockError::BrokenChain {
                offset: 48,
                left: 1
            }))
        );
        assert!(frames.next().is_none());
    }

    #[test]
    fn a_link_back_into_the_frame_is_an_error() {
        let mut bytes = block(&[(&[1u8; 60], None), (&[2u8; 60], None)]);
        // Points at the first frame's own data.
        bytes[48..52].copy_from_slice(&60u32.to_ne_bytes());
        let mut frames = Block::new_checked(&bytes).unwrap().frames();
        assert!(matches!(frames.next(), Some(Ok(_))));
        assert_eq!(
            frames.next(),
            Some(Err(BlockError::LinkBack { offset: 48 }))
        );
        assert!(frames.next().is_none());
    }

    #[test]
    fn a_huge_frame_count_stops_at_the_first_bad_link() {
        let mut bytes = block(&[(&[1u8; 60], None)]);
        bytes[12..16].copy_from_slice(&u32::MAX.to_ne_bytes());
        let results: Vec<_> = Block::new_checked(&bytes).unwrap().frames().collect();
        assert_eq!(results.len(), 2);
        assert!(results[1].is_err());
    }
}
