//! Linux's bridge port flags (isolated, hairpin, learning, flood,
//! mcast_flood, bcast_flood, locked) and its group forward mask from
//! outside: the same
//! scenarios through mpbridge, with the flags as port options, and through
//! the Linux bridge, with the flags set by `bridge link set`; both must
//! deliver the same frames to the same hosts. Needs root; skips with a reason otherwise (fails under
//! MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::collections::BTreeSet;
use std::time::Duration;

use netns::{
    bridge_here, ctl_json, mac, port_stats, privileged, settle_counts, test_frame, Netns, PortKind,
    Station, TempDir, Topology, BROADCAST,
};

/// A multicast group address (IPv4 224.0.0.251's MAC, an ordinary group).
const MULTICAST: [u8; 6] = [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb];

/// One scenario: the flags of each of three ports (as port options, and as
/// `bridge link set` arguments), and the frames sent with the hosts
/// expected to get each.
struct Scenario {
    name: &'static str,
    options: [&'static str; 3],
    kernel: [&'static [&'static str]; 3],
    /// mpbridge's own options, and the kernel bridge's (`type bridge ...`).
    bridge: (&'static [&'static str], &'static [&'static str]),
    /// Static entries made before the check: a host's station, on its port.
    statics: &'static [usize],
    /// Run on the hosts' stations.
    check: fn(&mut [Station]),
}

/// `02:00:...` as text.
fn format_mac(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Sends `frame` from host `from` and says which hosts got a test frame.
fn delivered(st: &mut [Station], from: usize, frame: &[u8]) -> Vec<usize> {
    st[from].send(frame);
    settle_counts(st)
        .into_iter()
        .enumerate()
        .filter(|(_, n)| *n > 0)
        .map(|(host, _)| host)
        .collect()
}

fn isolation(st: &mut [Station]) {
    // Hosts 0 and 1 isolated, host 2 not.
    assert_eq!(delivered(st, 0, &test_frame(BROADCAST, mac(1), 1, 60)), [2]);
    assert_eq!(delivered(st, 1, &test_frame(BROADCAST, mac(2), 2, 60)), [2]);
    assert_eq!(
        delivered(st, 2, &test_frame(BROADCAST, mac(3), 3, 60)),
        [0, 1]
    );
    // Known unicast between isolated ports goes nowhere; to host 2 it goes.
    assert_eq!(
        delivered(st, 0, &test_frame(mac(2), mac(1), 4, 60)),
        Vec::<usize>::new()
    );
    assert_eq!(delivered(st, 0, &test_frame(mac(3), mac(1), 5, 60)), [2]);
    assert_eq!(delivered(st, 1, &test_frame(mac(3), mac(2), 6, 60)), [2]);
}

fn flood_flags(st: &mut [Station]) {
    // Port 1 flood off, port 2 mcast_flood off.
    assert_eq!(
        delivered(st, 0, &test_frame(mac(9), mac(1), 1, 60)),
        [2],
        "unknown unicast"
    );
    assert_eq!(
        delivered(st, 0, &test_frame(MULTICAST, mac(1), 2, 60)),
        [1],
        "multicast"
    );
    assert_eq!(
        delivered(st, 0, &test_frame(BROADCAST, mac(1), 3, 60)),
        [1, 2],
        "broadcast"
    );
    // Known unicast is not a flood: host 1 gets it once learned.
    delivered(st, 1, &test_frame(BROADCAST, mac(2), 4, 60));
    assert_eq!(delivered(st, 0, &test_frame(mac(2), mac(1), 5, 60)), [1]);
}

fn broadcast_flood(st: &mut [Station]) {
    // Port 2 bcast_flood off.
    assert_eq!(
        delivered(st, 0, &test_frame(BROADCAST, mac(1), 1, 60)),
        [1],
        "broadcast"
    );
    assert_eq!(
        delivered(st, 0, &test_frame(MULTICAST, mac(1), 2, 60)),
        [1, 2],
        "multicast"
    );
}

fn learning_off(st: &mut [Station]) {
    // Port 0 learning off: its station is never learned, so frames to it
    // flood.
    assert_eq!(
        delivered(st, 0, &test_frame(BROADCAST, mac(1), 1, 60)),
        [1, 2]
    );
    assert_eq!(
        delivered(st, 1, &test_frame(mac(1), mac(2), 2, 60)),
        [0, 2],
        "unknown, flooded"
    );
    // Port 1 learns: host 0 reaches host 1 alone.
    assert_eq!(delivered(st, 0, &test_frame(mac(2), mac(1), 3, 60)), [1]);
}

fn group_forward_mask(st: &mut [Station]) {
    // 0x4008: LLDP (0E) and 802.1X (03) are forwarded, the rest stay local.
    for (last, expected) in [(0x0e, vec![1, 2]), (0x03, vec![1, 2]), (0x0f, vec![])] {
        let dst = [0x01, 0x80, 0xc2, 0, 0, last];
        assert_eq!(
            delivered(st, 0, &test_frame(dst, mac(1), last, 60)),
            expected,
            "01:80:c2:00:00:{last:02x}"
        );
    }
}

fn locked(st: &mut [Station]) {
    // Host 0 (its static entry on its locked port) sends; host 1 cannot.
    assert_eq!(
        delivered(st, 0, &test_frame(BROADCAST, mac(1), 1, 60)),
        [1, 2]
    );
    assert_eq!(
        delivered(st, 1, &test_frame(BROADCAST, mac(2), 2, 60)),
        Vec::<usize>::new()
    );
    // Frames to a locked port's station still reach it; host 1's station
    // was never learned, so frames to it flood.
    assert_eq!(delivered(st, 2, &test_frame(mac(1), mac(3), 3, 60)), [0]);
    assert_eq!(delivered(st, 2, &test_frame(mac(2), mac(3), 4, 60)), [0, 1]);
}

/// A station behind host 0, and a second one there that sends to it.
const BEHIND_0: [u8; 6] = [0x02, 0x42, 0x00, 0x00, 0x00, 0x51];
const ALSO_BEHIND_0: [u8; 6] = [0x02, 0x42, 0x00, 0x00, 0x00, 0x52];

fn hairpin_on(st: &mut [Station]) {
    // Port 0 hairpin on: floods go back out of it too, and so does a
    // frame to a station learned there.
    assert_eq!(
        delivered(st, 0, &test_frame(BROADCAST, BEHIND_0, 1, 60)),
        [0, 1, 2],
        "broadcast"
    );
    assert_eq!(
        delivered(st, 0, &test_frame(BEHIND_0, ALSO_BEHIND_0, 2, 60)),
        [0],
        "to a station learned on the port it came in on"
    );
    // Port 1's hairpin is off: its floods do not come back.
    assert_eq!(
        delivered(st, 1, &test_frame(BROADCAST, mac(2), 3, 60)),
        [0, 2]
    );
}

fn hairpin_off(st: &mut [Station]) {
    assert_eq!(
        delivered(st, 0, &test_frame(BROADCAST, BEHIND_0, 1, 60)),
        [1, 2],
        "broadcast"
    );
    assert_eq!(
        delivered(st, 0, &test_frame(BEHIND_0, ALSO_BEHIND_0, 2, 60)),
        Vec::<usize>::new(),
        "to a station learned on the port it came in on"
    );
    // Learned there, not elsewhere: from host 1 it reaches host 0 alone.
    assert_eq!(delivered(st, 1, &test_frame(BEHIND_0, mac(2), 3, 60)), [0]);
}

const SCENARIOS: [Scenario; 8] = [
    Scenario {
        name: "isolation",
        options: ["isolated=on", "isolated=on", ""],
        kernel: [&["isolated", "on"], &["isolated", "on"], &[]],
        bridge: (&[], &[]),
        statics: &[],
        check: isolation,
    },
    Scenario {
        name: "flood flags",
        options: ["", "flood=off", "mcast_flood=off"],
        kernel: [&[], &["flood", "off"], &["mcast_flood", "off"]],
        bridge: (&[], &[]),
        statics: &[],
        check: flood_flags,
    },
    Scenario {
        name: "broadcast flood",
        options: ["", "", "bcast_flood=off"],
        kernel: [&[], &[], &["bcast_flood", "off"]],
        bridge: (&[], &[]),
        statics: &[],
        check: broadcast_flood,
    },
    Scenario {
        name: "learning off",
        options: ["learning=off", "", ""],
        kernel: [&["learning", "off"], &[], &[]],
        bridge: (&[], &[]),
        statics: &[],
        check: learning_off,
    },
    Scenario {
        name: "group forward mask",
        options: ["", "", ""],
        kernel: [&[], &[], &[]],
        bridge: (
            &["--group-fwd-mask", "0x4008"],
            &["group_fwd_mask", "0x4008"],
        ),
        statics: &[],
        check: group_forward_mask,
    },
    Scenario {
        name: "locked",
        options: ["locked=on", "locked=on", ""],
        kernel: [&["locked", "on"], &["locked", "on"], &[]],
        bridge: (&[], &[]),
        // Host 0's station has a static entry on its port; host 1's none.
        statics: &[0],
        check: locked,
    },
    Scenario {
        name: "hairpin on",
        options: ["hairpin=on", "", ""],
        kernel: [&["hairpin", "on"], &[], &[]],
        bridge: (&[], &[]),
        statics: &[],
        check: hairpin_on,
    },
    Scenario {
        name: "hairpin off",
        options: ["hairpin=off", "", ""],
        kernel: [&["hairpin", "off"], &[], &[]],
        bridge: (&[], &[]),
        statics: &[],
        check: hairpin_off,
    },
];

/// Every scenario through mpbridge with `lock`.
fn flags_through_mpbridge(lock: &str) {
    for scenario in &SCENARIOS {
        eprintln!("{}: mpbridge, {lock}", scenario.name);
        let (socket, ctl) = netns::ctl_socket("flags");
        let mut extra = vec!["--lock", lock, ctl.as_str()];
        extra.extend_from_slice(scenario.bridge.0);
        let topology = Topology::with_options(PortKind::Raw, &scenario.options, &extra);
        for &host in scenario.statics {
            let station = format_mac(mac(host as u16 + 1));
            let port = format!("raw:p{host}");
            netns::ctl_ok(&socket, &["fdb", "add", &station, "port", &port]);
        }
        let mut st = topology.stations();
        (scenario.check)(&mut st);
    }
}

/// The kernel bridge in namespace `bridge` with a port per host, each
/// given its scenario flags.
fn kernel_topology(scenario: &Scenario) -> (Netns, Vec<Netns>) {
    let bridge = Netns::new();
    let hosts: Vec<Netns> = (0..3).map(|_| Netns::new()).collect();
    let mut add = vec!["link", "add", "br0", "type", "bridge"];
    add.extend_from_slice(scenario.bridge.1);
    bridge.ip(&add);
    for (i, host) in hosts.iter().enumerate() {
        let port = format!("p{i}");
        host.add_veth(&port, &bridge).expect("veth");
        bridge.ip(&["link", "set", "dev", &port, "master", "br0"]);
        bridge.ip(&["link", "set", "dev", &port, "up"]);
        if !scenario.kernel[i].is_empty() {
            let status = std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &bridge.name,
                    "bridge",
                    "link",
                    "set",
                    "dev",
                    &port,
                ])
                .args(scenario.kernel[i])
                .status()
                .expect("bridge");
            assert!(status.success(), "bridge link set {:?}", scenario.kernel[i]);
        }
        if scenario.statics.contains(&i) {
            let station = format_mac(mac(i as u16 + 1));
            let status = std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &bridge.name,
                    "bridge",
                    "fdb",
                    "add",
                    &station,
                ])
                .args(["dev", &port, "master", "static"])
                .status()
                .expect("bridge");
            assert!(status.success(), "bridge fdb add {station}");
        }
        host.host_address(i);
    }
    bridge.ip(&["link", "set", "dev", "br0", "up"]);
    (bridge, hosts)
}

/// The same scenarios through the Linux bridge: the reference.
fn the_kernel_bridge_agrees() {
    if !privileged("the_kernel_bridge_agrees") {
        return;
    }
    for scenario in &SCENARIOS {
        eprintln!("{}: the Linux bridge", scenario.name);
        let (_bridge, hosts) = kernel_topology(scenario);
        let mut st: Vec<Station> = hosts.iter().map(|host| Station::on(host)).collect();
        settle_counts(&mut st);
        (scenario.check)(&mut st);
    }
}

/// A mask with bits 0 to 2, or one that is no 16-bit number, gives one
/// line naming it and a non-zero exit, as Linux refuses such masks.
fn bad_group_forward_masks_are_refused() {
    for mask in ["0x1", "0x4004", "3", "0x10000", "lldp"] {
        let args = [
            "run",
            "--port",
            "tap:gfm0",
            "--port",
            "tap:gfm1",
            "--group-fwd-mask",
            mask,
        ];
        let (status, stderr) = netns::run_to_exit(None, &args, std::time::Duration::from_secs(5));
        assert!(!status.success(), "{mask} taken");
        assert!(stderr.contains(mask), "{mask}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}

/// Ten stations behind host `host`.
fn ten_behind(host: usize) -> Vec<[u8; 6]> {
    (0..10)
        .map(|i| mac(0x1000 * (host as u16 + 1) + i))
        .collect()
}

/// The learned entries of `port` in an `fdb show --json` reply, as text.
fn learned_on(fdb: &serde_json::Value, port: &str) -> BTreeSet<String> {
    fdb.as_array()
        .expect("an array")
        .iter()
        .filter(|e| e["port"] == port && e["state"] == "learned")
        .map(|e| e["mac"].as_str().expect("mac").to_owned())
        .collect()
}

/// `max_learned=N`: at most N learned entries on a port; the stations
/// beyond them are forwarded all the same, never learned, and counted in
/// the port's `refused`. mpbridge's alone: the Linux bridge has no
/// per-port limit on learned entries (its `fdb_max_learned`, from Linux
/// 6.7, caps the whole bridge, and the iproute2 here cannot set it).
fn max_learned_through_mpbridge(lock: &str) {
    if !privileged(&format!("max_learned_{lock}")) {
        return;
    }
    let (socket, ctl) = netns::ctl_socket("limit");
    // Host 0's port learns at most 4; host 1's has no limit, nor has host
    // 2's (0 is none).
    let options = ["max_learned=4", "", "max_learned=0"];
    let topology = Topology::with_options(PortKind::Raw, &options, &["--lock", lock, &ctl]);
    let mut st = topology.stations();
    for host in 0..3 {
        for (tag, &station) in ten_behind(host).iter().enumerate() {
            st[host].send(&test_frame(BROADCAST, station, tag as u8, 60));
        }
        let expected: Vec<usize> = (0..3).map(|h| if h == host { 0 } else { 10 }).collect();
        assert_eq!(
            settle_counts(&mut st),
            expected,
            "the floods of the ten behind host {host}"
        );
    }

    let fdb = ctl_json(&socket, &["fdb", "show", "--json"]);
    let limited = learned_on(&fdb, "raw:p0");
    let behind_0: BTreeSet<String> = ten_behind(0).into_iter().map(format_mac).collect();
    assert_eq!(limited.len(), 4, "learned on raw:p0: {fdb}");
    assert!(limited.is_subset(&behind_0), "learned on raw:p0: {fdb}");
    for (host, port) in [(1, "raw:p1"), (2, "raw:p2")] {
        let all: BTreeSet<String> = ten_behind(host).into_iter().map(format_mac).collect();
        assert!(all.is_subset(&learned_on(&fdb, port)), "{port}: {fdb}");
    }
    let stats = ctl_json(&socket, &["stats", "--json"]);
    let refused = port_stats(&stats, "raw:p0")["refused"]
        .as_u64()
        .expect("refused");
    assert!(refused >= 6, "raw:p0 refused {refused}");
    for port in ["raw:p1", "raw:p2"] {
        assert_eq!(port_stats(&stats, port)["refused"], 0, "{port}");
    }
    let ports = ctl_json(&socket, &["port", "show", "-j"]);
    let shown = |name: &str| {
        ports
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {ports}"))
            .clone()
    };
    assert_eq!(shown("raw:p0")["max_learned"], 4, "{ports}");
    for port in ["raw:p1", "raw:p2"] {
        assert!(shown(port)["max_learned"].is_null(), "{port}: {ports}");
    }

    // A learned station is reached alone; a refused one is flooded to.
    let station = |text: &String| -> [u8; 6] {
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(text.split(':')) {
            *byte = u8::from_str_radix(part, 16).unwrap();
        }
        mac
    };
    let learned = station(limited.iter().next().unwrap());
    let refused_one = station(behind_0.difference(&limited).next().unwrap());
    assert_eq!(
        delivered(&mut st, 1, &test_frame(learned, mac(2), 20, 60)),
        [0]
    );
    assert_eq!(
        delivered(&mut st, 1, &test_frame(refused_one, mac(2), 21, 60)),
        [0, 2]
    );
    // Heard again, the refused stations stay unlearned.
    for (tag, &station) in ten_behind(0).iter().enumerate() {
        st[0].send(&test_frame(BROADCAST, station, tag as u8, 60));
    }
    assert_eq!(settle_counts(&mut st), [0, 10, 10]);
    let fdb = ctl_json(&socket, &["fdb", "show", "--json"]);
    assert_eq!(learned_on(&fdb, "raw:p0"), limited, "{fdb}");
}

strategy_tests!(max_learned_through_mpbridge: max_learned_mutex, max_learned_rwlock,
    max_learned_rmlock, max_learned_sharded, max_learned_rcu, max_learned_epoch);

/// `max_learned=4` is taken (and shown); `max_learned=x` and
/// `max_learned=-1` give one line naming them and a non-zero exit. On
/// vhost-user ports in a folder of the test's own: no privilege needed,
/// no network device made.
fn bad_max_learned_is_refused() {
    let dir = TempDir::new("limit");
    let ports = [
        format!("vhost:{},max_learned=4", dir.path("a.sock").display()),
        format!("vhost:{}", dir.path("b.sock").display()),
    ];
    let (daemon, socket) = bridge_here(&dir, &ports, &[]);
    let shown = ctl_json(&socket, &["port", "show", "-j"]);
    assert_eq!(shown[0]["max_learned"], 4, "{shown}");
    drop(daemon);
    for value in ["x", "-1"] {
        let ctl = format!("--ctl={}", dir.path("bad.sock").display());
        let port0 = format!(
            "--port=vhost:{},max_learned={value}",
            dir.path("a.sock").display()
        );
        let port1 = format!("--port=vhost:{}", dir.path("b.sock").display());
        let args = ["run", ctl.as_str(), port0.as_str(), port1.as_str()];
        let (status, stderr) = netns::run_to_exit(None, &args, Duration::from_secs(5));
        assert!(!status.success(), "max_learned={value} taken");
        assert!(stderr.contains(&format!("max_learned={value}")), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}

macro_rules! per_strategy {
    ($($name:ident: $lock:expr;)*) => {
        $( fn $name() {
            if !privileged(stringify!($name)) {
                return;
            }
            flags_through_mpbridge($lock);
        } )*
    };
}

per_strategy! {
    flags_mutex: "mutex";
    flags_rwlock: "rwlock";
    flags_rmlock: "rmlock";
    flags_sharded: "sharded";
    flags_rcu: "rcu";
    flags_epoch: "epoch";
}

lab::test_main! {
    privileged: [
        the_kernel_bridge_agrees,
        flags_mutex,
        flags_rwlock,
        flags_rmlock,
        flags_sharded,
        flags_rcu,
        flags_epoch,
        max_learned_mutex,
        max_learned_rwlock,
        max_learned_rmlock,
        max_learned_sharded,
        max_learned_rcu,
        max_learned_epoch,
    ],
    plain: [bad_group_forward_masks_are_refused, bad_max_learned_is_refused],
}
