//! Operating a running mpbridge through its control socket: the MAC table,
//! the counters, and a socket that survives what clients do to it. Needs
//! root; skips with a reason otherwise (fails under MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lab::ScratchDir;
use netns::{
    ctl, ctl_json, ctl_ok, link_mac, mac, port_stats, proc_status, run_to_exit,
    settle_counts as settle, tcp_transfer, test_frame, Daemon, Netns, PortKind, Station, Topology,
    BROADCAST,
};

/// A control socket path of this test's own, in a directory removed
/// with the returned guard.
fn socket_path(test: &str) -> (ScratchDir, PathBuf) {
    let dir = ScratchDir::new("mpbctl");
    let socket = dir.join(format!("{test}.sock"));
    (dir, socket)
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The table as `fdb show --json` lists it: MAC -> (port, state).
fn fdb(socket: &Path) -> BTreeMap<String, (String, String)> {
    let entries = ctl_json(socket, &["fdb", "show", "--json"]);
    entries
        .as_array()
        .expect("an array")
        .iter()
        .map(|entry| {
            let keys: Vec<&String> = entry.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["age_s", "mac", "port", "state", "vlan"], "{entry}");
            (
                entry["mac"].as_str().unwrap().to_owned(),
                (
                    entry["port"].as_str().unwrap().to_owned(),
                    entry["state"].as_str().unwrap().to_owned(),
                ),
            )
        })
        .collect()
}

fn fdb_show_lists_every_station_on_its_port() {
    let (_scratch, socket) = socket_path("show");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 3, &[&ctl_arg]);
    tcp_transfer(&topology.hosts, 0, 1, 5201, 1);
    tcp_transfer(&topology.hosts, 1, 2, 5202, 2);
    let mut want = BTreeMap::new();
    for (i, host) in topology.hosts.iter().enumerate() {
        let learned = (format!("raw:p{i}"), "learned".to_owned());
        want.insert(mac_text(link_mac(host, "eth0")), learned);
        let own = link_mac(&topology.bridge, &format!("p{i}"));
        want.insert(mac_text(own), (format!("raw:p{i}"), "local".to_owned()));
    }
    assert_eq!(fdb(&socket), want);
    // One port's, in text.
    let (code, out, _) = ctl(&socket, &["fdb", "show", "--port", "raw:p1"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.lines().all(|l| l.contains(" port raw:p1 vlan 0 ")),
        "{out}"
    );
}

fn static_entries_steer_traffic_and_survive_ageing() {
    let (_scratch, socket) = socket_path("static");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 3, &[&ctl_arg, "--age", "1"]);
    let mut st = topology.stations();
    let never_seen = mac(0x99);
    let text = mac_text(never_seen);
    ctl_ok(&socket, &["fdb", "add", &text, "port", "raw:p2"]);
    st[0].send(&test_frame(never_seen, mac(1), 1, 60));
    assert_eq!(
        settle(&mut st),
        [0, 0, 1],
        "to the static entry's port only"
    );
    // Ageing (1 s) runs several times; the static entry stays.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        fdb(&socket)[&text],
        ("raw:p2".to_owned(), "static".to_owned())
    );
    st[0].send(&test_frame(never_seen, mac(1), 2, 60));
    assert_eq!(settle(&mut st), [0, 0, 1], "after ageing");
    ctl_ok(&socket, &["fdb", "del", &text]);
    st[0].send(&test_frame(never_seen, mac(1), 3, 60));
    assert_eq!(settle(&mut st), [0, 1, 1], "floods once deleted");
}

fn del_and_flush_make_stations_flood_again() {
    let (_scratch, socket) = socket_path("flush");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 3, &[&ctl_arg]);
    let mut st = topology.stations();
    let station = mac(5);
    let learn = |st: &mut Vec<Station>| {
        st[1].send(&test_frame(BROADCAST, station, 1, 60));
        settle(st);
        st[0].send(&test_frame(station, mac(1), 2, 60));
        assert_eq!(settle(st), [0, 1, 0], "learned on host 1");
    };
    let floods = |st: &mut Vec<Station>, what: &str| {
        st[0].send(&test_frame(station, mac(1), 3, 60));
        assert_eq!(settle(st), [0, 1, 1], "{what}");
    };
    learn(&mut st);
    let (code, out, err) = ctl(&socket, &["fdb", "flush"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("flushed"), "{out}");
    floods(&mut st, "after fdb flush");
    learn(&mut st);
    ctl_ok(&socket, &["fdb", "flush", "port", "raw:p0"]);
    st[0].send(&test_frame(station, mac(1), 4, 60));
    assert_eq!(settle(&mut st), [0, 1, 0], "another port's flush keeps it");
    ctl_ok(&socket, &["fdb", "flush", "port", "raw:p1"]);
    floods(&mut st, "after its port's flush");
    learn(&mut st);
    ctl_ok(&socket, &["fdb", "del", &mac_text(station)]);
    floods(&mut st, "after fdb del");
    // Local entries stay.
    let own = mac_text(link_mac(&topology.bridge, "p0"));
    let (code, _, err) = ctl(&socket, &["fdb", "del", &own]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("own interface"), "{err}");
}

fn stats_count_exactly_what_was_sent() {
    let (_scratch, socket) = socket_path("stats");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(
        PortKind::Raw,
        2,
        &[&ctl_arg, "--lock", "mutex", "--lockstat"],
    );
    let mut st = topology.stations();
    let before = ctl_json(&socket, &["stats", "--json"]);
    for n in 0..10 {
        st[0].send(&test_frame(BROADCAST, mac(1), n, 100));
    }
    st[0].send(&test_frame([0x01, 0x80, 0xc2, 0, 0, 0x0e], mac(1), 10, 60));
    settle(&mut st);
    let after = ctl_json(&socket, &["stats", "--json"]);
    let delta = |port: &str, key: &str| {
        port_stats(&after, port)[key].as_u64().unwrap()
            - port_stats(&before, port)[key].as_u64().unwrap()
    };
    assert_eq!(delta("raw:p0", "rx_frames"), 11);
    assert_eq!(delta("raw:p0", "rx_bytes"), 10 * 100 + 60);
    assert_eq!(delta("raw:p1", "tx_frames"), 10);
    assert_eq!(delta("raw:p1", "tx_bytes"), 10 * 100);
    assert_eq!(delta("raw:p1", "rx_frames"), 0);
    let reserved = |stats: &serde_json::Value| {
        port_stats(stats, "raw:p0")["drops"]["reserved"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(reserved(&after) - reserved(&before), 1);
    assert_eq!(after["lock"], "mutex");
    assert_eq!(after["name"], "mpbridge");
    assert_eq!(after["lockstat"]["enabled"], true);
    assert!(after["lockstat"]["acquisitions"].as_u64().unwrap() > 0);
    assert_eq!(after["workers"].as_array().unwrap().len(), 1);
    assert!(after["workers"][0]["batches"].as_u64().unwrap() > 0);
    assert_eq!(after["fdb"]["local"], 2);
    for port in ["raw:p0", "raw:p1"] {
        assert_eq!(port_stats(&after, port)["link"], "up");
        assert_eq!(port_stats(&after, port)["state"], "forwarding");
    }
    // The text form names every port.
    let (code, out, _) = ctl(&socket, &["stats"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("raw:p0: link up") && out.contains("raw:p1: link up"),
        "{out}"
    );
}

/// Open descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// One request over a fresh connection; the reply line.
fn request(socket: &Path, line: &str) -> String {
    let mut stream = UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(line.as_bytes()).unwrap();
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply).unwrap();
    reply
}

fn hostile_clients_get_errors_and_nothing_leaks() {
    let (_scratch, socket) = socket_path("hostile");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg]);
    let pid = topology.daemon.as_ref().unwrap().child.id();
    let stats = r#"{"version":1,"command":"stats"}"#.to_owned() + "\n";
    // Settle the daemon's own descriptors before counting.
    request(&socket, &stats);
    // The daemon closes that client's side once it sees it gone.
    let fds_before = quiet_fds(pid);
    let threads_before = proc_status(pid, "Threads");

    let garbage = request(&socket, "this is not json\n");
    assert!(garbage.contains(r#""ok":false"#), "{garbage}");
    let old = request(&socket, "{\"version\":99,\"command\":\"stats\"}\n");
    assert!(old.contains("version 99"), "{old}");
    let unknown = request(&socket, "{\"version\":1,\"command\":\"reboot\"}\n");
    assert!(unknown.contains(r#""ok":false"#), "{unknown}");

    // A line over 64 KiB: an error, then the connection is closed.
    let mut long = UnixStream::connect(&socket).unwrap();
    long.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = long.write_all(&vec![b'x'; 70 * 1024]);
    let mut reply = String::new();
    let _ = long.read_to_string(&mut reply);
    assert!(reply.contains("over 65536 bytes"), "{reply}");

    // Silent clients, and one that asks a lot and leaves mid-reply, while
    // traffic flows.
    let silent: Vec<UnixStream> = (0..5)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    let mut rude = UnixStream::connect(&socket).unwrap();
    rude.write_all(stats.repeat(500).as_bytes()).unwrap();
    drop(rude);
    tcp_transfer(&topology.hosts, 0, 1, 5203, 3);

    // 1000 in a row, then 50 at once.
    for _ in 0..1000 {
        assert!(request(&socket, &stats).contains(r#""ok":true"#));
    }
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..50)
            .map(|_| scope.spawn(|| request(&socket, &stats)))
            .collect();
        for client in clients {
            assert!(client.join().unwrap().contains(r#""ok":true"#));
        }
    });
    drop(silent);

    // Everything the clients opened is closed again; no thread was added.
    let deadline = Instant::now() + Duration::from_secs(5);
    while fds(pid) != fds_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fds(pid), fds_before, "descriptors leaked");
    assert_eq!(proc_status(pid, "Threads"), threads_before);
    tcp_transfer(&topology.hosts, 1, 0, 5204, 4);
}

fn one_bridge_per_socket_and_stale_sockets_are_replaced() {
    let bridge = Netns::new();
    let name = netns::unique("mpbname");
    let path = PathBuf::from(format!("/run/mpbridge/{name}.sock"));
    // A socket file nobody listens on, as a crashed bridge leaves it.
    if !Path::new("/run/mpbridge").exists() {
        // As the daemon makes it.
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o750)
            .create("/run/mpbridge")
            .unwrap();
    }
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let args = [
        "run", "--port", "tap:n0", "--port", "tap:n1", "--name", &name,
    ];
    let daemon = Daemon::start(&bridge, &args);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o660);
    assert_eq!(mode(Path::new("/run/mpbridge")), 0o750);
    let (code, out, err) = {
        let output = Command::new(env!("CARGO_BIN_EXE_mpbridge"))
            .args(["stats", "--json", "--name", &name])
            .output()
            .unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!(r#""name":"{name}""#)), "{out}");
    // A second bridge of that name refuses, touching no port.
    let (status, err) = run_to_exit(
        Some(&bridge),
        &[
            "run", "--port", "tap:m0", "--port", "tap:m1", "--name", &name,
        ],
        Duration::from_secs(5),
    );
    assert!(!status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("already running"), "{err}");
    let (status, _) = daemon.stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()));
    assert!(!path.exists(), "the socket outlived its bridge");
}

/// `--ctl-group`: the socket and the directory made for it belong to the
/// group, so that its members may control the bridge.
/// The client, run as user 65534 with only group `gid`, on `socket`.
fn client_as(socket: &Path, gid: &str, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", &format!("--regid={gid}"), "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_mpbridge"))
        .arg("--ctl")
        .arg(socket)
        .args(args)
        .output()
        .unwrap()
}

fn the_control_group_owns_the_socket() {
    use std::os::unix::fs::MetadataExt;
    let bridge = Netns::new();
    let dir = std::env::temp_dir()
        .join(netns::unique("mpbgroup"))
        .join("run");
    let socket = dir.join("br.sock");
    let ctl_arg = format!("--ctl={}", socket.display());
    let _daemon = Daemon::start(
        &bridge,
        &[
            "run",
            "--port",
            "tap:g0",
            "--port",
            "tap:g1",
            &ctl_arg,
            "--ctl-group",
            "nogroup",
        ],
    );
    let nogroup = 65534;
    assert_eq!(std::fs::metadata(&socket).unwrap().gid(), nogroup);
    assert_eq!(std::fs::metadata(&dir).unwrap().gid(), nogroup);
    // A member of the group may use it; another user may not.
    let as_user = |gid: &str| client_as(&socket, gid, &["stats"]);
    let member = as_user("65534");
    let err = String::from_utf8_lossy(&member.stderr);
    assert!(member.status.success(), "{err}");
    let stranger = as_user("1");
    let err = String::from_utf8_lossy(&stranger.stderr);
    assert_eq!(stranger.status.code(), Some(1), "{err}");
    assert!(err.contains("permission denied"), "{err}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// A control group member adds vhost-user sockets only in the vhost
/// socket directory (`--vhost-dir`, made for it); a server socket takes
/// the owner, group and mode its port names, at start, and its mode later.
fn group_members_put_vhost_sockets_in_the_vhost_dir() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let bridge = Netns::new();
    let top = std::env::temp_dir().join(netns::unique("mpbvhostdir"));
    std::fs::create_dir_all(&top).unwrap();
    std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
    struct Gone(std::path::PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(top.clone());
    let socket = top.join("run").join("br.sock");
    let vhost_dir = top.join("vhost");
    let at_start = vhost_dir.join("start.sock");
    let ctl_arg = format!("--ctl={}", socket.display());
    let dir_arg = format!("--vhost-dir={}", vhost_dir.display());
    let start_port = format!(
        "vhost:{},socket_owner=65534,socket_group=nogroup,socket_mode=0600",
        at_start.display()
    );
    let daemon = Daemon::start(
        &bridge,
        &[
            "run",
            "--port",
            "tap:h0",
            "--port",
            &start_port,
            &ctl_arg,
            &dir_arg,
            "--ctl-group",
            "nogroup",
        ],
    );
    let meta = std::fs::metadata(&vhost_dir).unwrap();
    assert_eq!(
        meta.mode() & 0o777,
        0o755,
        "the vhost socket directory is made"
    );
    let meta = std::fs::metadata(&at_start).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (65534, 65534, 0o600),
        "owner, group and mode of a socket given at start"
    );
    // Outside the directory: refused, nothing made.
    let outside = top.join("outside.sock");
    let add = |path: &str| client_as(&socket, "65534", &["port", "add", path]);
    let refused = add(&format!("vhost:{}", outside.display()));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_ne!(refused.status.code(), Some(0), "{err}");
    assert!(err.contains("--vhost-dir"), "{err}");
    assert!(!outside.exists());
    let sneaky = add(&format!("vhost:{}/../outside.sock", vhost_dir.display()));
    assert_ne!(sneaky.status.code(), Some(0));
    assert!(!outside.exists());
    // Inside: added, with its mode.
    let inside = vhost_dir.join("vm0.sock");
    let added = add(&format!("vhost:{},socket_mode=0666", inside.display()));
    let err = String::from_utf8_lossy(&added.stderr);
    assert!(added.status.success(), "{err}");
    assert_eq!(std::fs::metadata(&inside).unwrap().mode() & 0o777, 0o666);
    // An owner after start needs CAP_CHOWN, which the bridge dropped: one
    // line saying so, and no socket left behind.
    let later = vhost_dir.join("vm1.sock");
    let (code, _, err) = ctl(
        &socket,
        &[
            "port",
            "add",
            &format!("vhost:{},socket_owner=65534", later.display()),
        ],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("CAP_CHOWN") && err.trim().lines().count() == 1,
        "{err}"
    );
    assert!(!later.exists(), "no socket left behind");
    drop(daemon);
}

fn client_errors_are_one_line_with_the_right_exit_code() {
    let (_scratch, socket) = socket_path("client");
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["fdb", "add", "02:zz:00:00:00:01", "port", "raw:p0"],
            2,
            "'02:zz:00:00:00:01'",
        ),
        (
            &[
                "fdb",
                "add",
                "02:00:00:00:00:01",
                "port",
                "raw:p0",
                "vlan",
                "5000",
            ],
            2,
            "'5000'",
        ),
        (&["fdb", "show", "--vlan", "x"], 2, "'x'"),
        (&["fdb", "frobnicate"], 2, "frobnicate"),
        (
            &["stats"],
            1,
            &format!("no bridge is listening on {}", socket.display()),
        ),
        (&["fdb", "add", "02:00:00:00:00:01"], 2, "port PORT"),
    ];
    for (args, want, needle) in cases {
        let (code, out, err) = ctl(&socket, args);
        assert_eq!(code, want, "{args:?}: {err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // A socket this user may not use.
    let bridge = Netns::new();
    let ctl_arg = format!("--ctl={}", socket.display());
    let _daemon = Daemon::start(
        &bridge,
        &["run", "--port", "tap:q0", "--port", "tap:q1", &ctl_arg],
    );
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_mpbridge"))
        .arg("--ctl")
        .arg(&socket)
        .arg("stats")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("permission denied"), "{err}");
}

/// The daemon's log lines, for a failure message.
fn still_running(topology: &mut Topology) {
    let daemon = topology.daemon.as_mut().unwrap();
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the bridge exited: {:?}",
        daemon.log
    );
}

fn ports_come_and_go_while_traffic_flows() {
    let (_scratch, socket) = socket_path("ports");
    let ctl_arg = format!("--ctl={}", socket.display());
    let mut topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg, "--workers", "2"]);
    // The third host's link, bridged only while the port is in.
    let third = Netns::new();
    third.add_veth("p2", &topology.bridge).expect("veth");
    third.ip(&["addr", "add", "198.18.0.3/24", "dev", "eth0"]);
    third.ip(&["link", "set", "eth0", "up"]);
    // TCP between hosts 0 and 1, byte-checked, all along.
    netns::while_tcp_flows(&topology.hosts, 5300, || {
        for round in 0..10 {
            let (code, out, err) = ctl(&socket, &["port", "add", "raw:p2"]);
            assert_eq!(code, 0, "round {round}: {err}");
            assert_eq!(out.trim(), "added raw:p2");
            // The new port floods and learns at once: host 2 reaches host 0.
            let connected = third.run(|| {
                let addr = std::net::SocketAddr::from(([198, 18, 0, 1], 9));
                // Connection refused (RST) proves the round trip through
                // the bridge; a timeout would mean no path.
                match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
                    Ok(_) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
                }
            });
            assert!(connected, "round {round}: host 2 cannot reach host 0");
            let table = fdb(&socket);
            assert!(
                table
                    .values()
                    .any(|(port, state)| port == "raw:p2" && state == "learned"),
                "round {round}: nothing learned on the new port: {table:?}"
            );
            let (code, out, err) = ctl(&socket, &["port", "del", "raw:p2"]);
            assert_eq!(code, 0, "round {round}: {err}");
            assert_eq!(out.trim(), "removed raw:p2");
            let table = fdb(&socket);
            assert!(
                table.values().all(|(port, _)| port != "raw:p2"),
                "round {round}: the removed port's entries stayed: {table:?}"
            );
        }
    });
    still_running(&mut topology);
    let stats = ctl_json(&socket, &["stats", "--json"]);
    let names: Vec<&str> = stats["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["raw:p0", "raw:p1"]);
}

/// `n` hosts, host i linked to `bridge` by a veth whose end there is
/// `pI`, its own `eth0` at 198.18.0.(i+1)/24, up.
fn hosts_on(bridge: &Netns, n: usize) -> Vec<Netns> {
    (0..n)
        .map(|i| {
            let host = Netns::new();
            host.add_veth(&format!("p{i}"), bridge).expect("veth");
            host.host_address(i);
            host
        })
        .collect()
}

/// CPU seconds a bridge with no ports may use over 2 s: about 1% of a
/// core, with room for the once-a-second tick and the clock's granularity.
/// A worker that spins for want of ports uses about 2 s.
const EMPTY_CPU_LIMIT: f64 = 0.04;

/// A bridge run without ports is ready and serves its socket; it takes
/// ports with `port add` (one for a container, its owner listed by `port
/// show` and `stats`) and forwards between them; `port del` removes the
/// last one, and then it holds no port and no entry, costs no CPU, and
/// takes ports again. An owner with a bad name is refused.
fn a_bridge_starts_empty_and_gives_up_its_last_port(lock: &str) {
    let (_scratch, socket) = socket_path(&format!("empty-{lock}"));
    let ctl_arg = format!("--ctl={}", socket.display());
    let bridge = Netns::new();
    let hosts = hosts_on(&bridge, 2);
    let daemon = Daemon::start(
        &bridge,
        &["run", &ctl_arg, "--lock", lock, "--workers", "2"],
    );
    let ports = || -> Vec<String> {
        ctl_json(&socket, &["stats", "--json"])["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let empty = |when: &str| {
        assert_eq!(ports(), Vec::<String>::new(), "{when}");
        assert_eq!(
            ctl_json(&socket, &["port", "show", "--json"]),
            serde_json::json!([]),
            "{when}"
        );
        assert!(fdb(&socket).is_empty(), "{when}");
        let used = lab::cpu_over(daemon.child.id(), Duration::from_secs(2));
        assert!(used < EMPTY_CPU_LIMIT, "{when}: {used:.2} s of CPU in 2 s");
    };
    empty("started without ports");
    for round in 0..2u16 {
        // Host 0's port for a container, named as CNI names it.
        let container = format!("c{round}");
        ctl_ok(
            &socket,
            &[
                "port",
                "add",
                "raw:p0",
                "--network",
                "net1",
                "--container",
                &container,
                "--ifname",
                "eth0",
            ],
        );
        ctl_ok(&socket, &["port", "add", "raw:p1"]);
        assert_eq!(ports(), ["raw:p0", "raw:p1"]);
        let owner =
            serde_json::json!({"network": "net1", "container": container, "ifname": "eth0"});
        let shown = ctl_json(&socket, &["port", "show", "--json"]);
        assert_eq!(shown[0]["owner"], owner, "{shown}");
        assert_eq!(shown[1].get("owner"), None, "{shown}");
        let stats = ctl_json(&socket, &["stats", "--json"]);
        assert_eq!(port_stats(&stats, "raw:p0")["owner"], owner, "{stats}");
        let (_, text, _) = ctl(&socket, &["port", "show"]);
        assert!(
            text.contains(&format!(
                "owner network net1 container {container} ifname eth0"
            )),
            "{text}"
        );
        tcp_transfer(&hosts, 0, 1, 5330 + round, u64::from(round));
        assert!(!fdb(&socket).is_empty(), "round {round}: nothing learned");
        ctl_ok(&socket, &["port", "del", "raw:p0"]);
        ctl_ok(&socket, &["port", "del", "raw:p1"]);
        empty(&format!("round {round}: the last port removed"));
    }
    // An owner CNI would not name is refused before anything is added.
    let (code, _, err) = ctl(
        &socket,
        &[
            "port",
            "add",
            "raw:p0",
            "--network",
            "net1",
            "--container",
            "c",
            "--ifname",
            "eth/0",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("owner ifname \"eth/0\""), "{err}");
    assert_eq!(ports(), Vec::<String>::new());
    let (status, log) = daemon.stop(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
}

strategy_tests!(
    a_bridge_starts_empty_and_gives_up_its_last_port: empty_mutex, empty_rwlock, empty_rmlock,
    empty_sharded, empty_rcu, empty_epoch
);

fn a_tap_added_and_removed_comes_and_goes() {
    let (_scratch, socket) = socket_path("tapport");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg]);
    let exists = |name: &str| {
        Command::new("ip")
            .args(["-n", &topology.bridge.name, "link", "show", name])
            .output()
            .unwrap()
            .status
            .success()
    };
    ctl_ok(&socket, &["port", "add", "tap:extra0"]);
    assert!(exists("extra0"), "the tap was not made");
    let (code, _, err) = ctl(&socket, &["port", "add", "tap:extra0"]);
    assert_eq!(code, 1);
    assert!(err.contains("already a port"), "{err}");
    ctl_ok(&socket, &["port", "del", "tap:extra0"]);
    assert!(!exists("extra0"), "the tap mpbridge made outlived its port");
    let (code, _, err) = ctl(&socket, &["port", "add", "eth9"]);
    assert_eq!(code, 2);
    assert!(err.contains("'eth9'"), "{err}");
    let (code, _, err) = ctl(&socket, &["port", "add", "raw:nosuch9"]);
    assert_eq!(code, 1);
    assert!(err.contains("no such interface"), "{err}");
    tcp_transfer(&topology.hosts, 0, 1, 5299, 9);
}

/// The frame with sequence number `n`, from host 0's station.
fn numbered(n: u16) -> Vec<u8> {
    let mut frame = test_frame(BROADCAST, mac(1), 0, 100);
    frame[20..22].copy_from_slice(&n.to_be_bytes());
    frame
}

/// The frames of a pcapng file, with their direction flags.
fn pcapng_frames(path: &Path) -> Vec<(Vec<u8>, Option<u32>)> {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
    use pcap_file::pcapng::{Block, PcapNgReader};
    let file = std::fs::File::open(path).expect("the capture file");
    let mut reader = PcapNgReader::new(file).expect("a pcapng file");
    let mut frames = Vec::new();
    while let Some(block) = reader.next_block() {
        if let Block::EnhancedPacket(packet) = block.expect("a sound block") {
            let flags = packet.options.iter().find_map(|option| match option {
                EnhancedPacketOption::Flags(flags) => Some(*flags),
                _ => None,
            });
            frames.push((packet.data.to_vec(), flags));
        }
    }
    frames
}

fn capture_writes_pcapng_that_tshark_reads() {
    if !lab::installed(
        "capture_writes_pcapng_that_tshark_reads",
        "tshark",
        "tshark",
    ) {
        return;
    }
    let (_scratch, socket) = socket_path("capture");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg]);
    let mut st = topology.stations();
    let file = socket.with_file_name("out.pcapng");
    let mut client = Command::new(env!("CARGO_BIN_EXE_mpbridge"))
        .arg("--ctl")
        .arg(&socket)
        .args([
            "capture",
            "raw:p1",
            "--direction",
            "out",
            "--count",
            "100",
            "-w",
        ])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Numbered frames until the capture has its 100 (it starts a moment
    // after the client), at most 3000 over about 3 s.
    let mut sent = 0u16;
    while sent < 3000 && client.try_wait().unwrap().is_none() {
        st[0].send(&numbered(sent));
        sent += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    let status = netns::wait_exit(&mut client, Duration::from_secs(5));
    let mut report = String::new();
    client
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut report)
        .unwrap();
    assert!(status.success(), "{report}");
    assert!(report.contains("100 frames captured, 0 lost"), "{report}");
    let frames = pcapng_frames(&file);
    assert_eq!(frames.len(), 100);
    // A run of the numbered frames, in order, each byte-identical, each
    // marked outbound.
    let first = u16::from_be_bytes([frames[0].0[20], frames[0].0[21]]);
    for (i, (frame, flags)) in frames.iter().enumerate() {
        assert_eq!(frame, &numbered(first + i as u16), "frame {i}");
        assert_eq!(*flags, Some(0b10), "frame {i} not marked outbound");
    }
    // tshark (Debian's) reads it too.
    let output = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-T", "fields", "-e", "frame.len", "-e", "eth.src"])
        .output()
        .expect("tshark (Debian's tshark package) is needed for this test");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 100, "{text}");
    assert!(
        lines.iter().all(|l| *l == "100\t02:42:00:00:00:01"),
        "{text}"
    );
    // A queue that does not exist.
    let (code, _, err) = ctl(&socket, &["capture", "raw:p1", "--queue", "5"]);
    assert_eq!(code, 1);
    assert!(err.contains("no queue 5"), "{err}");
}

fn a_stalled_capture_loses_capture_frames_not_forwarded_ones() {
    let (_scratch, socket) = socket_path("stalled");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg]);
    let mut st = topology.stations();
    // A reader that asks and then reads nothing.
    let mut stalled = UnixStream::connect(&socket).unwrap();
    stalled
        .write_all(
            b"{\"version\":1,\"command\":\"capture\",\"port\":\"raw:p0\",\"direction\":\"in\"}\n",
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before = ctl_json(&socket, &["stats", "--json"]);
    const FRAMES: usize = 20_000;
    let frames: Vec<Vec<u8>> = (0..64).map(|n| numbered(n as u16)).collect();
    let mut sent = 0;
    while sent < FRAMES {
        sent += st[0].send_many(&frames);
        // Keep host 1's socket from overflowing, so that every forwarded
        // frame can be counted there too.
        st[1].clear();
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = ctl_json(&socket, &["stats", "--json"]);
    let delta = |port: &str, key: &str| {
        port_stats(&after, port)[key].as_u64().unwrap()
            - port_stats(&before, port)[key].as_u64().unwrap()
    };
    assert_eq!(delta("raw:p0", "rx_frames"), sent as u64);
    assert_eq!(
        delta("raw:p1", "tx_frames"),
        sent as u64,
        "forwarding lost frames"
    );
    // Now read: the statistics in the stream count what the capture lost.
    drop(st);
    stalled
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut reply = String::new();
    let mut reader = BufReader::new(&stalled);
    reader.read_line(&mut reply).unwrap();
    assert!(reply.contains(r#""ok":true"#), "{reply}");
    // Stop the stream from our side after a statistics block came.
    let summary = {
        use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
        use pcap_file::pcapng::{Block, PcapNgReader};
        let mut reader = PcapNgReader::new(reader).expect("pcapng");
        let mut frames = 0u64;
        let mut lost = None;
        while let Some(Ok(block)) = reader.next_block() {
            match block {
                Block::EnhancedPacket(_) => frames += 1,
                Block::InterfaceStatistics(statistics) => {
                    for option in &statistics.options {
                        if let InterfaceStatisticsOption::IsbIfDrop(n) = option {
                            lost = Some(*n);
                        }
                    }
                    if lost.is_some() && frames > 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        (frames, lost)
    };
    let (captured, lost) = summary;
    let lost = lost.expect("no statistics in the stream");
    assert!(
        lost > 0,
        "a stalled reader lost nothing: {captured} captured"
    );
    assert!(captured + lost <= sent as u64, "{captured} + {lost}");
}

fn the_config_file_sets_up_and_reload_applies_changes() {
    let bridge = Netns::new();
    let hosts: Vec<Netns> = (0..3).map(|_| Netns::new()).collect();
    for (i, host) in hosts.iter().enumerate() {
        host.add_veth(&format!("p{i}"), &bridge).expect("veth");
        host.ip(&["link", "set", "eth0", "up"]);
    }
    let (_scratch, socket) = socket_path("config");
    let file = socket.with_file_name("bridge.toml");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    let (a, b) = (mac_text(mac(0x50)), mac_text(mac(0x51)));
    write(&format!(
        "lock = \"rcu\"\nports = [\"raw:p0\", \"raw:p1\"]\n\n[[static]]\nmac = \"{a}\"\nport = \"raw:p1\"\n"
    ));
    let ctl_arg = format!("--ctl={}", socket.display());
    let config_arg = format!("--config={}", file.display());
    let daemon = Daemon::start(&bridge, &["run", &config_arg, &ctl_arg]);
    assert!(
        daemon.log.iter().any(|l| l.contains("lock rcu")),
        "{:?}",
        daemon.log
    );
    assert_eq!(fdb(&socket)[&a], ("raw:p1".to_owned(), "static".to_owned()));
    let port_names = || {
        let stats = ctl_json(&socket, &["stats", "--json"]);
        stats["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(port_names(), ["raw:p0", "raw:p1"]);

    // A port and a static entry added, the old entry gone: `reload`.
    write(&format!(
        "lock = \"rcu\"\nports = [\"raw:p0\", \"raw:p1\", \"raw:p2\"]\n\n[[static]]\nmac = \"{b}\"\nport = \"raw:p2\"\nvlan = 7\n"
    ));
    let (code, out, err) = ctl(&socket, &["reload"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ports added [raw:p2]"), "{out}");
    assert!(out.contains("static entries added 1, removed 1"), "{out}");
    assert_eq!(port_names(), ["raw:p0", "raw:p1", "raw:p2"]);
    let table = fdb(&socket);
    assert_eq!(table[&b], ("raw:p2".to_owned(), "static".to_owned()));
    assert!(!table.contains_key(&a), "{table:?}");

    // A file with an error changes nothing, and says where.
    write("lock = \"rcu\"\nports = [\"raw:p0\", \"raw:p1\"\n");
    let (code, _, err) = ctl(&socket, &["reload"]);
    assert_eq!(code, 1);
    assert!(err.contains("line") && err.contains("bridge.toml"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(port_names(), ["raw:p0", "raw:p1", "raw:p2"]);

    // The port removed again, through SIGHUP; a new worker count is only
    // reported.
    write("lock = \"rcu\"\nworkers = 2\nports = [\"raw:p0\", \"raw:p1\"]\n");
    #[allow(unsafe_code)]
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe {
        libc::kill(daemon.child.id() as libc::pid_t, libc::SIGHUP);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while port_names().len() != 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(port_names(), ["raw:p0", "raw:p1"]);
    assert!(!fdb(&socket).contains_key(&b));
    let (status, log) = daemon.stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");

    // Errors at start: one line, exit 2.
    write("lock = \"spinlock\"\nports = [\"raw:p0\", \"raw:p1\"]\n");
    let (status, err) = run_to_exit(Some(&bridge), &["run", &config_arg], Duration::from_secs(5));
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("line 1") && err.contains("spinlock"), "{err}");
    write("ports = [\"raw:p0\", \"raw:p1\"]\n");
    let (status, err) = run_to_exit(
        Some(&bridge),
        &["run", &config_arg, "--port", "raw:p2"],
        Duration::from_secs(5),
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("give no --port"), "{err}");
}

fn the_lock_strategy_switches_while_tcp_flows() {
    let (_scratch, socket) = socket_path("switch");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg, "--workers", "2"]);
    // Stations of every kind in the table: learned (the hosts), local (the
    // ports' own addresses), static.
    tcp_transfer(&topology.hosts, 0, 1, 5400, 1);
    ctl_ok(
        &socket,
        &[
            "fdb",
            "add",
            &mac_text(mac(0x77)),
            "port",
            "raw:p1",
            "vlan",
            "3",
        ],
    );
    let before = fdb(&socket);
    assert_eq!(before.len(), 5, "{before:?}");
    netns::while_tcp_flows(&topology.hosts, 5401, || {
        let strategies = ["mutex", "rwlock", "rmlock", "sharded", "rcu", "epoch"];
        for lock in strategies.iter().chain(&strategies) {
            let (code, out, err) = ctl(&socket, &["lock", "set", lock]);
            assert_eq!(code, 0, "{lock}: {err}");
            assert!(
                out.starts_with(&format!("lock {lock}: 5 entries moved")),
                "{out}"
            );
            let stats = ctl_json(&socket, &["stats", "--json"]);
            assert_eq!(stats["lock"], *lock);
            assert_eq!(fdb(&socket), before, "entries changed moving to {lock}");
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let (code, _, err) = ctl(&socket, &["lock", "set", "spinlock"]);
    assert_eq!(code, 2);
    assert!(err.contains("'spinlock'"), "{err}");
}

/// `n` static entries on `port`, added over one connection.
fn add_statics(socket: &Path, port: &str, n: u16) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    for i in 0..n {
        let mac = format!("02:5a:00:00:{:02x}:{:02x}", i >> 8, i & 0xff);
        let line = format!(
            "{{\"version\":1,\"command\":\"fdb-add\",\"mac\":\"{mac}\",\"port\":\"{port}\"}}\n"
        );
        stream.write_all(line.as_bytes()).unwrap();
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        assert!(reply.contains(r#""ok":true"#), "{reply}");
    }
}

fn a_client_that_pipelines_without_reading_holds_little_memory() {
    let (_scratch, socket) = socket_path("pipeline");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg]);
    let pid = topology.daemon.as_ref().unwrap().child.id();
    // Replies of about 45 KiB each.
    add_statics(&socket, "raw:p1", 500);
    let show = r#"{"version":1,"command":"fdb-show"}"#.to_owned() + "\n";
    assert!(request(&socket, &show).contains(r#""ok":true"#));
    let rss_before = netns::rss_kib(pid);
    // Thousands of requests, none of the replies read.
    let mut greedy = UnixStream::connect(&socket).unwrap();
    greedy.set_nonblocking(true).unwrap();
    let burst = show.repeat(64 * 1024 / show.len());
    let mut sent = 0usize;
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && sent < 16 * burst.len() {
        match greedy.write(burst.as_bytes()) {
            Ok(n) => sent += n,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    assert!(sent >= 64 * 1024, "the daemon read only {sent} bytes");
    std::thread::sleep(Duration::from_millis(500));
    // Others are served meanwhile, and the replies waiting are bounded.
    assert!(request(&socket, &show).contains(r#""ok":true"#));
    let grown = netns::rss_kib(pid).saturating_sub(rss_before);
    assert!(grown < 16 * 1024, "RSS grew by {grown} KiB");
    // It gets its replies, in order, once it reads.
    greedy.set_nonblocking(false).unwrap();
    greedy
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut reader = BufReader::new(&greedy);
    for _ in 0..20 {
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        assert!(
            reply.contains(r#""ok":true"#),
            "{}",
            &reply[..reply.len().min(200)]
        );
    }
}

fn silent_clients_in_every_slot_make_room_for_a_new_one() {
    let (_scratch, socket) = socket_path("slots");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg]);
    let pid = topology.daemon.as_ref().unwrap().child.id();
    let stats = r#"{"version":1,"command":"stats"}"#.to_owned() + "\n";
    request(&socket, &stats);
    let fds_before = quiet_fds(pid);
    // Every slot (64), and more, held by one process that says nothing.
    let silent: Vec<UnixStream> = (0..80)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let reply = request(&socket, &stats);
        assert!(reply.contains(r#""ok":true"#), "{reply}");
    }
    drop(silent);
    let deadline = Instant::now() + Duration::from_secs(5);
    while fds(pid) != fds_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fds(pid), fds_before, "descriptors leaked");
}

fn a_ctl_path_that_is_not_a_socket_is_refused_and_kept() {
    let bridge = Netns::new();
    let dir = std::env::temp_dir().join(netns::unique("mpbnotsock"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("precious");
    std::fs::write(&path, "keep me\n").unwrap();
    let ctl_arg = format!("--ctl={}", path.display());
    let (status, err) = run_to_exit(
        Some(&bridge),
        &["run", "--port", "tap:ns0", "--port", "tap:ns1", &ctl_arg],
        Duration::from_secs(5),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me\n");
    let _ = std::fs::remove_dir_all(&dir);
}

fn captures_are_bounded_per_bridge() {
    let (_scratch, socket) = socket_path("captures");
    let ctl_arg = format!("--ctl={}", socket.display());
    let _topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg]);
    let capture = "{\"version\":1,\"command\":\"capture\",\"port\":\"raw:p0\"}\n";
    let open = || {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(capture.as_bytes()).unwrap();
        let mut reply = String::new();
        BufReader::new(&stream).read_line(&mut reply).unwrap();
        (stream, reply)
    };
    let mut running = Vec::new();
    for _ in 0..4 {
        let (stream, reply) = open();
        assert!(reply.contains(r#""ok":true"#), "{reply}");
        running.push(stream);
    }
    let (_, refused) = open();
    assert!(refused.contains(r#""ok":false"#), "{refused}");
    assert!(refused.contains("4 captures are running"), "{refused}");
    // One ends: its place is free again (the daemon notices within its
    // statistics interval).
    drop(running.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (stream, reply) = open();
        if reply.contains(r#""ok":true"#) {
            running.push(stream);
            break;
        }
        assert!(Instant::now() < deadline, "no place freed: {reply}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn a_lock_switch_that_loses_a_worker_stops_the_bridge() {
    let (_scratch, socket) = socket_path("lostworker");
    let ctl_arg = format!("--ctl={}", socket.display());
    let mut topology = Topology::new(
        PortKind::Raw,
        2,
        &[&ctl_arg, "--inject-fault", "worker-panic-on-stop"],
    );
    let (code, _, err) = ctl(&socket, &["lock", "set", "rcu"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("worker 0 panicked"), "{err}");
    // The bridge never runs without its workers: it exits, non-zero.
    let daemon = topology.daemon.as_mut().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running without workers");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "{status}");
}

fn port_show_lists_ports_with_their_options() {
    let (_scratch, socket) = socket_path("portshow");
    let ctl_arg = format!("--ctl={}", socket.display());
    let _topology = Topology::with_options(
        PortKind::Raw,
        &["access=10", "trunk=10,20"],
        &[&ctl_arg, "--vlan-filtering"],
    );
    // The kernel sets a link's running state from its own work queue, a
    // while after the host's end was brought up.
    let ports = lab::poll(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || ctl_json(&socket, &["port", "show", "-j"]),
        |ports| ports[1]["link"] == "up",
    );
    let ports = ports.as_array().unwrap();
    assert_eq!(ports.len(), 2, "{ports:?}");
    assert_eq!(ports[0]["name"], "raw:p0");
    assert_eq!(ports[0]["kind"], "raw");
    assert_eq!(ports[0]["options"], "raw:p0,access=10");
    assert_eq!(ports[1]["options"], "raw:p1,trunk=10,20");
    assert_eq!(ports[1]["link"], "up");
    let (code, out, _) = ctl(&socket, &["port", "show"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("raw:p1,trunk=10,20"), "{out}");
}

fn a_read_only_group_may_show_but_not_change() {
    let bridge = Netns::new();
    let dir = std::env::temp_dir()
        .join(netns::unique("mpbrogroup"))
        .join("run");
    let socket = dir.join("br.sock");
    let ctl_arg = format!("--ctl={}", socket.display());
    let _daemon = Daemon::start(
        &bridge,
        &[
            "run",
            "--port",
            "tap:r0",
            "--port",
            "tap:r1",
            &ctl_arg,
            "--ctl-ro-group",
            "nogroup",
        ],
    );
    let as_user = |gid: &str, args: &[&str]| client_as(&socket, gid, args);
    for args in [&["stats"][..], &["fdb", "show"], &["port", "show"]] {
        let shown = as_user("65534", args);
        let err = String::from_utf8_lossy(&shown.stderr);
        assert!(shown.status.success(), "{args:?}: {err}");
    }
    for args in [
        &["fdb", "flush"][..],
        &["port", "add", "raw:lo"],
        &["lock", "set", "rcu"],
    ] {
        let refused = as_user("65534", args);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("read-only"), "{args:?}: {err}");
    }
    let stranger = as_user("1", &["stats"]);
    let err = String::from_utf8_lossy(&stranger.stderr);
    assert_eq!(stranger.status.code(), Some(1), "{err}");
    assert!(err.contains("permission denied"), "{err}");
    // Root may still do everything.
    ctl_ok(&socket, &["fdb", "flush"]);
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

fn reload_keeps_the_static_entries_of_a_changed_port_that_still_fit() {
    let bridge = Netns::new();
    let hosts: Vec<Netns> = (0..2).map(|_| Netns::new()).collect();
    for (i, host) in hosts.iter().enumerate() {
        host.add_veth(&format!("p{i}"), &bridge).expect("veth");
        host.ip(&["link", "set", "eth0", "up"]);
    }
    let (_scratch, socket) = socket_path("reloadvlan");
    let file = socket.with_file_name("bridge.toml");
    let (a, b, c) = (
        mac_text(mac(0x60)),
        mac_text(mac(0x61)),
        mac_text(mac(0x62)),
    );
    let write = |trunk: &str| {
        std::fs::write(
            &file,
            format!(
                "vlan_filtering = true\nports = [\"raw:p0,access=10\", \"raw:p1,trunk={trunk}\"]\n\n\
                 [[static]]\nmac = \"{a}\"\nport = \"raw:p1\"\nvlan = 10\n"
            ),
        )
        .unwrap()
    };
    write("10,20");
    let ctl_arg = format!("--ctl={}", socket.display());
    let config_arg = format!("--config={}", file.display());
    let _daemon = Daemon::start(&bridge, &["run", &config_arg, &ctl_arg]);
    ctl_ok(&socket, &["fdb", "add", &b, "port", "raw:p1", "vlan", "10"]);
    ctl_ok(&socket, &["fdb", "add", &c, "port", "raw:p1", "vlan", "20"]);
    // VLAN 20 leaves the trunk, 30 joins it.
    write("10,30");
    let (code, out, err) = ctl(&socket, &["reload"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ports changed: raw:p1,trunk=10,30"), "{out}");
    let entries = ctl_json(&socket, &["fdb", "show", "--port", "raw:p1", "-j"]);
    let held: Vec<(String, u64, String)> = entries
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["state"] == "static")
        .map(|e| {
            (
                e["mac"].as_str().unwrap().to_owned(),
                e["vlan"].as_u64().unwrap(),
                e["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // The file's entry and the one added at run time stay (VLAN 10 is
    // still the port's); the one in VLAN 20 goes with the VLAN.
    let want: Vec<(String, u64, String)> = vec![
        (a.clone(), 10, "static".to_owned()),
        (b.clone(), 10, "static".to_owned()),
    ];
    let mut held_sorted = held.clone();
    held_sorted.sort();
    let mut want_sorted = want;
    want_sorted.sort();
    assert_eq!(held_sorted, want_sorted, "{entries}");
    let ports = ctl_json(&socket, &["port", "show", "-j"]);
    assert_eq!(ports[1]["options"], "raw:p1,trunk=10,30", "{ports}");
}

fn reloads_and_port_changes_at_once_keep_the_bridge_whole() {
    let bridge = Netns::new();
    let hosts = hosts_on(&bridge, 4);
    let (_scratch, socket) = socket_path("race");
    let file = socket.with_file_name("bridge.toml");
    let write = |third: bool| {
        let ports = if third {
            "\"raw:p0\", \"raw:p1\", \"raw:p2\""
        } else {
            "\"raw:p0\", \"raw:p1\""
        };
        std::fs::write(&file, format!("ports = [{ports}]\n")).unwrap()
    };
    write(false);
    let ctl_arg = format!("--ctl={}", socket.display());
    let config_arg = format!("--config={}", file.display());
    let mut daemon = Daemon::start(&bridge, &["run", &config_arg, &ctl_arg]);
    // Reloads that add and remove raw:p2, beside port add and del of
    // raw:p3 and of raw:p2, 30 rounds each; any may fail (a port already
    // there or gone), none may break the bridge.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for round in 0..30 {
                write(round % 2 == 0);
                let _ = ctl(&socket, &["reload"]);
            }
        });
        scope.spawn(|| {
            for _ in 0..30 {
                let _ = ctl(&socket, &["port", "add", "raw:p3"]);
                let _ = ctl(&socket, &["port", "del", "raw:p2"]);
                let _ = ctl(&socket, &["port", "del", "raw:p3"]);
            }
        });
    });
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "{:?}",
        daemon.log
    );
    // What `port show` lists is what `stats` counts, each once.
    let shown = ctl_json(&socket, &["port", "show", "-j"]);
    let mut names: Vec<String> = shown
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    let stats = ctl_json(&socket, &["stats", "-j"]);
    let counted: Vec<String> = stats["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, counted);
    names.sort();
    names.dedup();
    assert_eq!(names.len(), counted.len(), "{names:?}");
    assert!(
        names.len() >= 2 && names.iter().any(|n| n == "raw:p0"),
        "{names:?}"
    );
    // And it still forwards between the two that always stay.
    tcp_transfer(&hosts, 0, 1, 5211, 11);
    let (status, log) = daemon.stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
}

/// Threads of process `pid`.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

/// The daemon's count of descriptors once it has held for 200 ms (or
/// after a bounded while): a client's side closes a moment after the
/// client went.
fn quiet_fds(pid: u32) -> usize {
    lab::steady(Duration::from_secs(5), Duration::from_millis(200), || {
        fds(pid)
    })
}

/// Waits (at most `within`) until the daemon's descriptors and threads are
/// back to `fds_before` and `threads_before`, and says so if they are not.
fn back_to(pid: u32, fds_before: usize, threads_before: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while (fds(pid), threads(pid)) != (fds_before, threads_before) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(fds(pid), fds_before, "descriptors not closed");
    assert_eq!(threads(pid), threads_before, "threads left");
}

/// A process of user 65534 and group `gid` that holds `n` connections to
/// `socket`, each having sent `lines` and reading nothing; killed (by its
/// id) when dropped.
struct Holder(std::process::Child);

impl Holder {
    fn start(socket: &Path, gid: &str, n: usize, lines: &str) -> Holder {
        let script = r#"
import socket, sys
path, n, lines = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
held = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.setblocking(False)
    try:
        s.send(lines)
    except OSError:
        pass
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"#;
        let mut child = Command::new("setpriv")
            .args(["--reuid=65534", &format!("--regid={gid}"), "--clear-groups"])
            .args(["/usr/bin/python3", "-c", script])
            .arg(socket)
            .arg(n.to_string())
            .arg(lines)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut ready)
            .unwrap();
        let holder = Holder(child);
        assert_eq!(ready.trim(), "ready", "the holder did not connect");
        holder
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn read_only_clients_cannot_take_the_admin_places() {
    let (_scratch, socket) = socket_path("roplaces");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg, "--ctl-ro-group", "nogroup"]);
    let pid = topology.daemon.as_ref().unwrap().child.id();
    // Replies of about 45 KiB each, so that unread ones back up.
    add_statics(&socket, "raw:p1", 500);
    let stats = r#"{"version":1,"command":"stats"}"#.to_owned() + "\n";
    request(&socket, &stats);
    std::thread::sleep(Duration::from_millis(500));
    let (fds_before, threads_before) = (fds(pid), threads(pid));
    // More read-only clients than there are places, each busy: it asked
    // for more than its socket holds and reads nothing.
    let show = r#"{"version":1,"command":"fdb-show"}"#.to_owned() + "\n";
    let holder = Holder::start(&socket, "65534", 70, &show.repeat(20));
    std::thread::sleep(Duration::from_secs(1));
    // Root still gets a place every time (refused, it would be told so;
    // kept waiting behind the readers, its request would time out).
    for _ in 0..3 {
        let reply = request(&socket, &stats);
        assert!(reply.contains(r#""ok":true"#), "{reply}");
    }
    // Another reader finds the readers' places taken, all busy.
    let refused = client_as(&socket, "65534", &["stats"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("too many clients (48 at once"), "{err}");
    drop(holder);
    back_to(pid, fds_before, threads_before, Duration::from_secs(15));
}

fn a_client_that_trickles_or_reads_slowly_is_closed() {
    let (_scratch, socket) = socket_path("trickle");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(PortKind::Raw, 2, &[&ctl_arg]);
    let pid = topology.daemon.as_ref().unwrap().child.id();
    add_statics(&socket, "raw:p1", 500);
    let stats = r#"{"version":1,"command":"stats"}"#.to_owned() + "\n";
    request(&socket, &stats);
    std::thread::sleep(Duration::from_millis(500));
    let (fds_before, threads_before) = (fds(pid), threads(pid));
    // One sends its request a byte a second, never finishing it; the other
    // asks for 20 large replies and takes 5 bytes a second of them.
    let mut trickler = UnixStream::connect(&socket).unwrap();
    trickler.write_all(br#"{"version":1,"#).unwrap();
    let mut sipper = UnixStream::connect(&socket).unwrap();
    let show = r#"{"version":1,"command":"fdb-show"}"#.to_owned() + "\n";
    sipper.write_all(show.repeat(20).as_bytes()).unwrap();
    sipper
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    let mut closed = None;
    while started.elapsed() < Duration::from_secs(16) {
        std::thread::sleep(Duration::from_secs(1));
        // Counted before this round's own request, whose connection the
        // daemon closes only once it sees the end of it.
        if fds(pid) == fds_before {
            closed = Some(started.elapsed());
            break;
        }
        let _ = trickler.write(b" ");
        for _ in 0..5 {
            let _ = sipper.read(&mut [0u8; 1]);
        }
        // Everyone else is served meanwhile.
        let reply = request(&socket, &stats);
        assert!(reply.contains(r#""ok":true"#), "{reply}");
    }
    // Both were closed though each kept doing a little: the trickler 5 s
    // after its line began, the sipper 10 s after its replies were ready.
    let closed = closed.expect("the daemon kept the trickling and the sipping client");
    assert!(closed >= Duration::from_secs(9), "closed after {closed:?}");
    drop((trickler, sipper));
    back_to(pid, fds_before, threads_before, Duration::from_secs(5));
}

fn reads_are_answered_while_the_owner_is_busy() {
    let (_scratch, socket) = socket_path("busyowner");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(
        PortKind::Raw,
        2,
        &[&ctl_arg, "--inject-fault", "owner-slow"],
    );
    std::thread::scope(|scope| {
        // A request that takes the owner 3 s.
        let slow = scope.spawn(|| {
            let started = Instant::now();
            let (code, _, err) = ctl(&socket, &["fdb", "flush"]);
            assert_eq!(code, 0, "{err}");
            started.elapsed()
        });
        std::thread::sleep(Duration::from_millis(500));
        for args in [
            &["stats", "-j"][..],
            &["fdb", "show", "-j"],
            &["port", "show", "-j"],
        ] {
            let shown = ctl_json(&socket, args);
            // Answered while the slow request still holds the owner.
            assert!(
                !slow.is_finished(),
                "the slow request ended before {args:?}"
            );
            if args[0] == "fdb" {
                // The two ports' own addresses.
                let local = shown.as_array().unwrap().iter();
                assert_eq!(
                    local.filter(|e| e["state"] == "local").count(),
                    2,
                    "{shown}"
                );
            }
        }
        let took = slow.join().unwrap();
        assert!(took >= Duration::from_secs(3), "{took:?}");
    });
    drop(topology);
}

fn a_lock_set_without_descriptors_keeps_the_old_strategy() {
    if !lab::installed(
        "a_lock_set_without_descriptors_keeps_the_old_strategy",
        "prlimit",
        "util-linux",
    ) {
        return;
    }
    let (_scratch, socket) = socket_path("lockfds");
    let ctl_arg = format!("--ctl={}", socket.display());
    let topology = Topology::new(
        PortKind::Raw,
        2,
        &[&ctl_arg, "--lock", "epoch", "--workers", "2"],
    );
    let pid = topology.daemon.as_ref().unwrap().child.id();
    let stats = r#"{"version":1,"command":"stats"}"#.to_owned() + "\n";
    request(&socket, &stats);
    std::thread::sleep(Duration::from_millis(500));
    let (fds_before, threads_before) = (fds(pid), threads(pid));
    let limit = |value: &str| {
        let out = Command::new("prlimit")
            .args(["--pid", &pid.to_string(), &format!("--nofile={value}")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let shown = Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            "--nofile",
            "--raw",
            "--noheadings",
            "--output=SOFT,HARD",
        ])
        .output()
        .unwrap();
    let original = String::from_utf8_lossy(&shown.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(":");
    // Room for the client's connection, the new workers' stopper and worker
    // 0's wake-up, not worker 1's: worker 0's thread has started by then.
    // The soft limit only: raising it again needs no privilege.
    let hard = original.split(':').nth(1).unwrap().to_owned();
    // New descriptors take the lowest free numbers: allow the three
    // lowest free ones.
    let used: Vec<usize> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let third_free = (0..).filter(|n| !used.contains(n)).nth(2).unwrap();
    limit(&format!("{}:{hard}", third_free + 1));
    let (code, _, err) = ctl(&socket, &["lock", "set", "rcu"]);
    limit(&original);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("nothing changed, the bridge forwards on with epoch"),
        "{err}"
    );
    assert!(err.contains("Too many open files"), "{err}");
    let stats = ctl_json(&socket, &["stats", "-j"]);
    assert_eq!(stats["lock"], "epoch", "{stats}");
    assert_eq!(stats["lock_set_failed"], 1, "{stats}");
    back_to(pid, fds_before, threads_before, Duration::from_secs(5));
    tcp_transfer(&topology.hosts, 0, 1, 5221, 2);
    // With descriptors again, the switch goes through.
    let (code, switched, err) = ctl(&socket, &["lock", "set", "rcu"]);
    assert_eq!(code, 0, "{err}");
    assert!(switched.contains("lock rcu"), "{switched}");
    assert_eq!(ctl_json(&socket, &["stats", "-j"])["lock"], "rcu");
    tcp_transfer(&topology.hosts, 1, 0, 5222, 2);
}

lab::test_main! {
    privileged: [
        fdb_show_lists_every_station_on_its_port,
        static_entries_steer_traffic_and_survive_ageing,
        del_and_flush_make_stations_flood_again,
        stats_count_exactly_what_was_sent,
        hostile_clients_get_errors_and_nothing_leaks,
        one_bridge_per_socket_and_stale_sockets_are_replaced,
        client_errors_are_one_line_with_the_right_exit_code,
        ports_come_and_go_while_traffic_flows,
        a_tap_added_and_removed_comes_and_goes,
        empty_mutex,
        empty_rwlock,
        empty_rmlock,
        empty_sharded,
        empty_rcu,
        empty_epoch,
        capture_writes_pcapng_that_tshark_reads,
        a_stalled_capture_loses_capture_frames_not_forwarded_ones,
        the_config_file_sets_up_and_reload_applies_changes,
        the_control_group_owns_the_socket,
        group_members_put_vhost_sockets_in_the_vhost_dir,
        the_lock_strategy_switches_while_tcp_flows,
        a_client_that_pipelines_without_reading_holds_little_memory,
        silent_clients_in_every_slot_make_room_for_a_new_one,
        a_ctl_path_that_is_not_a_socket_is_refused_and_kept,
        captures_are_bounded_per_bridge,
        a_lock_switch_that_loses_a_worker_stops_the_bridge,
        port_show_lists_ports_with_their_options,
        a_read_only_group_may_show_but_not_change,
        reload_keeps_the_static_entries_of_a_changed_port_that_still_fit,
        reloads_and_port_changes_at_once_keep_the_bridge_whole,
        read_only_clients_cannot_take_the_admin_places,
        a_client_that_trickles_or_reads_slowly_is_closed,
        reads_are_answered_while_the_owner_is_busy,
        a_lock_set_without_descriptors_keeps_the_old_strategy,
    ],
    plain: [],
}
