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

/// A thread could not be named as a thread of its process.
#[derive(Debug, thiserror::Error)]
pub enum TaskIdError {
    /// `/proc/<pid>/task/<tid>/stat` could not be read: no such thread in
    /// that process (it exited, or it was never one of the process's).
    #[error("thread {tid} is not a thread of process {pid}")]
    NotInProcess {
        /// The process.
        pid: u32,
        /// The thread id.
        tid: u32,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The stat file does not have the kernel's shape.
    #[error("cannot parse {path}")]
    BadStat {
        /// The file.
        path: PathBuf,
    },
    /// The thread id now names another thread than the one found earlier:
    /// the thread exited and its id was given to a new one.
    #[error("thread {tid} of process {pid} is not the thread it was (its id was reused)")]
    Reused {
        /// The process.
        pid: u32,
        /// The thread id.
        tid: u32,
    },
}

/// A thread of some process, as `/proc/<pid>/task/<tid>` names it, with
/// its start time, which tells the thread apart from a later one given the
/// same id.
///
/// vadapt moves threads that another process (QEMU, over QMP) named, as
/// root. So a `TaskId` is only ever made by [`TaskId::of_process`], which
/// checks that the thread belongs to the process, and [`TaskId::check`]
/// re-checks that it still is the same thread just before each move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// The process (thread group) id.
    pub pid: u32,
    /// The thread id (what `gettid` and QMP's `thread-id` give).
    pub tid: u32,
    /// When the thread started, in clock ticks after boot (field 22 of
    /// `/proc/<pid>/task/<tid>/stat`).
    pub start: u64,
}

impl TaskId {
    /// Thread `tid` of process `pid`, if `<proc_root>/<pid>/task/<tid>`
    /// exists: a thread id that is not one of `pid`'s threads is an error,
    /// whatever process it belongs to.
    pub fn of_process(proc_root: &Path, pid: u32, tid: u32) -> Result<TaskId, TaskIdError> {
        let start = start_time(proc_root, pid, tid)?;
        Ok(TaskId { pid, tid, start })
    }

    /// Whether this is still the thread it was when it was found: it
    /// exists in its process and has the same start time. Call it just
    /// before acting on the thread.
    pub fn check(&self, proc_root: &Path) -> Result<(), TaskIdError> {
        if start_time(proc_root, self.pid, self.tid)? == self.start {
            Ok(())
        } else {
            Err(TaskIdError::Reused {
                pid: self.pid,
                tid: self.tid,
            })
        }
    }
}

/// Field 22 (`starttime`) of `<proc_root>/<pid>/task/<tid>/stat`.
fn start_time(proc_root: &Path, pid: u32, tid: u32) -> Result<u64, TaskIdError> {
    let path = proc_root
        .join(pid.to_string())
        .join("task")
        .join(tid.to_string())
        .join("stat");
    let stat = std::fs::read_to_string(&path).map_err(|source| TaskIdError::NotInProcess {
        pid,
        tid,
        source,
    })?;
    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses,
    // so fields are counted after the last `)`. State is field 3.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(22 - 3))
        .and_then(|f| f.parse().ok())
        .ok_or(TaskIdError::BadStat { path })
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

    /// A stat line as the kernel writes it, with a hostile comm.
    fn stat(tid: u32, start: u64) -> String {
        format!("{tid} (CPU 0/KVM) x) S 1 1 1 0 -1 4194560 0 0 0 0 5 3 0 0 20 0 4 0 {start} 0 0\n")
    }

    #[test]
    fn a_thread_is_named_only_within_its_process_and_rechecked() {
        let t = TestDir::new("proc");
        t.write("4200/task/4243/stat", &stat(4243, 777));
        t.write("4300/task/4301/stat", &stat(4301, 5));
        let task = TaskId::of_process(&t.0, 4200, 4243).unwrap();
        assert_eq!(
            task,
            TaskId {
                pid: 4200,
                tid: 4243,
                start: 777
            }
        );
        task.check(&t.0).unwrap();
        // Another process's thread is not one of 4200's.
        assert!(matches!(
            TaskId::of_process(&t.0, 4200, 4301),
            Err(TaskIdError::NotInProcess {
                pid: 4200,
                tid: 4301,
                ..
            })
        ));
        // The thread exits and its id comes back with another start time.
        t.write("4200/task/4243/stat", "");
        t.write("4200/task/4243/stat", &stat(4243, 900));
        assert!(matches!(task.check(&t.0), Err(TaskIdError::Reused { .. })));
        std::fs::remove_dir_all(t.0.join("4200/task/4243")).unwrap();
        assert!(matches!(
            task.check(&t.0),
            Err(TaskIdError::NotInProcess { .. })
        ));
        t.write("4200/task/4244/stat", "4244 (x) S 1");
        assert!(matches!(
            TaskId::of_process(&t.0, 4200, 4244),
            Err(TaskIdError::BadStat { .. })
        ));
    }

    #[test]
    fn a_real_thread_of_this_process_and_none_of_another() {
        let proc_root = Path::new("/proc");
        let me = std::process::id();
        let (tid, task) = std::thread::spawn(move || {
            let tid = current_tid();
            (tid, TaskId::of_process(proc_root, me, tid).unwrap())
        })
        .join()
        .unwrap();
        // The thread has exited: the check says so.
        assert_eq!((task.pid, task.tid), (me, tid));
        assert!(task.check(proc_root).is_err());
        let main = TaskId::of_process(proc_root, me, me).unwrap();
        main.check(proc_root).unwrap();
        // pid 1's main thread is not a thread of this process.
        assert!(TaskId::of_process(proc_root, me, 1).is_err());
    }
}
