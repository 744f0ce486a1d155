//! Spanning tree (`--stp`: RSTP, 802.1D-2004 clause 17, speaking 802.1D on
//! a port whose neighbour does) and the port protections that go with it
//! (BPDU guard, BPDU filter, storm control, the station move limit), from
//! outside: mpbridge in rings with Linux bridges running their 802.1D STP
//! (net/bridge/br_stp*.c) and with other mpbridge instances, and hosts that
//! send crafted frames. Each ring is also built with a Linux bridge in
//! mpbridge's place, so that a failure of an mpbridge test points at
//! mpbridge and not at the ring. A watchdog cuts a ring at once when one of
//! its interfaces sees a storm. Needs root; skips with a reason otherwise
//! (fails under MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bridge::port::{Outgoing, Queue, RawQueue, RxBatch, VNET_HDR_LEN};
use netns::{
    ctl, ctl_json, ctl_ok, mac, port_stats, privileged, settle_counts, tcp_transfer, test_frame,
    Daemon, Netns, PortKind, Station, Topology, BROADCAST,
};
use serde_json::Value;

/// The Linux bridges' timers, in centiseconds: hello 1 s, forward delay
/// 4 s, max age 6 s, the shortest that 802.1D's rule allows together.
const KERNEL_TIMERS: [&str; 6] = [
    "hello_time",
    "100",
    "forward_delay",
    "400",
    "max_age",
    "600",
];

/// mpbridge's spanning tree with the same timers.
const STP: [&str; 7] = [
    "--stp",
    "--stp-hello",
    "1",
    "--stp-forward-delay",
    "4",
    "--stp-max-age",
    "6",
];

const HELLO: Duration = Duration::from_secs(1);
const FORWARD_DELAY: Duration = Duration::from_secs(4);
const MAX_AGE: Duration = Duration::from_secs(6);

/// How long a ring may take to settle: an 802.1D port needs two forward
/// delays (listening, learning) once its role is known, which takes a few
/// hello times; the rest is room for a loaded machine.
const CONVERGE: Duration = Duration::from_secs(30);

/// Frames one interface may receive during a test before the watchdog
/// calls it a storm: far above what any test sends, far below what a
/// looping broadcast makes in a second.
const STORM_LIMIT: u64 = 200_000;

/// The bridge group address (BPDUs) and the nearest bridge group address
/// (LLDP), 802.1Q table 8-1.
const STP_GROUP: [u8; 6] = [0x01, 0x80, 0xc2, 0, 0, 0];
const LLDP_GROUP: [u8; 6] = [0x01, 0x80, 0xc2, 0, 0, 0x0e];

/// Whether the tests that build Linux bridges can run here.
fn kernel_bridges(test: &str) -> bool {
    privileged(test) && lab::installed(test, "bridge", "iproute2")
}

/// A veth pair, `a` in namespace `ns_a` and `b` in `ns_b`, both up.
fn link(ns_a: &Netns, a: &str, ns_b: &Netns, b: &str) {
    ns_a.ip(&[
        "link", "add", a, "type", "veth", "peer", "name", b, "netns", &ns_b.name,
    ]);
    ns_a.ip(&["link", "set", "dev", a, "up"]);
    ns_b.ip(&["link", "set", "dev", b, "up"]);
}

/// Host `i` of a test: `eth0` addressed 198.18.0.(i+1)/24 and up, as
/// `Topology::addr` and `tcp_transfer` expect.
fn address_host(host: &Netns, i: usize) {
    let addr = format!("198.18.0.{}/24", i + 1);
    host.ip(&["addr", "add", &addr, "dev", "eth0"]);
    host.ip(&["link", "set", "dev", "eth0", "up"]);
}

/// The Linux bridge `br0` in `ns`: 802.1D STP with KERNEL_TIMERS when
/// `stp`, bridge priority `priority`, and `ports` enslaved in this order
/// (so their port numbers are 1, 2, ...).
fn kernel_bridge(ns: &Netns, stp: bool, priority: u16, ports: &[&str]) {
    let priority = priority.to_string();
    let mut args = vec![
        "link",
        "add",
        "br0",
        "type",
        "bridge",
        "stp_state",
        if stp { "1" } else { "0" },
        "priority",
        &priority,
    ];
    args.extend(KERNEL_TIMERS);
    ns.ip(&args);
    for port in ports {
        ns.ip(&["link", "set", "dev", port, "master", "br0"]);
        ns.ip(&["link", "set", "dev", port, "up"]);
    }
    ns.ip(&["link", "set", "dev", "br0", "up"]);
}

/// A file of br0's under /sys/class/net/br0/bridge in `ns` (root_id,
/// bridge_id, root_port), trimmed.
fn kernel_attr(ns: &Netns, attr: &str) -> String {
    let path = format!("/sys/class/net/br0/bridge/{attr}");
    let output = Command::new("ip")
        .args(["netns", "exec", &ns.name, "cat", &path])
        .output()
        .expect("cannot run ip netns exec");
    assert!(
        output.status.success(),
        "{path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The STP state of each port of br0 in `ns` (`bridge -j link show`):
/// disabled, listening, learning, forwarding or blocking.
fn kernel_port_states(ns: &Netns) -> BTreeMap<String, String> {
    let output = Command::new("bridge")
        .args(["-n", &ns.name, "-j", "link", "show"])
        .output()
        .expect("cannot run bridge");
    assert!(
        output.status.success(),
        "bridge link show: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let links: Value = serde_json::from_slice(&output.stdout).expect("bridge -j: not JSON");
    links
        .as_array()
        .expect("bridge -j: not an array")
        .iter()
        .filter_map(|l| {
            Some((
                l["ifname"].as_str()?.to_owned(),
                l["state"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Removes a file (a control socket) on drop, also when a test fails.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A running mpbridge with a control socket of its own; both go on drop.
struct Mp {
    daemon: Option<Daemon>,
    socket: PathBuf,
}

impl Mp {
    /// mpbridge in `ns` with `ports` (values of `--port`) and `extra`
    /// options.
    fn start(ns: &Netns, ports: &[String], extra: &[&str]) -> Mp {
        let (socket, ctl_arg) = netns::ctl_socket("mpbstp");
        let mut args = vec!["run".to_owned(), ctl_arg];
        args.extend(ports.iter().map(|p| format!("--port={p}")));
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let daemon = Daemon::start(ns, &args);
        Mp {
            daemon: Some(daemon),
            socket,
        }
    }

    fn stats(&self) -> Value {
        ctl_json(&self.socket, &["stats", "--json"])
    }
}

impl Drop for Mp {
    fn drop(&mut self) {
        self.daemon.take();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Where a port of a ring stands, as its bridge reports it.
#[derive(Debug, Clone, PartialEq)]
enum PortView {
    /// Linux: blocking; mpbridge: discarding as an alternate or backup
    /// port.
    Blocking,
    /// Forwarding.
    Forwarding,
    /// Anything else (listening, learning, a designated port still
    /// discarding, disabled), as reported.
    Other(String),
}

impl PortView {
    fn of_kernel(state: Option<&String>) -> PortView {
        match state.map(String::as_str) {
            Some("forwarding") => PortView::Forwarding,
            Some("blocking") => PortView::Blocking,
            Some(other) => PortView::Other(other.to_owned()),
            None => PortView::Other("not a port of br0".to_owned()),
        }
    }

    /// From a port's "stp" object in mpbridge's stats.
    fn of_mpbridge(stp: &Value) -> PortView {
        let role = stp["role"].as_str().unwrap_or("?");
        let state = stp["state"].as_str().unwrap_or("?");
        match (role, state) {
            (_, "forwarding") => PortView::Forwarding,
            ("alternate" | "backup", "discarding") => PortView::Blocking,
            _ => PortView::Other(format!("{role} {state}")),
        }
    }
}

/// A bridge of a test's topology in a namespace of its own: mpbridge when
/// `mp` is set, otherwise the Linux bridge br0 there.
struct Node {
    label: &'static str,
    /// Declared before `ns`: stopped before its namespace goes.
    mp: Option<Mp>,
    ns: Netns,
}

impl Node {
    fn new(label: &'static str) -> Node {
        Node {
            label,
            mp: None,
            ns: Netns::new(),
        }
    }

    fn mp(&self) -> &Mp {
        self.mp.as_ref().expect("not an mpbridge")
    }

    /// How reports name interface `port` of this bridge: "M:raw:mb" for
    /// mpbridge's, "A:ab" for a Linux bridge's.
    fn label_of(&self, port: &str) -> String {
        match self.mp {
            Some(_) => format!("{}:raw:{port}", self.label),
            None => format!("{}:{port}", self.label),
        }
    }

    /// Where each of `ports` stands.
    fn views(&self, ports: &[&str]) -> Vec<(String, PortView)> {
        match &self.mp {
            Some(mp) => {
                let stats = mp.stats();
                ports
                    .iter()
                    .map(|port| {
                        let stp = port_stats(&stats, &format!("raw:{port}"))["stp"].clone();
                        (self.label_of(port), PortView::of_mpbridge(&stp))
                    })
                    .collect()
            }
            None => {
                let states = kernel_port_states(&self.ns);
                ports
                    .iter()
                    .map(|port| (self.label_of(port), PortView::of_kernel(states.get(*port))))
                    .collect()
            }
        }
    }

    /// The port this bridge's table has station `station` ("02:42:...")
    /// on: "raw:mb" for mpbridge, "mb" for a Linux bridge.
    fn fdb_port(&self, station: &str) -> Option<String> {
        let entries = match &self.mp {
            Some(mp) => ctl_json(&mp.socket, &["fdb", "show", "--json"]),
            None => {
                let output = Command::new("bridge")
                    .args(["-n", &self.ns.name, "-j", "fdb", "show", "br", "br0"])
                    .output()
                    .expect("cannot run bridge");
                serde_json::from_slice(&output.stdout).expect("bridge -j fdb: not JSON")
            }
        };
        let key = if self.mp.is_some() { "port" } else { "ifname" };
        entries
            .as_array()
            .expect("fdb: not an array")
            .iter()
            .find(|e| e["mac"] == station)
            .and_then(|e| e[key].as_str())
            .map(str::to_owned)
    }

    /// The root this bridge believes in, as sysfs writes bridge ids.
    fn root_id(&self) -> String {
        match &self.mp {
            Some(mp) => mp.stats()["stp"]["root_id"]
                .as_str()
                .expect("no stp.root_id")
                .to_owned(),
            None => kernel_attr(&self.ns, "root_id"),
        }
    }

    fn bridge_id(&self) -> String {
        match &self.mp {
            Some(mp) => mp.stats()["stp"]["bridge_id"]
                .as_str()
                .expect("no stp.bridge_id")
                .to_owned(),
            None => kernel_attr(&self.ns, "bridge_id"),
        }
    }
}

/// Ports of some bridges, as `converge` takes them.
type Ring<'a> = [(&'a Node, &'a [&'a str])];

fn views(ring: &Ring) -> Vec<(String, PortView)> {
    ring.iter()
        .flat_map(|(node, ports)| node.views(ports))
        .collect()
}

/// Waits (at most CONVERGE) until exactly one port of `ring` blocks and
/// all the others forward; returns the label of the one that blocks.
fn converge(ring: &Ring, guard: &StormGuard) -> String {
    let deadline = Instant::now() + CONVERGE;
    loop {
        guard.check();
        let now = views(ring);
        let blocking: Vec<&String> = now
            .iter()
            .filter(|(_, view)| *view == PortView::Blocking)
            .map(|(label, _)| label)
            .collect();
        let others_forward = now
            .iter()
            .all(|(_, view)| matches!(view, PortView::Blocking | PortView::Forwarding));
        if blocking.len() == 1 && others_forward {
            return blocking[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "not converged to exactly one blocking port within {CONVERGE:?}: {now:?}"
        );
        thread::sleep(Duration::from_millis(250));
    }
}

/// Watches the receive counters of interfaces in namespaces; when one has
/// received more than STORM_LIMIT frames since the watch began, deletes
/// the `breakers` links at once (cutting the ring) and remembers why, so
/// that `check` (and the drop, if nothing checked) fails the test.
struct StormGuard {
    stop: Arc<AtomicBool>,
    tripped: Arc<Mutex<Option<String>>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl StormGuard {
    fn watch(watched: &[(&Netns, &[&str])], breakers: &[(&Netns, &str)]) -> StormGuard {
        let spaces: Vec<(String, File, Vec<String>)> = watched
            .iter()
            .map(|(ns, devs)| {
                let path = format!("/run/netns/{}", ns.name);
                let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                (
                    ns.name.clone(),
                    file,
                    devs.iter().map(|d| d.to_string()).collect(),
                )
            })
            .collect();
        let breakers: Vec<(String, String)> = breakers
            .iter()
            .map(|(ns, dev)| (ns.name.clone(), dev.to_string()))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let tripped = Arc::new(Mutex::new(None));
        let thread = {
            let stop = stop.clone();
            let tripped = tripped.clone();
            thread::spawn(move || {
                let mut base: BTreeMap<(usize, String), u64> = BTreeMap::new();
                // Relaxed: a stop flag; nothing is published through it.
                while !stop.load(Ordering::Relaxed) {
                    for (i, (name, file, devs)) in spaces.iter().enumerate() {
                        // SAFETY: `file` is an open namespace file; setns
                        // moves only this thread, which does nothing else.
                        #[allow(unsafe_code)]
                        let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                        if entered != 0 {
                            continue;
                        }
                        let Ok(text) = std::fs::read_to_string("/proc/thread-self/net/dev") else {
                            continue;
                        };
                        for (dev, rx) in rx_packets(&text) {
                            if !devs.contains(&dev) {
                                continue;
                            }
                            let start = *base.entry((i, dev.clone())).or_insert(rx);
                            let got = rx.saturating_sub(start);
                            if got > STORM_LIMIT {
                                for (ns, link) in &breakers {
                                    let _ = Command::new("ip")
                                        .args(["-n", ns, "link", "del", link])
                                        .status();
                                }
                                *tripped.lock().unwrap() = Some(format!(
                                    "a broadcast storm: {dev} in {name} received {got} frames; \
                                     the ring was cut"
                                ));
                                return;
                            }
                        }
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            })
        };
        StormGuard {
            stop,
            tripped,
            thread: Some(thread),
        }
    }

    /// Fails the test if a storm was seen.
    fn check(&self) {
        if let Some(why) = self.tripped.lock().unwrap().clone() {
            panic!("{why}");
        }
    }
}

impl Drop for StormGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if !thread::panicking() {
            self.check();
        }
    }
}

/// (interface, received packets) from the text of /proc/net/dev.
fn rx_packets(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let rx = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((name.trim().to_owned(), rx))
        })
        .collect()
}

/// A packet socket on an interface of a namespace that sends frames and
/// keeps every frame that arrives, of any kind (a `Station` keeps only
/// test frames).
struct Capture {
    queue: RawQueue,
    batch: RxBatch,
}

impl Capture {
    fn on(ns: &Netns, dev: &str) -> Capture {
        let dev = dev.to_owned();
        let queue = ns.run(move || {
            let mut queues =
                RawQueue::open(&dev, 1).unwrap_or_else(|e| panic!("packet socket on {dev}: {e}"));
            queues.pop().unwrap()
        });
        Capture {
            queue,
            batch: RxBatch::new(64, 65_600),
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

    /// Every frame that arrives within `wait`.
    fn frames(&mut self, wait: Duration) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut frames = Vec::new();
        loop {
            self.batch.clear();
            self.queue.recv_batch(&mut self.batch).expect("receive");
            frames.extend(
                self.batch
                    .iter()
                    .map(|f| f.to_vec()[VNET_HDR_LEN..].to_vec()),
            );
            if Instant::now() >= deadline {
                return frames;
            }
            if self.batch.is_empty() {
                thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// The BPDUs that arrive within `wait`.
    fn bpdus(&mut self, wait: Duration) -> Vec<Vec<u8>> {
        let mut frames = self.frames(wait);
        frames.retain(|f| is_bpdu(f));
        frames
    }
}

/// Whether `frame` is a BPDU: to the bridge group address, LLC SAP 0x42.
fn is_bpdu(frame: &[u8]) -> bool {
    frame.len() >= 21 && frame[..6] == STP_GROUP && frame[14..17] == [0x42, 0x42, 0x03]
}

/// A bridge id as sysfs writes one: "8000.0242ac110002".
fn sysfs_id(id: &[u8]) -> String {
    let address: String = id[2..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{:02x}{:02x}.{address}", id[0], id[1])
}

/// The sending bridge's id in a configuration or RST BPDU (802.1D-2004
/// 9.3.1, 9.3.3: after the LLC header, protocol id, version, type, flags,
/// root id, root path cost).
fn bpdu_bridge_id(frame: &[u8]) -> Option<String> {
    (is_bpdu(frame) && frame.len() >= 44 && matches!(frame[20], 0x00 | 0x02))
        .then(|| sysfs_id(&frame[34..42]))
}

/// A configuration BPDU (802.1D-2004 9.3.1) from `src`: a bridge of
/// priority `priority` and address `src` that calls itself the root, with
/// 802.1D's default timers, padded to the shortest Ethernet frame.
fn config_bpdu(src: [u8; 6], priority: u16) -> Vec<u8> {
    let mut id = priority.to_be_bytes().to_vec();
    id.extend_from_slice(&src);
    let mut frame = STP_GROUP.to_vec();
    frame.extend_from_slice(&src);
    // An 802.3 length: the LLC header and the 35 bytes of the BPDU.
    frame.extend_from_slice(&38u16.to_be_bytes());
    frame.extend_from_slice(&[0x42, 0x42, 0x03]);
    // Protocol 0, version 0, type 0 (configuration), no flags.
    frame.extend_from_slice(&[0, 0, 0, 0, 0]);
    frame.extend_from_slice(&id);
    frame.extend_from_slice(&0u32.to_be_bytes());
    frame.extend_from_slice(&id);
    frame.extend_from_slice(&0x8001u16.to_be_bytes());
    // Message age 0, max age 20 s, hello 2 s, forward delay 15 s (1/256 s).
    for time in [0u16, 20 << 8, 2 << 8, 15 << 8] {
        frame.extend_from_slice(&time.to_be_bytes());
    }
    frame.resize(60, 0);
    frame
}

/// Sends a broadcast test frame from station `from` (as `mac(from + 1)`)
/// and checks that every other station gets exactly one copy: no loop.
fn broadcast_once(stations: &mut [Station], from: usize, tag: u8) {
    settle_counts(stations);
    stations[from].send(&test_frame(BROADCAST, mac(from as u16 + 1), tag, 60));
    let counts = settle_counts(stations);
    let want: Vec<usize> = (0..stations.len())
        .map(|i| usize::from(i != from))
        .collect();
    assert_eq!(
        counts, want,
        "a broadcast from host {from} arrived that many times at each host"
    );
}

/// Station `s`'s test frames carry `mac(s + 1)`. Every `step`, each pair
/// (from, to) of `pairs` sends one unicast frame tagged `tag`, until each
/// `to` got one of its pair's frames, at most `within`; returns how long
/// each pair took.
fn until_delivered(
    stations: &mut [Station],
    pairs: &[(usize, usize)],
    tag: u8,
    step: Duration,
    within: Duration,
    guard: &StormGuard,
) -> Vec<Duration> {
    for station in stations.iter_mut() {
        station.clear();
    }
    let start = Instant::now();
    let mut took: Vec<Option<Duration>> = vec![None; pairs.len()];
    let receivers: BTreeSet<usize> = pairs.iter().map(|&(_, to)| to).collect();
    while took.iter().any(Option::is_none) {
        guard.check();
        assert!(
            start.elapsed() < within,
            "not delivered within {within:?} (from, to, took): {:?}",
            pairs.iter().zip(&took).collect::<Vec<_>>()
        );
        for &(from, to) in pairs {
            let frame = test_frame(mac(to as u16 + 1), mac(from as u16 + 1), tag, 60);
            stations[from].send(&frame);
        }
        let wait = step / receivers.len() as u32;
        for &to in &receivers {
            for frame in stations[to].collect(wait) {
                for (i, &(from, pair_to)) in pairs.iter().enumerate() {
                    let ours =
                        pair_to == to && frame[6..12] == mac(from as u16 + 1) && frame[14] == tag;
                    if ours && took[i].is_none() {
                        took[i] = Some(start.elapsed());
                    }
                }
            }
        }
    }
    took.into_iter().map(Option::unwrap).collect()
}

/// What stands between the two Linux bridges of a triangle.
enum Middle<'a> {
    /// mpbridge with these options; `port_options` follow its ports facing
    /// A and B (",cost=100", or "").
    Mpbridge {
        options: Vec<&'a str>,
        port_options: &'a str,
    },
    /// A Linux bridge, with its 802.1D STP or without, the cost of its
    /// ports facing A and B set when given.
    Linux { stp: bool, cost: Option<u32> },
}

/// Linux bridges A and B, and M (mpbridge, or a Linux bridge standing in
/// for it) linked in a triangle: A.am–M.ma, B.bm–M.mb, A.ab–B.ba. Host HA
/// on A (A.ah), HB on B (B.bh), and HM on M (M.mh) when asked for, at
/// 198.18.0.1, .2 and .3. A's ports are numbered am, ab, ah; B's bm, ba,
/// bh.
struct Triangle {
    /// Declared first: stops watching before anything goes.
    guard: StormGuard,
    m: Node,
    a: Node,
    b: Node,
    hosts: Vec<Netns>,
}

const A_PORTS: [&str; 3] = ["am", "ab", "ah"];
const B_PORTS: [&str; 3] = ["bm", "ba", "bh"];

impl Triangle {
    fn new(middle: Middle, a_priority: u16, b_priority: u16, host_on_m: bool) -> Triangle {
        let mut m = Node::new("M");
        let a = Node::new("A");
        let b = Node::new("B");
        let hosts: Vec<Netns> = (0..2 + usize::from(host_on_m))
            .map(|_| Netns::new())
            .collect();
        link(&a.ns, "am", &m.ns, "ma");
        link(&b.ns, "bm", &m.ns, "mb");
        link(&a.ns, "ab", &b.ns, "ba");
        hosts[0].add_veth("ah", &a.ns).expect("veth");
        hosts[1].add_veth("bh", &b.ns).expect("veth");
        if host_on_m {
            hosts[2].add_veth("mh", &m.ns).expect("veth");
        }
        for (i, host) in hosts.iter().enumerate() {
            address_host(host, i);
        }
        let m_ports: &[&str] = if host_on_m {
            &["ma", "mb", "mh"]
        } else {
            &["ma", "mb"]
        };
        let mut watched: Vec<(&Netns, &[&str])> = vec![
            (&a.ns, &A_PORTS[..]),
            (&b.ns, &B_PORTS[..]),
            (&m.ns, m_ports),
        ];
        for host in &hosts {
            watched.push((host, &["eth0"][..]));
        }
        let guard = StormGuard::watch(&watched, &[(&a.ns, "am"), (&a.ns, "ab"), (&b.ns, "bm")]);
        kernel_bridge(&a.ns, true, a_priority, &A_PORTS);
        kernel_bridge(&b.ns, true, b_priority, &B_PORTS);
        match middle {
            Middle::Mpbridge {
                options,
                port_options,
            } => {
                let mut ports = vec![
                    format!("raw:ma{port_options}"),
                    format!("raw:mb{port_options}"),
                ];
                if host_on_m {
                    ports.push("raw:mh".to_owned());
                }
                m.mp = Some(Mp::start(&m.ns, &ports, &options));
            }
            Middle::Linux { stp, cost } => {
                kernel_bridge(&m.ns, stp, 32768, m_ports);
                if let Some(cost) = cost {
                    let cost = cost.to_string();
                    for port in ["ma", "mb"] {
                        m.ns.ip(&[
                            "link",
                            "set",
                            "dev",
                            port,
                            "type",
                            "bridge_slave",
                            "cost",
                            &cost,
                        ]);
                    }
                }
            }
        }
        Triangle {
            guard,
            m,
            a,
            b,
            hosts,
        }
    }

    /// M's ports in the ring, and its host's when it has one.
    fn m_ports(&self) -> &'static [&'static str] {
        if self.hosts.len() == 3 {
            &["ma", "mb", "mh"]
        } else {
            &["ma", "mb"]
        }
    }

    /// Every port of the three bridges.
    fn ring(&self) -> Vec<(&Node, &[&str])> {
        vec![
            (&self.a, &A_PORTS[..]),
            (&self.b, &B_PORTS[..]),
            (&self.m, self.m_ports()),
        ]
    }

    fn stations(&self) -> Vec<Station> {
        let mut stations: Vec<Station> = self.hosts.iter().map(|h| Station::on(h)).collect();
        settle_counts(&mut stations);
        stations
    }
}

/// The first `"raw:..."` line of `port show` that names `port`.
fn port_show_line(socket: &std::path::Path, port: &str) -> String {
    let (code, out, err) = ctl(socket, &["port", "show"]);
    assert_eq!(code, 0, "port show: {err}");
    out.lines()
        .find(|l| l.contains(port))
        .unwrap_or_else(|| panic!("no {port} in port show: {out}"))
        .to_owned()
}

/// Waits (at most `within`) until mpbridge says each of `ports` forwards.
fn wait_stp_forwarding(socket: &std::path::Path, ports: &[&str], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let stats = ctl_json(socket, &["stats", "--json"]);
        let states: Vec<Value> = ports
            .iter()
            .map(|p| port_stats(&stats, p)["stp"].clone())
            .collect();
        if states.iter().all(|s| s["state"] == "forwarding") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ports:?} not all forwarding within {within:?}: {states:?}"
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// A BPDU counter (rx_bpdus, tx_bpdus) of a port's "stp" object.
fn bpdus(stp: &Value, name: &str) -> u64 {
    stp["bpdus"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in the port's stp object: {stp}"))
}

/// One drop counter of `port` in a `stats --json` reply (0 when absent).
fn drops(stats: &Value, port: &str, reason: &str) -> u64 {
    port_stats(stats, port)["drops"][reason]
        .as_u64()
        .unwrap_or(0)
}

fn counter(stats: &Value, port: &str, name: &str) -> u64 {
    port_stats(stats, port)[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} for {port}: {stats}"))
}

/// Whether `fdb show` lists station `station` ("02:42:...") on any port.
fn fdb_has(socket: &std::path::Path, station: &str) -> bool {
    let entries = ctl_json(socket, &["fdb", "show", "--json"]);
    entries
        .as_array()
        .expect("fdb show: not an array")
        .iter()
        .any(|e| e["mac"] == station)
}

// 1. Without --stp, BPDUs cross mpbridge, so two Linux bridges looped
// through it see the loop.

/// Linux bridges A (the root, priority 4096) and B, looped through M,
/// which does not take part in STP, HM on M: the kernel bridges block
/// exactly one port; A's BPDUs reach B through M; a broadcast arrives once
/// everywhere; TCP crosses; a frame to the nearest bridge group address
/// (LLDP) from HM is forwarded by M to neither bridge.
fn bpdus_cross(middle: Middle) {
    let mpbridge = matches!(middle, Middle::Mpbridge { .. });
    let t = Triangle::new(middle, 4096, 32768, true);
    let kernel_ports: [(&Node, &[&str]); 2] = [(&t.a, &A_PORTS), (&t.b, &B_PORTS)];
    let blocked = converge(&kernel_ports, &t.guard);
    eprintln!("blocking: {blocked}");
    assert!(
        ["A:am", "A:ab", "B:bm", "B:ba"].contains(&blocked.as_str()),
        "a host port blocks: {blocked}"
    );
    // A is the root: its BPDUs on am cross M to B's bm.
    let a_id = kernel_attr(&t.a.ns, "bridge_id");
    assert!(a_id.starts_with("1000."), "{a_id}");
    assert_eq!(kernel_attr(&t.b.ns, "root_id"), a_id);
    let mut at_bm = Capture::on(&t.b.ns, "bm");
    let crossed = at_bm
        .bpdus(HELLO * 5 / 2)
        .iter()
        .filter(|f| bpdu_bridge_id(f).as_deref() == Some(a_id.as_str()))
        .count();
    assert!(crossed >= 1, "no BPDU of A's arrived at B through M");

    let mut st = t.stations();
    for from in 0..3 {
        broadcast_once(&mut st, from, 1 + from as u8);
    }
    tcp_transfer(&t.hosts, 0, 1, 5301, 1);
    tcp_transfer(&t.hosts, 1, 0, 5302, 2);

    // Fresh sockets: the transfers filled the first one's ring.
    drop(at_bm);
    let mut at_am = Capture::on(&t.a.ns, "am");
    let mut at_bm = Capture::on(&t.b.ns, "bm");
    let before = t.m.mp.as_ref().map(Mp::stats);
    st[2].send(&test_frame(LLDP_GROUP, mac(3), 10, 60));
    st[2].send(&test_frame(BROADCAST, mac(3), 11, 60));
    thread::sleep(Duration::from_millis(300));
    for (name, capture) in [("A:am", &mut at_am), ("B:bm", &mut at_bm)] {
        let frames = capture.frames(Duration::from_millis(1));
        let from_hm = |f: &&Vec<u8>| f.len() > 14 && f[6..12] == mac(3);
        let lldp = frames
            .iter()
            .filter(from_hm)
            .filter(|f| f[..6] == LLDP_GROUP)
            .count();
        let broadcast = frames
            .iter()
            .filter(from_hm)
            .filter(|f| f[..6] == BROADCAST)
            .count();
        assert_eq!(lldp, 0, "a frame to {LLDP_GROUP:02x?} reached {name}");
        assert_eq!(broadcast, 1, "HM's broadcast at {name}");
    }
    if mpbridge {
        let after = t.m.mp().stats();
        let before = before.unwrap();
        assert_eq!(
            drops(&after, "raw:mh", "reserved") - drops(&before, "raw:mh", "reserved"),
            1,
            "{after}"
        );
    }
    assert_eq!(converge(&kernel_ports, &t.guard), blocked, "the tree moved");
    t.guard.check();
}

fn a_bpdu_crosses_mpbridge_without_stp(lock: &str) {
    if !kernel_bridges("a_bpdu_crosses_mpbridge_without_stp") {
        return;
    }
    bpdus_cross(Middle::Mpbridge {
        options: vec!["--lock", lock],
        port_options: "",
    });
}

strategy_tests!(a_bpdu_crosses_mpbridge_without_stp:
    a_bpdu_crosses_mpbridge_without_stp_mutex, a_bpdu_crosses_mpbridge_without_stp_rwlock,
    a_bpdu_crosses_mpbridge_without_stp_rmlock, a_bpdu_crosses_mpbridge_without_stp_sharded,
    a_bpdu_crosses_mpbridge_without_stp_rcu, a_bpdu_crosses_mpbridge_without_stp_epoch);

/// The same ring with a Linux bridge without STP in mpbridge's place.
fn a_bpdu_crosses_a_linux_bridge_without_stp() {
    if !kernel_bridges("a_bpdu_crosses_a_linux_bridge_without_stp") {
        return;
    }
    bpdus_cross(Middle::Linux {
        stp: false,
        cost: None,
    });
}

// 2. mpbridge --stp in a triangle with two Linux bridges.

/// Default priorities everywhere (the addresses decide the root): exactly
/// one of the six ring ports blocks, host ports forward, a broadcast
/// arrives once, TCP crosses between the Linux bridges' hosts both ways.
fn triangle_converges(middle: Middle) {
    let t = Triangle::new(middle, 32768, 32768, false);
    let ring = t.ring();
    let blocked = converge(&ring, &t.guard);
    eprintln!(
        "root {} (A {}, B {}, M {}); blocking: {blocked}",
        t.a.root_id(),
        t.a.bridge_id(),
        t.b.bridge_id(),
        t.m.bridge_id()
    );
    assert!(
        !["A:ah", "B:bh"].contains(&blocked.as_str()),
        "a host port blocks: {blocked}: {:?}",
        views(&ring)
    );
    for node in [&t.a, &t.b, &t.m] {
        assert_eq!(node.root_id(), t.a.root_id(), "two roots");
    }
    let mut st = t.stations();
    broadcast_once(&mut st, 0, 1);
    broadcast_once(&mut st, 1, 2);
    tcp_transfer(&t.hosts, 0, 1, 5311, 3);
    tcp_transfer(&t.hosts, 1, 0, 5312, 4);
    assert_eq!(converge(&ring, &t.guard), blocked, "the tree moved");
}

fn a_triangle_with_two_kernel_bridges_converges(lock: &str) {
    if !kernel_bridges("a_triangle_with_two_kernel_bridges_converges") {
        return;
    }
    let mut options = STP.to_vec();
    options.extend(["--lock", lock]);
    triangle_converges(Middle::Mpbridge {
        options,
        port_options: "",
    });
}

strategy_tests!(a_triangle_with_two_kernel_bridges_converges:
    a_triangle_with_two_kernel_bridges_converges_mutex,
    a_triangle_with_two_kernel_bridges_converges_rwlock,
    a_triangle_with_two_kernel_bridges_converges_rmlock,
    a_triangle_with_two_kernel_bridges_converges_sharded,
    a_triangle_with_two_kernel_bridges_converges_rcu,
    a_triangle_with_two_kernel_bridges_converges_epoch);

/// The same triangle of three Linux bridges.
fn a_triangle_of_linux_bridges_converges() {
    if !kernel_bridges("a_triangle_of_linux_bridges_converges") {
        return;
    }
    triangle_converges(Middle::Linux {
        stp: true,
        cost: None,
    });
}

/// Whether `id` is written as sysfs writes a bridge id: four hex digits
/// of priority, a dot, twelve of address, lower case.
fn is_sysfs_id(id: &str) -> bool {
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    id.len() == 17 && id.as_bytes()[4] == b'.' && hex(&id[..4]) && hex(&id[5..])
}

// 3. and 4. Who is root.

/// mpbridge at priority 4096 between two Linux bridges at 32768: both
/// take its bridge id as their root_id, and it reports itself the root
/// (no root port, cost 0) with both ports designated and sending BPDUs.
fn mpbridge_with_the_lowest_priority_is_root() {
    if !kernel_bridges("mpbridge_with_the_lowest_priority_is_root") {
        return;
    }
    let mut options = STP.to_vec();
    options.extend(["--stp-priority", "4096"]);
    let t = Triangle::new(
        Middle::Mpbridge {
            options,
            port_options: "",
        },
        32768,
        32768,
        false,
    );
    let mp = t.m.mp();
    let id = t.m.bridge_id();
    assert!(is_sysfs_id(&id), "bridge_id {id:?}");
    assert!(id.starts_with("1000."), "priority 4096 is not in {id}");
    let deadline = Instant::now() + CONVERGE;
    while (t.a.root_id(), t.b.root_id()) != (id.clone(), id.clone()) {
        t.guard.check();
        assert!(
            Instant::now() < deadline,
            "root_id of A {} and of B {}, not mpbridge's {id}, after {CONVERGE:?}",
            t.a.root_id(),
            t.b.root_id()
        );
        thread::sleep(Duration::from_millis(250));
    }
    let blocked = converge(&t.ring(), &t.guard);
    // mpbridge is the root: both Linux bridges' root ports face it, and the
    // link between them has the blocked port.
    assert!(
        ["A:ab", "B:ba"].contains(&blocked.as_str()),
        "blocking: {blocked}"
    );
    let stats = mp.stats();
    let stp = &stats["stp"];
    assert_eq!(stp["root_id"], id.as_str(), "{stp}");
    assert!(stp["root_port"].is_null(), "{stp}");
    assert_eq!(stp["root_cost"], 0, "{stp}");
    for port in ["raw:ma", "raw:mb"] {
        let port_stp = &port_stats(&stats, port)["stp"];
        assert_eq!(port_stp["role"], "designated", "{port}: {port_stp}");
        assert!(bpdus(port_stp, "tx_bpdus") > 0, "{port}: {port_stp}");
    }
    assert_ne!(kernel_attr(&t.a.ns, "bridge_id"), id);
}

/// Linux bridge A at priority 4096: mpbridge takes A's bridge id as its
/// root_id, names its port facing A as root port at that port's cost, and
/// its port facing B (nearer the root than mpbridge) is the alternate,
/// also in `port show`.
fn a_kernel_bridge_as_root() {
    if !kernel_bridges("a_kernel_bridge_as_root") {
        return;
    }
    // Cost 100 on mpbridge's ports: through A it is 100 from the root, B
    // (a veth's 802.1D cost, 2) is nearer, so the M-B link's designated
    // port is B's and mpbridge's port there is an alternate.
    let t = Triangle::new(
        Middle::Mpbridge {
            options: STP.to_vec(),
            port_options: ",cost=100",
        },
        4096,
        32768,
        false,
    );
    let mp = t.m.mp();
    let a_id = kernel_attr(&t.a.ns, "bridge_id");
    assert!(a_id.starts_with("1000."), "{a_id}");
    let deadline = Instant::now() + CONVERGE;
    while t.m.root_id() != a_id {
        t.guard.check();
        assert!(
            Instant::now() < deadline,
            "mpbridge's root_id is {}, not A's {a_id}, after {CONVERGE:?}",
            t.m.root_id()
        );
        thread::sleep(Duration::from_millis(250));
    }
    let blocked = converge(&t.ring(), &t.guard);
    assert_eq!(blocked, "M:raw:mb", "{:?}", views(&t.ring()));
    let stats = mp.stats();
    let stp = &stats["stp"];
    assert_eq!(stp["root_id"], a_id.as_str(), "{stp}");
    assert_eq!(stp["root_port"], "raw:ma", "{stp}");
    assert_eq!(stp["root_cost"], 100, "{stp}");
    let own = stp["bridge_id"].as_str().expect("no stp.bridge_id");
    assert!(is_sysfs_id(own) && own.starts_with("8000."), "{own}");
    assert_ne!(own, a_id);
    assert_eq!(t.b.root_id(), a_id);
    let ma = &port_stats(&stats, "raw:ma")["stp"];
    assert_eq!(ma["role"], "root", "{ma}");
    assert_eq!(ma["state"], "forwarding", "{ma}");
    let mb = &port_stats(&stats, "raw:mb")["stp"];
    assert_eq!(mb["role"], "alternate", "{mb}");
    assert_eq!(mb["state"], "discarding", "{mb}");
    assert!(bpdus(mb, "rx_bpdus") > 0, "B's BPDUs on raw:mb: {mb}");
    let line = port_show_line(&mp.socket, "raw:mb");
    assert!(
        line.contains("alternate") && line.contains("discarding"),
        "{line}"
    );
    let line = port_show_line(&mp.socket, "raw:ma");
    assert!(
        line.contains("root") && line.contains("forwarding"),
        "{line}"
    );
}

// 5. A link failure in the triangle, and a host that moves.

/// A is the root (4096); M's ports cost 100, so M's port towards B is the
/// one that blocks and HA and HB talk over the A-B link. That link goes
/// down: within 802.1D's timers HA and HB reach each other through M.
/// Then HA, which M knows behind its port towards A, moves to B (its
/// veth's far end, keeping its MAC): once HA speaks, M forwards to it
/// through its port towards B, no entry left pointing the old way, and TCP
/// between HM and HA (both on their kernel's own addresses) flows again.
///
/// A silent station that moved is not checked: the Linux bridge only
/// shortens its ageing time on a topology change and does not run its
/// ageing again before the old time is due, so its entries for such a
/// station stay for the full ageing time, and no ring of Linux bridges
/// would reach one.
fn link_failure(middle: Middle) {
    let t = Triangle::new(middle, 4096, 32768, true);
    let ring = t.ring();
    let blocked = converge(&ring, &t.guard);
    assert_eq!(blocked, t.m.label_of("mb"), "{:?}", views(&ring));
    let mut st = t.stations();
    for from in 0..3 {
        broadcast_once(&mut st, from, 1 + from as u8);
    }
    let step = Duration::from_millis(100);
    until_delivered(
        &mut st,
        &[(0, 1), (1, 0)],
        10,
        step,
        Duration::from_secs(5),
        &t.guard,
    );

    let changes = |t: &Triangle| {
        t.m.mp.as_ref().map(|mp| {
            mp.stats()["stp"]["topology_changes"]
                .as_u64()
                .expect("no stp.topology_changes")
        })
    };
    let changes_before = changes(&t);
    t.a.ns.ip(&["link", "set", "dev", "ab", "down"]);
    let bound = FORWARD_DELAY * 2 + MAX_AGE + Duration::from_secs(6);
    let took = until_delivered(&mut st, &[(0, 1), (1, 0)], 20, step, bound, &t.guard);
    eprintln!("HA and HB reach each other again after {took:?}");
    let mb = t.m.views(&["mb"]);
    assert_eq!(mb[0].1, PortView::Forwarding, "{mb:?}");

    // M has HA's own address behind A.
    let ha = netns::link_mac(&t.hosts[0], "eth0")
        .map(|b| format!("{b:02x}"))
        .join(":");
    tcp_transfer(&t.hosts, 2, 0, 5321, 5);
    let ma = t.m.label_of("ma").split_once(':').unwrap().1.to_owned();
    let mb = t.m.label_of("mb").split_once(':').unwrap().1.to_owned();
    let ha_mac = netns::link_mac(&t.hosts[0], "eth0");
    // While a topology change lasts (a Linux neighbour sets the TC flag
    // for max age + forward delay), each TC flush may take HA's entry
    // again; what must never be is an entry on the wrong port. HA speaks
    // until the entry is where it must be.
    let holds = |st: &mut [Station], on: &str, wrong: &str, what: &str| {
        let deadline = Instant::now() + MAX_AGE + FORWARD_DELAY + Duration::from_secs(10);
        let mut seen = None;
        for tag in 0u8.. {
            st[0].send(&test_frame(BROADCAST, ha_mac, 200u8.wrapping_add(tag), 60));
            thread::sleep(Duration::from_millis(100));
            seen = t.m.fdb_port(&ha);
            assert_ne!(seen.as_deref(), Some(wrong), "HA on {wrong} {what}");
            if seen.as_deref() == Some(on) || Instant::now() >= deadline {
                break;
            }
        }
        assert_eq!(seen.as_deref(), Some(on), "HA {what}");
    };
    holds(&mut st, &ma, &mb, "before it moves");

    let b_name = t.b.ns.name.clone();
    t.a.ns.ip(&["link", "set", "dev", "ah", "netns", &b_name]);
    t.b.ns.ip(&["link", "set", "dev", "ah", "master", "br0"]);
    t.b.ns.ip(&["link", "set", "dev", "ah", "up"]);
    // A fresh socket on HA's eth0, whose link went down and up again.
    st[0] = Station::on(&t.hosts[0]);
    // B's new port listens and learns for two forward delays first.
    let bound = FORWARD_DELAY * 2 + MAX_AGE + Duration::from_secs(6);
    let took = until_delivered(&mut st, &[(0, 2), (2, 0)], 30, step, bound, &t.guard);
    eprintln!("HA, moved, and HM reach each other after {took:?}");
    // Forgetting the neighbours makes each host ask by broadcast, as a
    // host that moved does; the answers teach the bridges.
    for host in [&t.hosts[0], &t.hosts[2]] {
        host.ip(&["neigh", "flush", "all"]);
    }
    tcp_transfer(&t.hosts, 2, 0, 5322, 6);
    tcp_transfer(&t.hosts, 0, 2, 5323, 7);
    holds(&mut st, &mb, &ma, "after it moved");
    if let (Some(before), Some(after)) = (changes_before, changes(&t)) {
        assert!(
            after > before,
            "no topology change counted: {before} then {after}"
        );
    }
    t.guard.check();
}

fn a_link_failure_restores_connectivity(lock: &str) {
    if !kernel_bridges("a_link_failure_restores_connectivity") {
        return;
    }
    let mut options = STP.to_vec();
    options.extend(["--lock", lock]);
    link_failure(Middle::Mpbridge {
        options,
        port_options: ",cost=100",
    });
}

strategy_tests!(a_link_failure_restores_connectivity:
    a_link_failure_restores_connectivity_mutex, a_link_failure_restores_connectivity_rwlock,
    a_link_failure_restores_connectivity_rmlock, a_link_failure_restores_connectivity_sharded,
    a_link_failure_restores_connectivity_rcu, a_link_failure_restores_connectivity_epoch);

/// The same with a Linux bridge in mpbridge's place.
fn a_link_failure_restores_connectivity_between_linux_bridges() {
    if !kernel_bridges("a_link_failure_restores_connectivity_between_linux_bridges") {
        return;
    }
    link_failure(Middle::Linux {
        stp: true,
        cost: Some(100),
    });
}

// 6. Three mpbridge instances.

/// M1 (4096), M2 (8192) and M3 (default) in a ring over veths, H1 on M1
/// and H2 on M2 on edge ports: M3's port towards M2 is the alternate.
/// The M1-M2 link goes down; RSTP's alternate port takes over at once
/// (no forward delay), so H1 and H2 reach each other again within 3 s.
fn three_mpbridge_instances_fail_over_quickly(lock: &str) {
    if !privileged("three_mpbridge_instances_fail_over_quickly") {
        return;
    }
    let mut m1 = Node::new("M1");
    let mut m2 = Node::new("M2");
    let mut m3 = Node::new("M3");
    let hosts: Vec<Netns> = (0..2).map(|_| Netns::new()).collect();
    link(&m1.ns, "p12", &m2.ns, "p21");
    link(&m2.ns, "p23", &m3.ns, "p32");
    link(&m3.ns, "p31", &m1.ns, "p13");
    hosts[0].add_veth("h1", &m1.ns).expect("veth");
    hosts[1].add_veth("h2", &m2.ns).expect("veth");
    for (i, host) in hosts.iter().enumerate() {
        address_host(host, i);
    }
    let guard = StormGuard::watch(
        &[
            (&m1.ns, &["p12", "p13", "h1"][..]),
            (&m2.ns, &["p21", "p23", "h2"][..]),
            (&m3.ns, &["p31", "p32"][..]),
            (&hosts[0], &["eth0"][..]),
            (&hosts[1], &["eth0"][..]),
        ],
        &[(&m1.ns, "p12"), (&m2.ns, "p23"), (&m3.ns, "p31")],
    );
    let options = |priority: &'static str| {
        let mut options = STP.to_vec();
        options.extend(["--stp-priority", priority, "--lock", lock]);
        options
    };
    let ports = |names: &[&str]| -> Vec<String> {
        names
            .iter()
            .map(|n| {
                if n.starts_with('h') {
                    format!("raw:{n},edge=on")
                } else {
                    format!("raw:{n}")
                }
            })
            .collect()
    };
    m1.mp = Some(Mp::start(
        &m1.ns,
        &ports(&["p12", "p13", "h1"]),
        &options("4096"),
    ));
    m2.mp = Some(Mp::start(
        &m2.ns,
        &ports(&["p21", "p23", "h2"]),
        &options("8192"),
    ));
    m3.mp = Some(Mp::start(
        &m3.ns,
        &ports(&["p31", "p32"]),
        &options("32768"),
    ));
    let ring: [(&Node, &[&str]); 3] = [
        (&m1, &["p12", "p13", "h1"]),
        (&m2, &["p21", "p23", "h2"]),
        (&m3, &["p31", "p32"]),
    ];
    let blocked = converge(&ring, &guard);
    assert_eq!(blocked, "M3:raw:p32", "{:?}", views(&ring));
    let mut st: Vec<Station> = hosts.iter().map(|h| Station::on(h)).collect();
    broadcast_once(&mut st, 0, 1);
    broadcast_once(&mut st, 1, 2);
    let step = Duration::from_millis(50);
    until_delivered(
        &mut st,
        &[(0, 1), (1, 0)],
        3,
        step,
        Duration::from_secs(5),
        &guard,
    );
    let before = m3.mp().stats();

    m1.ns.ip(&["link", "set", "dev", "p12", "down"]);
    let took = until_delivered(
        &mut st,
        &[(0, 1), (1, 0)],
        4,
        step,
        Duration::from_secs(10),
        &guard,
    );
    eprintln!("H1 and H2 reach each other again after {took:?}");
    for took in &took {
        assert!(
            *took <= Duration::from_secs(3),
            "fail-over took {took:?} (H1 to H2, H2 to H1: {took:?})"
        );
    }
    // A worker counts a batch's frames after it has sent them.
    let (after, carried) = lab::poll(
        Duration::from_secs(2),
        Duration::from_millis(20),
        || {
            let after = m3.mp().stats();
            let carried =
                counter(&after, "raw:p32", "tx_frames") - counter(&before, "raw:p32", "tx_frames");
            (after, carried)
        },
        |&(_, carried)| carried > 0,
    );
    assert!(carried > 0, "nothing went through M3's raw:p32: {after}");
    let p32 = &port_stats(&after, "raw:p32")["stp"];
    assert_eq!(p32["state"], "forwarding", "{p32}");
    drop(st);
    drop(guard);
}

strategy_tests!(three_mpbridge_instances_fail_over_quickly:
    three_mpbridge_instances_fail_over_quickly_mutex,
    three_mpbridge_instances_fail_over_quickly_rwlock,
    three_mpbridge_instances_fail_over_quickly_rmlock,
    three_mpbridge_instances_fail_over_quickly_sharded,
    three_mpbridge_instances_fail_over_quickly_rcu,
    three_mpbridge_instances_fail_over_quickly_epoch);

// 7. BPDU guard.

/// Sends broadcasts from station `from` every 200 ms until station `to`
/// gets one, at most `within`.
fn until_broadcast_arrives(stations: &mut [Station], from: usize, to: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        stations[from].send(&test_frame(BROADCAST, mac(from as u16 + 1), 99, 60));
        if !stations[to].collect(Duration::from_millis(200)).is_empty() {
            settle_counts(stations);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no broadcast from host {from} reached host {to} within {within:?}"
        );
    }
}

/// Three hosts; host 0's port has guard=on. A BPDU from host 0 disables
/// its port: frames from it go nowhere (counted as port_state drops),
/// frames go nowhere to it, its stations are forgotten, the BPDU itself
/// goes nowhere; `port enable` brings it back.
fn guard_trips(lock: &str, stp: bool) {
    let (socket, ctl_arg) = netns::ctl_socket("mpbguard");
    let _socket = RemoveOnDrop(socket.clone());
    let mut extra = vec![ctl_arg.as_str(), "--lock", lock];
    let options: [&str; 3] = if stp {
        extra.extend(STP);
        ["guard=on,edge=on", "edge=on", "edge=on"]
    } else {
        ["guard=on", "", ""]
    };
    let topology = Topology::with_options(PortKind::Raw, &options, &extra);
    let ports = ["raw:p0", "raw:p1", "raw:p2"];
    if stp {
        wait_stp_forwarding(&socket, &ports, CONVERGE);
    }
    let tripped = || {
        port_stats(&ctl_json(&socket, &["stats", "--json"]), "raw:p0")["stp"]["guard_tripped"]
            .clone()
    };
    assert_eq!(tripped(), false);
    let mut st = topology.stations();
    broadcast_once(&mut st, 0, 1);
    broadcast_once(&mut st, 1, 2);
    let host0 = "02:42:00:00:00:01";
    assert!(fdb_has(&socket, host0), "host 0 not learned");

    let mut at_host1 = Capture::on(&topology.hosts[1], "eth0");
    at_host1.frames(Duration::from_millis(1));
    st[0].send(&config_bpdu(mac(1), 0x8000));
    let deadline = Instant::now() + Duration::from_secs(3);
    while tripped() != true {
        assert!(Instant::now() < deadline, "the guard did not trip");
        thread::sleep(Duration::from_millis(50));
    }
    settle_counts(&mut st);
    let bpdus = at_host1.bpdus(Duration::from_millis(1));
    assert!(
        !bpdus.iter().any(|f| f[6..12] == mac(1)),
        "host 0's BPDU was forwarded"
    );
    assert!(!fdb_has(&socket, host0), "host 0's station not flushed");
    let before = ctl_json(&socket, &["stats", "--json"]);
    for n in 0..5 {
        st[0].send(&test_frame(BROADCAST, mac(1), 10 + n, 60));
    }
    st[1].send(&test_frame(mac(1), mac(2), 20, 60));
    st[1].send(&test_frame(BROADCAST, mac(2), 21, 60));
    assert_eq!(
        settle_counts(&mut st),
        [0, 0, 2],
        "frames from or to the disabled port"
    );
    let after = ctl_json(&socket, &["stats", "--json"]);
    assert_eq!(
        drops(&after, "raw:p0", "port_state") - drops(&before, "raw:p0", "port_state"),
        5,
        "{after}"
    );
    assert_eq!(
        counter(&after, "raw:p0", "tx_frames"),
        counter(&before, "raw:p0", "tx_frames"),
        "sent to the disabled port: {after}"
    );

    ctl_ok(&socket, &["port", "enable", "raw:p0"]);
    assert_eq!(tripped(), false);
    if stp {
        wait_stp_forwarding(&socket, &ports, CONVERGE);
    }
    until_broadcast_arrives(&mut st, 0, 1, Duration::from_secs(5));
    broadcast_once(&mut st, 0, 30);
    broadcast_once(&mut st, 1, 31);
}

fn guard_disables_a_port_that_hears_a_bpdu(lock: &str) {
    if privileged("guard_disables_a_port_that_hears_a_bpdu") {
        guard_trips(lock, false);
    }
}

strategy_tests!(guard_disables_a_port_that_hears_a_bpdu:
    guard_disables_a_port_that_hears_a_bpdu_mutex, guard_disables_a_port_that_hears_a_bpdu_rwlock,
    guard_disables_a_port_that_hears_a_bpdu_rmlock,
    guard_disables_a_port_that_hears_a_bpdu_sharded, guard_disables_a_port_that_hears_a_bpdu_rcu,
    guard_disables_a_port_that_hears_a_bpdu_epoch);

fn guard_disables_a_port_that_hears_a_bpdu_with_stp() {
    if privileged("guard_disables_a_port_that_hears_a_bpdu_with_stp") {
        guard_trips("rcu", true);
    }
}

// 8. BPDU filter.

/// Host 0's port has bpdu_filter=on. Without --stp: host 0's BPDU is
/// dropped (and counted), host 1's is forwarded to host 2 but not out of
/// host 0's port. With --stp: mpbridge sends BPDUs to host 1 but none to
/// host 0, host 0's BPDU (a better root) changes nothing, and data still
/// crosses host 0's port.
fn bpdu_filter_drops_bpdus_in_and_out() {
    if !privileged("bpdu_filter_drops_bpdus_in_and_out") {
        return;
    }
    let options = ["bpdu_filter=on", "", ""];
    {
        let (socket, ctl_arg) = netns::ctl_socket("mpbfilter");
        let _socket = RemoveOnDrop(socket.clone());
        let topology = Topology::with_options(PortKind::Raw, &options, &[&ctl_arg]);
        let mut caps: Vec<Capture> = topology
            .hosts
            .iter()
            .map(|h| Capture::on(h, "eth0"))
            .collect();
        let settle = |caps: &mut Vec<Capture>| -> Vec<Vec<Vec<u8>>> {
            thread::sleep(Duration::from_millis(300));
            caps.iter_mut()
                .map(|c| c.bpdus(Duration::from_millis(1)))
                .collect()
        };
        settle(&mut caps);
        let before = ctl_json(&socket, &["stats", "--json"]);
        caps[0].send(&config_bpdu(mac(1), 0x8000));
        let got = settle(&mut caps);
        assert!(
            got.iter().all(Vec::is_empty),
            "host 0's BPDU went through: {got:02x?}"
        );
        let after = ctl_json(&socket, &["stats", "--json"]);
        assert_eq!(
            drops(&after, "raw:p0", "bpdu_filter") - drops(&before, "raw:p0", "bpdu_filter"),
            1,
            "{after}"
        );
        let bpdu = config_bpdu(mac(2), 0x8000);
        caps[1].send(&bpdu);
        let got = settle(&mut caps);
        assert_eq!(got[2], [bpdu], "host 1's BPDU, without --stp, floods");
        assert!(got[0].is_empty(), "host 1's BPDU left the filtering port");
    }
    let (socket, ctl_arg) = netns::ctl_socket("mpbfilter");
    let _socket = RemoveOnDrop(socket.clone());
    let mut extra = vec![ctl_arg.as_str()];
    extra.extend(STP);
    let topology = Topology::with_options(PortKind::Raw, &options, &extra);
    let mut caps: Vec<Capture> = topology
        .hosts
        .iter()
        .map(|h| Capture::on(h, "eth0"))
        .collect();
    let own = ctl_json(&socket, &["stats", "--json"])["stp"]["bridge_id"].clone();
    assert!(own.is_string(), "no stp.bridge_id");
    let before = ctl_json(&socket, &["stats", "--json"]);
    caps[0].send(&config_bpdu(mac(1), 0));
    // Hello 1 s: three or four BPDUs out of every port that sends them.
    let listen = HELLO * 7 / 2;
    let (to_host0, to_host1) = thread::scope(|scope| {
        let (first, rest) = caps.split_at_mut(1);
        let host0 = scope.spawn(|| first[0].bpdus(listen));
        let host1 = rest[0].bpdus(listen);
        (host0.join().unwrap(), host1)
    });
    assert!(
        to_host1.len() >= 2,
        "mpbridge sent {} BPDUs to host 1 in {listen:?}",
        to_host1.len()
    );
    assert!(
        to_host0.is_empty(),
        "mpbridge sent {} BPDUs out of the filtering port",
        to_host0.len()
    );
    let after = ctl_json(&socket, &["stats", "--json"]);
    assert_eq!(after["stp"]["root_id"], own, "host 0's BPDU was heard");
    assert_eq!(
        drops(&after, "raw:p0", "bpdu_filter") - drops(&before, "raw:p0", "bpdu_filter"),
        1,
        "{after}"
    );
    drop(caps);
    wait_stp_forwarding(&socket, &["raw:p1", "raw:p2"], CONVERGE);
    let mut st = topology.stations();
    until_broadcast_arrives(&mut st, 0, 1, CONVERGE);
    broadcast_once(&mut st, 1, 2);
}

// 9. Storm control.

/// Sends `total` copies of `frames` (cycled) from `station` in chunks of
/// 64, a chunk every 2 ms (some 30,000 frames a second: far more than the
/// limit, far less than a veth and mpbridge carry); returns how many the
/// socket took.
fn paced_send(station: &mut Station, frames: &[Vec<u8>], total: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sent = 0;
    while sent < total {
        assert!(Instant::now() < deadline, "only {sent} of {total} sent");
        let n = (total - sent).min(frames.len());
        sent += station.send_many(&frames[..n]);
        thread::sleep(Duration::from_millis(2));
    }
    sent
}

/// Host 0's port has storm=1000 (a burst of max(100, 64) = 100). 20,000
/// broadcasts from host 0: mpbridge takes them all, forwards at most the
/// burst and 1000 a second, drops the rest as "storm", and every frame is
/// either forwarded or counted; then 5,000 frames to host 1, known: all
/// forwarded, no storm drop.
fn storm_limits_floods_not_known_unicast(lock: &str) {
    if !privileged("storm_limits_floods_not_known_unicast") {
        return;
    }
    const FLOOD: usize = 20_000;
    const UNICAST: usize = 5_000;
    let (socket, ctl_arg) = netns::ctl_socket("mpbstorm");
    let _socket = RemoveOnDrop(socket.clone());
    let topology = Topology::with_options(
        PortKind::Raw,
        &["storm=1000", ""],
        &[&ctl_arg, "--lock", lock],
    );
    let mut st = topology.stations();
    st[1].send(&test_frame(BROADCAST, mac(2), 1, 60));
    st[0].send(&test_frame(mac(2), mac(1), 2, 60));
    assert_eq!(settle_counts(&mut st), [1, 1], "learning");
    // The bucket refills (100 tokens at 1000 a second: 0.1 s).
    thread::sleep(Duration::from_millis(300));
    let rx1 = || topology.hosts[1].counters("eth0").expect("counters");
    let tx0 = || topology.hosts[0].counters("eth0").expect("counters");

    let before = ctl_json(&socket, &["stats", "--json"]);
    let (rx1_before, tx0_before) = (rx1(), tx0());
    let flood: Vec<Vec<u8>> = (0..64)
        .map(|n| test_frame(BROADCAST, mac(1), n, 60))
        .collect();
    let start = Instant::now();
    let sent = paced_send(&mut st[0], &flood, FLOOD);
    thread::sleep(Duration::from_millis(500));
    let after = ctl_json(&socket, &["stats", "--json"]);
    let elapsed = start.elapsed().as_secs_f64();
    let delta = |port: &str, name: &str| counter(&after, port, name) - counter(&before, port, name);
    let received = delta("raw:p0", "rx_frames");
    let forwarded = delta("raw:p1", "tx_frames");
    let stormed = drops(&after, "raw:p0", "storm") - drops(&before, "raw:p0", "storm");
    let arrived = rx1().rx_packets - rx1_before.rx_packets;
    eprintln!(
        "{sent} sent, {received} received, {forwarded} forwarded, {stormed} storm drops, \
         {arrived} arrived, in {elapsed:.2} s"
    );
    assert_eq!(sent, FLOOD);
    assert_eq!(
        received as usize,
        sent,
        "mpbridge did not receive every frame (host 0's eth0 dropped {})",
        tx0().tx_dropped - tx0_before.tx_dropped
    );
    assert_eq!(
        stormed + forwarded,
        received,
        "every frame forwarded or counted"
    );
    assert_eq!(arrived, forwarded, "host 1 got what mpbridge sent it");
    assert!(stormed > 0, "no storm drop");
    assert!(
        forwarded >= 100,
        "the burst of a full bucket did not pass: {forwarded}"
    );
    let most = 100.0 + 1000.0 * elapsed + 1.0;
    assert!(
        (forwarded as f64) <= most,
        "{forwarded} forwarded in {elapsed:.2} s at 1000 a second and a burst of 100"
    );
    assert!((forwarded as usize) < FLOOD / 2, "far fewer than sent");

    let before = after;
    let rx1_before = rx1();
    let known: Vec<Vec<u8>> = (0..64).map(|n| test_frame(mac(2), mac(1), n, 60)).collect();
    let sent = paced_send(&mut st[0], &known, UNICAST);
    thread::sleep(Duration::from_millis(500));
    let after = ctl_json(&socket, &["stats", "--json"]);
    let delta = |port: &str, name: &str| counter(&after, port, name) - counter(&before, port, name);
    assert_eq!(sent, UNICAST);
    assert_eq!(delta("raw:p0", "rx_frames"), UNICAST as u64);
    assert_eq!(
        drops(&after, "raw:p0", "storm"),
        drops(&before, "raw:p0", "storm"),
        "known unicast was limited: {after}"
    );
    assert_eq!(delta("raw:p1", "tx_frames"), UNICAST as u64, "{after}");
    assert_eq!(rx1().rx_packets - rx1_before.rx_packets, UNICAST as u64);
}

strategy_tests!(storm_limits_floods_not_known_unicast:
    storm_limits_floods_not_known_unicast_mutex, storm_limits_floods_not_known_unicast_rwlock,
    storm_limits_floods_not_known_unicast_rmlock, storm_limits_floods_not_known_unicast_sharded,
    storm_limits_floods_not_known_unicast_rcu, storm_limits_floods_not_known_unicast_epoch);

// 10. The station move limit.

/// Waits up to `within` for a test frame tagged `tag` from `src` at
/// `station`; returns whether one came.
fn arrives(station: &mut Station, src: [u8; 6], tag: u8, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let got = station.collect(Duration::from_millis(10));
        if got.iter().any(|f| f[6..12] == src && f[14] == tag) {
            return true;
        }
    }
    false
}

/// --move-limit 5, --move-hold 5: station X sends to host 2 from host 0's
/// port and host 1's in turn, each frame once the last one arrived. The
/// first move-limit moves within a second pass; then X's frames are
/// dropped, whichever port they come from, and counted as "move_limit",
/// while other stations' pass; after the hold X's frames pass again.
fn move_limit_holds_a_flapping_station(lock: &str) {
    if !privileged("move_limit_holds_a_flapping_station") {
        return;
    }
    const LIMIT: usize = 5;
    const HOLD: Duration = Duration::from_secs(5);
    let (socket, ctl_arg) = netns::ctl_socket("mpbmove");
    let _socket = RemoveOnDrop(socket.clone());
    let topology = Topology::new(
        PortKind::Raw,
        3,
        &[
            &ctl_arg,
            "--lock",
            lock,
            "--move-limit",
            "5",
            "--move-hold",
            "5",
        ],
    );
    let mut st = topology.stations();
    broadcast_once(&mut st, 2, 1);
    let before = ctl_json(&socket, &["stats", "--json"]);
    let x = mac(50);
    let to_x = |tag| test_frame(mac(3), x, tag, 60);
    // Frame 0 is learned, each later one moves X.
    let mut delivered = BTreeSet::new();
    let mut tag = 0u8;
    let first_drop = loop {
        assert!(
            (tag as usize) < 4 * LIMIT,
            "{tag} frames, each a move, and none held"
        );
        st[tag as usize % 2].send(&to_x(tag));
        let sent_at = Instant::now();
        if !arrives(&mut st[2], x, tag, Duration::from_millis(300)) {
            break (tag, sent_at);
        }
        delivered.insert(tag);
        tag += 1;
    };
    let passed = first_drop.0 as usize;
    eprintln!("{passed} frames of X passed before the hold");
    // At least the first LIMIT moves of a second pass; a per-second count
    // that restarts within the burst may let up to LIMIT more through.
    assert!(
        (LIMIT + 1..=2 * LIMIT + 2).contains(&passed),
        "{passed} frames passed"
    );
    for _ in 0..3 {
        tag += 1;
        st[tag as usize % 2].send(&to_x(tag));
        assert!(
            !arrives(&mut st[2], x, tag, Duration::from_millis(200)),
            "X's frame {tag} passed during the hold"
        );
    }
    // Another station on host 0's port passes.
    st[0].send(&test_frame(mac(3), mac(1), 200, 60));
    assert!(
        arrives(&mut st[2], mac(1), 200, Duration::from_secs(1)),
        "another station was held too"
    );
    // After the hold, X passes from one port.
    let released = loop {
        tag += 1;
        st[0].send(&to_x(tag));
        if arrives(&mut st[2], x, tag, Duration::from_millis(500)) {
            delivered.insert(tag);
            break first_drop.1.elapsed();
        }
        assert!(
            first_drop.1.elapsed() < HOLD + Duration::from_secs(5),
            "X still held {:?} after the first drop",
            first_drop.1.elapsed()
        );
    };
    // Released no earlier than the hold allows (time only adds to this).
    assert!(
        released >= HOLD - Duration::from_millis(1500),
        "released after {released:?}, hold {HOLD:?}"
    );
    thread::sleep(Duration::from_millis(250));
    for frame in st[2].collect(Duration::from_millis(1)) {
        if frame[6..12] == x {
            delivered.insert(frame[14]);
        }
    }
    let sent = tag as u64 + 1;
    let after = ctl_json(&socket, &["stats", "--json"]);
    let held: u64 = ["raw:p0", "raw:p1"]
        .iter()
        .map(|p| drops(&after, p, "move_limit") - drops(&before, p, "move_limit"))
        .sum();
    assert_eq!(
        held,
        sent - delivered.len() as u64,
        "{sent} sent, {} delivered: {after}",
        delivered.len()
    );
}

strategy_tests!(move_limit_holds_a_flapping_station:
    move_limit_holds_a_flapping_station_mutex, move_limit_holds_a_flapping_station_rwlock,
    move_limit_holds_a_flapping_station_rmlock, move_limit_holds_a_flapping_station_sharded,
    move_limit_holds_a_flapping_station_rcu, move_limit_holds_a_flapping_station_epoch);

// 11. Hostile BPDUs: a flood of topology changes, a port kept from root.

/// A TCN BPDU (802.1D-2004 9.3.2) from `src`, padded.
fn tcn_bpdu(src: [u8; 6]) -> Vec<u8> {
    let mut frame = STP_GROUP.to_vec();
    frame.extend_from_slice(&src);
    frame.extend_from_slice(&7u16.to_be_bytes());
    frame.extend_from_slice(&[0x42, 0x42, 0x03, 0, 0, 0, 0x80]);
    frame.resize(60, 0);
    frame
}

/// An RST BPDU (802.1D-2004 9.3.3) from `src` with the TC flag and the
/// Root port role, of a bridge of the worst priority that calls itself
/// the root: inferior information from a root port, whose TC flag the
/// receiving designated port takes (setTcFlags in NOT_DESIGNATED).
fn tc_rst_bpdu(src: [u8; 6]) -> Vec<u8> {
    let mut frame = config_bpdu(src, 61440);
    frame[12..14].copy_from_slice(&39u16.to_be_bytes());
    // After the LLC header and the protocol id: version 2, type 2 (RST),
    // flags TC and role Root (2 << 2); version 1 length 0 after the
    // forward delay.
    frame[19] = 2;
    frame[20] = 2;
    frame[21] = 0x01 | 0x08;
    frame[52] = 0;
    frame
}

/// (user + system time of the whole process, of its main thread), in
/// seconds, from /proc.
fn cpu_seconds(pid: u32) -> (f64, f64) {
    // SAFETY: sysconf has no memory preconditions.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let read = |path: String| {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // After the command's closing parenthesis: state is field 3,
        // utime field 14, stime field 15 (proc(5)).
        let (_, rest) = text.rsplit_once(')').expect("a stat line");
        let fields: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|f| f.parse().expect("a number"))
            .collect();
        (fields[0] + fields[1]) as f64 / hz
    };
    (
        read(format!("/proc/{pid}/stat")),
        read(format!("/proc/{pid}/task/{pid}/stat")),
    )
}

/// Waits (at most CONVERGE) until no bridge of the triangle signals a
/// topology change: the Linux bridges' topology_change is 0, mpbridge's
/// `stp.topology_change` false.
fn quiet(t: &Triangle) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        t.guard.check();
        let kernel = [&t.a.ns, &t.b.ns].map(|ns| kernel_attr(ns, "topology_change"));
        let mp = t.m.mp().stats()["stp"]["topology_change"].clone();
        if kernel == ["0", "0"] && mp == false {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "topology change still signalled after {CONVERGE:?}: A, B {kernel:?}, M {mp}"
        );
        thread::sleep(Duration::from_millis(250));
    }
}

fn stp_count(stats: &Value, key: &str) -> u64 {
    stats["stp"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no stp.{key}: {}", stats["stp"]))
}

/// How long the flood lasts: longer than max age, so that a port starved
/// of its neighbour's BPDUs would age their information out and the tree
/// would move.
const FLOOD: Duration = Duration::from_secs(10);

/// A (root, 4096), B and mpbridge M in a triangle, HM on M's port mh
/// (with `mh_options`). Once the tree is up and no topology change is
/// signalled any more, HM floods mh with TCNs and TC-flagged RST BPDUs,
/// far beyond the 64 a second handed to spanning tree: (a) mpbridge
/// flushes each port at most once a second, however many topology change
/// events the flood makes; (b) the tree stays as it was, and mb keeps
/// hearing B's BPDUs; (c) mpbridge's CPU time (all threads, and the owner
/// thread alone) per BPDU sent stays small. With `restricted_tcn=on` on
/// mh, nothing is flushed at all.
fn tc_flood(lock: &str, mh_options: &str) {
    let restricted = mh_options.contains("restricted_tcn=on");
    let mut options = STP.to_vec();
    options.extend(["--lock", lock]);
    let t = Triangle::new(
        Middle::Mpbridge {
            options,
            port_options: ",cost=100",
        },
        4096,
        32768,
        true,
    );
    let mp = t.m.mp();
    if !mh_options.is_empty() {
        ctl_ok(&mp.socket, &["port", "del", "raw:mh"]);
        ctl_ok(&mp.socket, &["port", "add", &format!("raw:mh{mh_options}")]);
        let line = port_show_line(&mp.socket, "raw:mh");
        assert!(line.contains(&mh_options[1..]), "{line}");
    }
    let ring = t.ring();
    let blocked = converge(&ring, &t.guard);
    assert_eq!(blocked, "M:raw:mb", "{:?}", views(&ring));
    quiet(&t);
    let before_views = views(&ring);
    let a_id = kernel_attr(&t.a.ns, "bridge_id");
    let pid = mp.daemon.as_ref().expect("running").child.id();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert!(comm.starts_with("mpbridge"), "pid {pid} is {comm:?}");
    let before = mp.stats();
    let (cpu_before, owner_before) = cpu_seconds(pid);

    let mut hm = Capture::on(&t.hosts[2], "eth0");
    let tcn = tcn_bpdu(mac(3));
    let tc = tc_rst_bpdu(mac(3));
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < FLOOD {
        for _ in 0..25 {
            hm.send(&tcn);
            hm.send(&tc);
            sent += 2;
        }
        thread::sleep(Duration::from_millis(20));
    }
    // What the flood left in the owner's queue is handled within a tick.
    thread::sleep(Duration::from_millis(1500));
    let elapsed = start.elapsed();
    let (cpu_after, owner_after) = cpu_seconds(pid);
    let after = mp.stats();
    t.guard.check();

    let delta = |key: &str| stp_count(&after, key) - stp_count(&before, key);
    let (events, requests, flushes) = (
        delta("tc_events"),
        delta("flush_requests"),
        delta("flushes"),
    );
    let cpu = cpu_after - cpu_before;
    let owner = owner_after - owner_before;
    eprintln!(
        "{sent} BPDUs in {elapsed:?}: {events} topology change events, {requests} flushes \
         asked for, {flushes} done; CPU {cpu:.3} s ({:.1} us a BPDU), owner thread {owner:.3} s \
         ({:.1} us a BPDU)",
        cpu * 1e6 / sent as f64,
        owner * 1e6 / sent as f64
    );
    // The flood got through to spanning tree, up to the rate limit.
    let handed = bpdus(&port_stats(&after, "raw:mh")["stp"], "rx_tcns")
        - bpdus(&port_stats(&before, "raw:mh")["stp"], "rx_tcns");
    assert!(handed >= 64, "{handed} TCNs reached spanning tree: {after}");
    assert!(
        handed < sent / 2,
        "{handed} of {} TCNs reached spanning tree: no rate limit",
        sent / 2
    );
    assert!(events >= 64, "{events} topology change events");
    // (a) At most one flush per port per tick: ticks are a second apart,
    // and as many may fall in the time as whole seconds passed, plus one.
    let ports = 3;
    let ticks = elapsed.as_secs() + 2;
    if restricted {
        assert_eq!(requests, 0, "flushes asked for: {}", after["stp"]);
        assert_eq!(flushes, 0, "{}", after["stp"]);
    } else {
        assert!(requests >= 64, "{requests} flushes asked for");
        assert!(
            flushes <= ports * ticks,
            "{flushes} flushes in {elapsed:?} for {requests} requests"
        );
    }
    for port in ["raw:ma", "raw:mb", "raw:mh"] {
        let done = |stats: &Value| port_stats(stats, port)["stp"]["flushes"]["done"].as_u64();
        let done = done(&after).expect("flushes.done") - done(&before).expect("flushes.done");
        assert!(done <= ticks, "{port}: {done} flushes in {elapsed:?}");
    }
    // (b) The tree as it was; B's BPDUs kept reaching mb.
    assert_eq!(views(&ring), before_views);
    assert_eq!(converge(&ring, &t.guard), blocked, "the tree moved");
    assert_eq!(after["stp"]["root_port"], "raw:ma", "{}", after["stp"]);
    assert_eq!(after["stp"]["root_id"], a_id.as_str(), "{}", after["stp"]);
    let from_b = bpdus(&port_stats(&after, "raw:mb")["stp"], "rx_bpdus")
        - bpdus(&port_stats(&before, "raw:mb")["stp"], "rx_bpdus");
    assert!(
        from_b >= elapsed.as_secs() / 2,
        "{from_b} of B's BPDUs reached mb in {elapsed:?}"
    );
    // (c) CPU per BPDU sent: a generous bound (a debug build, a loaded
    // machine); a flush of the table or a look at every interface per
    // BPDU, for every BPDU, would cost far more.
    assert!(
        cpu * 1e6 / (sent as f64) < 200.0,
        "{cpu:.3} s of CPU for {sent} BPDUs"
    );
    assert!(
        owner * 1e6 / (sent as f64) < 50.0,
        "{owner:.3} s of the owner's CPU for {sent} BPDUs"
    );
    // Forwarding still works.
    let mut st = t.stations();
    broadcast_once(&mut st, 2, 40);
}

fn a_tc_flood_costs_one_flush_per_port_per_tick(lock: &str) {
    if kernel_bridges("a_tc_flood_costs_one_flush_per_port_per_tick") {
        tc_flood(lock, "");
    }
}

strategy_tests!(a_tc_flood_costs_one_flush_per_port_per_tick:
    a_tc_flood_costs_one_flush_per_port_per_tick_mutex,
    a_tc_flood_costs_one_flush_per_port_per_tick_rwlock,
    a_tc_flood_costs_one_flush_per_port_per_tick_rmlock,
    a_tc_flood_costs_one_flush_per_port_per_tick_sharded,
    a_tc_flood_costs_one_flush_per_port_per_tick_rcu,
    a_tc_flood_costs_one_flush_per_port_per_tick_epoch);

/// The same flood on a port with `restricted_tcn=on`: no flush at all.
fn restricted_tcn_flushes_nothing_for_a_tc_flood() {
    if kernel_bridges("restricted_tcn_flushes_nothing_for_a_tc_flood") {
        tc_flood("epoch", ",restricted_tcn=on");
    }
}

/// The port number of `port` on br0 in `ns`.
fn kernel_port_no(ns: &Netns, port: &str) -> u64 {
    let path = format!("/sys/class/net/br0/brif/{port}/port_no");
    let output = Command::new("ip")
        .args(["netns", "exec", &ns.name, "cat", &path])
        .output()
        .expect("cannot run ip netns exec");
    let text = String::from_utf8_lossy(&output.stdout);
    u64::from_str_radix(text.trim().trim_start_matches("0x"), 16)
        .unwrap_or_else(|_| panic!("{path}: {text:?}"))
}

/// M's root port: "raw:ma" for mpbridge, "ma" for a Linux bridge.
fn m_root_port(t: &Triangle) -> String {
    match &t.m.mp {
        Some(mp) => mp.stats()["stp"]["root_port"]
            .as_str()
            .unwrap_or("none")
            .to_owned(),
        None => {
            let root: u64 = kernel_attr(&t.m.ns, "root_port")
                .parse()
                .expect("root_port");
            t.m_ports()
                .iter()
                .find(|p| kernel_port_no(&t.m.ns, p) == root)
                .map_or(format!("#{root}"), |p| p.to_string())
        }
    }
}

/// A (4096) is the best bridge and M's port ma faces it: ma is M's root
/// port. With ma restricted (mpbridge: `restricted_role=on`, given by
/// `port del` and `port add`; Linux: `root_block on`), M does not take
/// A's information on ma for its root port: it reaches A through B (mb is
/// the root port), ma blocks, A stays everyone's root, and hosts on all
/// three bridges still reach each other.
fn restricted_role(middle: Middle) {
    let mpbridge = matches!(middle, Middle::Mpbridge { .. });
    let t = Triangle::new(middle, 4096, 32768, true);
    let ring = t.ring();
    let (ma, mb) = if mpbridge {
        ("raw:ma", "raw:mb")
    } else {
        ("ma", "mb")
    };
    converge(&ring, &t.guard);
    let a_id = kernel_attr(&t.a.ns, "bridge_id");
    assert_eq!(m_root_port(&t), ma, "{:?}", views(&ring));
    match &t.m.mp {
        Some(mp) => {
            ctl_ok(&mp.socket, &["port", "del", "raw:ma"]);
            ctl_ok(&mp.socket, &["port", "add", "raw:ma,restricted_role=on"]);
            let line = port_show_line(&mp.socket, "raw:ma");
            assert!(line.contains("restricted_role=on"), "{line}");
        }
        None => {
            let status = Command::new("bridge")
                .args([
                    "-n",
                    &t.m.ns.name,
                    "link",
                    "set",
                    "dev",
                    "ma",
                    "root_block",
                    "on",
                ])
                .status()
                .expect("cannot run bridge");
            assert!(status.success(), "bridge link set root_block on");
        }
    }
    // The old tree may stand a while (Linux looks again at its next
    // BPDU): wait for the one with ma blocking.
    let want = t.m.label_of("ma");
    let deadline = Instant::now() + CONVERGE;
    while converge(&ring, &t.guard) != want {
        assert!(
            Instant::now() < deadline,
            "{want} not the blocking port within {CONVERGE:?}: {:?}",
            views(&ring)
        );
        thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(m_root_port(&t), mb, "{:?}", views(&ring));
    for node in [&t.a, &t.b, &t.m] {
        assert_eq!(node.root_id(), a_id, "{}'s root", node.label);
    }
    if let Some(mp) = &t.m.mp {
        let stats = mp.stats();
        let stp = &port_stats(&stats, "raw:ma")["stp"];
        assert_eq!(stp["role"], "alternate", "{stp}");
        assert_eq!(stp["state"], "discarding", "{stp}");
        assert!(bpdus(stp, "rx_bpdus") > 0, "A's BPDUs on raw:ma: {stp}");
    }
    let mut st = t.stations();
    for from in 0..3 {
        broadcast_once(&mut st, from, 50 + from as u8);
    }
}

fn restricted_role_keeps_a_better_root_off_the_root_port() {
    if kernel_bridges("restricted_role_keeps_a_better_root_off_the_root_port") {
        restricted_role(Middle::Mpbridge {
            options: STP.to_vec(),
            port_options: "",
        });
    }
}

/// The same with a Linux bridge and `root_block on` in mpbridge's place.
fn root_block_keeps_a_better_root_off_a_linux_root_port() {
    if kernel_bridges("root_block_keeps_a_better_root_off_a_linux_root_port") {
        restricted_role(Middle::Linux {
            stp: true,
            cost: None,
        });
    }
}

// 12. Checked options.

/// Bad STP values exit non-zero with one line naming the value, before any
/// port is opened (the ports here do not exist); good ones, at the edges
/// of their ranges, pass to the opening of the ports.
fn stp_options_are_checked() {
    let run = |extra: &[&str], port: &str| {
        let mut args = vec!["run", "--port", port, "--port", "raw:stpbad1", "--stp"];
        args.extend_from_slice(extra);
        let (status, stderr) = netns::run_to_exit(None, &args, Duration::from_secs(5));
        assert!(!status.success(), "{args:?} ran");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {stderr:?}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };
    let bad: [(&[&str], &str, &[&str]); 15] = [
        (&["--stp-priority", "4097"], "raw:stpbad0", &["4097"]),
        (&["--stp-priority", "65536"], "raw:stpbad0", &["65536"]),
        (&["--stp-hello", "7"], "raw:stpbad0", &["7"]),
        (&["--stp-forward-delay", "31"], "raw:stpbad0", &["31"]),
        (&["--stp-max-age", "41"], "raw:stpbad0", &["41"]),
        // 2 x (10 - 1) = 18 < 30.
        (
            &["--stp-forward-delay", "10", "--stp-max-age", "30"],
            "raw:stpbad0",
            &["30"],
        ),
        // 2 x (4 - 1) = 6 < 20, the default max age.
        (&["--stp-forward-delay", "4"], "raw:stpbad0", &["4"]),
        (&[], "raw:stpbad0,priority=17", &["17"]),
        (&[], "raw:stpbad0,priority=256", &["256"]),
        (&[], "raw:stpbad0,cost=0", &["cost", "0"]),
        (&[], "raw:stpbad0,edge=maybe", &["maybe"]),
        (&[], "raw:stpbad0,guard=yes", &["yes"]),
        (
            &[],
            "raw:stpbad0,restricted_role=yes",
            &["restricted_role", "yes"],
        ),
        (
            &[],
            "raw:stpbad0,restricted_tcn=1",
            &["restricted_tcn", "1"],
        ),
        (&[], "raw:stpbad0,storm=lots", &["lots"]),
    ];
    for (extra, port, needles) in bad {
        let stderr = run(extra, port);
        assert!(
            !stderr.contains("stpbad1"),
            "{extra:?} {port}: ports opened before the options were checked: {stderr}"
        );
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{extra:?} {port}: {needle} not named: {stderr}"
            );
        }
    }
    let good: [(&[&str], &str); 6] = [
        (&["--stp-priority", "0"], "raw:stpbad0"),
        (
            &[
                "--stp-priority",
                "61440",
                "--stp-hello",
                "2",
                "--stp-forward-delay",
                "30",
                "--stp-max-age",
                "40",
            ],
            "raw:stpbad0",
        ),
        (
            &[
                "--stp-hello",
                "1",
                "--stp-forward-delay",
                "4",
                "--stp-max-age",
                "6",
            ],
            "raw:stpbad0,priority=0,cost=1",
        ),
        (
            &[],
            "raw:stpbad0,priority=240,edge=on,guard=off,bpdu_filter=off",
        ),
        (&["--move-limit", "5"], "raw:stpbad0,storm=1000"),
        (&[], "raw:stpbad0,restricted_role=on,restricted_tcn=on"),
    ];
    for (extra, port) in good {
        let stderr = run(extra, port);
        assert!(
            stderr.contains("stpbad"),
            "{extra:?} {port}: refused before the ports: {stderr}"
        );
    }
}

lab::test_main! {
    privileged: [
        a_bpdu_crosses_a_linux_bridge_without_stp,
        a_bpdu_crosses_mpbridge_without_stp_mutex,
        a_bpdu_crosses_mpbridge_without_stp_rwlock,
        a_bpdu_crosses_mpbridge_without_stp_rmlock,
        a_bpdu_crosses_mpbridge_without_stp_sharded,
        a_bpdu_crosses_mpbridge_without_stp_rcu,
        a_bpdu_crosses_mpbridge_without_stp_epoch,
        a_triangle_of_linux_bridges_converges,
        a_triangle_with_two_kernel_bridges_converges_mutex,
        a_triangle_with_two_kernel_bridges_converges_rwlock,
        a_triangle_with_two_kernel_bridges_converges_rmlock,
        a_triangle_with_two_kernel_bridges_converges_sharded,
        a_triangle_with_two_kernel_bridges_converges_rcu,
        a_triangle_with_two_kernel_bridges_converges_epoch,
        mpbridge_with_the_lowest_priority_is_root,
        a_kernel_bridge_as_root,
        a_link_failure_restores_connectivity_between_linux_bridges,
        a_link_failure_restores_connectivity_mutex,
        a_link_failure_restores_connectivity_rwlock,
        a_link_failure_restores_connectivity_rmlock,
        a_link_failure_restores_connectivity_sharded,
        a_link_failure_restores_connectivity_rcu,
        a_link_failure_restores_connectivity_epoch,
        three_mpbridge_instances_fail_over_quickly_mutex,
        three_mpbridge_instances_fail_over_quickly_rwlock,
        three_mpbridge_instances_fail_over_quickly_rmlock,
        three_mpbridge_instances_fail_over_quickly_sharded,
        three_mpbridge_instances_fail_over_quickly_rcu,
        three_mpbridge_instances_fail_over_quickly_epoch,
        guard_disables_a_port_that_hears_a_bpdu_mutex,
        guard_disables_a_port_that_hears_a_bpdu_rwlock,
        guard_disables_a_port_that_hears_a_bpdu_rmlock,
        guard_disables_a_port_that_hears_a_bpdu_sharded,
        guard_disables_a_port_that_hears_a_bpdu_rcu,
        guard_disables_a_port_that_hears_a_bpdu_epoch,
        guard_disables_a_port_that_hears_a_bpdu_with_stp,
        bpdu_filter_drops_bpdus_in_and_out,
        storm_limits_floods_not_known_unicast_mutex,
        storm_limits_floods_not_known_unicast_rwlock,
        storm_limits_floods_not_known_unicast_rmlock,
        storm_limits_floods_not_known_unicast_sharded,
        storm_limits_floods_not_known_unicast_rcu,
        storm_limits_floods_not_known_unicast_epoch,
        move_limit_holds_a_flapping_station_mutex,
        move_limit_holds_a_flapping_station_rwlock,
        move_limit_holds_a_flapping_station_rmlock,
        move_limit_holds_a_flapping_station_sharded,
        move_limit_holds_a_flapping_station_rcu,
        move_limit_holds_a_flapping_station_epoch,
        a_tc_flood_costs_one_flush_per_port_per_tick_mutex,
        a_tc_flood_costs_one_flush_per_port_per_tick_rwlock,
        a_tc_flood_costs_one_flush_per_port_per_tick_rmlock,
        a_tc_flood_costs_one_flush_per_port_per_tick_sharded,
        a_tc_flood_costs_one_flush_per_port_per_tick_rcu,
        a_tc_flood_costs_one_flush_per_port_per_tick_epoch,
        restricted_tcn_flushes_nothing_for_a_tc_flood,
        restricted_role_keeps_a_better_root_off_the_root_port,
        root_block_keeps_a_better_root_off_a_linux_root_port,
    ],
    plain: [stp_options_are_checked],
}
