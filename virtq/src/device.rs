//! Device (backend) side of a split virtqueue: pop available chains, push
//! used entries, publish them once per batch, decide on calls and kicks.
//!
//! A service pass looks like
//!
//! ```no_run
//! # use vadapt_virtq::{device::{DeviceQueue, Chain}, mem::GuestMemory, DeviceRing};
//! # fn pass(q: &mut DeviceQueue, mem: &GuestMemory, chain: &mut Chain) {
//! while let Ok(Some(head)) = q.pop(mem, chain) {
//!     // ... copy chain.read_into(..) somewhere ...
//!     q.push_used(head, 0);
//! }
//! q.flush_used();
//! if q.needs_call() { /* signal the call eventfd */ }
//! # }
//! ```
//!
//! (a real caller also handles `Err(ChainError)`: count it by
//! `err.kind`, and `push_used(head, 0)` when `err.head` is `Some`).

use std::sync::atomic::{fence, Ordering};

use crate::device_ring::DeviceRing;
use crate::event_idx::vring_need_event;
use crate::features::RingFeatures;
use crate::layout::QueueLayout;
use crate::mem::GuestMemory;
use crate::ring::RingPtrs;
use crate::spec::{VRING_AVAIL_F_NO_INTERRUPT, VRING_USED_F_NO_NOTIFY};

pub use crate::chain::{Chain, ChainError, ChainErrorKind, Segment};
pub use crate::ring::QueueError;

/// Descriptors [`DeviceQueue::pop`] prefetches ahead when it sees new
/// entries: a transmit gather's worth (`GATHER` in the daemon's
/// transmit service).
pub const PREFETCH_AHEAD: u16 = 32;

/// The device's view of one split virtqueue; its methods are
/// [`DeviceRing`]'s.
///
/// Holds host pointers to the rings (translated once in [`new`](Self::new))
/// and a clone of the [`GuestMemory`] that keeps them mapped. Not `Sync`:
/// one queue worker owns it.
#[derive(Debug)]
pub struct DeviceQueue {
    ring: RingPtrs,
    _mem: GuestMemory,
    features: RingFeatures,
    /// Next available-ring index to consume (free-running, wraps at 2^16).
    last_avail: u16,
    /// Last `avail.idx` value read; avoids an acquire load per pop.
    shadow_avail: u16,
    /// `used.idx` as last published by `flush_used`.
    used_idx: u16,
    /// Used entries written to the ring but not yet published.
    pending: u16,
    /// `used.idx` at the previous `needs_call` (vhost's `signalled_used`).
    signalled_used: u16,
    /// `false` until the first `needs_call` after creation, which then
    /// calls whenever something was published (vhost does the same, so a
    /// restarted backend never loses an interrupt to a stale `used_event`).
    signalled_valid: bool,
    /// Whether kicks are currently requested (our shadow of the flag /
    /// `avail_event` state).
    notifications: bool,
    /// With EVENT_IDX and notifications off: the `avail_event` we parked
    /// half a wrap ahead of `last_avail` (see `disable_notifications`).
    parked_event: u16,
}

// SAFETY: the ring pointers point into mappings kept alive by `_mem`; all
// accesses are atomics or volatile raw copies, valid from any thread. The
// queue is `!Sync` because every mutating method takes `&mut self`.
unsafe impl Send for DeviceQueue {}

impl DeviceQueue {
    /// Validates the layout (size, alignment, each part inside one region of
    /// `mem`, addresses in frontend user space if `addresses_are_uva`) and
    /// starts consuming at `next_avail` (vhost-user `SET_VRING_BASE`).
    ///
    /// `used.idx` is read from the ring, as Linux vhost does on start. The
    /// queue starts with notifications enabled: `used.flags` is cleared, and
    /// with EVENT_IDX `avail_event` is set to `next_avail`.
    pub fn new(
        mem: &GuestMemory,
        layout: QueueLayout,
        addresses_are_uva: bool,
        features: RingFeatures,
        next_avail: u16,
    ) -> Result<Self, QueueError> {
        let ring = RingPtrs::new(mem, layout, addresses_are_uva)?;
        let used_idx = ring.load_used_idx();
        let mut q = DeviceQueue {
            ring,
            _mem: mem.clone(),
            features,
            last_avail: next_avail,
            shadow_avail: next_avail,
            used_idx,
            pending: 0,
            signalled_used: used_idx,
            signalled_valid: false,
            notifications: false,
            parked_event: 0,
        };
        q.write_notify_state(true);
        Ok(q)
    }

    /// Prefetches the descriptors of the entries the driver made available
    /// up to `idx` (at most [`PREFETCH_AHEAD`]), so that their cache
    /// misses overlap instead of each [`pop`](Self::pop) waiting for its
    /// own: the driver's core wrote them. The heads are read, not trusted:
    /// a prefetch of any descriptor slot is harmless, and `pop` checks the
    /// head it walks.
    #[inline]
    fn prefetch_heads(&self, idx: u16) {
        let n = idx.wrapping_sub(self.last_avail).min(PREFETCH_AHEAD);
        for k in 0..n {
            let head = self.ring.read_avail_entry(self.last_avail.wrapping_add(k));
            self.ring.prefetch_desc(head);
        }
    }

    fn write_notify_state(&mut self, enable: bool) {
        self.notifications = enable;
        if self.features.event_idx {
            let ev = if enable {
                self.last_avail
            } else {
                self.park_event()
            };
            self.ring.avail_event().store(ev.to_le(), Ordering::Relaxed);
        } else {
            let flags = if enable { 0 } else { VRING_USED_F_NO_NOTIFY };
            self.ring
                .used_flags()
                .store(flags.to_le(), Ordering::Relaxed);
        }
    }

    fn park_event(&mut self) -> u16 {
        self.parked_event = self.last_avail.wrapping_add(0x8000);
        self.parked_event
    }
}

impl DeviceRing for DeviceQueue {
    /// Whether [`pop`](Self::pop) has anything to look at: an entry made
    /// available and not consumed, or a corrupt `avail.idx` (which `pop`
    /// reports). One Acquire load of `avail.idx` at most, no arithmetic:
    /// the check of a polling worker's empty pass.
    #[inline]
    fn has_avail(&self) -> bool {
        self.shadow_avail != self.last_avail || self.ring.load_avail_idx() != self.last_avail
    }

    /// Number of available entries not yet consumed (Acquire load of
    /// `avail.idx`). Errors if the driver moved `avail.idx` more than the
    /// queue size ahead: the ring is corrupt.
    fn avail_pending(&self) -> Result<u16, QueueError> {
        let idx = self.ring.load_avail_idx();
        let n = idx.wrapping_sub(self.last_avail);
        if n > self.ring.size {
            return Err(QueueError::AvailIndexAhead {
                avail_idx: idx,
                last_avail: self.last_avail,
            });
        }
        Ok(n)
    }

    /// Consumes the next available entry and walks its chain into `chain`.
    ///
    /// Returns `Ok(None)` if the ring is empty. On a bad chain the entry is
    /// consumed anyway (so the queue moves on) and the error says why; if
    /// `err.head` is `Some`, return it with `push_used(head, 0)`.
    /// `ChainErrorKind::AvailIndexAhead` consumes nothing: the ring is
    /// corrupt and the queue should be stopped.
    ///
    /// Bounded work: at most `2 * size` descriptors are read.
    fn pop(&mut self, mem: &GuestMemory, chain: &mut Chain) -> Result<Option<u16>, ChainError> {
        if self.shadow_avail == self.last_avail {
            let idx = self.ring.load_avail_idx();
            if idx == self.last_avail {
                return Ok(None);
            }
            if idx.wrapping_sub(self.last_avail) > self.ring.size {
                return Err(ChainError {
                    head: None,
                    kind: ChainErrorKind::AvailIndexAhead,
                });
            }
            self.prefetch_heads(idx);
            self.shadow_avail = idx;
        }
        let head = self.ring.read_avail_entry(self.last_avail);
        self.last_avail = self.last_avail.wrapping_add(1);
        if head >= self.ring.size {
            return Err(ChainError {
                head: None,
                kind: ChainErrorKind::HeadOutOfRange,
            });
        }
        chain
            .walk(mem, &self.ring, head, self.features.indirect)
            .map_err(|kind| ChainError {
                head: Some(head),
                kind,
            })?;
        Ok(Some(head))
    }

    /// Puts the last `n` entries [`pop`](Self::pop) consumed back, for the
    /// next pops to walk again — Linux vhost's `vhost_discard_vq_desc`, for
    /// a receive frame that did not fit the buffers taken so far. The caller
    /// must not have given any of them back used: nothing is checked here
    /// but that `n` entries were consumed since the queue started.
    fn unpop(&mut self, n: u16) {
        self.last_avail = self.last_avail.wrapping_sub(n);
    }

    /// Writes a used entry (`head`, bytes `written` into the chain's
    /// writable buffers) into the ring without publishing it; visible to the
    /// driver at the next [`flush_used`](Self::flush_used). If `size`
    /// entries are already pending, flushes first so that none is
    /// overwritten.
    #[inline]
    fn push_used(&mut self, head: u16, written: u32) {
        if self.pending >= self.ring.size {
            self.flush_used();
        }
        self.ring.write_used_entry(
            self.used_idx.wrapping_add(self.pending),
            u32::from(head),
            written,
        );
        self.pending += 1;
    }

    /// `false`: DPDK 22.11's in-order split cleanup reads the id of every
    /// used entry, so it would never free the buffers a batch skips.
    fn batches_used_in_order(&self) -> bool {
        false
    }

    /// IN_ORDER only: reports `count` buffers, the last of which has head
    /// `last_head`, with a single used entry of length 0 (spec 2.7.9: "the
    /// device can just write out a single used ring entry with the id
    /// corresponding to the head entry of the descriptor chain describing
    /// the last buffer in the batch"). The entry goes in the batch's *first*
    /// slot, where a driver that follows the available order reads next
    /// (this is where the Linux in-order driver looks); the driver takes the
    /// earlier buffers as used with length 0 — meant for TX, where nothing
    /// is written. `used.idx` moves by `count` at the next flush.
    ///
    /// Calling this without IN_ORDER negotiated would lose buffers, so it
    /// falls back to nothing and returns `false`; `count == 0` is a no-op.
    fn push_used_batch_in_order(&mut self, last_head: u16, count: u16) -> bool {
        if !self.features.in_order {
            return false;
        }
        if count == 0 {
            return true;
        }
        if u32::from(self.pending) + u32::from(count) > u32::from(self.ring.size) {
            self.flush_used();
        }
        self.ring.write_used_entry(
            self.used_idx.wrapping_add(self.pending),
            u32::from(last_head),
            0,
        );
        self.pending = self.pending.wrapping_add(count);
        true
    }

    /// Publishes all pending used entries with one Release store of
    /// `used.idx` (entries written before it become visible to a driver
    /// that Acquire-loads the index). Returns how many were published.
    #[inline]
    fn flush_used(&mut self) -> u16 {
        let n = self.pending;
        if n == 0 {
            return 0;
        }
        self.used_idx = self.used_idx.wrapping_add(n);
        self.pending = 0;
        self.ring
            .used_idx()
            .store(self.used_idx.to_le(), Ordering::Release);
        // Keep a parked `avail_event` out of the driver's reach (a quarter
        // wrap of margin; one store per 16384 buffers consumed).
        if !self.notifications
            && self.features.event_idx
            && self.parked_event.wrapping_sub(self.last_avail) < 0x4000
        {
            let ev = self.park_event();
            self.ring.avail_event().store(ev.to_le(), Ordering::Relaxed);
        }
        n
    }

    /// Whether the driver wants a used-buffer notification ("call") for
    /// what was published since the previous `needs_call`. Call after
    /// [`flush_used`](Self::flush_used).
    ///
    /// When something was published, a SeqCst fence orders our `used.idx`
    /// store before the read of `used_event`/`avail.flags` (pairs with the driver's full barrier in
    /// `virtqueue_enable_cb`; Linux vhost's `smp_mb()` in
    /// `vhost_notify`). Then: nothing published since the last check →
    /// `false`; without EVENT_IDX → `!(avail.flags & NO_INTERRUPT)`; with
    /// EVENT_IDX → `vring_need_event(used_event, new, old)` (spec 2.7.10).
    fn needs_call(&mut self) -> bool {
        let new = self.used_idx;
        let old = self.signalled_used;
        let valid = self.signalled_valid;
        self.signalled_used = new;
        self.signalled_valid = true;
        if new == old {
            // Nothing published: no call, and no fence needed (a polling
            // worker asks this on every empty pass).
            return false;
        }
        fence(Ordering::SeqCst);
        if !self.features.event_idx {
            let flags = u16::from_le(self.ring.avail_flags().load(Ordering::Relaxed));
            return flags & VRING_AVAIL_F_NO_INTERRUPT == 0;
        }
        if !valid {
            return true;
        }
        let event = u16::from_le(self.ring.used_event().load(Ordering::Relaxed));
        vring_need_event(event, new, old)
    }

    /// Asks the driver not to kick. Without EVENT_IDX this sets
    /// `VRING_USED_F_NO_NOTIFY`. With EVENT_IDX the flag must stay 0 (spec
    /// 2.7.10); Linux vhost and DPDK just stop moving `avail_event`, which
    /// lets the driver kick once more when it crosses the stale value and
    /// again each time the 16-bit index wraps. We park `avail_event` half a
    /// wrap (0x8000) ahead of `last_avail` instead — a driver can never be
    /// more than a ring (≤ 32768) ahead of us, so it cannot reach it — and
    /// [`flush_used`](Self::flush_used) moves it forward before we catch up
    /// with it. So a polled queue really sees no kicks.
    ///
    /// Suppression is advisory: a driver may still kick.
    fn disable_notifications(&mut self) {
        if self.notifications || self.features.event_idx {
            self.write_notify_state(false);
        }
    }

    /// Asks the driver to kick for new buffers, then closes the race with a
    /// driver that published just before seeing the request: writes the
    /// flag (or `avail_event = last_avail`), SeqCst fence, re-reads
    /// `avail.idx`. Returns `true` if work is already pending — the caller
    /// must then poll again instead of sleeping (Linux `vhost_enable_notify`).
    fn enable_notifications(&mut self) -> Result<bool, QueueError> {
        self.write_notify_state(true);
        fence(Ordering::SeqCst);
        let n = self.avail_pending()?;
        self.shadow_avail = self.last_avail.wrapping_add(n);
        Ok(n != 0)
    }

    /// As [`enable_notifications`](Self::enable_notifications), for a caller
    /// that can use nothing less than `n` pending buffers (a receive frame
    /// that spans `n`): with EVENT_IDX the driver is asked to kick once the
    /// `n`-th is published (see [`set_kick_threshold`](Self::set_kick_threshold)),
    /// without it on every buffer. Returns `true` if `n` are already
    /// pending; fewer pending buffers are no reason to poll again.
    fn enable_notifications_for(&mut self, n: u16) -> Result<bool, QueueError> {
        if n <= 1 || !self.set_kick_threshold(n) {
            let work = self.enable_notifications()?;
            return Ok(work && self.shadow_avail.wrapping_sub(self.last_avail) >= n);
        }
        let pending = self.avail_pending()?;
        self.shadow_avail = self.last_avail.wrapping_add(pending);
        Ok(pending >= n)
    }

    /// EVENT_IDX only: asks for a kick when the driver publishes the entry
    /// at `last_avail + n - 1`, i.e. once about `n` buffers are pending
    /// (`n` 0 is taken as 1). Returns `false`, doing nothing, without
    /// EVENT_IDX. Like [`enable_notifications`](Self::enable_notifications)
    /// the caller should re-check [`avail_pending`](Self::avail_pending)
    /// afterwards; a full fence is issued for that.
    fn set_kick_threshold(&mut self, n: u16) -> bool {
        if !self.features.event_idx {
            return false;
        }
        let ev = self.last_avail.wrapping_add(n.max(1) - 1);
        self.notifications = true;
        self.ring.avail_event().store(ev.to_le(), Ordering::Relaxed);
        fence(Ordering::SeqCst);
        true
    }

    /// Next available index to consume: the value `GET_VRING_BASE` reports.
    fn last_avail(&self) -> u16 {
        self.last_avail
    }

    /// `used.idx` as last published.
    fn used_idx(&self) -> u16 {
        self.used_idx
    }

    /// Used entries pushed but not yet published.
    fn pending_used(&self) -> u16 {
        self.pending
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
