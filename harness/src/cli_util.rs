//! How a lab subcommand fails: the same line and exit status as the
//! daemon's commands ([`vadapt_host::cli_exit`]).

/// `err` and its causes on one line, `a: b: c`.
pub use vadapt_host::error_chain::error_chain as chain;

/// Print `vadapt: error: MSG` on stderr and return the failure exit code (2).
pub use vadapt_host::cli_exit::fail;
