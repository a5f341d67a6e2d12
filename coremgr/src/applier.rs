//! The one call the daemon loop makes to put vSPACE's groups on their cores,
//! whichever mechanism the host allows.
//!
//! ```text
//!   applier = Applier::cpuset(parent, mountinfo)      the paper's cpusets
//!           | Applier::affinity(one_target_tid)       sched_setaffinity
//!           | Applier::advise_only(reason)
//!   log applier.availability() once                   (advise-only: why)
//!   every period where the placement changed or threads came and went:
//!       report = applier.apply(&sets, &threads)       sets: CoreSets::place
//!       count report.moved(), .gone(), .refused(); drop the gone threads
//! ```
//!
//! Both constructors probe: if the mechanism cannot work here (no
//! permission, no cpuset controller, no such parent) they return
//! [`Applier::AdviseOnly`] with the reason, and `apply` then moves nothing:
//! the daemon still computes and reports placements. Falling back from
//! cpusets to affinity is the caller's choice (try one, then the other).
//!
//! `apply` never fails as a whole. Each thread gets a [`ThreadOutcome`]:
//! moved, gone (exited: drop it from the list), refused by the kernel (with
//! the reason), or skipped (advise-only, or its group has no cores; a
//! best-effort group with none is paused by the caller, not moved).
//!
//! Calling `apply` every period is safe (re-applying the same placement
//! changes nothing; cpusets whose CPUs did not change are not rewritten),
//! but it costs one syscall or cgroup write per thread.

use crate::affinity::{self, set_thread_affinity};
use crate::availability::Availability;
use crate::cpuset::CpusetGroups;
use crate::error_chain::error_chain;
use crate::thread_group::{GroupThread, ThreadGroup};
use std::path::Path;
use vadapt_policy::vspace::CoreSets;

/// How placements are carried out. See the module documentation.
#[derive(Clone, Debug)]
pub enum Applier {
    /// `sched_setaffinity` on each thread.
    Affinity,
    /// A cgroup cpuset per group.
    Cpuset(CpusetGroups),
    /// Nothing is moved; `reason` says why, for one log line.
    AdviseOnly {
        /// Why, e.g. the probe's `EPERM`.
        reason: String,
    },
}

/// Why a thread was not moved although nothing failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The applier is advise-only.
    AdviseOnly,
    /// The thread's group has no CPUs in the placement.
    NoCpus,
}

/// What became of one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThreadOutcome {
    /// It now runs on its group's CPUs only.
    Moved,
    /// It has exited.
    Gone,
    /// The kernel (or the cgroup tree) refused; why, for a log line.
    Refused {
        /// Why.
        reason: String,
    },
    /// Nothing was tried.
    Skipped(SkipReason),
}

/// One thread's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadApplied {
    /// The thread and its group.
    pub thread: GroupThread,
    /// What became of it.
    pub outcome: ThreadOutcome,
}

/// What one [`Applier::apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// One entry per thread given, in the order given.
    pub threads: Vec<ThreadApplied>,
    /// Groups whose cpuset could not be set (cpuset mode), with why; their
    /// threads are [`ThreadOutcome::Refused`] with the same reason.
    pub group_errors: Vec<(ThreadGroup, String)>,
    /// Groups whose cpuset's CPUs were rewritten (cpuset mode).
    pub cpus_written: Vec<ThreadGroup>,
}

impl ApplyReport {
    fn count(&self, f: impl Fn(&ThreadOutcome) -> bool) -> usize {
        self.threads.iter().filter(|t| f(&t.outcome)).count()
    }

    /// Threads moved.
    pub fn moved(&self) -> usize {
        self.count(|o| *o == ThreadOutcome::Moved)
    }

    /// Threads found to have exited.
    pub fn gone(&self) -> usize {
        self.count(|o| *o == ThreadOutcome::Gone)
    }

    /// Threads the kernel refused to move.
    pub fn refused(&self) -> usize {
        self.count(|o| matches!(o, ThreadOutcome::Refused { .. }))
    }

    /// Threads nothing was tried for.
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, ThreadOutcome::Skipped(_)))
    }
}

impl Applier {
    /// Affinity mode if this process may set the affinity of `probe_tid`
    /// (one of the threads to manage, e.g. a QEMU vCPU thread: see
    /// [`affinity::probe`]), else advise-only with the reason.
    pub fn affinity(probe_tid: u32) -> Applier {
        match affinity::probe(probe_tid) {
            Availability::Available => Applier::Affinity,
            Availability::Unavailable { reason } => Applier::AdviseOnly { reason },
        }
    }

    /// Cpuset mode under `parent` if [`CpusetGroups::open`] succeeds
    /// (`mountinfo`: the text of `/proc/self/mountinfo`), else advise-only
    /// with the reason. In cgroup v2, adopt the managed processes with
    /// [`CpusetGroups::adopt_process`] before the first `apply`.
    pub fn cpuset(parent: &Path, mountinfo: &str) -> Applier {
        match CpusetGroups::open(parent, mountinfo) {
            Ok(groups) => Applier::Cpuset(groups),
            Err(e) => Applier::AdviseOnly {
                reason: format!("cpusets unusable: {}", error_chain(&e)),
            },
        }
    }

    /// Advise-only, for `reason` (e.g. placement switched off by configuration).
    pub fn advise_only(reason: impl Into<String>) -> Applier {
        Applier::AdviseOnly {
            reason: reason.into(),
        }
    }

    /// The mechanism's name for logs: `affinity`, `cpuset` or `advise-only`.
    pub fn name(&self) -> &'static str {
        match self {
            Applier::Affinity => "affinity",
            Applier::Cpuset(_) => "cpuset",
            Applier::AdviseOnly { .. } => "advise-only",
        }
    }

    /// Whether threads are moved, and if not why.
    pub fn availability(&self) -> Availability {
        match self {
            Applier::AdviseOnly { reason } => Availability::Unavailable {
                reason: reason.clone(),
            },
            _ => Availability::Available,
        }
    }

    /// Put each of `threads` on its group's CPUs in `sets`. See the module
    /// documentation; never fails as a whole.
    pub fn apply(&self, sets: &CoreSets, threads: &[GroupThread]) -> ApplyReport {
        let mut report = ApplyReport::default();
        // Cpuset mode: each group's CPUs first; a group that failed refuses
        // its threads for the same reason.
        let mut failed: Vec<(ThreadGroup, String)> = Vec::new();
        if let Applier::Cpuset(groups) = self {
            for group in ThreadGroup::ALL {
                let cpus = group.cpus(sets);
                if cpus.is_empty() {
                    continue;
                }
                match groups.set_cpus(group, cpus) {
                    Ok(true) => report.cpus_written.push(group),
                    Ok(false) => {}
                    Err(e) => failed.push((group, error_chain(&e))),
                }
            }
        }
        for &thread in threads {
            let cpus = thread.group.cpus(sets);
            let outcome = match self {
                Applier::AdviseOnly { .. } => ThreadOutcome::Skipped(SkipReason::AdviseOnly),
                _ if cpus.is_empty() => ThreadOutcome::Skipped(SkipReason::NoCpus),
                Applier::Affinity => match set_thread_affinity(thread.task.tid, cpus) {
                    Ok(()) => ThreadOutcome::Moved,
                    Err(e) if e.is_gone() => ThreadOutcome::Gone,
                    Err(e) => ThreadOutcome::Refused {
                        reason: error_chain(&e),
                    },
                },
                Applier::Cpuset(groups) => match failed.iter().find(|(g, _)| *g == thread.group) {
                    Some((_, reason)) => ThreadOutcome::Refused {
                        reason: reason.clone(),
                    },
                    None => match groups.move_thread(thread.group, thread.task.tid) {
                        Ok(()) => ThreadOutcome::Moved,
                        Err(e) if e.is_gone() => ThreadOutcome::Gone,
                        Err(e) => ThreadOutcome::Refused {
                            reason: error_chain(&e),
                        },
                    },
                },
            };
            report.threads.push(ThreadApplied { thread, outcome });
        }
        report.group_errors = failed;
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affinity::{cpus_allowed_list, thread_affinity};
    use crate::cputime::current_tid;
    use crate::test_dir::TestDir;
    use crate::thread_group::TaskId;
    use std::sync::mpsc;

    /// Parked threads of this process; they exit when the sender drops.
    fn parked_threads(n: usize) -> (Vec<u32>, mpsc::Sender<()>, Vec<std::thread::JoinHandle<()>>) {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
        let (tid_tx, tid_rx) = mpsc::channel();
        let handles = (0..n)
            .map(|_| {
                let (tid_tx, stop_rx) = (tid_tx.clone(), stop_rx.clone());
                std::thread::spawn(move || {
                    tid_tx.send(current_tid()).unwrap();
                    // Every thread wakes when the sender drops.
                    let _ = stop_rx.lock().map(|rx| rx.recv());
                })
            })
            .collect();
        let tids = (0..n).map(|_| tid_rx.recv().unwrap()).collect();
        (tids, stop_tx, handles)
    }

    fn thread(group: ThreadGroup, tid: u32) -> GroupThread {
        GroupThread {
            group,
            task: TaskId {
                pid: std::process::id(),
                tid,
            },
        }
    }

    fn ghost() -> u32 {
        let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        max + 1
    }

    #[test]
    fn affinity_mode_moves_real_threads_and_reports_the_rest() {
        let (tids, stop, handles) = parked_threads(3);
        let applier = Applier::affinity(tids[0]);
        assert_eq!(applier.name(), "affinity");
        assert!(applier.availability().is_available());
        let allowed = thread_affinity(tids[0]).unwrap();
        let (first, last) = (allowed[0], *allowed.last().unwrap());
        let sets = CoreSets {
            vcpu: vec![last],
            nq: vec![first],
            be: vec![],
            idle: vec![],
        };
        let threads = [
            thread(ThreadGroup::Vcpu, tids[0]),
            thread(ThreadGroup::Nq, tids[1]),
            thread(ThreadGroup::Be, tids[2]),
            thread(ThreadGroup::Vcpu, ghost()),
        ];
        let report = applier.apply(&sets, &threads);
        let outcomes: Vec<_> = report.threads.iter().map(|t| t.outcome.clone()).collect();
        assert_eq!(
            outcomes,
            [
                ThreadOutcome::Moved,
                ThreadOutcome::Moved,
                ThreadOutcome::Skipped(SkipReason::NoCpus),
                ThreadOutcome::Gone
            ]
        );
        assert_eq!(
            (
                report.moved(),
                report.gone(),
                report.refused(),
                report.skipped()
            ),
            (2, 1, 0, 1)
        );
        let proc_root = Path::new("/proc");
        assert_eq!(
            cpus_allowed_list(proc_root, threads[0].task).unwrap(),
            [last]
        );
        assert_eq!(
            cpus_allowed_list(proc_root, threads[1].task).unwrap(),
            [first]
        );
        assert_eq!(
            cpus_allowed_list(proc_root, threads[2].task).unwrap(),
            allowed
        );

        // A CPU that is not online: refused, with the kernel's reason.
        let offline = CoreSets {
            vcpu: vec![libc::CPU_SETSIZE as usize - 1],
            ..sets.clone()
        };
        let report = applier.apply(&offline, &threads[..1]);
        assert!(
            matches!(&report.threads[0].outcome, ThreadOutcome::Refused { reason } if reason.contains("Invalid argument")),
            "{report:?}"
        );
        drop(stop);
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn unusable_mechanisms_become_advise_only_and_touch_nothing() {
        let a = Applier::affinity(ghost());
        assert_eq!(a.name(), "advise-only");
        assert!(!a.availability().is_available());

        let t = TestDir::new("cgroup2");
        let info = format!("41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n", t.0.display());
        let c = Applier::cpuset(&t.0.join("vadapt"), &info);
        match c.availability() {
            Availability::Unavailable { reason } => {
                assert!(reason.starts_with("cpusets unusable"), "{reason}");
                assert!(reason.contains("does not exist"), "{reason}");
            }
            other => panic!("{other:?}"),
        }

        let (tids, stop, handles) = parked_threads(1);
        let before = thread_affinity(tids[0]).unwrap();
        let sets = CoreSets {
            vcpu: vec![before[0]],
            nq: vec![],
            be: vec![],
            idle: vec![],
        };
        let report = Applier::advise_only("switched off")
            .apply(&sets, &[thread(ThreadGroup::Vcpu, tids[0])]);
        assert_eq!(
            report.threads[0].outcome,
            ThreadOutcome::Skipped(SkipReason::AdviseOnly)
        );
        assert_eq!(thread_affinity(tids[0]).unwrap(), before);
        drop(stop);
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn cpuset_mode_writes_groups_then_moves_threads() {
        let t = TestDir::new("cgroup1");
        t.write("vadapt/cpuset.cpus", "0-3\n");
        t.write("vadapt/cpuset.mems", "0\n");
        let info = format!(
            "34 31 0:31 / {} rw,relatime - cgroup cgroup rw,cpuset\n",
            t.0.display()
        );
        let applier = Applier::cpuset(&t.0.join("vadapt"), &info);
        assert_eq!(applier.name(), "cpuset", "{:?}", applier.availability());
        let sets = CoreSets {
            vcpu: vec![1, 2],
            nq: vec![0],
            be: vec![3],
            idle: vec![],
        };
        let threads = [
            thread(ThreadGroup::Vcpu, 101),
            thread(ThreadGroup::Vcpu, 102),
            thread(ThreadGroup::Nq, 8),
        ];
        let report = applier.apply(&sets, &threads);
        assert_eq!(report.moved(), 3);
        assert_eq!(
            report.cpus_written,
            [ThreadGroup::Vcpu, ThreadGroup::Nq, ThreadGroup::Be]
        );
        assert_eq!(t.read("vadapt/vcpu/cpuset.cpus"), "1-2");
        assert_eq!(t.read("vadapt/nq/cpuset.cpus"), "0");
        assert_eq!(t.read("vadapt/vcpu/tasks"), "101102");
        assert_eq!(t.read("vadapt/nq/tasks"), "8");

        // Same placement: no cpuset rewritten. A group whose directory has
        // gone: its threads refused with the group's reason, the rest moved.
        std::fs::remove_dir_all(t.0.join("vadapt/nq")).unwrap();
        let sets = CoreSets {
            nq: vec![3],
            be: vec![0],
            ..sets
        };
        let report = applier.apply(&sets, &threads);
        assert_eq!(report.cpus_written, [ThreadGroup::Be]);
        assert_eq!(report.group_errors.len(), 1);
        assert_eq!(report.group_errors[0].0, ThreadGroup::Nq);
        assert_eq!((report.moved(), report.refused()), (2, 1));
        assert!(
            matches!(&report.threads[2].outcome, ThreadOutcome::Refused { reason } if *reason == report.group_errors[0].1)
        );
    }
}
