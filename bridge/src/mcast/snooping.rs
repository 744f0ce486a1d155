//! The snooping state machine: memberships, router ports, querier
//! election and the bridge's own querier, as Linux's `br_multicast.c`
//! keeps them with `multicast_igmp_version` 2 and `multicast_mld_version`
//! 1 (IGMPv3 and MLDv2 reports read in compatibility mode).
//!
//! Timers are instants, kept while pending: [`Snooping::tick`] fires
//! those due and clears or re-arms them, as Linux's timer callbacks do, so
//! a timer that is set is running. [`Snooping::receive`] fires the due
//! timers before it reads the frame; the other calls leave them to the
//! next tick, which [`Snooping::next_deadline`] says when to make.
//!
//! Bounded work per call: the memberships' timeouts sit in a min-heap
//! beside the groups (an entry is live while its instant is still the
//! membership's timeout; stale ones are skipped as they come up and the
//! heap is rebuilt when they outnumber the live ones), so neither firing
//! the due timers nor finding the next deadline looks at every membership;
//! and an IGMPv3 or MLDv2 report is read for at most
//! [`MAX_REPORT_RECORDS`] records.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use super::classify::{is_local, parse, Family, GroupKey, Igmp, Mld, Packet};
use super::query;
use crate::port_id::PortId;
use crate::port_id::PortSet;
use crate::port_id::MAX_PORTS;
use crate::wire::igmp::{self, record};
use crate::wire::mld;
use crate::wire::{EthernetFrame, MacAddr};

/// The most records of one IGMPv3 or MLDv2 report that snooping reads;
/// the rest are ignored and counted ([`SnoopStats::records_ignored`]).
/// Linux reads every record, and its reports are bounded by the MTU: a
/// 1500-byte frame holds at most 183 IGMPv3 records (8 bytes each after
/// 32 bytes of IP and IGMP headers) and 72 MLDv2 ones (20 bytes after 56),
/// a 9000-byte jumbo frame 1121 and 447. mpbridge's ports take frames of
/// up to 64 KiB (taps), which could carry 8000; the cap keeps the cost of
/// one report, and so the owner thread's time on it, to what a jumbo
/// frame needs at most, give or take.
pub const MAX_REPORT_RECORDS: usize = 1024;

/// Snooping's parameters, under the names of Linux's bridge options
/// (`ip link set br0 type bridge mcast_...`). The defaults are Linux's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SnoopConfig {
    /// `mcast_querier`: whether the bridge queries when no other querier
    /// does.
    pub querier: bool,
    /// `mcast_query_interval`: between the own querier's general queries.
    pub query_interval: Duration,
    /// `mcast_query_response_interval`: the Max Response Time of the own
    /// general queries, and how long forwarding waits for reports once the
    /// own querier starts.
    pub query_response_interval: Duration,
    /// `mcast_membership_interval`: how long a report keeps a port in a
    /// group.
    pub membership_interval: Duration,
    /// `mcast_querier_interval`: how long another querier counts as
    /// present after its query, and a port it queried from as a router
    /// port (the Other Querier Present Interval).
    pub querier_interval: Duration,
    /// `mcast_last_member_count`: how many Max Response Times a leave or a
    /// group-specific query leaves a member.
    pub last_member_count: u32,
    /// `mcast_last_member_interval`: the Max Response Time of the own
    /// group-specific queries.
    pub last_member_interval: Duration,
    /// `mcast_startup_query_count`: general queries sent at the startup
    /// interval when the own querier starts.
    pub startup_query_count: u32,
    /// `mcast_startup_query_interval`: between those.
    pub startup_query_interval: Duration,
    /// `mcast_hash_max`: the most groups; one more turns snooping off.
    pub hash_max: usize,
}

impl Default for SnoopConfig {
    fn default() -> SnoopConfig {
        SnoopConfig {
            querier: false,
            query_interval: Duration::from_secs(125),
            query_response_interval: Duration::from_secs(10),
            membership_interval: Duration::from_secs(260),
            querier_interval: Duration::from_secs(255),
            last_member_count: 2,
            last_member_interval: Duration::from_secs(1),
            startup_query_count: 2,
            startup_query_interval: Duration::from_millis(31_250),
            hash_max: 4096,
        }
    }
}

impl SnoopConfig {
    /// Checks the values; the error is one line naming the offending one.
    /// Every interval must be above zero, the response interval below the
    /// query interval (RFC 2236 8.3), and `hash_max` at least 1. The counts
    /// may be 0, as Linux lets them be: no last member query time (a leave
    /// removes at once), no startup queries.
    pub fn check(&self) -> Result<(), String> {
        let intervals = [
            ("mcast_query_interval", self.query_interval),
            (
                "mcast_query_response_interval",
                self.query_response_interval,
            ),
            ("mcast_membership_interval", self.membership_interval),
            ("mcast_querier_interval", self.querier_interval),
            ("mcast_last_member_interval", self.last_member_interval),
            ("mcast_startup_query_interval", self.startup_query_interval),
        ];
        for (name, value) in intervals {
            if value.is_zero() {
                return Err(format!("{name} must be above zero"));
            }
        }
        if self.query_response_interval >= self.query_interval {
            return Err(format!(
                "mcast_query_response_interval {} s must be below mcast_query_interval {} s",
                self.query_response_interval.as_secs_f64(),
                self.query_interval.as_secs_f64()
            ));
        }
        if self.hash_max == 0 {
            return Err("mcast_hash_max must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// Whether a port is a multicast router port: Linux's per-port
/// `multicast_router`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RouterMode {
    /// 0: never.
    Disabled,
    /// 1: while a querier is heard on it, for the querier interval.
    #[default]
    Learned,
    /// 2: always, for both families, while the port is up.
    Permanent,
}

/// Something the caller must do, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Transmit a query: a whole Ethernet frame, untagged.
    Send {
        /// The port to send it out of; `None` for every port that is up
        /// (each was due a general query at once).
        port: Option<PortId>,
        /// The frame.
        frame: Vec<u8>,
    },
    /// The member ports of `key` are now `ports`; empty: the group is gone.
    Group {
        /// The group.
        key: GroupKey,
        /// Its member ports.
        ports: PortSet,
    },
    /// The family's router ports are now `ports`.
    Routers {
        /// The family.
        family: Family,
        /// Its router ports.
        ports: PortSet,
    },
    /// Whether forwarding may trust the group table for the family:
    /// Linux's `br_multicast_querier_exists`. When not, its traffic floods.
    Querier {
        /// The family.
        family: Family,
        /// Whether a querier is present.
        present: bool,
    },
}

/// One port's membership of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRecord {
    /// The group.
    pub key: GroupKey,
    /// The member port.
    pub port: PortId,
    /// Until the membership times out, unless a report refreshes it.
    pub expires_in: Duration,
}

/// One router port of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterRecord {
    /// The port.
    pub port: PortId,
    /// The family.
    pub family: Family,
    /// Whether it is configured ([`RouterMode::Permanent`]) rather than
    /// learned.
    pub permanent: bool,
    /// Until a learned router port times out.
    pub expires_in: Option<Duration>,
}

/// The querier of one family, as the bridge sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuerierStatus {
    /// Whether forwarding trusts the group table ([`Action::Querier`]).
    pub present: bool,
    /// Whether the bridge itself is the querier (its own querier is on
    /// and no other one is heard).
    pub own: bool,
    /// The querier's address: another querier's, or the bridge's own
    /// queries' source (0.0.0.0, or the bridge's link-local address).
    pub address: Option<IpAddr>,
    /// The port another querier is heard on.
    pub port: Option<PortId>,
    /// Until another querier counts as gone.
    pub expires_in: Option<Duration>,
}

/// Running totals, after Linux's multicast statistics (`ip -s link show`
/// with `mcast_stats_enabled`): messages received on ports that are up,
/// by version, and queries sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SnoopStats {
    /// IGMPv1 queries received.
    pub igmp_v1_queries: u64,
    /// IGMPv2 queries received.
    pub igmp_v2_queries: u64,
    /// IGMPv3 queries received.
    pub igmp_v3_queries: u64,
    /// IGMPv1 reports received.
    pub igmp_v1_reports: u64,
    /// IGMPv2 reports received.
    pub igmp_v2_reports: u64,
    /// IGMPv3 reports received.
    pub igmp_v3_reports: u64,
    /// IGMPv2 leaves received.
    pub igmp_leaves: u64,
    /// IGMP frames handed to [`Snooping::receive`] that did not parse.
    pub igmp_parse_errors: u64,
    /// IGMP queries sent, counted per port.
    pub igmp_tx_queries: u64,
    /// MLDv1 queries received.
    pub mld_v1_queries: u64,
    /// MLDv2 queries received.
    pub mld_v2_queries: u64,
    /// MLDv1 reports received.
    pub mld_v1_reports: u64,
    /// MLDv2 reports received.
    pub mld_v2_reports: u64,
    /// MLDv1 dones received.
    pub mld_leaves: u64,
    /// MLD frames handed to [`Snooping::receive`] that did not parse.
    pub mld_parse_errors: u64,
    /// MLD queries sent, counted per port.
    pub mld_tx_queries: u64,
    /// New groups refused at `hash_max`, which turned snooping off.
    pub groups_refused: u64,
    /// Groups not added on a port at its `mcast_max_groups`, all ports
    /// together (each port's own count is in [`PortGroups`]).
    #[cfg_attr(feature = "serde", serde(default))]
    pub max_groups_refused: u64,
    /// Frames handed to [`Snooping::receive`] after snooping was off.
    pub ignored: u64,
    /// Records of IGMPv3 and MLDv2 reports beyond
    /// [`MAX_REPORT_RECORDS`], not read.
    #[cfg_attr(feature = "serde", serde(default))]
    pub records_ignored: u64,
}

impl SnoopStats {
    fn tx_queries(&mut self, family: Family) -> &mut u64 {
        match family {
            Family::V4 => &mut self.igmp_tx_queries,
            Family::V6 => &mut self.mld_tx_queries,
        }
    }
}

/// What one port holds per family.
#[derive(Debug, Clone, Default)]
struct PortFamily {
    /// The own querier's next general query out of this port.
    own_query: Option<Instant>,
    /// Startup queries sent out of this port since the own querier began.
    startup_sent: u32,
    /// A learned router port's timeout; set while it is one.
    router_until: Option<Instant>,
}

/// One port's groups against its limit: Linux's `mcast_n_groups` and
/// `mcast_max_groups` of the port, and the groups the limit refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortGroups {
    /// Groups the port is a member of now, over every VLAN.
    pub n_groups: u32,
    /// The most groups it may be a member of; 0: no limit.
    pub max_groups: u32,
    /// Reports (or records) whose group the limit kept off the port.
    pub refused: u64,
}

#[derive(Debug, Clone)]
struct Port {
    router: RouterMode,
    fast_leave: bool,
    /// Its groups against its limit.
    groups: PortGroups,
    /// Link up and forwarding: Linux's port not disabled (nor blocking).
    up: bool,
    family: [PortFamily; 2],
}

impl Port {
    fn is_router(&self, family: Family) -> bool {
        self.up
            && match self.router {
                RouterMode::Disabled => false,
                RouterMode::Learned => self.family[family.index()].router_until.is_some(),
                RouterMode::Permanent => true,
            }
    }
}

/// What the bridge holds per family.
#[derive(Debug, Clone, Default)]
struct FamilyState {
    /// The own querier's bridge-wide timer (Linux's `ip4_own_query` of the
    /// bridge): its queries go to the bridge's own host, which mpbridge
    /// does not have, so it only elects the own querier. Each port's
    /// timer sends.
    own_query: Option<Instant>,
    startup_sent: u32,
    /// Another querier counts as present until then.
    other_until: Option<Instant>,
    /// Forwarding waits for reports until then, after a querier appeared.
    delay_until: Option<Instant>,
    /// The elected querier's address and port.
    querier_addr: Option<IpAddr>,
    querier_port: Option<PortId>,
    /// What the last actions said.
    published_present: bool,
    published_routers: PortSet,
}

/// The member ports of a group and their timeouts.
type Members = BTreeMap<PortId, Instant>;

/// A membership's timeout as the heap holds it: earliest first.
type Timer = Reverse<(Instant, GroupKey, PortId)>;

/// Stale heap entries tolerated beyond the live memberships before the
/// heap is rebuilt from them.
const HEAP_SLACK: usize = 1024;

/// Linux's shortest timer, one jiffy: the delay of a query whose maximum
/// response time is zero.
const ONE_JIFFY: Duration = Duration::from_millis(1);

/// A report after a version 1 IGMP query is due within 10 seconds
/// (RFC 2236 4).
const IGMPV1_MAX_RESP: Duration = Duration::from_secs(10);

/// One bridge's IGMP and MLD snooping, without VLAN contexts: groups are
/// per VLAN, router ports and queriers per bridge.
#[derive(Debug, Clone)]
pub struct Snooping {
    config: SnoopConfig,
    bridge_mac: MacAddr,
    /// The source of the own MLD queries.
    own_v6: Ipv6Addr,
    enabled: bool,
    ports: BTreeMap<PortId, Port>,
    groups: BTreeMap<GroupKey, Members>,
    /// Every membership's timeout, and stale ones (a timeout that moved,
    /// a membership gone) until they reach the top or the heap is rebuilt.
    timers: BinaryHeap<Timer>,
    /// The memberships in `groups`, over every group.
    memberships: usize,
    family: [FamilyState; 2],
    /// Groups changed since the last publication, with their members
    /// before the change.
    changed: BTreeMap<GroupKey, PortSet>,
    actions: Vec<Action>,
    stats: SnoopStats,
}

impl Snooping {
    /// Snooping on a bridge whose address is `bridge_mac`, without ports,
    /// started at `now`. With the own querier on, forwarding waits
    /// `query_response_interval` for reports (Linux's
    /// `br_multicast_set_querier`).
    pub fn new(config: SnoopConfig, bridge_mac: MacAddr, now: Instant) -> Snooping {
        let mut snooping = Snooping {
            config,
            bridge_mac,
            own_v6: query::link_local(bridge_mac),
            enabled: true,
            ports: BTreeMap::new(),
            groups: BTreeMap::new(),
            timers: BinaryHeap::new(),
            memberships: 0,
            family: Default::default(),
            changed: BTreeMap::new(),
            actions: Vec::new(),
            stats: SnoopStats::default(),
        };
        for family in Family::ALL {
            snooping.actions.push(Action::Querier {
                family,
                present: false,
            });
            if config.querier {
                let state = &mut snooping.family[family.index()];
                state.delay_until = Some(after(now, config.query_response_interval));
                state.own_query = Some(now);
            }
        }
        snooping
    }

    /// The parameters.
    pub fn config(&self) -> &SnoopConfig {
        &self.config
    }

    /// Adds a port, up (see [`set_port_up`](Self::set_port_up)). With the
    /// own querier on it is due a general query at once. Adding a port
    /// that exists replaces it; a port beyond [`MAX_PORTS`] is ignored.
    pub fn add_port(&mut self, port: PortId, router: RouterMode, fast_leave: bool, now: Instant) {
        if port.index() >= MAX_PORTS {
            return;
        }
        self.drop_port(port);
        let mut new = Port {
            router,
            fast_leave,
            groups: PortGroups::default(),
            up: true,
            family: Default::default(),
        };
        if self.enabled && self.config.querier {
            for state in &mut new.family {
                state.own_query = Some(now);
            }
        }
        self.ports.insert(port, new);
        self.publish();
    }

    /// Sets the most groups `port` may be a member of (Linux's
    /// `mcast_max_groups`; 0: no limit). As Linux's
    /// `br_multicast_ngroups_set_max`, a limit below the groups it has
    /// removes none of them: only new ones are refused until it is under
    /// the limit again.
    pub fn set_port_max_groups(&mut self, port: PortId, max: u32) {
        if let Some(p) = self.ports.get_mut(&port) {
            p.groups.max_groups = max;
        }
    }

    /// `port`'s groups against its limit, if it is a port.
    pub fn port_groups(&self, port: PortId) -> Option<PortGroups> {
        self.ports.get(&port).map(|p| p.groups)
    }

    /// Removes a port with its memberships and router entries.
    pub fn remove_port(&mut self, port: PortId) {
        self.drop_port(port);
        self.publish();
    }

    /// The port's link or spanning tree state changed: `up` when it
    /// forwards. Going down it loses its memberships and its router
    /// entries (Linux's `br_multicast_disable_port`); coming up, with the
    /// own querier on, it is due a general query at once and startup
    /// queries after (`br_multicast_enable_port`).
    pub fn set_port_up(&mut self, port: PortId, up: bool, now: Instant) {
        let querier = self.enabled && self.config.querier;
        let Some(p) = self.ports.get_mut(&port) else {
            return;
        };
        if p.up == up {
            return;
        }
        p.up = up;
        for state in &mut p.family {
            if up {
                state.own_query = querier.then_some(now);
                state.startup_sent = 0;
            } else {
                state.own_query = None;
                state.router_until = None;
            }
        }
        if !up {
            self.leave_all(port);
        }
        self.publish();
    }

    /// A frame [`classify`](super::classify) marked as control arrived on
    /// `port` in `vlan`. Due timers fire first. Frames on unknown ports or
    /// ports that are down are ignored; frames that do not parse are
    /// counted; queries from the bridge's own address (its own, come back)
    /// are ignored.
    pub fn receive(&mut self, port: PortId, vlan: u16, frame: &[u8], now: Instant) {
        self.fire(now);
        if !self.enabled {
            self.stats.ignored += 1;
            return;
        }
        if !self.ports.get(&port).is_some_and(|p| p.up) {
            return;
        }
        let own = EthernetFrame::new_checked(frame).is_ok_and(|e| e.src_addr() == self.bridge_mac);
        match parse(frame) {
            Packet::Igmp(m) => self.igmp(port, vlan, &m, own, now),
            Packet::Mld(m) => self.mld(port, vlan, &m, own, now),
            Packet::Malformed(Family::V4) => self.stats.igmp_parse_errors += 1,
            Packet::Malformed(Family::V6) => self.stats.mld_parse_errors += 1,
            Packet::Other | Packet::Data(_) => {}
        }
        self.publish();
    }

    /// Fires the timers due by `now`.
    pub fn tick(&mut self, now: Instant) {
        self.fire(now);
        self.publish();
    }

    /// When the earliest timer is due: when to call [`tick`](Self::tick).
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.enabled {
            return None;
        }
        let families = self
            .family
            .iter()
            .flat_map(|f| [f.own_query, f.other_until, f.delay_until]);
        let ports = self
            .ports
            .values()
            .flat_map(|p| p.family.iter().flat_map(|f| [f.own_query, f.router_until]));
        // The heap's top is live: every call that changes it ends in
        // publish(), which drops stale entries from the top.
        let members = self.timers.peek().map(|Reverse((at, _, _))| *at);
        families.chain(ports).chain([members]).flatten().min()
    }

    /// [`next_deadline`](Self::next_deadline) by looking at every timer,
    /// as it was found before the heap: the reference its tests compare
    /// with.
    #[cfg(test)]
    pub(crate) fn scan_deadline(&self) -> Option<Instant> {
        if !self.enabled {
            return None;
        }
        let families = self
            .family
            .iter()
            .flat_map(|f| [f.own_query, f.other_until, f.delay_until]);
        let ports = self
            .ports
            .values()
            .flat_map(|p| p.family.iter().flat_map(|f| [f.own_query, f.router_until]));
        let members = self
            .groups
            .values()
            .flat_map(|m| m.values().copied().map(Some));
        families.chain(ports).chain(members).flatten().min()
    }

    /// The heap's entries and the live memberships, for tests of its
    /// bound.
    #[cfg(test)]
    pub(crate) fn timer_counts(&self) -> (usize, usize) {
        (self.timers.len(), self.memberships)
    }

    /// Everything to do since the last call, in order. The first call
    /// begins with both families' querier state (absent); after that
    /// group, router and querier actions come only when the state changes,
    /// and the last one for a group or family is its current state.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// Every membership, sorted by group, then port.
    pub fn groups(&self, now: Instant) -> Vec<GroupRecord> {
        self.groups
            .iter()
            .flat_map(|(&key, members)| {
                members.iter().map(move |(&port, &until)| GroupRecord {
                    key,
                    port,
                    expires_in: until.saturating_duration_since(now),
                })
            })
            .collect()
    }

    /// Every router port, sorted by port, then family.
    pub fn routers(&self, now: Instant) -> Vec<RouterRecord> {
        if !self.enabled {
            return Vec::new();
        }
        let mut records = Vec::new();
        for (&port, p) in &self.ports {
            for family in Family::ALL {
                if !p.is_router(family) {
                    continue;
                }
                let permanent = p.router == RouterMode::Permanent;
                records.push(RouterRecord {
                    port,
                    family,
                    permanent,
                    expires_in: match permanent {
                        true => None,
                        false => p.family[family.index()]
                            .router_until
                            .map(|until| until.saturating_duration_since(now)),
                    },
                });
            }
        }
        records
    }

    /// The family's querier.
    pub fn querier(&self, family: Family, now: Instant) -> QuerierStatus {
        let state = &self.family[family.index()];
        let other = self.enabled && state.other_until.is_some();
        let own = self.enabled && self.config.querier && !other;
        QuerierStatus {
            present: self.present(family),
            own,
            address: match (other, own) {
                (true, _) => state.querier_addr,
                (false, true) => Some(self.own_addr(family)),
                (false, false) => None,
            },
            port: state.querier_port.filter(|_| other),
            expires_in: state
                .other_until
                .filter(|_| other)
                .map(|until| until.saturating_duration_since(now)),
        }
    }

    /// Groups with members now (per VLAN and group), without listing
    /// them.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// The running totals.
    pub fn stats(&self) -> SnoopStats {
        self.stats
    }

    /// Whether snooping is on: false once more than `hash_max` groups were
    /// asked for (Linux turns `multicast_snooping` off then). Off, nothing
    /// is published, every frame floods, and received frames are ignored.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The source address of the own queries.
    fn own_addr(&self, family: Family) -> IpAddr {
        match family {
            Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::V6 => IpAddr::V6(self.own_v6),
        }
    }

    /// Linux's `__br_multicast_querier_exists`: no delay running, and the
    /// own querier on or another one heard.
    fn present(&self, family: Family) -> bool {
        let state = &self.family[family.index()];
        self.enabled
            && state.delay_until.is_none()
            && (self.config.querier || state.other_until.is_some())
    }

    fn router_set(&self, family: Family) -> PortSet {
        if !self.enabled {
            return PortSet::EMPTY;
        }
        self.ports
            .iter()
            .filter(|(_, p)| p.is_router(family))
            .map(|(&id, _)| id)
            .collect()
    }

    fn up_ports(&self) -> PortSet {
        self.ports
            .iter()
            .filter(|(_, p)| p.up)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Queues the changes since the last publication: groups, then router
    /// ports, then queriers, so that a querier appears after the table it
    /// vouches for.
    fn publish(&mut self) {
        self.settle_timers();
        for (key, before) in std::mem::take(&mut self.changed) {
            let ports = member_set(self.groups.get(&key));
            if ports != before {
                self.actions.push(Action::Group { key, ports });
            }
        }
        for family in Family::ALL {
            let ports = self.router_set(family);
            let state = &mut self.family[family.index()];
            if ports != state.published_routers {
                state.published_routers = ports;
                self.actions.push(Action::Routers { family, ports });
            }
        }
        for family in Family::ALL {
            let present = self.present(family);
            let state = &mut self.family[family.index()];
            if present != state.published_present {
                state.published_present = present;
                self.actions.push(Action::Querier { family, present });
            }
        }
    }

    /// Whether the heap entry `timer` is still its membership's timeout.
    fn live(&self, timer: &Timer) -> bool {
        let Reverse((at, key, port)) = timer;
        self.groups.get(key).and_then(|m| m.get(port)) == Some(at)
    }

    /// Drops stale entries from the heap's top, so that the top is live;
    /// rebuilds the heap from the memberships once stale entries outnumber
    /// them (each refresh leaves one behind), which keeps it within twice
    /// the memberships and [`HEAP_SLACK`].
    fn settle_timers(&mut self) {
        if self.timers.len() > 2 * self.memberships + HEAP_SLACK {
            self.timers = self
                .groups
                .iter()
                .flat_map(|(&key, members)| {
                    members
                        .iter()
                        .map(move |(&port, &until)| Reverse((until, key, port)))
                })
                .collect();
        }
        while let Some(top) = self.timers.peek() {
            if self.live(top) {
                break;
            }
            self.timers.pop();
        }
    }

    /// Sets `key`'s timeout on `port`, a member, to `until`.
    fn set_timeout(&mut self, key: GroupKey, port: PortId, until: Instant) {
        if let Some(timeout) = self.groups.get_mut(&key).and_then(|m| m.get_mut(&port)) {
            if *timeout != until {
                *timeout = until;
                self.timers.push(Reverse((until, key, port)));
            }
        }
    }

    /// Notes `key`'s members before a change, once per publication.
    fn touch(&mut self, key: GroupKey) {
        if !self.changed.contains_key(&key) {
            let before = member_set(self.groups.get(&key));
            self.changed.insert(key, before);
        }
    }

    fn remove_member(&mut self, key: GroupKey, port: PortId) {
        self.touch(key);
        if let Some(members) = self.groups.get_mut(&key) {
            let was = members.remove(&port).is_some();
            if members.is_empty() {
                self.groups.remove(&key);
            }
            if was {
                self.memberships -= 1;
            }
            // br_multicast_port_ngroups_dec, where the port group goes.
            if let Some(p) = self.ports.get_mut(&port).filter(|_| was) {
                p.groups.n_groups = p.groups.n_groups.saturating_sub(1);
            }
        }
    }

    /// Removes `port` from every group.
    fn leave_all(&mut self, port: PortId) {
        let keys: Vec<GroupKey> = self
            .groups
            .iter()
            .filter(|(_, members)| members.contains_key(&port))
            .map(|(&key, _)| key)
            .collect();
        for key in keys {
            self.remove_member(key, port);
        }
    }

    /// Forgets `port` (Linux's `br_multicast_del_port`), without publishing.
    fn drop_port(&mut self, port: PortId) {
        if self.ports.remove(&port).is_none() {
            return;
        }
        self.leave_all(port);
        for state in &mut self.family {
            if state.querier_port == Some(port) {
                state.querier_port = None;
            }
        }
    }

    // Timers.

    fn fire(&mut self, now: Instant) {
        if !self.enabled {
            return;
        }
        for family in Family::ALL {
            let state = &mut self.family[family.index()];
            if due(state.delay_until, now) {
                state.delay_until = None;
            }
            if due(state.other_until, now) {
                state.other_until = None;
                // br_multicast_querier_expired: the own querier starts over.
                if self.config.querier {
                    self.start_querier(family, now);
                }
            }
            self.bridge_query(family, now);
            self.port_queries(family, now);
        }
        for p in self.ports.values_mut() {
            for state in &mut p.family {
                if due(state.router_until, now) {
                    state.router_until = None;
                }
            }
        }
        while let Some(Reverse((at, key, port))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            if self.live(&Reverse((at, key, port))) {
                self.remove_member(key, port);
            }
        }
    }

    /// Linux's `br_multicast_start_querier`: the bridge's and every up
    /// port's general queries due now, startup queries again.
    fn start_querier(&mut self, family: Family, now: Instant) {
        let i = family.index();
        self.family[i].own_query = Some(now);
        self.family[i].startup_sent = 0;
        for p in self.ports.values_mut().filter(|p| p.up) {
            p.family[i].own_query = Some(now);
            p.family[i].startup_sent = 0;
        }
    }

    /// The time to the next general query after `sent` startup queries.
    fn query_interval(&self, sent: u32) -> Duration {
        match sent < self.config.startup_query_count {
            true => self.config.startup_query_interval,
            false => self.config.query_interval,
        }
    }

    /// The bridge-wide own query timer (Linux's `br_multicast_query_expired`):
    /// while no other querier is heard, the bridge elects itself.
    fn bridge_query(&mut self, family: Family, now: Instant) {
        let i = family.index();
        if !due(self.family[i].own_query, now) {
            return;
        }
        if self.family[i].startup_sent < self.config.startup_query_count {
            self.family[i].startup_sent += 1;
        }
        if self.config.querier && self.family[i].other_until.is_none() {
            let next = after(now, self.query_interval(self.family[i].startup_sent));
            let own = self.own_addr(family);
            let state = &mut self.family[i];
            state.querier_addr = Some(own);
            state.querier_port = None;
            state.own_query = Some(next);
        } else {
            // Another querier is heard: the timer stops until it is gone.
            self.family[i].own_query = None;
        }
    }

    /// The ports' own query timers (Linux's
    /// `br_multicast_port_query_expired`): a general query out of each due
    /// port, one action for all of them when every up port is due.
    fn port_queries(&mut self, family: Family, now: Instant) {
        let i = family.index();
        let sending = self.config.querier && self.family[i].other_until.is_none();
        let (startup_count, startup, regular) = (
            self.config.startup_query_count,
            self.config.startup_query_interval,
            self.config.query_interval,
        );
        let mut sent = PortSet::new();
        for (&id, p) in &mut self.ports {
            let state = &mut p.family[i];
            if !due(state.own_query, now) {
                continue;
            }
            if state.startup_sent < startup_count {
                state.startup_sent += 1;
            }
            state.own_query = if sending {
                sent.insert(id);
                let interval = match state.startup_sent < startup_count {
                    true => startup,
                    false => regular,
                };
                Some(after(now, interval))
            } else {
                None
            };
        }
        if sent.is_empty() {
            return;
        }
        *self.stats.tx_queries(family) += sent.len() as u64;
        let frame = self.general_query(family);
        if sent == self.up_ports() {
            self.actions.push(Action::Send { port: None, frame });
        } else {
            for port in sent {
                self.actions.push(Action::Send {
                    port: Some(port),
                    frame: frame.clone(),
                });
            }
        }
    }

    fn general_query(&self, family: Family) -> Vec<u8> {
        let max_resp = self.config.query_response_interval;
        match family {
            Family::V4 => query::igmp_query(
                self.bridge_mac,
                igmp::ALL_SYSTEMS,
                Ipv4Addr::UNSPECIFIED,
                max_resp,
            ),
            Family::V6 => query::mld_query(
                self.bridge_mac,
                self.own_v6,
                mld::ALL_NODES,
                Ipv6Addr::UNSPECIFIED,
                max_resp,
            ),
        }
    }

    fn specific_query(&self, group: IpAddr) -> Vec<u8> {
        let max_resp = self.config.last_member_interval;
        match group {
            IpAddr::V4(g) => query::igmp_query(self.bridge_mac, igmp::ALL_SYSTEMS, g, max_resp),
            IpAddr::V6(g) => {
                query::mld_query(self.bridge_mac, self.own_v6, mld::ALL_NODES, g, max_resp)
            }
        }
    }

    // Messages.

    fn igmp(&mut self, port: PortId, vlan: u16, m: &Igmp<'_>, own: bool, now: Instant) {
        let msg = &m.msg;
        let key = GroupKey::new(vlan, IpAddr::V4(msg.group_addr()));
        match msg.msg_type() {
            igmp::kind::V1_REPORT => {
                self.stats.igmp_v1_reports += 1;
                let _ = self.join(port, key, now);
            }
            igmp::kind::V2_REPORT => {
                self.stats.igmp_v2_reports += 1;
                let _ = self.join(port, key, now);
            }
            igmp::kind::V3_REPORT => {
                self.stats.igmp_v3_reports += 1;
                let records = usize::from(msg.num_records());
                self.stats.records_ignored += records.saturating_sub(MAX_REPORT_RECORDS) as u64;
                // parse() checked that every record fits.
                for r in msg.records().flatten().take(MAX_REPORT_RECORDS) {
                    let key = GroupKey::new(vlan, IpAddr::V4(r.group_addr()));
                    if self.record(port, key, r.record_type(), r.num_sources(), now) {
                        break;
                    }
                }
            }
            igmp::kind::LEAVE => {
                self.stats.igmp_leaves += 1;
                self.leave(port, key, now);
            }
            igmp::kind::QUERY if !own => self.igmp_query(port, vlan, m, now),
            _ => {}
        }
    }

    fn mld(&mut self, port: PortId, vlan: u16, m: &Mld<'_>, own: bool, now: Instant) {
        let msg = &m.msg;
        // parse() returns MLD messages long enough for the address.
        let group = msg.mcast_addr().unwrap_or(Ipv6Addr::UNSPECIFIED);
        let key = GroupKey::new(vlan, IpAddr::V6(group));
        match msg.msg_type() {
            mld::kind::V1_REPORT => {
                self.stats.mld_v1_reports += 1;
                let _ = self.join(port, key, now);
            }
            mld::kind::V2_REPORT => {
                self.stats.mld_v2_reports += 1;
                let records = usize::from(msg.num_records());
                self.stats.records_ignored += records.saturating_sub(MAX_REPORT_RECORDS) as u64;
                for r in msg.records().flatten().take(MAX_REPORT_RECORDS) {
                    let key = GroupKey::new(vlan, IpAddr::V6(r.mcast_addr()));
                    if self.record(port, key, r.record_type(), r.num_sources(), now) {
                        break;
                    }
                }
            }
            mld::kind::DONE => {
                self.stats.mld_leaves += 1;
                self.leave(port, key, now);
            }
            mld::kind::QUERY if !own => self.mld_query(port, vlan, m, now),
            _ => {}
        }
    }

    /// One IGMPv3 or MLDv2 record, read as a version 2 or 1 report
    /// (`br_ip4_multicast_igmp3_report` in compatibility mode): INCLUDE of
    /// nothing is a leave, any other known record a join. True when the
    /// join failed (snooping just turned off, or the port is at its
    /// `mcast_max_groups`): as Linux's report loop, which stops at the
    /// first record whose group cannot be added, the rest are ignored.
    fn record(
        &mut self,
        port: PortId,
        key: GroupKey,
        kind: u8,
        sources: u16,
        now: Instant,
    ) -> bool {
        match kind {
            record::IS_INCLUDE | record::TO_INCLUDE if sources == 0 => {
                self.leave(port, key, now);
                false
            }
            record::IS_INCLUDE..=record::BLOCK => self.join(port, key, now).is_err(),
            _ => false,
        }
    }

    fn igmp_query(&mut self, port: PortId, vlan: u16, m: &Igmp<'_>, now: Instant) {
        let msg = &m.msg;
        let (max_delay, group) = if !msg.is_v3_query() {
            match msg.max_resp_code() {
                // Version 1: no Max Resp Time, and always general.
                0 => {
                    self.stats.igmp_v1_queries += 1;
                    (IGMPV1_MAX_RESP, Ipv4Addr::UNSPECIFIED)
                }
                code => {
                    self.stats.igmp_v2_queries += 1;
                    (tenths(u32::from(code)), msg.group_addr())
                }
            }
        } else {
            self.stats.igmp_v3_queries += 1;
            // Source-specific queries say nothing about whole groups.
            if msg.query_num_sources() != Some(0) {
                return;
            }
            let delay = match msg.max_resp_code() {
                0 => ONE_JIFFY,
                code => tenths(igmp::v3_code_value(code)),
            };
            (delay, msg.group_addr())
        };
        match group.is_unspecified() {
            true => self.query_received(Family::V4, port, IpAddr::V4(m.src), max_delay, now),
            false => self.group_query(GroupKey::new(vlan, IpAddr::V4(group)), max_delay, now),
        }
    }

    fn mld_query(&mut self, port: PortId, vlan: u16, m: &Mld<'_>, now: Instant) {
        let msg = &m.msg;
        let mcast = msg.mcast_addr().unwrap_or(Ipv6Addr::UNSPECIFIED);
        let (max_delay, group) = if !msg.is_v2_query() {
            self.stats.mld_v1_queries += 1;
            let delay = Duration::from_millis(u64::from(msg.max_resp_code()));
            // Linux reads a zero delay as no group at all: ignored.
            (delay, (!delay.is_zero()).then_some(mcast))
        } else {
            self.stats.mld_v2_queries += 1;
            let ms = mld::v2_max_resp_ms(msg.max_resp_code());
            let delay = Duration::from_millis(u64::from(ms)).max(ONE_JIFFY);
            (delay, (msg.query_num_sources() == Some(0)).then_some(mcast))
        };
        match group {
            None => {}
            Some(g) if g.is_unspecified() => {
                self.query_received(Family::V6, port, IpAddr::V6(m.src), max_delay, now)
            }
            Some(g) => self.group_query(GroupKey::new(vlan, IpAddr::V6(g)), max_delay, now),
        }
    }

    /// A general query from `src` on `port` (Linux's
    /// `br_multicast_select_querier` and `br_multicast_query_received`):
    /// accepted when no querier runs, none is known yet, or `src` is not
    /// above the known one; then another querier is present, forwarding
    /// waits `max_delay` for reports if it was not already, and the port is
    /// a router port for the querier interval.
    fn query_received(
        &mut self,
        family: Family,
        port: PortId,
        src: IpAddr,
        max_delay: Duration,
        now: Instant,
    ) {
        let interval = self.config.querier_interval;
        let state = &mut self.family[family.index()];
        let lower = match (state.querier_addr, src) {
            (Some(IpAddr::V4(known)), IpAddr::V4(src)) => known.is_unspecified() || src <= known,
            (Some(IpAddr::V6(known)), IpAddr::V6(src)) => src <= known,
            _ => true,
        };
        if !lower && (state.own_query.is_some() || state.other_until.is_some()) {
            return;
        }
        state.querier_addr = Some(src);
        state.querier_port = Some(port);
        if state.other_until.is_none() {
            state.delay_until = Some(after(now, max_delay));
        }
        state.other_until = Some(after(now, interval));
        if let Some(p) = self.ports.get_mut(&port) {
            if p.router == RouterMode::Learned {
                p.family[family.index()].router_until = Some(after(now, interval));
            }
        }
    }

    /// A group-specific query (Linux's `br_ip4_multicast_query`): every
    /// member's timeout comes down to `last_member_count` times `max_delay`.
    fn group_query(&mut self, key: GroupKey, max_delay: Duration, now: Instant) {
        let until = after(now, times(max_delay, self.config.last_member_count));
        let lowered: Vec<PortId> = self
            .groups
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|(_, &timeout)| timeout > until)
            .map(|(&port, _)| port)
            .collect();
        for port in lowered {
            self.set_timeout(key, port, until);
        }
    }

    /// A report for `key` on `port` (Linux's `br_multicast_add_group`): the
    /// port is a member for the membership interval. A new group beyond
    /// `hash_max` turns snooping off and is an error; so is a group new to
    /// a port already in `mcast_max_groups` groups, which is not added
    /// there and is counted (Linux's `br_multicast_port_ngroups_inc`).
    fn join(&mut self, port: PortId, key: GroupKey, now: Instant) -> Result<(), ()> {
        if is_local(key.group) {
            return Ok(());
        }
        let members = self.groups.get(&key);
        if members.is_none() && self.groups.len() >= self.config.hash_max {
            self.stats.groups_refused += 1;
            self.disable();
            return Err(());
        }
        if !members.is_some_and(|m| m.contains_key(&port)) {
            if let Some(p) = self.ports.get_mut(&port) {
                let groups = &mut p.groups;
                if groups.max_groups != 0 && groups.n_groups >= groups.max_groups {
                    groups.refused += 1;
                    self.stats.max_groups_refused += 1;
                    return Err(());
                }
                groups.n_groups += 1;
            }
            self.touch(key);
        }
        let until = after(now, self.config.membership_interval);
        let members = self.groups.entry(key).or_default();
        match members.insert(port, until) {
            None => self.memberships += 1,
            Some(before) if before == until => return Ok(()),
            Some(_) => {}
        }
        self.timers.push(Reverse((until, key, port)));
        Ok(())
    }

    /// A leave for `key` on `port` (Linux's `br_multicast_leave_group`).
    fn leave(&mut self, port: PortId, key: GroupKey, now: Instant) {
        if is_local(key.group) || !self.groups.contains_key(&key) {
            return;
        }
        let Some(p) = self.ports.get(&port) else {
            return;
        };
        if p.fast_leave {
            self.remove_member(key, port);
            return;
        }
        let i = key.family().index();
        // The querier in charge sends its own group-specific queries.
        if self.family[i].other_until.is_some() {
            return;
        }
        let until = after(
            now,
            times(
                self.config.last_member_interval,
                self.config.last_member_count,
            ),
        );
        if self.config.querier {
            let frame = self.specific_query(key.group);
            *self.stats.tx_queries(key.family()) += 1;
            self.actions.push(Action::Send {
                port: Some(port),
                frame,
            });
            if let Some(p) = self.ports.get_mut(&port) {
                p.family[i].own_query = Some(until);
            }
        }
        let timeout = self.groups.get(&key).and_then(|m| m.get(&port)).copied();
        if timeout.is_some_and(|timeout| timeout > until) {
            self.set_timeout(key, port, until);
        }
    }

    /// More groups than `hash_max`: Linux turns snooping off for the
    /// bridge. Forwarding stops trusting the table first, then every
    /// group and router port is published as gone.
    fn disable(&mut self) {
        self.enabled = false;
        for family in Family::ALL {
            let state = &mut self.family[family.index()];
            if state.published_present {
                state.published_present = false;
                self.actions.push(Action::Querier {
                    family,
                    present: false,
                });
            }
            state.own_query = None;
            state.other_until = None;
            state.delay_until = None;
        }
        for p in self.ports.values_mut() {
            p.family = Default::default();
            p.groups.n_groups = 0;
        }
        let keys: Vec<GroupKey> = self.groups.keys().copied().collect();
        for key in keys {
            self.touch(key);
        }
        self.groups.clear();
        self.timers.clear();
        self.memberships = 0;
    }
}

fn member_set(members: Option<&Members>) -> PortSet {
    members.map_or(PortSet::EMPTY, |m| m.keys().copied().collect())
}

/// Whether a set timer is due at `now`.
fn due(timer: Option<Instant>, now: Instant) -> bool {
    timer.is_some_and(|t| t <= now)
}

/// `now + d`, or as far as the clock goes for a `d` beyond it (a timer
/// that never fires).
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(now)
}

/// `d * n`, saturated.
fn times(d: Duration, n: u32) -> Duration {
    d.checked_mul(n).unwrap_or(Duration::MAX)
}

fn tenths(n: u32) -> Duration {
    Duration::from_millis(u64::from(n) * 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_linux_and_valid() {
        let c = SnoopConfig::default();
        assert_eq!(c.check(), Ok(()));
        assert_eq!(c.startup_query_interval, c.query_interval / 4);
        assert!(!c.querier);
    }

    #[test]
    fn bad_values_are_named() {
        let c = SnoopConfig {
            query_interval: Duration::ZERO,
            ..SnoopConfig::default()
        };
        assert_eq!(
            c.check().unwrap_err(),
            "mcast_query_interval must be above zero"
        );
        let c = SnoopConfig {
            query_response_interval: Duration::from_secs(125),
            ..SnoopConfig::default()
        };
        assert_eq!(
            c.check().unwrap_err(),
            "mcast_query_response_interval 125 s must be below mcast_query_interval 125 s"
        );
        let c = SnoopConfig {
            hash_max: 0,
            ..SnoopConfig::default()
        };
        assert!(c.check().unwrap_err().contains("hash_max"));
        let c = SnoopConfig {
            last_member_count: 0,
            startup_query_count: 0,
            ..SnoopConfig::default()
        };
        assert_eq!(c.check(), Ok(()));
    }

    #[test]
    fn huge_intervals_saturate() {
        let now = Instant::now();
        assert!(after(now, Duration::MAX) > now);
        assert_eq!(times(Duration::MAX, 2), Duration::MAX);
        assert_eq!(times(Duration::from_secs(1), 2), Duration::from_secs(2));
    }
}
