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

use super::config::{ApplyMethod, CoresConfig, VmRole};
use super::guest_side::{GuestOutcome, GuestSide, GuestTarget};
use super::peer_worker::PeerWorker;
use super::status::{CoresStatus, Placement, VmCores};
use super::vm_qmp::{self, QmpReply, QmpRequest, RunFailure, VmQmp, VmRun};
use crate::nq_workers::NqWorkers;
use crate::panic_message::panic_message;
use crate::vmport::VmPort;
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
    /// Whether a `stop` or `cont` is with its QMP worker, not yet answered
    /// (the VM may be paused by it).
    fn run_in_flight(&self) -> bool {
        self.qmp_worker.as_ref().is_some_and(|w| !w.idle())
    }
}

/// The core manager. [`CoreManager::step`] is one period; [`spawn`] runs
/// it on a thread.
pub struct CoreManager {
    cfg: CoresConfig,
    mode: VspaceMode,
    proc_root: PathBuf,
    vms: Vec<ManagedVm>,
    ports: Vec<Arc<VmPort>>,
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
    /// A manager of `cfg.cpus` for `ports` (their configs name the VMs'
    /// QMP sockets and roles); `proc_root` and `sysfs_root` are normally
    /// `/proc` and `/sys`.
    pub fn new(
        cfg: CoresConfig,
        ports: Vec<Arc<VmPort>>,
        status: Arc<CoresStatus>,
        proc_root: &Path,
        sysfs_root: &Path,
    ) -> Self {
        let freqs = if cfg.mode == VspaceMode::Off || cfg.apply == ApplyMethod::Advise {
            Vec::new()
        } else {
            cfg.cpus
                .iter()
                .map(|&c| CpuFreq::probe(sysfs_root, c))
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
        let vms = ports
            .iter()
            .map(|p| ManagedVm {
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
                run_retry: None,
                run_error: None,
                foreign_warned: None,
                guest: GuestSide::new(p.cfg.qga.clone(), p.cfg.guest_iface.clone()),
                queue_pairs: p.cfg.queues,
            })
            .collect();
        let mut m = CoreManager {
            mode: cfg.mode,
            proc_root: proc_root.to_owned(),
            vms,
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

    /// One pool worker per CPU of the NQ group, when the group changed.
    fn resize_pool(&mut self) {
        let Some(pool) = &self.nq_workers else { return };
        if self.pool_nq == self.sets.nq {
            return;
        }
        match pool.resize(&self.sets.nq) {
            Ok(moved) => {
                tracing::info!(
                    workers = self.sets.nq.len().max(1),
                    moved,
                    "core manager: queue workers follow the NQ group"
                );
                self.pool_nq = self.sets.nq.clone();
                self.note(format!(
                    "queue workers: {} (queue sets moved {moved})",
                    self.sets.nq.len().max(1)
                ));
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "core manager: cannot resize the queue workers; retried next period");
            }
        }
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

    /// Stop managing, within [`RELEASE_DEADLINE`] whatever the peers do:
    /// every thread the manager moved gets back what it had (affinity or
    /// cgroup), paused best-effort VMs are resumed, and `vadapt cores`
    /// says so. Called when the manager's loop ends, normally or after a
    /// panic in a period.
    fn release(&mut self) {
        self.set_mode(VspaceMode::Off);
        let report = self.applier.restore();
        for (task, why) in &report.failed {
            tracing::error!(
                pid = task.pid,
                tid = task.tid,
                error = %why,
                "core manager: cannot put a thread back as it was before vadapt moved it"
            );
        }
        if report.restored > 0 || !report.failed.is_empty() {
            tracing::info!(
                restored = report.restored,
                gone = report.gone,
                failed = report.failed.len(),
                "core manager: threads put back as they were"
            );
        }
        self.resume_all_now();
        let mut s = self
            .status
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        s.mode = self.mode;
        s.sets = self.sets.clone();
        s.threads_restored += report.restored as u64;
        for vm in &mut s.vms {
            vm.paused = self.vms.iter().any(|m| m.name == vm.name && m.paused);
        }
    }

    /// Resume every VM that is, or may be, paused by us: each on a fresh
    /// QMP connection of its own thread with short waits, all within
    /// [`RELEASE_DEADLINE`]. A VM that does not answer in time is named in
    /// an ERROR line, with how to resume it by hand.
    fn resume_all_now(&mut self) {
        let limits = QmpLimits {
            timeout: RELEASE_DEADLINE / 4,
            max_line: 1 << 16,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let mut waiting = Vec::new();
        for (i, vm) in self.vms.iter().enumerate() {
            let Some(socket) = vm.qmp.clone() else {
                continue;
            };
            if !(vm.paused || vm.run_in_flight() && vm.want_paused) {
                continue;
            }
            let tx = tx.clone();
            let spawned = std::thread::Builder::new()
                .name("vadapt-resume".into())
                .spawn(move || {
                    let _ = tx.send((i, vm_qmp::run_bounded(&socket, VmRun::Cont, limits)));
                });
            if spawned.is_ok() {
                waiting.push(i);
            }
        }
        drop(tx);
        let deadline = Instant::now() + RELEASE_DEADLINE;
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok((i, result)) = rx.recv_timeout(left) else {
                break;
            };
            waiting.retain(|&w| w != i);
            let vm = &mut self.vms[i];
            match result {
                Ok(()) | Err(RunFailure::Gone(_)) => {
                    vm.paused = false;
                    tracing::info!(vm = vm.name, "core manager: best-effort VM resumed");
                }
                Err(RunFailure::Failed(e)) => tracing::error!(
                    vm = vm.name,
                    error = %e,
                    "core manager: cannot resume the best-effort VM; resume it with QMP `cont`"
                ),
            }
        }
        for i in waiting {
            tracing::error!(
                vm = self.vms[i].name,
                "core manager: the best-effort VM's QMP did not answer `cont` within {} ms; \
                 resume it with QMP `cont`",
                RELEASE_DEADLINE.as_millis()
            );
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

    /// Every thread under management, with its group.
    fn threads(&self) -> Vec<GroupThread> {
        let mut v = Vec::new();
        for vm in &self.vms {
            let group = if vm.role == VmRole::Be && self.mode == VspaceMode::Resource {
                ThreadGroup::Be
            } else {
                ThreadGroup::Vcpu
            };
            v.extend(vm.vcpus.iter().map(|&task| GroupThread { group, task }));
        }
        // Our own queue workers; one that just exited is left out.
        let pid = std::process::id();
        let workers = self
            .ports
            .iter()
            .map(|p| p.worker_stats.tid.load(Ordering::Acquire))
            .filter(|&tid| tid > 0)
            .map(|tid| tid as u32)
            .chain(self.pool_tids());
        for tid in workers {
            if let Ok(task) = TaskId::of_process(&self.proc_root, pid, tid) {
                v.push(GroupThread {
                    group: ThreadGroup::Nq,
                    task,
                });
            }
        }
        v.sort();
        v.dedup();
        v
    }

    /// vSPACE-Guest: each VM with an agent gets as many vCPUs online as its
    /// group has cores (the vCPU group, or the best-effort cores for a BE
    /// VM in mode R), and as many queue pairs as the NQ group has cores (at
    /// most its port's).
    fn drive_guests(&mut self, now: Instant) {
        let mut notes = Vec::new();
        let mut errors = 0;
        for vm in &mut self.vms {
            let cores = if vm.role == VmRole::Be && self.mode == VspaceMode::Resource {
                self.sets.be.len()
            } else {
                self.sets.vcpu.len()
            };
            if cores == 0 || vm.paused {
                continue;
            }
            let target = GuestTarget {
                vcpus: cores,
                queue_pairs: (self
                    .sets
                    .nq
                    .len()
                    .clamp(1, usize::from(vm.queue_pairs.max(1))))
                    as u16,
                max_vcpus: if vm.vcpus.is_empty() {
                    qga::MAX_VCPUS
                } else {
                    vm.vcpus.len()
                },
            };
            match vm.guest.drive(&vm.name, now, target) {
                GuestOutcome::Nothing => {}
                GuestOutcome::Applied(line) => notes.push(line),
                GuestOutcome::Failed => errors += 1,
            }
        }
        self.status
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .qga_errors += errors;
        for n in notes {
            self.note(n);
        }
    }

    fn pool_tids(&self) -> Vec<u32> {
        self.nq_workers
            .as_ref()
            .map(|p| p.tids())
            .unwrap_or_default()
    }

    /// Hand each VM whose lookup is due a lookup request, if its QMP
    /// worker is free. The reply is taken by a later period.
    fn look_up_vcpus(&mut self, now: Instant) {
        for vm in &mut self.vms {
            let Some(socket) = vm.qmp.clone() else {
                continue;
            };
            let due = match vm.looked_up {
                None => true,
                Some(t) if vm.vcpus.is_empty() => now.duration_since(t) >= RETRY_LOOKUP,
                Some(t) => now.duration_since(t) >= REDISCOVER_EVERY,
            };
            if !due {
                continue;
            }
            if vm.qmp_worker.is_none() {
                let qmp = VmQmp {
                    socket,
                    pidfile: vm.qemu_pidfile.clone(),
                    proc_root: self.proc_root.clone(),
                };
                match qmp.spawn() {
                    Ok(w) => vm.qmp_worker = Some(w),
                    Err(e) => {
                        tracing::warn!(vm = vm.name, error = %e, "core manager: cannot start the VM's QMP thread; tried again next period");
                        continue;
                    }
                }
            }
            if vm
                .qmp_worker
                .as_ref()
                .is_some_and(|w| w.submit(QmpRequest::LookUp))
            {
                vm.looked_up = Some(now);
            }
        }
    }

    /// Take the replies the VMs' QMP workers have ready.
    fn take_qmp_replies(&mut self, now: Instant) {
        let mut notes = Vec::new();
        let (mut errors, mut foreign) = (0, 0);
        for vm in &mut self.vms {
            while let Some(reply) = vm.qmp_worker.as_ref().and_then(PeerWorker::take) {
                match reply {
                    QmpReply::LookedUp(Ok(found)) => {
                        if !found.refused.is_empty() {
                            foreign += found.refused.len() as u64;
                            if vm
                                .foreign_warned
                                .is_none_or(|t| now.duration_since(t) >= FOREIGN_TID_WARN_EVERY)
                            {
                                vm.foreign_warned = Some(now);
                                let tids: Vec<u32> =
                                    found.refused.iter().take(16).copied().collect();
                                tracing::warn!(
                                    vm = vm.name,
                                    qemu_pid = found.process.pid,
                                    ?tids,
                                    refused = found.refused.len(),
                                    "core manager: QMP named thread ids that are not threads of the VM's QEMU; they are never moved"
                                );
                            }
                        }
                        if vm.vcpus != found.vcpus {
                            let tids: Vec<u32> = found.vcpus.iter().map(|t| t.tid).collect();
                            tracing::info!(
                                vm = vm.name,
                                qemu_pid = found.process.pid,
                                ?tids,
                                "core manager: vCPU threads found"
                            );
                            notes.push(format!("{}: vCPU threads {tids:?}", vm.name));
                        }
                        vm.qemu_pid = Some(found.process.pid);
                        vm.vcpus = found.vcpus;
                        vm.error = None;
                    }
                    QmpReply::LookedUp(Err(e)) => {
                        if vm.error.as_deref() != Some(&e) {
                            tracing::warn!(vm = vm.name, error = %e, "core manager: cannot find the VM's vCPU threads; its vCPUs are left where they are");
                        }
                        errors += 1;
                        vm.vcpus.clear();
                        vm.qemu_pid = None;
                        vm.error = Some(e);
                    }
                    QmpReply::Ran(run, result) => {
                        if let Some(line) = settle_run(vm, run, result, now) {
                            notes.push(line);
                        } else {
                            errors += 1;
                        }
                    }
                }
            }
        }
        {
            let mut s = self
                .status
                .snapshot
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            s.qmp_errors += errors;
            s.foreign_tids_refused += foreign;
        }
        for n in notes {
            self.note(n);
        }
    }

    fn apply(&mut self, threads: &[GroupThread]) {
        if let Some((sets, applied)) = &self.applied {
            if *sets == self.sets && applied == threads {
                return;
            }
        }
        // The pool's workers pin themselves, each to its own NQ core: the
        // applier (which allows a thread the whole group) leaves them be.
        let pool = self.pool_tids();
        let placed: Vec<GroupThread> = threads
            .iter()
            .filter(|t| !pool.contains(&t.task.tid))
            .copied()
            .collect();
        let report = self.applier.apply(&self.sets, &placed);
        if !self.applier.is_advise_only() {
            set_frequencies(&self.sets, &self.freqs);
        }
        let (moved, refused) = (report.moved(), report.refused());
        {
            let mut s = self
                .status
                .snapshot
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            s.threads_moved += moved as u64;
            s.threads_refused += refused as u64;
        }
        if refused > 0 && moved == 0 && matches!(self.applier.mechanism(), Mechanism::Affinity) {
            let reason = report
                .threads
                .iter()
                .find_map(|t| match &t.outcome {
                    ThreadOutcome::Refused { reason } => Some(reason.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            tracing::warn!(%reason, "core manager: the kernel refuses to move the managed threads; advise-only from now on");
            self.applier
                .fall_back_to_advise_only(format!("thread placement refused: {reason}"));
        }
        for (group, error) in &report.group_errors {
            tracing::warn!(group = group.name(), %error, "core manager: cannot set the group's cpuset");
        }
        self.applied = Some((self.sets.clone(), threads.to_vec()));
    }

    /// vSPACE-R wants the best-effort VMs paused (no core left for them)
    /// or running; [`CoreManager::run_stop_cont`] carries it out.
    fn want_best_effort_paused(&mut self, pause: bool) {
        for vm in &mut self.vms {
            if vm.role == VmRole::Be && vm.want_paused != pause {
                vm.want_paused = pause;
                vm.run_retry = None;
            }
        }
    }

    /// `stop` or `cont` each VM whose state differs from what is wanted,
    /// on its QMP worker, in every mode: a failure is retried with backoff
    /// until it succeeds or the VM is gone.
    fn run_stop_cont(&mut self, now: Instant) {
        for vm in &mut self.vms {
            if vm.paused == vm.want_paused || vm.qmp.is_none() {
                continue;
            }
            if vm.run_retry.is_some_and(|(at, _)| now < at) {
                continue;
            }
            let run = if vm.want_paused {
                VmRun::Stop
            } else {
                VmRun::Cont
            };
            if let Some(w) = &vm.qmp_worker {
                w.submit(QmpRequest::Run(run));
            }
        }
    }

    fn note(&self, what: String) {
        self.status
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(what);
    }

    fn publish(
        &self,
        load: Option<&vadapt_host::thread_load::PeriodLoad>,
        outcome: Option<vadapt_policy::vspace::PeriodOutcome>,
    ) {
        let mut s = self
            .status
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        s.mode = self.mode;
        s.cpus = self.cfg.cpus.clone();
        s.apply = match self.applier.mechanism() {
            Mechanism::Affinity => Placement::Affinity,
            Mechanism::Cpuset(_) => Placement::Cpuset,
            Mechanism::AdviseOnly { .. } => Placement::AdviseOnly,
        };
        s.advise_reason = match self.applier.availability() {
            vadapt_host::Availability::Unavailable { reason } => Some(reason),
            _ => None,
        };
        s.sets = self.sets.clone();
        s.periods += 1;
        if let Some(m) = &self.manager {
            let th = m.thresholds();
            s.threshold_vcpu = th.vcpu;
            s.threshold_nq = th.nq;
            s.exploring = m.explorer().is_exploring();
        }
        if let Some(l) = load {
            s.util_vcpu = l.vcpu.util;
            s.util_nq = l.nq.util;
            s.util_be = l.be.util;
        }
        s.run_delay_vcpu_s = self.run_delay[0].as_secs_f64();
        s.run_delay_nq_s = self.run_delay[1].as_secs_f64();
        if let Some(o) = outcome {
            if o.changed {
                s.reallocations += 1;
                let a = o.allocation;
                let what = format!(
                    "period {}: vcpu {} nq {} idle {} be {} (util vcpu {:.2} nq {:.2})",
                    s.periods,
                    a.vcpu_cores,
                    a.nq_cores,
                    a.idle_cores,
                    a.be_cores,
                    s.util_vcpu,
                    s.util_nq
                );
                s.note(what);
            }
            if let Some(SampleOutcome::Explored(round)) = o.sample {
                s.explorations += 1;
                let what = format!("period {}: thresholds explored: {round:?}", s.periods);
                s.note(what);
            }
        }
        s.vms = self
            .vms
            .iter()
            .map(|vm| VmCores {
                name: vm.name.clone(),
                role: vm.role,
                qmp: vm.qmp.as_ref().map(|p| p.display().to_string()),
                vcpu_tids: vm.vcpus.iter().map(|t| t.tid).collect(),
                qemu_pid: vm.qemu_pid,
                error: vm.error.clone(),
                paused: vm.paused,
                guest_vcpus: vm.guest.applied().0,
                guest_queue_pairs: vm.guest.applied().1,
                guest_error: vm.guest.error.clone(),
            })
            .collect();
        s.worker_tids = self
            .ports
            .iter()
            .map(|p| p.worker_stats.tid.load(Ordering::Acquire))
            .filter(|&t| t > 0)
            .map(|t| t as u32)
            .collect();
        if let Some(pool) = &self.nq_workers {
            s.worker_tids = pool.tids();
            s.nq_workers = pool.status();
            s.queue_set_moves = pool.moves();
        }
    }
}

/// Record what a `stop` or `cont` did: a line for `vadapt cores` when the
/// VM is now as wanted, `None` when it failed (retried after a backoff
/// that doubles up to [`RUN_RETRY_MAX`]; each distinct error logged once).
fn settle_run(
    vm: &mut ManagedVm,
    run: VmRun,
    result: Result<(), RunFailure>,
    now: Instant,
) -> Option<String> {
    let e = match (run, result) {
        (_, Ok(())) => {
            vm.paused = run == VmRun::Stop;
            vm.run_retry = None;
            vm.run_error = None;
            let what = if vm.paused {
                "paused (no core left for it)"
            } else {
                "resumed"
            };
            tracing::info!(vm = vm.name, "core manager: best-effort VM {what}");
            return Some(format!(
                "{}: {}",
                vm.name,
                if vm.paused { "paused" } else { "resumed" }
            ));
        }
        // Nothing to resume: a VM that comes back at that socket is a new one.
        (VmRun::Cont, Err(RunFailure::Gone(_))) => {
            vm.paused = false;
            vm.run_retry = None;
            vm.run_error = None;
            return Some(format!("{}: gone while paused", vm.name));
        }
        (_, Err(RunFailure::Gone(e) | RunFailure::Failed(e))) => e,
    };
    let wait = vm
        .run_retry
        .map_or(RUN_RETRY_FIRST, |(_, w)| (w * 2).min(RUN_RETRY_MAX));
    vm.run_retry = Some((now + wait, wait));
    if vm.run_error.as_deref() != Some(&e) {
        tracing::warn!(
            vm = vm.name,
            error = %e,
            "core manager: QMP `{}` failed; tried again with backoff (up to every {} s) until it works or the VM is gone",
            run.command(),
            RUN_RETRY_MAX.as_secs()
        );
        vm.run_error = Some(e);
    }
    None
}

/// The lowest frequency on idle CPUs, the highest on the others (each
/// `CpuFreq` writes only when its value changes). Failures are logged.
fn set_frequencies(sets: &CoreSets, freqs: &[CpuFreq]) {
    for f in freqs {
        let Some(cpu) = f.cpu() else { continue };
        let hint = if sets.idle.contains(&cpu) {
            FreqHint::Min
        } else {
            FreqHint::Max
        };
        if let Err(e) = f.apply(hint) {
            tracing::warn!(cpu, error = %error_chain(&e), "core manager: cannot set the CPU's frequency");
        }
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

#[cfg(test)]
mod peer_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_vm_spec;
    use crate::cores::CoresSnapshot;
    use crate::switch::Switch;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use std::sync::mpsc;
    use vadapt_host::affinity::cpus_allowed_list;

    /// A QMP server on `path` answering `query-cpus-fast` with `tids`,
    /// until `stop` (checked between connections).
    fn fake_qmp(path: &Path, tids: Vec<u32>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
        scripted_qmp(path, tids, Vec::new(), stop).1
    }

    /// As [`fake_qmp`], refusing the first `n` of each `(command, n)` with
    /// a `GenericError`; every command received is recorded.
    pub(super) fn scripted_qmp(
        path: &Path,
        tids: Vec<u32>,
        refusals: Vec<(&'static str, usize)>,
        stop: Arc<AtomicBool>,
    ) -> (Arc<std::sync::Mutex<Vec<String>>>, JoinHandle<()>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let mut refusals = refusals;
        let l = UnixListener::bind(path).unwrap();
        l.set_nonblocking(true).unwrap();
        let server = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok((s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                let mut w = s.try_clone().unwrap();
                let _ = writeln!(w, r#"{{"QMP": {{"version": {{}}, "capabilities": []}}}}"#);
                for line in BufReader::new(s).lines() {
                    let Ok(line) = line else { break };
                    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                    let command = v["execute"].as_str().unwrap_or("").to_string();
                    log.lock().unwrap().push(command.clone());
                    let refuse = refusals
                        .iter_mut()
                        .find(|(c, n)| *c == command && *n > 0)
                        .map(|(_, n)| *n -= 1)
                        .is_some();
                    let answer = if refuse {
                        format!(
                            r#"{{"error": {{"class": "GenericError", "desc": "no {command} today"}}}}"#
                        )
                    } else if line.contains("query-cpus-fast") {
                        let cpus: Vec<String> = tids
                            .iter()
                            .enumerate()
                            .map(|(i, t)| format!(r#"{{"cpu-index": {i}, "thread-id": {t}}}"#))
                            .collect();
                        format!(r#"{{"return": [{}]}}"#, cpus.join(","))
                    } else {
                        r#"{"return": {}}"#.to_string()
                    };
                    if writeln!(w, "{answer}").is_err() {
                        break;
                    }
                }
            }
        });
        (seen, server)
    }

    /// `n` threads of this process parked until the sender drops.
    pub(super) fn parked(n: usize) -> (Vec<u32>, mpsc::Sender<()>, Vec<JoinHandle<()>>) {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let stop_rx = Arc::new(std::sync::Mutex::new(stop_rx));
        let (tid_tx, tid_rx) = mpsc::channel();
        let hs = (0..n)
            .map(|_| {
                let (rx, tx) = (Arc::clone(&stop_rx), tid_tx.clone());
                std::thread::spawn(move || {
                    tx.send(vadapt_host::cputime::current_tid()).unwrap();
                    let _ = rx.lock().unwrap().recv();
                })
            })
            .collect();
        (
            (0..n).map(|_| tid_rx.recv().unwrap()).collect(),
            stop_tx,
            hs,
        )
    }

    pub(super) fn port(spec: &str) -> Arc<VmPort> {
        let cfg = parse_vm_spec(spec).unwrap();
        let sw = Arc::new(Switch::new(Duration::from_secs(300)));
        VmPort::new(
            cfg,
            crate::config::default_policy(),
            sw,
            64,
            None,
            Arc::new(CpuFreq::unavailable("test")),
            None,
        )
        .unwrap()
    }

    /// A manager of one VM port whose QMP socket is `qmp` (no cpufreq).
    /// The fake QMP server is this test process, which a pidfile next to
    /// the socket names as the VM's QEMU.
    pub(super) fn manager(qmp: &Path, cfg: CoresConfig) -> (CoreManager, Arc<CoresStatus>) {
        let pidfile = qmp.with_extension("pid");
        std::fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
        let p = port(&format!(
            "name=vm1,socket=/nonexistent.sock,qmp={},qemu_pidfile={}",
            qmp.display(),
            pidfile.display()
        ));
        let status = Arc::new(CoresStatus::default());
        let m = CoreManager::new(
            cfg,
            vec![p],
            Arc::clone(&status),
            Path::new("/proc"),
            Path::new("/nonexistent"),
        );
        (m, status)
    }

    fn allowed(tid: u32) -> Vec<usize> {
        let task = TaskId {
            pid: std::process::id(),
            tid,
            start: 0,
        };
        cpus_allowed_list(Path::new("/proc"), task).unwrap()
    }

    /// Step `m` a period at a time (simulated time from `t0`, 100 ms
    /// apart; a real millisecond between them, for the peers' threads)
    /// until `done` holds for its status; the status, and the time reached.
    /// Panics after 2,000 periods: a bound on the test, not a timing.
    pub(super) fn step_until(
        m: &mut CoreManager,
        status: &CoresStatus,
        t0: Instant,
        mut done: impl FnMut(&CoresSnapshot) -> bool,
    ) -> (CoresSnapshot, Instant) {
        let mut now = t0;
        for _ in 0..2000 {
            m.step(now);
            let s = status.snapshot();
            if done(&s) {
                return (s, now);
            }
            now += Duration::from_millis(100);
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("never reached: {:?}", status.snapshot());
    }

    /// A VM of two parked vCPU threads behind a fake QMP socket, and the
    /// first two CPUs of this process to manage; `None` (test skipped) with
    /// fewer than two.
    struct TwoVcpuVm {
        cpus: Vec<usize>,
        qmp: PathBuf,
        tids: Vec<u32>,
        release: mpsc::Sender<()>,
        threads: Vec<JoinHandle<()>>,
        qstop: Arc<AtomicBool>,
        server: JoinHandle<()>,
        _dir: tempfile::TempDir,
    }

    impl TwoVcpuVm {
        fn start() -> Option<TwoVcpuVm> {
            let own = vadapt_host::cputime::current_affinity().unwrap();
            if own.len() < 2 {
                eprintln!("skipped: needs 2 CPUs in this process's affinity, has {own:?}");
                return None;
            }
            let dir = tempfile::tempdir().unwrap();
            let qmp = dir.path().join("qmp.sock");
            let (tids, release, threads) = parked(2);
            let qstop = Arc::new(AtomicBool::new(false));
            let server = fake_qmp(&qmp, tids.clone(), Arc::clone(&qstop));
            Some(TwoVcpuVm {
                cpus: own[..2].to_vec(),
                qmp,
                tids,
                release,
                threads,
                qstop,
                server,
                _dir: dir,
            })
        }

        /// The VM goes away: QMP closes, its socket goes, its threads exit.
        fn stop(self) {
            self.qstop.store(true, Ordering::Relaxed);
            self.server.join().unwrap();
            std::fs::remove_file(&self.qmp).unwrap();
            drop(self.release);
            for h in self.threads {
                h.join().unwrap();
            }
        }
    }

    #[test]
    fn vcpu_threads_found_through_qmp_follow_the_allocation() {
        let Some(vm) = TwoVcpuVm::start() else { return };
        let (cpus, tids) = (vm.cpus.clone(), vm.tids.clone());
        let (mut m, status) = manager(
            &vm.qmp,
            CoresConfig {
                mode: VspaceMode::Performance,
                cpus: cpus.clone(),
                ..CoresConfig::default()
            },
        );
        let mut sorted = tids.clone();
        sorted.sort();
        let (_, t) = step_until(&mut m, &status, Instant::now(), |s| {
            s.vms[0].vcpu_tids == sorted
        });
        // One more period places them.
        m.step(t + Duration::from_millis(100));
        let s = status.snapshot();
        assert_eq!(s.vms[0].qemu_pid, Some(std::process::id()), "{s:?}");
        assert_eq!(s.apply, Placement::Affinity, "{s:?}");
        // vSPACE-P: every CPU in use, one per group here.
        assert_eq!(s.sets.vcpu.len() + s.sets.nq.len(), 2, "{s:?}");
        for &tid in &tids {
            assert_eq!(
                allowed(tid),
                s.sets.vcpu,
                "vCPU thread {tid} placed on the vCPU group"
            );
        }
        assert!(s.threads_moved >= 2, "{s:?}");

        // Off: the threads may run on every managed CPU again.
        status.request_mode(VspaceMode::Off);
        let t0 = t + Duration::from_millis(200);
        m.step(t0);
        for &tid in &tids {
            assert_eq!(allowed(tid), cpus);
        }
        assert_eq!(status.snapshot().mode, VspaceMode::Off);

        // The VM goes away (QMP closes, its threads exit): counted, no panic,
        // and the lookup is retried.
        vm.stop();
        status.request_mode(VspaceMode::Energy);
        // Rediscovery is due after REDISCOVER_EVERY, or at once if a thread
        // is seen gone.
        let (s, _) = step_until(&mut m, &status, t0 + Duration::from_millis(100), |s| {
            s.qmp_errors >= 1
        });
        assert!(
            s.vms[0].error.as_deref().unwrap_or("").contains("QMP"),
            "{s:?}"
        );
        assert!(s.vms[0].vcpu_tids.is_empty(), "{s:?}");
        assert_eq!(s.mode, VspaceMode::Energy);
    }

    #[test]
    fn a_panic_in_a_period_stops_the_manager_and_frees_the_threads() {
        let Some(vm) = TwoVcpuVm::start() else { return };
        let (cpus, tids) = (vm.cpus.clone(), vm.tids.clone());
        let original: Vec<Vec<usize>> = tids.iter().map(|&t| allowed(t)).collect();
        let (m, status) = manager(
            &vm.qmp,
            CoresConfig {
                mode: VspaceMode::Performance,
                cpus: cpus.clone(),
                period_ms: 1,
                ..CoresConfig::default()
            },
        );
        let stop = AtomicBool::new(false);
        let mut placed_at = None;
        // Good periods until the vCPU threads are placed, then a fault;
        // `run` must return by itself.
        run(m, &stop, |m, now| {
            let s = status.snapshot();
            if let Some(periods) = placed_at {
                if s.periods > periods {
                    panic!("injected fault");
                }
            } else if s.vms.first().is_some_and(|vm| vm.vcpu_tids.len() == 2)
                && s.sets.vcpu.len() < cpus.len()
                && tids.iter().all(|&t| allowed(t) == s.sets.vcpu)
            {
                placed_at = Some(s.periods);
            }
            assert!(s.periods < 10_000, "never placed: {s:?}");
            m.step(now);
        });
        let placed_at = placed_at.expect("the vCPU threads were placed before the fault");
        let s = status.snapshot();
        assert_eq!(s.periods, placed_at + 1, "{s:?}");
        let why = s.failed.as_deref().unwrap_or_default();
        assert!(
            why.contains(&format!("after {} periods", placed_at + 1))
                && why.contains("injected fault"),
            "{why}"
        );
        assert!(s.to_table().starts_with("STOPPED: "), "{}", s.to_table());
        assert_eq!(s.mode, VspaceMode::Off);
        for (&tid, was) in tids.iter().zip(&original) {
            assert_eq!(&allowed(tid), was, "thread {tid} back to what it had");
        }
        assert!(s.threads_restored >= 2, "{s:?}");
        vm.stop();
    }

    /// A guest agent on `path` for a guest with `n` vCPUs (CPU 0 cannot go
    /// offline) whose `ethtool` always succeeds; every request is recorded.
    fn fake_qga(path: &Path, n: usize) -> Arc<std::sync::Mutex<Vec<serde_json::Value>>> {
        use serde_json::{json, Value};
        let l = UnixListener::bind(path).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut online = vec![true; n];
            for s in l.incoming() {
                let Ok(s) = s else { return };
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                let mut line = Vec::new();
                while r.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                    let start = line.iter().rposition(|&b| b == 0xFF).map_or(0, |i| i + 1);
                    let req: Value = serde_json::from_slice(&line[start..]).unwrap();
                    line.clear();
                    let args = &req["arguments"];
                    let mut out = Vec::new();
                    let ret = match req["execute"].as_str().unwrap() {
                        "guest-sync-delimited" => {
                            out.push(0xFF);
                            args["id"].clone()
                        }
                        "guest-get-vcpus" => json!(online
                            .iter()
                            .enumerate()
                            .map(|(i, &o)| json!({"logical-id": i, "online": o, "can-offline": i > 0}))
                            .collect::<Vec<_>>()),
                        "guest-set-vcpus" => {
                            let list = args["vcpus"].as_array().unwrap();
                            for e in list {
                                online[e["logical-id"].as_u64().unwrap() as usize] =
                                    e["online"].as_bool().unwrap();
                            }
                            json!(list.len())
                        }
                        "guest-exec" => json!({"pid": 1}),
                        _ => json!({"exited": true, "exitcode": 0}),
                    };
                    log.lock().unwrap().push(req);
                    out.extend_from_slice(format!("{}\n", json!({ "return": ret })).as_bytes());
                    if w.write_all(&out).is_err() {
                        break;
                    }
                }
            }
        });
        seen
    }

    #[test]
    fn the_guest_agent_brings_vcpus_and_queue_pairs_to_the_groups_sizes() {
        let t = tempfile::tempdir().unwrap();
        let qga = t.path().join("vm1.qga");
        let seen = fake_qga(&qga, 2);
        let with_agent = port(&format!(
            "name=vm1,socket=/nonexistent.sock,queues=2,qga={}",
            qga.display()
        ));
        let without = port("name=vm2,socket=/nonexistent2.sock");
        let status = Arc::new(CoresStatus::default());
        let mut m = CoreManager::new(
            CoresConfig {
                mode: VspaceMode::Performance,
                cpus: vec![0, 1],
                apply: ApplyMethod::Advise,
                ..CoresConfig::default()
            },
            vec![with_agent, without],
            Arc::clone(&status),
            Path::new("/proc"),
            Path::new("/nonexistent"),
        );
        let line = m.describe();
        assert!(line.contains("through the guest agent for vm1"), "{line}");
        assert!(line.contains("host side only (no qga) for vm2"), "{line}");
        let t0 = Instant::now();
        let (s, t) = step_until(&mut m, &status, t0, |s| {
            s.vms[0].guest_queue_pairs.is_some()
        });
        // vSPACE-P on 2 CPUs: one vCPU core, one NQ core.
        assert_eq!((s.sets.vcpu.len(), s.sets.nq.len()), (1, 1), "{s:?}");
        assert_eq!(s.vms[0].guest_vcpus, Some(1), "{s:?}");
        assert_eq!(s.vms[0].guest_queue_pairs, Some(1), "{s:?}");
        assert_eq!(s.vms[0].guest_error, None);
        assert_eq!(s.vms[1].guest_vcpus, None, "no agent: host side only");
        let requests = seen.lock().unwrap().clone();
        let set: Vec<_> = requests
            .iter()
            .filter(|r| r["execute"] == "guest-set-vcpus")
            .collect();
        assert_eq!(
            set[0]["arguments"]["vcpus"],
            serde_json::json!([{"logical-id": 1, "online": false}])
        );
        let exec: Vec<_> = requests
            .iter()
            .filter(|r| r["execute"] == "guest-exec")
            .collect();
        assert_eq!(
            exec[0]["arguments"]["arg"],
            serde_json::json!(["-L", "eth0", "combined", "1"])
        );
        // Nothing changed: the agent is not asked again.
        let n = requests.len();
        for i in 1..5 {
            m.step(t + Duration::from_millis(100 * i));
        }
        assert_eq!(seen.lock().unwrap().len(), n);
        assert_eq!(status.snapshot().qga_errors, 0);
    }

    #[test]
    fn a_qmp_socket_that_answers_garbage_is_counted_not_fatal() {
        let t = tempfile::tempdir().unwrap();
        let qmp = t.path().join("qmp.sock");
        let l = UnixListener::bind(&qmp).unwrap();
        let h = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut s, _) = l.accept().unwrap();
                let _ = s.write_all(b"\x00\xffnot json at all\n");
            }
        });
        let (mut m, status) = manager(
            &qmp,
            CoresConfig {
                mode: VspaceMode::Off,
                cpus: vec![0, 1],
                apply: ApplyMethod::Advise,
                ..CoresConfig::default()
            },
        );
        let (s, _) = step_until(&mut m, &status, Instant::now(), |s| s.qmp_errors == 2);
        h.join().unwrap();
        assert!(
            s.vms[0]
                .error
                .as_deref()
                .unwrap()
                .contains("not a JSON object"),
            "{s:?}"
        );
        assert_eq!(s.apply, Placement::AdviseOnly);
        assert!(s.advise_reason.unwrap().contains("advise"));
    }

    #[test]
    fn idle_cpus_get_the_lowest_frequency_and_the_others_the_highest() {
        let t = tempfile::tempdir().unwrap();
        for cpu in 0..3 {
            let d = t
                .path()
                .join(format!("devices/system/cpu/cpu{cpu}/cpufreq"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [
                ("scaling_available_governors", "ondemand userspace"),
                ("scaling_governor", "ondemand"),
                ("scaling_min_freq", "800000"),
                ("scaling_max_freq", "3000000"),
                ("scaling_setspeed", "<unsupported>"),
            ] {
                std::fs::write(d.join(f), v).unwrap();
            }
        }
        let read = |cpu: usize, f: &str| {
            std::fs::read_to_string(
                t.path()
                    .join(format!("devices/system/cpu/cpu{cpu}/cpufreq/{f}")),
            )
            .unwrap()
        };
        let freqs: Vec<CpuFreq> = (0..3).map(|c| CpuFreq::probe(t.path(), c)).collect();
        assert_eq!(read(0, "scaling_governor"), "userspace");
        let sets = CoreSets {
            vcpu: vec![0],
            nq: vec![1],
            be: vec![],
            idle: vec![2],
        };
        set_frequencies(&sets, &freqs);
        assert_eq!(read(0, "scaling_setspeed"), "3000000");
        assert_eq!(read(1, "scaling_setspeed"), "3000000");
        assert_eq!(read(2, "scaling_setspeed"), "800000");
        // CPU 2 gets work again.
        let sets = CoreSets {
            vcpu: vec![0, 2],
            idle: vec![],
            ..sets
        };
        set_frequencies(&sets, &freqs);
        assert_eq!(read(2, "scaling_setspeed"), "3000000");
        drop(freqs);
        assert_eq!(
            read(2, "scaling_governor"),
            "ondemand",
            "the governor is put back"
        );
    }
}
