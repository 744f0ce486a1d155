//! A vhost-user frontend for the tests: it negotiates over the socket
//! with the `vhost` crate's frontend, shares memfd memory, and plays the
//! virtio-net driver on its rings (posting frames to send and room to
//! receive into, reading back what the device used). It can also break
//! every rule a hostile driver might, through [`Frontend::memory`] and
//! [`Frontend::layout`].

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use bridge::port::vhost::memory::{GuestMemory, RegionSpec};
use bridge::port::vhost::ring::driver;
use bridge::port::vhost::ring::RingLayout;
use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures};
use vhost::vhost_user::{Frontend as Connection, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::EventFd;

/// Where the shared memory starts, in guest-physical and frontend
/// addresses alike.
const BASE: u64 = 0x4000_0000;
/// Entries per ring.
pub const RING_SIZE: u16 = 256;
/// Bytes per buffer: a full-size frame and its header.
pub const BUFFER: u64 = 2048;
/// The virtio 1 net header.
pub const HEADER: usize = 12;
/// Memory per vring: its ring and one buffer per entry.
const PER_VRING: u64 = 0x10_0000 + RING_SIZE as u64 * BUFFER;

/// virtio 1.
pub const VERSION_1: u64 = 1 << 32;
/// Mergeable receive buffers.
pub const MRG_RXBUF: u64 = 1 << 15;
/// Event indices.
pub const EVENT_IDX: u64 = 1 << 29;
/// Protocol features.
pub const PROTOCOL_FEATURES: u64 = 1 << 30;
/// Several queue pairs.
pub const MQ: u64 = 1 << 22;
/// The driver takes partial checksums.
pub const GUEST_CSUM: u64 = 1 << 1;
/// The driver takes TCP/IPv4 segments larger than its MTU.
pub const GUEST_TSO4: u64 = 1 << 7;
/// The driver sends partial checksums.
pub const CSUM: u64 = 1 << 0;
/// The driver sends TCP/IPv4 segments larger than its MTU.
pub const HOST_TSO4: u64 = 1 << 11;

/// One vring, the driver's side.
struct Vring {
    layout: RingLayout,
    buffers: u64,
    kick: EventFd,
    call: EventFd,
    /// Chains made available so far.
    avail: u16,
    /// Used entries read so far.
    used: u16,
}

/// A test frontend with `pairs` queue pairs.
pub struct Frontend {
    connection: Connection,
    memory: GuestMemory,
    _file: File,
    size: u64,
    vrings: Vec<Vring>,
    /// The features set.
    pub features: u64,
}

fn memfd(size: u64) -> File {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(c"lab-vhost", MFdFlags::MFD_CLOEXEC).expect("memfd_create");
    let file = File::from(fd);
    file.set_len(size).expect("memfd size");
    file
}

/// How long waits for the device last at most.
pub const WAIT: Duration = Duration::from_secs(5);

impl Frontend {
    /// Connects to a backend listening at `path` (retrying for up to 5 s
    /// while it is not there yet) and sets up `pairs` queue pairs with
    /// `features` (those the device offers).
    pub fn connect(path: &Path, pairs: usize, features: u64) -> Result<Frontend, String> {
        let deadline = Instant::now() + WAIT;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(stream) => break stream,
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("{}: {e}", path.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        Frontend::negotiate(stream, pairs, features)
    }

    /// The queue pairs the backend at `path` offers (GET_QUEUE_NUM, which
    /// QEMU's and DPDK's net frontends read as pairs; the `vhost` crate's
    /// frontend reads it as vrings and refuses higher ones after it, so it
    /// is asked on a connection of its own).
    pub fn queue_pairs(path: &Path) -> Result<u64, String> {
        let e = |what: &'static str| move |error: vhost::Error| format!("{what}: {error}");
        let stream = UnixStream::connect(path).map_err(|e| e.to_string())?;
        let mut connection = Connection::from_stream(stream, 2);
        connection.set_owner().map_err(e("SET_OWNER"))?;
        connection.get_features().map_err(e("GET_FEATURES"))?;
        connection
            .get_protocol_features()
            .map_err(e("GET_PROTOCOL_FEATURES"))?;
        connection
            .set_protocol_features(VhostUserProtocolFeatures::MQ)
            .map_err(e("SET_PROTOCOL_FEATURES"))?;
        connection.get_queue_num().map_err(e("GET_QUEUE_NUM"))
    }

    /// Sets up `pairs` queue pairs over a connected socket.
    pub fn negotiate(stream: UnixStream, pairs: usize, features: u64) -> Result<Frontend, String> {
        let e = |what: &'static str| move |error: vhost::Error| format!("{what}: {error}");
        let mut connection = Connection::from_stream(stream, pairs as u64 * 2);
        connection.set_owner().map_err(e("SET_OWNER"))?;
        let offered = connection.get_features().map_err(e("GET_FEATURES"))?;
        let features = offered & features;
        if offered & PROTOCOL_FEATURES != 0 {
            let protocol = connection
                .get_protocol_features()
                .map_err(e("GET_PROTOCOL_FEATURES"))?;
            connection
                .set_protocol_features(
                    protocol
                        & (VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK),
                )
                .map_err(e("SET_PROTOCOL_FEATURES"))?;
            connection.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }
        connection
            .set_features(features)
            .map_err(e("SET_FEATURES"))?;
        let size = PER_VRING * 2 * pairs as u64;
        let file = memfd(size);
        let spec = RegionSpec {
            guest_phys_addr: BASE,
            memory_size: size,
            user_addr: BASE,
            mmap_offset: 0,
        };
        let memory = GuestMemory::map(&[spec], vec![file.try_clone().unwrap()])
            .map_err(|e| e.to_string())?;
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: BASE,
            memory_size: size,
            userspace_addr: BASE,
            mmap_offset: 0,
            mmap_handle: file.as_raw_fd(),
        };
        connection
            .set_mem_table(&[region])
            .map_err(e("SET_MEM_TABLE"))?;
        let mut frontend = Frontend {
            connection,
            memory,
            _file: file,
            size,
            vrings: Vec::new(),
            features,
        };
        for index in 0..2 * pairs {
            let base = BASE + PER_VRING * index as u64;
            let (layout, _) = driver::layout(base, RING_SIZE);
            let vring = Vring {
                layout,
                buffers: base + 0x10_0000,
                kick: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
                call: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
                avail: 0,
                used: 0,
            };
            frontend.start_vring(index, &vring, 0)?;
            frontend.vrings.push(vring);
        }
        Ok(frontend)
    }

    fn start_vring(&mut self, index: usize, vring: &Vring, base: u16) -> Result<(), String> {
        let e = |what: &'static str| move |error: vhost::Error| format!("{what} {index}: {error}");
        let c = &mut self.connection;
        let size = vring.layout.size;
        c.set_vring_num(index, size).map_err(e("SET_VRING_NUM"))?;
        c.set_vring_addr(
            index,
            &VringConfigData {
                queue_max_size: size,
                queue_size: size,
                flags: 0,
                desc_table_addr: vring.layout.desc,
                used_ring_addr: vring.layout.used,
                avail_ring_addr: vring.layout.avail,
                log_addr: None,
            },
        )
        .map_err(e("SET_VRING_ADDR"))?;
        c.set_vring_base(index, base).map_err(e("SET_VRING_BASE"))?;
        c.set_vring_call(index, &vring.call)
            .map_err(e("SET_VRING_CALL"))?;
        c.set_vring_kick(index, &vring.kick)
            .map_err(e("SET_VRING_KICK"))?;
        if self.features & PROTOCOL_FEATURES != 0 {
            c.set_vring_enable(index, true)
                .map_err(e("SET_VRING_ENABLE"))?;
        }
        Ok(())
    }

    /// The shared memory, to write what a hostile driver would.
    pub fn memory(&self) -> &GuestMemory {
        &self.memory
    }

    /// Vring `index`'s layout.
    pub fn layout(&self, index: usize) -> RingLayout {
        self.vrings[index].layout
    }

    /// The connection, for messages of a test's own.
    pub fn connection(&mut self) -> &mut Connection {
        &mut self.connection
    }

    /// Makes chain `head` available on vring `index` and kicks.
    pub fn make_available(&mut self, index: usize, head: u16) {
        let vring = &mut self.vrings[index];
        driver::set_avail(&self.memory, &vring.layout, vring.avail, head);
        vring.avail = vring.avail.wrapping_add(1);
        driver::set_avail_idx(&self.memory, &vring.layout, vring.avail);
        vring.kick.write(1).unwrap();
    }

    /// Sends `frame` (with an all-zero header) on pair `pair`'s transmit
    /// ring, in one buffer; false when the ring is full.
    pub fn send(&mut self, pair: usize, frame: &[u8]) -> bool {
        self.send_with_header(pair, &[0; HEADER], frame)
    }

    /// [`send`](Self::send) with a header of the test's own.
    pub fn send_with_header(&mut self, pair: usize, header: &[u8; HEADER], frame: &[u8]) -> bool {
        let index = 2 * pair + 1;
        let vring = &self.vrings[index];
        let used = driver::used_idx(&self.memory, &vring.layout);
        if vring.avail.wrapping_sub(used) >= RING_SIZE {
            return false;
        }
        let slot = vring.avail % RING_SIZE;
        let addr = vring.buffers + u64::from(slot) * BUFFER;
        let header_len = self.header_len();
        assert!(
            header_len + frame.len() <= BUFFER as usize,
            "frame too long for a buffer"
        );
        self.memory.write(addr, &header[..header_len]);
        self.memory.write(addr + header_len as u64, frame);
        let len = (header_len + frame.len()) as u32;
        driver::set_descriptor(&self.memory, &vring.layout, slot, addr, len, 0, 0);
        self.make_available(index, slot);
        true
    }

    /// The virtio-net header's length with the features set.
    pub fn header_len(&self) -> usize {
        if self.features & (VERSION_1 | MRG_RXBUF) != 0 {
            HEADER
        } else {
            10
        }
    }

    /// Posts `count` empty buffers on pair `pair`'s receive ring.
    pub fn post_room(&mut self, pair: usize, count: u16) {
        self.post_room_of(pair, count, BUFFER as u32);
    }

    /// Posts `count` empty buffers of `size` bytes (at most [`BUFFER`]).
    pub fn post_room_of(&mut self, pair: usize, count: u16, size: u32) {
        assert!(u64::from(size) <= BUFFER);
        let index = 2 * pair;
        for _ in 0..count {
            let vring = &self.vrings[index];
            let slot = vring.avail % RING_SIZE;
            let addr = vring.buffers + u64::from(slot) * BUFFER;
            driver::set_descriptor(
                &self.memory,
                &vring.layout,
                slot,
                addr,
                size,
                driver::WRITE,
                0,
            );
            self.make_available(index, slot);
        }
    }

    /// Frames the device gave pair `pair` until none has come for
    /// `quiet` (at most [`WAIT`] in all): each with its header.
    pub fn receive(&mut self, pair: usize, quiet: Duration) -> Vec<(Vec<u8>, Vec<u8>)> {
        let index = 2 * pair;
        let header_len = self.header_len();
        let deadline = Instant::now() + WAIT;
        let mut last = Instant::now();
        let mut frames = Vec::new();
        while Instant::now() < deadline && last.elapsed() < quiet {
            let vring = &mut self.vrings[index];
            let used = driver::used_idx(&self.memory, &vring.layout);
            if used == vring.used {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mergeable = self.features & MRG_RXBUF != 0;
            let read = |vring: &mut Vring, memory: &GuestMemory| {
                let (head, len) = driver::used_elem(memory, &vring.layout, vring.used);
                vring.used = vring.used.wrapping_add(1);
                let addr = vring.buffers + u64::from(head as u16 % RING_SIZE) * BUFFER;
                let mut bytes = vec![0; (len as usize).min(BUFFER as usize)];
                memory.read(addr, &mut bytes);
                bytes
            };
            while vring.used != used {
                let mut bytes = read(vring, &self.memory);
                let split = header_len.min(bytes.len());
                let mut frame = bytes.split_off(split);
                // With mergeable buffers a frame spans num_buffers chains.
                if mergeable && bytes.len() == HEADER {
                    let count = u16::from_le_bytes([bytes[10], bytes[11]]);
                    for _ in 1..count {
                        if vring.used == used {
                            break;
                        }
                        frame.extend(read(vring, &self.memory));
                    }
                }
                frames.push((bytes, frame));
            }
            last = Instant::now();
        }
        frames
    }

    /// Transmit chains of pair `pair` the device has returned.
    pub fn sent_back(&self, pair: usize) -> u16 {
        driver::used_idx(&self.memory, &self.vrings[2 * pair + 1].layout)
    }

    /// Waits (at most [`WAIT`]) for the device to return `count` chains
    /// on vring `index`; returns how many it has.
    pub fn wait_used(&self, index: usize, count: u16) -> u16 {
        let deadline = Instant::now() + WAIT;
        loop {
            let used = driver::used_idx(&self.memory, &self.vrings[index].layout);
            if used >= count || Instant::now() > deadline {
                return used;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Asks for vring `index`'s base (which stops it).
    pub fn stop_vring(&mut self, index: usize) -> u32 {
        self.connection
            .get_vring_base(index)
            .expect("GET_VRING_BASE")
    }

    /// Sets vring `index` up again from `base` (after [`stop_vring`](Self::stop_vring)),
    /// with new kick and call descriptors.
    pub fn restart_vring(&mut self, index: usize, base: u16) -> Result<(), String> {
        let mut vring = self.vrings.remove(index);
        vring.kick = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        vring.call = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let started = self.start_vring(index, &vring, base);
        self.vrings.insert(index, vring);
        started
    }

    /// Vring `index`'s kick and call eventfds, which the device shares:
    /// a hostile driver changes their flags or fills their counters.
    pub fn eventfds(&self, index: usize) -> (&EventFd, &EventFd) {
        let vring = &self.vrings[index];
        (&vring.kick, &vring.call)
    }

    /// Kicks vring `index`.
    pub fn kick(&self, index: usize) {
        self.vrings[index].kick.write(1).unwrap();
    }

    /// Stops vring `index` and starts it again as a ring of `size`
    /// entries (up to 32768, laid out from the vring's own memory), for a
    /// hostile driver to fill; returns its layout. The frontend's own
    /// sending and receiving on it no longer work.
    pub fn resize_ring(&mut self, index: usize, size: u16) -> Result<RingLayout, String> {
        self.stop_vring(index);
        let base = BASE + PER_VRING * index as u64;
        let (layout, end) = driver::layout(base, size);
        assert!(end <= base + 0x10_0000, "a ring of {size} fits its vring");
        let mut vring = self.vrings.remove(index);
        vring.layout = layout;
        vring.avail = 0;
        vring.used = 0;
        vring.kick = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        vring.call = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let started = self.start_vring(index, &vring, 0);
        self.vrings.insert(index, vring);
        started.map(|()| layout)
    }

    /// Shrinks the memfd behind the shared memory to nothing, as a hostile
    /// frontend whose memory is not sealed may: every access to it, here
    /// or in the device, raises SIGBUS from now on.
    pub fn shrink_memory(&self) {
        self._file.set_len(0).expect("memfd truncate");
    }

    /// Sends the memory table again (as QEMU does when memory is added).
    pub fn resend_memory(&mut self) -> Result<(), String> {
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: BASE,
            memory_size: self.size,
            userspace_addr: BASE,
            mmap_offset: 0,
            mmap_handle: self._file.as_raw_fd(),
        };
        self.connection
            .set_mem_table(&[region])
            .map(|_| ())
            .map_err(|e| format!("SET_MEM_TABLE: {e}"))
    }
}
