//! ADD: IPAM's addresses, a veth pair (the container's end named
//! CNI_IFNAME in its namespace, up, addressed and routed), the host end
//! added to the bridge as a port with its owner, VLAN and flags, and the
//! result in the configuration's version. What was made is undone, in
//! reverse, when a later step fails.

use bridge::rtnl::Rtnl;
use serde_json::Value;

use crate::control::Bridge;
use crate::env::Env;
use crate::ipam::Ipam;
use crate::link;
use crate::protocol::PortOwner;
use crate::spec::{code, Error, Interface, NetConf, Outcome};

/// A container's port's receive ring per worker unless `ring` says:
/// about 570 KiB resident per port and worker (docs/benchmarks.md,
/// "Container ports: the receive ring's size").
pub const DEFAULT_RING: &str = "512K";

/// What ADD has made so far, to undo.
#[derive(Default)]
struct Made {
    lease: bool,
    veth: Option<String>,
    port: Option<String>,
}

/// ADD: the result for the configuration's version.
pub fn add(conf: &NetConf, raw: &Value, env: &Env) -> Result<Value, Error> {
    let owner = PortOwner::new(
        conf.name.clone(),
        env.container_id.clone(),
        env.ifname.clone(),
    )
    .map_err(|e| {
        // The network's name is the configuration's; the rest the
        // environment's.
        let code = match e.starts_with("owner network") {
            true => code::INVALID_NETWORK_CONFIG,
            false => code::INVALID_ENVIRONMENT,
        };
        Error::new(code, e)
    })?;
    let bridge = Bridge::of(conf);
    // Before anything is made: a bridge that does not run takes no one.
    bridge.answers().map_err(|f| f.into_error())?;
    let ns = link::open_netns(&env.netns).map_err(|e| {
        Error::new(
            code::INVALID_ENVIRONMENT,
            format!("failed to open netns {:?}: {e}", env.netns),
        )
    })?;
    let ipam = Ipam::find(conf, env)?;
    let mut made = Made::default();
    let result = attach(
        conf,
        raw,
        env,
        &ns,
        &bridge,
        owner,
        ipam.as_ref(),
        &mut made,
    );
    if result.is_err() {
        undo(&made, raw, env, &bridge, ipam.as_ref());
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn attach(
    conf: &NetConf,
    raw: &Value,
    env: &Env,
    ns: &std::fs::File,
    bridge: &Bridge,
    owner: PortOwner,
    ipam: Option<&Ipam>,
    made: &mut Made,
) -> Result<Value, Error> {
    let mut outcome = match ipam {
        Some(ipam) => {
            let outcome = ipam.add(raw, env)?;
            made.lease = true;
            outcome
        }
        None => Outcome::default(),
    };
    let io = |what: &str| {
        let what = what.to_owned();
        move |e: std::io::Error| Error::internal(format!("{what}: {e}"))
    };
    let mut host_rtnl = Rtnl::open().map_err(io("rtnetlink"))?;
    let mut ns_rtnl = link::rtnl_in(ns).map_err(io("entering the container's netns"))?;
    if link::find(&mut ns_rtnl, &env.ifname)
        .map_err(io("listing links"))?
        .is_some()
    {
        return Err(Error::internal(format!(
            "container veth name provided ({}) already exists",
            env.ifname
        )));
    }
    let host = link::host_name(&env.container_id, &env.ifname);
    link::make_veth(&mut host_rtnl, &host, &env.ifname, ns, conf.mtu)
        .map_err(io(&format!("making veth {host}")))?;
    made.veth = Some(host.clone());
    let inside = link::find(&mut ns_rtnl, &env.ifname)
        .map_err(io("listing links"))?
        .ok_or_else(|| Error::internal(format!("{} vanished from the netns", env.ifname)))?;
    link::set_up(&mut ns_rtnl, inside.index).map_err(io(&format!("setting {} up", env.ifname)))?;
    if outcome
        .ips
        .iter()
        .any(|ip| ip.cidr().is_some_and(|(a, _)| a.is_ipv6()))
    {
        link::enable_ipv6(ns, &env.ifname).map_err(io("enabling IPv6 in the netns"))?;
    }
    link::configure(&mut ns_rtnl, inside.index, &outcome, 1)
        .map_err(io(&format!("addressing {}", env.ifname)))?;
    let outside = link::find(&mut host_rtnl, &host)
        .map_err(io("listing links"))?
        .ok_or_else(|| Error::internal(format!("{host} vanished")))?;
    link::set_up(&mut host_rtnl, outside.index).map_err(io(&format!("setting {host} up")))?;

    let port = format!("raw:{host}");
    let mut spec = format!(
        "{port},ring={}",
        conf.ring.as_deref().unwrap_or(DEFAULT_RING)
    );
    if let Some(vlan) = conf.vlan {
        spec.push_str(&format!(",access={vlan}"));
    }
    for (on, flag) in [
        (conf.isolated, "isolated"),
        (conf.hairpin_mode, "hairpin"),
        (conf.macspoofchk, "locked"),
    ] {
        if on {
            spec.push_str(&format!(",{flag}=on"));
        }
    }
    // Before the request: one that timed out may still have added it. The
    // name is of the veth just made, so no other port has it.
    made.port = Some(port.clone());
    bridge.add_port(&spec, owner).map_err(|f| f.into_error())?;
    if conf.macspoofchk {
        // The locked port admits only sources with a static entry on it.
        bridge
            .add_static(&inside.mac, &port, conf.vlan.unwrap_or(0))
            .map_err(|f| f.into_error())?;
    }

    let mtu = conf.mtu;
    outcome.interfaces = vec![
        Interface {
            name: host,
            mac: outside.mac,
            mtu,
            sandbox: String::new(),
        },
        Interface {
            name: env.ifname.clone(),
            mac: inside.mac,
            mtu,
            sandbox: env.netns.clone(),
        },
    ];
    for ip in &mut outcome.ips {
        ip.interface = ip.interface.or(Some(1));
    }
    if let Some(dns) = &conf.dns {
        outcome.dns = dns.clone();
    }
    if let Some(prev) = &conf.prev_result {
        let prev = Outcome::from_any(prev.clone())
            .map_err(|e| Error::new(code::INVALID_NETWORK_CONFIG, format!("prevResult: {e}")))?;
        outcome = outcome.after(prev);
    }
    Ok(outcome.in_version(&conf.cni_version))
}

/// Undoes what ADD made, newest first; each step as far as it goes (the
/// error that stopped ADD is the one reported).
fn undo(made: &Made, raw: &Value, env: &Env, bridge: &Bridge, ipam: Option<&Ipam>) {
    if let Some(port) = &made.port {
        if let Err(failure) = bridge.del_port(port) {
            eprintln!("mpbridge-cni: undoing ADD: {}", failure.into_error().msg);
        }
    }
    if let Some(host) = &made.veth {
        // Its peer in the container goes with it.
        if let Err(e) = Rtnl::open().and_then(|mut rtnl| link::delete(&mut rtnl, host)) {
            eprintln!("mpbridge-cni: undoing ADD: deleting {host}: {e}");
        }
    }
    if let (true, Some(ipam)) = (made.lease, ipam) {
        if let Err(error) = ipam.call_quiet(crate::env::Command::Del, raw, env) {
            eprintln!("mpbridge-cni: undoing ADD: {}", error.msg);
        }
    }
}
