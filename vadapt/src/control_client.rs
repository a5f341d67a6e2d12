//! A subcommand's one exchange with the running daemon: send the request,
//! and turn what is not an answer to it (the daemon's refusal, no daemon,
//! a broken exchange) into the exit, so that each subcommand matches only
//! the answers it expects.

use crate::exit::{chain, fail};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use vadapt_dataplane::control::{request, Request, Response};

/// The daemon's answer to `req`; `Err`: the exit, with the reason printed
/// (the daemon's error, or why there was no answer).
pub fn ask(control: &Path, req: &Request) -> Result<Response, ExitCode> {
    match request(control, req) {
        Ok(Response::Error { error }) => Err(fail(error)),
        Ok(answer) => Ok(answer),
        Err(e) => Err(fail(chain(&e))),
    }
}

/// The exit for an answer the subcommand does not expect.
pub fn unexpected(answer: &Response) -> ExitCode {
    fail(format!("unexpected answer {answer:?}"))
}

/// Print `value` as pretty JSON (`json`) or as `table` makes it. A reader
/// that stops early (`vadapt fdb | head`) is no error: a full table is
/// thousands of lines.
pub fn print(value: &impl Serialize, json: bool, table: impl FnOnce() -> String) -> ExitCode {
    let text = if json {
        match serde_json::to_string_pretty(value) {
            Ok(s) => s + "\n",
            Err(e) => return fail(e),
        }
    } else {
        table()
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(format!("cannot write to stdout: {e}")),
    }
}
