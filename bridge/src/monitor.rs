//! The link monitor: once a second, the daemon's main thread looks at each
//! raw port's interface. A link that went down has its learned stations
//! flushed (the Linux bridge does this when a port is disabled), so that
//! frames to them flood until the stations are seen again; the interface's
//! own address, and any address it takes while running, is kept as a local
//! entry, so that frames to the host are never forwarded to other ports; an
//! interface deleted is reported once. The entry is at VLAN 0, which the
//! table and the forwarding decision take as the host's in every VLAN: no
//! frame's source learns it in any VLAN, and frames to it in any VLAN stay
//! with the host.
//!
//! Taps are left to the workers: mpbridge owns them, and their kernel side
//! usually lives in another network namespace, out of this one's sight;
//! their queues tell whether the device is up, wherever it is, and the
//! workers ask once a second (`Port::link_lost`).

use crate::fdb::{FdbKey, PortId, Table};
use crate::port::netdev::{self, LinkState};
use crate::wire::MacAddr;

/// What the monitor saw change on one tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// The link stopped passing frames; this many stations were flushed.
    Down {
        /// The port.
        port: PortId,
        /// Learned stations removed.
        flushed: usize,
    },
    /// The link passes frames again.
    Up {
        /// The port.
        port: PortId,
    },
    /// The interface's address is now this (a local entry).
    Address {
        /// The port.
        port: PortId,
        /// The new address.
        addr: MacAddr,
    },
    /// The interface is gone; this many stations were flushed.
    Gone {
        /// The port.
        port: PortId,
        /// Learned stations removed.
        flushed: usize,
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

/// Watches the interfaces of raw ports.
#[derive(Debug, Default)]
pub struct LinkMonitor {
    watched: Vec<Watched>,
}

impl LinkMonitor {
    /// A monitor of nothing yet.
    pub fn new() -> LinkMonitor {
        LinkMonitor::default()
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

    /// Stops watching port `port` (it left the bridge) and removes its
    /// interface's address from `fdb`.
    pub fn unwatch(&mut self, port: PortId, fdb: &dyn Table) {
        self.watched.retain(|watched| {
            if watched.port != port {
                return true;
            }
            if let Some(addr) = watched.local {
                fdb.remove_static(FdbKey::new(0, addr));
            }
            false
        });
    }

    /// Looks at every watched interface once, updates `fdb`, and returns
    /// what changed.
    pub fn tick(&mut self, fdb: &dyn Table) -> Vec<LinkEvent> {
        let mut events = Vec::new();
        for watched in &mut self.watched {
            if watched.gone {
                continue;
            }
            let index = netdev::if_index(&watched.name).ok();
            if index.is_none() || index != watched.ifindex {
                watched.gone = true;
                if let Some(addr) = watched.local.take() {
                    fdb.remove_static(FdbKey::new(0, addr));
                }
                let flushed = fdb.flush_port(watched.port);
                events.push(LinkEvent::Gone {
                    port: watched.port,
                    flushed,
                });
                continue;
            }
            let running = netdev::link_state(&watched.name)
                .map(|LinkState { running, .. }| running)
                .unwrap_or(false);
            match (watched.running, running) {
                (Some(true), false) => {
                    let flushed = fdb.flush_port(watched.port);
                    events.push(LinkEvent::Down {
                        port: watched.port,
                        flushed,
                    });
                }
                (Some(false), true) => events.push(LinkEvent::Up { port: watched.port }),
                _ => {}
            }
            watched.running = Some(running);
            if let Ok(addr) = netdev::hw_addr(&watched.name) {
                if watched.local != Some(addr) && addr.is_valid_source() {
                    if let Some(old) = watched.local.replace(addr) {
                        fdb.remove_static(FdbKey::new(0, old));
                    }
                    fdb.add_local(FdbKey::new(0, addr), watched.port);
                    events.push(LinkEvent::Address {
                        port: watched.port,
                        addr,
                    });
                }
            }
        }
        events
    }
}
