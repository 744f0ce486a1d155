//! IEEE 802.1Q and 802.1ad tags: where a frame's outer tag sits, what its
//! four bytes hold, and how a frame gains, loses or changes one. Nobody
//! else reads or writes a tag by offset.
//!
//! A tag is a TPID (0x8100 for 802.1Q, 0x88a8 for an 802.1ad service tag)
//! and a TCI: priority (PCP, 3 bits), drop eligible (DEI, 1 bit) and the
//! VLAN id (12 bits), both big-endian. In a frame the outer tag follows
//! the two addresses, where an untagged frame has its EtherType.
//!
//! Frames are held after a port's metadata: a virtio-net header, or none.
//! The header's `csum_start` and `hdr_len` count from the frame's first
//! byte, so whatever moves the frame's payload by a tag's length moves
//! them too ([`rewrite`], [`push_into`]).

use std::ops::Range;

use super::vnet::{VnetHeader, VNET_HDR_LEN};
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
        Truncated::check(self.buffer.as_ref().len(), TAG_LEN)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The tag protocol id.
    #[inline]
    pub fn tpid(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::TPID)
    }

    /// The tag control information: priority, DEI, VLAN id.
    #[inline]
    pub fn tci(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::TCI)
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

/// The EtherType past `frame`'s tags (802.1Q or 802.1ad, at most
/// `max_tags` of them), and where its payload starts; `None` when the
/// frame ends before an EtherType does. After `max_tags` tags the next
/// field is the EtherType, whatever it says.
#[inline]
pub fn inner_ethertype(frame: &[u8], max_tags: usize) -> Option<(EtherType, usize)> {
    let mut at = TAG_OFFSET;
    let mut tags = 0;
    loop {
        let b = frame.get(at..at + 2)?;
        let ethertype = EtherType(u16::from_be_bytes([b[0], b[1]]));
        if tags == max_tags || !ethertype.is_vlan_tag() {
            return Some((ethertype, at + 2));
        }
        at += TAG_LEN;
        tags += 1;
    }
}

/// The outer tag a frame leaves with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagForm {
    /// As it came in.
    AsIs,
    /// Without its outer tag.
    Untagged,
    /// With this outer tag: in place of the one it has, or added.
    Tagged(Tag),
}

/// What is done to a frame's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edit {
    Keep,
    Remove,
    Replace(Tag),
    Push(Tag),
}

impl Edit {
    /// What `form` takes of `frame`. Removing a tag from an untagged frame
    /// keeps it; a buffer too short for the two addresses is kept as it is
    /// (no frame that passed the Ethernet header check is).
    fn of(form: TagForm, frame: &[u8]) -> Edit {
        let tagged = outer_view(frame).is_some();
        match form {
            TagForm::AsIs => Edit::Keep,
            TagForm::Untagged if tagged => Edit::Remove,
            TagForm::Untagged => Edit::Keep,
            TagForm::Tagged(tag) if tagged => Edit::Replace(tag),
            TagForm::Tagged(tag) if frame.len() >= TAG_OFFSET => Edit::Push(tag),
            TagForm::Tagged(_) => Edit::Keep,
        }
    }
}

/// A frame taken apart at its outer tag's place: the bytes before it, the
/// tag that goes there, the bytes after it, and how far those moved.
struct Layout<'a> {
    head: &'a [u8],
    tag: Option<[u8; TAG_LEN]>,
    tail: &'a [u8],
    shift: i16,
}

impl<'a> Layout<'a> {
    /// `frame` with `edit` made: `Push` needs the two addresses, `Remove`
    /// and `Replace` the whole outer tag.
    fn new(frame: &'a [u8], edit: Edit) -> Layout<'a> {
        let (tag, rest, shift) = match edit {
            Edit::Keep => {
                return Layout {
                    head: frame,
                    tag: None,
                    tail: &[],
                    shift: 0,
                }
            }
            Edit::Remove => (None, OUTER_TAG.end, -(TAG_LEN as i16)),
            Edit::Replace(tag) => (Some(tag.to_bytes()), OUTER_TAG.end, 0),
            Edit::Push(tag) => (Some(tag.to_bytes()), TAG_OFFSET, TAG_LEN as i16),
        };
        Layout {
            head: &frame[..TAG_OFFSET],
            tag,
            tail: &frame[rest..],
            shift,
        }
    }

    fn len(&self) -> usize {
        self.head.len() + self.tag.map_or(0, |tag| tag.len()) + self.tail.len()
    }
}

/// Moves a virtio-net header's offsets by `shift` bytes, as its frame's
/// payload moved; other metadata has none.
fn shift_metadata(meta: &mut [u8], shift: i16) {
    if meta.len() == VNET_HDR_LEN && shift != 0 {
        // Two's complement: adding the wrapped value subtracts.
        VnetHeader::new_unchecked(meta).shift_offsets(shift as u16);
    }
}

/// A frame in the form it leaves with, cut where its outer tag goes: the
/// bytes before that place and after it are the received frame's own, so
/// that a port writes the changed frame once, piece by piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut<'a> {
    /// The bytes before the tag's place (the whole frame when it keeps its
    /// form).
    pub head: &'a [u8],
    /// The tag written there, if any.
    pub tag: Option<[u8; TAG_LEN]>,
    /// The bytes after it.
    pub tail: &'a [u8],
    /// How far the payload moved: a virtio-net header's offsets move with
    /// it ([`shift_offsets`]).
    pub shift: i16,
}

impl<'a> Cut<'a> {
    /// `frame` in `form`. A frame that cannot take the change keeps its
    /// form: `Untagged` of an untagged frame, `Tagged` of a buffer shorter
    /// than the two addresses.
    pub fn new(frame: &'a [u8], form: TagForm) -> Cut<'a> {
        let layout = Layout::new(frame, Edit::of(form, frame));
        Cut {
            head: layout.head,
            tag: layout.tag,
            tail: layout.tail,
            shift: layout.shift,
        }
    }

    /// Whether the frame leaves as it came.
    pub fn is_unchanged(&self) -> bool {
        self.tag.is_none() && self.tail.is_empty() && self.shift == 0
    }
}

/// Moves the offsets of `meta`, a port's metadata, by `shift` bytes, as
/// its frame's payload moved: a virtio-net header's checksum start;
/// other metadata has none.
pub fn shift_offsets(meta: &mut [u8], shift: i16) {
    shift_metadata(meta, shift);
}

/// Appends `buffer` to `out` with its frame in `form`; returns the length
/// appended. `buffer` is a port's metadata of `meta_len` bytes (all of it,
/// if shorter), then an Ethernet frame. When the tag's change moves the
/// payload (a tag added or removed) and the metadata is a virtio-net
/// header, its offsets move with it.
///
/// A frame that cannot take the change is appended as it is: `Untagged`
/// of an untagged frame, `Tagged` of a buffer shorter than the two
/// addresses.
pub fn rewrite(buffer: &[u8], meta_len: usize, form: TagForm, out: &mut Vec<u8>) -> usize {
    let (meta, frame) = buffer.split_at(meta_len.min(buffer.len()));
    let cut = Cut::new(frame, form);
    let start = out.len();
    out.extend_from_slice(meta);
    out.extend_from_slice(cut.head);
    if let Some(tag) = &cut.tag {
        out.extend_from_slice(tag);
    }
    out.extend_from_slice(cut.tail);
    shift_offsets(&mut out[start..start + meta.len()], cut.shift);
    out.len() - start
}

/// Why a frame could not be copied with a tag pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// The frame is shorter than the two addresses a tag follows.
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

/// Copies `meta` and then `frame` into `out`, with `tag`, when given, put
/// in front of any tag the frame has: how a packet socket's frame gets
/// back the outer tag the kernel took off it (and handed over beside it).
/// A virtio-net header's offsets move with the payload. Returns the length
/// written; on an error nothing is written.
pub fn push_into(
    meta: &[u8],
    frame: &[u8],
    tag: Option<Tag>,
    out: &mut [u8],
) -> Result<usize, EmitError> {
    // No Ethernet frame is this short, tagged or not.
    if frame.len() < TAG_OFFSET {
        return Err(EmitError::Runt);
    }
    let layout = Layout::new(frame, tag.map_or(Edit::Keep, Edit::Push));
    let len = meta.len() + layout.len();
    if len > out.len() {
        return Err(EmitError::Oversize {
            len,
            capacity: out.len(),
        });
    }
    let (out_meta, body) = out[..len].split_at_mut(meta.len());
    out_meta.copy_from_slice(meta);
    let (head, rest) = body.split_at_mut(layout.head.len());
    head.copy_from_slice(layout.head);
    let tail = match &layout.tag {
        Some(tag) => {
            let (out_tag, tail) = rest.split_at_mut(TAG_LEN);
            out_tag.copy_from_slice(tag);
            tail
        }
        None => rest,
    };
    tail.copy_from_slice(layout.tail);
    shift_metadata(out_meta, layout.shift);
    Ok(len)
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

    #[test]
    fn the_inner_ethertype_lies_past_the_tags() {
        assert_eq!(
            inner_ethertype(&QINQ, usize::MAX),
            Some((EtherType::IPV4, 22))
        );
        assert_eq!(inner_ethertype(&QINQ, 2), Some((EtherType::IPV4, 22)));
        // Past one tag only, the next is taken as the EtherType.
        assert_eq!(inner_ethertype(&QINQ, 1), Some((EtherType::VLAN, 18)));
        assert_eq!(inner_ethertype(&QINQ, 0), Some((EtherType::QINQ, 14)));
        // The frame ends inside a tag, or before the EtherType.
        assert_eq!(inner_ethertype(&QINQ[..21], usize::MAX), None);
        assert_eq!(inner_ethertype(&QINQ[..13], 0), None);
    }
}

#[cfg(test)]
mod emit_tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::vnet::testing::header as vnet;
    use crate::wire::vnet::{VNET_HDR_F_NEEDS_CSUM, VNET_HDR_GSO_TCPV4 as GSO_TCPV4};

    /// The offloaded segment's header, untagged: TCP headers end at 66,
    /// TCP starts at 34.
    fn gso_header() -> [u8; VNET_HDR_LEN] {
        vnet(VNET_HDR_F_NEEDS_CSUM, GSO_TCPV4, 66, 34)
    }

    /// The same frame's header with a tag: everything 4 bytes on.
    fn gso_header_tagged() -> [u8; VNET_HDR_LEN] {
        vnet(VNET_HDR_F_NEEDS_CSUM, GSO_TCPV4, 70, 38)
    }

    static UNTAGGED: [u8; 20] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // destination
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x08, 0x00, // IPv4
        0x45, 0x00, 0x00, 0x2e, 0x12, 0x34, // payload
    ];

    static TAGGED_10: [u8; 24] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // destination
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x81, 0x00, 0xa0, 0x0a, // 802.1Q, priority 5, VLAN 10
        0x08, 0x00, // IPv4
        0x45, 0x00, 0x00, 0x2e, 0x12, 0x34, // payload
    ];

    static TAGGED_AD_30: [u8; 24] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // destination
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x88, 0xa8, 0x00, 0x1e, // 802.1ad, VLAN 30
        0x08, 0x00, // IPv4
        0x45, 0x00, 0x00, 0x2e, 0x12, 0x34, // payload
    ];

    const TAG_10: Tag = Tag {
        tpid: 0x8100,
        tci: 0xa00a,
    };
    const TAG_AD_30: Tag = Tag {
        tpid: 0x88a8,
        tci: 30,
    };

    fn join(meta: &[u8], frame: &[u8]) -> Vec<u8> {
        [meta, frame].concat()
    }

    fn rewritten(buffer: &[u8], meta_len: usize, form: TagForm) -> Vec<u8> {
        // After whatever the output already holds.
        let mut out = vec![0xee; 3];
        let len = rewrite(buffer, meta_len, form, &mut out);
        assert_eq!(&out[..3], &[0xee; 3]);
        assert_eq!(len, out.len() - 3);
        out.split_off(3)
    }

    #[test]
    fn tagging_inserts_after_the_addresses_and_moves_the_offsets() {
        let got = rewritten(
            &join(&gso_header(), &UNTAGGED),
            VNET_HDR_LEN,
            TagForm::Tagged(TAG_10),
        );
        assert_eq!(got, join(&gso_header_tagged(), &TAGGED_10));
        assert_eq!(rewritten(&UNTAGGED, 0, TagForm::Tagged(TAG_10)), TAGGED_10);
    }

    #[test]
    fn untagging_removes_the_outer_tag_and_moves_the_offsets_back() {
        let got = rewritten(
            &join(&gso_header_tagged(), &TAGGED_10),
            VNET_HDR_LEN,
            TagForm::Untagged,
        );
        assert_eq!(got, join(&gso_header(), &UNTAGGED));
        assert_eq!(rewritten(&TAGGED_10, 0, TagForm::Untagged), UNTAGGED);
    }

    #[test]
    fn retagging_replaces_the_tag_in_place() {
        let header = gso_header_tagged();
        let got = rewritten(
            &join(&header, &TAGGED_10),
            VNET_HDR_LEN,
            TagForm::Tagged(TAG_AD_30),
        );
        assert_eq!(got, join(&header, &TAGGED_AD_30));
        assert_eq!(
            rewritten(&TAGGED_10, 0, TagForm::Tagged(TAG_AD_30)),
            TAGGED_AD_30
        );
    }

    #[test]
    fn as_is_and_impossible_changes_copy_unchanged() {
        let buffer = join(&gso_header(), &TAGGED_10);
        assert_eq!(rewritten(&buffer, VNET_HDR_LEN, TagForm::AsIs), buffer);
        let buffer = join(&gso_header(), &UNTAGGED);
        assert_eq!(rewritten(&buffer, VNET_HDR_LEN, TagForm::Untagged), buffer);
        // Too short for the addresses; metadata longer than the buffer.
        let short = join(&gso_header(), &UNTAGGED[..11]);
        let form = TagForm::Tagged(TAG_10);
        assert_eq!(rewritten(&short, VNET_HDR_LEN, form), short);
        assert_eq!(
            rewritten(&UNTAGGED[..5], VNET_HDR_LEN, form),
            &UNTAGGED[..5]
        );
    }

    #[test]
    fn offsets_not_in_use_stay() {
        let header = vnet(0, 0, 5, 7);
        let got = rewritten(
            &join(&header, &UNTAGGED),
            VNET_HDR_LEN,
            TagForm::Tagged(TAG_10),
        );
        assert_eq!(got, join(&header, &TAGGED_10));
        // Metadata of another length is no virtio-net header: it stays.
        let meta = [1u8, 2, 3];
        assert_eq!(
            rewritten(&join(&meta, &UNTAGGED), 3, TagForm::Tagged(TAG_10)),
            join(&meta, &TAGGED_10)
        );
    }

    #[test]
    fn pushing_puts_a_tag_in_front_of_any_other() {
        let mut out = [0u8; 64];
        let len = push_into(&gso_header(), &UNTAGGED, Some(TAG_10), &mut out).unwrap();
        assert_eq!(&out[..len], &join(&gso_header_tagged(), &TAGGED_10)[..]);
        // QinQ: the service tag goes outside the customer tag.
        let len = push_into(&[], &TAGGED_10, Some(TAG_AD_30), &mut out).unwrap();
        let mut qinq = TAGGED_AD_30[..16].to_vec();
        qinq.extend_from_slice(&TAGGED_10[12..]);
        assert_eq!(&out[..len], &qinq[..]);
        assert_eq!(outer_tag(&out[..len]), Some(TAG_AD_30));
        assert_eq!(&out[16..20], &TAG_10.to_bytes());
        // No tag: a plain copy.
        let header = gso_header();
        let len = push_into(&header, &UNTAGGED, None, &mut out).unwrap();
        assert_eq!(&out[..len], &join(&header, &UNTAGGED)[..]);
    }

    #[test]
    fn pushing_refuses_runts_and_what_does_not_fit() {
        let header = gso_header();
        let mut out = [0xa5u8; 30];
        assert_eq!(
            push_into(&header, &UNTAGGED[..11], None, &mut out),
            Err(EmitError::Runt)
        );
        assert_eq!(
            push_into(&header, &UNTAGGED[..17], Some(TAG_10), &mut out),
            Err(EmitError::Oversize {
                len: 31,
                capacity: 30
            })
        );
        assert_eq!(out, [0xa5; 30], "an error wrote");
        assert_eq!(
            push_into(&header, &UNTAGGED[..16], Some(TAG_10), &mut out),
            Ok(30)
        );
    }

    /// The worker's own rewrite (`Worker::frame_for` before it called
    /// [`rewrite`]), kept as the reference: `Untagged` only ever of a
    /// tagged frame, `Tagged` only of a whole Ethernet header.
    fn reference(buffer: &[u8], meta_len: usize, form: TagForm, out: &mut Vec<u8>) {
        let meta = meta_len.min(buffer.len());
        let (header, frame) = buffer.split_at(meta);
        let start = out.len();
        out.extend_from_slice(header);
        let tagged_in = outer_tag(frame).is_some();
        let shift: i16 = match form {
            TagForm::AsIs => {
                out.extend_from_slice(frame);
                0
            }
            TagForm::Untagged => {
                out.extend_from_slice(&frame[..12]);
                out.extend_from_slice(&frame[16..]);
                -(TAG_LEN as i16)
            }
            TagForm::Tagged(tag) => {
                out.extend_from_slice(&frame[..12]);
                out.extend_from_slice(&tag.tpid.to_be_bytes());
                out.extend_from_slice(&tag.tci.to_be_bytes());
                let rest = if tagged_in { 16 } else { 12 };
                out.extend_from_slice(&frame[rest..]);
                if tagged_in {
                    0
                } else {
                    TAG_LEN as i16
                }
            }
        };
        if meta == VNET_HDR_LEN && shift != 0 {
            VnetHeader::new_unchecked(&mut out[start..start + meta]).shift_offsets(shift as u16);
        }
    }

    fn tpid() -> impl Strategy<Value = u16> {
        prop_oneof![
            Just(0x8100u16),
            Just(0x88a8u16),
            Just(0x0800u16),
            any::<u16>()
        ]
    }

    fn form() -> impl Strategy<Value = TagForm> {
        prop_oneof![
            Just(TagForm::AsIs),
            Just(TagForm::Untagged),
            (tpid(), any::<u16>()).prop_map(|(tpid, tci)| TagForm::Tagged(Tag { tpid, tci })),
        ]
    }

    proptest! {
        /// Byte for byte what the worker made, for every frame it rewrote:
        /// with and without a virtio-net header, offsets in use or not.
        #[test]
        fn rewrite_matches_the_worker(
            header in prop::array::uniform10(any::<u8>()),
            flags in 0u8..4,
            gso in prop_oneof![Just(0u8), Just(1u8), Just(4u8), any::<u8>()],
            with_header in any::<bool>(),
            outer in tpid(),
            frame in prop::collection::vec(any::<u8>(), 14..200),
            form in form(),
        ) {
            let mut frame = frame;
            frame[12..14].copy_from_slice(&outer.to_be_bytes());
            let mut header = header;
            header[0] = flags;
            header[1] = gso;
            let meta: &[u8] = if with_header { &header } else { &[] };
            let tagged = outer_tag(&frame).is_some();
            // What the worker never asked of it.
            prop_assume!(form != TagForm::Untagged || tagged);
            let buffer = join(meta, &frame);
            let mut want = vec![7u8; 5];
            reference(&buffer, meta.len(), form, &mut want);
            let mut got = vec![7u8; 5];
            let len = rewrite(&buffer, meta.len(), form, &mut got);
            prop_assert_eq!(len, got.len() - 5);
            prop_assert_eq!(got, want);
        }

        /// Pushing a tag onto an untagged frame is tagging it.
        #[test]
        fn push_matches_rewrite_on_untagged_frames(
            header in prop::array::uniform10(any::<u8>()),
            frame in prop::collection::vec(any::<u8>(), 12..200),
            tag in (tpid(), any::<u16>()).prop_map(|(tpid, tci)| Tag { tpid, tci }),
        ) {
            prop_assume!(outer_tag(&frame).is_none());
            let mut out = vec![0u8; VNET_HDR_LEN + frame.len() + TAG_LEN];
            let len = push_into(&header, &frame, Some(tag), &mut out).unwrap();
            let mut want = Vec::new();
            rewrite(&join(&header, &frame), VNET_HDR_LEN, TagForm::Tagged(tag), &mut want);
            prop_assert_eq!(&out[..len], &want[..]);
        }
    }
}
