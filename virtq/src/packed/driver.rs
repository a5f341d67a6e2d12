//! Driver (guest) side of a packed virtqueue, modelled on Linux's
//! `drivers/virtio/virtio_ring.c` (packed): for the synthetic guest, the
//! tests, the fuzzers and the benchmarks.
//!
//! Buffer ids come from a FIFO free list of `0..size`; descriptors are
//! filled in ring order. Buffers are added with
//! [`PackedDriverQueue::add`], made visible in bulk by
//! [`PackedDriverQueue::publish`] (one Release fence, then each buffer's
//! first flag word, the batch's first last), and the device is kicked
//! only if [`PackedDriverQueue::kick_prepare`] says so.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

use super::desc::{
    avail_bits, is_used, used_bits, EventSuppression, PackedDescriptor, RING_EVENT_FLAGS_DESC,
    RING_EVENT_FLAGS_DISABLE, RING_EVENT_FLAGS_ENABLE,
};
use super::layout::PackedLayout;
use super::pos::RingPos;
use super::ring::{write_packed_desc_at, PackedRingPtrs};
use crate::driver::{DriverError, Seg};
use crate::event_idx::vring_need_event;
use crate::features::RingFeatures;
use crate::mem::GuestMemory;
use crate::ring::QueueError;
use crate::spec::{DESC_SIZE, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};

#[derive(Clone, Copy, Debug, Default)]
struct IdState {
    /// Ring descriptors the buffer took (0: id not in flight).
    descs: u16,
    /// Sum of writable lengths, bytes: reported for IN_ORDER buffers a
    /// later batch descriptor covered (Linux's convention).
    in_len: u32,
}

/// Descriptors from `from` forward to `to` in a ring of `size`, counting
/// over the two-lap cycle the wrap counter gives positions.
fn ahead(from: RingPos, to: RingPos, size: u16) -> u32 {
    let lin = |p: RingPos| u32::from(p.idx) + if p.wrap { 0 } else { u32::from(size) };
    let cycle = 2 * u32::from(size);
    (lin(to) + cycle - lin(from) % cycle) % cycle
}

/// The driver's view of one packed virtqueue.
#[derive(Debug)]
pub struct PackedDriverQueue {
    ring: PackedRingPtrs,
    mem: GuestMemory,
    layout: PackedLayout,
    features: RingFeatures,
    /// Next ring descriptor to fill, with the driver's avail wrap counter.
    next_avail: RingPos,
    /// `next_avail` at the last publish.
    published: RingPos,
    /// Free buffer ids, used front first, freed to the back.
    free_ids: VecDeque<u16>,
    ids: Vec<IdState>,
    /// Ring descriptors not in flight.
    num_free: u16,
    /// First descriptors of buffers added but not published: ring index
    /// and the flags that publish them.
    unpublished: Vec<(u16, u16)>,
    /// Ring descriptors of the unpublished buffers.
    unpublished_descs: u32,
    /// Ring descriptors published since the last `kick_prepare`.
    published_since_kick: u32,
    /// Ids in the order they were added (IN_ORDER only).
    in_order: VecDeque<u16>,
    /// Next used descriptor to read, with the driver's used wrap counter.
    last_used: RingPos,
    /// Pending IN_ORDER batch descriptor `(id, len)`.
    batch_last: Option<(u16, u32)>,
    /// Callbacks disabled (driver event `DISABLE`).
    cb_disabled: bool,
    /// With EVENT_IDX and callbacks on: the position in the driver event
    /// structure.
    event_at: RingPos,
    /// Used descriptors naming no buffer in flight (a device bug): skipped.
    bad_used: u64,
}

// SAFETY: the ring pointers point into mappings kept alive by `mem`;
// accesses are atomics or volatile raw copies, valid from any thread.
unsafe impl Send for PackedDriverQueue {}

impl PackedDriverQueue {
    /// Validates `layout` (guest-physical addresses) inside `mem` and
    /// initialises the ring at position 0, wrap counter 1. Callbacks start
    /// enabled.
    pub fn new(
        mem: &GuestMemory,
        layout: PackedLayout,
        features: RingFeatures,
    ) -> Result<Self, QueueError> {
        Self::new_at(mem, layout, features, RingPos::default().to_u16())
    }

    /// Like [`new`](Self::new) but starts both positions at `start`
    /// (position in bits 0–14, wrap counter in bit 15, as the device's
    /// `next_avail`), marking the ring as a previous lap left it: lets
    /// tests start mid-ring and on either wrap counter.
    pub fn new_at(
        mem: &GuestMemory,
        layout: PackedLayout,
        features: RingFeatures,
        start: u16,
    ) -> Result<Self, QueueError> {
        let ring = PackedRingPtrs::new(mem, layout, false)?;
        let n = layout.size;
        let start = RingPos::from_u16(start);
        if start.idx >= n {
            return Err(QueueError::InvalidBase {
                base: start.to_u16(),
                size: n,
            });
        }
        ring.zero();
        // Slots before `start` were used in this lap, the others in the
        // previous one: none looks available or used to either side.
        for i in 0..n {
            let wrap = if i < start.idx {
                start.wrap
            } else {
                !start.wrap
            };
            ring.flags(i)
                .store(used_bits(wrap).to_le(), Ordering::Relaxed);
        }
        let mut q = PackedDriverQueue {
            ring,
            mem: mem.clone(),
            layout,
            features,
            next_avail: start,
            published: start,
            free_ids: (0..n).collect(),
            ids: vec![IdState::default(); usize::from(n)],
            num_free: n,
            unpublished: Vec::new(),
            unpublished_descs: 0,
            published_since_kick: 0,
            in_order: VecDeque::new(),
            last_used: start,
            batch_last: None,
            cb_disabled: false,
            event_at: start,
            bad_used: 0,
        };
        q.write_cb_state(start);
        fence(Ordering::Release);
        Ok(q)
    }

    /// Free ring descriptors.
    pub fn num_free(&self) -> u16 {
        self.num_free
    }

    /// Buffers added and not yet returned by `pop_used`.
    pub fn outstanding(&self) -> u16 {
        self.ring.size - self.free_ids.len() as u16
    }

    /// Used descriptors naming no buffer in flight (a device bug); skipped.
    pub fn bad_used_entries(&self) -> u64 {
        self.bad_used
    }

    /// The ring layout.
    pub fn layout(&self) -> PackedLayout {
        self.layout
    }

    /// Negotiated features.
    pub fn features(&self) -> RingFeatures {
        self.features
    }

    /// The memory the ring lives in.
    pub fn memory(&self) -> &GuestMemory {
        &self.mem
    }

    /// Next ring descriptor to fill (bits 0–14) and wrap counter (bit 15).
    pub fn avail_idx(&self) -> u16 {
        self.next_avail.to_u16()
    }

    /// Next used descriptor to read, in the same form.
    pub fn last_used(&self) -> u16 {
        self.last_used.to_u16()
    }

    fn check_order(segs: &[Seg]) -> Result<u32, DriverError> {
        if segs.is_empty() {
            return Err(DriverError::EmptyChain);
        }
        let mut seen_writable = false;
        let mut in_len = 0u32;
        for s in segs {
            if s.writable {
                seen_writable = true;
                in_len = in_len.saturating_add(s.len);
            } else if seen_writable {
                return Err(DriverError::ReadableAfterWritable);
            }
        }
        Ok(in_len)
    }

    fn take_id(&mut self, descs: usize) -> Result<u16, DriverError> {
        if descs > usize::from(self.num_free) || self.free_ids.is_empty() {
            return Err(DriverError::NoSpace {
                needed: descs,
                free: self.num_free,
            });
        }
        Ok(self.free_ids.pop_front().unwrap_or_default())
    }

    /// Adds a buffer as consecutive ring descriptors linked by `NEXT`, the
    /// id in each (not yet visible to the device: see
    /// [`publish`](Self::publish)). Readable segments must come first.
    /// Returns the buffer id.
    pub fn add(&mut self, segs: &[Seg]) -> Result<u16, DriverError> {
        let in_len = Self::check_order(segs)?;
        let id = self.take_id(segs.len())?;
        let mut pos = self.next_avail;
        for (i, s) in segs.iter().enumerate() {
            let mut flags = avail_bits(pos.wrap);
            if i + 1 < segs.len() {
                flags |= VIRTQ_DESC_F_NEXT;
            }
            if s.writable {
                flags |= VIRTQ_DESC_F_WRITE;
            }
            if i == 0 {
                self.ring.write_body(pos.idx, s.gpa, s.len, id);
                self.unpublished.push((pos.idx, flags));
            } else {
                self.ring.write_desc(
                    pos.idx,
                    PackedDescriptor {
                        addr: s.gpa,
                        len: s.len,
                        id,
                        flags,
                    },
                );
            }
            pos = pos.advance(1, self.ring.size);
        }
        self.made_available(id, segs.len() as u16, in_len, pos);
        Ok(id)
    }

    /// Adds a buffer as one ring descriptor pointing to an indirect table
    /// that this call writes at `table_gpa` (`16 * segs.len()` bytes, which
    /// the caller keeps reserved until the buffer is used).
    pub fn add_indirect(&mut self, segs: &[Seg], table_gpa: u64) -> Result<u16, DriverError> {
        if !self.features.indirect {
            return Err(DriverError::IndirectNotNegotiated);
        }
        let in_len = Self::check_order(segs)?;
        if segs.len() > usize::from(self.ring.size) {
            return Err(DriverError::TooManySegments(segs.len()));
        }
        let bytes = DESC_SIZE * segs.len() as u64;
        let table = self
            .mem
            .translate(table_gpa, bytes)
            .ok_or(DriverError::TableOutsideMemory(table_gpa))?;
        let id = self.take_id(1)?;
        for (i, s) in segs.iter().enumerate() {
            // Spec 2.8.7: WRITE is the only flag inside a table.
            let d = PackedDescriptor {
                addr: s.gpa,
                len: s.len,
                id: 0,
                flags: if s.writable { VIRTQ_DESC_F_WRITE } else { 0 },
            };
            // SAFETY: entry i lies inside [table, table + bytes), which
            // `translate` checked is inside a live region.
            unsafe { write_packed_desc_at(table.add(DESC_SIZE as usize * i), d) };
        }
        let pos = self.next_avail;
        self.ring.write_body(pos.idx, table_gpa, bytes as u32, id);
        self.unpublished
            .push((pos.idx, VIRTQ_DESC_F_INDIRECT | avail_bits(pos.wrap)));
        self.made_available(id, 1, in_len, pos.advance(1, self.ring.size));
        Ok(id)
    }

    fn made_available(&mut self, id: u16, descs: u16, in_len: u32, next: RingPos) {
        self.ids[usize::from(id)] = IdState { descs, in_len };
        self.num_free -= descs;
        self.unpublished_descs += u32::from(descs);
        self.next_avail = next;
        if self.features.in_order {
            self.in_order.push_back(id);
        }
    }

    /// Makes everything added since the last publish visible to the
    /// device: one Release fence, then each buffer's first flag word, the
    /// first buffer's last.
    pub fn publish(&mut self) {
        if self.unpublished.is_empty() {
            return;
        }
        fence(Ordering::Release);
        for &(i, f) in self.unpublished.iter().rev() {
            self.ring.flags(i).store(f.to_le(), Ordering::Relaxed);
        }
        self.unpublished.clear();
        self.published = self.next_avail;
        self.published_since_kick += std::mem::take(&mut self.unpublished_descs);
    }

    /// Whether to kick the device for what was published since the last
    /// `kick_prepare` (Linux `virtqueue_kick_prepare_packed`): SeqCst fence,
    /// then the device event structure: `DISABLE` → no; `DESC` with
    /// EVENT_IDX → whether the published descriptors passed its position;
    /// otherwise yes. `false` if nothing was published since.
    pub fn kick_prepare(&mut self) -> bool {
        fence(Ordering::SeqCst);
        let added = std::mem::take(&mut self.published_since_kick);
        if added == 0 {
            return false;
        }
        let e = self.ring.device_event();
        match e.mode() {
            RING_EVENT_FLAGS_DISABLE => false,
            RING_EVENT_FLAGS_DESC if self.features.event_idx => {
                let size = self.ring.size;
                if added >= u32::from(size) {
                    return true;
                }
                let new = self.published.idx;
                let old = new.wrapping_sub(added as u16);
                let event = RingPos::from_u16(e.off_wrap).on_line(self.published.wrap, size);
                vring_need_event(event, new, old)
            }
            _ => true,
        }
    }

    fn free(&mut self, id: u16) {
        let st = std::mem::take(&mut self.ids[usize::from(id)]);
        self.last_used = self.last_used.advance(u32::from(st.descs), self.ring.size);
        self.num_free += st.descs;
        self.free_ids.push_back(id);
    }

    fn in_flight(&self, id: u16) -> bool {
        self.ids.get(usize::from(id)).is_some_and(|s| s.descs != 0)
    }

    /// Takes the next used buffer: `(id, bytes written by the device)`, and
    /// frees its descriptors. With IN_ORDER one used descriptor may stand
    /// for a batch (see `PackedDeviceQueue::push_used_batch_in_order`):
    /// buffers before the one it names are reported with their full
    /// writable length, the named one with its length. Returns `None` when
    /// nothing is used.
    pub fn pop_used(&mut self) -> Option<(u16, u32)> {
        // Each turn consumes at least one descriptor; a lap is the most a
        // device can have written.
        for _ in 0..=self.ring.size {
            let (id, len) = match self.batch_last {
                Some(b) if self.features.in_order => b,
                _ => {
                    let flags = self.ring.load_flags(self.last_used.idx);
                    if !is_used(flags, self.last_used.wrap) {
                        self.batch_last = None;
                        return None;
                    }
                    let d = self.ring.read_desc(self.last_used.idx);
                    (d.id, d.len)
                }
            };
            let got = if self.features.in_order {
                self.pop_in_order(id, len)
            } else if self.in_flight(id) {
                self.free(id);
                Some((id, len))
            } else {
                None
            };
            let Some(r) = got else {
                self.bad_used += 1;
                self.batch_last = None;
                self.last_used = self.last_used.advance(1, self.ring.size);
                continue;
            };
            if self.features.event_idx && !self.cb_disabled {
                // Linux: ask for the next call right after what we consumed.
                self.write_cb_state(self.last_used);
                fence(Ordering::SeqCst);
            }
            return Some(r);
        }
        None
    }

    fn pop_in_order(&mut self, id: u16, len: u32) -> Option<(u16, u32)> {
        let expected = self.in_order.pop_front()?;
        let len = if expected == id {
            self.batch_last = None;
            len
        } else {
            self.batch_last = Some((id, len));
            self.ids[usize::from(expected)].in_len
        };
        self.free(expected);
        Some((expected, len))
    }

    /// Writes the driver event structure for callbacks on, with the event
    /// (under EVENT_IDX) at `at`.
    fn write_cb_state(&mut self, at: RingPos) {
        self.event_at = at;
        let e = if self.features.event_idx {
            EventSuppression {
                off_wrap: at.to_u16(),
                flags: RING_EVENT_FLAGS_DESC,
            }
        } else {
            EventSuppression {
                off_wrap: 0,
                flags: RING_EVENT_FLAGS_ENABLE,
            }
        };
        self.ring.set_driver_event(e);
    }

    fn used_at(&self, p: RingPos) -> bool {
        is_used(self.ring.load_flags(p.idx), p.wrap)
    }

    /// Asks the device not to send calls: driver event `DISABLE` (with or
    /// without EVENT_IDX).
    pub fn disable_cb(&mut self) {
        self.cb_disabled = true;
        self.ring.set_driver_event(EventSuppression {
            off_wrap: 0,
            flags: RING_EVENT_FLAGS_DISABLE,
        });
    }

    /// Asks for a call on the next used buffer (`DESC` at the next used
    /// position with EVENT_IDX, `ENABLE` without) and returns `false` if a
    /// used buffer is already pending — the caller must poll again instead
    /// of waiting (SeqCst fence between the write and the re-read).
    pub fn enable_cb(&mut self) -> bool {
        self.cb_disabled = false;
        self.write_cb_state(self.last_used);
        fence(Ordering::SeqCst);
        !self.used_at(self.last_used)
    }

    /// Like [`enable_cb`](Self::enable_cb) but with EVENT_IDX asks for the
    /// call only once 3/4 of the outstanding descriptors are used (Linux
    /// `virtqueue_enable_cb_delayed`). Returns `false` if the descriptor at
    /// that position is already used.
    pub fn enable_cb_delayed(&mut self) -> bool {
        self.cb_disabled = false;
        let at = if self.features.event_idx {
            let bufs = u32::from(self.ring.size - self.num_free) * 3 / 4;
            self.last_used.advance(bufs, self.ring.size)
        } else {
            self.last_used
        };
        self.write_cb_state(at);
        fence(Ordering::SeqCst);
        !self.used_at(at)
    }

    /// Whether the device owes a call now: callbacks are on and used
    /// descriptors have been published over the position the driver asked
    /// for (with EVENT_IDX), or any used buffer is waiting (without). A
    /// driver waiting for a call can tell a late device from a lost call.
    /// Reads at most the used descriptors of the buffers in flight.
    pub fn call_owed(&self) -> bool {
        if self.cb_disabled {
            return false;
        }
        if !self.features.event_idx {
            return self.batch_last.is_some() || self.used_at(self.last_used);
        }
        let size = self.ring.size;
        let mut p = self.last_used;
        let mut k = 0; // next in-order id to match
        let mut budget = u32::from(size - self.num_free);
        let mut batch = self.batch_last.filter(|_| self.features.in_order);
        while budget > 0 {
            let id = match batch.take() {
                Some((id, _)) => id,
                None if self.used_at(p) => self.ring.read_desc(p.idx).id,
                None => return false,
            };
            let skip: u32 = if self.features.in_order {
                let mut sum = 0;
                while let Some(&e) = self.in_order.get(k) {
                    k += 1;
                    sum += u32::from(self.ids[usize::from(e)].descs);
                    if e == id {
                        break;
                    }
                }
                sum
            } else if self.in_flight(id) {
                u32::from(self.ids[usize::from(id)].descs)
            } else {
                return false;
            };
            if skip == 0 {
                return false;
            }
            if ahead(p, self.event_at, size) < skip {
                return true;
            }
            p = p.advance(skip, size);
            budget = budget.saturating_sub(skip);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ahead_counts_over_the_two_lap_cycle() {
        let p = |idx, wrap| RingPos { idx, wrap };
        assert_eq!(ahead(p(2, true), p(2, true), 5), 0);
        assert_eq!(ahead(p(2, true), p(4, true), 5), 2);
        assert_eq!(ahead(p(4, true), p(1, false), 5), 2, "across the end");
        assert_eq!(
            ahead(p(4, false), p(1, true), 5),
            2,
            "across the end, back to wrap 1"
        );
        assert_eq!(
            ahead(p(2, true), p(1, true), 5),
            9,
            "a lap and more behind is far ahead"
        );
    }
}
