//! What IPv4 and IPv6 share: the numbers of the protocols they carry
//! (IPv4's protocol field, IPv6's next header).

/// TCP.
pub const TCP: u8 = 6;
/// UDP.
pub const UDP: u8 = 17;
/// SCTP.
pub const SCTP: u8 = 132;
/// UDP-Lite.
pub const UDPLITE: u8 = 136;
