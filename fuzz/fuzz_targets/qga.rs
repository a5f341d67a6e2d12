//! What a guest agent sends (after the client's sync request) into the
//! core manager's guest-agent client, from the agent's end of an
//! in-process socket pair: sync, then the vCPU or queue-pair exchanges.
//! Details: `vadapt_fuzz::qga`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vadapt_fuzz::qga::run(data);
    vadapt_fuzz::check_fd_leaks();
});
