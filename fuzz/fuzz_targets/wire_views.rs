//! The zero-copy wire views over arbitrary bytes: `EthernetFrame`,
//! `VnetHeader`, `MacAddr`, and `copy_with_vlan_tag`, each checked against
//! what the bytes say, read here independently of the views.

#![no_main]

use arbitrary::Arbitrary;
use bridge::wire::vnet::{copy_with_vlan_tag, CopyError, VLAN_TAG_LEN, VNET_HDR_F_NEEDS_CSUM};
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
    /// The virtio-net header given to `copy_with_vlan_tag`: ten bytes, cut
    /// or grown by `vnet_len_delta` to test the length check.
    vnet: [u8; 10],
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
    if bytes.len() < 10 {
        assert_eq!(
            result.unwrap_err(),
            Truncated {
                len: bytes.len(),
                needed: 10
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

fn check_copy(input: &Input<'_>) {
    let vnet_len = (10 + isize::from(input.vnet_len_delta)).clamp(0, 10) as usize;
    let mut vnet = input.vnet.to_vec();
    vnet.truncate(vnet_len);
    if input.vnet_len_delta > 0 && input.vnet_len_delta % 3 == 0 {
        // Too long, not only too short.
        vnet.resize(10 + input.vnet_len_delta as usize / 3, 0);
    }
    let frame = input.frame;
    let tag = input.tag.map(|(tpid, tci)| (tpid.value(), tci));
    let tag_len = if tag.is_some() { VLAN_TAG_LEN } else { 0 };
    let needed = 10 + frame.len() + tag_len;
    let capacity = (needed as isize + isize::from(input.slack)).max(0) as usize;
    let mut out = vec![CANARY; capacity];
    let result = copy_with_vlan_tag(&vnet, frame, tag, &mut out);
    if vnet.len() != 10 || frame.len() < 12 {
        assert_eq!(result, Err(CopyError::Runt));
        assert!(out.iter().all(|&b| b == CANARY), "an error wrote");
        return;
    }
    if needed > capacity {
        assert_eq!(
            result,
            Err(CopyError::Oversize {
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
    let body = &out[10..len];
    let header = VnetHeader::new_checked(&out[..10]).unwrap();
    let original = VnetHeader::new_checked(&vnet[..]).unwrap();
    let Some((tpid, tci)) = tag else {
        assert_eq!(&out[..10], &vnet[..]);
        assert_eq!(body, frame);
        return;
    };
    // The frame around the tag, byte for byte.
    assert_eq!(&body[..12], &frame[..12]);
    assert_eq!(be16(body, 12), tpid);
    assert_eq!(be16(body, 14), tci);
    assert_eq!(&body[16..], &frame[12..]);
    // The header: offsets in use moved by the tag, the rest unchanged.
    let shift = |used: bool, before: u16| {
        if used {
            before.wrapping_add(VLAN_TAG_LEN as u16)
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
        shift(original.gso_type() != 0, original.hdr_len())
    );
    assert_eq!(
        header.csum_start(),
        shift(original.needs_csum(), original.csum_start())
    );
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
    check_copy(&input);
    if let Ok(text) = std::str::from_utf8(input.frame) {
        check_parse(text);
    }
});
