//! A guest driver and a device serving one split ring, in anonymous guest
//! memory: the test double for code that serves rings (as `virtio-queue`'s
//! `mock.rs` is in rust-vmm). Built for this crate's own tests and, with the
//! `test-utils` feature, for other crates' tests.
//!
//! Layout: the rings start at guest-physical 0; packet buffers are slots of
//! [`SLOT`] bytes from [`BUF_BASE`] ([`buf`]`(i)` is slot `i`).

use crate::device::{Chain, DeviceQueue};
use crate::driver::{DriverQueue, Seg};
use crate::features::RingFeatures;
use crate::layout::QueueLayout;
use crate::mem::GuestMemory;
use crate::raw::RawRing;

/// Guest memory size, bytes.
pub const MEM_SIZE: u64 = 4 << 20;
/// Guest-physical address of the first buffer slot.
pub const BUF_BASE: u64 = 1 << 20;
/// Bytes reserved per buffer slot.
pub const SLOT: u64 = 2048;

/// One ring seen from both sides, over the same memory.
#[derive(Debug)]
pub struct MockQueue {
    /// The guest memory holding the rings and the buffers.
    pub mem: GuestMemory,
    /// Where the rings are (guest-physical addresses).
    pub layout: QueueLayout,
    /// The guest's side: adds buffers, takes used ones.
    pub driver: DriverQueue,
    /// The backend's side, as a queue worker holds it.
    pub device: DeviceQueue,
    /// Scratch chain of the ring's size for [`DeviceQueue::pop`].
    pub chain: Chain,
}

impl MockQueue {
    /// A ring of `size` entries with `features`, both indices at 0.
    ///
    /// # Panics
    /// If `size` is not a valid queue size or memory cannot be mapped.
    pub fn new(size: u16, features: RingFeatures) -> Self {
        Self::starting_at(size, features, 0)
    }

    /// Like [`new`](Self::new) with `avail.idx` and `used.idx` starting at
    /// `start`, to reach the 16-bit wrap-around quickly.
    ///
    /// # Panics
    /// As [`new`](Self::new).
    pub fn starting_at(size: u16, features: RingFeatures, start: u16) -> Self {
        let mem = GuestMemory::new_anonymous(MEM_SIZE).expect("mapping guest memory");
        let (layout, total) = QueueLayout::contiguous(size, 0);
        assert!(
            total < BUF_BASE,
            "rings of {size} entries overlap the buffers"
        );
        let driver = DriverQueue::new_at(&mem, layout, features, start).expect("driver ring");
        let device = DeviceQueue::new(&mem, layout, false, features, start).expect("device ring");
        MockQueue {
            mem,
            layout,
            driver,
            device,
            chain: Chain::with_capacity(usize::from(size)),
        }
    }

    /// Unchecked view of the same ring, for building bad chains and reading
    /// the flag and event fields.
    pub fn raw(&self) -> RawRing {
        RawRing::new(&self.mem, self.layout).expect("layout checked in new")
    }
}

/// Guest-physical address of buffer slot `i`.
pub fn buf(i: u64) -> u64 {
    BUF_BASE + i * SLOT
}

/// A segment the device reads (a transmit buffer).
pub fn readable(gpa: u64, len: u32) -> Seg {
    Seg {
        gpa,
        len,
        writable: false,
    }
}

/// A segment the device writes (a receive buffer).
pub fn writable(gpa: u64, len: u32) -> Seg {
    Seg {
        gpa,
        len,
        writable: true,
    }
}
