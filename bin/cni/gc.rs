//! STATUS and GC (spec 1.1.0). STATUS: ready while the bridge answers,
//! code 50 when it does not; an IPAM plugin that speaks 1.1.0 is asked
//! too. GC: this network's ports whose attachment is not among
//! `cni.dev/valid-attachments` are removed with their veths and their
//! leases; then IPAM's own GC, where it speaks 1.1.0. GC goes on past
//! errors and reports the first.

use std::collections::HashSet;

use serde_json::Value;

use crate::control::Bridge;
use crate::del::detach;
use crate::env::{Command, Env};
use crate::ipam::Ipam;
use crate::spec::{code, Attachment, Error, NetConf};

/// STATUS.
pub fn status(conf: &NetConf, raw: &Value, env: &Env) -> Result<(), Error> {
    Bridge::of(conf).answers().map_err(|f| {
        let mut error = f.into_error();
        error.code = code::NOT_AVAILABLE;
        error
    })?;
    // CNI_PATH is optional for STATUS: without it there is no IPAM
    // plugin to ask.
    if env.path.is_empty() {
        return Ok(());
    }
    match Ipam::find(conf, env)? {
        Some(ipam) if ipam.speaks_1_1() => ipam.call_quiet(Command::Status, raw, env),
        _ => Ok(()),
    }
}

/// GC.
pub fn gc(conf: &NetConf, raw: &Value, env: &Env) -> Result<(), Error> {
    // The newer key, or the one runtimes sent before the spec named it;
    // null (a runtime's empty list) is no attachment. Without either, GC
    // would remove every port of the network: refused.
    let listed = ["cni.dev/valid-attachments", "cni.dev/attachments"]
        .iter()
        .find_map(|key| raw.get(*key))
        .ok_or_else(|| {
            Error::new(
                code::INVALID_NETWORK_CONFIG,
                "GC needs cni.dev/valid-attachments",
            )
        })?;
    let valid: Vec<Attachment> = match listed {
        Value::Null => Vec::new(),
        list => serde_json::from_value(list.clone()).map_err(|e| {
            Error::new(
                code::INVALID_NETWORK_CONFIG,
                format!("cni.dev/valid-attachments: {e}"),
            )
        })?,
    };
    let valid: HashSet<(&str, &str)> = valid
        .iter()
        .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
        .collect();
    let bridge = Bridge::of(conf);
    let ipam = Ipam::find(conf, env)?;
    let mut errors = Vec::new();
    // A bridge that does not answer has no ports to look at; IPAM's GC
    // still runs, and the error is reported after it.
    let ports = bridge.ports().unwrap_or_else(|failure| {
        errors.push(failure.into_error());
        Vec::new()
    });
    for owner in ports.iter().filter_map(|p| p.owner.as_ref()) {
        if owner.network != conf.name
            || valid.contains(&(owner.container.as_str(), owner.ifname.as_str()))
        {
            continue;
        }
        detach(
            &bridge,
            &conf.name,
            &owner.container,
            &owner.ifname,
            &mut errors,
        );
        if let Some(ipam) = &ipam {
            // Its lease, by a DEL of its own: IPAM plugins without GC
            // (host-local) release it so.
            let stale = Env {
                container_id: owner.container.clone(),
                netns: String::new(),
                ifname: owner.ifname.clone(),
                path: env.path.clone(),
                args: String::new(),
            };
            let mut del = raw.clone();
            if let Some(object) = del.as_object_mut() {
                object.remove("cni.dev/valid-attachments");
                object.remove("cni.dev/attachments");
            }
            if let Err(error) = ipam.call_quiet(Command::Del, &del, &stale) {
                errors.push(error);
            }
        }
    }
    if let Some(ipam) = ipam.filter(Ipam::speaks_1_1) {
        if let Err(error) = ipam.call_quiet(Command::Gc, raw, env) {
            errors.push(error);
        }
    }
    match errors.into_iter().next() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
