//! The core manager's thread: every period, measure, allocate, place.
//!
//! ```text
//!   every period_ms:
//!       threads = vCPU threads of each VM (QMP query-cpus-fast, cached)
//!               + the queue workers (NQ group)
//!       load    = schedstat of each thread since the last period
//!       outcome = VspaceManager::on_period(load, worst P95 reported)
//!       sets    = CoreSets::place(outcome.allocation, cpus, previous sets)
//!       apply sets to threads when either changed (affinity or cpusets)
//!       vSPACE-R: QMP stop / cont the best-effort VMs as their cores go and come
//! ```
//!
//! Idle cores (vSPACE-E) get the lowest frequency and the others the highest,
//! through cpufreq's `userspace` governor where the host offers it (the
//! governor found at start is put back when the daemon stops); without
//! cpufreq this is a no-op, said once at start-up.
//!
//! Queue workers: by default one per VM port, each allowed on every NQ
//! core. With `queue_workers = "per-nq-core"` the daemon's
//! [`NqWorkers`] pool is given to the manager, which resizes it to one
//! worker per NQ core (pinned to it) whenever the NQ group changes; the
//! pool moves ports' queue sets between its workers.
//!
//! vSPACE-Guest: a VM with `qga = PATH` is asked through its guest agent to
//! keep as many vCPUs online as its group has cores, and as many queue pairs
//! as the NQ group (see [`super::guest_side`]).
//!
//! A queue worker restarts (new thread id) whenever its frontend
//! reconfigures a ring; it runs where the daemon's own affinity allows until
//! the next period places it. A VM whose QMP socket does not answer, answers
//! garbage, or names threads that have gone is a logged, counted condition:
//! its vCPUs are left where they are and looked up again later; the other
//! VMs keep their placement.
//!
//! **Peers are untrusted and never waited for.** Each VM's QMP socket and
//! guest agent is served by its own [`PeerWorker`] thread, with bounded
//! waits; a period only hands requests over and takes replies, so a slow
//! or silent peer delays only its own VM's actions and every other VM is
//! managed every period. The thread ids QMP names are tied to the QMP
//! peer's own process ([`super::vm_qmp`]); any other is refused with a
//! rate-limited WARN and counted (`foreign_tids_refused`), never moved.
//! A refused `stop` is retried with backoff and a failed `cont` until it
//! succeeds or the VM is gone, in every mode, each distinct error logged
//! once per VM. When the manager stops (the daemon's stop, or a panic in a
//! period) every thread it moved gets back its original affinity or
//! cgroup, and paused VMs are resumed, within [`RELEASE_DEADLINE`].

use super::guest_side::{GuestOutcome, GuestSide, GuestTarget};
use super::peer_worker::PeerWorker;
use super::status::{CoresStatus, Placement, VmCores};
use super::vm_qmp::{self, QmpReply, QmpRequest, RunFailure, VmQmp, VmRun};
use crate::config::cores::{ApplyMethod, CoresConfig, VmRole};
use crate::panic_message::panic_message;
use crate::port::{Roster, VmPort};
use crate::worker::pool::NqWorkers;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vadapt_host::applier::{Mechanism, ThreadOutcome};
use vadapt_host::cpufreq::CpuFreq;
use vadapt_host::error_chain::error_chain;
use vadapt_host::thread_load::{LoadSnapshot, ThreadPeriod};
use vadapt_host::{Applier, GroupThread, TaskId, ThreadGroup};
use vadapt_policy::vspace::{
    CoreSets, PeriodMeasurement, SampleOutcome, VspaceManager, VspaceMode,
};
use vadapt_policy::FreqHint;
use vadapt_qemu::qga;
use vadapt_qemu::qmp::QmpLimits;

/// How often a VM's vCPU threads are looked up again even when nothing
/// suggests they changed (vCPU hot-plug).
const REDISCOVER_EVERY: Duration = Duration::from_secs(10);
/// How soon a VM whose lookup failed is tried again.
const RETRY_LOOKUP: Duration = Duration::from_secs(1);
/// First wait before a failed `stop` or `cont` is tried again; it doubles
/// up to [`RUN_RETRY_MAX`].
const RUN_RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between two tries of a failed `stop` or `cont`.
const RUN_RETRY_MAX: Duration = Duration::from_secs(30);
/// Least time between two WARN lines about one VM's refused thread ids.
const FOREIGN_TID_WARN_EVERY: Duration = Duration::from_secs(60);
/// How long the manager's release may wait for paused VMs to resume; with
/// the rest of the daemon's stop, well within the 2 s an ordinary stop
/// takes at most.
pub const RELEASE_DEADLINE: Duration = Duration::from_millis(800);

/// One VM under management.
#[derive(Debug)]
struct ManagedVm {
    name: String,
    role: VmRole,
    qmp: Option<PathBuf>,
    qemu_pidfile: Option<PathBuf>,
    /// The thread serving its QMP socket, started at the first lookup.
    qmp_worker: Option<PeerWorker<QmpRequest, QmpReply>>,
    /// Its QEMU's pid, once identified.
    qemu_pid: Option<u32>,
    vcpus: Vec<TaskId>,
    looked_up: Option<Instant>,
    error: Option<String>,
    /// Paused, as QEMU last confirmed.
    paused: bool,
    /// Whether vSPACE-R wants it paused.
    want_paused: bool,
    /// A `stop` was sent and no `cont` confirmed since: the VM is, or may
    /// yet be, paused by us (the stop's answer may not have been taken).
    stop_sent: bool,
    /// When a failed `stop`/`cont` may be tried again, and the wait after.
    run_retry: Option<(Instant, Duration)>,
    /// The last `stop`/`cont` error, logged once.
    run_error: Option<String>,
    /// When refused thread ids were last logged.
    foreign_warned: Option<Instant>,
    /// vSPACE-Guest through its agent, if configured.
    guest: GuestSide,
    /// The port's queue pairs (the most the guest can activate).
    queue_pairs: u16,
}

impl ManagedVm {
    /// A VM to manage, as `port`'s configuration describes it.
    fn of(p: &VmPort) -> ManagedVm {
        ManagedVm {
            name: p.name().to_string(),
            role: p.cfg.role,
            qmp: p.cfg.qmp.clone(),
            qemu_pidfile: p.cfg.qemu_pidfile.clone(),
            qmp_worker: None,
            qemu_pid: None,
            vcpus: Vec::new(),
            looked_up: None,
            error: p
                .cfg
                .qmp
                .is_none()
                .then(|| "no qmp socket configured".to_string()),
            paused: false,
            want_paused: false,
            stop_sent: false,
            run_retry: None,
            run_error: None,
            foreign_warned: None,
            guest: GuestSide::new(p.cfg.qga.clone(), p.cfg.guest_iface.clone()),
            queue_pairs: p.cfg.queues,
        }
    }
}

/// The core manager. [`CoreManager::step`] is one period; [`spawn`] runs
/// it on a thread.
pub struct CoreManager {
    cfg: CoresConfig,
    mode: VspaceMode,
    proc_root: PathBuf,
    vms: Vec<ManagedVm>,
    /// The VM ports as they come and go, and the roster's generation
    /// `vms` and `ports` follow.
    roster: Arc<Roster>,
    roster_seen: u64,
    ports: Arc<Vec<Arc<VmPort>>>,
    status: Arc<CoresStatus>,
    manager: Option<VspaceManager>,
    applier: Applier,
    sets: CoreSets,
    applied: Option<(CoreSets, Vec<GroupThread>)>,
    prev: Option<LoadSnapshot>,
    run_delay: [Duration; 2],
    /// cpufreq of each managed CPU, in `cfg.cpus` order.
    freqs: Vec<CpuFreq>,
    /// The pool of one queue worker per NQ core, if configured.
    nq_workers: Option<Arc<NqWorkers>>,
    /// The NQ CPUs the pool was last resized to.
    pool_nq: Vec<usize>,
}

impl std::fmt::Debug for CoreManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreManager")
            .field("mode", &self.mode)
            .field("cpus", &self.cfg.cpus)
            .finish_non_exhaustive()
    }
}

impl CoreManager {
    /// A manager of `cfg.cpus` for the ports of `roster`, as they come and
    /// go (their configs name the VMs' QMP sockets and roles);
    /// `proc_root` and `sysfs_root` are normally `/proc` and `/sys`.
    pub fn new(
        cfg: CoresConfig,
        roster: Arc<Roster>,
        status: Arc<CoresStatus>,
        proc_root: &Path,
        sysfs_root: &Path,
    ) -> Self {
        let freqs = if cfg.mode == VspaceMode::Off || cfg.apply == ApplyMethod::Advise {
            Vec::new()
        } else {
            cfg.cpus
                .iter()
                .map(|&c| CpuFreq::probe_owner(sysfs_root, c))
                .collect()
        };
        let applier = match cfg.apply {
            ApplyMethod::Advise => Applier::advise_only("apply = \"advise\" in [cores]"),
            ApplyMethod::Affinity => {
                // Our own thread always passes the probe; another process's
                // refusal (no CAP_SYS_NICE) shows in the first placement,
                // which then switches to advise-only (see `apply`).
                Applier::affinity(vadapt_host::cputime::current_tid(), proc_root)
            }
            ApplyMethod::Cpuset => {
                let mountinfo =
                    std::fs::read_to_string(proc_root.join("self/mountinfo")).unwrap_or_default();
                let parent = cfg.cgroup.clone().unwrap_or_default();
                Applier::cpuset(&parent, &mountinfo, proc_root)
            }
        };
        let roster_seen = roster.generation();
        let ports = roster.current();
        let vms = ports.iter().map(|p| ManagedVm::of(p)).collect();
        let mut m = CoreManager {
            mode: cfg.mode,
            proc_root: proc_root.to_owned(),
            vms,
            roster,
            roster_seen,
            ports,
            status,
            manager: None,
            applier,
            sets: CoreSets::default(),
            applied: None,
            prev: None,
            run_delay: [Duration::ZERO; 2],
            freqs,
            nq_workers: None,
            pool_nq: Vec::new(),
            cfg,
        };
        m.set_mode(m.mode);
        m
    }

    /// Size `pool` to one worker per NQ core from now on (its workers are
    /// measured as the NQ group; they pin themselves to their cores).
    pub fn with_nq_workers(mut self, pool: Arc<NqWorkers>) -> Self {
        self.nq_workers = Some(pool);
        self.resize_pool();
        self
    }

    /// The current placement.
    pub fn sets(&self) -> &CoreSets {
        &self.sets
    }

    fn set_mode(&mut self, mode: VspaceMode) {
        self.mode = mode;
        self.manager = if mode == VspaceMode::Off {
            None
        } else {
            let vcfg = super::CoresConfig {
                mode,
                ..self.cfg.clone()
            }
            .vspace();
            match VspaceManager::new(&vcfg) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::error!(error = %e, "core manager: cannot run mode {mode}; staying off");
                    self.mode = VspaceMode::Off;
                    None
                }
            }
        };
        self.sets = match &self.manager {
            Some(m) => {
                CoreSets::place(&m.allocation(), &self.cfg.cpus, &self.sets).unwrap_or_default()
            }
            // Off: every managed thread may run on every managed CPU.
            None => CoreSets {
                vcpu: self.cfg.cpus.clone(),
                nq: self.cfg.cpus.clone(),
                be: self.cfg.cpus.clone(),
                idle: Vec::new(),
            },
        };
        self.applied = None;
        if mode != VspaceMode::Resource {
            self.want_best_effort_paused(false);
        }
    }

    /// The log line said once at start-up.
    pub fn describe(&self) -> String {
        let how = match self.applier.availability() {
            vadapt_host::Availability::Available => {
                format!("placing threads by {}", self.applier.name())
            }
            vadapt_host::Availability::Unavailable { reason } => {
                format!("advise-only (threads are not moved): {reason}")
            }
        };
        let freq = match self.freqs.iter().find_map(|f| f.unavailable_reason()) {
            Some(reason) => format!("; idle-core frequency is a no-op: {reason}"),
            None if self.freqs.is_empty() => String::new(),
            None => "; idle cores at the lowest frequency".to_string(),
        };
        let (agent, none): (Vec<&ManagedVm>, Vec<&ManagedVm>) =
            self.vms.iter().partition(|vm| vm.guest.has_agent());
        let names = |v: &[&ManagedVm]| {
            v.iter()
                .map(|vm| vm.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut guest = String::new();
        if !agent.is_empty() {
            guest += &format!(
                "; guest vCPUs and queue pairs through the guest agent for {}",
                names(&agent)
            );
        }
        if !none.is_empty() {
            guest += &format!("; host side only (no qga) for {}", names(&none));
        }
        format!(
            "core manager: mode {} on CPUs {:?}, period {} ms, {how}{freq}{guest}",
            self.mode, self.cfg.cpus, self.cfg.period_ms
        )
    }

    /// One period at `now`.
    pub fn step(&mut self, now: Instant) {
        let requested = self
            .status
            .mode_request
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mode) = requested {
            if mode != self.mode {
                tracing::info!(from = %self.mode, to = %mode, "core manager: mode changed");
                self.note(format!("mode {} -> {mode}", self.mode));
                self.set_mode(mode);
            }
        }
        self.follow_roster();
        self.take_qmp_replies(now);
        self.look_up_vcpus(now);
        let threads = self.threads();
        let snap = LoadSnapshot::take(&self.proc_root, &threads, now);
        let load = self.prev.as_ref().and_then(|p| snap.since(p).ok());
        self.prev = Some(snap);
        let p95 = self.status.take_p95();
        let mut gone_vcpu = false;
        if let Some(load) = &load {
            for r in &load.threads {
                if r.period == ThreadPeriod::Gone && r.thread.group != ThreadGroup::Nq {
                    gone_vcpu = true;
                }
            }
            self.run_delay[0] += load.vcpu.run_delay;
            self.run_delay[1] += load.nq.run_delay;
        }
        if gone_vcpu {
            // A VM shut down or restarted: look its threads up again.
            for vm in &mut self.vms {
                vm.looked_up = None;
            }
        }
        let mut outcome = None;
        if let (Some(m), Some(load)) = (&mut self.manager, &load) {
            let o = m.on_period(PeriodMeasurement {
                load: load.group_load(),
                p95: p95.map(vadapt_policy::time::Duration::from_micros),
            });
            if o.changed {
                match CoreSets::place(&o.allocation, &self.cfg.cpus, &self.sets) {
                    Ok(sets) => self.sets = sets,
                    Err(e) => tracing::error!(error = %e, "core manager: placement failed"),
                }
            }
            outcome = Some(o);
        }
        self.apply(&threads);
        self.resize_pool();
        if self.manager.is_some() {
            self.drive_guests(now);
        }
        if self.mode == VspaceMode::Resource {
            if let Some(o) = &outcome {
                self.want_best_effort_paused(o.allocation.pause_be());
            }
        }
        self.run_stop_cont(now);
        self.publish(load.as_ref(), outcome);
    }

    fn note(&self, what: String) {
        self.status.edit().note(what);
    }
}

/// Run `m` every period on a thread named `vadapt-cores` until `stop`.
pub fn spawn(m: CoreManager, stop: Arc<AtomicBool>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("vadapt-cores".into())
        .spawn(move || run(m, &stop, CoreManager::step))
}

/// The manager's loop: `step` every period until `stop`. A panic in `step`
/// stops the manager, never the daemon: it is logged, `vadapt cores` and the
/// metrics say so, and the VMs' traffic goes on. Either way, at the end
/// every managed thread may run on every managed CPU again.
fn run(mut m: CoreManager, stop: &AtomicBool, mut step: impl FnMut(&mut CoreManager, Instant)) {
    let period = Duration::from_millis(m.cfg.period_ms);
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| step(&mut m, Instant::now()))) {
            let periods = m.status.snapshot().periods;
            let why = format!(
                "internal error after {periods} periods: {}",
                panic_message(&*payload)
            );
            tracing::error!(
                "core manager stopped ({why}): vSPACE no longer moves threads, pauses VMs or \
                 takes mode changes until the daemon restarts; the VMs' traffic is not affected"
            );
            m.status.mark_failed(why);
            break;
        }
        next += period;
        let now = Instant::now();
        if next < now {
            next = now; // fell behind: no burst of catch-up periods
        }
        while !stop.load(Ordering::Relaxed) {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
    let released = catch_unwind(AssertUnwindSafe(|| m.release()));
    if released.is_err() {
        tracing::error!(
            cpus = ?m.cfg.cpus,
            "core manager: could not give the VMs' and queue workers' threads every managed \
             CPU back; they keep their last placement (`taskset -p` shows it)"
        );
    }
}

mod best_effort;
mod discovery;
mod following;
mod guests;
mod placement;
mod publish;
mod release;

#[cfg(test)]
mod peer_tests;

#[cfg(test)]
mod tests;
