//! The configuration file (`--config FILE`, TOML): what `mpbridge run`
//! takes on its command line, plus static MAC table entries. SIGHUP or
//! `mpbridge reload` reads it again and applies what changed in the ports
//! and static entries; what cannot change while running (lock, workers,
//! name, ageing, limit) is reported as needing a restart.
//!
//! ```toml
//! name = "br0"
//! lock = "epoch"
//! workers = 2
//! age = 300
//! max_entries = 8192
//! ports = ["tap:vm0", "raw:eth1"]
//! # with vlan_filtering = true, ports take VLAN options:
//! # ports = ["tap:vm0,access=10", "raw:eth1,trunk=10,20"]
//! stp = true
//! stp_priority = 4096
//! stp_hello = 2
//! stp_forward_delay = 15
//! stp_max_age = 20
//! move_limit = 20
//! move_hold = 10
//! group_fwd_mask = "0x4000"
//! mcast_snooping = true
//! mcast_querier = true
//! mcast_query_interval = 125
//! mcast_last_member_interval = 0.5
//!
//! [[static]]
//! mac = "02:00:00:00:00:01"
//! port = "raw:eth1"
//! vlan = 0
//! ```

use std::path::Path;

use bridge::vlan::FdbVlan;
use bridge::wire::StationMac;
use serde::Deserialize;
use toml::Spanned;

use crate::cli::{self, RunArgs};
use crate::ports::PortSpec;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: Option<Spanned<String>>,
    lock: Option<Spanned<String>>,
    workers: Option<Spanned<u16>>,
    age: Option<u32>,
    max_entries: Option<usize>,
    vlan_filtering: Option<bool>,
    stp: Option<bool>,
    stp_priority: Option<u16>,
    stp_hello: Option<u8>,
    stp_forward_delay: Option<u8>,
    stp_max_age: Option<u8>,
    move_limit: Option<Spanned<u32>>,
    move_hold: Option<Spanned<u64>>,
    group_fwd_mask: Option<Spanned<String>>,
    mcast_snooping: Option<bool>,
    mcast_querier: Option<bool>,
    mcast_query_interval: Option<Spanned<f64>>,
    mcast_query_response_interval: Option<Spanned<f64>>,
    mcast_membership_interval: Option<Spanned<f64>>,
    mcast_querier_interval: Option<Spanned<f64>>,
    mcast_last_member_interval: Option<Spanned<f64>>,
    mcast_startup_query_interval: Option<Spanned<f64>>,
    mcast_last_member_count: Option<Spanned<u32>>,
    mcast_startup_query_count: Option<Spanned<u32>>,
    mcast_hash_max: Option<Spanned<u32>>,
    #[serde(default)]
    ports: Vec<Spanned<String>>,
    #[serde(default, rename = "static")]
    statics: Vec<FileStatic>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStatic {
    /// Checked as it is read: toml points an error at the value's line.
    mac: StationMac,
    port: Spanned<String>,
    #[serde(default)]
    vlan: FdbVlan,
}

/// A static entry of the file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StaticEntry {
    /// The station.
    pub mac: StationMac,
    /// Its VLAN.
    pub vlan: FdbVlan,
    /// Its port, as the file names it (`tap:NAME`, `raw:IFNAME`, `vxlan:NAME`,
    /// `vhost:PATH`).
    pub port: String,
}

/// A checked configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The bridge's name.
    pub name: Option<String>,
    /// The lock strategy.
    pub lock: Option<locks::StrategyKind>,
    /// Forwarding threads.
    pub workers: Option<u16>,
    /// Ageing time, seconds.
    pub age: Option<u32>,
    /// Learning limit.
    pub max_entries: Option<usize>,
    /// 802.1Q VLAN filtering.
    pub vlan_filtering: Option<bool>,
    /// Spanning tree and its timers.
    pub stp: StpSettings,
    /// The move limit.
    pub move_limit: Option<u32>,
    /// Its hold time, seconds.
    pub move_hold: Option<u64>,
    /// The group forward mask.
    pub group_fwd_mask: Option<u16>,
    /// Multicast snooping and its timers.
    pub mcast: McastSettings,
    /// The ports, in order.
    pub ports: Vec<PortSpec>,
    /// Static entries.
    pub statics: Vec<StaticEntry>,
}

/// Spanning tree as the file sets it (checked with the command line's
/// values, once merged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StpSettings {
    /// `stp`.
    pub stp: Option<bool>,
    /// `stp_priority`.
    pub priority: Option<u16>,
    /// `stp_hello`.
    pub hello: Option<u8>,
    /// `stp_forward_delay`.
    pub forward_delay: Option<u8>,
    /// `stp_max_age`.
    pub max_age: Option<u8>,
}

/// Multicast snooping as the file sets it, by the command line's option
/// names (`mcast_query_interval` for `--mcast-query-interval`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct McastSettings {
    /// `mcast_snooping`.
    pub snooping: Option<bool>,
    /// `mcast_querier`.
    pub querier: Option<bool>,
    /// The timers, by option name.
    pub times: Vec<(&'static str, std::time::Duration)>,
    /// The counts, by option name.
    pub counts: Vec<(&'static str, u32)>,
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Reads and checks `path`. Errors are one line naming the file and line.
pub fn load(path: &Path) -> Result<Config, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let file: File = toml::from_str(&text).map_err(|e| {
        let line = e.span().map(|span| line_of(&text, span.start));
        let message = e.message().trim().to_owned();
        match line {
            Some(line) => format!("{shown}: line {line}: {message}"),
            None => format!("{shown}: {message}"),
        }
    })?;
    let at = |span: std::ops::Range<usize>, message: String| {
        format!("{shown}: line {}: {message}", line_of(&text, span.start))
    };
    let lock = match &file.lock {
        Some(lock) => Some(
            lock.get_ref()
                .parse::<locks::StrategyKind>()
                .map_err(|e| at(lock.span(), e.to_string()))?,
        ),
        None => None,
    };
    if let Some(workers) = &file.workers {
        if !(1..=256).contains(workers.get_ref()) {
            return Err(at(workers.span(), "workers must be 1 to 256".to_owned()));
        }
    }
    if let Some(name) = &file.name {
        cli::bridge_name(name.get_ref()).map_err(|e| at(name.span(), e))?;
    }
    if let Some(limit) = &file.move_limit {
        if *limit.get_ref() == 0 {
            return Err(at(limit.span(), "move_limit must be 1 or more".to_owned()));
        }
    }
    if let Some(hold) = &file.move_hold {
        if !(1..=3600).contains(hold.get_ref()) {
            return Err(at(
                hold.span(),
                "move_hold must be 1 to 3600 seconds".to_owned(),
            ));
        }
    }
    let group_fwd_mask = match &file.group_fwd_mask {
        Some(mask) => {
            Some(cli::parse_group_fwd_mask(mask.get_ref()).map_err(|e| at(mask.span(), e))?)
        }
        None => None,
    };
    let mut mcast = McastSettings {
        snooping: file.mcast_snooping,
        querier: file.mcast_querier,
        ..McastSettings::default()
    };
    for (key, value) in [
        ("mcast_query_interval", &file.mcast_query_interval),
        (
            "mcast_query_response_interval",
            &file.mcast_query_response_interval,
        ),
        ("mcast_membership_interval", &file.mcast_membership_interval),
        ("mcast_querier_interval", &file.mcast_querier_interval),
        (
            "mcast_last_member_interval",
            &file.mcast_last_member_interval,
        ),
        (
            "mcast_startup_query_interval",
            &file.mcast_startup_query_interval,
        ),
    ] {
        if let Some(value) = value {
            let time = cli::parse_seconds(&value.get_ref().to_string())
                .map_err(|e| at(value.span(), format!("{key}: {e}")))?;
            mcast.times.push((key, time));
        }
    }
    for (key, value, max) in [
        (
            "mcast_last_member_count",
            &file.mcast_last_member_count,
            255,
        ),
        (
            "mcast_startup_query_count",
            &file.mcast_startup_query_count,
            255,
        ),
        ("mcast_hash_max", &file.mcast_hash_max, u32::MAX),
    ] {
        if let Some(value) = value {
            if !(1..=max).contains(value.get_ref()) {
                return Err(at(value.span(), format!("{key} must be 1 to {max}")));
            }
            mcast.counts.push((key, *value.get_ref()));
        }
    }
    let mut ports = Vec::new();
    for port in &file.ports {
        let spec = PortSpec::parse(port.get_ref()).map_err(|e| at(port.span(), e))?;
        if ports.iter().any(|p: &PortSpec| p.name == spec.name) {
            return Err(at(port.span(), format!("{} is listed twice", spec.name)));
        }
        ports.push(spec);
    }
    let mut statics = Vec::new();
    for entry in &file.statics {
        let port = entry.port.get_ref();
        if !ports.iter().any(|p| p.label() == *port || p.name == *port) {
            return Err(at(
                entry.port.span(),
                format!("'{port}' is not one of the ports"),
            ));
        }
        statics.push(StaticEntry {
            mac: entry.mac,
            vlan: entry.vlan,
            port: port.clone(),
        });
    }
    Ok(Config {
        name: file.name.map(Spanned::into_inner),
        lock,
        workers: file.workers.map(Spanned::into_inner),
        age: file.age,
        max_entries: file.max_entries,
        vlan_filtering: file.vlan_filtering,
        stp: StpSettings {
            stp: file.stp,
            priority: file.stp_priority,
            hello: file.stp_hello,
            forward_delay: file.stp_forward_delay,
            max_age: file.stp_max_age,
        },
        move_limit: file.move_limit.map(Spanned::into_inner),
        move_hold: file.move_hold.map(Spanned::into_inner),
        group_fwd_mask,
        mcast,
        ports,
        statics,
    })
}

/// Reads `--config` and fills in what the command line left to it (an
/// option given on the command line wins); returns the file and its
/// contents for reloads.
pub fn merge(
    name: &mut String,
    args: &mut RunArgs,
    matches: &clap::ArgMatches,
) -> Result<Option<(std::path::PathBuf, Config)>, String> {
    use clap::parser::ValueSource;
    let Some(path) = args.config.clone() else {
        return Ok(None);
    };
    let config = load(&path)?;
    let run = matches.subcommand_matches("run");
    // Whether option `id` was on the command line (global ones such as
    // --name may stand before or after `run`).
    let given = |id: &str| {
        let source = |m: &clap::ArgMatches| {
            m.ids().any(|known| known.as_str() == id)
                && m.value_source(id) == Some(ValueSource::CommandLine)
        };
        source(matches) || run.is_some_and(source)
    };
    if !args.ports.is_empty() {
        return Err(format!(
            "the ports come from {}: give no --port with --config",
            path.display()
        ));
    }
    args.ports = config.ports.clone();
    if !given("vlan_filtering") {
        if let Some(filtering) = config.vlan_filtering {
            args.vlan_filtering = filtering;
        }
    }
    if !given("lock") {
        if let Some(lock) = config.lock {
            args.lock = lock;
        }
    }
    if !given("workers") {
        if let Some(workers) = config.workers {
            args.workers = workers;
        }
    }
    if !given("age") {
        if let Some(age) = config.age {
            args.age = age;
        }
    }
    if !given("max_entries") {
        if let Some(max) = config.max_entries {
            args.max_entries = max;
        }
    }
    if !given("name") {
        if let Some(file_name) = &config.name {
            *name = file_name.clone();
        }
    }
    let stp = &config.stp;
    if !given("stp") {
        args.stp |= stp.stp.unwrap_or(false);
    }
    for (id, field, value) in [
        ("stp_hello", &mut args.stp_hello, stp.hello),
        (
            "stp_forward_delay",
            &mut args.stp_forward_delay,
            stp.forward_delay,
        ),
        ("stp_max_age", &mut args.stp_max_age, stp.max_age),
    ] {
        if let (false, Some(value)) = (given(id), value) {
            *field = value;
        }
    }
    if let (false, Some(priority)) = (given("stp_priority"), stp.priority) {
        args.stp_priority = priority;
    }
    if let (false, Some(limit)) = (given("move_limit"), config.move_limit) {
        args.move_limit = Some(limit);
    }
    if let (false, Some(hold)) = (given("move_hold"), config.move_hold) {
        args.move_hold = hold;
    }
    if let (false, Some(mask)) = (given("group_fwd_mask"), config.group_fwd_mask) {
        args.group_fwd_mask = mask;
    }
    let mcast = &config.mcast;
    if !given("mcast_snooping") {
        args.mcast_snooping |= mcast.snooping.unwrap_or(false);
    }
    if !given("mcast_querier") {
        args.mcast_querier |= mcast.querier.unwrap_or(false);
    }
    for &(key, time) in &mcast.times {
        if given(key) {
            continue;
        }
        match key {
            "mcast_query_interval" => args.mcast_query_interval = time,
            "mcast_query_response_interval" => args.mcast_query_response_interval = time,
            "mcast_membership_interval" => args.mcast_membership_interval = time,
            "mcast_querier_interval" => args.mcast_querier_interval = time,
            "mcast_last_member_interval" => args.mcast_last_member_interval = time,
            _ => args.mcast_startup_query_interval = time,
        }
    }
    for &(key, count) in &mcast.counts {
        if given(key) {
            continue;
        }
        match key {
            "mcast_last_member_count" => args.mcast_last_member_count = count,
            "mcast_startup_query_count" => args.mcast_startup_query_count = count,
            _ => args.mcast_hash_max = count,
        }
    }
    Ok(Some((path, config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Config, String> {
        // A file of this call's own, removed after: tests run at once.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("mpbcfg{}-{n}.toml", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, text).unwrap();
        let result = load(&path);
        let _ = std::fs::remove_file(&path);
        result
    }

    #[test]
    fn a_full_file_reads_back() {
        let config = load_text(
            "name = \"br0\"\nlock = \"rcu\"\nworkers = 2\nage = 60\nmax_entries = 100\n\
             ports = [\"tap:a0\", \"raw:eth1\"]\n\n[[static]]\nmac = \"02:00:00:00:00:01\"\n\
             port = \"raw:eth1\"\nvlan = 5\n",
        )
        .unwrap();
        assert_eq!(config.name.as_deref(), Some("br0"));
        assert_eq!(config.lock, Some(locks::StrategyKind::Rcu));
        assert_eq!(
            (config.workers, config.age, config.max_entries),
            (Some(2), Some(60), Some(100))
        );
        let labels: Vec<String> = config.ports.iter().map(PortSpec::label).collect();
        assert_eq!(labels, ["tap:a0", "raw:eth1"]);
        assert_eq!(config.statics.len(), 1);
        assert_eq!(config.statics[0].vlan.get(), 5);
        assert_eq!(config.statics[0].mac.to_string(), "02:00:00:00:00:01");
    }

    #[test]
    fn vlan_and_vxlan_ports_read_back() {
        let config = load_text(
            "vlan_filtering = true\nports = [\"tap:a0,access=10\", \"raw:eth1,trunk=10,20,native=30\", \
             \"vxlan:seg,vni=7,local=198.18.1.1,remote=198.18.1.2,access=20\"]\n",
        )
        .unwrap();
        assert_eq!(config.vlan_filtering, Some(true));
        let described: Vec<String> = config.ports.iter().map(PortSpec::describe).collect();
        assert_eq!(
            described,
            [
                "tap:a0,access=10",
                "raw:eth1,trunk=10,20,native=30",
                "vxlan:seg,vni=7,local=198.18.1.1,port=4789,remote=198.18.1.2,access=20"
            ]
        );
        let error = load_text("ports = [\"tap:a0,access=x\"]\n").unwrap_err();
        assert!(
            error.contains("line 1") && error.contains("invalid VLAN id"),
            "{error}"
        );
    }

    #[test]
    fn spanning_tree_settings_and_port_options_read_back() {
        let config = load_text(
            "stp = true\nstp_priority = 4096\nstp_hello = 1\nstp_forward_delay = 4\n\
             stp_max_age = 6\nmove_limit = 20\nmove_hold = 5\n\
             ports = [\"raw:eth1,cost=2000,priority=64,mcast_max_groups=8\", \
             \"tap:vm0,edge=on,guard=on,storm=500\"]\n",
        )
        .unwrap();
        assert_eq!(
            config.stp,
            StpSettings {
                stp: Some(true),
                priority: Some(4096),
                hello: Some(1),
                forward_delay: Some(4),
                max_age: Some(6),
            }
        );
        assert_eq!((config.move_limit, config.move_hold), (Some(20), Some(5)));
        let described: Vec<String> = config.ports.iter().map(PortSpec::describe).collect();
        assert_eq!(
            described,
            [
                "raw:eth1,cost=2000,priority=64,mcast_max_groups=8",
                "tap:vm0,edge=on,guard=on,storm=500"
            ]
        );
        let error = load_text("ports = [\"tap:a\"]\nmove_limit = 0\n").unwrap_err();
        assert!(
            error.contains("line 2") && error.contains("move_limit"),
            "{error}"
        );
        let config = load_text(
            "ports = [\"tap:a\"]\nmcast_snooping = true\nmcast_querier = true\n\
             mcast_query_interval = 5\nmcast_last_member_interval = 0.5\n\
             mcast_last_member_count = 3\n",
        )
        .unwrap();
        assert_eq!(
            (config.mcast.snooping, config.mcast.querier),
            (Some(true), Some(true))
        );
        assert_eq!(
            config.mcast.times,
            [
                ("mcast_query_interval", std::time::Duration::from_secs(5)),
                (
                    "mcast_last_member_interval",
                    std::time::Duration::from_millis(500)
                ),
            ]
        );
        assert_eq!(config.mcast.counts, [("mcast_last_member_count", 3)]);
        for bad in ["mcast_query_interval = 0", "mcast_hash_max = 0"] {
            let error = load_text(&format!("ports = [\"tap:a\"]\n{bad}\n")).unwrap_err();
            let key = bad.split(' ').next().unwrap();
            assert!(error.contains("line 2") && error.contains(key), "{error}");
        }
        let config = load_text("ports = [\"tap:a\"]\ngroup_fwd_mask = \"0x4008\"\n").unwrap();
        assert_eq!(config.group_fwd_mask, Some(0x4008));
        let error = load_text("ports = [\"tap:a\"]\ngroup_fwd_mask = \"0x1\"\n").unwrap_err();
        assert!(
            error.contains("line 2") && error.contains("bits 0 to 2"),
            "{error}"
        );
        let error = load_text("ports = [\"tap:a,priority=17\"]\n").unwrap_err();
        assert!(
            error.contains("line 1") && error.contains("priority=17"),
            "{error}"
        );
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            (
                "ports = [\"tap:a\", \"raw:b\"]\nlock = \"spinlock\"\n",
                "line 2",
                "spinlock",
            ),
            ("ports = [\"tap:a\",\n \"eth0\"]\n", "line 2", "'eth0'"),
            (
                "ports = [\"tap:a\"]\n[[static]]\nmac = \"02:zz:00:00:00:01\"\nport = \"tap:a\"\n",
                "line 3",
                "02:zz",
            ),
            (
                "ports = [\"tap:a\"]\n[[static]]\nmac = \"02:00:00:00:00:01\"\nport = \"tap:b\"\n",
                "line 4",
                "'tap:b'",
            ),
            (
                "ports = [\"tap:a\"]\ncolour = \"blue\"\n",
                "line 2",
                "colour",
            ),
            ("ports = [\"tap:a\"\n", "line", ""),
            ("workers = 0\n", "line 1", "workers"),
            (
                "ports = [\"tap:a\"]\n[[static]]\nmac = \"02:00:00:00:00:01\"\nport = \"tap:a\"\nvlan = 5000\n",
                "line 5",
                "invalid vlan '5000' (0 to 4094)",
            ),
            (
                "ports = [\"tap:a\"]\n[[static]]\nport = \"tap:a\"\nvlan = -1\n",
                "line 4",
                "invalid vlan '-1' (0 to 4094)",
            ),
            (
                "ports = [\"tap:a\"]\n[[static]]\nport = \"tap:a\"\nmac = \"01:00:5e:00:00:01\"\n",
                "line 4",
                "'01:00:5e:00:00:01' is not a station's (unicast) address",
            ),
            (
                "ports = [\"tap:a\"]\n[[static]]\nmac = \"02:zz:00:00:00:01\"\nport = \"tap:a\"\n",
                "line 3",
                "invalid MAC address '02:zz:00:00:00:01'",
            ),
        ];
        for (text, line, needle) in cases {
            let error = load_text(text).unwrap_err();
            assert!(
                error.contains(line) && error.contains(needle),
                "{text:?}: {error}"
            );
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }
}
