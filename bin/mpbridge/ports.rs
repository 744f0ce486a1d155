//! Port specifications (`tap:NAME`, `raw:IFNAME`, `vxlan:NAME,...`,
//! `vhost:PATH`, each with VLAN options such as `,access=10` or
//! `,trunk=10,20,native=30`) and opening their queues, at start and when a
//! port is added while running. What every kind has sits in `PortSpec`;
//! what only one kind has, in its `PortKind` variant.

use std::io;

use bridge::port::tap::TapError;
use std::net::{IpAddr, SocketAddr};

use bridge::evpn::DEFAULT_MIRROR_PORT;
use bridge::port::raw::{RingKind, DEFAULT_RING_BYTES, MAX_RING_BYTES, MIN_RING_BYTES};
use bridge::port::vhost::{self, Mode as VhostMode, SocketAccess, VhostConfig};
use bridge::port::vxlan::VxlanConfig;
use bridge::port::{LinkQueue, RawQueue, TapQueue, VxlanQueue};
use bridge::vlan::{self, PortVlans, VlanSet};
use bridge::wire::vxlan::MAX_VNI;
use std::path::Path;

use crate::port_options::{option, PortOptions, FLAG_KEYS};

/// What kind of port, with what only that kind has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortKind {
    /// A tap mpbridge owns.
    Tap,
    /// An existing interface, through AF_PACKET.
    Raw,
    /// A VXLAN segment over UDP, with its VNI, underlay and VTEPs.
    Vxlan(VxlanConfig),
    /// A vhost-user socket (a VM or a DPDK application), with the
    /// bridge's side of it and the guest memory it maps at most.
    Vhost(VhostConfig),
}

impl PortKind {
    /// The kind's prefix in `--port` (`tap`, `raw`, `vxlan`, `vhost`), and
    /// its name in `port show`.
    pub fn name(&self) -> &'static str {
        match self {
            PortKind::Tap => "tap",
            PortKind::Raw => "raw",
            PortKind::Vxlan(_) => "vxlan",
            PortKind::Vhost(_) => "vhost",
        }
    }
}

/// A port as `--port` gives it: what every kind has, and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// The interface's name; a vhost-user port's socket path.
    pub name: String,
    /// Its VLANs, when given (they need VLAN filtering).
    pub vlans: Option<PortVlans>,
    /// Its spanning tree, guard and storm options.
    pub options: PortOptions,
    /// Tap, raw, VXLAN or vhost-user, with that kind's settings.
    pub kind: PortKind,
    /// A raw port's receive ring size per worker (`ring=SIZE`), when
    /// given; 4 MiB otherwise.
    pub ring: Option<usize>,
}

impl PortSpec {
    /// Parses `tap:NAME`, `raw:IFNAME`, `vxlan:NAME,...` or
    /// `vhost:PATH[,client]`, then VLAN options: `access=VID`,
    /// or `trunk=LIST` (numbers and ranges, `10,20,100-110`, running to the
    /// next `key=value`) with an optional `native=VID`.
    pub fn parse(spec: &str) -> Result<PortSpec, String> {
        let (port, options) = match spec.split_once(',') {
            Some((port, options)) => (port, Some(options)),
            None => (spec, None),
        };
        let (prefix, name) = parse_port(port, spec)?;
        // A vhost port's one flag has no value.
        let mut client = false;
        let kept: String;
        let options = match (prefix, options) {
            ("vhost", Some(options)) => {
                let rest: Vec<&str> = options
                    .split(',')
                    .filter(|item| {
                        let flag = *item == "client";
                        client |= flag;
                        !flag
                    })
                    .collect();
                kept = rest.join(",");
                (!rest.is_empty()).then_some(kept.as_str())
            }
            (_, options) => options,
        };
        let own: &[&str] = match prefix {
            "vxlan" => &VXLAN_KEYS,
            "vhost" => &VHOST_KEYS,
            "raw" => &RAW_KEYS,
            _ => &[],
        };
        let keys: Vec<&str> = own
            .iter()
            .chain(&PORT_KEYS)
            .chain(&FLAG_KEYS)
            .copied()
            .collect();
        let in_spec = |e: String| format!("port '{spec}': {e}");
        let items = match options {
            Some(options) => split_options(options, &keys).map_err(in_spec)?,
            None => Vec::new(),
        };
        if options.is_some() && items.is_empty() && !client {
            return Err(in_spec("no options after ','".to_owned()));
        }
        let vlans = vlan_options(&items).map_err(in_spec)?;
        let options = PortOptions::parse(&items, prefix == "vxlan").map_err(in_spec)?;
        let kind = match prefix {
            "tap" => PortKind::Tap,
            "raw" => PortKind::Raw,
            "vxlan" => PortKind::Vxlan(vxlan_options(&items).map_err(in_spec)?),
            _ => PortKind::Vhost(vhost_options(&items, client).map_err(in_spec)?),
        };
        let ring = ring_option(&items).map_err(in_spec)?;
        Ok(PortSpec {
            name: name.to_owned(),
            vlans,
            options,
            kind,
            ring,
        })
    }

    /// The port's VLANs: as given, or VLAN 1 untagged (the Linux bridge's
    /// default PVID).
    pub fn vlans(&self) -> PortVlans {
        self.vlans.clone().unwrap_or_default()
    }

    /// The port and its options, as `--port` takes them.
    pub fn describe(&self) -> String {
        let mut text = self.label();
        if let PortKind::Vxlan(v) = &self.kind {
            text += &format!(
                ",vni={},local={},port={}",
                v.vni,
                v.local.ip(),
                v.local.port()
            );
            for remote in &v.remotes {
                text += &format!(",remote={remote}");
            }
            if v.evpn {
                text += ",evpn=on";
                if v.mirror_port != DEFAULT_MIRROR_PORT {
                    text += &format!(",mirror_port={}", v.mirror_port);
                }
            } else if !v.learning {
                text += ",learning=off";
            }
        }
        if let Some(bytes) = self.ring {
            text += &format!(",ring={}", describe_size(bytes as u64));
        }
        if let PortKind::Vhost(config) = &self.kind {
            if config.mode == VhostMode::Client {
                text += ",client";
            }
            if config.max_memory != vhost::DEFAULT_MAX_MEMORY {
                text += &format!(",max_memory={}", describe_size(config.max_memory));
            }
            if let Some(owner) = config.access.owner {
                text += &format!(",socket_owner={owner}");
            }
            if let Some(group) = config.access.group {
                text += &format!(",socket_group={group}");
            }
            if let Some(mode) = config.access.mode {
                text += &format!(",socket_mode={mode:04o}");
            }
        }
        if let Some(vlans) = &self.vlans {
            text += &format!(",{vlans}");
        }
        text + &self.options.describe()
    }

    /// The port as `--port` gives it.
    pub fn label(&self) -> String {
        format!("{}:{}", self.kind.name(), self.name)
    }
}

impl std::fmt::Display for PortSpec {
    /// The port with every option, as `--port` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl std::str::FromStr for PortSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<PortSpec, String> {
        PortSpec::parse(text)
    }
}

/// The kind's prefix (`tap`, `raw`, `vxlan`, `vhost`) and the name after
/// it, checked: an interface name or a socket path.
fn parse_port<'a>(port: &'a str, spec: &str) -> Result<(&'a str, &'a str), String> {
    match port.split_once(':') {
        Some((prefix @ ("tap" | "raw" | "vxlan"), name)) => {
            if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ', ':']) {
                return Err(format!(
                    "invalid interface name in port '{spec}' (1 to 15 characters)"
                ));
            }
            Ok((prefix, name))
        }
        Some(("vhost", path)) => {
            // sun_path holds 108 bytes with the terminating NUL.
            if path.is_empty() || path.len() > 107 {
                return Err(format!(
                    "invalid socket path in port '{spec}' (1 to 107 bytes, no ',')"
                ));
            }
            Ok(("vhost", path))
        }
        _ => Err(format!(
            "invalid port '{spec}' (expected tap:NAME, raw:IFNAME, \
             vxlan:NAME,vni=N,local=IP or vhost:PATH[,client])"
        )),
    }
}

/// The options after a port's name, by key; `trunk=` takes the bare
/// numbers and ranges that follow it, `remote=` may repeat.
fn split_options(options: &str, keys: &[&str]) -> Result<Vec<(String, String)>, String> {
    let known = || {
        keys.iter()
            .map(|k| format!("{k}="))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut items: Vec<(String, String)> = Vec::new();
    let mut in_trunk = false;
    for item in options.split(',') {
        match item.split_once('=') {
            Some((key, value)) if keys.contains(&key) => {
                if key != "remote" && items.iter().any(|(k, _)| k == key) {
                    return Err(format!("{key}= given twice"));
                }
                in_trunk = key == "trunk";
                items.push((key.to_owned(), value.to_owned()));
            }
            Some((key, _)) => return Err(format!("unknown option '{key}' ({})", known())),
            None if in_trunk => {
                let last = items.last_mut().expect("in a trunk list");
                last.1 = format!("{},{item}", last.1);
            }
            None => return Err(format!("'{item}' is not an option ({})", known())),
        }
    }
    Ok(items)
}

/// Every port's options: VLANs, spanning tree, guard and storm, the
/// learning limit, multicast router, fast leave and group limit (and
/// Linux's port flags, `port_options::FLAG_KEYS`).
const PORT_KEYS: [&str; 15] = [
    "access",
    "trunk",
    "native",
    "cost",
    "priority",
    "edge",
    "guard",
    "restricted_role",
    "restricted_tcn",
    "bpdu_filter",
    "storm",
    "max_learned",
    "mcast_router",
    "mcast_fast_leave",
    "mcast_max_groups",
];
/// A VXLAN port's own, besides.
const VXLAN_KEYS: [&str; 7] = [
    "vni",
    "local",
    "port",
    "remote",
    "learning",
    "evpn",
    "mirror_port",
];

/// A raw port's own keys.
const RAW_KEYS: [&str; 1] = ["ring"];

/// A raw port's `ring=SIZE`: its receive ring per worker, from 64K to
/// 256M (rounded up to whole kernel blocks when it is made).
fn ring_option(items: &[(String, String)]) -> Result<Option<usize>, String> {
    option(items, "ring")
        .map(|text| {
            parse_size(text)
                .and_then(|bytes| usize::try_from(bytes).ok())
                .filter(|bytes| (MIN_RING_BYTES..=MAX_RING_BYTES).contains(bytes))
                .ok_or_else(|| {
                    format!(
                        "ring={text}: a receive ring's size from 64K to 256M, with K or M \
                         for binary multiples (4M by default)"
                    )
                })
        })
        .transpose()
}

/// A vhost-user port's own keys (`client` is a flag without a value).
const VHOST_KEYS: [&str; 4] = ["max_memory", "socket_owner", "socket_group", "socket_mode"];

/// A vhost-user port's settings among `items`; `client` when the flag
/// was given.
fn vhost_options(items: &[(String, String)], client: bool) -> Result<VhostConfig, String> {
    let max_memory = option(items, "max_memory")
        .map(|text| {
            parse_size(text).ok_or_else(|| {
                format!(
                    "max_memory={text}: a size in bytes, with K, M, G or T for \
                     binary multiples (256G by default)"
                )
            })
        })
        .transpose()?;
    let access = socket_access(items)?;
    if client && access != SocketAccess::default() {
        return Err(
            "socket_owner, socket_group and socket_mode are for a socket the bridge \
             serves, not with client"
                .to_owned(),
        );
    }
    Ok(VhostConfig {
        mode: if client {
            VhostMode::Client
        } else {
            VhostMode::Server
        },
        max_memory: max_memory.unwrap_or(vhost::DEFAULT_MAX_MEMORY),
        access,
    })
}

/// A server socket's `socket_owner=USER`, `socket_group=GROUP` (names or
/// numbers) and `socket_mode=MODE` (octal, at most 0777).
fn socket_access(items: &[(String, String)]) -> Result<SocketAccess, String> {
    // A number, or a name `find` looks up.
    let id = |key: &str, what: &str, find: &dyn Fn(&str) -> Option<u32>| {
        option(items, key)
            .map(|text| {
                text.parse::<u32>()
                    .ok()
                    .or_else(|| find(text))
                    .ok_or_else(|| format!("{key}={text}: no such {what}"))
            })
            .transpose()
    };
    let owner = id("socket_owner", "user", &|name| {
        nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    })?;
    let group = id("socket_group", "group", &|name| {
        nix::unistd::Group::from_name(name)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
    })?;
    let mode = option(items, "socket_mode")
        .map(|text| {
            u32::from_str_radix(text, 8)
                .ok()
                .filter(|&mode| mode <= 0o777)
                .ok_or_else(|| format!("socket_mode={text}: octal permission bits, 0 to 0777"))
        })
        .transpose()?;
    Ok(SocketAccess { owner, group, mode })
}

/// A size in bytes: digits, then optionally K, M, G or T (powers of 1024);
/// more than zero.
fn parse_size(text: &str) -> Option<u64> {
    let (digits, shift) = match text.char_indices().last()? {
        (at, 'K' | 'k') => (&text[..at], 10),
        (at, 'M' | 'm') => (&text[..at], 20),
        (at, 'G' | 'g') => (&text[..at], 30),
        (at, 'T' | 't') => (&text[..at], 40),
        _ => (text, 0),
    };
    let number: u64 = digits.parse().ok().filter(|&n| n > 0)?;
    number.checked_mul(1 << shift)
}

/// `bytes` as [`parse_size`] reads it, in the largest unit that divides it.
fn describe_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// The VLAN options among `items`, if any.
fn vlan_options(items: &[(String, String)]) -> Result<Option<PortVlans>, String> {
    let get = |key: &str| option(items, key);
    let access = get("access").map(vlan::parse_vid).transpose()?;
    let native = get("native").map(vlan::parse_vid).transpose()?;
    match (access, get("trunk"), native) {
        (None, None, None) => Ok(None),
        (Some(vid), None, None) => Ok(Some(PortVlans::access(vid))),
        (None, Some(list), native) => Ok(Some(PortVlans::trunk(VlanSet::parse(list)?, native))),
        (Some(_), Some(_), _) => Err("access= and trunk= exclude each other".to_owned()),
        (Some(_), None, Some(_)) => {
            Err("native= goes with trunk= (an access port's VLAN is untagged already)".to_owned())
        }
        (None, None, Some(_)) => Err("native= needs trunk=".to_owned()),
    }
}

/// The VXLAN settings among `items`.
fn vxlan_options(items: &[(String, String)]) -> Result<VxlanConfig, String> {
    let get = |key: &str| option(items, key);
    let vni = match get("vni").map(str::parse::<u32>) {
        Some(Ok(vni)) if vni <= MAX_VNI => vni,
        Some(_) => return Err(format!("invalid vni (0 to {MAX_VNI})")),
        None => return Err("a vxlan port needs vni=N".to_owned()),
    };
    let ip = |text: &str, what: &str| {
        text.parse::<IpAddr>()
            .map_err(|_| format!("invalid {what} address '{text}'"))
    };
    let local = ip(get("local").ok_or("a vxlan port needs local=IP")?, "local")?;
    unscoped_unicast(local, "local")?;
    let port = match get("port").map(str::parse::<u16>) {
        Some(Ok(port)) if port > 0 => port,
        Some(_) => return Err("invalid port (1 to 65535)".to_owned()),
        None => bridge::wire::vxlan::DEFAULT_PORT,
    };
    let mut remotes = Vec::new();
    for (_, value) in items.iter().filter(|(k, _)| k == "remote") {
        let remote = ip(value, "remote")?;
        if remote.is_unspecified() {
            return Err(format!("remote {remote}: name the VTEP's own address"));
        }
        unscoped_unicast(remote, "remote")?;
        if remote.is_ipv4() != local.is_ipv4() {
            return Err(format!(
                "remote {remote} and local {local} are not of one IP version"
            ));
        }
        if !remotes.contains(&remote) {
            remotes.push(remote);
        }
    }
    let learning = match get("learning") {
        None | Some("on") => true,
        Some("off") => false,
        Some(other) => return Err(format!("learning={other}: on or off")),
    };
    let evpn = match get("evpn") {
        None | Some("off") => false,
        Some("on") => true,
        Some(other) => return Err(format!("evpn={other}: on or off")),
    };
    let mirror_port = match get("mirror_port").map(str::parse::<u16>) {
        None => DEFAULT_MIRROR_PORT,
        Some(Ok(mirror)) if mirror > 0 && evpn => mirror,
        Some(Ok(_)) if !evpn => return Err("mirror_port= goes with evpn=on".to_owned()),
        Some(_) => return Err("invalid mirror_port (1 to 65535)".to_owned()),
    };
    if evpn {
        if get("learning").is_some() {
            return Err(
                "learning= does not go with evpn=on (FRR gives the port its stations and \
                 VTEPs; it learns nothing from datagrams)"
                    .to_owned(),
            );
        }
        if mirror_port == port {
            return Err(format!(
                "mirror_port={mirror_port} is the port's data port: the kernel's vxlan \
                 device on it would take the port's datagrams"
            ));
        }
    }
    Ok(VxlanConfig {
        vni,
        local: SocketAddr::new(local, port),
        remotes,
        learning: learning && !evpn,
        evpn,
        mirror_port,
    })
}

/// Refuses the addresses a VXLAN port cannot use: multicast and broadcast
/// (VTEPs are listed one by one; no group is joined), and IPv6 link-local
/// ones, which need an interface (a scope) that vxlan ports do not take.
pub fn unscoped_unicast(address: IpAddr, what: &str) -> Result<(), String> {
    let refusal = match address {
        IpAddr::V4(v4) if v4.is_multicast() || v4.is_broadcast() => {
            "is not unicast: list each VTEP's own address (no multicast group is joined)"
        }
        IpAddr::V6(v6) if v6.is_multicast() => {
            "is not unicast: list each VTEP's own address (no multicast group is joined)"
        }
        IpAddr::V6(v6) if v6.is_unicast_link_local() => {
            "is link-local, which needs an interface: use a global or unique-local address"
        }
        _ => return Ok(()),
    };
    Err(format!("{what} {address} {refusal}"))
}

/// One line saying why a port could not be opened.
fn open_error(spec: &PortSpec, error: &io::Error) -> String {
    let reason = match (error.raw_os_error(), &spec.kind) {
        (Some(libc::ENODEV), _) => "no such interface".to_owned(),
        (Some(libc::EPERM | libc::EACCES), PortKind::Raw) => {
            "permission denied (a raw port needs CAP_NET_RAW, and CAP_NET_ADMIN if its link is down)"
                .to_owned()
        }
        (Some(libc::EPERM | libc::EACCES), PortKind::Tap) => {
            "permission denied (a tap port needs CAP_NET_ADMIN)".to_owned()
        }
        (Some(libc::EPERM | libc::EACCES), PortKind::Vxlan(_) | PortKind::Vhost(_)) => {
            "permission denied".to_owned()
        }
        (Some(libc::EBUSY), PortKind::Tap) => {
            "busy: another program has the tap's queue (a VM?); bridge it as raw:NAME".to_owned()
        }
        _ => error.to_string(),
    };
    format!("cannot open port {}: {reason}", spec.label())
}

fn tap_error(spec: &PortSpec, error: &TapError) -> String {
    match error {
        TapError::Io(error) => open_error(spec, error),
        other => format!("cannot open port {}: {other}", spec.label()),
    }
}

/// What ports are opened with: raw ports' receive ring layout.
#[derive(Debug, Clone, Copy)]
pub struct PortSettings {
    /// How raw ports' receive rings hand frames over.
    pub rx_ring: RingKind,
}

/// Opens `workers` queues of one port.
pub fn open_queues(
    spec: &PortSpec,
    workers: usize,
    settings: PortSettings,
) -> Result<Vec<LinkQueue>, String> {
    Ok(match &spec.kind {
        PortKind::Vxlan(config) => {
            // An address that cannot be bound comes with the reason (none
            // of this host's, or IPv6 still tentative).
            VxlanQueue::open(&spec.name, config.clone(), workers)
                .map_err(|e| format!("cannot open port {}: {e}", spec.label()))?
                .into_iter()
                .map(LinkQueue::Vxlan)
                .collect()
        }
        PortKind::Tap => {
            let tap = TapQueue::open(&spec.name, workers).map_err(|e| tap_error(spec, &e))?;
            if tap.existed {
                log::info!("tap {} existed before and will stay", spec.name);
            }
            tap.queues.into_iter().map(LinkQueue::Tap).collect()
        }
        PortKind::Vhost(config) => vhost::open(Path::new(&spec.name), *config, workers)
            .map_err(|e| format!("cannot open port {}: {e}", spec.label()))?
            .into_iter()
            .map(LinkQueue::Vhost)
            .collect(),
        PortKind::Raw => RawQueue::open_with(
            &spec.name,
            workers,
            settings.rx_ring,
            spec.ring.unwrap_or(DEFAULT_RING_BYTES),
        )
        .map_err(|e| open_error(spec, &e))?
        .into_iter()
        .map(LinkQueue::Raw)
        .collect(),
    })
}

/// Opens `workers` queues of each port: `result[w]` is worker `w`'s set.
pub fn open_ports(
    specs: &[PortSpec],
    workers: usize,
    settings: PortSettings,
) -> Result<Vec<Vec<LinkQueue>>, String> {
    let mut per_worker: Vec<Vec<LinkQueue>> = (0..workers).map(|_| Vec::new()).collect();
    for spec in specs {
        for (set, queue) in per_worker
            .iter_mut()
            .zip(open_queues(spec, workers, settings)?)
        {
            set.push(queue);
        }
    }
    Ok(per_worker)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vxlan(spec: &PortSpec) -> VxlanConfig {
        match &spec.kind {
            PortKind::Vxlan(config) => config.clone(),
            other => panic!("not a vxlan port: {other:?}"),
        }
    }

    fn vhost(spec: &PortSpec) -> VhostConfig {
        match &spec.kind {
            PortKind::Vhost(config) => *config,
            other => panic!("not a vhost port: {other:?}"),
        }
    }

    // Every kind: the description parses back to the same port, and
    // prints as it was given.
    #[test]
    fn every_kind_prints_as_it_parses() {
        for text in [
            "tap:t0",
            "tap:t0,access=10",
            "raw:eth1,trunk=10,100-102,native=20",
            "vxlan:seg,vni=42,local=198.18.1.1,port=4789,remote=198.18.1.2,learning=off",
            "vxlan:s6,vni=9,local=2001:2::1,port=8472,access=3",
            "vhost:/run/vm0.sock",
            "vhost:vm1.sock,client,max_memory=16G,access=10",
            "vhost:v.sock,socket_owner=0,socket_group=0,socket_mode=0660",
        ] {
            let spec: PortSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(spec.to_string().parse::<PortSpec>().unwrap(), spec);
        }
        let kinds: Vec<&str> = [
            "tap:a",
            "raw:b",
            "vxlan:c,vni=1,local=198.18.1.1",
            "vhost:d",
        ]
        .iter()
        .map(|text| PortSpec::parse(text).unwrap().kind.name())
        .collect();
        assert_eq!(kinds, ["tap", "raw", "vxlan", "vhost"]);
    }

    #[test]
    fn ports_parse_with_and_without_vlan_options() {
        let plain = PortSpec::parse("tap:t0").unwrap();
        assert_eq!(
            (&plain.kind, plain.name.as_str(), plain.vlans.clone()),
            (&PortKind::Tap, "t0", None)
        );
        assert_eq!(plain.vlans(), PortVlans::access(1));
        let access = PortSpec::parse("tap:t0,access=10").unwrap();
        assert_eq!(access.vlans, Some(PortVlans::access(10)));
        assert_eq!(access.describe(), "tap:t0,access=10");
        let trunk = PortSpec::parse("raw:eth1,trunk=10,20,100-102,native=20").unwrap();
        let vlans = trunk.vlans.clone().unwrap();
        assert_eq!(vlans.pvid(), Some(20));
        for vid in [10, 20, 100, 101, 102] {
            assert!(vlans.is_member(vid), "{vid}");
        }
        assert!(vlans.is_untagged(20) && !vlans.is_untagged(10));
        assert_eq!(trunk.describe(), "raw:eth1,trunk=10,100-102,native=20");
        // native= before trunk= is the same port.
        let reordered = PortSpec::parse("raw:eth1,native=20,trunk=10,20,100-102").unwrap();
        assert_eq!(reordered.vlans, trunk.vlans);
    }

    #[test]
    fn vxlan_ports_parse() {
        let spec = PortSpec::parse(
            "vxlan:seg,vni=42,local=198.18.1.1,remote=198.18.1.2,remote=198.18.1.3,access=10",
        )
        .unwrap();
        let config = vxlan(&spec);
        assert_eq!(config.vni, 42);
        assert_eq!(config.local, "198.18.1.1:4789".parse().unwrap());
        assert_eq!(config.remotes.len(), 2);
        assert!(config.learning);
        assert_eq!(spec.vlans, Some(PortVlans::access(10)));
        assert_eq!(
            spec.describe(),
            "vxlan:seg,vni=42,local=198.18.1.1,port=4789,remote=198.18.1.2,remote=198.18.1.3,access=10"
        );
        let quiet =
            PortSpec::parse("vxlan:s,vni=1,local=198.18.1.1,port=8472,learning=off").unwrap();
        let config = vxlan(&quiet);
        assert_eq!(config.local.port(), 8472);
        assert!(!config.learning && config.remotes.is_empty());
        // An IPv6 underlay: the description parses back to the same port.
        let v6 = PortSpec::parse("vxlan:s,vni=9,local=2001:2::1,remote=2001:2::2").unwrap();
        let config = vxlan(&v6);
        assert_eq!(config.local, "[2001:2::1]:4789".parse().unwrap());
        assert_eq!(config.remotes, ["2001:2::2".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            v6.describe(),
            "vxlan:s,vni=9,local=2001:2::1,port=4789,remote=2001:2::2"
        );
        assert_eq!(PortSpec::parse(&v6.describe()).unwrap(), v6);
        // EVPN: learning off, the mirror's port by default or as given.
        let evpn = PortSpec::parse("vxlan:e,vni=7,local=198.18.1.1,evpn=on").unwrap();
        let config = vxlan(&evpn);
        assert!(config.evpn && !config.learning);
        assert_eq!(config.mirror_port, DEFAULT_MIRROR_PORT);
        assert_eq!(
            evpn.describe(),
            "vxlan:e,vni=7,local=198.18.1.1,port=4789,evpn=on"
        );
        assert_eq!(PortSpec::parse(&evpn.describe()).unwrap(), evpn);
        let moved =
            PortSpec::parse("vxlan:e,vni=7,local=198.18.1.1,evpn=on,mirror_port=5000").unwrap();
        assert_eq!(vxlan(&moved).mirror_port, 5000);
        assert_eq!(PortSpec::parse(&moved.describe()).unwrap(), moved);
        for (spec, expected) in [
            ("vxlan:s,local=198.18.1.1", "needs vni="),
            ("vxlan:s,vni=16777216,local=198.18.1.1", "invalid vni"),
            ("vxlan:s,vni=1", "needs local="),
            ("vxlan:s,vni=1,local=nowhere", "invalid local address"),
            (
                "vxlan:s,vni=1,local=198.18.1.1,remote=::1",
                "not of one IP version",
            ),
            ("vxlan:s,vni=1,local=198.18.1.1,learning=maybe", "on or off"),
            (
                "vxlan:s,vni=1,local=198.18.1.1,evpn=yes",
                "evpn=yes: on or off",
            ),
            (
                "vxlan:s,vni=1,local=198.18.1.1,mirror_port=5000",
                "mirror_port= goes with evpn=on",
            ),
            (
                "vxlan:s,vni=1,local=198.18.1.1,evpn=on,mirror_port=0",
                "invalid mirror_port",
            ),
            (
                "vxlan:s,vni=1,local=198.18.1.1,evpn=on,mirror_port=4789",
                "mirror_port=4789 is the port's data port",
            ),
            (
                "vxlan:s,vni=1,local=198.18.1.1,port=5000,evpn=on,mirror_port=5000",
                "mirror_port=5000 is the port's data port",
            ),
            (
                "vxlan:s,vni=1,local=198.18.1.1,evpn=on,learning=off",
                "learning= does not go with evpn=on",
            ),
            ("vxlan:s,vni=1,evpn=on", "needs local="),
            (
                "vxlan:s,vni=1,local=198.18.1.1,remote=0.0.0.0",
                "own address",
            ),
            (
                "vxlan:s,vni=1,local=198.18.1.1,remote=239.1.1.1",
                "not unicast",
            ),
            (
                "vxlan:s,vni=1,local=198.18.1.1,remote=255.255.255.255",
                "not unicast",
            ),
            (
                "vxlan:s,vni=1,local=ff02::1",
                "local ff02::1 is not unicast",
            ),
            ("vxlan:s,vni=1,local=fe80::1", "local fe80::1 is link-local"),
            (
                "vxlan:s,vni=1,local=2001:2::1,remote=fe80::2",
                "remote fe80::2 is link-local",
            ),
            (
                "vxlan:s,vni=1,local=198.18.1.1,ttl=4",
                "unknown option 'ttl'",
            ),
            ("tap:t0,vni=1", "unknown option 'vni'"),
        ] {
            let error = PortSpec::parse(spec).unwrap_err();
            assert!(error.contains(expected), "{spec}: {error}");
        }
    }

    #[test]
    fn a_raw_port_takes_its_ring_size() {
        let small = PortSpec::parse("raw:veth1,ring=512K,isolated=on").unwrap();
        assert_eq!(small.ring, Some(512 << 10));
        assert_eq!(small.describe(), "raw:veth1,ring=512K,isolated=on");
        assert_eq!(PortSpec::parse(&small.describe()).unwrap(), small);
        assert_eq!(PortSpec::parse("raw:veth1").unwrap().ring, None);
        assert_eq!(
            PortSpec::parse("raw:e,ring=64K").unwrap().ring,
            Some(64 << 10)
        );
        assert_eq!(
            PortSpec::parse("raw:e,ring=256M").unwrap().ring,
            Some(256 << 20)
        );
        for (spec, expected) in [
            (
                "raw:e,ring=63K",
                "ring=63K: a receive ring's size from 64K to 256M",
            ),
            (
                "raw:e,ring=257M",
                "ring=257M: a receive ring's size from 64K to 256M",
            ),
            ("raw:e,ring=1x", "ring=1x: a receive ring's size"),
            ("tap:t0,ring=1M", "unknown option 'ring'"),
            ("vhost:v.sock,ring=1M", "unknown option 'ring'"),
        ] {
            let error = PortSpec::parse(spec).unwrap_err();
            assert!(error.contains(expected), "{spec}: {error}");
        }
    }

    #[test]
    fn vhost_ports_parse() {
        let server = PortSpec::parse("vhost:/run/vm0.sock").unwrap();
        assert_eq!(server.name, "/run/vm0.sock");
        assert_eq!(vhost(&server).mode, VhostMode::Server);
        assert_eq!(server.describe(), "vhost:/run/vm0.sock");
        let client = PortSpec::parse("vhost:vm1.sock,access=10,client").unwrap();
        assert_eq!(vhost(&client).mode, VhostMode::Client);
        assert_eq!(client.vlans, Some(PortVlans::access(10)));
        assert_eq!(client.label(), "vhost:vm1.sock");
        assert_eq!(client.describe(), "vhost:vm1.sock,client,access=10");
        assert_eq!(PortSpec::parse(&client.describe()).unwrap(), client);
        let limited = PortSpec::parse("vhost:vm2.sock,max_memory=16G").unwrap();
        assert_eq!(vhost(&limited).max_memory, 16 << 30);
        assert_eq!(limited.describe(), "vhost:vm2.sock,max_memory=16G");
        assert_eq!(PortSpec::parse(&limited.describe()).unwrap(), limited);
        assert_eq!(
            vhost(&server).max_memory,
            vhost::DEFAULT_MAX_MEMORY,
            "256G unless told"
        );
        for bad in ["0", "-1", "G", "12X", "99999999999T", ""] {
            let error = PortSpec::parse(&format!("vhost:v.sock,max_memory={bad}")).unwrap_err();
            assert!(error.contains("max_memory="), "{bad}: {error}");
        }
        let shared =
            PortSpec::parse("vhost:v.sock,socket_owner=0,socket_group=root,socket_mode=660")
                .unwrap();
        let access = vhost(&shared).access;
        assert_eq!(
            (access.owner, access.group, access.mode),
            (Some(0), Some(0), Some(0o660))
        );
        assert_eq!(
            shared.describe(),
            "vhost:v.sock,socket_owner=0,socket_group=0,socket_mode=0660"
        );
        assert_eq!(PortSpec::parse(&shared.describe()).unwrap(), shared);
        for (bad, expected) in [
            ("socket_mode=800", "socket_mode=800: octal"),
            ("socket_mode=1777", "socket_mode=1777: octal"),
            ("socket_owner=no-such-user-here", "no such user"),
            ("socket_group=no-such-group-here", "no such group"),
            ("client,socket_mode=600", "not with client"),
        ] {
            let error = PortSpec::parse(&format!("vhost:v.sock,{bad}")).unwrap_err();
            assert!(error.contains(expected), "{bad}: {error}");
        }
        let error = PortSpec::parse("tap:t0,max_memory=1G").unwrap_err();
        assert!(error.contains("unknown option 'max_memory'"), "{error}");
        for (spec, expected) in [
            ("vhost:", "invalid socket path"),
            (&format!("vhost:/{}", "x".repeat(107)), "1 to 107 bytes"),
            ("vhost:/s,server", "'server' is not an option"),
            ("vhost:/s,vni=3", "unknown option 'vni'"),
            ("tap:t0,client", "'client' is not an option"),
        ] {
            let error = PortSpec::parse(spec).unwrap_err();
            assert!(error.contains(expected), "{spec}: {error}");
        }
    }

    #[test]
    fn bad_vlan_options_are_one_line_errors() {
        for (spec, expected) in [
            ("tap:t0,access=0", "invalid VLAN id"),
            ("tap:t0,access=4095", "invalid VLAN id"),
            ("tap:t0,access=10,trunk=20", "exclude each other"),
            ("tap:t0,access=10,native=20", "goes with trunk="),
            ("tap:t0,native=20", "needs trunk="),
            ("tap:t0,trunk=10,x", "invalid VLAN id"),
            ("tap:t0,trunk=30-20", "backwards"),
            ("tap:t0,vlan=3", "unknown option 'vlan'"),
            ("tap:t0,access=10,12", "not an option"),
            ("tap:t0,access=1,access=2", "given twice"),
            ("tap:t0,", "not an option"),
        ] {
            let error = PortSpec::parse(spec).unwrap_err();
            assert!(error.contains(expected), "{spec}: {error}");
            assert!(error.contains(spec), "{spec}: {error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }
}
