//! IPv6 frames with extension headers and MLD messages, as hosts and
//! guests send them, through the snooping classifier
//! (`bridge::mcast::classify`) and the MLD views (`bridge::wire::mld`).
//! Checked: the classifier agrees with a reference written here (the
//! extension header walk of Linux's `ipv6_skip_exthdr`, RFC 1071 checksums,
//! the MLD rules of `classify`'s documentation); the views read what the
//! bytes say and every record lies inside the message.
//!
//! Input: byte 0 holds flags (bit 0: the destination MAC made from the IP
//! destination; bit 1: the ICMPv6 checksum filled in where the reference
//! walk finds the message; bit 2: the payload length set to the bytes
//! there are; bit 3: an 802.1Q tag), bytes 1..7 the destination MAC when
//! bit 0 is clear, bytes 7..9 the VLAN; the rest is the IPv6 packet.

#![no_main]

use std::net::{IpAddr, Ipv6Addr};

use bridge::mcast::{classify, Classified, Family, Forward, GroupKey};
use bridge::wire::mld::{self, MldPacket, MldRecord};
use libfuzzer_sys::fuzz_target;

/// The frame's bytes, with its parts' offsets.
fn frame(data: &[u8]) -> Option<(Vec<u8>, usize, u16)> {
    let (head, ip) = data.split_at_checked(9)?;
    let flags = head[0];
    let vlan = u16::from_be_bytes([head[7], head[8]]) & 0x0fff;
    let mut ip = ip.to_vec();
    if flags & 4 != 0 && ip.len() >= 40 {
        let len = u16::try_from(ip.len() - 40).unwrap_or(u16::MAX);
        ip[4..6].copy_from_slice(&len.to_be_bytes());
    }
    if flags & 2 != 0 && ip.len() >= 40 {
        let end = (40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]))).min(ip.len());
        if ip[6] == 0 {
            if let Some((58, at)) = walk(&ip[40..end]) {
                let (src, dst) = addresses(&ip);
                if let Some(Ok(mut msg)) = ip.get_mut(40 + at..end).map(MldPacket::new_checked) {
                    msg.fill_checksum(&src, &dst);
                }
            }
        }
    }
    let dst_mac: [u8; 6] = if flags & 1 != 0 && ip.len() >= 40 {
        [0x33, 0x33, ip[36], ip[37], ip[38], ip[39]]
    } else {
        head[1..7].try_into().unwrap()
    };
    let mut out = dst_mac.to_vec();
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    if flags & 8 != 0 {
        out.extend_from_slice(&[0x81, 0x00]);
        out.extend_from_slice(&vlan.to_be_bytes());
    }
    out.extend_from_slice(&[0x86, 0xdd]);
    let at = out.len();
    out.extend_from_slice(&ip);
    Some((out, at, vlan))
}

fn addresses(ip: &[u8]) -> ([u8; 16], [u8; 16]) {
    (
        ip[8..24].try_into().unwrap(),
        ip[24..40].try_into().unwrap(),
    )
}

/// Linux's `ipv6_skip_exthdr` from a Hop-by-Hop header at the start of
/// `payload`: the upper-layer protocol and where it starts, `None` for No
/// Next Header or a header cut short. Only extension headers are read.
fn walk(payload: &[u8]) -> Option<(u8, usize)> {
    let (mut next, mut at) = (0u8, 0usize);
    while matches!(next, 0 | 43 | 44 | 51 | 59 | 60) {
        if next == 59 {
            return None;
        }
        let hdr = payload.get(at..at.checked_add(2)?)?;
        let len = match next {
            44 => {
                let frag = payload.get(at + 2..at + 4)?;
                if u16::from_be_bytes([frag[0], frag[1]]) & !7 != 0 {
                    break;
                }
                8
            }
            51 => (usize::from(hdr[1]) + 2) * 4,
            _ => (usize::from(hdr[1]) + 1) * 8,
        };
        next = hdr[0];
        at += len;
    }
    Some((next, at))
}

/// RFC 1071 over the IPv6 pseudo-header and `msg`: true when it sums to
/// all ones.
fn checksum_ok(src: &[u8; 16], dst: &[u8; 16], msg: &[u8]) -> bool {
    let mut sum: u64 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let hi = u64::from(pair[0]) << 8;
            sum += hi | pair.get(1).map_or(0, |&b| u64::from(b));
        }
    };
    add(src);
    add(dst);
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// The reference's records: each `(offset, length)` inside the message,
/// or `Err` at the first that does not fit.
fn records(msg: &[u8]) -> Vec<Result<(usize, usize), ()>> {
    let count = u16::from_be_bytes([msg[6], msg[7]]);
    let mut at = 8;
    let mut out = Vec::new();
    for _ in 0..count {
        let Some(rec) = msg.get(at..at + 20) else {
            out.push(Err(()));
            break;
        };
        let len =
            20 + 16 * usize::from(u16::from_be_bytes([rec[2], rec[3]])) + 4 * usize::from(rec[1]);
        if at + len > msg.len() {
            out.push(Err(()));
            break;
        }
        out.push(Ok((at, len)));
        at += len;
    }
    out
}

fn data(vlan: u16, dst: Ipv6Addr) -> Classified {
    let forward = if dst == mld::ALL_NODES {
        Forward::Flood
    } else {
        Forward::Group(GroupKey::new(vlan, IpAddr::V6(dst)))
    };
    Classified {
        forward,
        control: false,
    }
}

const DROP: Classified = Classified {
    forward: Forward::Drop,
    control: false,
};

/// What `classify` must say of an IPv6 frame.
fn reference(dst_mac: &[u8], ip: &[u8], vlan: u16) -> Classified {
    if dst_mac[0] & 1 == 0 || dst_mac == [0xff; 6] {
        // Not to a group: snooping does not look.
        return Classified {
            forward: Forward::Flood,
            control: false,
        };
    }
    if ip.len() < 40 || ip[0] >> 4 != 6 {
        return DROP;
    }
    let end = 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    if end == 40 || end > ip.len() {
        return DROP;
    }
    let (src, dst) = addresses(ip);
    let dst_addr = Ipv6Addr::from(dst);
    if dst[0] != 0xff || dst_mac != [0x33, 0x33, dst[12], dst[13], dst[14], dst[15]] {
        return Classified {
            forward: Forward::Flood,
            control: false,
        };
    }
    if ip[6] != 0 {
        return data(vlan, dst_addr);
    }
    let payload = &ip[40..end];
    let Some((next, at)) = walk(payload) else {
        return DROP;
    };
    if next != 58 {
        return data(vlan, dst_addr);
    }
    let Some(msg) = payload.get(at..) else {
        return DROP;
    };
    if msg.len() < 8 || !checksum_ok(&src, &dst, msg) {
        return DROP;
    }
    if msg.len() < 24 {
        return data(vlan, dst_addr);
    }
    let control = |forward| Classified {
        forward,
        control: true,
    };
    let group = Ipv6Addr::from(<[u8; 16]>::try_from(&msg[8..24]).unwrap());
    match msg[0] {
        130 => {
            let link_local = src[0] == 0xfe && src[1] & 0xc0 == 0x80;
            if !link_local
                || (msg.len() != 24 && msg.len() < 28)
                || (group.is_unspecified() && dst_addr != mld::ALL_NODES)
            {
                return DROP;
            }
            control(Forward::Flood)
        }
        131 => control(Forward::Routers(Family::V6)),
        132 => control(Forward::Flood),
        143 if records(msg).iter().any(Result::is_err) => DROP,
        143 => control(Forward::Flood),
        _ => data(vlan, dst_addr),
    }
}

/// The MLD views against the bytes of `msg`.
fn check_views(msg: &[u8]) {
    let Ok(view) = MldPacket::new_checked(msg) else {
        assert!(msg.len() < 8);
        return;
    };
    assert_eq!(view.msg_len(), msg.len());
    assert_eq!(view.msg_type(), msg[0]);
    assert_eq!(view.code(), msg[1]);
    assert_eq!(view.checksum(), u16::from_be_bytes([msg[2], msg[3]]));
    assert_eq!(view.max_resp_code(), u16::from_be_bytes([msg[4], msg[5]]));
    assert_eq!(
        view.mcast_addr(),
        msg.get(8..24)
            .map(|a| Ipv6Addr::from(<[u8; 16]>::try_from(a).unwrap()))
    );
    assert_eq!(view.is_v2_query(), msg[0] == 130 && msg.len() >= 28);
    assert_eq!(
        view.query_num_sources(),
        msg.get(26..28).map(|n| u16::from_be_bytes([n[0], n[1]]))
    );
    assert_eq!(view.num_records(), u16::from_be_bytes([msg[6], msg[7]]));
    let want = records(msg);
    let got: Vec<_> = view.records().collect();
    assert_eq!(got.len(), want.len());
    for (got, want) in got.iter().zip(&want) {
        match (got, want) {
            (Ok(record), Ok((at, len))) => {
                assert_eq!(record.record_len(), *len);
                assert_eq!(record.record_type(), msg[*at]);
                let sources = record.num_sources();
                assert_eq!(record.mcast_addr().octets(), msg[at + 4..at + 20]);
                assert_eq!(record.source(sources), None);
                if sources > 0 {
                    let last = at + 20 + 16 * usize::from(sources - 1);
                    assert_eq!(
                        record.source(sources - 1).map(|a| a.octets().to_vec()),
                        Some(msg[last..last + 16].to_vec())
                    );
                }
            }
            (Err(_), Err(())) => {}
            other => panic!("records disagree: {other:?}"),
        }
    }
    // A record view of any tail: accepted exactly when it holds itself.
    for at in [8usize, 24, 28] {
        if let Some(tail) = msg.get(at..) {
            let fits = tail.len() >= 20 && {
                let n = 20 + 16 * usize::from(u16::from_be_bytes([tail[2], tail[3]]));
                n + 4 * usize::from(tail[1]) <= tail.len()
            };
            assert_eq!(MldRecord::new_checked(tail).is_ok(), fits);
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((frame, at, vlan)) = frame(input) else {
        return;
    };
    let got = classify(&frame, vlan);
    let want = reference(&frame[..6], &frame[at..], vlan);
    assert_eq!(got, want, "classify against the reference");
    let ip = &frame[at..];
    if ip.len() >= 40 {
        let end = (40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]))).min(ip.len());
        // Any message, wherever the walk puts it or not.
        if let Some((_, at)) = walk(&ip[40..end]) {
            if let Some(msg) = ip[40..end].get(at..) {
                check_views(msg);
            }
        }
        check_views(&ip[40..end]);
    }
});
