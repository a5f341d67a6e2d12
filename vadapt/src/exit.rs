//! How a subcommand fails: one line on stderr and exit status 2.

use std::process::ExitCode;

/// `err` and its causes on one line, `a: b: c`.
pub use vadapt_host::error_chain::error_chain as chain;

/// Print `vadapt: error: MSG` on stderr and return the failure exit code (2).
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("vadapt: error: {msg}");
    ExitCode::from(2)
}
