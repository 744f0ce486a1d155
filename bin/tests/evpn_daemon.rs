//! mpbridge as an EVPN VTEP (`vxlan:...,evpn=on`) beside a Linux VTEP
//! (bridge, vxlan on 4789 `nolearning`, learning off on its port), each
//! with FRR (zebra and bgpd, iBGP), a host behind each: routes both ways
//! and the flood list, the hosts talk; the port removed, `fdb del`, a
//! station moving to the other VTEP and back, FRR started late, mpbridge
//! killed and started again; bad input refused with exit 2; three VTEPs,
//! two VNIs; and the first scenario with a Linux VTEP in mpbridge's
//! place, the reference. Needs root and FRR; skips with a reason otherwise
//! (fails under MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use lab::frr::{bridge_fdb, evpn_config};
use netns::{ctl, ctl_json, ctl_ok, port_stats, privileged, Daemon, Netns, Topology};
use serde_json::Value;

/// How long BGP may take to bring a route across (sessions open in
/// seconds with FRR's datacenter defaults; a withdrawal and a new
/// sequence number take a round of updates).
const WAIT: Duration = Duration::from_secs(60);

/// The VXLAN port of every scenario.
const PORT: &str = "vxlan:seg,vni=42,local=198.19.0.1,evpn=on";

/// Whether the test can run here; prints why not.
fn can_run(test: &str) -> bool {
    privileged(test) && lab::installed(test, &format!("{}/zebra", lab::FRR_DIR), "frr")
}

/// Two VTEPs over a veth underlay (A 198.19.0.1, mpbridge's; B 198.19.0.2,
/// Linux's) and a host behind each (198.18.0.1 on A's raw port `ha0`,
/// 198.18.0.2 on B's bridge). Fields drop in order: mpbridge and FRR
/// first, then the namespaces.
struct Fabric {
    daemon: Option<Daemon>,
    frr: Vec<lab::Frr>,
    name: String,
    socket: PathBuf,
    hosts: [Netns; 2],
    a: Netns,
    b: Netns,
}

impl Fabric {
    fn new() -> Fabric {
        let a = Netns::new();
        let b = Netns::new();
        let hosts = [Netns::new(), Netns::new()];
        a.ip(&[
            "link", "add", "u0", "type", "veth", "peer", "name", "u1", "netns", &b.name,
        ]);
        a.ip(&["addr", "add", "198.19.0.1/24", "dev", "u0"]);
        a.ip(&["link", "set", "u0", "up"]);
        b.ip(&["addr", "add", "198.19.0.2/24", "dev", "u1"]);
        b.ip(&["link", "set", "u1", "up"]);
        for (i, (vtep, port)) in [(&a, "ha0"), (&b, "hb0")].into_iter().enumerate() {
            vtep.ip(&[
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "h1",
                "netns",
                &hosts[i].name,
            ]);
            vtep.ip(&["link", "set", port, "mtu", "1450", "up"]);
            let addr = format!("{}/24", Topology::addr(i));
            hosts[i].ip(&["addr", "add", &addr, "dev", "h1"]);
            hosts[i].ip(&["link", "set", "h1", "mtu", "1450", "up"]);
        }
        lab::frr::linux_vtep(&b.name, "br0", "vx42", 42, "198.19.0.2", "hb0")
            .expect("the Linux VTEP");
        let name = lab::unique("ev");
        Fabric {
            daemon: None,
            frr: Vec::new(),
            socket: PathBuf::from(format!("/run/mpbridge/{name}.sock")),
            name,
            hosts,
            a,
            b,
        }
    }

    /// Starts mpbridge in A: the host's raw port, a tap (so that the VXLAN
    /// port may be removed), `vxlan`, and `extra` options.
    fn start_bridge(&mut self, lock: &str, vxlan: &str, extra: &[&str]) {
        let name = format!("--name={}", self.name);
        let mut args = vec![
            "run", &name, "--lock", lock, "--port", "raw:ha0", "--port", "tap:t0", "--port", vxlan,
        ];
        args.extend(extra);
        self.daemon = Some(Daemon::start(&self.a, &args));
    }

    /// Host `i` sends nothing the test does not make it send: its
    /// neighbour entry for the other host is permanent (no ARP), and what
    /// was in flight has arrived.
    fn quiet(&self) {
        let macs = [self.mac(0), self.mac(1)];
        for i in 0..2 {
            let peer = Topology::addr(1 - i).to_string();
            self.hosts[i].ip(&[
                "neigh",
                "replace",
                &peer,
                "lladdr",
                &macs[1 - i],
                "nud",
                "permanent",
                "dev",
                "h1",
            ]);
        }
        thread::sleep(Duration::from_secs(1));
    }

    fn start_frr(&mut self) {
        for (ns, id, peer) in [
            (&self.a, "198.19.0.1", "198.19.0.2"),
            (&self.b, "198.19.0.2", "198.19.0.1"),
        ] {
            self.frr
                .push(lab::Frr::start(&ns.name, &evpn_config(id, &[peer])).expect("FRR"));
        }
    }

    /// Host `i`'s MAC.
    fn mac(&self, i: usize) -> String {
        mac_string(netns::link_mac(&self.hosts[i], "h1"))
    }

    /// Waits (at most `WAIT`) until `done` holds, each host sending to the
    /// other meanwhile (so that its VTEP hears it); panics with `what`, the
    /// bridge's state and FRR's logs otherwise.
    fn wait_for(&self, what: &str, mut done: impl FnMut(&Fabric) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.nudge();
            if done(self) {
                return;
            }
            if Instant::now() > deadline {
                let logs: String = self.frr.iter().map(lab::Frr::logs).collect();
                let (_, fdb, _) = ctl(&self.socket, &["fdb", "show"]);
                panic!(
                    "{what}: not within {WAIT:?}\nmpbridge's fdb:\n{fdb}\nB's vx42: {:?}\n{logs}",
                    bridge_fdb(&self.b.name, "vx42")
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// A datagram from each host to the other: each ARPs for the other.
    fn nudge(&self) {
        for (i, host) in self.hosts.iter().enumerate() {
            let to = std::net::SocketAddr::from((Topology::addr(1 - i), 9));
            host.run(move || {
                if let Ok(socket) = UdpSocket::bind("0.0.0.0:0") {
                    let _ = socket.send_to(b"evpn", to);
                }
            });
        }
    }

    /// Whether mpbridge has `mac` on its VXLAN port as FRR installed it,
    /// behind B.
    fn installed_here(&self, mac: &str) -> bool {
        fdb_of(&self.socket, mac).iter().any(|e| {
            e["state"] == "extern_learn" && e["dst"] == "198.19.0.2" && e["port"] == "vxlan:seg"
        })
    }

    /// Whether the Linux VTEP has `mac` behind mpbridge's VTEP, as FRR
    /// installed it (the flood entry: as zebra writes it).
    fn installed_there(&self, mac: &str) -> bool {
        bridge_fdb(&self.b.name, "vx42").into_iter().any(|e| {
            e["mac"] == mac
                && e["dst"] == "198.19.0.1"
                && (mac == "00:00:00:00:00:00"
                    || e["flags"]
                        .as_array()
                        .is_some_and(|f| f.contains(&Value::from("extern_learn"))))
        })
    }

    /// Both hosts' routes and both flood entries in place.
    fn wait_for_routes(&self) {
        let mac_b = self.mac(1);
        self.wait_for("mpbridge's routes", |f| {
            let stats = ctl_json(&f.socket, &["stats", "-j"]);
            port_stats(&stats, "vxlan:seg")["evpn"]["vteps"] == serde_json::json!(["198.19.0.2"])
                && f.installed_here(&mac_b)
        });
        let mac_a = self.mac(0);
        self.wait_for("the Linux VTEP's routes", |f| {
            f.installed_there(&mac_a) && f.installed_there("00:00:00:00:00:00")
        });
    }

    /// 8 MiB of TCP each way between the hosts (their ARP entries, failed
    /// while the routes came, resolved again first).
    fn talk(&self, port: u16) {
        for host in &self.hosts {
            host.ip(&["neigh", "flush", "all"]);
        }
        netns::tcp_transfer(&self.hosts, 0, 1, port, 7);
        netns::tcp_transfer(&self.hosts, 1, 0, port + 1, 8);
    }
}

/// The entries of `mpbridge fdb show -j` for `mac`.
fn fdb_of(socket: &std::path::Path, mac: &str) -> Vec<Value> {
    match ctl_json(socket, &["fdb", "show", "-j"]) {
        Value::Array(entries) => entries.into_iter().filter(|e| e["mac"] == mac).collect(),
        other => panic!("not a list: {other}"),
    }
}

fn mac_string(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The interfaces of `ns` whose name starts with `prefix`.
fn links_named(ns: &Netns, prefix: &str) -> Vec<String> {
    let output = Command::new("ip")
        .args(["-n", &ns.name, "-j", "link", "show"])
        .output()
        .expect("ip");
    let links: Value = serde_json::from_slice(&output.stdout).expect("ip's JSON");
    links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// Routes both ways, the flood list, the figures in `stats`, the hosts
/// talking; the port removed: its mirror goes, its host's route is
/// withdrawn.
fn routes_both_ways_and_the_hosts_talk(lock: &str) {
    if !can_run(&format!("routes_both_ways_and_the_hosts_talk_{lock}")) {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_bridge(lock, PORT, &[]);
    fabric.start_frr();
    fabric.wait_for_routes();
    let stats = ctl_json(&fabric.socket, &["stats", "-j"]);
    let port = port_stats(&stats, "vxlan:seg");
    assert_eq!(port["flags"]["learning"], false, "{port}");
    assert!(port["evpn"]["local_macs"].as_u64() >= Some(1), "{port}");
    assert!(port["evpn"]["remote_macs"].as_u64() >= Some(1), "{port}");
    fabric.talk(5301);

    ctl_ok(&fabric.socket, &["port", "del", "vxlan:seg"]);
    assert_eq!(links_named(&fabric.a, "mpe"), Vec::<String>::new());
    let mac_a = fabric.mac(0);
    fabric.wait_for("the withdrawal", |f| !f.installed_there(&mac_a));

    // Added again while running: a mirror anew, the routes back.
    ctl_ok(&fabric.socket, &["port", "add", PORT]);
    assert_eq!(links_named(&fabric.a, "mpe42").len(), 4);
    fabric.wait_for_routes();
    let (status, log) = fabric.daemon.take().unwrap().stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
}

strategy_tests!(
    routes_both_ways_and_the_hosts_talk: talk_mutex, talk_rwlock, talk_rmlock, talk_sharded,
    talk_rcu, talk_epoch
);

/// `fdb del` of a local station withdraws its route; heard again, it is
/// advertised again. The Linux VTEP's host moving behind mpbridge (its MAC
/// on a third host there) takes the installed entry over and is
/// advertised from here; moving back, it is installed again.
fn fdb_del_and_mac_mobility(lock: &str) {
    if !can_run(&format!("fdb_del_and_mac_mobility_{lock}")) {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_bridge(lock, PORT, &[]);
    fabric.start_frr();
    fabric.wait_for_routes();
    let (mac_a, mac_b) = (fabric.mac(0), fabric.mac(1));
    fabric.quiet();

    // fdb del: withdrawn, until the host is heard again.
    ctl_ok(&fabric.socket, &["fdb", "del", &mac_a]);
    let deadline = Instant::now() + WAIT;
    while fabric.installed_there(&mac_a) {
        assert!(Instant::now() < deadline, "not withdrawn after fdb del");
        thread::sleep(Duration::from_millis(100));
    }
    fabric.wait_for("advertised again", |f| f.installed_there(&mac_a));

    // Host B's MAC appears behind mpbridge: a third host, B's gone quiet
    // (its link down).
    fabric.hosts[1].ip(&["link", "set", "h1", "down"]);
    let mover = Netns::new();
    fabric.a.ip(&[
        "link",
        "add",
        "hm0",
        "type",
        "veth",
        "peer",
        "name",
        "h1",
        "netns",
        &mover.name,
    ]);
    fabric.a.ip(&["link", "set", "hm0", "up"]);
    mover.ip(&["link", "set", "h1", "address", &mac_b, "up"]);
    mover.ip(&["addr", "add", "198.18.0.2/24", "dev", "h1"]);
    ctl_ok(&fabric.socket, &["port", "add", "raw:hm0"]);
    let send_from_mover = || {
        mover.run(|| {
            if let Ok(socket) = UdpSocket::bind("0.0.0.0:0") {
                let _ = socket.send_to(b"moved", "198.18.0.1:9");
            }
        });
    };
    let deadline = Instant::now() + WAIT;
    loop {
        send_from_mover();
        let here = fdb_of(&fabric.socket, &mac_b);
        let learned_here = here
            .iter()
            .any(|e| e["state"] == "learned" && e["port"] == "raw:hm0");
        if learned_here && fabric.installed_there(&mac_b) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the move to mpbridge: here {here:?}, there {:?}",
            bridge_fdb(&fabric.b.name, "vx42")
        );
        thread::sleep(Duration::from_millis(200));
    }

    // And back: the mover quiet and gone, host B heard again behind B.
    ctl_ok(&fabric.socket, &["port", "del", "raw:hm0"]);
    drop(mover);
    fabric.hosts[1].ip(&["link", "set", "h1", "up"]);
    fabric.wait_for("the move back", |f| f.installed_here(&mac_b));
}

/// mpbridge killed: its mirror stays until it starts again, which removes
/// it, makes it anew and gets the routes back; stopped, nothing is left.
fn killed_and_started_again() {
    if !can_run("killed_and_started_again") {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_bridge("epoch", PORT, &[]);
    fabric.start_frr();
    fabric.wait_for_routes();
    let mut daemon = fabric.daemon.take().unwrap();
    daemon.child.kill().expect("SIGKILL");
    daemon.child.wait().expect("reaped");
    drop(daemon);
    assert_eq!(
        links_named(&fabric.a, "mpe42").len(),
        4,
        "a killed bridge leaves its mirror"
    );
    fabric.start_bridge("epoch", PORT, &[]);
    let log = fabric.daemon.as_ref().unwrap().log.join("\n");
    assert!(
        log.contains("removed the EVPN mirror devices an earlier run left"),
        "{log}"
    );
    fabric.wait_for_routes();
    let (status, log) = fabric.daemon.take().unwrap().stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert_eq!(links_named(&fabric.a, "mpe"), Vec::<String>::new());
}

/// FRR started after mpbridge: the port forwards meanwhile, and takes the
/// routes once zebra runs.
fn frr_started_late(lock: &str) {
    if !can_run(&format!("frr_started_late_{lock}")) {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_bridge(lock, PORT, &[]);
    thread::sleep(Duration::from_secs(2));
    let stats = ctl_json(&fabric.socket, &["stats", "-j"]);
    let evpn = &port_stats(&stats, "vxlan:seg")["evpn"];
    assert_eq!(evpn["vteps"], serde_json::json!([]), "{evpn}");
    fabric.start_frr();
    fabric.wait_for_routes();
    fabric.talk(5311);
}

/// One line and exit 2, before anything is made: a VNI another device
/// carries, two EVPN ports of one VNI, a mirror port that is the data
/// port, `mirror_port=` without EVPN.
fn bad_input_is_refused() {
    if !privileged("bad_input_is_refused") {
        return;
    }
    let ns = Netns::new();
    ns.ip(&["link", "add", "a0", "type", "veth", "peer", "name", "a1"]);
    ns.ip(&[
        "link",
        "add",
        "vx7",
        "type",
        "vxlan",
        "id",
        "7",
        "dstport",
        "4789",
        "local",
        "198.19.0.1",
    ]);
    for (port, extra, expected) in [
        (
            "vxlan:s,vni=7,local=198.19.0.1,evpn=on",
            None,
            "port vxlan:s: VNI 7 is carried by vx7 already",
        ),
        (
            "vxlan:s,vni=8,local=198.19.0.1,evpn=on",
            Some("vxlan:t,vni=8,local=198.19.0.1,port=4790,evpn=on"),
            "ports vxlan:s and vxlan:t are both EVPN ports of VNI 8",
        ),
        (
            "vxlan:s,vni=8,local=198.19.0.1,evpn=on,mirror_port=4789",
            None,
            "mirror_port=4789 is the port's data port",
        ),
        (
            "vxlan:s,vni=8,local=198.19.0.1,mirror_port=5000",
            None,
            "mirror_port= goes with evpn=on",
        ),
    ] {
        let mut args = vec!["run", "--port", "raw:a0", "--port", port];
        if let Some(extra) = extra {
            args.extend(["--port", extra]);
        }
        let (status, out) = netns::run_to_exit(Some(&ns), &args, Duration::from_secs(10));
        assert_eq!(status.code(), Some(2), "{args:?}: {out}");
        assert!(out.contains(expected), "{args:?}: {out}");
        assert_eq!(out.trim().lines().count(), 1, "one line: {out}");
        assert_eq!(links_named(&ns, "mpe"), Vec::<String>::new());
    }
    // `port add` of such a port: an error reply, nothing added or made.
    ns.ip(&["link", "add", "b0", "type", "veth", "peer", "name", "b1"]);
    ns.ip(&["addr", "add", "198.19.0.1/32", "dev", "lo"]);
    let name = lab::unique("ev");
    let daemon = Daemon::start(
        &ns,
        &[
            "run",
            &format!("--name={name}"),
            "--port",
            "raw:a0",
            "--port",
            "raw:b0",
        ],
    );
    let socket = PathBuf::from(format!("/run/mpbridge/{name}.sock"));
    let (code, _, err) = ctl(
        &socket,
        &["port", "add", "vxlan:s,vni=7,local=198.19.0.1,evpn=on"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("VNI 7 is carried by vx7 already"), "{err}");
    let stats = ctl_json(&socket, &["stats", "-j"]);
    assert_eq!(stats["ports"].as_array().map(Vec::len), Some(2));
    assert_eq!(links_named(&ns, "mpe"), Vec::<String>::new());
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
}

/// A UDP broadcast from host `from` to port `port` of its subnet: how many
/// copies each other host got (in `hosts` order), once what was in flight
/// has arrived (1.5 s without another).
fn broadcast_counts(hosts: &[Netns], from: usize, port: u16) -> Vec<usize> {
    let listeners: Vec<_> = (0..hosts.len())
        .filter(|&i| i != from)
        .map(|i| {
            hosts[i].spawn(move || {
                let socket = UdpSocket::bind(("0.0.0.0", port)).expect("bind");
                socket
                    .set_read_timeout(Some(Duration::from_millis(1500)))
                    .expect("timeout");
                let mut got = 0;
                let mut buffer = [0u8; 64];
                while let Ok(len) = socket.recv(&mut buffer) {
                    got += usize::from(&buffer[..len] == b"broadcast");
                }
                got
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(200));
    hosts[from].run(move || {
        let socket = UdpSocket::bind("0.0.0.0:0").expect("bind");
        socket.set_broadcast(true).expect("broadcast");
        socket
            .send_to(b"broadcast", ("198.18.0.255", port))
            .expect("send");
    });
    listeners
        .into_iter()
        .map(|l| l.join().expect("listener"))
        .collect()
}

/// Two mpbridge VTEPs (A, C) and a Linux VTEP (B) on one underlay switch,
/// FRR on each peering with the other two, no `remote=` anywhere: each
/// VTEP's flood list holds the other two, a broadcast reaches every other
/// host exactly once, known unicast goes to one VTEP only, and every pair
/// of hosts talks.
fn three_vteps(lock: &str) {
    if !can_run(&format!("three_vteps_{lock}")) {
        return;
    }
    let underlay = Netns::new();
    underlay.ip(&["link", "add", "ub", "type", "bridge"]);
    underlay.ip(&["link", "set", "ub", "up"]);
    let vteps = [Netns::new(), Netns::new(), Netns::new()];
    let hosts = [Netns::new(), Netns::new(), Netns::new()];
    for (i, vtep) in vteps.iter().enumerate() {
        let peer = format!("u{i}");
        vtep.ip(&[
            "link",
            "add",
            "u",
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            &underlay.name,
        ]);
        underlay.ip(&["link", "set", &peer, "master", "ub", "up"]);
        vtep.ip(&["addr", "add", &format!("198.19.0.{}/24", i + 1), "dev", "u"]);
        vtep.ip(&["link", "set", "u", "up"]);
        vtep.ip(&[
            "link",
            "add",
            "hv",
            "type",
            "veth",
            "peer",
            "name",
            "h1",
            "netns",
            &hosts[i].name,
        ]);
        vtep.ip(&["link", "set", "hv", "mtu", "1450", "up"]);
        hosts[i].ip(&[
            "addr",
            "add",
            &format!("{}/24", Topology::addr(i)),
            "dev",
            "h1",
        ]);
        hosts[i].ip(&["link", "set", "h1", "mtu", "1450", "up"]);
    }
    // B, the Linux VTEP.
    lab::frr::linux_vtep(&vteps[1].name, "br0", "vx42", 42, "198.19.0.2", "hv")
        .expect("the Linux VTEP");
    // A and C, mpbridge.
    let mut daemons = Vec::new();
    let mut sockets = Vec::new();
    for i in [0, 2] {
        let name = lab::unique("ev");
        let port = format!("vxlan:seg,vni=42,local=198.19.0.{},evpn=on", i + 1);
        daemons.push(Daemon::start(
            &vteps[i],
            &[
                "run",
                &format!("--name={name}"),
                "--lock",
                lock,
                "--port",
                "raw:hv",
                "--port",
                &port,
            ],
        ));
        sockets.push(PathBuf::from(format!("/run/mpbridge/{name}.sock")));
    }
    let addrs = ["198.19.0.1", "198.19.0.2", "198.19.0.3"];
    let frr: Vec<lab::Frr> = (0..3)
        .map(|i| {
            let others: Vec<&str> = (0..3).filter(|&j| j != i).map(|j| addrs[j]).collect();
            lab::Frr::start(&vteps[i].name, &evpn_config(addrs[i], &others)).expect("FRR")
        })
        .collect();
    let macs: Vec<String> = hosts
        .iter()
        .map(|h| mac_string(netns::link_mac(h, "h1")))
        .collect();
    // Each host sends to the next: each ARPs, and its VTEP hears it.
    let nudge = || {
        for (i, host) in hosts.iter().enumerate() {
            let to = std::net::SocketAddr::from((Topology::addr((i + 1) % 3), 9));
            host.run(move || {
                if let Ok(socket) = UdpSocket::bind("0.0.0.0:0") {
                    let _ = socket.send_to(b"evpn", to);
                }
            });
        }
    };
    let flood = |socket: &PathBuf| {
        let stats = ctl_json(socket, &["stats", "-j"]);
        port_stats(&stats, "vxlan:seg")["evpn"]["vteps"].clone()
    };
    // On each mpbridge VTEP (A: sockets[0], C: sockets[1]), the other two
    // hosts as installed stations.
    let installed = |bridge: usize, host: usize| {
        fdb_of(&sockets[bridge], &macs[host])
            .iter()
            .any(|e| e["state"] == "extern_learn")
    };
    let deadline = Instant::now() + WAIT;
    loop {
        nudge();
        let complete = flood(&sockets[0]) == serde_json::json!(["198.19.0.2", "198.19.0.3"])
            && flood(&sockets[1]) == serde_json::json!(["198.19.0.1", "198.19.0.2"])
            && ["198.19.0.1", "198.19.0.3"].iter().all(|vtep| {
                bridge_fdb(&vteps[1].name, "vx42")
                    .iter()
                    .any(|e| e["mac"] == "00:00:00:00:00:00" && e["dst"] == *vtep)
            })
            && installed(0, 1)
            && installed(0, 2)
            && installed(1, 0)
            && installed(1, 1);
        if complete {
            break;
        }
        if Instant::now() > deadline {
            let logs: String = frr.iter().map(lab::Frr::logs).collect();
            panic!(
                "routes: A {} C {}\n{logs}",
                flood(&sockets[0]),
                flood(&sockets[1])
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
    // Quiet: permanent neighbour entries everywhere, no ARP.
    for (i, host) in hosts.iter().enumerate() {
        for j in (0..3).filter(|&j| j != i) {
            host.ip(&[
                "neigh",
                "replace",
                &Topology::addr(j).to_string(),
                "lladdr",
                &macs[j],
                "nud",
                "permanent",
                "dev",
                "h1",
            ]);
        }
    }
    thread::sleep(Duration::from_secs(1));

    // A broadcast from each host reaches each other host exactly once.
    for from in 0..3 {
        let got = broadcast_counts(&hosts, from, 5400);
        assert!(got.iter().all(|&n| n == 1), "from host {from}: {got:?}");
    }

    // Known unicast from A's host to B's: nothing of it reaches C.
    let rx = || {
        port_stats(&ctl_json(&sockets[1], &["stats", "-j"]), "vxlan:seg")["rx_frames"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = rx();
    hosts[0].run(|| {
        let socket = UdpSocket::bind("0.0.0.0:0").expect("bind");
        for _ in 0..50 {
            socket.send_to(b"unicast", "198.18.0.2:9").expect("send");
        }
    });
    thread::sleep(Duration::from_millis(300));
    let got = rx() - before;
    assert!(got < 50, "C got {got} frames of 50 sent to B");

    // Every pair talks.
    netns::tcp_transfer(&hosts, 0, 1, 5401, 1);
    netns::tcp_transfer(&hosts, 1, 2, 5402, 2);
    netns::tcp_transfer(&hosts, 2, 0, 5403, 3);
    drop(frr);
    for daemon in daemons {
        let (status, log) = daemon.stop(Duration::from_secs(10));
        assert!(status.is_some_and(|s| s.success()), "{log:?}");
    }
}

strategy_tests!(
    three_vteps: three_mutex, three_rwlock, three_rmlock, three_sharded, three_rcu, three_epoch
);

/// A local station that ages out of the table is withdrawn.
fn ageing_withdraws() {
    if !can_run("ageing_withdraws") {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_bridge("epoch", PORT, &["--age", "3"]);
    fabric.start_frr();
    fabric.wait_for_routes();
    let mac_a = fabric.mac(0);
    fabric.quiet();
    let deadline = Instant::now() + WAIT;
    while fabric.installed_there(&mac_a) {
        assert!(Instant::now() < deadline, "not withdrawn after ageing");
        thread::sleep(Duration::from_millis(200));
    }
    assert!(fdb_of(&fabric.socket, &mac_a).is_empty(), "aged out here");
}

/// Two VNIs on one bridge (`--vlan-filtering`, an EVPN port per VNI with
/// an access VLAN) against a Linux VTEP with a bridge per VNI, all four
/// hosts in one IP subnet: each VNI's routes stay in it, a broadcast
/// reaches its own VNI's hosts only, and each VNI's pair talks.
fn two_vnis_kept_apart(lock: &str) {
    if !can_run(&format!("two_vnis_kept_apart_{lock}")) {
        return;
    }
    let a = Netns::new();
    let b = Netns::new();
    // Hosts 0 and 1 in VNI 10, 2 and 3 in VNI 20; even ones behind A.
    let hosts = [Netns::new(), Netns::new(), Netns::new(), Netns::new()];
    a.ip(&[
        "link", "add", "u0", "type", "veth", "peer", "name", "u1", "netns", &b.name,
    ]);
    a.ip(&["addr", "add", "198.19.0.1/24", "dev", "u0"]);
    a.ip(&["link", "set", "u0", "up"]);
    b.ip(&["addr", "add", "198.19.0.2/24", "dev", "u1"]);
    b.ip(&["link", "set", "u1", "up"]);
    for (i, host) in hosts.iter().enumerate() {
        let vtep = if i % 2 == 0 { &a } else { &b };
        let port = format!("h{i}");
        vtep.ip(&[
            "link", "add", &port, "type", "veth", "peer", "name", "h1", "netns", &host.name,
        ]);
        vtep.ip(&["link", "set", &port, "mtu", "1450", "up"]);
        host.ip(&[
            "addr",
            "add",
            &format!("{}/24", Topology::addr(i)),
            "dev",
            "h1",
        ]);
        host.ip(&["link", "set", "h1", "mtu", "1450", "up"]);
    }
    for (vni, port) in [(10, "h1"), (20, "h3")] {
        let (br, vx) = (format!("br{vni}"), format!("vx{vni}"));
        lab::frr::linux_vtep(&b.name, &br, &vx, vni, "198.19.0.2", port).expect("the Linux VTEP");
    }
    let name = lab::unique("ev");
    let socket = PathBuf::from(format!("/run/mpbridge/{name}.sock"));
    let daemon = Daemon::start(
        &a,
        &[
            "run",
            &format!("--name={name}"),
            "--vlan-filtering",
            "--lock",
            lock,
            "--port",
            "raw:h0,access=10",
            "--port",
            "raw:h2,access=20",
            "--port",
            "vxlan:s10,vni=10,local=198.19.0.1,evpn=on,access=10",
            "--port",
            "vxlan:s20,vni=20,local=198.19.0.1,evpn=on,access=20",
        ],
    );
    let frr = [
        lab::Frr::start(&a.name, &evpn_config("198.19.0.1", &["198.19.0.2"])).expect("FRR"),
        lab::Frr::start(&b.name, &evpn_config("198.19.0.2", &["198.19.0.1"])).expect("FRR"),
    ];
    let macs: Vec<String> = hosts
        .iter()
        .map(|h| mac_string(netns::link_mac(h, "h1")))
        .collect();
    // Each host sends to its VNI's other host.
    let nudge = || {
        for (i, host) in hosts.iter().enumerate() {
            let to = std::net::SocketAddr::from((Topology::addr(i ^ 1), 9));
            host.run(move || {
                if let Ok(socket) = UdpSocket::bind("0.0.0.0:0") {
                    let _ = socket.send_to(b"evpn", to);
                }
            });
        }
    };
    let at = |mac: &str| -> Vec<(String, u64)> {
        fdb_of(&socket, mac)
            .iter()
            .filter(|e| e["state"] == "extern_learn")
            .map(|e| {
                (
                    e["port"].as_str().unwrap_or("").to_owned(),
                    e["vlan"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    };
    let deadline = Instant::now() + WAIT;
    loop {
        nudge();
        let there = |vx: &str, mac: &str| {
            bridge_fdb(&b.name, vx)
                .iter()
                .any(|e| e["mac"] == mac && e["dst"] == "198.19.0.1")
        };
        if at(&macs[1]) == [("vxlan:s10".to_owned(), 10)]
            && at(&macs[3]) == [("vxlan:s20".to_owned(), 20)]
            && there("vx10", &macs[0])
            && there("vx20", &macs[2])
        {
            break;
        }
        if Instant::now() > deadline {
            let logs: String = frr.iter().map(lab::Frr::logs).collect();
            let (_, fdb, _) = ctl(&socket, &["fdb", "show"]);
            panic!("routes of two VNIs: mpbridge's fdb:\n{fdb}\n{logs}");
        }
        thread::sleep(Duration::from_millis(100));
    }
    // Each VNI's stations only in its own VNI, on both sides.
    assert!(!bridge_fdb(&b.name, "vx20")
        .iter()
        .any(|e| e["mac"] == macs[0]));
    assert!(!bridge_fdb(&b.name, "vx10")
        .iter()
        .any(|e| e["mac"] == macs[2]));
    for (i, host) in hosts.iter().enumerate() {
        let j = i ^ 1;
        host.ip(&[
            "neigh",
            "replace",
            &Topology::addr(j).to_string(),
            "lladdr",
            &macs[j],
            "nud",
            "permanent",
            "dev",
            "h1",
        ]);
    }
    thread::sleep(Duration::from_secs(1));

    // A broadcast from host 0 reaches host 1 only.
    let got = broadcast_counts(&hosts, 0, 5500);
    assert_eq!(got, [1, 0, 0], "hosts 1, 2, 3");

    netns::tcp_transfer(&hosts, 0, 1, 5501, 1);
    netns::tcp_transfer(&hosts, 3, 2, 5502, 2);
    drop(frr);
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
}

/// The reference: a Linux VTEP in mpbridge's place (its host on a kernel
/// bridge), the same FRR configuration: routes both ways, the hosts talk,
/// the vxlan device removed withdraws its host's route. What the
/// scenarios above expect of mpbridge is what Linux does here.
fn linux_in_mpbridges_place() {
    if !can_run("linux_in_mpbridges_place") {
        return;
    }
    let mut fabric = Fabric::new();
    lab::frr::linux_vtep(&fabric.a.name, "br0", "vx42", 42, "198.19.0.1", "ha0")
        .expect("the Linux VTEP");
    fabric.start_frr();
    let (mac_a, mac_b) = (fabric.mac(0), fabric.mac(1));
    let installed_in_a = |f: &Fabric, mac: &str| {
        bridge_fdb(&f.a.name, "vx42").iter().any(|e| {
            e["mac"] == mac
                && e["dst"] == "198.19.0.2"
                && e["flags"]
                    .as_array()
                    .is_some_and(|fl| fl.contains(&Value::from("extern_learn")))
        })
    };
    fabric.wait_for("A's routes", |f| {
        installed_in_a(f, &mac_b)
            && bridge_fdb(&f.a.name, "vx42")
                .iter()
                .any(|e| e["mac"] == "00:00:00:00:00:00" && e["dst"] == "198.19.0.2")
    });
    fabric.wait_for("B's routes", |f| {
        f.installed_there(&mac_a) && f.installed_there("00:00:00:00:00:00")
    });
    fabric.talk(5321);
    fabric.a.ip(&["link", "del", "vx42"]);
    fabric.wait_for("the withdrawal", |f| !f.installed_there(&mac_a));
}

strategy_tests!(
    fdb_del_and_mac_mobility: mobility_mutex, mobility_rwlock, mobility_rmlock,
    mobility_sharded, mobility_rcu, mobility_epoch
);

strategy_tests!(
    frr_started_late: late_mutex, late_rwlock, late_rmlock, late_sharded, late_rcu, late_epoch
);

strategy_tests!(
    two_vnis_kept_apart: vnis_mutex, vnis_rwlock, vnis_rmlock, vnis_sharded, vnis_rcu, vnis_epoch
);

lab::test_main! {
    privileged: [
        talk_mutex,
        talk_rwlock,
        talk_rmlock,
        talk_sharded,
        talk_rcu,
        talk_epoch,
        three_mutex,
        three_rwlock,
        three_rmlock,
        three_sharded,
        three_rcu,
        three_epoch,
        ageing_withdraws,
        vnis_mutex,
        vnis_rwlock,
        vnis_rmlock,
        vnis_sharded,
        vnis_rcu,
        vnis_epoch,
        linux_in_mpbridges_place,
        mobility_mutex,
        mobility_rwlock,
        mobility_rmlock,
        mobility_sharded,
        mobility_rcu,
        mobility_epoch,
        killed_and_started_again,
        late_mutex,
        late_rwlock,
        late_rmlock,
        late_sharded,
        late_rcu,
        late_epoch,
        bad_input_is_refused,
    ],
    plain: [],
}
