//! The device side's contract ([`DeviceRing`]): what a queue worker, a test
//! or a fuzzer does with a ring it serves, the same for both ring kinds.
//! [`DeviceQueue`](crate::DeviceQueue) (split, spec 2.7),
//! [`PackedDeviceQueue`](crate::PackedDeviceQueue) (packed, spec 2.8) and
//! [`AnyDeviceQueue`](crate::AnyDeviceQueue) (either, chosen at run time)
//! implement it. The shape is `virtio-queue`'s `QueueT` cut to a backend's
//! data path: guest memory is passed per call where a method reads buffers
//! ([`pop`](DeviceRing::pop)), and the ring itself was translated once
//! when the queue was made.
//!
//! A buffer is named by a `u16`: its head index on a split ring, its
//! buffer id on a packed one. Whatever [`pop`](DeviceRing::pop) returned
//! (or a [`ChainError`] named in `head`) is what
//! [`push_used`](DeviceRing::push_used) takes back.
//!
//! A service pass looks like
//!
//! ```no_run
//! # use vadapt_virtq::{Chain, DeviceRing, GuestMemory};
//! fn pass(q: &mut impl DeviceRing, mem: &GuestMemory, chain: &mut Chain) {
//!     while let Ok(Some(head)) = q.pop(mem, chain) {
//!         // ... copy chain.read_into(..) somewhere ...
//!         q.push_used(head, 0);
//!     }
//!     q.flush_used();
//!     if q.needs_call() { /* signal the call eventfd */ }
//! }
//! ```
//!
//! (a real caller also handles `Err(ChainError)`: count it by `err.kind`,
//! and `push_used(head, 0)` when `err.head` is `Some`).

use crate::chain::{Chain, ChainError};
use crate::features::RingFeatures;
use crate::mem::GuestMemory;
use crate::ring::QueueError;

/// The device's view of one virtqueue of either kind. One queue worker owns
/// it; every method does bounded work and none blocks or panics on what the
/// driver wrote.
pub trait DeviceRing {
    /// Whether [`pop`](Self::pop) has anything to look at: a buffer made
    /// available and not consumed, or a corrupt ring (which `pop`
    /// reports). One Acquire load at most: the check of a polling worker's
    /// empty pass.
    fn has_avail(&self) -> bool;

    /// How many buffers (split) or ring descriptors (packed; for buffers of
    /// one descriptor, the buffers) are available and not yet consumed.
    /// Errors if the driver made more available than the ring can hold: the
    /// ring is corrupt.
    fn avail_pending(&self) -> Result<u16, QueueError>;

    /// Consumes the next available buffer and walks its descriptors into
    /// `chain`; returns the buffer's name.
    ///
    /// `Ok(None)` if nothing is available. On a bad buffer it is consumed
    /// anyway (so the queue moves on) and the error says why; if `err.head`
    /// is `Some`, give it back with `push_used(head, 0)`.
    /// `ChainErrorKind::AvailIndexAhead` (`head: None`) consumes nothing:
    /// the ring is corrupt and the queue should be stopped.
    ///
    /// Bounded work: at most twice the ring's size in descriptors is read.
    fn pop(&mut self, mem: &GuestMemory, chain: &mut Chain) -> Result<Option<u16>, ChainError>;

    /// Puts the last `n` buffers [`pop`](Self::pop) consumed back, for the
    /// next pops to walk again (Linux vhost's `vhost_discard_vq_desc`), for a
    /// receive frame that did not fit the buffers taken so far. The caller
    /// must not have given any of them back used.
    fn unpop(&mut self, n: u16);

    /// Writes a used element for buffer `head` (bytes `written` into its
    /// writable buffers) without publishing it: the driver sees it at the
    /// next [`flush_used`](Self::flush_used).
    fn push_used(&mut self, head: u16, written: u32);

    /// Whether buffers the device writes nothing into (transmit) are best
    /// given back in batches with
    /// [`push_used_batch_in_order`](Self::push_used_batch_in_order).
    fn batches_used_in_order(&self) -> bool;

    /// `VIRTIO_F_IN_ORDER` only: gives back the `count` oldest buffers
    /// popped and not given back, the last of which is `last_head`, with one
    /// used element of length 0 (spec 2.7.9 and 2.8.9) — for transmit, where
    /// nothing is written. Without IN_ORDER this would lose buffers, so it
    /// does nothing and returns `false`; `count == 0` is a no-op.
    fn push_used_batch_in_order(&mut self, last_head: u16, count: u16) -> bool;

    /// Publishes every pending used element at once (Release ordering: what
    /// was written before becomes visible to a driver that Acquire-reads).
    /// Returns how many buffers were published.
    fn flush_used(&mut self) -> u16;

    /// Whether the driver wants a used-buffer notification ("call") for
    /// what was published since the previous `needs_call`. Call after
    /// [`flush_used`](Self::flush_used). A full fence orders the publication
    /// before the read of the driver's suppression state when something was
    /// published; nothing published is `false` without a fence.
    fn needs_call(&mut self) -> bool;

    /// Asks the driver not to kick. Advisory: a driver may still kick.
    fn disable_notifications(&mut self);

    /// Asks the driver to kick for new buffers, then closes the race with a
    /// driver that published just before seeing the request (full fence,
    /// look again). Returns `true` if work is already available — the
    /// caller must then poll again instead of sleeping.
    fn enable_notifications(&mut self) -> Result<bool, QueueError>;

    /// As [`enable_notifications`](Self::enable_notifications), for a caller
    /// that can use nothing less than `n` available buffers (a receive frame
    /// that spans `n`): with EVENT_IDX the driver is asked to kick once the
    /// `n`-th is made available ([`set_kick_threshold`](Self::set_kick_threshold)),
    /// without it on every buffer. Returns `true` if `n` are already
    /// available.
    fn enable_notifications_for(&mut self, n: u16) -> Result<bool, QueueError>;

    /// `VIRTIO_F_EVENT_IDX` only: asks for a kick once about `n` buffers are
    /// available past the device's position (`n` 0 is taken as 1). Returns
    /// `false`, doing nothing, without EVENT_IDX. A full fence is issued;
    /// the caller should re-check [`avail_pending`](Self::avail_pending).
    fn set_kick_threshold(&mut self, n: u16) -> bool;

    /// `true` while kicks are requested (after `enable_notifications` or
    /// `set_kick_threshold`, until `disable_notifications`).
    fn notifications_enabled(&self) -> bool;

    /// Where the device reads next, as vhost-user's `GET_VRING_BASE`
    /// reports it: a split ring's next available index; a packed ring's
    /// position in bits 0–14 with the avail wrap counter in bit 15.
    fn last_avail(&self) -> u16;

    /// The used position as last published, in the form of
    /// [`last_avail`](Self::last_avail).
    fn used_idx(&self) -> u16;

    /// Buffers given back used and not yet published.
    fn pending_used(&self) -> u16;

    /// Queue size (descriptors).
    fn size(&self) -> u16;

    /// Negotiated ring features.
    fn features(&self) -> RingFeatures;
}
