//! `vadapt fdb`: the running daemon's forwarding table.

use crate::cli::FdbArgs;
use crate::control_client::{ask, print, unexpected};
use std::process::ExitCode;
use vadapt_dataplane::control::{Request, Response};

/// `vadapt fdb`.
pub fn fdb(a: FdbArgs) -> ExitCode {
    match ask(&a.control, &Request::Fdb) {
        Ok(Response::Fdb { fdb }) => print(&fdb, a.json, || fdb.to_table()),
        Ok(other) => unexpected(&other),
        Err(exit) => exit,
    }
}
