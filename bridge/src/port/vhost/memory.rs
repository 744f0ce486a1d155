//! The frontend's memory as a vhost-user port sees it: the regions of the
//! last SET_MEM_TABLE, each mapped from the file descriptor it came with
//! (through vm-memory's `MmapRegion`), and the two translations the rings
//! need: guest-physical addresses (descriptors) and the frontend's own
//! virtual addresses (SET_VRING_ADDR) to pointers here.
//!
//! The frontend is untrusted and its memory changes under us: nothing
//! here hands out a reference into it. Callers get raw pointers to ranges
//! checked to lie inside one mapped region, and copy bytes with
//! [`GuestMemory::read`] and [`GuestMemory::write`].
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use vm_memory::mmap::MmapRegion;

use super::sigbus::{watch, WatchError, Watched};
use vm_memory::FileOffset;

/// One region of the memory table, as the frontend described it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionSpec {
    /// Where the region starts in guest-physical addresses.
    pub guest_phys_addr: u64,
    /// Its length in bytes.
    pub memory_size: u64,
    /// Where it starts in the frontend's virtual addresses.
    pub user_addr: u64,
    /// Where it starts in its file.
    pub mmap_offset: u64,
}

#[derive(Debug)]
struct Region {
    spec: RegionSpec,
    /// The region's first byte here (the mapping's start plus
    /// `mmap_offset`).
    host: *mut u8,
}

/// The frontend's memory, mapped.
#[derive(Debug)]
pub struct GuestMemory {
    regions: Vec<Region>,
    /// The mappings of the frontend's files, watched for SIGBUS; declared
    /// before `_maps` so that they are unwatched before they are unmapped.
    watched: Vec<Watched>,
    /// Keeps the mappings alive; unmapped on drop.
    _maps: Vec<MmapRegion>,
}

// SAFETY: the pointers point into the mappings this value owns, which stay
// mapped until it is dropped; every access through them is a copy made by
// `read`/`write` or an atomic operation, never a reference held across a
// call, so sharing them between threads is as sound as sharing the mapping.
unsafe impl Send for GuestMemory {}
// SAFETY: as for Send: shared use is copies and atomics only.
unsafe impl Sync for GuestMemory {}

/// Why a memory table was refused.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The table does not come with one file per region (a region
    /// without its file would be left out, a file without its region
    /// kept open for nothing).
    #[error("{regions} memory regions with {files} files")]
    Files {
        /// How many regions.
        regions: usize,
        /// How many files.
        files: usize,
    },
    /// A region's numbers overflow or overlap another's.
    #[error("memory region {0} is malformed or overlaps another")]
    Malformed(usize),
    /// A region's file is shorter than the region.
    #[error("memory region {index}: its file holds {file} bytes, the region needs {needed}")]
    ShortFile {
        /// Which region.
        index: usize,
        /// The file's size.
        file: u64,
        /// What the region needs.
        needed: u64,
    },
    /// Mapping failed.
    #[error("memory region {0}: mmap failed: {1}")]
    Map(usize, io::Error),
    /// The mapping could not be watched for SIGBUS.
    #[error("memory region {0}: {1}")]
    Watch(usize, WatchError),
    /// A region's file is on a file system other than tmpfs (memfd,
    /// /dev/shm) or hugetlbfs: one whose pages another program could make
    /// fail or stall on access (FUSE, NFS, a disk).
    #[error("memory region {index}: its file is on a file system of type {magic:#x}, not tmpfs or hugetlbfs")]
    FileSystem {
        /// Which region.
        index: usize,
        /// The file system's magic number, as statfs(2) gives it.
        magic: i64,
    },
}

/// The file systems a region's file may be on: tmpfs (memfds included)
/// and hugetlbfs.
const TMPFS_MAGIC: i64 = 0x0102_1994;
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;

/// The type of the file system `file` is on.
fn file_system(file: &File) -> io::Result<i64> {
    let stat = nix::sys::statfs::fstatfs(file).map_err(io::Error::from)?;
    Ok(stat.filesystem_type().0 as i64)
}

/// The size of the file behind `file`.
fn file_size(file: &File) -> io::Result<u64> {
    Ok(file.metadata()?.len())
}

impl GuestMemory {
    /// Maps the regions of a memory table, each from its file.
    ///
    /// A region's file is mapped from offset 0 up to the region's end (so
    /// that an offset that is not page-aligned, which hugetlbfs files
    /// cannot be mapped from, is no obstacle) after checking that the file
    /// is that long: a file shorter than its region would raise SIGBUS on
    /// the first access past its end.
    ///
    /// There must be one file per region, in order.
    pub fn map(specs: &[RegionSpec], files: Vec<File>) -> Result<GuestMemory, MemoryError> {
        if specs.len() != files.len() {
            return Err(MemoryError::Files {
                regions: specs.len(),
                files: files.len(),
            });
        }
        let mut regions = Vec::with_capacity(specs.len());
        let mut maps = Vec::with_capacity(specs.len());
        let mut watched = Vec::with_capacity(specs.len());
        for (index, (spec, file)) in specs.iter().zip(files).enumerate() {
            let end = spec
                .mmap_offset
                .checked_add(spec.memory_size)
                .filter(|_| spec.memory_size > 0)
                .filter(|_| spec.guest_phys_addr.checked_add(spec.memory_size).is_some())
                .filter(|_| spec.user_addr.checked_add(spec.memory_size).is_some())
                .and_then(|end| usize::try_from(end).ok())
                .ok_or(MemoryError::Malformed(index))?;
            let magic = file_system(&file).map_err(|e| MemoryError::Map(index, e))?;
            if magic != TMPFS_MAGIC && magic != HUGETLBFS_MAGIC {
                return Err(MemoryError::FileSystem { index, magic });
            }
            let size = file_size(&file).map_err(|e| MemoryError::Map(index, e))?;
            if size < end as u64 {
                return Err(MemoryError::ShortFile {
                    index,
                    file: size,
                    needed: end as u64,
                });
            }
            let map = MmapRegion::from_file(FileOffset::new(file, 0), end)
                .map_err(|e| MemoryError::Map(index, io::Error::other(e.to_string())))?;
            // The file may shrink under the mapping from now on.
            watched.push(watch(map.as_ptr(), end).map_err(|e| MemoryError::Watch(index, e))?);
            // SAFETY: `mmap_offset < end`, the mapping's length.
            let host = unsafe { map.as_ptr().add(spec.mmap_offset as usize) };
            regions.push(Region { spec: *spec, host });
            maps.push(map);
        }
        GuestMemory::checked(regions, watched, maps)
    }

    /// Anonymous memory of `size` bytes as one region at guest-physical
    /// and user address `base`: for tests and fuzzing, which play the
    /// frontend in this process.
    pub fn anonymous(base: u64, size: usize) -> io::Result<GuestMemory> {
        let map = MmapRegion::new(size).map_err(|e| io::Error::other(e.to_string()))?;
        let spec = RegionSpec {
            guest_phys_addr: base,
            memory_size: size as u64,
            user_addr: base,
            mmap_offset: 0,
        };
        let host = map.as_ptr();
        GuestMemory::checked(vec![Region { spec, host }], Vec::new(), vec![map])
            .map_err(|e| io::Error::other(e.to_string()))
    }

    fn checked(
        mut regions: Vec<Region>,
        watched: Vec<Watched>,
        maps: Vec<MmapRegion>,
    ) -> Result<GuestMemory, MemoryError> {
        regions.sort_by_key(|r| r.spec.guest_phys_addr);
        for (index, pair) in regions.windows(2).enumerate() {
            let end = pair[0].spec.guest_phys_addr + pair[0].spec.memory_size;
            if end > pair[1].spec.guest_phys_addr {
                return Err(MemoryError::Malformed(index + 1));
            }
        }
        Ok(GuestMemory {
            regions,
            watched,
            _maps: maps,
        })
    }

    /// Whether a region's file shrank under its mapping (a SIGBUS was
    /// taken there): the memory reads as zeros since, and the frontend is
    /// to be dropped.
    #[inline]
    pub fn faulted(&self) -> bool {
        self.watched.iter().any(Watched::faulted)
    }

    /// How many regions.
    pub fn regions(&self) -> usize {
        self.regions.len()
    }

    /// The pointer to `len` bytes at guest-physical `addr`, if they lie in
    /// one region.
    #[inline]
    pub fn guest(&self, addr: u64, len: usize) -> Option<*mut u8> {
        self.find(addr, len, |spec| spec.guest_phys_addr)
    }

    /// The region that holds guest-physical `addr`, as its first guest
    /// address, its size and where it is mapped, for a prefetch only
    /// (see [`guest`](Self::guest) for bytes to read or write).
    #[inline]
    pub fn region_of(&self, addr: u64) -> Option<(u64, u64, *const u8)> {
        self.regions.iter().find_map(|region| {
            let spec = &region.spec;
            (addr.wrapping_sub(spec.guest_phys_addr) < spec.memory_size).then_some((
                spec.guest_phys_addr,
                spec.memory_size,
                region.host.cast_const(),
            ))
        })
    }

    /// The pointer to `len` bytes at the frontend's virtual address
    /// `addr`, if they lie in one region.
    pub fn user(&self, addr: u64, len: usize) -> Option<*mut u8> {
        self.find(addr, len, |spec| spec.user_addr)
    }

    /// The pointer to `len` bytes at `addr` in the address space whose
    /// region starts `start` gives.
    #[inline]
    fn find(&self, addr: u64, len: usize, start: impl Fn(&RegionSpec) -> u64) -> Option<*mut u8> {
        // One or two regions in practice: a scan beats a search.
        for region in &self.regions {
            let Some(offset) = addr.checked_sub(start(&region.spec)) else {
                continue;
            };
            if offset
                .checked_add(len as u64)
                .is_some_and(|end| end <= region.spec.memory_size)
            {
                // SAFETY: offset + len lies within the region's mapping.
                return Some(unsafe { region.host.add(offset as usize) });
            }
        }
        None
    }

    /// Copies `into.len()` bytes from guest-physical `addr`; false when
    /// they do not lie in one region.
    #[inline]
    pub fn read(&self, addr: u64, into: &mut [u8]) -> bool {
        match self.guest(addr, into.len()) {
            Some(from) => {
                // SAFETY: `from` is valid for `into.len()` bytes (checked
                // by `guest`); the frontend may write them meanwhile, which
                // changes what is copied, not whether the copy is sound,
                // since no reference to them exists.
                unsafe { std::ptr::copy_nonoverlapping(from, into.as_mut_ptr(), into.len()) };
                true
            }
            None => false,
        }
    }

    /// Copies `from` to guest-physical `addr`; false when the bytes do not
    /// lie in one region.
    #[inline]
    pub fn write(&self, addr: u64, from: &[u8]) -> bool {
        match self.guest(addr, from.len()) {
            Some(into) => {
                // SAFETY: `into` is valid for `from.len()` bytes (checked by
                // `guest`), and `from` is our own memory, so they do not
                // overlap.
                unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), into, from.len()) };
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_translate_only_inside_a_region() {
        let memory = GuestMemory::anonymous(0x10_000, 4096).unwrap();
        assert!(memory.guest(0x10_000, 4096).is_some());
        assert!(memory.guest(0x10_000, 4097).is_none());
        assert!(memory.guest(0xffff, 1).is_none());
        assert!(memory.guest(0x10_fff, 1).is_some());
        assert!(
            memory.guest(0x11_000, 0).is_some(),
            "an empty range at the end"
        );
        assert!(memory.guest(u64::MAX, 2).is_none(), "no overflow");
        assert!(memory.write(0x10_100, b"frame"));
        let mut back = [0; 5];
        assert!(memory.read(0x10_100, &mut back));
        assert_eq!(&back, b"frame");
        assert!(!memory.read(0x10_ffe, &mut back));
    }

    #[test]
    fn a_table_takes_one_file_per_region() {
        let memfd = || {
            let fd = nix::sys::memfd::memfd_create(c"t", nix::sys::memfd::MFdFlags::empty());
            let file = File::from(fd.unwrap());
            file.set_len(4096).unwrap();
            file
        };
        let spec = RegionSpec {
            guest_phys_addr: 0,
            memory_size: 4096,
            user_addr: 0x7f00_0000_0000,
            mmap_offset: 0,
        };
        let second = RegionSpec {
            guest_phys_addr: 4096,
            ..spec
        };
        // A region without its file was left out, its addresses untranslated.
        assert!(matches!(
            GuestMemory::map(&[spec, second], vec![memfd()]),
            Err(MemoryError::Files {
                regions: 2,
                files: 1
            })
        ));
        assert!(matches!(
            GuestMemory::map(&[], vec![memfd()]),
            Err(MemoryError::Files {
                regions: 0,
                files: 1
            })
        ));
        assert_eq!(
            GuestMemory::map(&[spec], vec![memfd()]).unwrap().regions(),
            1
        );
    }

    #[test]
    fn a_file_shorter_than_its_region_is_refused() {
        let fd =
            nix::sys::memfd::memfd_create(c"mpbridge-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .unwrap();
        let file = File::from(fd);
        file.set_len(8192).unwrap();
        let spec = RegionSpec {
            guest_phys_addr: 0,
            memory_size: 8192,
            user_addr: 0x7f00_0000_0000,
            mmap_offset: 4096,
        };
        match GuestMemory::map(&[spec], vec![file.try_clone().unwrap()]) {
            Err(MemoryError::ShortFile { needed, .. }) => assert_eq!(needed, 12_288),
            other => panic!("{other:?}"),
        }
        let spec = RegionSpec {
            mmap_offset: 0,
            ..spec
        };
        let memory = GuestMemory::map(&[spec], vec![file]).unwrap();
        assert!(memory.user(0x7f00_0000_0000 + 8191, 1).is_some());
        assert!(memory.user(0x7f00_0000_0000 + 8192, 1).is_none());
        let overflow = RegionSpec {
            guest_phys_addr: u64::MAX - 10,
            ..spec
        };
        let fd = nix::sys::memfd::memfd_create(c"t", nix::sys::memfd::MFdFlags::empty()).unwrap();
        assert!(matches!(
            GuestMemory::map(&[overflow], vec![File::from(fd)]),
            Err(MemoryError::Malformed(0))
        ));
    }
}
