//! Arbitrary bytes become driver and device operations on one split
//! queue; every buffer the driver adds must come back exactly once, and
//! the device must never reject a chain a correct driver built
//! (`vadapt_fuzz::ring::split_driver_device`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vadapt_fuzz::ring::split_driver_device(data));
