//! Frames built from a few fields, for the tests, benchmarks and traffic
//! generators that need many of them: one builder, so that they all make
//! the same frames the same way.

use super::{EtherType, EthernetFrame, MacAddr, Tag};

/// What fills a built frame after its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// Every byte the same: a tag that tells test frames apart.
    Fill(u8),
    /// Byte `i` of the frame is `i * 7 + len` (before the header is
    /// written over it): frames of different lengths differ throughout.
    Pattern,
}

/// An Ethernet frame to build: addresses, an optional 802.1Q tag, an
/// EtherType, a length and a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpec {
    dst: MacAddr,
    src: MacAddr,
    tci: Option<u16>,
    ethertype: EtherType,
    len: usize,
    payload: Payload,
}

impl FrameSpec {
    /// An untagged 60-byte IPv4 frame (the shortest Ethernet frame without
    /// its FCS) from `src` to `dst`, its payload zero.
    pub const fn new(dst: MacAddr, src: MacAddr) -> FrameSpec {
        FrameSpec {
            dst,
            src,
            tci: None,
            ethertype: EtherType::IPV4,
            len: 60,
            payload: Payload::Fill(0),
        }
    }

    /// With an 802.1Q tag carrying `tci` (priority, DEI and VLAN id).
    pub const fn tagged(mut self, tci: u16) -> FrameSpec {
        self.tci = Some(tci);
        self
    }

    /// With this EtherType (the inner one, when tagged).
    pub const fn ethertype(mut self, ethertype: EtherType) -> FrameSpec {
        self.ethertype = ethertype;
        self
    }

    /// `len` bytes long in all, tag included; never shorter than the header.
    pub const fn len(mut self, len: usize) -> FrameSpec {
        self.len = len;
        self
    }

    /// With this payload.
    pub const fn payload(mut self, payload: Payload) -> FrameSpec {
        self.payload = payload;
        self
    }

    /// The frame.
    pub fn build(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.append_to(&mut bytes);
        bytes
    }

    /// Appends the frame to `out` (after a header of the port's, say).
    pub fn append_to(&self, out: &mut Vec<u8>) {
        let header = match self.tci {
            Some(_) => EthernetFrame::<&[u8]>::TAGGED_HEADER_LEN,
            None => EthernetFrame::<&[u8]>::HEADER_LEN,
        };
        let len = self.len.max(header);
        let start = out.len();
        match self.payload {
            Payload::Fill(byte) => out.resize(start + len, byte),
            Payload::Pattern => out.extend((0..len).map(|i| (i * 7 + len) as u8)),
        }
        let bytes = &mut out[start..];
        let mut frame = EthernetFrame::new_unchecked(&mut bytes[..]);
        frame.set_dst_addr(self.dst);
        frame.set_src_addr(self.src);
        match self.tci {
            Some(tci) => {
                frame.set_tag(Tag {
                    tpid: EtherType::VLAN.0,
                    tci,
                });
                frame.set_tagged_ethertype(self.ethertype);
            }
            None => frame.set_ethertype(self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    #[test]
    fn an_untagged_frame_reads_back() {
        let bytes = FrameSpec::new(B, A)
            .ethertype(EtherType(0x88b5))
            .len(64)
            .payload(Payload::Fill(9))
            .build();
        assert_eq!(bytes.len(), 64);
        let frame = EthernetFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!((frame.dst_addr(), frame.src_addr()), (B, A));
        assert_eq!(frame.ethertype(), EtherType(0x88b5));
        assert!(frame.payload().iter().all(|&b| b == 9));
    }

    #[test]
    fn a_tagged_frame_carries_its_vlan_and_inner_ethertype() {
        let bytes = FrameSpec::new(B, A).tagged(0x2000 | 42).build();
        let frame = EthernetFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!(frame.vlan_id(), 42);
        assert_eq!(&bytes[14..18], &[0x20, 42, 0x08, 0x00]);
    }

    #[test]
    fn appending_keeps_what_was_there_and_short_lengths_grow_to_the_header() {
        let mut out = vec![0xee; 10];
        FrameSpec::new(B, A)
            .len(3)
            .payload(Payload::Pattern)
            .append_to(&mut out);
        assert_eq!(out.len(), 24);
        assert_eq!(&out[..10], &[0xee; 10]);
        assert_eq!(&out[10..16], &B.0);
    }
}
