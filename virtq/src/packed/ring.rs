//! Host pointers to the parts of one packed virtqueue, translated and
//! checked once, and the field accessors both sides use.
//!
//! Offsets, for descriptor `i` of the ring: `addr` at `16 i`, `len` at
//! `16 i + 8`, `id` at `16 i + 12`, `flags` at `16 i + 14`. The flag words
//! and the two event suppression words are accessed as atomics (they are
//! the synchronisation points); the rest by volatile copies.

use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

use super::desc::{EventSuppression, PackedDescriptor};
use super::layout::{
    is_valid_packed_size, packed_ring_bytes, PackedLayout, EVENT_ALIGN, PACKED_DESC_ALIGN,
};
use crate::mem::GuestMemory;
use crate::ring::{check_part, QueueError};
use crate::spec::DESC_SIZE;

/// Host pointers to a validated packed queue. Only built by
/// [`PackedRingPtrs::new`], which guarantees that every accessor's offset
/// is in bounds and aligned for indices `< size`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedRingPtrs {
    desc: *mut u8,
    driver_event: *mut u8,
    device_event: *mut u8,
    pub(crate) size: u16,
}

impl PackedRingPtrs {
    pub(crate) fn new(
        mem: &GuestMemory,
        layout: PackedLayout,
        uva: bool,
    ) -> Result<Self, QueueError> {
        let n = layout.size;
        if !is_valid_packed_size(n) {
            return Err(QueueError::InvalidPackedSize(n));
        }
        let desc = check_part(
            mem,
            uva,
            "descriptor",
            layout.desc,
            packed_ring_bytes(n),
            PACKED_DESC_ALIGN,
        )?;
        let driver_event = check_part(
            mem,
            uva,
            "driver event",
            layout.driver_event,
            EVENT_ALIGN,
            EVENT_ALIGN,
        )?;
        let device_event = check_part(
            mem,
            uva,
            "device event",
            layout.device_event,
            EVENT_ALIGN,
            EVENT_ALIGN,
        )?;
        Ok(PackedRingPtrs {
            desc,
            driver_event,
            device_event,
            size: n,
        })
    }

    /// Host address of descriptor `i`, reduced into the ring so that a
    /// wrong index can never leave it.
    #[inline]
    fn slot(&self, i: u16) -> *mut u8 {
        debug_assert!(i < self.size);
        let i = if i < self.size { i } else { i % self.size };
        self.desc.wrapping_add(DESC_SIZE as usize * usize::from(i))
    }

    /// The flag word of descriptor `i`.
    #[inline]
    pub(crate) fn flags(&self, i: u16) -> &AtomicU16 {
        // SAFETY: `slot` is inside the ring checked in `new` (16 * size
        // bytes, 16-aligned in host space), so `slot + 14` is a 2-aligned
        // u16 inside it. `AtomicU16` has interior mutability, so a shared
        // reference to memory the other side writes is sound while we only
        // use atomic operations on it; the memory outlives `&self` because
        // the owning queue keeps a `GuestMemory` clone.
        unsafe { AtomicU16::from_ptr(self.slot(i).wrapping_add(14).cast()) }
    }

    /// Acquire load of descriptor `i`'s flags: after it, what the writer
    /// stored before its Release store of these flags is visible.
    #[inline]
    pub(crate) fn load_flags(&self, i: u16) -> u16 {
        u16::from_le(self.flags(i).load(Ordering::Acquire))
    }

    /// Descriptor `i`, read once (volatile).
    #[inline]
    pub(crate) fn read_desc(&self, i: u16) -> PackedDescriptor {
        // SAFETY: the 16 bytes at `slot(i)` are inside the checked ring.
        unsafe { read_packed_desc_at(self.slot(i)) }
    }

    /// Writes descriptor `i` whole (flags included): for descriptors that
    /// are not a buffer's first, whose flags nobody acts on alone, and for
    /// tests.
    #[inline]
    pub(crate) fn write_desc(&self, i: u16, d: PackedDescriptor) {
        // SAFETY: as in `read_desc`; the source is a local array.
        unsafe { write_packed_desc_at(self.slot(i), d) }
    }

    /// Writes `addr`, `len` and `id` of descriptor `i`, not its flags,
    /// which the caller stores afterwards to publish it.
    #[inline]
    pub(crate) fn write_body(&self, i: u16, addr: u64, len: u32, id: u16) {
        let p = self.slot(i);
        // SAFETY: the slot is inside the ring and 16-aligned, so the u64 at
        // 0, u32 at 8 and u16 at 12 are aligned and in bounds.
        unsafe {
            p.cast::<u64>().write_volatile(addr.to_le());
            p.add(8).cast::<u32>().write_volatile(len.to_le());
            p.add(12).cast::<u16>().write_volatile(id.to_le());
        }
    }

    /// Writes `id` and `len` of a used descriptor at `i` (not its flags).
    #[inline]
    pub(crate) fn write_used(&self, i: u16, id: u16, len: u32) {
        let p = self.slot(i);
        // SAFETY: as in `write_body`.
        unsafe {
            p.add(8).cast::<u32>().write_volatile(len.to_le());
            p.add(12).cast::<u16>().write_volatile(id.to_le());
        }
    }

    fn event(&self, p: *mut u8) -> &AtomicU32 {
        // SAFETY: `p` is one of the two event structures, each checked in
        // `new` to be 4 bytes inside one region and 4-aligned in host
        // space; atomics only, as for `flags`.
        unsafe { AtomicU32::from_ptr(p.cast()) }
    }

    /// The driver event suppression structure (device reads it), one
    /// Relaxed load: callers order it with fences.
    #[inline]
    pub(crate) fn driver_event(&self) -> EventSuppression {
        EventSuppression::from_word(u32::from_le(
            self.event(self.driver_event).load(Ordering::Relaxed),
        ))
    }

    /// Stores the driver event suppression structure (Relaxed).
    #[inline]
    pub(crate) fn set_driver_event(&self, e: EventSuppression) {
        self.event(self.driver_event)
            .store(e.to_word().to_le(), Ordering::Relaxed)
    }

    /// The device event suppression structure (driver reads it).
    #[inline]
    pub(crate) fn device_event(&self) -> EventSuppression {
        EventSuppression::from_word(u32::from_le(
            self.event(self.device_event).load(Ordering::Relaxed),
        ))
    }

    /// Stores the device event suppression structure (Relaxed).
    #[inline]
    pub(crate) fn set_device_event(&self, e: EventSuppression) {
        self.event(self.device_event)
            .store(e.to_word().to_le(), Ordering::Relaxed)
    }

    /// Zeroes the ring and both event structures (driver initialisation):
    /// a zero flag word is neither available nor used for wrap counter 1.
    pub(crate) fn zero(&self) {
        // SAFETY: each range is exactly a part checked in `new`.
        unsafe {
            std::ptr::write_bytes(self.desc, 0, packed_ring_bytes(self.size) as usize);
            std::ptr::write_bytes(self.driver_event, 0, EVENT_ALIGN as usize);
            std::ptr::write_bytes(self.device_event, 0, EVENT_ALIGN as usize);
        }
    }
}

/// Reads one 16-byte packed descriptor exactly once (volatile), so the
/// checks done on the copy are the ones that hold.
///
/// # Safety
/// `p .. p + 16` must be valid for reads.
#[inline]
pub(crate) unsafe fn read_packed_desc_at(p: *const u8) -> PackedDescriptor {
    if (p as usize) % 8 == 0 {
        #[repr(C)]
        struct Raw {
            addr: u64,
            len: u32,
            id: u16,
            flags: u16,
        }
        // SAFETY: valid per the caller, aligned by the check above.
        let r = unsafe { p.cast::<Raw>().read_volatile() };
        PackedDescriptor {
            addr: u64::from_le(r.addr),
            len: u32::from_le(r.len),
            id: u16::from_le(r.id),
            flags: u16::from_le(r.flags),
        }
    } else {
        // Indirect tables need no alignment.
        // SAFETY: valid per the caller; `[u8; 16]` has alignment 1.
        PackedDescriptor::from_bytes(unsafe { p.cast::<[u8; 16]>().read_volatile() })
    }
}

/// Writes one packed descriptor.
///
/// # Safety
/// `p .. p + 16` must be valid for writes.
#[inline]
pub(crate) unsafe fn write_packed_desc_at(p: *mut u8, d: PackedDescriptor) {
    // SAFETY: valid per the caller; `[u8; 16]` has alignment 1.
    unsafe { p.cast::<[u8; 16]>().write_volatile(d.to_bytes()) }
}
