//! The config file (TOML, validated, then written back and read again) and
//! the command line's `--vm`, `--sink`/`--echo`, policy and retune specs;
//! the first byte picks the parser. Details: `vadapt_fuzz::config`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vadapt_fuzz::config::run(data));
