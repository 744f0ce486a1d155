//! The link monitor: the daemon's main thread looks at a raw port's
//! interface when rtnetlink says it changed (`rtnetlink.rs`; or once a
//! second where no rtnetlink socket could be had), and reports what
//! changed as [`LinkEvent`]s. The monitor only reports: it holds no table.
//! The owner of the MAC table applies each event: a link that went down
//! has its learned stations flushed (the Linux bridge does this when a port
//! is disabled), so that frames to them flood until the stations are seen
//! again; the interface's own address, and any address it takes while
//! running, is kept as a local entry, so that frames to the host are never
//! forwarded to other ports (an event carries the address to drop with the
//! one to add); an interface deleted is reported once. The entry is at
//! VLAN 0, which the table and the forwarding decision take as the host's
//! in every VLAN: no frame's source learns it in any VLAN, and frames to it
//! in any VLAN stay with the host.
//!
//! Taps are heard the same way, wherever their kernel side went: mpbridge
//! owns them, and the operator usually moves one into a network namespace
//! of its own, which the rtnetlink socket listens in too (see
//! `rtnetlink.rs`). There an index names a tap only within its namespace,
//! and a move can change it, so a tap is followed by where its messages
//! come from (the namespace's id and the index), found again by its
//! hardware address when it moved (`taps.rs`). Each change of its link is
//! reported as it comes, however brief: a tap set down and up again within
//! a gathering of news is reported down and up all the same. The workers
//! still ask their queues once a second (`Queue::link_lost`), for a tap the
//! monitor cannot hear (moved on from a namespace without an id here).

mod rtnetlink;
mod taps;

pub use rtnetlink::{LinkEvents, LinkQuery, LinkState as LinkUpdateState, LinkUpdate, Received};

use crate::port::netdev::{self, LinkState};
use crate::port_id::PortId;
use crate::wire::MacAddr;
use taps::WatchedTap;

/// A port's link seen `running` after `was`: a link that went down or came
/// back is reported; `was` becomes what was seen.
fn follow_running(
    port: PortId,
    was: &mut Option<bool>,
    running: bool,
    events: &mut Vec<LinkEvent>,
) {
    match (*was, running) {
        (Some(true), false) => events.push(LinkEvent::Down { port }),
        (Some(false), true) => events.push(LinkEvent::Up { port }),
        _ => {}
    }
    *was = Some(running);
}

/// What the monitor saw change, for the table's owner to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// The link stopped passing frames: the port's learned stations go.
    Down {
        /// The port.
        port: PortId,
    },
    /// The link passes frames again.
    Up {
        /// The port.
        port: PortId,
    },
    /// The interface's address is now `addr`: a local entry at VLAN 0
    /// replaces the one of `old`, if it had one.
    Address {
        /// The port.
        port: PortId,
        /// The new address.
        addr: MacAddr,
        /// The address it had before, whose local entry goes.
        old: Option<MacAddr>,
    },
    /// The interface is gone: the port's learned stations go, and the
    /// local entry of `local`, if it had one.
    Gone {
        /// The port.
        port: PortId,
        /// Its address, whose local entry goes.
        local: Option<MacAddr>,
    },
}

#[derive(Debug)]
struct Watched {
    port: PortId,
    name: String,
    ifindex: Option<u32>,
    running: Option<bool>,
    local: Option<MacAddr>,
    gone: bool,
}

/// Watches the interfaces of raw ports, and the devices of taps.
#[derive(Debug, Default)]
pub struct LinkMonitor {
    watched: Vec<Watched>,
    taps: Vec<WatchedTap>,
    /// Where links are asked after; interface ioctls without it.
    query: Option<LinkQuery>,
}

impl LinkMonitor {
    /// A monitor of nothing yet.
    pub fn new() -> LinkMonitor {
        LinkMonitor::default()
    }

    /// A monitor that asks after links over rtnetlink (`query`), which
    /// sees the carrier itself and needs no descriptor once open.
    pub fn with_query(query: LinkQuery) -> LinkMonitor {
        LinkMonitor {
            watched: Vec::new(),
            taps: Vec::new(),
            query: Some(query),
        }
    }

    /// Watches interface `name`, bridged as `port`.
    pub fn watch(&mut self, port: PortId, name: &str) {
        self.watched.push(Watched {
            port,
            name: name.to_owned(),
            ifindex: netdev::if_index(name).ok(),
            running: None,
            local: None,
            gone: false,
        });
    }

    /// Watches tap `name` (in this namespace now, just opened), bridged as
    /// `port`: its link as it is now, and where it is.
    pub fn watch_tap(&mut self, port: PortId, name: &str) {
        let tap = WatchedTap::new(port, name, self.query.as_mut());
        self.taps.push(tap);
    }

    /// Whether tap port `port`'s link passes frames, as its last news
    /// said; `None` where there was none, or it is not a watched tap.
    pub fn tap_running(&self, port: PortId) -> Option<bool> {
        self.taps
            .iter()
            .find(|tap| tap.port == port)
            .and_then(|tap| tap.running)
    }

    /// Stops watching port `port` (it left the bridge); returns its
    /// interface's address as last reported, whose local entry (at VLAN 0)
    /// the owner removes.
    pub fn unwatch(&mut self, port: PortId) -> Option<MacAddr> {
        self.taps.retain(|tap| tap.port != port);
        let mut local = None;
        self.watched.retain(|watched| {
            if watched.port != port {
                return true;
            }
            local = local.or(watched.local);
            false
        });
        local
    }

    /// Looks at every watched interface once (interface ioctls) and
    /// returns what changed: the monitor's view when it starts, and again
    /// whenever link events may have been missed.
    pub fn tick(&mut self) -> Vec<LinkEvent> {
        let mut events = Vec::new();
        // A tap elsewhere cannot be looked at from here; where news was
        // lost, it may have moved: its next news finds it again.
        for tap in &mut self.taps {
            tap.lose_track();
        }
        for watched in &mut self.watched {
            if watched.gone {
                continue;
            }
            if let Some(seen) = watched.look(self.query.as_mut()) {
                watched.observe(seen, &mut events);
            }
        }
        events
    }

    /// Applies link updates from rtnetlink (`LinkEvents`). A message may
    /// have waited in the socket since before the monitor's last look, so
    /// it only says which interface changed: that one is looked at again
    /// now, and the message's own state is taken only where the look
    /// cannot be made (out of descriptors, say). A deletion is final.
    ///
    /// A tap's news is taken message by message, as it came: its device
    /// cannot be looked at where it lives, and a down between two ups
    /// is reported all the same.
    pub fn apply(&mut self, updates: &[LinkUpdate]) -> Vec<LinkEvent> {
        let mut events = Vec::new();
        for update in updates {
            for tap in &mut self.taps {
                tap.apply(update, &mut events);
            }
        }
        // Raw ports are in this namespace: another's indices are not theirs.
        let updates: Vec<&LinkUpdate> = updates.iter().filter(|u| u.nsid.is_none()).collect();
        // One look per interface, after its last message.
        let last = |index: usize| {
            !updates[index + 1..]
                .iter()
                .any(|later| later.ifindex == updates[index].ifindex)
        };
        for (_, update) in updates.iter().enumerate().filter(|(i, _)| last(*i)) {
            for watched in &mut self.watched {
                if watched.gone || watched.ifindex != Some(update.ifindex) {
                    continue;
                }
                let seen = match update.state {
                    None => Seen::Gone,
                    Some(state) => watched.look(self.query.as_mut()).unwrap_or(Seen::Link {
                        running: state.running,
                        addr: state.addr,
                    }),
                };
                watched.observe(seen, &mut events);
            }
        }
        events
    }
}

/// What one look at a watched interface found.
#[derive(Debug, Clone, Copy)]
enum Seen {
    /// No such interface any more.
    Gone,
    /// Its link, and its address where known.
    Link {
        running: bool,
        addr: Option<MacAddr>,
    },
}

impl Watched {
    /// Looks at the interface now (interface ioctls); `None` when the look
    /// could not be made. Only the kernel saying there is no such device
    /// means gone: running out of descriptors or memory (the look needs a
    /// socket) is no news.
    fn look(&self, query: Option<&mut LinkQuery>) -> Option<Seen> {
        if let (Some(query), Some(ifindex)) = (query, self.ifindex) {
            return match query.link(ifindex).ok()? {
                None => Some(Seen::Gone),
                Some(state) => Some(Seen::Link {
                    running: state.running,
                    addr: state.addr,
                }),
            };
        }
        let still = match self.ifindex {
            Some(ifindex) => netdev::is_still(&self.name, ifindex).ok()?,
            // It had no index when it began to be watched.
            None => false,
        };
        if !still {
            return Some(Seen::Gone);
        }
        let LinkState { running, .. } = netdev::link_state(&self.name).ok()?;
        let addr = netdev::hw_addr(&self.name).ok();
        Some(Seen::Link { running, addr })
    }

    /// Updates the watched interface for what was seen; records what
    /// changed in `events`.
    fn observe(&mut self, seen: Seen, events: &mut Vec<LinkEvent>) {
        let (running, addr) = match seen {
            Seen::Gone => {
                self.gone = true;
                events.push(LinkEvent::Gone {
                    port: self.port,
                    local: self.local.take(),
                });
                return;
            }
            Seen::Link { running, addr } => (running, addr),
        };
        follow_running(self.port, &mut self.running, running, events);
        if let Some(addr) = addr {
            if self.local != Some(addr) && addr.is_valid_source() {
                let old = self.local.replace(addr);
                events.push(LinkEvent::Address {
                    port: self.port,
                    addr,
                    old,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORT: PortId = PortId(2);
    const FIRST: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
    const SECOND: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);

    fn watched() -> Watched {
        Watched {
            port: PORT,
            name: "p2".to_owned(),
            ifindex: Some(7),
            running: None,
            local: None,
            gone: false,
        }
    }

    fn link(running: bool, addr: MacAddr) -> Seen {
        Seen::Link {
            running,
            addr: Some(addr),
        }
    }

    #[test]
    fn a_link_is_reported_down_and_up_and_its_address_with_the_one_it_replaces() {
        let mut watched = watched();
        let mut events = Vec::new();
        watched.observe(link(true, FIRST), &mut events);
        watched.observe(link(false, FIRST), &mut events);
        watched.observe(link(true, SECOND), &mut events);
        assert_eq!(
            events,
            [
                LinkEvent::Address {
                    port: PORT,
                    addr: FIRST,
                    old: None
                },
                LinkEvent::Down { port: PORT },
                LinkEvent::Up { port: PORT },
                LinkEvent::Address {
                    port: PORT,
                    addr: SECOND,
                    old: Some(FIRST)
                },
            ]
        );
    }

    #[test]
    fn a_deleted_interface_is_reported_once_with_its_address() {
        let mut monitor = LinkMonitor::new();
        let mut watched = watched();
        let mut events = Vec::new();
        watched.observe(link(true, FIRST), &mut events);
        events.clear();
        watched.observe(Seen::Gone, &mut events);
        assert_eq!(
            events,
            [LinkEvent::Gone {
                port: PORT,
                local: Some(FIRST)
            }]
        );
        // Gone is final: its address is no longer its own.
        monitor.watched.push(watched);
        assert_eq!(monitor.unwatch(PORT), None);
    }

    #[test]
    fn unwatch_hands_back_the_address_to_remove() {
        let mut monitor = LinkMonitor::new();
        let mut watched = watched();
        watched.observe(link(true, FIRST), &mut Vec::new());
        monitor.watched.push(watched);
        assert_eq!(monitor.unwatch(PORT), Some(FIRST));
        assert!(monitor.watched.is_empty());
        assert_eq!(monitor.unwatch(PORT), None);
    }
}
