//! Host pointers to the three parts of one split virtqueue, translated and
//! checked once, and the field accessors both sides use.
//!
//! Field offsets (spec 2.7.6, 2.7.8), for queue size `n`:
//!
//! | part  | offset       | field                          |
//! |-------|--------------|--------------------------------|
//! | avail | 0            | `flags` (le16)                 |
//! | avail | 2            | `idx` (le16)                   |
//! | avail | 4 + 2 i      | `ring[i]` (le16 head index)    |
//! | avail | 4 + 2 n      | `used_event` (le16, EVENT_IDX) |
//! | used  | 0            | `flags` (le16)                 |
//! | used  | 2            | `idx` (le16)                   |
//! | used  | 4 + 8 i      | `ring[i]` = `id` le32, `len` le32 |
//! | used  | 4 + 8 n      | `avail_event` (le16, EVENT_IDX)|
//!
//! The index, flag and event fields are accessed as `AtomicU16`: they are
//! the synchronisation points with the other process. Ring entries and
//! descriptors are plain volatile copies ordered by those atomics.

use std::sync::atomic::{AtomicU16, Ordering};

use crate::layout::{
    avail_ring_bytes, desc_table_bytes, is_valid_size, used_ring_bytes, QueueLayout,
};
use crate::mem::GuestMemory;
use crate::spec::{Descriptor, AVAIL_ALIGN, DESC_ALIGN, DESC_SIZE, USED_ALIGN};

/// Errors setting up or reading a queue's rings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The queue size is not a power of two in `1..=32768`.
    #[error("queue size {0} is not a power of two in 1..=32768")]
    InvalidSize(u16),
    /// A packed queue's size is not in `1..=32768`.
    #[error("packed queue size {0} is not in 1..=32768")]
    InvalidPackedSize(u16),
    /// A packed queue's starting position (vhost-user `SET_VRING_BASE`,
    /// position in bits 0–14) is not inside the ring.
    #[error("ring base {base:#x} is outside a packed ring of {size} descriptors")]
    InvalidBase {
        /// The base as given.
        base: u16,
        /// The queue size.
        size: u16,
    },
    /// A ring part is not aligned as the spec requires (in guest or in
    /// host address space).
    #[error("{part} ring at {addr:#x} is not {align}-byte aligned")]
    Misaligned {
        /// `"descriptor"`, `"available"`, `"used"`, or for a packed ring
        /// `"driver event"` or `"device event"`.
        part: &'static str,
        /// The offending address.
        addr: u64,
        /// Required alignment, bytes.
        align: u64,
    },
    /// A ring part is not entirely inside one memory region.
    #[error("{part} ring at {addr:#x} ({len} bytes) is not inside guest memory")]
    OutsideMemory {
        /// `"descriptor"`, `"available"`, `"used"`, or for a packed ring
        /// `"driver event"` or `"device event"`.
        part: &'static str,
        /// Its address.
        addr: u64,
        /// Its length, bytes.
        len: u64,
    },
    /// The driver's `avail.idx` is more than the queue size ahead of the
    /// device's position: the ring is corrupt (Linux vhost: "Guest moved
    /// avail index"); the queue should be treated as broken.
    #[error("avail.idx {avail_idx} is more than the queue size ahead of {last_avail}")]
    AvailIndexAhead {
        /// The `avail.idx` read.
        avail_idx: u16,
        /// The device's next available index.
        last_avail: u16,
    },
}

/// Host pointers to a validated queue. Only built by [`RingPtrs::new`],
/// which guarantees every accessor's offset is in bounds and aligned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingPtrs {
    pub(crate) desc: *mut u8,
    avail: *mut u8,
    used: *mut u8,
    pub(crate) size: u16,
}

pub(crate) fn check_part(
    mem: &GuestMemory,
    uva: bool,
    part: &'static str,
    addr: u64,
    len: u64,
    align: u64,
) -> Result<*mut u8, QueueError> {
    if addr % align != 0 {
        return Err(QueueError::Misaligned { part, addr, align });
    }
    let host = if uva {
        mem.translate_uva(addr, len)
    } else {
        mem.translate(addr, len)
    }
    .ok_or(QueueError::OutsideMemory { part, addr, len })?;
    // Atomics need host alignment too; mmap'd regions are page aligned so
    // this only fails for odd hand-built tables.
    if (host as u64) % align != 0 {
        return Err(QueueError::Misaligned {
            part,
            addr: host as u64,
            align,
        });
    }
    Ok(host)
}

impl RingPtrs {
    pub(crate) fn new(
        mem: &GuestMemory,
        layout: QueueLayout,
        uva: bool,
    ) -> Result<Self, QueueError> {
        let n = layout.size;
        if !is_valid_size(n) {
            return Err(QueueError::InvalidSize(n));
        }
        let desc = check_part(
            mem,
            uva,
            "descriptor",
            layout.desc,
            desc_table_bytes(n),
            DESC_ALIGN,
        )?;
        let avail = check_part(
            mem,
            uva,
            "available",
            layout.avail,
            avail_ring_bytes(n),
            AVAIL_ALIGN,
        )?;
        let used = check_part(
            mem,
            uva,
            "used",
            layout.used,
            used_ring_bytes(n),
            USED_ALIGN,
        )?;
        Ok(RingPtrs {
            desc,
            avail,
            used,
            size: n,
        })
    }

    #[inline]
    fn atomic(&self, p: *mut u8) -> &AtomicU16 {
        // SAFETY: callers pass an offset that `new` proved is inside a live
        // region and 2-byte aligned (parts are aligned to >= 2 in host space
        // and all u16 field offsets are even); `AtomicU16` has interior
        // mutability, so a shared reference to memory the other process
        // writes is sound as long as we only use atomic operations on it.
        // The memory outlives `&self` because the owning queue keeps a
        // `GuestMemory` clone.
        unsafe { AtomicU16::from_ptr(p.cast()) }
    }

    /// `avail.flags`.
    #[inline]
    pub(crate) fn avail_flags(&self) -> &AtomicU16 {
        self.atomic(self.avail)
    }

    /// `avail.idx`.
    #[inline]
    pub(crate) fn avail_idx(&self) -> &AtomicU16 {
        self.atomic(self.avail.wrapping_add(2))
    }

    /// `used_event` (end of the available ring).
    #[inline]
    pub(crate) fn used_event(&self) -> &AtomicU16 {
        self.atomic(self.avail.wrapping_add(4 + 2 * self.size as usize))
    }

    /// `used.flags`.
    #[inline]
    pub(crate) fn used_flags(&self) -> &AtomicU16 {
        self.atomic(self.used)
    }

    /// `used.idx`.
    #[inline]
    pub(crate) fn used_idx(&self) -> &AtomicU16 {
        self.atomic(self.used.wrapping_add(2))
    }

    /// `avail_event` (end of the used ring).
    #[inline]
    pub(crate) fn avail_event(&self) -> &AtomicU16 {
        self.atomic(self.used.wrapping_add(4 + 8 * self.size as usize))
    }

    /// `avail.ring[idx % size]`.
    #[inline]
    pub(crate) fn read_avail_entry(&self, idx: u16) -> u16 {
        let slot = (idx & (self.size - 1)) as usize;
        // SAFETY: slot < size, so 4 + 2*slot + 2 <= avail ring length
        // checked in `new`; 2-byte aligned. Volatile: read exactly once.
        u16::from_le(unsafe { self.avail.add(4 + 2 * slot).cast::<u16>().read_volatile() })
    }

    /// Writes `avail.ring[idx % size]`.
    #[inline]
    pub(crate) fn write_avail_entry(&self, idx: u16, head: u16) {
        let slot = (idx & (self.size - 1)) as usize;
        // SAFETY: as in `read_avail_entry`.
        unsafe {
            self.avail
                .add(4 + 2 * slot)
                .cast::<u16>()
                .write_volatile(head.to_le())
        }
    }

    /// `used.ring[idx % size]` as `(id, len)`.
    #[inline]
    pub(crate) fn read_used_entry(&self, idx: u16) -> (u32, u32) {
        let slot = (idx & (self.size - 1)) as usize;
        // SAFETY: slot < size, so the 8-byte element at 4 + 8*slot is inside
        // the used ring checked in `new`; both u32 halves are 4-aligned.
        unsafe {
            let p = self.used.add(4 + 8 * slot).cast::<u32>();
            (
                u32::from_le(p.read_volatile()),
                u32::from_le(p.add(1).read_volatile()),
            )
        }
    }

    /// Writes `used.ring[idx % size]`.
    #[inline]
    pub(crate) fn write_used_entry(&self, idx: u16, id: u32, len: u32) {
        let slot = (idx & (self.size - 1)) as usize;
        // SAFETY: as in `read_used_entry`.
        unsafe {
            let p = self.used.add(4 + 8 * slot).cast::<u32>();
            p.write_volatile(id.to_le());
            p.add(1).write_volatile(len.to_le());
        }
    }

    /// Asks the CPU to load the cache line of descriptor `i % size` (a
    /// hint: nothing is read into a register, nothing can fault).
    #[inline]
    pub(crate) fn prefetch_desc(&self, i: u16) {
        let i = i & (self.size - 1);
        crate::prefetch::prefetch(self.desc.wrapping_add(DESC_SIZE as usize * i as usize));
    }

    /// Descriptor `i` of the main table; `i` must be `< size`.
    #[inline]
    pub(crate) fn read_desc(&self, i: u16) -> Descriptor {
        debug_assert!(i < self.size);
        let i = i & (self.size - 1);
        // SAFETY: i < size and the table (16 * size bytes, 16-aligned) was
        // checked in `new`.
        unsafe { read_desc_at(self.desc.add(DESC_SIZE as usize * i as usize)) }
    }

    /// Writes descriptor `i` of the main table.
    #[inline]
    pub(crate) fn write_desc(&self, i: u16, d: Descriptor) {
        let i = i & (self.size - 1);
        // SAFETY: as in `read_desc`; the source is a local array.
        unsafe {
            write_desc_at(self.desc.add(DESC_SIZE as usize * i as usize), d);
        }
    }

    /// Zeroes all three parts (driver initialisation).
    pub(crate) fn zero(&self) {
        let n = self.size;
        // SAFETY: each range is exactly a part checked in `new`.
        unsafe {
            std::ptr::write_bytes(self.desc, 0, desc_table_bytes(n) as usize);
            std::ptr::write_bytes(self.avail, 0, avail_ring_bytes(n) as usize);
            std::ptr::write_bytes(self.used, 0, used_ring_bytes(n) as usize);
        }
    }

    /// Acquire load of `avail.idx`: after it, ring entries and descriptors
    /// the driver wrote before publishing are visible.
    #[inline]
    pub(crate) fn load_avail_idx(&self) -> u16 {
        u16::from_le(self.avail_idx().load(Ordering::Acquire))
    }

    /// Acquire load of `used.idx`.
    #[inline]
    pub(crate) fn load_used_idx(&self) -> u16 {
        u16::from_le(self.used_idx().load(Ordering::Acquire))
    }
}

/// Reads one 16-byte descriptor exactly once (volatile), so that the checks
/// done on the returned copy are the ones that hold (no double fetch).
///
/// # Safety
/// `p .. p + 16` must be valid for reads.
#[inline]
pub(crate) unsafe fn read_desc_at(p: *const u8) -> Descriptor {
    if (p as usize) % 8 == 0 {
        #[repr(C)]
        struct Raw {
            addr: u64,
            len: u32,
            flags: u16,
            next: u16,
        }
        // SAFETY: valid per the caller, aligned by the check above.
        let r = unsafe { p.cast::<Raw>().read_volatile() };
        Descriptor {
            addr: u64::from_le(r.addr),
            len: u32::from_le(r.len),
            flags: u16::from_le(r.flags),
            next: u16::from_le(r.next),
        }
    } else {
        // Indirect tables have no alignment requirement in the spec.
        // SAFETY: valid per the caller; `[u8; 16]` has alignment 1.
        Descriptor::from_bytes(unsafe { p.cast::<[u8; 16]>().read_volatile() })
    }
}

/// Writes one descriptor.
///
/// # Safety
/// `p .. p + 16` must be valid for writes.
#[inline]
pub(crate) unsafe fn write_desc_at(p: *mut u8, d: Descriptor) {
    // SAFETY: valid per the caller; `[u8; 16]` has alignment 1.
    unsafe { p.cast::<[u8; 16]>().write_volatile(d.to_bytes()) }
}
