//! Driver (guest) side of a split virtqueue, modelled on Linux's
//! `drivers/virtio/virtio_ring.c` (split ring): used by the synthetic guest,
//! the tests, the fuzzers and the benchmarks.
//!
//! The driver owns its descriptor free list (a FIFO, so with IN_ORDER the
//! descriptors are used in table order and chains wrap from the last
//! descriptor to 0 as spec 2.7.9 asks). Buffers are added with
//! [`DriverQueue::add`], made visible in bulk by [`DriverQueue::publish`]
//! (one Release store of `avail.idx`), and the device is kicked only if
//! [`DriverQueue::kick_prepare`] says so.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

use crate::event_idx::vring_need_event;
use crate::features::RingFeatures;
use crate::layout::QueueLayout;
use crate::mem::GuestMemory;
use crate::ring::{write_desc_at, QueueError, RingPtrs};
use crate::spec::{
    Descriptor, DESC_SIZE, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE,
    VRING_AVAIL_F_NO_INTERRUPT, VRING_USED_F_NO_NOTIFY,
};

/// Errors adding a buffer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// No segments given.
    #[error("a buffer needs at least one segment")]
    EmptyChain,
    /// Not enough free descriptors.
    #[error("{needed} descriptors needed, {free} free")]
    NoSpace {
        /// Descriptors the buffer needs.
        needed: usize,
        /// Descriptors free.
        free: u16,
    },
    /// A readable segment follows a writable one (spec 2.7.4.2).
    #[error("readable segment after a writable one")]
    ReadableAfterWritable,
    /// Indirect descriptors were not negotiated.
    #[error("indirect descriptors not negotiated")]
    IndirectNotNegotiated,
    /// An indirect table may hold at most the queue size entries.
    #[error("indirect table of {0} entries is larger than the queue")]
    TooManySegments(usize),
    /// The indirect table is not inside guest memory.
    #[error("indirect table at {0:#x} is not inside guest memory")]
    TableOutsideMemory(u64),
}

/// One buffer segment as the driver describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    /// Guest-physical address.
    pub gpa: u64,
    /// Length, bytes.
    pub len: u32,
    /// `true` if the device may write it (`VIRTQ_DESC_F_WRITE`).
    pub writable: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct HeadState {
    /// Descriptors used in the main table (0: head not in flight).
    ndescs: u16,
    /// Sum of writable lengths, bytes: reported for IN_ORDER buffers the
    /// device covered by a later batch entry (Linux's `total_len`).
    in_len: u32,
}

/// The driver's view of one split virtqueue.
#[derive(Debug)]
pub struct DriverQueue {
    ring: RingPtrs,
    mem: GuestMemory,
    layout: QueueLayout,
    features: RingFeatures,
    /// Free descriptor indices, used front first, freed to the back.
    free: VecDeque<u16>,
    /// Host copy of each descriptor's `next`, so freeing never trusts what
    /// the device may have scribbled on the table.
    next: Vec<u16>,
    heads: Vec<HeadState>,
    /// Heads in the order they were added (IN_ORDER only).
    in_flight: VecDeque<u16>,
    /// Next avail index to fill (added, maybe not yet published).
    avail_idx: u16,
    /// `avail.idx` as last published.
    published_idx: u16,
    /// `avail.idx` at the last `kick_prepare`.
    kicked_idx: u16,
    /// Next used index to consume.
    last_used: u16,
    /// Last `used.idx` value read.
    shadow_used: u16,
    /// Pending IN_ORDER batch entry `(id, len)` (Linux's `batch_last`).
    batch_last: Option<(u32, u32)>,
    /// Shadow of `VRING_AVAIL_F_NO_INTERRUPT` / callbacks disabled.
    cb_disabled: bool,
    /// Used entries with an id that was not in flight (device bug).
    bad_used: u64,
}

// SAFETY: the ring pointers point into mappings kept alive by `mem`;
// accesses are atomics or volatile raw copies, valid from any thread.
unsafe impl Send for DriverQueue {}

impl DriverQueue {
    /// Validates `layout` (guest-physical addresses) inside `mem` and zeroes
    /// the three ring parts. Callbacks start enabled.
    pub fn new(
        mem: &GuestMemory,
        layout: QueueLayout,
        features: RingFeatures,
    ) -> Result<Self, QueueError> {
        Self::new_at(mem, layout, features, 0)
    }

    /// Like [`new`](Self::new) but starts `avail.idx` and `used.idx` at
    /// `start` instead of 0 (the device must then start at `next_avail =
    /// start`): lets tests exercise the 16-bit wrap-around quickly.
    pub fn new_at(
        mem: &GuestMemory,
        layout: QueueLayout,
        features: RingFeatures,
        start: u16,
    ) -> Result<Self, QueueError> {
        let ring = RingPtrs::new(mem, layout, false)?;
        ring.zero();
        ring.avail_idx().store(start.to_le(), Ordering::Release);
        ring.used_idx().store(start.to_le(), Ordering::Release);
        ring.used_event().store(start.to_le(), Ordering::Release);
        let n = layout.size;
        Ok(DriverQueue {
            ring,
            mem: mem.clone(),
            layout,
            features,
            free: (0..n).collect(),
            next: vec![0; n as usize],
            heads: vec![HeadState::default(); n as usize],
            in_flight: VecDeque::with_capacity(n as usize),
            avail_idx: start,
            published_idx: start,
            kicked_idx: start,
            last_used: start,
            shadow_used: start,
            batch_last: None,
            cb_disabled: false,
            bad_used: 0,
        })
    }

    /// Free descriptors.
    pub fn num_free(&self) -> u16 {
        self.free.len() as u16
    }

    /// Buffers added and not yet returned by `pop_used`.
    pub fn outstanding(&self) -> u16 {
        self.avail_idx.wrapping_sub(self.last_used)
    }

    /// Used entries whose id was not a buffer in flight (a device bug);
    /// they are skipped.
    pub fn bad_used_entries(&self) -> u64 {
        self.bad_used
    }

    /// The ring layout.
    pub fn layout(&self) -> QueueLayout {
        self.layout
    }

    /// Negotiated features.
    pub fn features(&self) -> RingFeatures {
        self.features
    }

    /// The memory the rings live in.
    pub fn memory(&self) -> &GuestMemory {
        &self.mem
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

    fn flags_for(segs: &[Seg], i: usize) -> u16 {
        let mut f = 0;
        if i + 1 < segs.len() {
            f |= VIRTQ_DESC_F_NEXT;
        }
        if segs[i].writable {
            f |= VIRTQ_DESC_F_WRITE;
        }
        f
    }

    /// Adds a buffer as a chain of direct descriptors linked by `NEXT`
    /// (not yet visible to the device: see [`publish`](Self::publish)).
    /// Readable segments must come first. Returns the head index.
    pub fn add(&mut self, segs: &[Seg]) -> Result<u16, DriverError> {
        let in_len = Self::check_order(segs)?;
        if segs.len() > self.free.len() {
            return Err(DriverError::NoSpace {
                needed: segs.len(),
                free: self.num_free(),
            });
        }
        let head = self.free[0];
        for i in 0..segs.len() {
            let idx = self.free.pop_front().unwrap_or_default();
            let next = if i + 1 < segs.len() { self.free[0] } else { 0 };
            self.next[idx as usize] = next;
            self.ring.write_desc(
                idx,
                Descriptor {
                    addr: segs[i].gpa,
                    len: segs[i].len,
                    flags: Self::flags_for(segs, i),
                    next,
                },
            );
        }
        self.heads[head as usize] = HeadState {
            ndescs: segs.len() as u16,
            in_len,
        };
        self.make_available(head);
        Ok(head)
    }

    /// Adds a buffer as one descriptor pointing to an indirect table that
    /// this call writes at `table_gpa` (`16 * segs.len()` bytes, which the
    /// caller keeps reserved until the buffer is used).
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
        let Some(head) = self.free.pop_front() else {
            return Err(DriverError::NoSpace { needed: 1, free: 0 });
        };
        for i in 0..segs.len() {
            let d = Descriptor {
                addr: segs[i].gpa,
                len: segs[i].len,
                flags: Self::flags_for(segs, i),
                next: if i + 1 < segs.len() { i as u16 + 1 } else { 0 },
            };
            // SAFETY: entry i lies inside [table, table + bytes), which
            // `translate` checked is inside a live region.
            unsafe { write_desc_at(table.add(DESC_SIZE as usize * i), d) };
        }
        self.next[head as usize] = 0;
        self.ring.write_desc(
            head,
            Descriptor {
                addr: table_gpa,
                len: bytes as u32,
                flags: VIRTQ_DESC_F_INDIRECT,
                next: 0,
            },
        );
        self.heads[head as usize] = HeadState { ndescs: 1, in_len };
        self.make_available(head);
        Ok(head)
    }

    fn make_available(&mut self, head: u16) {
        self.ring.write_avail_entry(self.avail_idx, head);
        self.avail_idx = self.avail_idx.wrapping_add(1);
        if self.features.in_order {
            self.in_flight.push_back(head);
        }
    }

    /// Makes everything added since the last publish visible to the device
    /// with one Release store of `avail.idx`.
    pub fn publish(&mut self) {
        if self.published_idx != self.avail_idx {
            self.published_idx = self.avail_idx;
            self.ring
                .avail_idx()
                .store(self.avail_idx.to_le(), Ordering::Release);
        }
    }

    /// Whether to kick the device for what was published since the last
    /// `kick_prepare` (Linux `virtqueue_kick_prepare_split`): SeqCst fence
    /// (orders our `avail.idx` store before reading the device's
    /// suppression state), then with EVENT_IDX
    /// `vring_need_event(avail_event, new, old)`, otherwise
    /// `!(used.flags & VRING_USED_F_NO_NOTIFY)`. `false` if nothing was
    /// published since.
    pub fn kick_prepare(&mut self) -> bool {
        fence(Ordering::SeqCst);
        let new = self.published_idx;
        let old = self.kicked_idx;
        self.kicked_idx = new;
        if new == old {
            return false;
        }
        if self.features.event_idx {
            let ev = u16::from_le(self.ring.avail_event().load(Ordering::Relaxed));
            vring_need_event(ev, new, old)
        } else {
            u16::from_le(self.ring.used_flags().load(Ordering::Relaxed)) & VRING_USED_F_NO_NOTIFY
                == 0
        }
    }

    fn free_chain(&mut self, head: u16) {
        let st = std::mem::take(&mut self.heads[head as usize]);
        let mut idx = head;
        for _ in 0..st.ndescs {
            self.free.push_back(idx);
            idx = self.next[idx as usize];
        }
    }

    fn used_available(&mut self) -> bool {
        if self.last_used == self.shadow_used {
            self.shadow_used = self.ring.load_used_idx();
        }
        self.last_used != self.shadow_used
    }

    /// Takes the next used buffer: `(head, bytes written by the device)`,
    /// and frees its descriptors. With IN_ORDER, a single used entry may
    /// stand for a batch (see `DeviceQueue::push_used_batch_in_order`):
    /// buffers before the one the entry names are reported with their full
    /// writable length (Linux's convention), the named one with the entry's
    /// length. Returns `None` when nothing is used.
    pub fn pop_used(&mut self) -> Option<(u16, u32)> {
        loop {
            if !self.used_available() {
                self.batch_last = None;
                return None;
            }
            let got = if self.features.in_order {
                self.pop_in_order()
            } else {
                self.pop_any_order()
            };
            self.last_used = self.last_used.wrapping_add(1);
            if self.last_used == self.shadow_used {
                // A batch never extends past a published used.idx.
                self.batch_last = None;
            }
            if self.features.event_idx && !self.cb_disabled {
                // Linux: ask for the next interrupt right after what we
                // consumed (virtio_store_mb).
                self.ring
                    .used_event()
                    .store(self.last_used.to_le(), Ordering::Relaxed);
                fence(Ordering::SeqCst);
            }
            match got {
                Some(r) => return Some(r),
                None => self.bad_used += 1,
            }
        }
    }

    fn pop_any_order(&mut self) -> Option<(u16, u32)> {
        let (id, len) = self.ring.read_used_entry(self.last_used);
        if id >= u32::from(self.ring.size) || self.heads[id as usize].ndescs == 0 {
            return None;
        }
        let head = id as u16;
        self.free_chain(head);
        Some((head, len))
    }

    fn pop_in_order(&mut self) -> Option<(u16, u32)> {
        let expected = self.in_flight.pop_front()?;
        let (id, len) = match self.batch_last {
            Some(b) => b,
            None => {
                let e = self.ring.read_used_entry(self.last_used);
                self.batch_last = Some(e);
                e
            }
        };
        let len = if id == u32::from(expected) {
            self.batch_last = None;
            len
        } else {
            self.heads[expected as usize].in_len
        };
        self.free_chain(expected);
        Some((expected, len))
    }

    /// Asks the device not to send calls (Linux `virtqueue_disable_cb`):
    /// sets `VRING_AVAIL_F_NO_INTERRUPT` without EVENT_IDX; with EVENT_IDX
    /// (where the flag must stay 0, spec 2.7.7) moves `used_event` just
    /// behind what we consumed, so the device's check fails until the index
    /// wraps.
    pub fn disable_cb(&mut self) {
        self.cb_disabled = true;
        if self.features.event_idx {
            self.ring
                .used_event()
                .store(self.last_used.wrapping_sub(1).to_le(), Ordering::Relaxed);
        } else {
            self.ring
                .avail_flags()
                .store(VRING_AVAIL_F_NO_INTERRUPT.to_le(), Ordering::Relaxed);
        }
    }

    /// Asks for a call on the next used buffer and returns `false` if used
    /// buffers are already pending — the caller must poll again instead of
    /// waiting (Linux `virtqueue_enable_cb`: `enable_cb_prepare` + `poll`,
    /// with a SeqCst fence between the write and the re-read).
    pub fn enable_cb(&mut self) -> bool {
        self.cb_disabled = false;
        if !self.features.event_idx {
            self.ring.avail_flags().store(0, Ordering::Relaxed);
        }
        self.ring
            .used_event()
            .store(self.last_used.to_le(), Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.ring.load_used_idx() == self.last_used
    }

    /// Like [`enable_cb`](Self::enable_cb) but with EVENT_IDX asks for the
    /// call only after 3/4 of the outstanding buffers are used (Linux
    /// `virtqueue_enable_cb_delayed`, used by virtio-net TX). Returns
    /// `false` if that many are already used.
    pub fn enable_cb_delayed(&mut self) -> bool {
        self.cb_disabled = false;
        if !self.features.event_idx {
            self.ring.avail_flags().store(0, Ordering::Relaxed);
        }
        let bufs = (u32::from(self.avail_idx.wrapping_sub(self.last_used)) * 3 / 4) as u16;
        self.ring
            .used_event()
            .store(self.last_used.wrapping_add(bufs).to_le(), Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.ring.load_used_idx().wrapping_sub(self.last_used) <= bufs
    }

    /// Whether the device owes a call now: with callbacks enabled, used buffers have been
    /// published past the point the driver asked for — with EVENT_IDX `used.idx` has moved
    /// beyond `used_event`, without it any used buffer not yet popped counts. A driver
    /// waiting for a call can tell a late device (nothing owed yet) from a lost call.
    pub fn call_owed(&self) -> bool {
        if self.cb_disabled {
            return false;
        }
        let used = self.ring.load_used_idx();
        if self.features.event_idx {
            let event = u16::from_le(self.ring.used_event().load(Ordering::Relaxed));
            // used.idx > used_event, modulo 2^16: the entry at `used_event` is published.
            (used.wrapping_sub(event.wrapping_add(1)) as i16) >= 0
        } else {
            used != self.last_used
        }
    }

    /// Next avail index to be filled (free-running).
    pub fn avail_idx(&self) -> u16 {
        self.avail_idx
    }

    /// Next used index to consume (free-running).
    pub fn last_used(&self) -> u16 {
        self.last_used
    }
}
