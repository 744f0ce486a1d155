//! The control protocol: JSON lines over a unix stream socket, one request
//! and one reply per line, each carrying the protocol version. docs/control.md
//! documents every request and reply; the types here are that document's
//! source of truth, shared by the daemon and the client.
//!
//! A station's address and an entry's VLAN travel as the checked types
//! `StationMac` (a string) and `FdbVlan` (a number), whose serde impls (the
//! bridge crate's `serde` feature) refuse what their `FromStr` refuses,
//! with the same text: a request carrying one is well-formed by the time
//! it is a `Request`.

use bridge::vlan::FdbVlan;
use bridge::wire::StationMac;
use locks::StrategyKind;
use serde::{Deserialize, Serialize};

use crate::ports::PortSpec;

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// The longest request line the daemon reads.
pub const MAX_LINE: usize = 64 * 1024;

/// The socket of bridge `name` when `--ctl` does not give one.
pub fn default_socket(name: &str) -> std::path::PathBuf {
    std::path::Path::new("/run/mpbridge").join(format!("{name}.sock"))
}

/// One request line: `{"version":1,"command":"fdb-show",...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestLine {
    /// The protocol version the client speaks.
    pub version: u32,
    /// What it asks.
    #[serde(flatten)]
    pub request: Request,
}

/// Reads one request line (without its newline) as the daemon does: the
/// request, or the reply (one line, `ok` false) that refuses it: not JSON,
/// not a request, or another protocol version.
pub fn read_request(line: &[u8]) -> Result<Request, ReplyLine> {
    let request: RequestLine = serde_json::from_slice(line)
        .map_err(|error| ReplyLine::error(format!("bad request: {error}")))?;
    if request.version != VERSION {
        return Err(ReplyLine::error(format!(
            "protocol version {} not spoken here (this daemon speaks {VERSION})",
            request.version
        )));
    }
    Ok(request.request)
}

/// What a client can ask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Request {
    /// The MAC table, optionally one port's or one VLAN's entries.
    FdbShow {
        /// A port, as given to `--port` (or its interface name).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<String>,
        /// A VLAN (0: untagged).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vlan: Option<FdbVlan>,
    },
    /// Adds (or replaces) a static entry.
    FdbAdd {
        /// The station's address.
        mac: StationMac,
        /// Its port.
        port: String,
        /// Its VLAN (0: untagged).
        #[serde(default)]
        vlan: FdbVlan,
        /// On a VXLAN port: the VTEP behind which the station is (a static
        /// remote entry).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst: Option<String>,
    },
    /// Removes a learned or static entry.
    FdbDel {
        /// The station's address.
        mac: StationMac,
        /// Its VLAN (0: untagged).
        #[serde(default)]
        vlan: FdbVlan,
    },
    /// Removes learned entries, of one port or all.
    FdbFlush {
        /// The port, or every port when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<String>,
    },
    /// Counters of ports, workers, the table and the lock.
    Stats,
    /// Adds a port while the bridge runs.
    PortAdd {
        /// As `--port` takes it: `tap:NAME`, `raw:IFNAME`, `vxlan:NAME,...`
        /// or `vhost:PATH`, with options; a string on the wire.
        #[serde(with = "as_text")]
        port: PortSpec,
        /// Whom the port is for, when a container's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<PortOwner>,
    },
    /// Streams a port's frames as pcapng after the reply line, until
    /// `count` frames or the client closes.
    Capture {
        /// The port, as given to `--port` (or its interface name).
        port: String,
        /// "in", "out" or "both" (the default).
        #[serde(default)]
        direction: CaptureDirection,
        /// Stop after this many frames.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u64>,
        /// Only the frames of this worker's queue.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue: Option<usize>,
    },
    /// Reads the configuration file again and applies what changed in
    /// ports and static entries.
    Reload,
    /// Moves the MAC table to another lock strategy while traffic flows.
    LockSet {
        /// mutex, rwlock, rmlock, sharded, rcu or epoch; a string on the
        /// wire.
        #[serde(with = "as_text")]
        lock: StrategyKind,
    },
    /// Removes a port while the bridge runs.
    PortDel {
        /// The port, as given to `--port` (or its interface name).
        port: String,
    },
    /// The ports with their options.
    PortShow,
    /// Enables a port its BPDU guard disabled.
    PortEnable {
        /// The port, as given to `--port` (or its interface name).
        port: String,
    },
    /// Multicast snooping's groups, router ports and queriers.
    MdbShow,
}

/// A value that travels as the text the command line takes: written with
/// its `Display`, read with its `FromStr`, whose error is the reply's.
mod as_text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: Display, S: Serializer>(value: &T, out: S) -> Result<S::Ok, S::Error> {
        out.collect_str(value)
    }

    pub fn deserialize<'de, T, D>(input: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let text = String::deserialize(input)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Request {
    /// Whether the request changes the bridge, so that a read-only client
    /// (`--ctl-ro-group`) may not send it.
    pub fn changes(&self) -> bool {
        !matches!(
            self,
            Request::FdbShow { .. } | Request::Stats | Request::PortShow | Request::MdbShow
        )
    }
}

/// One reply line: `{"version":1,"ok":true,"result":...}` or
/// `{"version":1,"ok":false,"error":"..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyLine {
    /// The protocol version the daemon speaks.
    pub version: u32,
    /// Whether the request was carried out.
    pub ok: bool,
    /// Its result, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why not, when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ReplyLine {
    /// A reply carrying `result`.
    pub fn ok(result: serde_json::Value) -> ReplyLine {
        ReplyLine {
            version: VERSION,
            ok: true,
            result: Some(result),
            error: None,
        }
    }

    /// A reply saying why a request failed.
    pub fn error(message: impl Into<String>) -> ReplyLine {
        ReplyLine {
            version: VERSION,
            ok: false,
            result: None,
            error: Some(message.into()),
        }
    }
}

/// The `result` of a successful request, one type per request: the daemon
/// writes it, the client reads the type its request expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Response {
    /// `fdb-show`.
    Fdb(Vec<FdbEntry>),
    /// `fdb-add`.
    FdbAdded(FdbAdded),
    /// `fdb-del`.
    FdbRemoved(FdbRemoved),
    /// `fdb-flush`.
    Flushed(Flushed),
    /// `stats`.
    Stats(Box<Stats>),
    /// `port-add`.
    PortAdded(PortAdded),
    /// `port-del`.
    PortRemoved(PortRemoved),
    /// `port-show`.
    Ports(Vec<PortInfo>),
    /// `reload`.
    Reloaded(Reloaded),
    /// `lock-set`.
    LockSwitched(LockSwitched),
    /// `capture`, before the pcapng stream.
    CaptureStarted(CaptureStarted),
    /// `port-enable`.
    PortEnabled(PortEnabled),
    /// `mdb-show`.
    Mdb(Mdb),
}

/// `mdb-show`'s result: multicast snooping's state, as `bridge mdb show`
/// and `ip -d link show` give the Linux bridge's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mdb {
    /// Whether snooping runs (`--mcast-snooping`, and not turned off by
    /// `--mcast-hash-max`).
    pub enabled: bool,
    /// One entry per group and member port.
    pub groups: Vec<MdbGroup>,
    /// The router ports.
    pub routers: Vec<MdbRouter>,
    /// The querier of each family.
    pub querier: MdbQueriers,
    /// Each port's groups against its `mcast_max_groups`.
    #[serde(default)]
    pub ports: Vec<MdbPort>,
}

/// A port's groups against its limit, as Linux's `ip -d link show` gives
/// a bridge port's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdbPort {
    /// The port, as `stats` names it.
    pub port: String,
    /// Groups it is a member of now, over every VLAN.
    pub mcast_n_groups: u32,
    /// The most it may be a member of (0: no limit).
    pub mcast_max_groups: u32,
    /// Groups the limit kept off it.
    pub mcast_max_groups_refused: u64,
}

/// A port's membership of a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdbGroup {
    /// The port, as `stats` names it.
    pub port: String,
    /// The group address.
    pub grp: String,
    /// Its VLAN (0: untagged, without VLAN filtering).
    pub vid: u16,
    /// "temp": learned from reports, as Linux's.
    pub state: String,
    /// Seconds until the membership expires, unless reported again.
    pub timer: f64,
}

/// A multicast router port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdbRouter {
    /// The port.
    pub port: String,
    /// "ipv4" or "ipv6".
    pub family: String,
    /// "temp" (learned from queries) or "permanent" (`mcast_router=2`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Seconds until it stops being one, for a learned one.
    pub timer: Option<f64>,
}

/// The queriers of both families.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdbQueriers {
    /// IGMP's.
    pub ipv4: MdbQuerier,
    /// MLD's.
    pub ipv6: MdbQuerier,
}

/// One family's querier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MdbQuerier {
    /// Whether forwarding trusts the group table: a querier is present and
    /// its first response time is over.
    pub present: bool,
    /// Whether the querier is this bridge.
    pub own: bool,
    /// The querier's address, when another one is heard.
    pub address: Option<String>,
    /// The port it is heard on.
    pub port: Option<String>,
    /// Seconds until it is taken for gone, unless heard again.
    pub timer: Option<f64>,
}

/// `port-enable`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortEnabled {
    /// The port, as `--port` gave it.
    pub enabled: String,
    /// Whether its guard had disabled it (false: it was enabled already).
    pub was_disabled: bool,
}

/// `fdb-add`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbAdded {
    /// Whether a learned entry for the station was replaced.
    pub replaced_learned: bool,
}

/// `fdb-del`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbRemoved {
    /// Always true: a missing entry is an error.
    pub removed: bool,
}

/// `fdb-flush`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flushed {
    /// Entries removed.
    pub flushed: usize,
}

/// `port-add`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortAdded {
    /// The port, as `--port` gives it.
    pub port: String,
    /// Its id.
    pub id: usize,
}

/// `port-del`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRemoved {
    /// The port, as `--port` gave it.
    pub removed: String,
    /// Its entries removed with it.
    pub flushed: usize,
}

/// One port, as `port-show` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortInfo {
    /// Its id.
    pub id: usize,
    /// As `--port` gives it ("tap:acc1").
    pub name: String,
    /// "tap", "raw" or "vxlan".
    pub kind: String,
    /// The port with every option, as `--port` and `port add` take it.
    pub options: String,
    /// The interface's link, as `stats` gives it.
    pub link: Link,
    /// Spanning tree's view of it, and its guard (as `stats` gives them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stp: Option<PortStp>,
    /// Its port flags (isolated, hairpin, learning, flood, mcast_flood,
    /// bcast_flood), each on or off.
    #[serde(default)]
    pub flags: std::collections::BTreeMap<String, bool>,
    /// Its `max_learned` limit, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_learned: Option<u32>,
    /// Whom it was added for, if `port add` named an owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<PortOwner>,
    /// Stations learned on it now.
    #[serde(default)]
    pub learned: usize,
    /// Multicast groups it is a member of now, over every VLAN (Linux's
    /// `mcast_n_groups`), with `--mcast-snooping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcast_n_groups: Option<u32>,
    /// Its `mcast_max_groups` (0: no limit), with `--mcast-snooping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcast_max_groups: Option<u32>,
    /// Groups its reports asked for that `mcast_max_groups` kept off it,
    /// with `--mcast-snooping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcast_max_groups_refused: Option<u64>,
}

/// Whom a port was added for: a container's attachment to a network, as
/// a CNI runtime names it, so that the plugin that added it finds it again
/// (CHECK, GC). Each name is checked as CNI checks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "OwnerNames")]
pub struct PortOwner {
    /// The network's name (a CNI configuration's `name`).
    pub network: String,
    /// The container's id (`CNI_CONTAINERID`).
    pub container: String,
    /// Its interface's name inside the container (`CNI_IFNAME`).
    pub ifname: String,
}

/// A [`PortOwner`]'s names as they came, before the checks.
#[derive(Deserialize)]
struct OwnerNames {
    network: String,
    container: String,
    ifname: String,
}

impl TryFrom<OwnerNames> for PortOwner {
    type Error = String;

    fn try_from(names: OwnerNames) -> Result<PortOwner, String> {
        PortOwner::new(names.network, names.container, names.ifname)
    }
}

impl PortOwner {
    /// The owner of these names: a network name and a container id as
    /// CNI allows them (a letter or digit, then letters, digits, `_`, `.`
    /// and `-`; at most 255 bytes), an interface name as Linux does (1 to
    /// 15 bytes, no `/`, `:` or white space, not `.` or `..`).
    pub fn new(network: String, container: String, ifname: String) -> Result<PortOwner, String> {
        let cni_name = |what: &str, name: &str| {
            let mut chars = name.chars();
            let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
            let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
            match first_ok && rest_ok && name.len() <= 255 {
                true => Ok(()),
                false => Err(format!(
                    "owner {what} {name:?}: a letter or digit, then letters, digits, '_', '.' \
                     or '-', at most 255 bytes"
                )),
            }
        };
        cni_name("network", &network)?;
        cni_name("container", &container)?;
        let ifname_ok = (1..=15).contains(&ifname.len())
            && ifname != "."
            && ifname != ".."
            && !ifname
                .chars()
                .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
        if !ifname_ok {
            return Err(format!(
                "owner ifname {ifname:?}: 1 to 15 bytes, no '/', ':' or white space, not '.' \
                 or '..'"
            ));
        }
        Ok(PortOwner {
            network,
            container,
            ifname,
        })
    }
}

/// A port's spanning tree role and state, its guard and its BPDU counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStp {
    /// root, designated, alternate, backup, disabled or edge (with
    /// `--stp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// discarding, learning or forwarding (with `--stp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// With `guard=on`: whether a BPDU disabled the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard_tripped: Option<bool>,
    /// With `guard=on`: how often a BPDU disabled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard_trips: Option<u64>,
    /// Whether the port speaks RSTP (false: 802.1D, toward a bridge that
    /// does), with `--stp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rstp: Option<bool>,
    /// BPDUs received and sent, TCNs among them, and BPDUs refused as
    /// malformed (with `--stp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpdus: Option<BpduCounts>,
    /// Flushes of the port's learned stations that topology changes
    /// asked for, and those done (at most one a second), with `--stp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flushes: Option<FlushCounts>,
}

/// A port's topology change flushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushCounts {
    /// Flushes asked for.
    pub requested: u64,
    /// Flushes done.
    pub done: u64,
}

/// A port's BPDU counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BpduCounts {
    /// BPDUs received.
    pub rx_bpdus: u64,
    /// BPDUs sent.
    pub tx_bpdus: u64,
    /// Topology change notifications received.
    pub rx_tcns: u64,
    /// Topology change notifications sent.
    pub tx_tcns: u64,
    /// BPDUs refused as malformed.
    pub bad_bpdus: u64,
}

/// The bridge's spanning tree, as `stats` gives it with `--stp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeStp {
    /// This bridge's id, as Linux's sysfs writes it (`8000.02ac00000001`).
    pub bridge_id: String,
    /// The root bridge's id.
    pub root_id: String,
    /// The port toward the root, as `stats` names ports; null on the root.
    pub root_port: Option<String>,
    /// The path cost to the root.
    pub root_cost: u32,
    /// Topology changes detected or heard of.
    pub topology_changes: u64,
    /// Whether a topology change is in progress.
    pub topology_change: bool,
    /// Topology change events: changes a port detected and TCs and TCNs
    /// received, each one, including those a `restricted_tcn=on` port
    /// kept to itself.
    #[serde(default)]
    pub tc_events: u64,
    /// Flushes of a port's learned stations that the events asked for.
    #[serde(default)]
    pub flush_requests: u64,
    /// Flushes done: at most one per port a second, however many
    /// events asked.
    #[serde(default)]
    pub flushes: u64,
}

/// `reload`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// Ports added, as `--port` takes them.
    pub ports_added: Vec<String>,
    /// Ports removed.
    pub ports_removed: Vec<String>,
    /// Ports whose options changed (removed and added again).
    pub ports_changed: Vec<String>,
    /// Static entries added.
    pub static_added: usize,
    /// Static entries removed.
    pub static_removed: usize,
    /// Settings that changed in the file but apply only at start.
    pub needs_restart: Vec<String>,
}

/// `lock-set`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockSwitched {
    /// The strategy now.
    pub lock: String,
    /// Entries moved to its table.
    pub entries: usize,
    /// How long forwarding paused, in microseconds.
    pub pause_us: u64,
}

/// `capture`'s reply line, before the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureStarted {
    /// "pcapng".
    pub format: String,
    /// The port.
    pub port: String,
}

impl ReplyLine {
    /// The reply line for a request's outcome; the error's text is the
    /// line's `error` (the daemon's `ApiError`, which this file does not
    /// name so that the control fuzz target compiles it alone).
    pub fn of(outcome: Result<Response, impl std::fmt::Display>) -> ReplyLine {
        match outcome {
            // Serialising our own types cannot fail.
            Ok(response) => {
                ReplyLine::ok(serde_json::to_value(response).expect("a response serialises"))
            }
            Err(error) => ReplyLine::error(error.to_string()),
        }
    }
}

/// One MAC table entry, as `fdb-show` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbEntry {
    /// "02:ac:00:00:00:01".
    pub mac: String,
    /// The port, as given to `--port` ("tap:acc1").
    pub port: String,
    /// The VLAN (0: untagged).
    pub vlan: u16,
    /// "learned", "static", "local" or "extern_learn" (installed by a
    /// control plane: EVPN).
    pub state: String,
    /// Seconds since the station was last seen (0 for static, local and
    /// extern_learn).
    pub age_s: u32,
    /// On a VXLAN port: the VTEP the station is behind, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
}

/// An EVPN port's figures in `stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortEvpn {
    /// Local stations advertised (written to the port's mirror).
    pub local_macs: usize,
    /// Remote stations installed (`extern_learn` entries).
    pub remote_macs: usize,
    /// The VTEPs of the flood list, from type-3 routes.
    pub vteps: Vec<String>,
}

/// `stats`: the bridge's counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// The bridge's name.
    pub name: String,
    /// The lock strategy.
    pub lock: String,
    /// Seconds since the bridge started.
    pub uptime_s: u64,
    /// Per port, in `--port` order.
    pub ports: Vec<PortStats>,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
    /// The MAC table.
    pub fdb: FdbStats,
    /// The lock statistics of the MAC table (lock-based strategies, with
    /// `--lockstat`).
    pub lockstat: LockStats,
    /// `lock set` requests that failed with nothing changed (a worker
    /// stuck, or no descriptor, thread or memory for the new strategy).
    #[serde(default)]
    pub lock_set_failed: u64,
    /// Spanning tree, with `--stp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stp: Option<BridgeStp>,
    /// Multicast snooping's figures, with `--mcast-snooping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcast: Option<McastStats>,
    /// The owner thread's queue: what waits, what was shed.
    #[serde(default)]
    pub owner_queue: OwnerQueueStats,
}

/// The owner thread's queue (`queue.rs`): events waiting per lane now, and
/// those shed since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerQueueStats {
    /// Signals, link news, BPDUs and tripped guards waiting.
    pub urgent_queued: usize,
    /// Control requests waiting.
    pub control_queued: usize,
    /// IGMP and MLD messages waiting.
    pub mcast_queued: usize,
    /// IGMP and MLD messages beyond the bridge-wide budget per second,
    /// not queued (forwarded, not snooped).
    pub mcast_over_budget: u64,
    /// IGMP and MLD messages that found their lane full.
    pub mcast_queue_full: u64,
    /// Link news and BPDUs that found their lane full.
    pub urgent_queue_full: u64,
    /// Control requests that found their lane full (answered busy).
    pub control_queue_full: u64,
}

/// Multicast snooping's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McastStats {
    /// Whether snooping runs (not turned off by `--mcast-hash-max`).
    pub enabled: bool,
    /// Groups with members now.
    pub groups: usize,
    /// IGMP and MLD messages taken, by type and version, and queries sent.
    pub messages: bridge::mcast::SnoopStats,
}

/// One port's counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortStats {
    /// As given to `--port`.
    pub name: String,
    /// The interface's link.
    pub link: Link,
    /// The port as the workers see it.
    pub state: PortState,
    /// Its counters, summed over the workers.
    #[serde(flatten)]
    pub counters: bridge::counters::PortStats,
    /// The port's VLANs as `--port` options (`access=10`, `trunk=10,20`),
    /// when the bridge filters VLANs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlans: Option<String>,
    /// A VXLAN port's own counters: datagrams dropped by reason (`short`,
    /// `flags`, `reserved`, `unknown_vni`, `unlisted_source`, `truncated`,
    /// `pending_full`), frames not sent (`no_remote`, `offload_errors`,
    /// `small_gso`: a GSO size under 48 bytes),
    /// new stations heard on it that a full fdb refused
    /// (`remotes_refused`), its stations with a VTEP (`remotes`), and VTEPs
    /// heard beyond the most it names (`vteps_refused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vxlan: Option<std::collections::BTreeMap<String, u64>>,
    /// An EVPN port's routes: local stations advertised, remote stations
    /// installed, and the flood list FRR gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evpn: Option<PortEvpn>,
    /// Spanning tree's view of the port and its guard, with `--stp` or
    /// `guard=on`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stp: Option<PortStp>,
    /// Its port flags, each on or off.
    #[serde(default)]
    pub flags: std::collections::BTreeMap<String, bool>,
    /// Its `max_learned` limit, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_learned: Option<u32>,
    /// Whom it was added for, if `port add` named an owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<PortOwner>,
    /// Stations learned on it now.
    #[serde(default)]
    pub learned: usize,
    /// Multicast groups it is a member of now, over every VLAN (Linux's
    /// `mcast_n_groups`), with `--mcast-snooping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcast_n_groups: Option<u32>,
    /// Its `mcast_max_groups` (0: no limit), with `--mcast-snooping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcast_max_groups: Option<u32>,
    /// Groups its reports asked for that `mcast_max_groups` kept off it,
    /// with `--mcast-snooping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcast_max_groups_refused: Option<u64>,
    /// A vhost-user port's own counters: frontends that connected
    /// (`connects`) and went (`disconnects`), messages that broke the
    /// protocol (`bad_messages`), memory tables and rings refused
    /// (`bad_memory`, `bad_rings`), chains that broke the rules
    /// (`bad_chains`), frames for the driver dropped for want of room
    /// (`no_room`), calls cut short by the work budget (`over_budget`),
    /// connections closed for memory that shrank (`memory_faults`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost: Option<std::collections::BTreeMap<String, u64>>,
}

/// A port's counters as one line of text, as `stats` and the daemon's
/// exit summary print them: the drop reasons that are not zero, as `ip -s`
/// leaves out what did not happen (`stats -j` has every reason).
pub struct CounterLine<'a>(pub &'a bridge::counters::PortStats);

impl std::fmt::Display for CounterLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.0;
        let drops: Vec<String> = c
            .drops_by_name()
            .filter(|(_, n)| *n != 0)
            .map(|(reason, n)| format!("{reason}={n}"))
            .collect();
        let total: u64 = c.drops.iter().sum();
        let drops = match drops.is_empty() {
            true => "0".to_owned(),
            false => format!("{total} ({})", drops.join(" ")),
        };
        write!(
            f,
            "rx {} frames {} bytes, tx {} frames {} bytes, drops {drops}, rx_oversize {}, \
             rx_errors {}, tx_dropped {}, tx_errors {}, moves {}",
            c.rx_frames,
            c.rx_bytes,
            c.tx_frames,
            c.tx_bytes,
            c.rx_oversize,
            c.rx_errors,
            c.tx_dropped,
            c.tx_errors,
            c.moves
        )
    }
}

/// A port's link, as `stats` and `port show` give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Link {
    /// Passing frames (running).
    Up,
    /// Not passing frames.
    Down,
    /// The interface was deleted.
    Gone,
    /// A tap whose kernel side is in another network namespace, before any
    /// news of it came from there (after, as that news said).
    Unknown,
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Link::Up => "up",
            Link::Down => "down",
            Link::Gone => "gone",
            Link::Unknown => "unknown",
        })
    }
}

/// A port as the workers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortState {
    /// Passing frames.
    Forwarding,
    /// Faulted (link down, an error), retried until it passes frames again.
    Faulted,
    /// The device is gone; the port is out of the bridge.
    Gone,
}

impl From<bridge::counters::PortState> for PortState {
    fn from(state: bridge::counters::PortState) -> PortState {
        match state {
            bridge::counters::PortState::Forwarding => PortState::Forwarding,
            bridge::counters::PortState::Faulted => PortState::Faulted,
            bridge::counters::PortState::Gone => PortState::Gone,
        }
    }
}

impl std::fmt::Display for PortState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PortState::Forwarding => "forwarding",
            PortState::Faulted => "faulted",
            PortState::Gone => "gone",
        })
    }
}

/// One worker's counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Its index.
    pub id: usize,
    /// Frames it received, all ports together.
    pub frames: u64,
    /// Batches it forwarded.
    pub batches: u64,
    /// Per cent of the bridge's uptime it spent receiving and forwarding
    /// frames rather than waiting for them.
    pub busy_percent: f64,
    /// Nanoseconds it spent receiving and forwarding frames (rounds of its
    /// loop that found some), since the bridge started: over its frames,
    /// what a frame cost its core, empty polls left out.
    #[serde(default)]
    pub busy_ns: u64,
    /// Its heartbeat stood still for longer than the watchdog allows: it
    /// is blocked and forwards nothing.
    #[serde(default)]
    pub stuck: bool,
    /// Seconds since the owner last saw its heartbeat move (one decimal;
    /// the owner looks once a second, so under about 1 while it runs).
    #[serde(default)]
    pub heartbeat_age_s: f64,
    /// Times it became stuck since the bridge started.
    #[serde(default)]
    pub stalls: u64,
}

/// The MAC table's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbStats {
    /// All entries now.
    pub entries: u64,
    /// Learned entries now.
    pub learned: u64,
    /// Static entries now (local ones not included).
    pub r#static: u64,
    /// Local entries now (ports' own addresses).
    pub local: u64,
    /// The learning limit (0: none).
    pub max_entries: u64,
    /// The ageing time.
    pub age_s: u32,
    /// The totals since start: stations learned (`learned_total`),
    /// moves, refusals at the limit, entries aged out, and frames whose
    /// source was one of the bridge's own (local) addresses (`own_sources`,
    /// never learned, once per station and batch).
    #[serde(flatten)]
    pub totals: bridge::fdb::FdbStatsSnapshot,
}

/// Lock statistics, as lockstat(1) gives them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockStats {
    /// Whether they are being counted.
    pub enabled: bool,
    /// Lock acquisitions (read or write).
    pub acquisitions: u64,
    /// Acquisitions that found the lock taken.
    pub contended: u64,
    /// Nanoseconds spent waiting.
    pub wait_ns: u64,
}

/// Which frames of a port a capture takes: those it received, those sent
/// out of it, or both. The command line and the protocol share it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CaptureDirection {
    /// Received on the port.
    In,
    /// Sent out of the port.
    Out,
    /// Both.
    #[default]
    Both,
}

impl CaptureDirection {
    /// Whether it takes received frames, and sent ones.
    pub fn takes(self) -> (bool, bool) {
        match self {
            CaptureDirection::In => (true, false),
            CaptureDirection::Out => (false, true),
            CaptureDirection::Both => (true, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(request: Request) -> String {
        serde_json::to_string(&RequestLine {
            version: VERSION,
            request,
        })
        .unwrap()
    }

    fn read(text: &str) -> Result<Request, String> {
        serde_json::from_str::<RequestLine>(text)
            .map(|line| line.request)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_port_owner_is_checked_as_cni_names_it() {
        let owner = |n: &str, c: &str, i: &str| {
            PortOwner::new(n.to_owned(), c.to_owned(), i.to_owned()).map(|_| ())
        };
        assert_eq!(owner("podman", "3f2a.b_c-9", "eth0"), Ok(()));
        assert_eq!(owner("n", &"a".repeat(255), "a23456789012345"), Ok(()));
        for (n, c, i, why) in [
            ("", "c", "eth0", "owner network"),
            ("-net", "c", "eth0", "owner network"),
            ("net", "", "eth0", "owner container"),
            ("net", "c/d", "eth0", "owner container"),
            ("net", &"a".repeat(256), "eth0", "owner container"),
            ("net", "c", "", "owner ifname"),
            ("net", "c", "a234567890123456", "owner ifname"),
            ("net", "c", "eth/0", "owner ifname"),
            ("net", "c", "eth:0", "owner ifname"),
            ("net", "c", "eth 0", "owner ifname"),
            ("net", "c", "..", "owner ifname"),
        ] {
            let error = owner(n, c, i).unwrap_err();
            assert!(error.starts_with(why), "{n:?} {c:?} {i:?}: {error}");
        }
        // On the wire: read back as sent; a bad name refused, with why.
        let text = r#"{"version":1,"command":"port-add","port":"raw:veth1","owner":{"network":"net","container":"c1","ifname":"eth0"}}"#;
        let request = read(text).unwrap();
        match &request {
            Request::PortAdd { owner: Some(o), .. } => {
                assert_eq!(
                    (&*o.network, &*o.container, &*o.ifname),
                    ("net", "c1", "eth0")
                )
            }
            other => panic!("{other:?}"),
        }
        let line = RequestLine {
            version: VERSION,
            request,
        };
        assert_eq!(serde_json::to_string(&line).unwrap(), text);
        let bad = text.replace("eth0", "eth/0");
        assert!(read(&bad).unwrap_err().contains("owner ifname"), "{bad}");
        // Without an owner, as before.
        let plain = read(r#"{"version":1,"command":"port-add","port":"raw:veth1"}"#).unwrap();
        assert!(matches!(plain, Request::PortAdd { owner: None, .. }));
    }

    #[test]
    fn fdb_requests_keep_their_json_shape() {
        let mac: StationMac = "02:00:00:00:00:01".parse().unwrap();
        let vlan = FdbVlan::try_from(10).unwrap();
        let cases = [
            (
                Request::FdbAdd {
                    mac,
                    port: "raw:p1".to_owned(),
                    vlan,
                    dst: None,
                },
                r#"{"version":1,"command":"fdb-add","mac":"02:00:00:00:00:01","port":"raw:p1","vlan":10}"#,
            ),
            (
                Request::FdbDel {
                    mac,
                    vlan: FdbVlan::UNTAGGED,
                },
                r#"{"version":1,"command":"fdb-del","mac":"02:00:00:00:00:01","vlan":0}"#,
            ),
            (
                Request::FdbShow {
                    port: None,
                    vlan: Some(vlan),
                },
                r#"{"version":1,"command":"fdb-show","vlan":10}"#,
            ),
        ];
        for (request, json) in cases {
            assert_eq!(line(request.clone()), json);
            assert_eq!(read(json), Ok(request));
        }
        // The VLAN is optional, and a MAC may be written in capitals.
        assert_eq!(
            read(r#"{"version":1,"command":"fdb-del","mac":"02:AB:00:00:00:01"}"#),
            Ok(Request::FdbDel {
                mac: "02:ab:00:00:00:01".parse().unwrap(),
                vlan: FdbVlan::UNTAGGED,
            })
        );
    }

    #[test]
    fn bad_fdb_values_are_refused_naming_the_rule() {
        let cases = [
            (
                r#"{"version":1,"command":"fdb-add","mac":"02:00:00:00:00:01","port":"p","vlan":5000}"#,
                "invalid vlan '5000' (0 to 4094)",
            ),
            (
                r#"{"version":1,"command":"fdb-add","mac":"02:00:00:00:00:01","port":"p","vlan":4095}"#,
                "invalid vlan '4095' (0 to 4094)",
            ),
            (
                r#"{"version":1,"command":"fdb-del","mac":"02:00:00:00:00:01","vlan":-1}"#,
                "invalid vlan '-1' (0 to 4094)",
            ),
            (
                r#"{"version":1,"command":"fdb-show","vlan":70000}"#,
                "invalid vlan '70000' (0 to 4094)",
            ),
            (
                r#"{"version":1,"command":"fdb-add","mac":"ff:ff:ff:ff:ff:ff","port":"p"}"#,
                "'ff:ff:ff:ff:ff:ff' is not a station's (unicast) address",
            ),
            (
                r#"{"version":1,"command":"fdb-del","mac":"00:00:00:00:00:00"}"#,
                "'00:00:00:00:00:00' is not a station's (unicast) address",
            ),
            (
                r#"{"version":1,"command":"fdb-add","mac":"02:zz:00:00:00:01","port":"p"}"#,
                "invalid MAC address '02:zz:00:00:00:01'",
            ),
            (
                r#"{"version":1,"command":"fdb-add","mac":"02:00:00:00:00:01","port":"p","vlan":"10"}"#,
                "a VLAN id, 0 to 4094",
            ),
        ];
        for (json, rule) in cases {
            let error = read(json).unwrap_err();
            assert!(error.contains(rule), "{json}: {error}");
        }
    }

    /// A port's counters are the bridge's own type, flattened into the
    /// port's object as the protocol has always carried them: drops by
    /// reason name, and a round trip keeps every count.
    #[test]
    fn port_counters_keep_their_shape() {
        let mut counters = bridge::counters::PortStats {
            rx_frames: 3,
            moves: 2,
            refused: 1,
            ..Default::default()
        };
        counters.drops[bridge::DropReason::SamePort.index()] = 7;
        let port = PortStats {
            name: "raw:p1".to_owned(),
            link: Link::Up,
            state: PortState::Forwarding,
            counters,
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
        };
        let json = serde_json::to_value(&port).unwrap();
        assert_eq!(json["rx_frames"], 3, "{json}");
        assert_eq!(json["moves"], 2, "{json}");
        assert_eq!(json["drops"]["same_port"], 7, "{json}");
        assert_eq!(json["drops"]["runt"], 0, "{json}");
        let reasons = json["drops"].as_object().unwrap().len();
        assert_eq!(reasons, bridge::DropReason::ALL.len());
        let back: PortStats = serde_json::from_value(json).unwrap();
        assert_eq!(back, port);
    }

    /// The text form leaves out the drop reasons that did not happen.
    #[test]
    fn a_counter_line_names_only_the_drops_that_happened() {
        let mut counters = bridge::counters::PortStats {
            rx_frames: 3,
            ..Default::default()
        };
        let line = CounterLine(&counters).to_string();
        assert!(line.contains(", drops 0, "), "{line}");
        counters.drops[bridge::DropReason::SamePort.index()] = 7;
        counters.drops[bridge::DropReason::Reserved.index()] = 1;
        let line = CounterLine(&counters).to_string();
        assert!(
            line.starts_with(
                "rx 3 frames 0 bytes, tx 0 frames 0 bytes, drops 8 (reserved=1 same_port=7), "
            ) && line.ends_with("moves 0"),
            "{line}"
        );
    }

    /// A port and a strategy travel as the text the command line takes,
    /// and are refused at the edge with their parser's words.
    #[test]
    fn port_add_and_lock_set_carry_their_types_as_text() {
        let port = r#"{"version":1,"command":"port-add","port":"tap:vm2,access=10"}"#;
        let lock = r#"{"version":1,"command":"lock-set","lock":"rcu"}"#;
        for json in [port, lock] {
            let request = read(json).unwrap();
            assert_eq!(line(request), json);
        }
        match read(port).unwrap() {
            Request::PortAdd { port, .. } => assert_eq!(port.label(), "tap:vm2"),
            other => panic!("{other:?}"),
        }
        let error = read(r#"{"version":1,"command":"lock-set","lock":"spinlock"}"#).unwrap_err();
        assert!(error.contains("spinlock"), "{error}");
        let error = read(r#"{"version":1,"command":"port-add","port":"eth9"}"#).unwrap_err();
        let expected = PortSpec::parse("eth9").unwrap_err();
        assert!(error.contains(&expected), "{error}");
    }
}
