//! MLD messages, carried in ICMPv6: version 1 (RFC 2710) queries, reports
//! and dones of 24 bytes, version 2 (RFC 3810) queries of 28 bytes and
//! more, and version 2 reports with their multicast address records.
//!
//! A view covers one ICMPv6 message exactly (the IPv6 payload after the
//! extension headers, up to the payload length), so that the checksum and
//! the version 2 lengths are read over the right bytes.

use std::net::Ipv6Addr;

use super::{MacAddr, Truncated};

/// The ICMPv6 header every message starts with: type, code, checksum and
/// four more bytes (a version 2 report's record count).
pub const ICMP_HEADER_LEN: usize = field::RESERVED.end;

/// The length of a version 1 message.
pub const V1_LEN: usize = field::ADDR.end;

/// The shortest version 2 query.
pub const V2_QUERY_LEN: usize = field::QUERY_NUM_SOURCES.end;

/// The IPv6 next header number of ICMPv6.
pub const ICMPV6: u8 = 58;

/// ff02::1, the link-local all-nodes group, where general queries go.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// ff02::2, where version 1 dones go.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

/// ff02::16, where version 2 reports go.
pub const V2_REPORTS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);

/// ICMPv6 types of MLD messages.
pub mod kind {
    /// A multicast listener query, of either version.
    pub const QUERY: u8 = 130;
    /// A version 1 multicast listener report.
    pub const V1_REPORT: u8 = 131;
    /// A version 1 multicast listener done.
    pub const DONE: u8 = 132;
    /// A version 2 multicast listener report.
    pub const V2_REPORT: u8 = 143;
}

/// Multicast address record types: IGMPv3's numbers (RFC 3810 5.2.12).
pub use super::igmp::record;

mod field {
    use std::ops::Range;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const MAX_RESP: Range<usize> = 4..6;
    pub const RESERVED: Range<usize> = 6..8;
    pub const ADDR: Range<usize> = 8..24;

    // A version 2 query after the version 1 fields.
    pub const QUERY_FLAGS: usize = 24;
    pub const QUERY_QQIC: usize = 25;
    pub const QUERY_NUM_SOURCES: Range<usize> = 26..28;
    // Within QUERY_FLAGS.
    pub const S_FLAG: u8 = 0x08;
    pub const QRV: u8 = 0x07;

    // A version 2 report: the record count in the ICMPv6 header's last
    // two bytes, then the records.
    pub const NUM_RECORDS: Range<usize> = 6..8;
    pub const RECORDS: usize = 8;

    // A multicast address record.
    pub const REC_TYPE: usize = 0;
    pub const REC_AUX_LEN: usize = 1;
    pub const REC_NUM_SOURCES: Range<usize> = 2..4;
    pub const REC_ADDR: Range<usize> = 4..20;
    pub const REC_SOURCES: usize = 20;
}

/// The multicast MAC address an IPv6 group maps to (RFC 2464 7): 33:33
/// and the group's low 32 bits.
pub fn multicast_mac(group: Ipv6Addr) -> MacAddr {
    let g = group.octets();
    MacAddr([0x33, 0x33, g[12], g[13], g[14], g[15]])
}

/// A version 2 Maximum Response Code (RFC 3810 5.1.3) as milliseconds:
/// below 32768 the code itself, above an exponent and a mantissa.
pub fn v2_max_resp_ms(code: u16) -> u32 {
    if code < 0x8000 {
        return u32::from(code);
    }
    let mantissa = u32::from(code & 0x0fff);
    let exponent = u32::from((code >> 12) & 0x07);
    (mantissa | 0x1000) << (exponent + 3)
}

fn addr_at(bytes: &[u8], at: std::ops::Range<usize>) -> Option<Ipv6Addr> {
    let b: [u8; 16] = bytes.get(at)?.try_into().ok()?;
    Some(Ipv6Addr::from(b))
}

/// A view of one MLD message (an ICMPv6 message).
#[derive(Debug, Clone)]
pub struct MldPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MldPacket<T> {
    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        MldPacket { buffer }
    }

    /// A view of a buffer that holds at least the ICMPv6 header.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the 8-byte ICMPv6 header, which every
    /// accessor but those of the address and the version 2 fields reads
    /// within; those check for themselves.
    pub fn check_len(&self) -> Result<(), Truncated> {
        Truncated::check(self.buffer.as_ref().len(), ICMP_HEADER_LEN)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message's length: the buffer's.
    pub fn msg_len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// The ICMPv6 type (see [`kind`]).
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// The ICMPv6 code (0).
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Whether the checksum over the message and the pseudo-header of a
    /// packet from `src` to `dst` is right.
    pub fn verify_checksum(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        super::checksum::checksum_v6(src, dst, ICMPV6, self.buffer.as_ref()) == 0
    }

    /// A query's Maximum Response Delay (version 1, milliseconds) or Code
    /// (version 2); 0 in reports and dones.
    #[inline]
    pub fn max_resp_code(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::MAX_RESP)
    }

    /// The multicast address of a version 1 message or a version 2 query
    /// (:: in a general query); `None` when the buffer is too short.
    pub fn mcast_addr(&self) -> Option<Ipv6Addr> {
        addr_at(self.buffer.as_ref(), field::ADDR)
    }

    /// Whether this query is long enough to be a version 2 one (28 bytes
    /// or more; exactly 24 is version 1).
    pub fn is_v2_query(&self) -> bool {
        self.msg_type() == kind::QUERY && self.msg_len() >= V2_QUERY_LEN
    }

    /// A version 2 query's Suppress Router-Side Processing flag.
    pub fn query_suppress(&self) -> Option<bool> {
        let b = self.buffer.as_ref();
        (b.len() >= V2_QUERY_LEN).then(|| b[field::QUERY_FLAGS] & field::S_FLAG != 0)
    }

    /// A version 2 query's Querier's Robustness Variable.
    pub fn query_qrv(&self) -> Option<u8> {
        let b = self.buffer.as_ref();
        (b.len() >= V2_QUERY_LEN).then(|| b[field::QUERY_FLAGS] & field::QRV)
    }

    /// A version 2 query's Querier's Query Interval Code.
    pub fn query_qqic(&self) -> Option<u8> {
        let b = self.buffer.as_ref();
        (b.len() >= V2_QUERY_LEN).then(|| b[field::QUERY_QQIC])
    }

    /// A version 2 query's number of sources.
    pub fn query_num_sources(&self) -> Option<u16> {
        let b = self.buffer.as_ref();
        (b.len() >= V2_QUERY_LEN).then(|| super::be_u16(b, field::QUERY_NUM_SOURCES))
    }

    /// A version 2 report's number of records, as the field says.
    #[inline]
    pub fn num_records(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::NUM_RECORDS)
    }

    /// A version 2 report's multicast address records, each checked to
    /// fit; the first that does not ends the walk with an error.
    pub fn records(&self) -> Records<'_> {
        Records {
            rest: self
                .buffer
                .as_ref()
                .get(field::RECORDS..)
                .unwrap_or_default(),
            left: self.num_records(),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MldPacket<T> {
    /// Sets the ICMPv6 type.
    pub fn set_msg_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::TYPE] = value;
    }

    /// Sets the ICMPv6 code.
    pub fn set_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Maximum Response Delay or Code.
    pub fn set_max_resp_code(&mut self, value: u16) {
        self.buffer.as_mut()[field::MAX_RESP].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the multicast address (the buffer must hold a version 1
    /// message).
    pub fn set_mcast_addr(&mut self, value: Ipv6Addr) {
        self.buffer.as_mut()[field::ADDR].copy_from_slice(&value.octets());
    }

    /// Computes the checksum of a packet from `src` to `dst` over the
    /// whole message and writes it.
    pub fn fill_checksum(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let value = super::checksum::checksum_v6(src, dst, ICMPV6, self.buffer.as_ref());
        self.set_checksum(value);
    }
}

/// The records of a version 2 report; see [`MldPacket::records`].
#[derive(Debug, Clone)]
pub struct Records<'a> {
    rest: &'a [u8],
    left: u16,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<MldRecord<&'a [u8]>, Truncated>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match MldRecord::new_checked(self.rest) {
            Ok(record) => {
                let (this, rest) = self.rest.split_at(record.record_len());
                self.rest = rest;
                Some(Ok(MldRecord::new_unchecked(this)))
            }
            Err(err) => {
                self.left = 0;
                Some(Err(err))
            }
        }
    }
}

/// A view of one multicast address record of a version 2 report (RFC 3810
/// 5.2.4).
#[derive(Debug, Clone)]
pub struct MldRecord<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MldRecord<T> {
    /// The length of a record without sources or auxiliary data.
    pub const HEADER_LEN: usize = field::REC_SOURCES;

    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        MldRecord { buffer }
    }

    /// A view of a buffer that starts with a whole record, its sources and
    /// auxiliary data included.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let record = Self::new_unchecked(buffer);
        record.check_len()?;
        Ok(record)
    }

    /// Checks that the buffer holds the record's header, then that it
    /// holds the sources and auxiliary data the header announces.
    pub fn check_len(&self) -> Result<(), Truncated> {
        let len = self.buffer.as_ref().len();
        Truncated::check(len, Self::HEADER_LEN)?;
        Truncated::check(len, self.record_len())
    }

    /// The record's length: header, sources and auxiliary data (which
    /// RFC 3810 defines none of; Linux's snooping ignores the field).
    pub fn record_len(&self) -> usize {
        Self::HEADER_LEN
            + usize::from(self.num_sources()) * 16
            + usize::from(self.aux_data_len()) * 4
    }

    /// The record type (see [`record`]).
    #[inline]
    pub fn record_type(&self) -> u8 {
        self.buffer.as_ref()[field::REC_TYPE]
    }

    /// The auxiliary data's length in 32-bit words.
    #[inline]
    pub fn aux_data_len(&self) -> u8 {
        self.buffer.as_ref()[field::REC_AUX_LEN]
    }

    /// The number of sources.
    #[inline]
    pub fn num_sources(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::REC_NUM_SOURCES)
    }

    /// The multicast address the record is about.
    #[inline]
    pub fn mcast_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), field::REC_ADDR).unwrap_or(Ipv6Addr::UNSPECIFIED)
    }

    /// Source `i`, if the record has it.
    pub fn source(&self, i: u16) -> Option<Ipv6Addr> {
        if i >= self.num_sources() {
            return None;
        }
        let at = field::REC_SOURCES + usize::from(i) * 16;
        addr_at(self.buffer.as_ref(), at..at + 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10];

    fn report_v1() -> [u8; 24] {
        let mut m = [0u8; 24];
        m[0] = kind::V1_REPORT;
        m[8..24].copy_from_slice(&"ff0e::1:2".parse::<Ipv6Addr>().unwrap().octets());
        m
    }

    #[test]
    fn v1_fields_read_back() {
        let group: Ipv6Addr = "ff0e::1:2".parse().unwrap();
        let mut bytes = report_v1();
        let mut packet = MldPacket::new_checked(&mut bytes[..]).unwrap();
        packet.fill_checksum(&SRC, &group.octets());
        assert!(packet.verify_checksum(&SRC, &group.octets()));
        assert!(!packet.verify_checksum(&SRC, &ALL_NODES.octets()));
        assert_eq!(packet.msg_type(), kind::V1_REPORT);
        assert_eq!(packet.code(), 0);
        assert_eq!(packet.max_resp_code(), 0);
        assert_eq!(packet.mcast_addr(), Some(group));
        assert!(!packet.is_v2_query());
        assert_eq!(packet.query_num_sources(), None);
    }

    #[test]
    fn the_address_needs_its_bytes() {
        let bytes = report_v1();
        let packet = MldPacket::new_checked(&bytes[..8]).unwrap();
        assert_eq!(packet.mcast_addr(), None);
        assert!(MldPacket::new_checked(&bytes[..7]).is_err());
    }

    #[test]
    fn v2_queries() {
        let mut bytes = [0u8; 28];
        bytes[0] = kind::QUERY;
        bytes[4..6].copy_from_slice(&10000u16.to_be_bytes());
        bytes[24] = 0x0a;
        bytes[25] = 125;
        let packet = MldPacket::new_checked(&bytes[..]).unwrap();
        assert!(packet.is_v2_query());
        assert_eq!(packet.max_resp_code(), 10000);
        assert_eq!(packet.query_suppress(), Some(true));
        assert_eq!(packet.query_qrv(), Some(2));
        assert_eq!(packet.query_qqic(), Some(125));
        assert_eq!(packet.query_num_sources(), Some(0));
        assert_eq!(packet.mcast_addr(), Some(Ipv6Addr::UNSPECIFIED));
    }

    #[test]
    fn v2_reports_walk_their_records() {
        // Two records: IS_EX {} for ff05::1, ALLOW {2001:db8::1} for ff05::2.
        let mut bytes = vec![kind::V2_REPORT, 0, 0, 0, 0, 0, 0, 2];
        bytes.extend_from_slice(&[record::IS_EXCLUDE, 0, 0, 0]);
        bytes.extend_from_slice(&"ff05::1".parse::<Ipv6Addr>().unwrap().octets());
        bytes.extend_from_slice(&[record::ALLOW, 0, 0, 1]);
        bytes.extend_from_slice(&"ff05::2".parse::<Ipv6Addr>().unwrap().octets());
        bytes.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        let packet = MldPacket::new_checked(&bytes[..]).unwrap();
        let records: Vec<_> = packet.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].record_type(), record::IS_EXCLUDE);
        assert_eq!(
            records[0].mcast_addr(),
            "ff05::1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(records[0].record_len(), 20);
        assert_eq!(records[1].num_sources(), 1);
        assert_eq!(
            records[1].source(0),
            Some("2001:db8::1".parse::<Ipv6Addr>().unwrap())
        );
        assert_eq!(records[1].source(1), None);
        for cut in 8..bytes.len() {
            let packet = MldPacket::new_checked(&bytes[..cut]).unwrap();
            assert!(packet.records().last().unwrap().is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn exponential_codes() {
        assert_eq!(v2_max_resp_ms(10000), 10000);
        assert_eq!(v2_max_resp_ms(0x7fff), 0x7fff);
        assert_eq!(v2_max_resp_ms(0x8000), 0x1000 << 3);
        assert_eq!(v2_max_resp_ms(0xffff), 0x1fff << 10);
    }

    #[test]
    fn group_macs() {
        assert_eq!(
            multicast_mac("ff02::1:ff00:1234".parse().unwrap()),
            MacAddr([0x33, 0x33, 0xff, 0x00, 0x12, 0x34])
        );
    }
}
