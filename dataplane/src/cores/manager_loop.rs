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

use super::config::{ApplyMethod, CoresConfig, VmRole};
use super::guest_side::{GuestOutcome, GuestSide, GuestTarget};
use super::status::{CoresStatus, VmCores};
use crate::nq_workers::NqWorkers;
use crate::panic_message::panic_message;
use crate::vmport::VmPort;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vadapt_coremgr::applier::ThreadOutcome;
use vadapt_coremgr::cpufreq::CpuFreq;
use vadapt_coremgr::error_chain::error_chain;
use vadapt_coremgr::qmp::{self, QmpClient};
use vadapt_coremgr::thread_load::{LoadSnapshot, ThreadPeriod};
use vadapt_coremgr::{Applier, GroupThread, TaskId, ThreadGroup};
use vadapt_policy::vspace::{
    CoreSets, PeriodMeasurement, SampleOutcome, VspaceManager, VspaceMode,
};
use vadapt_policy::FreqHint;

/// How often a VM's vCPU threads are looked up again even when nothing
/// suggests they changed (vCPU hot-plug).
const REDISCOVER_EVERY: Duration = Duration::from_secs(10);
/// How soon a VM whose lookup failed is tried again.
const RETRY_LOOKUP: Duration = Duration::from_secs(1);

/// One VM under management.
#[derive(Debug)]
struct ManagedVm {
    name: String,
    role: VmRole,
    qmp: Option<PathBuf>,
    vcpus: Vec<TaskId>,
    looked_up: Option<Instant>,
    error: Option<String>,
    paused: bool,
    /// vSPACE-Guest through its agent, if configured.
    guest: GuestSide,
    /// The port's queue pairs (the most the guest can activate).
    queue_pairs: u16,
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
                Applier::affinity(vadapt_coremgr::cputime::current_tid())
            }
            ApplyMethod::Cpuset => {
                let mountinfo =
                    std::fs::read_to_string(proc_root.join("self/mountinfo")).unwrap_or_default();
                let parent = cfg.cgroup.clone().unwrap_or_default();
                Applier::cpuset(&parent, &mountinfo)
            }
        };
        let vms = ports
            .iter()
            .map(|p| ManagedVm {
                name: p.name().to_string(),
                role: p.cfg.role,
                qmp: p.cfg.qmp.clone(),
                vcpus: Vec::new(),
                looked_up: None,
                error: p
                    .cfg
                    .qmp
                    .is_none()
                    .then(|| "no qmp socket configured".to_string()),
                paused: false,
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
            self.resume_best_effort();
        }
    }

    /// Stop managing: best-effort VMs resumed, every managed thread free to
    /// run on every managed CPU, and `vadapt cores` saying so.
    fn release(&mut self) {
        self.set_mode(VspaceMode::Off);
        let threads = self.threads();
        self.apply(&threads);
        let mut s = self
            .status
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        s.mode = self.mode.to_string();
        s.sets = self.sets.clone();
    }

    /// The log line said once at start-up.
    pub fn describe(&self) -> String {
        let how = match self.applier.availability() {
            vadapt_coremgr::Availability::Available => {
                format!("placing threads by {}", self.applier.name())
            }
            vadapt_coremgr::Availability::Unavailable { reason } => {
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
                if o.allocation.pause_be() {
                    self.pause_best_effort();
                } else {
                    self.resume_best_effort();
                }
            }
        }
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
        let pid = std::process::id();
        for p in &self.ports {
            let tid = p.worker_stats.tid.load(Ordering::Acquire);
            if tid > 0 {
                v.push(GroupThread {
                    group: ThreadGroup::Nq,
                    task: TaskId {
                        pid,
                        tid: tid as u32,
                    },
                });
            }
        }
        for tid in self.pool_tids() {
            v.push(GroupThread {
                group: ThreadGroup::Nq,
                task: TaskId { pid, tid },
            });
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

    fn look_up_vcpus(&mut self, now: Instant) {
        let mut notes = Vec::new();
        for vm in &mut self.vms {
            let Some(path) = vm.qmp.clone() else { continue };
            let due = match vm.looked_up {
                None => true,
                Some(t) if vm.vcpus.is_empty() => now.duration_since(t) >= RETRY_LOOKUP,
                Some(t) => now.duration_since(t) >= REDISCOVER_EVERY,
            };
            if !due {
                continue;
            }
            vm.looked_up = Some(now);
            let found = qmp::vcpu_threads(&path)
                .map_err(|e| format!("QMP {}: {}", path.display(), error_chain(&e)))
                .and_then(|threads| {
                    threads
                        .iter()
                        .map(|t| TaskId::of_thread(&self.proc_root, t.thread_id))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| {
                            format!("vCPU thread of {}: {}", path.display(), error_chain(&e))
                        })
                });
            match found {
                Ok(mut tasks) => {
                    tasks.sort();
                    tasks.dedup();
                    if vm.vcpus != tasks {
                        let tids: Vec<u32> = tasks.iter().map(|t| t.tid).collect();
                        tracing::info!(vm = vm.name, ?tids, "core manager: vCPU threads found");
                        notes.push(format!("{}: vCPU threads {tids:?}", vm.name));
                    }
                    vm.vcpus = tasks;
                    vm.error = None;
                }
                Err(e) => {
                    if vm.error.as_deref() != Some(&e) {
                        tracing::warn!(vm = vm.name, error = %e, "core manager: cannot find the VM's vCPU threads; its vCPUs are left where they are");
                    }
                    self.status
                        .snapshot
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .qmp_errors += 1;
                    vm.vcpus.clear();
                    vm.error = Some(e);
                }
            }
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
        if !matches!(self.applier, Applier::AdviseOnly { .. }) {
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
        if refused > 0 && moved == 0 && matches!(self.applier, Applier::Affinity) {
            let reason = report
                .threads
                .iter()
                .find_map(|t| match &t.outcome {
                    ThreadOutcome::Refused { reason } => Some(reason.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            tracing::warn!(%reason, "core manager: the kernel refuses to move the managed threads; advise-only from now on");
            self.applier = Applier::advise_only(format!("thread placement refused: {reason}"));
        }
        for (group, error) in &report.group_errors {
            tracing::warn!(group = group.name(), %error, "core manager: cannot set the group's cpuset");
        }
        self.applied = Some((self.sets.clone(), threads.to_vec()));
    }

    fn pause_best_effort(&mut self) {
        self.qmp_all_be(true);
    }

    fn resume_best_effort(&mut self) {
        self.qmp_all_be(false);
    }

    /// `stop` (pause) or `cont` every best-effort VM whose state differs.
    fn qmp_all_be(&mut self, pause: bool) {
        let mut notes = Vec::new();
        let mut errors = 0;
        for vm in &mut self.vms {
            if vm.role != VmRole::Be || vm.paused == pause {
                continue;
            }
            let Some(path) = &vm.qmp else { continue };
            let cmd = if pause { "stop" } else { "cont" };
            match QmpClient::connect(path).and_then(|mut c| c.execute(cmd)) {
                Ok(_) => {
                    vm.paused = pause;
                    tracing::info!(
                        vm = vm.name,
                        "core manager: best-effort VM {}",
                        if pause {
                            "paused (no core left for it)"
                        } else {
                            "resumed"
                        }
                    );
                    notes.push(format!(
                        "{}: {}",
                        vm.name,
                        if pause { "paused" } else { "resumed" }
                    ));
                }
                Err(e) => {
                    errors += 1;
                    tracing::warn!(vm = vm.name, error = %error_chain(&e), "core manager: QMP `{cmd}` failed");
                }
            }
        }
        self.status
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .qmp_errors += errors;
        for n in notes {
            self.note(n);
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
        load: Option<&vadapt_coremgr::thread_load::PeriodLoad>,
        outcome: Option<vadapt_policy::vspace::PeriodOutcome>,
    ) {
        let mut s = self
            .status
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        s.mode = self.mode.to_string();
        s.cpus = self.cfg.cpus.clone();
        s.apply = self.applier.name().to_string();
        s.advise_reason = match self.applier.availability() {
            vadapt_coremgr::Availability::Unavailable { reason } => Some(reason),
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
                role: vm.role.as_str().to_string(),
                qmp: vm.qmp.as_ref().map(|p| p.display().to_string()),
                vcpu_tids: vm.vcpus.iter().map(|t| t.tid).collect(),
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
mod tests {
    use super::*;
    use crate::config::parse_vm_spec;
    use crate::switch::Switch;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use std::sync::mpsc;
    use vadapt_coremgr::affinity::cpus_allowed_list;

    /// A QMP server on `path` answering `query-cpus-fast` with `tids`,
    /// until `stop` (checked between connections).
    fn fake_qmp(path: &Path, tids: Vec<u32>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
        let l = UnixListener::bind(path).unwrap();
        l.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
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
                    let answer = if line.contains("query-cpus-fast") {
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
        })
    }

    /// `n` threads of this process parked until the sender drops.
    fn parked(n: usize) -> (Vec<u32>, mpsc::Sender<()>, Vec<JoinHandle<()>>) {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let stop_rx = Arc::new(std::sync::Mutex::new(stop_rx));
        let (tid_tx, tid_rx) = mpsc::channel();
        let hs = (0..n)
            .map(|_| {
                let (rx, tx) = (Arc::clone(&stop_rx), tid_tx.clone());
                std::thread::spawn(move || {
                    tx.send(vadapt_coremgr::cputime::current_tid()).unwrap();
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

    fn port(spec: &str) -> Arc<VmPort> {
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
    fn manager(qmp: &Path, cfg: CoresConfig) -> (CoreManager, Arc<CoresStatus>) {
        let p = port(&format!(
            "name=vm1,socket=/nonexistent.sock,qmp={}",
            qmp.display()
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
        };
        cpus_allowed_list(Path::new("/proc"), task).unwrap()
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
            let own = vadapt_coremgr::cputime::current_affinity().unwrap();
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
        let t0 = Instant::now();
        for i in 0..3 {
            m.step(t0 + Duration::from_millis(100 * i));
        }
        let s = status.snapshot();
        assert_eq!(
            s.vms[0].vcpu_tids,
            {
                let mut v = tids.clone();
                v.sort();
                v
            },
            "{s:?}"
        );
        assert_eq!(s.apply, "affinity", "{s:?}");
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
        m.step(t0 + Duration::from_millis(400));
        for &tid in &tids {
            assert_eq!(allowed(tid), cpus);
        }
        assert_eq!(status.snapshot().mode, "off");

        // The VM goes away (QMP closes, its threads exit): counted, no panic,
        // and the lookup is retried.
        vm.stop();
        status.request_mode(VspaceMode::Energy);
        for i in 5..20 {
            m.step(t0 + Duration::from_millis(100 * i));
        }
        let s = status.snapshot();
        assert!(s.qmp_errors >= 1, "{s:?}");
        assert!(
            s.vms[0].error.as_deref().unwrap_or("").contains("QMP"),
            "{s:?}"
        );
        assert!(s.vms[0].vcpu_tids.is_empty(), "{s:?}");
        assert_eq!(s.mode, "e");
    }

    #[test]
    fn a_panic_in_a_period_stops_the_manager_and_frees_the_threads() {
        let Some(vm) = TwoVcpuVm::start() else { return };
        let (cpus, tids) = (vm.cpus.clone(), vm.tids.clone());
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
        let mut calls = 0;
        let mut placed_before = false;
        // Three good periods, then a fault; `run` must return by itself.
        run(m, &stop, |m, now| {
            calls += 1;
            if calls == 4 {
                let vcpu = status.snapshot().sets.vcpu;
                placed_before = vcpu.len() < cpus.len() && tids.iter().all(|&t| allowed(t) == vcpu);
                panic!("injected fault");
            }
            m.step(now);
        });
        assert!(
            placed_before,
            "the vCPU threads were placed before the fault"
        );
        let s = status.snapshot();
        assert_eq!(s.periods, 3, "{s:?}");
        let why = s.failed.as_deref().unwrap_or_default();
        assert!(
            why.contains("after 3 periods") && why.contains("injected fault"),
            "{why}"
        );
        assert!(s.to_table().starts_with("STOPPED: "), "{}", s.to_table());
        assert_eq!(s.mode, "off");
        for &tid in &tids {
            assert_eq!(allowed(tid), cpus, "thread {tid} free on every managed CPU");
        }
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
        m.step(t0);
        let s = status.snapshot();
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
            m.step(t0 + Duration::from_millis(100 * i));
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
        let t0 = Instant::now();
        m.step(t0);
        m.step(t0 + RETRY_LOOKUP);
        h.join().unwrap();
        let s = status.snapshot();
        assert_eq!(s.qmp_errors, 2, "{s:?}");
        assert_eq!(s.apply, "advise-only");
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
