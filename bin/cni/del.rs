//! DEL: the container's port off the bridge, its veth gone, its IPAM lease
//! released. Idempotent: a bridge that does not run, a namespace, veth or
//! port already gone are all fine, and the lease is released whatever
//! else failed.

use bridge::rtnl::Rtnl;
use serde_json::Value;

use crate::control::{Bridge, Failure};
use crate::env::{Command, Env};
use crate::ipam::Ipam;
use crate::link;
use crate::protocol::PortInfo;
use crate::spec::{Error, NetConf};

/// Whether `port` is the one ADD made for this attachment.
pub fn is_attachment(port: &PortInfo, network: &str, container: &str, ifname: &str) -> bool {
    match &port.owner {
        Some(owner) => {
            owner.network == network && owner.container == container && owner.ifname == ifname
        }
        None => false,
    }
}

/// DEL.
pub fn del(conf: &NetConf, raw: &Value, env: &Env) -> Result<(), Error> {
    let mut errors: Vec<Error> = Vec::new();
    detach(
        &Bridge::of(conf),
        &conf.name,
        &env.container_id,
        &env.ifname,
        &mut errors,
    );
    match Ipam::find(conf, env) {
        Ok(Some(ipam)) => {
            if let Err(error) = ipam.call_quiet(Command::Del, raw, env) {
                errors.push(error);
            }
        }
        Ok(None) => {}
        Err(error) => errors.push(error),
    }
    match errors.into_iter().next() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Takes attachment (`container`, `ifname`) of network `network` off the
/// bridge and deletes its veth; what fails goes into `errors`.
pub fn detach(
    bridge: &Bridge,
    network: &str,
    container: &str,
    ifname: &str,
    errors: &mut Vec<Error>,
) {
    let host = link::host_name(container, ifname);
    match bridge.ports() {
        Ok(ports) => {
            let port = ports
                .iter()
                .find(|port| is_attachment(port, network, container, ifname));
            if let Some(port) = port {
                if let Err(failure) = bridge.del_port(&port.name) {
                    errors.push(failure.into_error());
                }
            }
        }
        // A bridge that does not run has no port to remove; one started
        // again starts empty.
        Err(Failure::Unreachable(_)) => {}
        Err(failure) => errors.push(failure.into_error()),
    }
    // Its peer in the container, if the namespace still stands, goes
    // with it.
    if let Err(e) = Rtnl::open().and_then(|mut rtnl| link::delete(&mut rtnl, &host)) {
        errors.push(Error::internal(format!("deleting {host}: {e}")));
    }
}
