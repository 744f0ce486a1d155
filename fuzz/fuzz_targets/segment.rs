//! Software segmentation and checksum completion (`bridge::wire::segment`)
//! over arbitrary frames and virtio-net headers, every result checked
//! against the bytes by rules and a checksum written out here:
//!
//! - `make_whole`: a frame without offloads passes as it is; a partial
//!   checksum is filled in with the ones' complement sum from
//!   `csum_start`; a GSO TCPv4 or TCPv6 frame is cut into segments of at
//!   most `gso_size` payload bytes whose payloads join to the original,
//!   with headers copied but for IP lengths, IPv4 ids, sequence numbers,
//!   flags and checksums, and every IPv4 header and TCP checksum verifying;
//!   anything else is refused with the error it deserves, before anything
//!   is emitted.
//! - `complete_partial` fills in exactly the checksums that hold the
//!   partial form, and then they verify; it changes nothing else.
//! - `offload_large_tcp` marks only frames it may, and a marked frame cuts
//!   back into segments that fit the MTU and join to its payload.
//!
//! Input: a 10-byte virtio-net header (host byte order), a byte `grow`,
//! and the frame, to which `grow * 300` bytes of a pattern are appended
//! (frames past 64 KiB, which inputs of libFuzzer's usual size never
//! reach). `offload_large_tcp` gets the header's `gso_size` as the MTU.

#![no_main]
// `same_but` takes a list of byte ranges; a list of one is meant.
#![allow(clippy::single_range_in_vec_init)]

use bridge::wire::segment::{complete_partial, make_whole, offload_large_tcp, SegmentError};
use libfuzzer_sys::fuzz_target;

const VNET_HDR_LEN: usize = 10;
const NEEDS_CSUM: u8 = 1;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CWR: u8 = 0x80;
const GROW_UNIT: usize = 300;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn ne16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// The Internet checksum's ones' complement sum (RFC 1071) of `parts`
/// laid end to end (each but the last of even length), word by word,
/// folded to 16 bits.
fn ones_sum(parts: &[&[u8]]) -> u16 {
    let mut sum: u64 = 0;
    for part in parts {
        let mut words = part.chunks_exact(2);
        for w in &mut words {
            sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = words.remainder() {
            sum += u64::from(*last) << 8;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Where a TCP frame's headers are: after any 802.1Q and 802.1ad tags, an
/// IPv4 header of its IHL (protocol 6) or an IPv6 header without
/// extensions (next header 6), then TCP with its data offset, all inside
/// the frame. `None` when the frame is not such a frame.
#[derive(Debug, Clone, Copy)]
struct Tcp {
    v4: bool,
    l3: usize,
    l4: usize,
    data: usize,
}

fn tcp_layout(frame: &[u8], v4: bool) -> Option<Tcp> {
    let mut l3 = 14;
    while frame.len() >= l3 && matches!(be16(frame, l3 - 2), 0x8100 | 0x88a8) {
        l3 += 4;
    }
    if frame.len() < l3 || be16(frame, l3 - 2) != if v4 { 0x0800 } else { 0x86dd } {
        return None;
    }
    let l4 = if v4 {
        let ihl = usize::from(*frame.get(l3)? & 0x0f) * 4;
        if ihl < 20 || *frame.get(l3 + 9)? != 6 {
            return None;
        }
        l3 + ihl
    } else {
        if *frame.get(l3 + 6)? != 6 {
            return None;
        }
        l3 + 40
    };
    let thl = usize::from(*frame.get(l4 + 12)? >> 4) * 4;
    if thl < 20 || l4 + thl > frame.len() {
        return None;
    }
    Some(Tcp {
        v4,
        l3,
        l4,
        data: l4 + thl,
    })
}

/// Whether a TCP segment's checksum verifies with its pseudo-header.
fn tcp_verifies(seg: &[u8], t: Tcp) -> bool {
    let tcp = &seg[t.l4..];
    let len = tcp.len() as u32;
    // Addresses, then zero, protocol and length (RFC 793) or length, zero
    // and next header (RFC 8200): both even, so summed apart.
    let (addrs, rest): (&[u8], [u8; 8]) = if t.v4 {
        let l = (len as u16).to_be_bytes();
        (&seg[t.l3 + 12..t.l3 + 20], [0, 6, l[0], l[1], 0, 0, 0, 0])
    } else {
        let l = len.to_be_bytes();
        (
            &seg[t.l3 + 8..t.l3 + 40],
            [l[0], l[1], l[2], l[3], 0, 0, 0, 6],
        )
    };
    ones_sum(&[addrs, &rest, tcp]) == 0xffff
}

/// Whether `a` and `b` are equal outside the byte ranges `except` (in
/// order, apart, inside both).
fn same_but(a: &[u8], b: &[u8], except: &[std::ops::Range<usize>]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut at = 0;
    for r in except {
        if a[at..r.start] != b[at..r.start] {
            return false;
        }
        at = r.end;
    }
    a[at..] == b[at..]
}

/// What `make_whole` emitted, end to end in one buffer: a frame cut at a
/// `gso_size` of 1 is tens of thousands of segments, one allocation each
/// would cost more than the cutting.
#[derive(Default)]
struct Segments {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Segments {
    fn push(&mut self, part: &[u8]) {
        self.bytes.extend_from_slice(part);
        self.ends.push(self.bytes.len());
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.bytes[start..end])
    }
}

/// Checks the segments `make_whole` emitted for GSO frame `frame` of
/// layout `t` at `mss` payload bytes each.
fn check_segments(frame: &[u8], t: Tcp, mss: usize, segments: &Segments) {
    let data = &frame[t.data..];
    let count = data.len().div_ceil(mss).max(1);
    assert_eq!(
        segments.len(),
        count,
        "{} payload bytes at {mss}",
        data.len()
    );
    let seq0 = be32(frame, t.l4 + 4);
    let id0 = be16(frame, t.l3 + 4);
    let flags = frame[t.l4 + 13];
    let mut joined = 0;
    let mut expected_seq = seq0;
    for (i, seg) in segments.iter().enumerate() {
        assert!(seg.len() >= t.data, "segment {i} shorter than the headers");
        let payload = &seg[t.data..];
        assert!(
            payload.len() <= mss,
            "segment {i}: {} bytes over {mss}",
            payload.len()
        );
        assert!(
            i + 1 == count || payload.len() == mss,
            "a short segment before the last"
        );
        assert_eq!(
            seg[..t.l3],
            frame[..t.l3],
            "segment {i}: Ethernet header and tags"
        );
        let ip = &seg[t.l3..t.l4];
        if t.v4 {
            assert_eq!(
                usize::from(be16(ip, 2)),
                seg.len() - t.l3,
                "segment {i}: IPv4 total length"
            );
            assert_eq!(
                be16(ip, 4),
                id0.wrapping_add(i as u16),
                "segment {i}: IPv4 id"
            );
            assert_eq!(ones_sum(&[ip]), 0xffff, "segment {i}: IPv4 header checksum");
            assert!(
                same_but(ip, &frame[t.l3..t.l4], &[2..6, 10..12]),
                "segment {i}: IPv4 header"
            );
        } else {
            assert_eq!(
                usize::from(be16(ip, 4)),
                seg.len() - t.l3 - 40,
                "segment {i}: IPv6 payload length"
            );
            assert!(
                same_but(ip, &frame[t.l3..t.l4], &[4..6]),
                "segment {i}: IPv6 header"
            );
        }
        let tcp = &seg[t.l4..t.data];
        assert_eq!(be32(tcp, 4), expected_seq, "segment {i}: sequence number");
        let mut want = flags;
        if i + 1 < count {
            want &= !(FIN | PSH);
        }
        if i > 0 {
            want &= !CWR;
        }
        assert_eq!(tcp[13], want, "segment {i}: TCP flags");
        assert!(
            same_but(tcp, &frame[t.l4..t.data], &[4..8, 13..14, 16..18]),
            "segment {i}: TCP header"
        );
        assert!(tcp_verifies(seg, t), "segment {i}: TCP checksum");
        expected_seq = expected_seq.wrapping_add(payload.len() as u32);
        assert!(
            data[joined..].starts_with(payload),
            "segment {i}: not the frame's payload at {joined}"
        );
        joined += payload.len();
    }
    assert_eq!(
        joined,
        data.len(),
        "the segments' payloads are not the frame's"
    );
}

/// What `make_whole` must do with `vnet` and `frame`: the error, or the
/// layout of a GSO frame (`None` for the other cases, checked apart).
fn expected_gso(vnet: &[u8], frame: &[u8]) -> Result<Option<(Tcp, usize)>, SegmentError> {
    let kind = vnet[1] & !GSO_ECN;
    let v4 = match kind {
        0 => return Ok(None),
        GSO_TCPV4 => true,
        GSO_TCPV6 => false,
        other => return Err(SegmentError::Unsupported(other)),
    };
    let t = tcp_layout(frame, v4).ok_or(SegmentError::Malformed)?;
    let mss = usize::from(ne16(vnet, 4));
    // No size, or one under Linux's minimum TCP send MSS for a frame that
    // would be cut at it.
    if mss == 0 || (mss < 48 && frame.len() - t.data > mss) {
        return Err(SegmentError::SegmentSize(mss as u16));
    }
    // The largest segment's IPv4 total length or IPv6 payload length must
    // fit its 16 bits.
    let largest = t.data - t.l3 + (frame.len() - t.data).min(mss) - if v4 { 0 } else { 40 };
    if largest > 0xffff {
        return Err(SegmentError::Malformed);
    }
    Ok(Some((t, mss)))
}

fn check_make_whole(vnet: &[u8], frame: &[u8]) {
    let mut scratch = Vec::new();
    let mut out = Segments::default();
    let result = make_whole(vnet, frame, &mut scratch, |part| out.push(part));
    let expected = expected_gso(vnet, frame);
    match (&expected, result) {
        (Err(want), got) => {
            assert_eq!(got, Err(*want));
            assert!(out.len() == 0, "emitted before an error");
        }
        (Ok(Some((t, mss))), got) => {
            assert_eq!(got, Ok(()));
            check_segments(frame, *t, *mss, &out);
        }
        (Ok(None), got) if vnet[0] & NEEDS_CSUM == 0 => {
            assert_eq!(got, Ok(()));
            assert!(
                out.len() == 1 && out.bytes == frame,
                "a frame without offloads changed"
            );
        }
        (Ok(None), got) => {
            let start = usize::from(ne16(vnet, 6));
            let offset = usize::from(ne16(vnet, 8));
            let field = start + offset;
            if field + 2 > frame.len() {
                assert_eq!(got, Err(SegmentError::Malformed));
                assert!(out.len() == 0, "emitted before an error");
                return;
            }
            assert_eq!(got, Ok(()));
            assert_eq!(out.len(), 1);
            // The sum includes the field's partial value (the
            // pseudo-header's sum the sender left there).
            let mut sum = !ones_sum(&[&frame[start..]]);
            if offset == 6 && sum == 0 {
                sum = 0xffff; // UDP: zero means no checksum
            }
            assert_eq!(be16(&out.bytes, field), sum, "the checksum filled in");
            assert!(
                same_but(&out.bytes, frame, &[field..field + 2]),
                "more than the checksum changed"
            );
        }
    }
    // The scratch buffer holds one segment at a time: its size is bounded
    // by the frame's, whatever the header says.
    assert!(
        scratch.capacity() <= 2 * frame.len().max(16),
        "scratch of {} for {}",
        scratch.capacity(),
        frame.len()
    );
}

/// The L4 checksum `complete_partial` looks at: (field offset, stored,
/// whether it verifies, the folded pseudo-header sum, UDP), or `None`
/// where it must leave the frame alone whatever the checksum.
fn l4_checksum(frame: &[u8]) -> Option<(usize, u16, bool, u16, bool)> {
    let mut l3 = 14;
    while frame.len() >= l3 && matches!(be16(frame, l3 - 2), 0x8100 | 0x88a8) {
        l3 += 4;
    }
    if frame.len() < l3 {
        return None;
    }
    let (l4, proto, addrs, l4_len, v4) = match be16(frame, l3 - 2) {
        0x0800 => {
            if frame.len() < l3 + 20 {
                return None;
            }
            let ihl = usize::from(frame[l3] & 0x0f) * 4;
            let total = usize::from(be16(frame, l3 + 2));
            // Fragments (MF or an offset) are left alone.
            if ihl < 20
                || be16(frame, l3 + 6) & 0x3fff != 0
                || total < ihl
                || l3 + total > frame.len()
            {
                return None;
            }
            (
                l3 + ihl,
                frame[l3 + 9],
                &frame[l3 + 12..l3 + 20],
                total - ihl,
                true,
            )
        }
        0x86dd => {
            if frame.len() < l3 + 40 {
                return None;
            }
            let payload = usize::from(be16(frame, l3 + 4));
            if l3 + 40 + payload > frame.len() {
                return None;
            }
            (
                l3 + 40,
                frame[l3 + 6],
                &frame[l3 + 8..l3 + 40],
                payload,
                false,
            )
        }
        _ => return None,
    };
    let field = match proto {
        6 => l4 + 16,
        17 => l4 + 6,
        _ => return None,
    };
    if field + 2 > l4 + l4_len {
        return None;
    }
    let stored = be16(frame, field);
    if proto == 17 && v4 && stored == 0 {
        return None; // no UDP checksum
    }
    // The pseudo-header as the sum sees it: addresses, protocol, length
    // (RFC 768, RFC 793; RFC 8200 puts them in another order, same sum).
    let mut pseudo = addrs.to_vec();
    pseudo.extend_from_slice(&[0, proto]);
    pseudo.extend_from_slice(&(l4_len as u32).to_be_bytes());
    let verifies = ones_sum(&[&pseudo, &frame[l4..l4 + l4_len]]) == 0xffff;
    Some((field, stored, verifies, ones_sum(&[&pseudo]), proto == 17))
}

fn check_complete_partial(frame: &[u8]) {
    let mut f = frame.to_vec();
    let filled = complete_partial(&mut f);
    match l4_checksum(frame) {
        Some((field, stored, false, pseudo, udp)) if stored == pseudo => {
            assert!(filled, "a partial checksum left as it was");
            assert!(
                same_but(&f, frame, &[field..field + 2]),
                "more than the checksum changed"
            );
            let (_, now, verifies, _, _) = l4_checksum(&f).expect("still a checksummed frame");
            assert!(verifies, "the checksum filled in does not verify");
            assert!(!udp || now != 0, "a UDP checksum of zero");
            // Whole now: a second call leaves it.
            let again = f.clone();
            assert!(!complete_partial(&mut f));
            assert_eq!(f, again);
        }
        _ => {
            assert!(
                !filled,
                "filled in a checksum that was whole, damaged or absent"
            );
            assert_eq!(f, frame, "changed a frame it did not fill in");
        }
    }
}

fn check_offload_large_tcp(vnet_in: &[u8], frame: &[u8], mtu: usize) {
    let mut vnet = vnet_in.to_vec();
    let mut f = frame.to_vec();
    if !offload_large_tcp(&mut vnet, &mut f, mtu) {
        assert!(
            vnet == vnet_in && f == frame,
            "changed what it did not mark"
        );
        return;
    }
    // Only untagged IP frames over the MTU are marked, and whole.
    let v4 = match be16(frame, 12) {
        0x0800 => true,
        0x86dd => false,
        other => panic!("marked a frame of EtherType {other:#06x}"),
    };
    assert!(frame.len() > 14 + mtu, "marked a frame that fits the MTU");
    let t = tcp_layout(frame, v4).expect("marked a frame that is not TCP");
    assert_eq!(t.l3, 14);
    let ip_len = if v4 {
        be16(frame, 16) as usize
    } else {
        40 + be16(frame, 18) as usize
    };
    assert_eq!(
        14 + ip_len,
        frame.len(),
        "marked a frame whose IP length is not its own"
    );
    assert_eq!(vnet[0], NEEDS_CSUM);
    assert_eq!(vnet[1], if v4 { GSO_TCPV4 } else { GSO_TCPV6 });
    assert_eq!(usize::from(ne16(&vnet, 2)), t.data);
    assert_eq!(usize::from(ne16(&vnet, 6)), t.l4);
    assert_eq!(ne16(&vnet, 8), 16);
    assert!(
        same_but(&f, frame, &[t.l4 + 16..t.l4 + 18]),
        "marking changed more than the checksum"
    );
    // Marked, it cuts back into segments that fit the MTU (when its
    // headers leave room for payload) and join to its payload.
    let mss = usize::from(ne16(&vnet, 4));
    let headers = t.data - t.l3;
    assert_eq!(mss, mtu.saturating_sub(headers).max(1));
    let mut scratch = Vec::new();
    let mut out = Segments::default();
    make_whole(&vnet, &f, &mut scratch, |part| out.push(part)).expect("a marked frame cuts");
    check_segments(&f, t, mss, &out);
    if headers < mtu {
        assert!(
            out.iter().all(|seg| seg.len() - 14 <= mtu),
            "a segment over the MTU"
        );
    }
}

fuzz_target!(|bytes: &[u8]| {
    if bytes.len() < VNET_HDR_LEN + 1 {
        return;
    }
    let (vnet, rest) = bytes.split_at(VNET_HDR_LEN);
    let grow = usize::from(rest[0]) * GROW_UNIT;
    let mut frame = rest[1..].to_vec();
    frame.extend((0..grow).map(|i| (i * 7 + 3) as u8));

    check_make_whole(vnet, &frame);
    check_complete_partial(&frame);
    check_offload_large_tcp(vnet, &frame, usize::from(ne16(vnet, 4)));
});
