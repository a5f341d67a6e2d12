//! Arbitrary bytes become a small guest memory holding a packed queue
//! (descriptor ring, event structures, indirect tables, buffers); the
//! device pops, copies, holds and gives back until the ring is drained.
//! Every segment handed out must lie inside guest memory
//! (`vadapt_fuzz::ring::packed_device`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vadapt_fuzz::ring::packed_device(data);
});
