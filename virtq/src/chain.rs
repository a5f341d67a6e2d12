//! A validated descriptor chain as host-memory segments, and the checks
//! that produce it.
//!
//! The walk reads every descriptor exactly once into a local copy, checks
//! that copy, and translates its buffer to a host pointer. What is rejected
//! (one [`ChainErrorKind`] each, so the daemon can count drops per reason):
//!
//! * the head or a `next` index outside the table,
//! * a buffer (or indirect table) not entirely inside one memory region,
//!   including `addr + len` overflow,
//! * a chain that visits more descriptors than the table holds (a loop),
//! * a device-readable descriptor after a device-writable one (spec 2.7.4.2:
//!   "the driver MUST place any device-writable descriptor elements after
//!   any device-readable descriptor elements"),
//! * indirect descriptors when `VIRTIO_F_INDIRECT_DESC` was not negotiated,
//!   `INDIRECT` together with `NEXT`, an indirect table whose length is 0 or
//!   not a multiple of 16, a table with more entries than the queue size
//!   (this crate's bound, from spec 2.7.5.3.1 "A driver MUST NOT create a
//!   descriptor chain longer than the Queue Size of the device"), and an
//!   `INDIRECT` flag inside a table (2.7.5.3.1: only one table per
//!   descriptor),
//! * total length over `u32::MAX`.
//!
//! Direction (TX wants only readable buffers, RX only writable) is the
//! caller's policy: see [`Chain::has_readable`] and [`Chain::has_writable`].

use std::fmt;

use crate::mem::GuestMemory;
use crate::prefetch::prefetch;
use crate::ring::{read_desc_at, RingPtrs};
use crate::spec::{Descriptor, DESC_SIZE};

/// Why a descriptor chain was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ChainErrorKind {
    /// `avail.idx` ran more than the queue size ahead of the device: the
    /// ring is corrupt and nothing was consumed. Treat the queue as broken.
    #[error("avail.idx is more than the queue size ahead")]
    AvailIndexAhead,
    /// The head index read from the available ring is `>= size`.
    #[error("head index out of range")]
    HeadOutOfRange,
    /// A `next` index is outside the descriptor table (or indirect table).
    #[error("next descriptor index out of range")]
    DescIndexOutOfRange,
    /// A buffer is not entirely inside one memory region.
    #[error("buffer address or length outside guest memory")]
    AddressOutOfRange,
    /// The chain visits more descriptors than the table holds.
    #[error("chain longer than the queue size (loop?)")]
    ChainTooLong,
    /// A device-readable descriptor follows a device-writable one.
    #[error("readable descriptor after a writable one")]
    ReadableAfterWritable,
    /// `INDIRECT` used without `VIRTIO_F_INDIRECT_DESC`.
    #[error("indirect descriptor but INDIRECT_DESC not negotiated")]
    IndirectNotNegotiated,
    /// `INDIRECT` and `NEXT` both set.
    #[error("descriptor has both INDIRECT and NEXT")]
    IndirectWithNext,
    /// Indirect table of length 0.
    #[error("indirect table is empty")]
    IndirectTableEmpty,
    /// Indirect table length not a multiple of 16.
    #[error("indirect table length is not a multiple of 16")]
    IndirectTableMisaligned,
    /// Indirect table with more entries than the queue size.
    #[error("indirect table has more entries than the queue size")]
    IndirectTableTooLarge,
    /// Indirect table not entirely inside one memory region.
    #[error("indirect table outside guest memory")]
    IndirectTableOutOfRange,
    /// `INDIRECT` flag inside an indirect table.
    #[error("nested indirect descriptor")]
    NestedIndirect,
    /// Sum of buffer lengths exceeds `u32::MAX`.
    #[error("total chain length overflows u32")]
    LengthOverflow,
}

impl ChainErrorKind {
    /// Every kind, in [`index`](Self::index) order: for per-reason counters.
    pub const ALL: [ChainErrorKind; 14] = [
        ChainErrorKind::AvailIndexAhead,
        ChainErrorKind::HeadOutOfRange,
        ChainErrorKind::DescIndexOutOfRange,
        ChainErrorKind::AddressOutOfRange,
        ChainErrorKind::ChainTooLong,
        ChainErrorKind::ReadableAfterWritable,
        ChainErrorKind::IndirectNotNegotiated,
        ChainErrorKind::IndirectWithNext,
        ChainErrorKind::IndirectTableEmpty,
        ChainErrorKind::IndirectTableMisaligned,
        ChainErrorKind::IndirectTableTooLarge,
        ChainErrorKind::IndirectTableOutOfRange,
        ChainErrorKind::NestedIndirect,
        ChainErrorKind::LengthOverflow,
    ];

    /// Dense index `0..ALL.len()`.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Short snake_case name for metric labels.
    pub fn name(self) -> &'static str {
        match self {
            ChainErrorKind::AvailIndexAhead => "avail_index_ahead",
            ChainErrorKind::HeadOutOfRange => "head_out_of_range",
            ChainErrorKind::DescIndexOutOfRange => "desc_index_out_of_range",
            ChainErrorKind::AddressOutOfRange => "address_out_of_range",
            ChainErrorKind::ChainTooLong => "chain_too_long",
            ChainErrorKind::ReadableAfterWritable => "readable_after_writable",
            ChainErrorKind::IndirectNotNegotiated => "indirect_not_negotiated",
            ChainErrorKind::IndirectWithNext => "indirect_with_next",
            ChainErrorKind::IndirectTableEmpty => "indirect_table_empty",
            ChainErrorKind::IndirectTableMisaligned => "indirect_table_misaligned",
            ChainErrorKind::IndirectTableTooLarge => "indirect_table_too_large",
            ChainErrorKind::IndirectTableOutOfRange => "indirect_table_out_of_range",
            ChainErrorKind::NestedIndirect => "nested_indirect",
            ChainErrorKind::LengthOverflow => "length_overflow",
        }
    }
}

/// A rejected chain: why, and which head to return to the driver.
///
/// When `head` is `Some`, the available entry was consumed and the caller
/// should hand the head back with `push_used(head, 0)` so the driver can
/// reuse its descriptors. When `None` (head index invalid, or the ring
/// index corrupt) there is nothing to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bad descriptor chain (head {head:?})")]
pub struct ChainError {
    /// The chain's head index, if it was a valid index.
    pub head: Option<u16>,
    /// What was wrong.
    #[source]
    pub kind: ChainErrorKind,
}

/// One buffer of a chain, translated to this process's address space.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Host address of the first byte; `[ptr, ptr + len)` lies inside one
    /// region of the [`GuestMemory`] the chain was popped with.
    pub ptr: *mut u8,
    /// Guest-physical address of the first byte.
    pub gpa: u64,
    /// Length, bytes.
    pub len: u32,
    /// `true` if device-writable (`VIRTQ_DESC_F_WRITE`).
    pub writable: bool,
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Segment {{ gpa: {:#x}, len: {}, {} }}",
            self.gpa,
            self.len,
            if self.writable { "w" } else { "r" }
        )
    }
}

/// A popped descriptor chain, reused from packet to packet.
///
/// The segment vector is allocated by [`Chain::with_capacity`] and only
/// grows if a chain is longer than that capacity (at most twice the queue
/// size, because indirect tables are capped at the queue size); pass the
/// queue size to never allocate on the data path.
///
/// The chain keeps a clone of the [`GuestMemory`] it was popped with, so
/// its host pointers stay valid as long as it holds them.
pub struct Chain {
    segs: Vec<Segment>,
    head: u16,
    readable: u32,
    writable: u32,
    total: u32,
    mem: Option<GuestMemory>,
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chain")
            .field("head", &self.head)
            .field("readable", &self.readable)
            .field("writable", &self.writable)
            .field("segs", &self.segs)
            .finish()
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::with_capacity(16)
    }
}

impl Chain {
    /// An empty chain with room for `n` segments.
    pub fn with_capacity(n: usize) -> Self {
        Chain {
            segs: Vec::with_capacity(n),
            head: 0,
            readable: 0,
            writable: 0,
            total: 0,
            mem: None,
        }
    }

    /// Head descriptor index: what `push_used` wants.
    pub fn head(&self) -> u16 {
        self.head
    }

    /// Total device-readable bytes.
    pub fn readable_len(&self) -> u32 {
        self.readable
    }

    /// Total device-writable bytes.
    pub fn writable_len(&self) -> u32 {
        self.writable
    }

    /// `true` if any segment is device-readable (even of length 0).
    pub fn has_readable(&self) -> bool {
        self.segs.first().is_some_and(|s| !s.writable)
    }

    /// `true` if any segment is device-writable (even of length 0).
    pub fn has_writable(&self) -> bool {
        self.segs.last().is_some_and(|s| s.writable)
    }

    /// Number of segments.
    pub fn num_segments(&self) -> usize {
        self.segs.len()
    }

    /// The segments in chain order: readable ones first.
    pub fn segments(&self) -> impl Iterator<Item = Segment> + '_ {
        self.segs.iter().copied()
    }

    /// Copies readable bytes starting at byte offset `skip` (counted over
    /// the readable segments) into `dst`; returns the bytes copied.
    pub fn read_into(&self, skip: usize, dst: &mut [u8]) -> usize {
        let mut off = skip;
        let mut done = 0;
        for s in self.segs.iter().take_while(|s| !s.writable) {
            if done == dst.len() {
                break;
            }
            let l = s.len as usize;
            if off >= l {
                off -= l;
                continue;
            }
            let n = (l - off).min(dst.len() - done);
            // SAFETY: `[s.ptr, s.ptr + l)` is inside a region kept alive by
            // `self.mem` (checked when the segment was pushed) and
            // `off + n <= l`; `dst` is host memory we borrow mutably, so the
            // ranges do not overlap. A raw copy never forms a reference to
            // guest memory.
            unsafe { std::ptr::copy_nonoverlapping(s.ptr.add(off), dst.as_mut_ptr().add(done), n) };
            done += n;
            off = 0;
        }
        done
    }

    /// Asks the CPU to start loading readable bytes `skip ..` (the first two
    /// cache lines of them, within their segment) into the cache, so that
    /// a copy that comes later does not wait for memory. A hint only: it
    /// reads nothing and changes nothing the program can see.
    #[inline]
    pub fn prefetch_readable(&self, skip: usize) {
        let mut off = skip;
        for s in self.segs.iter().take_while(|s| !s.writable) {
            let l = s.len as usize;
            if off < l {
                prefetch(s.ptr.wrapping_add(off));
                if off + 64 < l {
                    prefetch(s.ptr.wrapping_add(off + 64));
                }
                return;
            }
            off -= l;
        }
    }

    /// Copies `src` into the writable segments starting at byte offset
    /// `skip` (counted over the writable segments); returns bytes copied.
    pub fn write_from(&mut self, skip: usize, src: &[u8]) -> usize {
        let mut off = skip;
        let mut done = 0;
        for s in self.segs.iter().filter(|s| s.writable) {
            if done == src.len() {
                break;
            }
            let l = s.len as usize;
            if off >= l {
                off -= l;
                continue;
            }
            let n = (l - off).min(src.len() - done);
            // SAFETY: as in `read_into`, with the direction reversed.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(done), s.ptr.add(off), n) };
            done += n;
            off = 0;
        }
        done
    }

    /// Copies this chain's readable bytes from offset `skip` into `dst`'s
    /// writable bytes from offset `dst_skip`, guest to guest without a
    /// bounce buffer (the L2 switch's VM-to-VM path). Returns bytes copied.
    pub fn copy_to_chain(&self, skip: usize, dst: &mut Chain, dst_skip: usize) -> usize {
        let mut copied = 0;
        let mut src_iter = self.segs.iter().take_while(|s| !s.writable);
        let mut dst_iter = dst.segs.iter().filter(|s| s.writable);
        // Position (segment, offset) on both sides.
        let mut cur_src = None;
        let mut off = skip;
        for s in src_iter.by_ref() {
            if off < s.len as usize {
                cur_src = Some((*s, off));
                break;
            }
            off -= s.len as usize;
        }
        let mut cur_dst = None;
        let mut doff = dst_skip;
        for d in dst_iter.by_ref() {
            if doff < d.len as usize {
                cur_dst = Some((*d, doff));
                break;
            }
            doff -= d.len as usize;
        }
        while let (Some((s, so)), Some((d, dof))) = (cur_src, cur_dst) {
            let n = (s.len as usize - so).min(d.len as usize - dof);
            // SAFETY: both ranges are inside live regions (checked at push);
            // they may overlap if the guest pointed both buffers at the same
            // memory, so use `copy` (memmove), not `copy_nonoverlapping`.
            unsafe { std::ptr::copy(s.ptr.add(so), d.ptr.add(dof), n) };
            copied += n;
            cur_src = if so + n < s.len as usize {
                Some((s, so + n))
            } else {
                src_iter.by_ref().find(|s| s.len > 0).map(|s| (*s, 0))
            };
            cur_dst = if dof + n < d.len as usize {
                Some((d, dof + n))
            } else {
                dst_iter.by_ref().find(|d| d.len > 0).map(|d| (*d, 0))
            };
        }
        copied
    }

    /// Empties the chain for a new walk that will report `head`.
    pub(crate) fn reset(&mut self, head: u16, mem: &GuestMemory) {
        self.segs.clear();
        self.head = head;
        self.readable = 0;
        self.writable = 0;
        self.total = 0;
        if !self.mem.as_ref().is_some_and(|m| m.ptr_eq(mem)) {
            self.mem = Some(mem.clone());
        }
    }

    /// Checks and translates one descriptor's buffer and appends it.
    pub(crate) fn push(&mut self, mem: &GuestMemory, d: &Descriptor) -> Result<(), ChainErrorKind> {
        let ptr = mem
            .translate(d.addr, u64::from(d.len))
            .ok_or(ChainErrorKind::AddressOutOfRange)?;
        let writable = d.is_write_only();
        self.total = self
            .total
            .checked_add(d.len)
            .ok_or(ChainErrorKind::LengthOverflow)?;
        if writable {
            self.writable += d.len;
        } else {
            if self.has_writable() {
                return Err(ChainErrorKind::ReadableAfterWritable);
            }
            self.readable += d.len;
        }
        self.segs.push(Segment {
            ptr,
            gpa: d.addr,
            len: d.len,
            writable,
        });
        Ok(())
    }

    /// Walks the chain starting at `head` (already checked `< size`).
    pub(crate) fn walk(
        &mut self,
        mem: &GuestMemory,
        ring: &RingPtrs,
        head: u16,
        indirect_ok: bool,
    ) -> Result<(), ChainErrorKind> {
        self.reset(head, mem);
        let size = ring.size;
        let mut idx = head;
        let mut visited: u32 = 0;
        loop {
            visited += 1;
            if visited > u32::from(size) {
                return Err(ChainErrorKind::ChainTooLong);
            }
            let d = ring.read_desc(idx);
            if d.is_indirect() {
                if !indirect_ok {
                    return Err(ChainErrorKind::IndirectNotNegotiated);
                }
                if d.has_next() {
                    return Err(ChainErrorKind::IndirectWithNext);
                }
                // INDIRECT without NEXT ends the main chain (spec 2.7.5.3.1;
                // the WRITE flag of this descriptor is ignored per 2.7.5.3.2).
                return self.walk_indirect(mem, &d, size);
            }
            self.push(mem, &d)?;
            if !d.has_next() {
                return Ok(());
            }
            idx = d.next;
            if idx >= size {
                return Err(ChainErrorKind::DescIndexOutOfRange);
            }
        }
    }

    /// Sets the id [`head`](Self::head) reports: the packed ring learns a
    /// buffer's id only from its last descriptor.
    pub(crate) fn set_head(&mut self, head: u16) {
        self.head = head;
    }

    fn walk_indirect(
        &mut self,
        mem: &GuestMemory,
        d: &Descriptor,
        size: u16,
    ) -> Result<(), ChainErrorKind> {
        if d.len == 0 {
            return Err(ChainErrorKind::IndirectTableEmpty);
        }
        if u64::from(d.len) % DESC_SIZE != 0 {
            return Err(ChainErrorKind::IndirectTableMisaligned);
        }
        let n = u64::from(d.len) / DESC_SIZE;
        if n > u64::from(size) {
            return Err(ChainErrorKind::IndirectTableTooLarge);
        }
        let n = n as u16;
        let table = mem
            .translate(d.addr, u64::from(d.len))
            .ok_or(ChainErrorKind::IndirectTableOutOfRange)?;
        let mut i: u16 = 0;
        let mut visited: u16 = 0;
        loop {
            visited += 1;
            if visited > n {
                return Err(ChainErrorKind::ChainTooLong);
            }
            // SAFETY: i < n and the table [table, table + 16 n) is inside a
            // live region (translate above).
            let e = unsafe { read_desc_at(table.add(DESC_SIZE as usize * i as usize)) };
            if e.is_indirect() {
                return Err(ChainErrorKind::NestedIndirect);
            }
            self.push(mem, &e)?;
            if !e.has_next() {
                return Ok(());
            }
            i = e.next;
            if i >= n {
                return Err(ChainErrorKind::DescIndexOutOfRange);
            }
        }
    }
}

// SAFETY: the raw pointers in the segments point into mappings kept alive by
// `self.mem`; moving the chain to another thread moves that clone with it.
unsafe impl Send for Chain {}
// SAFETY: `&Chain` only allows reads of guest memory through raw copies.
unsafe impl Sync for Chain {}
// SAFETY: a `Segment` is a description of a range, like `Region`.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}
