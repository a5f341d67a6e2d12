//! Energy: measured by Intel RAPL where the host exposes it, estimated from
//! CPU time where it does not.
//!
//! [`Rapl::probe`] looks for the package domain
//! `<sysfs>/class/powercap/intel-rapl:0/energy_uj` (a µJ counter that wraps at
//! `max_energy_range_uj`). Reading it usually needs root. Where it is missing
//! (virtual machines, including the project's build machines) the probe
//! returns an unavailable [`Rapl`] that says why, and the daemon falls back
//! to [`PowerModel`].
//!
//! [`PowerModel`] is deliberately simple and stated, not fitted:
//! `energy = static_watts · wall time + watts_per_busy_core · CPU time`.
//! The default charges 1.5 W per fully busy core and no static power: EE-KBP
//! (§5.1) measured 3 W saved by letting its two polling threads (host and
//! guest) sleep instead of busy-polling, i.e. about 1.5 W per polling core on
//! a Xeon at 2.8 GHz. The static part is the same for every policy, so
//! comparisons between policies do not need it; set it to report whole-host
//! figures.

use crate::availability::Availability;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Reading the RAPL counter failed.
#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    /// The counter could not be read or parsed.
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// The RAPL package-0 energy counter. See the module documentation.
#[derive(Debug)]
pub struct Rapl {
    /// `<sysfs>/class/powercap/intel-rapl:0`.
    dir: PathBuf,
    availability: Availability,
    /// Counter range, µJ: the counter wraps to 0 after `max_range_uj`.
    max_range_uj: u64,
    /// Last reading, µJ, for [`Rapl::energy_since_last`].
    last_uj: Option<u64>,
}

fn read_u64(path: &Path) -> Result<u64, PowerError> {
    let s = std::fs::read_to_string(path).map_err(|source| PowerError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    s.trim().parse().map_err(|_| PowerError::Read {
        path: path.to_path_buf(),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{:?} is not a number", s.trim()),
        ),
    })
}

impl Rapl {
    /// Probe RAPL package 0 under `sysfs_root` (normally `/sys`). Never fails:
    /// a host without a readable counter gives an unavailable [`Rapl`].
    pub fn probe(sysfs_root: &Path) -> Rapl {
        let dir = sysfs_root.join("class/powercap/intel-rapl:0");
        let mut r = Rapl {
            dir,
            availability: Availability::Available,
            max_range_uj: u64::MAX,
            last_uj: None,
        };
        if !r.dir.is_dir() {
            r.availability = Availability::Unavailable {
                reason: format!("{} does not exist", r.dir.display()),
            };
            return r;
        }
        if let Err(e) = read_u64(&r.dir.join("energy_uj")) {
            let cause = std::error::Error::source(&e)
                .map(|s| s.to_string())
                .unwrap_or_default();
            r.availability = Availability::Unavailable {
                reason: format!("{e}: {cause}"),
            };
            return r;
        }
        // Without a range file the counter is taken not to wrap.
        if let Ok(range) = read_u64(&r.dir.join("max_energy_range_uj")) {
            r.max_range_uj = range;
        }
        r
    }

    /// Whether the counter can be read, and if not why.
    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// The raw counter, µJ (wraps at `max_energy_range_uj`).
    pub fn energy_uj(&self) -> Result<u64, PowerError> {
        read_u64(&self.dir.join("energy_uj"))
    }

    /// Energy used since the previous call, joules, across one counter wrap;
    /// `None` on the first call (it only takes the reference reading) and when
    /// unavailable.
    pub fn energy_since_last(&mut self) -> Result<Option<f64>, PowerError> {
        if !self.availability.is_available() {
            return Ok(None);
        }
        let now = self.energy_uj()?;
        let Some(prev) = self.last_uj.replace(now) else {
            return Ok(None);
        };
        let delta = if now >= prev {
            now - prev
        } else {
            // Wrapped once: the counter ran from prev up to max_range, then from 0.
            self.max_range_uj.saturating_sub(prev) + now
        };
        Ok(Some(delta as f64 / 1e6))
    }
}

/// A stated CPU-time power model. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerModel {
    /// Power drawn regardless of load, W.
    pub static_watts: f64,
    /// Extra power of one core kept fully busy, W.
    pub watts_per_busy_core: f64,
}

impl Default for PowerModel {
    fn default() -> Self {
        PowerModel {
            static_watts: 0.0,
            watts_per_busy_core: 1.5,
        }
    }
}

impl PowerModel {
    /// Energy, joules, over `wall` time during which the measured threads used
    /// `cpu` CPU time in total (summed over cores).
    pub fn energy_joules(&self, wall: Duration, cpu: Duration) -> f64 {
        self.static_watts * wall.as_secs_f64() + self.watts_per_busy_core * cpu.as_secs_f64()
    }

    /// Average power, W, over `wall` with `cpu` CPU time used; 0 for an empty interval.
    pub fn average_watts(&self, wall: Duration, cpu: Duration) -> f64 {
        if wall.is_zero() {
            0.0
        } else {
            self.energy_joules(wall, cpu) / wall.as_secs_f64()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;

    const PKG: &str = "class/powercap/intel-rapl:0";

    #[test]
    fn reads_deltas_across_a_wrap() {
        let t = TestDir::new("rapl");
        t.write(&format!("{PKG}/energy_uj"), "1000000\n");
        t.write(&format!("{PKG}/max_energy_range_uj"), "262143328850\n");
        let mut r = Rapl::probe(&t.0);
        assert_eq!(r.availability(), &Availability::Available);
        assert_eq!(r.energy_uj().unwrap(), 1_000_000);
        assert_eq!(r.energy_since_last().unwrap(), None);
        t.write(&format!("{PKG}/energy_uj"), "3500000\n");
        assert_eq!(r.energy_since_last().unwrap(), Some(2.5));
        t.write(&format!("{PKG}/energy_uj"), "262143328000\n");
        r.energy_since_last().unwrap();
        // Wraps: 850 µJ to the top, then 150 µJ from 0.
        t.write(&format!("{PKG}/energy_uj"), "150\n");
        assert_eq!(r.energy_since_last().unwrap(), Some(0.001));
    }

    #[test]
    fn unavailable_without_powercap_or_readable_counter() {
        let t = TestDir::new("norapl");
        let mut r = Rapl::probe(&t.0);
        match r.availability() {
            Availability::Unavailable { reason } => {
                assert!(reason.contains("intel-rapl:0 does not exist"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.energy_since_last().unwrap(), None);

        t.write(&format!("{PKG}/energy_uj"), "garbage\n");
        let r = Rapl::probe(&t.0);
        match r.availability() {
            Availability::Unavailable { reason } => {
                assert!(reason.contains("energy_uj"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn power_model_is_linear_in_cpu_time() {
        let m = PowerModel::default();
        // One core busy for 10 s: 15 J; idle costs nothing by default.
        assert_eq!(
            m.energy_joules(Duration::from_secs(10), Duration::from_secs(10)),
            15.0
        );
        assert_eq!(
            m.energy_joules(Duration::from_secs(10), Duration::ZERO),
            0.0
        );
        let m = PowerModel {
            static_watts: 40.0,
            watts_per_busy_core: 2.0,
        };
        assert_eq!(
            m.average_watts(Duration::from_secs(2), Duration::from_secs(3)),
            43.0
        );
        assert_eq!(m.average_watts(Duration::ZERO, Duration::from_secs(1)), 0.0);
    }
}
