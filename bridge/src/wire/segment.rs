//! Software segmentation and checksum completion: what a port that cannot
//! carry the virtio-net header's offload state (a VXLAN port: the far end
//! gets the inner frame only) does to frames that still depend on it.
//!
//! A frame with a partial checksum (`NEEDS_CSUM`) gets its checksum filled
//! in, as the kernel's `skb_checksum_help` does; an offloaded TCP segment
//! (GSO TCPv4 or TCPv6) is cut into frames of at most `gso_size` payload
//! bytes with their IP lengths, IPv4 ids, TCP sequence numbers, flags and
//! checksums set, as the kernel's `tcp_gso_segment` does.
//!
//! The header comes from a guest or a peer: a `gso_size` of 1 would cut a
//! 64 KiB frame into 65,000 segments. Segment sizes below [`MIN_GSO_SIZE`]
//! are refused before any segment is made.

use super::ip;
use super::ipv4::{self, Ipv4Packet};
use super::ipv6::{self, Ipv6Packet};
use super::tag::inner_ethertype;
use super::tcp::{self, flags, TcpPacket};
use super::udp;
use super::vnet::{
    VnetHeader, VNET_HDR_F_NEEDS_CSUM, VNET_HDR_GSO_ECN, VNET_HDR_GSO_NONE, VNET_HDR_GSO_TCPV4,
    VNET_HDR_GSO_TCPV6, VNET_HDR_LEN,
};
use super::{EtherType, EthernetFrame};

/// The smallest segment size (TCP payload bytes) a frame is cut into:
/// Linux's TCP never sends with an MSS below `net.ipv4.tcp_min_snd_mss`
/// (default 48, `TCP_MIN_SND_MSS`), the floor it set against peers that
/// make a host cut its data into tiny segments to burn its CPU and memory
/// (CVE-2019-11479). A `gso_size` of 0 names no size at all: the virtio
/// specification requires one with a GSO type, and Linux taps used to
/// refuse it (EINVAL, `rx_frame_errors`). A frame whose payload fits one
/// segment is no GSO frame whatever its size says, as `virtio_net_hdr_to_skb`
/// treats it ("too small packets are not really GSO ones").
pub const MIN_GSO_SIZE: usize = 48;

/// An untagged Ethernet header's length.
const ETH_HEADER_LEN: usize = EthernetFrame::<&[u8]>::HEADER_LEN;

/// Why a frame could not be made whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// Offsets or lengths that do not fit the frame.
    #[error("offload offsets outside the frame")]
    Malformed,
    /// A segmentation type other than TCP (UDP fragmentation, USO).
    #[error("segmentation offload of type {0} is not supported")]
    Unsupported(u8),
    /// A segment size of 0, or below [`MIN_GSO_SIZE`] for a frame that
    /// needs cutting.
    #[error("segment size {0} is below the minimum of {MIN_GSO_SIZE}")]
    SegmentSize(u16),
}

/// Calls `emit` with each whole frame `frame` stands for, given its
/// virtio-net header `vnet`: the frame itself when nothing is offloaded,
/// with its checksum filled in when partial, or its segments.
pub fn make_whole(
    vnet: &[u8],
    frame: &[u8],
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Result<(), SegmentError> {
    let header = VnetHeader::new_checked(vnet).map_err(|_| SegmentError::Malformed)?;
    match header.gso_type() & !VNET_HDR_GSO_ECN {
        VNET_HDR_GSO_NONE => {
            if !header.needs_csum() {
                emit(frame);
                return Ok(());
            }
            scratch.clear();
            scratch.extend_from_slice(frame);
            let start = usize::from(header.csum_start());
            let field = start + usize::from(header.csum_offset());
            if field + 2 > scratch.len() {
                return Err(SegmentError::Malformed);
            }
            let mut sum = !fold(sum16(&scratch[start..], 0));
            // A UDP checksum of zero means none: it is sent as all ones.
            if usize::from(header.csum_offset()) == udp::CHECKSUM_OFFSET && sum == udp::NO_CHECKSUM
            {
                sum = 0xffff;
            }
            scratch[field..field + 2].copy_from_slice(&sum.to_be_bytes());
            emit(scratch);
            Ok(())
        }
        kind @ (VNET_HDR_GSO_TCPV4 | VNET_HDR_GSO_TCPV6) => segment_tcp(
            frame,
            usize::from(header.gso_size()),
            kind == VNET_HDR_GSO_TCPV4,
            scratch,
            emit,
        ),
        other => Err(SegmentError::Unsupported(other)),
    }
}

/// The addresses the TCP and UDP pseudo-header covers, of the IPv4 or
/// IPv6 header `ip` starts with.
#[inline]
fn pseudo_addrs(ip: &[u8], v4: bool) -> &[u8] {
    if v4 {
        Ipv4Packet::new_unchecked(ip).addrs()
    } else {
        Ipv6Packet::new_unchecked(ip).addrs()
    }
}

/// Fills in the TCP or UDP checksum of `frame` when it holds the partial
/// form a sender with checksum offload leaves (the pseudo-header sum, not
/// yet the whole checksum). Such frames reach a VXLAN port from a VTEP on
/// the same host: over veth the kernel never computes a checksum it
/// offloaded, and a UDP socket hands over the bytes as they are. A frame
/// whose checksum verifies, or that is neither partial nor whole (damaged),
/// is left as it is. Returns whether it filled one in.
pub fn complete_partial(frame: &mut [u8]) -> bool {
    let Some((ethertype, l3)) = inner_ethertype(frame, usize::MAX) else {
        return false;
    };
    // (IPv4, start of L4, protocol, L4 length)
    let (v4, l4, proto, l4_len) = match ethertype {
        EtherType::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(&frame[l3..]) else {
                return false;
            };
            let ihl = ip.header_len();
            if ihl < ipv4::HEADER_LEN {
                return false;
            }
            let total = usize::from(ip.total_len());
            if ip.is_fragment() || total < ihl || l3 + total > frame.len() {
                return false;
            }
            (true, l3 + ihl, ip.protocol(), total - ihl)
        }
        EtherType::IPV6 => {
            let Ok(ip) = Ipv6Packet::new_checked(&frame[l3..]) else {
                return false;
            };
            let payload = usize::from(ip.payload_len());
            if l3 + ipv6::HEADER_LEN + payload > frame.len() {
                return false;
            }
            (false, l3 + ipv6::HEADER_LEN, ip.next_header(), payload)
        }
        _ => return false,
    };
    let field = match proto {
        ip::TCP => l4 + tcp::CHECKSUM_OFFSET,
        ip::UDP => l4 + udp::CHECKSUM_OFFSET,
        _ => return false,
    };
    if field + 2 > l4 + l4_len {
        return false;
    }
    let stored = u16::from_be_bytes([frame[field], frame[field + 1]]);
    if proto == ip::UDP && stored == udp::NO_CHECKSUM && v4 {
        return false; // no UDP checksum
    }
    let pseudo = sum16(
        pseudo_addrs(&frame[l3..], v4),
        u32::from(proto) + l4_len as u32,
    );
    let segment = &frame[l4..l4 + l4_len];
    if fold(sum16(segment, pseudo)) == 0xffff {
        return false; // whole already
    }
    if stored != fold(pseudo) {
        return false; // damaged: the receiver drops it
    }
    let mut sum = !fold(sum16(segment, 0));
    if proto == ip::UDP && sum == udp::NO_CHECKSUM {
        sum = 0xffff;
    }
    frame[field..field + 2].copy_from_slice(&sum.to_be_bytes());
    true
}

/// Marks a TCP frame longer than `mtu` (IP bytes) as an offloaded segment
/// in its virtio-net header `vnet`: partial checksum, GSO TCPv4 or TCPv6
/// with segments of what fits `mtu`. A VXLAN port gets such frames when
/// the underlay is a veth: the kernel passes coalesced segments between
/// namespaces whole, and a UDP socket hands them over as one datagram;
/// marked, they reach a local stack whole (as GRO gives it frames) and are
/// cut again wherever a link needs it. Returns whether it marked the frame.
pub fn offload_large_tcp(vnet: &mut [u8], frame: &mut [u8], mtu: usize) -> bool {
    if vnet.len() < VNET_HDR_LEN || frame.len() <= ETH_HEADER_LEN + mtu {
        return false;
    }
    // Untagged only; more than a bare IP header.
    let l3 = ETH_HEADER_LEN;
    let v4 = match EthernetFrame::new_unchecked(&*frame).ethertype() {
        EtherType::IPV4
            if frame.len() > l3 + ipv4::HEADER_LEN
                && Ipv4Packet::new_unchecked(&frame[l3..]).protocol() == ip::TCP =>
        {
            true
        }
        EtherType::IPV6
            if frame.len() > l3 + ipv6::HEADER_LEN
                && Ipv6Packet::new_unchecked(&frame[l3..]).next_header() == ip::TCP =>
        {
            false
        }
        _ => return false,
    };
    let Ok(Layout { l3, l4, payload }) = layout(frame, v4) else {
        return false;
    };
    // The IP length must be the frame's, and an IPv4 frame whole (no
    // fragment).
    let (ip_len, fragment) = if v4 {
        let ip = Ipv4Packet::new_unchecked(&frame[l3..]);
        (usize::from(ip.total_len()), ip.is_fragment())
    } else {
        let ip = Ipv6Packet::new_unchecked(&frame[l3..]);
        (ipv6::HEADER_LEN + usize::from(ip.payload_len()), false)
    };
    if l3 + ip_len != frame.len() || fragment {
        return false;
    }
    // Segments of fewer than MIN_GSO_SIZE bytes are refused when cut: a
    // frame the MTU leaves so little room for is not marked to be cut.
    if mtu.saturating_sub(payload - l3) < MIN_GSO_SIZE {
        return false;
    }
    let l4_len = frame.len() - l4;
    let pseudo = sum16(
        pseudo_addrs(&frame[l3..], v4),
        u32::from(ip::TCP) + l4_len as u32,
    );
    // Damage in transit must not turn into a checksum that verifies: only
    // a whole or a partial checksum is taken.
    let stored = TcpPacket::new_unchecked(&frame[l4..]).checksum();
    if fold(sum16(&frame[l4..], pseudo)) != 0xffff && stored != fold(pseudo) {
        return false;
    }
    TcpPacket::new_unchecked(&mut frame[l4..]).set_checksum(fold(pseudo));
    let headers = payload - l3;
    let mss = mtu.saturating_sub(headers).max(1) as u16;
    let mut header = VnetHeader::new_unchecked(vnet);
    header.set_flags(VNET_HDR_F_NEEDS_CSUM);
    header.set_gso_type(if v4 {
        VNET_HDR_GSO_TCPV4
    } else {
        VNET_HDR_GSO_TCPV6
    });
    header.set_hdr_len(payload as u16);
    header.set_gso_size(mss);
    header.set_csum_start(l4 as u16);
    header.set_csum_offset(tcp::CHECKSUM_OFFSET as u16);
    true
}

/// A run of TCP segments of one flow being joined into one offloaded
/// frame on receive (what GRO does in the kernel): a VXLAN port gets a
/// TCP transfer as one datagram per segment, and handing each to a tap or
/// a packet socket costs a system call and the far stack a receive. Only
/// untagged IPv4 without IP options is joined.
#[derive(Debug, Clone)]
pub struct TcpRun {
    /// Everything that must match: MACs, TOS, TTL, addresses, ports, the
    /// TCP header length, acknowledgement number and options.
    key: Vec<u8>,
    next_seq: u32,
    mss: usize,
    segments: usize,
    closed: bool,
}

/// Where a joined frame's headers start: untagged IPv4 without options.
const RUN_IP: usize = ETH_HEADER_LEN;
const RUN_TCP: usize = RUN_IP + ipv4::HEADER_LEN;

/// The IPv4 header of a frame that [`run_layout`] took.
fn run_ip<T: AsRef<[u8]> + ?Sized>(frame: &T) -> Ipv4Packet<&[u8]> {
    Ipv4Packet::new_unchecked(&frame.as_ref()[RUN_IP..])
}

/// The TCP header of a frame that [`run_layout`] took.
fn run_tcp<T: AsRef<[u8]> + ?Sized>(frame: &T) -> TcpPacket<&[u8]> {
    TcpPacket::new_unchecked(&frame.as_ref()[RUN_TCP..])
}

/// The parts of an untagged IPv4 TCP frame without IP options: (TCP
/// header length, payload length, flags), or None.
fn run_layout(frame: &[u8]) -> Option<(usize, usize, u8)> {
    if frame.len() < RUN_TCP + tcp::HEADER_LEN
        || EthernetFrame::new_unchecked(frame).ethertype() != EtherType::IPV4
    {
        return None;
    }
    let ip = run_ip(frame);
    if ip.version_and_header_len() != 0x45
        || ip.protocol() != ip::TCP
        // Fragments (MF or an offset) are not joined.
        || ip.is_fragment()
    {
        return None;
    }
    let total = usize::from(ip.total_len());
    let tcp = run_tcp(frame);
    let thl = tcp.header_len();
    if thl < tcp::HEADER_LEN || RUN_IP + total != frame.len() || total < ipv4::HEADER_LEN + thl {
        return None;
    }
    Some((thl, total - ipv4::HEADER_LEN - thl, tcp.flags()))
}

fn run_key(frame: &[u8], thl: usize) -> Vec<u8> {
    let eth = EthernetFrame::new_unchecked(frame);
    let (ip, tcp) = (run_ip(frame), run_tcp(frame));
    let mut key = Vec::with_capacity(32 + thl);
    key.extend_from_slice(&eth.dst_addr().0);
    key.extend_from_slice(&eth.src_addr().0);
    key.push(ip.tos());
    key.push(ip.ttl());
    key.extend_from_slice(ip.addrs());
    key.extend_from_slice(tcp.ports());
    key.extend_from_slice(tcp.ack_bytes());
    key.push(tcp.data_offset_byte()); // header length
    key.extend_from_slice(tcp.options());
    key
}

/// Whether an untagged IPv4 TCP frame's checksum verifies, or holds the
/// partial form (the pseudo-header sum) of a sender whose offload was never
/// completed, which only a host-internal path leaves.
fn tcp_checksum_acceptable(frame: &[u8]) -> bool {
    let tcp_len = frame.len() - RUN_TCP;
    let pseudo = sum16(run_ip(frame).addrs(), u32::from(ip::TCP) + tcp_len as u32);
    let stored = run_tcp(frame).checksum();
    fold(sum16(&frame[RUN_TCP..], pseudo)) == 0xffff || stored == fold(pseudo)
}

impl TcpRun {
    /// A run that `frame` (whole, its checksums complete) starts, if later
    /// segments may join it: a pure ACK segment carrying at least
    /// [`MIN_GSO_SIZE`] bytes of data.
    pub fn start(frame: &[u8]) -> Option<TcpRun> {
        let (thl, len, flags) = run_layout(frame)?;
        // The run leaves with its first segment's size as its gso_size:
        // one too small to be cut again is not started.
        if len < MIN_GSO_SIZE
            || flags & !flags::PSH != flags::ACK
            || !tcp_checksum_acceptable(frame)
        {
            return None;
        }
        Some(TcpRun {
            key: run_key(frame, thl),
            next_seq: run_tcp(frame).seq_number().wrapping_add(len as u32),
            mss: len,
            segments: 1,
            closed: flags & flags::PSH != 0,
        })
    }

    /// Appends `next`'s payload to the run's frame, `buffer[..len]` (its
    /// virtio-net header first, `buffer` the room the frame may grow
    /// into), when `next` continues the same flow; returns the frame's new
    /// length. The joined frame leaves as an offloaded segment: GSO TCPv4
    /// at the first segment's size, with a partial checksum.
    pub fn join(&mut self, buffer: &mut [u8], len: usize, next: &[u8]) -> Option<usize> {
        if self.closed || len < VNET_HDR_LEN {
            return None;
        }
        let (thl, payload, flags) = run_layout(next)?;
        let seq = run_tcp(next).seq_number();
        let frame_len = len - VNET_HDR_LEN;
        let new_len = len + payload;
        if payload == 0
            || payload > self.mss
            || flags & !flags::PSH != flags::ACK
            || seq != self.next_seq
            || frame_len + payload - RUN_IP > 65_535
            || new_len > buffer.len()
            || run_key(next, thl) != self.key
            || !tcp_checksum_acceptable(next)
        {
            return None;
        }
        let data = &next[RUN_TCP + thl..];
        buffer[len..new_len].copy_from_slice(data);
        let (vnet, frame) = buffer[..new_len].split_at_mut(VNET_HDR_LEN);
        let total = (frame.len() - RUN_IP) as u16;
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[RUN_IP..]);
        ip.set_total_len(total);
        ip.set_checksum(0);
        let ip_sum = !fold(sum16(&frame[RUN_IP..RUN_TCP], 0));
        Ipv4Packet::new_unchecked(&mut frame[RUN_IP..]).set_checksum(ip_sum);
        // The latest window, and PSH if the last segment had it.
        let mut tcp = TcpPacket::new_unchecked(&mut frame[RUN_TCP..]);
        tcp.set_window(run_tcp(next).window());
        tcp.set_flags(tcp.flags() | (flags & flags::PSH));
        let tcp_len = frame.len() - RUN_TCP;
        let pseudo = sum16(run_ip(frame).addrs(), u32::from(ip::TCP) + tcp_len as u32);
        TcpPacket::new_unchecked(&mut frame[RUN_TCP..]).set_checksum(fold(pseudo));
        let mut header = VnetHeader::new_unchecked(vnet);
        header.set_flags(VNET_HDR_F_NEEDS_CSUM);
        header.set_gso_type(VNET_HDR_GSO_TCPV4);
        header.set_hdr_len((RUN_TCP + thl) as u16);
        header.set_gso_size(self.mss as u16);
        header.set_csum_start(RUN_TCP as u16);
        header.set_csum_offset(tcp::CHECKSUM_OFFSET as u16);
        self.next_seq = seq.wrapping_add(payload as u32);
        self.segments += 1;
        self.closed = payload < self.mss || flags & flags::PSH != 0;
        Some(new_len)
    }
}

/// The offsets of a TCP frame's headers.
struct Layout {
    l3: usize,
    l4: usize,
    payload: usize,
}

/// Where the IP header, the TCP header and the payload of a TCP frame
/// start, past any VLAN tags. IPv6 extension headers are not walked: the
/// kernel's TSO for veth and taps hands them over without.
fn layout(frame: &[u8], v4: bool) -> Result<Layout, SegmentError> {
    let malformed = SegmentError::Malformed;
    // 802.1Q or 802.1ad tags, however many.
    let (ethertype, l3) = inner_ethertype(frame, usize::MAX).ok_or(malformed)?;
    // The header's GSO type must match the frame: a TCPv4 one on anything
    // but IPv4 TCP would rewrite bytes of another protocol at TCP's places
    // (the kernel refuses such a frame, as segmentation finds no handler).
    if ethertype != if v4 { EtherType::IPV4 } else { EtherType::IPV6 } {
        return Err(malformed);
    }
    let l4 = if v4 {
        let ip = Ipv4Packet::new_checked(&frame[l3..]).map_err(|_| malformed)?;
        let ihl = ip.header_len();
        if ihl < ipv4::HEADER_LEN || ip.protocol() != ip::TCP {
            return Err(malformed);
        }
        l3 + ihl
    } else {
        let ip = Ipv6Packet::new_checked(&frame[l3..]).map_err(|_| malformed)?;
        if ip.next_header() != ip::TCP {
            return Err(malformed);
        }
        l3 + ipv6::HEADER_LEN
    };
    let tcp = frame
        .get(l4..)
        .and_then(|bytes| TcpPacket::new_checked(bytes).ok())
        .ok_or(malformed)?;
    let thl = tcp.header_len();
    let payload = l4 + thl;
    if thl < tcp::HEADER_LEN || payload > frame.len() {
        return Err(malformed);
    }
    Ok(Layout { l3, l4, payload })
}

fn segment_tcp(
    frame: &[u8],
    mss: usize,
    v4: bool,
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Result<(), SegmentError> {
    let Layout { l3, l4, payload } = layout(frame, v4)?;
    let data = &frame[payload..];
    if mss == 0 || (mss < MIN_GSO_SIZE && data.len() > mss) {
        return Err(SegmentError::SegmentSize(mss as u16));
    }
    // The largest segment's IPv4 total length or IPv6 payload length must
    // fit its 16 bits: a frame of more IP bytes than that (which no stack
    // sends, but a buffer of 64 KiB and more takes) would get lengths that
    // wrap.
    let largest = payload - l3 + data.len().min(mss) - if v4 { 0 } else { ipv6::HEADER_LEN };
    if largest > usize::from(u16::MAX) {
        return Err(SegmentError::Malformed);
    }
    let tcp = TcpPacket::new_unchecked(&frame[l4..]);
    let seq = tcp.seq_number();
    let flags = tcp.flags();
    let ip_id = if v4 {
        Ipv4Packet::new_unchecked(&frame[l3..]).ident()
    } else {
        0
    };
    let chunks = data.len().div_ceil(mss).max(1);
    for i in 0..chunks {
        let chunk = &data[(i * mss).min(data.len())..((i + 1) * mss).min(data.len())];
        scratch.clear();
        scratch.extend_from_slice(&frame[..payload]);
        scratch.extend_from_slice(chunk);
        let tcp_len = scratch.len() - l4;
        if v4 {
            let total = (scratch.len() - l3) as u16;
            let mut ip = Ipv4Packet::new_unchecked(&mut scratch[l3..]);
            ip.set_total_len(total);
            ip.set_ident(ip_id.wrapping_add(i as u16));
            ip.set_checksum(0);
            let sum = !fold(sum16(&scratch[l3..l4], 0));
            Ipv4Packet::new_unchecked(&mut scratch[l3..]).set_checksum(sum);
        } else {
            let len = (scratch.len() - l3 - ipv6::HEADER_LEN) as u16;
            Ipv6Packet::new_unchecked(&mut scratch[l3..]).set_payload_len(len);
        }
        let mut f = flags;
        if i + 1 < chunks {
            f &= !(flags::FIN | flags::PSH);
        }
        if i > 0 {
            f &= !flags::CWR;
        }
        let mut tcp = TcpPacket::new_unchecked(&mut scratch[l4..]);
        tcp.set_seq_number(seq.wrapping_add((i * mss) as u32));
        tcp.set_flags(f);
        tcp.set_checksum(0);
        let pseudo = sum16(
            pseudo_addrs(&scratch[l3..], v4),
            u32::from(ip::TCP) + tcp_len as u32,
        );
        let sum = !fold(sum16(&scratch[l4..], pseudo));
        TcpPacket::new_unchecked(&mut scratch[l4..]).set_checksum(sum);
        emit(scratch);
    }
    Ok(())
}

/// The ones' complement sum of `bytes` as 16-bit big-endian words (a last
/// odd byte padded with zero), added to `initial`, folded to 32 bits but
/// not to 16.
///
/// The bulk is summed as native-order 32-bit words into a 64-bit
/// accumulator, a loop the compiler vectorises: the ones' complement sum
/// folds to the same 16 bits whatever the word width, and summing in the
/// other byte order gives the byte-swapped sum (RFC 1071, 2.(B)), swapped
/// back once. 64 KiB of words cannot overflow the accumulator.
///
/// Kept out of line: copies inlined into its callers ran the same loop
/// slower (its alignment), and one copy serves every caller.
#[inline(never)]
fn sum16(bytes: &[u8], initial: u32) -> u32 {
    let mut words = bytes.chunks_exact(4);
    let mut bulk = 0u64;
    for word in &mut words {
        bulk += u64::from(u32::from_ne_bytes(word.try_into().expect("4 bytes")));
    }
    let native = fold(fold_to_32(bulk));
    let mut sum = u64::from(initial) + u64::from(u16::from_be(native));
    let mut pairs = words.remainder().chunks_exact(2);
    for pair in &mut pairs {
        sum += u64::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(*last) << 8;
    }
    fold_to_32(sum)
}

/// A 64-bit ones' complement sum folded to 32 bits.
fn fold_to_32(mut sum: u64) -> u32 {
    while sum > 0xffff_ffff {
        sum = (sum & 0xffff_ffff) + (sum >> 32);
    }
    sum as u32
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vnet(
        flags: u8,
        gso: u8,
        gso_size: u16,
        csum_start: u16,
        csum_offset: u16,
    ) -> [u8; VNET_HDR_LEN] {
        let mut h = [0u8; VNET_HDR_LEN];
        h[0] = flags;
        h[1] = gso;
        h[4..6].copy_from_slice(&gso_size.to_ne_bytes());
        h[6..8].copy_from_slice(&csum_start.to_ne_bytes());
        h[8..10].copy_from_slice(&csum_offset.to_ne_bytes());
        h
    }

    /// An Ethernet + IPv4 + TCP frame with `payload`, checksums left as a
    /// sender with offloads leaves them (IP header complete, TCP partial:
    /// the pseudo-header sum).
    fn tcp4(payload: &[u8], flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        let total = (40 + payload.len()) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[18..20].copy_from_slice(&0x1234u16.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[198, 18, 0, 1]);
        f[30..34].copy_from_slice(&[198, 18, 0, 2]);
        f[38..42].copy_from_slice(&1000u32.to_be_bytes());
        f[46] = 5 << 4;
        f[47] = flags;
        f.extend_from_slice(payload);
        f
    }

    /// Fills in the IPv4 header and TCP checksums of `f`.
    fn complete_tcp(f: &mut [u8]) {
        let ip_sum = !fold(sum16(&f[14..34], 0));
        f[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        let tcp_len = f.len() - 34;
        let sum = !fold(sum16(&f[34..], sum16(&f[26..34], 6 + tcp_len as u32)));
        f[50..52].copy_from_slice(&sum.to_be_bytes());
    }

    /// Whether the IPv4 header and TCP checksums of `f` verify.
    fn checksums_verify(f: &[u8]) -> bool {
        let ip_ok = fold(sum16(&f[14..34], 0)) == 0xffff;
        let tcp_len = f.len() - 34;
        let pseudo = sum16(&f[26..34], 6 + tcp_len as u32);
        ip_ok && fold(sum16(&f[34..], pseudo)) == 0xffff
    }

    #[test]
    fn a_partial_checksum_is_completed() {
        let mut f = tcp4(b"hello, world", 0x18);
        // A sender with checksum offload leaves the pseudo-header sum.
        let ip_sum = !fold(sum16(&f[14..34], 0));
        f[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        let pseudo = fold(sum16(&f[26..34], 6 + (f.len() - 34) as u32));
        f[50..52].copy_from_slice(&pseudo.to_be_bytes());
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        make_whole(&vnet(1, 0, 0, 34, 16), &f, &mut scratch, |w| {
            out.push(w.to_vec())
        })
        .unwrap();
        assert_eq!(out.len(), 1);
        assert!(checksums_verify(&out[0]));
        // A frame with nothing offloaded passes unchanged.
        let mut out = Vec::new();
        make_whole(&vnet(0, 0, 0, 0, 0), &f, &mut scratch, |w| {
            out.push(w.to_vec())
        })
        .unwrap();
        assert_eq!(out, [f]);
    }

    #[test]
    fn partial_checksums_in_received_frames_are_completed_once() {
        let mut f = tcp4(b"a reply", 0x12);
        let ip_sum = !fold(sum16(&f[14..34], 0));
        f[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        let pseudo = fold(sum16(&f[26..34], 6 + (f.len() - 34) as u32));
        f[50..52].copy_from_slice(&pseudo.to_be_bytes());
        assert!(!checksums_verify(&f));
        assert!(complete_partial(&mut f));
        assert!(checksums_verify(&f));
        // Whole already: left alone.
        let before = f.clone();
        assert!(!complete_partial(&mut f));
        assert_eq!(f, before);
        // Damaged (neither form): left for the receiver to drop.
        f[60] ^= 0xff;
        let damaged = f.clone();
        assert!(!complete_partial(&mut f));
        assert_eq!(f, damaged);
    }

    #[test]
    fn a_coalesced_tcp_frame_is_marked_and_cuts_back_whole() {
        let payload: Vec<u8> = (0..2796u32).map(|i| (i * 7) as u8).collect();
        let mut f = tcp4(&payload, 0x10);
        let ip_sum = !fold(sum16(&f[14..34], 0));
        f[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        // As a sender with checksum offload leaves it: the partial form.
        let pseudo = fold(sum16(&f[26..34], 6 + (f.len() - 34) as u32));
        f[50..52].copy_from_slice(&pseudo.to_be_bytes());
        let mut vnet = [0u8; VNET_HDR_LEN];
        assert!(
            !offload_large_tcp(&mut vnet, &mut f[..1514], 1500),
            "fits the MTU"
        );
        assert!(offload_large_tcp(&mut vnet, &mut f, 1500));
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        make_whole(&vnet, &f, &mut scratch, |w| out.push(w.to_vec())).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out
            .iter()
            .all(|seg| checksums_verify(seg) && seg.len() <= 1514));
        let joined: Vec<u8> = out.iter().flat_map(|seg| seg[54..].to_vec()).collect();
        assert_eq!(joined, payload);
    }

    #[test]
    fn the_wide_sum_equals_the_word_by_word_sum() {
        let reference = |bytes: &[u8], initial: u32| {
            let mut sum = initial;
            for w in bytes.chunks(2) {
                sum = sum.wrapping_add(u32::from(u16::from_be_bytes([
                    w[0],
                    *w.get(1).unwrap_or(&0),
                ])));
                sum = (sum & 0xffff) + (sum >> 16);
            }
            fold(sum)
        };
        let mut state = 7u32;
        for len in [0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 63, 1448, 1501, 65_535] {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (state >> 16) as u8
                })
                .collect();
            // Every byte all ones too: the most carries.
            for bytes in [bytes.clone(), vec![0xff; len]] {
                for initial in [0, 6, 0xffff, 0x1_2345] {
                    assert_eq!(
                        fold(sum16(&bytes, initial)),
                        reference(&bytes, initial),
                        "{len} {initial}"
                    );
                }
            }
        }
    }

    #[test]
    fn malformed_headers_are_never_marked_or_cut() {
        let payload = vec![0x33u8; 1480];
        let mut f = tcp4(&payload, 0x10);
        f[46] = 0; // TCP data offset 0
        let mut header = [0u8; VNET_HDR_LEN];
        assert!(!offload_large_tcp(&mut header, &mut f.clone(), 1500));
        let mut scratch = Vec::new();
        assert_eq!(
            make_whole(
                &vnet(1, VNET_HDR_GSO_TCPV4, 1400, 34, 16),
                &f,
                &mut scratch,
                |_| {}
            ),
            Err(SegmentError::Malformed)
        );
        let mut g = tcp4(&payload, 0x10);
        g[14] = 0x44; // IHL 4
        assert!(!offload_large_tcp(&mut header, &mut g, 1500));
        // A damaged segment (neither checksum form) is not marked either.
        let mut h = tcp4(&payload, 0x10);
        h[50] = 0x12;
        h[51] = 0x34;
        assert!(!offload_large_tcp(&mut header, &mut h, 1500));
    }

    #[test]
    fn segments_of_one_flow_join_and_cut_back_the_same() {
        let payload: Vec<u8> = (0..4000u32).map(|i| (i * 13) as u8).collect();
        let f = tcp4(&payload, 0x10 | flags::PSH);
        let mut scratch = Vec::new();
        let mut segments = Vec::new();
        make_whole(
            &vnet(1, VNET_HDR_GSO_TCPV4, 1448, 34, 16),
            &f,
            &mut scratch,
            |w| segments.push(w.to_vec()),
        )
        .unwrap();
        assert_eq!(segments.len(), 3);
        // Join them as a VXLAN port does on receive.
        let mut buffer = vec![0u8; 65_600];
        let mut len = VNET_HDR_LEN + segments[0].len();
        buffer[VNET_HDR_LEN..len].copy_from_slice(&segments[0]);
        let mut run = TcpRun::start(&segments[0]).expect("a data segment starts a run");
        for seg in &segments[1..] {
            len = run
                .join(&mut buffer, len, seg)
                .expect("the next segment joins");
        }
        // A segment of another flow, or out of order, does not.
        let mut other = segments[1].clone();
        other[34] ^= 1;
        assert!(run.clone().join(&mut buffer.clone(), len, &other).is_none());
        // The joined frame cuts back into the same segments.
        let (vnet_hdr, frame) = buffer[..len].split_at(VNET_HDR_LEN);
        let mut again = Vec::new();
        make_whole(vnet_hdr, frame, &mut scratch, |w| again.push(w.to_vec())).unwrap();
        assert_eq!(again, segments);
        // The last segment (PSH, short) closed the run.
        assert!(run.join(&mut buffer, len, &segments[2]).is_none());
    }

    #[test]
    fn a_tcp_segment_is_cut_at_the_mss() {
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let f = tcp4(&payload, flags::PSH | flags::FIN | 0x10 | flags::CWR);
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        make_whole(
            &vnet(1, VNET_HDR_GSO_TCPV4, 1448, 34, 16),
            &f,
            &mut scratch,
            |w| out.push(w.to_vec()),
        )
        .unwrap();
        assert_eq!(out.len(), 3);
        let mut joined = Vec::new();
        for (i, seg) in out.iter().enumerate() {
            assert!(checksums_verify(seg), "segment {i}");
            assert_eq!(
                u16::from_be_bytes([seg[16], seg[17]]) as usize,
                seg.len() - 14
            );
            assert_eq!(u16::from_be_bytes([seg[18], seg[19]]), 0x1234 + i as u16);
            let seq = u32::from_be_bytes(seg[38..42].try_into().unwrap());
            assert_eq!(seq, 1000 + 1448 * i as u32);
            let flags = seg[47];
            assert_eq!(
                flags & (flags::FIN | flags::PSH) != 0,
                i == 2,
                "segment {i}"
            );
            assert_eq!(flags & flags::CWR != 0, i == 0, "segment {i}");
            assert!(seg.len() - 54 <= 1448);
            joined.extend_from_slice(&seg[54..]);
        }
        assert_eq!(joined, payload);
    }

    /// A segment size of 0, or one too small (a guest's header asking
    /// for 1-byte segments of a 64 KiB frame), is refused before a single
    /// segment is made; a frame that fits one segment is no GSO frame and
    /// passes whole, as in Linux.
    #[test]
    fn a_tiny_segment_size_is_refused_before_any_segment() {
        let payload = vec![0x5au8; 3000];
        let f = tcp4(&payload, 0x10);
        let mut scratch = Vec::new();
        for gso_size in [0, 1, 8, 47] {
            let mut made = 0;
            let result = make_whole(
                &vnet(1, VNET_HDR_GSO_TCPV4, gso_size, 34, 16),
                &f,
                &mut scratch,
                |_| made += 1,
            );
            assert_eq!(result, Err(SegmentError::SegmentSize(gso_size)));
            assert_eq!(made, 0, "gso_size {gso_size}");
        }
        let mut made = 0;
        make_whole(
            &vnet(1, VNET_HDR_GSO_TCPV4, 48, 34, 16),
            &f,
            &mut scratch,
            |_| made += 1,
        )
        .unwrap();
        assert_eq!(made, 3000usize.div_ceil(48));
        let small = tcp4(b"x", 0x18);
        let mut out = Vec::new();
        make_whole(
            &vnet(1, VNET_HDR_GSO_TCPV4, 1, 34, 16),
            &small,
            &mut scratch,
            |w| out.push(w.to_vec()),
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        assert!(checksums_verify(&out[0]));
        // Nor does a receive join segments into a frame of such a size.
        let mut short = tcp4(&[7u8; 20], 0x10);
        complete_tcp(&mut short);
        assert!(TcpRun::start(&short).is_none());
        let mut long = tcp4(&[7u8; 48], 0x10);
        complete_tcp(&mut long);
        assert!(TcpRun::start(&long).is_some());
    }

    #[test]
    fn gso_types_that_do_not_match_the_frame_are_refused() {
        let payload = vec![0x5au8; 3000];
        let mut scratch = Vec::new();
        let cut = |vnet: [u8; 10], f: &[u8], scratch: &mut Vec<u8>| {
            let mut n = 0;
            let result = make_whole(&vnet, f, scratch, |_| n += 1);
            (result, n)
        };
        // Not IPv4 by its EtherType, or not TCP by its protocol: nothing
        // is cut and nothing emitted.
        let mut not_ip = tcp4(&payload, 0x10);
        not_ip[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let mut udp = tcp4(&payload, 0x10);
        udp[23] = 17;
        for f in [&not_ip, &udp] {
            assert_eq!(
                cut(vnet(1, VNET_HDR_GSO_TCPV4, 1448, 34, 16), f, &mut scratch),
                (Err(SegmentError::Malformed), 0)
            );
        }
        // An IPv4 frame under a TCPv6 header.
        let f = tcp4(&payload, 0x10);
        assert_eq!(
            cut(vnet(1, VNET_HDR_GSO_TCPV6, 1448, 34, 16), &f, &mut scratch),
            (Err(SegmentError::Malformed), 0)
        );
        assert_eq!(
            cut(vnet(1, VNET_HDR_GSO_TCPV4, 1448, 34, 16), &f, &mut scratch),
            (Ok(()), 3)
        );
    }

    #[test]
    fn segments_whose_ip_length_would_wrap_are_refused() {
        // 65,500 payload bytes: one segment of 65,540 IP bytes at the
        // largest gso_size, which a 16-bit total length cannot say.
        let f = tcp4(&vec![0x33u8; 65_500], 0x10);
        let mut scratch = Vec::new();
        assert_eq!(
            make_whole(
                &vnet(1, VNET_HDR_GSO_TCPV4, 65_535, 34, 16),
                &f,
                &mut scratch,
                |_| { panic!("a segment emitted") }
            ),
            Err(SegmentError::Malformed)
        );
        // Cut smaller, every segment's length fits.
        let mut lens = Vec::new();
        make_whole(
            &vnet(1, VNET_HDR_GSO_TCPV4, 32_768, 34, 16),
            &f,
            &mut scratch,
            |w| lens.push((u16::from_be_bytes([w[16], w[17]]) as usize, w.len())),
        )
        .unwrap();
        assert_eq!(
            lens,
            [(40 + 32_768, 54 + 32_768), (40 + 32_732, 54 + 32_732)]
        );
        // IPv6: the payload length leaves out the fixed header.
        let mut v6 = vec![0u8; 14 + 40 + 20];
        v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        v6[14] = 0x60;
        v6[20] = 6;
        v6[54 + 12] = 5 << 4;
        v6.resize(14 + 40 + 20 + 65_515, 0x44);
        let mut n = 0;
        make_whole(
            &vnet(1, VNET_HDR_GSO_TCPV6, 65_535, 54, 16),
            &v6,
            &mut scratch,
            |w| {
                assert_eq!(u16::from_be_bytes([w[18], w[19]]), 65_535);
                n += 1;
            },
        )
        .unwrap();
        assert_eq!(n, 1);
        v6.push(0x44);
        assert_eq!(
            make_whole(
                &vnet(1, VNET_HDR_GSO_TCPV6, 65_535, 54, 16),
                &v6,
                &mut scratch,
                |_| {}
            ),
            Err(SegmentError::Malformed)
        );
    }

    #[test]
    fn bad_offsets_and_other_offloads_are_errors() {
        let f = tcp4(b"x", 0);
        let mut scratch = Vec::new();
        assert_eq!(
            make_whole(&vnet(1, 0, 0, 34, 200), &f, &mut scratch, |_| {}),
            Err(SegmentError::Malformed)
        );
        assert_eq!(
            make_whole(&vnet(0, 3, 1400, 0, 0), &f, &mut scratch, |_| {}),
            Err(SegmentError::Unsupported(3))
        );
        assert_eq!(
            make_whole(
                &vnet(0, VNET_HDR_GSO_TCPV4, 1400, 0, 0),
                &f[..40],
                &mut scratch,
                |_| {}
            ),
            Err(SegmentError::Malformed)
        );
    }
}
