//! How a subcommand fails: one line on stderr and exit status 2
//! ([`vadapt_host::cli_exit`], shared with the lab's commands).

/// `err` and its causes on one line, `a: b: c`.
pub use vadapt_host::error_chain::error_chain as chain;

/// Print `vadapt: error: MSG` on stderr and return the failure exit code (2).
pub use vadapt_host::cli_exit::fail;
