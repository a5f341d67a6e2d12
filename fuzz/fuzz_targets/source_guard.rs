//! A guest's frame into the frame classifier and the IP source guard of a
//! port with `allowed_ips`. Details: `vadapt_fuzz::source_guard`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vadapt_fuzz::source_guard::run(data));
