//! `vadapt add-port`, `vadapt del-port`, `vadapt reload`, `vadapt
//! set-limits`: changing a running daemon's ports over its control socket.

use crate::cli::{AddPortArgs, DelPortArgs, ReloadArgs, SetLimitsArgs};
use crate::control_client;
use crate::exit::{chain, fail};
use std::path::Path;
use std::process::ExitCode;
use vadapt_dataplane::config::{
    default_control, parse_local_spec, parse_tap_spec, parse_uplink_spec, parse_vm_spec,
    DaemonConfig, PortLimits, PortSpec,
};
use vadapt_dataplane::control::{Request, Response};

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

/// Send `req`; `Ok` prints `done`, a reload's report prints itself.
fn ask(control: &Path, req: &Request, done: &str) -> ExitCode {
    match control_client::ask(control, req) {
        Ok(Response::Ok) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Ok(Response::Reloaded { report }) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Ok(other) => control_client::unexpected(&other),
        Err(exit) => exit,
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
    let control = match (a.control, a.config) {
        (Some(c), _) => c,
        // The file's `control`; it is read, not checked: the daemon checks
        // the whole file as it reloads, and names what is wrong.
        (None, Some(file)) => match DaemonConfig::read_file(&file) {
            Ok(cfg) => cfg.control,
            Err(e) => return fail(chain(&e)),
        },
        (None, None) => default_control(),
    };
    ask(&control, &Request::Reload, "reloaded")
}

/// `vadapt set-limits`.
pub fn set_limits(a: SetLimitsArgs) -> ExitCode {
    let limits = limits_of(&a);
    let done = format!("port `{}`: {limits}", a.port);
    ask(
        &a.control,
        &Request::SetLimits {
            port: a.port,
            limits,
        },
        &done,
    )
}

/// The limits `a` gives, every one not given 0 (none).
fn limits_of(a: &SetLimitsArgs) -> PortLimits {
    PortLimits {
        ingress_policing_rate: a.rate_kbps,
        ingress_policing_burst: a.burst_kb,
        ingress_policing_kpkts_rate: a.kpps,
        ingress_policing_kpkts_burst: a.kpkts_burst,
        storm_control_pps: a.storm_pps,
        storm_control_burst: a.storm_burst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn limits(argv: &[&str]) -> PortLimits {
        let mut full = vec!["vadapt", "set-limits"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full)
            .expect("valid command line")
            .command
        {
            Command::SetLimits(a) => limits_of(&a),
            c => panic!("not set-limits: {c:?}"),
        }
    }

    #[test]
    fn set_limits_takes_short_flags_and_ovs_names_and_clears_the_rest() {
        assert_eq!(limits(&["vm1"]), PortLimits::NONE);
        let l = limits(&[
            "vm1",
            "--rate-kbps",
            "1000",
            "--ingress-policing-burst",
            "50",
            "--storm-pps",
            "7",
        ]);
        assert_eq!(
            l,
            PortLimits {
                ingress_policing_rate: 1000,
                ingress_policing_burst: 50,
                storm_control_pps: 7,
                ..PortLimits::NONE
            }
        );
        assert!(Cli::try_parse_from(["vadapt", "set-limits", "vm1", "--kpps", "-1"]).is_err());
    }
}
