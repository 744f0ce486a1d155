//! BPDUs in Ethernet frames: the zero-copy view, validation (802.1D-2004
//! 9.3.4), decoding into [`Bpdu`] and encoding of the three kinds that
//! clause 17 sends (Configuration, TCN, RST; 9.3.1-9.3.3).
//!
//! A BPDU travels in an IEEE 802.3 frame: destination 01:80:C2:00:00:00
//! (the Bridge Group Address), the sender port's address, a length field
//! (not an EtherType), the LLC header 0x42 0x42 0x03, the BPDU, and zero
//! padding to the 60-byte minimum. Times are in units of 1/256 s on the
//! wire and in whole seconds here.

use super::priority::{BridgeId, PriorityVector, Times};
use crate::wire::{be_u16, be_u32, MacAddr};

/// The Bridge Group Address that BPDUs are sent to (7.12.3).
pub(crate) const GROUP_ADDRESS: MacAddr = MacAddr([0x01, 0x80, 0xc2, 0x00, 0x00, 0x00]);

/// DSAP, SSAP (the Bridge Spanning Tree Protocol SAP) and UI control.
const LLC: [u8; 3] = [0x42, 0x42, 0x03];

/// Where the BPDU starts in its frame: after the 14-byte MAC header and
/// the 3-byte LLC header.
const BPDU_OFFSET: usize = 17;

/// The shortest Ethernet frame (without FCS); BPDUs are padded to it.
const MIN_FRAME_LEN: usize = 60;

/// The largest value of an 802.3 length field; above it the field is an
/// EtherType (a VLAN tag, or a frame that is no BPDU).
const MAX_LENGTH_FIELD: u16 = 1500;

mod field {
    use std::ops::Range;

    pub const PROTOCOL: Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const TYPE: usize = 3;
    pub const FLAGS: usize = 4;
    pub const ROOT: Range<usize> = 5..13;
    pub const ROOT_COST: Range<usize> = 13..17;
    pub const BRIDGE: Range<usize> = 17..25;
    pub const PORT: Range<usize> = 25..27;
    pub const MESSAGE_AGE: Range<usize> = 27..29;
    pub const MAX_AGE: Range<usize> = 29..31;
    pub const HELLO_TIME: Range<usize> = 31..33;
    pub const FORWARD_DELAY: Range<usize> = 33..35;
    pub const VERSION_1_LENGTH: usize = 35;

    pub const TCN_LEN: usize = 4;
    pub const CONFIG_LEN: usize = FORWARD_DELAY.end;
    pub const RST_LEN: usize = VERSION_1_LENGTH + 1;
}

/// BPDU Type values (9.3).
mod bpdu_type {
    pub const CONFIG: u8 = 0x00;
    pub const RST: u8 = 0x02;
    pub const TCN: u8 = 0x80;
}

/// The flag bits (9.3.1, 9.3.3).
pub(crate) mod flags {
    /// Topology Change.
    pub const TC: u8 = 0x01;
    /// Proposal (RST only).
    pub const PROPOSAL: u8 = 0x02;
    /// The Port Role field (RST only), bits 3 and 4.
    pub const ROLE_MASK: u8 = 0x0c;
    /// Learning (RST only).
    pub const LEARNING: u8 = 0x10;
    /// Forwarding (RST only).
    pub const FORWARDING: u8 = 0x20;
    /// Agreement (RST only).
    pub const AGREEMENT: u8 = 0x40;
    /// Topology Change Acknowledgment (Configuration only).
    pub const TC_ACK: u8 = 0x80;
}

/// The three kinds of BPDU that clause 17 handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BpduKind {
    /// A Configuration BPDU (9.3.1), as 802.1D-1998 bridges send.
    Config,
    /// A Topology Change Notification BPDU (9.3.2).
    Tcn,
    /// A Rapid Spanning Tree BPDU (9.3.3); MST BPDUs (version 3) read as
    /// these.
    Rst,
}

/// The Port Role field of an RST BPDU (9.2.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BpduRole {
    Unknown,
    AlternateBackup,
    Root,
    Designated,
}

impl BpduRole {
    fn from_flags(flags: u8) -> BpduRole {
        match (flags & flags::ROLE_MASK) >> 2 {
            0 => BpduRole::Unknown,
            1 => BpduRole::AlternateBackup,
            2 => BpduRole::Root,
            _ => BpduRole::Designated,
        }
    }

    /// The role's bits in the flags octet.
    pub fn flags(self) -> u8 {
        let code = match self {
            BpduRole::Unknown => 0,
            BpduRole::AlternateBackup => 1,
            BpduRole::Root => 2,
            BpduRole::Designated => 3,
        };
        code << 2
    }
}

/// Why a frame was not taken as a BPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadBpdu {
    /// Not sent to the Bridge Group Address.
    NotGroupAddress,
    /// An EtherType (a VLAN tag, say) or another LLC SAP.
    NotLlc,
    /// Shorter than its kind needs.
    Truncated,
    /// Protocol Identifier not 0, or an unknown type or version (9.3.4 d).
    Unknown,
}

/// A view of the BPDU bytes that follow the LLC header.
#[derive(Debug, Clone)]
pub(crate) struct BpduPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BpduPacket<T> {
    /// A view without checks; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        BpduPacket { buffer }
    }

    /// A view of bytes that 9.3.4 accepts: a Protocol Identifier of 0 and
    /// a) type 0x00 and at least 35 octets (Configuration), b) type 0x80
    /// and at least 4 octets (TCN), or c) version 2 or more, type 0x02
    /// and at least 36 octets (RST). Anything else is discarded (d).
    pub fn new_checked(buffer: T) -> Result<Self, BadBpdu> {
        let packet = Self::new_unchecked(buffer);
        packet.kind()?;
        Ok(packet)
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The kind, as validated by 9.3.4.
    pub fn kind(&self) -> Result<BpduKind, BadBpdu> {
        let b = self.bytes();
        if b.len() < field::TCN_LEN {
            return Err(BadBpdu::Truncated);
        }
        if be_u16(b, field::PROTOCOL) != 0 {
            return Err(BadBpdu::Unknown);
        }
        let (kind, needed) = match b[field::TYPE] {
            bpdu_type::CONFIG => (BpduKind::Config, field::CONFIG_LEN),
            bpdu_type::TCN => (BpduKind::Tcn, field::TCN_LEN),
            bpdu_type::RST if self.version() >= 2 => (BpduKind::Rst, field::RST_LEN),
            _ => return Err(BadBpdu::Unknown),
        };
        if b.len() < needed {
            return Err(BadBpdu::Truncated);
        }
        Ok(kind)
    }

    /// The Protocol Version Identifier.
    pub fn version(&self) -> u8 {
        self.bytes()[field::VERSION]
    }

    /// The flags octet (Configuration and RST).
    pub fn flags(&self) -> u8 {
        self.bytes()[field::FLAGS]
    }

    /// The Root Identifier.
    pub fn root(&self) -> BridgeId {
        BridgeId(u64::from_be_bytes(
            self.bytes()[field::ROOT].try_into().unwrap(),
        ))
    }

    /// The Root Path Cost.
    pub fn root_path_cost(&self) -> u32 {
        be_u32(self.bytes(), field::ROOT_COST)
    }

    /// The Bridge Identifier: the transmitting (designated) bridge.
    pub fn bridge(&self) -> BridgeId {
        BridgeId(u64::from_be_bytes(
            self.bytes()[field::BRIDGE].try_into().unwrap(),
        ))
    }

    /// The Port Identifier: the transmitting (designated) port.
    pub fn port(&self) -> u16 {
        be_u16(self.bytes(), field::PORT)
    }

    /// Message Age, in 1/256 s.
    pub fn message_age(&self) -> u16 {
        be_u16(self.bytes(), field::MESSAGE_AGE)
    }

    /// Max Age, in 1/256 s.
    pub fn max_age(&self) -> u16 {
        be_u16(self.bytes(), field::MAX_AGE)
    }

    /// Hello Time, in 1/256 s.
    pub fn hello_time(&self) -> u16 {
        be_u16(self.bytes(), field::HELLO_TIME)
    }

    /// Forward Delay, in 1/256 s.
    pub fn forward_delay(&self) -> u16 {
        be_u16(self.bytes(), field::FORWARD_DELAY)
    }
}

/// A wire time (1/256 s) in whole seconds, rounded to the nearest.
fn seconds(wire: u16) -> u16 {
    ((u32::from(wire) + 128) / 256) as u16
}

/// Whole seconds as a wire time, saturating.
fn wire_time(seconds: u16) -> u16 {
    seconds.saturating_mul(256)
}

/// A decoded BPDU: the values that the state machines use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bpdu {
    pub kind: BpduKind,
    /// The flags octet as received or to send (0 for a TCN).
    pub flags: u8,
    /// Root, root path cost, designated bridge and port (0 for a TCN);
    /// `bridge_port` is not conveyed and reads 0.
    pub priority: PriorityVector,
    /// The timer values (0 for a TCN).
    pub times: Times,
}

impl Bpdu {
    /// A TCN BPDU.
    pub fn tcn() -> Bpdu {
        Bpdu {
            kind: BpduKind::Tcn,
            flags: 0,
            priority: PriorityVector::default(),
            times: Times::default(),
        }
    }

    /// The values of a validated BPDU.
    pub fn decode<T: AsRef<[u8]>>(packet: &BpduPacket<T>) -> Result<Bpdu, BadBpdu> {
        let kind = packet.kind()?;
        if kind == BpduKind::Tcn {
            return Ok(Bpdu::tcn());
        }
        Ok(Bpdu {
            kind,
            flags: packet.flags(),
            priority: PriorityVector {
                root_bridge: packet.root(),
                root_path_cost: packet.root_path_cost(),
                designated_bridge: packet.bridge(),
                designated_port: packet.port(),
                bridge_port: 0,
            },
            times: Times {
                message_age: seconds(packet.message_age()),
                max_age: seconds(packet.max_age()),
                forward_delay: seconds(packet.forward_delay()),
                hello_time: seconds(packet.hello_time()),
            },
        })
    }

    /// The BPDU in a whole Ethernet frame: checks the destination, the
    /// 802.3 length field, the LLC header, then the BPDU itself (9.3.4).
    /// Tagged frames are refused: their length field is an EtherType.
    pub fn from_frame(frame: &[u8]) -> Result<Bpdu, BadBpdu> {
        if frame.len() < BPDU_OFFSET {
            return Err(BadBpdu::Truncated);
        }
        if frame[..6] != GROUP_ADDRESS.0 {
            return Err(BadBpdu::NotGroupAddress);
        }
        let length = u16::from_be_bytes([frame[12], frame[13]]);
        if length > MAX_LENGTH_FIELD || length < LLC.len() as u16 || frame[14..17] != LLC {
            return Err(BadBpdu::NotLlc);
        }
        // The length field excludes the padding; a frame shorter than it
        // says is cut short, and the BPDU length checks catch it.
        let end = (14 + usize::from(length)).min(frame.len());
        Bpdu::decode(&BpduPacket::new_checked(&frame[BPDU_OFFSET..end])?)
    }

    /// The Port Role an RST BPDU conveys; `None` for the other kinds.
    pub fn role(&self) -> Option<BpduRole> {
        (self.kind == BpduKind::Rst).then(|| BpduRole::from_flags(self.flags))
    }

    /// The BPDU's bytes (35 for a Configuration BPDU, 4 for a TCN, 36
    /// for an RST BPDU).
    pub fn encode(&self) -> Vec<u8> {
        let (version, kind) = match self.kind {
            BpduKind::Config => (0, bpdu_type::CONFIG),
            BpduKind::Tcn => return vec![0, 0, 0, bpdu_type::TCN],
            BpduKind::Rst => (2, bpdu_type::RST),
        };
        let mut b = vec![0; field::RST_LEN];
        b[field::VERSION] = version;
        b[field::TYPE] = kind;
        b[field::FLAGS] = self.flags;
        let p = &self.priority;
        b[field::ROOT].copy_from_slice(&p.root_bridge.0.to_be_bytes());
        b[field::ROOT_COST].copy_from_slice(&p.root_path_cost.to_be_bytes());
        b[field::BRIDGE].copy_from_slice(&p.designated_bridge.0.to_be_bytes());
        b[field::PORT].copy_from_slice(&p.designated_port.to_be_bytes());
        let t = &self.times;
        b[field::MESSAGE_AGE].copy_from_slice(&wire_time(t.message_age).to_be_bytes());
        b[field::MAX_AGE].copy_from_slice(&wire_time(t.max_age).to_be_bytes());
        b[field::HELLO_TIME].copy_from_slice(&wire_time(t.hello_time).to_be_bytes());
        b[field::FORWARD_DELAY].copy_from_slice(&wire_time(t.forward_delay).to_be_bytes());
        // Version 1 Length is 0: no version 1 protocol information.
        if self.kind == BpduKind::Config {
            b.truncate(field::CONFIG_LEN);
        }
        b
    }

    /// The BPDU in a frame from `src`, padded to 60 bytes.
    pub fn to_frame(self, src: MacAddr) -> Vec<u8> {
        let bpdu = self.encode();
        let mut frame = Vec::with_capacity(MIN_FRAME_LEN.max(BPDU_OFFSET + bpdu.len()));
        frame.extend_from_slice(&GROUP_ADDRESS.0);
        frame.extend_from_slice(&src.0);
        frame.extend_from_slice(&((LLC.len() + bpdu.len()) as u16).to_be_bytes());
        frame.extend_from_slice(&LLC);
        frame.extend_from_slice(&bpdu);
        frame.resize(frame.len().max(MIN_FRAME_LEN), 0);
        frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: MacAddr = MacAddr([0x02, 0xac, 0x00, 0x00, 0x00, 0x01]);

    fn sample(kind: BpduKind, flags: u8) -> Bpdu {
        Bpdu {
            kind,
            flags,
            priority: PriorityVector {
                root_bridge: BridgeId(0x8000_02ac_0000_0001),
                root_path_cost: 20000,
                designated_bridge: BridgeId(0x9000_02ac_0000_0002),
                designated_port: 0x8002,
                bridge_port: 0,
            },
            times: Times {
                message_age: 1,
                max_age: 20,
                forward_delay: 15,
                hello_time: 2,
            },
        }
    }

    const HEADER: [u8; 12] = [
        0x01, 0x80, 0xc2, 0x00, 0x00, 0x00, // destination
        0x02, 0xac, 0x00, 0x00, 0x00, 0x01, // source
    ];

    const BODY: [u8; 30] = [
        0x80, 0x00, 0x02, 0xac, 0x00, 0x00, 0x00, 0x01, // root
        0x00, 0x00, 0x4e, 0x20, // root path cost 20000
        0x90, 0x00, 0x02, 0xac, 0x00, 0x00, 0x00, 0x02, // bridge
        0x80, 0x02, // port
        0x01, 0x00, // message age 1 s
        0x14, 0x00, // max age 20 s
        0x02, 0x00, // hello time 2 s
        0x0f, 0x00, // forward delay 15 s
    ];

    fn frame(length: u8, bpdu: &[u8]) -> Vec<u8> {
        let mut f = HEADER.to_vec();
        f.extend_from_slice(&[0x00, length, 0x42, 0x42, 0x03]);
        f.extend_from_slice(bpdu);
        f.resize(60, 0);
        f
    }

    #[test]
    fn config_literal_bytes() {
        let bpdu = sample(BpduKind::Config, flags::TC | flags::TC_ACK);
        let mut expected = vec![0x00, 0x00, 0x00, 0x00, 0x81];
        expected.extend_from_slice(&BODY);
        assert_eq!(bpdu.encode(), expected);
        let f = bpdu.to_frame(SRC);
        assert_eq!(f, frame(38, &expected));
        assert_eq!(f.len(), 60);
        assert_eq!(Bpdu::from_frame(&f), Ok(bpdu));
    }

    #[test]
    fn rst_literal_bytes() {
        let flags = flags::PROPOSAL | BpduRole::Designated.flags() | flags::LEARNING;
        let bpdu = sample(BpduKind::Rst, flags);
        let mut expected = vec![0x00, 0x00, 0x02, 0x02, 0x1e];
        expected.extend_from_slice(&BODY);
        expected.push(0x00); // Version 1 Length
        assert_eq!(bpdu.encode(), expected);
        let f = bpdu.to_frame(SRC);
        assert_eq!(f, frame(39, &expected));
        let back = Bpdu::from_frame(&f).unwrap();
        assert_eq!(back, bpdu);
        assert_eq!(back.role(), Some(BpduRole::Designated));
    }

    #[test]
    fn tcn_literal_bytes() {
        let f = Bpdu::tcn().to_frame(SRC);
        assert_eq!(f, frame(7, &[0x00, 0x00, 0x00, 0x80]));
        assert_eq!(Bpdu::from_frame(&f), Ok(Bpdu::tcn()));
        assert_eq!(Bpdu::tcn().role(), None);
    }

    #[test]
    fn linux_config_bpdu_decodes() {
        // As the kernel bridge sends it: version 0, 35 bytes, times in
        // 1/256 s with a message age of a few ticks, padded to 60 bytes.
        let mut bpdu = vec![0x00, 0x00, 0x00, 0x00, 0x01];
        bpdu.extend_from_slice(&[0x80, 0x00, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        bpdu.extend_from_slice(&[0x00, 0x00, 0x00, 0x64]);
        bpdu.extend_from_slice(&[0x80, 0x00, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef]);
        bpdu.extend_from_slice(&[0x80, 0x02, 0x00, 0x03, 0x14, 0x00, 0x02, 0x00, 0x0f, 0x00]);
        assert_eq!(bpdu.len(), 35);
        let b = Bpdu::from_frame(&frame(38, &bpdu)).unwrap();
        assert_eq!(b.kind, BpduKind::Config);
        assert_eq!(b.flags, flags::TC);
        assert_eq!(b.priority.root_bridge.to_string(), "8000.525400123456");
        assert_eq!(b.priority.root_path_cost, 100);
        assert_eq!(
            b.priority.designated_bridge.to_string(),
            "8000.525400abcdef"
        );
        assert_eq!(b.priority.designated_port, 0x8002);
        assert_eq!(
            b.times,
            Times {
                message_age: 0,
                max_age: 20,
                forward_delay: 15,
                hello_time: 2
            }
        );
        assert_eq!(b.role(), None);
    }

    #[test]
    fn mst_bpdu_reads_as_rst() {
        let mut bpdu = sample(BpduKind::Rst, BpduRole::Root.flags()).encode();
        bpdu[2] = 3;
        bpdu.extend_from_slice(&[0x00, 0x40]); // Version 3 Length and more
        bpdu.resize(102, 0);
        let mut f = HEADER.to_vec();
        f.extend_from_slice(&[0x00, 105, 0x42, 0x42, 0x03]);
        f.extend_from_slice(&bpdu);
        let b = Bpdu::from_frame(&f).unwrap();
        assert_eq!(b.kind, BpduKind::Rst);
        assert_eq!(b.role(), Some(BpduRole::Root));
    }

    #[test]
    fn junk_is_refused() {
        let good = sample(BpduKind::Config, 0).to_frame(SRC);
        assert_eq!(Bpdu::from_frame(&good[..16]), Err(BadBpdu::Truncated));
        assert_eq!(Bpdu::from_frame(&[]), Err(BadBpdu::Truncated));
        let mut f = good.clone();
        f[5] = 0x01;
        assert_eq!(Bpdu::from_frame(&f), Err(BadBpdu::NotGroupAddress));
        let mut f = good.clone();
        f[12..14].copy_from_slice(&[0x81, 0x00]); // an 802.1Q tag
        assert_eq!(Bpdu::from_frame(&f), Err(BadBpdu::NotLlc));
        let mut f = good.clone();
        f[14] = 0xaa;
        assert_eq!(Bpdu::from_frame(&f), Err(BadBpdu::NotLlc));
        let mut f = good.clone();
        f[17] = 0x01; // Protocol Identifier
        assert_eq!(Bpdu::from_frame(&f), Err(BadBpdu::Unknown));
        let mut f = good.clone();
        f[20] = 0x07; // BPDU Type
        assert_eq!(Bpdu::from_frame(&f), Err(BadBpdu::Unknown));
        // A length field that cuts the Configuration BPDU short.
        let mut f = good.clone();
        f[13] = 30;
        assert_eq!(Bpdu::from_frame(&f), Err(BadBpdu::Truncated));
        // An RST BPDU with version 0, or one octet short.
        let rst = sample(BpduKind::Rst, 0).to_frame(SRC);
        let mut f = rst.clone();
        f[19] = 0;
        assert_eq!(Bpdu::from_frame(&f), Err(BadBpdu::Unknown));
        let mut f = rst.clone();
        f[13] = 38;
        assert_eq!(Bpdu::from_frame(&f), Err(BadBpdu::Truncated));
        // A TCN needs only its 4 octets.
        assert!(Bpdu::from_frame(&frame(7, &[0, 0, 0, 0x80])).is_ok());
        assert_eq!(
            Bpdu::from_frame(&frame(6, &[0, 0, 0, 0x80])),
            Err(BadBpdu::Truncated)
        );
    }

    #[test]
    fn times_round_to_seconds() {
        assert_eq!(seconds(0), 0);
        assert_eq!(seconds(127), 0);
        assert_eq!(seconds(128), 1);
        assert_eq!(seconds(512), 2);
        assert_eq!(seconds(u16::MAX), 256);
        assert_eq!(wire_time(15), 0x0f00);
        assert_eq!(wire_time(300), u16::MAX);
    }
}
