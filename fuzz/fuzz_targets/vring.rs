//! The vhost-user split ring over a driver's arbitrary memory: descriptor
//! table, avail ring and buffers all come from the input. The device side
//! never panics, takes no more chains than the driver made available, and
//! hands out only chains that a plain reference walk of the same table,
//! written here, accepts: every buffer inside the memory table, the right
//! direction, no loop, no indirect table, within the length bounds. Every
//! chain taken, good or bad, is returned, and one publish makes them all
//! visible.

#![no_main]

use std::sync::Arc;

use bridge::port::vhost::memory::GuestMemory;
use bridge::port::vhost::ring::{driver, ChainError, Direction, SplitRing};
use libfuzzer_sys::fuzz_target;

const BASE: u64 = 0x10_000;
const MEMORY: usize = 64 * 1024;

/// A descriptor as the driver wrote it.
struct Desc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

fn desc(memory: &GuestMemory, table: u64, index: u16) -> Desc {
    let mut raw = [0u8; 16];
    assert!(memory.read(table + 16 * u64::from(index), &mut raw));
    Desc {
        addr: u64::from_le_bytes(raw[..8].try_into().unwrap()),
        len: u32::from_le_bytes(raw[8..12].try_into().unwrap()),
        flags: u16::from_le_bytes(raw[12..14].try_into().unwrap()),
        next: u16::from_le_bytes(raw[14..].try_into().unwrap()),
    }
}

/// The reference: the chain at `head`'s total length, if it is sound.
fn reference(
    memory: &GuestMemory,
    table: u64,
    size: u16,
    head: u16,
    direction: Direction,
    min: u32,
    max: u32,
) -> Option<u32> {
    let mut seen = vec![false; usize::from(size)];
    let mut index = head;
    let mut total: u64 = 0;
    loop {
        if index >= size || seen[usize::from(index)] {
            return None;
        }
        seen[usize::from(index)] = true;
        let d = desc(memory, table, index);
        if d.flags & driver::INDIRECT != 0 {
            return None;
        }
        if (d.flags & driver::WRITE != 0) != (direction == Direction::Write) {
            return None;
        }
        if d.len > 0 && memory.guest(d.addr, d.len as usize).is_none() {
            return None;
        }
        total += u64::from(d.len);
        if direction == Direction::Read && total > u64::from(max) {
            return None;
        }
        if d.flags & driver::NEXT == 0 {
            break;
        }
        index = d.next;
    }
    let total = u32::try_from(total).ok()?;
    (total >= min && total > 0).then_some(total)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let size = 1u16 << (data[0] % 9);
    let event_idx = data[1] & 1 != 0;
    let direction = if data[1] & 2 != 0 {
        Direction::Write
    } else {
        Direction::Read
    };
    let base = u16::from_le_bytes([data[2], data[3]]);
    let min = u32::from(data[4]);
    let max = u32::from(u16::from_le_bytes([data[5], data[6]]));
    let memory = Arc::new(GuestMemory::anonymous(BASE, MEMORY).unwrap());
    let image = &data[8..];
    assert!(memory.write(BASE, &image[..image.len().min(MEMORY)]));
    let (layout, _) = driver::layout(BASE, size);
    let mut ring = SplitRing::new(Arc::clone(&memory), layout, base, event_idx).unwrap();
    let used_before = driver::used_idx(&memory, &layout);
    let available = match ring.available() {
        Ok(n) => n,
        Err(ChainError::Index(_)) => {
            // Nothing is taken from a ring whose index runs ahead.
            assert!(matches!(ring.pop(direction, min, max), Err(ChainError::Index(_))));
            assert_eq!(ring.next_avail(), base);
            return;
        }
        Err(other) => panic!("available: {other}"),
    };
    let mut returned = 0u16;
    let mut buffer = vec![0u8; MEMORY];
    for taken in 0..available {
        let slot = u64::from(base.wrapping_add(taken) & (size - 1));
        let mut raw = [0u8; 2];
        assert!(memory.read(layout.avail + 4 + 2 * slot, &mut raw));
        let head = u16::from_le_bytes(raw);
        let expected = (head < size)
            .then(|| reference(&memory, layout.desc, size, head, direction, min, max))
            .flatten();
        match ring.pop(direction, min, max) {
            Ok(Some(chain)) => {
                assert_eq!(chain.head, head);
                assert_eq!(Some(chain.total), expected, "the reference agrees");
                let total: u64 = ring.segments().iter().map(|s| u64::from(s.len)).sum();
                assert_eq!(total, u64::from(chain.total));
                // Each buffer lies in the one region, as the walk found it.
                let region = memory.guest(BASE, MEMORY).unwrap() as usize;
                for segment in ring.segments() {
                    let at = segment.at as usize;
                    assert!(at >= region && at + segment.len as usize <= region + MEMORY);
                }
                let want = (chain.total as usize).min(buffer.len());
                assert_eq!(ring.read_chain(0, &mut buffer[..want]), want);
                ring.push_used(chain.head, 0);
                returned = returned.wrapping_add(1);
            }
            Ok(None) => panic!("{taken} of {available} taken, then none"),
            Err(ChainError::Head(h)) => assert!(h >= size && h == head),
            Err(_) => {
                assert_eq!(expected, None, "a chain the reference accepts was refused");
                // Returned unused by pop itself.
                returned = returned.wrapping_add(1);
            }
        }
    }
    assert_eq!(ring.next_avail(), base.wrapping_add(available));
    // The driver may have rewritten nothing meanwhile: the ring is empty.
    assert!(matches!(ring.pop(direction, min, max), Ok(None)));
    ring.publish();
    assert_eq!(
        driver::used_idx(&memory, &layout),
        used_before.wrapping_add(returned),
        "one publish makes every returned chain visible"
    );
});
