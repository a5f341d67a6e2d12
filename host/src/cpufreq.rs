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
//! **One owner per CPU** (`docs/cpu-frequency.md`). Every [`CpuFreq`] of
//! one CPU (one per port pinned there, and the core manager's) shares one
//! state: the governor is taken once and put back when the last of them
//! goes (or on the first [`CpuFreq::restore`]). A port's hints vote: the
//! CPU goes to its lowest frequency only when no sharer's last hint was
//! [`FreqHint::Max`]. While a [`CpuFreq::probe_owner`] (the core manager's)
//! exists for the CPU, the votes are not written at all: the owner's hints
//! alone set the frequency.
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
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
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

/// cpufreq control of one core, as one of its sharers. See the module
/// documentation.
///
/// `apply` and `restore` take `&self`, so one instance can be shared
/// (`Arc<CpuFreq>`) between the worker that applies hints and the code that
/// owns the worker. Hints for one core should come from one thread at a time;
/// concurrent callers cannot corrupt anything but may write redundantly.
#[derive(Debug)]
pub struct CpuFreq {
    /// The core, `None` for [`CpuFreq::unavailable`].
    cpu: Option<usize>,
    availability: Availability,
    /// The core's state, shared by every sharer; `None` when unavailable.
    state: Option<Arc<CpuState>>,
    /// This sharer's vote in `state.votes`.
    slot: usize,
    /// True for the core manager's: its hints are written, the others' not.
    owner: bool,
}

/// One core's cpufreq state, shared by its [`CpuFreq`]s; puts the governor
/// back when the last of them goes.
#[derive(Debug)]
struct CpuState {
    /// `<sysfs>/devices/system/cpu/cpu<N>/cpufreq`.
    dir: PathBuf,
    control: Control,
    /// Last frequency written to `scaling_setspeed`, kHz; 0 = none yet.
    last_khz: AtomicU64,
    /// True once the original governor has been put back.
    restored: AtomicBool,
    /// Each sharer's vote, by slot: `Some(true)` after a `Max`, `Some(false)`
    /// after a `Min`, `None` for a sharer that has not voted or is gone.
    votes: Mutex<Vec<Option<bool>>>,
    /// Owners alive (core managers).
    owners: AtomicUsize,
}

/// The live state of each CPU's cpufreq folder, so that every probe of one
/// CPU shares it.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<CpuState>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<PathBuf, Weak<CpuState>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
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

fn take_control(dir: &Path) -> Result<Control, String> {
    if !dir.is_dir() {
        return Err(format!("{} does not exist", dir.display()));
    }
    let governors = read_trimmed(&dir.join("scaling_available_governors"))?;
    if !governors.split_whitespace().any(|g| g == "userspace") {
        return Err(format!(
            "the userspace governor is not available (available: {governors})"
        ));
    }
    let saved_governor = read_trimmed(&dir.join("scaling_governor"))?;
    let min_khz = read_khz(dir, &["scaling_min_freq", "cpuinfo_min_freq"])?;
    let max_khz = read_khz(dir, &["scaling_max_freq", "cpuinfo_max_freq"])?;
    if min_khz > max_khz {
        return Err(format!("minimum {min_khz} kHz above maximum {max_khz} kHz"));
    }
    let saved_setspeed = if saved_governor == "userspace" {
        read_khz(dir, &["scaling_setspeed"]).ok()
    } else {
        None
    };
    let gov = dir.join("scaling_governor");
    fs::write(&gov, "userspace")
        .map_err(|e| format!("cannot switch {} to userspace: {e}", gov.display()))?;
    Ok(Control {
        min_khz,
        max_khz,
        saved_governor,
        saved_setspeed,
    })
}

fn write(path: PathBuf, value: &str) -> Result<(), CpuFreqError> {
    fs::write(&path, value).map_err(|source| CpuFreqError::Write { path, source })
}

impl CpuFreq {
    /// Probe cpufreq for `cpu` under `sysfs_root` (normally `/sys`) and, if
    /// the `userspace` governor can be used, switch the core to it (or join
    /// the CPU's state when another [`CpuFreq`] already did). Its hints are
    /// votes (see the module documentation).
    /// Never fails: a host without usable cpufreq gives an unavailable
    /// [`CpuFreq`] that says why.
    pub fn probe(sysfs_root: &Path, cpu: usize) -> CpuFreq {
        Self::join(sysfs_root, cpu, false)
    }

    /// As [`CpuFreq::probe`], for the core manager: while it exists, its
    /// hints alone are written to the CPU and the other sharers' are not.
    pub fn probe_owner(sysfs_root: &Path, cpu: usize) -> CpuFreq {
        Self::join(sysfs_root, cpu, true)
    }

    fn join(sysfs_root: &Path, cpu: usize, owner: bool) -> CpuFreq {
        let dir = sysfs_root
            .join("devices/system/cpu")
            .join(format!("cpu{cpu}"))
            .join("cpufreq");
        let mut book = registry().lock().unwrap_or_else(|e| e.into_inner());
        let state = match book.get(&dir).and_then(Weak::upgrade) {
            Some(state) => state,
            None => match take_control(&dir) {
                Ok(control) => {
                    let state = Arc::new(CpuState {
                        dir: dir.clone(),
                        control,
                        last_khz: AtomicU64::new(0),
                        restored: AtomicBool::new(false),
                        votes: Mutex::new(Vec::new()),
                        owners: AtomicUsize::new(0),
                    });
                    book.insert(dir, Arc::downgrade(&state));
                    state
                }
                Err(reason) => {
                    return CpuFreq {
                        cpu: Some(cpu),
                        availability: Availability::Unavailable { reason },
                        state: None,
                        slot: 0,
                        owner: false,
                    }
                }
            },
        };
        if owner {
            state.owners.fetch_add(1, Ordering::Relaxed);
        }
        let slot = {
            let mut votes = state.votes.lock().unwrap_or_else(|e| e.into_inner());
            votes.push(None);
            votes.len() - 1
        };
        CpuFreq {
            cpu: Some(cpu),
            availability: Availability::Available,
            state: Some(state),
            slot,
            owner,
        }
    }

    /// A [`CpuFreq`] that does nothing, for a worker with no core of its own
    /// (e.g. not pinned); `reason` is reported by [`CpuFreq::availability`].
    pub fn unavailable(reason: impl Into<String>) -> CpuFreq {
        CpuFreq {
            cpu: None,
            availability: Availability::Unavailable {
                reason: reason.into(),
            },
            state: None,
            slot: 0,
            owner: false,
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
        self.state
            .as_ref()
            .map(|s| (s.control.min_khz, s.control.max_khz))
    }

    /// Carry out `hint`. Returns the frequency written, kHz, or `None` when
    /// nothing was written (hint `Keep`, unchanged value, unavailable, a
    /// vote while an owner exists, or a `Min` while another sharer's last
    /// hint was `Max`).
    pub fn apply(&self, hint: FreqHint) -> Result<Option<u64>, CpuFreqError> {
        let Some(s) = &self.state else {
            return Ok(None);
        };
        if s.restored.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let max = match hint {
            FreqHint::Keep => return Ok(None),
            FreqHint::Min => false,
            FreqHint::Max => true,
        };
        let max = if self.owner {
            max
        } else {
            let mut votes = s.votes.lock().unwrap_or_else(|e| e.into_inner());
            votes[self.slot] = Some(max);
            if s.owners.load(Ordering::Relaxed) > 0 {
                return Ok(None);
            }
            votes.contains(&Some(true))
        };
        let khz = if max {
            s.control.max_khz
        } else {
            s.control.min_khz
        };
        if s.last_khz.load(Ordering::Relaxed) == khz {
            return Ok(None);
        }
        write(s.dir.join("scaling_setspeed"), &khz.to_string())?;
        s.last_khz.store(khz, Ordering::Relaxed);
        Ok(Some(khz))
    }

    /// Put back the governor (and set speed) found by the probe, for every
    /// sharer of the CPU. Idempotent; done when the CPU's last [`CpuFreq`]
    /// goes as well, where errors can only be ignored.
    pub fn restore(&self) -> Result<(), CpuFreqError> {
        match &self.state {
            Some(s) => s.restore(),
            None => Ok(()),
        }
    }
}

impl CpuState {
    fn restore(&self) -> Result<(), CpuFreqError> {
        if self.restored.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let c = &self.control;
        write(self.dir.join("scaling_governor"), &c.saved_governor)?;
        if let Some(khz) = c.saved_setspeed {
            write(self.dir.join("scaling_setspeed"), &khz.to_string())?;
        }
        Ok(())
    }
}

impl Drop for CpuFreq {
    fn drop(&mut self) {
        if let Some(s) = &self.state {
            if let Ok(mut votes) = s.votes.lock() {
                votes[self.slot] = None;
            }
            if self.owner {
                s.owners.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for CpuState {
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

    #[test]
    fn ports_sharing_a_cpu_vote_and_the_highest_demand_wins() {
        let t = fake("ondemand", "userspace");
        let a = CpuFreq::probe(&t.0, 3);
        let b = CpuFreq::probe(&t.0, 3);
        assert_eq!(a.apply(FreqHint::Max).unwrap(), Some(2_800_000));
        // b goes to sleep while a is busy: the CPU stays at the maximum.
        assert_eq!(b.apply(FreqHint::Min).unwrap(), None);
        assert_eq!(file(&t, "scaling_setspeed"), "2800000");
        // Both asleep: the minimum.
        assert_eq!(a.apply(FreqHint::Min).unwrap(), Some(1_200_000));
        assert_eq!(b.apply(FreqHint::Max).unwrap(), Some(2_800_000));
        // The governor is put back once, when the last sharer goes.
        drop(b);
        assert_eq!(file(&t, "scaling_governor"), "userspace");
        assert_eq!(a.apply(FreqHint::Min).unwrap(), Some(1_200_000));
        drop(a);
        assert_eq!(file(&t, "scaling_governor"), "ondemand");
    }

    #[test]
    fn the_core_manager_owns_the_cpu_while_it_exists() {
        let t = fake("ondemand", "userspace");
        let port = CpuFreq::probe(&t.0, 3);
        let manager = CpuFreq::probe_owner(&t.0, 3);
        assert_eq!(manager.apply(FreqHint::Max).unwrap(), Some(2_800_000));
        // An EE-KBP worker going to sleep does not lower the manager's core.
        assert_eq!(port.apply(FreqHint::Min).unwrap(), None);
        assert_eq!(file(&t, "scaling_setspeed"), "2800000");
        assert_eq!(manager.apply(FreqHint::Min).unwrap(), Some(1_200_000));
        assert_eq!(port.apply(FreqHint::Max).unwrap(), None);
        assert_eq!(file(&t, "scaling_setspeed"), "1200000");
        // Without the manager, the port's votes are written again.
        drop(manager);
        assert_eq!(port.apply(FreqHint::Max).unwrap(), Some(2_800_000));
    }
}
