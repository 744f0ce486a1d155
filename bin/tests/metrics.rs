//! The Prometheus endpoint of a running mpbridge (`--metrics ADDR:PORT`):
//! a scrape is a valid exposition whose figures are those of `stats`,
//! other requests are refused, slow clients cannot hold scrapes up, and
//! bad or busy addresses fail the start. Needs root for most; skips with a
//! reason otherwise (fails under MPBRIDGE_REQUIRE_PRIV=1).

mod netns;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lab::prometheus::{self, Exposition};
use lab::ScratchDir;
use netns::{
    mac, run_to_exit, settle_counts as settle, test_frame, Daemon, Netns, PortKind, Topology,
    BROADCAST,
};

/// A control socket path of this test's own, in a directory removed
/// with the returned guard.
fn socket_path(test: &str) -> (ScratchDir, PathBuf) {
    let dir = ScratchDir::new("mpbmet");
    let socket = dir.join(format!("{test}.sock"));
    (dir, socket)
}

/// A loopback port free in the namespace of this thread.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A loopback port free in namespace `ns`.
fn free_port_in(ns: &Netns) -> u16 {
    ns.run(free_port)
}

/// A response: status code, head (status line and headers) and body.
struct Response {
    status: u16,
    head: String,
    body: String,
}

impl Response {
    /// The value of header `name` (case-insensitive), if present.
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }
}

/// Sends `request` to `127.0.0.1:port` from inside namespace `ns` and
/// reads the response to its end (the server closes the connection).
fn exchange(ns: &Netns, port: u16, request: String) -> Response {
    // A HEAD response has the body's length but not the body.
    let head_only = request.starts_with("HEAD ");
    // The status line has the request's version: HTTP/1.0 answers HTTP/1.0.
    let version = match request.lines().next() {
        Some(line) if line.ends_with(" HTTP/1.0") => "HTTP/1.0 ",
        _ => "HTTP/1.1 ",
    };
    let raw = ns.run(move || {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request.as_bytes()).expect("send");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).expect("read the response");
        raw
    });
    let raw = String::from_utf8(raw).expect("a UTF-8 response");
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head: {raw:?}"));
    let status = head
        .strip_prefix(version)
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head:?}"));
    let response = Response {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    };
    assert_eq!(response.header("Connection"), Some("close"), "{head}");
    let length: usize = response
        .header("Content-Length")
        .unwrap_or_else(|| panic!("no Content-Length: {head}"))
        .parse()
        .unwrap();
    if !head_only {
        assert_eq!(length, response.body.len(), "Content-Length: {head}");
    }
    response
}

/// `GET /metrics`, checked: 200, the exposition's media type, and an
/// exposition the strict reader accepts.
fn scrape(ns: &Netns, port: u16) -> Exposition {
    let response = exchange(
        ns,
        port,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n".to_owned(),
    );
    assert_eq!(response.status, 200, "{}", response.head);
    assert_eq!(
        response.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let exposition =
        prometheus::parse(&response.body).unwrap_or_else(|e| panic!("{e}\n{}", response.body));
    for (name, family) in &exposition.families {
        assert!(name.starts_with("mpbridge_"), "{name}");
        assert_eq!(family.kind == "counter", name.ends_with("_total"), "{name}");
    }
    exposition
}

/// The client's `stats --json`.
fn stats_json(socket: &Path) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_mpbridge"))
        .arg("--ctl")
        .arg(socket)
        .args(["stats", "--json"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stats: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Every series but those that move on an idle bridge (the uptime, the
/// workers' busy share and the age of their heartbeats), by name and
/// labels.
fn steady(e: &Exposition) -> BTreeMap<(String, Vec<(String, String)>), f64> {
    let moving = [
        "mpbridge_uptime_seconds",
        "mpbridge_worker_busy_ratio",
        "mpbridge_worker_heartbeat_age_seconds",
    ];
    e.samples
        .iter()
        .filter(|s| !moving.contains(&s.name.as_str()))
        .map(|s| {
            let labels = s.labels.clone().into_iter().collect();
            ((s.name.clone(), labels), s.value)
        })
        .collect()
}

fn scrape_equals_stats_on_an_idle_bridge() {
    let (_scratch, socket) = socket_path("equal");
    let ctl_arg = format!("--ctl={}", socket.display());
    // The bridge's namespace is new: any port is free there.
    let port = free_port();
    let metrics_arg = format!("--metrics=127.0.0.1:{port}");
    let topology = Topology::new(
        PortKind::Raw,
        2,
        &[&ctl_arg, &metrics_arg, "--lock", "mutex", "--lockstat"],
    );
    let mut st = topology.stations();
    for n in 0..10 {
        st[0].send(&test_frame(BROADCAST, mac(1), n, 100));
    }
    st[0].send(&test_frame([0x01, 0x80, 0xc2, 0, 0, 0x0e], mac(1), 10, 60));
    st[1].send(&test_frame(mac(1), mac(2), 11, 80));
    settle(&mut st);

    // A scrape, stats, a scrape: when the two scrapes agree nothing moved
    // in between, and stats must say what they say.
    let (metrics, stats) = (0..5)
        .find_map(|_| {
            let first = scrape(&topology.bridge, port);
            let stats = stats_json(&socket);
            let second = scrape(&topology.bridge, port);
            (steady(&first) == steady(&second)).then_some((second, stats))
        })
        .expect("the bridge never went idle");

    let get = |name: &str, labels: &[(&str, &str)]| {
        metrics
            .value(&format!("mpbridge_{name}"), labels)
            .unwrap_or_else(|| panic!("no mpbridge_{name} {labels:?}"))
    };
    let int =
        |value: &serde_json::Value| value.as_u64().unwrap_or_else(|| panic!("{value}")) as f64;
    let name = stats["name"].as_str().unwrap();
    assert!(metrics.samples.iter().all(|s| s.labels["bridge"] == name));
    let lock = stats["lock"].as_str().unwrap();
    assert_eq!(lock, "mutex");
    assert_eq!(get("info", &[("lock", lock)]), 1.0);
    let uptime = get("uptime_seconds", &[]);
    assert!((uptime - int(&stats["uptime_s"])).abs() <= 1.0, "{uptime}");

    let ports = stats["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2);
    assert_eq!(metrics.series("mpbridge_port_rx_frames_total").len(), 2);
    for p in ports {
        let at = [("port", p["name"].as_str().unwrap())];
        for field in [
            "rx_frames",
            "rx_bytes",
            "tx_frames",
            "tx_bytes",
            "rx_oversize",
            "rx_errors",
            "tx_dropped",
            "tx_errors",
            "moves",
        ] {
            let metric = format!("port_{field}_total");
            assert_eq!(get(&metric, &at), int(&p[field]), "{metric} {at:?}");
        }
        let drops = p["drops"].as_object().unwrap();
        // runt, bad_source, reserved, same_port, local, the three VLAN
        // reasons, and stp, bpdu_filter, guard, port_state, storm and
        // move_limit, isolated and locked, snooped and mcast_parse.
        assert_eq!(drops.len(), 18, "{p}");
        for (reason, count) in drops {
            let labels = [at[0], ("reason", reason.as_str())];
            assert_eq!(get("port_drops_total", &labels), int(count), "{labels:?}");
        }
        assert_eq!(get("port_up", &at), f64::from(u8::from(p["link"] == "up")));
        assert_eq!(
            get("port_forwarding", &at),
            f64::from(u8::from(p["state"] == "forwarding"))
        );
        assert_eq!(get("port_up", &at), 1.0, "{p}");
        assert_eq!(get("port_forwarding", &at), 1.0, "{p}");
    }
    // What was sent is there.
    assert!(get("port_rx_frames_total", &[("port", "raw:p0")]) >= 11.0);
    assert!(get("port_tx_frames_total", &[("port", "raw:p1")]) >= 10.0);
    let reserved = [("port", "raw:p0"), ("reason", "reserved")];
    assert!(get("port_drops_total", &reserved) >= 1.0);

    let workers = stats["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1);
    for w in workers {
        let id = w["id"].to_string();
        let at = [("worker", id.as_str())];
        assert_eq!(get("worker_frames_total", &at), int(&w["frames"]));
        assert_eq!(get("worker_batches_total", &at), int(&w["batches"]));
        let busy = get("worker_busy_ratio", &at);
        assert!((0.0..=1.0).contains(&busy), "{busy}");
        // Its time at work, as JSON has it, and some: it forwarded.
        let busy_s = get("worker_busy_seconds_total", &at);
        assert_eq!(busy_s, int(&w["busy_ns"]) / 1e9);
        assert!(busy_s > 0.0, "{w}");
        // A running worker: not stuck, never was, its heartbeat fresh.
        assert_eq!(w["stuck"], false, "{w}");
        assert_eq!(get("worker_stuck", &at), 0.0);
        assert_eq!(get("worker_stalls_total", &at), int(&w["stalls"]));
        assert_eq!(int(&w["stalls"]), 0.0);
        let age = get("worker_heartbeat_age_seconds", &at);
        assert!((0.0..3.0).contains(&age), "heartbeat age {age}");
    }

    let fdb = &stats["fdb"];
    for (metric, field) in [
        ("fdb_entries", "entries"),
        ("fdb_learned_entries", "learned"),
        ("fdb_static_entries", "static"),
        ("fdb_local_entries", "local"),
        ("fdb_max_entries", "max_entries"),
        ("fdb_age_seconds", "age_s"),
        ("fdb_learned_total", "learned_total"),
        ("fdb_moves_total", "moves"),
        ("fdb_refused_total", "refused"),
        ("fdb_aged_total", "aged"),
        ("fdb_own_sources_total", "own_sources"),
    ] {
        assert_eq!(get(metric, &[]), int(&fdb[field]), "{metric}");
    }
    assert_eq!(get("fdb_local_entries", &[]), 2.0);
    assert!(get("fdb_learned_total", &[]) >= 2.0);

    let lockstat = &stats["lockstat"];
    assert_eq!(lockstat["enabled"], true);
    assert_eq!(get("lockstat_enabled", &[]), 1.0);
    let at = [("lock", lock)];
    let acquisitions = get("lock_acquisitions_total", &at);
    assert_eq!(acquisitions, int(&lockstat["acquisitions"]));
    assert!(acquisitions > 0.0);
    assert_eq!(
        get("lock_contended_total", &at),
        int(&lockstat["contended"])
    );
    let wait = get("lock_wait_seconds_total", &at);
    let wait_ns = lockstat["wait_ns"].as_u64().unwrap();
    assert!(
        (wait - wait_ns as f64 / 1e9).abs() < 1e-9,
        "{wait} {wait_ns}"
    );
}

fn other_requests_are_refused_and_the_server_stops_with_the_bridge() {
    let bridge = Netns::new();
    let port = free_port_in(&bridge);
    // A port alone: loopback.
    let metrics_arg = format!("--metrics={port}");
    let daemon = Daemon::start(
        &bridge,
        &["run", "--port", "tap:m0", "--port", "tap:m1", &metrics_arg],
    );
    let metrics = scrape(&bridge, port);
    assert_eq!(metrics.value("mpbridge_lockstat_enabled", &[]), Some(0.0));
    assert!(metrics
        .series("mpbridge_lock_acquisitions_total")
        .is_empty());
    assert_eq!(metrics.series("mpbridge_port_up").len(), 2);
    let cases = [
        ("GET / HTTP/1.1\r\n\r\n", 404),
        ("GET /metricsx HTTP/1.1\r\n\r\n", 404),
        ("GET /favicon.ico HTTP/1.0\r\n\r\n", 404),
        ("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        ("hello\r\n\r\n", 400),
    ];
    for (request, status) in cases {
        let response = exchange(&bridge, port, request.to_owned());
        assert_eq!(response.status, status, "{request:?}: {}", response.head);
    }
    let head = exchange(&bridge, port, "HEAD /metrics HTTP/1.1\r\n\r\n".to_owned());
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "y".repeat(9000));
    assert_eq!(exchange(&bridge, port, long).status, 431);
    // Still serving after all that.
    scrape(&bridge, port);

    let (status, log) = daemon.stop(Duration::from_secs(3));
    assert!(status.is_some_and(|s| s.success()), "{log:?}");
    let refused = bridge.run(move || {
        TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(2),
        )
        .is_err()
    });
    assert!(refused, "the endpoint outlived its bridge");
}

fn a_silent_or_slow_client_delays_a_scrape_by_at_most_the_timeout() {
    let bridge = Netns::new();
    let port = free_port_in(&bridge);
    let metrics_arg = format!("--metrics=127.0.0.1:{port}");
    let _daemon = Daemon::start(
        &bridge,
        &["run", "--port", "tap:s0", "--port", "tap:s1", &metrics_arg],
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // The socket stays in the namespace it was made in.
    let connect = move || TcpStream::connect(addr).expect("connect");

    // Silent: connects and sends nothing.
    let connected = Instant::now();
    let mut silent = bridge.run(connect);
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    scrape(&bridge, port);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    // ... and was closed after the timeout, not served.
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = silent.read_to_end(&mut rest);
    assert!(connected.elapsed() < Duration::from_secs(4));
    assert!(!String::from_utf8_lossy(&rest).contains("200 OK"));

    // Slow: one byte of a request every 300 ms, for longer than the timeout.
    let mut slow = bridge.run(connect);
    let trickle = std::thread::spawn(move || {
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" {
            if slow.write_all(&[*byte]).is_err() {
                return true; // closed by the server
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        false
    });
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    scrape(&bridge, port);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    assert!(trickle.join().unwrap(), "the slow client was not closed");

    // Many silent ones at once hold a scrape up for one timeout each at
    // most; a handful is served within a few timeouts.
    let idle: Vec<TcpStream> = (0..3).map(|_| bridge.run(connect)).collect();
    let started = Instant::now();
    scrape(&bridge, port);
    assert!(started.elapsed() < Duration::from_secs(8));
    drop(idle);
    // Once they are gone, scrapes are quick again.
    let started = Instant::now();
    scrape(&bridge, port);
    assert!(started.elapsed() < Duration::from_secs(1));
}

fn a_bad_metrics_address_is_refused_in_one_line() {
    for bad in ["127.0.0.1:http", "::1:9100", "0", "host:9100"] {
        let (status, err) = run_to_exit(
            None,
            &[
                "run",
                "--port",
                "tap:x0",
                "--port",
                "tap:x1",
                "--metrics",
                bad,
            ],
            Duration::from_secs(5),
        );
        assert_eq!(status.code(), Some(2), "{bad}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("'{bad}'")), "{err}");
    }
}

fn a_busy_metrics_address_fails_the_start_touching_no_port() {
    let bridge = Netns::new();
    let holder = bridge.run(|| TcpListener::bind("127.0.0.1:0").unwrap());
    let addr = holder.local_addr().unwrap().to_string();
    let (status, err) = run_to_exit(
        Some(&bridge),
        &[
            "run",
            "--port",
            "tap:b0",
            "--port",
            "tap:b1",
            "--metrics",
            &addr,
        ],
        Duration::from_secs(5),
    );
    assert!(!status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&addr), "{err}");
    for tap in ["b0", "b1"] {
        let shown = Command::new("ip")
            .args(["-n", &bridge.name, "link", "show", tap])
            .output()
            .unwrap();
        assert!(!shown.status.success(), "tap {tap} was made");
    }
    drop(holder);
}

lab::test_main! {
    privileged: [
        scrape_equals_stats_on_an_idle_bridge,
        other_requests_are_refused_and_the_server_stops_with_the_bridge,
        a_silent_or_slow_client_delays_a_scrape_by_at_most_the_timeout,
        a_busy_metrics_address_fails_the_start_touching_no_port,
    ],
    plain: [a_bad_metrics_address_is_refused_in_one_line],
}
