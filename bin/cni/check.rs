//! CHECK: the attachment is as ADD left it (prevResult): the container's
//! interface with its MAC, addresses and routes, its veth peer on the
//! host, up, and the bridge port of that peer with this attachment as its
//! owner. IPAM checks its lease.

use bridge::rtnl::Rtnl;
use serde_json::Value;

use crate::control::Bridge;
use crate::del::is_attachment;
use crate::env::{Command, Env};
use crate::ipam::Ipam;
use crate::link;
use crate::spec::{cidr, code, Error, NetConf, Outcome};

/// CHECK.
pub fn check(conf: &NetConf, raw: &Value, env: &Env) -> Result<(), Error> {
    let prev = conf
        .prev_result
        .clone()
        .ok_or_else(|| Error::new(code::INVALID_NETWORK_CONFIG, "CHECK needs a prevResult"))?;
    let prev = Outcome::from_any(prev)
        .map_err(|e| Error::new(code::INVALID_NETWORK_CONFIG, format!("prevResult: {e}")))?;
    if let Some(ipam) = Ipam::find(conf, env)? {
        ipam.call_quiet(Command::Check, raw, env)?;
    }
    let wrong = |msg: String| Err(Error::internal(msg));
    let Some((index, expected)) = prev
        .interfaces
        .iter()
        .enumerate()
        .find(|(_, i)| i.name == env.ifname && !i.sandbox.is_empty())
    else {
        return wrong(format!(
            "prevResult has no interface {} in a sandbox",
            env.ifname
        ));
    };
    if expected.sandbox != env.netns {
        return wrong(format!(
            "{} is in sandbox {}, not CNI_NETNS {}",
            env.ifname, expected.sandbox, env.netns
        ));
    }
    let io = |what: &str| {
        let what = what.to_owned();
        move |e: std::io::Error| Error::internal(format!("{what}: {e}"))
    };
    // Not code 3 (unknown container): that would tell the runtime that
    // no DEL is needed, and the port and the lease would stay.
    let ns = link::open_netns(&env.netns)
        .map_err(|e| Error::internal(format!("failed to open netns {:?}: {e}", env.netns)))?;
    let mut ns_rtnl = link::rtnl_in(&ns).map_err(io("entering the container's netns"))?;
    let Some(inside) = link::find(&mut ns_rtnl, &env.ifname).map_err(io("listing links"))? else {
        return wrong(format!("container interface {} is gone", env.ifname));
    };
    if !expected.mac.is_empty() && !expected.mac.eq_ignore_ascii_case(&inside.mac) {
        return wrong(format!(
            "{} has MAC {}, not {}",
            env.ifname, inside.mac, expected.mac
        ));
    }
    if !inside.up {
        return wrong(format!("{} is down", env.ifname));
    }
    let addresses = link::addresses(&mut ns_rtnl, inside.index).map_err(io("listing addresses"))?;
    for ip in prev.ips.iter().filter(|ip| ip.interface == Some(index)) {
        if !ip.cidr().is_some_and(|a| addresses.contains(&a)) {
            return wrong(format!("{} lacks address {}", env.ifname, ip.address));
        }
    }
    let routes = link::routes(&mut ns_rtnl, inside.index).map_err(io("listing routes"))?;
    for route in &prev.routes {
        let Some((dst, len)) = cidr(&route.dst) else {
            return wrong(format!("prevResult route {} is not a CIDR", route.dst));
        };
        let found = routes.iter().any(|&(d, l, gw)| {
            (d, l) == (dst, len) && route.gw.is_none_or(|want| gw == Some(want))
        });
        if !found {
            let via = route.gw.map(|gw| format!(" via {gw}")).unwrap_or_default();
            return wrong(format!(
                "no route to {}{via} out of {}",
                route.dst, env.ifname
            ));
        }
    }

    let host = link::host_name(&env.container_id, &env.ifname);
    let mut host_rtnl = Rtnl::open().map_err(io("rtnetlink"))?;
    let Some(outside) = link::find(&mut host_rtnl, &host).map_err(io("listing links"))? else {
        return wrong(format!("host veth {host} is gone"));
    };
    if inside.peer != Some(outside.index) {
        return wrong(format!("{} is not the peer of {host}", env.ifname));
    }
    if !outside.up {
        return wrong(format!("host veth {host} is down"));
    }
    let ports = Bridge::of(conf).ports().map_err(|f| f.into_error())?;
    let port = format!("raw:{host}");
    match ports.iter().find(|p| p.name == port) {
        Some(p) if is_attachment(p, &conf.name, &env.container_id, &env.ifname) => Ok(()),
        Some(_) => wrong(format!("bridge port {port} belongs to another attachment")),
        None => wrong(format!("bridge port {port} is gone")),
    }
}
