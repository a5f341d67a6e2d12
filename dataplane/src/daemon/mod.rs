//! The running daemon: ports on a switch, their listener threads, the
//! control socket and the metrics endpoint.

mod error;
mod ports;
mod services;
mod started;

pub use error::DaemonError;
use started::Started;

use crate::config::DaemonConfig;
use crate::config::SocketMode;
use crate::control::{self, Handler, Request, Response, MAX_P95_US};
use crate::cores::CoresStatus;
use crate::metrics::Registry;
use crate::queue::pool::NqWorkers;
use crate::queue::VmPort;
use crate::switch::Switch;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use vadapt_policy::{PolicyConfig, Retune};

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
    /// Validate `cfg`, create every port and socket, and start serving:
    /// the configuration, then the ports, then the services over them.
    pub fn start(cfg: DaemonConfig) -> Result<Daemon, DaemonError> {
        prepare(&cfg)?;
        let registry = Arc::new(Registry::default());
        let switch = Arc::new(Switch::new(Duration::from_secs(cfg.mac_ageing_s)));
        // Until start-up is complete, a failure stops what was started and
        // removes the sockets already created.
        let mut started = Started::default();
        let stop = Arc::clone(&started.stop);
        let vms = ports::vm_ports(&cfg, &switch, &registry, &mut started)?;
        ports::host_ports(&cfg, &switch, &registry, &mut started)?;
        let nq_workers = ports::nq_pool(&cfg)?;
        let live = ports::serve_frontends(&vms.ports, vms.listeners, &nq_workers, &mut started);
        let (cores, cores_line) =
            services::core_manager(&cfg, &vms.ports, &nq_workers, &registry, &mut started)?;
        services::workload_estimate(&vms.ports, &mut started)?;
        let shared = Arc::new(Shared {
            registry: Arc::clone(&registry),
            vm_ports: vms.ports,
            cores,
        });
        started.threads.push(control::serve(
            &cfg.control,
            shared.clone(),
            Arc::clone(&stop),
        )?);
        started.files.push(cfg.control.clone());
        let metrics_addr = services::metrics_endpoint(&cfg, &registry, &mut started)?;
        services::mac_ageing(&switch, &mut started);
        // Said once start-up can no longer fail: a failed start is one line.
        services::log_ready(
            &cfg,
            &shared.vm_ports,
            metrics_addr,
            cores_line,
            vms.freq_note,
            &vms.pinned,
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_vm_spec;
    use std::net::TcpListener;

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
        let shared = Shared {
            registry: Arc::new(Registry::default()),
            vm_ports: Vec::new(),
            cores: Some(Arc::clone(&status)),
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
    fn socket_folder_errors_name_the_folder() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("file"), b"").unwrap();
        let mut c = cfg(&t.path().join("file/sub"));
        c.control = t.path().join("control.sock");
        let e = Daemon::start(c).unwrap_err().to_string();
        assert!(e.contains("socket folder") && e.contains("file/sub"), "{e}");
    }
}
