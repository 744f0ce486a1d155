//! VXLAN ports (RFC 7348): one L2 segment carried over UDP to other VTEPs,
//! so that a bridge on one host and bridges (or Linux vxlan devices) on
//! others form one segment.
//!
//! - Each worker has one UDP socket per local address and port, in a
//!   SO_REUSEPORT group with the other workers' sockets; the VXLAN ports
//!   (VNIs) on that address share it, and a datagram of another port's VNI
//!   is set aside for that port (`Endpoint`).
//! - Frames leave from one of `SEND_PORTS` sockets per worker, each bound
//!   to the local address and a port of the kernel's choosing, picked by
//!   the inner frame's flow hash: the outer source port varies by flow, as
//!   RFC 7348 recommends and the Linux vxlan device does, so that a
//!   receiving VTEP's RSS or SO_REUSEPORT group spreads the flows over its
//!   cores while each flow stays in order.
//! - Each received frame carries the VTEP it came from (a handle to its
//!   address, see [`vteps`]), which the bridge learns into the fdb beside
//!   the inner source station's port, as a Linux vxlan fdb entry carries
//!   its `dst`: ageing, the learning limit,
//!   static entries and the lock strategy cover remote stations as they
//!   cover every other. Known unicast goes to the VTEP its entry names, and
//!   broadcast, multicast, unknown unicast and stations without a VTEP to
//!   every listed remote (head-end replication). The bridge never sends a frame back out of the
//!   port it came in on, so what comes from one VTEP never goes to another
//!   (split horizon: a full mesh needs no loop prevention).
//! - The far end gets the inner frame only, not the virtio-net header: a
//!   frame with a partial checksum gets it filled in, and an offloaded TCP
//!   segment is cut to its MSS before encapsulation (`wire::segment`),
//!   never below `wire::segment::MIN_GSO_SIZE`, and a send makes at most
//!   [`WHOLE_MAX`] bytes of whole frames at a time.
//!   A datagram too big for the underlay is refused (EMSGSIZE: the socket
//!   sets don't-fragment) and counted, never sent in fragments.

pub mod datagrams;
mod sys;
pub mod vteps;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use arc_swap::ArcSwap;
use socket2::SockAddr;
pub use vteps::Vteps;

use super::{fd, Outgoing, PortError, Queue, RxBatch, RxReport, SendReport, VNET_HDR_LEN};
use crate::wire::flow_hash;
use crate::wire::segment::{complete_partial, make_whole, offload_large_tcp, SegmentError, TcpRun};
use crate::wire::vxlan::{self, Vni, Vtep};
use datagrams::{Datagrams, Dropped};

/// Datagrams one receive call takes at most.
const RECV_BATCH: usize = 64;
/// Receive calls per batch at most.
const RECV_CALLS: usize = 4;
/// Datagrams one batch takes at most, whatever becomes of them (with UDP
/// GRO one message may carry 64).
const RECV_DATAGRAMS: usize = RECV_CALLS * RECV_BATCH;
/// The largest datagram taken whole: any UDP payload. Over a veth underlay
/// the kernel hands coalesced datagrams of up to 64 KiB to the socket;
/// slots a burst of small datagrams never reaches stay untouched.
const DATAGRAM_MAX: usize = 65_536;
/// Inner TCP frames longer than this (IP bytes) are marked as offloaded
/// segments on receive (see `wire::segment::offload_large_tcp`).
const STANDARD_MTU: usize = 1500;
/// Sockets (outer source ports) each worker sends from, per local address.
const SEND_PORTS: usize = 8;
/// Datagrams set aside for another VNI's port, at most, per endpoint and
/// VNI; beyond it they are dropped and counted.
const PENDING_MAX: usize = 1024;
/// The most bytes of whole frames (segments, completed checksums) a send
/// makes before it sends them: a batch of offloaded frames is cut and sent
/// in rounds, so that what a batch holds in memory is bounded whatever its
/// size and its frames' segment sizes (64 frames of 64 KiB cut at 48 bytes
/// would be 8 MiB). 64 full TSO frames cut at a 1448-byte MSS take one
/// round or two. A round may pass the cap by the frame that crosses it, a
/// few hundred KiB at most.
pub const WHOLE_MAX: usize = 4 << 20;

/// A VXLAN port's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanConfig {
    /// Its VNI.
    pub vni: Vni,
    /// The local address and UDP port: the outer source, and where it
    /// listens.
    pub local: SocketAddr,
    /// The VTEPs that floods go to.
    pub remotes: Vec<IpAddr>,
    /// Whether stations are learned from datagrams of any source; off,
    /// only listed remotes and static entries' VTEPs are heard.
    pub learning: bool,
    /// Whether a control plane (EVPN) gives the port its remote stations
    /// and VTEPs: datagrams from any VTEP are taken, as Linux's vxlan
    /// device takes them, and none teaches the port a VTEP.
    pub evpn: bool,
    /// With `evpn`: the UDP port of the kernel vxlan device that mirrors
    /// the port for FRR (`crate::evpn::mirror`), never the data port.
    pub mirror_port: u16,
}

/// A VXLAN port's counters of what it dropped, beyond the bridge's.
#[derive(Debug, Default)]
pub struct VxlanCounters {
    /// Datagrams shorter than a VXLAN and an Ethernet header.
    pub short: AtomicU64,
    /// Datagrams without the I flag.
    pub flags: AtomicU64,
    /// Datagrams with a reserved bit set.
    pub reserved: AtomicU64,
    /// Datagrams of a VNI no port has here.
    pub unknown_vni: AtomicU64,
    /// Datagrams from an unlisted VTEP while learning is off.
    pub unlisted_source: AtomicU64,
    /// Datagrams longer than a receive slot.
    pub truncated: AtomicU64,
    /// Datagrams set aside for another port and dropped (it was full).
    pub pending_full: AtomicU64,
    /// Frames not sent: no remote to send them to.
    pub no_remote: AtomicU64,
    /// Frames whose offloads could not be completed (malformed, or a
    /// segmentation type other than TCP).
    pub offload_errors: AtomicU64,
    /// Offloaded frames not sent: their segment size was 0 or below
    /// `wire::segment::MIN_GSO_SIZE`.
    pub small_gso: AtomicU64,
}

impl VxlanCounters {
    /// The counters by name, for `stats`.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("short", get(&self.short)),
            ("flags", get(&self.flags)),
            ("reserved", get(&self.reserved)),
            ("unknown_vni", get(&self.unknown_vni)),
            ("unlisted_source", get(&self.unlisted_source)),
            ("truncated", get(&self.truncated)),
            ("pending_full", get(&self.pending_full)),
            ("no_remote", get(&self.no_remote)),
            ("offload_errors", get(&self.offload_errors)),
            ("small_gso", get(&self.small_gso)),
        ]
    }

    /// The counter of datagrams dropped for `reason`.
    fn dropped(&self, reason: Dropped) -> &AtomicU64 {
        match reason {
            Dropped::Short => &self.short,
            Dropped::Flags => &self.flags,
            Dropped::Reserved => &self.reserved,
            Dropped::UnknownVni => &self.unknown_vni,
            Dropped::Truncated => &self.truncated,
        }
    }

    fn bump(counter: &AtomicU64) {
        // Relaxed: statistics.
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What all queues (workers) of one VXLAN port share.
#[derive(Debug)]
pub struct VxlanShared {
    /// Its settings.
    pub config: VxlanConfig,
    /// The VTEPs of its static fdb entries, which a port that does not
    /// learn hears beside its listed remotes; the control plane keeps it
    /// (see [`set_static_vteps`](Self::set_static_vteps)).
    static_vteps: ArcSwap<Vec<IpAddr>>,
    /// Where floods go: the listed remotes and the VTEPs a control plane
    /// gave (see [`set_flood_vteps`](Self::set_flood_vteps)).
    flood: ArcSwap<Vec<IpAddr>>,
    /// Its VTEPs' handles.
    pub vteps: Vteps,
    /// What it dropped.
    pub counters: VxlanCounters,
}

impl VxlanShared {
    /// Whether `addr` is a listed remote, a VTEP a control plane gave or
    /// the VTEP of a static entry.
    pub fn is_known_vtep(&self, addr: IpAddr) -> bool {
        self.flood.load().contains(&addr) || self.static_vteps.load().contains(&addr)
    }

    /// Sets the VTEPs a control plane gave (EVPN's type-3 routes): floods
    /// go to them and to the listed remotes.
    pub fn set_flood_vteps(&self, vteps: &[IpAddr]) {
        let mut flood = self.config.remotes.clone();
        for &vtep in vteps {
            if !flood.contains(&vtep) {
                flood.push(vtep);
            }
        }
        self.flood.store(Arc::new(flood));
    }

    /// Where floods go now.
    pub fn flood(&self) -> Vec<IpAddr> {
        self.flood.load().to_vec()
    }

    /// Sets the VTEPs of the port's static fdb entries.
    pub fn set_static_vteps(&self, mut vteps: Vec<IpAddr>) {
        vteps.sort_unstable();
        vteps.dedup();
        self.static_vteps.store(Arc::new(vteps));
    }
}

/// One worker's socket on one local address, and the datagrams it took for
/// ports other than the one reading.
struct Endpoint {
    socket: OwnedFd,
    /// What frames are sent from, by flow (`SEND_PORTS`).
    senders: Vec<OwnedFd>,
    /// Per sender: the kernel refused a UDP GSO send on it (EIO: no
    /// checksum offload or IPsec on the underlay), so it sends one
    /// datagram per call from then on.
    no_gso: Vec<bool>,
    buffers: sys::RecvBuffers,
    /// What of the last receive is not yet taken (a batch filled first).
    unread: Unread,
    /// Per VNI with a port here: datagrams waiting for it (inner frame,
    /// sender).
    pending: HashMap<Vni, VecDeque<(Vec<u8>, IpAddr)>>,
}

/// Where taking the last receive's messages stopped: message `next` of
/// `count`, at byte `offset` of its payload (a GRO train taken in part).
#[derive(Debug, Default, Clone, Copy)]
struct Unread {
    next: usize,
    count: usize,
    offset: usize,
}

impl Unread {
    fn is_empty(&self) -> bool {
        self.next >= self.count
    }
}

type SharedEndpoint = Arc<Mutex<Endpoint>>;

/// An endpoint in use: its local address, the queue (worker) it serves.
struct EndpointEntry {
    local: SocketAddr,
    queue: usize,
    endpoint: Weak<Mutex<Endpoint>>,
}

/// Every endpoint in use, by local address and queue index, so that VXLAN
/// ports on one address share their sockets.
static ENDPOINTS: Mutex<Vec<EndpointEntry>> = Mutex::new(Vec::new());

fn endpoint(local: SocketAddr, queue: usize, vni: Vni) -> io::Result<SharedEndpoint> {
    let mut all = ENDPOINTS.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|entry| entry.endpoint.strong_count() > 0);
    let found = all
        .iter()
        .find(|entry| entry.local == local && entry.queue == queue)
        .and_then(|entry| entry.endpoint.upgrade());
    let endpoint = match found {
        Some(endpoint) => endpoint,
        None => {
            let senders = (0..SEND_PORTS)
                .map(|_| sys::open_sender(local.ip()))
                .collect::<io::Result<Vec<_>>>()
                .map_err(|error| bind_error(error, local))?;
            let endpoint = Arc::new(Mutex::new(Endpoint {
                socket: sys::open(local).map_err(|error| bind_error(error, local))?,
                senders,
                no_gso: vec![false; SEND_PORTS],
                buffers: sys::RecvBuffers::new(RECV_BATCH, DATAGRAM_MAX),
                unread: Unread::default(),
                pending: HashMap::new(),
            }));
            all.push(EndpointEntry {
                local,
                queue,
                endpoint: Arc::downgrade(&endpoint),
            });
            endpoint
        }
    };
    let mut guard = endpoint.lock().unwrap_or_else(PoisonError::into_inner);
    if guard.pending.contains_key(&vni) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("VNI {vni} already has a port on {local}"),
        ));
    }
    guard.pending.insert(vni, VecDeque::new());
    drop(guard);
    Ok(endpoint)
}

/// `error` from binding a socket to `local`; where the address cannot be
/// bound (EADDRNOTAVAIL), one that says why in words.
fn bind_error(error: io::Error, local: SocketAddr) -> io::Error {
    if error.raw_os_error() != Some(libc::EADDRNOTAVAIL) {
        return error;
    }
    let assigned = sys::is_assigned(local.ip()).unwrap_or(false);
    io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        unavailable_reason(local.ip(), assigned),
    )
}

/// Why `local` cannot be bound, given whether an interface has it: none
/// does, or it is an IPv6 address that is not usable yet (tentative while
/// duplicate address detection runs, about a second after it was added
/// or its link came up) or never will be (the detection found it in use).
fn unavailable_reason(local: IpAddr, assigned: bool) -> String {
    match local {
        IpAddr::V6(_) if assigned => format!(
            "{local} is not usable: IPv6 duplicate address detection has not finished on it, \
             or found it in use elsewhere (`ip -6 addr` shows it tentative or dadfailed); \
             start once it is neither"
        ),
        _ => format!("{local} is not an address of this host"),
    }
}

/// One worker's queue of a VXLAN port.
pub struct VxlanQueue {
    name: String,
    shared: Arc<VxlanShared>,
    endpoint: SharedEndpoint,
    fd: RawFd,
    header: [u8; vxlan::HEADER_LEN],
    /// The whole frames of the frames offered, one round of a send at a
    /// time.
    wholes: Wholes,
    found: Vec<Option<IpAddr>>,
    lanes: Vec<usize>,
    addrs: Vec<SockAddr>,
}

impl std::fmt::Debug for VxlanQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VxlanQueue")
            .field("name", &self.name)
            .field("vni", &self.shared.config.vni)
            .finish()
    }
}

impl VxlanQueue {
    /// Opens `queues` queues of VXLAN port `name`, one per worker.
    pub fn open(name: &str, config: VxlanConfig, queues: usize) -> io::Result<Vec<VxlanQueue>> {
        let shared = Arc::new(VxlanShared {
            static_vteps: ArcSwap::from_pointee(Vec::new()),
            flood: ArcSwap::from_pointee(config.remotes.clone()),
            vteps: Vteps::default(),
            config,
            counters: VxlanCounters::default(),
        });
        (0..queues.max(1))
            .map(|queue| {
                let endpoint = endpoint(shared.config.local, queue, shared.config.vni)?;
                let fd = endpoint
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .socket
                    .as_raw_fd();
                Ok(VxlanQueue {
                    name: name.to_owned(),
                    header: vxlan::header(shared.config.vni),
                    shared: Arc::clone(&shared),
                    endpoint,
                    fd,
                    wholes: Wholes::default(),
                    found: Vec::new(),
                    lanes: Vec::new(),
                    addrs: Vec::new(),
                })
            })
            .collect()
    }

    /// What the port's queues share: its settings, static VTEPs and
    /// counters.
    pub fn shared(&self) -> &Arc<VxlanShared> {
        &self.shared
    }

    /// Takes one inner frame from `source` into the batch, with `source` as
    /// its VTEP when the port learns.
    /// A TCP segment that continues the flow of the batch's last frame
    /// (`run`) joins it instead (see `wire::segment::TcpRun`).
    fn deliver(
        shared: &VxlanShared,
        frame: &[u8],
        source: IpAddr,
        batch: &mut RxBatch,
        report: &mut RxReport,
        run: &mut Option<TcpRun>,
    ) {
        let config = &shared.config;
        if !config.learning && !config.evpn && !shared.is_known_vtep(source) {
            VxlanCounters::bump(&shared.counters.unlisted_source);
            return;
        }
        let vtep = match config.learning && !config.evpn {
            true => shared.vteps.handle(source),
            false => None,
        };
        // Segments of one flow from two VTEPs are two stations' (or one
        // that moved): never one frame.
        let same_vtep = !batch.is_empty() && batch.vtep(batch.len() - 1) == vtep;
        if let (Some(tcp), true, Some((buffer, len))) = (run.as_mut(), same_vtep, batch.last_mut())
        {
            if let Some(joined) = tcp.join(buffer, len, frame) {
                batch.set_last_len(joined);
                return;
            }
        }
        *run = None;
        let Some(buffer) = batch.next_buffer() else {
            return;
        };
        if VNET_HDR_LEN + frame.len() > buffer.len() {
            report.oversize += 1;
            return;
        }
        buffer[..VNET_HDR_LEN].fill(0);
        buffer[VNET_HDR_LEN..VNET_HDR_LEN + frame.len()].copy_from_slice(frame);
        let (vnet, inner) = buffer[..VNET_HDR_LEN + frame.len()].split_at_mut(VNET_HDR_LEN);
        complete_partial(inner);
        if !offload_large_tcp(vnet, inner, STANDARD_MTU) {
            *run = TcpRun::start(inner);
        }
        batch.commit(VNET_HDR_LEN + frame.len());
        if let Some(vtep) = vtep {
            batch.set_last_vtep(vtep);
        }
        report.received += 1;
    }
}

impl VxlanQueue {
    /// Takes one inner frame of VNI `vni` (one a port here has): into the
    /// batch if it is this port's, set aside if it is another port's.
    /// Returns whether it was set aside.
    #[allow(clippy::too_many_arguments)]
    fn take_frame(
        shared: &VxlanShared,
        pending: &mut HashMap<Vni, VecDeque<(Vec<u8>, IpAddr)>>,
        vni: Vni,
        frame: &[u8],
        source: IpAddr,
        batch: &mut RxBatch,
        report: &mut RxReport,
        run: &mut Option<TcpRun>,
    ) -> bool {
        if vni == shared.config.vni {
            Self::deliver(shared, frame, source, batch, report, run);
            return false;
        }
        match pending.get_mut(&vni) {
            Some(queue) if queue.len() < PENDING_MAX => {
                queue.push_back((frame.to_vec(), source));
                return true;
            }
            Some(_) => VxlanCounters::bump(&shared.counters.pending_full),
            None => VxlanCounters::bump(&shared.counters.unknown_vni),
        }
        false
    }
}

impl Drop for VxlanQueue {
    fn drop(&mut self) {
        let mut endpoint = self.endpoint.lock().unwrap_or_else(PoisonError::into_inner);
        endpoint.pending.remove(&self.shared.config.vni);
    }
}

impl Queue for VxlanQueue {
    const METADATA_LEN: usize = VNET_HDR_LEN;

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn recv_batch(&mut self, batch: &mut RxBatch) -> Result<RxReport, PortError> {
        let mut report = RxReport::default();
        let shared = &*self.shared;
        let vni = shared.config.vni;
        let mut endpoint = self.endpoint.lock().unwrap_or_else(PoisonError::into_inner);
        let Endpoint {
            socket,
            buffers,
            unread,
            pending,
            ..
        } = &mut *endpoint;
        // The flow of the batch's last frame, while later segments may join.
        let mut run = None;
        // What another port of this endpoint took for this one, first.
        if let Some(queue) = pending.get_mut(&vni) {
            while !batch.is_full() {
                let Some((frame, source)) = queue.pop_front() else {
                    break;
                };
                Self::deliver(shared, &frame, source, batch, &mut report, &mut run);
            }
        }
        // Bounded: datagrams that take no place in the batch (other VNIs,
        // bad ones, joined segments) must not keep the worker here.
        let mut calls = 0;
        let mut drained = false;
        let mut datagrams = 0;
        // Set aside for other ports in this call: no more than a batch, what
        // such a port takes from its queue per call, so that reading for
        // this port does not outrun that port and drop its frames.
        let mut set_aside = 0;
        while !batch.is_full() && datagrams < RECV_DATAGRAMS && set_aside < RECV_BATCH {
            if unread.is_empty() {
                if calls == RECV_CALLS || drained {
                    break;
                }
                let room = batch.capacity() - batch.len();
                let count = buffers
                    .recv(socket, room)
                    .map_err(|source| PortError::Recv {
                        port: self.name.clone(),
                        source,
                    })?;
                calls += 1;
                drained = count < room;
                *unread = Unread {
                    next: 0,
                    count,
                    offset: 0,
                };
                if count == 0 {
                    break;
                }
            }
            let message = buffers.message(unread.next);
            let Some(source) = message.source else {
                // Not from an IP sender: nothing to answer or learn.
                unread.next += 1;
                unread.offset = 0;
                continue;
            };
            let mut train = Datagrams::resume(
                message.payload,
                message.segment,
                message.truncated,
                unread.offset,
            );
            while !batch.is_full() && datagrams < RECV_DATAGRAMS && set_aside < RECV_BATCH {
                let known = |v| v == vni || pending.contains_key(&v);
                let Some(datagram) = train.next_with(known) else {
                    break;
                };
                datagrams += 1;
                match datagram {
                    Ok((v, frame)) => {
                        set_aside += usize::from(Self::take_frame(
                            shared,
                            pending,
                            v,
                            frame,
                            source,
                            batch,
                            &mut report,
                            &mut run,
                        ));
                    }
                    Err(reason) => VxlanCounters::bump(shared.counters.dropped(reason)),
                }
            }
            if train.is_done() {
                unread.next += 1;
                unread.offset = 0;
            } else {
                unread.offset = train.offset();
            }
        }
        Ok(report)
    }

    fn send_batch<'a>(&mut self, frames: impl Iterator<Item = Outgoing<'a>>) -> SendReport {
        self.send_batch_to(frames.map(|frame| (frame, None)))
    }

    fn send_batch_to<'a>(
        &mut self,
        mut frames: impl Iterator<Item = (Outgoing<'a>, Option<Vtep>)>,
    ) -> SendReport {
        let mut report = SendReport::default();
        loop {
            let filled = self
                .wholes
                .fill(&mut frames, &self.shared.counters, &self.name);
            report.refused += filled.refused;
            if filled.taken == 0 || !self.send_wholes(filled.taken, &mut report) || !filled.more {
                return report;
            }
        }
    }

    fn take_error(&mut self) -> Option<io::Error> {
        let endpoint = self.endpoint.lock().unwrap_or_else(PoisonError::into_inner);
        std::iter::once(&endpoint.socket)
            .chain(&endpoint.senders)
            .find_map(|socket| fd::take_socket_error(socket.as_fd()))
    }

    fn pending(&self) -> bool {
        // Held elsewhere only for moments (a port of this endpoint added
        // or removed): waiting beats sleeping in poll(2) on frames.
        let endpoint = self.endpoint.lock().unwrap_or_else(PoisonError::into_inner);
        !endpoint.unread.is_empty()
            || endpoint
                .pending
                .get(&self.shared.config.vni)
                .is_some_and(|q| !q.is_empty())
    }
}

/// What [`Wholes::fill`] did with the frames it took.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Filled {
    /// Frames taken from the iterator (refused ones included).
    taken: usize,
    /// Frames refused (their offloads cannot be completed).
    refused: usize,
    /// Whether it stopped at [`WHOLE_MAX`], frames perhaps left.
    more: bool,
}

/// The whole frames of the frames offered to one send: packed in `bytes`,
/// `spans` saying where each is and which frame offered it came from, and
/// per frame offered its Ethernet length and VTEP.
#[derive(Debug, Default)]
struct Wholes {
    /// Segments and checksummed copies, one at a time.
    scratch: Vec<u8>,
    /// A frame offered in pieces (its VLAN tag changed), joined.
    joined: Vec<u8>,
    bytes: Vec<u8>,
    spans: Vec<(usize, usize, usize)>,
    lens: Vec<usize>,
    vteps: Vec<Option<Vtep>>,
}

impl Wholes {
    /// Starts again and makes frames from `frames` whole, segments and
    /// completed checksums included, until they hold [`WHOLE_MAX`] bytes.
    fn fill<'a>(
        &mut self,
        frames: &mut impl Iterator<Item = (Outgoing<'a>, Option<Vtep>)>,
        counters: &VxlanCounters,
        name: &str,
    ) -> Filled {
        self.bytes.clear();
        self.spans.clear();
        self.lens.clear();
        self.vteps.clear();
        let mut filled = Filled::default();
        for (outgoing, vtep) in frames.by_ref() {
            let index = filled.taken;
            filled.taken += 1;
            self.lens.push(outgoing.len());
            self.vteps.push(vtep);
            if outgoing.meta.len() < VNET_HDR_LEN {
                filled.refused += 1;
                continue;
            }
            let vnet = &outgoing.meta[..VNET_HDR_LEN];
            let frame = outgoing.ethernet(&mut self.joined);
            let (bytes, spans) = (&mut self.bytes, &mut self.spans);
            let made = make_whole(vnet, frame, &mut self.scratch, |part| {
                spans.push((bytes.len(), part.len(), index));
                bytes.extend_from_slice(part);
            });
            match made {
                Ok(()) => {}
                Err(error @ SegmentError::SegmentSize(_)) => {
                    VxlanCounters::bump(&counters.small_gso);
                    log::debug!("{name}: {error}");
                    filled.refused += 1;
                }
                Err(error) => {
                    VxlanCounters::bump(&counters.offload_errors);
                    log::debug!("{name}: {error}");
                    if matches!(
                        error,
                        SegmentError::Malformed | SegmentError::Unsupported(_)
                    ) {
                        filled.refused += 1;
                    }
                }
            }
            if self.bytes.len() >= WHOLE_MAX {
                filled.more = true;
                break;
            }
        }
        filled
    }

    /// Whole frame `i`.
    fn frame(&self, i: usize) -> &[u8] {
        let (start, len, _) = self.spans[i];
        &self.bytes[start..start + len]
    }
}

impl VxlanQueue {
    /// Sends the whole frames of the `offered` frames that
    /// [`Wholes::fill`] took, filing their outcomes in `report`. Returns
    /// false when a fault of the port ended the send.
    fn send_wholes(&mut self, offered: usize, report: &mut SendReport) -> bool {
        let shared = &*self.shared;
        let wholes = &self.wholes;
        // Each whole frame's VTEP address: its offered frame's.
        let addrs = shared.vteps.addrs();
        self.found.clear();
        self.found.extend(wholes.spans.iter().map(|&(_, _, owner)| {
            wholes.vteps[owner].and_then(|vtep| vteps::addr_in(&addrs, vtep))
        }));
        // The addresses: one per known VTEP, and the flood list.
        let port = shared.config.local.port();
        self.addrs.clear();
        let flood = shared.flood.load();
        for &ip in flood.iter() {
            self.addrs.push(SockAddr::from(SocketAddr::new(ip, port)));
        }
        // The socket (outer source port) of each whole frame: by its
        // flow, the same for every part of one segmented frame.
        self.lanes.clear();
        for i in 0..wholes.spans.len() {
            let frame = wholes.frame(i);
            self.lanes.push(flow_hash(frame) as usize % SEND_PORTS);
        }
        // Runs of consecutive whole frames with one destination (a known
        // VTEP, or the flood list) and one socket, and per unicast run its
        // address, built in full before any is borrowed below.
        let mut runs = Vec::new();
        let mut unicast_addrs = Vec::new();
        let mut i = 0;
        while i < wholes.spans.len() {
            let (to, lane) = (self.found[i], self.lanes[i]);
            let end = i
                + (i..wholes.spans.len())
                    .take_while(|&j| self.found[j] == to && self.lanes[j] == lane)
                    .count();
            if let Some(ip) = to {
                unicast_addrs.push(SockAddr::from(SocketAddr::new(ip, port)));
            }
            runs.push((i, end, to.is_some(), lane));
            i = end;
        }
        // Messages: per run and destination, its frames in groups one UDP
        // GSO send can carry (equal lengths but the last), so that a burst
        // of small frames to one VTEP is one datagram train, not one send
        // per frame.
        let frames: Vec<&[u8]> = (0..wholes.spans.len()).map(|i| wholes.frame(i)).collect();
        let mut messages: Vec<Vec<sys::Outgoing<'_>>> =
            (0..SEND_PORTS).map(|_| Vec::new()).collect();
        let mut unicast = unicast_addrs.iter();
        let mut no_remote = vec![false; offered];
        let mut endpoint = self.endpoint.lock().unwrap_or_else(PoisonError::into_inner);
        for &(start, end, known, lane) in &runs {
            // One frame per send where the underlay refused a train.
            let most = if endpoint.no_gso[lane] {
                1
            } else {
                sys::GSO_MAX_FRAMES
            };
            let targets: &[SockAddr] = if known {
                std::slice::from_ref(unicast.next().expect("one per unicast run"))
            } else if flood.is_empty() {
                for &(_, _, owner) in &wholes.spans[start..end] {
                    no_remote[owner] = true;
                }
                &[]
            } else {
                &self.addrs
            };
            for to in targets {
                let mut first = start;
                while first < end {
                    let len = frames[first].len();
                    let mut count = 1;
                    while first + count < end
                        && count < most
                        && (count + 1) * (len + vxlan::HEADER_LEN) <= sys::GSO_MAX_BYTES
                        && frames[first + count].len() <= len
                    {
                        count += 1;
                        if frames[first + count - 1].len() < len {
                            break;
                        }
                    }
                    messages[lane].push(sys::Outgoing { first, count, to });
                    first += count;
                }
            }
        }
        // Per frame offered: Ok, or the first error one of its datagrams got.
        let mut outcome: Vec<Option<io::Result<()>>> = (0..offered).map(|_| None).collect();
        let Endpoint {
            senders, no_gso, ..
        } = &mut *endpoint;
        for ((sender, messages), no_gso) in senders.iter().zip(&messages).zip(no_gso) {
            if messages.is_empty() {
                continue;
            }
            let trains = sys::send_all(sender, &self.header, &frames, messages, |j, result| {
                let slot = &mut outcome[wholes.spans[j].2];
                if !matches!(slot, Some(Err(_))) {
                    *slot = Some(result);
                }
            });
            if trains == sys::Trains::Refused {
                log::info!(
                    "{}: the underlay takes no UDP GSO; sending datagram by datagram",
                    self.name
                );
                *no_gso = true;
            }
        }
        drop(endpoint);
        for (index, result) in outcome.into_iter().enumerate() {
            let Some(result) = result else {
                if no_remote[index] {
                    VxlanCounters::bump(&shared.counters.no_remote);
                    report.dropped += 1;
                }
                // Otherwise refused above (offloads), already counted.
                continue;
            };
            if !report.record(result.map(|()| wholes.lens[index])) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A virtio-net header and an Ethernet, IPv4 and TCP frame with
    /// `payload` bytes of data, offloaded as GSO TCPv4 at `gso_size`.
    fn offloaded(payload: usize, gso_size: u16) -> Vec<u8> {
        let mut buffer = vec![0u8; VNET_HDR_LEN];
        buffer[0] = 1; // NEEDS_CSUM
        buffer[1] = 1; // GSO_TCPV4
        buffer[2..4].copy_from_slice(&54u16.to_ne_bytes());
        buffer[4..6].copy_from_slice(&gso_size.to_ne_bytes());
        buffer[6..8].copy_from_slice(&34u16.to_ne_bytes());
        buffer[8..10].copy_from_slice(&16u16.to_ne_bytes());
        let mut frame = vec![0u8; 54];
        frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[14] = 0x45;
        let total = (40 + payload) as u16;
        frame[16..18].copy_from_slice(&total.to_be_bytes());
        frame[22] = 64;
        frame[23] = 6;
        frame[26..30].copy_from_slice(&[198, 18, 0, 1]);
        frame[30..34].copy_from_slice(&[198, 18, 0, 2]);
        frame[46] = 5 << 4;
        frame[47] = 0x10;
        buffer.extend_from_slice(&frame);
        buffer.resize(VNET_HDR_LEN + 54 + payload, 0x5a);
        buffer
    }

    /// A batch of large offloaded frames at the smallest segment size a
    /// header may ask for is cut in rounds: one round's whole frames stay
    /// within the cap (plus the one frame that crossed it), and every
    /// segment of every frame is still made.
    #[test]
    fn one_round_of_a_send_holds_bounded_memory() {
        const LIMIT: usize = WHOLE_MAX + (256 << 10);
        let frame = offloaded(60_000, 48);
        let batch: Vec<Vec<u8>> = (0..64).map(|_| frame.clone()).collect();
        let mut wholes = Wholes::default();
        let counters = VxlanCounters::default();
        let mut frames = batch
            .iter()
            .map(|f| (Outgoing::split(f, VNET_HDR_LEN), None));
        let (mut rounds, mut taken, mut segments) = (0, 0, 0);
        loop {
            let filled = wholes.fill(&mut frames, &counters, "test");
            assert!(
                wholes.bytes.len() <= LIMIT,
                "{} bytes in one round",
                wholes.bytes.len()
            );
            rounds += 1;
            taken += filled.taken;
            segments += wholes.spans.len();
            if !filled.more {
                break;
            }
        }
        assert_eq!(taken, 64);
        assert_eq!(segments, 64 * 60_000usize.div_ceil(48));
        assert!(rounds > 1);
        assert_eq!(counters.offload_errors.load(Ordering::Relaxed), 0);
    }

    /// A frame asking for segments below the minimum is refused and
    /// counted without a byte made; the frames around it pass.
    #[test]
    fn tiny_segment_sizes_are_refused_and_counted() {
        let batch = [
            offloaded(1000, 1448),
            offloaded(60_000, 1),
            offloaded(60_000, 0),
            offloaded(1000, 1448),
        ];
        let mut wholes = Wholes::default();
        let counters = VxlanCounters::default();
        let mut frames = batch
            .iter()
            .map(|f| (Outgoing::split(f, VNET_HDR_LEN), None));
        let filled = wholes.fill(&mut frames, &counters, "test");
        assert_eq!(
            filled,
            Filled {
                taken: 4,
                refused: 2,
                more: false
            }
        );
        let owners: Vec<usize> = wholes.spans.iter().map(|&(_, _, i)| i).collect();
        assert_eq!(owners, [0, 3]);
        assert_eq!(wholes.bytes.len(), 2 * (54 + 1000));
        assert_eq!(counters.small_gso.load(Ordering::Relaxed), 2);
        assert_eq!(counters.offload_errors.load(Ordering::Relaxed), 0);
    }

    /// An address no interface has is named as such; an IPv6 address an
    /// interface has but that cannot be bound is named tentative.
    #[test]
    fn unbindable_addresses_say_why() {
        let v4: IpAddr = "198.18.1.1".parse().unwrap();
        let v6: IpAddr = "2001:2::1".parse().unwrap();
        for ip in [v4, v6] {
            assert_eq!(
                unavailable_reason(ip, false),
                format!("{ip} is not an address of this host")
            );
        }
        let tentative = unavailable_reason(v6, true);
        assert!(
            tentative.starts_with("2001:2::1 is not usable"),
            "{tentative}"
        );
        assert!(
            tentative.contains("duplicate address detection"),
            "{tentative}"
        );
        assert!(tentative.contains("tentative"), "{tentative}");
        // Other errors pass unchanged.
        let local: SocketAddr = "[2001:2::1]:4789".parse().unwrap();
        let other = bind_error(io::Error::from_raw_os_error(libc::EADDRINUSE), local);
        assert_eq!(other.raw_os_error(), Some(libc::EADDRINUSE));
    }

    /// A port on an IPv6 address no interface here has is refused with
    /// the reason.
    #[test]
    fn a_port_on_an_address_not_here_is_refused() {
        let local: SocketAddr = "[2001:2:0:ffff::fe]:4789".parse().unwrap();
        let config = VxlanConfig {
            vni: 42,
            local,
            remotes: Vec::new(),
            learning: true,
            evpn: false,
            mirror_port: 0,
        };
        match VxlanQueue::open("t", config, 1) {
            Ok(_) => panic!("{local} opened"),
            Err(error) if error.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                eprintln!("skipped: this kernel has no IPv6");
            }
            Err(error) => {
                assert_eq!(error.kind(), io::ErrorKind::AddrNotAvailable, "{error}");
                assert_eq!(
                    error.to_string(),
                    "2001:2:0:ffff::fe is not an address of this host"
                );
            }
        }
    }
}
