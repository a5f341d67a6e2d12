//! The running daemon: ports on a switch, their listener threads, the
//! control socket and the metrics endpoint.

mod error;
mod port_book;
pub mod port_state;
mod ports;
#[cfg(test)]
mod run_time_port_tests;
mod services;
mod started;

pub use error::DaemonError;
use port_book::PortBook;
use started::Started;

use crate::capture_stream::{CaptureSpec, CaptureStartError};
use crate::config::{DaemonConfig, PortLimits, PortSpec};
use crate::control::{self, Handler, ReloadReport, Request, Response, MAX_P95_US};
use crate::cores::CoresStatus;
use crate::lock_order::{Mutex, MutexGuard};
use crate::metrics::Registry;
use crate::port::{Roster, VmPort};
use crate::socket_file::SocketLedger;
use crate::switch::{CaptureSession, Switch};
use crate::worker::pool::NqWorkers;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vadapt_policy::{PolicyConfig, Retune};

/// Where a reload reads the configuration again (`vadapt serve` reads its
/// file and command line as at start-up). Its error is the cause of
/// [`DaemonError::ReadConfig`].
pub type ConfigSource =
    Box<dyn Fn() -> Result<DaemonConfig, Box<dyn std::error::Error + Send + Sync>> + Send + Sync>;

struct Shared {
    /// Every counter: the running ports' read from `roster`.
    registry: Arc<Registry>,
    /// The switch, for its table (`vadapt fdb`).
    switch: Arc<Switch>,
    /// The one list of running ports.
    roster: Arc<Roster>,
    /// What makes and unmakes ports, the roster's only writer.
    book: Arc<Mutex<PortBook>>,
    /// The core manager's state; `None` when `[cores]` names no CPUs.
    cores: Option<Arc<CoresStatus>>,
    /// Where a reload reads the configuration; `None`: no reload.
    config_source: Mutex<Option<ConfigSource>>,
}

impl Handler for Shared {
    fn capture(&self, spec: &CaptureSpec) -> Result<CaptureSession, CaptureStartError> {
        Ok(self.switch.capture(&spec.port, spec.filter()?)?)
    }

    fn handle(&self, req: Request) -> Response {
        match req {
            Request::Capture { .. } => Response::Error {
                error: "a capture is started by the control server, on its own connection".into(),
            },
            Request::Stats => Response::Stats {
                stats: self.registry.snapshot(),
            },
            Request::Metrics => Response::Metrics {
                text: self.registry.prometheus_text(),
            },
            Request::Fdb => Response::Fdb {
                fdb: self.switch.listing(crate::clock::coarse_now()),
            },
            Request::Trace { port, frame } => {
                let traced = frame
                    .build()
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| self.switch.trace(&port, &bytes).map_err(|e| e.to_string()));
                match traced {
                    Ok(trace) => Response::Trace { trace },
                    Err(error) => Response::Error { error },
                }
            }
            Request::SetPolicy { port, policy } => match self.set_policy(&port, policy) {
                Ok(()) => Response::Ok,
                Err(e) => refused(&e),
            },
            Request::AddPort { port } => match self.add_port(port) {
                Ok(()) => Response::Ok,
                Err(e) => refused(&e),
            },
            Request::DelPort { port } => match self.remove_port(&port) {
                Ok(()) => Response::Ok,
                Err(e) => refused(&e),
            },
            Request::Reload => match self.reload() {
                Ok(report) => Response::Reloaded { report },
                Err(e) => refused(&e),
            },
            Request::Retune { port, retune } => match self.retune(&port, retune) {
                Ok(()) => Response::Ok,
                Err(e) => refused(&e),
            },
            Request::SetLimits { port, limits } => match self.set_limits(&port, limits) {
                Ok(()) => Response::Ok,
                Err(e) => refused(&e),
            },
            Request::Cores | Request::SetCores { .. } | Request::CoresReport { .. } => {
                let Some(cores) = &self.cores else {
                    return Response::Error {
                        error: "the core manager is not running (no [cores] cpus configured)"
                            .into(),
                    };
                };
                if let (Some(why), Request::SetCores { .. } | Request::CoresReport { .. }) =
                    (cores.failed(), &req)
                {
                    return Response::Error {
                        error: format!(
                            "the core manager stopped ({why}); restart the daemon to resume"
                        ),
                    };
                }
                match req {
                    Request::SetCores { mode } => {
                        cores.request_mode(mode);
                        tracing::info!(%mode, "core manager mode change requested");
                        Response::Ok
                    }
                    Request::CoresReport { p95_us } if p95_us > MAX_P95_US => Response::Error {
                        error: format!(
                            "p95_us {p95_us} is more than an hour ({MAX_P95_US} µs): \
                             not a latency sample, not used"
                        ),
                    },
                    Request::CoresReport { p95_us } => {
                        cores.report_p95(p95_us);
                        Response::Ok
                    }
                    _ => Response::Cores {
                        cores: Box::new(cores.snapshot()),
                    },
                }
            }
        }
    }
}

/// The control socket's answer to a refused request: the error and its
/// causes in one line, as the wire carries errors.
fn refused(e: &DaemonError) -> Response {
    Response::Error {
        error: vadapt_host::error_chain::error_chain(e),
    }
}

impl Shared {
    /// The port named `name` whose policy can change: a VM port or an uplink.
    fn policy_port(&self, name: &str) -> Result<PolicyPort, DaemonError> {
        if let Some(p) = self.roster.find(name) {
            return Ok(PolicyPort::Vm(p));
        }
        if let Some(u) = self.roster.find_uplink(name) {
            return Ok(PolicyPort::Uplink(u));
        }
        Err(DaemonError::NoPolicyPort {
            port: name.to_owned(),
            running: self.roster.policy_port_names(),
        })
    }

    fn set_policy(&self, name: &str, policy: PolicyConfig) -> Result<(), DaemonError> {
        match self.policy_port(name)? {
            PolicyPort::Vm(p) => p.set_policy(policy),
            PolicyPort::Uplink(u) => u.set_policy(policy),
        }
        .map_err(DaemonError::SetPolicy)?;
        tracing::info!(port = name, policy = %policy.kind(), "policy change requested");
        self.book().keep_policy(name, policy)
    }

    fn retune(&self, name: &str, r: Retune) -> Result<(), DaemonError> {
        match self.policy_port(name)? {
            PolicyPort::Vm(p) => p.retune(r),
            PolicyPort::Uplink(u) => u.retune(r),
        }
        .map_err(|source| DaemonError::Retune {
            port: name.to_owned(),
            source,
        })?;
        tracing::info!(port = name, retune = ?r, "retune requested");
        Ok(())
    }

    fn set_limits(&self, name: &str, limits: PortLimits) -> Result<(), DaemonError> {
        self.book().set_limits_at_run_time(name, limits)?;
        tracing::info!(port = name, %limits, "rate limits set");
        Ok(())
    }

    fn book(&self) -> MutexGuard<'_, PortBook> {
        lock_book(&self.book)
    }

    fn add_port(&self, port: PortSpec) -> Result<(), DaemonError> {
        let (name, kind) = (port.name().to_owned(), port.kind());
        self.book().add_at_run_time(port)?;
        tracing::info!(port = name, kind, "port added");
        Ok(())
    }

    fn remove_port(&self, name: &str) -> Result<(), DaemonError> {
        self.book().remove_at_run_time(name)?;
        tracing::info!(port = name, "port removed");
        Ok(())
    }

    fn reload(&self) -> Result<ReloadReport, DaemonError> {
        let new = {
            let source = self.config_source.lock().unwrap_or_else(|e| e.into_inner());
            let Some(read) = source.as_ref() else {
                tracing::warn!("reload refused: this daemon has no configuration to read again");
                return Err(DaemonError::NoConfigSource);
            };
            read().map_err(|e| {
                let e = DaemonError::ReadConfig(e);
                let chain = vadapt_host::error_chain::error_chain(&e);
                tracing::error!(error = %chain, "reload refused");
                e
            })?
        };
        match self.book().reload(&new) {
            Ok(report) => {
                tracing::info!(%report, "configuration reloaded");
                Ok(report)
            }
            Err(e) => {
                let chain = vadapt_host::error_chain::error_chain(&e);
                tracing::error!(error = %chain, "reload stopped");
                Err(e)
            }
        }
    }
}

fn lock_book(book: &Mutex<PortBook>) -> MutexGuard<'_, PortBook> {
    book.lock().unwrap_or_else(|e| e.into_inner())
}

/// A port whose queues run a policy.
enum PolicyPort {
    Vm(Arc<VmPort>),
    Uplink(Arc<crate::uplink::Uplink>),
}

/// The configuration step: `cfg` is valid, and the NetAP-ML model its
/// policies need is loaded.
fn prepare(cfg: &DaemonConfig) -> Result<(), DaemonError> {
    cfg.validate()?;
    crate::netap_ml_model::prepare(
        cfg.netap_ml_model.as_deref(),
        std::iter::once(&cfg.policy).chain(cfg.vm.iter().filter_map(|v| v.policy.as_ref())),
    )?;
    Ok(())
}

/// Open the state file of `cfg` (if it has a state folder), restore its
/// ports after the config file's into `book`, and keep the run-time ports
/// in it from now on. A port of the file's name is not restored (the config
/// file wins; logged), nor one that cannot be made (logged; the file keeps
/// it); under `state_strict` either of those, or an unusable file, stops
/// start-up.
fn restore_run_time_ports(
    cfg: &DaemonConfig,
    book: &Mutex<PortBook>,
    started: &Started,
) -> Result<(), DaemonError> {
    let Some(dir) = &cfg.state_dir else {
        return Ok(());
    };
    let opened = port_state::PortStore::open(dir, cfg.state_strict)?;
    let file = opened.store.path().to_owned();
    if let Some((why, to)) = &opened.set_aside {
        tracing::error!(
            file = %file.display(),
            error = %vadapt_host::error_chain::error_chain(why),
            kept_as = %to.display(),
            "the state file cannot be used: moved aside, starting with the config file's \
             ports only (--strict refuses to start instead)"
        );
    }
    let configured: Vec<String> = cfg.ports().iter().map(|p| p.name().to_owned()).collect();
    let mut restored = 0;
    for port in opened.ports {
        started.check_stop()?;
        let name = port.name().to_owned();
        if configured.contains(&name) {
            if cfg.state_strict {
                return Err(DaemonError::RestoreClash { port: name, file });
            }
            tracing::warn!(
                port = name,
                file = %file.display(),
                "not restored: the config file has a port of that name, and it wins (the \
             state file keeps this one)"
            );
            continue;
        }
        if let Err(e) = lock_book(book).restore(port) {
            if cfg.state_strict {
                return Err(DaemonError::Restore {
                    port: name,
                    file,
                    cause: Box::new(e),
                });
            }
            tracing::error!(
                port = name,
                file = %file.display(),
                error = %vadapt_host::error_chain::error_chain(&e),
                "cannot restore a port added at run time: skipped (the state file keeps it; \
             `vadapt del-port` removes it)"
            );
            continue;
        }
        restored += 1;
    }
    if restored > 0 {
        tracing::info!(ports = restored, file = %file.display(), "restored the ports added at run time");
    }
    lock_book(book).keep_in(opened.store);
    Ok(())
}

/// A running daemon. Dropping it without [`Daemon::shutdown`] leaves the
/// threads running until the process exits.
pub struct Daemon {
    shared: Arc<Shared>,
    switch: Arc<Switch>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    control: PathBuf,
    /// Every socket the daemon bound and has not removed yet.
    sockets: SocketLedger,
    metrics_addr: Option<SocketAddr>,
    nq_workers: Option<Arc<NqWorkers>>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("control", &self.control)
            .finish_non_exhaustive()
    }
}

impl Daemon {
    /// Validate `cfg`, create every port and socket, and start serving:
    /// the configuration, then the ports, then the services over them.
    pub fn start(cfg: DaemonConfig) -> Result<Daemon, DaemonError> {
        Self::start_until(cfg, Arc::new(AtomicBool::new(false)))
    }

    /// [`Daemon::start`] with `stop` as the daemon's stop flag from the
    /// first instant (a signal handler's): when it is set before start-up
    /// is complete, start-up stops at the next port or service, undoes what
    /// it started (threads stopped, sockets removed) and returns
    /// [`DaemonError::StopRequested`].
    pub fn start_until(cfg: DaemonConfig, stop: Arc<AtomicBool>) -> Result<Daemon, DaemonError> {
        prepare(&cfg)?;
        let roster = Arc::new(Roster::default());
        let registry = Arc::new(Registry::new(Arc::clone(&roster) as _));
        let switch = Arc::new(Switch::with_table_size(
            Duration::from_secs(cfg.mac_ageing_s),
            cfg.mac_table_size,
        ));
        // Until start-up is complete, a failure stops what was started and
        // removes the sockets already created.
        let mut started = Started::new(Arc::clone(&stop));
        let nq_workers = ports::nq_pool(&cfg)?;
        let sockets = started.sockets.clone();
        let maker = ports::PortMaker::new(
            &cfg,
            Arc::clone(&switch),
            nq_workers.clone(),
            sockets.clone(),
        );
        let book = Arc::new(Mutex::new(PortBook::new(maker, Arc::clone(&roster), &cfg)));
        let undo = Arc::clone(&book);
        started
            .on_failure
            .push(Box::new(move || lock_book(&undo).shutdown()));
        for port in cfg.ports() {
            started.check_stop()?;
            lock_book(&book).add(port)?;
            started::test_pause();
        }
        restore_run_time_ports(&cfg, &book, &started)?;
        started.check_stop()?;
        let (cores, cores_line) =
            services::core_manager(&cfg, &roster, &nq_workers, &registry, &mut started)?;
        services::workload_estimate(&roster, &mut started)?;
        let shared = Arc::new(Shared {
            registry: Arc::clone(&registry),
            switch: Arc::clone(&switch),
            roster,
            book,
            cores,
            config_source: Mutex::new(None),
        });
        started.threads.push(control::serve(
            &cfg.control,
            shared.clone(),
            Arc::clone(&stop),
            &sockets,
        )?);
        let metrics_addr = services::metrics_endpoint(&cfg, &registry, &mut started)?;
        services::mac_ageing(&switch, &mut started);
        started.check_stop()?;
        // Said once start-up can no longer fail: a failed start is one line.
        services::log_ready(&cfg, shared.book().vms(), metrics_addr, cores_line);
        let threads = started.complete();
        Ok(Daemon {
            shared,
            switch,
            stop,
            threads,
            control: cfg.control.clone(),
            sockets,
            metrics_addr,
            nq_workers,
        })
    }

    /// Read the configuration from `source` on every reload (`vadapt
    /// reload`, or `SIGHUP` to `vadapt serve`); without one a reload is
    /// refused.
    pub fn set_config_source(&self, source: ConfigSource) {
        *self
            .shared
            .config_source
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(source);
    }

    /// Add `port` while the daemon runs (as `vadapt add-port` does).
    pub fn add_port(&self, port: PortSpec) -> Result<(), DaemonError> {
        self.shared.add_port(port)
    }

    /// Remove the port named `name` while the daemon runs (as `vadapt
    /// del-port` does).
    pub fn remove_port(&self, name: &str) -> Result<(), DaemonError> {
        self.shared.remove_port(name)
    }

    /// Read the configuration again and apply the difference in ports (as
    /// `vadapt reload` does).
    pub fn reload(&self) -> Result<ReloadReport, DaemonError> {
        self.shared.reload()
    }

    /// The pool of one queue worker per NQ core (`[cores] queue_workers =
    /// "per-nq-core"`); `None` when each port has a worker of its own.
    pub fn nq_workers(&self) -> Option<&Arc<NqWorkers>> {
        self.nq_workers.as_ref()
    }

    /// Every counter.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.shared.registry)
    }

    /// What answers the control socket's requests (the fuzzer drives it
    /// with [`control::answer`] in-process, without the socket's thread).
    pub fn control_handler(&self) -> Arc<dyn Handler> {
        self.shared.clone()
    }

    /// The switch.
    pub fn switch(&self) -> Arc<Switch> {
        Arc::clone(&self.switch)
    }

    /// The VM ports running now.
    pub fn vm_ports(&self) -> Arc<Vec<Arc<VmPort>>> {
        self.shared.roster.current()
    }

    /// Address the metrics endpoint actually bound (port 0 resolved).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Change a VM port's or an uplink's policy.
    pub fn set_policy(&self, port: &str, policy: PolicyConfig) -> Result<(), DaemonError> {
        self.shared.set_policy(port, policy)
    }

    /// Change a parameter of a VM port's or an uplink's running policy.
    pub fn retune(&self, port: &str, r: Retune) -> Result<(), DaemonError> {
        self.shared.retune(port, r)
    }

    /// Change a VM port's rate limits (as `vadapt set-limits` does); its
    /// frontend stays connected.
    pub fn set_limits(&self, port: &str, limits: PortLimits) -> Result<(), DaemonError> {
        self.shared.set_limits(port, limits)
    }

    /// Whether every service thread still runs: the control socket's, the
    /// core manager's, MAC ageing, the workload estimate and the metrics
    /// endpoint, those started. Read-only, for the service manager's
    /// watchdog (`vadapt serve`).
    pub fn services_running(&self) -> bool {
        self.threads.iter().all(|t| !t.is_finished())
    }

    /// True once [`Daemon::request_stop`] was called.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The stop flag: setting it (e.g. from a signal handler) asks every thread to stop.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Ask every thread to stop.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Every socket file the daemon created and still owns (server-mode VM
    /// ports and the control socket). Reads the [`SocketLedger`] only: never
    /// waits on a port being added or removed.
    pub fn socket_paths(&self) -> Vec<PathBuf> {
        self.sockets.paths()
    }

    /// The daemon's socket ledger: every socket it bound (server-mode VM
    /// ports, the control socket) and has not removed yet. A clone stays
    /// usable after [`Daemon::shutdown`] has been handed the daemon, on any
    /// thread: [`SocketLedger::remove_all`] removes every socket still kept,
    /// each only if it is still the one the daemon bound, without taking
    /// the port book's lock or any other the daemon holds. It is what a
    /// caller whose orderly shutdown missed its deadline (`vadapt serve`)
    /// removes the sockets with before it exits.
    pub fn socket_ledger(&self) -> SocketLedger {
        self.sockets.clone()
    }

    /// Stop everything: connections are closed, workers joined, sockets removed.
    pub fn shutdown(mut self) {
        self.request_stop();
        // Every port's connection ends (see `RunningVm::stop`: the worker
        // stops before the frontend sees the close), its socket goes.
        self.shared.book().shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The serve loops took their queue sets back when they stopped.
        if let Some(pool) = &self.nq_workers {
            pool.shutdown();
        }
        // The ports and the control thread removed theirs; none is left
        // unless one of them could not.
        self.sockets.remove_all();
        tracing::info!("daemon stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_vm_spec, SocketMode};
    use std::net::TcpListener;
    use std::os::unix::net::UnixStream;
    use vadapt_host::error_chain::error_chain;

    fn cfg(dir: &std::path::Path) -> DaemonConfig {
        let mut c = DaemonConfig::default();
        for n in ["a", "b"] {
            let spec = format!(
                "name={n},socket={}",
                dir.join(format!("{n}.sock")).display()
            );
            c.vm.push(parse_vm_spec(&spec).unwrap());
        }
        c.control = dir.join("control.sock");
        c
    }

    fn files(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn busy_pollers_on_one_cpu_are_found() {
        use vadapt_policy::PolicyKind::{BusyPoll, Netap};
        let p = |n: &str, cpu, k| (n.to_string(), cpu, k);
        let found = services::busy_pollers_sharing_a_cpu(&[
            p("a", 1, BusyPoll),
            p("b", 2, BusyPoll),
            p("c", 1, BusyPoll),
            p("d", 2, Netap),
            p("e", 3, Netap),
            p("f", 3, Netap),
        ]);
        assert_eq!(found, vec![(1, vec!["a".to_string(), "c".to_string()])]);
        assert!(services::busy_pollers_sharing_a_cpu(&[p("a", 1, BusyPoll)]).is_empty());
    }

    #[test]
    fn an_unusable_netap_ml_model_stops_start_up_with_one_error() {
        let t = tempfile::tempdir().unwrap();
        let model = t.path().join("model.json");
        std::fs::write(&model, "{\"format\":").unwrap();
        let mut c = cfg(t.path());
        c.netap_ml_model = Some(model);
        let e = Daemon::start(c).unwrap_err();
        assert!(matches!(e, DaemonError::Model(_)), "{e}");
        assert!(e.to_string().contains("model.json"), "{e}");
        assert_eq!(files(t.path()), ["model.json"]);
    }

    #[test]
    fn a_failed_start_leaves_no_socket_behind() {
        let t = tempfile::tempdir().unwrap();
        // The metrics address is taken: fails after every socket exists.
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = cfg(t.path());
        c.metrics = Some(taken.local_addr().unwrap());
        let e = Daemon::start(c).unwrap_err();
        assert!(matches!(e, DaemonError::Metrics { .. }), "{e}");
        assert_eq!(files(t.path()), Vec::<String>::new());

        // An unknown socket group: fails at the first VM socket.
        let mut c = cfg(t.path());
        c.socket_group = Some("no-such-group-vadapt".into());
        assert!(Daemon::start(c).is_err());
        assert_eq!(files(t.path()), Vec::<String>::new());

        // The control socket is taken by a live daemon: the VM sockets go.
        let first = Daemon::start(cfg(t.path())).unwrap();
        let other = tempfile::tempdir().unwrap();
        let mut c = cfg(other.path());
        c.control = t.path().join("control.sock");
        let e = Daemon::start(c).unwrap_err();
        assert!(matches!(e, DaemonError::Control(_)), "{e}");
        assert_eq!(files(other.path()), Vec::<String>::new());
        first.shutdown();
        assert_eq!(files(t.path()), Vec::<String>::new());
    }

    #[test]
    fn a_stopped_core_manager_refuses_changes_and_shows_why() {
        let status = Arc::new(CoresStatus::default());
        let roster = Arc::new(Roster::default());
        let registry = Arc::new(Registry::new(Arc::clone(&roster) as _));
        let switch = Arc::new(Switch::new(Duration::from_secs(300)));
        let maker = ports::PortMaker::new(
            &DaemonConfig::default(),
            Arc::clone(&switch),
            None,
            SocketLedger::default(),
        );
        let shared = Shared {
            registry,
            switch,
            book: Arc::new(Mutex::new(PortBook::new(
                maker,
                Arc::clone(&roster),
                &DaemonConfig::default(),
            ))),
            roster,
            cores: Some(Arc::clone(&status)),
            config_source: Mutex::new(None),
        };
        shared.registry.add_exporter(Arc::clone(&status) as _);
        let failed_metric = || {
            let text = shared.registry.prometheus_text();
            text.lines()
                .find(|l| l.starts_with("vadapt_cores_failed "))
                .map(str::to_string)
        };
        assert_eq!(failed_metric().as_deref(), Some("vadapt_cores_failed 0"));
        let set = Request::SetCores {
            mode: vadapt_policy::vspace::VspaceMode::Energy,
        };
        assert_eq!(shared.handle(set.clone()), Response::Ok);
        status.mark_failed("internal error after 3 periods: boom".into());
        for req in [set, Request::CoresReport { p95_us: 100 }] {
            match shared.handle(req) {
                Response::Error { error } => assert!(
                    error.contains("boom") && error.contains("restart the daemon"),
                    "{error}"
                ),
                r => panic!("{r:?}"),
            }
        }
        match shared.handle(Request::Cores) {
            Response::Cores { cores } => {
                assert!(cores.to_table().starts_with("STOPPED: internal error"))
            }
            r => panic!("{r:?}"),
        }
        assert_eq!(failed_metric().as_deref(), Some("vadapt_cores_failed 1"));
    }

    #[test]
    fn retune_reaches_the_port_through_the_control_socket() {
        let t = tempfile::tempdir().unwrap();
        let mut c = cfg(t.path());
        c.policy = PolicyConfig::default_for(vadapt_policy::PolicyKind::Netap);
        let control = c.control.clone();
        let d = Daemon::start(c).unwrap();
        let ask = |port: &str, retune: Retune| {
            control::request(
                &control,
                &Request::Retune {
                    port: port.into(),
                    retune,
                },
            )
            .unwrap()
        };
        let range = Retune::SearchRange {
            lo_us: 1600,
            hi_us: 2600,
        };
        assert_eq!(ask("a", range), Response::Ok);
        match ask("a", Retune::Quota { packets: 4 }) {
            Response::Error { error } => assert!(
                error.contains("netap") && error.contains("quota"),
                "{error}"
            ),
            r => panic!("{r:?}"),
        }
        match ask("zz", range) {
            Response::Error { error } => assert!(error.contains("zz"), "{error}"),
            r => panic!("{r:?}"),
        }
        // A retuned config parameter shows in the port's policy.
        assert_eq!(
            ask("b", Retune::KickThreshold { permille: 0 }),
            Response::Ok
        );
        match d.vm_ports()[1].policy_config() {
            PolicyConfig::Netap(p) => assert_eq!(p.kick_threshold_permille, 0),
            p => panic!("{p:?}"),
        }
        d.shutdown();
    }

    /// `GET_FEATURES` over `s` as a frontend asks it; the features answered.
    fn get_features(s: &mut UnixStream) -> u64 {
        use std::io::{Read, Write};
        s.write_all(&[1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        let mut reply = [0u8; 20];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(reply[0], 1, "answer to GET_FEATURES");
        u64::from_le_bytes(reply[12..20].try_into().unwrap())
    }

    #[test]
    fn a_client_port_connects_to_the_frontend_reconnects_and_leaves_its_socket() {
        use std::os::unix::net::UnixListener;
        let t = tempfile::tempdir().unwrap();
        let mut c = cfg(t.path());
        c.vm[0].mode = SocketMode::Client;
        let fe = t.path().join("a.sock");
        // The daemon starts before the frontend's socket exists.
        let d = Daemon::start(c).unwrap();
        assert!(!fe.exists(), "a client port creates no socket");
        std::thread::sleep(Duration::from_millis(100));
        let l = UnixListener::bind(&fe).unwrap();
        let (mut s, _) = l.accept().unwrap();
        assert_ne!(get_features(&mut s) & (1 << 32), 0, "VIRTIO_F_VERSION_1");
        assert!(d.vm_ports()[0].stats.connected.load(Ordering::Relaxed));
        // The frontend goes away; the daemon connects again.
        drop(s);
        let (mut s, _) = l.accept().unwrap();
        get_features(&mut s);
        d.shutdown();
        assert!(
            fe.exists(),
            "the frontend's socket is not the daemon's to remove"
        );
        assert!(
            !t.path().join("b.sock").exists(),
            "the server port's socket is removed"
        );
    }

    #[test]
    fn a_frontend_that_reads_no_replies_holds_neither_del_port_nor_stats() {
        use std::io::Write;
        let t = tempfile::tempdir().unwrap();
        let c = cfg(t.path());
        let control = c.control.clone();
        let d = Daemon::start(c).unwrap();
        // GET_FEATURES again and again, never reading an answer, until the
        // daemon's replies fill the socket and its serve thread blocks in
        // sendmsg, then ours blocks too.
        let mut fe = UnixStream::connect(t.path().join("a.sock")).unwrap();
        fe.set_nonblocking(true).unwrap();
        let get_features = [1u8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        let mut stalled_at = None;
        for _ in 0..2_000_000 {
            match fe.write(&get_features) {
                Ok(_) => stalled_at = None,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let since = *stalled_at.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() > Duration::from_millis(500) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(stalled_at.is_some(), "the daemon never stopped reading");
        // `stats` answers meanwhile, and so does the deletion.
        assert!(matches!(
            control::request(&control, &Request::Stats).unwrap(),
            Response::Stats { .. }
        ));
        let (tx, rx) = std::sync::mpsc::channel();
        let ctl = control.clone();
        std::thread::spawn(move || {
            let _ = tx.send(control::request(
                &ctl,
                &Request::DelPort { port: "a".into() },
            ));
        });
        let answer = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("del-port answered (it hung on the frontend before)");
        assert_eq!(answer.unwrap(), Response::Ok);
        assert!(!t.path().join("a.sock").exists());
        assert!(matches!(
            control::request(&control, &Request::Stats).unwrap(),
            Response::Stats { .. }
        ));
        drop(fe);
        d.shutdown();
    }

    #[test]
    fn socket_folder_errors_name_the_folder() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("file"), b"").unwrap();
        let mut c = cfg(&t.path().join("file/sub"));
        c.control = t.path().join("control.sock");
        let e = Daemon::start(c).unwrap_err().to_string();
        assert!(e.contains("socket folder") && e.contains("file/sub"), "{e}");
    }

    /// `--vm name=NAME,socket=PATH` as `vadapt add-port` sends it.
    fn vm(name: &str, socket: &std::path::Path) -> PortSpec {
        let spec = format!("name={name},socket={}", socket.display());
        PortSpec::Vm(Box::new(parse_vm_spec(&spec).unwrap()))
    }

    #[test]
    fn add_port_on_a_file_it_does_not_own_is_refused_and_the_file_kept() {
        let t = tempfile::tempdir().unwrap();
        let d = Daemon::start(DaemonConfig {
            control: t.path().join("control.sock"),
            ..DaemonConfig::default()
        })
        .unwrap();
        let precious = t.path().join("x.txt");
        std::fs::write(&precious, b"precious").unwrap();
        // Before: the file was replaced by the port's socket, and del-port
        // then removed that.
        let e = error_chain(&d.add_port(vm("vx", &precious)).unwrap_err());
        assert!(
            e.contains("`vx`") && e.contains("x.txt") && e.contains("a regular file"),
            "{e}"
        );
        std::os::unix::fs::symlink(&precious, t.path().join("link")).unwrap();
        let e = error_chain(&d.add_port(vm("vy", &t.path().join("link"))).unwrap_err());
        assert!(e.contains("a symbolic link"), "{e}");
        assert!(d.remove_port("vx").is_err(), "no port was made");
        d.shutdown();
        assert_eq!(std::fs::read(&precious).unwrap(), b"precious");
        assert_eq!(files(t.path()), ["link", "x.txt"]);
    }

    #[test]
    fn a_socket_replaced_after_bind_is_left_by_del_port_and_shutdown() {
        use std::os::unix::net::UnixListener;
        let t = tempfile::tempdir().unwrap();
        let d = Daemon::start(cfg(t.path())).unwrap();
        let ledger = d.socket_ledger();
        let mut owned = ledger.paths();
        owned.sort();
        let p = |n: &str| t.path().join(n);
        assert_eq!(owned, [p("a.sock"), p("b.sock"), p("control.sock")]);
        assert_eq!(d.socket_paths().len(), 3);
        // Someone moves their own socket onto a's path, a file onto b's.
        std::fs::remove_file(p("a.sock")).unwrap();
        let _theirs = UnixListener::bind(p("a.sock")).unwrap();
        std::fs::remove_file(p("b.sock")).unwrap();
        std::fs::write(p("b.sock"), b"theirs").unwrap();
        d.remove_port("a").unwrap();
        assert!(p("a.sock").exists(), "del-port left the replacement");
        assert_eq!(ledger.paths().len(), 2, "a's entry went with the port");
        // A port added again on a path taken by a live socket is refused.
        let e = error_chain(&d.add_port(vm("a", &p("a.sock"))).unwrap_err());
        assert!(e.contains("in use"), "{e}");
        d.shutdown();
        assert_eq!(std::fs::read(p("b.sock")).unwrap(), b"theirs");
        assert_eq!(files(t.path()), ["a.sock", "b.sock"]);
        assert!(ledger.paths().is_empty());
    }

    #[test]
    fn the_socket_ledger_removes_every_socket_without_the_port_book() {
        let t = tempfile::tempdir().unwrap();
        let d = Daemon::start(cfg(t.path())).unwrap();
        let ledger = d.socket_ledger();
        // The port book held by a stuck operation does not stop it.
        let held = lock_book(&d.shared.book);
        let (tx, rx) = std::sync::mpsc::channel();
        let l = ledger.clone();
        std::thread::spawn(move || tx.send(l.remove_all()).unwrap());
        let removed = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("not blocked");
        assert_eq!(removed, 3);
        assert_eq!(files(t.path()), Vec::<String>::new());
        drop(held);
        d.shutdown();
    }
}
