//! A vhost-user port's queue pair (`VhostQueue::send_batch` to the
//! driver's receive ring, `recv_batch` from its transmit ring) over rings
//! a hostile driver wrote: the input, repeated, fills the whole of guest
//! memory (descriptor tables, avail rings, buffers), then the avail
//! indices are set from the input. The guest memory is the second half
//! of a memfd mapping whose first half lies outside it.
//!
//! Checked on each of three rounds of a send and a receive:
//!
//! - Every call returns within its work budget: it stops taking chains
//!   once it has read `DESCRIPTOR_BUDGET` descriptors, so it reads fewer
//!   than that plus one chain's longest walk (`min(size, 1024)`); a
//!   receive takes at most `CHAIN_BUDGET` chains.
//! - A receive reads exactly the descriptors a reference walk written
//!   here reads for the chains it took (up to the first broken rule).
//! - Every chain taken with a head inside the ring is returned exactly
//!   once, a lent frame's when the batch is released, in the order it was
//!   made available (the heads published in the used ring are those at
//!   the avail slots taken, in that order: the port offers IN_ORDER);
//!   a head outside is not returned. Checked
//!   when no buffer the driver offers to be written overlaps the rings
//!   (else a send may rewrite them under the target's reading).
//! - A used length is at most its chain's room; a receive's frames are as
//!   many as it reports; every frame sent is counted once (sent, dropped
//!   or refused).
//! - Nothing outside guest memory is written: the first half of the file
//!   keeps its bytes.

#![no_main]

use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bridge::port::vhost::fuzzing::{self, Device, CHAIN_BUDGET, DESCRIPTOR_BUDGET};
use bridge::port::vhost::memory::{GuestMemory, RegionSpec};
use bridge::port::vhost::ring::{driver, RingLayout, SplitRing};
use bridge::port::{Outgoing, Queue, RxBatch};
use libfuzzer_sys::fuzz_target;

const BASE: u64 = 0x10_0000;
const MEMORY: u64 = 128 * 1024;
/// The bytes of the file before the guest memory.
const OUTSIDE: u64 = 64 * 1024;
const TX_AT: u64 = 0x8000;

const VERSION_1: u64 = 1 << 32;
const MRG_RXBUF: u64 = 1 << 15;
const EVENT_IDX: u64 = 1 << 29;
const GUEST_CSUM: u64 = 1 << 1;
const GUEST_TSO4: u64 = 1 << 7;
const GUEST_TSO6: u64 = 1 << 8;

fn canary(offset: u64) -> u8 {
    (offset.wrapping_mul(0x9e37) >> 3) as u8 ^ 0xa5
}

fn eventfd() -> File {
    // SAFETY: constant arguments; the descriptor is checked and owned at once.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd");
    // SAFETY: `fd` is a new descriptor nothing else owns.
    unsafe { File::from_raw_fd(fd) }
}

fn bytes(memory: &GuestMemory, at: u64, len: u64) -> Vec<u8> {
    let mut out = vec![0u8; len as usize];
    assert!(memory.read(at, &mut out));
    out
}

fn u16_at(memory: &GuestMemory, at: u64) -> u16 {
    u16::from_le_bytes(bytes(memory, at, 2).try_into().unwrap())
}

/// The descriptors a walk from `head` reads for a chain the device reads
/// (`write` false) of at most `max` bytes, or writes; and its room.
fn reference_walk(
    memory: &GuestMemory,
    layout: &RingLayout,
    head: u16,
    write: bool,
    max: u32,
) -> (u64, u64) {
    let size = layout.size;
    let mut index = head;
    let mut total: u64 = 0;
    let limit = size.min(1024);
    for n in 1..=u64::from(limit) {
        let d = bytes(memory, layout.desc + 16 * u64::from(index), 16);
        let addr = u64::from_le_bytes(d[..8].try_into().unwrap());
        let len = u32::from_le_bytes(d[8..12].try_into().unwrap());
        let flags = u16::from_le_bytes([d[12], d[13]]);
        let next = u16::from_le_bytes([d[14], d[15]]);
        if flags & driver::INDIRECT != 0 || (flags & driver::WRITE != 0) != write {
            return (n, 0);
        }
        if len > 0 {
            let inside = addr >= BASE
                && addr
                    .checked_add(u64::from(len))
                    .is_some_and(|end| end <= BASE + MEMORY);
            if !inside {
                return (n, 0);
            }
            total += u64::from(len);
            if total > u64::from(u32::MAX) || (!write && total > u64::from(max)) {
                return (n, 0);
            }
        }
        if flags & driver::NEXT == 0 || next >= size {
            return (n, total);
        }
        index = next;
    }
    (u64::from(limit), 0)
}

/// What one call did to a ring, read from guest memory and the device.
struct Before {
    next_avail: u16,
    walked: u64,
    used: u16,
}

fn before(device: &Device, memory: &GuestMemory, index: usize, layout: &RingLayout) -> Before {
    let (next_avail, walked) = fuzzing::position(device, index).expect("the ring runs");
    Before {
        next_avail,
        walked,
        used: driver::used_idx(memory, layout),
    }
}

/// Checks the budget and that every chain taken was returned once, in
/// order; returns the chains taken and the descriptors read.
fn after(
    device: &Device,
    memory: &GuestMemory,
    index: usize,
    layout: &RingLayout,
    was: &Before,
    write: bool,
    max: u32,
    exact: bool,
) -> (u16, u64) {
    let (next_avail, walked) = fuzzing::position(device, index).expect("the ring runs");
    let read = walked - was.walked;
    let longest = u64::from(layout.size.min(1024));
    assert!(
        read < DESCRIPTOR_BUDGET + longest,
        "vring {index}: {read} descriptors read in one call"
    );
    let taken = next_avail.wrapping_sub(was.next_avail);
    if !exact {
        return (taken, read);
    }
    assert!(taken <= layout.size, "vring {index}: {taken} chains taken");
    let mut heads = Vec::new();
    let mut reference = 0;
    for k in 0..taken {
        let slot = u64::from(was.next_avail.wrapping_add(k) & (layout.size - 1));
        let head = u16_at(memory, layout.avail + 4 + 2 * slot);
        if head < layout.size {
            let (descriptors, room) = reference_walk(memory, layout, head, write, max);
            heads.push((head, room));
            reference += descriptors;
        }
    }
    let used = driver::used_idx(memory, layout);
    let published = used.wrapping_sub(was.used);
    assert_eq!(
        usize::from(published),
        heads.len(),
        "vring {index}: {taken} chains taken, {} with a head, {published} returned",
        heads.len()
    );
    let returned: Vec<(u16, u32)> = (0..published)
        .map(|k| {
            let (head, len) = driver::used_elem(memory, layout, was.used.wrapping_add(k));
            (u16::try_from(head).expect("a head the driver gave"), len)
        })
        .collect();
    let returned_heads: Vec<u16> = returned.iter().map(|r| r.0).collect();
    let taken_heads: Vec<u16> = heads.iter().map(|h| h.0).collect();
    assert_eq!(
        returned_heads, taken_heads,
        "vring {index}: each chain returned once, in order"
    );
    for ((_, len), (_, room)) in returned.iter().zip(&heads) {
        assert!(
            u64::from(*len) <= *room,
            "vring {index}: {len} bytes used of {room}"
        );
    }
    if !write {
        assert_eq!(read, reference, "vring {index}: descriptors read");
    }
    (taken, read)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let size = 1u16 << (data[0] % 11);
    let f = data[1];
    let mut features = 0;
    for (bit, feature) in [
        VERSION_1, MRG_RXBUF, EVENT_IDX, GUEST_CSUM, GUEST_TSO4, GUEST_TSO6,
    ]
    .into_iter()
    .enumerate()
    {
        if f & (1 << bit) != 0 {
            features |= feature;
        }
    }
    let offloads = f & 0x40 != 0;
    let rx_base = u16::from_le_bytes([data[2], data[3]]);
    let tx_base = u16::from_le_bytes([data[4], data[5]]);
    let rx_ahead = u16::from_le_bytes([data[6], data[7]]);
    let tx_ahead = u16::from_le_bytes([data[8], data[9]]);
    let frames = usize::from(data[10] % 64);
    let frame_len = usize::from(u16::from_le_bytes([data[11], data[12]]) % 4096);
    let batch_size = usize::from(data[13] % 64) + 1;
    let image = &data[16..];
    if image.is_empty() {
        return;
    }

    let fd = nix::sys::memfd::memfd_create(c"fuzz", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .expect("memfd");
    let file = File::from(fd);
    let outside: Vec<u8> = (0..OUTSIDE).map(canary).collect();
    file.write_all_at(&outside, 0).unwrap();
    file.set_len(OUTSIDE + MEMORY).unwrap();
    let spec = RegionSpec {
        guest_phys_addr: BASE,
        memory_size: MEMORY,
        user_addr: BASE,
        mmap_offset: OUTSIDE,
    };
    let memory = Arc::new(GuestMemory::map(&[spec], vec![file.try_clone().unwrap()]).unwrap());
    let fill: Vec<u8> = image
        .iter()
        .copied()
        .cycle()
        .take(MEMORY as usize)
        .collect();
    assert!(memory.write(BASE, &fill));
    let (rx, _) = driver::layout(BASE, size);
    let (tx, _) = driver::layout(BASE + TX_AT, size);
    // The used rings start where the driver's index says; the avail
    // indices run ahead of the bases as the input says (beyond the size:
    // an index error).
    driver::set_avail_idx(
        &memory,
        &rx,
        rx_base.wrapping_add(rx_ahead % (2 * size + 1)),
    );
    driver::set_avail_idx(
        &memory,
        &tx,
        tx_base.wrapping_add(tx_ahead % (2 * size + 1)),
    );

    // Whether a buffer the driver offers to be written lies over the
    // rings (the receive ring's descriptors are in the rings, so no send
    // changes this).
    let (_, rx_end) = driver::layout(BASE, size);
    let (_, tx_end) = driver::layout(BASE + TX_AT, size);
    let exact = (0..size).all(|index| {
        let d = bytes(&memory, rx.desc + 16 * u64::from(index), 16);
        let addr = u64::from_le_bytes(d[..8].try_into().unwrap());
        let len = u64::from(u32::from_le_bytes(d[8..12].try_into().unwrap()));
        let end = addr.saturating_add(len);
        let flags = u16::from_le_bytes([d[12], d[13]]);
        let clear = |start: u64, stop: u64| end <= start || addr >= stop;
        flags & driver::WRITE == 0 || len == 0 || (clear(rx.desc, rx_end) && clear(tx.desc, tx_end))
    });
    let device = Arc::new(Device::new("fuzz", 1, 1 << 30).unwrap());
    let ring = |layout, base| {
        SplitRing::new(Arc::clone(&memory), layout, base, features & EVENT_IDX != 0).unwrap()
    };
    fuzzing::start(&device, 0, ring(rx, rx_base), features, eventfd()).unwrap();
    fuzzing::start(&device, 1, ring(tx, tx_base), features, eventfd()).unwrap();
    let mut queue = fuzzing::queue(Arc::clone(&device), 0);
    assert!(queue.link_ready());

    let header_len = if features & (VERSION_1 | MRG_RXBUF) != 0 {
        12
    } else {
        10
    };
    let mut frame_bytes = Vec::new();
    for k in 0..frames {
        let mut frame = vec![0u8; 10];
        if offloads {
            frame.copy_from_slice(&fill[k % 64..k % 64 + 10]);
        }
        frame.extend(fill.iter().skip(k * 13 % 4096).take(frame_len));
        frame_bytes.push(frame);
    }
    let capacity = 1600;
    let mut batch = RxBatch::new(batch_size, capacity).with_metadata(10);
    for _round in 0..3 {
        let was = before(&device, &memory, 0, &rx);
        let report = queue.send_batch(frame_bytes.iter().map(|f| Outgoing::split(f, 10)));
        assert!(report.fault.is_none());
        assert_eq!(report.sent + report.dropped + report.refused, frames);
        after(&device, &memory, 0, &rx, &was, true, u32::MAX, exact);

        let was = before(&device, &memory, 1, &tx);
        batch.clear();
        let max = (header_len + capacity - 10) as u32;
        let got = queue.recv_batch(&mut batch);
        // Every frame reads back whole, lent or copied, and the lent ones'
        // chains go back with the release.
        for frame in batch.iter() {
            assert!(frame.ethernet().len() <= capacity);
        }
        queue.release();
        let (taken, _) = after(&device, &memory, 1, &tx, &was, false, max, exact);
        assert!(usize::from(taken) <= CHAIN_BUDGET);
        match got {
            Ok(report) => {
                assert_eq!(batch.len(), report.received);
                assert!(report.received + report.oversize + report.malformed <= usize::from(taken));
            }
            // Only an avail index running ahead fails a receive.
            Err(_) => assert!(was.next_avail == fuzzing::position(&device, 1).unwrap().0),
        }
    }
    let mut now = vec![0u8; OUTSIDE as usize];
    file.read_exact_at(&mut now, 0).unwrap();
    assert!(now == outside, "a byte outside guest memory was written");
});
