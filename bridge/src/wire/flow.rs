//! A frame's flow hash, for spreading frames over equal paths while
//! keeping each flow on one (and so in order): the fields the kernel's
//! flow dissector would take, hashed.

use super::ip;
use super::ipv4::Ipv4Packet;
use super::ipv6::{self, Ipv6Packet};
use super::tag::{inner_ethertype, TAG_OFFSET};
use super::EtherType;

/// A hash of what identifies `frame`'s flow: its MAC addresses and
/// EtherType (past any VLAN tags), and for IPv4 and IPv6 the addresses,
/// the protocol and, for TCP, UDP, SCTP and UDP-Lite, the ports (not for
/// any IPv4 fragment, so that all fragments of a datagram share its hash,
/// first included, as the kernel's flow dissector has it). A frame too
/// short for a layer is hashed on the layers before it.
pub fn flow_hash(frame: &[u8]) -> u32 {
    let mut hash = Fnv::new();
    let Some(macs) = frame.get(..TAG_OFFSET) else {
        hash.write(frame);
        return hash.finish();
    };
    hash.write(macs);
    // Past 802.1Q and 802.1ad tags, at most two.
    let Some((ethertype, l3)) = inner_ethertype(frame, 2) else {
        return hash.finish();
    };
    hash.write(&ethertype.0.to_be_bytes());
    let (protocol, l4) = match ethertype {
        EtherType::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(&frame[l3..]) else {
                return hash.finish();
            };
            hash.write(ip.addrs());
            hash.write(&[ip.protocol()]);
            // More fragments, or an offset: a fragment.
            if ip.is_fragment() {
                return hash.finish();
            }
            (ip.protocol(), l3 + ip.header_len())
        }
        EtherType::IPV6 => {
            let Ok(ip) = Ipv6Packet::new_checked(&frame[l3..]) else {
                return hash.finish();
            };
            hash.write(ip.addrs());
            hash.write(&[ip.next_header()]);
            (ip.next_header(), l3 + ipv6::HEADER_LEN)
        }
        _ => return hash.finish(),
    };
    // TCP, UDP, SCTP, UDP-Lite: the ports lead the header.
    if matches!(protocol, ip::TCP | ip::UDP | ip::SCTP | ip::UDPLITE) {
        if let Some(ports) = frame.get(l4..l4 + PORTS_LEN) {
            hash.write(ports);
        }
    }
    hash.finish()
}

/// The two ports that lead a TCP, UDP, SCTP or UDP-Lite header.
const PORTS_LEN: usize = 4;

/// FNV-1a, 32 bits: a few dozen bytes per frame, no key needed (the hash
/// picks a path; nothing an attacker gains by steering it).
struct Fnv(u32);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0x811c_9dc5)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
    }

    fn finish(&self) -> u32 {
        // FNV's low bits mix poorly for small moduli: fold the high half in.
        self.0 ^ (self.0 >> 16)
    }
}

#[cfg(test)]
mod tests {
    use super::flow_hash;
    use crate::wire::{EtherType, FrameSpec, MacAddr};

    fn ipv4_udp(src_port: u16, dst_port: u16, payload: u8) -> Vec<u8> {
        let mut frame = FrameSpec::new(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]))
            .ethertype(EtherType::IPV4)
            .len(60)
            .build();
        let ip = &mut frame[14..34];
        ip[0] = 0x45;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
        ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
        frame[34..36].copy_from_slice(&src_port.to_be_bytes());
        frame[36..38].copy_from_slice(&dst_port.to_be_bytes());
        frame[42..].fill(payload);
        frame
    }

    #[test]
    fn one_flow_one_hash_and_flows_spread() {
        // The payload is not part of the flow.
        assert_eq!(
            flow_hash(&ipv4_udp(1000, 53, 1)),
            flow_hash(&ipv4_udp(1000, 53, 2))
        );
        // 64 flows that differ only in a source port land in most of 8
        // lanes.
        let mut lanes = [0usize; 8];
        for port in 0..64 {
            lanes[flow_hash(&ipv4_udp(40_000 + port, 53, 0)) as usize % 8] += 1;
        }
        assert!(lanes.iter().filter(|&&n| n > 0).count() >= 6, "{lanes:?}");
        // Fragments hash on addresses only: a later one (no ports, other
        // bytes where they would be) as its first one (more fragments).
        let mut first = ipv4_udp(1, 2, 0);
        first[20] = 0x20;
        let mut later = ipv4_udp(3, 4, 0);
        later[21] = 0x10;
        assert_eq!(flow_hash(&first), flow_hash(&later));
    }

    #[test]
    fn short_frames_hash_without_panicking() {
        let frame = ipv4_udp(1000, 53, 0);
        for len in 0..frame.len() {
            flow_hash(&frame[..len]);
        }
        let mut tagged = vec![0u8; 18];
        tagged[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        flow_hash(&tagged);
    }
}
