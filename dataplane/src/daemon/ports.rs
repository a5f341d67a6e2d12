//! Making and unmaking ports, the same way at start-up and at run time
//! (`vadapt add-port`, `del-port`, `reload`): a VM port with its socket and
//! the thread serving its frontend, and the sink, echo and TAP ports (a TAP
//! port with its reader thread). The NQ workers' pool is made here too.
//! What a port is made with goes on the switch; the one list of running
//! ports (`crate::port::Roster`) is the port book's to keep.

use super::error::DaemonError;
use crate::config::cores::QueueWorkers;
use crate::config::VmPortConfig;
use crate::config::{DaemonConfig, HostPortSpec, LocalPortConfig, SocketMode, TapPortConfig};
use crate::cores::ApplyMethod;
use crate::metrics::PortStats;
use crate::policing::LimitsSlot;
use crate::port::frontend_socket::{self, Connector, FrontendSocket};
use crate::port::serve;
use crate::port::{RunningPort, VmPort};
use crate::socket_file::SocketLedger;
use crate::switch::{Echo, PortId, PortRules, PortVlan, Sink, SourceGuard, Switch, Tap};
use crate::worker::pool::NqWorkers;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use vadapt_host::cpufreq::CpuFreq;
use vadapt_wire::Mac;

/// What every port is made with: the daemon's settings, its switch and
/// pool.
pub(super) struct PortMaker {
    /// The daemon's configuration at start-up: the settings ports are made
    /// with (`cpus`, `backlog`, the default policy, `socket_group`, the
    /// queue workers). Its port lists are not used here.
    pub(super) settings: DaemonConfig,
    pub(super) switch: Arc<Switch>,
    pub(super) pool: Option<Arc<NqWorkers>>,
    /// The daemon's sockets: a VM port's goes in as it is bound, and out
    /// (removed, if still the one bound) as the port goes.
    sockets: SocketLedger,
    /// TSC cycles per ns for the workers' pass clock (`None`: no invariant TSC).
    tsc_per_ns: Option<f64>,
}

/// A VM port that runs: its thread serving the frontend, with a stop flag
/// of its own so that it can be removed alone.
pub(super) struct RunningVm {
    pub(super) port: Arc<VmPort>,
    /// The CPU its worker is pinned to (`--cpus`), if any.
    pub(super) cpu: Option<usize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Since [`RunningVm::begin_stop`]: when, and the frontend's connection
    /// it shut down for reading (for the stop's last resort).
    stopping: Option<(std::time::Instant, Option<std::os::unix::net::UnixStream>)>,
    /// The socket file vadapt created (server mode): its entry in the
    /// daemon's [`SocketLedger`], removed with the port.
    socket_file: Option<PathBuf>,
}

/// How long a VM port's serve loop has to end after its read side is shut
/// down before its connection is shut down both ways ([`RunningVm::stop`]).
/// The loop normally ends in well under a millisecond (the worker stops,
/// the rings go back); it is only still running when a send to the
/// frontend blocks.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// A sink, echo, TAP or uplink port that runs.
pub(super) struct RunningHost {
    pub(super) spec: HostPortSpec,
    id: PortId,
    /// Its counters.
    stats: Arc<PortStats>,
    /// A TAP port's reader.
    reader: Option<TapReader>,
    /// An uplink's queue workers.
    uplink: Option<crate::uplink::RunningUplink>,
}

/// A TAP port's reader thread, and its stop flag.
struct TapReader {
    /// The port (for its rate limits).
    tap: Arc<Tap>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl PortMaker {
    /// A maker for a daemon configured by `settings`.
    pub(super) fn new(
        settings: &DaemonConfig,
        switch: Arc<Switch>,
        pool: Option<Arc<NqWorkers>>,
        sockets: SocketLedger,
    ) -> Self {
        PortMaker {
            settings: settings.without_ports(),
            switch,
            pool,
            sockets,
            tsc_per_ns: crate::clock::invariant_tsc().then(|| crate::clock::calibrate_tsc(20)),
        }
    }

    /// VM port `vm`, the `index`th made (for `--cpus`, taken in turn): its
    /// socket listening (server mode) or its connector (client mode), on the
    /// switch, its frontend served. A failure leaves
    /// nothing behind.
    pub(super) fn vm(&self, index: usize, vm: &VmPortConfig) -> Result<RunningVm, DaemonError> {
        let cfg = &self.settings;
        let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[index % cfg.cpus.len()]);
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
        let port = VmPort::new(
            vm.clone(),
            cfg.policy,
            cfg.backlog,
            cpu,
            freq,
            self.tsc_per_ns,
        )
        .map_err(|source| DaemonError::Port {
            port: vm.name.clone(),
            source,
        })?;
        let (socket, socket_file) = match vm.mode {
            SocketMode::Server => {
                let (l, owned) = frontend_socket::listen(&vm.socket, cfg.socket_group.as_deref())?;
                self.sockets.keep(owned);
                (FrontendSocket::Listen(l), Some(vm.socket.clone()))
            }
            SocketMode::Client => (
                FrontendSocket::Connect(Connector::new(vm.socket.clone())),
                None,
            ),
        };
        let owned = vm.owned_macs();
        // Validation refuses `allowed_ips` without port security, so a
        // guard always has the MACs its link-local addresses come from.
        let ip_guard = (!vm.allowed_ips.is_empty() && !owned.is_empty())
            .then(|| SourceGuard::new(&vm.allowed_ips, &owned));
        let rules = PortRules {
            owned,
            max_learned: Some(vm.max_learned.unwrap_or(cfg.max_learned_per_port)),
            vlan: PortVlan::Access(vm.vlan.unwrap_or(0)),
            ip_guard,
        };
        let id = self
            .switch
            .add_port_with(port.clone(), Arc::clone(&port.stats), rules);
        port.attach(self.switch.ingress(id));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, st, pool) = (Arc::clone(&port), Arc::clone(&stop), self.pool.clone());
        let live = Arc::clone(&port.live);
        let thread = std::thread::Builder::new()
            .name(format!("vadapt-vu-{}", port.name()))
            .spawn(move || serve::serve(p, socket, st, live, pool));
        let thread = match thread {
            Ok(t) => t,
            Err(source) => {
                self.switch.remove_port(id);
                if let Some(f) = &socket_file {
                    self.sockets.release(f);
                }
                return Err(DaemonError::Port {
                    port: vm.name.clone(),
                    source,
                });
            }
        };
        Ok(RunningVm {
            port,
            cpu,
            stop,
            thread: Some(thread),
            stopping: None,
            socket_file,
        })
    }

    /// Stop `vm` and take it away: its frontend's connection is ended
    /// (its worker stops and hands its rings back first), it leaves the
    /// switch, and its socket file (server mode) goes if
    /// it is still the socket bound (see [`SocketLedger::release`]).
    pub(super) fn remove_vm(&self, mut vm: RunningVm) {
        vm.stop();
        self.switch.remove_port(vm.port.port_id());
        if let Some(f) = &vm.socket_file {
            self.sockets.release(f);
        }
    }

    /// A sink, echo, TAP or uplink port, on the switch.
    pub(super) fn host(&self, spec: HostPortSpec) -> Result<RunningHost, DaemonError> {
        let ((id, stats), reader, uplink) = match &spec {
            HostPortSpec::Sink(s) => (self.sink(s), None, None),
            HostPortSpec::Echo(e) => (self.echo(e), None, None),
            HostPortSpec::Tap(t) => {
                let (id, stats, reader) = self.tap(t)?;
                ((id, stats), Some(reader), None)
            }
            HostPortSpec::Uplink(u) => {
                let running = self.uplink(u)?;
                let stats = Arc::clone(&running.port.stats);
                ((running.port.port_id(), stats), None, Some(running))
            }
        };
        Ok(RunningHost {
            spec,
            id,
            stats,
            reader,
            uplink,
        })
    }

    /// Stop `host` (a TAP port's reader, an uplink's workers) and take it
    /// off the switch.
    pub(super) fn remove_host(&self, host: RunningHost) {
        if let Some(r) = host.reader {
            r.stop.store(true, Ordering::Relaxed);
            let _ = r.thread.join();
        }
        if let Some(u) = host.uplink {
            u.stop();
        }
        self.switch.remove_port(host.id);
    }

    fn sink(&self, s: &LocalPortConfig) -> (PortId, Arc<PortStats>) {
        let stats = Arc::new(PortStats::new(&s.name, crate::metrics::PortKind::Sink, 1));
        let id = self.switch.add_port_with(
            Arc::new(Sink::new(Arc::clone(&stats))),
            Arc::clone(&stats),
            PortRules::open_in(PortVlan::Access(s.vlan.unwrap_or(0))),
        );
        self.switch
            .add_static(s.mac.unwrap_or_else(|| Mac::from_name(&s.name)), id);
        (id, stats)
    }

    fn echo(&self, e: &LocalPortConfig) -> (PortId, Arc<PortStats>) {
        let stats = Arc::new(PortStats::new(&e.name, crate::metrics::PortKind::Echo, 1));
        let echo = Arc::new(Echo::new(Arc::clone(&stats)));
        let id = self.switch.add_port_with(
            echo.clone(),
            Arc::clone(&stats),
            PortRules::open_in(PortVlan::Access(e.vlan.unwrap_or(0))),
        );
        echo.attach(self.switch.ingress(id));
        self.switch
            .add_static(e.mac.unwrap_or_else(|| Mac::from_name(&e.name)), id);
        (id, stats)
    }

    fn tap(&self, t: &TapPortConfig) -> Result<(PortId, Arc<PortStats>, TapReader), DaemonError> {
        let stats = Arc::new(PortStats::new(&t.name, crate::metrics::PortKind::Tap, 1));
        let tap = Arc::new(Tap::open(&t.name, t.mtu, Arc::clone(&stats))?);
        tap.limits().set(t.limits);
        tracing::info!(
            port = t.name.as_str(),
            offloads = ?tap.offloads(),
            "TAP port opened (IFF_VNET_HDR; offloads the host may send: checksum, TSO4/6, ECN, or none if TUNSETOFFLOAD was refused)"
        );
        let id = self.switch.add_port_with(
            tap.clone(),
            Arc::clone(&stats),
            PortRules::open_in(PortVlan::trunk_port(&t.vlan_keys())),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (ingress, st, reader) = (self.switch.ingress(id), Arc::clone(&stop), tap.clone());
        let thread = std::thread::Builder::new()
            .name(format!("vadapt-tap-{}", t.name))
            .spawn(move || reader.run_reader(&ingress, &st));
        match thread {
            Ok(thread) => Ok((id, stats, TapReader { tap, stop, thread })),
            Err(source) => {
                self.switch.remove_port(id);
                Err(DaemonError::Port {
                    port: t.name.clone(),
                    source,
                })
            }
        }
    }

    /// An uplink: on the switch, its interface taken,
    /// a socket and a worker per NIC queue.
    fn uplink(
        &self,
        u: &crate::config::UplinkPortConfig,
    ) -> Result<crate::uplink::RunningUplink, DaemonError> {
        let port = crate::uplink::Uplink::new(
            u.clone(),
            self.settings.backlog,
            self.settings.policy,
            self.tsc_per_ns,
        )
        .map_err(|source| DaemonError::Port {
            port: u.name.clone(),
            source,
        })?;
        let id = self.switch.add_port_with(
            port.clone(),
            Arc::clone(&port.stats),
            PortRules::open_in(PortVlan::trunk_port(&u.vlan_keys())),
        );
        port.attach(self.switch.ingress(id));
        let dir = crate::uplink::program::default_record_dir();
        let running = crate::uplink::start(port, &dir, self.pool.clone()).map_err(|source| {
            self.switch.remove_port(id);
            DaemonError::Uplink {
                port: u.name.clone(),
                source,
            }
        })?;
        Ok(running)
    }
}

impl RunningHost {
    /// The port as the list of running ports has it.
    pub(super) fn running(&self) -> RunningPort {
        match &self.uplink {
            Some(u) => RunningPort::uplink(Arc::clone(&u.port), &u.workers),
            None => RunningPort::host(self.id, Arc::clone(&self.stats)),
        }
    }

    /// The rate limits of a TAP port or an uplink (`None` for a sink or
    /// an echo port).
    pub(super) fn limits(&self) -> Option<&LimitsSlot> {
        let tap = self.reader.as_ref().map(|r| r.tap.limits());
        tap.or_else(|| self.uplink().map(|u| &u.limits))
    }

    /// The uplink port, if this is one.
    pub(super) fn uplink(&self) -> Option<&Arc<crate::uplink::Uplink>> {
        self.uplink.as_ref().map(|u| &u.port)
    }
}

impl RunningVm {
    /// Stop serving the frontend: [`RunningVm::begin_stop`], then
    /// [`RunningVm::finish_stop`].
    pub(super) fn stop(&mut self) {
        self.begin_stop();
        self.finish_stop();
    }

    /// Tell the serve loop to stop: the stop flag is set and the port's
    /// blocked read is ended (only our reading side: the serve loop stops
    /// the worker before the socket closes, so that the frontend never
    /// sees a close while a worker still runs and takes a stale used index
    /// as the ring's position). Returns at once, so that a daemon stopping
    /// many ports tells them all before it waits for any.
    pub(super) fn begin_stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if self.stopping.is_none() {
            let live = self
                .port
                .live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(s) = &live {
                let _ = s.shutdown(std::net::Shutdown::Read);
            }
            self.stopping = Some((std::time::Instant::now(), live));
        }
    }

    /// Wait for the serve loop [`RunningVm::begin_stop`] told to stop, and
    /// join it.
    ///
    /// A frontend that does not read its replies can hold the serve thread
    /// in `sendmsg`, which a read shutdown does not end: if the thread has
    /// not finished [`STOP_GRACE`] after the stop began, the sending side is
    /// shut down too (the send fails at once), so that no frontend can hold
    /// a removal, a reload or the daemon's stop.
    pub(super) fn finish_stop(&mut self) {
        self.begin_stop();
        let Some(t) = self.thread.take() else {
            return;
        };
        let (since, live) = self.stopping.take().expect("begin_stop ran");
        while !t.is_finished() && since.elapsed() < STOP_GRACE {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if let (false, Some(s)) = (t.is_finished(), &live) {
            tracing::warn!(
                port = self.port.name(),
                "the frontend's connection did not end within {} ms of the stop \
                 (a frontend that reads no replies?); closing it both ways",
                STOP_GRACE.as_millis()
            );
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let _ = t.join();
    }
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
