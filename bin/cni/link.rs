//! A container's link: the veth pair (the host end on the bridge, the
//! container end named CNI_IFNAME in the container's namespace), its
//! addresses and routes, read back for CHECK, and removed. All through
//! rtnetlink (`bridge::rtnl::Rtnl`); the container's side through a
//! socket opened inside its namespace.

use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

use bridge::rtnl::Rtnl;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol,
    RouteScope, RouteType,
};
use netlink_packet_route::AddressFamily;
use serde_json::Value;

use crate::spec::{cidr, Outcome, Route};

/// The host end's name for an attachment: "mpb" and 12 hex digits of a
/// hash of the container's id and interface name, so that DEL and GC find
/// it from the attachment alone (15 bytes, Linux's most).
pub fn host_name(container_id: &str, ifname: &str) -> String {
    // FNV-1a, 64 bits: stable across builds, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in container_id.bytes().chain([0]).chain(ifname.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("mpb{:012x}", hash >> 16)
}

/// Opens a network namespace by its path (CNI_NETNS).
pub fn open_netns(path: &str) -> io::Result<File> {
    File::open(path)
}

/// Runs `f` in namespace `ns`, on a thread that enters it, so that this
/// process stays where it is.
pub fn in_netns<T: Send>(ns: &File, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from)?;
                f()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("a thread in the netns panicked")))
    })
}

/// An rtnetlink socket in namespace `ns`; it keeps talking to the
/// namespace it was made in.
pub fn rtnl_in(ns: &File) -> io::Result<Rtnl> {
    in_netns(ns, Rtnl::open)
}

/// Lets `ifname` (and `lo`) in namespace `ns` take IPv6 addresses, as the
/// reference plugins do: a runtime may have turned IPv6 off by default.
pub fn enable_ipv6(ns: &File, ifname: &str) -> io::Result<()> {
    in_netns(ns, || {
        for dev in ["lo", ifname] {
            let path = format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6");
            match std::fs::write(&path, "0") {
                // A kernel without IPv6 has no such file; adding the
                // address then says so.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
        Ok(())
    })
}

/// Makes the veth pair: `host` here, `ifname` in `ns`, both of `mtu`.
pub fn make_veth(
    host_rtnl: &mut Rtnl,
    host: &str,
    ifname: &str,
    ns: &File,
    mtu: Option<u32>,
) -> io::Result<()> {
    let mut peer = LinkMessage::default();
    peer.attributes
        .push(LinkAttribute::IfName(ifname.to_owned()));
    peer.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
    let mut link = LinkMessage::default();
    link.attributes.push(LinkAttribute::IfName(host.to_owned()));
    if let Some(mtu) = mtu {
        peer.attributes.push(LinkAttribute::Mtu(mtu));
        link.attributes.push(LinkAttribute::Mtu(mtu));
    }
    link.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
    ]));
    host_rtnl.new_link(link)
}

/// What the plugin needs of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Its index.
    pub index: u32,
    /// Its MAC address, "aa:bb:cc:dd:ee:ff".
    pub mac: String,
    /// Its MTU.
    pub mtu: u32,
    /// Whether it is up.
    pub up: bool,
    /// The index of its veth peer (in whatever namespace that is), when
    /// it is a veth.
    pub peer: Option<u32>,
}

/// Link `name` in the socket's namespace.
pub fn find(rtnl: &mut Rtnl, name: &str) -> io::Result<Option<Link>> {
    Ok(rtnl.link_named(name)?.map(|link| {
        let mut out = Link {
            index: link.header.index,
            mac: String::new(),
            mtu: 0,
            up: link.header.flags.contains(LinkFlags::Up),
            peer: None,
        };
        for attribute in &link.attributes {
            match attribute {
                LinkAttribute::Address(bytes) => out.mac = mac_text(bytes),
                LinkAttribute::Mtu(mtu) => out.mtu = *mtu,
                LinkAttribute::Link(peer) => out.peer = Some(*peer),
                _ => {}
            }
        }
        out
    }))
}

fn mac_text(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Sets link `index` up.
pub fn set_up(rtnl: &mut Rtnl, index: u32) -> io::Result<()> {
    let mut link = LinkMessage::default();
    link.header.index = index;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    rtnl.set_link(link)
}

/// Deletes link `name`; fine when there is none.
pub fn delete(rtnl: &mut Rtnl, name: &str) -> io::Result<()> {
    match find(rtnl, name)? {
        Some(link) => rtnl.del_link(link.index),
        None => Ok(()),
    }
}

/// Gives the container's link `index` the result's addresses (those of
/// interface `interface`, or of none) and routes, as the reference
/// plugins' ConfigureIface does: a route without a gateway goes by the
/// first gateway of its family, or onto the link when there is none; a
/// route that exists already is fine. IPv6 addresses skip duplicate
/// address detection (the reference turns it off), so they are usable at
/// once.
pub fn configure(
    rtnl: &mut Rtnl,
    index: u32,
    outcome: &Outcome,
    interface: usize,
) -> io::Result<()> {
    let mut gateways: Vec<IpAddr> = Vec::new();
    for ip in &outcome.ips {
        if ip.interface.is_some_and(|i| i != interface) {
            continue;
        }
        let (address, len) = ip
            .cidr()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, ip.address.clone()))?;
        let mut message = AddressMessage::default();
        message.header.family = family(address);
        message.header.prefix_len = len;
        message.header.index = index;
        if address.is_ipv4() {
            message.attributes.push(AddressAttribute::Local(address));
        } else {
            message.header.flags = AddressHeaderFlags::Nodad;
        }
        message.attributes.push(AddressAttribute::Address(address));
        rtnl.new_address(message)?;
        gateways.extend(ip.gateway);
    }
    for route in &outcome.routes {
        let message = route_message(route, index, &gateways)?;
        match rtnl.new_route(message) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            other => other?,
        }
    }
    Ok(())
}

/// The route `route` out of link `index`, with 1.1.0's fields (mtu,
/// advmss, priority, table, scope) where it has them.
fn route_message(route: &Route, index: u32, gateways: &[IpAddr]) -> io::Result<RouteMessage> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let (dst, len) = cidr(&route.dst).ok_or_else(|| bad(route.dst.clone()))?;
    let gw = route.gw.or_else(|| {
        gateways
            .iter()
            .copied()
            .find(|g| g.is_ipv4() == dst.is_ipv4())
    });
    let number = |key: &str| -> io::Result<Option<u32>> {
        match route.rest.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| bad(format!("route {}: {key} {value}", route.dst))),
        }
    };
    let mut message = RouteMessage::default();
    message.header.address_family = family(dst);
    message.header.destination_prefix_length = len;
    message.header.table = RouteHeader::RT_TABLE_MAIN;
    message.header.protocol = RouteProtocol::Boot;
    message.header.kind = RouteType::Unicast;
    message.header.scope = match (number("scope")?, gw) {
        (Some(scope), _) => RouteScope::from(
            u8::try_from(scope).map_err(|_| bad(format!("route {}: scope", route.dst)))?,
        ),
        (None, Some(_)) => RouteScope::Universe,
        (None, None) => RouteScope::Link,
    };
    if let Some(table) = number("table")? {
        match u8::try_from(table) {
            Ok(small) => message.header.table = small,
            Err(_) => {
                message.header.table = 0;
                message.attributes.push(RouteAttribute::Table(table));
            }
        }
    }
    if len > 0 {
        message
            .attributes
            .push(RouteAttribute::Destination(route_address(dst)));
    }
    if let Some(gw) = gw {
        message
            .attributes
            .push(RouteAttribute::Gateway(route_address(gw)));
    }
    message.attributes.push(RouteAttribute::Oif(index));
    if let Some(priority) = number("priority")? {
        message.attributes.push(RouteAttribute::Priority(priority));
    }
    let mut metrics = Vec::new();
    if let Some(mtu) = number("mtu")? {
        metrics.push(RouteMetric::Mtu(mtu));
    }
    if let Some(advmss) = number("advmss")? {
        metrics.push(RouteMetric::Advmss(advmss));
    }
    if !metrics.is_empty() {
        message.attributes.push(RouteAttribute::Metrics(metrics));
    }
    Ok(message)
}

/// The addresses (with prefix lengths) of link `index`.
pub fn addresses(rtnl: &mut Rtnl, index: u32) -> io::Result<Vec<(IpAddr, u8)>> {
    Ok(rtnl
        .addresses()?
        .into_iter()
        .filter(|a| a.header.index == index)
        .filter_map(|a| {
            let len = a.header.prefix_len;
            a.attributes.iter().find_map(|attribute| match attribute {
                AddressAttribute::Address(address) => Some((*address, len)),
                _ => None,
            })
        })
        .collect())
}

/// A route as CHECK compares it: destination, prefix length, gateway.
pub type RouteSeen = (IpAddr, u8, Option<IpAddr>);

/// The routes out of link `index`, of both families and every table.
pub fn routes(rtnl: &mut Rtnl, index: u32) -> io::Result<Vec<RouteSeen>> {
    let address = |a: &RouteAddress| match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    };
    let mut out = Vec::new();
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let unspecified = if family == AddressFamily::Inet {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        };
        for route in rtnl.routes(family)? {
            let oif = route
                .attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Oif(i) if *i == index));
            if !oif {
                continue;
            }
            let (mut dst, mut gw) = (None, None);
            for attribute in &route.attributes {
                match attribute {
                    RouteAttribute::Destination(a) => dst = address(a),
                    RouteAttribute::Gateway(a) => gw = address(a),
                    _ => {}
                }
            }
            let len = route.header.destination_prefix_length;
            out.push((dst.unwrap_or(unspecified), len, gw));
        }
    }
    Ok(out)
}

fn family(address: IpAddr) -> AddressFamily {
    if address.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

fn route_address(address: IpAddr) -> RouteAddress {
    match address {
        IpAddr::V4(v4) => RouteAddress::Inet(v4),
        IpAddr::V6(v6) => RouteAddress::Inet6(v6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_fit_and_differ() {
        let a = host_name("c1", "eth0");
        assert_eq!(a.len(), 15);
        assert!(a.starts_with("mpb"));
        assert_eq!(a, host_name("c1", "eth0"));
        assert_ne!(a, host_name("c1", "eth1"));
        // The separator keeps ("c1e", "th0") apart from ("c1", "eth0").
        assert_ne!(a, host_name("c1e", "th0"));
    }
}
