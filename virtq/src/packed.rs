//! The packed virtqueue (virtio 1.2, section 2.8), both sides, under the
//! same bounds checks as the split ring's [`device`](crate::device) and
//! [`driver`](crate::driver).
//!
//! * [`PackedDeviceQueue`] — the backend's view. It keeps the
//!   [`DeviceRing`](crate::DeviceRing) contract as the split
//!   [`DeviceQueue`](crate::DeviceQueue) does (`pop` into the same
//!   [`Chain`](crate::Chain), the same [`ChainError`](crate::ChainError)
//!   kinds for counted drops, `push_used`/`flush_used`/`needs_call`, the
//!   same notification calls), so a queue worker can serve either kind.
//! * [`PackedDriverQueue`] — the guest driver's view, modelled on Linux's
//!   `virtio_ring.c` (packed): for the synthetic guest, tests and fuzzers.
//! * `PackedMockQueue` (feature `test-utils`) — both over one ring.
//!
//! # The ring
//!
//! One array of `size` 16-byte descriptors (`le64 addr; le32 len; le16 id;
//! le16 flags`), any size in `1..=32768`, and two 4-byte event suppression
//! structures. The driver fills descriptors in ring order, marking each
//! available by setting `AVAIL` to its wrap counter and `USED` to its
//! inverse; the device consumes in the same order while `AVAIL` equals its
//! own avail wrap counter and `USED` does not. A buffer of several
//! descriptors is chained with `NEXT` and its id is the last descriptor's.
//! The device reports a buffer by writing one descriptor at its used
//! position (`id`, `len`, both flag bits equal to its used wrap counter)
//! and skips forward by as many descriptors as the buffer took; each side
//! flips a wrap counter whenever its position passes the end of the ring.
//!
//! # What is checked
//!
//! As for the split ring ([`chain`](crate::chain)): every buffer and
//! indirect table inside one memory region, indirect tables non-empty,
//! multiples of 16 bytes, at most the queue size entries, never nested,
//! never with `NEXT`, negotiated; readable before writable; total length
//! within `u32`. A chain's length is bounded by the descriptors the driver
//! can have in flight (`size` minus those the device holds), so a ring
//! whose every descriptor says `NEXT` is [`ChainTooLong`], consumed and
//! returnable, and a driver that marks more than `size` descriptors
//! available without getting any back is [`AvailIndexAhead`], consuming
//! nothing. Each descriptor is read once, at most `size` from the ring and
//! `size` from one indirect table per chain.
//!
//! [`ChainTooLong`]: crate::ChainErrorKind::ChainTooLong
//! [`AvailIndexAhead`]: crate::ChainErrorKind::AvailIndexAhead
//!
//! # Memory ordering
//!
//! The driver writes a buffer's descriptors, then stores the first one's
//! flags with Release; the device Acquire-loads that flag word before
//! reading the rest. The device writes `id` and `len` of its used
//! descriptors, issues one Release fence per batch, then stores their flags
//! (the batch's first last, so a driver reading in order sees the batch at
//! once, as DPDK's shadow flush does); the driver Acquire-loads flags. Each
//! side stores its event suppression word, then a SeqCst fence, then reads
//! the other side's ring state (and the reverse), as for the split ring.
//!
//! # Event suppression and `VIRTIO_RING_F_EVENT_IDX`
//!
//! Each structure is `le16 off_wrap` (bits 0–14 a ring position, bit 15 a
//! wrap counter) and `le16 flags`: `ENABLE` (notify on every buffer),
//! `DISABLE`, or — only with EVENT_IDX — `DESC` (notify when the descriptor
//! at `off_wrap` is made available or used). Unlike the split ring, the
//! flags stay meaningful with EVENT_IDX, so a polling device disables kicks
//! outright. The `DESC` test is [`vring_need_event`](crate::vring_need_event)
//! over ring positions, with `off` taken a lap back when its wrap bit is
//! not the current one (Linux `virtqueue_kick_prepare_packed`, DPDK
//! `vhost_vring_call_packed`). `DESC` without EVENT_IDX and the reserved
//! value 3 are read as `ENABLE`: an extra notification is harmless, a
//! missing one hangs a queue.
//!
//! # IN_ORDER
//!
//! With `VIRTIO_F_IN_ORDER` the device may report a batch with one used
//! descriptor naming the batch's last buffer and skip the whole batch's
//! descriptors (spec 2.8.9, [`DeviceRing::push_used_batch_in_order`]);
//! the driver walks its in-flight buffers in order to follow.
//!
//! [`DeviceRing::push_used_batch_in_order`]: crate::DeviceRing::push_used_batch_in_order

mod desc;
mod device;
mod driver;
mod layout;
#[cfg(any(test, feature = "test-utils"))]
mod mock;
mod pos;
mod ring;
mod walk;

pub use desc::{
    EventSuppression, PackedDescriptor, RING_EVENT_FLAGS_DESC, RING_EVENT_FLAGS_DISABLE,
    RING_EVENT_FLAGS_ENABLE, VIRTIO_F_RING_PACKED, VIRTQ_DESC_F_AVAIL, VIRTQ_DESC_F_USED,
};
pub use device::PackedDeviceQueue;
pub use driver::PackedDriverQueue;
pub use layout::{is_valid_packed_size, PackedLayout};
#[cfg(any(test, feature = "test-utils"))]
pub use mock::PackedMockQueue;
pub use pos::RingPos;
