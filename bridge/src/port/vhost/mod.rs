//! vhost-user ports: a VM's virtio-net device (QEMU) or a DPDK
//! application (virtio-user) whose rings live in memory it shares with
//! the bridge, so that a frame crosses by one copy, with no system call.
//!
//! - `control.rs`: the port's control thread, on the unix socket.
//! - `protocol.rs`: what each vhost-user message does (the `vhost` crate
//!   reads and answers them).
//! - `device.rs`: what the control thread and the workers share.
//! - `eventfd.rs`: the frontend's kick and call descriptors, never waited on.
//! - `memory.rs`: the frontend's memory table, mapped.
//! - `sigbus.rs`: a frontend whose memory shrinks under its mapping loses
//!   its connection, not the bridge its life.
//! - `ring.rs`: the split virtqueue, from the device's side.
//!
//! Worker `k` serves queue pair `k`: it takes frames from the pair's
//! transmit ring (vring `2k + 1`) and gives frames to the receive ring of
//! pair `k % n`, where the frontend runs `n` pairs (fewer pairs than
//! workers share receive rings). A worker with nothing to do sleeps on its
//! pair's kick; while busy it asks the driver not to kick.

mod control;
mod device;
mod eventfd;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod memory;
mod protocol;
pub mod ring;
mod sigbus;
#[cfg(test)]
mod tests;

use std::io;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;

pub use control::{Mode, SocketAccess, SocketError};
pub use device::{Device, Negotiated, VhostCounters, OFFERED_FEATURES};

use super::{
    Lent, Outgoing, PortError, Queue, RxBatch, RxReport, SendReport, LENT_HEAD, VNET_HDR_LEN,
};
use crate::wire::segment::make_whole;
use crate::wire::vnet::{VnetHeader, VNET_HDR_GSO_ECN, VNET_HDR_GSO_NONE, VNET_HDR_GSO_TCPV4};
use control::Control;
use device::Running;
use ring::{Chain, ChainError, Direction, Segment};

/// The longest virtio-net header: virtio 1's, with `num_buffers`.
const MAX_HEADER: usize = 12;

/// The work one call may do on a driver's ring, as Linux's vhost-net
/// bounds it (`vhost_exceeds_weight`): chains taken from a transmit ring,
/// good and bad alike...
const CHAIN_BUDGET: usize = 256;
/// ... and descriptors read, either way: a call takes no chain once it
/// has read this many, so it reads fewer than this plus one chain's
/// longest walk (`ring::MAX_CHAIN_DESCRIPTORS`). A driver that posts more
/// (bad chains without end, chains of a thousand empty descriptors) is
/// served again in the worker's next round, after every other port.
const DESCRIPTOR_BUDGET: u64 = 8192;

/// How many chains ahead of the one it writes a send fetches the driver's
/// buffers (docs/benchmarks.md, "A send's fetch, a few chains ahead").
const SEND_AHEAD: u16 = 4;

/// The most chains one frame to the driver may take with mergeable
/// buffers (a 64 KiB frame in 256-byte buffers): beyond it the frame is
/// refused as too big for the room posted.
const MAX_MERGE_CHAINS: usize = 256;

/// One worker's queue pair of a vhost-user port.
#[derive(Debug)]
pub struct VhostQueue {
    name: String,
    pair: usize,
    device: Arc<Device>,
    /// The control thread, kept running while a queue is; none for a
    /// queue made by the fuzz targets' hooks.
    _control: Option<Arc<Control>>,
    /// Whole frames made of offloaded ones the driver cannot take.
    scratch: Vec<u8>,
    /// Such a frame, offered in pieces, joined first.
    joined: Vec<u8>,
    /// Whether the last receive lent frames to the batch: their chains,
    /// and every chain taken after the first of them, are held by the
    /// transmit ring until `release`; and the ring they came from.
    lent: bool,
    lent_from: u64,
    /// The chains one frame to the driver takes (mergeable buffers).
    heads: Vec<(u16, u32)>,
    /// The first of them, where `num_buffers` is written last.
    first: Vec<Segment>,
    /// The last receive stopped at the work budget with chains left.
    more: bool,
}

/// The memory table a frontend may share unless told otherwise: more than
/// a guest on a software bridge has, far less than the address space.
pub const DEFAULT_MAX_MEMORY: u64 = 256 << 30;

/// How a vhost-user port is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VhostConfig {
    /// Which side of the socket the bridge is.
    pub mode: Mode,
    /// The most bytes of memory the frontend's memory table may hold, all
    /// regions together (`max_memory=`); a larger table is refused.
    pub max_memory: u64,
    /// A server socket's owner, group and mode, where given.
    pub access: SocketAccess,
}

impl Default for VhostConfig {
    fn default() -> Self {
        VhostConfig {
            mode: Mode::Server,
            max_memory: DEFAULT_MAX_MEMORY,
            access: SocketAccess::default(),
        }
    }
}

/// Opens a vhost-user port at `path` with one queue pair per worker.
pub fn open(
    path: &Path,
    config: VhostConfig,
    workers: usize,
) -> Result<Vec<VhostQueue>, SocketError> {
    let name = path.display().to_string();
    let device = Arc::new(
        Device::new(&name, workers.max(1), config.max_memory).map_err(|source| {
            SocketError::Io {
                path: path.to_owned(),
                source,
            }
        })?,
    );
    let control = Arc::new(Control::start(
        path,
        config.mode,
        config.access,
        Arc::clone(&device),
    )?);
    Ok((0..workers.max(1))
        .map(|pair| {
            VhostQueue::with(
                name.clone(),
                pair,
                Arc::clone(&device),
                Some(Arc::clone(&control)),
            )
        })
        .collect())
}

/// What became of one frame offered to the driver.
enum Put {
    Sent,
    /// No room posted.
    NoRoom,
    /// Larger than the room the driver posts (without mergeable buffers).
    TooBig,
    /// The driver's chain broke the rules.
    BadChain(ChainError),
    /// The call's work budget ran out before the frame was placed.
    Budget,
}

impl VhostQueue {
    /// Worker `pair`'s queue of `device`, with no control thread behind
    /// it: for the tests and the fuzz targets, which play the frontend.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn detached(device: Arc<Device>, pair: usize) -> VhostQueue {
        VhostQueue::with(device.name().to_owned(), pair, device, None)
    }

    /// Worker `pair`'s queue of `device`, kept running by `control`.
    fn with(
        name: String,
        pair: usize,
        device: Arc<Device>,
        control: Option<Arc<Control>>,
    ) -> VhostQueue {
        VhostQueue {
            name,
            pair,
            device,
            _control: control,
            scratch: Vec::new(),
            joined: Vec::new(),
            lent: false,
            lent_from: 0,
            heads: Vec::new(),
            first: Vec::new(),
            more: false,
        }
    }

    /// The port's shared state: counters, link.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    fn link_down(&self) -> io::Error {
        io::Error::from_raw_os_error(libc::ENETDOWN)
    }

    /// Writes one frame (its virtio-net header `vnet`, its bytes `frame`)
    /// into the driver's receive ring, reading no more descriptors once the
    /// ring's count has reached `budget`: the frame's one copy, from where
    /// it lies (the worker's batch, or the guest that lent it) into the
    /// driver's buffers.
    #[inline]
    fn put(
        run: &mut Running,
        heads: &mut Vec<(u16, u32)>,
        first: &mut Vec<Segment>,
        budget: u64,
        vnet: &[u8],
        frame: &Outgoing<'_>,
    ) -> Put {
        let header_len = run.negotiated.header_len();
        let mut header = [0u8; MAX_HEADER];
        header[..VNET_HDR_LEN].copy_from_slice(&vnet[..VNET_HDR_LEN]);
        if header_len == MAX_HEADER {
            // num_buffers: one, unless the frame takes more (below).
            header[VNET_HDR_LEN..].copy_from_slice(&1u16.to_le_bytes());
        }
        let ring = &mut run.ring;
        if ring.walked() >= budget {
            return Put::Budget;
        }
        let chain = match ring.pop(Direction::Write, header_len as u32, u32::MAX) {
            Ok(Some(chain)) => chain,
            Ok(None) => return Put::NoRoom,
            Err(error) => return Put::BadChain(error),
        };
        // The common case: the chain's first buffer holds the whole frame.
        if let Some(n) = ring.write_first(&header[..header_len], frame) {
            ring.push_used(chain.head, n as u32);
            return Put::Sent;
        }
        Self::put_spread(run, heads, first, budget, header, chain, frame)
    }

    /// The rest of [`put`](Self::put): a frame that its chain's first
    /// buffer does not hold, spread over the chain's buffers, or over
    /// several chains (mergeable buffers).
    #[inline(never)]
    fn put_spread(
        run: &mut Running,
        heads: &mut Vec<(u16, u32)>,
        first: &mut Vec<Segment>,
        budget: u64,
        mut header: [u8; MAX_HEADER],
        chain: Chain,
        frame: &Outgoing<'_>,
    ) -> Put {
        let header_len = run.negotiated.header_len();
        let ring = &mut run.ring;
        let len = frame.len();
        // The header, then the frame's parts, across the buffers.
        let [a, b, c] = frame.pieces;
        let mut parts = [
            Lent::of(&header[..header_len]),
            Lent::of(a),
            Lent::of(b),
            Lent::of(c),
            frame.rest,
        ];
        if !run.negotiated.mergeable() {
            let need = header_len + len;
            if (chain.total as usize) < need {
                ring.unpop(1);
                return Put::TooBig;
            }
            ring.write_parts(ring.segments(), 0, &parts);
            ring.push_used(chain.head, need as u32);
            return Put::Sent;
        }
        // Mergeable buffers: as many chains as the frame takes, the first
        // one's header saying how many.
        first.clear();
        first.extend_from_slice(ring.segments());
        let n = ring.write_parts(ring.segments(), 0, &parts);
        advance(&mut parts, n);
        heads.clear();
        heads.push((chain.head, n as u32));
        let mut written = n;
        while written < header_len + len {
            if heads.len() == MAX_MERGE_CHAINS || ring.walked() >= budget {
                // The chains taken go back untouched, as far as the driver
                // can tell: nothing of them is used.
                ring.unpop(heads.len() as u16);
                return if heads.len() == MAX_MERGE_CHAINS {
                    Put::TooBig
                } else {
                    Put::Budget
                };
            }
            let chain = match ring.pop(Direction::Write, 1, u32::MAX) {
                Ok(Some(chain)) => chain,
                Ok(None) => {
                    ring.unpop(heads.len() as u16);
                    return Put::NoRoom;
                }
                Err(error) => {
                    // The chains taken go back empty, ahead of the one
                    // that broke the rules: it was consumed, so they
                    // cannot be put back.
                    for head in heads.iter_mut() {
                        head.1 = 0;
                    }
                    ring.push_used_before_refused(heads, &error);
                    return Put::BadChain(error);
                }
            };
            let n = ring.write_parts(ring.segments(), 0, &parts);
            advance(&mut parts, n);
            written += n;
            heads.push((chain.head, n as u32));
        }
        header[VNET_HDR_LEN..].copy_from_slice(&(heads.len() as u16).to_le_bytes());
        ring.write_to(first, 0, &header[..header_len]);
        for &(head, len) in heads.iter() {
            ring.push_used(head, len);
        }
        Put::Sent
    }
}

/// Takes the frame of `chain`, just popped from `run`'s transmit ring,
/// into `batch`. A unicast frame longer than [`LENT_HEAD`] whose bytes
/// past it lie in one buffer is lent: its header and first bytes copied,
/// the rest left in the guest's buffer and its chain kept in `lent` until
/// the batch is released. Any other frame is copied whole and its chain
/// returned at once. Returns whether it was (a used entry to publish).
fn take(
    run: &mut Running,
    lent: &mut bool,
    header_len: usize,
    chain: Chain,
    batch: &mut RxBatch,
) -> bool {
    let len = chain.total as usize - header_len;
    let head = len.min(LENT_HEAD);
    let mut header = [0u8; MAX_HEADER];
    let buffer = batch
        .next_buffer()
        .expect("a receive stops when the batch is full");
    let (meta, frame) = buffer.split_at_mut(VNET_HDR_LEN);
    // `max` keeps a frame within the buffer.
    let ring = &run.ring;
    if !ring.read_first(&mut header[..header_len], &mut frame[..head]) {
        ring.read_parts(0, &mut [&mut header[..header_len], &mut frame[..head]]);
    }
    meta.copy_from_slice(&header[..VNET_HDR_LEN]);
    // Group-addressed frames are read further by snooping and spanning
    // tree: copied whole.
    let unicast = head > 0 && frame[0] & 1 == 0;
    let rest = len - head;
    if rest == 0 || !unicast || ring.lendable(header_len + head, rest).is_none() {
        if rest > 0 {
            ring.read_chain(header_len + head, &mut frame[head..len]);
        }
        batch.commit(VNET_HDR_LEN + len);
        run.ring.push_used(chain.head, 0);
        return true;
    }
    let lent_now = ring.lend_to(batch, VNET_HDR_LEN + head, header_len + head, rest);
    debug_assert!(lent_now, "lendable");
    run.ring.hold(chain.head);
    *lent = true;
    false
}

/// Returns the chains the ring holds since a frame was lent to the
/// driver, when `run` is still the ring they were taken from (one that
/// replaced it never had them).
fn give_back(run: &mut Running, lent: &mut bool, from: u64) {
    if *lent && run.ring.id() == from {
        run.ring.release_held();
        if run.ring.publish() {
            run.notify();
        }
    }
    *lent = false;
}

/// Moves past the first `n` bytes of `parts`.
fn advance(parts: &mut [Lent<'_>], mut n: usize) {
    for part in parts.iter_mut() {
        let skip = n.min(part.len());
        *part = part.skip(skip);
        n -= skip;
    }
}

/// Whether a driver with `negotiated` takes the frame behind `vnet` as it
/// is (its offloads are ones it negotiated).
#[inline]
fn takes(negotiated: Negotiated, vnet: &[u8]) -> bool {
    let header = VnetHeader::new_unchecked(vnet);
    let gso = header.gso_type() & !VNET_HDR_GSO_ECN;
    (gso == VNET_HDR_GSO_NONE || negotiated.guest_tso(gso == VNET_HDR_GSO_TCPV4))
        && (!header.needs_csum() || negotiated.guest_csum())
}

impl Queue for VhostQueue {
    const METADATA_LEN: usize = VNET_HDR_LEN;

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.device.wake_fd(self.pair))
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        let mut report = RxReport::default();
        if !self.device.link_up() {
            self.device.drain_link_event(self.pair);
            return Err(PortError::Recv {
                port: self.name.clone(),
                source: self.link_down(),
            });
        }
        let Some(vring) = self.device.vring(2 * self.pair + 1) else {
            return Ok(report);
        };
        let mut slot = vring.lock();
        let Some(run) = slot.as_mut() else {
            // A pair the frontend does not run: nothing to wait for.
            self.device.drain_link_event(self.pair);
            return Ok(report);
        };
        let header_len = run.negotiated.header_len();
        let max = (header_len + batch.frame_capacity() - VNET_HDR_LEN) as u32;
        let mut used = false;
        let budget = run.ring.walked() + DESCRIPTOR_BUDGET;
        let mut popped = 0;
        self.more = false;
        // Chains lent by an earlier receive whose batch was not released
        // (a worker that stopped between): returned now.
        give_back(run, &mut self.lent, self.lent_from);
        self.lent_from = run.ring.id();
        // The driver is not asked to kick while the worker is busy; it is
        // asked only before the worker sleeps (`before_sleep`).
        run.ring.disable_notification();
        // The frames this receive takes, fetched ahead, and the used
        // ring's lines their chains are returned in.
        let room = (batch.capacity() - batch.len()).min(CHAIN_BUDGET);
        let shown = run.ring.prefetch(room as u16);
        run.ring.own_used(shown);
        while !batch.is_full() {
            if popped == CHAIN_BUDGET || run.ring.walked() >= budget {
                // Left for the next round.
                self.more = !matches!(run.ring.available(), Ok(0));
                if self.more {
                    VhostCounters::bump(&self.device.counters.over_budget);
                }
                break;
            }
            popped += 1;
            match run.ring.pop(Direction::Read, header_len as u32, max) {
                Ok(None) => break,
                Ok(Some(chain)) => {
                    used |= take(run, &mut self.lent, header_len, chain, batch);
                    report.received += 1;
                    continue;
                }
                Err(ChainError::Long) => report.oversize += 1,
                Err(ChainError::Index(ahead)) => {
                    // Nothing can be taken from a ring whose index is
                    // wrong: the port is faulted (and retried).
                    VhostCounters::bump(&self.device.counters.bad_chains);
                    if run.ring.publish() {
                        run.notify();
                    }
                    return Err(PortError::Recv {
                        port: self.name.clone(),
                        source: io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("the driver's avail index runs {ahead} entries ahead"),
                        ),
                    });
                }
                Err(_) => {
                    VhostCounters::bump(&self.device.counters.bad_chains);
                    report.malformed += 1;
                }
            }
            used = true;
        }
        if used && run.ring.publish() {
            run.notify();
        }
        if run.ring.memory().faulted() {
            // What was read came from zero pages: nothing of it is a frame.
            give_back(run, &mut self.lent, self.lent_from);
            batch.clear();
            self.device.memory_lost();
            return Err(PortError::Recv {
                port: self.name.clone(),
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the frontend's memory shrank under its mapping",
                ),
            });
        }
        Ok(report)
    }

    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = Outgoing<'a>>) -> SendReport {
        let mut report = SendReport::default();
        let Some(pair) = self.device.rx_pair(self.pair) else {
            report.fault = Some(self.link_down());
            return report;
        };
        let Some(vring) = self.device.vring(2 * pair) else {
            report.fault = Some(self.link_down());
            return report;
        };
        let mut slot = vring.lock();
        let Some(run) = slot.as_mut() else {
            report.fault = Some(self.link_down());
            return report;
        };
        // A driver that refills its receive ring is never asked to kick:
        // a send that finds no room drops, it does not wait for buffers
        // (the flag is written once; DPDK's vhost does the same).
        run.ring.disable_notification();
        // The buffers the frames go to, fetched ahead: their lines (and the
        // descriptors naming them) lie in the driver's core's cache, which
        // read the frames they held and posted them again; unfetched, the
        // first write to each waits on that core, a frame at a time. A few
        // chains ahead of the one written, not the whole batch at once:
        // taken from the driver in a bunch, the lines slowed its core.
        let batch = frames.size_hint().0;
        let ahead = batch.min(usize::from(SEND_AHEAD)) as u16;
        if run.ring.prefetch(ahead) > 0 {
            // The used ring's lines the batch's chains are returned in.
            run.ring.own_used(u16::try_from(batch).unwrap_or(u16::MAX));
        }
        let counters = &self.device.counters;
        let budget = run.ring.walked() + DESCRIPTOR_BUDGET;
        let (heads, first) = (&mut self.heads, &mut self.first);
        let (scratch, joined) = (&mut self.scratch, &mut self.joined);
        let tally = |put: Put, len: usize, report: &mut SendReport| match put {
            Put::Sent => {
                report.sent += 1;
                report.sent_bytes += len as u64;
            }
            Put::NoRoom => {
                VhostCounters::bump(&counters.no_room);
                report.dropped += 1;
            }
            Put::TooBig => report.refused += 1,
            Put::Budget => {
                VhostCounters::bump(&counters.over_budget);
                report.dropped += 1;
            }
            Put::BadChain(error) => {
                VhostCounters::bump(&counters.bad_chains);
                log::debug!("{}: receive chain dropped: {error}", self.name);
                report.refused += 1;
            }
        };
        for frame in frames {
            if frame.meta.len() < VNET_HDR_LEN {
                report.refused += 1;
                continue;
            }
            let vnet = &frame.meta[..VNET_HDR_LEN];
            run.ring.prefetch_ahead(SEND_AHEAD);
            if takes(run.negotiated, vnet) {
                let put = Self::put(run, heads, first, budget, vnet, &frame);
                tally(put, frame.len(), &mut report);
                continue;
            }
            // Offloads the driver did not negotiate are done here: the
            // checksum filled in, the segments cut.
            let whole = [0u8; VNET_HDR_LEN];
            let mut outcome = None;
            let eth = frame.ethernet(joined);
            let made = make_whole(vnet, eth, scratch, |part| {
                if outcome.is_none() {
                    let part = Outgoing::split(part, 0);
                    match Self::put(run, heads, first, budget, &whole, &part) {
                        Put::Sent => {}
                        other => outcome = Some(other),
                    }
                }
            });
            match (made, outcome) {
                (Err(_), _) => report.refused += 1,
                (Ok(()), Some(put)) => tally(put, 0, &mut report),
                (Ok(()), None) => tally(Put::Sent, frame.len(), &mut report),
            }
        }
        if run.ring.publish() {
            run.notify();
        }
        if run.ring.memory().faulted() {
            self.device.memory_lost();
        }
        report
    }

    /// Returns the chains whose frames the last receive lent: the guest
    /// may use their buffers again.
    fn release(&mut self) {
        if !self.lent {
            return;
        }
        match self.device.vring(2 * self.pair + 1) {
            Some(vring) => match vring.lock().as_mut() {
                Some(run) => give_back(run, &mut self.lent, self.lent_from),
                None => self.lent = false,
            },
            None => self.lent = false,
        }
    }

    fn link_ready(&self) -> bool {
        self.device.drain_link_event(self.pair);
        self.device.link_up()
    }

    /// Chains left on the transmit ring when the last receive reached its
    /// work budget: the driver was not asked to kick for them.
    fn pending(&self) -> bool {
        self.more
    }

    /// Sleeping is safe once the driver has been asked to kick and the
    /// ring, looked at again, is still empty. The kick and the link event
    /// are emptied first, so that one after the look wakes the worker.
    fn before_sleep(&mut self) -> bool {
        self.device.drain_link_event(self.pair);
        let Some(vring) = self.device.vring(2 * self.pair + 1) else {
            return true;
        };
        let mut slot = vring.lock();
        let Some(run) = slot.as_mut() else {
            return true;
        };
        run.drain_kick();
        if run.ring.enable_notification() {
            return true;
        }
        run.ring.disable_notification();
        false
    }

    fn link_fd(&self) -> Option<RawFd> {
        Some(self.device.link_event_fd(self.pair))
    }

    /// The frontend went away or stopped its rings: nothing fails on the
    /// port, so the worker asks.
    fn link_lost(&self) -> bool {
        !self.device.link_up()
    }
}
