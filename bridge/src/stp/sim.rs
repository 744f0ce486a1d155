//! A network of [`Stp`] instances for the tests: bridges joined by
//! point-to-point links and shared segments (hubs), frames delivered at
//! once and in order, time advanced a second at a time.

use std::collections::{HashMap, VecDeque};

use super::bpdu::{Bpdu, BpduPacket};
use super::{Action, PortConfig, PortState, PortStatus, Role, Stp, StpConfig};
use crate::port_id::PortId;
use crate::wire::MacAddr;

/// A (bridge, port) pair.
pub(super) type End = (usize, u16);

/// Frames delivered in one settle() before the network is declared to
/// oscillate.
const MAX_FRAMES: usize = 100_000;

/// What happened, for the tests to inspect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event {
    Sent {
        bridge: usize,
        port: u16,
        bpdu: Bpdu,
    },
    State {
        bridge: usize,
        port: u16,
        state: PortState,
    },
    Flush {
        bridge: usize,
        port: u16,
    },
}

/// A timestamped event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Logged {
    pub time: u32,
    pub event: Event,
}

pub(super) struct Node {
    pub stp: Stp,
    /// Drops BPDUs whose version is not 0, as Linux's 802.1D bridge does.
    pub legacy: bool,
    /// The last state each port was told to take.
    pub told: HashMap<u16, PortState>,
}

/// A link (two ends) or a hub (more).
pub(super) struct Segment {
    pub ends: Vec<End>,
    pub up: bool,
    /// Ends whose frames are lost (a link failing one way).
    pub silent: Vec<End>,
}

#[derive(Default)]
pub(super) struct Sim {
    pub nodes: Vec<Node>,
    pub segments: Vec<Segment>,
    pub now: u32,
    pub log: Vec<Logged>,
}

/// The address of bridge `n`.
pub(super) fn bridge_mac(n: usize) -> MacAddr {
    MacAddr([0x02, 0xac, 0, 0, 0, n as u8 + 1])
}

impl Sim {
    pub fn new() -> Sim {
        Sim::default()
    }

    /// Adds a bridge; one with force_version 0 also stands in for a
    /// Linux bridge by ignoring RST BPDUs.
    pub fn bridge(&mut self, config: StpConfig) -> usize {
        let n = self.nodes.len();
        self.nodes.push(Node {
            stp: Stp::new(config, bridge_mac(n)),
            legacy: config.force_version == 0,
            told: HashMap::new(),
        });
        n
    }

    /// `count` RSTP bridges with default parameters and priorities
    /// 32768 + 4096 * n, so bridge 0 is root.
    pub fn bridges(&mut self, count: usize) -> Vec<usize> {
        (0..count)
            .map(|n| {
                self.bridge(StpConfig {
                    priority: 32768 + 4096 * n as u16,
                    ..StpConfig::default()
                })
            })
            .collect()
    }

    /// Adds a port to a bridge (link down).
    pub fn port(&mut self, (bridge, port): End, config: PortConfig) {
        let mac = MacAddr([0x02, 0x00, 0, bridge as u8 + 1, 0, port as u8 + 1]);
        self.nodes[bridge].stp.add_port(PortId(port), config, mac);
        self.collect(bridge, &mut VecDeque::new());
    }

    fn ensure_port(&mut self, end: End) {
        if self.nodes[end.0].stp.port_status(PortId(end.1)).is_none() {
            self.port(end, PortConfig::default());
        }
    }

    /// A point-to-point link between two ends, down; ports with default
    /// parameters are added where missing.
    pub fn link(&mut self, a: End, b: End) -> usize {
        self.segment(&[a, b])
    }

    /// A shared segment; its ports should be configured with
    /// point_to_point false first.
    pub fn segment(&mut self, ends: &[End]) -> usize {
        for &end in ends {
            self.ensure_port(end);
        }
        self.segments.push(Segment {
            ends: ends.to_vec(),
            up: false,
            silent: Vec::new(),
        });
        self.segments.len() - 1
    }

    /// Brings a segment's links up (both ends), then lets the network
    /// settle.
    pub fn up(&mut self, seg: usize) {
        self.set(seg, true);
    }

    /// Takes a segment's links down.
    pub fn down(&mut self, seg: usize) {
        self.set(seg, false);
    }

    fn set(&mut self, seg: usize, up: bool) {
        self.segments[seg].up = up;
        for (bridge, port) in self.segments[seg].ends.clone() {
            self.nodes[bridge].stp.set_link(PortId(port), up);
        }
        self.settle();
    }

    /// Brings every segment up at once.
    pub fn all_up(&mut self) {
        for seg in 0..self.segments.len() {
            self.segments[seg].up = true;
            for (bridge, port) in self.segments[seg].ends.clone() {
                self.nodes[bridge].stp.set_link(PortId(port), true);
            }
        }
        self.settle();
    }

    /// One second passes on every bridge.
    pub fn tick(&mut self) {
        self.now += 1;
        for node in &mut self.nodes {
            node.stp.tick();
        }
        self.settle();
    }

    /// `secs` seconds pass.
    pub fn run(&mut self, secs: u32) {
        for _ in 0..secs {
            self.tick();
        }
    }

    /// Ticks until `done` holds, at most `max` seconds; the seconds it
    /// took (0: it held already).
    pub fn run_until(&mut self, max: u32, done: impl Fn(&Sim) -> bool) -> Option<u32> {
        for secs in 0..=max {
            if done(self) {
                return Some(secs);
            }
            if secs < max {
                self.tick();
            }
        }
        None
    }

    /// Takes a bridge's actions: logs them, tracks states, and queues
    /// the frames.
    fn collect(&mut self, bridge: usize, queue: &mut VecDeque<(usize, u16, Vec<u8>)>) {
        for action in self.nodes[bridge].stp.take_actions() {
            let event = match action {
                Action::Send { port, frame } => {
                    let bpdu = Bpdu::from_frame(&frame).expect("a BPDU we sent decodes");
                    assert_eq!(frame.len(), 60);
                    queue.push_back((bridge, port.0, frame));
                    Event::Sent {
                        bridge,
                        port: port.0,
                        bpdu,
                    }
                }
                Action::State { port, state } => {
                    self.nodes[bridge].told.insert(port.0, state);
                    Event::State {
                        bridge,
                        port: port.0,
                        state,
                    }
                }
                Action::Flush { port } => Event::Flush {
                    bridge,
                    port: port.0,
                },
            };
            self.log.push(Logged {
                time: self.now,
                event,
            });
        }
    }

    /// Delivers frames until no bridge has anything more to send.
    pub fn settle(&mut self) {
        let mut queue = VecDeque::new();
        for bridge in 0..self.nodes.len() {
            self.collect(bridge, &mut queue);
        }
        let mut delivered = 0;
        while let Some((bridge, port, frame)) = queue.pop_front() {
            delivered += 1;
            assert!(delivered < MAX_FRAMES, "the network does not settle");
            for (peer, peer_port) in self.peers((bridge, port)) {
                // Linux's bridge ignores BPDUs of any version but 0.
                if self.nodes[peer].legacy && BpduPacket::new_unchecked(&frame[17..]).version() != 0
                {
                    continue;
                }
                self.nodes[peer].stp.receive(PortId(peer_port), &frame);
                self.collect(peer, &mut queue);
            }
        }
        self.check_told();
    }

    /// Where a frame sent from `end` arrives.
    fn peers(&self, end: End) -> Vec<End> {
        self.segments
            .iter()
            .filter(|s| s.up && s.ends.contains(&end) && !s.silent.contains(&end))
            .flat_map(|s| s.ends.iter().copied().filter(|&e| e != end))
            .collect()
    }

    /// The State actions told each port its current state.
    fn check_told(&self) {
        for (n, node) in self.nodes.iter().enumerate() {
            for port in node.stp.ports() {
                let state = node.stp.port_status(port).unwrap().state;
                let told = node
                    .told
                    .get(&port.0)
                    .copied()
                    .unwrap_or(PortState::Discarding);
                assert_eq!(told, state, "bridge {n} port {port}");
            }
        }
    }

    pub fn status(&self, (bridge, port): End) -> PortStatus {
        self.nodes[bridge].stp.port_status(PortId(port)).unwrap()
    }

    pub fn role(&self, end: End) -> Role {
        self.status(end).role
    }

    pub fn state(&self, end: End) -> PortState {
        self.status(end).state
    }

    /// Every end of every segment that is up.
    fn live_ends(&self) -> Vec<End> {
        let mut ends: Vec<End> = self
            .segments
            .iter()
            .filter(|s| s.up)
            .flat_map(|s| s.ends.iter().copied())
            .collect();
        ends.sort();
        ends.dedup();
        ends
    }

    /// The ends that block: Alternate or Backup, discarding.
    pub fn blocking(&self) -> Vec<End> {
        self.live_ends()
            .into_iter()
            .filter(|&e| matches!(self.role(e), Role::Alternate | Role::Backup))
            .collect()
    }

    /// Whether the tree is complete: all bridges agree on the root, every
    /// live root or designated port forwards, every alternate or backup
    /// port discards.
    pub fn converged(&self) -> bool {
        let root = self.nodes[0].stp.bridge_status().root_id;
        if self
            .nodes
            .iter()
            .any(|n| n.stp.bridge_status().root_id != root)
        {
            return false;
        }
        self.live_ends().into_iter().all(|e| {
            let s = self.status(e);
            match s.role {
                Role::Root | Role::Designated => s.state == PortState::Forwarding,
                Role::Alternate | Role::Backup => s.state == PortState::Discarding,
                Role::Disabled => false,
            }
        })
    }

    /// The flushes logged at or after `since`.
    pub fn flushes(&self, since: u32) -> Vec<End> {
        self.log
            .iter()
            .filter(|l| l.time >= since)
            .filter_map(|l| match l.event {
                Event::Flush { bridge, port } => Some((bridge, port)),
                _ => None,
            })
            .collect()
    }

    /// The BPDUs an end sent at or after `since`.
    pub fn sent(&self, end: End, since: u32) -> Vec<(u32, Bpdu)> {
        self.log
            .iter()
            .filter(|l| l.time >= since)
            .filter_map(|l| match l.event {
                Event::Sent { bridge, port, bpdu } if (bridge, port) == end => Some((l.time, bpdu)),
                _ => None,
            })
            .collect()
    }

    pub fn topology_changes(&self, bridge: usize) -> u64 {
        self.nodes[bridge].stp.bridge_status().topology_changes
    }
}
