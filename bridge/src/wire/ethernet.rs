//! Ethernet II frames with an optional 802.1Q tag.

use super::tag::{Tag, VlanTag, OUTER_TAG, TAG_LEN, TAG_OFFSET};
use super::{MacAddr, Truncated};

/// An EtherType value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// ARP.
    pub const ARP: EtherType = EtherType(0x0806);
    /// IPv6.
    pub const IPV6: EtherType = EtherType(0x86dd);
    /// An IEEE 802.1Q VLAN tag follows.
    pub const VLAN: EtherType = EtherType(0x8100);
    /// An IEEE 802.1ad service tag follows (QinQ).
    pub const QINQ: EtherType = EtherType(0x88a8);

    /// Whether a VLAN tag (802.1Q or 802.1ad) follows.
    pub const fn is_vlan_tag(self) -> bool {
        self.0 == Self::VLAN.0 || self.0 == Self::QINQ.0
    }
}

/// A 12-bit VLAN identifier; 0 stands for untagged and priority-tagged frames.
pub type VlanId = u16;

mod field {
    use std::ops::Range;

    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const HEADER_LEN: usize = ETHERTYPE.end;
    // The outer tag (see `wire::tag`) takes the EtherType's place, and the
    // EtherType follows it.
    pub const TAGGED_ETHERTYPE: Range<usize> = super::OUTER_TAG.end..TAGGED_HEADER_LEN;
    pub const TAGGED_HEADER_LEN: usize = HEADER_LEN + super::TAG_LEN;
}

// The outer tag sits where an untagged frame has its EtherType.
const _: () = assert!(field::ETHERTYPE.start == TAG_OFFSET);

/// A view of an Ethernet II frame (without the FCS, as the kernel hands it).
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// The length of an untagged header.
    pub const HEADER_LEN: usize = field::HEADER_LEN;
    /// The length of a header with one VLAN tag.
    pub const TAGGED_HEADER_LEN: usize = field::TAGGED_HEADER_LEN;

    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// A view of a buffer long enough for its headers, tag included.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the Ethernet header and, when the
    /// EtherType announces one, the VLAN tag.
    pub fn check_len(&self) -> Result<(), Truncated> {
        let len = self.buffer.as_ref().len();
        let needed = if len < field::HEADER_LEN {
            field::HEADER_LEN
        } else if self.ethertype().is_vlan_tag() {
            field::TAGGED_HEADER_LEN
        } else {
            field::HEADER_LEN
        };
        Truncated::check(len, needed)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::DESTINATION])
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SOURCE])
    }

    /// The outer EtherType (0x8100 for a tagged frame).
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType(super::be_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// The outer VLAN tag, when the EtherType announces one.
    #[inline]
    pub fn tag(&self) -> Option<VlanTag<&[u8]>> {
        self.ethertype()
            .is_vlan_tag()
            .then(|| VlanTag::new_unchecked(&self.buffer.as_ref()[OUTER_TAG]))
    }

    /// The VLAN a frame belongs to for learning: the outer tag's VLAN id, or
    /// 0 when untagged.
    #[inline]
    pub fn vlan_id(&self) -> VlanId {
        self.tag().map_or(0, |tag| tag.vid())
    }

    /// The bytes after the header (after the tag, for a tagged frame).
    pub fn payload(&self) -> &[u8] {
        let start = if self.ethertype().is_vlan_tag() {
            field::TAGGED_HEADER_LEN
        } else {
            field::HEADER_LEN
        };
        &self.buffer.as_ref()[start..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Sets the outer EtherType.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&ethertype.0.to_be_bytes());
    }

    /// Sets the tag control information (priority, DEI and VLAN id) of a
    /// tagged frame.
    pub fn set_vlan_tci(&mut self, tci: u16) {
        VlanTag::new_unchecked(&mut self.buffer.as_mut()[OUTER_TAG]).set_tci(tci);
    }

    /// Writes `tag` as the outer tag, in the place of the EtherType and the
    /// two bytes after it (the buffer must hold a tagged header).
    pub fn set_tag(&mut self, tag: Tag) {
        tag.emit(&mut VlanTag::new_unchecked(
            &mut self.buffer.as_mut()[OUTER_TAG],
        ));
    }

    /// Sets the EtherType that follows the outer tag of a tagged frame.
    pub fn set_tagged_ethertype(&mut self, ethertype: EtherType) {
        self.buffer.as_mut()[field::TAGGED_ETHERTYPE].copy_from_slice(&ethertype.0.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static UNTAGGED: [u8; 16] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // destination
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x08, 0x06, // ARP
        0xaa, 0xbb, // payload
    ];

    static TAGGED: [u8; 20] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // destination
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x81, 0x00, // 802.1Q
        0xa0, 0x2a, // priority 5, VLAN 42
        0x08, 0x00, // IPv4
        0x45, 0x00, // payload
    ];

    #[test]
    fn untagged_fields() {
        let frame = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(frame.dst_addr(), MacAddr::BROADCAST);
        assert_eq!(frame.src_addr(), MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(frame.ethertype(), EtherType::ARP);
        assert_eq!(frame.vlan_id(), 0);
        assert_eq!(frame.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn tagged_fields() {
        let frame = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(frame.ethertype(), EtherType::VLAN);
        assert_eq!(frame.vlan_id(), 42);
        let tag = frame.tag().unwrap();
        assert_eq!((tag.tpid(), tag.pcp(), tag.vid()), (0x8100, 5, 42));
        assert_eq!(frame.payload(), &[0x45, 0x00]);
    }

    #[test]
    fn short_frames_are_rejected() {
        assert_eq!(
            EthernetFrame::new_checked(&UNTAGGED[..13]).unwrap_err(),
            Truncated {
                len: 13,
                needed: 14
            }
        );
        assert!(EthernetFrame::new_checked(&UNTAGGED[..14]).is_ok());
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..17]).unwrap_err(),
            Truncated {
                len: 17,
                needed: 18
            }
        );
        assert!(EthernetFrame::new_checked(&TAGGED[..18]).is_ok());
        assert!(EthernetFrame::new_checked(&[][..]).is_err());
    }

    #[test]
    fn setters_write_the_fields() {
        let mut bytes = TAGGED;
        let mut frame = EthernetFrame::new_unchecked(&mut bytes[..]);
        frame.set_dst_addr(MacAddr::BROADCAST);
        frame.set_src_addr(MacAddr([2, 0, 0, 0, 0, 9]));
        frame.set_vlan_tci(7);
        assert_eq!(frame.dst_addr(), MacAddr::BROADCAST);
        assert_eq!(frame.src_addr(), MacAddr([2, 0, 0, 0, 0, 9]));
        assert_eq!(frame.vlan_id(), 7);
        frame.set_ethertype(EtherType::IPV4);
        assert_eq!(frame.vlan_id(), 0);
        assert!(frame.tag().is_none());
        frame.set_tag(Tag {
            tpid: 0x88a8,
            tci: 0x2064,
        });
        frame.set_tagged_ethertype(EtherType::ARP);
        assert_eq!(&bytes[12..18], &[0x88, 0xa8, 0x20, 0x64, 0x08, 0x06]);
    }
}
