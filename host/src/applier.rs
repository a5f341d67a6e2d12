//! The one call the daemon loop makes to put vSPACE's groups on their cores,
//! whichever mechanism the host allows.
//!
//! ```text
//!   applier = Applier::cpuset(parent, mountinfo, proc)  the paper's cpusets
//!           | Applier::affinity(one_target_tid, proc)   sched_setaffinity
//!           | Applier::advise_only(reason)
//!   log applier.availability() once                   (advise-only: why)
//!   every period where the placement changed or threads came and went:
//!       report = applier.apply(&sets, &threads)       sets: CoreSets::place
//!       count report.moved(), .gone(), .refused(); drop the gone threads
//!   when the manager stops or fails:
//!       applier.restore()                             every moved thread put back
//! ```
//!
//! Both constructors probe: if the mechanism cannot work here (no
//! permission, no cpuset controller, no such parent) they return
//! [`Mechanism::AdviseOnly`] with the reason, and `apply` then moves nothing:
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
//!
//! **Threads named by a peer.** A [`TaskId`] is a thread of a process
//! checked to be the VM's QEMU, with its start time. Just before each move
//! the applier checks again that the thread still exists in that process
//! with that start time ([`TaskId::check`]); a thread that exited, or whose
//! id now names another thread, is [`ThreadOutcome::Gone`] and is not
//! touched.
//!
//! **Putting threads back.** Before a thread is moved for the first time,
//! the applier records what it had: its affinity (affinity mode) or its
//! cgroup (cpuset mode). [`Applier::restore`], called when the core manager
//! stops or fails, puts every recorded thread that still exists back.
//! A thread whose original cannot be read is not moved at all.

use crate::affinity::{self, cpus_allowed_list, set_thread_affinity};
use crate::availability::Availability;
use crate::cpuset::CpusetGroups;
use crate::error_chain::error_chain;
use crate::thread_group::{GroupThread, TaskId, TaskIdError, ThreadGroup};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use vadapt_policy::vspace::CoreSets;

/// How placements are carried out.
#[derive(Clone, Debug)]
pub enum Mechanism {
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

/// What a thread had before vadapt first moved it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Original {
    /// Its CPU affinity.
    affinity: Vec<usize>,
    /// Its cgroup's directory in the cpuset hierarchy (cpuset mode). Put
    /// back first: in v1, joining a cpuset resets the thread's affinity to
    /// the cpuset's CPUs, so the affinity is set again after it.
    cgroup: Option<PathBuf>,
}

/// Places threads and remembers how to put them back. See the module
/// documentation.
#[derive(Clone, Debug)]
pub struct Applier {
    mechanism: Mechanism,
    /// `/proc`, or a fake tree in tests.
    proc_root: PathBuf,
    /// Every thread moved so far and still alive, with what it had before.
    originals: BTreeMap<TaskId, Original>,
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
    /// It has exited, or its id now names another thread: not touched.
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

/// What [`Applier::restore`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Threads put back as they were.
    pub restored: usize,
    /// Threads that had exited (or whose id was reused): not touched.
    pub gone: usize,
    /// Threads that could not be put back, with why.
    pub failed: Vec<(TaskId, String)>,
}

impl Applier {
    fn with(mechanism: Mechanism, proc_root: &Path) -> Applier {
        Applier {
            mechanism,
            proc_root: proc_root.to_path_buf(),
            originals: BTreeMap::new(),
        }
    }

    /// Affinity mode if this process may set the affinity of `probe_tid`
    /// (one of the threads to manage, e.g. a QEMU vCPU thread: see
    /// [`affinity::probe`]), else advise-only with the reason. Threads are
    /// checked under `proc_root` (`/proc`).
    pub fn affinity(probe_tid: u32, proc_root: &Path) -> Applier {
        let mechanism = match affinity::probe(probe_tid) {
            Availability::Available => Mechanism::Affinity,
            Availability::Unavailable { reason } => Mechanism::AdviseOnly { reason },
        };
        Applier::with(mechanism, proc_root)
    }

    /// Cpuset mode under `parent` if [`CpusetGroups::open`] succeeds
    /// (`mountinfo`: the text of `/proc/self/mountinfo`), else advise-only
    /// with the reason. In cgroup v2, adopt the managed processes with
    /// [`CpusetGroups::adopt_process`] before the first `apply`.
    pub fn cpuset(parent: &Path, mountinfo: &str, proc_root: &Path) -> Applier {
        let mechanism = match CpusetGroups::open(parent, mountinfo) {
            Ok(groups) => Mechanism::Cpuset(groups),
            Err(e) => Mechanism::AdviseOnly {
                reason: format!("cpusets unusable: {}", error_chain(&e)),
            },
        };
        Applier::with(mechanism, proc_root)
    }

    /// Advise-only, for `reason` (e.g. placement switched off by configuration).
    pub fn advise_only(reason: impl Into<String>) -> Applier {
        Applier::with(
            Mechanism::AdviseOnly {
                reason: reason.into(),
            },
            Path::new("/proc"),
        )
    }

    /// Stop moving threads from now on, for `reason`; what was moved so
    /// far is still put back by [`Applier::restore`].
    pub fn fall_back_to_advise_only(&mut self, reason: impl Into<String>) {
        self.mechanism = Mechanism::AdviseOnly {
            reason: reason.into(),
        };
    }

    /// The mechanism.
    pub fn mechanism(&self) -> &Mechanism {
        &self.mechanism
    }

    /// Whether threads are left where they are.
    pub fn is_advise_only(&self) -> bool {
        matches!(self.mechanism, Mechanism::AdviseOnly { .. })
    }

    /// The mechanism's name for logs: `affinity`, `cpuset` or `advise-only`.
    pub fn name(&self) -> &'static str {
        match self.mechanism {
            Mechanism::Affinity => "affinity",
            Mechanism::Cpuset(_) => "cpuset",
            Mechanism::AdviseOnly { .. } => "advise-only",
        }
    }

    /// Whether threads are moved, and if not why.
    pub fn availability(&self) -> Availability {
        match &self.mechanism {
            Mechanism::AdviseOnly { reason } => Availability::Unavailable {
                reason: reason.clone(),
            },
            _ => Availability::Available,
        }
    }

    /// Threads moved so far that [`Applier::restore`] would put back.
    pub fn moved_threads(&self) -> impl Iterator<Item = &TaskId> {
        self.originals.keys()
    }

    /// Put each of `threads` on its group's CPUs in `sets`. See the module
    /// documentation; never fails as a whole.
    pub fn apply(&mut self, sets: &CoreSets, threads: &[GroupThread]) -> ApplyReport {
        let mut report = ApplyReport::default();
        // Cpuset mode: each group's CPUs first; a group that failed refuses
        // its threads for the same reason.
        let mut failed: Vec<(ThreadGroup, String)> = Vec::new();
        if let Mechanism::Cpuset(groups) = &self.mechanism {
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
            let outcome = if self.is_advise_only() {
                ThreadOutcome::Skipped(SkipReason::AdviseOnly)
            } else if cpus.is_empty() {
                ThreadOutcome::Skipped(SkipReason::NoCpus)
            } else if let Some((_, reason)) = failed.iter().find(|(g, _)| *g == thread.group) {
                ThreadOutcome::Refused {
                    reason: reason.clone(),
                }
            } else {
                self.move_one(thread, cpus)
            };
            report.threads.push(ThreadApplied { thread, outcome });
        }
        report.group_errors = failed;
        self.forget_gone(threads);
        report
    }

    /// Check `thread` is still itself, record its original, then move it.
    fn move_one(&mut self, thread: GroupThread, cpus: &[usize]) -> ThreadOutcome {
        let task = thread.task;
        match task.check(&self.proc_root) {
            Ok(()) => {}
            Err(TaskIdError::BadStat { path }) => {
                return ThreadOutcome::Refused {
                    reason: format!("cannot parse {}", path.display()),
                }
            }
            Err(_) => {
                self.originals.remove(&task);
                return ThreadOutcome::Gone;
            }
        }
        if !self.originals.contains_key(&task) {
            let cgroup = match &self.mechanism {
                Mechanism::Cpuset(groups) => groups
                    .cgroup_of(&self.proc_root, task)
                    .map(Some)
                    .map_err(|e| (false, error_chain(&e))),
                Mechanism::Affinity => Ok(None),
                Mechanism::AdviseOnly { .. } => {
                    return ThreadOutcome::Skipped(SkipReason::AdviseOnly)
                }
            };
            let original = cgroup.and_then(|cgroup| {
                cpus_allowed_list(&self.proc_root, task)
                    .map(|affinity| Original { affinity, cgroup })
                    .map_err(|e| (e.is_gone(), error_chain(&e)))
            });
            match original {
                Ok(o) => {
                    self.originals.insert(task, o);
                }
                Err((true, _)) => return ThreadOutcome::Gone,
                // Never move what could not be put back.
                Err((false, why)) => {
                    return ThreadOutcome::Refused {
                        reason: format!("cannot read what to put back: {why}"),
                    }
                }
            }
        }
        let result = match &self.mechanism {
            Mechanism::Affinity => {
                set_thread_affinity(task.tid, cpus).map_err(|e| (e.is_gone(), error_chain(&e)))
            }
            Mechanism::Cpuset(groups) => groups
                .move_thread(thread.group, task.tid)
                .map_err(|e| (e.is_gone(), error_chain(&e))),
            Mechanism::AdviseOnly { .. } => Ok(()),
        };
        match result {
            Ok(()) => ThreadOutcome::Moved,
            Err((true, _)) => {
                self.originals.remove(&task);
                ThreadOutcome::Gone
            }
            Err((false, reason)) => ThreadOutcome::Refused { reason },
        }
    }

    /// Drop the originals of threads no longer managed that have exited,
    /// so the record stays as small as the threads alive.
    fn forget_gone(&mut self, managed: &[GroupThread]) {
        let proc_root = &self.proc_root;
        self.originals.retain(|task, _| {
            managed.iter().any(|t| t.task == *task) || task.check(proc_root).is_ok()
        });
    }

    /// Put every thread moved so far back as it was (its affinity, or its
    /// cgroup), where it still exists, and forget them. Call when the
    /// core manager stops or fails.
    pub fn restore(&mut self) -> RestoreReport {
        let mut report = RestoreReport::default();
        for (task, original) in std::mem::take(&mut self.originals) {
            if task.check(&self.proc_root).is_err() {
                report.gone += 1;
                continue;
            }
            let cgroup = match (&original.cgroup, &self.mechanism) {
                (None, _) => Ok(()),
                (Some(dir), Mechanism::Cpuset(groups)) => groups
                    .move_thread_to(dir, task.tid)
                    .map_err(|e| (e.is_gone(), error_chain(&e))),
                // A cgroup recorded under a cpuset applier that has since
                // fallen back to advise-only: the groups are gone with it.
                (Some(dir), _) => Err((
                    false,
                    format!(
                        "no cpuset applier left to move it back to {}",
                        dir.display()
                    ),
                )),
            };
            let result = cgroup.and_then(|()| {
                set_thread_affinity(task.tid, &original.affinity)
                    .map_err(|e| (e.is_gone(), error_chain(&e)))
            });
            match result {
                Ok(()) => report.restored += 1,
                Err((true, _)) => report.gone += 1,
                Err((false, why)) => report.failed.push((task, why)),
            }
        }
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

    /// Thread `tid` of this process (start time 0 if it does not exist).
    fn thread(group: ThreadGroup, tid: u32) -> GroupThread {
        let pid = std::process::id();
        GroupThread {
            group,
            task: TaskId::of_process(Path::new("/proc"), pid, tid).unwrap_or(TaskId {
                pid,
                tid,
                start: 0,
            }),
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
        let mut applier = Applier::affinity(tids[0], Path::new("/proc"));
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
        let a = Applier::affinity(ghost(), Path::new("/proc"));
        assert_eq!(a.name(), "advise-only");
        assert!(!a.availability().is_available());

        let t = TestDir::new("cgroup2");
        let info = format!("41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n", t.0.display());
        let c = Applier::cpuset(&t.0.join("vadapt"), &info, Path::new("/proc"));
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
        // Fake threads of a fake process, each in the root cpuset.
        // Ids above pid_max, so that no real thread is ever touched by the
        // affinity calls (they find none: gone).
        let proc_root = t.0.join("proc");
        let fake = |tid: u32| {
            let tid = ghost() + tid;
            t.write(
                &format!("proc/4200/task/{tid}/status"),
                "Name:\tCPU 0/KVM\nCpus_allowed_list:\t0-3\n",
            );
            t.write(
                &format!("proc/4200/task/{tid}/stat"),
                &format!("{tid} (CPU 0/KVM) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {tid}00 0 0\n"),
            );
            t.write(
                &format!("proc/4200/task/{tid}/cgroup"),
                "12:cpu,cpuacct:/\n11:cpuset:/machine\n0::/\n",
            );
            GroupThread {
                group: ThreadGroup::Vcpu,
                task: TaskId::of_process(&proc_root, 4200, tid).unwrap(),
            }
        };
        let mut applier = Applier::cpuset(&t.0.join("vadapt"), &info, &proc_root);
        assert_eq!(applier.name(), "cpuset", "{:?}", applier.availability());
        let sets = CoreSets {
            vcpu: vec![1, 2],
            nq: vec![0],
            be: vec![3],
            idle: vec![],
        };
        let threads = [
            fake(101),
            fake(102),
            GroupThread {
                group: ThreadGroup::Nq,
                ..fake(8)
            },
        ];
        let report = applier.apply(&sets, &threads);
        assert_eq!(report.moved(), 3);
        assert_eq!(
            report.cpus_written,
            [ThreadGroup::Vcpu, ThreadGroup::Nq, ThreadGroup::Be]
        );
        assert_eq!(t.read("vadapt/vcpu/cpuset.cpus"), "1-2");
        assert_eq!(t.read("vadapt/nq/cpuset.cpus"), "0");
        let id = |n: u32| (ghost() + n).to_string();
        assert_eq!(t.read("vadapt/vcpu/tasks"), id(101) + &id(102));
        assert_eq!(t.read("vadapt/nq/tasks"), id(8));

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

        // Thread 102 exits and its id is given to a new thread: it is not
        // moved, and not put back later.
        t.write(
            &format!("proc/4200/task/{}/stat", id(102)),
            "102 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 999 0 0\n",
        );
        let report = applier.apply(&sets, &threads);
        assert_eq!(report.threads[1].outcome, ThreadOutcome::Gone);
        assert_eq!(
            t.read("vadapt/vcpu/tasks"),
            [101, 102, 101, 102, 101].map(id).concat()
        );
        // Put back: each thread still there into the cgroup it came from.
        t.write("machine/tasks", "");
        // (Their affinity, set again after the cgroup since a v1 cpuset
        // resets it, finds no real thread of theirs: counted gone.)
        let r = applier.restore();
        assert_eq!((r.restored, r.gone, r.failed.len()), (0, 2, 0), "{r:?}");
        assert_eq!(t.read("machine/tasks"), id(8) + &id(101));
        assert_eq!(applier.moved_threads().count(), 0);
    }

    #[test]
    fn threads_not_of_their_process_are_never_touched_and_moved_ones_go_back() {
        let (tids, stop, handles) = parked_threads(2);
        let proc_root = Path::new("/proc");
        let mut applier = Applier::affinity(tids[0], proc_root);
        let before = thread_affinity(tids[0]).unwrap();
        let cpu = *before.last().unwrap();
        let sets = CoreSets {
            vcpu: vec![cpu],
            nq: vec![cpu],
            be: vec![],
            idle: vec![],
        };
        // tids[1] named as a thread of process 1 (as a hostile QMP would
        // have it), and tids[0] with another start time (a reused id).
        let foreign = GroupThread {
            group: ThreadGroup::Vcpu,
            task: TaskId {
                pid: 1,
                ..thread(ThreadGroup::Vcpu, tids[1]).task
            },
        };
        let mut reused = thread(ThreadGroup::Vcpu, tids[0]);
        reused.task.start += 1;
        let report = applier.apply(&sets, &[foreign, reused]);
        assert_eq!(report.gone(), 2, "{report:?}");
        assert_eq!(thread_affinity(tids[0]).unwrap(), before);
        assert_eq!(thread_affinity(tids[1]).unwrap(), before);

        // The real ones move, and go back to what they had.
        let real = [
            thread(ThreadGroup::Vcpu, tids[0]),
            thread(ThreadGroup::Nq, tids[1]),
        ];
        assert_eq!(applier.apply(&sets, &real).moved(), 2);
        assert_eq!(thread_affinity(tids[0]).unwrap(), [cpu]);
        // Falling back to advise-only keeps what is to be put back.
        applier.fall_back_to_advise_only("test");
        assert_eq!(applier.moved_threads().count(), 2);
        let r = applier.restore();
        assert_eq!((r.restored, r.gone), (2, 0), "{r:?}");
        assert_eq!(thread_affinity(tids[0]).unwrap(), before);
        assert_eq!(thread_affinity(tids[1]).unwrap(), before);
        drop(stop);
        for h in handles {
            h.join().unwrap();
        }
    }
}
