//! Port specifications (`tap:NAME`, `raw:IFNAME`) and opening their queues,
//! at start and when a port is added while running.

use std::io;

use bridge::port::tap::TapError;
use bridge::port::{LinkPort, RawPort, TapPort};

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
}

impl PortSpec {
    /// Parses `tap:NAME` or `raw:IFNAME`.
    pub fn parse(spec: &str) -> Result<PortSpec, String> {
        let (kind, name) = match spec.split_once(':') {
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
        })
    }

    /// The port as `--port` gives it.
    pub fn label(&self) -> String {
        match self.kind {
            Kind::Tap => format!("tap:{}", self.name),
            Kind::Raw => format!("raw:{}", self.name),
        }
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
