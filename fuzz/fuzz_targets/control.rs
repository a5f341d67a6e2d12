//! One request line into a real daemon's control socket (raw bytes, or a
//! request built from the protocol's words); the answer must be one JSON
//! response line that fits the request. Details: `vadapt_fuzz::control`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(line) = vadapt_fuzz::control::input_line(data) {
        vadapt_fuzz::control::run(&line);
        vadapt_fuzz::check_fd_leaks();
    }
});
