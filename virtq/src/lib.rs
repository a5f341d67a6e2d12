//! Hand-written, bounds-checked virtqueue data path, split (virtio 1.2,
//! section 2.7) and packed (section 2.8), for both sides:
//!
//! * [`DeviceRing`] — the backend's contract with a ring of either kind,
//!   kept by [`device::DeviceQueue`] (split), [`PackedDeviceQueue`] and
//!   [`AnyDeviceQueue`], used by the vadapt daemon's queue workers, the
//!   tests and the fuzzers;
//! * [`device::DeviceQueue`] — the backend's view of a split ring;
//! * [`driver::DriverQueue`] — the guest driver's view, used by the
//!   synthetic guest, tests, fuzzers and benchmarks;
//! * [`raw::RawRing`] — unchecked field access for tests and fuzzers;
//! * `mock::MockQueue` (feature `test-utils`) — a driver and a device over
//!   one ring in anonymous memory, for tests of code that serves rings;
//! * [`packed`] — the same for the packed ring (spec 2.8):
//!   [`PackedDeviceQueue`], [`PackedDriverQueue`] and `PackedMockQueue`;
//! * [`AnyDeviceQueue`] — either device queue behind one type, for a
//!   worker that serves both ring kinds alike; [`AnyDriverQueue`] the same
//!   for a driver (the synthetic guest).
//!
//! What travels in the buffers (the virtio-net header, frames, checksums)
//! is `vadapt_wire`'s, not this crate's.
//!
//! # Why not `virtio-queue`
//!
//! `virtio-queue`'s per-descriptor path costs 2–4× DPDK's cycles per packet
//! (a region lookup per field access, `used.idx` published per element, the
//! memory map reloaded per call). Here the rings are translated to host
//! pointers once when the queue is created; each descriptor costs one
//! volatile 16-byte read and one translation over a short, immutable region
//! table ([`mem::GuestMemory`]); `avail.idx` is loaded once per batch, and
//! `used.idx` stored once per batch ([`device::DeviceQueue::flush_used`]).
//!
//! # What is checked
//!
//! Guest memory is controlled by the other side and may change under us.
//! Every descriptor is read exactly once (volatile) and the checks apply to
//! that copy. A chain is rejected, with a distinct
//! [`chain::ChainErrorKind`], if: the head or a `next` index is outside the
//! table; a buffer or indirect table is not entirely inside one memory region
//! (including `addr + len` overflow); the chain visits more descriptors than
//! the table holds (loops); a readable descriptor follows a writable one; an
//! indirect descriptor appears without `VIRTIO_F_INDIRECT_DESC`, together
//! with `NEXT`, inside an indirect table, or with a table that is empty, not
//! a multiple of 16 bytes, or longer than the queue size; the total length
//! overflows `u32`; or `avail.idx` runs more than the queue size ahead.
//! Nothing panics on guest data, no Rust reference to guest memory is formed
//! (only raw-pointer copies and `AtomicU16` for the index/flag/event
//! fields), and no pointer leaves a region.
//!
//! # Memory ordering
//!
//! The other side is another process (or thread) on the same coherent
//! machine, so the Linux "weak barriers" model applies:
//!
//! * the driver writes descriptors and ring entries, then publishes with a
//!   Release store of `avail.idx`; the device Acquire-loads `avail.idx`
//!   before reading entries (`smp_rmb` in Linux vhost, `rte_atomic_load`
//!   acquire in DPDK);
//! * the device writes used entries, then publishes with a Release store of
//!   `used.idx`; the driver Acquire-loads it;
//! * around notification suppression each side does a store then a load of
//!   the *other* side's field, which needs a full (SeqCst) fence between
//!   them: device `flush_used` → fence → read `used_event`/`avail.flags`
//!   ([`device::DeviceQueue::needs_call`]); device write
//!   `avail_event`/`used.flags` → fence → re-read `avail.idx`
//!   ([`device::DeviceQueue::enable_notifications`]); and symmetrically in
//!   the driver's `kick_prepare` and `enable_cb`. Without these fences a
//!   notification can be lost (Linux `vhost_notify`/`vhost_enable_notify`).
//!
//! # EVENT_IDX
//!
//! With `VIRTIO_F_EVENT_IDX` the flag bits are replaced by indices: the
//! device calls only if the driver's `used_event` lies in the range of used
//! indices published since the last check, and the driver kicks only if the
//! device's `avail_event` lies in the range it published since its last kick
//! — both via [`vring_need_event`]. The device can thus ask for a kick once
//! `n` buffers are pending ([`device::DeviceQueue::set_kick_threshold`]),
//! which adaptive polling policies use.
//!
//! # IN_ORDER
//!
//! With `VIRTIO_F_IN_ORDER` buffers are used in the order they were made
//! available, so the device may report a whole batch with one used entry
//! naming the last buffer and advance `used.idx` by the batch size (spec
//! 2.7.9; [`device::DeviceQueue::push_used_batch_in_order`]), which saves a
//! ring write per packet on TX. The driver allocates descriptors in table
//! order and recognises batch entries ([`driver::DriverQueue::pop_used`]).

#![deny(missing_docs)]

pub mod any_device;
pub mod any_driver;
pub mod chain;
pub mod device;
pub mod device_ring;
pub mod dirty_log;
pub mod driver;
mod event_idx;
pub mod features;
pub mod layout;
pub mod mem;
#[cfg(any(test, feature = "test-utils"))]
pub mod mock;
pub mod packed;
mod prefetch;
pub mod raw;
mod ring;
pub mod spec;

pub use any_device::AnyDeviceQueue;
pub use any_driver::{AnyDriverQueue, AnyLayout};
pub use chain::{Chain, ChainError, ChainErrorKind, Segment};
pub use device::DeviceQueue;
pub use device_ring::DeviceRing;
pub use dirty_log::{DirtyLog, DirtyLogError, LOG_PAGE};
pub use driver::{DriverError, DriverQueue, Seg};
pub use event_idx::vring_need_event;
pub use features::RingFeatures;
pub use layout::{is_valid_size, QueueLayout};
pub use mem::{GuestMemory, MemError, Region};
pub use packed::{PackedDeviceQueue, PackedDriverQueue, PackedLayout, RingPos};
pub use ring::QueueError;
