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
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::AddressFamily;

use crate::spec::{cidr, Outcome};

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

/// An rtnetlink socket in namespace `ns`: opened by a thread that enters
/// it, so this process stays where it is; the socket keeps talking to
/// the namespace it was made in.
pub fn rtnl_in(ns: &File) -> io::Result<Rtnl> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from)?;
                Rtnl::open()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("entering the namespace panicked")))
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
    Ok(rtnl.links()?.into_iter().find_map(|link| {
        let named = link
            .attributes
            .iter()
            .any(|a| matches!(a, LinkAttribute::IfName(n) if n == name));
        named.then(|| {
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
        })
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
/// interface `interface`) and routes, as the reference plugins'
/// ConfigureIface does: a route without a gateway goes by the first
/// gateway of its family, or onto the link when there is none.
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
        }
        message.attributes.push(AddressAttribute::Address(address));
        rtnl.new_address(message)?;
        gateways.extend(ip.gateway);
    }
    for route in &outcome.routes {
        let (dst, len) = cidr(&route.dst)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, route.dst.clone()))?;
        let gw = route.gw.or_else(|| {
            gateways
                .iter()
                .copied()
                .find(|g| g.is_ipv4() == dst.is_ipv4())
        });
        let mut message = RouteMessage::default();
        message.header.address_family = family(dst);
        message.header.destination_prefix_length = len;
        message.header.table = RouteHeader::RT_TABLE_MAIN;
        message.header.protocol = RouteProtocol::Boot;
        message.header.kind = RouteType::Unicast;
        message.header.scope = if gw.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
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
        rtnl.new_route(message)?;
    }
    Ok(())
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

/// The destinations (address and length) of the routes out of link
/// `index`, of both families.
pub fn routes(rtnl: &mut Rtnl, index: u32) -> io::Result<Vec<(IpAddr, u8)>> {
    let mut out = Vec::new();
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        for route in rtnl.routes(family)? {
            let oif = route
                .attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Oif(i) if *i == index));
            if !oif {
                continue;
            }
            let len = route.header.destination_prefix_length;
            let dst = route.attributes.iter().find_map(|a| match a {
                RouteAttribute::Destination(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
                RouteAttribute::Destination(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
                _ => None,
            });
            let unspecified = if family == AddressFamily::Inet {
                IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
            } else {
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            };
            out.push((dst.unwrap_or(unspecified), len));
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
