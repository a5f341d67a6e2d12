//! [`Ctx`]: what every benchmark step needs (this binary, the work and
//! output folders, the stop flag, rounds and CPUs).

use super::child;
use super::error::BenchError;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// What every benchmark step needs.
#[derive(Debug)]
pub struct Ctx {
    /// This binary (`vadapt serve` / `vadapt guest` are started from it).
    pub exe: PathBuf,
    /// Sockets and process logs (short path: unix sockets need < 108 bytes).
    pub work: PathBuf,
    /// Where results go (`--out`).
    pub out: PathBuf,
    /// Set by SIGINT/SIGTERM: every wait returns [`BenchError::Interrupted`].
    pub stop: Arc<AtomicBool>,
    /// `--quick`.
    pub quick: bool,
    /// Rounds per figure.
    pub runs: u32,
    /// CPU of backend workers (DPDK forwarding lcore, vadapt workers).
    pub backend_cpu: usize,
    /// CPU of senders (guest, virtio-user forwarding lcore).
    pub frontend_cpu: usize,
    /// The invocation that reproduces one benchmark: `{}` stands for its name.
    pub invocation: String,
}

impl Ctx {
    /// Seconds of one measurement: `full` normally, `quick` with `--quick`.
    pub fn secs(&self, full: f64, quick: f64) -> Duration {
        Duration::from_secs_f64(if self.quick { quick } else { full })
    }

    /// The results directory.
    pub fn out_dir(&self) -> PathBuf {
        self.out.clone()
    }

    /// Sleep, interruptibly.
    pub fn sleep(&self, d: Duration) -> Result<(), BenchError> {
        child::sleep(d, &self.stop)
    }

    /// A command line as the report shows it: this binary as `vadapt`, the
    /// work directory as `$WORK` (it is temporary).
    pub fn show(&self, argv: &[String]) -> String {
        argv.join(" ")
            .replace(&self.exe.display().to_string(), "vadapt")
            .replace(&self.work.display().to_string(), "$WORK")
    }

    /// Print a progress line.
    pub fn say(&self, msg: &str) {
        println!("  {msg}");
    }
}

/// A context for unit tests: quick, 3 rounds, a temporary work folder per
/// test thread, and `/bin/false` as the binary (no test starts `vadapt`).
#[cfg(test)]
pub(crate) fn test_ctx(stop: Arc<AtomicBool>) -> Ctx {
    thread_local! {
        // Removed when the test's thread ends.
        static WORK: tempfile::TempDir = tempfile::Builder::new()
            .prefix("vadapt-bench-test-")
            .tempdir()
            .unwrap();
    }
    let work = WORK.with(|d| d.path().to_owned());
    Ctx {
        exe: PathBuf::from("/bin/false"),
        out: work.clone(),
        work,
        stop,
        quick: true,
        runs: 3,
        backend_cpu: 1,
        frontend_cpu: 0,
        invocation: "vadapt bench --only {} --quick".into(),
    }
}
