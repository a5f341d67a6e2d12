//! Choosing and parameterising vSPACE: mode, cores, period, MARGIN and the
//! threshold explorer's constants, read from the daemon's config
//! (`[vspace]`, with `[vspace.thresholds]`), validated in one place.
//!
//! Defaults are the paper's (§5.1) where it gives one: a 100 ms period,
//! MARGIN 1.1, Reward 1.03, Weight 0.7, exploration after 1000 samples, the
//! memcached SLO of 1 ms. The rest is documented where it is used
//! ([`super::thresholds`] for the initial thresholds, their bounds, AllowVio
//! and stability). The mode defaults to `off` and `total_cores` to 0: vSPACE
//! moves threads between cores, so it runs only when asked to, on cores named
//! by the operator.

use super::core_alloc::{CoreAllocator, VspaceMode};
use super::error::{invalid, VspaceConfigError};
use super::thresholds::ThresholdParams;
use crate::time::Duration;
use serde::{Deserialize, Serialize};

/// vSPACE's configuration. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VspaceConfig {
    /// Off (default), P, E or R (`"off"`, `"p"`, `"e"`, `"r"`).
    pub mode: VspaceMode,
    /// Cores vSPACE splits between the groups (paper: 20). Required, at least
    /// 2, unless `mode` is off; the caller names which CPUs they are.
    pub total_cores: usize,
    /// Length of a period: one measurement and one allocation, ms
    /// (paper: 100).
    pub period_ms: u64,
    /// MARGIN of Algorithm 2: a group shrinks only to
    /// `ceil(MARGIN × TotalUtil / Th)` cores (paper: 1.1).
    pub margin: f64,
    /// Initial thresholds and the explorer's constants (Algorithm 3).
    pub thresholds: ThresholdParams,
}

impl Default for VspaceConfig {
    fn default() -> Self {
        VspaceConfig {
            mode: VspaceMode::Off,
            total_cores: 0,
            period_ms: 100,
            margin: 1.1,
            thresholds: ThresholdParams::default(),
        }
    }
}

impl VspaceConfig {
    /// Longest accepted period, ms (one minute).
    pub const MAX_PERIOD_MS: u64 = 60_000;

    /// The paper's configuration in `mode` on `total_cores` cores.
    pub fn new(mode: VspaceMode, total_cores: usize) -> Self {
        VspaceConfig {
            mode,
            total_cores,
            ..VspaceConfig::default()
        }
    }

    /// Check every parameter; the error names the first bad one as it is
    /// written in config files. With mode `off`, `total_cores` is not
    /// checked (nothing is allocated), the rest is.
    pub fn validate(&self) -> Result<(), VspaceConfigError> {
        if self.mode == VspaceMode::Off {
            CoreAllocator::validate_margin(self.margin)?;
        } else {
            CoreAllocator::validate(self.mode, self.total_cores, self.margin)?;
        }
        if !(1..=Self::MAX_PERIOD_MS).contains(&self.period_ms) {
            return Err(invalid(
                "period_ms",
                format!(
                    "must be 1 to {} (paper: 100), not {}",
                    Self::MAX_PERIOD_MS,
                    self.period_ms
                ),
            ));
        }
        self.thresholds.validate()
    }

    /// The period as a [`Duration`].
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers() {
        let c = VspaceConfig::default();
        assert_eq!(c.mode, VspaceMode::Off);
        assert_eq!(c.period(), Duration::from_millis(100));
        assert_eq!(c.margin, 1.1);
        assert_eq!(c.thresholds.reward, 1.03);
        assert_eq!(c.thresholds.weight, 0.7);
        assert_eq!(c.thresholds.samples_per_round, 1000);
        assert!(c.validate().is_ok(), "off needs no cores");
        assert!(VspaceConfig::new(VspaceMode::Energy, 20).validate().is_ok());
    }

    #[test]
    fn validate_names_the_bad_parameter() {
        let e = VspaceConfig::new(VspaceMode::Energy, 20);
        let cases = [
            (
                VspaceConfig {
                    total_cores: 0,
                    ..e
                },
                "total_cores",
            ),
            (
                VspaceConfig {
                    total_cores: 1,
                    ..e
                },
                "total_cores",
            ),
            (VspaceConfig { margin: 0.5, ..e }, "margin"),
            (
                VspaceConfig {
                    mode: VspaceMode::Off,
                    margin: f64::NAN,
                    ..e
                },
                "margin",
            ),
            (VspaceConfig { period_ms: 0, ..e }, "period_ms"),
            (
                VspaceConfig {
                    thresholds: ThresholdParams {
                        weight: 2.0,
                        ..ThresholdParams::default()
                    },
                    ..e
                },
                "thresholds.weight",
            ),
        ];
        for (c, name) in cases {
            match c.validate() {
                Err(VspaceConfigError::InvalidParam { param, .. }) => assert_eq!(param, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn serde_round_trip_and_partial_input() {
        let c = VspaceConfig::new(VspaceMode::Resource, 8);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<VspaceConfig>(&json).unwrap(), c);

        let c: VspaceConfig = serde_json::from_str(
            r#"{"mode": "e", "total_cores": 6, "thresholds": {"allow_vio": 0.1}}"#,
        )
        .unwrap();
        assert_eq!(c.mode, VspaceMode::Energy);
        assert_eq!(c.total_cores, 6);
        assert_eq!(c.thresholds.allow_vio, 0.1);
        assert_eq!(c.thresholds.reward, 1.03);
        assert_eq!(c.period_ms, 100);

        for bad in [
            r#"{"mode": "e", "cores": 6}"#,
            r#"{"thresholds": {"rewards": 1.1}}"#,
            r#"{"mode": "x"}"#,
        ] {
            assert!(serde_json::from_str::<VspaceConfig>(bad).is_err(), "{bad}");
        }
    }
}
