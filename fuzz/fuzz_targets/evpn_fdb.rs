//! What an EVPN port reads of the kernel's fdb news (zebra's entries on a
//! mirror's vxlan device): arbitrary datagrams, and datagrams of neighbour
//! messages built from arbitrary fields among arbitrary bytes. Checked: no
//! panic; a station read has `own` and `extern_learn`, a non-zero MAC and
//! a VTEP; a flood entry has `own`; a message built from fields reads back
//! through the wire exactly as `installed` reads the message itself; a
//! datagram cut short reads as a prefix of what the whole one reads.

#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use arbitrary::Arbitrary;
use bridge::evpn::fdb::{installed, parse, Change};
use bridge::evpn::Installed;
use libfuzzer_sys::fuzz_target;
use netlink_packet_core::{NetlinkHeader, NetlinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

#[derive(Debug, Arbitrary)]
enum Dst {
    None,
    V4([u8; 4]),
    V6([u8; 16]),
    Bytes(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
enum Part {
    /// A neighbour message from fields.
    Message {
        new: bool,
        bridge_family: bool,
        ifindex: u32,
        flags: u8,
        state: u16,
        mac: Option<Vec<u8>>,
        dst: Dst,
    },
    /// Any bytes.
    Bytes(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
struct Input {
    parts: Vec<Part>,
    cut: u16,
}

fn message(
    bridge_family: bool,
    ifindex: u32,
    flags: u8,
    state: u16,
    mac: &Option<Vec<u8>>,
    dst: &Dst,
) -> NeighbourMessage {
    let mut message = NeighbourMessage::default();
    message.header.family = match bridge_family {
        true => AddressFamily::Bridge,
        false => AddressFamily::Inet,
    };
    message.header.ifindex = ifindex;
    message.header.flags = NeighbourFlags::from_bits_retain(flags);
    message.header.state = NeighbourState::from(state);
    if let Some(mac) = mac {
        message
            .attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.clone()));
    }
    let dst = match dst {
        Dst::None => None,
        Dst::V4(a) => Some(NeighbourAddress::Inet(Ipv4Addr::from(*a))),
        Dst::V6(a) => Some(NeighbourAddress::Inet6(Ipv6Addr::from(*a))),
        Dst::Bytes(b) => Some(NeighbourAddress::Other(b.clone())),
    };
    if let Some(dst) = dst {
        message
            .attributes
            .push(NeighbourAttribute::Destination(dst));
    }
    message
}

fn bytes_of(payload: RouteNetlinkMessage) -> Vec<u8> {
    let mut message = NetlinkMessage::new(NetlinkHeader::default(), payload.into());
    message.finalize();
    let mut buffer = vec![0; message.buffer_len()];
    message.serialize(&mut buffer);
    buffer
}

fn check(change: &Change) {
    match change.entry {
        Installed::Station { mac, .. } => assert_ne!(mac.0, [0; 6]),
        Installed::Flood { .. } => {}
    }
}

fuzz_target!(|input: Input| {
    let mut datagram = Vec::new();
    for part in &input.parts {
        match part {
            Part::Message {
                new,
                bridge_family,
                ifindex,
                flags,
                state,
                mac,
                dst,
            } => {
                let built = message(*bridge_family, *ifindex, *flags, *state, mac, dst);
                let expected = installed(&built);
                if let Some(entry) = expected {
                    assert!(*bridge_family);
                    let flags = NeighbourFlags::from_bits_retain(*flags);
                    assert!(flags.contains(NeighbourFlags::Own));
                    if let Installed::Station { .. } = entry {
                        assert!(flags.contains(NeighbourFlags::ExtLearned));
                    }
                }
                let payload = match new {
                    true => RouteNetlinkMessage::NewNeighbour(built),
                    false => RouteNetlinkMessage::DelNeighbour(built),
                };
                let bytes = bytes_of(payload);
                // Alone, through the wire: what `installed` read, where the
                // message survives the round trip whole.
                let read = parse(&bytes);
                assert!(read.len() <= 1);
                if let Some(change) = read.first() {
                    check(change);
                    assert_eq!(change.ifindex, *ifindex);
                    assert_eq!(change.added, *new);
                }
                if matches!(dst, Dst::V4(_) | Dst::V6(_) | Dst::None)
                    && mac.as_ref().map_or(true, |m| m.len() == 6)
                {
                    assert_eq!(read.first().map(|c| c.entry), expected);
                }
                datagram.extend(bytes);
            }
            Part::Bytes(bytes) => datagram.extend(bytes),
        }
    }
    let whole = parse(&datagram);
    whole.iter().for_each(check);
    let cut = usize::from(input.cut).min(datagram.len());
    let part = parse(&datagram[..cut]);
    assert!(part.len() <= whole.len());
    assert_eq!(part, whole[..part.len()]);
});
