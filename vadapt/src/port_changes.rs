//! `vadapt add-port`, `vadapt del-port`, `vadapt reload`: changing a
//! running daemon's ports over its control socket.

use crate::cli::{AddPortArgs, DelPortArgs, ReloadArgs};
use std::path::Path;
use std::process::ExitCode;
use vadapt_dataplane::config::{
    parse_local_spec, parse_tap_spec, parse_uplink_spec, parse_vm_spec, PortSpec,
};
use vadapt_dataplane::control::{request, Request, Response};
use vadapt_harness::cli_util::{chain, fail};

/// The port `a` names (clap makes sure it names exactly one).
fn port_spec(a: &AddPortArgs) -> Result<PortSpec, String> {
    let err = |e: vadapt_dataplane::config::ConfigError| e.to_string();
    match (&a.vm, &a.sink, &a.echo, &a.tap) {
        (Some(v), ..) => parse_vm_spec(v)
            .map(|v| PortSpec::Vm(Box::new(v)))
            .map_err(err),
        (_, Some(s), ..) => parse_local_spec("--sink", s)
            .map(PortSpec::Sink)
            .map_err(err),
        (_, _, Some(e), _) => parse_local_spec("--echo", e)
            .map(PortSpec::Echo)
            .map_err(err),
        (_, _, _, Some(t)) => parse_tap_spec(t).map(PortSpec::Tap).map_err(err),
        _ => match &a.uplink {
            Some(u) => parse_uplink_spec(u).map(PortSpec::Uplink).map_err(err),
            None => Err("name a port: --vm, --sink, --echo, --tap or --uplink".into()),
        },
    }
}

/// Send `req`; `Ok` prints `done`.
fn ask(control: &Path, req: &Request, done: &str) -> ExitCode {
    match request(control, req) {
        Ok(Response::Ok) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Ok(Response::Reloaded { report }) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Ok(Response::Error { error }) => fail(error),
        Ok(other) => fail(format!("unexpected answer {other:?}")),
        Err(e) => fail(chain(&e)),
    }
}

/// `vadapt add-port`.
pub fn add_port(a: AddPortArgs) -> ExitCode {
    let port = match port_spec(&a) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let done = format!("{} port `{}` added", port.kind(), port.name());
    ask(&a.control, &Request::AddPort { port }, &done)
}

/// `vadapt del-port`.
pub fn del_port(a: DelPortArgs) -> ExitCode {
    let done = format!("port `{}` removed", a.name);
    ask(&a.control, &Request::DelPort { port: a.name }, &done)
}

/// `vadapt reload`.
pub fn reload(a: ReloadArgs) -> ExitCode {
    ask(&a.control, &Request::Reload, "reloaded")
}
