//! A mirror's forwarding entries, both ways: local stations written as
//! static entries on the stations' veth (what zebra advertises as type-2
//! routes), and what zebra installs on the mirror's vxlan device read back
//! (remote stations: `extern_learn` entries with a `dst`; the flood list:
//! all-zero MAC entries with a `dst`, one per VTEP that sent a type-3
//! route), by a dump and by listening to the kernel's neighbour news.

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use netlink_packet_core::{NetlinkBuffer, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::rtnl::Rtnl;
use crate::wire::MacAddr;

/// What zebra installed on a mirror's vxlan device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Installed {
    /// A remote station behind a VTEP (a type-2 route).
    Station {
        /// Its address.
        mac: MacAddr,
        /// The VTEP that advertised it.
        vtep: IpAddr,
    },
    /// A VTEP of the VNI's flood list (a type-3 route).
    Flood {
        /// Its address.
        vtep: IpAddr,
    },
}

/// News of the entries on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The device the entry is on.
    pub ifindex: u32,
    /// The entry.
    pub entry: Installed,
    /// Whether it was installed (or replaced), not removed.
    pub added: bool,
}

/// A bridge fdb message (`AF_BRIDGE`) for `mac` on `ifindex`.
fn fdb_message(ifindex: u32, mac: MacAddr) -> NeighbourMessage {
    let mut message = NeighbourMessage::default();
    message.header.family = AddressFamily::Bridge;
    message.header.ifindex = ifindex;
    message
        .attributes
        .push(NeighbourAttribute::LinkLayerAddress(mac.0.to_vec()));
    message
}

impl Rtnl {
    /// Writes `mac` as a static entry of the bridge on port `ifindex`
    /// (`bridge fdb replace MAC dev PORT master static`).
    pub fn add_station(&mut self, ifindex: u32, mac: MacAddr) -> io::Result<()> {
        let mut message = fdb_message(ifindex, mac);
        message.header.state = NeighbourState::Noarp;
        message.header.flags = NeighbourFlags::Controller;
        self.replace_neighbour(message)
    }

    /// Removes the entry [`add_station`](Self::add_station) wrote; fine
    /// when there is none.
    pub fn del_station(&mut self, ifindex: u32, mac: MacAddr) -> io::Result<()> {
        let mut message = fdb_message(ifindex, mac);
        message.header.flags = NeighbourFlags::Controller;
        match self.del_neighbour(message) {
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            other => other,
        }
    }

    /// The stations the bridge's port `ifindex` has static entries for.
    pub fn stations(&mut self, ifindex: u32) -> io::Result<Vec<MacAddr>> {
        Ok(self
            .fdb()?
            .iter()
            .filter(|m| m.header.ifindex == ifindex)
            .filter_map(static_station)
            .collect())
    }

    /// What is installed on vxlan device `ifindex` now.
    pub fn installed(&mut self, ifindex: u32) -> io::Result<Vec<Installed>> {
        Ok(self
            .fdb()?
            .iter()
            .filter(|m| m.header.ifindex == ifindex)
            .filter_map(installed)
            .collect())
    }
}

/// The entry a vxlan device's own fdb message describes, when it is one
/// zebra installs: a `dst` and either an all-zero MAC (flood) or
/// `extern_learn` (a station).
pub fn installed(message: &NeighbourMessage) -> Option<Installed> {
    if message.header.family != AddressFamily::Bridge
        || !message.header.flags.contains(NeighbourFlags::Own)
    {
        return None;
    }
    let mac = mac_of(message)?;
    let vtep = message.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
        NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        // A bridge entry's family is AF_BRIDGE, so its dst is read as
        // bytes: 4 for IPv4, 16 for IPv6.
        NeighbourAttribute::Destination(NeighbourAddress::Other(bytes)) => match bytes.len() {
            4 => <[u8; 4]>::try_from(bytes.as_slice()).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(bytes.as_slice())
                .ok()
                .map(IpAddr::from),
            _ => None,
        },
        _ => None,
    })?;
    if mac.0 == [0; 6] {
        Some(Installed::Flood { vtep })
    } else if message.header.flags.contains(NeighbourFlags::ExtLearned) {
        Some(Installed::Station { mac, vtep })
    } else {
        None
    }
}

/// The station of a static entry of a bridge ([`Rtnl::add_station`]'s
/// kind; not the port's own address, which is `permanent`). A dump names
/// the bridge by an `NDA_MASTER` attribute, a request by the flag.
pub fn static_station(message: &NeighbourMessage) -> Option<MacAddr> {
    let header = &message.header;
    let of_bridge = header.flags.contains(NeighbourFlags::Controller)
        || message
            .attributes
            .iter()
            .any(|a| matches!(a, NeighbourAttribute::Controller(_)));
    if header.family == AddressFamily::Bridge
        && of_bridge
        && !header.flags.contains(NeighbourFlags::Own)
        && header.state == NeighbourState::Noarp
    {
        mac_of(message)
    } else {
        None
    }
}

fn mac_of(message: &NeighbourMessage) -> Option<MacAddr> {
    message.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::LinkLayerAddress(bytes) => {
            <[u8; 6]>::try_from(bytes.as_slice()).ok().map(MacAddr)
        }
        _ => None,
    })
}

/// The kernel's news of fdb entries, as they change.
pub struct FdbEvents {
    socket: Socket,
    buffer: Vec<u8>,
}

impl std::fmt::Debug for FdbEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdbEvents").finish_non_exhaustive()
    }
}

/// What one wait for fdb news brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// These changes (none when the wait timed out or none concerned a
    /// vxlan device's installed entries).
    Changes(Vec<Change>),
    /// The kernel dropped news for want of room (`ENOBUFS`): read
    /// everything again ([`Rtnl::installed`]).
    Overrun,
}

impl FdbEvents {
    /// Listens to the neighbour group in this network namespace; each
    /// [`recv`](Self::recv) waits `timeout` at most.
    pub fn open(timeout: Duration) -> io::Result<FdbEvents> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind(&SocketAddr::new(0, 0))?;
        socket.add_membership(libc::RTNLGRP_NEIGH)?;
        socket2::SockRef::from(&socket).set_read_timeout(Some(timeout))?;
        Ok(FdbEvents {
            socket,
            buffer: Vec::with_capacity(64 * 1024),
        })
    }

    /// Waits for news; what it brought.
    pub fn recv(&mut self) -> io::Result<Received> {
        self.buffer.clear();
        match self.socket.recv(&mut self.buffer, 0) {
            Ok(_) => Ok(Received::Changes(parse(&self.buffer))),
            Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => Ok(Received::Overrun),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(Received::Changes(Vec::new()))
            }
            Err(error) => Err(error),
        }
    }
}

/// The changes of installed entries in one datagram of rtnetlink messages;
/// what is not such a message, or not well formed, is passed over.
pub fn parse(datagram: &[u8]) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut rest = datagram;
    while let Ok(header) = NetlinkBuffer::new_checked(rest) {
        let len = header.length() as usize;
        let step = (len + 3) & !3;
        if let Ok(message) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len]) {
            let (neighbour, added) = match &message.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNeighbour(n)) => (n, true),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelNeighbour(n)) => (n, false),
                _ => {
                    if step == 0 || step > rest.len() {
                        break;
                    }
                    rest = &rest[step..];
                    continue;
                }
            };
            if let Some(entry) = installed(neighbour) {
                changes.push(Change {
                    ifindex: neighbour.header.ifindex,
                    entry,
                    added,
                });
            }
        }
        if step == 0 || step > rest.len() {
            break;
        }
        rest = &rest[step..];
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage};
    use std::net::Ipv4Addr;

    fn emitted(messages: Vec<RouteNetlinkMessage>) -> Vec<u8> {
        let mut bytes = Vec::new();
        for message in messages {
            let mut message = NetlinkMessage::new(NetlinkHeader::default(), message.into());
            message.finalize();
            let mut buffer = vec![0; message.buffer_len()];
            message.serialize(&mut buffer);
            bytes.extend(buffer);
        }
        bytes
    }

    fn entry(mac: [u8; 6], flags: NeighbourFlags, dst: Option<Ipv4Addr>) -> NeighbourMessage {
        let mut message = fdb_message(7, MacAddr(mac));
        message.header.flags = flags;
        if let Some(dst) = dst {
            message
                .attributes
                .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(dst)));
        }
        message
    }

    #[test]
    fn what_zebra_installs_is_read_and_nothing_else() {
        let vtep = Ipv4Addr::new(198, 18, 0, 2);
        let station = [2, 0, 0, 0, 0, 0x99];
        let own_learned = NeighbourFlags::Own | NeighbourFlags::ExtLearned;
        let datagram = emitted(vec![
            // A remote station and the flood entry, as zebra installs them.
            RouteNetlinkMessage::NewNeighbour(entry(station, own_learned, Some(vtep))),
            RouteNetlinkMessage::NewNeighbour(entry([0; 6], NeighbourFlags::Own, Some(vtep))),
            // The bridge's side of the station (no dst): not read.
            RouteNetlinkMessage::NewNeighbour(entry(
                station,
                NeighbourFlags::Controller | NeighbourFlags::ExtLearned,
                None,
            )),
            // An entry with a dst not from a control plane: not read.
            RouteNetlinkMessage::NewNeighbour(entry(
                [2, 0, 0, 0, 0, 1],
                NeighbourFlags::Own,
                Some(vtep),
            )),
            RouteNetlinkMessage::DelNeighbour(entry(station, own_learned, Some(vtep))),
        ]);
        let vtep = IpAddr::V4(vtep);
        let station = Installed::Station {
            mac: MacAddr(station),
            vtep,
        };
        let flood = Installed::Flood { vtep };
        let change = |entry, added| Change {
            ifindex: 7,
            entry,
            added,
        };
        assert_eq!(
            parse(&datagram),
            [
                change(station, true),
                change(flood, true),
                change(station, false)
            ]
        );
        // A damaged tail leaves what is whole.
        assert_eq!(parse(&datagram[..datagram.len() - 3]).len(), 2);
    }
}
