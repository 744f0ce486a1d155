//! The bridge's counters for Prometheus: `--metrics ADDR:PORT` serves
//! `GET /metrics` in the text exposition format (version 0.0.4), built from
//! the same `Stats` that the control socket's `stats` request returns, so
//! the two always agree. docs/control.md lists every metric.
//!
//! The exposition is written by the `prometheus-client` crate: each scrape
//! hands it a snapshot of `Stats` as a collector, which describes every
//! family and its samples.
//!
//! The HTTP side is `hyper`'s HTTP/1 server on a single-threaded `tokio`
//! runtime, in the metrics thread alone: it serves up to 32 clients at
//! once, each a task of that thread; for each, hyper reads a request head
//! (at most 8 KiB, else 431), the response is written whole and the
//! connection closed, all within 2 s, after which a silent or slow client
//! is dropped. A silent client delays nobody else; the stop flag is looked
//! at every 200 ms. docs/design.md says why these crates and not a
//! thread-per-connection server such as `tiny_http`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::Read;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::runtime::Runtime;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, LocalSet};

use crate::protocol::{Link, PortState, PortStats, Stats};

/// The longest request head read; a longer one gets 431.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request head, and to take the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the stop flag is looked at.
const TICK: Duration = Duration::from_millis(200);
/// The exposition format's media type.
const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The kind of a metric family.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn metric_type(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        }
    }
}

/// One sample's value.
#[derive(Clone, Copy)]
enum Value {
    /// An integer count or gauge, written exactly.
    Int(u64),
    /// A ratio or other fraction, rounded to three decimals.
    Ratio(f64),
    /// Nanoseconds, written as seconds.
    Nanos(u64),
}

impl Value {
    /// The value as a float, for the kinds that are not integers.
    fn as_f64(self) -> f64 {
        match self {
            Value::Int(n) => n as f64,
            Value::Ratio(x) => (x * 1000.0).round() / 1000.0,
            // The nearest float to the exact figure while it is below
            // 2^53 ns (104 days); its shortest form, which the encoder
            // writes, is the exact figure below 2^22 s (48 days).
            Value::Nanos(ns) => ns as f64 / 1e9,
        }
    }
}

/// A sample's label pairs.
type Labels<'a> = Vec<(&'a str, &'a str)>;

/// Writes family `name` (the registry prefixes `mpbridge_`) with `samples`,
/// each its label pairs and value; a family without samples is left out.
/// `name` is the family's whole name: for a counter it ends in `_total`,
/// which is taken off here because the encoder adds it to counters.
fn family<'a>(
    out: &mut DescriptorEncoder,
    name: &str,
    kind: Kind,
    help: &str,
    samples: impl IntoIterator<Item = (Labels<'a>, Value)>,
) -> std::fmt::Result {
    debug_assert!(
        (kind == Kind::Counter) == name.ends_with("_total"),
        "{name}: counters, and only counters, end in _total"
    );
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let base = match kind {
        Kind::Counter => name.strip_suffix("_total").unwrap_or(name),
        Kind::Gauge => name,
    };
    let mut metric = out.encode_descriptor(base, help, None, kind.metric_type())?;
    for (labels, value) in samples {
        let series = metric.encode_family(&labels)?;
        match (kind, value) {
            (Kind::Counter, Value::Int(n)) => ConstCounter::new(n).encode(series)?,
            (Kind::Counter, value) => ConstCounter::new(value.as_f64()).encode(series)?,
            (Kind::Gauge, Value::Int(n)) => ConstGauge::new(n).encode(series)?,
            (Kind::Gauge, value) => ConstGauge::new(value.as_f64()).encode(series)?,
        }
    }
    Ok(())
}

/// One scrape's figures, as the registry's collector.
#[derive(Debug)]
struct Snapshot(Stats);

impl Collector for Snapshot {
    fn encode(&self, mut out: DescriptorEncoder) -> std::fmt::Result {
        write_families(&mut out, &self.0)
    }
}

/// The exposition text of `stats`.
pub fn render(stats: &Stats) -> String {
    let mut registry = Registry::with_prefix("mpbridge");
    // A collector is kept by the registry, so it holds its own copy.
    registry.register_collector(Box::new(Snapshot(stats.clone())));
    let mut text = String::with_capacity(8 * 1024);
    prometheus_text::encode(&mut text, &registry).expect("a String takes any text");
    text
}

/// Spanning tree's families and the guards': per port with `--stp` or
/// `guard=on`, and the bridge's with `--stp`.
fn write_stp(out: &mut DescriptorEncoder, stats: &Stats) -> std::fmt::Result {
    let bridge = stats.name.as_str();
    let with_stp = || {
        stats
            .ports
            .iter()
            .filter_map(|port| Some((port, port.stp.as_ref()?)))
    };
    family(
        out,
        "port_stp_info",
        Kind::Gauge,
        "The port's spanning tree role and state (labels); always 1.",
        with_stp().filter_map(|(port, stp)| {
            let labels = vec![
                ("bridge", bridge),
                ("port", port.name.as_str()),
                ("role", stp.role.as_deref()?),
                ("state", stp.state.as_deref()?),
            ];
            Some((labels, Value::Int(1)))
        }),
    )?;
    type BpduField = fn(&crate::protocol::BpduCounts) -> u64;
    let bpdu_counters: [(&str, &str, BpduField); 5] = [
        ("port_bpdus_received_total", "BPDUs received.", |b| {
            b.rx_bpdus
        }),
        ("port_bpdus_sent_total", "BPDUs sent.", |b| b.tx_bpdus),
        (
            "port_tcns_received_total",
            "Topology change notifications received.",
            |b| b.rx_tcns,
        ),
        (
            "port_tcns_sent_total",
            "Topology change notifications sent.",
            |b| b.tx_tcns,
        ),
        ("port_bpdus_bad_total", "BPDUs refused as malformed.", |b| {
            b.bad_bpdus
        }),
    ];
    for (name, help, field) in bpdu_counters {
        let samples = with_stp().filter_map(|(port, stp)| {
            let labels = vec![("bridge", bridge), ("port", port.name.as_str())];
            Some((labels, Value::Int(field(stp.bpdus.as_ref()?))))
        });
        family(out, name, Kind::Counter, help, samples)?;
    }
    family(
        out,
        "port_guard_tripped",
        Kind::Gauge,
        "1 if a BPDU disabled the port (guard=on) and it was not enabled since, else 0.",
        with_stp().filter_map(|(port, stp)| {
            let labels = vec![("bridge", bridge), ("port", port.name.as_str())];
            Some((labels, Value::Int(u64::from(stp.guard_tripped?))))
        }),
    )?;
    family(
        out,
        "port_guard_trips_total",
        Kind::Counter,
        "Times a BPDU disabled the port (guard=on).",
        with_stp().filter_map(|(port, stp)| {
            let labels = vec![("bridge", bridge), ("port", port.name.as_str())];
            Some((labels, Value::Int(stp.guard_trips?)))
        }),
    )?;
    let Some(stp) = &stats.stp else {
        return Ok(());
    };
    let root_port = stp.root_port.as_deref().unwrap_or("");
    family(
        out,
        "stp_info",
        Kind::Gauge,
        "The bridge's spanning tree: its id, the root's id and the root port (empty on the root); always 1.",
        [(
            vec![
                ("bridge", bridge),
                ("bridge_id", stp.bridge_id.as_str()),
                ("root_id", stp.root_id.as_str()),
                ("root_port", root_port),
            ],
            Value::Int(1),
        )],
    )?;
    family(
        out,
        "stp_root_cost",
        Kind::Gauge,
        "The path cost to the root bridge.",
        [(
            vec![("bridge", bridge)],
            Value::Int(u64::from(stp.root_cost)),
        )],
    )?;
    family(
        out,
        "stp_topology_changes_total",
        Kind::Counter,
        "Topology changes detected or heard of.",
        [(vec![("bridge", bridge)], Value::Int(stp.topology_changes))],
    )?;
    family(
        out,
        "stp_tc_events_total",
        Kind::Counter,
        "Topology change events: changes detected, TCs and TCNs received.",
        [(vec![("bridge", bridge)], Value::Int(stp.tc_events))],
    )?;
    family(
        out,
        "stp_flush_requests_total",
        Kind::Counter,
        "Flushes of a port's learned stations that topology changes asked for.",
        [(vec![("bridge", bridge)], Value::Int(stp.flush_requests))],
    )?;
    family(
        out,
        "stp_flushes_total",
        Kind::Counter,
        "Flushes of a port's learned stations done, at most one per port a second.",
        [(vec![("bridge", bridge)], Value::Int(stp.flushes))],
    )
}

/// The owner thread's queue: what waits per lane, what was shed and why.
fn write_owner_queue(out: &mut DescriptorEncoder, stats: &Stats) -> std::fmt::Result {
    let bridge = stats.name.as_str();
    let q = &stats.owner_queue;
    family(
        out,
        "owner_queue_events",
        Kind::Gauge,
        "Events waiting for the owner thread, by lane (urgent: signals, link news, BPDUs; \
         control: requests; mcast: IGMP and MLD messages).",
        [
            ("urgent", q.urgent_queued),
            ("control", q.control_queued),
            ("mcast", q.mcast_queued),
        ]
        .map(|(lane, n)| {
            (
                vec![("bridge", bridge), ("lane", lane)],
                Value::Int(n as u64),
            )
        }),
    )?;
    family(
        out,
        "owner_queue_shed_total",
        Kind::Counter,
        "Events the owner's queue did not take, by lane and reason (over_budget: IGMP and MLD \
         messages beyond the bridge-wide budget per second; full: the lane was full).",
        [
            ("mcast", "over_budget", q.mcast_over_budget),
            ("mcast", "full", q.mcast_queue_full),
            ("urgent", "full", q.urgent_queue_full),
            ("control", "full", q.control_queue_full),
        ]
        .map(|(lane, reason, n)| {
            (
                vec![("bridge", bridge), ("lane", lane), ("reason", reason)],
                Value::Int(n),
            )
        }),
    )
}

/// Multicast snooping's families, with `--mcast-snooping`.
fn write_mcast(out: &mut DescriptorEncoder, stats: &Stats) -> std::fmt::Result {
    let Some(mcast) = &stats.mcast else {
        return Ok(());
    };
    let bridge = stats.name.as_str();
    family(
        out,
        "mcast_groups",
        Kind::Gauge,
        "Multicast groups with members (per VLAN and group).",
        [(vec![("bridge", bridge)], Value::Int(mcast.groups as u64))],
    )?;
    let messages = serde_json::to_value(mcast.messages).expect("counters serialise");
    let counts: Vec<(String, u64)> = messages
        .as_object()
        .map(|fields| {
            fields
                .iter()
                .map(|(name, n)| (name.clone(), n.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    family(
        out,
        "mcast_messages_total",
        Kind::Counter,
        "IGMP and MLD messages taken by snooping, by type and version (igmp_v2_reports, \
         mld_leaves, ...), queries sent (igmp_tx_queries, mld_tx_queries), parse errors, \
         groups refused at --mcast-hash-max (groups_refused) and at ports' mcast_max_groups \
         (max_groups_refused).",
        counts.iter().map(|(name, n)| {
            (
                vec![("bridge", bridge), ("message", name.as_str())],
                Value::Int(*n),
            )
        }),
    )?;
    let with_groups = || stats.ports.iter().filter(|p| p.mcast_n_groups.is_some());
    fn at<'a>(bridge: &'a str, port: &'a PortStats) -> Labels<'a> {
        vec![("bridge", bridge), ("port", port.name.as_str())]
    }
    let port_labels = |port| at(bridge, port);
    family(
        out,
        "port_mcast_groups",
        Kind::Gauge,
        "Multicast groups the port is a member of, over every VLAN (Linux's mcast_n_groups).",
        with_groups().map(|p| {
            (
                port_labels(p),
                Value::Int(u64::from(p.mcast_n_groups.unwrap_or(0))),
            )
        }),
    )?;
    family(
        out,
        "port_mcast_max_groups",
        Kind::Gauge,
        "The most multicast groups the port may be a member of (mcast_max_groups; 0: no limit).",
        with_groups().map(|p| {
            (
                port_labels(p),
                Value::Int(u64::from(p.mcast_max_groups.unwrap_or(0))),
            )
        }),
    )?;
    family(
        out,
        "port_mcast_max_groups_refused_total",
        Kind::Counter,
        "Groups a report asked for that the port's mcast_max_groups kept off it.",
        with_groups().map(|p| {
            (
                port_labels(p),
                Value::Int(p.mcast_max_groups_refused.unwrap_or(0)),
            )
        }),
    )?;
    let with_evpn = || {
        stats
            .ports
            .iter()
            .filter_map(|p| Some((p, p.evpn.as_ref()?)))
    };
    family(
        out,
        "port_evpn_local_macs",
        Kind::Gauge,
        "An EVPN port's local stations advertised (written to its mirror for FRR).",
        with_evpn().map(|(p, e)| (port_labels(p), Value::Int(e.local_macs as u64))),
    )?;
    family(
        out,
        "port_evpn_remote_macs",
        Kind::Gauge,
        "An EVPN port's remote stations installed from FRR (extern_learn entries).",
        with_evpn().map(|(p, e)| (port_labels(p), Value::Int(e.remote_macs as u64))),
    )?;
    family(
        out,
        "port_evpn_vteps",
        Kind::Gauge,
        "The VTEPs of an EVPN port's flood list, from FRR's type-3 routes.",
        with_evpn().map(|(p, e)| (port_labels(p), Value::Int(e.vteps.len() as u64))),
    )?;
    Ok(())
}

/// Every family of `stats`, in the order docs/control.md lists them.
fn write_families(out: &mut DescriptorEncoder, stats: &Stats) -> std::fmt::Result {
    let bridge = stats.name.as_str();
    let one = |value: Value| [(vec![("bridge", bridge)], value)];

    family(
        out,
        "info",
        Kind::Gauge,
        "The bridge: its name and MAC table lock strategy; always 1.",
        [(
            vec![("bridge", bridge), ("lock", stats.lock.as_str())],
            Value::Int(1),
        )],
    )?;
    family(
        out,
        "uptime_seconds",
        Kind::Gauge,
        "Seconds since the bridge started.",
        one(Value::Int(stats.uptime_s)),
    )?;

    type PortField = fn(&PortStats) -> u64;
    let port_counters: [(&str, &str, PortField); 9] = [
        (
            "port_rx_frames_total",
            "Frames received on the port.",
            |p| p.counters.rx_frames,
        ),
        (
            "port_rx_bytes_total",
            "Ethernet bytes received on the port (without the virtio-net header).",
            |p| p.counters.rx_bytes,
        ),
        ("port_tx_frames_total", "Frames sent on the port.", |p| {
            p.counters.tx_frames
        }),
        (
            "port_tx_bytes_total",
            "Ethernet bytes sent on the port.",
            |p| p.counters.tx_bytes,
        ),
        (
            "port_rx_oversize_total",
            "Frames received that were larger than a receive buffer.",
            |p| p.counters.rx_oversize,
        ),
        (
            "port_rx_errors_total",
            "Receive faults (one per event) and malformed frames.",
            |p| p.counters.rx_errors,
        ),
        (
            "port_tx_dropped_total",
            "Frames for the port that a full queue or a send fault dropped.",
            |p| p.counters.tx_dropped,
        ),
        (
            "port_tx_errors_total",
            "Frames the port refused one by one, and send faults (one per event).",
            |p| p.counters.tx_errors,
        ),
        (
            "port_moves_total",
            "Stations that moved onto the port from another.",
            |p| p.counters.moves,
        ),
    ];
    fn labels<'a>(bridge: &'a str, port: &'a PortStats) -> Labels<'a> {
        vec![("bridge", bridge), ("port", port.name.as_str())]
    }
    let port_labels = |port| labels(bridge, port);
    for (name, help, field) in port_counters {
        let samples = stats
            .ports
            .iter()
            .map(|port| (port_labels(port), Value::Int(field(port))));
        family(out, name, Kind::Counter, help, samples)?;
    }
    // The reasons from their own list, so that a new one is named here too.
    let reasons: Vec<&str> = bridge::DropReason::ALL.iter().map(|r| r.name()).collect();
    family(
        out,
        "port_drops_total",
        Kind::Counter,
        &format!(
            "Received frames not forwarded, by reason ({}).",
            reasons.join(", ")
        ),
        stats.ports.iter().flat_map(|port| {
            port.counters.drops_by_name().map(move |(reason, count)| {
                let mut labels = vec![("bridge", bridge), ("port", port.name.as_str())];
                labels.push(("reason", reason));
                (labels, Value::Int(count))
            })
        }),
    )?;
    family(
        out,
        "port_up",
        Kind::Gauge,
        "1 if the port's link is up (running), else 0 (down, deleted, or not visible).",
        stats.ports.iter().map(|port| {
            (
                port_labels(port),
                Value::Int(u64::from(port.link == Link::Up)),
            )
        }),
    )?;
    family(
        out,
        "port_forwarding",
        Kind::Gauge,
        "1 if every worker forwards on the port, else 0 (faulted or gone).",
        stats.ports.iter().map(|port| {
            let forwarding = port.state == PortState::Forwarding;
            (port_labels(port), Value::Int(u64::from(forwarding)))
        }),
    )?;

    write_stp(out, stats)?;
    write_mcast(out, stats)?;
    write_owner_queue(out, stats)?;

    let worker_ids: Vec<String> = stats.workers.iter().map(|w| w.id.to_string()).collect();
    let worker_labels =
        |index: usize| vec![("bridge", bridge), ("worker", worker_ids[index].as_str())];
    family(
        out,
        "worker_frames_total",
        Kind::Counter,
        "Frames the worker received, all ports together.",
        stats
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (worker_labels(i), Value::Int(w.frames))),
    )?;
    family(
        out,
        "worker_batches_total",
        Kind::Counter,
        "Batches the worker received and forwarded.",
        stats
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (worker_labels(i), Value::Int(w.batches))),
    )?;
    family(
        out,
        "worker_busy_ratio",
        Kind::Gauge,
        "Share of the bridge's uptime the worker spent receiving and forwarding rather than waiting (0 to 1).",
        stats
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (worker_labels(i), Value::Ratio(w.busy_percent / 100.0))),
    )?;
    family(
        out,
        "worker_busy_seconds_total",
        Kind::Counter,
        "Seconds the worker spent receiving and forwarding (rounds that found frames).",
        stats
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (worker_labels(i), Value::Nanos(w.busy_ns))),
    )?;
    family(
        out,
        "worker_stuck",
        Kind::Gauge,
        "1 if the worker's heartbeat stood still for longer than the watchdog allows (it is blocked and forwards nothing), else 0.",
        stats
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (worker_labels(i), Value::Int(u64::from(w.stuck)))),
    )?;
    family(
        out,
        "worker_heartbeat_age_seconds",
        Kind::Gauge,
        "Seconds since the owner last saw the worker's heartbeat move (under about 1 while it runs).",
        stats
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (worker_labels(i), Value::Ratio(w.heartbeat_age_s))),
    )?;
    family(
        out,
        "worker_stalls_total",
        Kind::Counter,
        "Times the worker became stuck.",
        stats
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| (worker_labels(i), Value::Int(w.stalls))),
    )?;

    let fdb = &stats.fdb;
    let fdb_gauges: [(&str, &str, u64); 6] = [
        (
            "fdb_entries",
            "MAC table entries now, of every state.",
            fdb.entries,
        ),
        (
            "fdb_learned_entries",
            "Learned MAC table entries now.",
            fdb.learned,
        ),
        (
            "fdb_static_entries",
            "Static MAC table entries now.",
            fdb.r#static,
        ),
        (
            "fdb_local_entries",
            "Local MAC table entries now (raw ports' own addresses).",
            fdb.local,
        ),
        (
            "fdb_max_entries",
            "The most learned stations (the learning limit; 0: none).",
            fdb.max_entries,
        ),
        (
            "fdb_age_seconds",
            "Seconds after which a silent station is forgotten.",
            u64::from(fdb.age_s),
        ),
    ];
    for (name, help, value) in fdb_gauges {
        family(out, name, Kind::Gauge, help, one(Value::Int(value)))?;
    }
    let fdb_counters: [(&str, &str, u64); 5] = [
        (
            "fdb_learned_total",
            "Stations learned since start.",
            fdb.totals.learned,
        ),
        ("fdb_moves_total", "Station moves since start.", fdb.totals.moved),
        (
            "fdb_refused_total",
            "New stations not learned at the learning limit (each once per batch).",
            fdb.totals.refused,
        ),
        ("fdb_aged_total", "Entries aged out since start.", fdb.totals.aged),
        (
            "fdb_own_sources_total",
            "Frames whose source was one of the bridge's own addresses, not learned (each once per batch).",
            fdb.totals.own_sources,
        ),
    ];
    for (name, help, value) in fdb_counters {
        family(out, name, Kind::Counter, help, one(Value::Int(value)))?;
    }

    family(
        out,
        "lock_set_failed_total",
        Kind::Counter,
        "lock set requests that failed with the bridge left on its strategy.",
        one(Value::Int(stats.lock_set_failed)),
    )?;

    let lock = &stats.lockstat;
    family(
        out,
        "lockstat_enabled",
        Kind::Gauge,
        "1 if the MAC table's lock statistics are counted (--lockstat), else 0.",
        one(Value::Int(u64::from(lock.enabled))),
    )?;
    if lock.enabled {
        let lock_families: [(&str, &str, Value); 3] = [
            (
                "lock_acquisitions_total",
                "Acquisitions of the MAC table's lock by the workers.",
                Value::Int(lock.acquisitions),
            ),
            (
                "lock_contended_total",
                "Acquisitions of the MAC table's lock that found it taken.",
                Value::Int(lock.contended),
            ),
            (
                "lock_wait_seconds_total",
                "Seconds the workers spent waiting for the MAC table's lock.",
                Value::Nanos(lock.wait_ns),
            ),
        ];
        for (name, help, value) in lock_families {
            let labels = vec![("bridge", bridge), ("lock", stats.lock.as_str())];
            family(out, name, Kind::Counter, help, [(labels, value)])?;
        }
    }
    Ok(())
}

/// The address `--metrics` listens on: `PORT` (on 127.0.0.1), `ADDR:PORT`
/// or `[ADDR6]:PORT`.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let invalid = || {
        format!(
            "invalid metrics address '{text}' (expected PORT, IPV4:PORT or [IPV6]:PORT, port 1 to 65535)"
        )
    };
    let addr = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 = text.parse().map_err(|_| invalid())?;
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    } else if let Some(port) = text.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| invalid())?;
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    } else {
        text.parse().map_err(|_| invalid())?
    };
    if addr.port() == 0 {
        return Err(invalid());
    }
    Ok(addr)
}

/// The listening socket of the metrics endpoint, and the runtime that will
/// serve it.
pub struct MetricsServer {
    listener: TcpListener,
    runtime: Runtime,
}

impl MetricsServer {
    /// Listens on `addr`; call it before privileges are dropped if the port
    /// is below 1024.
    pub fn bind(addr: SocketAddr) -> Result<MetricsServer, String> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("metrics on {addr}: {e}"))?;
        // One thread: the one that calls `serve`.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("metrics on {addr}: {e}"))?;
        Ok(MetricsServer { listener, runtime })
    }

    /// Where it listens (with the port chosen, if `bind` was given 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound socket has an address")
    }

    /// Serves scrapes until `stopped()` is true, up to [`MAX_CLIENTS`] at
    /// once on the calling thread, so that a silent or slow client delays
    /// nobody; `stats()` is asked once per scrape (`None`: the bridge is
    /// stopping). Every client still open is dropped when it returns.
    /// Meant as a thread's body.
    pub fn serve(self, stats: impl Fn() -> Option<Stats> + 'static, stopped: impl Fn() -> bool) {
        let MetricsServer { listener, runtime } = self;
        // The clients are tasks of this thread alone.
        let clients = LocalSet::new();
        clients.block_on(&runtime, accept(listener, Rc::new(stats), &stopped));
    }
}

/// The most scrapers served at once. With every place taken, a new client
/// takes the place of the one connected longest: a scrape is answered in
/// moments, so that one is the likeliest to be idle, and idle connections
/// never keep a scrape waiting.
const MAX_CLIENTS: usize = 32;

/// Takes clients, up to [`MAX_CLIENTS`] at once, each a task of its own,
/// until `stopped()`, which is looked at every [`TICK`].
async fn accept(
    listener: TcpListener,
    stats: Rc<dyn Fn() -> Option<Stats>>,
    stopped: &dyn Fn() -> bool,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            log::warn!("metrics: {e}");
            return;
        }
    };
    let slots = Rc::new(Slots {
        taken: Cell::new(0),
        freed: Notify::new(),
        clients: RefCell::new(VecDeque::new()),
        next_id: Cell::new(0),
    });
    while !stopped() {
        if slots.taken.get() >= MAX_CLIENTS {
            // The oldest makes room; its task ends at the runtime's next
            // turn, and its place is given back then.
            let oldest = slots.clients.borrow_mut().pop_front();
            if let Some((_, client)) = oldest {
                client.abort();
            }
            let _ = tokio::time::timeout(TICK, slots.freed.notified()).await;
            continue;
        }
        match tokio::time::timeout(TICK, listener.accept()).await {
            // A tick: look at the stop flag again.
            Err(_) => {}
            Ok(Ok((stream, _))) => {
                let slot = Slot::take(&slots);
                let id = slot.id;
                let task = tokio::task::spawn_local(serve_client(stream, Rc::clone(&stats), slot));
                slots
                    .clients
                    .borrow_mut()
                    .push_back((id, task.abort_handle()));
            }
            Ok(Err(e)) => {
                // Out of descriptors, say: try again a little later.
                log::warn!("metrics: accept: {e}");
                tokio::time::sleep(TICK).await;
            }
        }
    }
}

/// The clients being served, oldest first, and a wake-up when one is
/// done.
struct Slots {
    taken: Cell<usize>,
    freed: Notify,
    clients: RefCell<VecDeque<(u64, AbortHandle)>>,
    next_id: Cell<u64>,
}

/// One client's place among [`MAX_CLIENTS`], given back on drop.
struct Slot {
    slots: Rc<Slots>,
    id: u64,
}

impl Slot {
    fn take(slots: &Rc<Slots>) -> Slot {
        slots.taken.set(slots.taken.get() + 1);
        let id = slots.next_id.get();
        slots.next_id.set(id + 1);
        Slot {
            slots: Rc::clone(slots),
            id,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let slots = &self.slots;
        slots.taken.set(slots.taken.get() - 1);
        slots.clients.borrow_mut().retain(|(id, _)| *id != self.id);
        slots.freed.notify_one();
    }
}

/// Serves one connection: one request, then the connection is closed;
/// whatever the client does, it is done with in [`CLIENT_TIMEOUT`].
async fn serve_client(
    stream: tokio::net::TcpStream,
    stats: Rc<dyn Fn() -> Option<Stats>>,
    _slot: Slot,
) {
    // Replies are written whole; no need to wait to coalesce them.
    let _ = stream.set_nodelay(true);
    // A second descriptor of the socket keeps it open after hyper closes
    // its own, so that `linger` can end the connection gently.
    let keeper = stream.as_fd().try_clone_to_owned().map(TcpStream::from);
    let service = service_fn(move |request| {
        let response = respond(&request, &*stats);
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = http1::Builder::new()
        .keep_alive(false)
        // Also the longest request head: a longer one gets 431.
        .max_buf_size(MAX_HEAD)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(CLIENT_TIMEOUT, connection).await;
    if let Ok(mut keeper) = keeper {
        linger(&mut keeper);
    }
}

/// The response to `request`, a request hyper has read whole (hyper itself
/// answers one it cannot read: 400, or 431 for a head over [`MAX_HEAD`]).
fn respond(request: &Request<Incoming>, stats: &dyn Fn() -> Option<Stats>) -> Response<String> {
    if request.uri().path() != "/metrics" {
        return response(
            StatusCode::NOT_FOUND,
            TEXT,
            "Not found: the metrics are at /metrics.\n".to_owned(),
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut refused = response(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "Only GET and HEAD are allowed.\n".to_owned(),
        );
        let allow = HeaderValue::from_static("GET, HEAD");
        refused.headers_mut().insert(header::ALLOW, allow);
        return refused;
    }
    // hyper leaves out the body of a response to HEAD, not its length.
    match stats() {
        Some(stats) => response(StatusCode::OK, CONTENT_TYPE, render(&stats)),
        None => response(
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "The bridge is stopping.\n".to_owned(),
        ),
    }
}

/// The media type of the other responses' text.
const TEXT: &str = "text/plain; charset=utf-8";

/// A whole response; hyper adds its `Content-Length`.
fn response(status: StatusCode, content_type: &'static str, text: String) -> Response<String> {
    let mut response = Response::new(text);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Said to HTTP/1.0 clients too, whose connections close all the same.
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Ends the connection gently: sends FIN, and reads what the client sent
/// beyond its head, so that closing does not reset the connection (which
/// can discard the response before the client reads it).
fn linger(stream: &mut TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut buffer = [0u8; 2048];
    for _ in 0..32 {
        match stream.read(&mut buffer) {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{FdbStats, LockStats, WorkerStats};
    use std::io::{self, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    fn port(name: &str, base: u64, link: Link, state: PortState) -> PortStats {
        PortStats {
            vlans: None,
            vxlan: None,
            evpn: None,
            vhost: None,
            stp: None,
            flags: Default::default(),
            max_learned: None,
            owner: None,
            learned: 0,
            mcast_n_groups: None,
            mcast_max_groups: None,
            mcast_max_groups_refused: None,
            name: name.to_owned(),
            link,
            state,
            counters: bridge::counters::PortStats {
                rx_frames: base + 1,
                rx_bytes: base + 2,
                tx_frames: base + 3,
                tx_bytes: base + 4,
                drops: std::array::from_fn(|i| base + 10 + i as u64),
                rx_oversize: base + 5,
                rx_errors: base + 6,
                tx_dropped: base + 7,
                tx_errors: base + 8,
                moves: base + 9,
                refused: 0,
            },
        }
    }

    fn sample_stats() -> Stats {
        Stats {
            name: "br0".to_owned(),
            lock: "mutex".to_owned(),
            uptime_s: 4321,
            ports: vec![
                port("raw:eth1", 100, Link::Up, PortState::Forwarding),
                port("tap:vm0", 200_000_000_000, Link::Down, PortState::Faulted),
            ],
            workers: vec![WorkerStats {
                id: 0,
                frames: 77,
                batches: 12,
                busy_percent: 12.3,
                busy_ns: 1_500_000_000,
                stuck: true,
                heartbeat_age_s: 4.5,
                stalls: 2,
            }],
            fdb: FdbStats {
                entries: 9,
                learned: 5,
                r#static: 1,
                local: 3,
                max_entries: 8192,
                age_s: 300,
                totals: bridge::fdb::FdbStatsSnapshot {
                    learned: 40,
                    moved: 7,
                    refused: 2,
                    aged: 31,
                    own_sources: 4,
                },
            },
            lockstat: LockStats {
                enabled: true,
                acquisitions: 1000,
                contended: 10,
                wait_ns: 1_500_000_007,
            },
            lock_set_failed: 0,
            stp: None,
            mcast: None,
            owner_queue: Default::default(),
        }
    }

    #[test]
    fn the_owner_queue_is_exposed() {
        let mut stats = sample_stats();
        stats.owner_queue = crate::protocol::OwnerQueueStats {
            mcast_queued: 12,
            mcast_over_budget: 34,
            mcast_queue_full: 5,
            urgent_queue_full: 1,
            ..Default::default()
        };
        let text = render(&stats);
        let e = lab::prometheus::parse(&text).unwrap();
        let lane = |lane| [("bridge", "br0"), ("lane", lane)];
        assert_eq!(
            e.value("mpbridge_owner_queue_events", &lane("mcast")),
            Some(12.0)
        );
        assert_eq!(
            e.value("mpbridge_owner_queue_events", &lane("control")),
            Some(0.0)
        );
        let shed = |lane, reason| {
            e.value(
                "mpbridge_owner_queue_shed_total",
                &[("bridge", "br0"), ("lane", lane), ("reason", reason)],
            )
        };
        assert_eq!(shed("mcast", "over_budget"), Some(34.0));
        assert_eq!(shed("mcast", "full"), Some(5.0));
        assert_eq!(shed("urgent", "full"), Some(1.0));
        assert_eq!(shed("control", "full"), Some(0.0));
    }

    #[test]
    fn multicast_snooping_is_exposed() {
        let mut stats = sample_stats();
        assert!(!render(&stats).contains("mpbridge_mcast_"));
        stats.mcast = Some(crate::protocol::McastStats {
            enabled: true,
            groups: 3,
            messages: bridge::mcast::SnoopStats {
                igmp_v2_reports: 7,
                mld_tx_queries: 2,
                ..Default::default()
            },
        });
        let text = render(&stats);
        let e = lab::prometheus::parse(&text).unwrap();
        let bridge = [("bridge", "br0")];
        assert_eq!(e.value("mpbridge_mcast_groups", &bridge), Some(3.0));
        let message = |name| {
            e.value(
                "mpbridge_mcast_messages_total",
                &[("bridge", "br0"), ("message", name)],
            )
        };
        assert_eq!(message("igmp_v2_reports"), Some(7.0));
        assert_eq!(message("mld_tx_queries"), Some(2.0));
        assert_eq!(message("igmp_leaves"), Some(0.0));
        assert_eq!(message("max_groups_refused"), Some(0.0));
        // Per port, where snooping gave the figures.
        assert!(!text.contains("mpbridge_port_mcast_groups{"));
        stats.ports[0].mcast_n_groups = Some(2);
        stats.ports[0].mcast_max_groups = Some(2);
        stats.ports[0].mcast_max_groups_refused = Some(5);
        let text = render(&stats);
        let e = lab::prometheus::parse(&text).unwrap();
        let port = [("bridge", "br0"), ("port", stats.ports[0].name.as_str())];
        assert_eq!(e.value("mpbridge_port_mcast_groups", &port), Some(2.0));
        assert_eq!(e.value("mpbridge_port_mcast_max_groups", &port), Some(2.0));
        assert_eq!(
            e.value("mpbridge_port_mcast_max_groups_refused_total", &port),
            Some(5.0)
        );
        let other = [("bridge", "br0"), ("port", stats.ports[1].name.as_str())];
        assert_eq!(e.value("mpbridge_port_mcast_groups", &other), None);
    }

    #[test]
    fn spanning_tree_and_guards_are_exposed() {
        let mut stats = sample_stats();
        stats.stp = Some(crate::protocol::BridgeStp {
            bridge_id: "8000.02ac00000001".to_owned(),
            root_id: "1000.02ac00000009".to_owned(),
            root_port: Some("raw:eth1".to_owned()),
            root_cost: 2000,
            topology_changes: 3,
            topology_change: false,
            tc_events: 40,
            flush_requests: 80,
            flushes: 6,
        });
        stats.ports[0].stp = Some(crate::protocol::PortStp {
            role: Some("root".to_owned()),
            state: Some("forwarding".to_owned()),
            guard_tripped: None,
            guard_trips: None,
            rstp: Some(false),
            bpdus: Some(crate::protocol::BpduCounts {
                rx_bpdus: 11,
                tx_bpdus: 12,
                rx_tcns: 1,
                tx_tcns: 2,
                bad_bpdus: 0,
            }),
            flushes: None,
        });
        stats.ports[1].stp = Some(crate::protocol::PortStp {
            role: None,
            state: None,
            guard_tripped: Some(true),
            guard_trips: Some(1),
            rstp: None,
            bpdus: None,
            flushes: None,
        });
        let e = checked(&stats);
        let get = |name: &str, labels: &[(&str, &str)]| {
            e.value(&format!("mpbridge_{name}"), labels)
                .unwrap_or_else(|| panic!("no {name} {labels:?}"))
        };
        let eth1 = [("bridge", "br0"), ("port", "raw:eth1")];
        let vm0 = [("bridge", "br0"), ("port", "tap:vm0")];
        let info = [
            ("bridge", "br0"),
            ("port", "raw:eth1"),
            ("role", "root"),
            ("state", "forwarding"),
        ];
        assert_eq!(get("port_stp_info", &info), 1.0);
        assert_eq!(get("port_bpdus_received_total", &eth1), 11.0);
        assert_eq!(get("port_tcns_sent_total", &eth1), 2.0);
        assert_eq!(get("port_guard_tripped", &vm0), 1.0);
        assert_eq!(get("port_guard_trips_total", &vm0), 1.0);
        assert!(e
            .value("mpbridge_port_bpdus_received_total", &vm0)
            .is_none());
        let bridge = [
            ("bridge", "br0"),
            ("bridge_id", "8000.02ac00000001"),
            ("root_id", "1000.02ac00000009"),
            ("root_port", "raw:eth1"),
        ];
        assert_eq!(get("stp_info", &bridge), 1.0);
        assert_eq!(get("stp_root_cost", &[("bridge", "br0")]), 2000.0);
        assert_eq!(get("stp_topology_changes_total", &[("bridge", "br0")]), 3.0);
        assert_eq!(get("stp_tc_events_total", &[("bridge", "br0")]), 40.0);
        assert_eq!(get("stp_flush_requests_total", &[("bridge", "br0")]), 80.0);
        assert_eq!(get("stp_flushes_total", &[("bridge", "br0")]), 6.0);
        // Without spanning tree or guards, none of the families shows.
        let plain = render(&sample_stats());
        for family in [
            "mpbridge_stp_",
            "mpbridge_port_stp_",
            "mpbridge_port_guard",
            "bpdus",
        ] {
            assert!(!plain.contains(family), "{family} without spanning tree");
        }
    }

    fn checked(stats: &Stats) -> lab::prometheus::Exposition {
        let text = render(stats);
        lab::prometheus::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn renders_a_valid_exposition() {
        let e = checked(&sample_stats());
        for (name, family) in &e.families {
            assert!(name.starts_with("mpbridge_"), "{name}");
            assert_eq!(family.kind == "counter", name.ends_with("_total"), "{name}");
        }
        for sample in &e.samples {
            assert_eq!(sample.labels["bridge"], "br0", "{sample:?}");
        }
        // Every family of docs/control.md, and no other.
        let names: Vec<&str> = e.families.keys().map(String::as_str).collect();
        let want = [
            "mpbridge_fdb_age_seconds",
            "mpbridge_fdb_aged_total",
            "mpbridge_fdb_entries",
            "mpbridge_fdb_learned_entries",
            "mpbridge_fdb_learned_total",
            "mpbridge_fdb_local_entries",
            "mpbridge_fdb_max_entries",
            "mpbridge_fdb_moves_total",
            "mpbridge_fdb_own_sources_total",
            "mpbridge_fdb_refused_total",
            "mpbridge_fdb_static_entries",
            "mpbridge_info",
            "mpbridge_lock_acquisitions_total",
            "mpbridge_lock_contended_total",
            "mpbridge_lock_set_failed_total",
            "mpbridge_lock_wait_seconds_total",
            "mpbridge_lockstat_enabled",
            "mpbridge_owner_queue_events",
            "mpbridge_owner_queue_shed_total",
            "mpbridge_port_drops_total",
            "mpbridge_port_forwarding",
            "mpbridge_port_moves_total",
            "mpbridge_port_rx_bytes_total",
            "mpbridge_port_rx_errors_total",
            "mpbridge_port_rx_frames_total",
            "mpbridge_port_rx_oversize_total",
            "mpbridge_port_tx_bytes_total",
            "mpbridge_port_tx_dropped_total",
            "mpbridge_port_tx_errors_total",
            "mpbridge_port_tx_frames_total",
            "mpbridge_port_up",
            "mpbridge_uptime_seconds",
            "mpbridge_worker_batches_total",
            "mpbridge_worker_busy_ratio",
            "mpbridge_worker_busy_seconds_total",
            "mpbridge_worker_frames_total",
            "mpbridge_worker_heartbeat_age_seconds",
            "mpbridge_worker_stalls_total",
            "mpbridge_worker_stuck",
        ];
        assert_eq!(names, want);
        let docs = include_str!("../../docs/control.md");
        for name in want {
            assert!(docs.contains(&format!("`{name}`")), "{name} not in docs");
        }
    }

    #[test]
    fn values_are_the_stats() {
        let stats = sample_stats();
        let e = checked(&stats);
        let get = |name: &str, labels: &[(&str, &str)]| {
            e.value(&format!("mpbridge_{name}"), labels)
                .unwrap_or_else(|| panic!("no {name} {labels:?}"))
        };
        for p in &stats.ports {
            let at = [("port", p.name.as_str())];
            let p = &p.counters;
            let fields = [
                ("port_rx_frames_total", p.rx_frames),
                ("port_rx_bytes_total", p.rx_bytes),
                ("port_tx_frames_total", p.tx_frames),
                ("port_tx_bytes_total", p.tx_bytes),
                ("port_rx_oversize_total", p.rx_oversize),
                ("port_rx_errors_total", p.rx_errors),
                ("port_tx_dropped_total", p.tx_dropped),
                ("port_tx_errors_total", p.tx_errors),
                ("port_moves_total", p.moves),
            ];
            for (name, want) in fields {
                assert_eq!(get(name, &at), want as f64, "{name} {}", at[0].1);
            }
            for (reason, count) in p.drops_by_name() {
                let labels = [at[0], ("reason", reason)];
                assert_eq!(get("port_drops_total", &labels), count as f64);
            }
            let reasons = bridge::DropReason::ALL.len();
            assert_eq!(e.series("mpbridge_port_drops_total").len(), 2 * reasons);
        }
        assert_eq!(get("port_up", &[("port", "raw:eth1")]), 1.0);
        assert_eq!(get("port_up", &[("port", "tap:vm0")]), 0.0);
        assert_eq!(get("port_forwarding", &[("port", "raw:eth1")]), 1.0);
        assert_eq!(get("port_forwarding", &[("port", "tap:vm0")]), 0.0);
        assert_eq!(get("worker_frames_total", &[("worker", "0")]), 77.0);
        assert_eq!(get("worker_batches_total", &[("worker", "0")]), 12.0);
        assert_eq!(get("worker_busy_ratio", &[("worker", "0")]), 0.123);
        assert_eq!(get("worker_stuck", &[("worker", "0")]), 1.0);
        assert_eq!(get("worker_heartbeat_age_seconds", &[("worker", "0")]), 4.5);
        assert_eq!(get("worker_stalls_total", &[("worker", "0")]), 2.0);
        let fdb = &stats.fdb;
        let table = [
            ("fdb_entries", fdb.entries),
            ("fdb_learned_entries", fdb.learned),
            ("fdb_static_entries", fdb.r#static),
            ("fdb_local_entries", fdb.local),
            ("fdb_max_entries", fdb.max_entries),
            ("fdb_age_seconds", u64::from(fdb.age_s)),
            ("fdb_learned_total", fdb.totals.learned),
            ("fdb_moves_total", fdb.totals.moved),
            ("fdb_refused_total", fdb.totals.refused),
            ("fdb_aged_total", fdb.totals.aged),
            ("fdb_own_sources_total", fdb.totals.own_sources),
            ("uptime_seconds", stats.uptime_s),
            ("lockstat_enabled", 1),
        ];
        for (name, want) in table {
            assert_eq!(get(name, &[]), want as f64, "{name}");
        }
        let lock = [("lock", "mutex")];
        assert_eq!(get("lock_acquisitions_total", &lock), 1000.0);
        assert_eq!(get("lock_contended_total", &lock), 10.0);
        assert_eq!(get("lock_wait_seconds_total", &lock), 1.500000007);
        assert_eq!(get("info", &lock), 1.0);
        // Exact in the text, too: no float rounding of counters.
        let text = render(&stats);
        assert!(text.contains(
            "mpbridge_port_rx_frames_total{bridge=\"br0\",port=\"tap:vm0\"} 200000000001\n"
        ));
        assert!(text.contains(
            "mpbridge_lock_wait_seconds_total{bridge=\"br0\",lock=\"mutex\"} 1.500000007\n"
        ));
        assert!(text.contains("mpbridge_worker_busy_ratio{bridge=\"br0\",worker=\"0\"} 0.123\n"));
        assert!(
            text.contains("mpbridge_worker_busy_seconds_total{bridge=\"br0\",worker=\"0\"} 1.5\n")
        );
    }

    #[test]
    fn lock_figures_only_when_counted() {
        let mut stats = sample_stats();
        stats.lockstat = LockStats {
            enabled: false,
            acquisitions: 0,
            contended: 0,
            wait_ns: 0,
        };
        let e = checked(&stats);
        assert_eq!(e.value("mpbridge_lockstat_enabled", &[]), Some(0.0));
        assert!(e.series("mpbridge_lock_acquisitions_total").is_empty());
        assert!(!e.families.contains_key("mpbridge_lock_wait_seconds_total"));
    }

    #[test]
    fn label_values_are_escaped() {
        let mut stats = sample_stats();
        stats.name = "a\\b\"c\nd".to_owned();
        stats.ports[0].name = "raw:\"x\"".to_owned();
        let text = render(&stats);
        assert!(text.contains(r#"bridge="a\\b\"c\nd""#), "{text}");
        assert!(text.contains(r#"port="raw:\"x\"""#), "{text}");
        assert_eq!(text.lines().count(), checked(&stats).samples.len() + 2 * 39);
        let e = checked(&stats);
        assert_eq!(
            e.value("mpbridge_port_moves_total", &[("port", "raw:\"x\"")]),
            Some(109.0)
        );
        assert!(e.samples.iter().all(|s| s.labels["bridge"] == stats.name));
    }

    #[test]
    fn values_are_written_as_prometheus_reads_them() {
        /// The value of the first sample of `name`, as written.
        fn written(text: &str, name: &str) -> String {
            let line = text
                .lines()
                .find(|line| line.starts_with(&format!("mpbridge_{name}{{")))
                .unwrap_or_else(|| panic!("no {name}: {text}"));
            line.rsplit(' ').next().unwrap().to_owned()
        }
        let mut stats = sample_stats();
        stats.ports[0].counters.rx_bytes = u64::MAX;
        stats.fdb.max_entries = u64::MAX;
        let text = render(&stats);
        assert_eq!(
            written(&text, "port_rx_bytes_total"),
            "18446744073709551615"
        );
        assert_eq!(written(&text, "fdb_max_entries"), "18446744073709551615");
        // Seconds from nanoseconds and the busy share: floats, in their
        // shortest form, exact to the nanosecond (below 2^22 s) and to the
        // three decimals kept.
        let cases = [
            (0, 0.0, "0.0", "0.0"),
            (12, 100.0, "1.2e-8", "1.0"),
            (3_000_000_000, 50.0, "3.0", "0.5"),
            (1_500_000_007, 12.3456, "1.500000007", "0.123"),
            (4_194_303_999_999_999, 99.9999, "4194303.999999999", "1.0"),
            (1, f64::NAN, "1e-9", "NaN"),
        ];
        for (wait_ns, busy_percent, wait, busy) in cases {
            stats.lockstat.wait_ns = wait_ns;
            stats.workers[0].busy_percent = busy_percent;
            let text = render(&stats);
            assert_eq!(written(&text, "lock_wait_seconds_total"), wait, "{wait_ns}");
            assert_eq!(written(&text, "worker_busy_ratio"), busy, "{busy_percent}");
            checked(&stats);
        }
    }

    #[test]
    fn listen_addresses() {
        let ok = [
            ("9100", "127.0.0.1:9100"),
            ("65535", "127.0.0.1:65535"),
            ("localhost:9100", "127.0.0.1:9100"),
            ("0.0.0.0:9100", "0.0.0.0:9100"),
            ("192.0.2.7:80", "192.0.2.7:80"),
            ("[::1]:9100", "[::1]:9100"),
            ("[::]:9100", "[::]:9100"),
        ];
        for (text, want) in ok {
            assert_eq!(parse_listen(text), Ok(want.parse().unwrap()), "{text}");
        }
        for text in [
            "",
            "0",
            "65536",
            "-1",
            ":9100",
            "::1:9100",
            "[::1]",
            "1.2.3.4",
            "1.2.3.4:0",
            "host:9100",
            "9100 ",
            "1.2.3.4:x",
            "[::1]:99999",
        ] {
            let error = parse_listen(text).expect_err(text);
            assert!(error.contains(&format!("'{text}'")), "{error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }

    /// A server on a free loopback port, serving `sample_stats` (or, with
    /// `stopping`, answering as a stopping bridge does); stopped and joined
    /// on drop.
    struct Running {
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Running {
        fn start() -> Running {
            Running::serving(|| Some(sample_stats()))
        }

        fn stopping() -> Running {
            Running::serving(|| None)
        }

        fn serving(stats: fn() -> Option<Stats>) -> Running {
            let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let addr = server.local_addr();
            let stop = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&stop);
            let thread = std::thread::spawn(move || {
                server.serve(stats, move || flag.load(Ordering::Relaxed))
            });
            Running {
                addr,
                stop,
                thread: Some(thread),
            }
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// Sends `request` and reads the whole response.
    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(request).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    #[test]
    fn serves_scrapes_and_refuses_the_rest() {
        let server = Running::start();
        let response = exchange(server.addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains(&format!("\r\nContent-Type: {CONTENT_TYPE}")),
            "{head}"
        );
        assert!(
            head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())),
            "{head}"
        );
        assert!(head.contains("\r\nConnection: close"), "{head}");
        assert_eq!(body, render(&sample_stats()));
        let head_only = exchange(server.addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head_only.ends_with("\r\n\r\n"), "{head_only}");
        assert!(
            head_only.contains(&format!("\r\nContent-Length: {}\r\n", body.len())),
            "{head_only}"
        );
        let cases: [(&[u8], &str); 4] = [
            (b"GET / HTTP/1.1\r\n\r\n", "404"),
            (b"DELETE /metrics HTTP/1.1\r\n\r\n", "405"),
            (b"nonsense\r\n\r\n", "400"),
            (&[b'a'; 9000], "431"),
        ];
        for (request, status) in cases {
            let response = exchange(server.addr, request);
            assert!(
                response.starts_with(&format!("HTTP/1.1 {status} ")),
                "{response}"
            );
            assert!(response.contains("\r\nConnection: close\r\n"), "{response}");
        }
        let refused = exchange(server.addr, b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(refused.contains("\r\nAllow: GET, HEAD\r\n"), "{refused}");
    }

    #[test]
    fn request_heads() {
        let server = Running::start();
        // The status each head gets, and the version of the status line: a
        // request of HTTP/1.0 is answered in HTTP/1.0.
        let cases: [(&[u8], &str); 11] = [
            (b"GET /metrics HTTP/1.1\r\nHost: x", "HTTP/1.1 200"),
            (b"GET /metrics?name[]=x HTTP/1.0", "HTTP/1.0 200"),
            (b"GET /metrics HTTP/1.1\nHost: x\n", "HTTP/1.1 200"),
            (b"HEAD /metrics HTTP/1.1", "HTTP/1.1 200"),
            (b"POST /metrics HTTP/1.1", "HTTP/1.1 405"),
            (b"GET / HTTP/1.1", "HTTP/1.1 404"),
            (b"GET /metrics/ HTTP/1.1", "HTTP/1.1 404"),
            (b"GET /metrics", "HTTP/1.1 400"),
            (b"GET /metrics HTTP/2.0", "HTTP/1.1 400"),
            (b"\xff\xfe", "HTTP/1.1 400"),
            (b"GET /metrics HTTP/1.1\r\nbad header", "HTTP/1.1 400"),
        ];
        for (head, want) in cases {
            let mut request = head.to_vec();
            request.extend_from_slice(b"\r\n\r\n");
            let response = exchange(server.addr, &request);
            assert!(
                response.starts_with(&format!("{want} ")),
                "{:?}: {response}",
                String::from_utf8_lossy(head)
            );
        }
        // HTTP/2 with prior knowledge: closed unanswered.
        let response = exchange(server.addr, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        assert_eq!(response, "");
        // A head of just under 8 KiB is read; one over it is not.
        let long = |n| format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "y".repeat(n));
        assert!(exchange(server.addr, long(8000).as_bytes()).starts_with("HTTP/1.1 200 "));
        assert!(exchange(server.addr, long(8200).as_bytes()).starts_with("HTTP/1.1 431 "));
    }

    #[test]
    fn a_stopping_bridge_gets_503() {
        let server = Running::stopping();
        let response = exchange(server.addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(
            response.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{response}"
        );
        assert!(
            response.ends_with("\r\n\r\nThe bridge is stopping.\n"),
            "{response}"
        );
    }

    #[test]
    fn silent_clients_delay_no_scrape() {
        let server = Running::start();
        let connected = Instant::now();
        let silent: Vec<TcpStream> = (0..10)
            .map(|_| TcpStream::connect(server.addr).unwrap())
            .collect();
        // Let the server take the silent ones first.
        std::thread::sleep(Duration::from_millis(300));
        let response = exchange(server.addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        // Served while every silent client was still open: none had been
        // dropped to make way for it (a client whose time ran out, on a
        // machine slow enough, may be closed by its timeout alone).
        for mut client in silent {
            assert_open_within_its_time(&mut client, connected);
        }
    }

    /// Asserts that `client`, connected at `connected`, is open, unless its
    /// [`CLIENT_TIMEOUT`] has passed: the one thing besides making room
    /// that closes a silent client.
    fn assert_open_within_its_time(client: &mut TcpStream, connected: Instant) {
        client.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let read = client.read(&mut byte);
        let open = matches!(&read, Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        assert!(
            open || connected.elapsed() >= CLIENT_TIMEOUT,
            "a silent client was closed within its time: {read:?}"
        );
    }

    #[test]
    fn more_silent_clients_than_places_make_room_oldest_first() {
        let server = Running::start();
        let connected = Instant::now();
        let mut silent: Vec<TcpStream> = (0..MAX_CLIENTS + 8)
            .map(|_| TcpStream::connect(server.addr).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        // Each client beyond the places takes the place of the oldest, the
        // scrape too.
        let response = exchange(server.addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        let oldest = &mut silent[0];
        oldest
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert!(
            matches!(oldest.read(&mut byte), Ok(0) | Err(_)),
            "the oldest silent client is still open"
        );
        // The newest ones keep their places.
        assert_open_within_its_time(silent.last_mut().unwrap(), connected);
    }

    #[test]
    fn a_slow_client_is_closed_after_the_timeout() {
        let server = Running::start();
        let mut slow = TcpStream::connect(server.addr).unwrap();
        let started = Instant::now();
        // One byte of a request every 300 ms, for longer than the timeout.
        let closed = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
            .iter()
            .any(|byte| {
                std::thread::sleep(Duration::from_millis(300));
                slow.write_all(&[*byte]).is_err()
            });
        assert!(closed, "never closed");
        // Not before its time: the timeout is the server's whole rule.
        assert!(
            started.elapsed() >= CLIENT_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn stops_with_a_client_open() {
        let server = Running::start();
        let _silent = TcpStream::connect(server.addr).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let addr = server.addr;
        // Joins the serving thread, which a silent client does not hold.
        drop(server);
        // And the endpoint is gone with it.
        assert!(TcpStream::connect(addr).is_err());
    }
}
