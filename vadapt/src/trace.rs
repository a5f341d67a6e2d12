//! `vadapt trace`: where a frame entering a port would go, and why.

use crate::cli::TraceArgs;
use crate::control_client::{ask, print, unexpected};
use crate::exit::fail;
use std::process::ExitCode;
use vadapt_dataplane::control::{Request, Response};
use vadapt_dataplane::switch::FrameSpec;

/// `vadapt trace`.
pub fn trace(a: TraceArgs) -> ExitCode {
    let frame = match a.frame.parse::<FrameSpec>() {
        Ok(f) => f,
        Err(e) => return fail(format!("invalid FRAME-SPEC: {e}")),
    };
    let req = Request::Trace {
        port: a.port,
        frame,
    };
    match ask(&a.control, &req) {
        Ok(Response::Trace { trace }) => print(&trace, a.json, || trace.to_text()),
        Ok(other) => unexpected(&other),
        Err(exit) => exit,
    }
}
