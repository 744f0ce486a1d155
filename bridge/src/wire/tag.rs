//! IEEE 802.1Q and 802.1ad tags: where a frame's outer tag sits, what its
//! four bytes hold, and how a frame gains, loses or changes one. Nobody
//! else reads or writes a tag by offset.
//!
//! A tag is a TPID (0x8100 for 802.1Q, 0x88a8 for an 802.1ad service tag)
//! and a TCI: priority (PCP, 3 bits), drop eligible (DEI, 1 bit) and the
//! VLAN id (12 bits), both big-endian. In a frame the outer tag follows
//! the two addresses, where an untagged frame has its EtherType.

use std::ops::Range;

use super::{EtherType, Truncated, VlanId};

/// The length of a tag: TPID and TCI.
pub const TAG_LEN: usize = field::TCI.end;

/// Where a frame's outer tag starts: after its two addresses.
pub const TAG_OFFSET: usize = 12;

/// The bytes of a frame that its outer tag takes.
pub const OUTER_TAG: Range<usize> = TAG_OFFSET..TAG_OFFSET + TAG_LEN;

mod field {
    use std::ops::Range;

    pub const TPID: Range<usize> = 0..2;
    pub const TCI: Range<usize> = 2..4;

    // Within the TCI.
    pub const PCP_SHIFT: u32 = 13;
    pub const DEI: u16 = 0x1000;
    pub const VID: u16 = 0x0fff;
}

/// A view of a tag's four bytes.
#[derive(Debug, Clone)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanTag { buffer }
    }

    /// A view of a buffer that holds at least a tag.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let tag = Self::new_unchecked(buffer);
        tag.check_len()?;
        Ok(tag)
    }

    /// Checks that the buffer holds a whole tag.
    pub fn check_len(&self) -> Result<(), Truncated> {
        let len = self.buffer.as_ref().len();
        if len < TAG_LEN {
            Err(Truncated {
                len,
                needed: TAG_LEN,
            })
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The tag protocol id.
    #[inline]
    pub fn tpid(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::TPID];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The tag control information: priority, DEI, VLAN id.
    #[inline]
    pub fn tci(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::TCI];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The priority code point.
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> field::PCP_SHIFT) as u8
    }

    /// Whether the frame may be dropped first under congestion.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & field::DEI != 0
    }

    /// The VLAN id (0: a priority tag, of no VLAN).
    #[inline]
    pub fn vid(&self) -> VlanId {
        self.tci() & field::VID
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the tag protocol id.
    #[inline]
    pub fn set_tpid(&mut self, tpid: u16) {
        self.buffer.as_mut()[field::TPID].copy_from_slice(&tpid.to_be_bytes());
    }

    /// Sets the whole tag control information.
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        self.buffer.as_mut()[field::TCI].copy_from_slice(&tci.to_be_bytes());
    }

    /// Sets the VLAN id (its low 12 bits), keeping priority and DEI.
    #[inline]
    pub fn set_vid(&mut self, vid: VlanId) {
        let tci = (self.tci() & !field::VID) | (vid & field::VID);
        self.set_tci(tci);
    }
}

/// A tag's contents, apart from any frame: what the kernel hands a packet
/// socket beside a frame it took the tag off, and what a frame leaves a
/// tagged port with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// 0x8100 or 0x88a8.
    pub tpid: u16,
    /// Priority (3 bits), DEI (1 bit), VLAN id (12 bits).
    pub tci: u16,
}

impl Tag {
    /// An 802.1Q tag of priority 0 for `vid`.
    pub const fn dot1q(vid: VlanId) -> Tag {
        Tag {
            tpid: EtherType::VLAN.0,
            tci: vid & field::VID,
        }
    }

    /// The tag a view holds.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(view: &VlanTag<T>) -> Tag {
        Tag {
            tpid: view.tpid(),
            tci: view.tci(),
        }
    }

    /// Writes the tag into a view.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut VlanTag<T>) {
        view.set_tpid(self.tpid);
        view.set_tci(self.tci);
    }

    /// The tag's four bytes, as a frame carries them.
    #[inline]
    pub fn to_bytes(self) -> [u8; TAG_LEN] {
        let mut bytes = [0; TAG_LEN];
        self.emit(&mut VlanTag::new_unchecked(&mut bytes[..]));
        bytes
    }

    /// The priority code point.
    pub const fn pcp(self) -> u8 {
        (self.tci >> field::PCP_SHIFT) as u8
    }

    /// Whether the frame may be dropped first under congestion.
    pub const fn dei(self) -> bool {
        self.tci & field::DEI != 0
    }

    /// The VLAN id (0: a priority tag).
    pub const fn vid(self) -> VlanId {
        self.tci & field::VID
    }

    /// The same tag (protocol, priority, DEI) for VLAN `vid`.
    pub const fn with_vid(self, vid: VlanId) -> Tag {
        Tag {
            tpid: self.tpid,
            tci: (self.tci & !field::VID) | (vid & field::VID),
        }
    }
}

/// The view of `frame`'s outer tag, if its EtherType announces one (802.1Q
/// or 802.1ad) and the frame holds the whole tag.
#[inline]
pub fn outer_view(frame: &[u8]) -> Option<VlanTag<&[u8]>> {
    let tag = VlanTag::new_checked(frame.get(TAG_OFFSET..)?).ok()?;
    EtherType(tag.tpid()).is_vlan_tag().then_some(tag)
}

/// `frame`'s outer tag, if it has one (see [`outer_view`]).
#[inline]
pub fn outer_tag(frame: &[u8]) -> Option<Tag> {
    outer_view(frame).map(|view| Tag::parse(&view))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An 802.1ad tag, priority 5, DEI set, VLAN 42.
    static TAG: [u8; 4] = [0x88, 0xa8, 0xb0, 0x2a];

    /// A QinQ frame: service tag VLAN 100, customer tag VLAN 5, IPv4.
    static QINQ: [u8; 24] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // destination
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x88, 0xa8, 0x00, 0x64, // 802.1ad, VLAN 100
        0x81, 0x00, 0x00, 0x05, // 802.1Q, VLAN 5
        0x08, 0x00, // IPv4
        0x45, 0x00, // payload
    ];

    #[test]
    fn fields_read_back() {
        let view = VlanTag::new_checked(&TAG[..]).unwrap();
        assert_eq!(view.tpid(), 0x88a8);
        assert_eq!(view.tci(), 0xb02a);
        assert_eq!(view.pcp(), 5);
        assert!(view.dei());
        assert_eq!(view.vid(), 42);
        let tag = Tag::parse(&view);
        assert_eq!(
            tag,
            Tag {
                tpid: 0x88a8,
                tci: 0xb02a
            }
        );
        assert_eq!((tag.pcp(), tag.dei(), tag.vid()), (5, true, 42));
        assert_eq!(tag.to_bytes(), TAG);
        assert_eq!(TAG_LEN, 4);
    }

    #[test]
    fn short_tags_are_rejected() {
        assert_eq!(
            VlanTag::new_checked(&TAG[..3]).unwrap_err(),
            Truncated { len: 3, needed: 4 }
        );
        assert!(VlanTag::new_checked(&[][..]).is_err());
    }

    #[test]
    fn setters_write_the_fields() {
        let mut bytes = TAG;
        let mut view = VlanTag::new_unchecked(&mut bytes[..]);
        view.set_vid(7);
        assert_eq!((view.pcp(), view.dei(), view.vid()), (5, true, 7));
        view.set_tpid(0x8100);
        view.set_tci(0x0001);
        assert_eq!(bytes, [0x81, 0x00, 0x00, 0x01]);
        let mut bytes = [0u8; 4];
        Tag::dot1q(0xf123).emit(&mut VlanTag::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, [0x81, 0x00, 0x01, 0x23]);
        assert_eq!(
            Tag::parse(&VlanTag::new_unchecked(&TAG[..])).with_vid(9),
            Tag {
                tpid: 0x88a8,
                tci: 0xb009
            }
        );
    }

    #[test]
    fn the_outer_tag_follows_the_addresses() {
        assert_eq!(
            outer_tag(&QINQ),
            Some(Tag {
                tpid: 0x88a8,
                tci: 100
            })
        );
        // Without the outer tag, the inner one is outer.
        let mut inner = QINQ[..TAG_OFFSET].to_vec();
        inner.extend_from_slice(&QINQ[OUTER_TAG.end..]);
        assert_eq!(outer_tag(&inner), Some(Tag::dot1q(5)));
        // Untagged, or too short for the whole tag: none.
        let mut untagged = QINQ;
        untagged[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(outer_tag(&untagged), None);
        assert_eq!(outer_tag(&QINQ[..15]), None);
        assert!(outer_tag(&QINQ[..16]).is_some());
        assert_eq!(outer_tag(&[]), None);
    }
}
