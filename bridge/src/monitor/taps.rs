//! A tap's device followed through rtnetlink's news, wherever it lives.
//!
//! A tap is heard where it is: by the id of its namespace in this one
//! (`None`: this one) and its index there. A move takes it out of one
//! namespace (an `RTM_DELLINK` there) and into another (an `RTM_NEWLINK`
//! there, maybe under another index); once it is lost so, the next news of
//! a tun device with its hardware address is taken for it (the kernel gives
//! a tap a random one, so another with the same is one an operator made
//! so). Only the link's changes matter here: a tap's kernel side is a host
//! behind the port, learned as any station, not an address of the bridge.

use super::rtnetlink::{LinkQuery, LinkUpdate};
use super::LinkEvent;
use crate::port::netdev;
use crate::port_id::PortId;
use crate::wire::MacAddr;

/// One tap, as the monitor last heard of it.
#[derive(Debug)]
pub(super) struct WatchedTap {
    pub(super) port: PortId,
    /// Where its news comes from: its namespace's id (`None`: this one)
    /// and its index there; `None` while it is lost (moved).
    at: Option<(Option<i32>, u32)>,
    /// Its hardware address, by which it is found again once lost.
    mac: Option<MacAddr>,
    /// Whether its link passes frames, as last heard.
    pub(super) running: Option<bool>,
}

impl WatchedTap {
    /// Tap `name`, just opened in this namespace, bridged as `port`.
    pub(super) fn new(port: PortId, name: &str, query: Option<&mut LinkQuery>) -> WatchedTap {
        let ifindex = netdev::if_index(name).ok();
        let state = match (query, ifindex) {
            (Some(query), Some(ifindex)) => query.link(ifindex).ok().flatten(),
            _ => None,
        };
        let (running, mac) = match state {
            Some(state) => (Some(state.running), state.addr),
            None => (
                netdev::link_state(name).ok().map(|link| link.running),
                netdev::hw_addr(name).ok(),
            ),
        };
        WatchedTap {
            port,
            at: ifindex.map(|ifindex| (None, ifindex)),
            mac,
            running,
        }
    }

    /// News may have been lost: where the tap is is no longer known, and
    /// its next news finds it again.
    pub(super) fn lose_track(&mut self) {
        self.at = None;
    }

    /// Takes one update: the tap's, if it comes from where the tap is, or
    /// if the tap is lost and this is a tun device with its address. Each
    /// change of its link is recorded in `events` (the owner flushes a port
    /// whose device goes down, as the Linux bridge does).
    pub(super) fn apply(&mut self, update: &LinkUpdate, events: &mut Vec<LinkEvent>) {
        let here = self.at == Some((update.nsid, update.ifindex));
        let Some(state) = update.state else {
            // Deleted, or moved away: where it went, its next news says
            // (a deletion is for the workers to see, on their queues).
            if here {
                self.at = None;
            }
            return;
        };
        let found =
            self.at.is_none() && update.tun && state.addr.is_some() && state.addr == self.mac;
        if !here && !found {
            return;
        }
        self.at = Some((update.nsid, update.ifindex));
        if state.addr.is_some() {
            self.mac = state.addr;
        }
        super::follow_running(self.port, &mut self.running, state.running, events);
    }
}

#[cfg(test)]
mod tests {
    use super::super::rtnetlink::LinkState;
    use super::*;

    const MAC: MacAddr = MacAddr([0x32, 0x32, 0xfe, 5, 0xd3, 0xc4]);

    fn tap() -> WatchedTap {
        WatchedTap {
            port: PortId(1),
            at: Some((None, 5)),
            mac: Some(MAC),
            running: Some(true),
        }
    }

    fn news(nsid: Option<i32>, ifindex: u32, running: Option<bool>, addr: MacAddr) -> LinkUpdate {
        LinkUpdate {
            nsid,
            ifindex,
            tun: true,
            state: running.map(|running| LinkState {
                running,
                addr: Some(addr),
            }),
        }
    }

    const DOWN: LinkEvent = LinkEvent::Down { port: PortId(1) };
    const UP: LinkEvent = LinkEvent::Up { port: PortId(1) };

    #[test]
    fn a_tap_moved_away_is_followed_and_each_brief_down_is_heard() {
        let mut tap = tap();
        let mut events = Vec::new();
        // `ip link set mpb0 netns left`: down here, gone from here, down
        // in namespace 0 under another index, then up there.
        for update in [
            news(None, 5, Some(false), MAC),
            news(None, 5, None, MAC),
            news(Some(0), 9, Some(false), MAC),
            news(Some(0), 9, Some(true), MAC),
            // Down and up within one gathering: both heard.
            news(Some(0), 9, Some(false), MAC),
            news(Some(0), 9, Some(true), MAC),
        ] {
            tap.apply(&update, &mut events);
        }
        assert_eq!(events, [DOWN, UP, DOWN, UP]);
        assert_eq!(tap.at, Some((Some(0), 9)));
        assert_eq!(tap.running, Some(true));
    }

    #[test]
    fn another_device_is_not_taken_for_the_tap() {
        let mut tap = tap();
        let mut events = Vec::new();
        let other = MacAddr([0x02, 0, 0, 0, 0, 0x42]);
        // Index 5 in another namespace, and a device with the tap's
        // address while the tap is where it was.
        tap.apply(&news(Some(3), 5, Some(false), other), &mut events);
        tap.apply(&news(Some(3), 6, Some(false), MAC), &mut events);
        assert!(events.is_empty(), "{events:?}");
        // Once lost, a veth with its address is not it either.
        tap.lose_track();
        let mut veth = news(Some(3), 6, Some(false), MAC);
        veth.tun = false;
        tap.apply(&veth, &mut events);
        assert!(events.is_empty(), "{events:?}");
        tap.apply(&news(Some(3), 7, Some(false), MAC), &mut events);
        assert_eq!(events, [DOWN]);
        assert_eq!(tap.at, Some((Some(3), 7)));
    }
}
