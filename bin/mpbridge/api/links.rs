//! Links: what the link monitor reports, applied to the MAC table by its
//! owner and told to the workers; each port's link as `stats` gives it;
//! the links the bridge raised, put down again.

use bridge::counters;
use bridge::fdb::{FdbKey, Table};
use bridge::monitor::LinkEvent;
use bridge::port::netdev;
use bridge::PortId;

use crate::ports::{PortKind, PortSpec};
use crate::protocol::Link;

use super::ports::with_port_caps;
use super::BridgeState;

/// Applies the link monitor's events to `fdb`, in order: a link down or
/// an interface gone has the port's learned stations flushed (a gone one
/// its local entry too), a new address replaces the port's local entry at
/// VLAN 0. Returns each event with the stations it flushed.
pub fn apply_links(fdb: &dyn Table, events: Vec<LinkEvent>) -> Vec<(LinkEvent, usize)> {
    events
        .into_iter()
        .map(|event| {
            let flushed = match event {
                LinkEvent::Down { port } => fdb.flush_port(port),
                LinkEvent::Up { .. } => 0,
                LinkEvent::Address { port, addr, old } => {
                    if let Some(old) = old {
                        fdb.remove_static(FdbKey::new(0, old));
                    }
                    fdb.add_local(FdbKey::new(0, addr), port);
                    0
                }
                LinkEvent::Gone { port, local } => {
                    if let Some(addr) = local {
                        fdb.remove_static(FdbKey::new(0, addr));
                    }
                    fdb.flush_port(port)
                }
            };
            (event, flushed)
        })
        .collect()
}

impl BridgeState {
    /// Per live port, whether its link is up and no guard disabled it:
    /// as last found, where nothing changed since (see `links_known`).
    pub(super) fn port_links(&mut self) -> Vec<(PortId, bool)> {
        if let Some(links) = &self.links_known {
            return links.clone();
        }
        let links = self.look_at_links();
        self.links_known = Some(links.clone());
        links
    }

    /// Forgets the links found: the next `port_links` looks again.
    pub(super) fn links_changed(&mut self) {
        self.links_known = None;
    }

    /// Per live port, whether its link is up and no guard disabled it,
    /// asked of the kernel.
    pub(super) fn look_at_links(&self) -> Vec<(PortId, bool)> {
        let states = self.port_states();
        self.live_ports()
            .into_iter()
            .map(|(id, spec)| {
                let state = states.get(id.index()).copied().unwrap_or_default();
                let tripped = self.guards.get(&id).is_some_and(|g| g.0);
                // A tap whose kernel side moved to another namespace
                // shows no link here ("unknown" until its news is heard), yet forwards.
                let link = self.link(id, &spec, state);
                (id, !tripped && !matches!(link, Link::Down | Link::Gone))
            })
            .collect()
    }

    /// Applies link news from rtnetlink; after an overrun, looks at every
    /// watched link again.
    pub fn links(&mut self, news: bridge::monitor::Received) {
        self.links_changed();
        let events = match news {
            bridge::monitor::Received::Updates(updates) => self.monitor.apply(&updates),
            bridge::monitor::Received::Overrun => {
                log::info!("link news overran; looking at every link again");
                self.monitor.tick()
            }
        };
        // Flushed before the workers hear of it, as they flush a faulted
        // port themselves: the count logged is the owner's.
        let applied = apply_links(&*self.fdb, events);
        self.tell_workers(&applied);
        self.report_links(applied);
        self.refresh_stp();
        self.refresh_mcast();
    }

    /// Tells the workers of a tap's link going down or coming back, as
    /// rtnetlink said: they fault the port (counted once per worker, as
    /// when one finds the link down itself) until it is back, however
    /// briefly it was down. A raw port's workers hear it from their
    /// sockets.
    pub(super) fn tell_workers(&self, applied: &[(LinkEvent, usize)]) {
        for (event, _) in applied {
            let (port, up) = match *event {
                LinkEvent::Down { port } => (port, false),
                LinkEvent::Up { port } => (port, true),
                _ => continue,
            };
            if !matches!(self.ports.get(port.index()), Some(Some(spec)) if spec.kind == PortKind::Tap)
            {
                continue;
            }
            for control in &self.controls {
                if let Err(error) = control.link_changed(port, up) {
                    log::debug!(
                        "{}: cannot tell a worker of its link: {error}",
                        self.label(port)
                    );
                }
            }
        }
    }

    /// Applies what the link monitor saw to the MAC table, and logs it.
    pub(super) fn take_links(&self, events: Vec<LinkEvent>) {
        let applied = apply_links(&*self.fdb, events);
        self.report_links(applied);
    }

    /// Logs what the link monitor saw, with what applying it flushed.
    pub fn report_links(&self, applied: Vec<(LinkEvent, usize)>) {
        for (event, flushed) in applied {
            match event {
                LinkEvent::Down { port } => log::warn!(
                    "{}: link down; flushed {flushed} learned stations",
                    self.label(port)
                ),
                LinkEvent::Up { port } => log::info!("{}: link up", self.label(port)),
                LinkEvent::Address { port, addr, .. } => {
                    log::info!("{}: own address {addr}, kept for the host", self.label(port))
                }
                LinkEvent::Gone { port, .. } => log::warn!(
                    "{}: interface deleted; the port is out of the bridge (flushed {flushed} stations)",
                    self.label(port)
                ),
            }
        }
    }

    /// Puts the links the bridge brought up back down, once their queues
    /// are closed (the bridge stops).
    pub fn restore_links(&mut self) {
        for name in std::mem::take(&mut self.raised) {
            self.put_down(&name);
        }
    }

    /// Sets interface `name` down again: the bridge raised it.
    pub(super) fn put_down(&self, name: &str) {
        match with_port_caps(self.keep_caps, || netdev::set_link_down(name)) {
            Ok(_) => log::info!("{name}: link set down again, as it was before the bridge"),
            // Deleted meanwhile, say: nothing to put back.
            Err(error) => log::debug!("{name}: cannot set the link down again: {error}"),
        }
    }

    /// The link of a port, as `stats` and `port show` give it.
    pub(super) fn link(&self, id: PortId, spec: &PortSpec, state: counters::PortState) -> Link {
        if let Some(device) = self.vhosts.get(&spec.label()) {
            // Up while a frontend runs the port's first queue pair.
            return if device.link_up() {
                Link::Up
            } else {
                Link::Down
            };
        }
        match netdev::link_state(&spec.name) {
            _ if state == counters::PortState::Gone => Link::Gone,
            // No interface of its own: its underlay is the host's.
            _ if matches!(spec.kind, PortKind::Vxlan(_)) => Link::Up,
            Ok(link) if link.running => Link::Up,
            Ok(_) => Link::Down,
            Err(_) if spec.kind == PortKind::Raw => Link::Gone,
            // A tap whose kernel side moved to another namespace: as its
            // last news there said.
            Err(_) => match self.monitor.tap_running(id) {
                Some(true) => Link::Up,
                Some(false) => Link::Down,
                None => Link::Unknown,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bridge::fdb::Location;
    use bridge::wire::MacAddr;

    const OWN: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
    const NEW: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);
    const STATION: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
    const ELSEWHERE: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);

    fn locate(fdb: &dyn Table, mac: MacAddr) -> Option<Location> {
        fdb.locate(&FdbKey::new(0, mac))
    }

    #[test]
    fn link_events_are_applied_to_the_table_by_their_owner() {
        let fdb = bridge::MacTable::<locks::Mutex>::new(bridge::FdbConfig::default());
        let (port, other) = (PortId(0), PortId(1));
        let learn = |mac| fdb.learn(FdbKey::new(0, mac), port, fdb.now());
        let address = |addr, old| LinkEvent::Address { port, addr, old };
        apply_links(&fdb, vec![address(OWN, None)]);
        assert_eq!(locate(&fdb, OWN), Some(Location::Local(port)));
        learn(STATION);
        fdb.learn(FdbKey::new(0, ELSEWHERE), other, fdb.now());
        // A link down flushes the port's learned stations, not its own
        // address, nor another port's stations.
        let applied = apply_links(&fdb, vec![LinkEvent::Down { port }]);
        assert_eq!(applied, [(LinkEvent::Down { port }, 1)]);
        assert_eq!(locate(&fdb, STATION), None);
        assert_eq!(locate(&fdb, OWN), Some(Location::Local(port)));
        assert_eq!(fdb.learned_len(), 1);
        // A new address replaces the old one's local entry.
        apply_links(&fdb, vec![address(NEW, Some(OWN))]);
        assert_eq!(locate(&fdb, OWN), None);
        assert_eq!(locate(&fdb, NEW), Some(Location::Local(port)));
        // Gone: the learned stations and the local entry go.
        learn(STATION);
        let gone = LinkEvent::Gone {
            port,
            local: Some(NEW),
        };
        assert_eq!(apply_links(&fdb, vec![gone.clone()]), [(gone, 1)]);
        assert_eq!(locate(&fdb, NEW), None);
        assert_eq!(fdb.learned_len(), 1);
    }
}
