//! IGMP messages: version 1 and 2 (RFC 1112, RFC 2236) queries, reports
//! and leaves of 8 bytes, version 3 (RFC 3376) queries of 12 bytes and
//! more, and version 3 reports with their group records.
//!
//! A view covers one message exactly: the IPv4 payload up to the packet's
//! total length, so that the checksum and the version 3 lengths are read
//! over the right bytes.

use std::net::Ipv4Addr;

use super::{MacAddr, Truncated};

/// The length of a version 1 or 2 message, and of every message's
/// common header.
pub const HEADER_LEN: usize = field::GROUP.end;

/// The shortest version 3 query.
pub const V3_QUERY_LEN: usize = field::QUERY_NUM_SOURCES.end;

/// The IPv4 protocol number of IGMP.
pub const PROTOCOL: u8 = 2;

/// 224.0.0.1, where general queries go.
pub const ALL_SYSTEMS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 1);

/// 224.0.0.2, where version 2 leaves go.
pub const ALL_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 2);

/// 224.0.0.22, where version 3 reports go.
pub const V3_REPORTS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 22);

/// Message types.
pub mod kind {
    /// A membership query, of any version.
    pub const QUERY: u8 = 0x11;
    /// A version 1 membership report.
    pub const V1_REPORT: u8 = 0x12;
    /// A version 2 membership report.
    pub const V2_REPORT: u8 = 0x16;
    /// A version 2 leave group message.
    pub const LEAVE: u8 = 0x17;
    /// A version 3 membership report.
    pub const V3_REPORT: u8 = 0x22;
}

/// Group record types (RFC 3376 4.2.12; MLDv2 uses the same numbers).
pub mod record {
    /// MODE_IS_INCLUDE: the current state includes the sources.
    pub const IS_INCLUDE: u8 = 1;
    /// MODE_IS_EXCLUDE: the current state excludes the sources.
    pub const IS_EXCLUDE: u8 = 2;
    /// CHANGE_TO_INCLUDE_MODE.
    pub const TO_INCLUDE: u8 = 3;
    /// CHANGE_TO_EXCLUDE_MODE.
    pub const TO_EXCLUDE: u8 = 4;
    /// ALLOW_NEW_SOURCES.
    pub const ALLOW: u8 = 5;
    /// BLOCK_OLD_SOURCES.
    pub const BLOCK: u8 = 6;
}

mod field {
    use std::ops::Range;

    pub const TYPE: usize = 0;
    pub const MAX_RESP: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const GROUP: Range<usize> = 4..8;

    // A version 3 query after the common header.
    pub const QUERY_FLAGS: usize = 8;
    pub const QUERY_QQIC: usize = 9;
    pub const QUERY_NUM_SOURCES: Range<usize> = 10..12;
    // Within QUERY_FLAGS.
    pub const S_FLAG: u8 = 0x08;
    pub const QRV: u8 = 0x07;

    // A version 3 report: where version 2 has the group, a reserved word
    // and the number of records, then the records.
    pub const NUM_RECORDS: Range<usize> = 6..8;
    pub const RECORDS: usize = 8;

    // A group record.
    pub const REC_TYPE: usize = 0;
    pub const REC_AUX_LEN: usize = 1;
    pub const REC_NUM_SOURCES: Range<usize> = 2..4;
    pub const REC_GROUP: Range<usize> = 4..8;
    pub const REC_SOURCES: usize = 8;
}

/// The multicast MAC address an IPv4 group maps to (RFC 1112 6.4):
/// 01:00:5e and the group's low 23 bits.
pub fn multicast_mac(group: Ipv4Addr) -> MacAddr {
    let g = group.octets();
    MacAddr([0x01, 0x00, 0x5e, g[1] & 0x7f, g[2], g[3]])
}

/// A version 3 Max Resp Code or QQIC (RFC 3376 4.1.1, 4.1.7) as the value
/// it stands for: below 128 the code itself, above an exponent and a
/// mantissa. In tenths of a second for a Max Resp Code.
pub fn v3_code_value(code: u8) -> u32 {
    if code < 0x80 {
        return u32::from(code);
    }
    let mantissa = u32::from(code & 0x0f);
    let exponent = u32::from((code >> 4) & 0x07);
    (mantissa | 0x10) << (exponent + 3)
}

/// A view of one IGMP message.
#[derive(Debug, Clone)]
pub struct IgmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IgmpPacket<T> {
    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        IgmpPacket { buffer }
    }

    /// A view of a buffer that holds at least the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the common 8-byte header, which every
    /// accessor but the version 3 ones reads within; those check for
    /// themselves.
    pub fn check_len(&self) -> Result<(), Truncated> {
        Truncated::check(self.buffer.as_ref().len(), HEADER_LEN)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message's length: the buffer's.
    pub fn msg_len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// The message type (see [`kind`]).
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// The Max Resp Time (version 2, tenths of a second) or Max Resp Code
    /// (version 3) of a query; 0 in a version 1 query and in reports.
    #[inline]
    pub fn max_resp_code(&self) -> u8 {
        self.buffer.as_ref()[field::MAX_RESP]
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Whether the checksum over the whole message is right.
    pub fn verify_checksum(&self) -> bool {
        super::checksum::checksum(self.buffer.as_ref()) == 0
    }

    /// The group address: the group a report or leave is about, the group
    /// of a group-specific query, 0.0.0.0 in a general query. Not a field
    /// of a version 3 report.
    #[inline]
    pub fn group_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::GROUP];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Whether this query is long enough to be a version 3 one (12 bytes
    /// or more; exactly 8 is version 1 or 2).
    pub fn is_v3_query(&self) -> bool {
        self.msg_type() == kind::QUERY && self.msg_len() >= V3_QUERY_LEN
    }

    /// A version 3 query's Suppress Router-Side Processing flag; `None`
    /// for a message too short to be one.
    pub fn query_suppress(&self) -> Option<bool> {
        let b = self.buffer.as_ref();
        (b.len() >= V3_QUERY_LEN).then(|| b[field::QUERY_FLAGS] & field::S_FLAG != 0)
    }

    /// A version 3 query's Querier's Robustness Variable.
    pub fn query_qrv(&self) -> Option<u8> {
        let b = self.buffer.as_ref();
        (b.len() >= V3_QUERY_LEN).then(|| b[field::QUERY_FLAGS] & field::QRV)
    }

    /// A version 3 query's Querier's Query Interval Code.
    pub fn query_qqic(&self) -> Option<u8> {
        let b = self.buffer.as_ref();
        (b.len() >= V3_QUERY_LEN).then(|| b[field::QUERY_QQIC])
    }

    /// A version 3 query's number of sources: 0 for a general or a
    /// group-specific query.
    pub fn query_num_sources(&self) -> Option<u16> {
        let b = self.buffer.as_ref();
        (b.len() >= V3_QUERY_LEN).then(|| super::be_u16(b, field::QUERY_NUM_SOURCES))
    }

    /// A version 3 report's number of group records, as the field says.
    #[inline]
    pub fn num_records(&self) -> u16 {
        super::be_u16(self.buffer.as_ref(), field::NUM_RECORDS)
    }

    /// A version 3 report's group records: as many as
    /// [`num_records`](Self::num_records) says, each checked to fit; the
    /// first that does not ends the walk with an error.
    pub fn records(&self) -> Records<'_> {
        let b = self.buffer.as_ref();
        Records {
            rest: b.get(field::RECORDS..).unwrap_or_default(),
            left: self.num_records(),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IgmpPacket<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::TYPE] = value;
    }

    /// Sets the Max Resp Time or Code.
    pub fn set_max_resp_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::MAX_RESP] = value;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the group address.
    pub fn set_group_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::GROUP].copy_from_slice(&value.octets());
    }

    /// Computes the checksum over the whole message and writes it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let value = super::checksum::checksum(self.buffer.as_ref());
        self.set_checksum(value);
    }
}

/// The group records of a version 3 report; see [`IgmpPacket::records`].
#[derive(Debug, Clone)]
pub struct Records<'a> {
    rest: &'a [u8],
    left: u16,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<IgmpRecord<&'a [u8]>, Truncated>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match IgmpRecord::new_checked(self.rest) {
            Ok(record) => {
                let (this, rest) = self.rest.split_at(record.record_len());
                self.rest = rest;
                Some(Ok(IgmpRecord::new_unchecked(this)))
            }
            Err(err) => {
                // Nothing after a record that does not fit can be found.
                self.left = 0;
                Some(Err(err))
            }
        }
    }
}

/// A view of one group record of a version 3 report (RFC 3376 4.2.4).
#[derive(Debug, Clone)]
pub struct IgmpRecord<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IgmpRecord<T> {
    /// The length of a record without sources or auxiliary data.
    pub const HEADER_LEN: usize = field::REC_SOURCES;

    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        IgmpRecord { buffer }
    }

    /// A view of a buffer that starts with a whole record, its sources and
    /// auxiliary data included (what follows is not the record's).
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

    /// The record's length: header, sources and auxiliary data. RFC 3376
    /// defines no auxiliary data and has hosts send none, but a receiver
    /// skips what is there; Linux's snooping ignores the field.
    pub fn record_len(&self) -> usize {
        Self::HEADER_LEN
            + usize::from(self.num_sources()) * 4
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
    pub fn group_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::REC_GROUP];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Source `i`, if the record has it.
    pub fn source(&self, i: u16) -> Option<Ipv4Addr> {
        if i >= self.num_sources() {
            return None;
        }
        let at = field::REC_SOURCES + usize::from(i) * 4;
        let b = self.buffer.as_ref().get(at..at + 4)?;
        Some(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IGMPv2 report for 239.1.1.1.
    static V2_REPORT: [u8; 8] = [0x16, 0x00, 0xf9, 0xfc, 239, 1, 1, 1];

    /// An IGMPv3 report with two records: TO_IN {} for 239.1.1.1 (a leave)
    /// and IS_EX {} for 239.2.2.2 with one source and one word of
    /// auxiliary data.
    static V3_REPORT: [u8; 32] = [
        0x22, 0x00, 0x00, 0x00, // type, reserved, checksum (not filled)
        0x00, 0x00, 0x00, 0x02, // reserved, two records
        0x03, 0x00, 0x00, 0x00, 239, 1, 1, 1, // TO_IN, no aux, no sources
        0x02, 0x01, 0x00, 0x01, 239, 2, 2, 2, // IS_EX, 1 aux word, 1 source
        10, 0, 0, 1, // the source
        0xaa, 0xbb, 0xcc, 0xdd, // the auxiliary word
    ];

    #[test]
    fn v2_fields_read_back() {
        let packet = IgmpPacket::new_checked(&V2_REPORT[..]).unwrap();
        assert_eq!(packet.msg_type(), kind::V2_REPORT);
        assert_eq!(packet.max_resp_code(), 0);
        assert_eq!(packet.checksum(), 0xf9fc);
        assert!(packet.verify_checksum());
        assert_eq!(packet.group_addr(), Ipv4Addr::new(239, 1, 1, 1));
        assert!(!packet.is_v3_query());
        assert_eq!(packet.query_num_sources(), None);
    }

    #[test]
    fn a_bad_checksum_fails() {
        let mut bytes = V2_REPORT;
        bytes[3] ^= 1;
        assert!(!IgmpPacket::new_unchecked(&bytes[..]).verify_checksum());
    }

    #[test]
    fn checksums_fill_in() {
        let mut bytes = V2_REPORT;
        bytes[2..4].fill(0);
        IgmpPacket::new_unchecked(&mut bytes[..]).fill_checksum();
        assert_eq!(bytes, V2_REPORT);
    }

    #[test]
    fn v3_reports_walk_their_records() {
        let packet = IgmpPacket::new_checked(&V3_REPORT[..]).unwrap();
        assert_eq!(packet.num_records(), 2);
        let records: Vec<_> = packet.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].record_type(), record::TO_INCLUDE);
        assert_eq!(records[0].num_sources(), 0);
        assert_eq!(records[0].group_addr(), Ipv4Addr::new(239, 1, 1, 1));
        assert_eq!(records[0].record_len(), 8);
        assert_eq!(records[1].record_type(), record::IS_EXCLUDE);
        assert_eq!(records[1].aux_data_len(), 1);
        assert_eq!(records[1].source(0), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(records[1].source(1), None);
        assert_eq!(records[1].record_len(), 16);
    }

    #[test]
    fn truncated_records_end_the_walk() {
        for cut in 8..V3_REPORT.len() {
            let packet = IgmpPacket::new_checked(&V3_REPORT[..cut]).unwrap();
            let results: Vec<_> = packet.records().collect();
            assert!(results.last().unwrap().is_err(), "cut at {cut}");
            assert!(results.len() <= 2);
        }
        // More records announced than there are.
        let mut bytes = V3_REPORT;
        bytes[7] = 200;
        let packet = IgmpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.records().count(), 3);
        assert!(packet.records().nth(2).unwrap().is_err());
    }

    #[test]
    fn v3_queries() {
        // General query, Max Resp Code 100, S set, QRV 2, QQIC 125.
        let query = [0x11, 100, 0, 0, 0, 0, 0, 0, 0x0a, 125, 0, 0];
        let packet = IgmpPacket::new_checked(&query[..]).unwrap();
        assert!(packet.is_v3_query());
        assert_eq!(packet.query_suppress(), Some(true));
        assert_eq!(packet.query_qrv(), Some(2));
        assert_eq!(packet.query_qqic(), Some(125));
        assert_eq!(packet.query_num_sources(), Some(0));
        assert_eq!(packet.group_addr(), Ipv4Addr::UNSPECIFIED);
    }

    #[test]
    fn exponential_codes() {
        assert_eq!(v3_code_value(0), 0);
        assert_eq!(v3_code_value(100), 100);
        assert_eq!(v3_code_value(127), 127);
        // 0x80: exponent 0, mantissa 0: 16 << 3.
        assert_eq!(v3_code_value(0x80), 128);
        assert_eq!(v3_code_value(0x8f), 31 << 3);
        assert_eq!(v3_code_value(0xff), 31 << 10);
    }

    #[test]
    fn group_macs() {
        assert_eq!(
            multicast_mac(Ipv4Addr::new(239, 129, 1, 2)),
            MacAddr([0x01, 0x00, 0x5e, 0x01, 0x01, 0x02])
        );
        assert_eq!(
            multicast_mac(ALL_SYSTEMS),
            MacAddr([0x01, 0x00, 0x5e, 0, 0, 1])
        );
    }

    #[test]
    fn short_messages_are_rejected() {
        assert_eq!(
            IgmpPacket::new_checked(&V2_REPORT[..7]).unwrap_err(),
            Truncated { len: 7, needed: 8 }
        );
        assert_eq!(
            IgmpRecord::new_checked(&V3_REPORT[16..31]).unwrap_err(),
            Truncated {
                len: 15,
                needed: 16
            }
        );
    }
}
