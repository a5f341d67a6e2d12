//! vadapt's core manager: what the host's cores are doing and what they may do.
//!
//! - [`cputime`]: CPU time of threads (queue workers, QEMU vCPU threads) and of
//!   the process, and pinning the calling thread to a core.
//! - [`cpufreq`]: carrying out the policies' [`FreqHint`](vadapt_policy::FreqHint)s
//!   through cpufreq's `userspace` governor where the host offers it.
//! - [`power`]: energy from Intel RAPL where the host exposes it, else from a
//!   stated CPU-time power model.
//!
//! Host features that may be missing (cpufreq, RAPL: both absent on the
//! project's build machines) are probed once and reported as
//! [`Availability::Unavailable`] with a reason, so the daemon logs one line at
//! start-up and carries on; operations on an unavailable feature are no-ops.
//! Probes take the sysfs root as a parameter so tests run on fake trees.

#![deny(missing_docs)]
// Only `cputime` calls libc (clock_gettime, pthread_getcpuclockid,
// sched_setaffinity); it opts out of this with every block explained.
#![deny(unsafe_code)]

pub mod cpufreq;
pub mod cputime;
pub mod power;

pub use cpufreq::CpuFreq;
pub use power::{PowerModel, Rapl};

/// Whether a host feature can be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// The feature works on this host.
    Available,
    /// It does not; `reason` says why, in a sentence fit for a log line.
    Unavailable {
        /// Why, e.g. "/sys/devices/system/cpu/cpu0/cpufreq does not exist".
        reason: String,
    },
}

impl Availability {
    /// True for [`Availability::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

/// A scratch directory for fake sysfs trees in tests, removed on drop.
#[cfg(test)]
pub(crate) struct TestDir(pub std::path::PathBuf);

#[cfg(test)]
impl TestDir {
    pub(crate) fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "vadapt-coremgr-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TestDir(dir)
    }

    /// Write `content` to `rel`, creating parent directories.
    pub(crate) fn write(&self, rel: &str, content: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub(crate) fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.0.join(rel)).unwrap()
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
