//! Shared setup for the integration tests: one anonymous memory with the
//! rings at 0 and packet buffers above.
#![allow(dead_code)]

use vadapt_virtq::{
    device::{Chain, DeviceQueue},
    driver::{DriverQueue, Seg},
    raw::RawRing,
    GuestMemory, QueueLayout, RingFeatures,
};

/// Guest memory size, bytes.
pub const MEM_SIZE: u64 = 4 << 20;
/// Where packet buffers start.
pub const BUF_BASE: u64 = 1 << 20;
/// Bytes reserved per buffer slot.
pub const SLOT: u64 = 2048;

pub struct Setup {
    pub mem: GuestMemory,
    pub layout: QueueLayout,
    pub driver: DriverQueue,
    pub device: DeviceQueue,
    pub chain: Chain,
}

pub fn setup_at(size: u16, features: RingFeatures, start: u16) -> Setup {
    let mem = GuestMemory::new_anonymous(MEM_SIZE).unwrap();
    let (layout, total) = QueueLayout::contiguous(size, 0);
    assert!(total < BUF_BASE);
    let driver = DriverQueue::new_at(&mem, layout, features, start).unwrap();
    let device = DeviceQueue::new(&mem, layout, false, features, start).unwrap();
    Setup {
        mem,
        layout,
        driver,
        device,
        chain: Chain::with_capacity(size as usize),
    }
}

pub fn setup(size: u16, features: RingFeatures) -> Setup {
    setup_at(size, features, 0)
}

/// Raw view of the same ring, for building bad chains.
pub fn raw(s: &Setup) -> RawRing {
    RawRing::new(&s.mem, s.layout).unwrap()
}

/// Address of buffer slot `i`.
pub fn buf(i: u64) -> u64 {
    BUF_BASE + i * SLOT
}

pub fn readable(gpa: u64, len: u32) -> Seg {
    Seg {
        gpa,
        len,
        writable: false,
    }
}

pub fn writable(gpa: u64, len: u32) -> Seg {
    Seg {
        gpa,
        len,
        writable: true,
    }
}
