//! What QEMU sends on its QMP socket (greeting, replies, events, garbage)
//! into the core manager's QMP client, from the server's end of an
//! in-process socket pair: connect, `query-cpus-fast`, `stop`, `cont`.
//! Details: `vadapt_fuzz::qmp`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vadapt_fuzz::qmp::run(data);
    vadapt_fuzz::check_fd_leaks();
});
