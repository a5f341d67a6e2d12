//! A guest's virtio-net header and the frame behind it into the offload
//! code: the header checked, a partial checksum completed, a TCP segment cut
//! into segments that must each verify. Details: `vadapt_fuzz::vnet_hdr`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vadapt_fuzz::vnet_hdr::run(data));
