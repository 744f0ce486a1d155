//! mpbridge as an EVPN VTEP (`vxlan:...,evpn=on`) beside a Linux VTEP
//! (bridge, vxlan on 4789 `nolearning`, learning off on its port), each
//! with FRR (zebra and bgpd, iBGP), a host behind each: routes both ways
//! and the flood list, the hosts talk; the port removed, `fdb del`, a
//! station moving to the other VTEP and back, ageing, FRR started late,
//! three VTEPs, two VNIs. Each of these runs for the six strategies and
//! once with a Linux VTEP in mpbridge's place, the reference: what the
//! scenarios expect of mpbridge is what Linux does. For mpbridge alone:
//! killed and started again (six strategies); once, a silent zebra warned
//! of and bad input refused with exit 2. Needs root and FRR; skips with a reason otherwise
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

/// In a scenario's VTEP's place: a Linux VTEP, the reference (otherwise
/// mpbridge with the lock strategy named).
const LINUX: &str = "linux";

/// Whether the test can run here; prints why not.
fn can_run(test: &str) -> bool {
    privileged(test) && lab::installed(test, &format!("{}/zebra", lab::FRR_DIR), "frr")
}

/// The VTEP a scenario tests, in its namespace: mpbridge, or Linux in its
/// place. One segment per `(VNI, interface)`, the interface a host's link
/// there. mpbridge names VNI N's port `vxlan:sN` (with `access=N` and
/// `--vlan-filtering` when there are several); Linux has a bridge `brN`
/// with a vxlan device `vxN` per VNI.
struct Vtep {
    /// mpbridge; none: Linux.
    daemon: Option<Daemon>,
    /// mpbridge's `--name`.
    name: String,
    socket: PathBuf,
    ns: String,
    local: String,
    segments: Vec<(u32, String)>,
}

impl Vtep {
    /// Starts `what` (a lock strategy, or `LINUX`) in `ns` at underlay
    /// address `local`, its stations ageing after `age` seconds if given.
    fn start(
        ns: &Netns,
        what: &str,
        local: &str,
        segments: &[(u32, &str)],
        age: Option<u32>,
    ) -> Vtep {
        Self::start_as(&lab::unique("ev"), ns, what, local, segments, age)
    }

    /// `start`, mpbridge with `--name=name`.
    fn start_as(
        name: &str,
        ns: &Netns,
        what: &str,
        local: &str,
        segments: &[(u32, &str)],
        age: Option<u32>,
    ) -> Vtep {
        let mut vtep = Vtep {
            name: name.to_owned(),
            daemon: None,
            socket: PathBuf::from(format!("/run/mpbridge/{name}.sock")),
            ns: ns.name.clone(),
            local: local.to_owned(),
            segments: segments.iter().map(|&(v, p)| (v, p.to_owned())).collect(),
        };
        if what == LINUX {
            for (vni, port) in segments {
                let bridge = format!("br{vni}");
                lab::frr::linux_vtep(&ns.name, &bridge, &format!("vx{vni}"), *vni, local, port)
                    .expect("the Linux VTEP");
                if let Some(age) = age {
                    let centiseconds = (age * 100).to_string();
                    ns.ip(&[
                        "link",
                        "set",
                        &bridge,
                        "type",
                        "bridge",
                        "ageing_time",
                        &centiseconds,
                    ]);
                }
            }
            return vtep;
        }
        let mut args = vec![
            "run".to_owned(),
            format!("--name={name}"),
            "--lock".to_owned(),
            what.to_owned(),
        ];
        if let Some(age) = age {
            args.extend(["--age".to_owned(), age.to_string()]);
        }
        let several = segments.len() > 1;
        if several {
            args.push("--vlan-filtering".to_owned());
        }
        let access = |vni: u32| match several {
            true => format!(",access={vni}"),
            false => String::new(),
        };
        for (vni, port) in segments {
            args.extend(["--port".to_owned(), format!("raw:{port}{}", access(*vni))]);
        }
        // A tap too: the VXLAN port may then be removed.
        args.extend(["--port".to_owned(), "tap:t0".to_owned()]);
        for &(vni, _) in segments {
            args.extend(["--port".to_owned(), vtep.port(vni) + &access(vni)]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        vtep.daemon = Some(Daemon::start(ns, &args));
        vtep
    }

    fn is_mpbridge(&self) -> bool {
        self.daemon.is_some()
    }

    /// mpbridge's VXLAN port of `vni`, as given to `--port`.
    fn port(&self, vni: u32) -> String {
        format!("vxlan:s{vni},vni={vni},local={},evpn=on", self.local)
    }

    /// The VTEPs that `mac` is installed behind (`extern_learn`) in
    /// segment `vni`.
    fn installed(&self, vni: u32, mac: &str) -> Vec<String> {
        let entries = match self.is_mpbridge() {
            true => fdb_of(&self.socket, mac)
                .into_iter()
                .filter(|e| e["state"] == "extern_learn" && e["port"] == format!("vxlan:s{vni}"))
                .collect(),
            false => bridge_fdb(&self.ns, &format!("vx{vni}"))
                .into_iter()
                .filter(|e| e["mac"] == mac && has_flag(e, "extern_learn"))
                .collect::<Vec<_>>(),
        };
        entries
            .iter()
            .filter_map(|e| e["dst"].as_str().map(str::to_owned))
            .collect()
    }

    /// The flood list of segment `vni`, sorted.
    fn flood(&self, vni: u32) -> Vec<String> {
        let mut vteps: Vec<String> = match self.is_mpbridge() {
            true => {
                let stats = ctl_json(&self.socket, &["stats", "-j"]);
                let port = port_stats(&stats, &format!("vxlan:s{vni}"));
                port["evpn"]["vteps"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            }
            false => bridge_fdb(&self.ns, &format!("vx{vni}"))
                .iter()
                .filter(|e| e["mac"] == "00:00:00:00:00:00")
                .filter_map(|e| e["dst"].as_str().map(str::to_owned))
                .collect(),
        };
        vteps.sort();
        vteps
    }

    /// Whether `mac` is learned on the host link `dev`.
    fn learned(&self, mac: &str, dev: &str) -> bool {
        match self.is_mpbridge() {
            true => fdb_of(&self.socket, mac)
                .iter()
                .any(|e| e["state"] == "learned" && e["port"] == format!("raw:{dev}")),
            false => bridge_fdb(&self.ns, dev).iter().any(|e| {
                e["mac"] == mac
                    && !has_flag(e, "extern_learn")
                    && !matches!(e["state"].as_str(), Some("permanent" | "static"))
            }),
        }
    }

    /// `fdb del` of `mac`, learned on `dev`.
    fn fdb_del(&self, mac: &str, dev: &str) {
        match self.is_mpbridge() {
            true => ctl_ok(&self.socket, &["fdb", "del", mac]),
            false => self.run(&["bridge", "fdb", "del", mac, "dev", dev, "master"]),
        }
    }

    /// Host link `dev` added to the (first) segment.
    fn add_port(&self, dev: &str) {
        match self.is_mpbridge() {
            true => ctl_ok(&self.socket, &["port", "add", &format!("raw:{dev}")]),
            false => {
                let bridge = format!("br{}", self.segments[0].0);
                self.run(&["ip", "link", "set", dev, "master", &bridge]);
            }
        }
    }

    /// Host link `dev` removed.
    fn del_port(&self, dev: &str) {
        match self.is_mpbridge() {
            true => ctl_ok(&self.socket, &["port", "del", &format!("raw:{dev}")]),
            false => self.run(&["ip", "link", "set", dev, "nomaster"]),
        }
    }

    /// Segment `vni`'s VXLAN port (Linux: vxlan device) removed.
    fn remove_segment(&self, vni: u32) {
        match self.is_mpbridge() {
            true => ctl_ok(&self.socket, &["port", "del", &format!("vxlan:s{vni}")]),
            false => self.run(&["ip", "link", "del", &format!("vx{vni}")]),
        }
    }

    /// Segment `vni`'s VXLAN port added again.
    fn add_segment(&self, vni: u32) {
        match self.is_mpbridge() {
            true => ctl_ok(&self.socket, &["port", "add", &self.port(vni)]),
            false => lab::frr::linux_vxlan(
                &self.ns,
                &format!("br{vni}"),
                &format!("vx{vni}"),
                vni,
                &self.local,
            )
            .expect("the vxlan device"),
        }
    }

    /// Frames received from the underlay in segment `vni`.
    fn rx_frames(&self, vni: u32) -> u64 {
        match self.is_mpbridge() {
            true => port_stats(
                &ctl_json(&self.socket, &["stats", "-j"]),
                &format!("vxlan:s{vni}"),
            )["rx_frames"]
                .as_u64()
                .unwrap_or(0),
            false => {
                let output = Command::new("ip")
                    .args([
                        "-n",
                        &self.ns,
                        "-s",
                        "-j",
                        "link",
                        "show",
                        &format!("vx{vni}"),
                    ])
                    .output()
                    .expect("ip");
                let links: Value = serde_json::from_slice(&output.stdout).expect("ip's JSON");
                links[0]["stats64"]["rx"]["packets"].as_u64().unwrap_or(0)
            }
        }
    }

    /// Its fdb, for a failing test.
    fn state(&self) -> String {
        match self.is_mpbridge() {
            true => ctl(&self.socket, &["fdb", "show"]).1,
            false => self
                .segments
                .iter()
                .map(|(vni, _)| format!("{:?}\n", bridge_fdb(&self.ns, &format!("br{vni}"))))
                .collect(),
        }
    }

    /// `args` in its namespace, which must succeed.
    fn run(&self, args: &[&str]) {
        let status = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args(args)
            .status()
            .expect("ip netns exec");
        assert!(status.success(), "{args:?}");
    }

    /// mpbridge stopped, which must exit cleanly and leave no mirror.
    fn stop(mut self, ns: &Netns) {
        if let Some(daemon) = self.daemon.take() {
            let (status, log) = daemon.stop(Duration::from_secs(10));
            assert!(status.is_some_and(|s| s.success()), "{log:?}");
            assert_eq!(links_named(ns, "mpe"), Vec::<String>::new());
        }
    }
}

/// Two VTEPs over a veth underlay (A 198.19.0.1, the one under test; B
/// 198.19.0.2, Linux's) and a host behind each (198.18.0.1 on A's `ha0`,
/// 198.18.0.2 on B's bridge), VNI 42. Fields drop in order: the VTEP
/// under test and FRR first, then the namespaces.
struct Fabric {
    vtep: Option<Vtep>,
    frr: Vec<lab::Frr>,
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
        lab::frr::linux_vtep(&b.name, "br42", "vx42", 42, "198.19.0.2", "hb0")
            .expect("the Linux VTEP");
        Fabric {
            vtep: None,
            frr: Vec::new(),
            hosts,
            a,
            b,
        }
    }

    /// Starts `what` (a lock strategy, or `LINUX`) as VTEP A.
    fn start_vtep(&mut self, what: &str, age: Option<u32>) {
        self.vtep = Some(Vtep::start(
            &self.a,
            what,
            "198.19.0.1",
            &[(42, "ha0")],
            age,
        ));
    }

    fn vtep(&self) -> &Vtep {
        self.vtep.as_ref().expect("VTEP A started")
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
    /// other meanwhile (so that its VTEP hears it); panics with `what`,
    /// both VTEPs' state and FRR's logs otherwise.
    fn wait_for(&self, what: &str, mut done: impl FnMut(&Fabric) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.nudge();
            if done(self) {
                return;
            }
            if Instant::now() > deadline {
                let logs: String = self.frr.iter().map(lab::Frr::logs).collect();
                panic!(
                    "{what}: not within {WAIT:?}\nA's fdb:\n{}\nB's vx42: {:?}\n{logs}",
                    self.vtep().state(),
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

    /// Whether A has `mac` installed behind B.
    fn installed_here(&self, mac: &str) -> bool {
        self.vtep().installed(42, mac) == ["198.19.0.2"]
    }

    /// Whether the Linux VTEP B has `mac` behind A, as FRR installed it
    /// (the flood entry: as zebra writes it).
    fn installed_there(&self, mac: &str) -> bool {
        bridge_fdb(&self.b.name, "vx42").into_iter().any(|e| {
            e["mac"] == mac
                && e["dst"] == "198.19.0.1"
                && (mac == "00:00:00:00:00:00" || has_flag(&e, "extern_learn"))
        })
    }

    /// Both hosts' routes and both flood entries in place.
    fn wait_for_routes(&self) {
        let mac_b = self.mac(1);
        self.wait_for("A's routes", |f| {
            f.vtep().flood(42) == ["198.19.0.2"] && f.installed_here(&mac_b)
        });
        let mac_a = self.mac(0);
        self.wait_for("B's routes", |f| {
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

    /// VTEP A stopped (mpbridge: cleanly, leaving nothing).
    fn stop(&mut self) {
        if let Some(vtep) = self.vtep.take() {
            vtep.stop(&self.a);
        }
    }
}

/// Whether a `bridge -j fdb` entry has `flag`.
fn has_flag(entry: &Value, flag: &str) -> bool {
    entry["flags"]
        .as_array()
        .is_some_and(|f| f.contains(&Value::from(flag)))
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
/// talking; the VXLAN port removed: its route withdrawn (and mpbridge's
/// mirror gone); added again: the routes back.
fn routes_both_ways_and_the_hosts_talk(what: &str) {
    if !can_run(&format!("routes_both_ways_and_the_hosts_talk_{what}")) {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_vtep(what, None);
    fabric.start_frr();
    fabric.wait_for_routes();
    let vtep = fabric.vtep();
    if vtep.is_mpbridge() {
        let stats = ctl_json(&vtep.socket, &["stats", "-j"]);
        let port = port_stats(&stats, "vxlan:s42");
        assert_eq!(port["flags"]["learning"], false, "{port}");
        assert!(port["evpn"]["local_macs"].as_u64() >= Some(1), "{port}");
        assert!(port["evpn"]["remote_macs"].as_u64() >= Some(1), "{port}");
    }
    fabric.talk(5301);

    vtep.remove_segment(42);
    if vtep.is_mpbridge() {
        assert_eq!(links_named(&fabric.a, "mpe"), Vec::<String>::new());
    }
    let mac_a = fabric.mac(0);
    fabric.wait_for("the withdrawal", |f| !f.installed_there(&mac_a));

    // Added again while running: the routes back (a mirror anew).
    vtep.add_segment(42);
    if vtep.is_mpbridge() {
        assert_eq!(links_named(&fabric.a, "mpe42").len(), 4);
    }
    fabric.wait_for_routes();
    fabric.stop();
}

reference_tests!(
    routes_both_ways_and_the_hosts_talk: talk_mutex, talk_rwlock, talk_rmlock, talk_sharded,
    talk_rcu, talk_epoch; talk_linux
);

/// `fdb del` of a local station withdraws its route; heard again, it is
/// advertised again. The Linux VTEP's host moving behind A (its MAC on a
/// third host there, the host itself silent) takes the installed entry
/// over and is advertised from A; moving back, it is installed again.
fn fdb_del_and_mac_mobility(what: &str) {
    if !can_run(&format!("fdb_del_and_mac_mobility_{what}")) {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_vtep(what, None);
    fabric.start_frr();
    fabric.wait_for_routes();
    let (mac_a, mac_b) = (fabric.mac(0), fabric.mac(1));
    fabric.quiet();

    // fdb del: withdrawn, until the host is heard again.
    fabric.vtep().fdb_del(&mac_a, "ha0");
    let deadline = Instant::now() + WAIT;
    while fabric.installed_there(&mac_a) {
        assert!(Instant::now() < deadline, "not withdrawn after fdb del");
        thread::sleep(Duration::from_millis(100));
    }
    fabric.wait_for("advertised again", |f| f.installed_there(&mac_a));

    // Host B's MAC appears behind A: a third host, while host B is silent
    // but still there, its route not withdrawn (a guest that migrated,
    // its old VTEP not yet told): the move is advertised with the next
    // sequence number, and B installs it.
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
    fabric.vtep().add_port("hm0");
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
        if fabric.vtep().learned(&mac_b, "hm0") && fabric.installed_there(&mac_b) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the move to A: A {}, B {:?}",
            fabric.vtep().state(),
            bridge_fdb(&fabric.b.name, "vx42")
        );
        thread::sleep(Duration::from_millis(200));
    }

    // And back: the mover gone, host B heard again behind B.
    fabric.vtep().del_port("hm0");
    drop(mover);
    fabric.wait_for("the move back", |f| f.installed_here(&mac_b));
    fabric.stop();
}

reference_tests!(
    fdb_del_and_mac_mobility: mobility_mutex, mobility_rwlock, mobility_rmlock,
    mobility_sharded, mobility_rcu, mobility_epoch; mobility_linux
);

/// A local station that ages out of the table is withdrawn.
fn ageing_withdraws(what: &str) {
    if !can_run(&format!("ageing_withdraws_{what}")) {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_vtep(what, Some(3));
    fabric.start_frr();
    fabric.wait_for_routes();
    let mac_a = fabric.mac(0);
    fabric.quiet();
    let deadline = Instant::now() + WAIT;
    while fabric.installed_there(&mac_a) {
        assert!(Instant::now() < deadline, "not withdrawn after ageing");
        thread::sleep(Duration::from_millis(200));
    }
    assert!(!fabric.vtep().learned(&mac_a, "ha0"), "aged out in A");
    fabric.stop();
}

reference_tests!(
    ageing_withdraws: ageing_mutex, ageing_rwlock, ageing_rmlock, ageing_sharded, ageing_rcu,
    ageing_epoch; ageing_linux
);

/// FRR started after the VTEP: it forwards meanwhile, and takes the
/// routes once zebra runs.
fn frr_started_late(what: &str) {
    if !can_run(&format!("frr_started_late_{what}")) {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_vtep(what, None);
    thread::sleep(Duration::from_secs(2));
    assert_eq!(fabric.vtep().flood(42), Vec::<String>::new());
    fabric.start_frr();
    fabric.wait_for_routes();
    fabric.talk(5311);
    fabric.stop();
}

reference_tests!(
    frr_started_late: late_mutex, late_rwlock, late_rmlock, late_sharded, late_rcu, late_epoch;
    late_linux
);

/// The next line of mpbridge's that contains `needle`, read for at most
/// `within`; every line read is kept in its log.
fn wait_for_line(daemon: &mut Daemon, needle: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while let Ok(line) = daemon
        .lines
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
    {
        let found = line.contains(needle);
        daemon.log.push(line);
        if found {
            return true;
        }
    }
    false
}

/// No FRR: after 30 s without a route the bridge warns, once; the port
/// forwards to its `remote=` VTEPs meanwhile, and takes the routes when
/// zebra starts.
fn warns_once_while_zebra_is_silent() {
    if !can_run("warns_once_while_zebra_is_silent") {
        return;
    }
    let mut fabric = Fabric::new();
    let name = lab::unique("ev");
    let mut daemon = Daemon::start(
        &fabric.a,
        &[
            "run",
            &format!("--name={name}"),
            "--port",
            "raw:ha0",
            "--port",
            "vxlan:s42,vni=42,local=198.19.0.1,evpn=on,remote=198.19.0.2",
        ],
    );
    let warning = "no EVPN routes from zebra";
    assert!(
        wait_for_line(&mut daemon, warning, Duration::from_secs(45)),
        "no warning: {:?}",
        daemon.log
    );
    // Forwarding meanwhile: host A's broadcast reaches host B through the
    // listed remote.
    fabric.quiet();
    assert_eq!(broadcast_counts(&fabric.hosts, 0, 5600), [1]);
    fabric.vtep = Some(Vtep {
        daemon: Some(daemon),
        name: name.clone(),
        socket: PathBuf::from(format!("/run/mpbridge/{name}.sock")),
        ns: fabric.a.name.clone(),
        local: "198.19.0.1".to_owned(),
        segments: vec![(42, "ha0".to_owned())],
    });
    fabric.start_frr();
    fabric.wait_for_routes();
    let daemon = fabric.vtep.take().unwrap().daemon.unwrap();
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    let warnings = log.iter().filter(|l| l.contains(warning)).count();
    assert_eq!(warnings, 1, "{log:?}");
}

/// mpbridge killed: its mirror stays until it starts again, which removes
/// it, makes it anew and gets the routes back; stopped, nothing is left
/// and the routes are withdrawn; started again, they come back.
fn killed_and_started_again(lock: &str) {
    if !can_run(&format!("killed_and_started_again_{lock}")) {
        return;
    }
    let mut fabric = Fabric::new();
    fabric.start_vtep(lock, None);
    fabric.start_frr();
    fabric.wait_for_routes();
    let mut daemon = fabric.vtep.as_mut().unwrap().daemon.take().unwrap();
    daemon.child.kill().expect("SIGKILL");
    daemon.child.wait().expect("reaped");
    drop(daemon);
    assert_eq!(
        links_named(&fabric.a, "mpe42").len(),
        4,
        "a killed bridge leaves its mirror"
    );
    let name = fabric.vtep().name.clone();
    let vtep = Vtep::start_as(&name, &fabric.a, lock, "198.19.0.1", &[(42, "ha0")], None);
    fabric.vtep = Some(vtep);
    let log = fabric.vtep().daemon.as_ref().unwrap().log.join("\n");
    assert!(
        log.contains("removed the EVPN mirror devices an earlier run left"),
        "{log}"
    );
    fabric.wait_for_routes();

    // Stopped: nothing left, the routes withdrawn; started again: back.
    fabric.stop();
    let mac_a = fabric.mac(0);
    fabric.wait_for("the withdrawal at exit", |f| !f.installed_there(&mac_a));
    fabric.start_vtep(lock, None);
    fabric.wait_for_routes();
    fabric.stop();
}

strategy_tests!(
    killed_and_started_again: killed_mutex, killed_rwlock, killed_rmlock, killed_sharded,
    killed_rcu, killed_epoch
);

/// One line and exit 2, before anything is made: a VNI another device
/// carries, two EVPN ports of one VNI, a mirror port that is the data
/// port, `mirror_port=` without EVPN, EVPN without `local=`.
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
        ("vxlan:s,vni=8,evpn=on", None, "a vxlan port needs local=IP"),
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

/// Two VTEPs under test (A, C) and a Linux VTEP (B) on one underlay
/// switch, FRR on each peering with the other two, no `remote=` anywhere:
/// each VTEP's flood list holds the other two, a broadcast reaches every
/// other host exactly once, known unicast goes to one VTEP only, and every
/// pair of hosts talks.
fn three_vteps(what: &str) {
    if !can_run(&format!("three_vteps_{what}")) {
        return;
    }
    let underlay = Netns::new();
    underlay.ip(&["link", "add", "ub", "type", "bridge"]);
    underlay.ip(&["link", "set", "ub", "up"]);
    let namespaces = [Netns::new(), Netns::new(), Netns::new()];
    let hosts = [Netns::new(), Netns::new(), Netns::new()];
    for (i, ns) in namespaces.iter().enumerate() {
        let peer = format!("u{i}");
        ns.ip(&[
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
        ns.ip(&["addr", "add", &format!("198.19.0.{}/24", i + 1), "dev", "u"]);
        ns.ip(&["link", "set", "u", "up"]);
        ns.ip(&[
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
        ns.ip(&["link", "set", "hv", "mtu", "1450", "up"]);
        hosts[i].ip(&[
            "addr",
            "add",
            &format!("{}/24", Topology::addr(i)),
            "dev",
            "h1",
        ]);
        hosts[i].ip(&["link", "set", "h1", "mtu", "1450", "up"]);
    }
    let addrs = ["198.19.0.1", "198.19.0.2", "198.19.0.3"];
    // A and C under test; B, Linux.
    let vteps: Vec<Vtep> = [(0, what), (1, LINUX), (2, what)]
        .into_iter()
        .map(|(i, what)| Vtep::start(&namespaces[i], what, addrs[i], &[(42, "hv")], None))
        .collect();
    let frr: Vec<lab::Frr> = (0..3)
        .map(|i| {
            let others: Vec<&str> = (0..3).filter(|&j| j != i).map(|j| addrs[j]).collect();
            lab::Frr::start(&namespaces[i].name, &evpn_config(addrs[i], &others)).expect("FRR")
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
    let deadline = Instant::now() + WAIT;
    loop {
        nudge();
        // Every VTEP floods to the other two, and has the other two hosts
        // installed behind their VTEPs.
        let complete = (0..3).all(|i| {
            let others: Vec<usize> = (0..3).filter(|&j| j != i).collect();
            vteps[i].flood(42) == others.iter().map(|&j| addrs[j]).collect::<Vec<_>>()
                && others
                    .iter()
                    .all(|&j| vteps[i].installed(42, &macs[j]) == [addrs[j]])
        });
        if complete {
            break;
        }
        if Instant::now() > deadline {
            let logs: String = frr.iter().map(lab::Frr::logs).collect();
            let state: String = vteps.iter().map(Vtep::state).collect();
            panic!("routes of three VTEPs:\n{state}\n{logs}");
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
    let before = vteps[2].rx_frames(42);
    hosts[0].run(|| {
        let socket = UdpSocket::bind("0.0.0.0:0").expect("bind");
        for _ in 0..50 {
            socket.send_to(b"unicast", "198.18.0.2:9").expect("send");
        }
    });
    thread::sleep(Duration::from_millis(300));
    let got = vteps[2].rx_frames(42) - before;
    assert!(got < 50, "C got {got} frames of 50 sent to B");

    // Every pair talks.
    netns::tcp_transfer(&hosts, 0, 1, 5401, 1);
    netns::tcp_transfer(&hosts, 1, 2, 5402, 2);
    netns::tcp_transfer(&hosts, 2, 0, 5403, 3);
    drop(frr);
    for (i, vtep) in vteps.into_iter().enumerate() {
        vtep.stop(&namespaces[i]);
    }
}

reference_tests!(
    three_vteps: three_mutex, three_rwlock, three_rmlock, three_sharded, three_rcu, three_epoch;
    three_linux
);

/// Two VNIs on VTEP A (mpbridge: one bridge, `--vlan-filtering`, an EVPN
/// port per VNI with an access VLAN; Linux: a bridge per VNI) against a
/// Linux VTEP with a bridge per VNI, all four hosts in one IP subnet: each
/// VNI's routes stay in it, a broadcast reaches its own VNI's hosts only,
/// and each VNI's pair talks.
fn two_vnis_kept_apart(what: &str) {
    if !can_run(&format!("two_vnis_kept_apart_{what}")) {
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
    let vtep = Vtep::start(&a, what, "198.19.0.1", &[(10, "h0"), (20, "h2")], None);
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
    let there = |vx: &str, mac: &str| {
        bridge_fdb(&b.name, vx)
            .iter()
            .any(|e| e["mac"] == mac && e["dst"] == "198.19.0.1")
    };
    let deadline = Instant::now() + WAIT;
    loop {
        nudge();
        if vtep.installed(10, &macs[1]) == ["198.19.0.2"]
            && vtep.installed(20, &macs[3]) == ["198.19.0.2"]
            && there("vx10", &macs[0])
            && there("vx20", &macs[2])
        {
            break;
        }
        if Instant::now() > deadline {
            let logs: String = frr.iter().map(lab::Frr::logs).collect();
            panic!("routes of two VNIs: A's fdb:\n{}\n{logs}", vtep.state());
        }
        thread::sleep(Duration::from_millis(100));
    }
    // Each VNI's stations only in its own VNI, on both sides.
    assert_eq!(vtep.installed(20, &macs[1]), Vec::<String>::new());
    assert_eq!(vtep.installed(10, &macs[3]), Vec::<String>::new());
    assert!(!there("vx20", &macs[0]));
    assert!(!there("vx10", &macs[2]));
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
    vtep.stop(&a);
}

reference_tests!(
    two_vnis_kept_apart: vnis_mutex, vnis_rwlock, vnis_rmlock, vnis_sharded, vnis_rcu,
    vnis_epoch; vnis_linux
);

lab::test_main! {
    privileged: [
        talk_mutex,
        talk_rwlock,
        talk_rmlock,
        talk_sharded,
        talk_rcu,
        talk_epoch,
        talk_linux,
        three_mutex,
        three_rwlock,
        three_rmlock,
        three_sharded,
        three_rcu,
        three_epoch,
        three_linux,
        ageing_mutex,
        ageing_rwlock,
        ageing_rmlock,
        ageing_sharded,
        ageing_rcu,
        ageing_epoch,
        ageing_linux,
        vnis_mutex,
        vnis_rwlock,
        vnis_rmlock,
        vnis_sharded,
        vnis_rcu,
        vnis_epoch,
        vnis_linux,
        mobility_mutex,
        mobility_rwlock,
        mobility_rmlock,
        mobility_sharded,
        mobility_rcu,
        mobility_epoch,
        mobility_linux,
        killed_mutex,
        killed_rwlock,
        killed_rmlock,
        killed_sharded,
        killed_rcu,
        killed_epoch,
        warns_once_while_zebra_is_silent,
        late_mutex,
        late_rwlock,
        late_rmlock,
        late_sharded,
        late_rcu,
        late_epoch,
        late_linux,
        bad_input_is_refused,
    ],
    plain: [],
}
