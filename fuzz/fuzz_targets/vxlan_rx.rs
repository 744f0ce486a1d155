//! The VXLAN receive path's pure part (`bridge::port::vxlan::datagrams`)
//! over arbitrary messages: a message is cut into as many datagrams as its
//! GRO segment size says, each inner frame lies inside the message at its
//! datagram's place with the VNI of its header, each drop has the reason
//! the header bytes give, and a pass stopped anywhere and resumed from its
//! offset, as a batch that fills does, yields the rest.
//!
//! Input: byte 0 holds flags (bit 0: the message came cut, MSG_TRUNC; bit
//! 1: it carries a UDP GRO segment size), bytes 1..3 the segment size
//! (little-endian), bytes 3..6 and 6..9 two VNIs that have a port here
//! (big-endian, as on the wire), bytes 9..11 an offset to resume at
//! (little-endian, taken modulo the length plus one); the rest is the
//! message's payload.

#![no_main]

use std::ops::Range;

use bridge::port::vxlan::datagrams::{Datagrams, Dropped};
use libfuzzer_sys::fuzz_target;

mod common;
use common::range_in;

const INPUT_HEADER: usize = 11;
const VXLAN_LEN: usize = 8;
const ETHERNET_LEN: usize = 14;

/// One item of a pass: the payload offset after it, and the inner frame's
/// VNI and place, or the drop reason.
type Item = (usize, Result<(u32, Range<usize>), Dropped>);

/// A datagram's fate by RFC 7348 as the Linux vxlan device (and mpbridge)
/// applies it with no extensions: long enough for the VXLAN and an
/// Ethernet header, the I flag (0x08 of byte 0) set, every reserved bit
/// (the rest of byte 0, bytes 1..4 and byte 7) clear, a VNI (bytes 4..7)
/// that a port has.
fn fate(
    datagram: Range<usize>,
    payload: &[u8],
    known: &[u32],
) -> Result<(u32, Range<usize>), Dropped> {
    let d = &payload[datagram.clone()];
    if d.len() < VXLAN_LEN + ETHERNET_LEN {
        return Err(Dropped::Short);
    }
    if d[0] & 0x08 == 0 {
        return Err(Dropped::Flags);
    }
    if d[0] != 0x08 || d[1] != 0 || d[2] != 0 || d[3] != 0 || d[7] != 0 {
        return Err(Dropped::Reserved);
    }
    let vni = u32::from(d[4]) << 16 | u32::from(d[5]) << 8 | u32::from(d[6]);
    if !known.contains(&vni) {
        return Err(Dropped::UnknownVni);
    }
    Ok((vni, datagram.start + VXLAN_LEN..datagram.end))
}

/// The items of a pass from `offset`, from the rules above and plain
/// arithmetic: a cut message is one drop; otherwise datagrams of `segment`
/// bytes (the last shorter) follow one another, and a message without a
/// segment size is one datagram, an empty one too.
fn reference(
    payload: &[u8],
    segment: Option<usize>,
    truncated: bool,
    offset: usize,
    known: &[u32],
) -> Vec<Item> {
    let len = payload.len();
    if offset > 0 && offset >= len {
        return Vec::new();
    }
    if truncated {
        return vec![(len, Err(Dropped::Truncated))];
    }
    let size = match segment {
        Some(size) => size.max(1),
        None if offset == 0 => return vec![(len, fate(0..len, payload, known))],
        None => len,
    };
    let mut items = Vec::new();
    let mut start = offset;
    while start < len {
        let end = (start + size).min(len);
        items.push((end, fate(start..end, payload, known)));
        start = end;
    }
    items
}

/// Runs a pass to its end, checking that `is_done` foretells the end and
/// that the offset stays put when nothing is taken.
fn drain(payload: &[u8], mut pass: Datagrams<'_>, known: &[u32]) -> Vec<Item> {
    let mut items = Vec::new();
    loop {
        let done = pass.is_done();
        let before = pass.offset();
        let Some(result) = pass.next_with(|vni| known.contains(&vni)) else {
            assert!(done, "is_done was false before the end");
            assert_eq!(pass.offset(), before);
            break;
        };
        assert!(!done, "is_done was true before an item");
        assert!(pass.offset() >= before, "the offset went back");
        let result = result.map(|(vni, frame)| {
            assert!(vni < 1 << 24, "VNI {vni:#x} is over 24 bits");
            (vni, range_in(payload, frame))
        });
        items.push((pass.offset(), result));
        // Every item takes a byte but an empty message's one: the pass
        // ends.
        assert!(items.len() <= payload.len() + 1, "more items than bytes");
    }
    assert!(pass.next_with(|_| true).is_none(), "an item after the end");
    assert!(pass.is_done());
    items
}

fuzz_target!(|bytes: &[u8]| {
    let Some((head, payload)) = bytes.split_at_checked(INPUT_HEADER) else {
        return;
    };
    let truncated = head[0] & 1 != 0;
    let segment = (head[0] & 2 != 0).then(|| usize::from(u16::from_le_bytes([head[1], head[2]])));
    let vni = |at: usize| {
        u32::from(head[at]) << 16 | u32::from(head[at + 1]) << 8 | u32::from(head[at + 2])
    };
    let known = [vni(3), vni(6)];
    let offset = usize::from(u16::from_le_bytes([head[9], head[10]])) % (payload.len() + 1);

    let items = drain(payload, Datagrams::new(payload, segment, truncated), &known);
    let expected = reference(payload, segment, truncated, 0, &known);
    assert_eq!(items, expected, "the pass and the reference disagree");

    // As many datagrams as the segment size cuts, and the offset at the
    // end is the whole payload.
    let count = match (truncated, segment) {
        (true, _) => 1,
        (false, Some(size)) => payload.len().div_ceil(size.max(1)),
        (false, None) => 1,
    };
    assert_eq!(
        items.len(),
        count,
        "{} bytes cut at {segment:?}",
        payload.len()
    );
    if let Some(&(end, _)) = items.last() {
        assert_eq!(end, payload.len());
    }
    // Frames follow one another in order and do not overlap.
    let frames: Vec<&Range<usize>> = items
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .map(|(_, f)| f)
        .collect();
    assert!(frames
        .windows(2)
        .all(|w| w[0].end <= w[1].start - VXLAN_LEN));

    // Stopped after any number of items (a batch filled) and resumed from
    // the offset where it stopped, the pass yields the rest. Long trains
    // (one-byte segments) are resumed at some 32 places, not after every
    // item, which would cost the square of their length.
    let step = (items.len() / 32).max(1);
    let mut pass = Datagrams::new(payload, segment, truncated);
    for k in 0..=items.len() {
        if pass.is_done() {
            assert_eq!(k, items.len());
            break;
        }
        if k % step == 0 || k + 1 == items.len() {
            let resumed = Datagrams::resume(payload, segment, truncated, pass.offset());
            assert_eq!(
                drain(payload, resumed, &known),
                items[k..],
                "resumed after {k}"
            );
        }
        pass.next_with(|vni| known.contains(&vni));
    }

    // Resumed at any offset (not one a pass stops at), the pass is what
    // the reference says from there.
    let resumed = drain(
        payload,
        Datagrams::resume(payload, segment, truncated, offset),
        &known,
    );
    assert_eq!(
        resumed,
        reference(payload, segment, truncated, offset, &known),
        "from offset {offset}"
    );
});
