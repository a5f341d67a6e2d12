//! The running daemon: ports on a switch, their listener threads, the
//! control socket and the metrics endpoint.

use crate::config::DaemonConfig;
use crate::control::{self, Handler, Request, Response};
use crate::metrics::{PortStats, Registry};
use crate::net::Mac;
use crate::ports::{Echo, Sink, Tap, TapError};
use crate::switch::Switch;
use crate::vmport::handler::{self, ListenError};
use crate::vmport::VmPort;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vadapt_coremgr::cpufreq::CpuFreq;
use vadapt_policy::PolicyConfig;

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
        }
    }
}

fn set_policy(ports: &[Arc<VmPort>], name: &str, policy: PolicyConfig) -> Result<(), String> {
    let p = ports.iter().find(|p| p.name() == name).ok_or_else(|| {
        let names: Vec<_> = ports.iter().map(|p| p.name()).collect();
        format!("no VM port `{name}` (VM ports: {})", names.join(", "))
    })?;
    p.set_policy(policy).map_err(|e| e.to_string())?;
    tracing::info!(port = name, policy = %policy.kind(), "policy change requested");
    Ok(())
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
    metrics_addr: Option<SocketAddr>,
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
        let registry = Arc::new(Registry::default());
        let switch = Arc::new(Switch::new(Duration::from_secs(cfg.mac_ageing_s)));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();

        let tsc_per_ns = crate::clock::invariant_tsc().then(|| crate::clock::calibrate_tsc(20));
        let mut vm_ports = Vec::new();
        let mut listeners = Vec::new();
        for (i, vm) in cfg.vm.iter().enumerate() {
            let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[i % cfg.cpus.len()]);
            let freq = Arc::new(match cpu {
                Some(c) => CpuFreq::probe(std::path::Path::new("/sys"), c),
                None => CpuFreq::unavailable("worker not pinned to a CPU (see --cpus)"),
            });
            if i == 0 {
                if let Some(reason) = freq.unavailable_reason() {
                    tracing::info!("CPU-frequency hints (EE-KBP) are a no-op: {reason}");
                }
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
            let id = switch.add_port(port.clone(), Arc::clone(&port.stats));
            port.set_port_id(id);
            registry.add_port(Arc::clone(&port.stats));
            registry.add_worker(Arc::clone(&port.worker_stats));
            listeners.push(handler::listen(&vm.socket, cfg.socket_group.as_deref())?);
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
            let id = switch.add_port(tap.clone(), Arc::clone(&stats));
            registry.add_port(stats);
            let (sw, st) = (Arc::clone(&switch), Arc::clone(&stop));
            threads.push(
                std::thread::Builder::new()
                    .name(format!("vadapt-tap-{}", t.name))
                    .spawn(move || tap.run_reader(&sw, id, &st))
                    .expect("spawning a thread"),
            );
        }

        let mut live = Vec::new();
        for (port, listener) in vm_ports.iter().zip(listeners) {
            let l = Arc::new(Mutex::new(None));
            live.push(Arc::clone(&l));
            let (p, st) = (Arc::clone(port), Arc::clone(&stop));
            threads.push(
                std::thread::Builder::new()
                    .name(format!("vadapt-vu-{}", port.name()))
                    .spawn(move || handler::serve(p, listener, st, l))
                    .expect("spawning a thread"),
            );
            tracing::info!(port = port.name(), socket = %port.cfg.socket.display(), queues = port.cfg.queues,
                mac = %port.mac, policy = %port.policy_cfg.lock().map(|p| p.kind().to_string()).unwrap_or_default(),
                "VM port listening");
        }

        let shared = Arc::new(Shared {
            registry: Arc::clone(&registry),
            vm_ports,
        });
        threads.push(control::serve(
            &cfg.control,
            shared.clone(),
            Arc::clone(&stop),
        )?);
        tracing::info!(path = %cfg.control.display(), "control socket ready");

        let metrics_addr = match cfg.metrics {
            Some(addr) => {
                let l = TcpListener::bind(addr)
                    .map_err(|source| DaemonError::Metrics { addr, source })?;
                let bound = l.local_addr().unwrap_or(addr);
                l.set_nonblocking(true)
                    .map_err(|source| DaemonError::Metrics { addr, source })?;
                let (reg, st) = (Arc::clone(&registry), Arc::clone(&stop));
                threads.push(
                    std::thread::Builder::new()
                        .name("vadapt-metrics".into())
                        .spawn(move || serve_metrics(l, reg, st))
                        .expect("spawning a thread"),
                );
                tracing::info!(%bound, "Prometheus metrics at http://{bound}/metrics");
                Some(bound)
            }
            None => None,
        };

        let (sw, st) = (Arc::clone(&switch), Arc::clone(&stop));
        threads.push(
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

        Ok(Daemon {
            shared,
            switch,
            stop,
            threads,
            live,
            sockets: cfg.vm.iter().map(|v| v.socket.clone()).collect(),
            metrics_addr,
        })
    }

    /// Every counter.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.shared.registry)
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

    /// Stop everything: connections are closed, workers joined, sockets removed.
    pub fn shutdown(mut self) {
        self.request_stop();
        for l in &self.live {
            if let Some(s) = l.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for s in &self.sockets {
            let _ = std::fs::remove_file(s);
        }
        tracing::info!("daemon stopped");
    }
}

fn serve_metrics(l: TcpListener, reg: Arc<Registry>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut line = String::new();
                let _ = BufReader::new(std::io::Read::take(&s, 8192)).read_line(&mut line);
                let (status, body) =
                    if line.starts_with("GET /metrics") || line.starts_with("GET / ") {
                        ("200 OK", reg.prometheus_text())
                    } else {
                        ("404 Not Found", "try /metrics\n".to_string())
                    };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}
