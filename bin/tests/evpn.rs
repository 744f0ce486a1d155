//! EVPN ports' kernel mirrors, read back as `ip -d -j link` shows them (what
//! FRR's zebra reads): made with the VNI, local address and UDP port,
//! nolearning, the vxlan device and the stations' veth on a bridge (its peer on none),
//! learning off on the vxlan device's bridge port, no IPv6 addresses;
//! removed whole; refused, with nothing made, when another device carries
//! the VNI, has a mirror's name, or holds the UDP port; what a crashed
//! bridge left is removed by its name alone. And with FRR (zebra and bgpd
//! per namespace) against a Linux VTEP: a station written on the mirror
//! reaches the Linux VTEP's vxlan fdb as `extern_learn` with the mirror's
//! local address as `dst`, and leaves it when removed; the Linux VTEP's
//! station and flood entry are installed on the mirror and heard as news.
//! Needs root (and FRR); skips with a reason otherwise (fails under
//! MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::net::{IpAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use bridge::evpn::fdb::Received;
use bridge::evpn::mirror::{self, remove_stale};
use bridge::evpn::{FdbEvents, Installed, Mirror, MirrorConfig, MirrorError, DEFAULT_MIRROR_PORT};
use bridge::port::vxlan::VxlanConfig;
use bridge::port::{Outgoing, Queue, RxBatch, VxlanQueue, VNET_HDR_LEN};
use bridge::rtnl::Rtnl;
use bridge::wire::vxlan::{header, HEADER_LEN};
use bridge::wire::MacAddr;
use netns::{privileged, Netns};
use serde_json::Value;

/// A namespace with IPv6 on (as FRR's have it), removed on drop.
fn namespace() -> lab::Netns {
    lab::Netns::new("evpn").expect("cannot make a network namespace")
}

fn config(bridge: &str, vni: u32, local: &str) -> MirrorConfig {
    MirrorConfig {
        bridge: bridge.to_owned(),
        port: format!("seg{vni}"),
        vni,
        local: local.parse::<IpAddr>().expect("an address"),
        udp_port: DEFAULT_MIRROR_PORT,
    }
}

/// `ip -d -j link show` in `ns`: every link, by name.
fn links(ns: &lab::Netns) -> Vec<Value> {
    let output = Command::new("ip")
        .args(["-n", &ns.name, "-d", "-j", "link", "show"])
        .output()
        .expect("cannot run ip");
    assert!(output.status.success(), "ip link show failed");
    match serde_json::from_slice(&output.stdout).expect("ip's JSON") {
        Value::Array(links) => links,
        other => panic!("not a list: {other}"),
    }
}

fn link<'a>(links: &'a [Value], name: &str) -> &'a Value {
    links
        .iter()
        .find(|l| l["ifname"] == name)
        .unwrap_or_else(|| panic!("no link {name}"))
}

fn names(ns: &lab::Netns) -> Vec<String> {
    links(ns)
        .iter()
        .map(|l| l["ifname"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `ip -j addr show` in `ns`: the IPv6 addresses of `dev`.
fn inet6(ns: &lab::Netns, dev: &str) -> usize {
    let output = Command::new("ip")
        .args(["-n", &ns.name, "-j", "-6", "addr", "show", "dev", dev])
        .output()
        .expect("cannot run ip");
    let shown: Value = serde_json::from_slice(&output.stdout).expect("ip's JSON");
    shown[0]["addr_info"].as_array().map_or(0, Vec::len)
}

fn a_mirror_is_made_as_zebra_reads_it_and_removed_whole() {
    if !privileged("a_mirror_is_made_as_zebra_reads_it_and_removed_whole") {
        return;
    }
    for local in ["198.18.0.1", "2001:2::1"] {
        let ns = namespace();
        let made = ns
            .run(move || {
                let mut rtnl = Rtnl::open().expect("rtnetlink");
                Mirror::make(&mut rtnl, &config("br0", 42, local)).map_err(|e| e.to_string())
            })
            .expect("in the namespace")
            .expect("the mirror is made");
        assert_eq!(
            [
                &made.bridge.name,
                &made.vxlan.name,
                &made.stations.name,
                &made.peer.name
            ],
            mirror::names(42).each_ref()
        );
        let shown = links(&ns);
        let bridge = link(&shown, "mpe42b");
        assert_eq!(bridge["linkinfo"]["info_kind"], "bridge");
        assert_eq!(bridge["linkinfo"]["info_data"]["mcast_snooping"], 0);
        let vxlan = link(&shown, "mpe42v");
        let data = &vxlan["linkinfo"]["info_data"];
        assert_eq!(vxlan["linkinfo"]["info_kind"], "vxlan");
        assert_eq!(data["id"], 42);
        assert_eq!(data["port"], DEFAULT_MIRROR_PORT);
        assert_eq!(data["learning"], false);
        let key = if local.contains(':') {
            "local6"
        } else {
            "local"
        };
        assert_eq!(data[key], local, "{vxlan}");
        assert_eq!(vxlan["master"], "mpe42b");
        assert_eq!(
            vxlan["linkinfo"]["info_slave_data"]["learning"], false,
            "learning off on the bridge port"
        );
        let stations = link(&shown, "mpe42l");
        assert_eq!(stations["linkinfo"]["info_kind"], "veth");
        assert_eq!(stations["master"], "mpe42b");
        let peer = link(&shown, "mpe42p");
        assert_eq!(peer["link"], "mpe42l", "the stations' veth peer");
        assert!(peer.get("master").is_none(), "the peer is on no bridge");
        for name in mirror::names(42) {
            let l = link(&shown, &name);
            assert!(
                l["flags"]
                    .as_array()
                    .is_some_and(|f| f.contains(&Value::from("UP"))),
                "{name} up: {l}"
            );
            assert_eq!(l["ifalias"], "mpbridge:br0:evpn:seg42");
            assert_eq!(inet6(&ns, &name), 0, "{name} has no IPv6 address");
        }

        ns.run(move || {
            let mut rtnl = Rtnl::open().expect("rtnetlink");
            made.remove(&mut rtnl).expect("removed");
            // Removing twice finds nothing left and is fine.
            made.remove(&mut rtnl).expect("removed again");
        })
        .expect("in the namespace");
        let left = names(&ns);
        assert!(
            !left.iter().any(|n| n.starts_with("mpe")),
            "all removed: {left:?}"
        );
    }
}

fn what_is_taken_is_refused_and_nothing_is_made() {
    if !privileged("what_is_taken_is_refused_and_nothing_is_made") {
        return;
    }
    let ns = Netns::new();
    ns.ip(&[
        "link",
        "add",
        "vx0",
        "type",
        "vxlan",
        "id",
        "7",
        "dstport",
        "4789",
        "local",
        "198.18.0.1",
    ]);
    ns.ip(&["link", "add", "mpe9v", "type", "bridge"]);
    let refusals = ns.run(|| {
        let mut rtnl = Rtnl::open().expect("rtnetlink");
        let mut refusals = Vec::new();
        for vni in [7, 9] {
            refusals.push(
                Mirror::make(&mut rtnl, &config("br0", vni, "198.18.0.1"))
                    .map(drop)
                    .map_err(|e| (matches!(e, MirrorError::NameTaken { .. }), e.to_string())),
            );
        }
        // The mirror's UDP port held by another socket: the kernel
        // refuses the vxlan device, and the bridge made before it goes.
        let _held = UdpSocket::bind(("0.0.0.0", DEFAULT_MIRROR_PORT)).expect("bind");
        refusals.push(
            Mirror::make(&mut rtnl, &config("br0", 11, "198.18.0.1"))
                .map(drop)
                .map_err(|e| (false, e.to_string())),
        );
        refusals
    });
    assert_eq!(
        refusals[0],
        Err((false, "VNI 7 is carried by vx0 already".to_owned()))
    );
    assert_eq!(
        refusals[1],
        Err((
            true,
            "interface mpe9v exists and is not one this bridge made (its EVPN mirror)".to_owned()
        ))
    );
    let held = refusals[2].as_ref().expect_err("the port is held");
    assert!(
        held.1.starts_with("bringing up mpe11v: ") && held.1.contains("in use"),
        "{held:?}"
    );
    let mut left = names(&ns);
    left.sort();
    assert_eq!(
        left,
        ["lo", "mpe9v", "vx0"],
        "nothing made, nothing else touched"
    );
}

fn a_crashed_bridges_mirrors_are_removed_by_its_name_alone() {
    if !privileged("a_crashed_bridges_mirrors_are_removed_by_its_name_alone") {
        return;
    }
    let ns = Netns::new();
    // Another program's device with an alias of its own.
    ns.ip(&["link", "add", "other0", "type", "bridge"]);
    ns.ip(&["link", "set", "other0", "alias", "mpbridge:b:evpn"]);
    let removed = ns
        .run(|| {
            let mut rtnl = Rtnl::open().expect("rtnetlink");
            // Left behind, as by a bridge killed before it could remove them.
            for (bridge, vni) in [("a", 5), ("a", 6), ("b", 8)] {
                Mirror::make(&mut rtnl, &config(bridge, vni, "198.18.0.1"))
                    .map_err(|e| e.to_string())
                    .expect("made");
            }
            remove_stale(&mut rtnl, "a").map_err(|e| e.to_string())
        })
        .expect("removed");
    let mut removed = removed;
    removed.sort();
    let mut expected: Vec<String> = mirror::names(5)
        .into_iter()
        .chain(mirror::names(6))
        .collect();
    expected.sort();
    assert_eq!(removed, expected);
    let mut left = names(&ns);
    left.sort();
    assert_eq!(left, ["lo", "mpe8b", "mpe8l", "mpe8p", "mpe8v", "other0"]);
}

/// Waits (at most `WAIT`) until `done` holds; panics with `what` and FRR's
/// logs otherwise.
fn wait_for(what: &str, frr: &[&lab::Frr], mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        if Instant::now() > deadline {
            let logs: String = frr.iter().map(|f| f.logs()).collect();
            panic!("{what}: not within {WAIT:?}\n{logs}");
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// How long BGP may take to bring a route across (sessions open in
/// seconds with FRR's datacenter defaults).
const WAIT: Duration = Duration::from_secs(60);

fn a_mirror_and_a_linux_vtep_exchange_routes_through_frr() {
    let test = "a_mirror_and_a_linux_vtep_exchange_routes_through_frr";
    if !privileged(test) || !lab::installed(test, &format!("{}/zebra", lab::FRR_DIR), "frr") {
        return;
    }
    // A: the mirror's side; B: a Linux VTEP (bridge, vxlan on 4789,
    // nolearning) with a station on it.
    let a = namespace();
    let b = namespace();
    a.ip(&[
        "link", "add", "u0", "type", "veth", "peer", "name", "u1", "netns", &b.name,
    ])
    .expect("underlay");
    a.ip(&["addr", "add", "198.18.0.1/24", "dev", "u0"])
        .expect("address");
    a.ip(&["link", "set", "u0", "up"]).expect("up");
    b.ip(&["addr", "add", "198.18.0.2/24", "dev", "u1"])
        .expect("address");
    b.ip(&["link", "set", "u1", "up"]).expect("up");
    b.ip(&["link", "add", "h0", "type", "veth", "peer", "name", "h1"])
        .expect("the station's link");
    lab::frr::linux_vtep(&b.name, "br0", "vx42", 42, "198.18.0.2", "h0").expect("the Linux VTEP");
    let status = Command::new("ip")
        .args([
            "netns",
            "exec",
            &b.name,
            "bridge",
            "fdb",
            "replace",
            "02:00:00:00:00:99",
        ])
        .args(["dev", "h0", "master", "static"])
        .status()
        .expect("bridge");
    assert!(status.success(), "the Linux VTEP's station");

    let local = MacAddr([2, 0, 0, 0, 0, 1]);
    let mirror = a
        .run(move || {
            let mut rtnl = Rtnl::open().expect("rtnetlink");
            let mirror = Mirror::make(&mut rtnl, &config("br0", 42, "198.18.0.1"))
                .map_err(|e| e.to_string())
                .expect("the mirror");
            rtnl.add_station(mirror.stations.index, local)
                .expect("a local station");
            // Read back as a dump gives it (the port's own address, a
            // permanent entry, is not a station).
            assert_eq!(
                rtnl.stations(mirror.stations.index).expect("a dump"),
                [local]
            );
            mirror
        })
        .expect("in the namespace");
    // News of what zebra installs, heard from before it starts.
    let vxlan = mirror.vxlan.index;
    let heard = a.spawn(move || {
        let mut events = FdbEvents::open(Duration::from_millis(200)).expect("neighbour news");
        let mut heard = Vec::new();
        let deadline = Instant::now() + WAIT;
        while heard.len() < 2 && Instant::now() < deadline {
            if let Ok(Received::Changes(changes)) = events.recv() {
                heard.extend(
                    changes
                        .into_iter()
                        .filter(|c| c.ifindex == vxlan && c.added)
                        .map(|c| c.entry),
                );
            }
        }
        heard
    });
    let frr_a = lab::Frr::start(
        &a.name,
        &lab::frr::evpn_config("198.18.0.1", &["198.18.0.2"]),
    )
    .expect("FRR");
    let frr_b = lab::Frr::start(
        &b.name,
        &lab::frr::evpn_config("198.18.0.2", &["198.18.0.1"]),
    )
    .expect("FRR");
    let vtep: IpAddr = "198.18.0.2".parse().expect("an address");
    let expected = [
        Installed::Station {
            mac: MacAddr([2, 0, 0, 0, 0, 0x99]),
            vtep,
        },
        Installed::Flood { vtep },
    ];

    // The Linux VTEP's station and flood entry, installed on the mirror.
    wait_for("the mirror's routes", &[&frr_a, &frr_b], || {
        let installed = a
            .run(move || Rtnl::open().and_then(|mut r| r.installed(vxlan)))
            .expect("in the namespace")
            .expect("fdb");
        expected.iter().all(|e| installed.contains(e))
    });
    let mut heard = heard.join().expect("listener").expect("in the namespace");
    heard.sort();
    heard.dedup();
    let mut wanted = expected.to_vec();
    wanted.sort();
    assert_eq!(heard, wanted, "the news of what was installed");

    // The mirror's station and flood entry, on the Linux VTEP.
    let on_b = |mac: &str| {
        lab::frr::bridge_fdb(&b.name, "vx42").into_iter().any(|e| {
            e["mac"] == mac
                && e["dst"] == "198.18.0.1"
                && (mac == "00:00:00:00:00:00"
                    || e["flags"]
                        .as_array()
                        .is_some_and(|f| f.contains(&Value::from("extern_learn"))))
        })
    };
    wait_for("the Linux VTEP's routes", &[&frr_a, &frr_b], || {
        on_b("02:00:00:00:00:01") && on_b("00:00:00:00:00:00")
    });

    // The station removed: its route is withdrawn.
    a.run(move || Rtnl::open().and_then(|mut r| r.del_station(mirror.stations.index, local)))
        .expect("in the namespace")
        .expect("removed");
    wait_for("the withdrawal", &[&frr_a, &frr_b], || {
        !on_b("02:00:00:00:00:01")
    });
    assert!(
        on_b("00:00:00:00:00:00"),
        "the VTEP stays in the flood list"
    );
}

/// A broadcast frame with a virtio-net header in front.
fn broadcast(tag: u8) -> Vec<u8> {
    let frame = netns::test_frame(netns::BROADCAST, [2, 0, 0, 0, 0, 1], tag, 100);
    [&[0u8; VNET_HDR_LEN][..], &frame].concat()
}

fn an_evpn_port_takes_any_vtep_and_floods_where_it_is_told() {
    if !privileged("an_evpn_port_takes_any_vtep_and_floods_where_it_is_told") {
        return;
    }
    let ns = Netns::new();
    for addr in [
        "198.18.0.1/32",
        "198.18.0.2/32",
        "198.18.0.3/32",
        "198.18.0.4/32",
    ] {
        ns.ip(&["addr", "add", addr, "dev", "lo"]);
    }
    ns.run(|| {
        let open = |local: &str, evpn: bool| {
            let config = VxlanConfig {
                vni: 42,
                local: format!("{local}:4789").parse().expect("an address"),
                remotes: Vec::new(),
                learning: false,
                evpn,
                mirror_port: DEFAULT_MIRROR_PORT,
            };
            VxlanQueue::open("seg", config, 1)
                .expect("a vxlan port")
                .remove(0)
        };
        let mut port = open("198.18.0.1", true);
        // Neither learning nor EVPN: only listed VTEPs are heard.
        let mut closed = open("198.18.0.4", false);
        let remote = UdpSocket::bind("198.18.0.2:4789").expect("the remote VTEP");
        remote.set_nonblocking(true).expect("nonblocking");
        let mut datagram = [0u8; 2048];

        // Nothing to flood to yet: counted, not sent.
        let frame = broadcast(1);
        port.send_batch(std::iter::once(Outgoing::split(&frame, VNET_HDR_LEN)));
        assert_eq!(port.shared().counters.no_remote.load(Ordering::Relaxed), 1);
        thread::sleep(Duration::from_millis(50));
        assert!(remote.recv(&mut datagram).is_err(), "nothing was sent");

        // Given a VTEP, floods go to it.
        let vtep: IpAddr = "198.18.0.2".parse().expect("an address");
        port.shared().set_flood_vteps(&[vtep]);
        assert_eq!(port.shared().flood(), [vtep]);
        let frame = broadcast(2);
        port.send_batch(std::iter::once(Outgoing::split(&frame, VNET_HDR_LEN)));
        let deadline = Instant::now() + Duration::from_secs(5);
        let len = loop {
            match remote.recv(&mut datagram) {
                Ok(len) => break len,
                Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Err(error) => panic!("the flood never came: {error}"),
            }
        };
        assert_eq!(&datagram[..HEADER_LEN], header(42));
        assert_eq!(&datagram[HEADER_LEN..len], &frame[VNET_HDR_LEN..]);

        // A VTEP that was never given: its frame is taken (no VTEP learned),
        // where a port without EVPN or learning drops it.
        let stranger = UdpSocket::bind("198.18.0.3:0").expect("a stranger");
        let inner = netns::test_frame(netns::BROADCAST, [2, 0, 0, 0, 0, 7], 3, 100);
        let sent = [&header(42)[..], &inner].concat();
        for to in ["198.18.0.1:4789", "198.18.0.4:4789"] {
            stranger.send_to(&sent, to).expect("sent");
        }
        let mut batch = RxBatch::new(64, 2048).with_metadata(VNET_HDR_LEN);
        let deadline = Instant::now() + Duration::from_secs(5);
        while batch.is_empty() {
            assert!(Instant::now() < deadline, "the stranger's frame never came");
            port.recv_batch(&mut batch).expect("receive");
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(batch.frame(0).ethernet(), inner);
        assert_eq!(batch.vtep(0), None, "no VTEP learned from the data plane");
        assert_eq!(
            port.shared()
                .counters
                .unlisted_source
                .load(Ordering::Relaxed),
            0
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while closed
            .shared()
            .counters
            .unlisted_source
            .load(Ordering::Relaxed)
            == 0
        {
            assert!(Instant::now() < deadline, "the closed port never heard it");
            batch.clear();
            closed.recv_batch(&mut batch).expect("receive");
            assert!(batch.is_empty(), "a port without EVPN takes no stranger");
            thread::sleep(Duration::from_millis(5));
        }
    });
}

lab::test_main! {
    privileged: [
        a_mirror_is_made_as_zebra_reads_it_and_removed_whole,
        what_is_taken_is_refused_and_nothing_is_made,
        a_crashed_bridges_mirrors_are_removed_by_its_name_alone,
        a_mirror_and_a_linux_vtep_exchange_routes_through_frr,
        an_evpn_port_takes_any_vtep_and_floods_where_it_is_told,
    ],
    plain: [],
}
