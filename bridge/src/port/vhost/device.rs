//! What a vhost-user port's control thread and its workers share: one
//! slot per vring (the running ring, under a mutex that a worker holds
//! for one batch and the control thread for one change), the features
//! the frontend took, whether the link is up, and the port's counters.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use parking_lot::Mutex;
use virtio_bindings::{virtio_config, virtio_net, virtio_ring};

use super::eventfd::FrontendEventfd;
use super::ring::SplitRing;
use crate::port::wake;

const fn bit(n: u32) -> u64 {
    1 << n
}

/// The features a vhost-user port offers: virtio 1, the offloads the
/// bridge's virtio-net header carries, mergeable receive buffers, event
/// indices, multiqueue and in-order use of buffers (the port returns
/// every chain in the order it was made available, a lent one's included:
/// a driver then takes its used buffers back without looking them up,
/// DPDK's by a path of its own). Not offered: the control queue (QEMU and DPDK
/// emulate it themselves), indirect descriptors and packed rings (less for
/// an untrusted driver to get wrong), and MAC, MTU or status reporting.
pub const OFFERED_FEATURES: u64 = bit(virtio_config::VIRTIO_F_VERSION_1)
    | bit(virtio_net::VIRTIO_NET_F_CSUM)
    | bit(virtio_net::VIRTIO_NET_F_GUEST_CSUM)
    | bit(virtio_net::VIRTIO_NET_F_GUEST_TSO4)
    | bit(virtio_net::VIRTIO_NET_F_GUEST_TSO6)
    | bit(virtio_net::VIRTIO_NET_F_HOST_TSO4)
    | bit(virtio_net::VIRTIO_NET_F_HOST_TSO6)
    | bit(virtio_net::VIRTIO_NET_F_MRG_RXBUF)
    | bit(virtio_net::VIRTIO_NET_F_MQ)
    | bit(virtio_ring::VIRTIO_RING_F_EVENT_IDX)
    | bit(virtio_config::VIRTIO_F_IN_ORDER)
    | PROTOCOL_FEATURES;

/// vhost-user's own bit: the frontend may negotiate protocol features.
pub const PROTOCOL_FEATURES: u64 = 1 << 30;

/// What the frontend's features mean for the data path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// The features the frontend set.
    pub features: u64,
}

impl Negotiated {
    #[inline]
    fn has(self, n: u32) -> bool {
        self.features & bit(n) != 0
    }

    /// The virtio-net header's length: 12 bytes (with `num_buffers`) for
    /// virtio 1 or mergeable buffers, else the legacy 10.
    #[inline]
    pub fn header_len(self) -> usize {
        if self.has(virtio_config::VIRTIO_F_VERSION_1) || self.mergeable() {
            12
        } else {
            10
        }
    }

    /// Frames to the driver may span several chains.
    #[inline]
    pub fn mergeable(self) -> bool {
        self.has(virtio_net::VIRTIO_NET_F_MRG_RXBUF)
    }

    /// Rings use used_event/avail_event.
    pub fn event_idx(self) -> bool {
        self.has(virtio_ring::VIRTIO_RING_F_EVENT_IDX)
    }

    /// The driver takes frames whose checksum is still partial.
    #[inline]
    pub fn guest_csum(self) -> bool {
        self.has(virtio_net::VIRTIO_NET_F_GUEST_CSUM)
    }

    /// The driver takes TCP segments of IPv4 (`v4`) or IPv6 larger than
    /// its MTU.
    #[inline]
    pub fn guest_tso(self, v4: bool) -> bool {
        self.has(if v4 {
            virtio_net::VIRTIO_NET_F_GUEST_TSO4
        } else {
            virtio_net::VIRTIO_NET_F_GUEST_TSO6
        })
    }
}

/// A running vring: its ring and the descriptors it signals by.
#[derive(Debug)]
pub struct Running {
    /// The ring.
    pub ring: SplitRing,
    /// What the frontend negotiated.
    pub negotiated: Negotiated,
    /// Kicked by the driver when it makes chains available (read to
    /// empty it before sleeping).
    pub kick: FrontendEventfd,
    /// Signalled to tell the driver of used chains; none when it polls.
    pub call: Option<FrontendEventfd>,
}

impl Running {
    /// Tells the driver of used chains.
    pub fn notify(&self) {
        if let Some(call) = &self.call {
            call.signal();
        }
    }

    /// Empties the kick eventfd, so that it polls readable again only when
    /// kicked again.
    pub fn drain_kick(&self) {
        self.kick.drain();
    }
}

/// A vhost-user port's counters, beyond the per-port ones every port has.
#[derive(Debug, Default)]
pub struct VhostCounters {
    /// Frontends that connected.
    pub connects: AtomicU64,
    /// Connections that ended (a frontend that went away, reset, or broke
    /// the protocol).
    pub disconnects: AtomicU64,
    /// Messages on the socket that broke the protocol (the connection is
    /// closed on each).
    pub bad_messages: AtomicU64,
    /// Memory tables refused (regions that overlap, files too short).
    pub bad_memory: AtomicU64,
    /// Rings refused: outside the memory table, misaligned, of a bad size.
    pub bad_rings: AtomicU64,
    /// Chains dropped for breaking the rules (outside memory, a loop, too
    /// long, of the wrong direction), both ways.
    pub bad_chains: AtomicU64,
    /// Frames to the driver dropped: it had posted no room for them.
    pub no_room: AtomicU64,
    /// Calls that stopped at the work budget (chains or descriptors) with
    /// work left, either way: a busy or hostile driver.
    pub over_budget: AtomicU64,
    /// Connections closed because the frontend's memory shrank under its
    /// mapping (a SIGBUS, survived).
    pub memory_faults: AtomicU64,
}

impl VhostCounters {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters by name, for `stats`.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("connects", get(&self.connects)),
            ("disconnects", get(&self.disconnects)),
            ("bad_messages", get(&self.bad_messages)),
            ("bad_memory", get(&self.bad_memory)),
            ("bad_rings", get(&self.bad_rings)),
            ("bad_chains", get(&self.bad_chains)),
            ("no_room", get(&self.no_room)),
            ("over_budget", get(&self.over_budget)),
            ("memory_faults", get(&self.memory_faults)),
        ]
    }
}

/// The state a vhost-user port's control thread and workers share.
#[derive(Debug)]
pub struct Device {
    name: String,
    /// Two per queue pair: even to the driver (its receive queue), odd
    /// from it (its transmit queue).
    vrings: Box<[Mutex<Option<Running>>]>,
    /// Per queue pair, what its worker sleeps on: an epoll set holding the
    /// pair's transmit kick while that ring runs.
    wakes: Box<[Epoll]>,
    /// Queue pairs from 0 on whose receive ring runs: frames for the
    /// driver go to pair `worker % active`.
    active: AtomicUsize,
    /// Pair 0 runs both ways.
    link: AtomicBool,
    /// Per queue pair, in its wake set: signalled when the link changes,
    /// so that a sleeping worker takes a link down at once.
    link_events: Box<[OwnedFd]>,
    /// The port's counters.
    pub counters: VhostCounters,
    /// The most memory a memory table may hold, in bytes.
    max_memory: u64,
    /// Signalled when the frontend's memory shrank under its mapping: the
    /// control thread then closes the connection.
    abort: OwnedFd,
    /// Whether `abort` was signalled for the current connection.
    aborting: AtomicBool,
}

impl Device {
    /// A device of `pairs` queue pairs, none running, taking memory tables
    /// of at most `max_memory` bytes.
    pub fn new(name: &str, pairs: usize, max_memory: u64) -> std::io::Result<Device> {
        let wakes = (0..pairs)
            .map(|_| Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(std::io::Error::from))
            .collect::<std::io::Result<Vec<_>>>()?;
        let link_events = (0..pairs)
            .map(|_| wake::eventfd())
            .collect::<std::io::Result<Vec<_>>>()?;
        for (wake, event) in wakes.iter().zip(&link_events) {
            wake.add(event, EpollEvent::new(EpollFlags::EPOLLIN, u64::MAX))
                .map_err(std::io::Error::from)?;
        }
        Ok(Device {
            name: name.to_owned(),
            vrings: (0..2 * pairs).map(|_| Mutex::new(None)).collect(),
            wakes: wakes.into_boxed_slice(),
            active: AtomicUsize::new(0),
            link: AtomicBool::new(false),
            link_events: link_events.into_boxed_slice(),
            counters: VhostCounters::default(),
            max_memory,
            abort: wake::eventfd()?,
            aborting: AtomicBool::new(false),
        })
    }

    /// The frontend's memory shrank under its mapping (it reads as zeros
    /// since): has the control thread close the connection, once.
    pub fn memory_lost(&self) {
        // AcqRel: one caller of many signals, and counts, once.
        if !self.aborting.swap(true, Ordering::AcqRel) {
            VhostCounters::bump(&self.counters.memory_faults);
            let _ = wake::eventfd_signal(&self.abort);
        }
    }

    /// What the control thread polls to hear of [`memory_lost`](Self::memory_lost).
    pub fn abort_fd(&self) -> RawFd {
        self.abort.as_raw_fd()
    }

    /// A new connection: forgets the last one's abort.
    pub fn clear_abort(&self) {
        wake::eventfd_drain(&self.abort);
        self.aborting.store(false, Ordering::Release);
    }

    /// The most memory a memory table may hold, in bytes.
    pub fn max_memory(&self) -> u64 {
        self.max_memory
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queue pairs offered.
    pub fn pairs(&self) -> usize {
        self.wakes.len()
    }

    /// Vring `index`, if there is one.
    pub fn vring(&self, index: usize) -> Option<&Mutex<Option<Running>>> {
        self.vrings.get(index)
    }

    /// How many vrings.
    pub fn vrings(&self) -> usize {
        self.vrings.len()
    }

    /// What pair `pair`'s worker polls.
    pub fn wake_fd(&self, pair: usize) -> RawFd {
        self.wakes[pair].0.as_raw_fd()
    }

    /// Whether the frontend runs pair 0 both ways.
    pub fn link_up(&self) -> bool {
        self.link.load(Ordering::Acquire)
    }

    /// The pair a worker sends frames for the driver on.
    #[inline]
    pub fn rx_pair(&self, worker: usize) -> Option<usize> {
        match self.active.load(Ordering::Acquire) {
            0 => None,
            active => Some(worker % active),
        }
    }

    /// Replaces vring `index`'s running state with what `make` makes of
    /// the old one, under the vring's lock (so between two of a worker's
    /// batches), keeping its pair's wake set and the link state in step.
    /// Returns what ran before.
    pub fn update(
        &self,
        index: usize,
        make: impl FnOnce(Option<&Running>) -> Option<Running>,
    ) -> Option<Running> {
        let wake = &self.wakes[index / 2];
        let transmit = index % 2 == 1;
        let old = {
            let mut slot = self.vrings[index].lock();
            let new = make(slot.as_ref());
            // The set is keyed by descriptor: a kick is added and deleted
            // through the one descriptor its `Running` holds (the eventfd
            // is the frontend's too, so closing ours would not remove it).
            if let (true, Some(new)) = (transmit, &new) {
                let event = EpollEvent::new(EpollFlags::EPOLLIN, index as u64);
                if let Err(error) = wake.add(new.kick.file().as_fd(), event) {
                    log::warn!("{}: cannot watch vring {index}'s kick: {error}", self.name);
                }
            }
            std::mem::replace(&mut *slot, new)
        };
        if let (true, Some(old)) = (transmit, &old) {
            let _ = wake.delete(old.kick.file().as_fd());
        }
        self.refresh();
        old
    }

    fn running(&self, index: usize) -> bool {
        self.vrings[index].lock().is_some()
    }

    fn refresh(&self) {
        let active = (0..self.pairs())
            .take_while(|&pair| self.running(2 * pair))
            .count();
        self.active.store(active, Ordering::Release);
        let link = active > 0 && self.running(1);
        if self.link.swap(link, Ordering::AcqRel) != link {
            for event in &self.link_events {
                let _ = wake::eventfd_signal(event);
            }
        }
    }

    /// Pair `pair`'s link event, readable after the link changed.
    pub fn link_event_fd(&self, pair: usize) -> RawFd {
        self.link_events[pair].as_raw_fd()
    }

    /// Empties pair `pair`'s link event (its worker has seen the link).
    pub fn drain_link_event(&self, pair: usize) {
        wake::eventfd_drain(&self.link_events[pair]);
    }
}
