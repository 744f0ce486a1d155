//! Link changes as the kernel announces them: an rtnetlink socket in the
//! `RTMGRP_LINK` group gets an `RTM_NEWLINK` for every change of an
//! interface's flags or address and an `RTM_DELLINK` when it goes, so the
//! monitor hears of a link going down, or of an interface deleted, at once
//! and without asking. The socket is opened once, at start, so that running
//! out of descriptors later cannot blind it (rust-netlink's `netlink-sys`
//! for the socket, `netlink-packet-route` for the messages).
//!
//! The socket also listens in every other network namespace that has an
//! id here (`NETLINK_LISTEN_ALL_NSID`): a tap that mpbridge made and the
//! operator moved into a namespace of its own is heard there. Moving an
//! interface out of a namespace gives the target namespace an id in it
//! (`ip link set X netns NS`), so a tap moved from here is always heard;
//! each such message comes with its namespace's id as ancillary data.

use std::io;
use std::io::IoSliceMut;
use std::os::fd::AsRawFd;
use std::time::Duration;

use netlink_packet_core::{NetlinkBuffer, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

use crate::rtnl::Rtnl;
use crate::wire::MacAddr;

/// One interface's news.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkUpdate {
    /// The namespace the interface is in, by its id in this one; `None`:
    /// this namespace. An index names an interface only within its own
    /// namespace.
    pub nsid: Option<i32>,
    /// The interface's index.
    pub ifindex: u32,
    /// Whether it is a tun or tap device (its link info's kind).
    pub tun: bool,
    /// Its state now; `None`: it was deleted, or moved out of its
    /// namespace.
    pub state: Option<LinkState>,
}

/// An interface's state as an `RTM_NEWLINK` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkState {
    /// Up with carrier: frames pass (`IFF_RUNNING` and `IFF_LOWER_UP`: the
    /// carrier itself, since `IFF_RUNNING` follows the operational state,
    /// which the kernel settles a moment after a link comes up).
    pub running: bool,
    /// Its hardware address, when the message carries a 6-byte one.
    pub addr: Option<MacAddr>,
}

/// The rtnetlink socket for link news.
pub struct LinkEvents {
    socket: Socket,
    buffer: Vec<u8>,
    all_namespaces: bool,
}

impl std::fmt::Debug for LinkEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkEvents").finish_non_exhaustive()
    }
}

/// What one wait for link news brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// These updates (none when the wait timed out).
    Updates(Vec<LinkUpdate>),
    /// The kernel dropped news for want of room (`ENOBUFS`): whoever keeps
    /// a view of the links must look at them all again.
    Overrun,
}

/// How long news is gathered after its first message.
pub const SETTLE: Duration = Duration::from_millis(20);

/// Room for a burst of messages in one datagram.
const BUFFER: usize = 64 * 1024;

impl LinkEvents {
    /// Joins `RTMGRP_LINK` in this network namespace, and in every
    /// namespace with an id here where the kernel lets it (it takes
    /// CAP_NET_BROADCAST when set, and checks the opener's credentials on
    /// each message, so dropping privileges later changes nothing);
    /// `timeout` bounds each wait, so that the waiting thread can look at
    /// its stop flag.
    pub fn open(timeout: Duration) -> io::Result<LinkEvents> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind(&SocketAddr::new(0, libc::RTMGRP_LINK as u32))?;
        socket2::SockRef::from(&socket).set_read_timeout(Some(timeout))?;
        let all_namespaces = match socket.set_listen_all_namespaces(true) {
            Ok(()) => true,
            Err(error) => {
                log::info!("link news from this network namespace only: {error}");
                false
            }
        };
        Ok(LinkEvents {
            socket,
            buffer: vec![0; BUFFER],
            all_namespaces,
        })
    }

    /// Whether news from other namespaces (with an id here) comes too.
    pub fn all_namespaces(&self) -> bool {
        self.all_namespaces
    }

    /// Receives one datagram and reads its link updates, with the
    /// namespace id its ancillary data gives.
    fn receive(&mut self, flags: MsgFlags) -> io::Result<Vec<LinkUpdate>> {
        let mut control = nix::cmsg_space!(libc::c_int);
        let mut iov = [IoSliceMut::new(&mut self.buffer)];
        let message = recvmsg::<()>(self.socket.as_raw_fd(), &mut iov, Some(&mut control), flags)
            .map_err(io::Error::from)?;
        let len = message.bytes;
        let nsid = message.cmsgs().ok().and_then(|mut cmsgs| {
            cmsgs.find_map(|cmsg| match cmsg {
                ControlMessageOwned::Unknown(unknown)
                    if unknown.cmsg_header.cmsg_level == libc::SOL_NETLINK
                        && unknown.cmsg_header.cmsg_type == libc::NETLINK_LISTEN_ALL_NSID =>
                {
                    let bytes = unknown.data_bytes.get(..4)?;
                    Some(i32::from_ne_bytes(bytes.try_into().ok()?))
                }
                _ => None,
            })
        });
        Ok(parse(&self.buffer[..len.min(self.buffer.len())], nsid))
    }

    /// Waits (at most the timeout) for link news; once some comes, takes
    /// what follows within `SETTLE` (20 ms) too, so that one change's messages
    /// (a deleted link's last `RTM_NEWLINK` and its `RTM_DELLINK`) arrive
    /// together.
    pub fn recv(&mut self) -> io::Result<Received> {
        match self.receive(MsgFlags::empty()) {
            Ok(mut updates) => {
                std::thread::sleep(SETTLE);
                loop {
                    match self.receive(MsgFlags::MSG_DONTWAIT) {
                        Ok(more) => updates.extend(more),
                        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                            return Ok(Received::Overrun)
                        }
                        Err(_) => break,
                    }
                }
                Ok(Received::Updates(updates))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(Received::Updates(Vec::new()))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Received::Updates(Vec::new())),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(Received::Overrun),
            Err(e) => Err(e),
        }
    }
}

/// An rtnetlink socket for asking after one link (`RTM_GETLINK`), opened
/// once so that running out of descriptors later cannot stop the asking.
#[derive(Debug)]
pub struct LinkQuery {
    rtnl: Rtnl,
}

impl LinkQuery {
    /// A socket talking to the kernel in this network namespace.
    pub fn open() -> io::Result<LinkQuery> {
        Ok(LinkQuery {
            rtnl: Rtnl::open()?,
        })
    }

    /// Interface `ifindex` now; `None` when there is no such interface.
    pub fn link(&mut self, ifindex: u32) -> io::Result<Option<LinkState>> {
        Ok(self
            .rtnl
            .link(ifindex)?
            .and_then(|link| new_link(&link, None).state))
    }
}

/// The link updates in one datagram of rtnetlink messages from namespace
/// `nsid` (`None`: this one); what is not a link message, or not well
/// formed, is passed over.
pub fn parse(datagram: &[u8], nsid: Option<i32>) -> Vec<LinkUpdate> {
    let mut updates = Vec::new();
    let mut rest = datagram;
    while !rest.is_empty() {
        let Ok(header) = NetlinkBuffer::new_checked(rest) else {
            break;
        };
        let len = header.length() as usize;
        // NLMSG_ALIGN: messages in a datagram start on 4-byte boundaries.
        let step = (len + 3) & !3;
        if let Ok(message) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len]) {
            if let NetlinkPayload::InnerMessage(inner) = message.payload {
                match inner {
                    RouteNetlinkMessage::NewLink(link) => updates.push(new_link(&link, nsid)),
                    RouteNetlinkMessage::DelLink(link) => updates.push(LinkUpdate {
                        nsid,
                        ifindex: link.header.index,
                        tun: is_tun(&link),
                        state: None,
                    }),
                    _ => {}
                }
            }
        }
        if step == 0 || step > rest.len() {
            break;
        }
        rest = &rest[step..];
    }
    updates
}

/// Whether the message's link info names a tun or tap device.
fn is_tun(link: &LinkMessage) -> bool {
    link.attributes.iter().any(|attribute| match attribute {
        LinkAttribute::LinkInfo(infos) => infos
            .iter()
            .any(|info| matches!(info, LinkInfo::Kind(InfoKind::Tun))),
        _ => false,
    })
}

fn new_link(link: &LinkMessage, nsid: Option<i32>) -> LinkUpdate {
    let addr = link
        .attributes
        .iter()
        .find_map(|attribute| match attribute {
            LinkAttribute::Address(bytes) if bytes.len() == 6 => {
                Some(MacAddr(std::array::from_fn(|i| bytes[i])))
            }
            _ => None,
        });
    LinkUpdate {
        nsid,
        ifindex: link.header.index,
        tun: is_tun(link),
        state: Some(LinkState {
            running: link.header.flags.contains(LinkFlags::Running)
                && link.header.flags.contains(LinkFlags::LowerUp),
            addr,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::NetlinkHeader;

    fn emitted(message: RouteNetlinkMessage) -> Vec<u8> {
        let mut message =
            NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(message));
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        bytes
    }

    fn link(index: u32, flags: LinkFlags, addr: Option<[u8; 6]>) -> LinkMessage {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.header.flags = flags;
        if let Some(addr) = addr {
            link.attributes.push(LinkAttribute::Address(addr.to_vec()));
        }
        link.attributes.push(LinkAttribute::IfName("p0".to_owned()));
        link
    }

    #[test]
    fn new_and_deleted_links_are_read() {
        let mac = [0x02, 0, 0, 0, 0, 7];
        let mut datagram = emitted(RouteNetlinkMessage::NewLink(link(
            7,
            LinkFlags::Up | LinkFlags::Running | LinkFlags::LowerUp,
            Some(mac),
        )));
        // Running before the kernel settled its operational state, but no
        // carrier: not passing frames.
        datagram.extend(emitted(RouteNetlinkMessage::NewLink(link(
            8,
            LinkFlags::Up | LinkFlags::Running,
            None,
        ))));
        datagram.extend(emitted(RouteNetlinkMessage::DelLink(link(
            9,
            LinkFlags::empty(),
            None,
        ))));
        assert_eq!(
            parse(&datagram, None),
            [
                LinkUpdate {
                    nsid: None,
                    tun: false,
                    ifindex: 7,
                    state: Some(LinkState {
                        running: true,
                        addr: Some(MacAddr(mac)),
                    }),
                },
                LinkUpdate {
                    nsid: None,
                    tun: false,
                    ifindex: 8,
                    state: Some(LinkState {
                        running: false,
                        addr: None,
                    }),
                },
                LinkUpdate {
                    nsid: None,
                    tun: false,
                    ifindex: 9,
                    state: None,
                },
            ]
        );
    }

    #[test]
    fn the_loopback_interface_is_asked_after() {
        // Index 1 is the loopback interface in every network namespace;
        // no interface has index 0x7fff_fff0 here.
        let mut query = LinkQuery::open().expect("rtnetlink");
        let lo = query.link(1).expect("an answer").expect("lo exists");
        assert_eq!(lo.addr, Some(MacAddr([0; 6])));
        assert_eq!(query.link(0x7fff_fff0).expect("an answer"), None);
    }

    #[test]
    fn damaged_datagrams_yield_what_is_whole() {
        let whole = emitted(RouteNetlinkMessage::NewLink(link(
            3,
            LinkFlags::Running,
            None,
        )));
        for cut in 0..whole.len() {
            let updates = parse(&whole[..cut], None);
            assert!(updates.is_empty(), "cut at {cut}: {updates:?}");
        }
        let mut garbage = whole.clone();
        garbage.extend([0xff; 40]);
        assert_eq!(parse(&garbage, Some(3)).len(), 1);
        assert!(parse(&[0u8; 64], None).is_empty());
    }

    #[test]
    fn a_taps_news_from_another_namespace_names_both() {
        let mut tap = link(4, LinkFlags::Up, Some([0x02, 0, 0, 0, 0, 4]));
        tap.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Tun)]));
        let mut datagram = emitted(RouteNetlinkMessage::NewLink(tap.clone()));
        datagram.extend(emitted(RouteNetlinkMessage::DelLink(tap)));
        let updates = parse(&datagram, Some(5));
        assert_eq!(updates.len(), 2);
        for update in &updates {
            assert_eq!(
                (update.nsid, update.ifindex, update.tun),
                (Some(5), 4, true)
            );
        }
        // Up without carrier: not passing frames.
        assert_eq!(updates[0].state.map(|s| s.running), Some(false));
        assert_eq!(updates[1].state, None);
    }
}
