//! What the core manager reports: `vadapt cores`, the `vadapt_cores_*`
//! metrics, and the requests it takes at run time (a mode change, P95
//! samples for the threshold explorer).

use crate::config::cores::VmRole;
use crate::worker::pool::status::NqWorkerStatus;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Mutex;
use vadapt_policy::vspace::{CoreSets, VspaceMode};

/// How the manager places threads now: the host mechanism in use, which is
/// advise-only where the configured one cannot work (see `advise_reason`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// `sched_setaffinity` on each thread.
    Affinity,
    /// A cgroup cpuset per group.
    Cpuset,
    /// Nothing is moved.
    #[default]
    AdviseOnly,
}

impl Placement {
    /// The name `vadapt cores` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Affinity => "affinity",
            Placement::Cpuset => "cpuset",
            Placement::AdviseOnly => "advise-only",
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decisions kept for `vadapt cores`.
pub const RECENT_DECISIONS: usize = 16;

/// A VM as the core manager sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmCores {
    /// Port name.
    pub name: String,
    /// Latency-critical (`lc`) or best-effort (`be`).
    pub role: VmRole,
    /// Its QMP socket, if configured.
    pub qmp: Option<String>,
    /// Host thread ids of its vCPUs (from `query-cpus-fast`, each checked to
    /// be a thread of `qemu_pid`).
    pub vcpu_tids: Vec<u32>,
    /// The pid of the VM's QEMU (the QMP socket's peer, checked against its
    /// command line or `qemu_pidfile`), once found.
    #[serde(default)]
    pub qemu_pid: Option<u32>,
    /// Why its vCPUs are not known, if they are not.
    pub error: Option<String>,
    /// Paused by vSPACE-R (no core for best-effort VMs).
    pub paused: bool,
    /// vCPUs online last set through the guest agent (vSPACE-Guest).
    #[serde(default)]
    pub guest_vcpus: Option<usize>,
    /// Queue pairs last set through the guest agent (vSPACE-Guest).
    #[serde(default)]
    pub guest_queue_pairs: Option<u16>,
    /// Why the guest agent did not apply the last change, if it did not.
    #[serde(default)]
    pub guest_error: Option<String>,
}

/// The core manager's state, as `vadapt cores` prints it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoresSnapshot {
    /// `off`, `p`, `e` or `r`.
    pub mode: VspaceMode,
    /// The managed CPUs.
    pub cpus: Vec<usize>,
    /// How threads are placed: `affinity`, `cpuset` or `advise-only`.
    pub apply: Placement,
    /// Why threads are not moved, in advise-only mode.
    pub advise_reason: Option<String>,
    /// Each group's CPUs.
    pub sets: CoreSets,
    /// `Th_vCPU` and `Th_NQ`.
    pub threshold_vcpu: f64,
    /// See `threshold_vcpu`.
    pub threshold_nq: f64,
    /// Whether the threshold explorer still runs.
    pub exploring: bool,
    /// Last period's CPU time of the vCPU group, in cores.
    pub util_vcpu: f64,
    /// Last period's CPU time of the NQ group (queue workers), in cores.
    pub util_nq: f64,
    /// Last period's CPU time of best-effort VMs, in cores.
    pub util_be: f64,
    /// Run-queue delay of the vCPU threads since start, seconds.
    pub run_delay_vcpu_s: f64,
    /// Run-queue delay of the queue workers since start, seconds.
    pub run_delay_nq_s: f64,
    /// Periods run.
    pub periods: u64,
    /// Periods whose allocation differed from the one before.
    pub reallocations: u64,
    /// Threshold exploration rounds.
    pub explorations: u64,
    /// Thread placements carried out.
    pub threads_moved: u64,
    /// Thread placements the kernel refused.
    pub threads_refused: u64,
    /// Failed QMP exchanges (no answer, garbage, vanished VM).
    pub qmp_errors: u64,
    /// Failed guest agent requests (vSPACE-Guest).
    #[serde(default)]
    pub qga_errors: u64,
    /// Thread ids QMP named that were not threads of the VM's QEMU, and so
    /// were refused (never moved).
    #[serde(default)]
    pub foreign_tids_refused: u64,
    /// Threads put back as they were (affinity, cgroup) when the manager
    /// stopped.
    #[serde(default)]
    pub threads_restored: u64,
    /// P95 samples received (`vadapt cores report`).
    pub p95_reports: u64,
    /// The VMs.
    pub vms: Vec<VmCores>,
    /// Thread ids of the running queue workers.
    pub worker_tids: Vec<u32>,
    /// With `queue_workers = "per-nq-core"`: each worker, its CPU and the
    /// ports it serves (empty otherwise).
    #[serde(default)]
    pub nq_workers: Vec<NqWorkerStatus>,
    /// Queue sets moved between NQ workers since start.
    #[serde(default)]
    pub queue_set_moves: u64,
    /// The latest decisions, oldest first.
    pub recent: VecDeque<String>,
    /// Why the manager stopped, if it stopped on an internal error (it no
    /// longer runs periods; the threads were left free on every managed CPU).
    #[serde(default)]
    pub failed: Option<String>,
}

impl CoresSnapshot {
    /// Remember a decision for `vadapt cores`.
    pub fn note(&mut self, what: String) {
        if self.recent.len() == RECENT_DECISIONS {
            self.recent.pop_front();
        }
        self.recent.push_back(what);
    }

    /// The human-readable form of `vadapt cores`.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if let Some(why) = &self.failed {
            let _ = writeln!(
                s,
                "STOPPED: {why}; threads left free on every managed CPU, restart the daemon to resume"
            );
        }
        let list = |v: &[usize]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            }
        };
        let _ = writeln!(
            s,
            "mode {}  cpus {}  apply {}{}",
            self.mode,
            list(&self.cpus),
            self.apply,
            self.advise_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            s,
            "groups  vcpu {}  nq {}  be {}  idle {}",
            list(&self.sets.vcpu),
            list(&self.sets.nq),
            list(&self.sets.be),
            list(&self.sets.idle)
        );
        let _ = writeln!(
            s,
            "util    vcpu {:.2}  nq {:.2}  be {:.2} cores; run-queue delay vcpu {:.3} s, nq {:.3} s",
            self.util_vcpu, self.util_nq, self.util_be, self.run_delay_vcpu_s, self.run_delay_nq_s
        );
        let _ = writeln!(
            s,
            "thresholds vcpu {:.3}  nq {:.3} ({}); periods {}, reallocations {}, explorations {}, moved {}, refused {}, qmp errors {}",
            self.threshold_vcpu,
            self.threshold_nq,
            if self.exploring { "exploring" } else { "fixed" },
            self.periods,
            self.reallocations,
            self.explorations,
            self.threads_moved,
            self.threads_refused,
            self.qmp_errors
        );
        for vm in &self.vms {
            let _ = writeln!(
                s,
                "vm {:<12} {:<3} vcpu threads {:?}{}{}",
                vm.name,
                vm.role.as_str(),
                vm.vcpu_tids,
                if vm.paused { " PAUSED" } else { "" },
                vm.error
                    .as_deref()
                    .map(|e| format!("  ({e})"))
                    .unwrap_or_default()
            );
            if vm.guest_vcpus.is_some()
                || vm.guest_queue_pairs.is_some()
                || vm.guest_error.is_some()
            {
                let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                let _ = writeln!(
                    s,
                    "  guest: vcpus online {}  queue pairs {}{}",
                    opt(vm.guest_vcpus.map(|v| v.to_string())),
                    opt(vm.guest_queue_pairs.map(|v| v.to_string())),
                    vm.guest_error
                        .as_deref()
                        .map(|e| format!("  ({e})"))
                        .unwrap_or_default()
                );
            }
        }
        let _ = writeln!(s, "queue workers {:?}", self.worker_tids);
        for w in &self.nq_workers {
            let _ = writeln!(
                s,
                "  nq worker {} tid {} cpu {}: {}",
                w.index,
                w.tid,
                w.cpu.map_or("-".to_string(), |c| c.to_string()),
                if w.ports.is_empty() {
                    "-".to_string()
                } else {
                    w.ports.join(", ")
                }
            );
        }
        if !self.nq_workers.is_empty() {
            let _ = writeln!(s, "queue sets moved {}", self.queue_set_moves);
        }
        for d in &self.recent {
            let _ = writeln!(s, "  {d}");
        }
        s
    }
}

/// Shared between the core manager's thread, the control socket and the
/// metrics endpoint.
#[derive(Debug, Default)]
pub struct CoresStatus {
    /// The latest state.
    pub snapshot: Mutex<CoresSnapshot>,
    /// A mode asked for at run time (`vadapt set-cores --mode`), not yet taken.
    pub(crate) mode_request: Mutex<Option<VspaceMode>>,
    /// The worst P95 reported since the last period, µs.
    pub(crate) p95: Mutex<Option<u64>>,
}

impl CoresStatus {
    /// A copy of the latest state.
    pub fn snapshot(&self) -> CoresSnapshot {
        self.edit().clone()
    }

    /// The latest state, locked for the manager to change. A lock poisoned
    /// by a panicking period is taken anyway: the state it left is what
    /// `vadapt cores` must show, with the failure (see
    /// [`CoresStatus::mark_failed`]).
    pub(crate) fn edit(&self) -> std::sync::MutexGuard<'_, CoresSnapshot> {
        self.snapshot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The manager stopped on an internal error: `why`, for `vadapt cores`
    /// and the metrics.
    pub(crate) fn mark_failed(&self, why: String) {
        let mut s = self.edit();
        s.note(format!("stopped: {why}"));
        s.failed = Some(why);
    }

    /// Why the manager stopped on an internal error, if it did.
    pub fn failed(&self) -> Option<String> {
        self.edit().failed.clone()
    }

    /// Ask for `mode` from the next period on.
    pub fn request_mode(&self, mode: VspaceMode) {
        *self.mode_request.lock().unwrap_or_else(|e| e.into_inner()) = Some(mode);
    }

    /// A P95 latency sample of the latency-critical workload, µs. Samples
    /// between two periods are combined by taking the worst.
    pub fn report_p95(&self, p95_us: u64) {
        let mut p = self.p95.lock().unwrap_or_else(|e| e.into_inner());
        *p = Some(p.map_or(p95_us, |v| v.max(p95_us)));
        self.edit().p95_reports += 1;
    }

    /// Take the P95 reported since the last call.
    pub(crate) fn take_p95(&self) -> Option<u64> {
        self.p95.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p95_reports_combine_to_the_worst_and_are_taken_once() {
        let s = CoresStatus::default();
        assert_eq!(s.take_p95(), None);
        s.report_p95(300);
        s.report_p95(900);
        s.report_p95(500);
        assert_eq!(s.take_p95(), Some(900));
        assert_eq!(s.take_p95(), None);
        assert_eq!(s.snapshot().p95_reports, 3);
    }

    #[test]
    fn the_table_lists_pool_workers_and_the_guest_side() {
        let s = CoresSnapshot {
            nq_workers: vec![
                NqWorkerStatus {
                    index: 0,
                    tid: 41,
                    cpu: Some(1),
                    ports: vec!["vm1".into(), "vm2".into()],
                },
                NqWorkerStatus {
                    index: 1,
                    tid: 42,
                    cpu: None,
                    ports: vec![],
                },
            ],
            queue_set_moves: 3,
            vms: vec![VmCores {
                name: "vm1".into(),
                role: VmRole::Lc,
                guest_vcpus: Some(1),
                guest_error: Some("ethtool -L: refused".into()),
                ..VmCores::default()
            }],
            ..CoresSnapshot::default()
        };
        let t = s.to_table();
        assert!(t.contains("  nq worker 0 tid 41 cpu 1: vm1, vm2\n"), "{t}");
        assert!(t.contains("  nq worker 1 tid 42 cpu -: -\n"), "{t}");
        assert!(t.contains("queue sets moved 3\n"), "{t}");
        assert!(
            t.contains("  guest: vcpus online 1  queue pairs -  (ethtool -L: refused)\n"),
            "{t}"
        );
    }

    #[test]
    fn recent_decisions_are_bounded() {
        let mut s = CoresSnapshot::default();
        for i in 0..40 {
            s.note(format!("d{i}"));
        }
        assert_eq!(s.recent.len(), RECENT_DECISIONS);
        assert_eq!(s.recent.back().unwrap(), "d39");
        assert!(s.to_table().contains("d39"));
    }
}
