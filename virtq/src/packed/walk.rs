//! The packed ring's descriptor walk into a [`Chain`]: the split walk's
//! checks ([`crate::chain`]) over consecutive ring descriptors.
//!
//! Unlike the split ring, a packed buffer's id is in its *last*
//! descriptor and its descriptors sit one after the other in the ring, so
//! a bad descriptor does not end the walk: it goes on, checking nothing
//! more, to the end of the buffer (the first descriptor without `NEXT`),
//! so that the buffer can still be returned by id and the device's
//! position stays where the driver's is.
//!
//! Only the first descriptor's `AVAIL`/`USED` bits are checked: the driver
//! publishes a whole buffer with that one flag store, so the descriptors
//! after it are read under its Acquire, as DPDK and QEMU read them. A
//! driver that chains into descriptors it never made available only
//! hands the device its own stale buffers, which the checks still cover.

use super::desc::PackedDescriptor;
use super::pos::RingPos;
use super::ring::{read_packed_desc_at, PackedRingPtrs};
use crate::chain::{Chain, ChainErrorKind};
use crate::mem::GuestMemory;
use crate::spec::DESC_SIZE;

/// What one walk consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walked {
    /// The buffer id (from the last descriptor read).
    pub(crate) id: u16,
    /// Ring descriptors consumed, `1..=limit`.
    pub(crate) descs: u16,
    /// The first check that failed, if any.
    pub(crate) error: Option<ChainErrorKind>,
}

impl Chain {
    /// Walks the buffer whose first descriptor is at `start` and has flags
    /// `first_flags` (already Acquire-loaded and seen available), reading
    /// at most `limit >= 1` ring descriptors (those the driver can have
    /// made available) and at most `size` from one indirect table.
    ///
    /// Inlined into its one caller, the packed device's `pop`, whose call
    /// into it otherwise costs a register save and restore a buffer.
    #[inline(always)]
    pub(crate) fn walk_packed(
        &mut self,
        mem: &GuestMemory,
        ring: &PackedRingPtrs,
        start: RingPos,
        first_flags: u16,
        limit: u16,
        indirect_ok: bool,
    ) -> Walked {
        debug_assert!(limit >= 1);
        self.reset(0, mem);
        let mut pos = start;
        let mut descs: u16 = 0;
        let mut error = None;
        let mut id;
        loop {
            let mut d = ring.read_desc(pos.idx);
            if descs == 0 {
                // The flags the availability check saw, not a second read.
                d.flags = first_flags;
            }
            descs += 1;
            pos = pos.next(ring.size);
            id = d.id;
            if error.is_none() {
                error = self.take(mem, &d, indirect_ok, ring.size).err();
            }
            if !d.has_next() {
                break;
            }
            if descs >= limit {
                error.get_or_insert(ChainErrorKind::ChainTooLong);
                break;
            }
        }
        self.set_head(id);
        Walked { id, descs, error }
    }

    /// Checks and appends one ring descriptor's buffer or indirect table.
    fn take(
        &mut self,
        mem: &GuestMemory,
        d: &PackedDescriptor,
        indirect_ok: bool,
        size: u16,
    ) -> Result<(), ChainErrorKind> {
        if !d.is_indirect() {
            return self.push(mem, &d.as_buffer());
        }
        if !indirect_ok {
            return Err(ChainErrorKind::IndirectNotNegotiated);
        }
        if d.has_next() {
            return Err(ChainErrorKind::IndirectWithNext);
        }
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
        let table = mem
            .translate(d.addr, u64::from(d.len))
            .ok_or(ChainErrorKind::IndirectTableOutOfRange)?;
        // Spec 2.8.7: the table's entries follow one another; `WRITE` is
        // their only meaningful flag (`NEXT` and the id are ignored), and
        // `INDIRECT` is forbidden inside (rejected, as on the split ring).
        for i in 0..n as usize {
            // SAFETY: i < n and [table, table + 16 n) is inside a live
            // region (translate above).
            let e = unsafe { read_packed_desc_at(table.add(DESC_SIZE as usize * i)) };
            if e.is_indirect() {
                return Err(ChainErrorKind::NestedIndirect);
            }
            self.push(mem, &e.as_buffer())?;
        }
        Ok(())
    }
}
