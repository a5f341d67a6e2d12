//! CPU frequency control through cpufreq's `userspace` governor (EE-KBP §4.2).
//!
//! [`CpuFreq::probe`] looks at `<sysfs>/devices/system/cpu/cpu<N>/cpufreq/`.
//! When the `userspace` governor is offered and the files can be written, it
//! switches the core to `userspace` and remembers the governor (and, if that
//! was already `userspace`, the set speed) it found; dropping the [`CpuFreq`]
//! (or [`CpuFreq::restore`]) puts them back. [`CpuFreq::apply`] then writes
//! `scaling_setspeed`: the lowest allowed frequency for [`FreqHint::Min`], the
//! highest for [`FreqHint::Max`], nothing for [`FreqHint::Keep`] or when the
//! value would not change (policies emit hints on every transition; a sysfs
//! write costs a few µs).
//!
//! "Allowed" means `scaling_min_freq`/`scaling_max_freq` (the limits an
//! administrator may have narrowed), falling back to
//! `cpuinfo_min_freq`/`cpuinfo_max_freq`: the kernel clamps set speeds to the
//! scaling limits anyway.
//!
//! Where cpufreq or the governor is missing (virtual machines, including the
//! project's build machines) or not writable (not root), the probe returns a
//! [`CpuFreq`] whose availability is [`Availability::Unavailable`] with the
//! reason, and `apply` does nothing.
//!
//! ```no_run
//! use std::path::Path;
//! use vadapt_host::{Availability, CpuFreq};
//! use vadapt_policy::FreqHint;
//!
//! let f = CpuFreq::probe(Path::new("/sys"), 2);
//! if let Availability::Unavailable { reason } = f.availability() {
//!     eprintln!("cpufreq control off for CPU 2: {reason}");
//! }
//! f.apply(FreqHint::Max).ok();
//! ```

use crate::availability::Availability;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vadapt_policy::FreqHint;

/// Reading or writing a cpufreq file failed.
#[derive(Debug, thiserror::Error)]
pub enum CpuFreqError {
    /// Writing `scaling_setspeed` or `scaling_governor` failed.
    #[error("failed to write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// What the probe found and changed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Control {
    /// Lowest allowed frequency, kHz.
    min_khz: u64,
    /// Highest allowed frequency, kHz.
    max_khz: u64,
    /// Governor found at probe time, restored on drop.
    saved_governor: String,
    /// Set speed found at probe time when the governor already was `userspace`, kHz.
    saved_setspeed: Option<u64>,
}

/// cpufreq control of one core. See the module documentation.
///
/// `apply` and `restore` take `&self`, so one instance can be shared
/// (`Arc<CpuFreq>`) between the worker that applies hints and the code that
/// owns the worker. Hints for one core should come from one thread at a time;
/// concurrent callers cannot corrupt anything but may write redundantly.
#[derive(Debug)]
pub struct CpuFreq {
    /// The core, `None` for [`CpuFreq::unavailable`].
    cpu: Option<usize>,
    /// `<sysfs>/devices/system/cpu/cpu<N>/cpufreq`.
    dir: PathBuf,
    availability: Availability,
    control: Option<Control>,
    /// Last frequency written to `scaling_setspeed`, kHz; 0 = none yet.
    last_khz: AtomicU64,
    /// True once the original governor has been put back.
    restored: AtomicBool,
}

fn read_trimmed(path: &Path) -> Result<String, String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn read_khz(dir: &Path, names: &[&str]) -> Result<u64, String> {
    let mut last_err = String::new();
    for name in names {
        match read_trimmed(&dir.join(name)) {
            Ok(s) => {
                return s
                    .parse()
                    .map_err(|_| format!("{} holds {s:?}, not kHz", dir.join(name).display()))
            }
            Err(e) => last_err = e,
        }
    }
    Err(last_err)
}

fn write(path: PathBuf, value: &str) -> Result<(), CpuFreqError> {
    fs::write(&path, value).map_err(|source| CpuFreqError::Write { path, source })
}

impl CpuFreq {
    /// Probe cpufreq for `cpu` under `sysfs_root` (normally `/sys`) and, if
    /// the `userspace` governor can be used, switch the core to it.
    /// Never fails: a host without usable cpufreq gives an unavailable
    /// [`CpuFreq`] that says why.
    pub fn probe(sysfs_root: &Path, cpu: usize) -> CpuFreq {
        let dir = sysfs_root
            .join("devices/system/cpu")
            .join(format!("cpu{cpu}"))
            .join("cpufreq");
        let mut f = CpuFreq {
            cpu: Some(cpu),
            dir,
            availability: Availability::Available,
            control: None,
            last_khz: AtomicU64::new(0),
            restored: AtomicBool::new(false),
        };
        match f.take_control() {
            Ok(control) => f.control = Some(control),
            Err(reason) => f.availability = Availability::Unavailable { reason },
        }
        f
    }

    fn take_control(&self) -> Result<Control, String> {
        if !self.dir.is_dir() {
            return Err(format!("{} does not exist", self.dir.display()));
        }
        let governors = read_trimmed(&self.dir.join("scaling_available_governors"))?;
        if !governors.split_whitespace().any(|g| g == "userspace") {
            return Err(format!(
                "the userspace governor is not available (available: {governors})"
            ));
        }
        let saved_governor = read_trimmed(&self.dir.join("scaling_governor"))?;
        let min_khz = read_khz(&self.dir, &["scaling_min_freq", "cpuinfo_min_freq"])?;
        let max_khz = read_khz(&self.dir, &["scaling_max_freq", "cpuinfo_max_freq"])?;
        if min_khz > max_khz {
            return Err(format!("minimum {min_khz} kHz above maximum {max_khz} kHz"));
        }
        let saved_setspeed = if saved_governor == "userspace" {
            read_khz(&self.dir, &["scaling_setspeed"]).ok()
        } else {
            None
        };
        let gov = self.dir.join("scaling_governor");
        fs::write(&gov, "userspace")
            .map_err(|e| format!("cannot switch {} to userspace: {e}", gov.display()))?;
        Ok(Control {
            min_khz,
            max_khz,
            saved_governor,
            saved_setspeed,
        })
    }

    /// A [`CpuFreq`] that does nothing, for a worker with no core of its own
    /// (e.g. not pinned); `reason` is reported by [`CpuFreq::availability`].
    pub fn unavailable(reason: impl Into<String>) -> CpuFreq {
        CpuFreq {
            cpu: None,
            dir: PathBuf::new(),
            availability: Availability::Unavailable {
                reason: reason.into(),
            },
            control: None,
            last_khz: AtomicU64::new(0),
            restored: AtomicBool::new(false),
        }
    }

    /// Why hints are a no-op, or `None` if they are carried out.
    pub fn unavailable_reason(&self) -> Option<&str> {
        match &self.availability {
            Availability::Available => None,
            Availability::Unavailable { reason } => Some(reason),
        }
    }

    /// The core this controls (`None` for [`CpuFreq::unavailable`]).
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// Whether hints are carried out, and if not why.
    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// Lowest and highest frequency hints map to, kHz; `None` if unavailable.
    pub fn range_khz(&self) -> Option<(u64, u64)> {
        self.control.as_ref().map(|c| (c.min_khz, c.max_khz))
    }

    /// Carry out `hint`. Returns the frequency written, kHz, or `None` when
    /// nothing was written (hint `Keep`, unchanged value, or unavailable).
    pub fn apply(&self, hint: FreqHint) -> Result<Option<u64>, CpuFreqError> {
        let Some(c) = &self.control else {
            return Ok(None);
        };
        if self.restored.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let khz = match hint {
            FreqHint::Keep => return Ok(None),
            FreqHint::Min => c.min_khz,
            FreqHint::Max => c.max_khz,
        };
        if self.last_khz.load(Ordering::Relaxed) == khz {
            return Ok(None);
        }
        write(self.dir.join("scaling_setspeed"), &khz.to_string())?;
        self.last_khz.store(khz, Ordering::Relaxed);
        Ok(Some(khz))
    }

    /// Put back the governor (and set speed) found by the probe. Idempotent;
    /// done on drop as well, where errors can only be ignored.
    pub fn restore(&self) -> Result<(), CpuFreqError> {
        let Some(c) = &self.control else {
            return Ok(());
        };
        if self.restored.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        write(self.dir.join("scaling_governor"), &c.saved_governor)?;
        if let Some(khz) = c.saved_setspeed {
            write(self.dir.join("scaling_setspeed"), &khz.to_string())?;
        }
        Ok(())
    }
}

impl Drop for CpuFreq {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;

    const CPU3: &str = "devices/system/cpu/cpu3/cpufreq";

    fn fake(governor: &str, available: &str) -> TestDir {
        let t = TestDir::new("cpufreq");
        t.write(
            &format!("{CPU3}/scaling_governor"),
            &format!("{governor}\n"),
        );
        t.write(
            &format!("{CPU3}/scaling_available_governors"),
            &format!("{available}\n"),
        );
        t.write(&format!("{CPU3}/cpuinfo_min_freq"), "800000\n");
        t.write(&format!("{CPU3}/cpuinfo_max_freq"), "3500000\n");
        t.write(&format!("{CPU3}/scaling_min_freq"), "1200000\n");
        t.write(&format!("{CPU3}/scaling_max_freq"), "2800000\n");
        t.write(&format!("{CPU3}/scaling_setspeed"), "<unsupported>\n");
        t
    }

    fn file(t: &TestDir, name: &str) -> String {
        t.read(&format!("{CPU3}/{name}"))
    }

    #[test]
    fn switches_to_userspace_writes_min_then_max_and_restores() {
        let t = fake("ondemand", "performance powersave userspace ondemand");
        let f = CpuFreq::probe(&t.0, 3);
        assert_eq!(f.availability(), &Availability::Available);
        assert_eq!(f.unavailable_reason(), None);
        assert_eq!(f.cpu(), Some(3));
        assert_eq!(file(&t, "scaling_governor"), "userspace");
        // The scaling limits, not the hardware ones (the kernel clamps to them).
        assert_eq!(f.range_khz(), Some((1_200_000, 2_800_000)));

        assert_eq!(f.apply(FreqHint::Keep).unwrap(), None);
        assert_eq!(file(&t, "scaling_setspeed"), "<unsupported>\n");
        assert_eq!(f.apply(FreqHint::Min).unwrap(), Some(1_200_000));
        assert_eq!(file(&t, "scaling_setspeed"), "1200000");
        assert_eq!(f.apply(FreqHint::Max).unwrap(), Some(2_800_000));
        assert_eq!(file(&t, "scaling_setspeed"), "2800000");
        // Unchanged value: no write (the marker survives).
        t.write(&format!("{CPU3}/scaling_setspeed"), "marker");
        assert_eq!(f.apply(FreqHint::Max).unwrap(), None);
        assert_eq!(file(&t, "scaling_setspeed"), "marker");

        drop(f);
        assert_eq!(file(&t, "scaling_governor"), "ondemand");
        assert_eq!(file(&t, "scaling_setspeed"), "marker");
    }

    #[test]
    fn restores_a_userspace_governor_and_its_speed() {
        let t = fake("userspace", "userspace performance");
        t.write(&format!("{CPU3}/scaling_setspeed"), "2000000\n");
        let f = CpuFreq::probe(&t.0, 3);
        assert!(f.availability().is_available());
        f.apply(FreqHint::Min).unwrap();
        f.restore().unwrap();
        assert_eq!(file(&t, "scaling_governor"), "userspace");
        assert_eq!(file(&t, "scaling_setspeed"), "2000000");
        // After restore, hints are no-ops.
        assert_eq!(f.apply(FreqHint::Max).unwrap(), None);
        assert_eq!(file(&t, "scaling_setspeed"), "2000000");
    }

    #[test]
    fn falls_back_to_cpuinfo_limits() {
        let t = fake("ondemand", "userspace");
        fs::remove_file(t.0.join(CPU3).join("scaling_min_freq")).unwrap();
        fs::remove_file(t.0.join(CPU3).join("scaling_max_freq")).unwrap();
        let f = CpuFreq::probe(&t.0, 3);
        assert_eq!(f.range_khz(), Some((800_000, 3_500_000)));
    }

    #[test]
    fn unavailable_without_cpufreq_or_userspace_governor() {
        let t = TestDir::new("nocpufreq");
        let f = CpuFreq::probe(&t.0, 0);
        match f.availability() {
            Availability::Unavailable { reason } => {
                assert!(reason.contains("cpu0/cpufreq does not exist"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(f.apply(FreqHint::Max).unwrap(), None);
        assert_eq!(f.range_khz(), None);
        let f = CpuFreq::unavailable("worker not pinned");
        assert_eq!(f.unavailable_reason(), Some("worker not pinned"));
        assert_eq!(f.apply(FreqHint::Min).unwrap(), None);

        let t = fake("performance", "performance powersave");
        let f = CpuFreq::probe(&t.0, 3);
        match f.availability() {
            Availability::Unavailable { reason } => {
                assert!(reason.contains("userspace"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        drop(f);
        // Nothing was touched.
        assert_eq!(file(&t, "scaling_governor"), "performance\n");

        let t = fake("ondemand", "userspace");
        t.write(&format!("{CPU3}/scaling_min_freq"), "fast\n");
        let f = CpuFreq::probe(&t.0, 3);
        assert!(!f.availability().is_available());
        assert_eq!(file(&t, "scaling_governor"), "ondemand\n");
    }
}
