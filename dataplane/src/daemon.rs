//! The running daemon: ports on a switch, their listener threads, the
//! control socket and the metrics endpoint.

use crate::config::DaemonConfig;
use crate::control::{self, Handler, Request, Response, MAX_P95_US};
use crate::cores::config::QueueWorkers;
use crate::cores::manager_loop::{self, CoreManager};
use crate::cores::{ApplyMethod, CoresStatus};
use crate::metrics::{PortStats, Registry};
use crate::net::Mac;
use crate::nq_workers::NqWorkers;
use crate::ports::{Echo, Sink, Tap, TapError};
use crate::switch::Switch;
use crate::vmport::frontend_socket::{self, Connector, FrontendSocket, ListenError, SocketMode};
use crate::vmport::handler;
use crate::vmport::VmPort;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vadapt_coremgr::cpufreq::CpuFreq;
use vadapt_policy::{PolicyConfig, Retune};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A vhost-user socket could not be created.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// A TAP port could not be created.
    #[error(transparent)]
    Tap(#[from] TapError),
    /// The control socket could not be created.
    #[error(transparent)]
    Control(#[from] control::ControlError),
    /// The metrics endpoint could not be bound.
    #[error("cannot listen for metrics on {addr}")]
    Metrics {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The NetAP-ML model is unusable.
    #[error(transparent)]
    Model(#[from] crate::netap_ml_model::ModelError),
    /// The pool of queue workers could not start.
    #[error(transparent)]
    NqWorkers(#[from] crate::nq_workers::NqWorkersError),
    /// A system resource (eventfd, thread) could not be created.
    #[error("cannot create port `{port}`")]
    Port {
        /// Port name.
        port: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

struct Shared {
    registry: Arc<Registry>,
    vm_ports: Vec<Arc<VmPort>>,
    /// The core manager's state; `None` when `[cores]` names no CPUs.
    cores: Option<Arc<CoresStatus>>,
}

impl Handler for Shared {
    fn handle(&self, req: Request) -> Response {
        match req {
            Request::Stats => Response::Stats {
                stats: self.registry.snapshot(),
            },
            Request::Metrics => Response::Metrics {
                text: self.registry.prometheus_text(),
            },
            Request::SetPolicy { port, policy } => {
                match set_policy(&self.vm_ports, &port, policy) {
                    Ok(()) => Response::Ok,
                    Err(error) => Response::Error { error },
                }
            }
            Request::Retune { port, retune } => match self.retune(&port, retune) {
                Ok(()) => Response::Ok,
                Err(error) => Response::Error { error },
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

impl Shared {
    fn retune(&self, name: &str, r: Retune) -> Result<(), String> {
        let p = find_port(&self.vm_ports, name)?;
        p.retune(r).map_err(|e| format!("port `{name}`: {e}"))?;
        tracing::info!(port = name, retune = ?r, "retune requested");
        Ok(())
    }
}

fn find_port<'a>(ports: &'a [Arc<VmPort>], name: &str) -> Result<&'a Arc<VmPort>, String> {
    ports.iter().find(|p| p.name() == name).ok_or_else(|| {
        let names: Vec<_> = ports.iter().map(|p| p.name()).collect();
        format!("no VM port `{name}` (VM ports: {})", names.join(", "))
    })
}

fn set_policy(ports: &[Arc<VmPort>], name: &str, policy: PolicyConfig) -> Result<(), String> {
    let p = find_port(ports, name)?;
    p.set_policy(policy).map_err(|e| e.to_string())?;
    tracing::info!(port = name, policy = %policy.kind(), "policy change requested");
    Ok(())
}

/// What `Daemon::start` has started so far. Dropped before
/// [`Started::complete`] (start-up failed), it stops those threads and
/// removes the socket files created, so a failed start leaves nothing behind.
#[derive(Default)]
struct Started {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    files: Vec<PathBuf>,
}

impl Started {
    /// Start-up succeeded: hand the threads over.
    fn complete(mut self) -> Vec<JoinHandle<()>> {
        self.files.clear();
        std::mem::take(&mut self.threads)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.threads.is_empty() && self.files.is_empty() {
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// A running daemon. Dropping it without [`Daemon::shutdown`] leaves the
/// threads running until the process exits.
pub struct Daemon {
    shared: Arc<Shared>,
    switch: Arc<Switch>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    live: Vec<Arc<Mutex<Option<UnixStream>>>>,
    sockets: Vec<PathBuf>,
    control: PathBuf,
    metrics_addr: Option<SocketAddr>,
    nq_workers: Option<Arc<NqWorkers>>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("sockets", &self.sockets)
            .finish_non_exhaustive()
    }
}

impl Daemon {
    /// Validate `cfg`, create every port and socket, and start serving.
    pub fn start(cfg: DaemonConfig) -> Result<Daemon, DaemonError> {
        cfg.validate()?;
        crate::netap_ml_model::prepare(
            cfg.netap_ml_model.as_deref(),
            std::iter::once(&cfg.policy).chain(cfg.vm.iter().filter_map(|v| v.policy.as_ref())),
        )?;
        let registry = Arc::new(Registry::default());
        let switch = Arc::new(Switch::new(Duration::from_secs(cfg.mac_ageing_s)));
        // Until start-up is complete, a failure stops what was started and
        // removes the sockets already created.
        let mut started = Started::default();
        let stop = Arc::clone(&started.stop);
        let mut freq_note = None;

        let tsc_per_ns = crate::clock::invariant_tsc().then(|| crate::clock::calibrate_tsc(20));
        let mut vm_ports = Vec::new();
        let mut listeners = Vec::new();
        let mut pinned_policies = Vec::new();
        for (i, vm) in cfg.vm.iter().enumerate() {
            let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[i % cfg.cpus.len()]);
            let freq = Arc::new(match cpu {
                Some(c) => CpuFreq::probe(std::path::Path::new("/sys"), c),
                // The NQ pool pins its workers, but a port's hints follow
                // only a CPU given by --cpus.
                None if cfg.cores.queue_workers == QueueWorkers::PerNqCore => CpuFreq::unavailable(
                    "queue workers of the NQ pool (--queue-workers per-nq-core) \
                         move between CPUs; hints need a port pinned by --cpus",
                ),
                None => CpuFreq::unavailable("worker not pinned to a CPU (see --cpus)"),
            });
            if i == 0 {
                freq_note = freq.unavailable_reason().map(str::to_owned);
            }
            let port = VmPort::new(
                vm.clone(),
                cfg.policy,
                Arc::clone(&switch),
                cfg.backlog,
                cpu,
                freq,
                tsc_per_ns,
            )
            .map_err(|source| DaemonError::Port {
                port: vm.name.clone(),
                source,
            })?;
            if let Some(c) = cpu {
                pinned_policies.push((vm.name.clone(), c, port.policy_config().kind()));
            }
            let id = switch.add_port(port.clone(), Arc::clone(&port.stats));
            port.set_port_id(id);
            registry.add_port(Arc::clone(&port.stats));
            registry.add_worker(Arc::clone(&port.worker_stats));
            listeners.push(match vm.mode {
                SocketMode::Server => {
                    let l = frontend_socket::listen(&vm.socket, cfg.socket_group.as_deref())?;
                    started.files.push(vm.socket.clone());
                    FrontendSocket::Listen(l)
                }
                SocketMode::Client => FrontendSocket::Connect(Connector::new(vm.socket.clone())),
            });
            vm_ports.push(port);
        }
        for s in &cfg.sink {
            let stats = Arc::new(PortStats::new(&s.name, "sink", 1));
            let id = switch.add_port(Arc::new(Sink::new(Arc::clone(&stats))), Arc::clone(&stats));
            switch.add_static(s.mac.unwrap_or_else(|| Mac::from_name(&s.name)), id);
            registry.add_port(stats);
        }
        for e in &cfg.echo {
            let stats = Arc::new(PortStats::new(&e.name, "echo", 1));
            let echo = Arc::new(Echo::new(Arc::clone(&stats)));
            let id = switch.add_port(echo.clone(), Arc::clone(&stats));
            echo.set_port_id(id);
            switch.add_static(e.mac.unwrap_or_else(|| Mac::from_name(&e.name)), id);
            registry.add_port(stats);
        }
        for t in &cfg.tap {
            let stats = Arc::new(PortStats::new(&t.name, "tap", 1));
            let tap = Arc::new(Tap::open(&t.name, Arc::clone(&stats))?);
            tracing::info!(
                port = t.name.as_str(),
                offloads = ?tap.offloads(),
                "TAP port opened (IFF_VNET_HDR; offloads the host may send: checksum, TSO4/6, ECN, or none if TUNSETOFFLOAD was refused)"
            );
            let id = switch.add_port(tap.clone(), Arc::clone(&stats));
            registry.add_port(stats);
            let (sw, st) = (Arc::clone(&switch), Arc::clone(&stop));
            started.threads.push(
                std::thread::Builder::new()
                    .name(format!("vadapt-tap-{}", t.name))
                    .spawn(move || tap.run_reader(&sw, id, &st))
                    .expect("spawning a thread"),
            );
        }

        // One queue worker per NQ core: one worker until the core manager's
        // first placement resizes the pool (below).
        let nq_workers =
            if !cfg.cores.cpus.is_empty() && cfg.cores.queue_workers == QueueWorkers::PerNqCore {
                let pin = cfg.cores.apply != ApplyMethod::Advise;
                Some(NqWorkers::new(&cfg.cores.cpus[..1], pin)?)
            } else {
                None
            };

        let mut live = Vec::new();
        for (port, listener) in vm_ports.iter().zip(listeners) {
            let l = Arc::clone(&port.live);
            live.push(Arc::clone(&l));
            let (p, st) = (Arc::clone(port), Arc::clone(&stop));
            let pool = nq_workers.clone();
            started.threads.push(
                std::thread::Builder::new()
                    .name(format!("vadapt-vu-{}", port.name()))
                    .spawn(move || handler::serve(p, listener, st, l, pool))
                    .expect("spawning a thread"),
            );
        }

        let mut cores_line = None;
        let cores = if cfg.cores.cpus.is_empty() {
            None
        } else {
            let status = Arc::new(CoresStatus::default());
            let m = CoreManager::new(
                cfg.cores.clone(),
                vm_ports.clone(),
                Arc::clone(&status),
                std::path::Path::new("/proc"),
                std::path::Path::new("/sys"),
            );
            let m = match &nq_workers {
                Some(pool) => m.with_nq_workers(Arc::clone(pool)),
                None => m,
            };
            cores_line = Some(m.describe());
            started
                .threads
                .push(manager_loop::spawn(m, Arc::clone(&stop)).map_err(|source| {
                    DaemonError::Port {
                        port: "core manager".into(),
                        source,
                    }
                })?);
            registry.set_cores(Arc::clone(&status));
            Some(status)
        };
        // NetAP-ML's features estimated from the counters (idle unless a
        // port runs netap-ml).
        let workload =
            crate::workload_loop::WorkloadLoop::new(Arc::clone(&registry), vm_ports.clone());
        started.threads.push(
            crate::workload_loop::spawn(workload, Arc::clone(&stop)).map_err(|source| {
                DaemonError::Port {
                    port: "workload estimate".into(),
                    source,
                }
            })?,
        );
        let shared = Arc::new(Shared {
            registry: Arc::clone(&registry),
            vm_ports,
            cores,
        });
        started.threads.push(control::serve(
            &cfg.control,
            shared.clone(),
            Arc::clone(&stop),
        )?);
        started.files.push(cfg.control.clone());

        let metrics_addr = match cfg.metrics {
            Some(addr) => {
                let l = TcpListener::bind(addr)
                    .map_err(|source| DaemonError::Metrics { addr, source })?;
                let bound = l.local_addr().unwrap_or(addr);
                l.set_nonblocking(true)
                    .map_err(|source| DaemonError::Metrics { addr, source })?;
                let (reg, st) = (Arc::clone(&registry), Arc::clone(&stop));
                started.threads.push(
                    std::thread::Builder::new()
                        .name("vadapt-metrics".into())
                        .spawn(move || crate::metrics_http::serve(l, reg, st))
                        .expect("spawning a thread"),
                );
                Some(bound)
            }
            None => None,
        };

        let (sw, st) = (Arc::clone(&switch), Arc::clone(&stop));
        started.threads.push(
            std::thread::Builder::new()
                .name("vadapt-ageing".into())
                .spawn(move || {
                    while !st.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(200));
                        sw.age(Instant::now());
                    }
                })
                .expect("spawning a thread"),
        );

        // Said once start-up can no longer fail: a failed start is one line.
        for port in &shared.vm_ports {
            let what = match port.cfg.mode {
                SocketMode::Server => "VM port listening",
                SocketMode::Client => "VM port connecting to the frontend's socket",
            };
            tracing::info!(port = port.name(), socket = %port.cfg.socket.display(), queues = port.cfg.queues,
                mac = %port.mac, policy = %port.policy_config().kind(), "{what}");
        }
        tracing::info!(path = %cfg.control.display(), "control socket ready");
        if let Some(bound) = metrics_addr {
            tracing::info!(%bound, "Prometheus metrics at http://{bound}/metrics");
        }
        if let Some(line) = cores_line {
            tracing::info!("{line}");
        }
        if let Some(reason) = freq_note {
            tracing::info!("CPU-frequency hints (EE-KBP) are a no-op: {reason}");
        }
        for (cpu, ports) in busy_pollers_sharing_a_cpu(&pinned_policies) {
            tracing::warn!(
                cpu,
                ports = %ports.join(", "),
                "busy-polling ports with a worker each share this CPU: the workers take turns \
                 in scheduler ticks, and frames queued for one wait out the other's tick \
                 (benchmark B8: a quarter lost, 4-5x the cycles per packet); give each its own \
                 CPU in --cpus, or serve them with one worker (--cores-cpus {cpu} \
                 --queue-workers per-nq-core)"
            );
        }
        let threads = started.complete();
        Ok(Daemon {
            shared,
            switch,
            stop,
            threads,
            live,
            // Only the sockets vadapt created; a client port's belongs to QEMU.
            sockets: cfg
                .vm
                .iter()
                .filter(|v| v.mode == SocketMode::Server)
                .map(|v| v.socket.clone())
                .collect(),
            control: cfg.control.clone(),
            metrics_addr,
            nq_workers,
        })
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

    /// The VM ports.
    pub fn vm_ports(&self) -> &[Arc<VmPort>] {
        &self.shared.vm_ports
    }

    /// Address the metrics endpoint actually bound (port 0 resolved).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Change a VM port's policy.
    pub fn set_policy(&self, port: &str, policy: PolicyConfig) -> Result<(), String> {
        set_policy(&self.shared.vm_ports, port, policy)
    }

    /// Change a parameter of a VM port's running policy.
    pub fn retune(&self, port: &str, r: Retune) -> Result<(), String> {
        self.shared.retune(port, r)
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

    /// Every socket file the daemon created (server-mode VM ports and the
    /// control socket).
    pub fn socket_paths(&self) -> Vec<PathBuf> {
        let mut v = self.sockets.clone();
        v.push(self.control.clone());
        v
    }

    /// Stop everything: connections are closed, workers joined, sockets removed.
    pub fn shutdown(mut self) {
        self.request_stop();
        // Only our reading side is shut: the blocked read returns, the port's
        // serve loop stops its worker, and only then does closing the socket
        // tell the frontend. A frontend that sees the close while a worker
        // still runs would take a stale used index as the ring's position
        // (QEMU does, to resume after a restart) and the new daemon would
        // hand the guest buffers it had already been given back.
        for l in &self.live {
            if let Some(s) = l.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = s.shutdown(std::net::Shutdown::Read);
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The serve loops took their queue sets back when they stopped.
        if let Some(pool) = &self.nq_workers {
            pool.shutdown();
        }
        for s in &self.sockets {
            let _ = std::fs::remove_file(s);
        }
        tracing::info!("daemon stopped");
    }
}

/// The CPUs that `--cpus` gives the workers of two or more busy-polling
/// ports, with those ports (`pinned`: port, CPU, initial policy).
fn busy_pollers_sharing_a_cpu(
    pinned: &[(String, usize, vadapt_policy::PolicyKind)],
) -> Vec<(usize, Vec<String>)> {
    let mut by_cpu = std::collections::BTreeMap::<usize, Vec<String>>::new();
    for (port, cpu, kind) in pinned {
        if *kind == vadapt_policy::PolicyKind::BusyPoll {
            by_cpu.entry(*cpu).or_default().push(port.clone());
        }
    }
    by_cpu.into_iter().filter(|(_, p)| p.len() > 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_vm_spec;

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
        let found = busy_pollers_sharing_a_cpu(&[
            p("a", 1, BusyPoll),
            p("b", 2, BusyPoll),
            p("c", 1, BusyPoll),
            p("d", 2, Netap),
            p("e", 3, Netap),
            p("f", 3, Netap),
        ]);
        assert_eq!(found, vec![(1, vec!["a".to_string(), "c".to_string()])]);
        assert!(busy_pollers_sharing_a_cpu(&[p("a", 1, BusyPoll)]).is_empty());
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
        let shared = Shared {
            registry: Arc::new(Registry::default()),
            vm_ports: Vec::new(),
            cores: Some(Arc::clone(&status)),
        };
        shared.registry.set_cores(Arc::clone(&status));
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
    fn socket_folder_errors_name_the_folder() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("file"), b"").unwrap();
        let mut c = cfg(&t.path().join("file/sub"));
        c.control = t.path().join("control.sock");
        let e = Daemon::start(c).unwrap_err().to_string();
        assert!(e.contains("socket folder") && e.contains("file/sub"), "{e}");
    }
}
