//! The CNI plugin (`mpbridge-cni`) driven as a runtime drives it: CNI_*
//! variables and a configuration on stdin, run in a "host" namespace
//! where the bridge runs, for containers that are namespaces of their own,
//! with Debian's host-local as IPAM. Each scenario runs for mpbridge under
//! the six strategies and, where the reference has the feature here, for
//! the reference `bridge` plugin (containernetworking-plugins) with a
//! Linux bridge in mpbridge's place.

mod netns;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netns::*;
use serde_json::{json, Value};

/// Where Debian's containernetworking-plugins are.
const CNI_PATH: &str = "/usr/lib/cni";
/// A test's stand-in for "linux" among the strategies.
const LINUX: &str = "linux";
/// The container interface's name.
const IFNAME: &str = "eth0";

fn can_run(test: &str) -> bool {
    privileged(test)
        && lab::installed(
            test,
            "/usr/lib/cni/host-local",
            "containernetworking-plugins",
        )
}

/// A host with a bridge (mpbridge, or Linux's made by the reference
/// plugin), its containers, and what the plugins write (IPAM's leases).
struct Lab {
    host: Netns,
    daemon: Option<Daemon>,
    dir: TempDir,
    socket: PathBuf,
    /// The Linux bridge's name, for the reference.
    linux: Option<String>,
    containers: Vec<Netns>,
    subnet: u8,
}

impl Lab {
    /// A lab whose bridge is `what` (a strategy, or [`LINUX`]), mpbridge
    /// run with `extra` options; addresses from 198.18.`subnet`.0/24.
    fn new(what: &str, extra: &[&str], subnet: u8) -> Lab {
        let host = Netns::new();
        let dir = TempDir::new("cni");
        let socket = dir.path("ctl.sock");
        let (daemon, linux) = if what == LINUX {
            // Made here with a fixed address, which the reference plugin
            // then uses as it finds it: a bridge that takes its ports'
            // lowest MAC changes it as ports come, and the reference's
            // CHECK compares the one its ADD recorded.
            let bridge = unique("cb");
            host.ip(&["link", "add", &bridge, "type", "bridge"]);
            host.ip(&["link", "set", &bridge, "address", "02:00:5e:00:53:01", "up"]);
            (None, Some(bridge))
        } else {
            let ctl = format!("--ctl={}", socket.display());
            let mut args = vec!["run", "--name", "cnitest", "--lock", what, &ctl];
            args.extend_from_slice(extra);
            (Some(Daemon::start(&host, &args)), None)
        };
        Lab {
            host,
            daemon,
            dir,
            socket,
            linux,
            containers: Vec::new(),
            subnet,
        }
    }

    fn is_mpbridge(&self) -> bool {
        self.linux.is_none()
    }

    /// The network's configuration, with `extra` keys. The reference
    /// plugin here (1.1.1) speaks up to 1.0.0: it is given that for 1.1.0.
    fn conf(&self, version: &str, extra: Value) -> Value {
        let version = match (&self.linux, version) {
            (Some(_), "1.1.0") => "1.0.0",
            _ => version,
        };
        let mut conf = json!({
            "cniVersion": version,
            "name": "testnet",
            "ipam": {
                "type": "host-local",
                "subnet": format!("198.18.{}.0/24", self.subnet),
                "dataDir": self.dir.path("ipam"),
            },
        });
        match &self.linux {
            Some(bridge) => {
                conf["type"] = "bridge".into();
                conf["bridge"] = bridge.clone().into();
            }
            None => {
                conf["type"] = "mpbridge".into();
                conf["ctl"] = self.socket.display().to_string().into();
            }
        }
        for (key, value) in extra.as_object().into_iter().flatten() {
            conf[key] = value.clone();
        }
        conf
    }

    /// A new container; its index.
    fn container(&mut self) -> usize {
        self.containers.push(Netns::new());
        self.containers.len() - 1
    }

    fn netns_path(&self, i: usize) -> String {
        format!("/run/netns/{}", self.containers[i].name)
    }

    /// The plugin (mpbridge's or the reference) run in the host for
    /// container `i` with `command` and `conf`: its exit code and output.
    fn cni(&self, command: &str, i: usize, conf: &Value) -> (i32, Value) {
        let netns = self.containers.get(i).map(|_| self.netns_path(i));
        let container = format!("ctr{i}");
        let netns = netns.as_deref().unwrap_or("");
        self.call(&self.program(), command, &container, netns, conf)
    }

    /// `program` run in the host as a runtime runs it for attachment
    /// (`container`, eth0) in `netns`.
    fn call(
        &self,
        program: &str,
        command: &str,
        container: &str,
        netns: &str,
        conf: &Value,
    ) -> (i32, Value) {
        self.plugin(
            program,
            &[
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", container),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", IFNAME),
                ("CNI_PATH", CNI_PATH),
            ],
            conf,
        )
    }

    fn program(&self) -> String {
        match self.linux {
            Some(_) => format!("{CNI_PATH}/bridge"),
            None => env!("CARGO_BIN_EXE_mpbridge-cni").to_owned(),
        }
    }

    /// `program` run in the host with exactly `vars` and `stdin`.
    fn plugin(&self, program: &str, vars: &[(&str, &str)], stdin: &Value) -> (i32, Value) {
        run_plugin(&self.host, program, vars, &stdin.to_string())
    }

    /// ADD for container `i`, which must succeed: its result.
    fn add(&self, i: usize, conf: &Value) -> Value {
        let (code, out) = self.cni("ADD", i, conf);
        assert_eq!(code, 0, "ADD ctr{i}: {out}");
        out
    }

    /// DEL for container `i`, which must succeed.
    fn del(&self, i: usize, conf: &Value) {
        let (code, out) = self.cni("DEL", i, conf);
        assert_eq!(code, 0, "DEL ctr{i}: {out}");
    }

    /// The container's address (the result's first).
    fn address(result: &Value) -> Ipv4Addr {
        let cidr = result["ips"][0]["address"].as_str().expect("an address");
        cidr.split('/').next().unwrap().parse().unwrap()
    }

    /// The veths in the host namespace.
    fn host_veths(&self) -> Vec<String> {
        links(&self.host, "veth")
    }

    /// The bridge's ports: mpbridge's `port show`, or the Linux bridge's
    /// links.
    fn ports(&self) -> Vec<Value> {
        match &self.linux {
            None => ctl_json(&self.socket, &["port", "show", "-j"])
                .as_array()
                .unwrap()
                .clone(),
            Some(bridge) => links(&self.host, "veth")
                .into_iter()
                .filter(|veth| master_of(&self.host, veth).as_deref() == Some(bridge.as_str()))
                .map(Value::from)
                .collect(),
        }
    }

    /// The addresses host-local holds leased.
    fn leases(&self) -> Vec<String> {
        let dir = self.dir.path("ipam").join("testnet");
        let mut leases: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.parse::<std::net::IpAddr>().is_ok())
            .collect();
        leases.sort();
        leases
    }

    /// Nothing of any container left: no veth, port or lease.
    fn assert_empty(&self) {
        // A veth whose other end was in a deleted namespace goes when the
        // kernel's namespace cleanup runs, after `ip netns del` returned:
        // give it a bounded while.
        let veths = lab::poll(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || self.host_veths(),
            Vec::is_empty,
        );
        assert_eq!(veths, Vec::<String>::new(), "veths left");
        assert_eq!(self.ports(), Vec::<Value>::new(), "ports left");
        assert_eq!(self.leases(), Vec::<String>::new(), "leases left");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // The bridge first, then the namespaces (and their links).
        self.daemon.take();
    }
}

/// Runs `program` in namespace `ns` with exactly `vars` (and PATH) and
/// `stdin`: its exit code and its stdout read as JSON (null if empty).
fn run_plugin(ns: &Netns, program: &str, vars: &[(&str, &str)], stdin: &str) -> (i32, Value) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.name, program])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run the plugin");
    // A plugin refusing its environment exits before reading.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let value = if stdout.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{program} printed {stdout:?}: {e}"))
    };
    (status.code().unwrap_or(-1), value)
}

/// The links of `kind` ("veth") in namespace `ns`.
fn links(ns: &Netns, kind: &str) -> Vec<String> {
    let output = Command::new("ip")
        .args(["-n", &ns.name, "-j", "link", "show", "type", kind])
        .output()
        .unwrap();
    let links: Value = serde_json::from_slice(&output.stdout).unwrap_or(json!([]));
    let mut names: Vec<String> = links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

fn link_json(ns: &Netns, dev: &str) -> Value {
    let output = Command::new("ip")
        .args(["-n", &ns.name, "-j", "-d", "link", "show", dev])
        .output()
        .unwrap();
    serde_json::from_slice::<Value>(&output.stdout).unwrap_or(json!([]))[0].clone()
}

/// `dev`'s link once its operational state is UP, or as it is after a
/// bounded while: the kernel sets that state from its own work queue, a
/// while after the link was brought up.
fn settled(ns: &Netns, dev: &str) -> Value {
    lab::poll(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || link_json(ns, dev),
        |link| link["operstate"] == "UP",
    )
}

fn master_of(ns: &Netns, dev: &str) -> Option<String> {
    link_json(ns, dev)["master"].as_str().map(str::to_owned)
}

/// The host-side interface of an ADD result (no sandbox, a veth).
fn host_end(result: &Value) -> String {
    result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i.get("sandbox").is_none())
        .filter_map(|i| i["name"].as_str())
        .find(|name| !name.starts_with("cb"))
        .expect("a host interface")
        .to_owned()
}

/// Whether `from` reaches `addr`: a TCP connection to a closed port
/// answered (refused). Bounded at 10 s, so that a loaded machine does not
/// make a reachable host look unreachable; an unreachable one fails
/// sooner, when its address does not resolve (about 3 s).
fn reaches(from: &Netns, addr: std::net::IpAddr) -> bool {
    from.run(move || {
        match std::net::TcpStream::connect_timeout(&(addr, 9).into(), Duration::from_secs(10)) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        }
    })
}

/// Three containers get addresses and talk through the bridge (8 MiB of
/// TCP each way round, byte for byte); the results name the container's
/// interface, its MAC and sandbox; DEL of all leaves nothing.
fn talk(what: &str) {
    if !can_run(&format!("talk_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 20);
    let conf = lab.conf("1.1.0", json!({}));
    let mut addresses = Vec::new();
    for _ in 0..3 {
        let i = lab.container();
        let result = lab.add(i, &conf);
        assert_eq!(result["cniVersion"], conf["cniVersion"], "{result}");
        let index = result["ips"][0]["interface"]
            .as_u64()
            .expect("ips[].interface") as usize;
        let inside = &result["interfaces"][index];
        assert_eq!(inside["name"], IFNAME, "{result}");
        assert_eq!(inside["sandbox"], lab.netns_path(i), "{result}");
        let mac = link_json(&lab.containers[i], IFNAME)["address"].clone();
        assert_eq!(inside["mac"], mac, "{result}");
        assert_eq!(settled(&lab.containers[i], IFNAME)["operstate"], "UP");
        addresses.push(Lab::address(&result));
    }
    assert_eq!(lab.leases().len(), 3);
    assert_eq!(lab.ports().len(), 3);
    if lab.is_mpbridge() {
        for port in lab.ports() {
            assert_eq!(port["owner"]["network"], "testnet", "{port}");
            assert_eq!(port["owner"]["ifname"], IFNAME, "{port}");
            assert!(
                port["options"].as_str().unwrap().contains("ring=512K"),
                "{port}"
            );
        }
    }
    tcp_transfer_to(
        &lab.containers[0],
        &lab.containers[1],
        addresses[1],
        5301,
        1,
    );
    tcp_transfer_to(
        &lab.containers[1],
        &lab.containers[2],
        addresses[2],
        5302,
        2,
    );
    tcp_transfer_to(
        &lab.containers[2],
        &lab.containers[0],
        addresses[0],
        5303,
        3,
    );
    for i in 0..3 {
        lab.del(i, &conf);
    }
    lab.assert_empty();
}
reference_tests!(talk: talk_mutex, talk_rwlock, talk_rmlock, talk_sharded, talk_rcu, talk_epoch; talk_linux);

/// DEL twice, DEL after the namespace is gone, DEL without a namespace,
/// DEL of a container never added: each succeeds, and the leases go.
fn del_is_idempotent(what: &str) {
    if !can_run(&format!("del_is_idempotent_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 21);
    let conf = lab.conf("1.1.0", json!({}));
    let a = lab.container();
    let b = lab.container();
    lab.add(a, &conf);
    lab.add(b, &conf);
    lab.del(a, &conf);
    lab.del(a, &conf);
    // b's namespace goes, and with it its end of the veth (so the host
    // end): only the port and the lease remain to undo.
    let b_path = lab.netns_path(b);
    drop(lab.containers.remove(b));
    let program = lab.program();
    for (container, netns, what) in [
        ("ctr1", b_path.as_str(), "after its namespace went"),
        ("ctr1", "", "without a namespace"),
        ("never-added", "", "of a container never added"),
    ] {
        let (code, out) = lab.call(&program, "DEL", container, netns, &conf);
        assert_eq!(code, 0, "DEL {what}: {out}");
    }
    lab.assert_empty();
}
reference_tests!(del_is_idempotent: del_mutex, del_rwlock, del_rmlock, del_sharded, del_rcu, del_epoch; del_linux);

/// IPAM's routes are made in the container; CHECK with the ADD's result
/// passes; it fails (an error object) without prevResult, after one of
/// the routes is removed, and after the container's interface is.
fn check(what: &str) {
    if !can_run(&format!("check_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 22);
    let mut conf = lab.conf("1.0.0", json!({}));
    // A route by its own gateway, and one without (by the subnet's). The
    // reference plugin here (1.1.1) fails CHECK on the second, which it
    // made itself, as "not found": it is left out for it.
    let mut routes = vec![json!({"dst": "198.19.0.0/17", "gw": "198.18.22.254"})];
    if lab.is_mpbridge() {
        routes.push(json!({"dst": "198.19.128.0/17"}));
    }
    conf["ipam"]["routes"] = routes.clone().into();
    let a = lab.container();
    let result = lab.add(a, &conf);
    assert_eq!(result["routes"], Value::from(routes), "{result}");
    let table = Command::new("ip")
        .args(["-n", &lab.containers[a].name, "route", "show"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("198.19.0.0/17 via 198.18.22.254 dev eth0"),
        "{table}"
    );
    if lab.is_mpbridge() {
        assert!(
            table.contains("198.19.128.0/17 via 198.18.22.1 dev eth0"),
            "{table}"
        );
    }
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = result.clone();
    let (code, out) = lab.cni("CHECK", a, &with_prev);
    assert_eq!(code, 0, "CHECK of a good attachment: {out}");
    let (code, out) = lab.cni("CHECK", a, &conf);
    assert_ne!(code, 0, "CHECK without prevResult: {out}");
    assert!(
        out["code"].as_u64().is_some() && out["msg"].is_string(),
        "{out}"
    );
    // Each failure in turn, the last one found first by mpbridge's CHECK,
    // whose message names it.
    let fails = |lab: &Lab, what: &str, says: &str| {
        let (code, out) = lab.cni("CHECK", a, &with_prev);
        assert_ne!(code, 0, "CHECK after {what}: {out}");
        let msg = out["msg"].as_str().unwrap_or_default();
        assert!(
            !lab.is_mpbridge() || msg.contains(says),
            "CHECK after {what}: {out}"
        );
    };
    if lab.is_mpbridge() {
        ctl_ok(
            &lab.socket,
            &["port", "del", &format!("raw:{}", host_end(&result))],
        );
        fails(&lab, "the port went", "bridge port");
    }
    lab.containers[a].ip(&["route", "del", "198.19.0.0/17"]);
    fails(&lab, "a route went", "no route to 198.19.0.0/17");
    lab.containers[a].ip(&["link", "del", IFNAME]);
    fails(&lab, "eth0 went", "container interface eth0 is gone");
    let (_, out) = lab.cni("CHECK", a, &with_prev);
    assert!(out["code"].as_u64().is_some(), "{out}");
    lab.del(a, &conf);
    lab.assert_empty();
}
reference_tests!(check: check_mutex, check_rwlock, check_rmlock, check_sharded, check_rcu, check_epoch; check_linux);

/// An IPAM range of two addresses: the third ADD fails with an error
/// object and leaves nothing behind (no veth, port, lease or interface);
/// its DEL then succeeds.
fn ipam_exhaustion(what: &str) {
    if !can_run(&format!("ipam_exhaustion_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 23);
    let mut conf = lab.conf("1.1.0", json!({}));
    conf["ipam"]["rangeStart"] = "198.18.23.10".into();
    conf["ipam"]["rangeEnd"] = "198.18.23.11".into();
    for _ in 0..3 {
        lab.container();
    }
    lab.add(0, &conf);
    lab.add(1, &conf);
    let veths = lab.host_veths();
    let ports = lab.ports().len();
    let (code, out) = lab.cni("ADD", 2, &conf);
    assert_ne!(code, 0, "a third ADD on two addresses: {out}");
    assert!(out["msg"].is_string(), "{out}");
    assert_eq!(lab.leases(), ["198.18.23.10", "198.18.23.11"]);
    // The reference plugin here (1.1.1) makes the veth before it asks
    // IPAM and leaves it when IPAM fails, until the runtime's DEL;
    // mpbridge's undoes it at once.
    if lab.is_mpbridge() {
        assert_eq!(lab.host_veths(), veths);
        assert_eq!(lab.ports().len(), ports);
        assert!(links(&lab.containers[2], "veth").is_empty());
    } else {
        assert_eq!(lab.host_veths().len(), veths.len() + 1);
    }
    lab.del(0, &conf);
    lab.del(1, &conf);
    lab.del(2, &conf);
    lab.assert_empty();
}
reference_tests!(ipam_exhaustion: exhaustion_mutex, exhaustion_rwlock, exhaustion_rmlock, exhaustion_sharded, exhaustion_rcu, exhaustion_epoch; exhaustion_linux);

/// `mtu` on both ends; `hairpinMode`: a broadcast from the container
/// comes back to it (and not without hairpin).
fn mtu_and_hairpin(what: &str) {
    if !can_run(&format!("mtu_and_hairpin_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 24);
    let hairpin = lab.conf("1.1.0", json!({"mtu": 1400, "hairpinMode": true}));
    let plain = lab.conf("1.1.0", json!({"mtu": 1400}));
    let a = lab.container();
    let b = lab.container();
    let result = lab.add(a, &hairpin);
    lab.add(b, &plain);
    assert_eq!(link_json(&lab.containers[a], IFNAME)["mtu"], 1400);
    assert_eq!(link_json(&lab.host, &host_end(&result))["mtu"], 1400);
    for (i, expected) in [(a, true), (b, false)] {
        let mac_text = link_json(&lab.containers[i], IFNAME)["address"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut own = [0u8; 6];
        for (byte, part) in own.iter_mut().zip(mac_text.split(':')) {
            *byte = u8::from_str_radix(part, 16).unwrap();
        }
        let mut station = Station::on(&lab.containers[i]);
        station.drain();
        for tag in 0..5 {
            station.send(&test_frame(BROADCAST, own, tag, 100));
        }
        let back = station
            .collect(Duration::from_millis(500))
            .into_iter()
            .filter(|f| f[6..12] == own)
            .count();
        assert_eq!(
            back > 0,
            expected,
            "container {i}: {back} of its broadcasts came back"
        );
    }
    lab.del(a, &hairpin);
    lab.del(b, &plain);
    lab.assert_empty();
}
reference_tests!(mtu_and_hairpin: mtu_mutex, mtu_rwlock, mtu_rmlock, mtu_sharded, mtu_rcu, mtu_epoch; mtu_linux);

/// `macspoofchk`: frames from the container's own MAC pass, frames it
/// sends from another are dropped.
fn macspoofchk(what: &str) {
    if !can_run(&format!("macspoofchk_{what}"))
        || (what == LINUX && !lab::installed("macspoofchk_linux", "nft", "nftables"))
    {
        return;
    }
    let mut lab = Lab::new(what, &[], 25);
    let checked = lab.conf("1.1.0", json!({"macspoofchk": true}));
    let plain = lab.conf("1.1.0", json!({}));
    let a = lab.container();
    let b = lab.container();
    let result = lab.add(a, &checked);
    let peer = lab.add(b, &plain);
    tcp_transfer_to(
        &lab.containers[a],
        &lab.containers[b],
        Lab::address(&peer),
        5311,
        11,
    );
    let own = link_mac(&lab.containers[a], IFNAME);
    let spoofed = mac(0x5f);
    let mut sender = Station::on(&lab.containers[a]);
    let mut receiver = Station::on(&lab.containers[b]);
    receiver.drain();
    for tag in 0..10 {
        sender.send(&test_frame(
            BROADCAST,
            if tag % 2 == 0 { own } else { spoofed },
            tag,
            100,
        ));
    }
    let got = receiver.collect(Duration::from_millis(500));
    let from = |src: [u8; 6]| got.iter().filter(|f| f[6..12] == src).count();
    assert_eq!(from(own), 5, "frames from the container's own MAC");
    assert_eq!(from(spoofed), 0, "frames from a spoofed MAC");
    if lab.is_mpbridge() {
        let stats = ctl_json(&lab.socket, &["stats", "-j"]);
        let port = port_stats(&stats, &format!("raw:{}", host_end(&result)));
        assert!(port["drops"]["locked"].as_u64() >= Some(5), "{port}");
    }
    lab.del(a, &checked);
    lab.del(b, &plain);
    lab.assert_empty();
}
reference_tests!(macspoofchk: spoof_mutex, spoof_rwlock, spoof_rmlock, spoof_sharded, spoof_rcu, spoof_epoch; spoof_linux);

/// `vlan`: containers of one VLAN talk, of two do not; on a bridge
/// without --vlan-filtering ADD fails and leaves nothing. (This kernel's
/// bridge has no VLAN filtering, so the reference cannot run it here.)
fn vlans(what: &str) {
    if !can_run(&format!("vlans_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &["--vlan-filtering"], 26);
    let ten = lab.conf("1.1.0", json!({"vlan": 10}));
    let twenty = lab.conf("1.1.0", json!({"vlan": 20}));
    for _ in 0..3 {
        lab.container();
    }
    let results = [lab.add(0, &ten), lab.add(1, &ten), lab.add(2, &twenty)];
    tcp_transfer_to(
        &lab.containers[0],
        &lab.containers[1],
        Lab::address(&results[1]),
        5321,
        21,
    );
    assert!(
        !reaches(&lab.containers[0], Lab::address(&results[2]).into()),
        "VLAN 10 reached VLAN 20"
    );
    assert!(
        !reaches(&lab.containers[2], Lab::address(&results[1]).into()),
        "VLAN 20 reached VLAN 10"
    );
    for (i, conf) in [(0, &ten), (1, &ten), (2, &twenty)] {
        lab.del(i, conf);
    }
    lab.assert_empty();

    let mut plain = Lab::new(what, &[], 27);
    let conf = plain.conf("1.1.0", json!({"vlan": 10}));
    let a = plain.container();
    let (code, out) = plain.cni("ADD", a, &conf);
    assert_ne!(code, 0, "vlan on a bridge without --vlan-filtering: {out}");
    assert!(
        out["msg"].as_str().unwrap().contains("vlan-filtering"),
        "{out}"
    );
    plain.assert_empty();
    assert!(links(&plain.containers[a], "veth").is_empty());
}
strategy_tests!(vlans: vlans_mutex, vlans_rwlock, vlans_rmlock, vlans_sharded, vlans_rcu, vlans_epoch);

/// `isolated`: two isolated containers do not reach each other; each
/// reaches one that is not. (The reference plugin here has no such key.)
fn isolated(what: &str) {
    if !can_run(&format!("isolated_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 28);
    let isolated = lab.conf("1.1.0", json!({"isolated": true}));
    let plain = lab.conf("1.1.0", json!({}));
    for _ in 0..3 {
        lab.container();
    }
    let results = [
        lab.add(0, &isolated),
        lab.add(1, &isolated),
        lab.add(2, &plain),
    ];
    tcp_transfer_to(
        &lab.containers[0],
        &lab.containers[2],
        Lab::address(&results[2]),
        5331,
        31,
    );
    tcp_transfer_to(
        &lab.containers[1],
        &lab.containers[2],
        Lab::address(&results[2]),
        5332,
        32,
    );
    assert!(
        !reaches(&lab.containers[0], Lab::address(&results[1]).into()),
        "isolated reached isolated"
    );
    for (i, conf) in [(0, &isolated), (1, &isolated), (2, &plain)] {
        lab.del(i, conf);
    }
    lab.assert_empty();
}
strategy_tests!(isolated: isolated_mutex, isolated_rwlock, isolated_rmlock, isolated_sharded, isolated_rcu, isolated_epoch);

/// Each version's result layout: 0.3.x and 0.4.0 with ips[].version,
/// 1.x without; CHECK refused below 0.4.0 (code 1).
fn versions(what: &str) {
    if !can_run(&format!("versions_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 29);
    for (i, version) in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
        .into_iter()
        .enumerate()
    {
        let conf = lab.conf(version, json!({}));
        lab.container();
        let result = lab.add(i, &conf);
        assert_eq!(result["cniVersion"], conf["cniVersion"], "{result}");
        let old = version.starts_with("0.");
        assert_eq!(
            result["ips"][0].get("version").is_some(),
            old,
            "{version}: {result}"
        );
        if old {
            assert_eq!(result["ips"][0]["version"], "4", "{result}");
        }
        if version == "0.3.1" {
            let mut with_prev = conf.clone();
            with_prev["prevResult"] = result.clone();
            let (code, out) = lab.cni("CHECK", i, &with_prev);
            assert_eq!((code != 0, out["code"].as_u64()), (true, Some(1)), "{out}");
        }
        lab.del(i, &conf);
    }
    lab.assert_empty();
}
reference_tests!(versions: versions_mutex, versions_rwlock, versions_rmlock, versions_sharded, versions_rcu, versions_epoch; versions_linux);

/// A conflist's chain as a runtime runs it: mpbridge, then `tuning` and
/// `bandwidth` each given the previous result; CHECK with the chain's
/// result; DEL in reverse order.
fn chain(what: &str) {
    if !can_run(&format!("chain_{what}"))
        || !lab::installed(&format!("chain_{what}"), "tc", "iproute2")
    {
        return;
    }
    let mut lab = Lab::new(what, &[], 30);
    let a = lab.container();
    let b = lab.container();
    let first = lab.conf("1.0.0", json!({}));
    let tuning = json!({"cniVersion": "1.0.0", "name": "testnet", "type": "tuning", "mtu": 1280});
    let bandwidth = json!({"cniVersion": "1.0.0", "name": "testnet", "type": "bandwidth",
        "ingressRate": 100_000_000, "ingressBurst": 1_000_000,
        "egressRate": 100_000_000, "egressBurst": 1_000_000});
    let run = |program: &str, command: &str, i: usize, conf: &Value| {
        lab.call(
            program,
            command,
            &format!("ctr{i}"),
            &lab.netns_path(i),
            conf,
        )
    };
    let mut results = Vec::new();
    for i in [a, b] {
        let mut result = lab.add(i, &first);
        for (name, conf) in [("tuning", &tuning), ("bandwidth", &bandwidth)] {
            let mut conf = conf.clone();
            conf["prevResult"] = result.clone();
            let (code, out) = run(&format!("{CNI_PATH}/{name}"), "ADD", i, &conf);
            assert_eq!(code, 0, "{name} after {what}: {out}");
            result = out;
        }
        assert_eq!(
            link_json(&lab.containers[i], IFNAME)["mtu"],
            1280,
            "tuning's mtu"
        );
        let host = host_end(&result);
        let qdisc = Command::new("tc")
            .args(["-n", &lab.host.name, "qdisc", "show", "dev", &host])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&qdisc.stdout).contains("tbf"),
            "bandwidth's qdisc on {host}"
        );
        results.push(result);
    }
    tcp_transfer_to(
        &lab.containers[a],
        &lab.containers[b],
        Lab::address(&results[1]),
        5341,
        41,
    );
    for (i, result) in [a, b].into_iter().zip(&results) {
        // The chain's final result is what a runtime CHECKs with.
        let mut check = first.clone();
        check["prevResult"] = result.clone();
        let (code, out) = lab.cni("CHECK", i, &check);
        assert_eq!(code, 0, "CHECK after the chain: {out}");
        for (program, conf) in [
            (format!("{CNI_PATH}/bandwidth"), &bandwidth),
            (format!("{CNI_PATH}/tuning"), &tuning),
        ] {
            let mut conf = conf.clone();
            conf["prevResult"] = result.clone();
            let (code, out) = run(&program, "DEL", i, &conf);
            assert_eq!(code, 0, "DEL {program}: {out}");
        }
        lab.del(i, &first);
    }
    lab.assert_empty();
}
reference_tests!(chain: chain_mutex, chain_rwlock, chain_rmlock, chain_sharded, chain_rcu, chain_epoch; chain_linux);

/// Dual stack: an IPv4 and an IPv6 range. Both addresses usable at once
/// (IPv6 is off by default in these namespaces: the plugin turns it on for
/// the interface, as the reference does), the containers reach each other
/// over both, CHECK passes.
fn dual_stack(what: &str) {
    if !can_run(&format!("dual_stack_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 35);
    let mut conf = lab.conf("1.1.0", json!({}));
    conf["ipam"] = json!({
        "type": "host-local",
        "ranges": [[{"subnet": "198.18.35.0/24"}], [{"subnet": "2001:2:0:35::/64"}]],
        "dataDir": lab.dir.path("ipam"),
    });
    let mut results = Vec::new();
    for _ in 0..2 {
        let i = lab.container();
        let result = lab.add(i, &conf);
        let mut with_prev = conf.clone();
        with_prev["prevResult"] = result.clone();
        let (code, out) = lab.cni("CHECK", i, &with_prev);
        assert_eq!(code, 0, "CHECK: {out}");
        results.push(result);
    }
    let v6 = |result: &Value| -> std::net::IpAddr {
        let ips = result["ips"].as_array().unwrap();
        let cidr = ips
            .iter()
            .filter_map(|ip| ip["address"].as_str())
            .find(|a| a.contains(':'))
            .unwrap_or_else(|| panic!("no IPv6 address in {result}"));
        cidr.split('/').next().unwrap().parse().unwrap()
    };
    assert!(reaches(
        &lab.containers[0],
        Lab::address(&results[1]).into()
    ));
    assert!(reaches(&lab.containers[0], v6(&results[1])), "over IPv6");
    assert!(reaches(&lab.containers[1], v6(&results[0])), "over IPv6");
    for i in 0..2 {
        lab.del(i, &conf);
    }
    lab.assert_empty();
}
reference_tests!(dual_stack: dual_mutex, dual_rwlock, dual_rmlock, dual_sharded, dual_rcu, dual_epoch; dual_linux);

/// A layer-2 network (`"ipam": {}`, as Multus definitions often have):
/// a link, up, with no address; DEL leaves nothing.
fn layer2_only(what: &str) {
    if !can_run(&format!("layer2_only_{what}")) {
        return;
    }
    let mut lab = Lab::new(what, &[], 36);
    let mut conf = lab.conf("1.1.0", json!({}));
    conf["ipam"] = json!({});
    let a = lab.container();
    let result = lab.add(a, &conf);
    assert!(result.get("ips").is_none(), "{result}");
    let link = settled(&lab.containers[a], IFNAME);
    assert_eq!(link["operstate"], "UP", "{link}");
    lab.del(a, &conf);
    lab.assert_empty();
}
reference_tests!(layer2_only: l2_mutex, l2_rwlock, l2_rmlock, l2_sharded, l2_rcu, l2_epoch; l2_linux);

/// STATUS: success while the bridge answers, code 50 once it is gone;
/// refused (code 1) for a configuration older than 1.1.0.
fn status() {
    if !can_run("status") {
        return;
    }
    let mut lab = Lab::new("rcu", &[], 31);
    let conf = lab.conf("1.1.0", json!({}));
    let status = |lab: &Lab, conf: &Value| {
        lab.plugin(
            &lab.program(),
            &[("CNI_COMMAND", "STATUS"), ("CNI_PATH", CNI_PATH)],
            conf,
        )
    };
    assert_eq!(status(&lab, &conf).0, 0, "{}", status(&lab, &conf).1);
    // CNI_PATH is optional for STATUS.
    let (code, out) = lab.plugin(&lab.program(), &[("CNI_COMMAND", "STATUS")], &conf);
    assert_eq!(code, 0, "STATUS without CNI_PATH: {out}");
    let (code, out) = status(&lab, &lab.conf("1.0.0", json!({})));
    assert_eq!((code != 0, out["code"].as_u64()), (true, Some(1)), "{out}");
    lab.daemon.take();
    let (code, out) = status(&lab, &conf);
    assert_eq!((code != 0, out["code"].as_u64()), (true, Some(50)), "{out}");
    assert_eq!(out["cniVersion"], "1.1.0", "{out}");
    // And ADD, with nothing made.
    let a = lab.container();
    let (code, out) = lab.cni("ADD", a, &conf);
    assert_eq!((code != 0, out["code"].as_u64()), (true, Some(50)), "{out}");
    assert!(lab.host_veths().is_empty());
    assert!(lab.leases().is_empty());
}

/// GC with `cni.dev/valid-attachments`: the network's other attachments
/// go (ports, veths, leases), the listed one stays and passes CHECK;
/// another network's port is left alone. The older key works the same; no
/// key, or a configuration before 1.1.0, is refused; null is an empty
/// list; with the bridge gone GC fails with code 50.
fn gc() {
    if !can_run("gc") {
        return;
    }
    let mut lab = Lab::new("epoch", &[], 32);
    let conf = lab.conf("1.1.0", json!({}));
    let mut other = conf.clone();
    other["name"] = "othernet".into();
    other["ipam"]["subnet"] = "198.18.33.0/24".into();
    for _ in 0..4 {
        lab.container();
    }
    let kept = lab.add(0, &conf);
    lab.add(1, &conf);
    lab.add(2, &conf);
    lab.add(3, &other);
    let mut request = conf.clone();
    request["cni.dev/valid-attachments"] = json!([{"containerID": "ctr0", "ifname": IFNAME}]);
    let (code, out) = lab.plugin(
        &lab.program(),
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", CNI_PATH)],
        &request,
    );
    assert_eq!(code, 0, "GC: {out}");
    let owners: Vec<String> = lab
        .ports()
        .iter()
        .map(|p| format!("{}/{}", p["owner"]["network"], p["owner"]["container"]))
        .collect();
    assert_eq!(owners, ["\"testnet\"/\"ctr0\"", "\"othernet\"/\"ctr3\""]);
    assert_eq!(lab.host_veths().len(), 2);
    assert_eq!(lab.leases(), [Lab::address(&kept).to_string()]);
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = kept;
    let (code, out) = lab.cni("CHECK", 0, &with_prev);
    assert_eq!(code, 0, "CHECK of the kept one: {out}");
    let gc = |lab: &Lab, request: &Value| {
        lab.plugin(
            &lab.program(),
            &[("CNI_COMMAND", "GC"), ("CNI_PATH", CNI_PATH)],
            request,
        )
    };
    // The older key keeps the same; no key is refused; nor before 1.1.0.
    let mut older = conf.clone();
    older["cni.dev/attachments"] = json!([{"containerID": "ctr0", "ifname": IFNAME}]);
    assert_eq!(gc(&lab, &older).0, 0, "{}", gc(&lab, &older).1);
    assert_eq!(lab.ports().len(), 2);
    let (code, out) = gc(&lab, &conf);
    assert_eq!(
        (code != 0, out["code"].as_u64()),
        (true, Some(7)),
        "GC without a list: {out}"
    );
    let mut old = request.clone();
    old["cniVersion"] = "1.0.0".into();
    let (code, out) = gc(&lab, &old);
    assert_eq!(
        (code != 0, out["code"].as_u64()),
        (true, Some(1)),
        "GC at 1.0.0: {out}"
    );
    assert_eq!(lab.ports().len(), 2);
    // null, a runtime's empty list: the network has no valid attachment.
    let mut none = conf.clone();
    none["cni.dev/valid-attachments"] = Value::Null;
    assert_eq!(gc(&lab, &none).0, 0, "{}", gc(&lab, &none).1);
    let left: Vec<Value> = lab
        .ports()
        .iter()
        .map(|p| p["owner"]["network"].clone())
        .collect();
    assert_eq!(left, ["othernet"]);
    assert_eq!(lab.leases(), Vec::<String>::new());
    lab.del(0, &conf);
    lab.del(3, &other);
    lab.assert_empty();
    // A bridge that does not answer: GC fails, saying so.
    lab.daemon.take();
    let (code, out) = gc(&lab, &request);
    assert_eq!(
        (code != 0, out["code"].as_u64()),
        (true, Some(50)),
        "GC, bridge gone: {out}"
    );
}

/// Every error code, as the spec's error object with the configuration's
/// cniVersion: 4 for a missing variable or an unknown command, 6 for
/// stdin that is not JSON, 7 for a configuration of the wrong shape, 1 for
/// a version not spoken; and VERSION's list.
fn error_codes() {
    let program = env!("CARGO_BIN_EXE_mpbridge-cni");
    let run = |vars: &[(&str, &str)], stdin: &str| {
        use std::io::Write;
        let mut child = Command::new(program)
            .env_clear()
            .envs(vars.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // A plugin refusing its environment exits before reading.
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        let status = wait_exit(&mut child, Duration::from_secs(10));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        let value: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{out:?}: {e}"));
        (status.code().unwrap_or(-1), value)
    };
    let good = r#"{"cniVersion":"0.4.0","name":"n","type":"mpbridge","ctl":"/nonexistent"}"#;
    let full = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c"),
        ("CNI_NETNS", "/nonexistent"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", CNI_PATH),
    ];
    // The variables, stdin, the code, what the case is.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, u64, &'a str);
    let cases: [Case; 10] = [
        (&[], good, 4, "no CNI_COMMAND"),
        (&[("CNI_COMMAND", "FROB")], good, 4, "an unknown command"),
        (&full[..4], good, 4, "no CNI_PATH"),
        (
            &[full[0], full[1], full[3], full[4]],
            good,
            4,
            "ADD without CNI_NETNS",
        ),
        (
            &[("CNI_COMMAND", "DEL"), full[1], full[2], full[4]],
            good,
            4,
            "DEL without CNI_IFNAME",
        ),
        (&full, "{not json", 6, "stdin not JSON"),
        (
            &full,
            r#"{"cniVersion":"0.4.0","name":"n","type":"mpbridge","vlan":"ten"}"#,
            7,
            "vlan a string",
        ),
        (
            &full,
            r#"{"cniVersion":"0.4.0","name":"n","type":"mpbridge","mtu":20}"#,
            7,
            "mtu 20",
        ),
        (
            &full,
            r#"{"cniVersion":"0.2.0","name":"n","type":"mpbridge"}"#,
            1,
            "version 0.2.0",
        ),
        (
            &full,
            r#"{"cniVersion":"9.9.9","name":"n","type":"mpbridge"}"#,
            1,
            "version 9.9.9",
        ),
    ];
    for (vars, stdin, code, what) in cases {
        let (exit, out) = run(vars, stdin);
        assert_ne!(exit, 0, "{what}: {out}");
        assert_eq!(out["code"].as_u64(), Some(code), "{what}: {out}");
        assert!(
            out["msg"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {out}"
        );
        assert!(out["cniVersion"].is_string(), "{what}: {out}");
    }
    let (_, out) = run(
        &full,
        r#"{"cniVersion":"0.4.0","name":"n","type":"mpbridge","mtu":20}"#,
    );
    assert_eq!(
        out["cniVersion"], "0.4.0",
        "the configuration's version: {out}"
    );
    let (exit, out) = run(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(exit, 0);
    assert_eq!(
        out,
        json!({"cniVersion": "1.0.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
}

/// A hundred containers added and deleted: the bridge's memory per port
/// within the bound (1 MiB per worker), and nothing left after: no port,
/// veth or lease, and the bridge's descriptors back where they were.
fn hundred_containers() {
    if !can_run("hundred_containers") {
        return;
    }
    const COUNT: usize = 100;
    const WORKERS: u64 = 2;
    let mut lab = Lab::new("sharded", &["--workers", "2"], 34);
    let pid = lab.daemon.as_ref().unwrap().child.id();
    let conf = lab.conf("1.1.0", json!({}));
    // What each descriptor is, by its link: a leak shows by name.
    let fds = || {
        let mut links: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .map(|link| link.display().to_string())
            .collect();
        links.sort();
        links
    };
    // One container first: what the daemon opens once, on its first
    // port or client, is not churn's to answer for.
    let first = lab.container();
    lab.add(first, &conf);
    lab.del(first, &conf);
    // The DEL's connection and the port's sockets close after it answered
    // (below): the count to come back to is the one that has stopped
    // moving.
    let fds_before = lab::steady(Duration::from_secs(5), Duration::from_millis(200), fds);
    let rss_before = rss_kib(pid);
    let started = Instant::now();
    for _ in 0..COUNT {
        let i = lab.container();
        lab.add(i, &conf);
    }
    assert_eq!(lab.ports().len(), COUNT);
    assert_eq!(lab.leases().len(), COUNT);
    let per_port = (rss_kib(pid) - rss_before) / COUNT as u64;
    eprintln!(
        "{COUNT} containers in {:.1} s: {per_port} KiB per port with {WORKERS} workers",
        started.elapsed().as_secs_f64()
    );
    assert!(per_port <= 1024 * WORKERS, "{per_port} KiB per port");
    for i in 1..=COUNT {
        lab.del(i, &conf);
    }
    lab.assert_empty();
    // The daemon closes a client's connection when it sees the client
    // gone, and a removed port's sockets when its workers let go: both
    // after the DEL has answered. A leak never settles.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fds().len() != fds_before.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        fds().len(),
        fds_before.len(),
        "the bridge's descriptors: {:?} before, {:?} after",
        fds_before,
        fds()
    );
}

/// A podman of the test's own (Debian's 4.3 with its CNI backend, runc,
/// vfs storage, every path under `dir`), run in namespace `host`; on drop
/// its containers and image go, with `dir`.
struct Podman<'a> {
    host: &'a Netns,
    dir: &'a TempDir,
}

impl Podman<'_> {
    /// Runs podman `args`: its exit status and stdout.
    fn run(&self, args: &[&str]) -> (bool, String) {
        let d = |name: &str| self.dir.path(name).display().to_string();
        // nsenter, not `ip netns exec`: that mounts a sysfs of its own,
        // which hides the cgroup mounts runc needs.
        let mut child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.host.name))
            .arg("podman")
            .args([
                "--root",
                &d("root"),
                "--runroot",
                &d("runroot"),
                "--storage-driver",
                "vfs",
            ])
            .args(args)
            .env("CONTAINERS_CONF", self.dir.path("containers.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run podman");
        let status = wait_exit(&mut child, Duration::from_secs(120));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        if !status.success() {
            eprintln!("podman {args:?}: {err}");
        }
        (status.success(), out.trim().to_owned())
    }
}

impl Drop for Podman<'_> {
    fn drop(&mut self) {
        self.run(&["rm", "--force", "--time", "0", "--all"]);
        self.run(&["rmi", "--force", "--all"]);
    }
}

/// End to end: podman runs two containers from a locally imported image
/// (a busybox rootfs) on an mpbridge network (a conflist of cniVersion
/// 0.4.0, as podman writes them, naming the plugin `mpbridge`); one
/// fetches a page the other serves; removing them removes their ports.
fn podman_two_containers() {
    if !can_run("podman_two_containers")
        || !lab::installed("podman_two_containers", "podman", "podman")
        || !lab::installed("podman_two_containers", "runc", "runc")
        || !lab::installed("podman_two_containers", "nsenter", "util-linux")
        || !lab::installed("podman_two_containers", "tar", "tar")
    {
        return;
    }
    let lab = Lab::new("rwlock", &[], 40);
    let dir = TempDir::new("podman");
    let write = |path: PathBuf, text: &str| std::fs::write(path, text).unwrap();
    for sub in ["bin", "net.d", "rootfs/bin", "rootfs/www"] {
        std::fs::create_dir_all(dir.path(sub)).unwrap();
    }
    std::fs::copy("/bin/busybox", dir.path("rootfs/bin/busybox")).expect("a static busybox");
    write(dir.path("rootfs/www/index.html"), "served by a\n");
    let tar = Command::new("tar")
        .args(["-C", &dir.path("rootfs").display().to_string(), "-cf"])
        .arg(dir.path("rootfs.tar"))
        .arg(".")
        .status()
        .unwrap();
    assert!(tar.success());
    // Installed under the name a configuration's "type" gives.
    std::fs::copy(env!("CARGO_BIN_EXE_mpbridge-cni"), dir.path("bin/mpbridge")).unwrap();
    write(
        dir.path("containers.conf"),
        &format!(
            "[containers]\n\
             # runc cannot raise these to podman's defaults here.\n\
             default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
             [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
             [network]\nnetwork_backend = \"cni\"\n\
             cni_plugin_dirs = [\"{}\", \"{CNI_PATH}\"]\nnetwork_config_dir = \"{}\"\n",
            dir.path("bin").display(),
            dir.path("net.d").display()
        ),
    );
    let conflist = json!({
        "cniVersion": "0.4.0",
        "name": "mpbnet",
        "plugins": [{
            "type": "mpbridge",
            "ctl": lab.socket,
            "ipam": {"type": "host-local", "subnet": "198.18.40.0/24", "dataDir": dir.path("ipam")},
        }],
    });
    write(dir.path("net.d/mpbnet.conflist"), &conflist.to_string());
    let podman = Podman {
        host: &lab.host,
        dir: &dir,
    };
    let image = "localhost/mpbridge-test-busybox";
    let tar = dir.path("rootfs.tar").display().to_string();
    assert!(podman.run(&["import", &tar, image]).0, "podman import");
    let (ok, networks) = podman.run(&["network", "ls", "--format", "{{.Name}} {{.Driver}}"]);
    assert!(
        ok && networks.contains("mpbnet mpbridge"),
        "podman network ls: {networks}"
    );
    let (ok, _) = podman.run(&[
        "run",
        "-d",
        "--name",
        "a",
        "--network",
        "mpbnet",
        image,
        "/bin/busybox",
        "httpd",
        "-f",
        "-p",
        "8080",
        "-h",
        "/www",
    ]);
    assert!(ok, "podman run a");
    let (_, a) = podman.run(&[
        "inspect",
        "a",
        "--format",
        "{{(index .NetworkSettings.Networks \"mpbnet\").IPAddress}}",
    ]);
    assert!(a.starts_with("198.18.40."), "a's address: {a:?}");
    let ports = lab.ports();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0]["owner"]["network"], "mpbnet");
    let url = format!("http://{a}:8080/index.html");
    // a's httpd may not listen yet: a few tries, bounded.
    let fetch = format!(
        "for i in 1 2 3 4 5 6 7 8 9 10; do busybox wget -q -O - {url} && exit 0; sleep 0.5; done; exit 1"
    );
    let (ok, page) = podman.run(&[
        "run",
        "--rm",
        "--network",
        "mpbnet",
        image,
        "/bin/busybox",
        "sh",
        "-c",
        &fetch,
    ]);
    assert!(ok, "podman run b: wget {url}");
    assert_eq!(page, "served by a");
    assert_eq!(lab.ports().len(), 1, "b's port went with b");
    assert!(podman.run(&["rm", "--force", "--time", "0", "a"]).0);
    assert_eq!(lab.ports(), Vec::<Value>::new(), "a's port went with a");
    assert_eq!(lab.host_veths(), Vec::<String>::new());
}

lab::test_main! {
    privileged: [
        talk_mutex, talk_rwlock, talk_rmlock, talk_sharded, talk_rcu, talk_epoch, talk_linux,
        del_mutex, del_rwlock, del_rmlock, del_sharded, del_rcu, del_epoch, del_linux,
        check_mutex, check_rwlock, check_rmlock, check_sharded, check_rcu, check_epoch, check_linux,
        exhaustion_mutex, exhaustion_rwlock, exhaustion_rmlock, exhaustion_sharded, exhaustion_rcu,
        exhaustion_epoch, exhaustion_linux,
        mtu_mutex, mtu_rwlock, mtu_rmlock, mtu_sharded, mtu_rcu, mtu_epoch, mtu_linux,
        spoof_mutex, spoof_rwlock, spoof_rmlock, spoof_sharded, spoof_rcu, spoof_epoch, spoof_linux,
        vlans_mutex, vlans_rwlock, vlans_rmlock, vlans_sharded, vlans_rcu, vlans_epoch,
        isolated_mutex, isolated_rwlock, isolated_rmlock, isolated_sharded, isolated_rcu,
        isolated_epoch,
        versions_mutex, versions_rwlock, versions_rmlock, versions_sharded, versions_rcu,
        versions_epoch, versions_linux,
        chain_mutex, chain_rwlock, chain_rmlock, chain_sharded, chain_rcu, chain_epoch, chain_linux,
        dual_mutex, dual_rwlock, dual_rmlock, dual_sharded, dual_rcu, dual_epoch, dual_linux,
        l2_mutex, l2_rwlock, l2_rmlock, l2_sharded, l2_rcu, l2_epoch, l2_linux,
        status,
        gc,
        hundred_containers,
        podman_two_containers,
    ],
    plain: [error_codes],
}
