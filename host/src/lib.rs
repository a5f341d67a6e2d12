//! Host mechanisms: what the host's cores are doing and what they may do.
//! The one crate that touches `/proc`, `/sys`, cgroups and the scheduler.
//! (QEMU's control protocols are `vadapt_qemu`'s.)
//!
//! - [`cputime`]: CPU time of threads (queue workers, QEMU vCPU threads) and of
//!   the process, and pinning the calling thread to a core.
//! - [`cpufreq`]: carrying out the policies' [`FreqHint`](vadapt_policy::FreqHint)s
//!   through cpufreq's `userspace` governor where the host offers it.
//! - [`power`]: energy from Intel RAPL where the host exposes it, else from a
//!   stated CPU-time power model.
//!
//! The host half of vSPACE (the pure half is
//! [`vadapt_policy::vspace`]), in the order the daemon loop uses it:
//!
//! ```text
//!   VmProcess::identify(QMP peer) → .thread(tid)   the VM's vCPU threads,
//!                                                  only its QEMU's own
//!   applier = Applier::cpuset(..) | Applier::affinity(..)   probed once
//!   every period:
//!       load = LoadSnapshot::take(..).since(&prev)?  thread_load
//!       outcome = manager.on_period(PeriodMeasurement { load: load.group_load(), .. })
//!       sets = CoreSets::place(&outcome.allocation, &cpus, &sets)?
//!       report = applier.apply(&sets, &threads)      moved / gone / refused
//! ```
//!
//! - [`vm_process`]: which process is the VM's QEMU (the QMP peer's pid,
//!   checked against its command line or a pidfile), and which thread ids
//!   are its own.
//! - [`thread_group`]: the threads vSPACE manages ([`TaskId`]) and their
//!   group ([`ThreadGroup`]: vCPU, NQ, best-effort).
//! - [`thread_load`]: per-period CPU time (in cores) and run-queue delay of
//!   those threads, per thread and per group, from `schedstat`; a thread that
//!   exits is reported gone, not an error.
//! - [`applier`]: [`Applier`], the one call that puts the groups on their
//!   cores by one of the two mechanisms below, or advises only.
//! - [`affinity`]: the CPU affinity of any thread (`sched_setaffinity`), read
//!   back, and the start-up probe whose `EPERM` makes placement advise-only.
//! - [`cpuset`]: the paper's mechanism, a cgroup cpuset per group (v2
//!   threaded mode or v1) under a configured parent.
//! - [`cgroup_mount`]: which cgroup version a path is on, and where cpusets
//!   are mounted, from `/proc/self/mountinfo`.
//! - [`cpu_list`]: the kernel's `0-3,8` CPU list format.
//! - [`error_chain`] and [`cli_exit`]: an error and its causes on one line,
//!   and how every `vadapt` subcommand fails with it (the two binaries'
//!   crates share them).
//!
//! Host features that may be missing (cpufreq, RAPL: both absent on the
//! project's build machines; permission to move other processes' threads;
//! a cpuset hierarchy) are probed once and reported as
//! [`Availability::Unavailable`] with a reason, so the daemon logs one line at
//! start-up and carries on; operations on an unavailable feature are no-ops.
//! Probes take the sysfs, procfs or cgroupfs root (or mountinfo's text) as a
//! parameter so tests run on fake trees.

#![deny(missing_docs)]
// Only `cputime` (clock_gettime, pthread_getcpuclockid, sched_setaffinity of
// the calling thread) and `affinity` (sched_setaffinity of any thread) call
// libc; they opt out of this with every block explained.
#![deny(unsafe_code)]

pub mod affinity;
pub mod applier;
mod availability;
pub mod cgroup_mount;
pub mod cli_exit;
pub mod cpu_list;
pub mod cpufreq;
pub mod cpuset;
pub mod cputime;
pub mod error_chain;
pub mod power;
#[cfg(test)]
mod test_dir;
pub mod thread_group;
pub mod thread_load;
pub mod vm_process;

pub use applier::Applier;
pub use availability::Availability;
pub use cpufreq::CpuFreq;
pub use power::{PowerModel, Rapl};
pub use thread_group::{GroupThread, TaskId, ThreadGroup};
