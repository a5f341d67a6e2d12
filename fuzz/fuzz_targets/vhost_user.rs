//! vhost-user message sequences into the data plane's real backend request
//! handler, over a real socket pair with descriptors passed by SCM_RIGHTS:
//! memory tables, ring setup and feature negotiation in any order, raw
//! bytes now and then. Each input gets a fresh port; each connection is
//! reset at its end as `serve` resets it; no descriptor may leak.
//! Details: `vadapt_fuzz::vhost_user`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vadapt_fuzz::vhost_user::{run, Input};

fuzz_target!(|input: Input| {
    run(&input);
    vadapt_fuzz::check_fd_leaks();
});
