//! Guest memory as an immutable table of mapped regions.
//!
//! The data path translates every descriptor address once, so translation
//! is a short linear scan over a handful of regions (a vhost-user frontend
//! sends at most 8 by default, QEMU usually 1–3), with no locks and no
//! reference counting on the fast path. A [`GuestMemory`] is cheap to clone
//! (one `Arc`): queues keep a clone so the mappings their ring pointers point
//! into outlive them even if the daemon installs a new memory table.
//!
//! A buffer must lie entirely inside *one* region: QEMU's guest RAM regions
//! are not adjacent in guest-physical space for x86 machines, and DPDK and
//! Linux vhost make the same restriction per translated chunk. A buffer that
//! straddles two regions is reported as out of range.
//!
//! The memory is shared with another process, which may write it at any
//! time. Nothing in this crate forms a Rust reference (`&[u8]`, `&T`) to
//! guest memory except `&AtomicU16` for the ring index and flag fields;
//! everything else goes through raw-pointer copies.

use std::any::Any;
use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;
use std::sync::Arc;

/// Errors building or mapping guest memory.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    /// A region has size 0.
    #[error("memory region at gpa {gpa:#x} has size 0")]
    ZeroSize {
        /// Guest-physical start of the region.
        gpa: u64,
    },
    /// `gpa + size` or `uva + size` does not fit in 64 bits.
    #[error("memory region at gpa {gpa:#x} with size {size:#x} overflows the address space")]
    AddressOverflow {
        /// Guest-physical start of the region.
        gpa: u64,
        /// Size of the region, bytes.
        size: u64,
    },
    /// Two regions overlap in guest-physical or frontend-user address space.
    #[error("memory regions at gpa {first:#x} and {second:#x} overlap")]
    Overlap {
        /// Guest-physical start of the lower region.
        first: u64,
        /// Guest-physical start of the other region.
        second: u64,
    },
    /// A region's host pointer is null.
    #[error("memory region at gpa {gpa:#x} has a null host address")]
    NullHost {
        /// Guest-physical start of the region.
        gpa: u64,
    },
    /// A region does not fit inside the mapping it claims to live in.
    #[error("memory region at gpa {gpa:#x} lies outside its mapping")]
    OutsideMapping {
        /// Guest-physical start of the region.
        gpa: u64,
    },
    /// `memfd_create` or `ftruncate` failed.
    #[error("cannot create a memfd of {size} bytes")]
    CreateMemfd {
        /// Requested size, bytes.
        size: u64,
        /// OS error.
        #[source]
        source: io::Error,
    },
    /// `mmap` failed.
    #[error("cannot map {len} bytes")]
    Map {
        /// Requested length, bytes.
        len: u64,
        /// OS error.
        #[source]
        source: io::Error,
    },
    /// An access through [`GuestMemory::read`]/[`GuestMemory::write`] fell
    /// outside guest memory.
    #[error("guest range {gpa:#x}+{len} is not inside one memory region")]
    OutOfRange {
        /// Guest-physical start of the access.
        gpa: u64,
        /// Length of the access, bytes.
        len: u64,
    },
}

/// One contiguous piece of guest memory mapped into this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Guest-physical address of the first byte.
    pub gpa: u64,
    /// Length, bytes.
    pub size: u64,
    /// The frontend's (QEMU's) user-space address of the first byte:
    /// vhost-user `SET_VRING_ADDR` gives ring addresses in this space.
    pub uva: u64,
    /// This process's address of the first byte.
    pub host: *mut u8,
}

// SAFETY: a `Region` is a plain description of an address range; it is the
// `GuestMemory` that owns (keeps alive) the mapping. Moving the description
// across threads does not access memory.
unsafe impl Send for Region {}
// SAFETY: as above, `&Region` only exposes the addresses.
unsafe impl Sync for Region {}

/// An anonymous or file-backed shared mapping, unmapped on drop.
///
/// The mapping itself is rust-vmm's [`vm_memory::MmapRegion`] (the crate
/// made for guest memory); this type only narrows it to what the rings need:
/// an address and a length.
#[derive(Debug)]
pub struct MmapRegion {
    inner: vm_memory::MmapRegion<()>,
}

impl MmapRegion {
    /// Maps `len` bytes of `file` starting at `file_offset` (page-aligned),
    /// shared and read-write, as a vhost-user backend maps the frontend's
    /// memory-table fds.
    pub fn map_file(file: &File, file_offset: u64, len: u64) -> Result<Self, MemError> {
        let bad = |source| MemError::Map { len, source };
        let ulen = usize::try_from(len).map_err(|_| bad(io::ErrorKind::InvalidInput.into()))?;
        if ulen == 0 {
            return Err(bad(io::ErrorKind::InvalidInput.into()));
        }
        let f = file.try_clone().map_err(bad)?;
        let inner = vm_memory::MmapRegion::build(
            Some(vm_memory::FileOffset::new(f, file_offset)),
            ulen,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
        )
        .map_err(|e| bad(io::Error::other(e.to_string())))?;
        Ok(MmapRegion { inner })
    }

    /// Maps `len` bytes of zeroed, private anonymous memory.
    pub fn anonymous(len: u64) -> Result<Self, MemError> {
        let bad = |source| MemError::Map { len, source };
        let ulen = usize::try_from(len).map_err(|_| bad(io::ErrorKind::InvalidInput.into()))?;
        if ulen == 0 {
            return Err(bad(io::ErrorKind::InvalidInput.into()));
        }
        let inner =
            vm_memory::MmapRegion::new(ulen).map_err(|e| bad(io::Error::other(e.to_string())))?;
        Ok(MmapRegion { inner })
    }

    /// First byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.as_ptr()
    }

    /// Length of the mapping, bytes.
    pub fn len(&self) -> u64 {
        self.inner.size() as u64
    }

    /// Always `false`: empty mappings are refused at creation.
    pub fn is_empty(&self) -> bool {
        self.inner.size() == 0
    }

    /// The file mapped (`None` for anonymous memory).
    pub fn file(&self) -> Option<&File> {
        self.inner.file_offset().map(|f| f.file())
    }
}

/// A region described relative to an [`MmapRegion`] it lives in: the safe
/// way to build a [`GuestMemory`].
#[derive(Clone, Debug)]
pub struct MappedRegion {
    /// Guest-physical address of the first byte.
    pub gpa: u64,
    /// Frontend user-space address of the first byte.
    pub uva: u64,
    /// Length, bytes.
    pub size: u64,
    /// The mapping that holds the region.
    pub mapping: Arc<MmapRegion>,
    /// Offset of the region's first byte inside `mapping`, bytes
    /// (vhost-user's `mmap_offset`).
    pub offset: u64,
}

#[derive(Debug)]
struct Inner {
    regions: Vec<Region>,
    /// Owners of the mappings; never read, only dropped with the table.
    _keep_alive: Vec<Arc<dyn Any + Send + Sync>>,
}

/// Immutable table of guest memory regions, sorted by guest-physical
/// address. Cloning shares the table and keeps the mappings alive.
#[derive(Clone, Debug)]
pub struct GuestMemory {
    inner: Arc<Inner>,
}

// SAFETY: the table is immutable after construction; the host pointers
// refer to mappings owned by `keep_alive` (or, for `new`, guaranteed by the
// caller to live as long), and every access through them is a raw-pointer
// copy or an atomic, never a Rust reference that could alias.
unsafe impl Send for GuestMemory {}
// SAFETY: see `Send`; `&GuestMemory` exposes only immutable data.
unsafe impl Sync for GuestMemory {}

impl GuestMemory {
    /// Builds the table from raw regions, sorting them by guest-physical
    /// address. Rejects zero sizes, `gpa + size` / `uva + size` overflow,
    /// null host pointers and overlaps (in guest-physical and in frontend
    /// user space).
    ///
    /// # Safety
    /// For every region, `host .. host + size` must be valid for reads and
    /// writes for as long as any clone of the returned `GuestMemory` (or any
    /// queue or chain built from it) exists — typically because
    /// `keep_alive` owns the mappings — and must not be memory that Rust
    /// code accesses through references.
    pub unsafe fn new(
        mut regions: Vec<Region>,
        keep_alive: Vec<Arc<dyn Any + Send + Sync>>,
    ) -> Result<Self, MemError> {
        for r in &regions {
            if r.size == 0 {
                return Err(MemError::ZeroSize { gpa: r.gpa });
            }
            if r.gpa.checked_add(r.size).is_none()
                || r.uva.checked_add(r.size).is_none()
                || (r.host as u64).checked_add(r.size).is_none()
            {
                return Err(MemError::AddressOverflow {
                    gpa: r.gpa,
                    size: r.size,
                });
            }
            if r.host.is_null() {
                return Err(MemError::NullHost { gpa: r.gpa });
            }
        }
        regions.sort_by_key(|r| r.gpa);
        for w in regions.windows(2) {
            if w[0].gpa + w[0].size > w[1].gpa {
                return Err(MemError::Overlap {
                    first: w[0].gpa,
                    second: w[1].gpa,
                });
            }
        }
        let mut by_uva: Vec<&Region> = regions.iter().collect();
        by_uva.sort_by_key(|r| r.uva);
        for w in by_uva.windows(2) {
            if w[0].uva + w[0].size > w[1].uva {
                return Err(MemError::Overlap {
                    first: w[0].gpa,
                    second: w[1].gpa,
                });
            }
        }
        Ok(GuestMemory {
            inner: Arc::new(Inner {
                regions,
                _keep_alive: keep_alive,
            }),
        })
    }

    /// Safe constructor: each region must fit inside its mapping; the
    /// mappings are kept alive by the table.
    pub fn from_mapped(regions: Vec<MappedRegion>) -> Result<Self, MemError> {
        let mut raw = Vec::with_capacity(regions.len());
        let mut keep: Vec<Arc<dyn Any + Send + Sync>> = Vec::with_capacity(regions.len());
        for m in regions {
            let end = m.offset.checked_add(m.size);
            if end.is_none_or(|e| e > m.mapping.len()) {
                return Err(MemError::OutsideMapping { gpa: m.gpa });
            }
            raw.push(Region {
                gpa: m.gpa,
                size: m.size,
                uva: m.uva,
                // `offset + size <= mapping.len()`, so this stays inside the
                // mapping (wrapping_add avoids an unsafe `add`).
                host: m.mapping.as_ptr().wrapping_add(m.offset as usize),
            });
            keep.push(m.mapping);
        }
        // SAFETY: every region lies inside a mapping checked above, and the
        // mappings are owned by the table's keep-alive list.
        unsafe { Self::new(raw, keep) }
    }

    /// Test/driver helper: `size` bytes of zeroed anonymous memory at gpa 0,
    /// with `uva` equal to the host address.
    pub fn new_anonymous(size: u64) -> Result<Self, MemError> {
        let mapping = Arc::new(MmapRegion::anonymous(size)?);
        Self::from_mapped(vec![MappedRegion {
            gpa: 0,
            uva: mapping.as_ptr() as u64,
            size,
            offset: 0,
            mapping,
        }])
    }

    /// Test/driver helper: `size` bytes of zeroed memfd-backed shared
    /// memory at gpa 0 (`uva` = host address), and the memfd so a
    /// vhost-user frontend can send it in `SET_MEM_TABLE`. The memfd is
    /// sealed against shrinking and growing, as QEMU's
    /// `memory-backend-memfd` seals guest RAM, so a backend can map it
    /// without fearing a SIGBUS.
    pub fn new_memfd(size: u64) -> Result<(GuestMemory, File), MemError> {
        let create = |source| MemError::CreateMemfd { size, source };
        // SAFETY: the name is a valid NUL-terminated C string; the returned
        // fd is checked and then owned by the `File`.
        let fd = unsafe {
            libc::memfd_create(
                c"vadapt-guest".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(create(io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh, valid descriptor nobody else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size).map_err(create)?;
        // SAFETY: F_ADD_SEALS takes an integer argument; `fd` is ours.
        let r = unsafe {
            libc::fcntl(
                fd,
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
            )
        };
        if r != 0 {
            return Err(create(io::Error::last_os_error()));
        }
        let mapping = Arc::new(MmapRegion::map_file(&file, 0, size)?);
        let mem = Self::from_mapped(vec![MappedRegion {
            gpa: 0,
            uva: mapping.as_ptr() as u64,
            size,
            offset: 0,
            mapping,
        }])?;
        Ok((mem, file))
    }

    /// Host address of `[gpa, gpa + len)` if the whole range lies inside one
    /// region, else `None` (also when `gpa + len` overflows). `len` 0 is
    /// allowed but `gpa` must still be inside a region.
    #[inline]
    pub fn translate(&self, gpa: u64, len: u64) -> Option<*mut u8> {
        self.translate_from(gpa, len, |r| r.gpa)
    }

    /// Like [`translate`](Self::translate) for a frontend user-space address.
    pub fn translate_uva(&self, uva: u64, len: u64) -> Option<*mut u8> {
        self.translate_from(uva, len, |r| r.uva)
    }

    /// Host address of `[addr, addr + len)`, where `base` gives each
    /// region's first address in `addr`'s address space (guest-physical or
    /// frontend user space): the one region scan both translations share.
    #[inline]
    fn translate_from(
        &self,
        addr: u64,
        len: u64,
        base: impl Fn(&Region) -> u64,
    ) -> Option<*mut u8> {
        for r in &self.inner.regions {
            // Wrapping: below the region's base gives a huge offset, rejected below.
            let off = addr.wrapping_sub(base(r));
            if off < r.size {
                // `off < size`, so `size - off` cannot underflow and
                // `len <= size - off` means the end is inside the region,
                // without computing `addr + len` (which could overflow).
                return (len <= r.size - off).then(|| r.host.wrapping_add(off as usize));
            }
        }
        None
    }

    /// Guest-physical address of a frontend user-space address.
    pub fn uva_to_gpa(&self, uva: u64) -> Option<u64> {
        self.inner.regions.iter().find_map(|r| {
            let off = uva.wrapping_sub(r.uva);
            (off < r.size).then(|| r.gpa + off)
        })
    }

    /// The regions, sorted by guest-physical address.
    pub fn regions(&self) -> &[Region] {
        &self.inner.regions
    }

    /// `true` if both handles share the same table.
    pub fn ptr_eq(&self, other: &GuestMemory) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// `true` if the host range `[host, host + len)` lies inside one region:
    /// used by tests and fuzzers to check that every pointer this crate
    /// hands out stays inside guest memory.
    pub fn contains_host_range(&self, host: *const u8, len: u64) -> bool {
        self.inner.regions.iter().any(|r| {
            let off = (host as u64).wrapping_sub(r.host as u64);
            off < r.size && len <= r.size - off
        })
    }

    /// Copies `src` into guest memory at `gpa` (driver and test helper).
    pub fn write(&self, gpa: u64, src: &[u8]) -> Result<(), MemError> {
        let len = src.len() as u64;
        let dst = self
            .translate(gpa, len)
            .ok_or(MemError::OutOfRange { gpa, len })?;
        // SAFETY: `translate` checked `[dst, dst + len)` is inside a live
        // region; `src` is host memory, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Copies guest memory at `gpa` into `dst` (driver and test helper).
    pub fn read(&self, gpa: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let len = dst.len() as u64;
        let src = self
            .translate(gpa, len)
            .ok_or(MemError::OutOfRange { gpa, len })?;
        // SAFETY: as in `write`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(gpa: u64, size: u64, uva: u64, host: usize) -> Region {
        Region {
            gpa,
            size,
            uva,
            host: host as *mut u8,
        }
    }

    /// Builds a table over fake host addresses: never dereferenced.
    fn table(regions: Vec<Region>) -> Result<GuestMemory, MemError> {
        // SAFETY: these tests only translate, they never access memory.
        unsafe { GuestMemory::new(regions, Vec::new()) }
    }

    #[test]
    fn rejects_bad_tables() {
        assert!(matches!(
            table(vec![fake(0, 0, 0, 0x1000)]),
            Err(MemError::ZeroSize { .. })
        ));
        assert!(matches!(
            table(vec![fake(u64::MAX - 10, 100, 0, 0x1000)]),
            Err(MemError::AddressOverflow { .. })
        ));
        assert!(matches!(
            table(vec![
                fake(0x1000, 0x100, 0, 0x1000),
                fake(0x10ff, 0x100, 0x1000, 0x9000)
            ]),
            Err(MemError::Overlap { .. })
        ));
        assert!(matches!(
            table(vec![
                fake(0, 0x100, 0x50, 0x1000),
                fake(0x1000, 0x100, 0x0, 0x9000)
            ]),
            Err(MemError::Overlap { .. })
        ));
        assert!(matches!(
            table(vec![fake(0, 0x100, 0, 0)]),
            Err(MemError::NullHost { .. })
        ));
    }

    #[test]
    fn translate_requires_whole_range_in_one_region() {
        let m = table(vec![
            fake(0x10000, 0x1000, 0x7000_0000, 0x100000),
            fake(0x0, 0x1000, 0x6000_0000, 0x200000),
        ])
        .unwrap();
        assert_eq!(m.regions()[0].gpa, 0, "sorted by gpa");
        assert_eq!(m.translate(0x10000, 0x1000), Some(0x100000 as *mut u8));
        assert_eq!(m.translate(0x10010, 0), Some(0x100010 as *mut u8));
        assert_eq!(m.translate(0x10001, 0x1000), None, "one byte past the end");
        assert_eq!(m.translate(0xfff, 2), None, "straddles a hole");
        assert_eq!(m.translate(0x11000, 0), None, "end address is outside");
        assert_eq!(m.translate(0x10010, u64::MAX), None, "overflowing length");
        assert_eq!(m.translate(u64::MAX, 1), None);
        assert_eq!(m.translate_uva(0x6000_0fff, 1), Some(0x200fff as *mut u8));
        assert_eq!(m.translate_uva(0x6000_0fff, 2), None);
        assert_eq!(m.uva_to_gpa(0x7000_0010), Some(0x10010));
        assert_eq!(m.uva_to_gpa(0x5000_0000), None);
    }

    #[test]
    fn memfd_memory_is_shared_with_the_file() {
        use std::io::{Read, Seek, SeekFrom};
        let (m, mut f) = GuestMemory::new_memfd(8192).unwrap();
        m.write(4096, b"hello").unwrap();
        let mut buf = [0u8; 5];
        f.seek(SeekFrom::Start(4096)).unwrap();
        f.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        let mut back = [0u8; 5];
        m.read(4096, &mut back).unwrap();
        assert_eq!(&back, b"hello");
        assert!(m.write(8190, b"abc").is_err());
        let r = m.regions()[0];
        assert_eq!(r.uva, r.host as u64);
    }

    #[test]
    fn from_mapped_checks_region_fits_mapping() {
        let map = Arc::new(MmapRegion::anonymous(4096).unwrap());
        let r = GuestMemory::from_mapped(vec![MappedRegion {
            gpa: 0,
            uva: 0,
            size: 4096,
            mapping: map,
            offset: 1,
        }]);
        assert!(matches!(r, Err(MemError::OutsideMapping { .. })));
    }
}
