//! TCP headers (RFC 9293).

use super::Truncated;

/// The length of a header without options.
pub const HEADER_LEN: usize = field::URGENT.end;

/// Where the checksum lies from the header's start: a virtio-net header's
/// `csum_offset` for TCP.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

/// The flags byte's bits.
pub mod flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronise sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push the data to the application.
    pub const PSH: u8 = 0x08;
    /// The acknowledgement number is valid.
    pub const ACK: u8 = 0x10;
    /// The urgent pointer is valid.
    pub const URG: u8 = 0x20;
    /// ECN echo.
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced.
    pub const CWR: u8 = 0x80;
}

mod field {
    use std::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// A view of a TCP segment: its header and its data.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// A view without any length check; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// A view of a buffer that holds a header without options.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the header's fixed 20 bytes, which
    /// every accessor but [`options`](Self::options) reads within; whether
    /// the header length fits the buffer is the caller's to check.
    pub fn check_len(&self) -> Result<(), Truncated> {
        Truncated::check(self.buffer.as_ref().len(), HEADER_LEN)
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, range: std::ops::Range<usize>) -> u16 {
        super::be_u16(self.buffer.as_ref(), range)
    }

    fn u32_at(&self, range: std::ops::Range<usize>) -> u32 {
        super::be_u32(self.buffer.as_ref(), range)
    }

    /// The source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    /// The destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// The sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        self.u32_at(field::SEQ_NUM)
    }

    /// The acknowledgement number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        self.u32_at(field::ACK_NUM)
    }

    /// The byte of the data offset, with the reserved bits after it.
    #[inline]
    pub fn data_offset_byte(&self) -> u8 {
        self.buffer.as_ref()[field::DATA_OFF]
    }

    /// The header's length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset_byte() >> 4) * 4
    }

    /// The flags (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The window size.
    #[inline]
    pub fn window(&self) -> u16 {
        self.u16_at(field::WINDOW)
    }

    /// The checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }
}

/// Accessors whose bytes outlive the view.
impl<'a> TcpPacket<&'a [u8]> {
    /// Source and destination port, as they lie.
    #[inline]
    pub fn ports(&self) -> &'a [u8] {
        &self.buffer[field::SRC_PORT.start..field::DST_PORT.end]
    }

    /// The acknowledgement number's bytes, as they lie.
    #[inline]
    pub fn ack_bytes(&self) -> &'a [u8] {
        &self.buffer[field::ACK_NUM]
    }

    /// The window's bytes, as they lie.
    #[inline]
    pub fn window_bytes(&self) -> &'a [u8] {
        &self.buffer[field::WINDOW]
    }

    /// The options: from the fixed header's end to the header's. Panics
    /// unless the buffer holds the whole header, options included.
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.buffer[HEADER_LEN..self.header_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, value: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the flags.
    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Sets the window size.
    #[inline]
    pub fn set_window(&mut self, value: u16) {
        self.buffer.as_mut()[field::WINDOW].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the checksum.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Port 1234 to 80, seq 1000, ack 2000, 24-byte header (one option
    /// word), PSH ACK, window 0xfaf0, checksum 0xabcd, then data.
    static SEGMENT: [u8; 26] = [
        0x04, 0xd2, 0x00, 0x50, // ports
        0x00, 0x00, 0x03, 0xe8, // seq
        0x00, 0x00, 0x07, 0xd0, // ack
        0x60, 0x18, 0xfa, 0xf0, // data offset 6, PSH ACK, window
        0xab, 0xcd, 0x00, 0x00, // checksum, urgent pointer
        0x01, 0x01, 0x04, 0x02, // NOP NOP SACK-permitted
        0x68, 0x69, // data
    ];

    #[test]
    fn fields_read_back() {
        let tcp = TcpPacket::new_checked(&SEGMENT[..]).unwrap();
        assert_eq!(tcp.src_port(), 1234);
        assert_eq!(tcp.dst_port(), 80);
        assert_eq!(tcp.ports(), &SEGMENT[..4]);
        assert_eq!(tcp.seq_number(), 1000);
        assert_eq!(tcp.ack_number(), 2000);
        assert_eq!(tcp.ack_bytes(), &SEGMENT[8..12]);
        assert_eq!(tcp.data_offset_byte(), 0x60);
        assert_eq!(tcp.header_len(), 24);
        assert_eq!(tcp.flags(), flags::PSH | flags::ACK);
        assert_eq!(tcp.window(), 0xfaf0);
        assert_eq!(tcp.window_bytes(), &[0xfa, 0xf0]);
        assert_eq!(tcp.checksum(), 0xabcd);
        assert_eq!(tcp.options(), &[1, 1, 4, 2]);
        assert_eq!(CHECKSUM_OFFSET, 16);
    }

    #[test]
    fn short_headers_are_rejected() {
        assert_eq!(
            TcpPacket::new_checked(&SEGMENT[..19]).unwrap_err(),
            Truncated {
                len: 19,
                needed: 20
            }
        );
        assert!(TcpPacket::new_checked(&SEGMENT[..20]).is_ok());
    }

    #[test]
    fn setters_write_the_fields() {
        let mut bytes = SEGMENT;
        let mut tcp = TcpPacket::new_unchecked(&mut bytes[..]);
        tcp.set_seq_number(0x0102_0304);
        tcp.set_flags(flags::FIN | flags::ACK);
        tcp.set_window(0x0506);
        tcp.set_checksum(0x0708);
        assert_eq!(&bytes[4..8], &[1, 2, 3, 4]);
        assert_eq!(&bytes[12..18], &[0x60, 0x11, 5, 6, 7, 8]);
        assert_eq!(&bytes[18..], &SEGMENT[18..]);
    }
}
