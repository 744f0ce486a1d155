//! Why the owner did not carry out a request: one variant per kind of
//! failure, carrying what it names. The text of each is the reply line's
//! `error` that operators and scripts read, so it changes only with the
//! protocol's documentation (docs/control.md).

use std::net::IpAddr;
use std::path::PathBuf;

use bridge::vlan::FdbVlan;
use bridge::wire::StationMac;
use locks::StrategyKind;

use crate::watchdog::name_workers;

/// Why a request was not carried out: one line for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The owner's queue is closed: the bridge is on its way out.
    #[error("the bridge is stopping")]
    Stopping,
    /// The owner's queue is full.
    #[error("the bridge is busy: too many requests waiting")]
    Busy,
    /// A capture sent as an ordinary call.
    #[error("a capture is asked for on a stream of its own")]
    CaptureNotStreamed,
    /// An ordinary call sent as a capture.
    #[error("not a capture request")]
    NotCapture,

    /// No live port has this label or interface name.
    #[error("no port '{name}' (ports: {})", .ports.join(", "))]
    NoSuchPort { name: String, ports: Vec<String> },
    /// An interface that is a port already.
    #[error("{name} is already a port of this bridge")]
    PortExists { name: String },
    /// Every port id is taken.
    #[error("a bridge has at most {} ports", bridge::MAX_PORTS)]
    TooManyPorts,
    /// A relay's two ports are fixed.
    #[error("a relay has exactly two ports; none can be added")]
    RelayPortAdd,
    /// A relay's two ports are fixed.
    #[error("a relay has exactly two ports; none can be removed")]
    RelayPortRemove,
    /// A port with VLAN options on a bridge without VLAN filtering.
    #[error("port {port} has VLAN options: they need a bridge run with --vlan-filtering")]
    VlanFilteringNeeded { port: String },
    /// The port's queues did not open (the reason names the port).
    #[error("{0}")]
    PortOpen(String),
    /// A worker's queue of changes refused the new port.
    #[error("cannot hand the port to the workers: {reason}")]
    HandOver { reason: String },
    /// A worker's queue of changes refused a change.
    #[error("cannot reach the workers: {reason}")]
    WorkersUnreachable { reason: String },

    /// The watchdog found workers stuck before change `what`.
    #[error(
        "{what}: {} stuck (no heartbeat for {silent_s} s or more); nothing changed",
        name_workers(.workers)
    )]
    WorkersStuck {
        what: String,
        workers: Vec<usize>,
        silent_s: u64,
    },
    /// The pings before change `what` could not be sent.
    #[error("{what}: cannot reach the workers: {reason}")]
    PingUnsent { what: String, reason: String },
    /// Workers did not answer the ping before change `what`.
    #[error(
        "{what}: {} did not answer within {within_s} s (stuck?); nothing changed",
        name_workers(.workers)
    )]
    PingUnanswered {
        what: String,
        workers: Vec<usize>,
        within_s: u64,
    },
    /// Workers did not take a new port in time; it was taken back.
    #[error(
        "{what}: {} did not take the port within {within_s} s (stuck?); the port was not added",
        name_workers(.workers)
    )]
    PortNotTaken {
        what: String,
        workers: Vec<usize>,
        within_s: u64,
    },
    /// Workers did not close a removed port's queue in time; the port is
    /// out of the bridge all the same.
    #[error(
        "{what}: {} did not close its queue within {within_s} s (stuck?): the port is out \
         of the bridge, and that queue closes when the worker runs again",
        name_workers(.workers)
    )]
    QueueNotClosed {
        what: String,
        workers: Vec<usize>,
        within_s: u64,
    },

    /// `lock set` on a relay.
    #[error("a relay has no MAC table")]
    NoMacTable,
    /// The new strategy's table or workers could not be made; the old
    /// ones forward on.
    #[error("lock set {lock}: {reason}; nothing changed, the bridge forwards on with {kept}")]
    LockPrepare {
        lock: StrategyKind,
        reason: String,
        kept: StrategyKind,
    },
    /// The switch failed after the old workers stopped: the bridge stops.
    #[error("lock set {lock}: {reason}; stopping the bridge")]
    LockSwitchLost { lock: StrategyKind, reason: String },

    /// No such capture queue.
    #[error(
        "no queue {queue} (the bridge has {workers} workers, queues 0 to {})",
        .workers.saturating_sub(1)
    )]
    NoSuchQueue { queue: usize, workers: usize },
    /// Every capture slot is taken.
    #[error(
        "{most} captures are running already (the most a bridge runs at once); stop one first"
    )]
    TooManyCaptures { most: usize },

    /// `mdb show` without snooping.
    #[error("multicast snooping is off (start the bridge with --mcast-snooping)")]
    SnoopingOff,

    /// A static entry for a port's own address.
    #[error("{mac} is the address of {port}'s own interface")]
    LocalEntry { mac: StationMac, port: String },
    /// Removing a port's own address.
    #[error("{mac} is the address of {port}'s own interface, which stays")]
    LocalEntryStays { mac: StationMac, port: String },
    /// `fdb del` of an entry the table does not have.
    #[error("no entry for {mac} in vlan {vlan}")]
    NoSuchEntry { mac: StationMac, vlan: FdbVlan },
    /// `dst` on a port that is not a VXLAN port.
    #[error("dst is for VXLAN ports; {port} is not one")]
    DstNotVxlan { port: String },
    /// `dst` that is no IP address.
    #[error("invalid dst address '{dst}'")]
    DstInvalid { dst: String },
    /// `dst` 0.0.0.0 or ::.
    #[error("dst {ip}: name the VTEP's own address")]
    DstUnspecified { ip: IpAddr },
    /// `dst` that no VTEP can have (the reason says why).
    #[error("{0}")]
    DstRefused(String),
    /// `dst` of the other IP version than the port's underlay.
    #[error("dst {ip} is not of {port}'s IP version")]
    DstFamily { ip: IpAddr, port: String },
    /// The port's VTEP table is full.
    #[error("{port} names {most} VTEPs already, its most")]
    TooManyVteps { port: String, most: usize },

    /// `reload` without `--config`.
    #[error("the bridge runs without --config: nothing to reload")]
    NoConfig,
    /// The configuration file could not be read or parsed (the reason
    /// names the file).
    #[error("{0}")]
    ConfigLoad(String),
    /// The configuration file gives a port VLAN options the bridge does
    /// not filter by.
    #[error(
        "{}: port {port} has VLAN options: they need a bridge run with --vlan-filtering",
        .path.display()
    )]
    ConfigVlanFilteringNeeded { path: PathBuf, port: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    // The texts scripts and the integration tests match on.
    #[test]
    fn texts_stay_as_documented() {
        let mac: StationMac = "02:00:00:00:00:01".parse().unwrap();
        let cases = [
            (
                ApiError::NoSuchPort {
                    name: "eth9".into(),
                    ports: vec!["raw:p0".into(), "tap:t1".into()],
                },
                "no port 'eth9' (ports: raw:p0, tap:t1)",
            ),
            (
                ApiError::PortExists {
                    name: "extra0".into(),
                },
                "extra0 is already a port of this bridge",
            ),
            (
                ApiError::NoSuchQueue {
                    queue: 5,
                    workers: 2,
                },
                "no queue 5 (the bridge has 2 workers, queues 0 to 1)",
            ),
            (
                ApiError::TooManyCaptures { most: 4 },
                "4 captures are running already (the most a bridge runs at once); stop one first",
            ),
            (
                ApiError::WorkersStuck {
                    what: "port add tap:x".into(),
                    workers: vec![0],
                    silent_s: 3,
                },
                "port add tap:x: worker 0 stuck (no heartbeat for 3 s or more); nothing changed",
            ),
            (
                ApiError::PingUnanswered {
                    what: "reload".into(),
                    workers: vec![0, 2],
                    within_s: 2,
                },
                "reload: workers 0, 2 did not answer within 2 s (stuck?); nothing changed",
            ),
            (
                ApiError::LockPrepare {
                    lock: StrategyKind::Rcu,
                    reason: "Too many open files".into(),
                    kept: StrategyKind::Epoch,
                },
                "lock set rcu: Too many open files; nothing changed, the bridge forwards on \
                 with epoch",
            ),
            (
                ApiError::LocalEntry {
                    mac,
                    port: "raw:p1".into(),
                },
                "02:00:00:00:00:01 is the address of raw:p1's own interface",
            ),
            (
                ApiError::DstNotVxlan {
                    port: "raw:p1".into(),
                },
                "dst is for VXLAN ports; raw:p1 is not one",
            ),
            (
                ApiError::DstUnspecified {
                    ip: "0.0.0.0".parse().unwrap(),
                },
                "dst 0.0.0.0: name the VTEP's own address",
            ),
            (
                ApiError::NoSuchEntry {
                    mac,
                    vlan: "10".parse().unwrap(),
                },
                "no entry for 02:00:00:00:00:01 in vlan 10",
            ),
            (
                ApiError::TooManyPorts,
                &format!("a bridge has at most {} ports", bridge::MAX_PORTS),
            ),
            (
                ApiError::Busy,
                "the bridge is busy: too many requests waiting",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text, "{error:?}");
        }
    }
}
