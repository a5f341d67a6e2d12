//! Setting and reading the CPU affinity of any thread by its tid, and the
//! start-up probe that decides whether vSPACE may move threads at all.
//!
//! vSPACE's simplest way to give a group its cores: `sched_setaffinity` on
//! each of its threads ([`set_thread_affinity`]). Moving another process's
//! threads (QEMU's vCPUs) needs the same user id as that process or
//! `CAP_SYS_NICE`; without either the kernel answers `EPERM`. Rather than
//! fail every period, the daemon runs [`probe`] once on one target thread:
//! it sets the thread's affinity to what it already is (no change), and an
//! `EPERM` makes placement advise-only with one reason to log.
//!
//! The result of a move can be read back two ways: [`thread_affinity`]
//! (`sched_getaffinity`) or [`cpus_allowed_list`] (`Cpus_allowed_list` in
//! `/proc/<pid>/task/<tid>/status`, which also works on fake trees).
//!
//! Masks are `cpu_set_t`s: CPUs up to `CPU_SETSIZE` (1024). On a host with
//! more possible CPUs the kernel refuses the short mask (`EINVAL`).
//!
//! This module opts out of the crate's `deny(unsafe_code)` for the two libc
//! calls and the bit operations on `cpu_set_t`; each block says why it is
//! sound.
#![allow(unsafe_code)]

use crate::availability::Availability;
use crate::cpu_list::{parse_cpu_list, CpuListError};
use crate::error_chain::error_chain;
use crate::thread_group::TaskId;
use std::io;
use std::path::{Path, PathBuf};

/// Setting or reading a thread's affinity failed.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// 0 (which the syscalls read as "the calling thread") or beyond `pid_t`.
    #[error("{0} is not a thread id")]
    InvalidTid(u32),
    /// An affinity must allow at least one CPU.
    #[error("an empty CPU set was given")]
    EmptySet,
    /// The CPU does not fit a `cpu_set_t`.
    #[error("CPU {0} is beyond CPU_SETSIZE")]
    CpuOutOfRange(usize),
    /// `sched_setaffinity` failed; see [`AffinityError::is_gone`] and
    /// [`AffinityError::is_refused`].
    #[error("failed to set the CPU affinity of thread {tid}")]
    Set {
        /// The thread.
        tid: u32,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// `sched_getaffinity` failed.
    #[error("failed to get the CPU affinity of thread {tid}")]
    Get {
        /// The thread.
        tid: u32,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The status file could not be read (e.g. the thread has exited).
    #[error("failed to read {path}")]
    ReadStatus {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The status file has no `Cpus_allowed_list:` line.
    #[error("no Cpus_allowed_list line in {path}")]
    NoCpusAllowed {
        /// The file.
        path: PathBuf,
    },
    /// The `Cpus_allowed_list:` line did not parse.
    #[error("failed to parse Cpus_allowed_list in {path}")]
    ParseCpusAllowed {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: CpuListError,
    },
}

impl AffinityError {
    fn errno(&self) -> Option<i32> {
        match self {
            AffinityError::Set { source, .. }
            | AffinityError::Get { source, .. }
            | AffinityError::ReadStatus { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// True if the thread does not exist (any more): `ESRCH` from the
    /// syscalls, `ENOENT`/`ESRCH` from its status file.
    pub fn is_gone(&self) -> bool {
        match self {
            AffinityError::ReadStatus { .. } => {
                matches!(self.errno(), Some(libc::ENOENT) | Some(libc::ESRCH))
            }
            _ => self.errno() == Some(libc::ESRCH),
        }
    }

    /// True if the kernel refused the move itself: `EPERM` (neither the
    /// thread's user nor `CAP_SYS_NICE`) or `EINVAL` (no CPU of the set is
    /// online and allowed by the thread's cpuset cgroup).
    pub fn is_refused(&self) -> bool {
        matches!(self, AffinityError::Set { .. })
            && matches!(self.errno(), Some(libc::EPERM) | Some(libc::EINVAL))
    }
}

fn pid_t(tid: u32) -> Result<libc::pid_t, AffinityError> {
    match libc::pid_t::try_from(tid) {
        Ok(t) if t > 0 => Ok(t),
        _ => Err(AffinityError::InvalidTid(tid)),
    }
}

/// Allow thread `tid` (of any process) to run on `cpus` only.
pub fn set_thread_affinity(tid: u32, cpus: &[usize]) -> Result<(), AffinityError> {
    let pid = pid_t(tid)?;
    if cpus.is_empty() {
        return Err(AffinityError::EmptySet);
    }
    if let Some(&cpu) = cpus.iter().find(|&&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(AffinityError::CpuOutOfRange(cpu));
    }
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: cpu < CPU_SETSIZE (checked above), so the bit is inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `pid` is a positive thread id (never 0, the calling thread, by
    // accident); `set` is a valid cpu_set_t of the size passed, only read.
    let rc = unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(AffinityError::Set {
            tid,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The CPUs thread `tid` (of any process) may run on, ascending.
pub fn thread_affinity(tid: u32) -> Result<Vec<usize>, AffinityError> {
    let pid = pid_t(tid)?;
    // SAFETY: as in `set_thread_affinity`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most `size_of::<cpu_set_t>()` bytes into
    // `set`, a writable local.
    let rc =
        unsafe { libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(AffinityError::Get {
            tid,
            source: io::Error::last_os_error(),
        });
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: c < CPU_SETSIZE, so the bit read is inside `set`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// The CPUs thread `task` may run on, from the `Cpus_allowed_list:` line of
/// `<proc_root>/<pid>/task/<tid>/status`.
pub fn cpus_allowed_list(proc_root: &Path, task: TaskId) -> Result<Vec<usize>, AffinityError> {
    let path = proc_root
        .join(task.pid.to_string())
        .join("task")
        .join(task.tid.to_string())
        .join("status");
    let status = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(source) => return Err(AffinityError::ReadStatus { path, source }),
    };
    let Some(list) = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return Err(AffinityError::NoCpusAllowed { path });
    };
    parse_cpu_list(list).map_err(|source| AffinityError::ParseCpusAllowed { path, source })
}

/// Whether this process may move thread `tid`: sets its affinity to what it
/// already is. [`Availability::Unavailable`] says why not, in one line for
/// the log; placement is then advise-only.
pub fn probe(tid: u32) -> Availability {
    let outcome = thread_affinity(tid).and_then(|cpus| set_thread_affinity(tid, &cpus));
    match outcome {
        Ok(()) => Availability::Available,
        Err(e) if e.errno() == Some(libc::EPERM) => Availability::Unavailable {
            reason: format!(
                "not permitted to set the CPU affinity of thread {tid} (EPERM): \
                 moving another user's threads needs CAP_SYS_NICE"
            ),
        },
        Err(e) => Availability::Unavailable {
            reason: error_chain(&e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cputime::current_tid;
    use std::sync::mpsc;

    /// A parked thread of this process; it exits when the returned sender drops.
    fn parked_thread() -> (u32, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            tid_tx.send(current_tid()).unwrap();
            let _ = stop_rx.recv();
        });
        (tid_rx.recv().unwrap(), stop_tx, handle)
    }

    fn pid_max() -> u32 {
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn pins_another_thread_and_reads_it_back_both_ways() {
        let (tid, stop, handle) = parked_thread();
        let task = TaskId {
            pid: std::process::id(),
            tid,
            start: 0,
        };
        let proc_root = Path::new("/proc");
        let allowed = thread_affinity(tid).unwrap();
        assert!(!allowed.is_empty());
        assert_eq!(cpus_allowed_list(proc_root, task).unwrap(), allowed);
        assert_eq!(probe(tid), Availability::Available);
        // The probe changed nothing.
        assert_eq!(thread_affinity(tid).unwrap(), allowed);

        let cpu = *allowed.last().unwrap();
        set_thread_affinity(tid, &[cpu]).unwrap();
        assert_eq!(thread_affinity(tid).unwrap(), [cpu]);
        assert_eq!(cpus_allowed_list(proc_root, task).unwrap(), [cpu]);
        set_thread_affinity(tid, &allowed).unwrap();
        assert_eq!(cpus_allowed_list(proc_root, task).unwrap(), allowed);
        drop(stop);
        handle.join().unwrap();
    }

    #[test]
    fn bad_input_is_an_error_not_a_move_of_the_caller() {
        let me = thread_affinity(current_tid()).unwrap();
        assert!(matches!(
            set_thread_affinity(0, &[0]),
            Err(AffinityError::InvalidTid(0))
        ));
        assert!(matches!(
            set_thread_affinity(u32::MAX, &[0]),
            Err(AffinityError::InvalidTid(_))
        ));
        assert!(matches!(
            set_thread_affinity(current_tid(), &[]),
            Err(AffinityError::EmptySet)
        ));
        assert!(matches!(
            set_thread_affinity(current_tid(), &[0, 1 << 20]),
            Err(AffinityError::CpuOutOfRange(_))
        ));
        assert_eq!(thread_affinity(current_tid()).unwrap(), me);
    }

    #[test]
    fn classifies_gone_and_refused() {
        // No thread can have an id above pid_max.
        let ghost = pid_max() + 1;
        let e = set_thread_affinity(ghost, &[0]).unwrap_err();
        assert!(e.is_gone() && !e.is_refused(), "{e:?}");
        assert!(thread_affinity(ghost).unwrap_err().is_gone());
        let e = cpus_allowed_list(
            Path::new("/proc"),
            TaskId {
                pid: ghost,
                tid: ghost,
                start: 0,
            },
        )
        .unwrap_err();
        assert!(e.is_gone(), "{e:?}");
        assert!(
            matches!(probe(ghost), Availability::Unavailable { reason } if reason.contains("No such process"))
        );

        // A CPU that is not online (the set fits a cpu_set_t): EINVAL.
        let (tid, stop, handle) = parked_thread();
        let e = set_thread_affinity(tid, &[libc::CPU_SETSIZE as usize - 1]).unwrap_err();
        assert!(e.is_refused() && !e.is_gone(), "{e:?}");
        drop(stop);
        handle.join().unwrap();

        // EPERM, as the kernel reports it.
        let e = AffinityError::Set {
            tid: 1,
            source: io::Error::from_raw_os_error(libc::EPERM),
        };
        assert!(e.is_refused() && !e.is_gone());
    }

    /// EPERM for real: a thread that drops its own effective uid to
    /// `nobody` (and with it its capabilities) probes a root-owned thread.
    /// Only possible when the tests run as root; skipped otherwise.
    #[test]
    fn probe_without_privilege_says_advise_only() {
        // SAFETY: geteuid takes no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to drop to another user");
            return;
        }
        let (target, stop, handle) = parked_thread();
        let before = thread_affinity(target).unwrap();
        let verdict = std::thread::spawn(move || {
            const NOBODY: libc::uid_t = 65534;
            const UNCHANGED: libc::uid_t = libc::uid_t::MAX;
            // The raw syscall changes the calling thread's credentials only
            // (glibc's setresuid would change every thread of the process);
            // this thread exits after the probe.
            // SAFETY: setresuid takes three integers and touches no memory.
            let rc = unsafe { libc::syscall(libc::SYS_setresuid, UNCHANGED, NOBODY, UNCHANGED) };
            if rc != 0 {
                // E.g. a user namespace without uid 65534.
                return Err(format!("setresuid: {}", io::Error::last_os_error()));
            }
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let cap_eff = status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .map(|v| v.trim().to_string());
            if cap_eff.as_deref() != Some("0000000000000000") {
                return Err("dropping the uid kept capabilities".to_string());
            }
            Ok(probe(target))
        })
        .join()
        .unwrap();
        match verdict {
            Err(why) => eprintln!("skipped: {why}"),
            Ok(Availability::Unavailable { reason }) => {
                assert!(reason.contains("EPERM"), "{reason}");
                assert!(reason.contains(&target.to_string()), "{reason}");
            }
            Ok(other) => panic!("{other:?}"),
        }
        assert_eq!(thread_affinity(target).unwrap(), before);
        drop(stop);
        handle.join().unwrap();
    }
}
