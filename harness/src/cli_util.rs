//! Error reporting shared by the `vadapt` subcommands.

use std::process::ExitCode;

/// Print `vadapt: error: MSG` on stderr and return the failure exit code (2).
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("vadapt: error: {msg}");
    ExitCode::from(2)
}

/// `err` and its causes on one line, `a: b: c`.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut s = err.to_string();
    let mut src = err.source();
    while let Some(e) = src {
        s.push_str(": ");
        s.push_str(&e.to_string());
        src = e.source();
    }
    s
}
