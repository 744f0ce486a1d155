//! Requests to the kernel's rtnetlink, one at a time, each answered:
//! making, changing, deleting, reading and listing links, bridge fdb
//! entries, addresses and routes (rust-netlink's `netlink-sys` for the
//! socket, `netlink-packet-route` for the messages). The link monitor asks
//! after links through it, EVPN ports keep their mirrors with it, the CNI
//! plugin makes a container's link and addresses with it.

use std::io;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::NeighbourMessage;
use netlink_packet_route::route::RouteMessage;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// Room for one datagram of a dump (the kernel sends at most a page's
/// worth, or 32 KiB, per datagram).
const BUFFER: usize = 64 * 1024;

/// An rtnetlink socket for requests.
pub struct Rtnl {
    socket: Socket,
    sequence: u32,
    buffer: Vec<u8>,
}

impl std::fmt::Debug for Rtnl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rtnl").finish_non_exhaustive()
    }
}

impl Rtnl {
    /// A socket talking to the kernel in this network namespace.
    pub fn open() -> io::Result<Rtnl> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        // The kernel answers at once; a bound on the wait all the same.
        socket2::SockRef::from(&socket).set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(Rtnl {
            socket,
            sequence: 0,
            buffer: Vec::with_capacity(BUFFER),
        })
    }

    /// Makes a link; fails with `EEXIST` when one of its name exists.
    pub fn new_link(&mut self, link: LinkMessage) -> io::Result<()> {
        self.ask(
            RouteNetlinkMessage::NewLink(link),
            NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK,
        )
        .map(drop)
    }

    /// Changes the link whose index `link` carries.
    pub fn set_link(&mut self, link: LinkMessage) -> io::Result<()> {
        self.ask(RouteNetlinkMessage::NewLink(link), NLM_F_ACK)
            .map(drop)
    }

    /// Deletes link `index`; fine when it is gone already.
    pub fn del_link(&mut self, index: u32) -> io::Result<()> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        match self.ask(RouteNetlinkMessage::DelLink(link), NLM_F_ACK) {
            Err(error) if error.raw_os_error() == Some(libc::ENODEV) => Ok(()),
            other => other.map(drop),
        }
    }

    /// Link `index` now; `None` when there is no such link.
    pub fn link(&mut self, index: u32) -> io::Result<Option<LinkMessage>> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        self.get_link(link)
    }

    /// Link `name` now, asked by name (no dump); `None` when there is no
    /// such link.
    pub fn link_named(&mut self, name: &str) -> io::Result<Option<LinkMessage>> {
        let mut link = LinkMessage::default();
        link.attributes.push(LinkAttribute::IfName(name.to_owned()));
        self.get_link(link)
    }

    /// The link `request` names, by index or by name.
    fn get_link(&mut self, request: LinkMessage) -> io::Result<Option<LinkMessage>> {
        // The answer, then the acknowledgement that ends the wait.
        match self.ask(RouteNetlinkMessage::GetLink(request), NLM_F_ACK) {
            Ok(answers) => Ok(answers.into_iter().find_map(|message| match message {
                RouteNetlinkMessage::NewLink(link) => Some(link),
                _ => None,
            })),
            Err(error) if error.raw_os_error() == Some(libc::ENODEV) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Every link in this namespace.
    pub fn links(&mut self) -> io::Result<Vec<LinkMessage>> {
        self.dump(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            |message| match message {
                RouteNetlinkMessage::NewLink(link) => Some(link),
                _ => None,
            },
        )
    }

    /// Writes a bridge fdb entry, or replaces the one of its address.
    pub fn replace_neighbour(&mut self, entry: NeighbourMessage) -> io::Result<()> {
        self.ask(
            RouteNetlinkMessage::NewNeighbour(entry),
            NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK,
        )
        .map(drop)
    }

    /// Deletes a bridge fdb entry.
    pub fn del_neighbour(&mut self, entry: NeighbourMessage) -> io::Result<()> {
        self.ask(RouteNetlinkMessage::DelNeighbour(entry), NLM_F_ACK)
            .map(drop)
    }

    /// Every bridge fdb entry in this namespace, of bridges and of the
    /// devices (vxlan) that keep their own.
    pub fn fdb(&mut self) -> io::Result<Vec<NeighbourMessage>> {
        let mut request = NeighbourMessage::default();
        request.header.family = AddressFamily::Bridge;
        self.dump(
            RouteNetlinkMessage::GetNeighbour(request),
            |message| match message {
                RouteNetlinkMessage::NewNeighbour(entry) => Some(entry),
                _ => None,
            },
        )
    }

    /// Adds an address to a link; fails with `EEXIST` when it has it.
    pub fn new_address(&mut self, address: AddressMessage) -> io::Result<()> {
        self.ask(
            RouteNetlinkMessage::NewAddress(address),
            NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK,
        )
        .map(drop)
    }

    /// Every address of every link in this namespace.
    pub fn addresses(&mut self) -> io::Result<Vec<AddressMessage>> {
        self.dump(
            RouteNetlinkMessage::GetAddress(AddressMessage::default()),
            |message| match message {
                RouteNetlinkMessage::NewAddress(address) => Some(address),
                _ => None,
            },
        )
    }

    /// Adds a route; fails with `EEXIST` when it exists.
    pub fn new_route(&mut self, route: RouteMessage) -> io::Result<()> {
        self.ask(
            RouteNetlinkMessage::NewRoute(route),
            NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK,
        )
        .map(drop)
    }

    /// Every route of family `family` (`Inet` or `Inet6`) in this
    /// namespace, of every table.
    pub fn routes(&mut self, family: AddressFamily) -> io::Result<Vec<RouteMessage>> {
        let mut request = RouteMessage::default();
        request.header.address_family = family;
        self.dump(
            RouteNetlinkMessage::GetRoute(request),
            |message| match message {
                RouteNetlinkMessage::NewRoute(route) => Some(route),
                _ => None,
            },
        )
    }

    /// Dumps with `request`, keeping what `pick` picks of the answers.
    fn dump<T>(
        &mut self,
        request: RouteNetlinkMessage,
        pick: impl FnMut(RouteNetlinkMessage) -> Option<T>,
    ) -> io::Result<Vec<T>> {
        Ok(self
            .ask(request, NLM_F_DUMP)?
            .into_iter()
            .filter_map(pick)
            .collect())
    }

    /// Sends `message` and reads the answers to it: what a dump gave, or
    /// nothing once the kernel acknowledged; the kernel's error as an
    /// `io::Error`.
    fn ask(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut request = NetlinkMessage::new(NetlinkHeader::default(), message.into());
        request.header.flags = NLM_F_REQUEST | flags;
        request.header.sequence_number = self.sequence;
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        self.socket.send(&bytes, 0)?;
        let mut answers = Vec::new();
        loop {
            self.buffer.clear();
            self.socket.recv(&mut self.buffer, 0)?;
            let mut rest = &self.buffer[..];
            while let Ok(header) = NetlinkBuffer::new_checked(rest) {
                let len = header.length() as usize;
                let step = (len + 3) & !3;
                let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                if message.header.sequence_number == self.sequence {
                    match message.payload {
                        NetlinkPayload::InnerMessage(answer) => answers.push(answer),
                        NetlinkPayload::Done(_) => return Ok(answers),
                        // An acknowledgement is an error message with code 0.
                        NetlinkPayload::Error(error) if error.code.is_none() => return Ok(answers),
                        NetlinkPayload::Error(error) => return Err(io::Error::from(error)),
                        _ => {}
                    }
                }
                if step == 0 || step > rest.len() {
                    break;
                }
                rest = &rest[step..];
            }
        }
    }
}
