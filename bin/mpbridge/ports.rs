//! Port specifications (`tap:NAME`, `raw:IFNAME`, each with VLAN options
//! such as `,access=10` or `,trunk=10,20,native=30`) and opening their
//! queues, at start and when a port is added while running.

use std::io;

use bridge::port::tap::TapError;
use bridge::port::{LinkPort, RawPort, TapPort};
use bridge::vlan::{self, PortVlans, VlanSet};

/// What kind of port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A tap mpbridge owns.
    Tap,
    /// An existing interface, through AF_PACKET.
    Raw,
}

/// A port as `--port` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// Tap or raw.
    pub kind: Kind,
    /// The interface's name.
    pub name: String,
    /// Its VLANs, when given (they need VLAN filtering).
    pub vlans: Option<PortVlans>,
}

impl PortSpec {
    /// Parses `tap:NAME` or `raw:IFNAME`, then VLAN options: `access=VID`,
    /// or `trunk=LIST` (numbers and ranges, `10,20,100-110`, running to the
    /// next `key=value`) with an optional `native=VID`.
    pub fn parse(spec: &str) -> Result<PortSpec, String> {
        let (port, options) = match spec.split_once(',') {
            Some((port, options)) => (port, Some(options)),
            None => (spec, None),
        };
        let mut parsed = PortSpec::parse_port(port, spec)?;
        if let Some(options) = options {
            parsed.vlans =
                Some(parse_vlan_options(options).map_err(|e| format!("port '{spec}': {e}"))?);
        }
        Ok(parsed)
    }

    fn parse_port(port: &str, spec: &str) -> Result<PortSpec, String> {
        let (kind, name) = match port.split_once(':') {
            Some(("tap", name)) => (Kind::Tap, name),
            Some(("raw", name)) => (Kind::Raw, name),
            _ => {
                return Err(format!(
                    "invalid port '{spec}' (expected tap:NAME or raw:IFNAME)"
                ))
            }
        };
        if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ', ':']) {
            return Err(format!(
                "invalid interface name in port '{spec}' (1 to 15 characters)"
            ));
        }
        Ok(PortSpec {
            kind,
            name: name.to_owned(),
            vlans: None,
        })
    }

    /// The port's VLANs: as given, or VLAN 1 untagged (the Linux bridge's
    /// default PVID).
    pub fn vlans(&self) -> PortVlans {
        self.vlans.clone().unwrap_or_default()
    }

    /// The port and its options, as `--port` takes them.
    pub fn describe(&self) -> String {
        match &self.vlans {
            Some(vlans) => format!("{},{vlans}", self.label()),
            None => self.label(),
        }
    }

    /// The port as `--port` gives it.
    pub fn label(&self) -> String {
        match self.kind {
            Kind::Tap => format!("tap:{}", self.name),
            Kind::Raw => format!("raw:{}", self.name),
        }
    }
}

/// Parses the VLAN options after a port's name.
fn parse_vlan_options(options: &str) -> Result<PortVlans, String> {
    let mut access = None;
    let mut trunk: Option<Vec<&str>> = None;
    let mut native = None;
    let mut in_trunk = false;
    for item in options.split(',') {
        match item.split_once('=') {
            Some(("access", value)) if access.is_none() => {
                access = Some(vlan::parse_vid(value)?);
                in_trunk = false;
            }
            Some(("trunk", value)) if trunk.is_none() => {
                trunk = Some(vec![value]);
                in_trunk = true;
            }
            Some(("native", value)) if native.is_none() => {
                native = Some(vlan::parse_vid(value)?);
                in_trunk = false;
            }
            Some((key @ ("access" | "trunk" | "native"), _)) => {
                return Err(format!("{key}= given twice"))
            }
            Some((key, _)) => {
                return Err(format!(
                    "unknown option '{key}' (access=VID, trunk=LIST, native=VID)"
                ))
            }
            None if in_trunk => trunk.as_mut().expect("in a trunk list").push(item),
            None => {
                return Err(format!(
                    "'{item}' is not an option (access=VID, trunk=LIST, native=VID)"
                ))
            }
        }
    }
    match (access, trunk, native) {
        (Some(vid), None, None) => Ok(PortVlans::access(vid)),
        (None, Some(list), native) => {
            Ok(PortVlans::trunk(VlanSet::parse(&list.join(","))?, native))
        }
        (Some(_), Some(_), _) => Err("access= and trunk= exclude each other".to_owned()),
        (Some(_), None, Some(_)) => {
            Err("native= goes with trunk= (an access port's VLAN is untagged already)".to_owned())
        }
        (None, None, Some(_)) => Err("native= needs trunk=".to_owned()),
        (None, None, None) => Err("no options after ','".to_owned()),
    }
}

/// One line saying why a port could not be opened.
fn open_error(spec: &PortSpec, error: &io::Error) -> String {
    let reason = match (error.raw_os_error(), spec.kind) {
        (Some(libc::ENODEV), _) => "no such interface".to_owned(),
        (Some(libc::EPERM | libc::EACCES), Kind::Raw) => {
            "permission denied (a raw port needs CAP_NET_RAW, and CAP_NET_ADMIN if its link is down)"
                .to_owned()
        }
        (Some(libc::EPERM | libc::EACCES), Kind::Tap) => {
            "permission denied (a tap port needs CAP_NET_ADMIN)".to_owned()
        }
        (Some(libc::EBUSY), Kind::Tap) => {
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

/// Opens `workers` queues of one port.
pub fn open_queues(spec: &PortSpec, workers: usize) -> Result<Vec<LinkPort>, String> {
    Ok(match spec.kind {
        Kind::Tap => {
            let tap = TapPort::open(&spec.name, workers).map_err(|e| tap_error(spec, &e))?;
            if tap.existed {
                log::info!("tap {} existed before and will stay", spec.name);
            }
            tap.queues.into_iter().map(LinkPort::Tap).collect()
        }
        Kind::Raw => RawPort::open(&spec.name, workers)
            .map_err(|e| open_error(spec, &e))?
            .into_iter()
            .map(LinkPort::Raw)
            .collect(),
    })
}

/// Opens `workers` queues of each port: `result[w]` is worker `w`'s set.
pub fn open_ports(specs: &[PortSpec], workers: usize) -> Result<Vec<Vec<LinkPort>>, String> {
    let mut per_worker: Vec<Vec<LinkPort>> = (0..workers).map(|_| Vec::new()).collect();
    for spec in specs {
        for (set, queue) in per_worker.iter_mut().zip(open_queues(spec, workers)?) {
            set.push(queue);
        }
    }
    Ok(per_worker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_with_and_without_vlan_options() {
        let plain = PortSpec::parse("tap:t0").unwrap();
        assert_eq!(
            (plain.kind, plain.name.as_str(), plain.vlans.clone()),
            (Kind::Tap, "t0", None)
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
