//! Arbitrary bytes become a small guest memory holding a split queue
//! (descriptor table, available ring, indirect tables, buffers); the device
//! pops, copies, gives back and flushes until the ring is drained. Every
//! segment handed out must lie inside guest memory
//! (`vadapt_fuzz::ring::split_device`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vadapt_fuzz::ring::split_device(data);
});
