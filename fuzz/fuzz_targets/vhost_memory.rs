//! Memory tables as a vhost-user frontend sends them (SET_MEM_TABLE):
//! `GuestMemory::map` over region specs from the input, each backed by the
//! one memfd of the input's length (as QEMU backs guest RAM by one file),
//! whose byte at offset `o` is `pattern(o)`.
//!
//! - A table is accepted exactly when a reference written here says so:
//!   as many files as regions; every region non-empty, its guest, user
//!   and file ends within 64 bits, its file long enough; no two regions
//!   overlapping in guest-physical addresses.
//! - An accepted table translates a guest-physical or user range exactly
//!   when the reference finds a region holding all of it (none outside,
//!   none straddling two regions, no overflow), and the bytes read there
//!   are the file's bytes at the region's offset plus the address's
//!   offset into it: a region maps the right part of the right file.

#![no_main]

use std::fs::File;
use std::io::Write;

use arbitrary::Arbitrary;
use bridge::port::vhost::memory::{GuestMemory, RegionSpec};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Region {
    guest: u64,
    size: u64,
    user: u64,
    offset: u64,
    /// Numbers as they are (mostly refused) rather than brought into a
    /// small space where tables are accepted and collide.
    raw: bool,
}

#[derive(Debug, Arbitrary)]
struct Input {
    regions: Vec<Region>,
    /// The file's length, in 512-byte units (up to 64 KiB).
    file_units: u8,
    /// Files given beyond (or, negative, short of) one per region.
    extra_files: i8,
    /// Addresses to translate besides the regions' edges, with lengths.
    probes: Vec<(u64, u16)>,
}

fn pattern(offset: u64) -> u8 {
    (offset ^ (offset >> 8) ^ (offset >> 16)).wrapping_mul(31) as u8
}

fn spec(r: &Region) -> RegionSpec {
    if r.raw {
        RegionSpec {
            guest_phys_addr: r.guest,
            memory_size: r.size,
            user_addr: r.user,
            mmap_offset: r.offset,
        }
    } else {
        RegionSpec {
            guest_phys_addr: r.guest % 0x4_0000,
            memory_size: r.size % 0x1_0000,
            user_addr: 0x7f00_0000_0000 + r.user % 0x4_0000,
            mmap_offset: r.offset % 0x1_0000,
        }
    }
}

/// The reference: whether the table is to be accepted.
fn acceptable(specs: &[RegionSpec], files: usize, file_len: u64) -> bool {
    if files != specs.len() {
        return false;
    }
    let sound = specs.iter().all(|s| {
        s.memory_size > 0
            && s.guest_phys_addr.checked_add(s.memory_size).is_some()
            && s.user_addr.checked_add(s.memory_size).is_some()
            && s.mmap_offset
                .checked_add(s.memory_size)
                .is_some_and(|end| end <= file_len)
    });
    if !sound {
        return false;
    }
    specs.iter().enumerate().all(|(i, a)| {
        specs[i + 1..].iter().all(|b| {
            a.guest_phys_addr + a.memory_size <= b.guest_phys_addr
                || b.guest_phys_addr + b.memory_size <= a.guest_phys_addr
        })
    })
}

/// The regions that hold `len` bytes at `addr` where `start` says a
/// region starts, with the address's offset into each.
fn holders(
    specs: &[RegionSpec],
    addr: u64,
    len: u64,
    start: impl Fn(&RegionSpec) -> u64,
) -> Vec<(RegionSpec, u64)> {
    specs
        .iter()
        .filter_map(|s| {
            let offset = addr.checked_sub(start(s))?;
            (offset.checked_add(len)? <= s.memory_size).then_some((*s, offset))
        })
        .collect()
}

fn check(memory: &GuestMemory, specs: &[RegionSpec], addr: u64, len: u64) {
    let len_usize = len as usize;
    // Guest-physical: regions do not overlap there, so at most one holds
    // it (an empty range where one region ends and the next starts, two).
    let found = holders(specs, addr, len, |s| s.guest_phys_addr);
    assert!(found.len() <= 1 || (len == 0 && found.len() == 2));
    assert_eq!(memory.guest(addr, len_usize).is_some(), !found.is_empty());
    let mut bytes = vec![0u8; len_usize];
    assert_eq!(memory.read(addr, &mut bytes), !found.is_empty());
    if let Some((s, offset)) = found.first() {
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(*b, pattern(s.mmap_offset + offset + i as u64));
        }
    }
    // User addresses may overlap (one RAM block at two guest addresses):
    // the pointer must be into one region that holds the range.
    let found = holders(specs, addr, len, |s| s.user_addr);
    let pointer = memory.user(addr, len_usize);
    assert_eq!(pointer.is_some(), !found.is_empty());
    if let (Some(p), true) = (pointer, len > 0) {
        // SAFETY: `user` vouches for `len` bytes at `p` in a mapping the
        // memory keeps; nothing else writes them during this read.
        let first = unsafe { p.read_volatile() };
        let last = unsafe { p.add(len_usize - 1).read_volatile() };
        assert!(found.iter().any(|(s, offset)| {
            first == pattern(s.mmap_offset + offset)
                && last == pattern(s.mmap_offset + offset + len - 1)
        }));
    }
}

fuzz_target!(|input: Input| {
    if input.regions.len() > 8 || input.probes.len() > 16 {
        return;
    }
    let specs: Vec<RegionSpec> = input.regions.iter().map(spec).collect();
    let file_len = u64::from(input.file_units) * 512;
    let fd = nix::sys::memfd::memfd_create(c"fuzz", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .expect("memfd");
    let mut file = File::from(fd);
    let contents: Vec<u8> = (0..file_len).map(pattern).collect();
    file.write_all(&contents).expect("the file is written");
    let count = (specs.len() as i64 + i64::from(input.extra_files)).clamp(0, 10) as usize;
    let files: Vec<File> = (0..count).map(|_| file.try_clone().unwrap()).collect();
    let accept = acceptable(&specs, count, file_len);
    let memory = match GuestMemory::map(&specs, files) {
        Ok(memory) => {
            assert!(
                accept,
                "accepted against the reference: {specs:x?}, {count} files"
            );
            memory
        }
        Err(error) => {
            assert!(
                !accept,
                "refused against the reference: {specs:x?}: {error}"
            );
            return;
        }
    };
    assert_eq!(memory.regions(), specs.len());
    for s in &specs {
        for base in [s.guest_phys_addr, s.user_addr] {
            let end = base + s.memory_size;
            for (addr, len) in [
                (base, s.memory_size),
                (base, s.memory_size + 1),
                (base.wrapping_sub(1), 1),
                (base.wrapping_sub(1), 2),
                (end - 1, 1),
                (end, 0),
                (end, 1),
                (end - 1, 2),
                (base + s.memory_size / 2, 1),
            ] {
                check(&memory, &specs, addr, len);
            }
        }
    }
    for &(addr, len) in &input.probes {
        check(&memory, &specs, addr, u64::from(len));
        if let Some(s) = specs.first() {
            check(
                &memory,
                &specs,
                s.guest_phys_addr.wrapping_add(addr % 0x1_0000),
                u64::from(len),
            );
            check(
                &memory,
                &specs,
                s.user_addr.wrapping_add(addr % 0x1_0000),
                u64::from(len),
            );
        }
    }
});
