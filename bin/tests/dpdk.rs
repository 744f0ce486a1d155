//! vhost-user ports against DPDK's testpmd (Debian's dpdk-dev) on
//! virtio-user ports, without hugepages: a tap host's frames echoed by
//! testpmd in macswap mode, testpmd txonly to testpmd rxonly, a frontend
//! killed and started again, mpbridge as the client of a testpmd server,
//! and two queue pairs. Skips with a reason where testpmd is missing
//! (fails under MPBRIDGE_REQUIRE_PRIV=1); the tap tests need root.

mod netns;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use netns::{
    bridge_here, ctl_json, port_stats, test_frame, PortKind, Station, TempDir, Topology, BROADCAST,
};

/// A testpmd of this test's, stopped (SIGINT, then SIGKILL) on drop, and
/// its runtime directory removed.
struct Testpmd {
    child: Child,
    /// Its `--file-prefix`: DPDK's runtime directory is named by it.
    prefix: String,
    lines: mpsc::Receiver<String>,
    output: Vec<String>,
}

/// The MAC testpmd's port `n` gets.
fn port_mac(n: u16) -> [u8; 6] {
    [0x02, 0xdd, 0x00, 0x00, 0x00, n as u8]
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

impl Testpmd {
    /// testpmd with virtio-user ports at `sockets` (each `path` or
    /// `path,extra`), whose MACs are `port_mac(first)` on, and testpmd
    /// options `args`.
    fn start(name: &str, first: u16, sockets: &[String], args: &[&str]) -> Testpmd {
        let mut command = Command::new("dpdk-testpmd");
        command.args(["--no-huge", "-m", "256", "--no-pci", "--lcores", "0@0,1@1"]);
        let prefix = netns::unique(name);
        command.arg(format!("--file-prefix={prefix}"));
        for (n, socket) in sockets.iter().enumerate() {
            command.arg(format!(
                "--vdev=net_virtio_user{n},path={socket},mac={}",
                mac_text(port_mac(first + n as u16))
            ));
        }
        command
            .args([
                "--",
                "--nb-cores=1",
                "--total-num-mbufs=8192",
                "--stats-period=1",
            ])
            .args(args)
            // testpmd runs until its standard input ends.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command.spawn().expect("cannot start dpdk-testpmd");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Testpmd {
            child,
            prefix,
            lines,
            output: Vec::new(),
        }
    }

    /// Waits (at most 20 s) for a line containing `text`.
    fn wait_for(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(text);
                    self.output.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!("testpmd did not print {text:?}: {:?}", self.output),
            }
        }
    }

    /// Stops it with SIGINT (its statistics are printed then) and returns
    /// what it printed.
    fn stop(mut self) -> Vec<String> {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let status = lab::wait_exit(&mut self.child, Duration::from_secs(10));
        assert!(status.success() || status.code().is_some(), "{status}");
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.output.push(line);
        }
        std::mem::take(&mut self.output)
    }

    /// Killed at once, as a crashing frontend.
    fn kill(mut self) {
        lab::stop_child(&mut self.child);
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        lab::stop_child(&mut self.child);
        // DPDK leaves its runtime directory (as root, under /var/run/dpdk)
        // behind when it exits.
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.prefix));
    }
}

/// The per-port totals testpmd prints at exit: (RX-packets, TX-packets).
fn totals(output: &[String]) -> Vec<(u64, u64)> {
    let start = output
        .iter()
        .position(|l| l.contains("Forward statistics for port"))
        .unwrap_or_else(|| panic!("no statistics: {output:?}"));
    let number = |line: &str, key: &str| -> Option<u64> {
        let rest = &line[line.find(key)? + key.len()..];
        rest.split_whitespace().next()?.parse().ok()
    };
    let mut ports = Vec::new();
    let mut rx = None;
    for line in &output[start..] {
        if line.contains("Accumulated forward statistics") {
            break;
        }
        if let Some(n) = number(line, "RX-packets:") {
            rx = Some(n);
        }
        if let (Some(r), Some(t)) = (rx, number(line, "TX-packets:")) {
            ports.push((r, t));
            rx = None;
        }
    }
    ports
}

fn have_testpmd(test: &str) -> bool {
    lab::installed(test, "dpdk-testpmd", "dpdk-dev")
}

fn wait_link(ctl: &Path, port: &str, link: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = ctl_json(ctl, &["stats", "--json"]);
        if port_stats(&stats, port)["link"] == link {
            return;
        }
        assert!(Instant::now() < deadline, "{port}: link never {link}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// A host behind a tap, testpmd in macswap behind a vhost port: frames of
/// 64, 512 and 1518 bytes (on the wire) come back exactly once, as sent
/// but for the swapped addresses.
fn macswap_echoes(lock: &str) {
    if !have_testpmd("macswap_echoes") {
        return;
    }
    let dir = TempDir::new("dpdk");
    let socket = dir.path("vm.sock");
    let ctl = dir.path("ctl.sock");
    let vhost = format!("--port=vhost:{}", socket.display());
    let ctl_arg = format!("--ctl={}", ctl.display());
    let topology = Topology::new(PortKind::Tap, 1, &[&vhost, &ctl_arg, "--lock", lock]);
    let mut testpmd = Testpmd::start(
        "macswap",
        0,
        &[socket.display().to_string()],
        &[
            "--forward-mode=macswap",
            "--port-topology=loop",
            "--auto-start",
        ],
    );
    testpmd.wait_for("forwards packets on");
    wait_link(&ctl, &format!("vhost:{}", socket.display()), "up");
    let mut host = Station::on(&topology.hosts[0]);
    let me = netns::link_mac(&topology.hosts[0], "eth0");
    let vm = port_mac(0);
    for (n, wire) in [64usize, 512, 1518].into_iter().enumerate() {
        let frame = test_frame(vm, me, n as u8, wire - 4);
        host.send(&frame);
        let back = host.collect(Duration::from_millis(700));
        let mut want = frame.clone();
        want[..6].copy_from_slice(&me);
        want[6..12].copy_from_slice(&vm);
        assert_eq!(
            back.len(),
            1,
            "{wire}-byte frame came back {} times",
            back.len()
        );
        assert!(back[0] == want, "{wire}-byte frame changed");
    }
    drop(testpmd);
    drop(topology);
}

strategy_tests!(macswap_echoes: macswap_echoes_mutex, macswap_echoes_rwlock, macswap_echoes_rmlock,
    macswap_echoes_sharded, macswap_echoes_rcu, macswap_echoes_epoch);

/// testpmd txonly on one vhost port, another testpmd rxonly on the other:
/// what mpbridge put into the receiver's ring is what it received.
fn txonly_to_rxonly(lock: &str) {
    if !have_testpmd("txonly_to_rxonly") {
        return;
    }
    let dir = TempDir::new("dpdk");
    let (a, b) = (dir.path("a.sock"), dir.path("b.sock"));
    let (pa, pb) = (
        format!("vhost:{}", a.display()),
        format!("vhost:{}", b.display()),
    );
    let (daemon, ctl) = bridge_here(&dir, &[pa.clone(), pb.clone()], &["--lock", lock]);
    let mut receiver = Testpmd::start(
        "rxonly",
        1,
        &[b.display().to_string()],
        &["--forward-mode=rxonly", "--auto-start"],
    );
    receiver.wait_for("forwards packets on");
    let mut sender = Testpmd::start(
        "txonly",
        0,
        &[a.display().to_string()],
        &[
            "--forward-mode=txonly",
            "--auto-start",
            "--txpkts=60",
            &format!("--eth-peer=0,{}", mac_text(port_mac(1))),
        ],
    );
    sender.wait_for("forwards packets on");
    // Both frontends ran; frames crossed.
    sender.wait_for("TX-packets");
    thread::sleep(Duration::from_secs(1));
    let sent = totals(&sender.stop());
    thread::sleep(Duration::from_millis(500));
    let received = totals(&receiver.stop());
    let stats = ctl_json(&ctl, &["stats", "--json"]);
    let into_b = port_stats(&stats, &pb)["tx_frames"].as_u64().unwrap();
    let from_a = port_stats(&stats, &pa)["rx_frames"].as_u64().unwrap();
    assert!(sent[0].1 > 1000, "testpmd sent {sent:?}");
    // Frames still in the ring when testpmd closed its port are not
    // taken: at most a ring's worth.
    assert!(
        from_a <= sent[0].1 && from_a + 4096 >= sent[0].1,
        "taken {from_a} of {}",
        sent[0].1
    );
    assert!(into_b > 0, "{stats}");
    assert_eq!(received[0].0, into_b, "every frame given was received");
    drop(daemon);
}

strategy_tests!(txonly_to_rxonly: txonly_to_rxonly_mutex, txonly_to_rxonly_rwlock,
    txonly_to_rxonly_rmlock, txonly_to_rxonly_sharded, txonly_to_rxonly_rcu, txonly_to_rxonly_epoch);

/// Three ports: testpmd txonly to a MAC the bridge does not know reaches
/// both other ports; once that station speaks from one of them, only
/// that one.
fn learning_and_flooding_with_three_ports(lock: &str) {
    if !have_testpmd("learning_and_flooding_with_three_ports") {
        return;
    }
    let dir = TempDir::new("dpdk");
    let (a, b, c) = (dir.path("a.sock"), dir.path("b.sock"), dir.path("c.sock"));
    let ports: Vec<String> = [&a, &b, &c]
        .iter()
        .map(|p| format!("vhost:{}", p.display()))
        .collect();
    let (daemon, ctl) = bridge_here(&dir, &ports, &["--lock", lock]);
    let mut fb = lab::vhost::Frontend::connect(&b, 1, u64::MAX).unwrap();
    let mut fc = lab::vhost::Frontend::connect(&c, 1, u64::MAX).unwrap();
    fb.post_room(0, 250);
    fc.post_room(0, 250);
    let station = port_mac(9);
    let mut sender = Testpmd::start(
        "three",
        0,
        &[a.display().to_string()],
        &[
            "--forward-mode=txonly",
            "--auto-start",
            "--txpkts=60",
            &format!("--eth-peer=0,{}", mac_text(station)),
        ],
    );
    sender.wait_for("forwards packets on");
    wait_link(&ctl, &ports[0], "up");
    // Unknown: flooded to both.
    assert!(
        !fb.receive(0, Duration::from_millis(300)).is_empty(),
        "b: nothing flooded"
    );
    assert!(
        !fc.receive(0, Duration::from_millis(300)).is_empty(),
        "c: nothing flooded"
    );
    // The station speaks from b's port; from then on only b has its frames.
    let hello = test_frame(BROADCAST, station, 1, 60);
    assert!(fb.send(0, &hello));
    std::thread::sleep(Duration::from_millis(300));
    fb.receive(0, Duration::from_millis(100));
    fc.receive(0, Duration::from_millis(100));
    fb.post_room(0, 250);
    fc.post_room(0, 250);
    let to_b = fb.receive(0, Duration::from_millis(300)).len();
    let to_c = fc.receive(0, Duration::from_millis(300)).len();
    assert!(to_b > 0, "b: nothing once learned");
    assert_eq!(to_c, 0, "c still gets the station's frames");
    drop(sender);
    drop(daemon);
}

strategy_tests!(learning_and_flooding_with_three_ports: three_ports_mutex, three_ports_rwlock,
    three_ports_rmlock, three_ports_sharded, three_ports_rcu, three_ports_epoch);

/// A frontend killed takes the link down; one started again on the same
/// socket brings it back, and frames pass.
fn a_killed_frontend_is_replaced() {
    if !have_testpmd("a_killed_frontend_is_replaced") {
        return;
    }
    let dir = TempDir::new("dpdk");
    let (a, b) = (dir.path("a.sock"), dir.path("b.sock"));
    let (pa, pb) = (
        format!("vhost:{}", a.display()),
        format!("vhost:{}", b.display()),
    );
    let (daemon, ctl) = bridge_here(&dir, &[pa.clone(), pb.clone()], &[]);
    let mut front = lab::vhost::Frontend::connect(&b, 1, u64::MAX).unwrap();
    front.post_room(0, 200);
    let txonly = ["--forward-mode=txonly", "--auto-start", "--txpkts=60"];
    let mut first = Testpmd::start("killed", 0, &[a.display().to_string()], &txonly);
    first.wait_for("forwards packets on");
    wait_link(&ctl, &pa, "up");
    first.kill();
    wait_link(&ctl, &pa, "down");
    let before = front.receive(0, Duration::from_millis(300)).len();
    let mut second = Testpmd::start("again", 0, &[a.display().to_string()], &txonly);
    second.wait_for("forwards packets on");
    wait_link(&ctl, &pa, "up");
    front.post_room(0, 200);
    let after = front.receive(0, Duration::from_millis(500)).len();
    assert!(after > 0, "no frames after the restart ({before} before)");
    let stats = ctl_json(&ctl, &["stats", "--json"]);
    let counters = &port_stats(&stats, &pa)["vhost"];
    assert_eq!(counters["connects"], 2, "{counters}");
    assert_eq!(counters["disconnects"], 1, "{counters}");
    drop(second);
    drop(daemon);
}

/// `,client` against testpmd with `server=1`, which listens: mpbridge
/// connects, and again after testpmd is restarted.
fn client_mode_against_a_testpmd_server() {
    if !have_testpmd("client_mode_against_a_testpmd_server") {
        return;
    }
    let dir = TempDir::new("dpdk");
    let (a, b) = (dir.path("server.sock"), dir.path("b.sock"));
    let pa = format!("vhost:{},client", a.display());
    let label = format!("vhost:{}", a.display());
    let (daemon, ctl) = bridge_here(&dir, &[pa, format!("vhost:{}", b.display())], &[]);
    let mut front = lab::vhost::Frontend::connect(&b, 1, u64::MAX).unwrap();
    for round in 0..2 {
        let server = format!("{},server=1", a.display());
        let mut testpmd = Testpmd::start(
            "server",
            0,
            &[server],
            &["--forward-mode=txonly", "--auto-start", "--txpkts=60"],
        );
        testpmd.wait_for("forwards packets on");
        wait_link(&ctl, &label, "up");
        front.post_room(0, 100);
        let frames = front.receive(0, Duration::from_millis(500)).len();
        assert!(frames > 0, "round {round}: nothing from the testpmd server");
        testpmd.kill();
        wait_link(&ctl, &label, "down");
    }
    drop(daemon);
}

/// Two workers, two queue pairs: testpmd sends on both queues and each
/// worker forwards frames.
fn two_queue_pairs_with_two_workers() {
    if !have_testpmd("two_queue_pairs_with_two_workers") {
        return;
    }
    let dir = TempDir::new("dpdk");
    let (a, b) = (dir.path("a.sock"), dir.path("b.sock"));
    let pa = format!("vhost:{}", a.display());
    let (daemon, ctl) = bridge_here(
        &dir,
        &[pa.clone(), format!("vhost:{}", b.display())],
        &["--workers", "2"],
    );
    let mut front = lab::vhost::Frontend::connect(&b, 1, u64::MAX).unwrap();
    front.post_room(0, 200);
    let mut testpmd = Testpmd::start(
        "mq",
        0,
        &[format!("{},queues=2", a.display())],
        &[
            "--forward-mode=txonly",
            "--auto-start",
            "--txpkts=60",
            "--rxq=2",
            "--txq=2",
            "--txonly-multi-flow",
        ],
    );
    testpmd.wait_for("forwards packets on");
    wait_link(&ctl, &pa, "up");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = ctl_json(&ctl, &["stats", "--json"]);
        let frames: Vec<u64> = stats["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["frames"].as_u64().unwrap())
            .collect();
        if frames.iter().all(|&n| n > 0) {
            break;
        }
        assert!(Instant::now() < deadline, "workers' frames: {frames:?}");
        thread::sleep(Duration::from_millis(100));
    }
    drop(testpmd);
    drop(daemon);
}

lab::test_main! {
    privileged: [
        macswap_echoes_mutex,
        macswap_echoes_rwlock,
        macswap_echoes_rmlock,
        macswap_echoes_sharded,
        macswap_echoes_rcu,
        macswap_echoes_epoch,
    ],
    plain: [
        txonly_to_rxonly_mutex,
        txonly_to_rxonly_rwlock,
        txonly_to_rxonly_rmlock,
        txonly_to_rxonly_sharded,
        txonly_to_rxonly_rcu,
        txonly_to_rxonly_epoch,
        three_ports_mutex,
        three_ports_rwlock,
        three_ports_rmlock,
        three_ports_sharded,
        three_ports_rcu,
        three_ports_epoch,
        a_killed_frontend_is_replaced,
        client_mode_against_a_testpmd_server,
        two_queue_pairs_with_two_workers,
    ],
}
