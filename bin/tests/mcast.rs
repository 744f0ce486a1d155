//! IGMP and MLD snooping from outside (`--mcast-snooping`,
//! `--mcast-querier`, the `mcast_router=`, `mcast_fast_leave=` and
//! `mcast_max_groups=` port options, `mdb show`): the same scenarios through mpbridge and through
//! the Linux bridge with `mcast_snooping 1` (net/bridge/br_multicast.c),
//! the reference, with the same short timers. Real sockets join and leave
//! groups (so the hosts' own IGMP and MLD speak to the bridge), raw
//! stations play a foreign querier and send crafted reports, and a packet
//! socket on every host says which hosts a datagram reached: both bridges
//! must reach the same hosts and list the same members and router ports.
//! Needs root; skips with a reason otherwise (fails under
//! MPBRIDGE_REQUIRE_PRIV=1). The refusal of bad option values needs no
//! privilege.

mod netns;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use bridge::port::{Outgoing, Queue, RawQueue, RxBatch, VNET_HDR_LEN};
use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_route::link::{
    InfoBridgePort, InfoPortData, InfoPortKind, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket};
use netns::{
    bridge_here, ctl, ctl_json, link_mac, port_stats, privileged, Netns, PortKind, TempDir,
    Topology,
};

/// The hosts of every scenario, each on a port of its own (port i is host
/// i's: `raw:pI` on mpbridge, `pI` on the Linux bridge).
const HOSTS: usize = 4;
/// A member of the groups.
const A: usize = 0;
/// A bystander.
const B: usize = 1;
/// The sender of the group traffic.
const C: usize = 2;
/// A second member (through crafted reports), or the foreign querier.
const D: usize = 3;

/// The group the members join.
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 1, 1);
/// A group nobody joins.
const UNJOINED: Ipv4Addr = Ipv4Addr::new(239, 9, 9, 9);
/// A link-local group (mDNS): flooded whatever the snooping.
const LINK_LOCAL: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 251);
/// The IPv6 group the member joins (site-local scope).
const GROUP6: Ipv6Addr = Ipv6Addr::new(0xff05, 0, 0, 0, 0, 0, 0x42, 1);
/// An IPv6 group nobody joins.
const UNJOINED6: Ipv6Addr = Ipv6Addr::new(0xff05, 0, 0, 0, 0, 0, 0x99, 1);
/// All nodes: flooded whatever the snooping.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// The UDP port of the test datagrams.
const UDP_PORT: u16 = 40_123;
/// The start of every test datagram's payload; a sequence number follows.
const MAGIC: &[u8; 10] = b"mcast-test";

/// The timers both bridges run with: mpbridge's option and its value in
/// seconds, the Linux bridge's key and its value in centiseconds (and the
/// counts, as they are). Short, so that the suite stays quick; the others
/// keep their defaults (membership 260 s, querier 255 s).
const TIMERS: [(&str, &str, &str, &str); 6] = [
    ("--mcast-query-interval", "5", "mcast_query_interval", "500"),
    (
        "--mcast-query-response-interval",
        "1",
        "mcast_query_response_interval",
        "100",
    ),
    (
        "--mcast-last-member-interval",
        "0.5",
        "mcast_last_member_interval",
        "50",
    ),
    (
        "--mcast-last-member-count",
        "2",
        "mcast_last_member_count",
        "2",
    ),
    (
        "--mcast-startup-query-interval",
        "1",
        "mcast_startup_query_interval",
        "100",
    ),
    (
        "--mcast-startup-query-count",
        "2",
        "mcast_startup_query_count",
        "2",
    ),
];

/// last_member_count * last_member_interval: with the bridge's own
/// querier, a leave prunes its port within this.
const LAST_MEMBER: Duration = Duration::from_secs(1);
/// What a pruning may take beyond that (the host's leave on its way, the
/// bridge's timer, the polling).
const SLACK: Duration = Duration::from_secs(2);
/// How long a listing or a querier may take to appear.
const APPEAR: Duration = Duration::from_secs(10);
/// Longer than a querier's startup (its second query after the startup
/// query interval) and first response interval.
const STARTUP: Duration = Duration::from_millis(2500);
/// How long frames in flight are given to arrive before a check counts.
const SETTLE: Duration = Duration::from_millis(250);

/// A packet socket on a host's `eth0`: sends crafted frames and keeps
/// every frame that arrives (none that the host sends).
struct Wire {
    queue: RawQueue,
    batch: RxBatch,
    /// The host's hardware address, the source of its crafted frames.
    mac: [u8; 6],
}

impl Wire {
    fn on(host: &Netns) -> Wire {
        let queue = host.run(|| {
            let mut queues = RawQueue::open("eth0", 1).expect("packet socket on eth0");
            queues.pop().unwrap()
        });
        Wire {
            queue,
            batch: RxBatch::new(64, 65_600),
            mac: link_mac(host, "eth0"),
        }
    }

    fn send(&mut self, frame: &[u8]) {
        let mut buffer = vec![0u8; VNET_HDR_LEN];
        buffer.extend_from_slice(frame);
        let sent = self
            .queue
            .send_batch(std::iter::once(Outgoing::split(&buffer, VNET_HDR_LEN)))
            .into_result()
            .expect("send");
        assert_eq!(sent, 1, "frame not sent");
    }

    /// The frames that arrived since the last call, without waiting.
    fn frames(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        // Bounded: far more than the ring holds.
        for _ in 0..1024 {
            self.batch.clear();
            self.queue.recv_batch(&mut self.batch).expect("receive");
            if self.batch.is_empty() {
                break;
            }
            frames.extend(
                self.batch
                    .iter()
                    .map(|f| f.to_vec()[VNET_HDR_LEN..].to_vec()),
            );
        }
        frames
    }
}

/// The group and sequence number of a test datagram, if `frame` is one.
fn datagram(frame: &[u8]) -> Option<(IpAddr, u32)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let (dst, udp): (IpAddr, &[u8]) = match ethertype {
        0x0800 => {
            let ip = frame.get(14..34)?;
            let header = usize::from(ip[0] & 0x0f) * 4;
            if ip[9] != 17 {
                return None;
            }
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (dst.into(), frame.get(14 + header..)?)
        }
        0x86dd => {
            let ip = frame.get(14..54)?;
            if ip[6] != 17 {
                return None;
            }
            let dst: [u8; 16] = ip[24..40].try_into().unwrap();
            (Ipv6Addr::from(dst).into(), frame.get(54..)?)
        }
        _ => return None,
    };
    let port = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
    let payload = udp.get(8..8 + MAGIC.len() + 4)?;
    if port != UDP_PORT || &payload[..MAGIC.len()] != MAGIC {
        return None;
    }
    let seq = u32::from_be_bytes(payload[MAGIC.len()..].try_into().unwrap());
    Some((dst, seq))
}

/// An IGMP message in `frame`: its IP source, type and group.
fn igmp(frame: &[u8]) -> Option<(Ipv4Addr, u8, Ipv4Addr)> {
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = frame.get(14..34)?;
    if ip[9] != 2 {
        return None;
    }
    let header = usize::from(ip[0] & 0x0f) * 4;
    let message = frame.get(14 + header..14 + header + 8)?;
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let group = Ipv4Addr::new(message[4], message[5], message[6], message[7]);
    Some((src, message[0], group))
}

/// An MLD message in `frame` (past a hop-by-hop header): its IP source,
/// ICMPv6 type and multicast address.
fn mld(frame: &[u8]) -> Option<(Ipv6Addr, u8, Ipv6Addr)> {
    if frame.get(12..14)? != [0x86, 0xdd] {
        return None;
    }
    let ip = frame.get(14..54)?;
    let (mut next, mut at) = (ip[6], 54);
    if next == 0 {
        next = *frame.get(at)?;
        at += (usize::from(*frame.get(at + 1)?) + 1) * 8;
    }
    if next != 58 {
        return None;
    }
    let message = frame.get(at..at + 24)?;
    if !(130..=132).contains(&message[0]) {
        return None;
    }
    let src: [u8; 16] = ip[8..24].try_into().unwrap();
    let addr: [u8; 16] = message[8..24].try_into().unwrap();
    Some((Ipv6Addr::from(src), message[0], Ipv6Addr::from(addr)))
}

/// The Internet checksum of `data`.
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The IGMP message types and IGMPv3 record types used here.
const MEMBERSHIP_QUERY: u8 = 0x11;
const V2_REPORT: u8 = 0x16;
const V2_LEAVE: u8 = 0x17;
const V3_REPORT: u8 = 0x22;
const CHANGE_TO_INCLUDE: u8 = 3;
const CHANGE_TO_EXCLUDE: u8 = 4;
/// All systems, where general queries go.
const ALL_SYSTEMS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 1);
/// IGMPv3-capable routers, where IGMPv3 reports go.
const V3_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 22);
/// All routers, where IGMPv2 leaves go.
const ALL_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 2);

/// An IGMPv1/v2 message (8 bytes) with its checksum.
fn igmp_message(kind: u8, code: u8, group: Ipv4Addr) -> Vec<u8> {
    let mut message = vec![kind, code, 0, 0];
    message.extend_from_slice(&group.octets());
    let sum = checksum(&message);
    message[2..4].copy_from_slice(&sum.to_be_bytes());
    message
}

/// An IGMPv3 report of one record of `record` type for `group`, no
/// sources: CHANGE_TO_EXCLUDE {} joins, CHANGE_TO_INCLUDE {} leaves.
fn igmpv3_report(record: u8, group: Ipv4Addr) -> Vec<u8> {
    let mut message = vec![V3_REPORT, 0, 0, 0, 0, 0, 0, 1, record, 0, 0, 0];
    message.extend_from_slice(&group.octets());
    let sum = checksum(&message);
    message[2..4].copy_from_slice(&sum.to_be_bytes());
    message
}

/// An IGMP message in a frame from `mac`/`src` to `dst`, TTL 1 with the
/// Router Alert option, as hosts and queriers send them.
fn igmp_frame(mac: [u8; 6], src: Ipv4Addr, dst: Ipv4Addr, message: &[u8]) -> Vec<u8> {
    let d = dst.octets();
    let mut frame = vec![0x01, 0x00, 0x5e, d[1] & 0x7f, d[2], d[3]];
    frame.extend_from_slice(&mac);
    frame.extend_from_slice(&[0x08, 0x00]);
    let total = (24 + message.len()) as u16;
    let mut ip = vec![0x46, 0xc0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0, 0, 1, 2, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&d);
    ip.extend_from_slice(&[0x94, 0x04, 0x00, 0x00]);
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(message);
    frame
}

/// Host `i`'s IPv6 address.
fn addr6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, i as u16 + 1)
}

/// `eth0`'s interface index, in the calling thread's namespace.
fn eth0_index() -> u32 {
    nix::net::if_::if_nametoindex("eth0").expect("no eth0")
}

/// A socket of a host's that joined a group, on `eth0`; dropping it leaves
/// the group (the host's IGMP or MLD says so).
struct Member {
    socket: UdpSocket,
    group: IpAddr,
}

impl Member {
    /// Whether the datagram numbered `seq` to the group came in (within
    /// 2 s).
    fn got(&self, seq: u32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut buffer = [0u8; 64];
        while Instant::now() < deadline {
            match self.socket.recv_from(&mut buffer) {
                Ok((n, _)) if n == MAGIC.len() + 4 && &buffer[..MAGIC.len()] == MAGIC => {
                    let got = u32::from_be_bytes(buffer[MAGIC.len()..n].try_into().unwrap());
                    if got == seq {
                        return true;
                    }
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("receive on {}: {e}", self.group),
            }
        }
        false
    }
}

/// What each scenario sets up.
struct Setup {
    /// The bridge queries itself (`--mcast-querier`, `mcast_querier 1`).
    querier: bool,
    /// The hosts (and the Linux bridge's br0) have IPv6.
    ipv6: bool,
    /// Each port's options: mpbridge's, and `bridge link set`'s.
    ports: [(&'static str, &'static [&'static str]); HOSTS],
}

const PLAIN: [(&str, &[&str]); HOSTS] = [("", &[]); HOSTS];

/// The bridge under test and its hosts.
enum Under {
    Mpbridge { topology: Topology, ctl: PathBuf },
    Kernel { bridge: Netns, hosts: Vec<Netns> },
}

/// A scenario's hosts on one bridge, a wire on every host.
struct Lab {
    // Before the namespaces they are in.
    wires: Vec<Wire>,
    under: Under,
    next_seq: u32,
}

/// Runs `bridge args` in namespace `ns`; returns its output.
fn bridge_tool(ns: &Netns, args: &[&str]) -> String {
    let output = Command::new("ip")
        .args(["netns", "exec", &ns.name, "bridge"])
        .args(args)
        .output()
        .expect("cannot run bridge");
    assert!(
        output.status.success(),
        "bridge {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// How long rtnetlink may take to answer.
const NETLINK_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends `request` to rtnetlink in the calling thread's namespace and
/// returns the messages of its answer, up to the acknowledgement.
fn rtnetlink(request: RouteNetlinkMessage) -> Vec<RouteNetlinkMessage> {
    let mut message = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(request));
    message.header.flags = NLM_F_REQUEST | NLM_F_ACK;
    message.header.sequence_number = 1;
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    let mut socket = Socket::new(NETLINK_ROUTE).expect("rtnetlink socket");
    socket.bind_auto().expect("bind rtnetlink");
    socket
        .connect(&netlink_sys::SocketAddr::new(0, 0))
        .expect("connect rtnetlink");
    let timeout = nix::sys::time::TimeVal::new(NETLINK_TIMEOUT.as_secs() as i64, 0);
    nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)
        .expect("SO_RCVTIMEO");
    socket.send(&bytes, 0).expect("send to rtnetlink");
    let mut answer = Vec::new();
    let mut buffer = Vec::with_capacity(65_536);
    // Bounded: an answer here is two messages.
    for _ in 0..16 {
        buffer.clear();
        socket.recv(&mut buffer, 0).expect("rtnetlink answers");
        let mut at = 0;
        while at < buffer.len() {
            let header = NetlinkBuffer::new_checked(&buffer[at..]).expect("a netlink message");
            let len = header.length() as usize;
            let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buffer[at..at + len])
                .expect("an rtnetlink message");
            at += (len + 3) & !3;
            match message.payload {
                NetlinkPayload::Error(error) => match error.code {
                    None => return answer,
                    Some(code) => panic!("rtnetlink refused: {code}"),
                },
                NetlinkPayload::InnerMessage(inner) => answer.push(inner),
                _ => {}
            }
        }
    }
    panic!("rtnetlink sent no acknowledgement");
}

/// A Linux bridge port's `mcast_n_groups` and `mcast_max_groups` (as `ip
/// -d link show` gives them from iproute2 6.3 on), after setting the
/// latter to `max` if given (`bridge link set dev PORT mcast_max_groups
/// N`); both read and written through rtnetlink.
fn kernel_port_groups(ns: &Netns, port: &str, max: Option<u32>) -> (u32, u32) {
    let port = port.to_owned();
    ns.run(move || {
        let index = nix::net::if_::if_nametoindex(port.as_str()).expect("no such port");
        if let Some(max) = max {
            let mut link = LinkMessage::default();
            link.header.index = index;
            link.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::PortKind(InfoPortKind::Bridge),
                LinkInfo::PortData(InfoPortData::BridgePort(vec![
                    InfoBridgePort::MulticastMaxGroups(max),
                ])),
            ]));
            rtnetlink(RouteNetlinkMessage::NewLink(link));
        }
        let mut link = LinkMessage::default();
        link.header.index = index;
        let answer = rtnetlink(RouteNetlinkMessage::GetLink(link));
        let (mut n, mut max) = (None, None);
        for message in answer {
            let RouteNetlinkMessage::NewLink(link) = message else {
                continue;
            };
            for attribute in link.attributes {
                let LinkAttribute::LinkInfo(infos) = attribute else {
                    continue;
                };
                for info in infos {
                    let LinkInfo::PortData(InfoPortData::BridgePort(items)) = info else {
                        continue;
                    };
                    for item in items {
                        match item {
                            InfoBridgePort::MulticastNGroups(v) => n = Some(v),
                            InfoBridgePort::MulticastMaxGroups(v) => max = Some(v),
                            _ => {}
                        }
                    }
                }
            }
        }
        (
            n.expect("no mcast_n_groups (a kernel before 6.3?)"),
            max.expect("no mcast_max_groups"),
        )
    })
}

/// The host behind a port as either bridge names it (`raw:p2`, `p2`);
/// `None` for the bridge itself (`br0`).
fn host_of(port: &str) -> Option<usize> {
    port.strip_prefix("raw:")
        .unwrap_or(port)
        .strip_prefix('p')?
        .parse()
        .ok()
}

impl Lab {
    /// The scenario on mpbridge with strategy `lock`.
    fn mpbridge(lock: &str, setup: &Setup) -> Lab {
        Lab::mpbridge_with(lock, setup, &[])
    }

    /// The scenario on mpbridge with strategy `lock` and the options
    /// `more`.
    fn mpbridge_with(lock: &str, setup: &Setup, more: &[&str]) -> Lab {
        let (socket, ctl_arg) = netns::ctl_socket("mcast");
        let mut extra = vec!["--lock", lock, ctl_arg.as_str(), "--mcast-snooping"];
        extra.extend_from_slice(more);
        if setup.querier {
            extra.push("--mcast-querier");
        }
        for (option, value, _, _) in TIMERS {
            extra.extend([option, value]);
        }
        let options: Vec<&str> = setup.ports.iter().map(|p| p.0).collect();
        let topology = Topology::with_options(PortKind::Raw, &options, &extra);
        Lab::finish(
            Under::Mpbridge {
                topology,
                ctl: socket,
            },
            setup,
        )
    }

    /// The scenario on the Linux bridge.
    fn kernel(setup: &Setup) -> Lab {
        let bridge = Netns::new();
        let hosts: Vec<Netns> = (0..HOSTS).map(|_| Netns::new()).collect();
        let querier = if setup.querier { "1" } else { "0" };
        let mut add = vec!["link", "add", "br0", "type", "bridge"];
        add.extend(["mcast_snooping", "1", "mcast_querier", querier]);
        for (_, _, key, value) in TIMERS {
            add.extend([key, value]);
        }
        bridge.ip(&add);
        if setup.ipv6 {
            // Its MLD queries come from br0's link-local address.
            bridge.sysctl("net/ipv6/conf/br0/accept_dad", "0").unwrap();
            bridge
                .sysctl("net/ipv6/conf/br0/disable_ipv6", "0")
                .unwrap();
        }
        let mut limits = Vec::new();
        for (i, host) in hosts.iter().enumerate() {
            let port = format!("p{i}");
            host.add_veth(&port, &bridge).expect("veth");
            bridge.ip(&["link", "set", "dev", &port, "master", "br0"]);
            bridge.ip(&["link", "set", "dev", &port, "up"]);
            // iproute2 before 6.3 has no mcast_max_groups: that one goes
            // through rtnetlink once br0 is up (set before, on 6.18, the
            // own querier never became present), the others through
            // `bridge link set`.
            let mut args = vec!["link", "set", "dev", &port];
            for pair in setup.ports[i].1.chunks(2) {
                match pair {
                    ["mcast_max_groups", n] => {
                        limits.push((port.clone(), n.parse::<u32>().expect("a number")))
                    }
                    _ => args.extend_from_slice(pair),
                }
            }
            if args.len() > 4 {
                bridge_tool(&bridge, &args);
            }
            let addr = format!("198.18.0.{}/24", i + 1);
            host.ip(&["addr", "add", &addr, "dev", "eth0"]);
            host.ip(&["link", "set", "dev", "eth0", "up"]);
        }
        bridge.ip(&["link", "set", "dev", "br0", "up"]);
        for (port, n) in limits {
            kernel_port_groups(&bridge, &port, Some(n));
        }
        Lab::finish(Under::Kernel { bridge, hosts }, setup)
    }

    /// The hosts' routes, their IPv6 if wanted, and a wire on each.
    fn finish(under: Under, setup: &Setup) -> Lab {
        let hosts = match &under {
            Under::Mpbridge { topology, .. } => &topology.hosts,
            Under::Kernel { hosts, .. } => hosts,
        };
        for (i, host) in hosts.iter().enumerate() {
            host.ip(&["route", "add", "224.0.0.0/4", "dev", "eth0"]);
            if setup.ipv6 {
                host.sysctl("net/ipv6/conf/eth0/accept_dad", "0").unwrap();
                host.sysctl("net/ipv6/conf/eth0/disable_ipv6", "0").unwrap();
                let addr = format!("{}/64", addr6(i));
                host.ip(&["-6", "addr", "add", &addr, "dev", "eth0", "nodad"]);
            }
        }
        if setup.ipv6 {
            // MLD speaks from the link-local address: wait for it.
            for host in hosts {
                let ready = wait_for(APPEAR, || {
                    let output = Command::new("ip")
                        .args(["-n", &host.name, "-6", "-o", "addr", "show", "dev", "eth0"])
                        .args(["scope", "link"])
                        .output()
                        .expect("ip");
                    let text = String::from_utf8_lossy(&output.stdout);
                    text.contains("fe80") && !text.contains("tentative")
                });
                assert!(ready, "no link-local address on {}", host.name);
            }
        }
        let wires = hosts.iter().map(Wire::on).collect();
        Lab {
            wires,
            under,
            next_seq: 0,
        }
    }

    fn hosts(&self) -> &[Netns] {
        match &self.under {
            Under::Mpbridge { topology, .. } => &topology.hosts,
            Under::Kernel { hosts, .. } => hosts,
        }
    }

    fn is_mpbridge(&self) -> bool {
        matches!(self.under, Under::Mpbridge { .. })
    }

    /// mpbridge's `mdb show -j`; `None` on the Linux bridge.
    fn mdb_json(&self) -> Option<serde_json::Value> {
        match &self.under {
            Under::Mpbridge { ctl, .. } => Some(ctl_json(ctl, &["mdb", "show", "-j"])),
            Under::Kernel { .. } => None,
        }
    }

    /// The Linux bridge's `bridge -d -s -j mdb show` (router ports need -d, their type -s), its entries flattened to
    /// (groups, router ports).
    fn kernel_mdb(bridge: &Netns) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
        let text = bridge_tool(bridge, &["-d", "-s", "-j", "mdb", "show"]);
        let parsed: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let (mut groups, mut routers) = (Vec::new(), Vec::new());
        for part in parsed.as_array().into_iter().flatten() {
            groups.extend(part["mdb"].as_array().into_iter().flatten().cloned());
            for ports in part["router"]
                .as_object()
                .into_iter()
                .flat_map(|o| o.values())
            {
                routers.extend(ports.as_array().into_iter().flatten().cloned());
            }
        }
        (groups, routers)
    }

    /// The hosts listed as members of `group`, sorted.
    fn members(&self, group: impl Into<IpAddr>) -> Vec<usize> {
        let group = group.into();
        let groups = match &self.under {
            Under::Mpbridge { .. } => {
                let mdb = self.mdb_json().unwrap();
                assert_eq!(mdb["enabled"], true, "{mdb}");
                mdb["groups"].as_array().expect("no groups").clone()
            }
            Under::Kernel { bridge, .. } => Lab::kernel_mdb(bridge).0,
        };
        let mut hosts: Vec<usize> = groups
            .iter()
            .filter(|g| g["grp"].as_str().and_then(|s| s.parse::<IpAddr>().ok()) == Some(group))
            .filter_map(|g| host_of(g["port"].as_str().expect("port")))
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        hosts
    }

    /// The router ports, sorted, each with its type (`temp`,
    /// `permanent`).
    fn routers(&self) -> Vec<(usize, String)> {
        let routers = match &self.under {
            Under::Mpbridge { .. } => {
                // IPv4's: the scenarios' queriers are IGMP ones.
                let mdb = self.mdb_json().unwrap();
                let routers = mdb["routers"].as_array().expect("no routers");
                for router in routers {
                    let family = router["family"].as_str();
                    assert!(matches!(family, Some("ipv4" | "ipv6")), "{mdb}");
                }
                routers
                    .iter()
                    .filter(|r| r["family"] == "ipv4")
                    .cloned()
                    .collect()
            }
            Under::Kernel { bridge, .. } => Lab::kernel_mdb(bridge).1,
        };
        let mut hosts: Vec<(usize, String)> = routers
            .iter()
            .filter_map(|r| {
                let host = host_of(r["port"].as_str().expect("port"))?;
                Some((host, r["type"].as_str().expect("type").to_owned()))
            })
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// mpbridge's querier state for IPv4 or IPv6 (`mdb show -j`'s
    /// `querier.ipv4`); `None` on the Linux bridge, which shows none.
    fn querier(&self, ipv6: bool) -> Option<serde_json::Value> {
        let family = if ipv6 { "ipv6" } else { "ipv4" };
        self.mdb_json().map(|mdb| mdb["querier"][family].clone())
    }

    /// A drop counter of host `i`'s port (mpbridge only).
    fn drops(&self, i: usize, reason: &str) -> u64 {
        let Under::Mpbridge { ctl, .. } = &self.under else {
            panic!("the Linux bridge has no drop counters here");
        };
        let stats = ctl_json(ctl, &["stats", "--json"]);
        let port = port_stats(&stats, &format!("raw:p{i}"));
        port["drops"][reason]
            .as_u64()
            .unwrap_or_else(|| panic!("no drops.{reason} in {port}"))
    }

    /// Host `i`'s port's `mcast_n_groups` and `mcast_max_groups`, from
    /// either bridge.
    fn port_groups(&self, i: usize) -> (u32, u32) {
        match &self.under {
            Under::Mpbridge { ctl, .. } => {
                let stats = ctl_json(ctl, &["stats", "--json"]);
                let port = port_stats(&stats, &format!("raw:p{i}"));
                let get = |key: &str| {
                    port[key]
                        .as_u64()
                        .unwrap_or_else(|| panic!("no {key} in {port}")) as u32
                };
                (get("mcast_n_groups"), get("mcast_max_groups"))
            }
            Under::Kernel { bridge, .. } => kernel_port_groups(bridge, &format!("p{i}"), None),
        }
    }

    /// Host `i`'s port's groups refused at its limit (mpbridge only; the
    /// Linux bridge counts none).
    fn max_groups_refused(&self, i: usize) -> Option<u64> {
        let Under::Mpbridge { ctl, .. } = &self.under else {
            return None;
        };
        let stats = ctl_json(ctl, &["stats", "--json"]);
        let port = port_stats(&stats, &format!("raw:p{i}"));
        Some(port["mcast_max_groups_refused"].as_u64().expect("refused"))
    }

    /// Whatever the wires hold now is dropped, so that a ring never fills.
    fn drain(&mut self) {
        for wire in &mut self.wires {
            wire.frames();
        }
    }

    /// Joins host `i` to `group` on its eth0.
    fn join(&self, i: usize, group: IpAddr) -> Member {
        let socket = self.hosts()[i].run(move || {
            let socket = match group {
                IpAddr::V4(g) => {
                    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, UDP_PORT)).expect("bind");
                    socket
                        .join_multicast_v4(&g, &Topology::addr(i))
                        .expect("join");
                    socket
                }
                IpAddr::V6(g) => {
                    let socket = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, UDP_PORT)).expect("bind");
                    socket.join_multicast_v6(&g, eth0_index()).expect("join");
                    socket
                }
            };
            socket
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            socket
        });
        Member { socket, group }
    }

    /// Sends one test datagram from host `from` to `group`; returns its
    /// sequence number.
    fn send(&mut self, from: usize, group: IpAddr) -> u32 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut payload = MAGIC.to_vec();
        payload.extend_from_slice(&seq.to_be_bytes());
        self.hosts()[from].run(move || {
            let socket = match group {
                IpAddr::V4(_) => {
                    let socket = UdpSocket::bind((Topology::addr(from), 0)).expect("bind");
                    socket.set_multicast_ttl_v4(1).unwrap();
                    socket.set_multicast_loop_v4(false).unwrap();
                    socket
                }
                IpAddr::V6(_) => {
                    let socket = UdpSocket::bind((addr6(from), 0)).expect("bind");
                    socket.set_multicast_loop_v6(false).unwrap();
                    socket
                }
            };
            let to = match group {
                IpAddr::V6(g) if g.segments()[0] == 0xff02 => {
                    SocketAddr::V6(SocketAddrV6::new(g, UDP_PORT, 0, eth0_index()))
                }
                group => SocketAddr::new(group, UDP_PORT),
            };
            socket.send_to(&payload, to).expect("send");
        });
        seq
    }

    /// The hosts (other than the sender) whose wires saw datagram `seq`
    /// to `group`, once frames in flight have arrived.
    fn seen(&mut self, from: usize, group: IpAddr, seq: u32) -> Vec<usize> {
        thread::sleep(SETTLE);
        let mut hosts = Vec::new();
        for (i, wire) in self.wires.iter_mut().enumerate() {
            let frames = wire.frames();
            if i != from && frames.iter().any(|f| datagram(f) == Some((group, seq))) {
                hosts.push(i);
            }
        }
        hosts
    }

    /// Sends a datagram from host `from` to `group`; returns the hosts it
    /// reached and its sequence number.
    fn reached(&mut self, from: usize, group: impl Into<IpAddr>) -> (Vec<usize>, u32) {
        let group = group.into();
        self.drain();
        let seq = self.send(from, group);
        (self.seen(from, group, seq), seq)
    }

    /// Sends the IGMP `message` from host `from` to `dst`; returns the
    /// hosts that got it.
    fn igmp_reached(&mut self, from: usize, dst: Ipv4Addr, message: &[u8]) -> Vec<usize> {
        self.drain();
        let src = Topology::addr(from);
        let frame = igmp_frame(self.wires[from].mac, src, dst, message);
        self.wires[from].send(&frame);
        thread::sleep(SETTLE);
        let mut hosts = Vec::new();
        for (i, wire) in self.wires.iter_mut().enumerate() {
            let frames = wire.frames();
            let same = |f: &Vec<u8>| f.len() >= frame.len() && f[..frame.len()] == frame[..];
            if i != from && frames.iter().any(same) {
                hosts.push(i);
            }
        }
        hosts
    }

    /// Waits until host `i` hears a general query (IGMP, or MLD with
    /// `ipv6`); returns its source address.
    fn await_general_query(&mut self, i: usize, ipv6: bool) -> IpAddr {
        let deadline = Instant::now() + APPEAR;
        while Instant::now() < deadline {
            for frame in self.wires[i].frames() {
                if ipv6 {
                    if let Some((src, 130, Ipv6Addr::UNSPECIFIED)) = mld(&frame) {
                        return src.into();
                    }
                } else if let Some((src, MEMBERSHIP_QUERY, Ipv4Addr::UNSPECIFIED)) = igmp(&frame) {
                    return src.into();
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("host {i} heard no general query within {APPEAR:?}");
    }

    /// Watches host `i`'s wire for `within`: no general query may come.
    fn assert_no_general_query(&mut self, i: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            for frame in self.wires[i].frames() {
                let query = matches!(igmp(&frame), Some((_, MEMBERSHIP_QUERY, _)))
                    || matches!(mld(&frame), Some((_, 130, _)));
                assert!(!query, "host {i} heard a query: {frame:02x?}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until a querier is present: mpbridge's `mdb show -j` says so
    /// and traffic to a group nobody joined then reaches `routers` alone at
    /// once; the Linux bridge shows no querier state, so there the traffic
    /// is tried until it reaches `routers` alone (it floods while the
    /// querier's first response interval runs).
    fn await_querier(&mut self, ipv6: bool, routers: &[usize]) {
        let unjoined: IpAddr = if ipv6 {
            UNJOINED6.into()
        } else {
            UNJOINED.into()
        };
        if self.is_mpbridge() {
            let present = wait_for(APPEAR, || self.querier(ipv6).unwrap()["present"] == true);
            assert!(present, "no querier: {}", self.mdb_json().unwrap());
            let (hosts, _) = self.reached(C, unjoined);
            assert_eq!(hosts, routers, "to {unjoined} with a querier present");
        } else {
            let deadline = Instant::now() + APPEAR;
            loop {
                let (hosts, _) = self.reached(C, unjoined);
                if hosts == routers {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "to {unjoined}: still {hosts:?} after {APPEAR:?}"
                );
            }
        }
    }

    /// Waits (at most `within`) until exactly `hosts` are listed as
    /// members of `group`.
    fn await_members(&self, group: impl Into<IpAddr>, hosts: &[usize], within: Duration) {
        let group = group.into();
        let listed = wait_for(within, || self.members(group) == hosts);
        assert!(
            listed,
            "members of {group}: {:?}, not {hosts:?}, after {within:?}",
            self.members(group)
        );
    }

    /// Waits until exactly `routers` are listed as router ports.
    fn await_routers(&self, routers: &[(usize, &str)]) {
        let want: Vec<(usize, String)> = routers.iter().map(|(i, t)| (*i, t.to_string())).collect();
        let listed = wait_for(APPEAR, || self.routers() == want);
        assert!(listed, "router ports {:?}, not {want:?}", self.routers());
    }
}

/// Polls `check` every 50 ms until it holds or `within` passes.
fn wait_for(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// (a) The bridge's own querier: a joined group reaches its members only
/// (a host's socket through IGMPv2, a station's crafted IGMPv3 report),
/// link-local groups every host, and a leave prunes within
/// last_member_count * last_member_interval.
fn own_querier(lab: &mut Lab) {
    let source = lab.await_general_query(A, false);
    assert_eq!(
        source,
        Ipv4Addr::UNSPECIFIED,
        "the bridge queries from 0.0.0.0"
    );
    if lab.is_mpbridge() {
        let present = wait_for(APPEAR, || lab.querier(false).unwrap()["present"] == true);
        assert!(present, "no querier: {}", lab.mdb_json().unwrap());
        assert_eq!(lab.querier(false).unwrap()["own"], true);
        // The one datagram below, to a group nobody joined, is counted.
        let before = lab.drops(C, "snooped");
        lab.await_querier(false, &[]);
        assert_eq!(lab.drops(C, "snooped"), before + 1, "drops.snooped");
    } else {
        lab.await_querier(false, &[]);
    }
    let member = lab.join(A, GROUP.into());
    lab.await_members(GROUP, &[A], APPEAR);
    if let Under::Mpbridge { ctl: socket, .. } = &lab.under {
        let (code, text, err) = ctl(socket, &["mdb", "show"]);
        assert_eq!(code, 0, "mdb show: {err}");
        let line = text
            .lines()
            .find(|l| l.contains("port raw:p0 grp 239.1.1.1 temp"))
            .unwrap_or_else(|| panic!("no line for raw:p0's group in {text}"));
        assert!(line.contains(" timer "), "{line}");
    }
    let report = igmpv3_report(CHANGE_TO_EXCLUDE, GROUP);
    lab.igmp_reached(D, V3_ROUTERS, &report);
    lab.await_members(GROUP, &[A, D], APPEAR);

    let (hosts, seq) = lab.reached(C, GROUP);
    assert_eq!(hosts, [A, D], "to {GROUP}, members A and D");
    assert!(member.got(seq), "A's socket got nothing");
    let (hosts, _) = lab.reached(C, LINK_LOCAL);
    assert_eq!(hosts, [A, B, D], "to {LINK_LOCAL}");

    // A's socket closes: the host leaves (IGMPv2, having heard the
    // bridge's IGMPv2 queries), and only A's port is pruned.
    drop(member);
    lab.await_members(GROUP, &[D], LAST_MEMBER + SLACK);
    let (hosts, _) = lab.reached(C, GROUP);
    assert_eq!(hosts, [D], "to {GROUP} once A left");

    // D leaves with IGMPv3's TO_IN {}.
    let leave = igmpv3_report(CHANGE_TO_INCLUDE, GROUP);
    lab.igmp_reached(D, V3_ROUTERS, &leave);
    lab.await_members(GROUP, &[], LAST_MEMBER + SLACK);
    let (hosts, _) = lab.reached(C, GROUP);
    assert_eq!(hosts, Vec::<usize>::new(), "to {GROUP} once all left");
    assert_eq!(lab.members(UNJOINED), Vec::<usize>::new());
}

/// (b) Snooping with no querier anywhere: groups are listed, but every
/// multicast floods.
fn no_querier(lab: &mut Lab) {
    // Long enough for a querier's startup queries, and for its first
    // response interval to pass, had there been one.
    lab.assert_no_general_query(A, STARTUP);
    let member = lab.join(A, GROUP.into());
    lab.await_members(GROUP, &[A], APPEAR);
    if let Some(querier) = lab.querier(false) {
        assert_eq!(querier["present"], false, "{querier}");
    }
    let (hosts, seq) = lab.reached(C, GROUP);
    assert_eq!(hosts, [A, B, D], "to {GROUP} without a querier");
    assert!(member.got(seq), "A's socket got nothing");
    let (hosts, _) = lab.reached(C, UNJOINED);
    assert_eq!(hosts, [A, B, D], "to {UNJOINED} without a querier");
}

/// (c) The same as (a) for IPv6: MLD from the hosts, MLDv1 queries from
/// the bridge's link-local address.
fn mld_own_querier(lab: &mut Lab) {
    let source = lab.await_general_query(A, true);
    let IpAddr::V6(source) = source else {
        unreachable!()
    };
    assert_eq!(
        source.segments()[0] & 0xffc0,
        0xfe80,
        "MLD queries come from a link-local address, not {source}"
    );
    lab.await_querier(true, &[]);
    if let Some(querier) = lab.querier(true) {
        assert_eq!(querier["own"], true, "{querier}");
    }
    let member = lab.join(A, GROUP6.into());
    lab.await_members(GROUP6, &[A], APPEAR);

    let (hosts, seq) = lab.reached(C, GROUP6);
    assert_eq!(hosts, [A], "to {GROUP6}, member A");
    assert!(member.got(seq), "A's socket got nothing");
    let (hosts, _) = lab.reached(C, ALL_NODES);
    assert_eq!(hosts, [A, B, D], "to {ALL_NODES}");

    // The host says done (MLDv1, having heard MLDv1 queries).
    drop(member);
    lab.await_members(GROUP6, &[], LAST_MEMBER + SLACK);
    let (hosts, _) = lab.reached(C, GROUP6);
    assert_eq!(hosts, Vec::<usize>::new(), "to {GROUP6} once A left");
}

/// (d) A foreign querier on D: D's port becomes a router port and gets
/// every group's traffic; members get their group's. A's port has
/// `mcast_fast_leave`, so its leave prunes at once; B's leave waits for
/// the querier's group-specific queries, which never come, so B stays.
fn foreign_querier(lab: &mut Lab) {
    let (hosts, _) = lab.reached(C, UNJOINED);
    assert_eq!(hosts, [A, B, D], "to {UNJOINED} before any query");
    let query = igmp_message(MEMBERSHIP_QUERY, 10, Ipv4Addr::UNSPECIFIED);
    let heard = lab.igmp_reached(D, ALL_SYSTEMS, &query);
    assert_eq!(heard, [A, B, C], "the query floods");
    lab.await_routers(&[(D, "temp")]);
    if let Some(mdb) = lab.mdb_json() {
        let routers = mdb["routers"].as_array().unwrap();
        assert!(routers.iter().all(|r| r["family"] == "ipv4"), "{mdb}");
    }
    // Present once the query's response time is over (the kernel's delay
    // timer), not before.
    lab.await_querier(false, &[D]);
    if let Some(querier) = lab.querier(false) {
        assert_eq!(querier["present"], true, "{querier}");
        assert_eq!(querier["own"], false, "{querier}");
        assert_eq!(querier["address"], "198.18.0.4", "{querier}");
        assert_eq!(querier["port"], "raw:p3", "{querier}");
    }

    // B first, so that A's report is the last one A's stack hears of.
    let b = lab.join(B, GROUP.into());
    lab.await_members(GROUP, &[B], APPEAR);
    let a = lab.join(A, GROUP.into());
    lab.await_members(GROUP, &[A, B], APPEAR);
    let (hosts, seq) = lab.reached(C, GROUP);
    assert_eq!(hosts, [A, B, D], "to {GROUP}: members and the router port");
    assert!(a.got(seq) && b.got(seq), "a member's socket got nothing");
    let (hosts, _) = lab.reached(C, LINK_LOCAL);
    assert_eq!(hosts, [A, B, D], "to {LINK_LOCAL}");

    let left = Instant::now();
    drop(a);
    drop(b);
    lab.await_members(GROUP, &[B], LAST_MEMBER + SLACK);
    // B is still listed past the time its leave would have pruned it had
    // the bridge itself been the querier.
    thread::sleep((left + LAST_MEMBER + SLACK).saturating_duration_since(Instant::now()));
    assert_eq!(
        lab.members(GROUP),
        [B],
        "members of {GROUP} after the leaves"
    );
    let (hosts, _) = lab.reached(C, GROUP);
    assert_eq!(hosts, [B, D], "to {GROUP} after the leaves");
}

/// (e) An IGMP report with a bad checksum is dropped (and counted as
/// `mcast_parse`); the same report intact floods (no querier) and is
/// learned.
fn malformed_report(lab: &mut Lab) {
    let good_group = Ipv4Addr::new(239, 3, 3, 3);
    let bad_group = Ipv4Addr::new(239, 3, 3, 4);
    let report = igmp_message(V2_REPORT, 0, good_group);
    assert_eq!(lab.igmp_reached(B, good_group, &report), [A, C, D]);
    lab.await_members(good_group, &[B], APPEAR);

    let before = lab.is_mpbridge().then(|| lab.drops(B, "mcast_parse"));
    let mut bad = igmp_message(V2_REPORT, 0, bad_group);
    bad[2] ^= 0x5a;
    assert_eq!(
        lab.igmp_reached(B, bad_group, &bad),
        Vec::<usize>::new(),
        "a report with a bad checksum"
    );
    assert_eq!(lab.members(bad_group), Vec::<usize>::new());
    if let Some(before) = before {
        assert_eq!(lab.drops(B, "mcast_parse"), before + 1, "drops.mcast_parse");
    }
}

/// (g) Router ports by option: B's port always one (`mcast_router=2`),
/// D's never (`mcast_router=0`), not even when D queries.
fn router_options(lab: &mut Lab) {
    lab.await_routers(&[(B, "permanent")]);
    // Nobody queries yet: everything floods.
    let (hosts, _) = lab.reached(C, UNJOINED);
    assert_eq!(hosts, [A, B, D], "to {UNJOINED} before any query");
    let query = igmp_message(MEMBERSHIP_QUERY, 10, Ipv4Addr::UNSPECIFIED);
    lab.igmp_reached(D, ALL_SYSTEMS, &query);
    if lab.is_mpbridge() {
        let present = wait_for(APPEAR, || lab.querier(false).unwrap()["present"] == true);
        assert!(present, "{}", lab.mdb_json().unwrap());
        assert_eq!(lab.querier(false).unwrap()["port"], "raw:p3");
    }
    // D's query made a querier present, but D's port no router port.
    lab.await_querier(false, &[B]);
    assert_eq!(lab.routers(), [(B, "permanent".to_owned())]);
}

/// The groups of the `mcast_max_groups` scenario.
const LIMITED: [Ipv4Addr; 5] = [
    Ipv4Addr::new(239, 4, 4, 1),
    Ipv4Addr::new(239, 4, 4, 2),
    Ipv4Addr::new(239, 4, 4, 3),
    Ipv4Addr::new(239, 4, 4, 4),
    Ipv4Addr::new(239, 4, 4, 5),
];

/// (h) A's port has `mcast_max_groups 2`, B's is a router port, D's has
/// no limit; the bridge is the querier. A's reports for two groups go to
/// the router port and make A a member; its report for a third adds
/// nothing (the Linux bridge also drops that report: `br_multicast_rcv`
/// returns the error; mpbridge forwards it), while D joins the same
/// groups unhindered. A refresh of a group A has still passes; a leave
/// makes room again.
fn max_groups(lab: &mut Lab) {
    let [g1, g2, g3, g4, g5] = LIMITED;
    lab.await_routers(&[(B, "permanent")]);
    lab.await_general_query(A, false);
    lab.await_querier(false, &[B]);
    assert_eq!(lab.port_groups(A), (0, 2), "A's port before any report");
    assert_eq!(lab.port_groups(D), (0, 0), "D's port before any report");
    let report = |g| igmp_message(V2_REPORT, 0, g);
    for g in [g1, g2] {
        assert_eq!(
            lab.igmp_reached(A, g, &report(g)),
            [B],
            "A's report for {g}"
        );
        lab.await_members(g, &[A], APPEAR);
    }
    assert_eq!(lab.port_groups(A), (2, 2));

    // The third group: not added on A's port. The Linux bridge drops the
    // report; mpbridge's workers forward a report before the control
    // plane reads it, so it reaches the router port (docs/design.md).
    let refused_reaches = |lab: &Lab, routers: Vec<usize>| match lab.is_mpbridge() {
        true => routers,
        false => Vec::new(),
    };
    let want = refused_reaches(lab, vec![B]);
    assert_eq!(
        lab.igmp_reached(A, g3, &report(g3)),
        want,
        "A's report for {g3}, beyond its limit"
    );
    // D's reports come after A's: once D is listed, A's was taken too.
    for g in [g1, g3, g4] {
        assert_eq!(
            lab.igmp_reached(D, g, &report(g)),
            [B],
            "D's report for {g}"
        );
    }
    lab.await_members(g4, &[D], APPEAR);
    assert_eq!(lab.members(g3), [D], "members of {g3}");
    assert_eq!(lab.members(g1), [A, D], "members of {g1}");
    assert_eq!(lab.port_groups(A), (2, 2));
    assert_eq!(lab.port_groups(D), (3, 0));
    if let Some(refused) = lab.max_groups_refused(A) {
        assert_eq!(refused, 1, "A's refusals");
        assert_eq!(lab.max_groups_refused(D), Some(0), "D's refusals");
    }
    // Forwarding follows the members: A gets g1 and g2, not g3.
    assert_eq!(lab.reached(C, g1).0, [A, B, D], "to {g1}");
    assert_eq!(lab.reached(C, g2).0, [A, B], "to {g2}");
    assert_eq!(lab.reached(C, g3).0, [B, D], "to {g3}");

    // A group A has is refreshed at the limit; an IGMPv3 join of a new
    // one is refused like the v2 report (and dropped).
    assert_eq!(lab.igmp_reached(A, g1, &report(g1)), [B], "A's refresh");
    let v3_join = igmpv3_report(CHANGE_TO_EXCLUDE, g4);
    // IGMPv3 reports flood (to 224.0.0.22), where Linux drops this one.
    let want = refused_reaches(lab, vec![B, C, D]);
    assert_eq!(
        lab.igmp_reached(A, V3_ROUTERS, &v3_join),
        want,
        "A's IGMPv3 report for {g4}, beyond its limit"
    );
    assert_eq!(lab.igmp_reached(D, g5, &report(g5)), [B]);
    lab.await_members(g5, &[D], APPEAR);
    assert_eq!(lab.members(g4), [D], "members of {g4}");
    assert_eq!(lab.port_groups(A), (2, 2));
    if let Some(refused) = lab.max_groups_refused(A) {
        assert_eq!(refused, 2, "A's refusals");
    }
    if let Under::Mpbridge { ctl: socket, .. } = &lab.under {
        let shown = ctl_json(socket, &["port", "show", "-j"]);
        assert!(
            shown[0]["options"]
                .as_str()
                .is_some_and(|o| o.contains("mcast_max_groups=2")),
            "{shown}"
        );
        assert_eq!(shown[0]["mcast_n_groups"], 2, "{shown}");
        assert_eq!(shown[0]["mcast_max_groups_refused"], 2, "{shown}");
        let mdb = ctl_json(socket, &["mdb", "show", "-j"]);
        let ports = mdb["ports"].as_array().expect("ports");
        assert!(
            ports.iter().any(|p| p["port"] == "raw:p0"
                && p["mcast_n_groups"] == 2
                && p["mcast_max_groups"] == 2),
            "{mdb}"
        );
        let (code, text, err) = ctl(socket, &["mdb", "show"]);
        assert_eq!(code, 0, "mdb show: {err}");
        assert!(
            text.contains("port raw:p0 mcast_n_groups 2 mcast_max_groups 2 refused 2"),
            "{text}"
        );
    }

    // A leaves g1: once pruned, A's port has room for g3.
    let leave = igmp_message(V2_LEAVE, 0, g1);
    lab.igmp_reached(A, ALL_ROUTERS, &leave);
    lab.await_members(g1, &[D], LAST_MEMBER + SLACK);
    assert_eq!(lab.port_groups(A), (1, 2));
    assert_eq!(
        lab.igmp_reached(A, g3, &report(g3)),
        [B],
        "A's report for {g3}"
    );
    lab.await_members(g3, &[A, D], APPEAR);
    assert_eq!(lab.port_groups(A), (2, 2));
    assert_eq!(lab.reached(C, g3).0, [A, B, D], "to {g3} once A joined");
}

/// One scenario: its setup and its check.
struct Scenario {
    name: &'static str,
    setup: Setup,
    check: fn(&mut Lab),
}

const SCENARIOS: [Scenario; 7] = [
    Scenario {
        name: "own querier",
        setup: Setup {
            querier: true,
            ipv6: false,
            ports: PLAIN,
        },
        check: own_querier,
    },
    Scenario {
        name: "no querier",
        setup: Setup {
            querier: false,
            ipv6: false,
            ports: PLAIN,
        },
        check: no_querier,
    },
    Scenario {
        name: "MLD, own querier",
        setup: Setup {
            querier: true,
            ipv6: true,
            ports: PLAIN,
        },
        check: mld_own_querier,
    },
    Scenario {
        name: "foreign querier",
        setup: Setup {
            querier: false,
            ipv6: false,
            ports: [
                ("mcast_fast_leave=on", &["fastleave", "on"]),
                ("", &[]),
                ("", &[]),
                ("", &[]),
            ],
        },
        check: foreign_querier,
    },
    Scenario {
        name: "malformed report",
        setup: Setup {
            querier: false,
            ipv6: false,
            ports: PLAIN,
        },
        check: malformed_report,
    },
    Scenario {
        name: "router options",
        setup: Setup {
            querier: false,
            ipv6: false,
            ports: [
                ("", &[]),
                ("mcast_router=2", &["mcast_router", "2"]),
                ("", &[]),
                ("mcast_router=0", &["mcast_router", "0"]),
            ],
        },
        check: router_options,
    },
    Scenario {
        name: "max groups",
        setup: Setup {
            querier: true,
            ipv6: false,
            ports: [
                ("mcast_max_groups=2", &["mcast_max_groups", "2"]),
                ("mcast_router=2", &["mcast_router", "2"]),
                ("", &[]),
                ("", &[]),
            ],
        },
        check: max_groups,
    },
];

/// Every scenario through mpbridge with `lock`.
fn snooping_through_mpbridge(lock: &str) {
    if !privileged(&format!("mcast_{lock}")) {
        return;
    }
    for scenario in &SCENARIOS {
        eprintln!("{}: mpbridge, {lock}", scenario.name);
        let mut lab = Lab::mpbridge(lock, &scenario.setup);
        (scenario.check)(&mut lab);
    }
}

/// The same scenarios through the Linux bridge: the reference.
fn the_kernel_bridge_agrees() {
    if !privileged("the_kernel_bridge_agrees") {
        return;
    }
    for scenario in &SCENARIOS {
        eprintln!("{}: the Linux bridge", scenario.name);
        let mut lab = Lab::kernel(&scenario.setup);
        (scenario.check)(&mut lab);
    }
}

strategy_tests!(snooping_through_mpbridge: mcast_mutex, mcast_rwlock, mcast_rmlock,
    mcast_sharded, mcast_rcu, mcast_epoch);

/// How long the flood of reports lasts at most.
const FLOOD: Duration = Duration::from_secs(8);
/// The most frames the flood sends.
const FLOOD_FRAMES: usize = 300_000;
/// Records per flooded report: 1468 bytes of IP, within a 1500-byte MTU.
const FLOOD_RECORDS: usize = 180;
/// Distinct groups the flood cycles through: below --mcast-hash-max
/// (4096), so that snooping stays on and every report is worked on.
const FLOOD_GROUPS: usize = 3600;
/// How much the daemon's RSS may grow during the flood: its queue holds at
/// most 1 MiB of reports and snooping 3600 groups; without bounds the
/// queue grows by the megabytes each second that the owner falls behind.
const FLOOD_RSS_KIB: u64 = 48 << 10;

/// An IGMPv3 report of `FLOOD_RECORDS` CHANGE_TO_EXCLUDE {} records
/// (joins), the `n`th of the flood: groups `n * FLOOD_RECORDS` on, modulo
/// `FLOOD_GROUPS`, in 239.128.0.0/16.
fn flood_report(n: usize) -> Vec<u8> {
    let mut message = vec![V3_REPORT, 0, 0, 0, 0, 0];
    message.extend_from_slice(&(FLOOD_RECORDS as u16).to_be_bytes());
    for r in 0..FLOOD_RECORDS {
        let g = (n * FLOOD_RECORDS + r) % FLOOD_GROUPS;
        message.extend_from_slice(&[CHANGE_TO_EXCLUDE, 0, 0, 0]);
        message.extend_from_slice(&[239, 128, (g / 250) as u8, (g % 250) as u8 + 1]);
    }
    let sum = checksum(&message);
    message[2..4].copy_from_slice(&sum.to_be_bytes());
    message
}

/// User and system CPU seconds of thread `tid` of process `pid`
/// (/proc/PID/task/TID/stat, fields 14 and 15).
fn thread_cpu_seconds(pid: u32, tid: u32) -> f64 {
    let path = format!("/proc/{pid}/task/{tid}/stat");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (_, rest) = text.rsplit_once(')').expect("a stat line");
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse::<u64>().expect("a number"))
        .sum();
    // SAFETY: sysconf has no memory preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

/// The spanning tree as `stats -j` shows it: the root, and each port's
/// role and state.
fn tree(ctl: &std::path::Path) -> (String, Vec<(String, String, String)>) {
    let stats = ctl_json(ctl, &["stats", "-j"]);
    let root = stats["stp"]["root_id"].as_str().expect("no stp.root_id");
    let ports = stats["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            let field = |key: &str| p["stp"][key].as_str().unwrap_or("?").to_owned();
            (
                p["name"].as_str().unwrap().to_owned(),
                field("role"),
                field("state"),
            )
        })
        .collect();
    (root.to_owned(), ports)
}

/// Sends the flood from its own packet socket on a host, in a thread,
/// until `FLOOD` passes, `FLOOD_FRAMES` are sent, or it is dropped (which
/// stops and joins it, also when the test fails).
struct Flood {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<thread::JoinHandle<usize>>,
}

impl Flood {
    fn start(host: &Netns, from: usize) -> Flood {
        use std::sync::atomic::{AtomicBool, Ordering};
        let mut wire = Wire::on(host);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let src = Topology::addr(from);
        // A few hundred distinct reports, sent over and over.
        let frames: Vec<Vec<u8>> = (0..FLOOD_GROUPS / FLOOD_RECORDS * 4)
            .map(|n| {
                let mut buffer = vec![0u8; VNET_HDR_LEN];
                buffer.extend(igmp_frame(wire.mac, src, V3_ROUTERS, &flood_report(n)));
                buffer
            })
            .collect();
        let thread = thread::spawn(move || {
            let deadline = Instant::now() + FLOOD;
            let mut sent = 0;
            let mut next = 0;
            // Relaxed: a flag polled in a loop, nothing published with it.
            while !stopped.load(Ordering::Relaxed)
                && Instant::now() < deadline
                && sent < FLOOD_FRAMES
            {
                let first = next;
                next += 32;
                let batch =
                    (first..next).map(|i| Outgoing::split(&frames[i % frames.len()], VNET_HDR_LEN));
                // A full socket queue sends fewer; the flood goes on.
                sent += wire.queue.send_batch(batch).sent;
                // About 30000 frames a second at most: a flood, yet one
                // that leaves the shared machine's other work room.
                thread::sleep(Duration::from_millis(1));
                wire.frames();
            }
            sent
        });
        Flood {
            stop,
            thread: Some(thread),
        }
    }

    fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Waits for the end; the frames it sent.
    fn finish(mut self) -> usize {
        self.thread
            .take()
            .unwrap()
            .join()
            .expect("the flood thread panicked")
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One host floods large IGMPv3 reports (180 records each, 3600 groups)
/// into a bridge with `--mcast-snooping --stp` and two workers, whose
/// root is a Linux bridge on host D (priority 4096, hello 1 s, so that
/// its information is gone after 3 s without BPDUs taken): each `stats`
/// asked meanwhile answers within 2 s, the RSS stays within
/// `FLOOD_RSS_KIB` of what it was, the spanning tree (root, roles, states)
/// is unchanged, another host's multicast still reaches its member, and
/// the queue counts what it shed. Prints the owner (main) thread's CPU
/// time over the flood.
fn report_flood(lock: &str) {
    if !privileged(&format!("mcast_flood_{lock}")) {
        return;
    }
    let setup = Setup {
        querier: true,
        ipv6: false,
        ports: [
            ("edge=on", &[]),
            ("edge=on", &[]),
            ("edge=on", &[]),
            ("", &[]),
        ],
    };
    let mut lab = Lab::mpbridge_with(lock, &setup, &["--stp", "--workers", "2"]);
    let (pid, socket) = match &lab.under {
        Under::Mpbridge { topology, ctl } => {
            (topology.daemon.as_ref().unwrap().child.id(), ctl.clone())
        }
        Under::Kernel { .. } => unreachable!(),
    };
    // D's Linux bridge, the root, over D's eth0 (times in centiseconds).
    let d = &lab.hosts()[D];
    d.ip(&["link", "add", "br0", "type", "bridge", "stp_state", "1"]);
    for (key, value) in [
        ("priority", "4096"),
        ("hello_time", "100"),
        ("forward_delay", "400"),
        ("max_age", "600"),
    ] {
        d.ip(&["link", "set", "br0", "type", "bridge", key, value]);
    }
    d.ip(&["link", "set", "eth0", "master", "br0"]);
    d.ip(&["link", "set", "br0", "up"]);
    let converged = wait_for(Duration::from_secs(30), || {
        let (root, ports) = tree(&socket);
        root.starts_with("1000.")
            && ports.iter().all(|(_, _, state)| state == "forwarding")
            && ports
                .iter()
                .any(|(name, role, _)| name == "raw:p3" && role == "root")
    });
    assert!(converged, "no tree under D's root: {:?}", tree(&socket));
    lab.await_querier(false, &[]);
    let member = lab.join(B, GROUP.into());
    lab.await_members(GROUP, &[B], APPEAR);
    let seq = lab.send(C, GROUP.into());
    assert!(member.got(seq), "B's socket got nothing before the flood");
    let before = tree(&socket);
    let rss_before = netns::rss_kib(pid);
    let (owner_before, process_before) = (thread_cpu_seconds(pid, pid), netns::cpu_seconds(pid));
    let start = Instant::now();

    let flood = Flood::start(&lab.hosts()[A], A);
    let (mut asked, mut slowest, mut rss_max) = (0, Duration::ZERO, rss_before);
    let (mut datagrams, mut got) = (0, 0);
    while flood.running() {
        let asked_at = Instant::now();
        let (code, out, err) = ctl(&socket, &["stats", "-j"]);
        let took = asked_at.elapsed();
        assert_eq!(code, 0, "stats during the flood: {err}");
        assert!(
            took < Duration::from_secs(2),
            "stats took {took:?} during the flood"
        );
        let stats: serde_json::Value = serde_json::from_str(&out).expect("stats -j");
        assert_eq!(stats["mcast"]["enabled"], true, "snooping turned off");
        asked += 1;
        slowest = slowest.max(took);
        rss_max = rss_max.max(netns::rss_kib(pid));
        let seq = lab.send(C, GROUP.into());
        datagrams += 1;
        got += usize::from(member.got(seq));
        thread::sleep(Duration::from_millis(200));
    }
    let sent = flood.finish();
    let span = start.elapsed().as_secs_f64();
    let owner = thread_cpu_seconds(pid, pid) - owner_before;
    let process = netns::cpu_seconds(pid) - process_before;
    rss_max = rss_max.max(netns::rss_kib(pid));
    let stats = ctl_json(&socket, &["stats", "-j"]);
    let queue = &stats["owner_queue"];
    let shed =
        queue["mcast_over_budget"].as_u64().unwrap() + queue["mcast_queue_full"].as_u64().unwrap();
    eprintln!(
        "{lock}: {sent} reports in {span:.1} s; owner thread {owner:.2} s CPU, process {process:.2} s; \
         stats asked {asked} times, slowest {slowest:?}; RSS {rss_before} -> {rss_max} KiB at most; \
         {got} of {datagrams} datagrams reached the member; owner_queue {queue}; v3 reports taken {}, \
         groups {}",
        stats["mcast"]["messages"]["igmp_v3_reports"], stats["mcast"]["groups"]
    );
    assert!(sent > 10_000, "the flood sent only {sent} frames");
    assert!(
        asked >= 3,
        "stats asked only {asked} times during the flood"
    );
    assert!(shed > 0, "nothing shed: {queue}");
    assert!(
        stats["mcast"]["messages"]["igmp_v3_reports"]
            .as_u64()
            .unwrap()
            > 0,
        "no report taken"
    );
    assert!(
        rss_max <= rss_before + FLOOD_RSS_KIB,
        "RSS grew from {rss_before} KiB to {rss_max} KiB"
    );
    // Every datagram during the flood: a lost one is a forwarding fault
    // (the member's membership is refreshed by its own host's reports).
    assert_eq!(
        got, datagrams,
        "datagrams to the member lost during the flood"
    );
    assert_eq!(tree(&socket), before, "the spanning tree changed");
    let seq = lab.send(C, GROUP.into());
    assert!(member.got(seq), "B's socket got nothing after the flood");
}

strategy_tests!(report_flood: mcast_flood_mutex, mcast_flood_rwlock, mcast_flood_rmlock,
    mcast_flood_sharded, mcast_flood_rcu, mcast_flood_epoch);

/// The bridge options under test and a good value of each.
const BRIDGE_OPTIONS: [(&str, &str); 9] = [
    ("--mcast-query-interval", "5"),
    ("--mcast-query-response-interval", "0.5"),
    ("--mcast-membership-interval", "30"),
    ("--mcast-querier-interval", "25.5"),
    ("--mcast-last-member-interval", "0.25"),
    ("--mcast-startup-query-interval", "1.5"),
    ("--mcast-last-member-count", "3"),
    ("--mcast-startup-query-count", "3"),
    ("--mcast-hash-max", "512"),
];

/// Runs `mpbridge run` with two vhost-user ports in `dir` (no network
/// device is made, nothing needs a privilege) and `extra`; returns the
/// exit status and stderr.
fn run_vhost(dir: &TempDir, port_options: &str, extra: &[&str]) -> (bool, String) {
    let ctl_arg = format!("--ctl={}", dir.path("ctl.sock").display());
    let port0 = format!(
        "--port=vhost:{}{port_options}",
        dir.path("v0.sock").display()
    );
    let port1 = format!("--port=vhost:{}", dir.path("v1.sock").display());
    let mut args = vec!["run", ctl_arg.as_str(), port0.as_str(), port1.as_str()];
    args.extend_from_slice(extra);
    let (status, stderr) = netns::run_to_exit(None, &args, Duration::from_secs(5));
    (status.success(), stderr)
}

/// A refusal: a non-zero exit, and one line (no panic) that names `what`
/// and `value`.
fn assert_refused(refused: (bool, String), what: &str, value: &str) {
    let (success, stderr) = refused;
    assert!(!success, "{what} {value} taken");
    let named = stderr.contains(what) || stderr.contains(&what.replace('-', "_"));
    assert!(named && stderr.contains(value), "{what} {value}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

/// (f) Good values of every new option are taken (the bridge starts, and
/// shows them); bad ones (zero, negative, not a number, a response
/// interval not under the query interval, a querier without snooping,
/// unknown router, fast-leave or group limit settings) give one line
/// naming the value and a non-zero exit.
fn bad_values_are_refused() {
    let dir = TempDir::new("mcast-opt");
    let ports = [
        format!(
            "vhost:{},mcast_router=2,mcast_fast_leave=on,mcast_max_groups=16",
            dir.path("g0.sock").display()
        ),
        format!("vhost:{},mcast_router=0", dir.path("g1.sock").display()),
    ];
    let mut extra = vec!["--mcast-snooping", "--mcast-querier"];
    for (option, value) in BRIDGE_OPTIONS {
        extra.extend([option, value]);
    }
    let (daemon, socket) = bridge_here(&dir, &ports, &extra);
    let mdb = ctl_json(&socket, &["mdb", "show", "-j"]);
    assert_eq!(mdb["enabled"], true, "{mdb}");
    let shown = ctl_json(&socket, &["port", "show", "-j"]);
    let options = shown[0]["options"].as_str().expect("options");
    assert!(
        options.contains("mcast_router=2")
            && options.contains("mcast_fast_leave=on")
            && options.contains("mcast_max_groups=16"),
        "{shown}"
    );
    assert_eq!(shown[0]["mcast_max_groups"], 16, "{shown}");
    assert_eq!(shown[0]["mcast_n_groups"], 0, "{shown}");
    assert_eq!(shown[1]["mcast_max_groups"], 0, "{shown}");
    assert!(
        shown[1]["options"]
            .as_str()
            .unwrap()
            .contains("mcast_router=0"),
        "{shown}"
    );
    drop(daemon);

    for (option, _) in BRIDGE_OPTIONS {
        for value in ["0", "-1", "soon"] {
            let arg = format!("{option}={value}");
            let refused = run_vhost(&dir, "", &["--mcast-snooping", &arg]);
            assert_refused(refused, option.trim_start_matches('-'), value);
        }
    }
    let refused = run_vhost(
        &dir,
        "",
        &[
            "--mcast-snooping",
            "--mcast-query-interval=4",
            "--mcast-query-response-interval=4.5",
        ],
    );
    assert_refused(refused, "mcast-query-response-interval", "4.5");
    let (success, stderr) = run_vhost(&dir, "", &["--mcast-querier"]);
    assert!(!success, "--mcast-querier without --mcast-snooping taken");
    assert!(stderr.contains("mcast-snooping"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");

    for (key, values) in [
        ("mcast_router", &["3", "-1", "x"][..]),
        ("mcast_fast_leave", &["maybe", "onn"][..]),
        ("mcast_max_groups", &["-1", "x", "4294967296", "1.5"][..]),
    ] {
        for value in values {
            let option = format!(",{key}={value}");
            let refused = run_vhost(&dir, &option, &["--mcast-snooping"]);
            assert_refused(refused, key, value);
        }
    }
}

lab::test_main! {
    privileged: [
        the_kernel_bridge_agrees,
        mcast_mutex,
        mcast_rwlock,
        mcast_rmlock,
        mcast_sharded,
        mcast_rcu,
        mcast_epoch,
        mcast_flood_mutex,
        mcast_flood_rwlock,
        mcast_flood_rmlock,
        mcast_flood_sharded,
        mcast_flood_rcu,
        mcast_flood_epoch,
    ],
    plain: [bad_values_are_refused],
}
