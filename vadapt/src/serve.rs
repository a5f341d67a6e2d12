//! `vadapt serve`, `vadapt stats`, `vadapt set-policy`, `vadapt retune`,
//! `vadapt cores`, `vadapt set-cores`.

use crate::cli::{
    CoresArgs, CoresCommand, RetuneArgs, ServeArgs, SetCoresArgs, SetPolicyArgs, StatsArgs,
};
use crate::control_client;
use crate::exit::{chain, fail};
use crate::service_manager;
use crate::stop_signals::{Event, StopSignals};
use crate::watchdog::Watchdog;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{
    parse_local_spec, parse_tap_spec, parse_uplink_spec, parse_vm_spec, ConfigError, DaemonConfig,
    ValueError,
};
use vadapt_dataplane::control::{Request, Response};
use vadapt_dataplane::{Daemon, DaemonError};
use vadapt_policy::PolicyConfig;

/// Why the configuration of `vadapt serve` (or `vadapt config show`)
/// could not be made from its file and command line.
#[derive(Debug, thiserror::Error)]
pub enum BuildConfigError {
    /// The config file cannot be read, a port given on the command line is
    /// invalid, or the whole is.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `--policy` is not a policy.
    #[error("invalid `--policy`")]
    Policy(#[source] vadapt_policy::ConfigError),
    /// `--cores-mode` is not a mode.
    #[error("invalid `--cores-mode`")]
    CoresMode(#[source] vadapt_policy::VspaceConfigError),
    /// `--queue-workers` is not a placement of the queue workers.
    #[error("invalid `--queue-workers`")]
    QueueWorkers(#[source] ValueError),
}

/// Merge the config file and the command line into one configuration.
pub fn build_config(a: &ServeArgs) -> Result<DaemonConfig, BuildConfigError> {
    let mut cfg = match &a.config {
        // Validated below, once the command line's ports are in.
        Some(p) => DaemonConfig::read_file(p)?,
        None => DaemonConfig::default(),
    };
    for v in &a.vms {
        cfg.vm.push(parse_vm_spec(v)?);
    }
    for s in &a.sinks {
        cfg.sink.push(parse_local_spec("--sink", s)?);
    }
    for s in &a.echoes {
        cfg.echo.push(parse_local_spec("--echo", s)?);
    }
    for t in &a.taps {
        cfg.tap.push(parse_tap_spec(t)?);
    }
    for u in &a.uplinks {
        cfg.uplink.push(parse_uplink_spec(u)?);
    }
    if let Some(m) = &a.netap_ml_model {
        cfg.netap_ml_model = Some(m.clone());
    }
    if let Some(p) = &a.policy {
        cfg.policy = p
            .parse::<PolicyConfig>()
            .map_err(BuildConfigError::Policy)?;
    }
    if let Some(c) = &a.control {
        cfg.control = c.clone();
    }
    if a.metrics.is_some() {
        cfg.metrics = a.metrics;
    }
    if a.socket_group.is_some() {
        cfg.socket_group = a.socket_group.clone();
    }
    if !a.cpus.is_empty() {
        cfg.cpus = a.cpus.clone();
    }
    if !a.cores_cpus.is_empty() {
        cfg.cores.cpus = a.cores_cpus.clone();
    }
    if let Some(m) = &a.cores_mode {
        cfg.cores.mode = m.parse().map_err(BuildConfigError::CoresMode)?;
    }
    if let Some(w) = &a.queue_workers {
        cfg.cores.queue_workers = w.parse().map_err(BuildConfigError::QueueWorkers)?;
    }
    cfg.state_dir = a
        .state_dir
        .clone()
        .or(cfg.state_dir)
        .or_else(|| default_state_dir(std::env::var_os("STATE_DIRECTORY").as_deref()));
    cfg.state_strict |= a.strict;
    cfg.validate()?;
    Ok(cfg)
}

/// Where the state file goes when neither `--state-dir` nor the config file
/// says: the first folder of `$STATE_DIRECTORY` (systemd sets it from the
/// unit's `StateDirectory=`, `:`-separated), else `/var/lib/vadapt`.
fn default_state_dir(state_directory: Option<&std::ffi::OsStr>) -> Option<std::path::PathBuf> {
    let from_systemd = state_directory
        .and_then(|v| v.to_str())
        .and_then(|v| v.split(':').next())
        .filter(|d| !d.is_empty());
    Some(from_systemd.unwrap_or("/var/lib/vadapt").into())
}

/// `vadapt serve`: run until SIGINT or SIGTERM; SIGHUP reloads the
/// configuration (its ports). The signals are answered from the first
/// instant ([`StopSignals`]): a stop during start-up undoes it and exits 0,
/// a reload during start-up runs once start-up is done.
pub fn run(a: ServeArgs) -> ExitCode {
    limit_malloc_arenas();
    let signals = match StopSignals::install() {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot install signal handlers: {e}")),
    };
    let cfg = match build_config(&a) {
        Ok(c) => c,
        Err(e) => return fail(chain(&e)),
    };
    let empty = cfg.ports().is_empty();
    let daemon = match Daemon::start_until(cfg, signals.stop_flag()) {
        Ok(d) => d,
        Err(DaemonError::StopRequested) => {
            service_manager::stopping();
            tracing::info!("stopped during start-up; what had started was undone");
            return ExitCode::SUCCESS;
        }
        Err(e) => return fail(chain(&e)),
    };
    signals.guard_sockets(daemon.socket_ledger());
    // A reload reads the file and this command line again, as start-up did.
    daemon.set_config_source(Box::new(move || build_config(&a).map_err(Into::into)));
    tracing::info!("vadapt serving; SIGINT or SIGTERM stops it, SIGHUP reloads its ports");
    if empty {
        tracing::info!(
            "no ports configured yet: add them with `vadapt add-port` (or in the config \
             file, then `vadapt reload`)"
        );
    }
    service_manager::ready(daemon.socket_paths().len());
    let mut watchdog = Watchdog::from_env();
    loop {
        watchdog.tick(&daemon, Instant::now());
        match signals.next(watchdog.wait(Duration::from_millis(200))) {
            Some(Event::Reload) => {
                tracing::info!("SIGHUP: reloading the configuration");
                service_manager::reloading();
                // Applied or refused, the daemon logs the outcome.
                let _ = daemon.reload();
                service_manager::reloaded();
            }
            Some(Event::Stop { signal, .. }) => {
                tracing::info!(signal, "stopping");
                break;
            }
            None if daemon.stop_requested() => {
                tracing::info!("stopping");
                break;
            }
            None => {}
        }
    }
    service_manager::stopping();
    // The signal thread holds the deadline: past it the sockets are
    // removed and the process exits 1, whatever this is blocked on.
    test_stop_hang();
    daemon.shutdown();
    ExitCode::SUCCESS
}

/// The test hook that holds the stop: in debug builds only,
/// `VADAPT_TEST_STOP_HANG_MS` makes the main thread wait that long before
/// the orderly shutdown, as a stuck port would, so that a test can see the
/// stop deadline end the process (`vadapt/tests/serve_signals.rs`).
/// Release builds ignore it.
fn test_stop_hang() {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("VADAPT_TEST_STOP_HANG_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// glibc's arenas the daemon may use, unless `MALLOC_ARENA_MAX` says otherwise.
const MALLOC_ARENAS: i32 = 2;

/// Cap glibc's malloc arenas. By default every thread that allocates may get
/// an arena of its own (up to 8 per core), and queue workers start and stop
/// with every frontend connection: in a 64-port soak RSS drifted from 97 to
/// 117 MB with the default and stayed at 46-49 MB with two arenas
/// (docs/reliability.md). The data path does not allocate per packet, so
/// two arenas cost no contention there.
fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; it is called
        // before the daemon starts its threads.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
        }
    }
}

/// `vadapt stats`.
pub fn stats(a: StatsArgs) -> ExitCode {
    let req = if a.prometheus {
        Request::Metrics
    } else {
        Request::Stats
    };
    match control_client::ask(&a.control, &req) {
        Ok(Response::Stats { stats }) => control_client::print(&stats, a.json, || stats.to_table()),
        Ok(Response::Metrics { text }) => control_client::print(&text, false, || text.clone()),
        Ok(other) => control_client::unexpected(&other),
        Err(exit) => exit,
    }
}

/// `vadapt set-policy`.
pub fn set_policy(a: SetPolicyArgs) -> ExitCode {
    let policy = match a.policy.parse::<PolicyConfig>() {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let req = Request::SetPolicy {
        port: a.port.clone(),
        policy,
    };
    match control_client::ask(&a.control, &req) {
        Ok(Response::Ok) => {
            println!("{}: policy set to {}", a.port, policy.kind());
            ExitCode::SUCCESS
        }
        Ok(other) => control_client::unexpected(&other),
        Err(exit) => exit,
    }
}

/// `vadapt retune`.
pub fn retune(a: RetuneArgs) -> ExitCode {
    let retune = match a.retune.parse::<vadapt_policy::Retune>() {
        Ok(r) => r,
        Err(e) => return fail(format!("invalid retune: {e}")),
    };
    let req = Request::Retune {
        port: a.port.clone(),
        retune,
    };
    match control_client::ask(&a.control, &req) {
        Ok(Response::Ok) => {
            println!("{}: {} retuned", a.port, retune.param());
            ExitCode::SUCCESS
        }
        Ok(other) => control_client::unexpected(&other),
        Err(exit) => exit,
    }
}

/// `vadapt cores` and `vadapt cores report`.
pub fn cores(a: CoresArgs) -> ExitCode {
    let req = match a.report {
        Some(CoresCommand::Report { p95_us }) => Request::CoresReport { p95_us },
        None => Request::Cores,
    };
    match control_client::ask(&a.control, &req) {
        Ok(Response::Cores { cores }) => control_client::print(&cores, a.json, || cores.to_table()),
        Ok(Response::Ok) => ExitCode::SUCCESS,
        Ok(other) => control_client::unexpected(&other),
        Err(exit) => exit,
    }
}

/// `vadapt set-cores`.
pub fn set_cores(a: SetCoresArgs) -> ExitCode {
    let mode = match a.mode.parse::<vadapt_policy::vspace::VspaceMode>() {
        Ok(m) => m,
        Err(e) => return fail(format!("invalid `--mode`: {e}")),
    };
    match control_client::ask(&a.control, &Request::SetCores { mode }) {
        Ok(Response::Ok) => {
            println!("core manager: mode {mode} from the next period");
            ExitCode::SUCCESS
        }
        Ok(other) => control_client::unexpected(&other),
        Err(exit) => exit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn serve_args(argv: &[&str]) -> ServeArgs {
        let mut full = vec!["vadapt", "serve"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full)
            .expect("valid command line")
            .command
        {
            Command::Serve(a) => *a,
            c => panic!("not serve: {c:?}"),
        }
    }

    #[test]
    fn a_config_file_without_ports_takes_the_command_lines() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vadapt.toml");
        std::fs::write(&file, "[policy]\nkind = \"eekbp\"\n").unwrap();
        let path = file.to_str().unwrap();
        let cfg = build_config(&serve_args(&[
            "--config",
            path,
            "--vm",
            "name=vm1,socket=/tmp/vadapt-test-vm1.sock",
        ]))
        .expect("the file's policy with the command line's port");
        assert_eq!(cfg.vm.len(), 1);
        assert_eq!(cfg.policy.kind(), vadapt_policy::PolicyKind::Eekbp);
        // Without a port anywhere the daemon starts empty.
        let cfg = build_config(&serve_args(&["--config", path])).expect("no ports is valid");
        assert!(cfg.ports().is_empty());
    }

    #[test]
    fn the_state_folder_comes_from_the_flag_the_file_systemd_or_var_lib() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vadapt.toml");
        std::fs::write(&file, "state_dir = \"/srv/vadapt\"\n").unwrap();
        let path = file.to_str().unwrap();
        let cfg = build_config(&serve_args(&["--config", path])).unwrap();
        assert_eq!(
            cfg.state_dir.as_deref(),
            Some(std::path::Path::new("/srv/vadapt"))
        );
        assert!(!cfg.state_strict);
        let cfg = build_config(&serve_args(&[
            "--config",
            path,
            "--state-dir",
            "/x",
            "--strict",
        ]))
        .unwrap();
        assert_eq!(cfg.state_dir.as_deref(), Some(std::path::Path::new("/x")));
        assert!(cfg.state_strict);
        let d = |v: Option<&str>| default_state_dir(v.map(std::ffi::OsStr::new)).unwrap();
        assert_eq!(d(None), std::path::Path::new("/var/lib/vadapt"));
        assert_eq!(d(Some("")), std::path::Path::new("/var/lib/vadapt"));
        assert_eq!(
            d(Some("/var/lib/v:/var/lib/w")),
            std::path::Path::new("/var/lib/v")
        );
    }

    #[test]
    fn the_packaged_config_starts_on_any_host() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/vadapt.toml");
        let cfg = build_config(&serve_args(&["--config", file])).expect("packaging/vadapt.toml");
        // No port to collide with a host's, no group that may not exist.
        assert!(cfg.ports().is_empty(), "{:?}", cfg.ports());
        assert_eq!(cfg.socket_group, None);
        assert_eq!(
            cfg.control,
            std::path::Path::new("/run/vadapt/control.sock")
        );
    }
}
