//! Start-up, the ports step: every VM port with its socket, the sink, echo
//! and TAP ports on the switch, the NQ workers' pool, and a thread per VM
//! port serving its frontend.

use super::error::DaemonError;
use super::started::Started;
use crate::config::cores::QueueWorkers;
use crate::config::DaemonConfig;
use crate::config::SocketMode;
use crate::cores::ApplyMethod;
use crate::metrics::{PortStats, Registry};
use crate::port::frontend_socket::{self, Connector, FrontendSocket};
use crate::port::serve;
use crate::queue::pool::NqWorkers;
use crate::queue::VmPort;
use crate::switch::Switch;
use crate::switch::{Echo, Sink, Tap};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use vadapt_host::cpufreq::CpuFreq;
use vadapt_policy::PolicyKind;
use vadapt_wire::Mac;

/// The VM ports made, each with its frontend's socket, in `cfg.vm` order.
pub(super) struct VmPorts {
    pub(super) ports: Vec<Arc<VmPort>>,
    pub(super) listeners: Vec<FrontendSocket>,
    /// Ports pinned by `--cpus`: name, CPU, policy.
    pub(super) pinned: Vec<(String, usize, PolicyKind)>,
    /// Why the first port's CPU-frequency hints are a no-op, if they are.
    pub(super) freq_note: Option<String>,
}

/// Every VM port, on the switch and in the registry, with its socket
/// listening (server mode) or its connector (client mode).
pub(super) fn vm_ports(
    cfg: &DaemonConfig,
    switch: &Arc<Switch>,
    registry: &Registry,
    started: &mut Started,
) -> Result<VmPorts, DaemonError> {
    let tsc_per_ns = crate::clock::invariant_tsc().then(|| crate::clock::calibrate_tsc(20));
    let mut out = VmPorts {
        ports: Vec::new(),
        listeners: Vec::new(),
        pinned: Vec::new(),
        freq_note: None,
    };
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
            out.freq_note = freq.unavailable_reason().map(str::to_owned);
        }
        let port = VmPort::new(vm.clone(), cfg.policy, cfg.backlog, cpu, freq, tsc_per_ns)
            .map_err(|source| DaemonError::Port {
                port: vm.name.clone(),
                source,
            })?;
        if let Some(c) = cpu {
            out.pinned
                .push((vm.name.clone(), c, port.policy_config().kind()));
        }
        let id = switch.add_port(port.clone(), Arc::clone(&port.stats));
        port.attach(switch.ingress(id));
        registry.add_port(Arc::clone(&port.stats));
        registry.add_worker(Arc::clone(&port.worker_stats));
        out.listeners.push(match vm.mode {
            SocketMode::Server => {
                let l = frontend_socket::listen(&vm.socket, cfg.socket_group.as_deref())?;
                started.files.push(vm.socket.clone());
                FrontendSocket::Listen(l)
            }
            SocketMode::Client => FrontendSocket::Connect(Connector::new(vm.socket.clone())),
        });
        out.ports.push(port);
    }
    Ok(out)
}

/// The sink, echo and TAP ports (a TAP port with its reader thread).
pub(super) fn host_ports(
    cfg: &DaemonConfig,
    switch: &Arc<Switch>,
    registry: &Registry,
    started: &mut Started,
) -> Result<(), DaemonError> {
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
        echo.attach(switch.ingress(id));
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
        let (ingress, st) = (switch.ingress(id), Arc::clone(&started.stop));
        started.threads.push(
            std::thread::Builder::new()
                .name(format!("vadapt-tap-{}", t.name))
                .spawn(move || tap.run_reader(&ingress, &st))
                .expect("spawning a thread"),
        );
    }
    Ok(())
}

/// One queue worker per NQ core, if configured: one worker until the core
/// manager's first placement resizes the pool.
pub(super) fn nq_pool(cfg: &DaemonConfig) -> Result<Option<Arc<NqWorkers>>, DaemonError> {
    if !cfg.cores.cpus.is_empty() && cfg.cores.queue_workers == QueueWorkers::PerNqCore {
        let pin = cfg.cores.apply != ApplyMethod::Advise;
        Ok(Some(NqWorkers::new(&cfg.cores.cpus[..1], pin)?))
    } else {
        Ok(None)
    }
}

/// A thread per VM port serving its frontend (the vhost-user protocol);
/// each port's live connection, for the shutdown to end.
pub(super) fn serve_frontends(
    ports: &[Arc<VmPort>],
    listeners: Vec<FrontendSocket>,
    pool: &Option<Arc<NqWorkers>>,
    started: &mut Started,
) -> Vec<Arc<Mutex<Option<UnixStream>>>> {
    let mut live = Vec::new();
    for (port, listener) in ports.iter().zip(listeners) {
        let l = Arc::clone(&port.live);
        live.push(Arc::clone(&l));
        let (p, st) = (Arc::clone(port), Arc::clone(&started.stop));
        let pool = pool.clone();
        started.threads.push(
            std::thread::Builder::new()
                .name(format!("vadapt-vu-{}", port.name()))
                .spawn(move || serve::serve(p, listener, st, l, pool))
                .expect("spawning a thread"),
        );
    }
    live
}
