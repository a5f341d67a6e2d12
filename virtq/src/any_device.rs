//! The device side of either ring kind behind one type ([`AnyDeviceQueue`]):
//! what a queue worker serves without knowing whether the frontend
//! negotiated `VIRTIO_F_RING_PACKED`. It keeps the [`DeviceRing`] contract
//! by handing each call to the split queue ([`DeviceQueue`]) or the packed
//! one ([`PackedDeviceQueue`]); a match on two variants, which the compiler
//! inlines where a `dyn DeviceRing` would cost an indirect call a method.

use crate::chain::{Chain, ChainError};
use crate::device::DeviceQueue;
use crate::device_ring::DeviceRing;
use crate::features::RingFeatures;
use crate::mem::GuestMemory;
use crate::packed::PackedDeviceQueue;
use crate::ring::QueueError;

/// A split or a packed device queue.
#[derive(Debug)]
pub enum AnyDeviceQueue {
    /// A split virtqueue (virtio 1.2, 2.7).
    Split(DeviceQueue),
    /// A packed virtqueue (virtio 1.2, 2.8).
    Packed(PackedDeviceQueue),
}

impl AnyDeviceQueue {
    /// True for a packed queue.
    pub fn is_packed(&self) -> bool {
        matches!(self, AnyDeviceQueue::Packed(_))
    }
}

/// `$e` with `$q` bound to whichever kind `$self` is.
macro_rules! either {
    ($self:expr, $q:ident => $e:expr) => {
        match $self {
            AnyDeviceQueue::Split($q) => $e,
            AnyDeviceQueue::Packed($q) => $e,
        }
    };
}

impl DeviceRing for AnyDeviceQueue {
    #[inline]
    fn has_avail(&self) -> bool {
        either!(self, q => q.has_avail())
    }

    fn avail_pending(&self) -> Result<u16, QueueError> {
        either!(self, q => q.avail_pending())
    }

    #[inline]
    fn pop(&mut self, mem: &GuestMemory, chain: &mut Chain) -> Result<Option<u16>, ChainError> {
        either!(self, q => q.pop(mem, chain))
    }

    fn unpop(&mut self, n: u16) {
        either!(self, q => q.unpop(n))
    }

    #[inline]
    fn push_used(&mut self, head: u16, written: u32) {
        either!(self, q => q.push_used(head, written))
    }

    fn batches_used_in_order(&self) -> bool {
        either!(self, q => q.batches_used_in_order())
    }

    fn push_used_batch_in_order(&mut self, last_head: u16, count: u16) -> bool {
        either!(self, q => q.push_used_batch_in_order(last_head, count))
    }

    fn flush_used(&mut self) -> u16 {
        either!(self, q => q.flush_used())
    }

    fn needs_call(&mut self) -> bool {
        either!(self, q => q.needs_call())
    }

    fn disable_notifications(&mut self) {
        either!(self, q => q.disable_notifications())
    }

    fn enable_notifications(&mut self) -> Result<bool, QueueError> {
        either!(self, q => q.enable_notifications())
    }

    fn enable_notifications_for(&mut self, n: u16) -> Result<bool, QueueError> {
        either!(self, q => q.enable_notifications_for(n))
    }

    fn set_kick_threshold(&mut self, n: u16) -> bool {
        either!(self, q => q.set_kick_threshold(n))
    }

    fn notifications_enabled(&self) -> bool {
        either!(self, q => q.notifications_enabled())
    }

    fn last_avail(&self) -> u16 {
        either!(self, q => q.last_avail())
    }

    fn used_idx(&self) -> u16 {
        either!(self, q => q.used_idx())
    }

    fn pending_used(&self) -> u16 {
        either!(self, q => q.pending_used())
    }

    fn size(&self) -> u16 {
        either!(self, q => q.size())
    }

    fn features(&self) -> RingFeatures {
        either!(self, q => q.features())
    }
}
