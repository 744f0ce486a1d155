//! A queue pair between the worker's side and a driver played here over
//! memory of the test's own: which frames are lent and which copied, when
//! a lent frame's chain goes back, and that what leaves is what the
//! pipeline read.

use std::fs::File;
use std::sync::Arc;

use super::device::{Device, Negotiated, Running};
use super::eventfd::FrontendEventfd;
use super::memory::GuestMemory;
use super::ring::{driver, RingLayout, SplitRing};
use super::VhostQueue;
use crate::port::{Lent, Outgoing, Queue, RxBatch, LENT_HEAD, VNET_HDR_LEN};
use crate::wire::{FrameSpec, MacAddr};

const BASE: u64 = 0x10_0000;
const TX_BUFFERS: u64 = BASE + 0x1_0000;
const RX_BUFFERS: u64 = BASE + 0x4_0000;
const BUFFER: u64 = 2048;
const RING: u16 = 16;
const VERSION_1: u64 = 1 << 32;
const MRG_RXBUF: u64 = 1 << 15;
const HEADER: usize = 12;

fn eventfd() -> FrontendEventfd {
    let fd = crate::port::wake::eventfd().unwrap();
    FrontendEventfd::new(File::from(fd), "kick").unwrap()
}

/// One port's driver, the rings of its pair 0.
struct Guest {
    memory: Arc<GuestMemory>,
    device: Arc<Device>,
    tx: RingLayout,
    rx: RingLayout,
    tx_avail: u16,
    rx_avail: u16,
    features: u64,
}

impl Guest {
    fn new(features: u64) -> Guest {
        let memory = Arc::new(GuestMemory::anonymous(BASE, 1 << 20).unwrap());
        let (tx, _) = driver::layout(BASE, RING);
        let (rx, _) = driver::layout(BASE + 0x1000, RING);
        let device = Arc::new(Device::new("test", 1, 1 << 30).unwrap());
        let guest = Guest {
            memory,
            device,
            tx,
            rx,
            tx_avail: 0,
            rx_avail: 0,
            features,
        };
        guest.start();
        guest
    }

    /// (Re)starts both rings, as a frontend does after a reset.
    fn start(&self) {
        for (index, layout) in [(0, self.rx), (1, self.tx)] {
            let ring = SplitRing::new(Arc::clone(&self.memory), layout, 0, false).unwrap();
            self.device.update(index, |_| {
                Some(Running {
                    ring,
                    negotiated: Negotiated {
                        features: self.features,
                    },
                    kick: eventfd(),
                    call: None,
                })
            });
        }
    }

    fn queue(&self) -> VhostQueue {
        VhostQueue::detached(Arc::clone(&self.device), 0)
    }

    /// Sends `frame` from descriptor `d` (its header in the same buffer,
    /// or, with `split`, in a buffer of its own).
    fn send(&mut self, d: u16, frame: &[u8], split: bool) {
        let at = TX_BUFFERS + BUFFER * u64::from(d);
        self.memory.write(at, &[0; HEADER]);
        if split {
            self.memory.write(at + 64, frame);
            driver::set_descriptor(
                &self.memory,
                &self.tx,
                d,
                at,
                HEADER as u32,
                driver::NEXT,
                d + 1,
            );
            driver::set_descriptor(
                &self.memory,
                &self.tx,
                d + 1,
                at + 64,
                frame.len() as u32,
                0,
                0,
            );
        } else {
            self.memory.write(at + HEADER as u64, frame);
            let len = (HEADER + frame.len()) as u32;
            driver::set_descriptor(&self.memory, &self.tx, d, at, len, 0, 0);
        }
        driver::set_avail(&self.memory, &self.tx, self.tx_avail, d);
        self.tx_avail += 1;
        driver::set_avail_idx(&self.memory, &self.tx, self.tx_avail);
    }

    /// Posts receive buffers `0..n`, `size` bytes each.
    fn post(&mut self, n: u16, size: u32) {
        for d in 0..n {
            let at = RX_BUFFERS + BUFFER * u64::from(d);
            driver::set_descriptor(&self.memory, &self.rx, d, at, size, driver::WRITE, 0);
            driver::set_avail(&self.memory, &self.rx, self.rx_avail, d);
            self.rx_avail += 1;
        }
        driver::set_avail_idx(&self.memory, &self.rx, self.rx_avail);
    }

    /// Transmit chains the device has returned.
    fn tx_returned(&self) -> u16 {
        driver::used_idx(&self.memory, &self.tx)
    }

    /// The frame in used receive element `k` (one buffer per frame).
    fn received(&self, k: u16) -> Vec<u8> {
        let (head, len) = driver::used_elem(&self.memory, &self.rx, k);
        let mut bytes = vec![0u8; len as usize];
        self.memory
            .read(RX_BUFFERS + BUFFER * u64::from(head), &mut bytes);
        bytes.split_off(HEADER)
    }
}

fn frame(dst: MacAddr, len: usize) -> Vec<u8> {
    let mut frame = FrameSpec::new(dst, MacAddr([2, 0, 0, 0, 0, 1]))
        .len(len)
        .build();
    for (n, byte) in frame.iter_mut().enumerate().skip(14) {
        *byte = n as u8;
    }
    frame
}

fn batch() -> RxBatch {
    RxBatch::new(8, 4096).with_metadata(VNET_HDR_LEN)
}

const UNICAST: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

/// Chains come back in the order they were made available (the port
/// offers VIRTIO_F_IN_ORDER): a copied frame's chain at once, unless a
/// lent one was taken before it; then with the lent ones, on release.
#[test]
fn long_unicast_frames_are_lent_until_released_others_copied() {
    let mut a = Guest::new(VERSION_1);
    let mut queue = a.queue();
    let long = frame(UNICAST, 1000);
    let short = frame(UNICAST, LENT_HEAD);
    let flood = frame(MacAddr::BROADCAST, 1000);
    a.send(0, &short, false);
    a.send(1, &long, false);
    a.send(2, &flood, false);
    // The header in a buffer of its own, the frame in one more: lent too.
    a.send(4, &long, true);
    let mut batch = batch();
    assert_eq!(queue.recv_batch(&mut batch).unwrap().received, 4);
    let lent: Vec<bool> = (0..4).map(|i| batch.is_lent(i)).collect();
    assert_eq!(lent, [false, true, false, true]);
    for (i, sent) in [&short, &long, &flood, &long].into_iter().enumerate() {
        let got = batch.frame(i);
        assert_eq!(got.ethernet(), *sent, "frame {i}");
        let in_batch = if lent[i] { LENT_HEAD } else { sent.len() };
        assert_eq!(batch.eth(i).len(), in_batch, "frame {i}");
    }
    assert_eq!(
        a.tx_returned(),
        1,
        "the chain copied before the first lent one is back at once"
    );
    queue.release();
    assert_eq!(a.tx_returned(), 4, "the rest once released");
    let heads: Vec<u32> = (0..4)
        .map(|k| driver::used_elem(&a.memory, &a.tx, k).0)
        .collect();
    assert_eq!(heads, [0, 1, 2, 4], "in the order made available");
    queue.release();
    assert_eq!(a.tx_returned(), 4, "each once");
}

#[test]
fn a_frame_in_two_buffers_is_copied() {
    let a = Guest::new(VERSION_1);
    let mut queue = a.queue();
    let long = frame(UNICAST, 1000);
    let at = TX_BUFFERS;
    a.memory.write(at, &[0; HEADER]);
    a.memory.write(at + HEADER as u64, &long[..500]);
    a.memory.write(at + 4096, &long[500..]);
    driver::set_descriptor(
        &a.memory,
        &a.tx,
        0,
        at,
        (HEADER + 500) as u32,
        driver::NEXT,
        1,
    );
    driver::set_descriptor(&a.memory, &a.tx, 1, at + 4096, 500, 0, 0);
    driver::set_avail(&a.memory, &a.tx, 0, 0);
    driver::set_avail_idx(&a.memory, &a.tx, 1);
    let mut batch = batch();
    assert_eq!(queue.recv_batch(&mut batch).unwrap().received, 1);
    assert!(!batch.is_lent(0));
    assert_eq!(batch.frame(0).ethernet(), long);
    assert_eq!(a.tx_returned(), 1);
}

#[test]
fn a_lent_frame_crosses_once_and_leaves_as_decided() {
    let mut a = Guest::new(VERSION_1);
    let mut b = Guest::new(VERSION_1 | MRG_RXBUF);
    let (mut from, mut to) = (a.queue(), b.queue());
    let long = frame(UNICAST, 1400);
    a.send(0, &long, false);
    b.post(4, 2048);
    let mut batch = batch();
    assert_eq!(from.recv_batch(&mut batch).unwrap().received, 1);
    assert!(batch.is_lent(0));
    // The guest rewrites its frame while it is lent: the addresses the
    // pipeline read (the first bytes, in the batch) leave as they were,
    // the rest as it is now.
    let at = TX_BUFFERS + HEADER as u64;
    a.memory.write(at, &[0xff; 6]);
    a.memory.write(at + 1000, b"changed");
    let report = to.send_batch(std::iter::once(Outgoing::from(batch.frame(0))));
    assert_eq!(report.sent, 1);
    from.release();
    let mut expected = long.clone();
    expected[1000..1007].copy_from_slice(b"changed");
    assert_eq!(b.received(0), expected);
    assert_eq!(a.tx_returned(), 1);
}

#[test]
fn a_cut_frame_spans_several_receive_buffers() {
    let mut b = Guest::new(VERSION_1 | MRG_RXBUF);
    let mut to = b.queue();
    // Receive buffers of 100 bytes: the header and the frame's pieces run
    // across them.
    b.post(16, 100);
    let rest: Vec<u8> = (0..700).map(|n| n as u8).collect();
    let head = frame(UNICAST, 64);
    let tag = [0x81, 0x00, 0x00, 0x0a];
    let outgoing = Outgoing {
        meta: &[0; VNET_HDR_LEN],
        pieces: [&head[..12], &tag, &head[12..]],
        rest: Lent::of(&rest),
    };
    assert_eq!(to.send_batch(std::iter::once(outgoing)).sent, 1);
    let used = driver::used_idx(&b.memory, &b.rx);
    let chains = usize::from(used);
    assert_eq!(chains, (HEADER + 4 + 64 + 700).div_ceil(100));
    let mut got = Vec::new();
    for k in 0..used {
        let (head, len) = driver::used_elem(&b.memory, &b.rx, k);
        let mut bytes = vec![0u8; len as usize];
        b.memory
            .read(RX_BUFFERS + BUFFER * u64::from(head), &mut bytes);
        got.extend(bytes);
    }
    let num_buffers = u16::from_le_bytes([got[10], got[11]]);
    assert_eq!(usize::from(num_buffers), chains);
    let mut expected = head[..12].to_vec();
    expected.extend(tag);
    expected.extend(&head[12..]);
    expected.extend(&rest);
    assert_eq!(got[HEADER..], expected[..]);
}

#[test]
fn chains_lent_from_a_ring_since_replaced_are_not_returned_to_the_new_one() {
    let mut a = Guest::new(VERSION_1);
    let mut queue = a.queue();
    a.send(0, &frame(UNICAST, 1000), false);
    let mut batch = batch();
    assert_eq!(queue.recv_batch(&mut batch).unwrap().received, 1);
    assert!(batch.is_lent(0));
    // The frontend resets its rings meanwhile.
    a.start();
    queue.release();
    assert_eq!(a.tx_returned(), 0, "the new ring never had that chain");
    // And the queue goes on with the new ring.
    a.tx_avail = 0;
    a.send(1, &frame(UNICAST, 1000), false);
    batch.clear();
    assert_eq!(queue.recv_batch(&mut batch).unwrap().received, 1);
    queue.release();
    assert_eq!(a.tx_returned(), 1);
}

/// A busy worker does not ask its driver to kick (each kick is a system
/// call of the driver's): a receive that finds the ring empty leaves the
/// driver told not to; readying the port for a sleep asks, and says no
/// sleep when a frame came meanwhile.
#[test]
fn the_driver_is_asked_to_kick_only_before_a_sleep() {
    let mut guest = Guest::new(VERSION_1);
    let mut queue = guest.queue();
    let mut batch = batch();
    assert_eq!(queue.recv_batch(&mut batch).unwrap().received, 0);
    assert!(driver::no_kicks(&guest.memory, &guest.tx), "busy: no kicks");
    assert!(queue.before_sleep(), "an empty ring may be slept on");
    assert!(!driver::no_kicks(&guest.memory, &guest.tx), "asleep: kicks");
    guest.send(0, &frame(UNICAST, 60), false);
    assert!(!queue.before_sleep(), "a frame waits: no sleep");
    assert!(driver::no_kicks(&guest.memory, &guest.tx));
    assert_eq!(queue.recv_batch(&mut batch).unwrap().received, 1);
    batch.clear();
    assert_eq!(queue.recv_batch(&mut batch).unwrap().received, 0);
    assert!(driver::no_kicks(&guest.memory, &guest.tx), "busy again");
}

/// Nor does a send ask the driver to kick when it refills its receive
/// ring: a send that finds no room drops, it never waits for buffers.
#[test]
fn the_driver_is_never_asked_to_kick_for_receive_buffers() {
    let mut guest = Guest::new(VERSION_1);
    let mut queue = guest.queue();
    assert!(
        !driver::no_kicks(&guest.memory, &guest.rx),
        "as the driver left it"
    );
    guest.post(4, 2048);
    let mut buffer = vec![0; VNET_HDR_LEN];
    buffer.extend(frame(UNICAST, 60));
    let outgoing = Outgoing::split(&buffer, VNET_HDR_LEN);
    assert_eq!(queue.send_batch(std::iter::once(outgoing)).sent, 1);
    assert!(driver::no_kicks(&guest.memory, &guest.rx), "after a send");
    // Readying the port for a sleep asks for the transmit ring's kicks only.
    assert!(queue.before_sleep());
    assert!(driver::no_kicks(&guest.memory, &guest.rx), "asleep too");
}

/// A chain that breaks the rules after a lent one comes back behind it,
/// in the order the driver made them available.
#[test]
fn a_bad_chain_after_a_lent_one_comes_back_in_order() {
    let mut a = Guest::new(VERSION_1);
    let mut queue = a.queue();
    a.send(0, &frame(UNICAST, 1000), false);
    // A buffer the device may write, on the transmit ring: refused.
    driver::set_descriptor(
        &a.memory,
        &a.tx,
        1,
        TX_BUFFERS + BUFFER,
        100,
        driver::WRITE,
        0,
    );
    driver::set_avail(&a.memory, &a.tx, a.tx_avail, 1);
    a.tx_avail += 1;
    driver::set_avail_idx(&a.memory, &a.tx, a.tx_avail);
    a.send(2, &frame(UNICAST, 60), false);
    let mut batch = batch();
    let report = queue.recv_batch(&mut batch).unwrap();
    assert_eq!((report.received, report.malformed), (2, 1));
    assert_eq!(a.tx_returned(), 0, "all behind the lent chain");
    queue.release();
    assert_eq!(a.tx_returned(), 3);
    let heads: Vec<u32> = (0..3)
        .map(|k| driver::used_elem(&a.memory, &a.tx, k).0)
        .collect();
    assert_eq!(heads, [0, 1, 2]);
}

/// A frame spread over mergeable buffers that meets a chain breaking the
/// rules gives back the chains it took ahead of that one.
#[test]
fn chains_taken_before_a_bad_one_come_back_ahead_of_it() {
    let mut b = Guest::new(VERSION_1 | MRG_RXBUF);
    let mut to = b.queue();
    b.post(1, 100);
    // A buffer the device may only read, on the receive ring: refused.
    driver::set_descriptor(&b.memory, &b.rx, 1, RX_BUFFERS + BUFFER, 100, 0, 0);
    driver::set_avail(&b.memory, &b.rx, b.rx_avail, 1);
    b.rx_avail += 1;
    driver::set_avail_idx(&b.memory, &b.rx, b.rx_avail);
    let mut buffer = vec![0; VNET_HDR_LEN];
    buffer.extend(frame(UNICAST, 200));
    let report = to.send_batch(std::iter::once(Outgoing::split(&buffer, VNET_HDR_LEN)));
    assert_eq!((report.sent, report.refused), (0, 1));
    assert_eq!(driver::used_idx(&b.memory, &b.rx), 2);
    let used: Vec<(u32, u32)> = (0..2)
        .map(|k| driver::used_elem(&b.memory, &b.rx, k))
        .collect();
    assert_eq!(
        used,
        [(0, 0), (1, 0)],
        "in the order made available, nothing written"
    );
}
