//! Device (backend) side of a packed virtqueue: the [`DeviceRing`]
//! contract, as the split ring's [`DeviceQueue`](crate::DeviceQueue) keeps
//! it, so a queue worker serves either kind the same way.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

use super::desc::{
    is_avail, used_bits, EventSuppression, RING_EVENT_FLAGS_DESC, RING_EVENT_FLAGS_DISABLE,
    RING_EVENT_FLAGS_ENABLE,
};
use super::layout::PackedLayout;
use super::pos::RingPos;
use super::ring::PackedRingPtrs;
use crate::chain::{Chain, ChainError, ChainErrorKind};
use crate::device_ring::DeviceRing;
use crate::event_idx::vring_need_event;
use crate::features::RingFeatures;
use crate::mem::GuestMemory;
use crate::ring::QueueError;

/// The device's view of one packed virtqueue.
///
/// Holds host pointers to the ring (translated once in [`new`](Self::new))
/// and a clone of the [`GuestMemory`] that keeps them mapped. One queue
/// worker owns it (`Send`, not `Sync`).
///
/// Buffers are named by the driver's buffer id (what [`pop`](Self::pop)
/// returns and [`Chain::head`] reports) where the split ring names them by
/// head index. The queue remembers, per buffer popped and not yet used, how
/// many ring descriptors it took, which is how far the used position must
/// skip when the buffer is reported.
#[derive(Debug)]
pub struct PackedDeviceQueue {
    ring: PackedRingPtrs,
    _mem: GuestMemory,
    features: RingFeatures,
    /// Next ring descriptor to read, with the avail wrap counter.
    last_avail: RingPos,
    /// Descriptors from `last_avail` on already seen available by
    /// [`avail_pending`](Self::avail_pending): they stay available until
    /// popped, so the scan resumes after them.
    known_avail: Cell<u16>,
    /// `(id, ring descriptors)` of each buffer popped and not yet given
    /// back, in pop order.
    in_flight: VecDeque<(u16, u16)>,
    /// Sum of `in_flight`'s descriptors: from `next_used` to `last_avail`.
    in_flight_descs: u16,
    /// Where the next used descriptor goes, with the used wrap counter.
    next_used: RingPos,
    /// The used position as last published by `flush_used`.
    used: RingPos,
    /// Used descriptors written (id, len) but not published: their ring
    /// index and the flags that publish them.
    pending: Vec<(u16, u16)>,
    /// Buffers the pending descriptors report.
    pending_bufs: u16,
    /// Ring descriptors the pending descriptors skip.
    pending_descs: u32,
    /// Ring descriptors published since the previous `needs_call`.
    published_descs: u32,
    /// `false` until the first `needs_call` (then calls whenever something
    /// was published, as the split queue and DPDK do).
    signalled_valid: bool,
    /// Whether kicks are currently requested (our shadow of the device
    /// event structure).
    notifications: bool,
    /// `push_used` calls naming no buffer in flight (a caller bug): ignored.
    stray_used: u64,
}

// SAFETY: the ring pointers point into mappings kept alive by `_mem`; all
// accesses are atomics or volatile raw copies, valid from any thread. The
// queue is not `Sync` (`Cell`), and every mutating method takes `&mut self`.
unsafe impl Send for PackedDeviceQueue {}

impl PackedDeviceQueue {
    /// Validates the layout (size in `1..=32768`, alignment, each part
    /// inside one region of `mem`, addresses in frontend user space if
    /// `addresses_are_uva`) and starts at `next_avail` in vhost-user's
    /// `SET_VRING_BASE` form for packed rings: position in bits 0–14, avail
    /// wrap counter in bit 15 (a fresh ring: `0x8000`). The used position
    /// starts there too, as in DPDK: a stopped ring has nothing in flight.
    ///
    /// The queue starts with notifications enabled (the device event
    /// structure is written).
    pub fn new(
        mem: &GuestMemory,
        layout: PackedLayout,
        addresses_are_uva: bool,
        features: RingFeatures,
        next_avail: u16,
    ) -> Result<Self, QueueError> {
        let ring = PackedRingPtrs::new(mem, layout, addresses_are_uva)?;
        let start = RingPos::from_u16(next_avail);
        if start.idx >= ring.size {
            return Err(QueueError::InvalidBase {
                base: next_avail,
                size: ring.size,
            });
        }
        let mut q = PackedDeviceQueue {
            ring,
            _mem: mem.clone(),
            features,
            last_avail: start,
            known_avail: Cell::new(0),
            in_flight: VecDeque::with_capacity(usize::from(ring.size.min(1024))),
            in_flight_descs: 0,
            next_used: start,
            used: start,
            pending: Vec::with_capacity(usize::from(ring.size.min(1024))),
            pending_bufs: 0,
            pending_descs: 0,
            published_descs: 0,
            signalled_valid: false,
            notifications: false,
            stray_used: 0,
        };
        q.write_notify_state(true);
        Ok(q)
    }

    /// Descriptors the driver may still make available: the ring's size
    /// less those popped and not given back.
    fn room(&self) -> u16 {
        self.ring.size - self.in_flight_descs
    }

    fn head_is_avail(&self) -> Option<u16> {
        let flags = self.ring.load_flags(self.last_avail.idx);
        is_avail(flags, self.last_avail.wrap).then_some(flags)
    }

    fn write_used(&mut self, id: u16, len: u32, descs: u16, bufs: u16) {
        self.ring.write_used(self.next_used.idx, id, len);
        self.pending
            .push((self.next_used.idx, used_bits(self.next_used.wrap)));
        self.pending_bufs = self.pending_bufs.wrapping_add(bufs);
        self.pending_descs += u32::from(descs);
        self.next_used = self.next_used.advance(u32::from(descs), self.ring.size);
        self.in_flight_descs -= descs;
    }

    fn write_notify_state(&mut self, enable: bool) {
        self.notifications = enable;
        let e = match (enable, self.features.event_idx) {
            (false, _) => EventSuppression {
                off_wrap: 0,
                flags: RING_EVENT_FLAGS_DISABLE,
            },
            (true, true) => EventSuppression {
                off_wrap: self.last_avail.to_u16(),
                flags: RING_EVENT_FLAGS_DESC,
            },
            (true, false) => EventSuppression {
                off_wrap: 0,
                flags: RING_EVENT_FLAGS_ENABLE,
            },
        };
        self.ring.set_device_event(e);
    }

    /// Buffers popped and not yet given back.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// `push_used` calls that named no buffer in flight (caller bugs).
    pub fn stray_used(&self) -> u64 {
        self.stray_used
    }
}

impl DeviceRing for PackedDeviceQueue {
    /// Whether [`pop`](Self::pop) has anything to look at: descriptors
    /// already seen available, or the one at the device's position (one
    /// Acquire load of its flags). A corrupt ring (available with every
    /// descriptor in flight) is `true`, for `pop` to report.
    #[inline]
    fn has_avail(&self) -> bool {
        self.known_avail.get() > 0 || self.head_is_avail().is_some()
    }

    /// Number of ring descriptors available and not yet consumed: for
    /// buffers of one descriptor, the buffers pending. Scans the flag words
    /// (Acquire loads) from where the previous call stopped, so each
    /// descriptor is looked at about once. Errors if the descriptor at the
    /// device's position is marked available while all `size` descriptors
    /// are already in flight: the ring is corrupt.
    fn avail_pending(&self) -> Result<u16, QueueError> {
        let room = self.room();
        let mut k = self.known_avail.get().min(room);
        let mut p = self.last_avail.advance(u32::from(k), self.ring.size);
        while k < room {
            if !is_avail(self.ring.load_flags(p.idx), p.wrap) {
                break;
            }
            k += 1;
            p = p.next(self.ring.size);
        }
        self.known_avail.set(k);
        if room == 0 && self.head_is_avail().is_some() {
            let at = self.last_avail.to_u16();
            return Err(QueueError::AvailIndexAhead {
                avail_idx: at,
                last_avail: at,
            });
        }
        Ok(k)
    }

    /// Consumes the next available buffer and walks its descriptors into
    /// `chain`; returns its buffer id.
    ///
    /// Returns `Ok(None)` if the descriptor at the device's position is not
    /// available. On a bad buffer its descriptors are consumed anyway (up
    /// to the first without `NEXT`) and the error says why; if `err.head`
    /// is `Some(id)`, give it back with `push_used(id, 0)`.
    /// `ChainErrorKind::AvailIndexAhead` (`head: None`) consumes nothing:
    /// the driver marked more than `size` descriptors available without
    /// getting any back, the ring is corrupt and the queue should stop.
    ///
    /// Bounded work: at most `size` ring descriptors and one indirect table
    /// of at most `size` entries are read.
    fn pop(&mut self, mem: &GuestMemory, chain: &mut Chain) -> Result<Option<u16>, ChainError> {
        let Some(flags) = self.head_is_avail() else {
            return Ok(None);
        };
        let room = self.room();
        if room == 0 {
            return Err(ChainError {
                head: None,
                kind: ChainErrorKind::AvailIndexAhead,
            });
        }
        let w = chain.walk_packed(
            mem,
            &self.ring,
            self.last_avail,
            flags,
            room,
            self.features.indirect,
        );
        self.last_avail = self.last_avail.advance(u32::from(w.descs), self.ring.size);
        self.known_avail
            .set(self.known_avail.get().saturating_sub(w.descs));
        self.in_flight.push_back((w.id, w.descs));
        self.in_flight_descs += w.descs;
        match w.error {
            None => Ok(Some(w.id)),
            Some(kind) => Err(ChainError {
                head: Some(w.id),
                kind,
            }),
        }
    }

    /// Puts the last `n` buffers [`pop`](Self::pop) consumed back, for the
    /// next pops to walk again (Linux vhost's `vhost_discard_vq_desc`). The
    /// caller must not have given any of them back used; at most the
    /// buffers in flight are put back.
    fn unpop(&mut self, n: u16) {
        for _ in 0..n {
            let Some((_, descs)) = self.in_flight.pop_back() else {
                return;
            };
            self.last_avail = self.last_avail.back(u32::from(descs), self.ring.size);
            self.in_flight_descs -= descs;
            self.known_avail
                .set(self.known_avail.get().saturating_add(descs));
        }
    }

    /// Writes a used descriptor for buffer `id` (bytes `written` into its
    /// writable buffers) without publishing it; visible to the driver at
    /// the next [`flush_used`](Self::flush_used). The used position then
    /// skips the descriptors the buffer took.
    ///
    /// Buffers given back in the order they were popped cost O(1); out of
    /// order, a scan of the buffers in flight. An `id` not in flight (never
    /// popped, or already given back) is ignored and counted in
    /// [`stray_used`](Self::stray_used). If the driver named two buffers
    /// in flight alike, the older is taken first.
    #[inline]
    fn push_used(&mut self, id: u16, written: u32) {
        let found = match self.in_flight.front() {
            Some(&(first, _)) if first == id => self.in_flight.pop_front(),
            _ => self
                .in_flight
                .iter()
                .position(|&(i, _)| i == id)
                .and_then(|k| self.in_flight.remove(k)),
        };
        match found {
            Some((_, descs)) => self.write_used(id, written, descs, 1),
            None => self.stray_used += 1,
        }
    }

    /// With IN_ORDER: one used descriptor then stands for a batch (spec
    /// 2.8.9), which in-order packed drivers follow (DPDK's
    /// `virtio_xmit_cleanup_inorder_packed` walks from the last id it freed
    /// to the one written).
    fn batches_used_in_order(&self) -> bool {
        self.features.in_order
    }

    /// IN_ORDER only: reports the `count` oldest buffers in flight, the
    /// last of which has id `last_id`, with one used descriptor of length 0
    /// that skips all their descriptors (spec 2.8.9) — meant for TX, where
    /// nothing is written; the driver takes the earlier buffers as used.
    ///
    /// Without IN_ORDER this would lose buffers, so it does nothing and
    /// returns `false`; `count == 0` is a no-op. At most the buffers in
    /// flight are reported.
    fn push_used_batch_in_order(&mut self, last_id: u16, count: u16) -> bool {
        if !self.features.in_order {
            return false;
        }
        let n = usize::from(count).min(self.in_flight.len());
        if n == 0 {
            return true;
        }
        let descs: u16 = self.in_flight.drain(..n).map(|(_, d)| d).sum();
        self.write_used(last_id, 0, descs, n as u16);
        true
    }

    /// Publishes all pending used descriptors: one Release fence, then
    /// their flag words, the batch's first last (so a driver reading in
    /// order sees the whole batch at once). Returns how many buffers were
    /// published.
    #[inline]
    fn flush_used(&mut self) -> u16 {
        let Some((&(first, first_flags), rest)) = self.pending.split_first() else {
            return 0;
        };
        fence(Ordering::Release);
        for &(i, f) in rest {
            self.ring.flags(i).store(f.to_le(), Ordering::Relaxed);
        }
        self.ring
            .flags(first)
            .store(first_flags.to_le(), Ordering::Relaxed);
        self.pending.clear();
        self.published_descs = self
            .published_descs
            .saturating_add(std::mem::take(&mut self.pending_descs));
        self.used = self.next_used;
        std::mem::take(&mut self.pending_bufs)
    }

    /// Whether the driver wants a used-buffer notification ("call") for
    /// what was published since the previous `needs_call`. Call after
    /// [`flush_used`](Self::flush_used).
    ///
    /// When something was published, a SeqCst fence orders our flag stores
    /// before the read of the driver event structure. Then: `DISABLE` →
    /// `false`; `DESC` with EVENT_IDX → whether the position in `off_wrap`
    /// was passed by the used descriptors published since the last check
    /// (always `true` on the first check, and after a whole lap); anything
    /// else → `true`.
    fn needs_call(&mut self) -> bool {
        let published = std::mem::take(&mut self.published_descs);
        let valid = self.signalled_valid;
        self.signalled_valid = true;
        if published == 0 {
            return false;
        }
        fence(Ordering::SeqCst);
        let e = self.ring.driver_event();
        match e.mode() {
            RING_EVENT_FLAGS_DISABLE => false,
            RING_EVENT_FLAGS_DESC if self.features.event_idx => {
                let size = self.ring.size;
                if !valid || published >= u32::from(size) {
                    return true;
                }
                let new = self.used.idx;
                let old = new.wrapping_sub(published as u16);
                let event = RingPos::from_u16(e.off_wrap).on_line(self.used.wrap, size);
                vring_need_event(event, new, old)
            }
            _ => true,
        }
    }

    /// Asks the driver not to kick: `DISABLE`, with or without EVENT_IDX
    /// (the packed ring keeps its flags with EVENT_IDX, so nothing needs
    /// parking as on the split ring). Suppression is advisory: a driver may
    /// still kick.
    fn disable_notifications(&mut self) {
        if self.notifications {
            self.write_notify_state(false);
        }
    }

    /// Asks the driver to kick for new buffers — with EVENT_IDX `DESC` at
    /// the device's position (DPDK's choice), otherwise `ENABLE` — then
    /// closes the race with a driver that published just before seeing the
    /// request: SeqCst fence, look at the descriptor at the device's
    /// position again. Returns `true` if it is available — the caller must
    /// then poll again instead of sleeping.
    fn enable_notifications(&mut self) -> Result<bool, QueueError> {
        self.write_notify_state(true);
        fence(Ordering::SeqCst);
        Ok(self.head_is_avail().is_some())
    }

    /// As [`enable_notifications`](Self::enable_notifications), for a caller
    /// that can use nothing less than `n` pending descriptors: with
    /// EVENT_IDX the driver is asked to kick once the `n`-th is made
    /// available (see [`set_kick_threshold`](Self::set_kick_threshold)),
    /// without it on every buffer. Returns `true` if `n` are already
    /// available.
    fn enable_notifications_for(&mut self, n: u16) -> Result<bool, QueueError> {
        if n <= 1 || !self.set_kick_threshold(n) {
            let work = self.enable_notifications()?;
            return Ok(work && self.avail_pending()? >= n);
        }
        Ok(self.avail_pending()? >= n)
    }

    /// EVENT_IDX only: asks for a kick when the driver makes the descriptor
    /// `n - 1` after the device's position available, i.e. once about `n`
    /// descriptors are pending (`n` 0 is taken as 1, and more than the
    /// ring's size as the size). Returns `false`, doing nothing, without
    /// EVENT_IDX. A full fence is issued; the caller should re-check
    /// [`avail_pending`](Self::avail_pending) afterwards.
    fn set_kick_threshold(&mut self, n: u16) -> bool {
        if !self.features.event_idx {
            return false;
        }
        let ahead = (n.max(1) - 1).min(self.ring.size - 1);
        let at = self.last_avail.advance(u32::from(ahead), self.ring.size);
        self.notifications = true;
        self.ring.set_device_event(EventSuppression {
            off_wrap: at.to_u16(),
            flags: RING_EVENT_FLAGS_DESC,
        });
        fence(Ordering::SeqCst);
        true
    }

    /// Next descriptor to read, in the `GET_VRING_BASE` form (position in
    /// bits 0–14, avail wrap counter in bit 15).
    fn last_avail(&self) -> u16 {
        self.last_avail.to_u16()
    }

    /// The used position as last published, in the same form.
    fn used_idx(&self) -> u16 {
        self.used.to_u16()
    }

    /// Buffers pushed but not yet published.
    fn pending_used(&self) -> u16 {
        self.pending_bufs
    }

    /// Queue size (descriptors).
    fn size(&self) -> u16 {
        self.ring.size
    }

    /// Negotiated ring features.
    fn features(&self) -> RingFeatures {
        self.features
    }

    /// `true` while kicks are requested (after `enable_notifications` or
    /// `set_kick_threshold`, until `disable_notifications`).
    fn notifications_enabled(&self) -> bool {
        self.notifications
    }
}
