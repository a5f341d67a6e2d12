//! The device side of either ring kind behind one type ([`AnyDeviceQueue`]):
//! what a queue worker serves without knowing whether the frontend
//! negotiated `VIRTIO_F_RING_PACKED`. Each method is the split queue's
//! ([`DeviceQueue`]) or the packed queue's ([`PackedDeviceQueue`]), which
//! have the same contract; a buffer is named by its head index on a split
//! ring and by its buffer id on a packed one.

use crate::chain::{Chain, ChainError};
use crate::device::DeviceQueue;
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

/// `$q.$method($args)` on whichever kind `$self` is.
macro_rules! either {
    ($self:expr, $q:ident => $e:expr) => {
        match $self {
            AnyDeviceQueue::Split($q) => $e,
            AnyDeviceQueue::Packed($q) => $e,
        }
    };
}

impl AnyDeviceQueue {
    /// True for a packed queue.
    pub fn is_packed(&self) -> bool {
        matches!(self, AnyDeviceQueue::Packed(_))
    }

    /// See [`DeviceQueue::pop`].
    #[inline]
    pub fn pop(&mut self, mem: &GuestMemory, chain: &mut Chain) -> Result<Option<u16>, ChainError> {
        either!(self, q => q.pop(mem, chain))
    }

    /// See [`DeviceQueue::unpop`].
    pub fn unpop(&mut self, n: u16) {
        either!(self, q => q.unpop(n))
    }

    /// See [`DeviceQueue::push_used`].
    #[inline]
    pub fn push_used(&mut self, head: u16, written: u32) {
        either!(self, q => q.push_used(head, written))
    }

    /// Whether buffers the device writes nothing into (transmit) are best
    /// given back in batches with [`push_used_batch_in_order`](Self::push_used_batch_in_order):
    /// a packed ring with `VIRTIO_F_IN_ORDER`. One used descriptor then
    /// stands for a batch (spec 2.8.9), which in-order packed drivers
    /// follow (DPDK's `virtio_xmit_cleanup_inorder_packed` walks from the
    /// last id it freed to the one written). Not a split ring: DPDK 22.11's
    /// in-order split cleanup reads the id of every used entry, so it would
    /// never free the skipped buffers.
    pub fn batches_used_in_order(&self) -> bool {
        matches!(self, AnyDeviceQueue::Packed(q) if q.features().in_order)
    }

    /// See [`PackedDeviceQueue::push_used_batch_in_order`] (and
    /// [`DeviceQueue::push_used_batch_in_order`]).
    pub fn push_used_batch_in_order(&mut self, last_head: u16, count: u16) -> bool {
        either!(self, q => q.push_used_batch_in_order(last_head, count))
    }

    /// See [`DeviceQueue::flush_used`].
    pub fn flush_used(&mut self) -> u16 {
        either!(self, q => q.flush_used())
    }

    /// See [`DeviceQueue::needs_call`].
    pub fn needs_call(&mut self) -> bool {
        either!(self, q => q.needs_call())
    }

    /// See [`DeviceQueue::has_avail`].
    #[inline]
    pub fn has_avail(&self) -> bool {
        either!(self, q => q.has_avail())
    }

    /// See [`DeviceQueue::avail_pending`].
    pub fn avail_pending(&self) -> Result<u16, QueueError> {
        either!(self, q => q.avail_pending())
    }

    /// See [`DeviceQueue::enable_notifications`].
    pub fn enable_notifications(&mut self) -> Result<bool, QueueError> {
        either!(self, q => q.enable_notifications())
    }

    /// See [`DeviceQueue::enable_notifications_for`].
    pub fn enable_notifications_for(&mut self, n: u16) -> Result<bool, QueueError> {
        either!(self, q => q.enable_notifications_for(n))
    }

    /// See [`DeviceQueue::disable_notifications`].
    pub fn disable_notifications(&mut self) {
        either!(self, q => q.disable_notifications())
    }

    /// See [`DeviceQueue::set_kick_threshold`].
    pub fn set_kick_threshold(&mut self, n: u16) -> bool {
        either!(self, q => q.set_kick_threshold(n))
    }

    /// See [`DeviceQueue::notifications_enabled`].
    pub fn notifications_enabled(&self) -> bool {
        either!(self, q => q.notifications_enabled())
    }

    /// See [`DeviceQueue::last_avail`]; a packed queue's in vhost-user's
    /// form (position in bits 0-14, wrap counter in bit 15).
    pub fn last_avail(&self) -> u16 {
        either!(self, q => q.last_avail())
    }

    /// See [`DeviceQueue::used_idx`].
    pub fn used_idx(&self) -> u16 {
        either!(self, q => q.used_idx())
    }

    /// See [`DeviceQueue::size`].
    pub fn size(&self) -> u16 {
        either!(self, q => q.size())
    }
}
