#!/usr/bin/env python3
"""Writes the seed corpus under fuzz/corpus/: real frames, blocks laid out
as the kernel lays out TPACKET_V3 blocks, and event sequences for the
worker, each encoded the way the `arbitrary` crate (1.x) decodes the
targets' input types. Check a seed with `cargo +nightly fuzz fmt TARGET
FILE`. Run from anywhere: python3 fuzz/make_seeds.py"""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    path = os.path.join(HERE, "corpus", target)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(bytes(data))


def mac(text):
    return bytes(int(part, 16) for part in text.split(":"))


BCAST = mac("ff:ff:ff:ff:ff:ff")
A = mac("02:00:00:00:00:01")
B = mac("02:00:00:00:00:02")


def frame(dst, src, ethertype, payload_len, tag=None):
    out = dst + src
    if tag:
        out += struct.pack(">HH", *tag)
    out += struct.pack(">H", ethertype)
    return out + bytes((i * 7 + payload_len) & 0xFF for i in range(payload_len))


ARP = frame(BCAST, A, 0x0806, 46)  # a 60-byte ARP request
IPV4_TAGGED = frame(B, A, 0x0800, 60, tag=(0x8100, 0xA02A))  # VLAN 42, PCP 5
QINQ = frame(B, A, 0x0800, 40, tag=(0x88A8, 0x0064))  # S-tag, VLAN 100


# --- ring_block: the raw bytes of one block ---------------------------------

TP_STATUS_USER = 1
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
VNET = 10


def block(frames, size=None, count=None):
    """As the tests in bridge/src/port/raw/block.rs (and the kernel) lay it
    out: descriptor, then per frame a header, a gap, the virtio-net header
    and the frame, 16-aligned. `frames`: (bytes, (tpid, tci) or None,
    wire length or None)."""
    mac_off = 48 + 32 + VNET
    total = 48 + sum(-(-(mac_off + len(f)) // 16) * 16 for f, _, _ in frames)
    size = size or total
    b = bytearray(size)
    struct.pack_into("=III", b, 8, TP_STATUS_USER,
                     len(frames) if count is None else count, 48)
    off = 48
    for i, (data, vlan, wire_len) in enumerate(frames):
        step = -(-(mac_off + len(data)) // 16) * 16
        nxt = 0 if i + 1 == len(frames) else step
        status = TP_STATUS_USER
        struct.pack_into("=I", b, off, nxt)
        struct.pack_into("=II", b, off + 12, len(data), wire_len or len(data))
        if vlan:
            status |= TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID
            struct.pack_into("=I", b, off + 32, vlan[1])
            struct.pack_into("=H", b, off + 36, vlan[0])
        struct.pack_into("=I", b, off + 20, status)
        struct.pack_into("=H", b, off + 24, mac_off)
        b[off + mac_off - VNET] = 0x01  # NEEDS_CSUM
        b[off + mac_off:off + mac_off + len(data)] = data
        off += step
    return b


untagged = lambda f: (f[:12] + f[16:])  # the kernel takes the tag off
write("ring_block", "one-arp", block([(ARP, None, None)]))
write("ring_block", "three-tagged-truncated", block([
    (ARP, None, None),
    (untagged(IPV4_TAGGED), (0x8100, 0xA02A), None),
    (untagged(QINQ)[:40], (0x88A8, 0x0064), 1514),
]))
write("ring_block", "empty", block([]))
broken = block([(ARP, None, None), (ARP, None, None)])
struct.pack_into("=I", broken, 48, 0)
write("ring_block", "broken-chain", broken)
write("ring_block", "count-too-high", block([(ARP, None, None)], count=0xFFFFFFFF))
write("ring_block", "padded-4k", block([(ARP, None, None), (ARP, None, None)], size=4096))
# Fails until the parser refuses a link back into the frame just read: the
# first header's tp_next_offset (64) puts the second header inside the first
# frame's data (bytes 138..238 of the block), and the parser yields both.
overlap = bytearray(272)
struct.pack_into("=III", overlap, 8, TP_STATUS_USER, 2, 48)
for off, nxt, snaplen in ((48, 64, 100), (112, 0, 60)):
    struct.pack_into("=I", overlap, off, nxt)
    struct.pack_into("=II", overlap, off + 12, snaplen, snaplen)
    struct.pack_into("=H", overlap, off + 24, 90)
write("ring_block", "bug-link-into-previous-frame", overlap)


# --- wire_views: Input { vnet, vnet_len_delta, tag, slack, frame } ----------

def vnet(flags=0, gso=0, hdr_len=0, gso_size=0, csum_start=0, csum_offset=0):
    return struct.pack("=BBHHHH", flags, gso, hdr_len, gso_size, csum_start, csum_offset)


TPID_VARIANT = {"dot1q": 0, "dot1ad": 0x60000000, "other": 0xC0000000}


def wire(vnet_bytes, frame_bytes, tag=None, delta=0, slack=0):
    out = bytearray(vnet_bytes) + struct.pack("=b", delta)
    if tag is None:
        out += b"\x00"
    else:
        kind, tci = tag[0], tag[-1]
        out += b"\x01" + struct.pack("<I", TPID_VARIANT[kind])
        if kind == "other":
            out += struct.pack("<H", tag[1])
        out += struct.pack("<H", tci)
    return out + struct.pack("=b", slack) + frame_bytes


write("wire_views", "arp-untagged", wire(vnet(), ARP))
write("wire_views", "tcp-gso-tag-back",
      wire(vnet(1, 1, 66, 1448, 34, 16), untagged(IPV4_TAGGED), ("dot1q", 0xA02A)))
write("wire_views", "qinq-exact-fit", wire(vnet(1, 0, 0, 0, 34, 6), untagged(QINQ),
                                           ("dot1ad", 0x0064), slack=0))
write("wire_views", "one-byte-short", wire(vnet(), ARP, ("dot1q", 7), slack=-1))
write("wire_views", "twelve-bytes-other-tpid", wire(vnet(), A + B, ("other", 0x0800, 5)))
write("wire_views", "tagged-runt", wire(vnet(), IPV4_TAGGED[:17], delta=-1))
write("wire_views", "mac-text", wire(vnet(), b"02:ab:0c:00:ff:01"))
# Fails until MacAddr::from_str refuses a sign: u8::from_str_radix takes
# "+1" as 1, so this parses as 02:01:00:00:00:01.
write("wire_views", "bug-mac-plus-sign", wire(vnet(), b"02:+1:00:00:00:01"))


# --- worker_model: Input { strategy, ports, batch_size, per_frame,
#     max_entries, events } ---------------------------------------------------

def variant(index, count):
    """The u32 that `arbitrary`'s derive turns into variant `index`."""
    value = ((index << 32) + count - 1) // count
    assert (value * count) >> 32 == index
    return struct.pack("<I", value)


# Indices into MACS and VIDS in worker_model.rs.
MA, MB, MC, MD, BC, MC4, MC6, R0, RE, RF, NR, ZERO = range(12)
EVENTS = 7


def spec(dst, src, tag=None, ethertype=0, length=("natural",), fill=0):
    out = bytearray([dst, src])
    if tag is None:
        out += b"\x00"
    else:
        qinq, vid, pcp = tag
        out += bytes([1, int(qinq), vid, pcp])
    out += bytes([ethertype])
    out += variant({"natural": 0, "short": 1, "long": 2}[length[0]], 3)
    if length[0] != "natural":
        out += bytes([length[1]])
    return out + bytes([fill])


def ev_frame(port, s):
    return variant(0, EVENTS) + bytes([port]) + s


def ev_burst(items):
    out = bytearray(variant(1, EVENTS))
    for port, s in items:
        out += b"\x01" + bytes([port]) + s
    return out + b"\x00"


def ev_table(kind, *args):
    index = {"static": 2, "local": 3, "remove_static": 4, "forget": 5, "flush": 6}[kind]
    return variant(index, EVENTS) + bytes(args)


def worker(events, strategy=0, ports=2, batch=0, per_frame=0, max_entries=0):
    # ports: 2 + n % 3; batch: [64, 1, 2, 3]; max_entries: [0, 2, 3, 8192].
    out = bytearray([strategy, ports, batch, per_frame, max_entries])
    for event in events:
        out += b"\x01" + event
    return out


write("worker_model", "learn-and-unicast", worker([
    ev_frame(0, spec(BC, MA)),
    ev_frame(1, spec(MA, MB)),
    ev_frame(0, spec(MB, MA, fill=3)),
    ev_frame(2, spec(MA, MB)),  # B moves
    ev_frame(0, spec(MB, MA)),
], strategy=0, ports=2))
write("worker_model", "drops", worker([
    ev_frame(0, spec(R0, MA)),
    ev_frame(0, spec(RF, MA)),
    ev_frame(1, spec(NR, MB)),
    ev_frame(1, spec(BC, ZERO)),
    ev_frame(1, spec(MA, MC4)),
    ev_frame(0, spec(MB, MA, length=("short", 13))),
    ev_frame(0, spec(MB, MA, tag=(0, 1, 0), length=("short", 17))),
    ev_frame(0, spec(MB, MA, length=("long", 9))),
    ev_frame(1, spec(MA, MB)),
], strategy=1, ports=1))
write("worker_model", "vlans-burst", worker([
    ev_burst([
        (0, spec(BC, MA, tag=(0, 2, 0xA0))),
        (1, spec(MA, MB, tag=(0, 2, 0))),
        (1, spec(MA, MB, tag=(1, 1, 0))),
        (2, spec(MA, MC)),
        (0, spec(MC, MA, tag=(0, 0, 0x20))),  # priority-tagged: VLAN 0
    ]),
    ev_frame(0, spec(MB, MA, tag=(0, 2, 0))),
], strategy=2, ports=2, batch=2))
write("worker_model", "table-limit", worker([
    ev_burst([(0, spec(BC, MA)), (1, spec(BC, MB)), (2, spec(BC, MC)), (2, spec(BC, MD))]),
    ev_frame(0, spec(MD, MA)),
    ev_table("forget", MA, 0),
    ev_frame(2, spec(MA, MD)),
    ev_table("flush", 2),
], strategy=3, ports=2, batch=1, max_entries=1))
write("worker_model", "static-and-local", worker([
    ev_table("static", MB, 0, 5),
    ev_table("local", MC, 0, 1),
    ev_table("static", ZERO, 0, 2),
    ev_frame(0, spec(MB, MA)),
    ev_frame(0, spec(MC, MA)),
    ev_frame(0, spec(MC, MA, tag=(0, 1, 0))),
    ev_frame(0, spec(ZERO, MA)),
    ev_frame(1, spec(MA, MB)),
    ev_table("remove_static", MB, 0),
    ev_frame(0, spec(MB, MA)),
], strategy=4, ports=2, per_frame=1))
write("worker_model", "rcu-per-frame", worker([
    ev_burst([(0, spec(BC, MA)), (0, spec(MB, MA)), (1, spec(MA, MB)), (1, spec(MA, MB))]),
    ev_burst([(1, spec(MA, MB)), (0, spec(MB, MA))]),
], strategy=5, ports=1, batch=3, per_frame=1, max_entries=3))


# --- ring_slot: the raw bytes of one TPACKET_V2 slot ------------------------

TP_STATUS_COPY = 1 << 1
# Where the kernel puts a frame in a V2 slot with a virtio-net header:
# TPACKET_ALIGN(32 + 20 + 16) + 10 - 14.
SLOT_MAC = 76


def slot(frame_bytes, status=TP_STATUS_USER, wire_len=None, snaplen=None,
         mac_off=SLOT_MAC, vlan=None, size=None):
    """A slot as the kernel fills it: tpacket2_hdr, the virtio-net header
    and the frame at `mac_off`. `vlan`: (tpid or None, tci)."""
    size = size or mac_off + len(frame_bytes)
    b = bytearray(size)
    snaplen = len(frame_bytes) if snaplen is None else snaplen
    if vlan:
        status |= TP_STATUS_VLAN_VALID
        if vlan[0] is not None:
            status |= TP_STATUS_VLAN_TPID_VALID
            struct.pack_into("=H", b, 26, vlan[0])
        struct.pack_into("=H", b, 24, vlan[1])
    struct.pack_into("=IIIH", b, 0, status,
                     len(frame_bytes) if wire_len is None else wire_len, snaplen, mac_off)
    if mac_off >= VNET and mac_off <= size:
        b[mac_off - VNET] = 0x01  # NEEDS_CSUM
    end = min(size, mac_off + len(frame_bytes))
    b[mac_off:end] = frame_bytes[:max(0, end - mac_off)]
    return b


write("ring_slot", "arp", slot(ARP))
full = untagged(IPV4_TAGGED) * 40
write("ring_slot", "tagged-cut-copied", slot(
    full[:2048 - SLOT_MAC], status=TP_STATUS_USER | TP_STATUS_COPY, wire_len=9000,
    vlan=(0x88A8, 0xA02A), size=2048))
write("ring_slot", "dot1q-without-tpid", slot(untagged(IPV4_TAGGED), vlan=(None, 7)))
write("ring_slot", "mac-inside-header", slot(ARP, mac_off=40))
write("ring_slot", "snaplen-past-end", slot(ARP, snaplen=0xFFFFFFFF))
write("ring_slot", "runt", slot(ARP[:5]))
write("ring_slot", "short", bytes(31))


# --- vxlan_rx: flags, segment size, two known VNIs, an offset, payload ------

def vxlan(vni, inner, flags=0x08, reserved=b"\x00\x00\x00", last=0):
    return bytes([flags]) + reserved + vni.to_bytes(3, "big") + bytes([last]) + inner


def rx(payload, segment=None, truncated=False, known=(42, 7), offset=0):
    flags = int(truncated) | (2 if segment is not None else 0)
    out = bytearray([flags]) + struct.pack("<H", segment or 0)
    for vni in known:
        out += vni.to_bytes(3, "big")
    return out + struct.pack("<H", offset) + payload


write("vxlan_rx", "single", rx(vxlan(42, ARP)))
write("vxlan_rx", "gro-train-every-reason", rx(
    vxlan(42, ARP) + vxlan(42, ARP, flags=0) + vxlan(42, ARP, last=1)
    + vxlan(42, ARP, flags=0x88) + vxlan(43, ARP) + vxlan(7, ARP)
    + vxlan(42, ARP)[:20],
    segment=68, offset=136))
write("vxlan_rx", "truncated-train", rx(vxlan(42, ARP) * 3, segment=68, truncated=True))
write("vxlan_rx", "empty", rx(b""))
write("vxlan_rx", "exactly-headers", rx(vxlan(7, ARP[:14])))
write("vxlan_rx", "one-byte-segments", rx(vxlan(42, ARP[:14]), segment=1))
write("vxlan_rx", "no-segment-size-resumed", rx(vxlan(42, ARP) * 2, offset=68))


# --- segment: virtio-net header, grow (x 300 bytes), frame ------------------

def csum(data, initial=0):
    """The ones' complement sum (RFC 1071), folded to 16 bits."""
    if len(data) % 2:
        data = bytes(data) + b"\x00"
    s = initial + sum(struct.unpack(">%dH" % (len(data) // 2), bytes(data)))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def grown(n):
    """The pattern the target appends: n * 300 bytes."""
    return bytes((i * 7 + 3) & 0xFF for i in range(n * 300))


def tcp(v6=False, payload_len=0, flags=0x10, tag=None, ihl=5, options=b"",
        partial=True, ip_len=None):
    """Ethernet, IPv4 (with `ihl`) or IPv6, TCP with `options`; IP lengths
    for `payload_len` payload bytes (or `ip_len`), IPv4 checksum complete,
    TCP checksum partial (the pseudo-header sum) when `partial`, else 0."""
    eth = B + A + (struct.pack(">HH", *tag) if tag else b"")
    thl = 20 + len(options)
    t = bytearray(struct.pack(">HHIIBBHHH", 40000, 5201, 1000, 77, (thl // 4) << 4,
                              flags, 512, 0, 0) + options)
    tcp_len = thl + payload_len
    if v6:
        src, dst = bytes(range(1, 17)), bytes(range(17, 33))
        ip = struct.pack(">IHBB", 6 << 28, ip_len if ip_len is not None else tcp_len, 6, 64) + src + dst
        pseudo = csum(src + dst, 6 + tcp_len)
        eth += struct.pack(">H", 0x86DD)
    else:
        src, dst = bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2])
        total = ip_len if ip_len is not None else ihl * 4 + tcp_len
        ip = bytearray(struct.pack(">BBHHHBBH", 0x40 | ihl, 0, total, 0x1234, 0x4000,
                                   64, 6, 0) + src + dst + bytes(ihl * 4 - 20))
        struct.pack_into(">H", ip, 10, 0xFFFF ^ csum(ip))
        pseudo = csum(src + dst, 6 + tcp_len)
        eth += struct.pack(">H", 0x0800)
    if partial:
        struct.pack_into(">H", t, 16, pseudo)
    return bytes(eth + bytes(ip) + bytes(t))


def seg(vnet_bytes, grow, frame_bytes):
    return bytes(vnet_bytes) + bytes([grow]) + frame_bytes


l4 = 34
write("segment", "tcp4-gso-three-segments", seg(
    vnet(1, 1, 54, 1448, l4, 16), 10, tcp(payload_len=3000, flags=0x99)))  # CWR PSH ACK FIN
write("segment", "tcp6-gso-tagged-options", seg(
    vnet(1, 4, 98, 1000, 58 + 4, 16), 5,
    tcp(v6=True, payload_len=1500, tag=(0x8100, 0x002A), options=b"\x01\x01\x08\x0a" + bytes(8))))
write("segment", "tcp4-ecn-ip-options", seg(
    vnet(1, 0x81, 78, 536, 38, 16), 4, tcp(payload_len=1200, ihl=6, flags=0xD8)))
write("segment", "tcp4-gso-no-payload", seg(vnet(1, 1, 54, 1448, l4, 16), 0, tcp()))
udp = bytearray(tcp())[:34]
struct.pack_into(">H", udp, 16, 20 + 8 + 12)
udp[23] = 17
struct.pack_into(">H", udp, 24, 0)
struct.pack_into(">H", udp, 24, 0xFFFF ^ csum(udp[14:34]))
udp += struct.pack(">HHHH", 5353, 5353, 20, csum(udp[26:34], 17 + 20)) + b"twelve bytes"
write("segment", "udp4-partial-checksum", seg(vnet(1, 0, 0, 0, 34, 6), 0, bytes(udp)))
write("segment", "tcp4-partial-received", seg(vnet(), 0, tcp(payload_len=0, flags=0x12)))
write("segment", "tcp6-coalesced-to-mark", seg(
    vnet(0, 0, 0, 1500, 0, 0), 10, tcp(v6=True, payload_len=3000)))
write("segment", "tcp4-coalesced-to-mark", seg(
    vnet(0, 0, 0, 1500, 0, 0), 10, tcp(payload_len=3000)))
write("segment", "udp-fragmentation-unsupported", seg(vnet(0, 3, 0, 1400, 0, 0), 0, bytes(udp)))
write("segment", "arp-no-offload", seg(vnet(), 0, ARP))
# Fail until make_whole refuses a GSO type that does not match the frame:
# TCPv4 segmentation of a frame whose EtherType is ARP, or whose IPv4
# protocol is UDP, rewrote bytes at TCP's places.
not_ip = bytearray(tcp(payload_len=300))
struct.pack_into(">H", not_ip, 12, 0x0806)
write("segment", "bug-gso-tcpv4-on-arp-ethertype", seg(vnet(1, 1, 54, 40, l4, 16), 1, bytes(not_ip)))
on_udp = bytearray(tcp(payload_len=300))
on_udp[23] = 17
struct.pack_into(">H", on_udp, 24, 0)
struct.pack_into(">H", on_udp, 24, 0xFFFF ^ csum(on_udp[14:34]))
write("segment", "bug-gso-tcpv4-on-udp", seg(vnet(1, 1, 54, 40, l4, 16), 1, bytes(on_udp)))
# Fails until make_whole refuses segments whose IP length would not fit 16
# bits: 65,700 payload bytes at gso_size 65,535 made an IPv6 segment whose
# payload length wrapped to 19.
write("segment", "bug-ip-length-wraps", seg(
    vnet(1, 4, 74, 65535, 54, 16), 219, tcp(v6=True, ip_len=0)))

# vring: a split ring as a driver lays it out at the start of its memory
# (desc, avail, used; see ring::driver::layout), then buffers.
VRING_BASE = 0x10000


def vring(size_log2, chains, write_dir=False, event_idx=False, base=0, lo=0, hi=2048):
    size = 1 << size_log2
    desc_at = 0
    avail_at = 16 * size
    used_at = (avail_at + 6 + 2 * size + 3) // 4 * 4
    image = bytearray(used_at + 6 + 8 * size)
    data_at = (len(image) + 63) // 64 * 64
    image.extend(bytes(data_at - len(image)))
    index = 0
    heads = []
    for lens in chains:
        heads.append(index)
        for n, length in enumerate(lens):
            flags = (1 if n + 1 < len(lens) else 0) | (2 if write_dir else 0)
            struct.pack_into("<QIHH", image, desc_at + 16 * index,
                             VRING_BASE + len(image), length, flags, index + 1)
            image.extend(bytes([n + 1]) * length)
            index += 1
    for slot, head in enumerate(heads):
        struct.pack_into("<H", image, avail_at + 4 + 2 * ((base + slot) % size), head)
    struct.pack_into("<H", image, avail_at + 2, (base + len(heads)) & 0xFFFF)
    flags = (2 if write_dir else 0) | (1 if event_idx else 0)
    head = struct.pack("<BBHBHB", size_log2, flags, base, lo, hi, 0)
    return head + bytes(image)


write("vring", "two-chains", vring(3, [[12, 60], [72]]))
write("vring", "receive-room", vring(4, [[2048], [12, 1500]], write_dir=True, event_idx=True))
write("vring", "wrapping-base", vring(2, [[64], [64], [64]], base=65534))


# --- mld_ipv6: flags, destination MAC, VLAN, then the IPv6 packet ----------
# Flags: 1 the MAC from the IP destination, 2 the ICMPv6 checksum filled in,
# 4 the payload length set, 8 an 802.1Q tag.

def ip6(addr):
    import ipaddress
    return ipaddress.IPv6Address(addr).packed


def ipv6_frame(src, dst, next_header, payload, flags=1 | 2 | 4, vlan=0):
    header = struct.pack(">IHBB", 6 << 28, 0, next_header, 1) + ip6(src) + ip6(dst)
    return bytes([flags]) + bytes(6) + struct.pack(">H", vlan) + header + payload


def hop_by_hop(next_header):
    # Router Alert (MLD), then PadN to 8 bytes.
    return bytes([next_header, 0, 5, 2, 0, 0, 1, 0])


def mld_msg(kind, group, extra=b""):
    return bytes([kind, 0, 0, 0, 0, 0, 0, 0]) + ip6(group) + extra


LL = "fe80::10"
write("mld_ipv6", "v1-report", ipv6_frame(LL, "ff02::1:3", 0, hop_by_hop(58) + mld_msg(131, "ff02::1:3")))
write("mld_ipv6", "v1-done-tagged", ipv6_frame(
    LL, "ff02::2", 0, hop_by_hop(58) + mld_msg(132, "ff0e::5"), flags=1 | 2 | 4 | 8, vlan=42))
write("mld_ipv6", "v2-general-query", ipv6_frame(
    LL, "ff02::1", 0, hop_by_hop(58) + mld_msg(130, "::", bytes([2, 125, 0, 0]))))
records = (bytes([4, 0, 0, 0]) + ip6("ff0e::1")
           + bytes([1, 1, 0, 1]) + ip6("ff0e::2") + ip6("2001:db8::1") + bytes(4))
v2_report = bytes([143, 0, 0, 0, 0, 0, 0, 2]) + records
write("mld_ipv6", "v2-report", ipv6_frame(LL, "ff02::16", 0, hop_by_hop(58) + v2_report))
write("mld_ipv6", "v2-report-cut-record", ipv6_frame(
    LL, "ff02::16", 0, hop_by_hop(58) + v2_report[:-8]))
# Hop-by-Hop, destination options (16 bytes), routing, a first fragment,
# authentication (12 bytes), then the report.
chain = (bytes([60, 0, 1, 4, 0, 0, 0, 0])
         + bytes([43, 1]) + bytes(14)
         + bytes([44, 0, 0, 0, 0, 0, 0, 0])
         + bytes([51, 0, 0, 0, 0, 0, 0, 1])
         + bytes([58, 1, 0, 0]) + bytes(8))
write("mld_ipv6", "extension-chain", ipv6_frame(LL, "ff02::1:3", 0, chain + mld_msg(131, "ff02::1:3")))
write("mld_ipv6", "later-fragment", ipv6_frame(
    LL, "ff0e::7", 0, bytes([44, 0, 1, 4, 0, 0, 0, 0]) + bytes([58, 0, 0, 8, 0, 0, 0, 1]) + bytes(16)))
write("mld_ipv6", "udp-data", ipv6_frame("2001:db8::1", "ff0e::9", 17, bytes(16)))
write("mld_ipv6", "no-next-header", ipv6_frame(LL, "ff0e::9", 0, hop_by_hop(59)))
# Fails until the extension header walk stops reading at an upper-layer
# header: Hop-by-Hop filling the payload, then UDP (no bytes of it), which
# Linux forwards as data, was dropped as malformed.
write("mld_ipv6", "bug-upper-layer-at-payload-end", ipv6_frame(LL, "ff0e::9", 0, hop_by_hop(17)))


# --- control: request lines and --port specs --------------------------------

for name, line in [
    ("fdb-show", {"command": "fdb-show", "port": "tap0", "vlan": 10}),
    ("fdb-add", {"command": "fdb-add", "mac": "02:00:00:00:00:01", "port": "vx0", "vlan": 0,
                 "dst": "192.0.2.2"}),
    ("fdb-del", {"command": "fdb-del", "mac": "02:00:00:00:00:01"}),
    ("fdb-flush", {"command": "fdb-flush"}),
    ("stats", {"command": "stats"}),
    ("port-add-vhost", {"command": "port-add",
                        "port": "vhost:/run/mpbridge/vhost/vm0.sock,max_memory=4G,socket_mode=0660"}),
    ("capture", {"command": "capture", "port": "tap0", "direction": "in", "count": 5, "queue": 1}),
    ("lock-set", {"command": "lock-set", "lock": "rcu"}),
    ("port-del", {"command": "port-del", "port": "tap0"}),
    ("mdb-show", {"command": "mdb-show"}),
]:
    import json
    write("control", "request-" + name, json.dumps(dict({"version": 1}, **line)).encode())
write("control", "request-other-version", b'{"version":2,"command":"stats"}')
write("control", "request-not-json", b'fdb-show tap0')
write("control", "request-bad-mac", b'{"version":1,"command":"fdb-del","mac":"ff:ff:ff:ff:ff:ff"}')
for name, spec in [
    ("tap", "tap:mpb0"),
    ("raw-trunk", "raw:eth1,trunk=10,20,100-110,native=10"),
    ("tap-access-stp", "tap:mpb1,access=20,bpdu_guard=on,cost=100"),
    ("vxlan", "vxlan:vx0,vni=42,local=192.0.2.1,port=4789,remote=192.0.2.2,remote=192.0.2.3,learning=off"),
    ("vxlan6", "vxlan:vx1,vni=7,local=[2001:db8::1]:4789,remote=[2001:db8::2]:4789"),
    ("vhost-client", "vhost:/tmp/vm0.sock,client,max_memory=512M"),
    ("vhost-server-access", "vhost:/tmp/vm1.sock,socket_owner=0,socket_group=0,socket_mode=0600"),
    ("bad-kind", "eth:eth0"),
]:
    write("control", "port-" + name, spec.encode())


# --- vhost_memory: Input encoded as `arbitrary` decodes it -----------------
# Each Vec element is preceded by a byte 1, the Vec ended by a byte 0 (the
# last field, taking the rest, by the end of the input).

def region(guest, size, user, offset, raw=False):
    return b"\x01" + struct.pack("<QQQQB", guest, size, user, offset, int(raw))


def memory_input(regions, file_units, extra_files=0, probes=()):
    out = b"".join(regions) + b"\x00" + struct.pack("<Bb", file_units, extra_files)
    return out + b"".join(b"\x01" + struct.pack("<QH", a, n) for a, n in probes)


write("vhost_memory", "two-regions", memory_input(
    [region(0, 0x8000, 0, 0), region(0x10000, 0x4000, 0x8000, 0x8000)], 0x60,
    probes=[(0x7fff, 2), (0x10000, 0x4000)]))
write("vhost_memory", "guest-overlap", memory_input(
    [region(0, 0x8000, 0, 0), region(0x4000, 0x4000, 0x10000, 0)], 0x60))
write("vhost_memory", "user-alias", memory_input(
    [region(0, 0x2000, 0x1000, 0), region(0x20000, 0x2000, 0x1000, 0x1000)], 0x20))
write("vhost_memory", "short-file", memory_input([region(0, 0x8000, 0, 0x1000)], 0x40))
write("vhost_memory", "overflow", memory_input(
    [region(0xFFFF_FFFF_FFFF_F000, 0x2000, 0, 0, raw=True)], 0x40))
# Two regions meeting: an empty range where one ends is in both (the
# fuzzer's first find, against the target).
write("vhost_memory", "adjacent-regions", memory_input(
    [region(0, 0x2000, 0x1000, 0), region(0x2000, 0x1000, 0, 0x100)], 0x10))
write("vhost_memory", "unaligned", memory_input([region(0x123, 0x777, 0x4567, 0x89)], 0x20))
# Fails until map refuses a table without one file per region: the second
# region, without its file, was left out.
write("vhost_memory", "bug-fewer-files-than-regions", memory_input(
    [region(0, 0x1000, 0, 0), region(0x1000, 0x1000, 0x1000, 0x1000)], 0x10, extra_files=-1))


# --- vhost_messages: Vec<Message> encoded as `arbitrary` decodes it --------

MESSAGES = 14  # variants of Message, in order


def variant(index, count=MESSAGES):
    return struct.pack("<I", ((index << 32) + count - 1) // count)


def standard(vring, enable_first=False):
    return b"\x01" + variant(13) + bytes([vring, int(enable_first)])


def msg(index, body=b""):
    return b"\x01" + variant(index) + body


EVENTFD = variant(0, 3)
write("vhost_messages", "two-vrings", standard(0) + standard(1, enable_first=True))
write("vhost_messages", "enable-first-then-disable", standard(1, enable_first=True)
      + msg(9, struct.pack("<II", 1, 0)) + msg(6, bytes([1])) + msg(7, bytes([1]) + EVENTFD))
write("vhost_messages", "reset-and-again", standard(0) + msg(10) + standard(2))
write("vhost_messages", "smaller-memory-table", standard(0) + standard(3)
      + msg(2, b"\x01" + bytes([0, 3, 0]) + b"\x00"))
write("vhost_messages", "rebase", standard(0) + msg(5, struct.pack("<BI", 0, 65530))
      + msg(6, bytes([0])) + msg(7, bytes([0]) + EVENTFD))


# --- vhost_queue: the header, then the image repeated over guest memory -----
# Header: size (log2), features (1 VERSION_1, 2 MRG_RXBUF, 4 EVENT_IDX,
# 8 GUEST_CSUM, 16 GUEST_TSO4, 32 GUEST_TSO6, 64: the frames' virtio-net
# header from memory), receive and transmit bases, how far each avail
# index runs ahead, frames, frame length, batch size, two spare bytes.
QBASE = 0x100000


def queue_image(size_log2, chains, period=2048):
    """Descriptors for `chains` ((lengths, writable) each), their heads in
    avail order from slot 0, buffers from byte 256 of the period."""
    size = 1 << size_log2
    image = bytearray(period)
    at = 256
    index = 0
    heads = []
    for lens, writable in chains:
        heads.append(index)
        for n, length in enumerate(lens):
            flags = (1 if n + 1 < len(lens) else 0) | (2 if writable else 0)
            struct.pack_into("<QIHH", image, 16 * index, QBASE + at, length, flags, index + 1)
            at += length
            index += 1
    assert at <= period
    for slot, head in enumerate(heads):
        struct.pack_into("<H", image, 16 * size + 4 + 2 * slot, head)
    return bytes(image)


def queue_input(size_log2, features, rx, tx, frames, frame_len, batch, image):
    head = struct.pack("<BBHHHHBHBBB", size_log2, features, rx[0], tx[0], rx[1], tx[1],
                       frames, frame_len, batch, 0, 0)
    return head + image


CHAINS = [([300], True), ([12, 200], True), ([72], False), ([12, 100], False)]
IMAGE = queue_image(3, CHAINS)
write("vhost_queue", "both-ways", queue_input(3, 1, (0, 2), (2, 2), 2, 60, 8, IMAGE))
write("vhost_queue", "mergeable-event-idx", queue_input(3, 7, (0, 2), (2, 2), 3, 250, 8, IMAGE))
write("vhost_queue", "offloads-done-here", queue_input(3, 0x41, (0, 2), (2, 2), 2, 60, 1, IMAGE))
write("vhost_queue", "index-runs-ahead", queue_input(3, 1, (0, 12), (2, 9), 1, 60, 8, IMAGE))
# One descriptor repeated over all memory: every chain loops (1,024
# descriptors each, the longest walk); the receive stops at its budget.
loop = struct.pack("<QIHH", QBASE + 0x10000, 1, 1, 0)
write("vhost_queue", "loops-to-the-budget", queue_input(10, 1, (0, 1024), (0, 1024), 4, 60, 64, loop))
