//! mpbridge under faults: links that go down or away, frames a port
//! refuses, hostile traffic, taps that other programs made, and faults of
//! the process itself. Each test measures the cost of the fault too (CPU
//! time, memory) where a fault could burn one. Needs root; skips with a
//! reason otherwise (fails under MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netns::{
    cpu_over, link_mac, mac, port_counter, privileged, proc_status, rss_kib,
    settle_counts as settle, tcp_transfer, test_frame, Daemon, Netns, PortKind, Station, Topology,
    BROADCAST,
};

/// CPU seconds an idle bridge with a faulted port may use over 2 s: about
/// 1% of a core, with room for the once-a-second link monitor and the
/// clock tick's granularity. A port that spins uses about 2 s.
const IDLE_CPU_LIMIT: f64 = 0.04;

fn pid(topology: &Topology) -> u32 {
    topology.daemon.as_ref().unwrap().child.id()
}

/// Log lines that mention `needle`.
fn lines_with(log: &[String], needle: &str) -> usize {
    log.iter().filter(|l| l.contains(needle)).count()
}

fn a_raw_port_down_then_deleted_costs_no_cpu_and_is_reported_once() {
    if !privileged("a_raw_port_down_then_deleted_costs_no_cpu_and_is_reported_once") {
        return;
    }
    let mut topology = Topology::new(PortKind::Raw, 3, &["-v"]);
    tcp_transfer(&topology.hosts, 0, 2, 5101, 1);
    let pid = pid(&topology);

    topology.bridge.ip(&["link", "set", "p2", "down"]);
    let used = cpu_over(pid, Duration::from_secs(2));
    eprintln!("CPU over 2 s: {used:.3} s");
    assert!(
        used < IDLE_CPU_LIMIT,
        "link down: {used:.2} s of CPU in 2 s"
    );
    // The other ports keep forwarding.
    tcp_transfer(&topology.hosts, 0, 1, 5102, 2);

    topology.bridge.ip(&["link", "set", "p2", "up"]);
    tcp_transfer(&topology.hosts, 2, 0, 5103, 3);
    let used = cpu_over(pid, Duration::from_secs(2));
    eprintln!("CPU over 2 s: {used:.3} s");
    assert!(
        used < IDLE_CPU_LIMIT,
        "link up again: {used:.2} s of CPU in 2 s"
    );

    // A container's veth going away.
    topology.bridge.ip(&["link", "del", "p2"]);
    let used = cpu_over(pid, Duration::from_secs(2));
    eprintln!("CPU over 2 s: {used:.3} s");
    assert!(
        used < IDLE_CPU_LIMIT,
        "link deleted: {used:.2} s of CPU in 2 s"
    );
    tcp_transfer(&topology.hosts, 1, 0, 5104, 4);
    let used = cpu_over(pid, Duration::from_secs(2));
    eprintln!("CPU over 2 s: {used:.3} s");
    assert!(
        used < IDLE_CPU_LIMIT,
        "after deletion: {used:.2} s of CPU in 2 s"
    );

    let (status, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert_eq!(
        lines_with(&log, "raw:p2: interface deleted"),
        1,
        "deletion not reported once: {log:?}"
    );
    // The link went down once: the worker reports it (from the socket's
    // error), and the once-a-second link monitor at most once more (it can
    // miss a link that was up for less than a second before going down).
    let worker_lines = log
        .iter()
        .filter(|l| l.contains("p2:") && l.contains("Network is down"))
        .count();
    // Once for this event (once more if the link was caught down while
    // the host side came up at set-up); never once per poll.
    assert!((1..=2).contains(&worker_lines), "{log:?}");
    assert!(lines_with(&log, "raw:p2: link down") <= 1, "{log:?}");
    // The down event and the deletion: at most one error each, never one
    // per poll.
    let errors =
        port_counter(&log, "raw:p2", "rx_errors") + port_counter(&log, "raw:p2", "tx_errors");
    assert!(
        errors <= 2,
        "errors counted per poll, not per event: {log:?}"
    );
}

/// A port whose link goes down forgets its stations: frames to them flood
/// until they are heard again, as on the Linux bridge.
fn a_port_going_down_flushes_its_stations(kind: PortKind) {
    let topology = Topology::new(kind, 3, &[]);
    let mut st = topology.stations();
    st[2].send(&test_frame(BROADCAST, mac(3), 1, 60));
    settle(&mut st);
    st[0].send(&test_frame(mac(3), mac(1), 2, 60));
    assert_eq!(settle(&mut st), [0, 0, 1], "station 3 learned");

    match kind {
        PortKind::Raw => topology.bridge.ip(&["link", "set", "p2", "down"]),
        PortKind::Tap => topology.hosts[2].ip(&["link", "set", "eth0", "down"]),
    }
    // A tap's link is seen down when a frame is sent to it; a raw port's by
    // the link monitor within a second.
    st[0].send(&test_frame(BROADCAST, mac(1), 3, 60));
    std::thread::sleep(Duration::from_millis(1500));
    match kind {
        PortKind::Raw => topology.bridge.ip(&["link", "set", "p2", "up"]),
        PortKind::Tap => topology.hosts[2].ip(&["link", "set", "eth0", "up"]),
    }
    std::thread::sleep(Duration::from_millis(1500));
    settle(&mut st);
    st[0].send(&test_frame(mac(3), mac(1), 4, 60));
    assert_eq!(
        settle(&mut st),
        [0, 1, 1],
        "station 3 not flushed when its port went down"
    );
}

fn a_raw_port_going_down_flushes_its_stations() {
    if privileged("a_raw_port_going_down_flushes_its_stations") {
        a_port_going_down_flushes_its_stations(PortKind::Raw);
    }
}

fn a_tap_port_going_down_flushes_its_stations() {
    if privileged("a_tap_port_going_down_flushes_its_stations") {
        a_port_going_down_flushes_its_stations(PortKind::Tap);
    }
}

/// Removes a file (a control socket) on drop, also when a test fails.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The MAC addresses `fdb show` lists on `port`.
fn stations_on(socket: &std::path::Path, port: &str) -> Vec<String> {
    let entries = netns::ctl_json(socket, &["fdb", "show", "--json"]);
    entries
        .as_array()
        .expect("an array")
        .iter()
        .filter(|entry| entry["port"] == port)
        .map(|entry| entry["mac"].as_str().unwrap().to_owned())
        .collect()
}

/// A tap whose device goes down inside the namespace it was moved to has
/// its stations flushed, though no frame is sent towards it (the Linux
/// bridge flushes a port whose device goes down); once, with a log line,
/// and at no cost while it stays down.
fn a_tap_down_in_another_namespace_is_flushed_without_traffic() {
    if !privileged("a_tap_down_in_another_namespace_is_flushed_without_traffic") {
        return;
    }
    let (socket, ctl) = netns::ctl_socket("mpbtapdown");
    // Declared first, dropped last: after the daemon stopped.
    let _socket = RemoveOnDrop(socket.clone());
    let mut topology = Topology::new(PortKind::Tap, 2, &["-v", &ctl]);
    let pid = pid(&topology);
    let mut st = topology.stations();
    st[1].send(&test_frame(BROADCAST, mac(2), 1, 60));
    assert_eq!(settle(&mut st), [1, 0]);
    let station = "02:42:00:00:00:02".to_owned();
    assert!(
        stations_on(&socket, "tap:p1").contains(&station),
        "not learned"
    );

    topology.hosts[1].ip(&["link", "set", "eth0", "down"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while stations_on(&socket, "tap:p1").contains(&station) {
        assert!(
            Instant::now() < deadline,
            "station 2 still learned on tap:p1 5 s after its device went down"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let used = cpu_over(pid, Duration::from_secs(2));
    eprintln!("CPU over 2 s: {used:.3} s");
    assert!(used < IDLE_CPU_LIMIT, "tap down: {used:.2} s of CPU in 2 s");
    // The other port still learns.
    st[0].send(&test_frame(mac(2), mac(1), 2, 60));
    settle(&mut st);
    assert!(stations_on(&socket, "tap:p0").contains(&"02:42:00:00:00:01".to_owned()));

    let (status, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    // One line for the event (and maybe one more, flushing nothing, for
    // the tap's brief down while it moved into its namespace at set-up).
    assert_eq!(
        lines_with(&log, "p1: link down; flushed 1 learned stations"),
        1,
        "{log:?}"
    );
    assert!(lines_with(&log, "p1: link down") <= 2, "{log:?}");
    let errors = port_counter(&log, "tap:p1", "rx_errors");
    assert!((1..=2).contains(&errors), "counted per event: {log:?}");
}

/// A port's `rx_errors` in `stats --json`.
fn rx_errors(socket: &std::path::Path, port: &str) -> u64 {
    let stats = netns::ctl_json(socket, &["stats", "--json"]);
    netns::port_stats(&stats, port)["rx_errors"]
        .as_u64()
        .expect("rx_errors")
}

/// Waits (at most `within`) until `done` holds; says whether it did.
fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A tap whose device goes down for 0.3 s (well under the workers' once-
/// a-second look at their queues) has its stations flushed, once per
/// down, as the Linux bridge flushes a port on NETDEV_DOWN: rtnetlink's
/// news is taken as it comes, from the namespace the tap was moved to
/// (`moved`) or from the daemon's own. Traffic passes again after the up,
/// and a tap left down costs nothing.
///
/// The downs start at four phases of a second apart: the workers' look
/// falls in a 0.3 s down now and then, never in all four.
fn a_brief_tap_down_is_flushed(lock: &str, moved: bool) {
    const PHASES_MS: [u64; 4] = [0, 250, 500, 750];
    let (socket, ctl) = netns::ctl_socket("mpbtapflap");
    // Declared first, dropped last: after the daemon stopped.
    let _socket = RemoveOnDrop(socket.clone());
    let bridge = Netns::new();
    let host = Netns::new();
    let other = Netns::new();
    // Declared after the namespaces, so dropped before them (also when
    // the test fails): the taps go with the daemon.
    let mut daemon = Some(Daemon::start(
        &bridge,
        &[
            "run",
            "--port=tap:p0",
            "--port=tap:p1",
            "--lock",
            lock,
            "-v",
            &ctl,
        ],
    ));
    bridge.ip(&["link", "set", "p0", "netns", &host.name]);
    host.ip(&["link", "set", "p0", "name", "eth0"]);
    host.ip(&["link", "set", "eth0", "up"]);
    // Tap p1, whose device goes down: in a namespace of its own, or left
    // in the daemon's (renamed, which takes it down and up once first).
    let flapped = if moved { &other } else { &bridge };
    if moved {
        bridge.ip(&["link", "set", "p1", "netns", &other.name]);
    } else {
        bridge.ip(&["link", "set", "p1", "down"]);
    }
    flapped.ip(&["link", "set", "p1", "name", "eth0"]);
    flapped.ip(&["link", "set", "eth0", "up"]);
    let mut st = vec![Station::on(&host), Station::on(flapped)];
    settle(&mut st);
    let pid = daemon.as_ref().unwrap().child.id();
    let station = "02:42:00:00:00:02".to_owned();
    let learned = |socket: &std::path::Path| stations_on(socket, "tap:p1").contains(&station);
    // Learned on tap:p1, and passing both ways.
    let passes = |st: &mut Vec<Station>, tag: u8, when: &str| {
        st[1].send(&test_frame(BROADCAST, mac(2), tag, 60));
        assert_eq!(settle(st), [1, 0], "{lock}: {when}: from station 2");
        assert!(
            wait_until(Duration::from_secs(3), || learned(&socket)),
            "{lock}: {when}: station 2 not learned on tap:p1"
        );
        st[0].send(&test_frame(mac(2), mac(1), tag + 1, 60));
        assert_eq!(settle(st), [0, 1], "{lock}: {when}: to station 2");
    };
    passes(&mut st, 10, "before");

    let first_errors = rx_errors(&socket, "tap:p1");
    for (round, phase) in PHASES_MS.into_iter().enumerate() {
        std::thread::sleep(Duration::from_millis(phase));
        let errors = rx_errors(&socket, "tap:p1");
        flapped.ip(&["link", "set", "eth0", "down"]);
        std::thread::sleep(Duration::from_millis(300));
        flapped.ip(&["link", "set", "eth0", "up"]);
        assert!(
            wait_until(Duration::from_secs(2), || !learned(&socket)),
            "{lock}: round {round}: station 2 still learned on tap:p1 2 s after a 0.3 s down"
        );
        assert!(
            wait_until(Duration::from_secs(1), || rx_errors(&socket, "tap:p1")
                > errors),
            "{lock}: round {round}: the down not counted"
        );
        // Traffic passes again after the up, and the station is learned
        // again (the station's packet socket is opened again: the down
        // left an error on the old one).
        st[1] = Station::on(flapped);
        passes(&mut st, 20 + 2 * round as u8, "after the up");
    }
    // Counted once per down, also after the fallback's next look.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        rx_errors(&socket, "tap:p1") - first_errors,
        PHASES_MS.len() as u64,
        "{lock}: the downs not counted once each"
    );

    // Left down: no cost.
    flapped.ip(&["link", "set", "eth0", "down"]);
    assert!(wait_until(Duration::from_secs(2), || !learned(&socket)));
    let used = cpu_over(pid, Duration::from_secs(2));
    eprintln!("{lock}: CPU over 2 s with the tap down: {used:.3} s");
    assert!(
        used < IDLE_CPU_LIMIT,
        "{lock}: tap down: {used:.2} s of CPU in 2 s"
    );
    flapped.ip(&["link", "set", "eth0", "up"]);

    let (status, log) = daemon.take().unwrap().stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    // One line per down that flushed a station: the flaps and the last.
    assert_eq!(
        lines_with(&log, "p1: link down; flushed 1 learned stations"),
        PHASES_MS.len() + 1,
        "{lock}: {log:?}"
    );
}

macro_rules! brief_tap_down_tests {
    ($($moved:ident, $here:ident: $lock:literal;)*) => {
        $(
            fn $moved() {
                if privileged(stringify!($moved)) {
                    a_brief_tap_down_is_flushed($lock, true);
                }
            }

            fn $here() {
                if privileged(stringify!($here)) {
                    a_brief_tap_down_is_flushed($lock, false);
                }
            }
        )*
    };
}

brief_tap_down_tests! {
    brief_tap_down_moved_mutex, brief_tap_down_here_mutex: "mutex";
    brief_tap_down_moved_rwlock, brief_tap_down_here_rwlock: "rwlock";
    brief_tap_down_moved_rmlock, brief_tap_down_here_rmlock: "rmlock";
    brief_tap_down_moved_sharded, brief_tap_down_here_sharded: "sharded";
    brief_tap_down_moved_rcu, brief_tap_down_here_rcu: "rcu";
    brief_tap_down_moved_epoch, brief_tap_down_here_epoch: "epoch";
}

fn a_frame_above_the_egress_mtu_costs_only_itself() {
    if !privileged("a_frame_above_the_egress_mtu_costs_only_itself") {
        return;
    }
    let mut topology = Topology::new(PortKind::Raw, 2, &[]);
    // Host 0 and its side of the bridge take jumbo frames; host 1's link
    // stays at 1500.
    topology.hosts[0].ip(&["link", "set", "eth0", "mtu", "9000"]);
    topology.bridge.ip(&["link", "set", "p0", "mtu", "9000"]);
    let mut st = topology.stations();
    let small = |tag| test_frame(BROADCAST, mac(1), tag, 60);
    let frames = vec![
        small(1),
        small(2),
        test_frame(BROADCAST, mac(1), 3, 3000),
        small(4),
        small(5),
    ];
    assert_eq!(st[0].send_many(&frames), frames.len());
    std::thread::sleep(Duration::from_millis(250));
    let got = st[1].collect(Duration::from_millis(1));
    let tags: Vec<u8> = got.iter().map(|f| f[20]).collect();
    assert_eq!(tags, [1, 2, 4, 5], "the small frames around the jumbo");
    tcp_transfer(&topology.hosts, 0, 1, 5105, 5);
    let (status, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    assert_eq!(
        port_counter(&log, "raw:p1", "tx_errors"),
        1,
        "the jumbo frame, counted once: {log:?}"
    );
}

fn frames_to_a_raw_ports_own_address_stay_with_the_host() {
    if !privileged("frames_to_a_raw_ports_own_address_stay_with_the_host") {
        return;
    }
    let mut topology = Topology::new(PortKind::Raw, 3, &[]);
    // The bridge's namespace has an address on p0, as a host has on the
    // NIC it bridges.
    topology
        .bridge
        .ip(&["addr", "add", "198.18.0.100/24", "dev", "p0"]);
    let own = link_mac(&topology.bridge, "p0");
    let mut st: Vec<Station> = topology
        .hosts
        .iter()
        .map(|host| Station::on(host))
        .collect();
    // Give the monitor a tick to see the address.
    std::thread::sleep(Duration::from_millis(1500));
    settle(&mut st);
    // From the far side of p0 and from another port: never forwarded.
    st[0].send(&test_frame(own, mac(1), 1, 60));
    st[1].send(&test_frame(own, mac(2), 2, 60));
    assert_eq!(settle(&mut st), [0, 0, 0], "host-bound frames leaked");

    // The host still gets what arrives on its interface: a TCP session
    // from host 0 to the bridge namespace's address.
    let addr = std::net::SocketAddr::from(([198, 18, 0, 100], 5106));
    let listener = topology
        .bridge
        .run(move || std::net::TcpListener::bind(addr).expect("bind"));
    let connected = topology.hosts[0]
        .run(move || std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok());
    assert!(connected, "the host did not get frames to its own address");
    drop(listener);

    // An address the interface takes while running is the host's too.
    let new = [0x02, 0x42, 0xaa, 0, 0, 1];
    topology
        .bridge
        .ip(&["link", "set", "p0", "address", "02:42:aa:00:00:01"]);
    std::thread::sleep(Duration::from_millis(1500));
    settle(&mut st);
    st[1].send(&test_frame(new, mac(2), 3, 60));
    assert_eq!(settle(&mut st), [0, 0, 0], "the new address leaked");
    // The old one is nobody's now: it floods like any unknown station.
    st[1].send(&test_frame(own, mac(2), 4, 60));
    assert_eq!(settle(&mut st), [1, 0, 1], "the old address");

    let (status, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    let p1 = log.iter().find(|l| l.contains("raw:p1: rx")).unwrap();
    assert!(p1.contains("local=2"), "{p1}");
}

/// Opens tap `name` in the calling thread's namespace the way a hypervisor
/// does: one queue, a 12-byte virtio-net header (virtio 1.0).
fn hypervisor_queue(name: &str, multi_queue: bool) -> OwnedFd {
    #[allow(unsafe_code)]
    // SAFETY: plain ioctls on a descriptor this function owns, with an
    // ifreq and an int that outlive the calls; results are checked.
    unsafe {
        let fd = libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        );
        assert!(fd >= 0, "open /dev/net/tun");
        let fd = OwnedFd::from_raw_fd(fd);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
            *dst = *src as libc::c_char;
        }
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
        if multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        req.ifr_ifru.ifru_flags = flags as libc::c_short;
        assert_eq!(libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req), 0);
        let size: libc::c_int = 12;
        assert_eq!(libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size), 0);
        fd
    }
}

fn a_vms_tap_is_bridged_on_its_host_side() {
    if !privileged("a_vms_tap_is_bridged_on_its_host_side") {
        return;
    }
    let bridge = Netns::new();
    let host = Netns::new();
    host.add_veth("p1", &bridge).expect("veth");
    host.ip(&["link", "set", "eth0", "up"]);
    // The guest's queue, held as QEMU would hold it.
    let guest = bridge.run(|| hypervisor_queue("vm0", false));
    bridge.ip(&["link", "set", "vm0", "up"]);

    // mpbridge refuses to attach as a second queue of the VM's tap...
    let (status, err) = netns::run_to_exit(
        Some(&bridge),
        &["run", "--port", "tap:vm0", "--port", "raw:p1"],
        Duration::from_secs(5),
    );
    assert!(!status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("raw:vm0"), "{err}");

    // ...and bridges its host side as a raw port.
    let _daemon = Daemon::start(&bridge, &["run", "--port", "raw:vm0", "--port", "raw:p1"]);
    let mut station = Station::on(&host);
    station.clear();
    let guest_mac = mac(0x10);
    // Guest to host: a 12-byte zero header, then the frame.
    let frame = test_frame(BROADCAST, guest_mac, 7, 100);
    let mut written = vec![0u8; 12];
    written.extend_from_slice(&frame);
    let n = netns::write_fd(&guest, &written);
    assert_eq!(n, written.len());
    let got = station.collect(Duration::from_millis(500));
    assert_eq!(got, vec![frame], "guest to host");

    // Host to guest (the guest is learned now).
    let reply = test_frame(guest_mac, mac(0x11), 8, 80);
    station.send(&reply);
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 2048];
    while Instant::now() < deadline {
        match netns::read_fd(&guest, &mut buffer) {
            Some(len) if buffer[12..len] == reply[..] => {
                received.push(buffer[..len].to_vec());
                break;
            }
            // IPv6 and other noise of the host side.
            Some(_) => {}
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    assert_eq!(received.len(), 1, "host to guest");
    assert!(received[0][..12].iter().all(|&b| b == 0), "header");
}

/// A tap another tool left with the 12-byte header of virtio 1.0: the
/// size is the device's, so mpbridge sets its own, and frames arrive whole.
fn a_tap_left_with_another_header_size_forwards_whole_frames() {
    let bridge = Netns::new();
    let hosts = [Netns::new(), Netns::new()];
    bridge.ip(&["tuntap", "add", "mode", "tap", "multi_queue", "name", "p0"]);
    drop(bridge.run(|| hypervisor_queue("p0", true)));
    hosts[1].add_veth("p1", &bridge).expect("veth");
    let _daemon = Daemon::start(&bridge, &["run", "--port", "tap:p0", "--port", "raw:p1"]);
    bridge.ip(&["link", "set", "p0", "netns", &hosts[0].name]);
    hosts[0].ip(&["link", "set", "p0", "name", "eth0"]);
    for host in &hosts {
        host.ip(&["link", "set", "eth0", "up"]);
    }
    let mut st: Vec<Station> = hosts.iter().map(|host| Station::on(host)).collect();
    settle(&mut st);
    let there = test_frame(BROADCAST, mac(1), 1, 100);
    let back = test_frame(BROADCAST, mac(2), 2, 90);
    st[0].send(&there);
    st[1].send(&back);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(st[1].collect(Duration::from_millis(1)), vec![there]);
    assert_eq!(st[0].collect(Duration::from_millis(1)), vec![back]);
}

fn taps_other_programs_made_open_or_say_why_not() {
    if !privileged("taps_other_programs_made_open_or_say_why_not") {
        return;
    }
    let bridge = Netns::new();
    // The default of most tools: single-queue.
    bridge.ip(&["tuntap", "add", "mode", "tap", "name", "sq0"]);
    let daemon = Daemon::start(&bridge, &["run", "--port", "tap:sq0", "--port", "tap:sq1"]);
    let (status, log) = daemon.stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");

    let (status, err) = netns::run_to_exit(
        Some(&bridge),
        &[
            "run",
            "--port",
            "tap:sq0",
            "--port",
            "tap:sq1",
            "--workers",
            "2",
        ],
        Duration::from_secs(5),
    );
    assert!(!status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("single-queue") && err.contains("multi_queue"),
        "{err}"
    );
}

fn a_worker_that_panics_stops_the_daemon_with_an_error() {
    if !privileged("a_worker_that_panics_stops_the_daemon_with_an_error") {
        return;
    }
    let bridge = Netns::new();
    let args = [
        "run",
        "--port",
        "tap:w0",
        "--port",
        "tap:w1",
        "--workers",
        "2",
        "--inject-fault",
        "worker-panic",
    ];
    let (status, err) = netns::run_to_exit(Some(&bridge), &args, Duration::from_secs(5));
    assert!(!status.success(), "{err}");
    assert!(err.contains("worker 0"), "{err}");
    assert!(
        !err.contains("ready"),
        "announced ready with a dead worker: {err}"
    );
}

/// `GET /metrics` on `127.0.0.1:port` inside `ns`, parsed.
fn scrape(ns: &Netns, port: u16) -> lab::prometheus::Exposition {
    use std::io::{Read, Write};
    let text = ns.run(move || {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .expect("connect to /metrics");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).expect("read /metrics");
        raw
    });
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    lab::prometheus::parse(body).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// A worker blocked in a system call (the injected stall: worker 0 sleeps
/// for an hour before its first round) is noticed by its heartbeat: shown
/// stuck in `stats` and `/metrics` within a bounded wait and logged once;
/// the other worker forwards its flows; port add and lock set fail with a
/// clear error and the bridge runs on; SIGTERM still ends the daemon, non-
/// zero, naming the worker left behind.
fn a_stuck_worker_is_reported_and_sigterm_still_ends_the_daemon() {
    if !privileged("a_stuck_worker_is_reported_and_sigterm_still_ends_the_daemon") {
        return;
    }
    let (socket, ctl) = netns::ctl_socket("mpbstuck");
    // The bridge's namespace is new: any port is free there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_arg = format!("--metrics=127.0.0.1:{port}");
    let mut topology = Topology::new(
        PortKind::Raw,
        2,
        &[
            &ctl,
            &metrics_arg,
            "--workers",
            "2",
            "--inject-fault",
            "worker-stall",
        ],
    );
    let stats = |socket: &std::path::Path| netns::ctl_json(socket, &["stats", "--json"]);
    let worker = |stats: &serde_json::Value, id: usize| stats["workers"][id].clone();

    // Reported within a bounded wait: the watchdog allows 3 s of silence
    // and looks once a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stuck = loop {
        let now = stats(&socket);
        if worker(&now, 0)["stuck"] == true {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "worker 0 not reported stuck within 10 s: {now}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (w0, w1) = (worker(&stuck, 0), worker(&stuck, 1));
    assert_eq!(w0["stalls"], 1, "{w0}");
    assert!(w0["heartbeat_age_s"].as_f64().unwrap() >= 3.0, "{w0}");
    assert_eq!(w1["stuck"], false, "{w1}");
    assert_eq!(w1["stalls"], 0, "{w1}");
    assert!(w1["heartbeat_age_s"].as_f64().unwrap() < 3.0, "{w1}");
    let metrics = scrape(&topology.bridge, port);
    let value = |name: &str, id: &str| {
        metrics
            .value(name, &[("worker", id)])
            .unwrap_or_else(|| panic!("no {name} for worker {id}"))
    };
    assert_eq!(value("mpbridge_worker_stuck", "0"), 1.0);
    assert_eq!(value("mpbridge_worker_stuck", "1"), 0.0);
    assert_eq!(value("mpbridge_worker_stalls_total", "0"), 1.0);
    assert_eq!(value("mpbridge_worker_stalls_total", "1"), 0.0);
    assert!(value("mpbridge_worker_heartbeat_age_seconds", "0") >= 3.0);

    // The other worker forwards the flows the fanout hands it. Neighbours
    // are set by hand: an ARP request hashed to the stuck worker would
    // never be answered.
    let macs: Vec<String> = topology
        .hosts
        .iter()
        .map(|host| {
            link_mac(host, "eth0")
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        })
        .collect();
    for (i, host) in topology.hosts.iter().enumerate() {
        let other = 1 - i;
        let addr = Topology::addr(other).to_string();
        host.ip(&[
            "neigh",
            "replace",
            &addr,
            "lladdr",
            &macs[other],
            "dev",
            "eth0",
            "nud",
            "permanent",
        ]);
    }
    let before = worker(&stats(&socket), 1)["frames"].as_u64().unwrap();
    let receiver = {
        let to = Topology::addr(1);
        topology.hosts[1].spawn(move || {
            let socket = std::net::UdpSocket::bind((to, 5131)).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut got = 0usize;
            let mut buf = [0u8; 64];
            while socket.recv(&mut buf).is_ok() {
                got += 1;
            }
            got
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // 64 flows (source ports): each worker gets about half of them.
    let (from, to) = (Topology::addr(0), Topology::addr(1));
    topology.hosts[0].run(move || {
        for source in 0..64u16 {
            let socket = std::net::UdpSocket::bind((from, 41000 + source)).unwrap();
            socket.send_to(b"flow", (to, 5131)).unwrap();
        }
    });
    let got = receiver.join().expect("the receiver ran");
    let after = worker(&stats(&socket), 1)["frames"].as_u64().unwrap();
    eprintln!(
        "{got} of 64 flows crossed; worker 1 took {} frames",
        after - before
    );
    assert!(got >= 1, "no flow crossed the bridge with one worker left");
    assert!(after > before, "worker 1 forwarded nothing");
    assert_eq!(worker(&stats(&socket), 0)["frames"], 0);

    // Changes that need every worker fail at once, naming it, and the
    // bridge runs on unchanged.
    topology
        .bridge
        .ip(&["link", "add", "q0", "type", "veth", "peer", "name", "q1"]);
    for args in [&["port", "add", "raw:q0"][..], &["lock", "set", "rcu"][..]] {
        let asked = Instant::now();
        let (code, _, err) = netns::ctl(&socket, args);
        assert_ne!(code, 0, "{args:?} succeeded with a stuck worker");
        assert!(err.contains("worker 0 stuck"), "{args:?}: {err}");
        assert!(err.contains("nothing changed"), "{args:?}: {err}");
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{args:?} waited for the stuck worker"
        );
    }
    let now = stats(&socket);
    assert_eq!(now["ports"].as_array().unwrap().len(), 2, "{now}");
    assert_eq!(now["lock"], stuck["lock"], "{now}");

    // SIGTERM ends the daemon although worker 0 never stops: a bound on
    // behaviour (the daemon gives workers 3 s), not on speed.
    let asked = Instant::now();
    let (status, log) = topology
        .daemon
        .take()
        .unwrap()
        .stop(Duration::from_secs(10));
    let status = status.unwrap_or_else(|| panic!("still running 10 s after SIGTERM: {log:?}"));
    eprintln!("exited {:?} after SIGTERM", asked.elapsed());
    assert!(
        !status.success(),
        "a worker left behind is a failure: {log:?}"
    );
    assert_eq!(
        lines_with(&log, "worker 0 is stuck"),
        1,
        "stall not logged once: {log:?}"
    );
    assert_eq!(lines_with(&log, "worker 0 runs again"), 0, "{log:?}");
    assert_eq!(
        lines_with(&log, "worker 0 did not stop within"),
        1,
        "{log:?}"
    );
    assert_eq!(lines_with(&log, "final counters"), 1, "{log:?}");
}

fn sighup_is_ignored() {
    if !privileged("sighup_is_ignored") {
        return;
    }
    let mut topology = Topology::new(PortKind::Raw, 2, &[]);
    let pid = pid(&topology);
    #[allow(unsafe_code)]
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGHUP);
    }
    std::thread::sleep(Duration::from_millis(300));
    tcp_transfer(&topology.hosts, 0, 1, 5107, 7);
    let (status, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
}

fn a_closed_stderr_is_no_crash() {
    if !privileged("a_closed_stderr_is_no_crash") {
        return;
    }
    let bridge = Netns::new();
    let dir = std::env::temp_dir().join(netns::unique("mpbstderr"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bridge.name,
            env!("CARGO_BIN_EXE_mpbridge"),
        ])
        .args(netns::named(&[
            "run", "--port", "tap:e0", "--port", "tap:e1", "-vv",
        ]))
        .env("NOTIFY_SOCKET", &path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader of its stderr goes away (a service manager's log, a pipe
    // to a program that ended): every later write gets EPIPE.
    drop(child.stderr.take());
    let mut message = [0u8; 64];
    let len = socket.recv(&mut message).expect("not ready");
    // sd_notify(3): newline-separated assignments.
    assert_eq!(message[..len].trim_ascii_end(), b"READY=1");
    #[allow(unsafe_code)]
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = netns::wait_exit(&mut child, Duration::from_secs(3));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "exit with a closed stderr: {status:?}");
}

fn the_running_daemon_holds_no_effective_capability() {
    if !privileged("the_running_daemon_holds_no_capability") {
        return;
    }
    for extra in [&["--workers", "2"][..], &["--keep-caps"][..]] {
        let topology = Topology::new(PortKind::Raw, 2, extra);
        let pid = pid(&topology);
        let tasks: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
            .collect();
        assert!(tasks.len() >= 2, "main thread and workers");
        for task in tasks {
            let status = |field: &str| proc_status(task, field);
            let keep = extra.contains(&"--keep-caps");
            for set in ["CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"] {
                let value = u64::from_str_radix(&status(set), 16).unwrap();
                if keep {
                    if set == "CapEff" {
                        assert_ne!(value, 0, "--keep-caps kept nothing");
                    }
                } else {
                    // Only CAP_NET_ADMIN (12) and CAP_NET_RAW (13) stay
                    // permitted, for ports added at run time; none is
                    // effective.
                    let want = match set {
                        "CapPrm" | "CapBnd" => (1 << 12) | (1 << 13),
                        _ => 0,
                    };
                    assert_eq!(value, want, "thread {task}: {set} {value:#x}");
                }
            }
            let nnp = status("NoNewPrivs");
            assert_eq!(nnp, if keep { "0" } else { "1" }, "thread {task}");
        }
        tcp_transfer(&topology.hosts, 0, 1, 5108, 8);
    }
}

/// Thousands of stations alternate between two ports as fast as two
/// senders can drive them, for 20 s: every frame is a station move. The
/// daemon's memory must stay flat, and the flapping must be reported.
fn a_flap_storm_keeps_memory_flat(lock: &str) {
    const STATIONS: u16 = 2000;
    const STORM: Duration = Duration::from_secs(20);
    const WARM_UP: Duration = Duration::from_secs(4);
    let mut topology = Topology::new(PortKind::Raw, 2, &["--lock", lock]);
    let pid = pid(&topology);
    let stop_at = Instant::now() + STORM;
    let senders: Vec<_> = topology
        .hosts
        .iter()
        .enumerate()
        .map(|(side, host)| {
            let mut station = Station::on(host);
            std::thread::spawn(move || {
                let frames: Vec<Vec<u8>> = (0..STATIONS)
                    .map(|n| test_frame(mac(0x4000 + n), mac(n + 1), side as u8, 60))
                    .collect();
                let mut sent = 0usize;
                while Instant::now() < stop_at {
                    for chunk in frames.chunks(64) {
                        sent += station.send_many(chunk);
                    }
                    // Read what was flooded back, so the socket's ring
                    // never holds the storm.
                    station.clear();
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(WARM_UP);
    let warm = rss_kib(pid);
    let mut peak = warm;
    while Instant::now() < stop_at {
        std::thread::sleep(Duration::from_millis(500));
        peak = peak.max(rss_kib(pid));
    }
    let sent: usize = senders.into_iter().map(|s| s.join().unwrap()).sum();
    let end = rss_kib(pid);
    let (status, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    let moves = port_counter(&log, "raw:p0", "moves") + port_counter(&log, "raw:p1", "moves");
    eprintln!(
        "{lock}: {sent} frames sent, {moves} station moves, RSS {warm} KiB after warm-up, \
         peak {peak} KiB, {end} KiB at the end"
    );
    assert!(
        moves > u64::from(STATIONS) * 10,
        "not a storm: {moves} moves"
    );
    assert!(
        peak <= warm + 8 * 1024,
        "{lock}: RSS grew from {warm} KiB to {peak} KiB under station moves"
    );
    assert!(
        lines_with(&log, "station moves onto") >= 1,
        "the flapping was not reported: {log:?}"
    );
}

macro_rules! flap_storm_tests {
    ($($name:ident: $lock:literal;)*) => {
        $(
                        fn $name() {
                if privileged(stringify!($name)) {
                    a_flap_storm_keeps_memory_flat($lock);
                }
            }
        )*
    };
}

flap_storm_tests! {
    flap_storm_mutex: "mutex";
    flap_storm_rwlock: "rwlock";
    flap_storm_rmlock: "rmlock";
    flap_storm_sharded: "sharded";
    flap_storm_rcu: "rcu";
    flap_storm_epoch: "epoch";
}

/// Sets process `pid`'s soft limit on open descriptors (the hard one
/// stays: raising it back would need CAP_SYS_RESOURCE).
fn limit_descriptors(pid: u32, limit: usize) {
    let status = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={limit}:")])
        .status()
        .expect("prlimit (util-linux)");
    assert!(status.success());
}

fn descriptors_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn running_out_of_descriptors_is_not_an_interface_deleted() {
    let test = "running_out_of_descriptors_is_not_an_interface_deleted";
    if !privileged(test) || !lab::installed(test, "prlimit", "util-linux") {
        return;
    }
    let (socket, ctl) = netns::ctl_socket("mpbemfile");
    let mut topology = Topology::new(PortKind::Raw, 2, &[&ctl, "-v"]);
    tcp_transfer(&topology.hosts, 0, 1, 5121, 21);
    let pid = pid(&topology);
    let locals = |socket: &std::path::Path| {
        let entries = netns::ctl_json(socket, &["fdb", "show", "--json"]);
        entries
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["state"] == "local")
            .count()
    };
    assert_eq!(locals(&socket), 2);
    // A few descriptors more than the daemon holds now, taken by clients;
    // more clients wait in the listen backlog.
    limit_descriptors(pid, descriptors_of(pid) + 3);
    let clients: Vec<std::os::unix::net::UnixStream> = (0..16)
        .map(|_| std::os::unix::net::UnixStream::connect(&socket).unwrap())
        .collect();
    // Link-monitor ticks while no descriptor is to be had, and a control
    // thread that must not spin on clients it cannot accept.
    std::thread::sleep(Duration::from_millis(500));
    let used = cpu_over(pid, Duration::from_secs(2));
    drop(clients);
    limit_descriptors(pid, 1024);
    assert!(used < 0.1, "{used} s of CPU while out of descriptors");
    std::thread::sleep(Duration::from_millis(1500));
    // Both raw ports are still the bridge's, with their own addresses kept.
    assert_eq!(locals(&socket), 2);
    let stats = netns::ctl_json(&socket, &["stats", "--json"]);
    for port in ["raw:p0", "raw:p1"] {
        assert_eq!(
            netns::port_stats(&stats, port)["state"],
            "forwarding",
            "{stats}"
        );
    }
    tcp_transfer(&topology.hosts, 1, 0, 5122, 22);
    let (_, log) = topology.daemon.take().unwrap().stop(Duration::from_secs(3));
    assert_eq!(lines_with(&log, "interface deleted"), 0, "{log:?}");
    assert!(lines_with(&log, "not accepting") >= 1, "{log:?}");
}

lab::test_main! {
    privileged: [
        a_raw_port_down_then_deleted_costs_no_cpu_and_is_reported_once,
        a_raw_port_going_down_flushes_its_stations,
        a_tap_port_going_down_flushes_its_stations,
        a_tap_down_in_another_namespace_is_flushed_without_traffic,
        a_frame_above_the_egress_mtu_costs_only_itself,
        frames_to_a_raw_ports_own_address_stay_with_the_host,
        a_vms_tap_is_bridged_on_its_host_side,
        taps_other_programs_made_open_or_say_why_not,
        a_tap_left_with_another_header_size_forwards_whole_frames,
        a_worker_that_panics_stops_the_daemon_with_an_error,
        a_stuck_worker_is_reported_and_sigterm_still_ends_the_daemon,
        sighup_is_ignored,
        a_closed_stderr_is_no_crash,
        the_running_daemon_holds_no_effective_capability,
        running_out_of_descriptors_is_not_an_interface_deleted,
        flap_storm_mutex,
        flap_storm_rwlock,
        flap_storm_rmlock,
        flap_storm_sharded,
        flap_storm_rcu,
        flap_storm_epoch,
        brief_tap_down_moved_mutex,
        brief_tap_down_here_mutex,
        brief_tap_down_moved_rwlock,
        brief_tap_down_here_rwlock,
        brief_tap_down_moved_rmlock,
        brief_tap_down_here_rmlock,
        brief_tap_down_moved_sharded,
        brief_tap_down_here_sharded,
        brief_tap_down_moved_rcu,
        brief_tap_down_here_rcu,
        brief_tap_down_moved_epoch,
        brief_tap_down_here_epoch,
    ],
    plain: [],
}
