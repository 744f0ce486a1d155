//! The zero-copy wire views over arbitrary bytes: `EthernetFrame`,
//! `VnetHeader`, `MacAddr`, and the tag emitters `push_into` and
//! `rewrite`, each checked against what the bytes say, read here
//! independently of the views.

#![no_main]

use arbitrary::Arbitrary;
use bridge::wire::tag::{push_into, rewrite, EmitError, Tag, TagForm, TAG_LEN};
use bridge::wire::vnet::{VNET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN};
use bridge::wire::{EtherType, EthernetFrame, MacAddr, MacKind, Truncated, VnetHeader};
use libfuzzer_sys::fuzz_target;

/// A tag's TPID: the two that mark a VLAN tag, or anything else.
#[derive(Debug, Clone, Copy, Arbitrary)]
enum Tpid {
    Dot1Q,
    Dot1ad,
    Other(u16),
}

impl Tpid {
    fn value(self) -> u16 {
        match self {
            Tpid::Dot1Q => 0x8100,
            Tpid::Dot1ad => 0x88a8,
            Tpid::Other(v) => v,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    /// The metadata given to `push_into` and `rewrite`: a virtio-net
    /// header, cut or grown by `vnet_len_delta` (then no header at all).
    vnet: [u8; VNET_HDR_LEN],
    vnet_len_delta: i8,
    tag: Option<(Tpid, u16)>,
    /// The output buffer's size around the length needed.
    slack: i8,
    /// The frame (the rest of the input), also read as a virtio-net header
    /// and, when it is UTF-8, as a MAC address to parse.
    frame: &'a [u8],
}

const CANARY: u8 = 0xa5;

fn be16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn ne16(bytes: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([bytes[at], bytes[at + 1]])
}

fn mac_at(bytes: &[u8], at: usize) -> MacAddr {
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&bytes[at..at + 6]);
    MacAddr(mac)
}

/// The kind of an address, from IEEE 802 rules written out here.
fn expected_kind(mac: MacAddr) -> MacKind {
    let b = mac.0;
    if b[0] & 1 == 0 {
        if b == [0; 6] {
            MacKind::Zero
        } else {
            MacKind::Unicast
        }
    } else if b == [0xff; 6] {
        MacKind::Broadcast
    } else if b[..5] == [0x01, 0x80, 0xc2, 0, 0] && b[5] <= 0x0f {
        MacKind::Reserved
    } else {
        MacKind::Multicast
    }
}

fn check_mac(mac: MacAddr) {
    let kind = expected_kind(mac);
    assert_eq!(mac.kind(), kind, "{mac}");
    assert_eq!(mac.is_group(), mac.0[0] & 1 != 0);
    assert_eq!(mac.is_broadcast(), kind == MacKind::Broadcast);
    assert_eq!(mac.is_zero(), kind == MacKind::Zero);
    assert_eq!(mac.is_reserved(), kind == MacKind::Reserved);
    assert_eq!(mac.is_valid_source(), kind == MacKind::Unicast);
    let b = mac.0;
    assert_eq!(
        mac.to_u64(),
        u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
    );
    let text = mac.to_string();
    assert_eq!(text.len(), 17);
    assert_eq!(text.parse::<MacAddr>(), Ok(mac));
    assert_eq!(format!("{mac:?}"), text);
}

fn check_ethernet(bytes: &[u8]) {
    let len = bytes.len();
    let tagged = len >= 14 && matches!(be16(bytes, 12), 0x8100 | 0x88a8);
    let header = if tagged { 18 } else { 14 };
    let result = EthernetFrame::new_checked(bytes);
    if len < header {
        assert_eq!(
            result.unwrap_err(),
            Truncated {
                len,
                needed: header
            }
        );
        return;
    }
    let frame = result.expect("a frame holding its header is accepted");
    assert!(frame.check_len().is_ok());
    let (dst, src) = (frame.dst_addr(), frame.src_addr());
    assert_eq!(dst, mac_at(bytes, 0));
    assert_eq!(src, mac_at(bytes, 6));
    assert_eq!(dst, MacAddr::from_bytes(bytes));
    check_mac(dst);
    check_mac(src);
    let ethertype = frame.ethertype();
    assert_eq!(ethertype, EtherType(be16(bytes, 12)));
    assert_eq!(ethertype.is_vlan_tag(), tagged);
    let vlan = frame.vlan_id();
    if tagged {
        assert_eq!(vlan, be16(bytes, 14) & 0x0fff);
    } else {
        assert_eq!(vlan, 0);
    }
    assert!(vlan < 4096);
    let payload = frame.payload();
    assert_eq!(payload.len(), len - header);
    assert_eq!(payload.as_ptr(), bytes[header..].as_ptr());

    // The setters write what the getters read, and nothing else.
    let mut copy = bytes.to_vec();
    let mut view = EthernetFrame::new_unchecked(&mut copy[..]);
    view.set_dst_addr(src);
    view.set_src_addr(dst);
    assert_eq!((view.dst_addr(), view.src_addr()), (src, dst));
    if tagged {
        let tci = be16(bytes, 14) ^ 0x0fff;
        view.set_vlan_tci(tci);
        assert_eq!(view.vlan_id(), tci & 0x0fff);
    }
    view.set_ethertype(EtherType::IPV4);
    assert_eq!(view.vlan_id(), 0);
    assert!(view.check_len().is_ok());
    assert_eq!(&copy[18.min(len)..], &bytes[18.min(len)..]);
}

fn check_vnet(bytes: &[u8]) {
    let result = VnetHeader::new_checked(bytes);
    if bytes.len() < VNET_HDR_LEN {
        assert_eq!(
            result.unwrap_err(),
            Truncated {
                len: bytes.len(),
                needed: VNET_HDR_LEN
            }
        );
        return;
    }
    let view = result.expect("ten bytes hold a header");
    assert_eq!(view.flags(), bytes[0]);
    assert_eq!(view.needs_csum(), bytes[0] & VNET_HDR_F_NEEDS_CSUM != 0);
    assert_eq!(view.gso_type(), bytes[1]);
    assert_eq!(view.hdr_len(), ne16(bytes, 2));
    assert_eq!(view.gso_size(), ne16(bytes, 4));
    assert_eq!(view.csum_start(), ne16(bytes, 6));
    assert_eq!(view.csum_offset(), ne16(bytes, 8));
}

/// The header the input gives: ten bytes, cut or grown by
/// `vnet_len_delta` (metadata of another length is no virtio-net header).
fn metadata(input: &Input<'_>) -> Vec<u8> {
    let vnet_len = (VNET_HDR_LEN as isize + isize::from(input.vnet_len_delta))
        .clamp(0, VNET_HDR_LEN as isize) as usize;
    let mut vnet = input.vnet.to_vec();
    vnet.truncate(vnet_len);
    if input.vnet_len_delta > 0 && input.vnet_len_delta % 3 == 0 {
        // Too long, not only too short.
        vnet.resize(VNET_HDR_LEN + input.vnet_len_delta as usize / 3, 0);
    }
    vnet
}

/// Whether `header` is `original` with the offsets in use moved by
/// `shift` (when it is a virtio-net header at all) and all else unchanged.
fn check_shifted(header: &[u8], original: &[u8], shift: i16) {
    if original.len() != VNET_HDR_LEN || shift == 0 {
        assert_eq!(header, original);
        return;
    }
    let header = VnetHeader::new_checked(header).unwrap();
    let original = VnetHeader::new_checked(original).unwrap();
    let moved = |used: bool, before: u16| {
        if used {
            before.wrapping_add(shift as u16)
        } else {
            before
        }
    };
    assert_eq!(header.flags(), original.flags());
    assert_eq!(header.gso_type(), original.gso_type());
    assert_eq!(header.gso_size(), original.gso_size());
    assert_eq!(header.csum_offset(), original.csum_offset());
    assert_eq!(
        header.hdr_len(),
        moved(original.gso_type() != 0, original.hdr_len())
    );
    assert_eq!(
        header.csum_start(),
        moved(original.needs_csum(), original.csum_start())
    );
}

fn check_push(input: &Input<'_>) {
    let vnet = metadata(input);
    let frame = input.frame;
    let tag = input.tag.map(|(tpid, tci)| Tag {
        tpid: tpid.value(),
        tci,
    });
    let tag_len = if tag.is_some() { TAG_LEN } else { 0 };
    let needed = vnet.len() + frame.len() + tag_len;
    let capacity = (needed as isize + isize::from(input.slack)).max(0) as usize;
    let mut out = vec![CANARY; capacity];
    let result = push_into(&vnet, frame, tag, &mut out);
    if frame.len() < 12 {
        assert_eq!(result, Err(EmitError::Runt));
        assert!(out.iter().all(|&b| b == CANARY), "an error wrote");
        return;
    }
    if needed > capacity {
        assert_eq!(
            result,
            Err(EmitError::Oversize {
                len: needed,
                capacity
            })
        );
        assert!(out.iter().all(|&b| b == CANARY), "an error wrote");
        return;
    }
    let len = result.expect("a copy that fits succeeds");
    assert_eq!(len, needed);
    assert!(
        out[len..].iter().all(|&b| b == CANARY),
        "wrote past the end"
    );
    let (header, body) = out[..len].split_at(vnet.len());
    let Some(Tag { tpid, tci }) = tag else {
        assert_eq!(header, &vnet[..]);
        assert_eq!(body, frame);
        return;
    };
    // The frame around the tag, byte for byte.
    assert_eq!(&body[..12], &frame[..12]);
    assert_eq!(be16(body, 12), tpid);
    assert_eq!(be16(body, 14), tci);
    assert_eq!(&body[16..], &frame[12..]);
    check_shifted(header, &vnet, TAG_LEN as i16);
    // Read back as a frame, it carries the tag's VLAN.
    check_ethernet(body);
    if matches!(tpid, 0x8100 | 0x88a8) {
        match EthernetFrame::new_checked(body) {
            Ok(parsed) => {
                assert_eq!(parsed.vlan_id(), tci & 0x0fff);
                assert_eq!(parsed.ethertype(), EtherType(tpid));
                assert_eq!(parsed.payload(), &frame[frame.len().min(14)..]);
            }
            // Twelve or thirteen bytes of frame: the tag, but no room for
            // the inner EtherType.
            Err(error) => {
                assert!(frame.len() < 14, "{error}");
                assert_eq!(error.needed, 18);
            }
        }
    }
}

/// `rewrite` of the input's metadata and frame into each form, against
/// the layout written out here: a tag is four bytes after the addresses.
fn check_rewrite(input: &Input<'_>) {
    let vnet = metadata(input);
    let buffer = [&vnet[..], input.frame].concat();
    let frame = input.frame;
    let tagged = frame.len() >= 16 && matches!(be16(frame, 12), 0x8100 | 0x88a8);
    let mut forms = vec![TagForm::AsIs, TagForm::Untagged];
    if let Some((tpid, tci)) = input.tag {
        forms.push(TagForm::Tagged(Tag {
            tpid: tpid.value(),
            tci,
        }));
    }
    for form in forms {
        let mut out = vec![CANARY; 3];
        let len = rewrite(&buffer, vnet.len(), form, &mut out);
        assert_eq!(&out[..3], &[CANARY; 3], "wrote over what was there");
        assert_eq!(len, out.len() - 3);
        let (header, body) = out[3..].split_at(vnet.len().min(len));
        let shift = match form {
            TagForm::Untagged if tagged => {
                assert_eq!(&body[..12], &frame[..12]);
                assert_eq!(&body[12..], &frame[16..]);
                -(TAG_LEN as i16)
            }
            TagForm::Tagged(tag) if tagged || frame.len() >= 12 => {
                assert_eq!(&body[..12], &frame[..12]);
                assert_eq!(be16(body, 12), tag.tpid);
                assert_eq!(be16(body, 14), tag.tci);
                let rest = if tagged { 16 } else { 12 };
                assert_eq!(&body[16..], &frame[rest..]);
                if tagged {
                    0
                } else {
                    TAG_LEN as i16
                }
            }
            // As it is: asked so, or nothing to do.
            _ => {
                assert_eq!(body, frame);
                0
            }
        };
        check_shifted(header, &vnet, shift);
    }
}

fn check_parse(text: &str) {
    let parts: Vec<&str> = text.split(':').collect();
    // "Six colon-separated hexadecimal bytes": one or two hex digits each.
    let well_formed = parts.len() == 6
        && parts.iter().all(|part| {
            (1..=2).contains(&part.len()) && part.bytes().all(|b| b.is_ascii_hexdigit())
        });
    match text.parse::<MacAddr>() {
        Ok(mac) => {
            assert!(well_formed, "{text:?} parsed as {mac}");
            let mut bytes = [0u8; 6];
            for (byte, part) in bytes.iter_mut().zip(&parts) {
                *byte = u8::from_str_radix(part, 16).unwrap();
            }
            assert_eq!(mac, MacAddr(bytes));
            assert_eq!(mac.to_string().parse::<MacAddr>(), Ok(mac));
        }
        Err(_) => assert!(!well_formed, "{text:?} refused"),
    }
}

fuzz_target!(|input: Input<'_>| {
    check_ethernet(input.frame);
    check_vnet(input.frame);
    check_vnet(&input.vnet[..]);
    check_push(&input);
    check_rewrite(&input);
    if let Ok(text) = std::str::from_utf8(input.frame) {
        check_parse(text);
    }
});
