//! Which threads vSPACE manages: a thread of some process ([`TaskId`]) and
//! the group it belongs to ([`ThreadGroup`]), the vocabulary shared by
//! measuring ([`thread_load`](crate::thread_load)) and placing threads on
//! cores.

use std::io;
use std::path::{Path, PathBuf};
use vadapt_policy::vspace::CoreSets;

/// A vSPACE group of threads; each runs on its own set of cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadGroup {
    /// The managed VMs' vCPU threads (from QMP `query-cpus-fast`).
    Vcpu,
    /// Network-queue processing: vadapt's queue workers.
    Nq,
    /// Best-effort VMs' vCPU threads (vSPACE-R).
    Be,
}

impl ThreadGroup {
    /// Every group, in a fixed order.
    pub const ALL: [ThreadGroup; 3] = [ThreadGroup::Vcpu, ThreadGroup::Nq, ThreadGroup::Be];

    /// Short lower-case name, used for log lines and cgroup directories.
    pub fn name(self) -> &'static str {
        match self {
            ThreadGroup::Vcpu => "vcpu",
            ThreadGroup::Nq => "nq",
            ThreadGroup::Be => "be",
        }
    }

    /// The group's CPUs in a placement.
    pub fn cpus(self, sets: &CoreSets) -> &[usize] {
        match self {
            ThreadGroup::Vcpu => &sets.vcpu,
            ThreadGroup::Nq => &sets.nq,
            ThreadGroup::Be => &sets.be,
        }
    }
}

/// Finding a thread's process failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskIdError {
    /// The status file could not be read (e.g. no such thread).
    #[error("failed to read {path}")]
    ReadStatus {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The status file has no valid `Tgid:` line.
    #[error("no Tgid line in {path}")]
    NoTgid {
        /// The file.
        path: PathBuf,
    },
}

/// A thread of some process, as `/proc/<pid>/task/<tid>` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// The process (thread group) id.
    pub pid: u32,
    /// The thread id (what `gettid` and QMP's `thread-id` give).
    pub tid: u32,
}

impl TaskId {
    /// The task of thread `tid`, its process found from the `Tgid:` line of
    /// `<proc_root>/<tid>/status` (a thread's directory exists there even
    /// though `/proc` does not list it). For QMP's thread ids, which come
    /// without their process.
    pub fn of_thread(proc_root: &Path, tid: u32) -> Result<TaskId, TaskIdError> {
        let path = proc_root.join(tid.to_string()).join("status");
        let status = match std::fs::read_to_string(&path) {
            Ok(s) => s,
            Err(source) => return Err(TaskIdError::ReadStatus { path, source }),
        };
        let Some(pid) = status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse().ok())
        else {
            return Err(TaskIdError::NoTgid { path });
        };
        Ok(TaskId { pid, tid })
    }
}

/// A thread and its group: one entry of the list the daemon keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupThread {
    /// The group it belongs to.
    pub group: ThreadGroup,
    /// The thread.
    pub task: TaskId,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cputime::current_tid;
    use crate::test_dir::TestDir;

    #[test]
    fn groups_pick_their_cpus() {
        let sets = CoreSets {
            vcpu: vec![2, 3],
            nq: vec![0],
            be: vec![1],
            idle: vec![4],
        };
        assert_eq!(ThreadGroup::Vcpu.cpus(&sets), [2, 3]);
        assert_eq!(ThreadGroup::Nq.cpus(&sets), [0]);
        assert_eq!(ThreadGroup::Be.cpus(&sets), [1]);
        let names: Vec<_> = ThreadGroup::ALL.iter().map(|g| g.name()).collect();
        assert_eq!(names, ["vcpu", "nq", "be"]);
    }

    #[test]
    fn finds_the_process_of_a_thread() {
        let t = TestDir::new("proc");
        t.write("4243/status", "Name:\tCPU 1/KVM\nTgid:\t4200\nPid:\t4243\n");
        t.write("4244/status", "Name:\tx\n");
        assert_eq!(
            TaskId::of_thread(&t.0, 4243).unwrap(),
            TaskId {
                pid: 4200,
                tid: 4243
            }
        );
        assert!(matches!(
            TaskId::of_thread(&t.0, 4244),
            Err(TaskIdError::NoTgid { .. })
        ));
        assert!(matches!(
            TaskId::of_thread(&t.0, 4245),
            Err(TaskIdError::ReadStatus { .. })
        ));

        // A (non-main) thread of this process, which /proc does not list
        // but knows.
        let (tid, task) = std::thread::spawn(|| {
            let tid = current_tid();
            (tid, TaskId::of_thread(Path::new("/proc"), tid).unwrap())
        })
        .join()
        .unwrap();
        assert_ne!(tid, std::process::id());
        assert_eq!(
            task,
            TaskId {
                pid: std::process::id(),
                tid
            }
        );
    }
}
