//! Unchecked access to a ring's fields, for tests and fuzzers that need to
//! build rings a well-behaved driver never would (bad indices, loops,
//! nested indirect tables) or inspect what the device wrote.
//!
//! Everything here goes through the same bounds-checked pointers as the
//! queues: "unchecked" refers to the *contents*, never to memory safety.

use std::sync::atomic::Ordering;

use crate::layout::QueueLayout;
use crate::mem::GuestMemory;
use crate::ring::{QueueError, RingPtrs};
use crate::spec::Descriptor;

/// Raw view of one split ring in guest memory.
#[derive(Debug)]
pub struct RawRing {
    ring: RingPtrs,
    _mem: GuestMemory,
}

// SAFETY: as for the queues: the pointers target mappings kept alive by
// `_mem` and are only used for atomics and volatile copies.
unsafe impl Send for RawRing {}

impl RawRing {
    /// Validates `layout` (guest-physical) inside `mem`; does not modify
    /// the ring.
    pub fn new(mem: &GuestMemory, layout: QueueLayout) -> Result<Self, QueueError> {
        Ok(RawRing {
            ring: RingPtrs::new(mem, layout, false)?,
            _mem: mem.clone(),
        })
    }

    /// Queue size.
    pub fn size(&self) -> u16 {
        self.ring.size
    }

    /// Zeroes the descriptor table and both rings.
    pub fn zero(&self) {
        self.ring.zero()
    }

    /// Writes descriptor `i % size`.
    pub fn set_desc(&self, i: u16, d: Descriptor) {
        self.ring.write_desc(i, d)
    }

    /// Reads descriptor `i % size`.
    pub fn desc(&self, i: u16) -> Descriptor {
        self.ring.read_desc(i & (self.ring.size - 1))
    }

    /// Writes `head` into the next available slot and publishes it
    /// (Release store of `avail.idx + 1`).
    pub fn push_avail(&self, head: u16) {
        let idx = self.avail_idx();
        self.ring.write_avail_entry(idx, head);
        self.set_avail_idx(idx.wrapping_add(1));
    }

    /// Writes `avail.ring[idx % size]`.
    pub fn set_avail_entry(&self, idx: u16, head: u16) {
        self.ring.write_avail_entry(idx, head)
    }

    /// `avail.idx`.
    pub fn avail_idx(&self) -> u16 {
        self.ring.load_avail_idx()
    }

    /// Stores `avail.idx` (Release).
    pub fn set_avail_idx(&self, v: u16) {
        self.ring.avail_idx().store(v.to_le(), Ordering::Release)
    }

    /// `avail.flags`.
    pub fn avail_flags(&self) -> u16 {
        u16::from_le(self.ring.avail_flags().load(Ordering::Acquire))
    }

    /// Stores `avail.flags`.
    pub fn set_avail_flags(&self, v: u16) {
        self.ring.avail_flags().store(v.to_le(), Ordering::Release)
    }

    /// `used_event`.
    pub fn used_event(&self) -> u16 {
        u16::from_le(self.ring.used_event().load(Ordering::Acquire))
    }

    /// Stores `used_event`.
    pub fn set_used_event(&self, v: u16) {
        self.ring.used_event().store(v.to_le(), Ordering::Release)
    }

    /// `used.idx`.
    pub fn used_idx(&self) -> u16 {
        self.ring.load_used_idx()
    }

    /// Stores `used.idx` (Release).
    pub fn set_used_idx(&self, v: u16) {
        self.ring.used_idx().store(v.to_le(), Ordering::Release)
    }

    /// `used.flags`.
    pub fn used_flags(&self) -> u16 {
        u16::from_le(self.ring.used_flags().load(Ordering::Acquire))
    }

    /// `avail_event`.
    pub fn avail_event(&self) -> u16 {
        u16::from_le(self.ring.avail_event().load(Ordering::Acquire))
    }

    /// `used.ring[idx % size]` as `(id, len)`.
    pub fn used_entry(&self, idx: u16) -> (u32, u32) {
        self.ring.read_used_entry(idx)
    }
}
