//! The uplink port: a port on the switch whose queues are AF_XDP sockets
//! on a NIC's queues, served by queue workers that step the same executor
//! and policies as a VM ring (EE-KBP's NIC-to-VM path).
//!
//! * [`port`] — the uplink as the switch sees it ([`Uplink`]): a backlog
//!   and a wake-up per NIC queue.
//! * [`worker`] — one NIC queue as a [`QueueIo`](crate::worker::QueueIo):
//!   what each policy's waits mean on a NIC queue.
//! * [`xsk`] — one AF_XDP socket over its UMEM ([`XskQueue`]).
//! * [`program`] — the XDP program on the interface: its owner record, and
//!   taking over one a killed daemon left.
//! * [`busy_poll`] — the kernel's preferred busy polling for EE-KBP: the
//!   socket's options and the interface's IRQ deferral, restored at stop.
//! * [`channels`] — the NIC's channel count (`ethtool -l`/`-L`): set to
//!   the uplink's queues where the driver allows, restored at stop.
//! * [`rss_table`] — the NIC's RSS indirection table (`ethtool -x`/`-X`):
//!   spread over the uplink's queues where the channel count could not be
//!   lowered to them, restored at stop.
//! * [`promisc`] — the NIC in promiscuous mode while the uplink runs, so
//!   that frames for the VMs' addresses pass its MAC filter.
//! * `libxdp` — the distribution's libxdp, declared, and the AF_XDP ring
//!   accessors of `<xdp/xsk.h>`.

pub mod busy_poll;
pub mod channels;
pub(crate) mod libxdp;
pub mod port;
pub mod program;
pub mod promisc;
pub mod rss_table;
pub mod worker;
pub mod xsk;

#[cfg(test)]
mod every_path_tests;
#[cfg(test)]
mod tests;

pub use port::Uplink;
pub use xsk::{XskError, XskQueue};

use crate::metrics::WorkerStats;
use crate::worker::pool::{NqWorkers, NqWorkersError};
use crate::worker::{Runtime, Served};
use program::{OwnerRecord, ProgramError};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vadapt_host::cpufreq::CpuFreq;

/// Errors starting an uplink.
#[derive(Debug, thiserror::Error)]
pub enum UplinkError {
    /// The interface could not be taken.
    #[error(transparent)]
    Program(#[from] ProgramError),
    /// The interface cannot have as many queues as the uplink asks.
    #[error(transparent)]
    Channels(#[from] channels::ChannelsError),
    /// A queue's AF_XDP socket could not be opened.
    #[error(transparent)]
    Socket(#[from] XskError),
    /// The interface could not be put into promiscuous mode.
    #[error(transparent)]
    Promisc(#[from] promisc::PromiscError),
    /// The policy could not be built.
    #[error("bad policy for the uplink")]
    Policy(#[source] vadapt_policy::ConfigError),
    /// The interface's IRQ deferral for EE-KBP could not be set.
    #[error(transparent)]
    BusyPoll(#[from] busy_poll::BusyPollError),
    /// A queue worker's epoll set could not be made.
    #[error("cannot start a queue worker")]
    Worker(#[source] std::io::Error),
    /// A queue's thread of its own could not be started.
    #[error("cannot start a queue worker's thread")]
    Thread(#[from] NqWorkersError),
}

/// An uplink that runs: its NIC queues served (each by a thread of its own,
/// or by the NQ pool), and the owner record of its interface.
#[derive(Debug)]
pub struct RunningUplink {
    /// The port.
    pub port: Arc<Uplink>,
    /// Its queue workers' counters (`<port>/<queue>`), for the registry.
    pub workers: Vec<Arc<WorkerStats>>,
    stop: Arc<AtomicBool>,
    /// The queues being served.
    served: Vec<Served>,
    /// Sets the NIC's channel count back (if the uplink changed it) once
    /// the sockets are closed.
    channels: Option<channels::ChannelGuard>,
    /// Writes the NIC's RSS indirection table back (if the uplink changed
    /// it), before the channel count is.
    rss: Option<rss_table::RssGuard>,
    /// Holds the interface in promiscuous mode until the uplink stops.
    promisc: Option<promisc::PromiscGuard>,
    owner: Option<OwnerRecord>,
}

/// The queue set id of queue `q` of the uplink at switch port `port_id`:
/// apart from VM ports' ids (their switch port ids, small numbers).
fn pool_set_id(port_id: usize, q: usize) -> u64 {
    (1 << 48) | ((port_id as u64 & 0xffff_ffff) << 16) | q as u64
}

/// Start `port` (already on the switch): take its interface (records in
/// `record_dir`), open an AF_XDP socket per queue, and serve each queue
/// with the port's policy (see [`Uplink::new`]): by a worker thread of its
/// own, or, given the NQ pool (`[cores] queue_workers = "per-nq-core"`),
/// as a queue set of the pool (one per NIC queue, so that the pool spreads
/// them over its workers and moves them when the NQ group is resized).
pub fn start(
    port: Arc<Uplink>,
    record_dir: &Path,
    pool: Option<Arc<NqWorkers>>,
) -> Result<RunningUplink, UplinkError> {
    let policy = port.policy_config();
    policy.validate().map_err(UplinkError::Policy)?;
    let lib = libxdp::libxdp().map_err(XskError::Library)?;
    libxdp::log_to_tracing(lib);
    let cfg = &port.cfg;
    let owner = OwnerRecord::take(record_dir, &cfg.iface)?;
    // Dropped after the sockets on every way out (declared before them).
    let channels = channels::ensure(&cfg.iface, u32::from(cfg.queues), &cfg.name, record_dir)?;
    let have = channels::read(&cfg.iface).ok().flatten();
    let rss = rss_table::steer(
        Arc::new(rss_table::EthtoolRxfh),
        &cfg.iface,
        u32::from(cfg.queues),
        have.map(|c| c.rx_queues()),
        &cfg.name,
        record_dir,
    );
    let promisc = promisc::PromiscGuard::take(&cfg.iface)?;
    // A killed uplink's IRQ deferral, written back before anything else.
    if let Err(e) = busy_poll::restore_left(Path::new("/sys"), &cfg.iface, record_dir) {
        tracing::warn!(
            port = cfg.name.as_str(),
            error = %vadapt_host::error_chain::error_chain(&e),
            "cannot restore the IRQ deferral a stopped vadapt left on the NIC"
        );
    }
    let mut sockets = Vec::new();
    for q in 0..u32::from(cfg.queues) {
        sockets.push(XskQueue::open(&cfg.iface, q, cfg.mode)?);
    }
    // Nothing fails between this and `running`, whose drop undoes it.
    port.napi_start(record_dir)?;
    if policy.kind() == vadapt_policy::PolicyKind::Eekbp {
        tracing::info!(
            port = cfg.name.as_str(),
            "{}",
            busy_poll::irq_suspend_note(&busy_poll::kernel_release())
        );
    }
    tracing::info!(
        port = cfg.name.as_str(),
        iface = cfg.iface.as_str(),
        queues = cfg.queues,
        mode = %sockets[0].mode(),
        policy = %policy.kind(),
        "uplink open: an AF_XDP socket per NIC queue"
    );
    let runtime = pool.clone().map_or(Runtime::Thread, Runtime::Pool);
    let stop = Arc::new(AtomicBool::new(false));
    let mut running = RunningUplink {
        port: Arc::clone(&port),
        workers: Vec::new(),
        stop: Arc::clone(&stop),
        served: Vec::new(),
        channels,
        rss,
        promisc: Some(promisc),
        owner: Some(owner),
    };
    for (q, xsk) in sockets.into_iter().enumerate() {
        // The pool places its workers itself: an uplink's cpus= is for
        // workers of its own.
        let cpu = (!cfg.cpus.is_empty() && pool.is_none()).then(|| cfg.cpus[q % cfg.cpus.len()]);
        let freq = Arc::new(match cpu {
            Some(c) => CpuFreq::probe(Path::new("/sys"), c),
            None if pool.is_some() => CpuFreq::unavailable(
                "queue workers of the NQ pool (--queue-workers per-nq-core) move between CPUs",
            ),
            None => CpuFreq::unavailable(
                "uplink queue worker not pinned to a CPU (see the uplink's cpus=)",
            ),
        });
        let stats = Arc::new(WorkerStats::new(&format!("{}/{q}", cfg.name)));
        running.workers.push(Arc::clone(&stats));
        let io =
            worker::UplinkQueue::new(Arc::clone(&port), q, xsk, Arc::clone(&stop), freq, stats)
                .map_err(UplinkError::Worker)?;
        let thread = format!("vadapt-x-{}-{q}", cfg.name);
        let id = pool_set_id(port.port_id(), q);
        running.served.push(runtime.serve(id, io, &thread, cpu)?);
    }
    Ok(running)
}

impl RunningUplink {
    /// Stop the workers and close the sockets (libxdp detaches its program
    /// with the last one), set the NIC's RSS indirection table and channel
    /// count back if the uplink changed them, leave promiscuous mode, then drop the owner record.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for q in 0..self.port.queues.len() {
            self.port.kick_worker(q);
        }
        for served in self.served.drain(..) {
            // Released between two passes; the socket closes with it.
            let _ = served.stop();
        }
        self.port.napi_stop();
        self.rss.take();
        self.channels.take();
        self.promisc.take();
        self.owner.take();
    }
}

impl Drop for RunningUplink {
    fn drop(&mut self) {
        self.stop_now();
    }
}
