//! mpbridge on real ports, driven by kernel traffic in network namespaces.
//! Needs root; skips with a reason otherwise (fails under
//! MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::time::{Duration, Instant};

use netns::{cpu_seconds, privileged, tcp_transfer, Daemon, Netns, PortKind, Topology};

fn tcp_through(kind: PortKind, lock: &str) {
    if !privileged("tcp_through") {
        return;
    }
    let topology = Topology::new(kind, 2, &["--lock", lock]);
    tcp_transfer(&topology.hosts, 0, 1, 5001, 7);
    tcp_transfer(&topology.hosts, 1, 0, 5002, 9);
}

macro_rules! tcp_tests {
    ($($name:ident: $kind:expr, $lock:literal;)*) => {
        $( fn $name() { tcp_through($kind, $lock); } )*
    };
}

tcp_tests! {
    tcp_tap_mutex: PortKind::Tap, "mutex";
    tcp_tap_rwlock: PortKind::Tap, "rwlock";
    tcp_tap_rmlock: PortKind::Tap, "rmlock";
    tcp_tap_sharded: PortKind::Tap, "sharded";
    tcp_tap_rcu: PortKind::Tap, "rcu";
    tcp_tap_epoch: PortKind::Tap, "epoch";
    tcp_raw_mutex: PortKind::Raw, "mutex";
    tcp_raw_rwlock: PortKind::Raw, "rwlock";
    tcp_raw_rmlock: PortKind::Raw, "rmlock";
    tcp_raw_sharded: PortKind::Raw, "sharded";
    tcp_raw_rcu: PortKind::Raw, "rcu";
    tcp_raw_epoch: PortKind::Raw, "epoch";
}

use netns::{mac, tagged_test_frame, test_frame, Station, BROADCAST};

/// Lets frames in flight arrive, then returns what each station got.
fn settle(stations: &mut [Station]) -> Vec<Vec<Vec<u8>>> {
    std::thread::sleep(Duration::from_millis(250));
    stations
        .iter_mut()
        .map(|s| s.collect(Duration::from_millis(1)))
        .collect()
}

fn counts(got: &[Vec<Vec<u8>>]) -> Vec<usize> {
    got.iter().map(Vec::len).collect()
}

/// Learning, flooding, reserved destinations, bad sources, station moves and
/// 802.1Q tags, on three hosts.
fn forwarding_rules(kind: PortKind) {
    if !privileged("forwarding_rules") {
        return;
    }
    let topology = Topology::new(kind, 3, &[]);
    let mut st: Vec<Station> = topology
        .hosts
        .iter()
        .map(|host| Station::on(host))
        .collect();
    let (a, b, c) = (mac(1), mac(2), mac(3));
    settle(&mut st);

    // Broadcast floods to every other port, never back.
    let frame = test_frame(BROADCAST, b, 1, 60);
    st[1].send(&frame);
    let got = settle(&mut st);
    assert_eq!(counts(&got), [1, 0, 1], "broadcast");
    assert_eq!(got[0][0], frame, "frame changed on its way");

    // Unknown unicast floods.
    st[0].send(&test_frame(c, a, 2, 60));
    assert_eq!(counts(&settle(&mut st)), [0, 1, 1], "unknown unicast");

    // Known unicast goes to the learned port only.
    st[0].send(&test_frame(b, a, 3, 60));
    assert_eq!(counts(&settle(&mut st)), [0, 1, 0], "known unicast");

    // Reserved destinations and bad sources go nowhere.
    st[0].send(&test_frame([0x01, 0x80, 0xc2, 0, 0, 0x0e], a, 4, 60));
    st[0].send(&test_frame(BROADCAST, [0x01, 0, 0x5e, 0, 0, 1], 5, 60));
    st[0].send(&test_frame(BROADCAST, [0; 6], 5, 60));
    assert_eq!(
        counts(&settle(&mut st)),
        [0, 0, 0],
        "reserved or bad source forwarded"
    );
    // BPDUs flood without --stp, as the Linux bridge's with stp_state 0.
    st[0].send(&test_frame([0x01, 0x80, 0xc2, 0, 0, 0], a, 4, 60));
    assert_eq!(counts(&settle(&mut st)), [0, 1, 1], "BPDU not flooded");

    // B moves to host 2.
    st[2].send(&test_frame(BROADCAST, b, 6, 60));
    assert_eq!(counts(&settle(&mut st)), [1, 1, 0], "broadcast after move");
    st[0].send(&test_frame(b, a, 7, 60));
    assert_eq!(counts(&settle(&mut st)), [0, 0, 1], "unicast after move");

    // Tagged frames pass unchanged, and VLANs separate learning.
    let tagged = tagged_test_frame(b, a, 42, 8, 64);
    st[0].send(&tagged);
    let got = settle(&mut st);
    assert_eq!(counts(&got), [0, 1, 1], "B is unknown in VLAN 42");
    assert_eq!(got[1][0], tagged, "tagged frame changed");
    st[2].send(&tagged_test_frame(BROADCAST, b, 42, 9, 64));
    settle(&mut st);
    st[0].send(&tagged);
    let got = settle(&mut st);
    assert_eq!(counts(&got), [0, 0, 1], "B known in VLAN 42");
    assert_eq!(got[2][0], tagged, "tagged frame changed");
}

fn forwarding_rules_tap() {
    forwarding_rules(PortKind::Tap);
}

fn forwarding_rules_raw() {
    forwarding_rules(PortKind::Raw);
}

fn stations_age_out() {
    if !privileged("stations_age_out") {
        return;
    }
    let topology = Topology::new(PortKind::Raw, 3, &["--age", "2"]);
    let mut st: Vec<Station> = topology
        .hosts
        .iter()
        .map(|host| Station::on(host))
        .collect();
    st[1].send(&test_frame(BROADCAST, mac(2), 1, 60));
    settle(&mut st);
    st[0].send(&test_frame(mac(2), mac(1), 2, 60));
    assert_eq!(counts(&settle(&mut st)), [0, 1, 0], "learned");
    // Within 2 s of ageing plus the once-a-second sweep, B is forgotten and
    // frames to it flood again. Bounded at 8 s.
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        st[0].send(&test_frame(mac(2), mac(1), 3, 60));
        if settle(&mut st)[2].len() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "station never aged out");
    }
}

/// Parses "fdb: N entries (M learned), ... refused R" from the final report.
fn fdb_report(log: &[String]) -> (usize, usize, u64) {
    let line = log
        .iter()
        .find(|l| l.trim_start().starts_with("fdb:"))
        .expect("no fdb line");
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    // entries, learned, learned total, moved, refused, aged
    (numbers[0] as usize, numbers[1] as usize, numbers[4])
}

fn the_learning_limit_holds_under_a_mac_flood() {
    if !privileged("the_learning_limit_holds_under_a_mac_flood") {
        return;
    }
    let mut topology = Topology::new(PortKind::Raw, 2, &["--max-entries", "16"]);
    let mut st = Station::on(&topology.hosts[0]);
    for n in 0..3000u16 {
        st.send(&test_frame(BROADCAST, mac(1000 + n), 1, 60));
    }
    // The bridge is alive and traffic still flows.
    tcp_transfer(&topology.hosts, 0, 1, 5003, 11);
    let (status, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(2));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    let (_, learned, refused) = fdb_report(&log);
    assert!(learned <= 16, "{learned} learned: {log:?}");
    assert!(refused > 0, "{log:?}");
}

fn a_port_set_down_and_up_again_recovers() {
    if !privileged("a_port_set_down_and_up_again_recovers") {
        return;
    }
    for kind in [PortKind::Tap, PortKind::Raw] {
        let topology = Topology::new(kind, 2, &[]);
        tcp_transfer(&topology.hosts, 0, 1, 5004, 1);
        let mut st = Station::on(&topology.hosts[0]);
        match kind {
            // The tap's far side is the host's eth0; writes to it fail.
            PortKind::Tap => topology.hosts[1].ip(&["link", "set", "eth0", "down"]),
            PortKind::Raw => topology.bridge.ip(&["link", "set", "p1", "down"]),
        }
        for n in 0..50 {
            st.send(&test_frame(BROADCAST, mac(1), n, 60));
        }
        std::thread::sleep(Duration::from_millis(300));
        match kind {
            PortKind::Tap => topology.hosts[1].ip(&["link", "set", "eth0", "up"]),
            PortKind::Raw => topology.bridge.ip(&["link", "set", "p1", "up"]),
        }
        tcp_transfer(&topology.hosts, 0, 1, 5005, 2);
    }
}

fn two_workers_carry_two_concurrent_flows() {
    if !privileged("two_workers_carry_two_concurrent_flows") {
        return;
    }
    for kind in [PortKind::Tap, PortKind::Raw] {
        let topology = Topology::new(kind, 2, &["--workers", "2"]);
        let hosts = &topology.hosts[..];
        std::thread::scope(|scope| {
            let other = scope.spawn(move || tcp_transfer(hosts, 1, 0, 5007, 4));
            tcp_transfer(hosts, 0, 1, 5006, 3);
            other.join().expect("second flow failed");
        });
    }
}

fn sigterm_stops_and_removes_created_taps() {
    if !privileged("sigterm_stops_and_removes_created_taps") {
        return;
    }
    let bridge = Netns::new();
    bridge.ip(&[
        "tuntap",
        "add",
        "mode",
        "tap",
        "multi_queue",
        "name",
        "keep0",
    ]);
    let daemon = netns::Daemon::start(
        &bridge,
        &[
            "run",
            "--port",
            "tap:keep0",
            "--port",
            "tap:made0",
            "--workers",
            "2",
        ],
    );
    let started = Instant::now();
    let (status, log) = daemon.stop(Duration::from_secs(2));
    assert!(
        status.is_some_and(|s| s.success()),
        "no clean exit within 2 s: {log:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(log.iter().any(|l| l.contains("final counters")), "{log:?}");
    assert!(log.iter().any(|l| l.contains("tap:made0: rx")), "{log:?}");
    let exists = |name: &str| {
        std::process::Command::new("ip")
            .args(["-n", &bridge.name, "link", "show", name])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(exists("keep0"), "a persistent tap was removed");
    assert!(!exists("made0"), "the tap mpbridge made is still there");
}

/// Runs mpbridge with `args` (in namespace `ns`, if given) and returns its
/// status and stderr, which must be one line; it must exit within 2 s.
fn run_bad(ns: Option<&Netns>, args: &[&str]) -> (i32, String) {
    let (status, stderr) = netns::run_to_exit(ns, args, Duration::from_secs(2));
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    (status.code().unwrap_or(-1), stderr)
}

fn bad_input_gives_one_line_and_a_non_zero_exit() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_mpbridge"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("possible values: mutex, rwlock, rmlock, sharded, rcu, epoch"),
        "--lock's values are not in run --help: {help}"
    );
    let (code, err) = run_bad(
        None,
        &[
            "run", "--port", "tap:a", "--port", "tap:b", "--lock", "spinlock",
        ],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("'spinlock'") && err.contains("mutex, rwlock, rmlock, sharded, rcu, epoch"),
        "{err}"
    );
    let (code, err) = run_bad(
        None,
        &[
            "run",
            "--port",
            "tap:a",
            "--port",
            "tap:b",
            "--rx-ring",
            "v4",
        ],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("'v4'") && err.contains("frame, block"),
        "{err}"
    );
    let (code, err) = run_bad(None, &["run", "--mode", "relay", "--port", "tap:a"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--mode relay needs exactly two ports (got 1)"),
        "{err}"
    );
    let (code, err) = run_bad(None, &["run", "--port", "tap:a", "--port", "eth0"]);
    assert_ne!(code, 0);
    assert!(err.contains("'eth0'"), "{err}");
    let (code, err) = run_bad(
        None,
        &[
            "run",
            "--port",
            "tap:a",
            "--port",
            "tap:b",
            "--workers",
            "0",
        ],
    );
    assert_eq!(code, 2, "{err}");
    for batch in ["0", "257"] {
        let (code, err) = run_bad(None, &["run", "--port", "tap:a", "--batch", batch]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("'{batch}'")) && err.contains("1..=256"),
            "{err}"
        );
    }
}

fn ports_that_cannot_be_opened_give_one_line() {
    if !privileged("ports_that_cannot_be_opened_give_one_line") {
        return;
    }
    let ns = Netns::new();
    let (code, err) = run_bad(
        Some(&ns),
        &["run", "--port", "raw:nosuch0", "--port", "raw:lo"],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("raw:nosuch0") && err.contains("no such interface"),
        "{err}"
    );
    // Without privileges: a packet socket needs CAP_NET_RAW.
    let unprivileged = [
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ];
    let output = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "setpriv"])
        .args(unprivileged)
        .args([
            env!("CARGO_BIN_EXE_mpbridge"),
            "run",
            "--port",
            "raw:lo",
            "--port",
            "raw:lo",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("raw:lo") && err.contains("CAP_NET_RAW"),
        "{err}"
    );
}

fn a_deleted_tap_is_survived_without_spinning() {
    if !privileged("a_deleted_tap_is_survived_without_spinning") {
        return;
    }
    let mut topology = Topology::new(PortKind::Tap, 3, &[]);
    topology.hosts[2].ip(&["link", "del", "eth0"]);
    // Flooded frames (ARP) now also go to the deleted tap, and fail there.
    tcp_transfer(&topology.hosts, 0, 1, 5008, 5);
    let pid = topology.daemon.as_ref().unwrap().child.id();
    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(pid) - before;
    // An idle bridge sleeps in poll(2); one spinning on the dead queue
    // would use about 2 s of CPU here.
    assert!(
        used < 0.5,
        "mpbridge used {used:.2} s of CPU in 2 s while idle"
    );
    tcp_transfer(&topology.hosts, 1, 0, 5009, 6);
    let (status, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(2));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    let p2 = log
        .iter()
        .find(|l| l.contains("tap:p2: rx"))
        .expect("no p2 counters");
    // The tap's going away is one fault event, reported and counted once,
    // whichever side saw it first (the tap's brief down while it moved into
    // its namespace at set-up may be another); after it the port costs
    // nothing.
    let gone = log
        .iter()
        .filter(|l| l.contains("p2") && l.contains("gone"))
        .count();
    assert_eq!(gone, 1, "the deleted tap was not reported once: {log:?}");
    let errors = netns::port_counter(&log, "tap:p2", "rx_errors")
        + netns::port_counter(&log, "tap:p2", "tx_errors");
    assert!(
        (1..=2).contains(&errors),
        "the deleted tap was not counted once: {p2}"
    );
}

fn readiness_is_notified_and_sigint_stops_too() {
    if !privileged("readiness_is_notified_and_sigint_stops_too") {
        return;
    }
    let dir = std::env::temp_dir().join(netns::unique("mpbnotify"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let bridge = Netns::new();
    let daemon = netns::Daemon::start_with(
        &bridge,
        &[
            "run",
            "--port",
            "tap:n0",
            "--port",
            "tap:n1",
            "--lock",
            "rcu",
            "--workers",
            "2",
        ],
        &[("NOTIFY_SOCKET", path.to_str().unwrap())],
    );
    let mut message = [0u8; 64];
    let len = socket.recv(&mut message).expect("no sd_notify message");
    // sd_notify(3): newline-separated assignments.
    assert_eq!(message[..len].trim_ascii_end(), b"READY=1");
    let ready = daemon
        .log
        .iter()
        .find(|l| l.contains("ready"))
        .unwrap()
        .clone();
    assert!(
        ready.contains("tap:n0") && ready.contains("rcu") && ready.contains("workers 2"),
        "{ready}"
    );
    let (status, log) = daemon.stop_with(libc::SIGINT, Duration::from_secs(2));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert!(log.iter().any(|l| l.contains("final counters")), "{log:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn relay_mode_passes_everything_to_the_other_port() {
    if !privileged("relay_mode_passes_everything_to_the_other_port") {
        return;
    }
    let topology = Topology::new(PortKind::Raw, 2, &["--mode", "relay"]);
    // Once the set-up's frames have passed, and with them the links' carrier.
    let mut st = topology.stations();
    // What a bridge drops, a relay passes: reserved destinations, frames
    // to a station known on the same side.
    st[0].send(&test_frame([0x01, 0x80, 0xc2, 0, 0, 0x0e], mac(1), 1, 60));
    st[0].send(&test_frame(BROADCAST, mac(2), 2, 60));
    st[0].send(&test_frame(mac(2), mac(1), 3, 60));
    assert_eq!(counts(&settle(&mut st)), [0, 3], "relay");
    tcp_transfer(&topology.hosts, 0, 1, 5010, 12);
    let (code, err) = run_bad(
        None,
        &[
            "run", "--port", "tap:a", "--port", "tap:b", "--port", "tap:c", "--mode", "relay",
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("exactly two ports"), "{err}");
}

fn poll_mode_forwards_too() {
    if !privileged("poll_mode_forwards_too") {
        return;
    }
    for kind in [PortKind::Tap, PortKind::Raw] {
        let topology = Topology::new(kind, 2, &["--poll", "--workers", "2"]);
        assert!(topology
            .daemon
            .as_ref()
            .unwrap()
            .log
            .iter()
            .any(|l| l.contains("poll")));
        tcp_transfer(&topology.hosts, 0, 1, 5011, 13);
    }
}

/// A worker that takes one frame at a time from a queue (`--batch 1`, the
/// smallest batch) carries TCP both ways on taps and raw ports, and the
/// ready line says so.
fn a_batch_of_one_forwards_too() {
    if !privileged("a_batch_of_one_forwards_too") {
        return;
    }
    for kind in [PortKind::Tap, PortKind::Raw] {
        let topology = Topology::new(kind, 2, &["--batch", "1"]);
        let log = &topology.daemon.as_ref().unwrap().log;
        assert!(log.iter().any(|l| l.contains(" batch 1")), "{log:?}");
        tcp_transfer(&topology.hosts, 0, 1, 5014, 16);
        tcp_transfer(&topology.hosts, 1, 0, 5015, 17);
    }
}

/// Raw ports with block rings (TPACKET_V3, `--rx-ring block`) carry TCP
/// both ways too, with one worker and with two, and the ready line says
/// which ring they use.
fn block_rings_forward_too() {
    if !privileged("block_rings_forward_too") {
        return;
    }
    for workers in ["1", "2"] {
        let topology = Topology::new(
            PortKind::Raw,
            2,
            &["--rx-ring", "block", "--workers", workers],
        );
        let log = &topology.daemon.as_ref().unwrap().log;
        assert!(
            log.iter()
                .any(|l| l.contains("ready") && l.contains("rx-ring block")),
            "{log:?}"
        );
        tcp_transfer(&topology.hosts, 0, 1, 5012, 14);
        tcp_transfer(&topology.hosts, 1, 0, 5013, 15);
    }
}

/// The thread named `name` of process `pid`: its allowed CPUs.
fn thread_cpus(pid: u32, name: &str) -> String {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let status = std::fs::read_to_string(task.join("status")).unwrap();
            return status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap()
                .trim()
                .to_owned();
        }
    }
    panic!("no thread {name} in {pid}");
}

/// Workers keep off the CPUs that take raw ports' receive work (RPS), or
/// the daemon says that they share one.
fn workers_are_placed_away_from_receive_work() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("skipped most of workers_are_placed_away_from_receive_work: one CPU");
    }
    let bridge = Netns::new();
    let hosts: Vec<Netns> = (0..2).map(|_| Netns::new()).collect();
    for (i, host) in hosts.iter().enumerate() {
        host.add_veth(&format!("p{i}"), &bridge).expect("veth");
        host.ip(&["link", "set", "eth0", "up"]);
    }
    let ports = ["run", "--port", "raw:p0", "--port", "raw:p1"];
    let rps = |mask: u64| {
        for port in ["p0", "p1"] {
            bridge.rps(port, mask).expect("rps_cpus");
        }
    };
    if cpus >= 2 {
        // Receive work on CPU 1: the worker goes to CPU 0.
        rps(0b10);
        let daemon = Daemon::start(&bridge, &ports);
        let ready = daemon.log.iter().find(|l| l.contains("ready")).unwrap();
        assert!(ready.ends_with("cpus 0"), "{ready}");
        assert_eq!(thread_cpus(daemon.child.id(), "worker0"), "0");
        drop(daemon);
        // Asked for CPU 1 anyway: pinned there, and warned.
        let mut args = ports.to_vec();
        args.extend(["--cpus", "1", "-v"]);
        let daemon = Daemon::start(&bridge, &args);
        assert_eq!(thread_cpus(daemon.child.id(), "worker0"), "1");
        let (_, log) = daemon.stop(Duration::from_secs(3));
        let warned = |port: &str| {
            log.iter()
                .filter(|l| l.contains(&format!("{port}: its receive work runs on CPU 1")))
                .count()
        };
        assert_eq!((warned("raw:p0"), warned("raw:p1")), (1, 1), "{log:?}");
    }
    // Receive work everywhere: no CPU is free; unpinned, and warned.
    let all = if cpus >= 64 {
        u64::MAX
    } else {
        (1u64 << cpus) - 1
    };
    rps(all);
    let daemon = Daemon::start(&bridge, &ports);
    let ready = daemon
        .log
        .iter()
        .find(|l| l.contains("ready"))
        .unwrap()
        .clone();
    let (_, log) = daemon.stop(Duration::from_secs(3));
    assert!(ready.ends_with("cpus any"), "{ready}");
    assert!(
        log.iter()
            .any(|l| l.contains("raw:p0: its receive work runs on CPU")),
        "{log:?}"
    );
}

/// The flags `ip link show` gives interface `dev` in namespace `ns`, and
/// `PROMISC` while anything holds it promiscuous (its promiscuity count:
/// a packet socket's membership does not show among the flags).
fn link_flags(ns: &Netns, dev: &str) -> Vec<String> {
    let output = std::process::Command::new("ip")
        .args(["-n", &ns.name, "-d", "-o", "link", "show", "dev", dev])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let start = text.find('<').expect("flags") + 1;
    let end = text[start..].find('>').expect("flags") + start;
    let mut flags: Vec<String> = text[start..end].split(',').map(str::to_owned).collect();
    let count = text
        .split_whitespace()
        .skip_while(|word| *word != "promiscuity")
        .nth(1)
        .and_then(|n| n.parse::<u32>().ok())
        .expect("a promiscuity count");
    if count > 0 && !flags.iter().any(|f| f == "PROMISC") {
        flags.push("PROMISC".to_owned());
    }
    flags
}

fn raw_ports_are_left_as_they_were_found() {
    let bridge = Netns::new();
    let hosts: Vec<Netns> = (0..3).map(|_| Netns::new()).collect();
    for (i, host) in hosts.iter().enumerate() {
        host.add_veth(&format!("p{i}"), &bridge).expect("veth");
    }
    // p1 was up already; p0 and p2 were down.
    bridge.ip(&["link", "set", "p1", "up"]);
    let (socket, ctl_arg) = netns::ctl_socket("asfound");
    let daemon = Daemon::start(
        &bridge,
        &[
            "run", "--port", "raw:p0", "--port", "raw:p1", "--port", "raw:p2", &ctl_arg,
        ],
    );
    for dev in ["p0", "p1", "p2"] {
        let flags = link_flags(&bridge, dev);
        assert!(flags.iter().any(|f| f == "UP"), "{dev}: {flags:?}");
        assert!(flags.iter().any(|f| f == "PROMISC"), "{dev}: {flags:?}");
    }
    // A port removed goes back down at once.
    netns::ctl_ok(&socket, &["port", "del", "raw:p2"]);
    let flags = link_flags(&bridge, "p2");
    assert!(
        !flags.iter().any(|f| f == "UP" || f == "PROMISC"),
        "p2: {flags:?}"
    );
    let (status, log) = daemon.stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    let flags = link_flags(&bridge, "p0");
    assert!(
        !flags.iter().any(|f| f == "UP" || f == "PROMISC"),
        "p0: {flags:?}"
    );
    let flags = link_flags(&bridge, "p1");
    assert!(flags.iter().any(|f| f == "UP"), "p1: {flags:?}");
    assert!(!flags.iter().any(|f| f == "PROMISC"), "p1: {flags:?}");
}

lab::test_main! {
    privileged: [
        workers_are_placed_away_from_receive_work,
        tcp_tap_mutex,
        tcp_tap_rwlock,
        tcp_tap_rmlock,
        tcp_tap_sharded,
        tcp_tap_rcu,
        tcp_tap_epoch,
        tcp_raw_mutex,
        tcp_raw_rwlock,
        tcp_raw_rmlock,
        tcp_raw_sharded,
        tcp_raw_rcu,
        tcp_raw_epoch,
        forwarding_rules_tap,
        forwarding_rules_raw,
        stations_age_out,
        the_learning_limit_holds_under_a_mac_flood,
        a_port_set_down_and_up_again_recovers,
        two_workers_carry_two_concurrent_flows,
        sigterm_stops_and_removes_created_taps,
        ports_that_cannot_be_opened_give_one_line,
        a_deleted_tap_is_survived_without_spinning,
        readiness_is_notified_and_sigint_stops_too,
        relay_mode_passes_everything_to_the_other_port,
        poll_mode_forwards_too,
        a_batch_of_one_forwards_too,
        block_rings_forward_too,
        raw_ports_are_left_as_they_were_found,
    ],
    plain: [bad_input_gives_one_line_and_a_non_zero_exit],
}
