//! A guest driver and a device serving one packed ring in anonymous guest
//! memory, as [`MockQueue`](crate::mock::MockQueue) is for the split ring
//! (same memory map: the ring at guest-physical 0, buffer slots from
//! [`BUF_BASE`]).

use super::desc::{EventSuppression, PackedDescriptor};
use super::device::PackedDeviceQueue;
use super::driver::PackedDriverQueue;
use super::layout::PackedLayout;
use super::pos::RingPos;
use crate::chain::Chain;
use crate::features::RingFeatures;
use crate::mem::GuestMemory;
use crate::mock::{BUF_BASE, MEM_SIZE};

/// One packed ring seen from both sides, over the same memory.
#[derive(Debug)]
pub struct PackedMockQueue {
    /// The guest memory holding the ring and the buffers.
    pub mem: GuestMemory,
    /// Where the ring is (guest-physical addresses).
    pub layout: PackedLayout,
    /// The guest's side.
    pub driver: PackedDriverQueue,
    /// The backend's side.
    pub device: PackedDeviceQueue,
    /// Scratch chain of the ring's size for [`PackedDeviceQueue::pop`].
    pub chain: Chain,
}

impl PackedMockQueue {
    /// A ring of `size` descriptors (any of `1..=32768`) with `features`,
    /// both sides at position 0, wrap counter 1.
    ///
    /// # Panics
    /// If `size` is not a valid packed size or memory cannot be mapped.
    pub fn new(size: u16, features: RingFeatures) -> Self {
        Self::starting_at(size, features, RingPos::default().to_u16())
    }

    /// Like [`new`](Self::new) with both sides starting at `start`
    /// (position in bits 0–14, wrap counter in bit 15).
    ///
    /// # Panics
    /// As [`new`](Self::new), or if `start` is outside the ring.
    pub fn starting_at(size: u16, features: RingFeatures, start: u16) -> Self {
        let mem = GuestMemory::new_anonymous(MEM_SIZE).expect("mapping guest memory");
        let (layout, total) = PackedLayout::contiguous(size, 0);
        assert!(total < BUF_BASE, "a ring of {size} overlaps the buffers");
        let driver = PackedDriverQueue::new_at(&mem, layout, features, start).expect("driver ring");
        let device =
            PackedDeviceQueue::new(&mem, layout, false, features, start).expect("device ring");
        PackedMockQueue {
            mem,
            layout,
            driver,
            device,
            chain: Chain::with_capacity(usize::from(size)),
        }
    }

    /// Writes ring descriptor `i` as given (bad rings for tests).
    ///
    /// # Panics
    /// If `i` is outside the ring.
    pub fn set_desc(&self, i: u16, d: PackedDescriptor) {
        assert!(i < self.layout.size);
        self.mem
            .write(self.layout.desc + 16 * u64::from(i), &d.to_bytes())
            .expect("inside the ring");
    }

    /// Reads ring descriptor `i`.
    ///
    /// # Panics
    /// If `i` is outside the ring.
    pub fn desc(&self, i: u16) -> PackedDescriptor {
        assert!(i < self.layout.size);
        let mut b = [0u8; 16];
        self.mem
            .read(self.layout.desc + 16 * u64::from(i), &mut b)
            .expect("inside the ring");
        PackedDescriptor::from_bytes(b)
    }

    fn event(&self, gpa: u64) -> EventSuppression {
        let mut b = [0u8; 4];
        self.mem.read(gpa, &mut b).expect("inside memory");
        EventSuppression::from_word(u32::from_le_bytes(b))
    }

    /// The driver event suppression structure (what the driver asked).
    pub fn driver_event(&self) -> EventSuppression {
        self.event(self.layout.driver_event)
    }

    /// The device event suppression structure (what the device asked).
    pub fn device_event(&self) -> EventSuppression {
        self.event(self.layout.device_event)
    }

    /// Overwrites the driver event suppression structure.
    pub fn set_driver_event(&self, e: EventSuppression) {
        self.mem
            .write(self.layout.driver_event, &e.to_word().to_le_bytes())
            .expect("inside memory");
    }

    /// Overwrites the device event suppression structure.
    pub fn set_device_event(&self, e: EventSuppression) {
        self.mem
            .write(self.layout.device_event, &e.to_word().to_le_bytes())
            .expect("inside memory");
    }
}
