//! Shared setup for the integration tests: the crate's [`mock`] ring (one
//! anonymous memory with the rings at 0 and packet buffers above), under
//! the names these tests were written with.
//!
//! [`mock`]: vadapt_virtq::mock
// Each test file compiles this module and uses a part of it.
#![allow(dead_code, unused_imports)]

pub use vadapt_virtq::mock::{buf, readable, writable, MockQueue as Setup, BUF_BASE, MEM_SIZE};
use vadapt_virtq::DeviceRing;
use vadapt_virtq::{raw::RawRing, RingFeatures};

pub fn setup_at(size: u16, features: RingFeatures, start: u16) -> Setup {
    Setup::starting_at(size, features, start)
}

pub fn setup(size: u16, features: RingFeatures) -> Setup {
    Setup::new(size, features)
}

/// Raw view of the same ring, for building bad chains.
pub fn raw(s: &Setup) -> RawRing {
    s.raw()
}
