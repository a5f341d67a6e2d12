//! How a `vadapt` subcommand fails: one line on stderr and exit status 2.
//! One implementation for the daemon's commands (`vadapt/src/exit.rs`) and
//! the lab's (`harness`), so that every command fails alike.

use std::process::ExitCode;

/// Print `vadapt: error: MSG` on stderr and return the failure exit code (2).
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("vadapt: error: {msg}");
    ExitCode::from(2)
}
