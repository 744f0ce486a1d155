//! VXLAN ports against the Linux kernel's vxlan device: namespaces as
//! hosts and VTEPs, veths as the underlay (198.18.1.0/24, or 2001:2::/64
//! with IPv6 on the underlay's links only) and as the hosts' links
//! (198.18.0.0/24), the interfaces' default offloads on. Needs root; skips
//! with a reason otherwise (fails under MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use netns::{
    ctl_json, mac, privileged, settle_counts, tcp_transfer, test_frame, Daemon, Netns, PortKind,
    Station, BROADCAST,
};

/// The IP version of an underlay: its VTEPs' addresses, and the room
/// VXLAN takes from its 1500-byte MTU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// VTEPs at 198.18.1.0/24.
    V4,
    /// VTEPs at 2001:2::/64, IPv6 on the underlay's links only.
    V6,
}

impl Family {
    /// The underlay address of VTEP `i`.
    fn vtep(self, i: usize) -> String {
        match self {
            Family::V4 => format!("198.18.1.{}", i + 1),
            Family::V6 => format!("2001:2::{}", i + 1),
        }
    }

    /// The underlay's prefix length.
    fn prefix(self) -> u8 {
        match self {
            Family::V4 => 24,
            Family::V6 => 64,
        }
    }

    /// The MTU of the hosts behind the VTEPs: the underlay's 1500 bytes
    /// less VXLAN's overhead (outer IP header 20 or 40 bytes, UDP 8, VXLAN
    /// 8, inner Ethernet 14).
    fn host_mtu(self) -> u16 {
        match self {
            Family::V4 => 1450,
            Family::V6 => 1430,
        }
    }
}

/// The IPv4 underlay address of VTEP `i`.
fn vtep(i: usize) -> String {
    Family::V4.vtep(i)
}

/// Whether this kernel has IPv6, for a test over an IPv6 underlay. When it
/// has not, prints why and returns false, unless MPBRIDGE_REQUIRE_PRIV=1
/// asks for a failure instead.
fn ipv6_available(test: &str) -> bool {
    if std::path::Path::new("/proc/sys/net/ipv6").exists() {
        return true;
    }
    let reason = "this kernel has no IPv6";
    if std::env::var("MPBRIDGE_REQUIRE_PRIV").as_deref() == Ok("1") {
        panic!("{test}: {reason}, and MPBRIDGE_REQUIRE_PRIV=1 forbids skipping");
    }
    eprintln!("skipped {test}: {reason}");
    false
}

/// An underlay: a namespace with a kernel bridge that VTEP namespaces
/// join, each through a veth `u0` addressed `family.vtep(i)`.
struct Underlay {
    ns: Netns,
    family: Family,
}

impl Underlay {
    fn new(family: Family) -> Underlay {
        let ns = Netns::new();
        ns.ip(&["link", "add", "br0", "type", "bridge"]);
        ns.ip(&["link", "set", "br0", "up"]);
        Underlay { ns, family }
    }

    /// An underlay of `family` and VTEPs 0 and 1 joined to it.
    fn with_two_vteps(family: Family) -> (Underlay, Netns, Netns) {
        let underlay = Underlay::new(family);
        let (a, b) = (Netns::new(), Netns::new());
        underlay.join(&a, 0);
        underlay.join(&b, 1);
        (underlay, a, b)
    }

    /// An IPv4 underlay and `n` VTEP namespaces joined to it, VTEP 0 to
    /// n - 1.
    fn with_vteps(n: usize) -> (Underlay, Vec<Netns>) {
        let underlay = Underlay::new(Family::V4);
        let vteps: Vec<Netns> = (0..n).map(|_| Netns::new()).collect();
        for (i, ns) in vteps.iter().enumerate() {
            underlay.join(ns, i);
        }
        (underlay, vteps)
    }

    /// Joins `vtep_ns` as VTEP `i`.
    fn join(&self, vtep_ns: &Netns, i: usize) {
        let port = format!("u{i}");
        // eth0 in the underlay's namespace is taken: name our end there.
        vtep_ns.ip(&[
            "link",
            "add",
            "u0",
            "type",
            "veth",
            "peer",
            "name",
            &port,
            "netns",
            &self.ns.name,
        ]);
        self.ns.ip(&["link", "set", &port, "master", "br0"]);
        self.ns.ip(&["link", "set", &port, "up"]);
        let address = format!("{}/{}", self.family.vtep(i), self.family.prefix());
        if self.family == Family::V6 {
            // IPv6 on this link alone: the hosts' links stay free of it.
            vtep_ns
                .sysctl("net/ipv6/conf/u0/disable_ipv6", "0")
                .expect("cannot turn IPv6 on for the underlay");
            // No duplicate address detection: the address is usable (a
            // socket may bind it) at once.
            vtep_ns.ip(&["addr", "add", &address, "dev", "u0", "nodad"]);
        } else {
            vtep_ns.ip(&["addr", "add", &address, "dev", "u0"]);
        }
        vtep_ns.ip(&["link", "set", "u0", "up"]);
    }
}

/// A host behind a VTEP on an underlay of `family`, linked to `port` in
/// `vtep_ns` by a veth (see `address_host`).
fn host(n: usize, vtep_ns: &Netns, port: &str, family: Family) -> Netns {
    let host = Netns::new();
    host.add_veth(port, vtep_ns).expect("host veth");
    address_host(&host, n, family);
    host
}

/// Host `n`'s eth0: hardware address `mac(n + 1)`, addressed
/// 198.18.0.(n+1)/24, with room for VXLAN's overhead on an underlay of
/// `family` (`Family::host_mtu`), and up.
fn address_host(host: &Netns, n: usize, family: Family) {
    host.ip(&[
        "link",
        "set",
        "eth0",
        "address",
        &mac_text(mac(n as u16 + 1)),
    ]);
    host.ip(&["link", "set", "eth0", "mtu", &family.host_mtu().to_string()]);
    host.ip(&[
        "addr",
        "add",
        &format!("198.18.0.{}/24", n + 1),
        "dev",
        "eth0",
    ]);
    host.ip(&["link", "set", "eth0", "up"]);
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The Linux side: vxlan device `vx0` of `vni` in bridge `br0` with the
/// host port `port`, VTEP `i` on an underlay of `family`; floods go to
/// `remotes` (head-end replication through all-zero fdb entries).
fn kernel_vtep(
    ns: &Netns,
    family: Family,
    i: usize,
    vni: u32,
    remotes: &[usize],
    port: &str,
    suffix: &str,
) {
    let (vx, br) = (format!("vx{suffix}"), format!("br{suffix}"));
    ns.ip(&[
        "link",
        "add",
        &vx,
        "type",
        "vxlan",
        "id",
        &vni.to_string(),
        "dstport",
        "4789",
        "local",
        &family.vtep(i),
        "dev",
        "u0",
    ]);
    for &r in remotes {
        let status = Command::new("ip")
            .args(["netns", "exec", &ns.name, "bridge", "fdb", "append"])
            .args(["00:00:00:00:00:00", "dev", &vx, "dst", &family.vtep(r)])
            .status()
            .unwrap();
        assert!(status.success(), "bridge fdb append");
    }
    ns.ip(&["link", "add", &br, "type", "bridge"]);
    ns.ip(&["link", "set", &vx, "master", &br]);
    ns.ip(&["link", "set", port, "master", &br]);
    for dev in [vx.as_str(), port, br.as_str()] {
        ns.ip(&["link", "set", dev, "up"]);
    }
}

/// An mpbridge VTEP: `vxlan:vx0` of `vni`, VTEP `i` on an underlay of
/// `family`, towards `remotes`, bridged with port `host_port` (`raw:p1`,
/// `tap:p1`).
fn mpbridge_vtep(
    ns: &Netns,
    family: Family,
    i: usize,
    vni: u32,
    remotes: &[usize],
    host_port: &str,
    extra: &[&str],
) -> Daemon {
    let mut vxlan = format!("--port=vxlan:vx0,vni={vni},local={}", family.vtep(i));
    for &r in remotes {
        vxlan += &format!(",remote={}", family.vtep(r));
    }
    let host_port = format!("--port={host_port}");
    let mut args = vec!["run", &host_port, &vxlan];
    args.extend_from_slice(extra);
    Daemon::start(ns, &args)
}

/// mpbridge as VTEP 0 (`vxlan:vx0`, VNI 42, flooding to VTEP 1) with
/// host 0 on raw port `p1` and a control socket; VTEP 1's namespace is
/// joined to the underlay but runs no VTEP, for a stand-in socket.
struct MpbridgeAndPeer {
    _daemon: Daemon,
    /// The control socket.
    socket: PathBuf,
    /// Host 0.
    host: Netns,
    /// VTEP 1's namespace.
    peer: Netns,
    _vtep: Netns,
    _underlay: Underlay,
}

impl MpbridgeAndPeer {
    fn new() -> MpbridgeAndPeer {
        let (underlay, a, b) = Underlay::with_two_vteps(Family::V4);
        let host = host(0, &a, "p1", Family::V4);
        let (socket, ctl) = netns::ctl_socket("mpbvx");
        let daemon = mpbridge_vtep(&a, Family::V4, 0, 42, &[1], "raw:p1", &[&ctl]);
        MpbridgeAndPeer {
            _daemon: daemon,
            socket,
            host,
            peer: b,
            _vtep: a,
            _underlay: underlay,
        }
    }

    /// The stats of the VXLAN port.
    fn port_stats(&self) -> serde_json::Value {
        port_stats(&self.socket, "vxlan:vx0")
    }
}

impl Drop for MpbridgeAndPeer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// mpbridge as VTEP A (0) with host 1 on port p1 of `kind` (a veth opened
/// raw, or a tap mpbridge makes), and the kernel's vxlan device as VTEP B
/// (1) with host 2, VNI 42, on one underlay of `family`: (underlay, A, B,
/// hosts, mpbridge), mpbridge last so that it stops first, before its
/// tap's namespace goes.
fn mpbridge_beside_kernel(
    family: Family,
    kind: PortKind,
    extra: &[&str],
) -> (Underlay, Netns, Netns, [Netns; 2], Daemon) {
    let (underlay, a, b) = Underlay::with_two_vteps(family);
    let h2 = host(1, &b, "p1", family);
    kernel_vtep(&b, family, 1, 42, &[0], "p1", "0");
    let (h1, daemon) = match kind {
        PortKind::Raw => {
            let h1 = host(0, &a, "p1", family);
            (h1, mpbridge_vtep(&a, family, 0, 42, &[1], "raw:p1", extra))
        }
        PortKind::Tap => {
            let daemon = mpbridge_vtep(&a, family, 0, 42, &[1], "tap:p1", extra);
            let h1 = Netns::new();
            a.ip(&["link", "set", "p1", "netns", &h1.name]);
            h1.ip(&["link", "set", "p1", "name", "eth0"]);
            address_host(&h1, 0, family);
            (h1, daemon)
        }
    };
    (underlay, a, b, [h1, h2], daemon)
}

/// What the kernel's vxlan device learned: `bridge fdb show dev DEV`.
fn kernel_fdb(ns: &Netns, dev: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns", "exec", &ns.name, "bridge", "fdb", "show", "dev", dev,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `host` knows of host `n`'s address: `ip neigh show 198.18.0.(n+1)`.
fn neighbour(host: &Netns, n: usize) -> String {
    let out = Command::new("ip")
        .args(["-n", &host.name, "neigh", "show"])
        .arg(format!("198.18.0.{}", n + 1))
        .args(["dev", "eth0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A file removed on drop, also when a test fails: a control socket that
/// a daemon killed rather than stopped left behind.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// mpbridge on VTEP A (host 1 on a port of `kind`), the kernel's vxlan
/// device on VTEP B, over an underlay of `family`: ARP and 8 MiB of TCP
/// each way between their hosts, byte for byte, with default offloads; the
/// kernel learns host 1 at A's address, and mpbridge host 2 at B's.
fn interoperates_with_the_kernel_vxlan_device(family: Family, kind: PortKind, lock: &str) {
    let test = format!("interoperates_with_the_kernel_vxlan_device ({family:?}, {kind:?}, {lock})");
    if !privileged(&test) || (family == Family::V6 && !ipv6_available(&test)) {
        return;
    }
    let (socket, ctl) = netns::ctl_socket("mpbvx");
    let _socket = RemovedOnDrop(socket.clone());
    let (_underlay, _a, b, hosts, _daemon) =
        mpbridge_beside_kernel(family, kind, &["--lock", lock, &ctl]);
    tcp_transfer(&hosts, 0, 1, 5001, 1);
    tcp_transfer(&hosts, 1, 0, 5002, 2);
    for (from, to) in [(0, 1), (1, 0)] {
        let resolved = neighbour(&hosts[from], to);
        assert!(
            resolved.contains(&mac_text(mac(to as u16 + 1))),
            "host {} did not resolve host {} by ARP: {resolved}",
            from + 1,
            to + 1
        );
    }
    let learned = kernel_fdb(&b, "vx0");
    let expected = format!("{} dst {}", mac_text(mac(1)), family.vtep(0));
    assert!(
        learned.contains(&expected),
        "the kernel did not learn host 1 at A: {learned}"
    );
    let shown = ctl_json(&socket, &["fdb", "show", "--json"]);
    let host2 = shown
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mac"] == mac_text(mac(2)).as_str())
        .unwrap_or_else(|| panic!("mpbridge did not learn host 2: {shown}"))
        .clone();
    assert_eq!(host2["port"], "vxlan:vx0", "{host2}");
    assert_eq!(host2["dst"], family.vtep(1), "host 2 not at B: {host2}");
}

macro_rules! interop_tests {
    ($($name:ident: $family:ident, $kind:ident, $lock:literal;)*) => {
        $(
            fn $name() {
                interoperates_with_the_kernel_vxlan_device(Family::$family, PortKind::$kind, $lock);
            }
        )*
    };
}

// Over IPv4 host 1 is on a veth; over IPv6 on a tap, whose 64 KiB TCP
// segments the port cuts before it sends them over the IPv6 socket.
interop_tests! {
    kernel_vxlan_interop_mutex: V4, Raw, "mutex";
    kernel_vxlan_interop_rwlock: V4, Raw, "rwlock";
    kernel_vxlan_interop_rmlock: V4, Raw, "rmlock";
    kernel_vxlan_interop_sharded: V4, Raw, "sharded";
    kernel_vxlan_interop_rcu: V4, Raw, "rcu";
    kernel_vxlan_interop_epoch: V4, Raw, "epoch";
    kernel_vxlan_ipv6_interop_mutex: V6, Tap, "mutex";
    kernel_vxlan_ipv6_interop_rwlock: V6, Tap, "rwlock";
    kernel_vxlan_ipv6_interop_rmlock: V6, Tap, "rmlock";
    kernel_vxlan_ipv6_interop_sharded: V6, Tap, "sharded";
    kernel_vxlan_ipv6_interop_rcu: V6, Tap, "rcu";
    kernel_vxlan_ipv6_interop_epoch: V6, Tap, "epoch";
}

/// Two VNIs between one pair of VTEPs (one UDP socket on each side) stay
/// two segments.
fn two_vnis_stay_apart() {
    if !privileged("two_vnis_stay_apart") {
        return;
    }
    let (_underlay, a, b) = Underlay::with_two_vteps(Family::V4);
    // Hosts 0 and 1 on A (VLAN 10 and 20), 2 and 3 on B (VNI 10 and 20).
    let hosts = [
        host(0, &a, "p1", Family::V4),
        host(1, &a, "p2", Family::V4),
        host(2, &b, "q1", Family::V4),
        host(3, &b, "q2", Family::V4),
    ];
    kernel_vtep(&b, Family::V4, 1, 10, &[0], "q1", "10");
    kernel_vtep(&b, Family::V4, 1, 20, &[0], "q2", "20");
    let _daemon = Daemon::start(
        &a,
        &[
            "run",
            "--vlan-filtering",
            "--port=raw:p1,access=10",
            "--port=raw:p2,access=20",
            &format!(
                "--port=vxlan:ten,vni=10,local={},remote={},access=10",
                vtep(0),
                vtep(1)
            ),
            &format!(
                "--port=vxlan:twenty,vni=20,local={},remote={},access=20",
                vtep(0),
                vtep(1)
            ),
        ],
    );
    let mut st: Vec<Station> = hosts.iter().map(|h| Station::on(h)).collect();
    settle_counts(&mut st);
    for (from, to) in [(0, 2), (1, 3), (2, 0), (3, 1)] {
        st[from].send(&test_frame(BROADCAST, mac(from as u16 + 1), from as u8, 60));
        let mut want = [0; 4];
        want[to] = 1;
        assert_eq!(settle_counts(&mut st), want, "broadcast from host {from}");
    }
    tcp_transfer(&hosts, 0, 2, 5003, 3);
}

/// Garbage on the UDP port is counted by kind and dropped; the port keeps
/// forwarding.
fn bad_datagrams_are_counted_and_dropped() {
    if !privileged("bad_datagrams_are_counted_and_dropped") {
        return;
    }
    let vteps = MpbridgeAndPeer::new();
    let frame = test_frame(BROADCAST, mac(9), 1, 60);
    let with_header = |h: [u8; 8]| {
        let mut d = h.to_vec();
        d.extend_from_slice(&frame);
        d
    };
    let datagrams = vec![
        vec![0x08, 0, 0],                          // short
        vec![],                                    // empty: short too
        with_header([0, 0, 0, 0, 0, 0, 42, 0]),    // no I flag
        with_header([0x08, 0, 0, 1, 0, 0, 42, 0]), // reserved bits
        with_header([0x08, 0, 0, 0, 0, 0, 43, 0]), // unknown VNI
        with_header([0x08, 0, 0, 0, 0, 0, 42, 0]), // good
    ];
    let target = format!("{}:4789", vtep(0));
    vteps.peer.run(move || {
        let udp = std::net::UdpSocket::bind("198.18.1.2:0").unwrap();
        for d in &datagrams {
            udp.send_to(d, &target).unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let port = vteps.port_stats();
    for (counter, n) in [
        ("short", 2),
        ("flags", 1),
        ("reserved", 1),
        ("unknown_vni", 1),
    ] {
        assert_eq!(port["vxlan"][counter], n, "{counter}: {port}");
    }
    assert_eq!(port["rx_frames"], 1, "{port}");
}

/// Three mpbridge VTEPs and one Linux vxlan host in a full mesh, one VNI:
/// a broadcast from any host arrives exactly once at every other host, TCP
/// works between every pair, and with one instance stopped the other
/// three still forward.
fn a_full_mesh_of_four_vteps() {
    if !privileged("a_full_mesh_of_four_vteps") {
        return;
    }
    let (_underlay, vteps) = Underlay::with_vteps(4);
    let hosts: Vec<Netns> = vteps
        .iter()
        .enumerate()
        .map(|(i, ns)| host(i, ns, "p1", Family::V4))
        .collect();
    let others = |i: usize| (0..4).filter(|&j| j != i).collect::<Vec<_>>();
    kernel_vtep(&vteps[3], Family::V4, 3, 7, &others(3), "p1", "0");
    let mut daemons: Vec<Option<Daemon>> = (0..3)
        .map(|i| {
            let remotes = others(i);
            Some(mpbridge_vtep(
                &vteps[i],
                Family::V4,
                i,
                7,
                &remotes,
                "raw:p1",
                &[],
            ))
        })
        .collect();
    let mut st: Vec<Station> = hosts.iter().map(|h| Station::on(h)).collect();
    settle_counts(&mut st);
    for from in 0..4 {
        st[from].send(&test_frame(BROADCAST, mac(from as u16 + 1), from as u8, 60));
        let mut want = [1; 4];
        want[from] = 0;
        assert_eq!(settle_counts(&mut st), want, "broadcast from host {from}");
    }
    let mut port = 5100;
    for from in 0..4 {
        for to in (from + 1)..4 {
            tcp_transfer(&hosts, from, to, port, port as u64);
            port += 1;
        }
    }
    // VTEP 1's mpbridge stops: the rest of the mesh carries on.
    daemons[1].take();
    // The transfers filled the stations' rings: empty them.
    st.iter_mut().for_each(Station::drain);
    for from in [0, 2, 3] {
        st[from].send(&test_frame(BROADCAST, mac(from as u16 + 1), 9, 60));
        let mut want = [1, 0, 1, 1];
        want[from] = 0;
        assert_eq!(
            settle_counts(&mut st),
            want,
            "broadcast from host {from}, VTEP 1 down"
        );
    }
    tcp_transfer(&hosts, 0, 3, port, 1);
    tcp_transfer(&hosts, 2, 0, port + 1, 2);
}

/// A UDP socket on VTEP `i`'s underlay address, port 4789, standing in
/// for a VTEP: what mpbridge sends there, and datagrams sent from there.
fn listener(ns: &Netns, i: usize) -> std::net::UdpSocket {
    let addr = format!("{}:4789", vtep(i));
    ns.run(move || {
        let socket = std::net::UdpSocket::bind(&addr).expect("bind 4789");
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        socket
    })
}

/// The datagrams waiting on `socket` (each read within 300 ms).
fn received(socket: &std::net::UdpSocket) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = socket.recv(&mut buf) {
        out.push(buf[..n].to_vec());
        if out.len() > 10_000 {
            break;
        }
    }
    out
}

/// The stats of port `name` from the bridge at `socket`.
fn port_stats(socket: &std::path::Path, name: &str) -> serde_json::Value {
    netns::port_stats(&ctl_json(socket, &["stats", "--json"]), name)
}

fn datagram(vni: u32, frame: &[u8]) -> Vec<u8> {
    let v = vni.to_be_bytes();
    let mut d = vec![0x08, 0, 0, 0, v[1], v[2], v[3], 0];
    d.extend_from_slice(frame);
    d
}

/// A static remote entry sends a station's frames to its VTEP only, and a
/// flood of random inner sources fills the remote table only up to the
/// learning limit.
fn static_remotes_and_the_learning_limit() {
    if !privileged("static_remotes_and_the_learning_limit") {
        return;
    }
    let (_underlay, vteps) = Underlay::with_vteps(3);
    let h1 = host(0, &vteps[0], "p1", Family::V4);
    let (socket, ctl) = netns::ctl_socket("mpbvx");
    let _daemon = mpbridge_vtep(
        &vteps[0],
        Family::V4,
        0,
        42,
        &[1],
        "raw:p1",
        &[&ctl, "--max-entries", "8"],
    );
    let (b, c) = (listener(&vteps[1], 1), listener(&vteps[2], 2));
    let far = [0x02, 0x42, 0, 0, 0x0c, 0x0c];
    netns::ctl_ok(
        &socket,
        &[
            "fdb",
            "add",
            &mac_text(far),
            "port",
            "vxlan:vx0",
            "dst",
            &vtep(2),
        ],
    );
    let (code, _, err) = netns::ctl(
        &socket,
        &[
            "fdb",
            "add",
            &mac_text(far),
            "port",
            "raw:p1",
            "dst",
            &vtep(2),
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("not one"), "{err}");
    for (dst, expected) in [("239.1.1.1", "not unicast"), ("0.0.0.0", "own address")] {
        let (code, _, err) = netns::ctl(
            &socket,
            &[
                "fdb",
                "add",
                &mac_text(far),
                "port",
                "vxlan:vx0",
                "dst",
                dst,
            ],
        );
        assert_ne!(code, 0, "dst {dst}");
        assert!(err.contains(expected), "{dst}: {err}");
    }
    let shown = ctl_json(&socket, &["fdb", "show", "--json"]);
    let entry = shown
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mac"] == mac_text(far).as_str())
        .unwrap_or_else(|| panic!("no static entry in {shown}"))
        .clone();
    assert_eq!(entry["dst"], vtep(2), "{entry}");
    assert_eq!(entry["state"], "static", "{entry}");
    let mut st = Station::on(&h1);
    let unicast = test_frame(far, mac(1), 1, 60);
    st.send(&unicast);
    std::thread::sleep(Duration::from_millis(200));
    let at_c = received(&c);
    assert_eq!(at_c, [datagram(42, &unicast)], "C, the static entry's VTEP");
    assert!(
        received(&b).iter().all(|d| d[8..] != unicast[..]),
        "the unicast went to the flood list too"
    );
    // 200 inner sources from B: the remote table stops at the limit.
    let flood: Vec<Vec<u8>> = (0..200u16)
        .map(|n| {
            datagram(
                42,
                &test_frame(
                    BROADCAST,
                    [0x02, 0x99, 0, 0, (n >> 8) as u8, n as u8],
                    2,
                    60,
                ),
            )
        })
        .collect();
    let target = format!("{}:4789", vtep(0));
    let sender = b;
    vteps[1].run(move || {
        for d in &flood {
            sender.send_to(d, &target).unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let port = port_stats(&socket, "vxlan:vx0");
    assert!(port["vxlan"]["remotes"].as_u64().unwrap() <= 8, "{port}");
    assert!(
        port["vxlan"]["remotes_refused"].as_u64().unwrap() > 0,
        "{port}"
    );
    assert_eq!(port["rx_frames"], 200, "{port}");
    let _ = std::fs::remove_file(PathBuf::from(&socket));
}

/// With VLAN filtering, a VXLAN port in access VLAN 10 keeps its stations'
/// VTEPs in their VLAN-10 entries: a static entry's `dst` and a station
/// learned from a VTEP both steer unicast to that VTEP alone.
fn vteps_of_an_access_vlan_port() {
    if !privileged("vteps_of_an_access_vlan_port") {
        return;
    }
    let (_underlay, vteps) = Underlay::with_vteps(3);
    let h1 = host(0, &vteps[0], "p1", Family::V4);
    let (socket, ctl) = netns::ctl_socket("mpbvxvlan");
    let vxlan = format!(
        "--port=vxlan:vx0,vni=42,local={},remote={},access=10",
        vtep(0),
        vtep(1)
    );
    let _daemon = Daemon::start(
        &vteps[0],
        &[
            "run",
            "--vlan-filtering",
            "--port=raw:p1,access=10",
            &vxlan,
            &ctl,
        ],
    );
    let (b, c) = (listener(&vteps[1], 1), listener(&vteps[2], 2));
    let far = [0x02, 0x42, 0, 0, 0x0a, 0x0a];
    netns::ctl_ok(
        &socket,
        &[
            "fdb",
            "add",
            &mac_text(far),
            "port",
            "vxlan:vx0",
            "vlan",
            "10",
            "dst",
            &vtep(2),
        ],
    );
    let mut st = Station::on(&h1);
    let unicast = test_frame(far, mac(1), 1, 60);
    st.send(&unicast);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        received(&c),
        [datagram(42, &unicast)],
        "C, the static entry's VTEP"
    );
    assert!(
        received(&b).iter().all(|d| d[8..] != unicast[..]),
        "the unicast to a static VTEP went to the flood list too"
    );
    // A station heard from C (untagged inside, VLAN 10 on this port) is
    // learned with C as its VTEP.
    let behind_c = [0x02, 0x42, 0, 0, 0x0c, 0x01];
    let hello = datagram(42, &test_frame(BROADCAST, behind_c, 3, 60));
    let target = format!("{}:4789", vtep(0));
    vteps[2].run(move || {
        let socket = std::net::UdpSocket::bind(format!("{}:0", vtep(2))).unwrap();
        socket.send_to(&hello, &target).unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    let shown = ctl_json(&socket, &["fdb", "show", "--json"]);
    let entry = shown
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mac"] == mac_text(behind_c).as_str())
        .unwrap_or_else(|| panic!("the station behind C not learned: {shown}"))
        .clone();
    assert_eq!(
        (&entry["vlan"], &entry["dst"]),
        (&10.into(), &vtep(2).into()),
        "{entry}"
    );
    received(&b);
    received(&c);
    let reply = test_frame(behind_c, mac(1), 4, 60);
    st.send(&reply);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(received(&c), [datagram(42, &reply)], "C, the learned VTEP");
    assert!(
        received(&b).iter().all(|d| d[8..] != reply[..]),
        "the unicast to a learned VTEP went to the flood list too"
    );
    let port = port_stats(&socket, "vxlan:vx0");
    assert_eq!(port["vxlan"]["remotes"], 2, "{port}");
    let _ = std::fs::remove_file(PathBuf::from(&socket));
}

/// With learning off, only listed VTEPs are heard.
fn learning_off_hears_listed_vteps_only() {
    if !privileged("learning_off_hears_listed_vteps_only") {
        return;
    }
    let (_underlay, vteps) = Underlay::with_vteps(3);
    let h1 = host(0, &vteps[0], "p1", Family::V4);
    let (socket, ctl) = netns::ctl_socket("mpbvx");
    let vxlan = format!(
        "--port=vxlan:vx0,vni=42,local={},remote={},learning=off",
        vtep(0),
        vtep(1)
    );
    let _daemon = Daemon::start(&vteps[0], &["run", "--port=raw:p1", &vxlan, &ctl]);
    let mut st = Station::on(&h1);
    settle_counts(std::slice::from_mut(&mut st));
    let (b, c) = (listener(&vteps[1], 1), listener(&vteps[2], 2));
    let target = format!("{}:4789", vtep(0));
    for (ns, socket, tag) in [(&vteps[1], b, 1u8), (&vteps[2], c, 2u8)] {
        let d = datagram(
            42,
            &test_frame(BROADCAST, mac(10 + u16::from(tag)), tag, 60),
        );
        let target = target.clone();
        ns.run(move || {
            socket.send_to(&d, &target).unwrap();
        });
    }
    std::thread::sleep(Duration::from_millis(250));
    let got = st.collect(Duration::from_millis(1));
    assert_eq!(got.len(), 1, "only the listed VTEP's frame: {got:02x?}");
    // The payload is filled with the sender's tag.
    assert_eq!(got[0][14], 1, "the frame from the listed VTEP");
    let port = port_stats(&socket, "vxlan:vx0");
    assert_eq!(port["vxlan"]["unlisted_source"], 1, "{port}");
    let _ = std::fs::remove_file(PathBuf::from(&socket));
}

/// Two mpbridge VTEPs, each with its host on a tap (virtio-net headers:
/// the hosts' TCP hands over 64 KiB segments) and two workers (two sockets
/// in a SO_REUSEPORT group): 8 MiB of TCP each way, byte for byte.
fn tcp_from_taps_across_two_mpbridge_vteps() {
    if !privileged("tcp_from_taps_across_two_mpbridge_vteps") {
        return;
    }
    let (_underlay, a, b) = Underlay::with_two_vteps(Family::V4);
    let hosts = [Netns::new(), Netns::new()];
    let mut daemons = Vec::new();
    for (i, (vtep_ns, host)) in [(&a, &hosts[0]), (&b, &hosts[1])].into_iter().enumerate() {
        let segment = format!(
            "--port=vxlan:seg,vni=42,local={},remote={}",
            vtep(i),
            vtep(1 - i)
        );
        daemons.push(Daemon::start(
            vtep_ns,
            &["run", "--workers", "2", "--port=tap:t0", &segment],
        ));
        vtep_ns.ip(&["link", "set", "t0", "netns", &host.name]);
        host.ip(&["link", "set", "t0", "name", "eth0"]);
        address_host(host, i, Family::V4);
    }
    tcp_transfer(&hosts, 0, 1, 5201, 5);
    tcp_transfer(&hosts, 1, 0, 5202, 6);
}

/// A frame too big for the underlay after encapsulation is counted and
/// dropped, never sent in fragments.
fn frames_too_big_for_the_underlay_are_dropped_and_counted() {
    if !privileged("frames_too_big_for_the_underlay_are_dropped_and_counted") {
        return;
    }
    let vteps = MpbridgeAndPeer::new();
    // A host with the underlay's MTU, not 50 bytes less.
    vteps.host.ip(&["link", "set", "eth0", "mtu", "1500"]);
    let far = listener(&vteps.peer, 1);
    let mut st = Station::on(&vteps.host);
    st.send(&test_frame(BROADCAST, mac(1), 1, 1400));
    st.send(&test_frame(BROADCAST, mac(1), 2, 1500));
    std::thread::sleep(Duration::from_millis(250));
    let got = received(&far);
    assert_eq!(
        got.len(),
        1,
        "only the frame that fits: {} datagrams",
        got.len()
    );
    assert_eq!(got[0].len(), 8 + 1400, "sent whole, not in fragments");
    let port = vteps.port_stats();
    assert_eq!(port["tx_errors"], 1, "{port}");
    assert_eq!(port["tx_frames"], 1, "{port}");
}

/// The underlay going away costs no CPU: sends fail and are counted, the
/// bridge keeps forwarding locally, and it comes back with the underlay.
fn an_underlay_gone_costs_no_cpu() {
    if !privileged("an_underlay_gone_costs_no_cpu") {
        return;
    }
    let (_underlay, a, _b, hosts, daemon) = mpbridge_beside_kernel(Family::V4, PortKind::Raw, &[]);
    let pid = daemon.child.id();
    tcp_transfer(&hosts, 0, 1, 5301, 1);
    a.ip(&["link", "set", "u0", "down"]);
    // Host 1 keeps asking for host 2 (ARP) while the underlay is down.
    let mut st = Station::on(&hosts[0]);
    for n in 0..20 {
        st.send(&test_frame(BROADCAST, mac(1), n, 60));
    }
    let used = netns::cpu_over(pid, Duration::from_secs(2));
    eprintln!("CPU over 2 s: {used:.3} s");
    assert!(used < 0.04, "underlay down: {used:.2} s of CPU in 2 s");
    a.ip(&["link", "set", "u0", "up"]);
    tcp_transfer(&hosts, 1, 0, 5302, 2);
}

/// Sets an integer socket option on `socket` (UDP_SEGMENT, SO_RCVBUFFORCE).
fn set_int_option(socket: &std::net::UdpSocket, level: i32, name: i32, value: i32) {
    use std::os::fd::AsRawFd;
    #[allow(unsafe_code)]
    // SAFETY: the option value is a live i32 of the length given.
    let ret = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(ret, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// The UDP_SEGMENT socket option (linux/udp.h): sends are cut into
/// datagrams of this size (UDP GSO).
const UDP_SEGMENT: i32 = 103;

/// Trains of datagrams (UDP GSO sends, which the underlay carries whole
/// and mpbridge's socket takes whole, with UDP GRO) arrive as their
/// datagrams, in order, even when a train does not fit the batch left; a
/// short datagram at the end of a train is counted. Going out, a burst of
/// frames to one VTEP leaves as one datagram per frame, in order, whatever
/// mpbridge joins into one send.
fn datagram_trains_both_ways() {
    if !privileged("datagram_trains_both_ways") {
        return;
    }
    let vteps = MpbridgeAndPeer::new();
    let mut st = Station::on(&vteps.host);
    settle_counts(std::slice::from_mut(&mut st));
    let peer = listener(&vteps.peer, 1);
    set_int_option(&peer, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20);

    // In: five trains of 50 datagrams (a batch holds 128: one that finds
    // another waiting is taken in part), then one of nine and a short one.
    let frames: Vec<Vec<u8>> = (0..259)
        .map(|k| test_frame(BROADCAST, mac(20), k as u8, 60))
        .collect();
    let size = 8 + 60;
    let mut trains: Vec<Vec<u8>> = frames
        .chunks(50)
        .map(|chunk| chunk.iter().flat_map(|f| datagram(42, f)).collect())
        .collect();
    trains
        .last_mut()
        .unwrap()
        .extend_from_slice(&[0x08, 0, 0, 0]);
    let target = format!("{}:4789", vtep(0));
    let b = &vteps.peer;
    let sender = b.run(move || std::net::UdpSocket::bind(format!("{}:0", vtep(1))).unwrap());
    set_int_option(&sender, libc::SOL_UDP, UDP_SEGMENT, size);
    let sender = b.run(move || {
        for train in &trains {
            sender.send_to(train, &target).expect("a train");
        }
        sender
    });
    drop(sender);
    let got = st.collect(Duration::from_millis(500));
    assert_eq!(got.len(), frames.len(), "frames delivered from the trains");
    assert!(got == frames, "the trains' frames, in order");
    let port = vteps.port_stats();
    assert_eq!(port["vxlan"]["short"], 1, "{port}");
    assert_eq!(port["rx_frames"], frames.len(), "{port}");

    // Out: equal frames, then longer ones, then equal again.
    let _ = received(&peer);
    let out: Vec<Vec<u8>> = (0..200)
        .map(|k| {
            let len = if (100..150).contains(&k) { 100 } else { 60 };
            test_frame(BROADCAST, mac(1), k as u8, len)
        })
        .collect();
    assert_eq!(st.send_many(&out), out.len(), "the station sent the burst");
    let datagrams = received(&peer);
    let expected: Vec<Vec<u8>> = out.iter().map(|f| datagram(42, f)).collect();
    assert_eq!(datagrams.len(), expected.len(), "one datagram per frame");
    assert!(
        datagrams == expected,
        "each frame in its datagram, in order"
    );
}

/// An IPv4 UDP frame of flow `flow` (its UDP source port), broadcast.
fn udp_flow_frame(flow: u16) -> Vec<u8> {
    let mut frame = bridge::wire::FrameSpec::new(
        bridge::wire::MacAddr(BROADCAST),
        bridge::wire::MacAddr(mac(100)),
    )
    .len(60)
    .build();
    let ip = &mut frame[14..34];
    ip.fill(0);
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&46u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
    // A valid header checksum: the kernel bridge checks it where
    // br_netfilter is loaded.
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    frame[34..36].copy_from_slice(&(40_000 + flow).to_be_bytes());
    frame[36..38].copy_from_slice(&9u16.to_be_bytes());
    frame[38..40].copy_from_slice(&26u16.to_be_bytes());
    frame
}

/// Each inner flow leaves from one outer UDP source port, and flows spread
/// over several (RFC 7348's entropy, which lets the receiving VTEP spread
/// them over its cores): from mpbridge as from the kernel's vxlan device.
fn flows_spread_over_outer_source_ports() {
    if !privileged("flows_spread_over_outer_source_ports") {
        return;
    }
    let (_underlay, vteps) = Underlay::with_vteps(3);
    let behind_mpbridge = host(0, &vteps[0], "p1", Family::V4);
    let behind_kernel = host(2, &vteps[2], "p1", Family::V4);
    let _daemon = mpbridge_vtep(&vteps[0], Family::V4, 0, 42, &[1], "raw:p1", &[]);
    kernel_vtep(&vteps[2], Family::V4, 2, 42, &[1], "p1", "0");
    let peer = listener(&vteps[1], 1);
    set_int_option(&peer, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20);
    let frames: Vec<Vec<u8>> = (0..32).map(udp_flow_frame).collect();
    for (who, host) in [("mpbridge", &behind_mpbridge), ("kernel", &behind_kernel)] {
        let mut st = Station::on(host);
        let _ = received_from(&peer);
        assert_eq!(st.send_many(&frames), frames.len(), "{who}: sent");
        // Inner UDP source port (the flow) -> outer source ports.
        let mut ports: std::collections::BTreeMap<u16, std::collections::BTreeSet<u16>> =
            Default::default();
        for (from, datagram) in received_from(&peer) {
            let inner = &datagram[8..];
            if frames.iter().any(|f| f == inner) {
                let flow = u16::from_be_bytes([inner[34], inner[35]]);
                ports.entry(flow).or_default().insert(from.port());
            }
        }
        assert_eq!(ports.len(), frames.len(), "{who}: every flow arrived");
        for (flow, outer) in &ports {
            assert_eq!(outer.len(), 1, "{who}: flow {flow} left from {outer:?}");
        }
        let distinct: std::collections::BTreeSet<u16> = ports.values().flatten().copied().collect();
        assert!(
            distinct.len() >= 2,
            "{who}: 32 flows from one source port {distinct:?}"
        );
        eprintln!("{who}: 32 flows over {} outer source ports", distinct.len());
    }
}

/// The datagrams waiting on `socket` and their senders (each read within
/// 300 ms).
fn received_from(socket: &std::net::UdpSocket) -> Vec<(std::net::SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok((n, from)) = socket.recv_from(&mut buf) {
        out.push((from, buf[..n].to_vec()));
        if out.len() > 10_000 {
            break;
        }
    }
    out
}

/// Waits (at most 10 s) until no IPv6 address of `dev` in `ns` is
/// tentative: duplicate address detection has finished.
fn wait_for_dad(ns: &Netns, dev: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("ip")
            .args([
                "-n",
                &ns.name,
                "-6",
                "addr",
                "show",
                "dev",
                dev,
                "tentative",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "ip addr show");
        if out.stdout.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{dev} still tentative after 10 s: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A local IPv6 address still tentative (its link has no carrier, so
/// duplicate address detection cannot finish) is refused with that reason,
/// not as an address the host lacks; once detection has finished, the
/// port opens.
fn a_tentative_ipv6_address_is_refused_with_the_reason() {
    let test = "a_tentative_ipv6_address_is_refused_with_the_reason";
    if !privileged(test) || !ipv6_available(test) {
        return;
    }
    let ns = Netns::new();
    // A veth whose peer stays down: no carrier, no detection.
    ns.ip(&["link", "add", "u0", "type", "veth", "peer", "name", "u1"]);
    ns.sysctl("net/ipv6/conf/u0/disable_ipv6", "0")
        .expect("cannot turn IPv6 on for u0");
    ns.ip(&["addr", "add", "2001:2::1/64", "dev", "u0"]);
    ns.ip(&["link", "set", "u0", "up"]);
    let args = [
        "run",
        "--port=tap:t0",
        "--port=vxlan:vx0,vni=42,local=2001:2::1",
    ];
    let (status, stderr) = netns::run_to_exit(Some(&ns), &args, Duration::from_secs(10));
    assert!(
        !status.success(),
        "started on a tentative address: {stderr}"
    );
    assert!(
        stderr.contains("2001:2::1 is not usable: IPv6 duplicate address detection"),
        "{stderr}"
    );
    // The peer up: detection runs (a second) and the address is usable.
    ns.ip(&["link", "set", "u1", "up"]);
    wait_for_dad(&ns, "u0");
    let daemon = Daemon::start(&ns, &args);
    let (status, _) = daemon.stop(Duration::from_secs(5));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

lab::test_main! {
    privileged: [
        kernel_vxlan_interop_mutex,
        kernel_vxlan_interop_rwlock,
        kernel_vxlan_interop_rmlock,
        kernel_vxlan_interop_sharded,
        kernel_vxlan_interop_rcu,
        kernel_vxlan_interop_epoch,
        kernel_vxlan_ipv6_interop_mutex,
        kernel_vxlan_ipv6_interop_rwlock,
        kernel_vxlan_ipv6_interop_rmlock,
        kernel_vxlan_ipv6_interop_sharded,
        kernel_vxlan_ipv6_interop_rcu,
        kernel_vxlan_ipv6_interop_epoch,
        two_vnis_stay_apart,
        bad_datagrams_are_counted_and_dropped,
        a_full_mesh_of_four_vteps,
        static_remotes_and_the_learning_limit,
        vteps_of_an_access_vlan_port,
        learning_off_hears_listed_vteps_only,
        tcp_from_taps_across_two_mpbridge_vteps,
        frames_too_big_for_the_underlay_are_dropped_and_counted,
        an_underlay_gone_costs_no_cpu,
        datagram_trains_both_ways,
        flows_spread_over_outer_source_ports,
        a_tentative_ipv6_address_is_refused_with_the_reason,
    ],
    plain: [],
}
