//! An EVPN port's kernel mirror: the devices FRR's zebra reads and writes
//! for the port's VNI, made and removed by mpbridge alone.
//!
//! - `mpeNb`, a kernel bridge (VLAN-unaware, no snooping, no IPv6 address
//!   of its own: it carries no traffic);
//! - `mpeNv`, a kernel vxlan device with the VNI and the local address,
//!   `nolearning`, on a UDP port that is not mpbridge's data port (a
//!   kernel vxlan socket on the data port would take its datagrams), a
//!   port of the bridge with learning off: zebra installs remote stations
//!   and the flood list on it;
//! - `mpeNl`, one end of a veth pair on the bridge (its peer `mpeNp` on
//!   nothing): mpbridge's local stations are static fdb entries on it,
//!   which zebra advertises. (A veth, not a dummy: kernels without the
//!   dummy driver have veth.)
//!
//! N is the VNI, which one device in a namespace carries at most. Each
//! device's alias says whose it is (`mpbridge:BRIDGE:evpn:PORT`), so that
//! a bridge that crashed has its mirrors removed when it starts again,
//! and no device it did not make is touched.

use std::fmt;
use std::io;
use std::net::IpAddr;

use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, InfoBridge, InfoBridgePort, InfoData, InfoKind,
    InfoPortData, InfoPortKind, InfoVeth, InfoVxlan, LinkAttribute, LinkFlags, LinkInfo,
    LinkMessage,
};

use crate::rtnl::Rtnl;

/// The mirror's UDP port when the port names none: above Linux's default
/// ephemeral range (32768-60999), so no socket the kernel numbers takes
/// it, and not a VXLAN port (4789, 8472) or VXLAN-GPE's (4790).
pub const DEFAULT_MIRROR_PORT: u16 = 64789;

/// What a mirror is made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorConfig {
    /// The bridge's name (`--name`), in every device's alias.
    pub bridge: String,
    /// The VXLAN port's name.
    pub port: String,
    /// Its VNI.
    pub vni: u32,
    /// Its local VTEP address, which zebra advertises as the next hop.
    pub local: IpAddr,
    /// The kernel vxlan device's UDP port.
    pub udp_port: u16,
}

/// Why a mirror could not be made.
#[derive(Debug)]
pub enum MirrorError {
    /// Another device in the namespace carries the VNI.
    VniTaken {
        /// The VNI.
        vni: u32,
        /// The device that carries it.
        device: String,
    },
    /// A device of a mirror's name exists and is not this bridge's.
    NameTaken {
        /// Its name.
        name: String,
    },
    /// The kernel refused a request.
    Kernel {
        /// What was asked.
        what: String,
        /// The kernel's answer.
        error: io::Error,
    },
}

impl fmt::Display for MirrorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MirrorError::VniTaken { vni, device } => {
                write!(f, "VNI {vni} is carried by {device} already")
            }
            MirrorError::NameTaken { name } => write!(
                f,
                "interface {name} exists and is not one this bridge made (its EVPN mirror)"
            ),
            MirrorError::Kernel { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

impl std::error::Error for MirrorError {}

/// A mirror made: its devices' indexes and names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// The kernel bridge.
    pub bridge: Device,
    /// The kernel vxlan device.
    pub vxlan: Device,
    /// The veth end on the bridge that local stations sit on.
    pub stations: Device,
    /// Its peer, on nothing.
    pub peer: Device,
}

/// One device of a mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Its name.
    pub name: String,
    /// Its index.
    pub index: u32,
}

/// The alias that marks the devices of `bridge`'s mirrors.
fn alias_prefix(bridge: &str) -> String {
    format!("mpbridge:{bridge}:evpn:")
}

/// A mirror's device names for `vni`: bridge, vxlan, stations, peer.
pub fn names(vni: u32) -> [String; 4] {
    ["b", "v", "l", "p"].map(|suffix| format!("mpe{vni}{suffix}"))
}

impl Mirror {
    /// Makes the mirror: checks the names and the VNI, then makes the
    /// bridge, the vxlan device and the veth pair, up. Whatever was made is
    /// removed again when a step fails.
    pub fn make(rtnl: &mut Rtnl, config: &MirrorConfig) -> Result<Mirror, MirrorError> {
        let kernel = |what: String| move |error| MirrorError::Kernel { what, error };
        let links = rtnl
            .links()
            .map_err(kernel("listing interfaces".to_owned()))?;
        let [bridge, vxlan, stations, peer] = names(config.vni);
        for link in &links {
            let name = name(link).unwrap_or_default();
            if [&bridge, &vxlan, &stations, &peer].contains(&&name) {
                return Err(MirrorError::NameTaken { name });
            }
            if vni(link) == Some(config.vni) {
                return Err(MirrorError::VniTaken {
                    vni: config.vni,
                    device: name,
                });
            }
        }
        let alias = format!("{}{}", alias_prefix(&config.bridge), config.port);
        let mut made = Vec::new();
        let result = (|| {
            let mut link = device(&bridge, None);
            link.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Bridge),
                // VLAN filtering is off by default (and a kernel without
                // it refuses even to be told so).
                LinkInfo::Data(InfoData::Bridge(vec![InfoBridge::MulticastSnooping(false)])),
            ]));
            let bridge = make(rtnl, link, &bridge, &mut made)?;

            let mut vx = vec![
                InfoVxlan::Id(config.vni),
                InfoVxlan::Port(config.udp_port),
                InfoVxlan::Learning(false),
            ];
            vx.push(match config.local {
                IpAddr::V4(v4) => InfoVxlan::Local(v4),
                IpAddr::V6(v6) => InfoVxlan::Local6(v6),
            });
            let mut link = device(&vxlan, Some(bridge.index));
            link.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Vxlan),
                LinkInfo::Data(InfoData::Vxlan(vx)),
            ]));
            let vxlan = make(rtnl, link, &vxlan, &mut made)?;
            // Learning off on the bridge port too, as EVPN setups have it:
            // zebra is the only source of remote stations.
            let mut port = LinkMessage::default();
            port.header.index = vxlan.index;
            port.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::PortKind(InfoPortKind::Bridge),
                LinkInfo::PortData(InfoPortData::BridgePort(vec![InfoBridgePort::Learning(
                    false,
                )])),
            ]));
            rtnl.set_link(port)
                .map_err(kernel(format!("turning learning off on {}", vxlan.name)))?;

            let mut link = device(&stations, Some(bridge.index));
            link.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Veth),
                LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(device(&peer, None)))),
            ]));
            let stations = make(rtnl, link, &stations, &mut made)?;
            let peer = Device {
                index: crate::port::netdev::if_index(&peer)
                    .map_err(kernel(format!("finding {peer}")))?,
                name: peer,
            };
            made.push(peer.index);
            for device in [&bridge, &vxlan, &stations, &peer] {
                start(rtnl, device, &alias)?;
            }
            Ok(Mirror {
                bridge,
                vxlan,
                stations,
                peer,
            })
        })();
        if result.is_err() {
            for index in made.into_iter().rev() {
                let _ = rtnl.del_link(index);
            }
        }
        result
    }

    /// Removes the mirror's devices (those already gone are fine).
    pub fn remove(&self, rtnl: &mut Rtnl) -> io::Result<()> {
        // Ports first, so that the bridge goes last and empty (the peer
        // goes with its veth end).
        for device in [&self.stations, &self.peer, &self.vxlan, &self.bridge] {
            rtnl.del_link(device.index)?;
        }
        Ok(())
    }
}

/// The device that carries `vni` in this namespace, other than a mirror
/// of `bridge` (which [`remove_stale`] removes).
pub fn vni_carrier(rtnl: &mut Rtnl, vni: u32, bridge: &str) -> io::Result<Option<String>> {
    let prefix = alias_prefix(bridge);
    Ok(rtnl
        .links()?
        .iter()
        .filter(|link| !alias(link).is_some_and(|a| a.starts_with(&prefix)))
        .find(|link| self::vni(link) == Some(vni))
        .map(|link| name(link).unwrap_or_default()))
}

/// Removes every device that a mirror of `bridge` left (a run that
/// crashed); returns their names. Devices of other bridges, and any
/// device without such an alias, are left alone.
pub fn remove_stale(rtnl: &mut Rtnl, bridge: &str) -> io::Result<Vec<String>> {
    let prefix = alias_prefix(bridge);
    let mut removed = Vec::new();
    // Bridges last: their ports go first.
    let mut stale: Vec<LinkMessage> = rtnl
        .links()?
        .into_iter()
        .filter(|link| alias(link).is_some_and(|a| a.starts_with(&prefix)))
        .collect();
    stale.sort_by_key(|link| kind(link) == Some(InfoKind::Bridge));
    for link in stale {
        rtnl.del_link(link.header.index)?;
        removed.extend(name(&link));
    }
    Ok(removed)
}

/// A new device's message: its name and bridge (if any).
fn device(name: &str, master: Option<u32>) -> LinkMessage {
    let mut link = LinkMessage::default();
    link.attributes.push(LinkAttribute::IfName(name.to_owned()));
    if let Some(master) = master {
        link.attributes.push(LinkAttribute::Controller(master));
    }
    link
}

/// Brings a device made down up, with its alias and without an IPv6
/// address of its own (it sends nothing): alias and address generation
/// mode first, which the kernel takes only for a device that exists, and
/// up after them.
fn start(rtnl: &mut Rtnl, device: &Device, alias: &str) -> Result<(), MirrorError> {
    let kernel = |what: &str| {
        let what = format!("{what} {}", device.name);
        move |error| MirrorError::Kernel { what, error }
    };
    let mut link = LinkMessage::default();
    link.header.index = device.index;
    link.attributes
        .push(LinkAttribute::IfAlias(alias.to_owned()));
    link.attributes
        .push(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(
            vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)],
        )]));
    rtnl.set_link(link)
        .map_err(kernel("naming and turning IPv6 addresses off on"))?;
    let mut link = LinkMessage::default();
    link.header.index = device.index;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    rtnl.set_link(link).map_err(kernel("bringing up"))
}

/// Makes `link` and finds its index; notes it in `made`.
fn make(
    rtnl: &mut Rtnl,
    link: LinkMessage,
    name: &str,
    made: &mut Vec<u32>,
) -> Result<Device, MirrorError> {
    let kernel = |error| MirrorError::Kernel {
        what: format!("making {name}"),
        error,
    };
    match rtnl.new_link(link) {
        Err(error) if error.raw_os_error() == Some(libc::EEXIST) => {
            return Err(MirrorError::NameTaken {
                name: name.to_owned(),
            })
        }
        other => other.map_err(kernel)?,
    }
    let index = crate::port::netdev::if_index(name).map_err(kernel)?;
    made.push(index);
    Ok(Device {
        name: name.to_owned(),
        index,
    })
}

fn name(link: &LinkMessage) -> Option<String> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(name) => Some(name.clone()),
        _ => None,
    })
}

fn alias(link: &LinkMessage) -> Option<&str> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfAlias(alias) => Some(alias.as_str()),
        _ => None,
    })
}

fn infos(link: &LinkMessage) -> &[LinkInfo] {
    link.attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => Some(infos.as_slice()),
            _ => None,
        })
        .unwrap_or_default()
}

fn kind(link: &LinkMessage) -> Option<InfoKind> {
    infos(link).iter().find_map(|info| match info {
        LinkInfo::Kind(kind) => Some(kind.clone()),
        _ => None,
    })
}

/// The VNI a vxlan device carries (none for one with external metadata,
/// which carries any).
fn vni(link: &LinkMessage) -> Option<u32> {
    infos(link).iter().find_map(|info| match info {
        LinkInfo::Data(InfoData::Vxlan(attributes)) => {
            attributes.iter().find_map(|attribute| match attribute {
                InfoVxlan::Id(id) => Some(*id),
                _ => None,
            })
        }
        _ => None,
    })
}
