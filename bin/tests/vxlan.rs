//! VXLAN ports against the Linux kernel's vxlan device: namespaces as
//! hosts and VTEPs, veths as the underlay (198.18.1.0/24) and as the
//! hosts' links (198.18.0.0/24), the interfaces' default offloads on.
//! Needs root; skips with a reason otherwise (fails under
//! MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use netns::{
    ctl_json, mac, privileged, settle_counts, tcp_transfer, test_frame, Daemon, Netns, Station,
    BROADCAST,
};

/// The underlay address of VTEP `i`.
fn vtep(i: usize) -> String {
    format!("198.18.1.{}", i + 1)
}

/// An underlay: a namespace with a kernel bridge that VTEP namespaces
/// join, each through a veth `u0` addressed `vtep(i)/24`.
struct Underlay {
    ns: Netns,
}

impl Underlay {
    fn new() -> Underlay {
        let ns = Netns::new();
        ns.ip(&["link", "add", "br0", "type", "bridge"]);
        ns.ip(&["link", "set", "br0", "up"]);
        Underlay { ns }
    }

    /// An underlay and VTEPs 0 and 1 joined to it.
    fn with_two_vteps() -> (Underlay, Netns, Netns) {
        let underlay = Underlay::new();
        let (a, b) = (Netns::new(), Netns::new());
        underlay.join(&a, 0);
        underlay.join(&b, 1);
        (underlay, a, b)
    }

    /// An underlay and `n` VTEP namespaces joined to it, VTEP 0 to n - 1.
    fn with_vteps(n: usize) -> (Underlay, Vec<Netns>) {
        let underlay = Underlay::new();
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
        vtep_ns.ip(&["addr", "add", &format!("{}/24", vtep(i)), "dev", "u0"]);
        vtep_ns.ip(&["link", "set", "u0", "up"]);
    }
}

/// A host behind a VTEP: eth0 addressed 198.18.0.(n+1)/24 with room for
/// the 50 bytes of VXLAN over IPv4 in a 1500-byte underlay.
fn host(n: usize, vtep_ns: &Netns, port: &str) -> Netns {
    let host = Netns::new();
    host.add_veth(port, vtep_ns).expect("host veth");
    host.ip(&[
        "link",
        "set",
        "eth0",
        "address",
        &mac_text(mac(n as u16 + 1)),
    ]);
    address_host(&host, n);
    host
}

/// Host `n`'s eth0: addressed 198.18.0.(n+1)/24, with room for the 50
/// bytes of VXLAN over IPv4 in a 1500-byte underlay, and up.
fn address_host(host: &Netns, n: usize) {
    host.ip(&["link", "set", "eth0", "mtu", "1450"]);
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
/// host port `port`; floods go to `remotes` (head-end replication through
/// all-zero fdb entries).
fn kernel_vtep(ns: &Netns, i: usize, vni: u32, remotes: &[usize], port: &str, suffix: &str) {
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
        &vtep(i),
        "dev",
        "u0",
    ]);
    for &r in remotes {
        let status = Command::new("ip")
            .args(["netns", "exec", &ns.name, "bridge", "fdb", "append"])
            .args(["00:00:00:00:00:00", "dev", &vx, "dst", &vtep(r)])
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

/// An mpbridge VTEP: `vxlan:vx0` of `vni` towards `remotes`, bridged with
/// raw port `p1`.
fn mpbridge_vtep(ns: &Netns, i: usize, vni: u32, remotes: &[usize], extra: &[&str]) -> Daemon {
    let mut vxlan = format!("--port=vxlan:vx0,vni={vni},local={}", vtep(i));
    for &r in remotes {
        vxlan += &format!(",remote={}", vtep(r));
    }
    let mut args = vec!["run", "--port=raw:p1", &vxlan];
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
        let (underlay, a, b) = Underlay::with_two_vteps();
        let host = host(0, &a, "p1");
        let (socket, ctl) = netns::ctl_socket("mpbvx");
        let daemon = mpbridge_vtep(&a, 0, 42, &[1], &[&ctl]);
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

/// mpbridge as VTEP A (0) with host 1 on raw port p1, and the kernel's
/// vxlan device as VTEP B (1) with host 2, VNI 42, on one underlay:
/// (underlay, A, B, hosts, mpbridge).
fn mpbridge_beside_kernel(extra: &[&str]) -> (Underlay, Netns, Netns, [Netns; 2], Daemon) {
    let (underlay, a, b) = Underlay::with_two_vteps();
    let h1 = host(0, &a, "p1");
    let h2 = host(1, &b, "p1");
    kernel_vtep(&b, 1, 42, &[0], "p1", "0");
    let daemon = mpbridge_vtep(&a, 0, 42, &[1], extra);
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

/// mpbridge on VTEP A, the kernel's vxlan device on VTEP B: ARP and 8 MiB
/// of TCP each way between their hosts, byte for byte, with default
/// offloads; the kernel learns host 1 at A's address.
fn interoperates_with_the_kernel_vxlan_device(lock: &str) {
    if !privileged("interoperates_with_the_kernel_vxlan_device") {
        return;
    }
    let (_underlay, _a, b, hosts, _daemon) = mpbridge_beside_kernel(&["--lock", lock]);
    tcp_transfer(&hosts, 0, 1, 5001, 1);
    tcp_transfer(&hosts, 1, 0, 5002, 2);
    let learned = kernel_fdb(&b, "vx0");
    let expected = format!("{} dst {}", mac_text(mac(1)), vtep(0));
    assert!(
        learned.contains(&expected),
        "the kernel did not learn host 1 at A: {learned}"
    );
}

macro_rules! interop_tests {
    ($($name:ident: $lock:literal;)*) => {
        $( fn $name() { interoperates_with_the_kernel_vxlan_device($lock); } )*
    };
}

interop_tests! {
    kernel_vxlan_interop_mutex: "mutex";
    kernel_vxlan_interop_rwlock: "rwlock";
    kernel_vxlan_interop_rmlock: "rmlock";
    kernel_vxlan_interop_sharded: "sharded";
    kernel_vxlan_interop_rcu: "rcu";
    kernel_vxlan_interop_epoch: "epoch";
}

/// Two VNIs between one pair of VTEPs (one UDP socket on each side) stay
/// two segments.
fn two_vnis_stay_apart() {
    if !privileged("two_vnis_stay_apart") {
        return;
    }
    let (_underlay, a, b) = Underlay::with_two_vteps();
    // Hosts 0 and 1 on A (VLAN 10 and 20), 2 and 3 on B (VNI 10 and 20).
    let hosts = [
        host(0, &a, "p1"),
        host(1, &a, "p2"),
        host(2, &b, "q1"),
        host(3, &b, "q2"),
    ];
    kernel_vtep(&b, 1, 10, &[0], "q1", "10");
    kernel_vtep(&b, 1, 20, &[0], "q2", "20");
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
        .map(|(i, ns)| host(i, ns, "p1"))
        .collect();
    let others = |i: usize| (0..4).filter(|&j| j != i).collect::<Vec<_>>();
    kernel_vtep(&vteps[3], 3, 7, &others(3), "p1", "0");
    let mut daemons: Vec<Option<Daemon>> = (0..3)
        .map(|i| Some(mpbridge_vtep(&vteps[i], i, 7, &others(i), &[])))
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
    let h1 = host(0, &vteps[0], "p1");
    let (socket, ctl) = netns::ctl_socket("mpbvx");
    let _daemon = mpbridge_vtep(&vteps[0], 0, 42, &[1], &[&ctl, "--max-entries", "8"]);
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

/// With learning off, only listed VTEPs are heard.
fn learning_off_hears_listed_vteps_only() {
    if !privileged("learning_off_hears_listed_vteps_only") {
        return;
    }
    let (_underlay, vteps) = Underlay::with_vteps(3);
    let h1 = host(0, &vteps[0], "p1");
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
    let (_underlay, a, b) = Underlay::with_two_vteps();
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
        address_host(host, i);
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
    let (_underlay, a, _b, hosts, daemon) = mpbridge_beside_kernel(&[]);
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

    // In: five trains of 50 datagrams (a batch holds 64: one that finds
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
    let behind_mpbridge = host(0, &vteps[0], "p1");
    let behind_kernel = host(2, &vteps[2], "p1");
    let _daemon = mpbridge_vtep(&vteps[0], 0, 42, &[1], &[]);
    kernel_vtep(&vteps[2], 2, 42, &[1], "p1", "0");
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

lab::test_main! {
    privileged: [
        kernel_vxlan_interop_mutex,
        kernel_vxlan_interop_rwlock,
        kernel_vxlan_interop_rmlock,
        kernel_vxlan_interop_sharded,
        kernel_vxlan_interop_rcu,
        kernel_vxlan_interop_epoch,
        two_vnis_stay_apart,
        bad_datagrams_are_counted_and_dropped,
        a_full_mesh_of_four_vteps,
        static_remotes_and_the_learning_limit,
        learning_off_hears_listed_vteps_only,
        tcp_from_taps_across_two_mpbridge_vteps,
        frames_too_big_for_the_underlay_are_dropped_and_counted,
        an_underlay_gone_costs_no_cpu,
        datagram_trains_both_ways,
        flows_spread_over_outer_source_ports,
    ],
    plain: [],
}
