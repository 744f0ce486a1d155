//! Facts about an interface by name (its index, whether it is up and
//! running, its hardware address) through nix (`if_nametoindex`,
//! `getifaddrs`), and setting it up or down through rtnetlink, as
//! `ip link set` does (nix has no call for that). The tap's `ifreq` for
//! TUNSETIFF is built here too. Taps and raw ports use them when they open;
//! the link monitor asks them when rtnetlink cannot be used.
#![allow(unsafe_code)]

use std::io;
use std::mem::zeroed;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use nix::ifaddrs::{getifaddrs, InterfaceAddress};
use nix::net::if_::InterfaceFlags;

use crate::wire::MacAddr;

/// An `ifreq` naming `name`, or an error if the name cannot be one.
pub(crate) fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    check_name(name)?;
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    Ok(req)
}

/// Refuses a name no interface can have.
fn check_name(name: &str) -> io::Result<()> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name (1 to {} bytes)", libc::IFNAMSIZ - 1),
        ));
    }
    Ok(())
}

/// The index of interface `name` in this network namespace.
pub fn if_index(name: &str) -> io::Result<u32> {
    check_name(name)?;
    Ok(nix::net::if_::if_nametoindex(name)?)
}

/// Whether interface `name` is still the one of index `ifindex`: false
/// when it is gone (or another interface took the name), an error when
/// the kernel could not be asked (out of descriptors, say), which says
/// nothing about the interface.
pub fn is_still(name: &str, ifindex: u32) -> io::Result<bool> {
    match if_index(name) {
        Ok(index) => Ok(index == ifindex),
        Err(error) if is_no_device(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Whether a failed look at an interface means that it does not exist.
pub fn is_no_device(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENODEV | libc::ENXIO))
}

/// The link-layer entry (AF_PACKET) of interface `name`, which every
/// interface has, up or down; ENODEV when there is none.
fn link_entry(name: &str) -> io::Result<InterfaceAddress> {
    check_name(name)?;
    getifaddrs()?
        .find(|entry| {
            entry.interface_name == name
                && entry
                    .address
                    .as_ref()
                    .is_some_and(|address| address.as_link_addr().is_some())
        })
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))
}

/// Sets interface `name` administratively up; true if it was down (so
/// that whoever raised it can put it back).
pub fn set_link_up(name: &str) -> io::Result<bool> {
    set_up_flag(name, true)
}

/// Sets interface `name` administratively down; true if it was up.
pub fn set_link_down(name: &str) -> io::Result<bool> {
    set_up_flag(name, false)
}

/// How long the kernel may take to acknowledge a link change.
const ACK_TIMEOUT: Duration = Duration::from_secs(1);

fn set_up_flag(name: &str, up: bool) -> io::Result<bool> {
    if link_state(name)?.up == up {
        return Ok(false);
    }
    let mut link = LinkMessage::default();
    link.header.index = if_index(name)?;
    link.header.flags = if up {
        LinkFlags::Up
    } else {
        LinkFlags::empty()
    };
    link.header.change_mask = LinkFlags::Up;
    let mut request = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::from(RouteNetlinkMessage::SetLink(link)),
    );
    request.header.flags = NLM_F_REQUEST | NLM_F_ACK;
    request.header.sequence_number = 1;
    request.finalize();
    let mut bytes = vec![0; request.buffer_len()];
    request.serialize(&mut bytes);
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    socket2::SockRef::from(&socket).set_read_timeout(Some(ACK_TIMEOUT))?;
    socket.send(&bytes, 0)?;
    let mut buffer = Vec::with_capacity(4096);
    loop {
        buffer.clear();
        socket.recv(&mut buffer, 0)?;
        let Ok(header) = NetlinkBuffer::new_checked(&buffer[..]) else {
            continue;
        };
        let len = (header.length() as usize).min(buffer.len());
        let Ok(message) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buffer[..len]) else {
            continue;
        };
        if let NetlinkPayload::Error(error) = message.payload {
            // An acknowledgement is an error message without a code.
            return match error.code {
                None => Ok(true),
                Some(_) => Err(io::Error::from(error)),
            };
        }
    }
}

/// Where an interface's link stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkState {
    /// Administratively up (`ip link set NAME up`).
    pub up: bool,
    /// Up and with carrier: frames can pass (IFF_RUNNING).
    pub running: bool,
}

/// The link state of interface `name`.
pub fn link_state(name: &str) -> io::Result<LinkState> {
    let flags = link_entry(name)?.flags;
    Ok(LinkState {
        up: flags.contains(InterfaceFlags::IFF_UP),
        running: flags.contains(InterfaceFlags::IFF_RUNNING),
    })
}

/// The hardware (MAC) address of Ethernet interface `name`.
pub fn hw_addr(name: &str) -> io::Result<MacAddr> {
    let entry = link_entry(name)?;
    entry
        .address
        .as_ref()
        .and_then(|address| address.as_link_addr())
        .and_then(|link| link.addr())
        .map(MacAddr)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))
}
