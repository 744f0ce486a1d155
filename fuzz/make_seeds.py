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
