//! The vSPACE manager: one call per period turns what was measured into the
//! next core allocation (vSPACE-Host's loop, paper §4.1 and §4.4).
//!
//! Each period (paper: 100 ms) the caller measures, under the allocation in
//! force, the CPU time of the vCPU group and of the NQ group ([`GroupLoad`],
//! in cores) and, when it has one, the period's P95 latency. The manager:
//!
//! 1. turns them into an exploration sample (each group's utilisation per core
//!    of the allocation in force, with the P95) and hands it to the
//!    [`ThresholdExplorer`], which runs a round once it has enough
//!    (Algorithm 3);
//! 2. asks the [`CoreAllocator`] for the next allocation from the measured
//!    load and the thresholds as they stand after step 1 (Algorithm 1 or 2).
//!
//! A period without a latency sample still allocates; it only adds no sample
//! (Algorithm 3 line 1: "if receives P95, …").
//!
//! A load with a NaN or infinite utilisation (a broken measurement) is not
//! acted on: the allocation in force stays for another period and no sample
//! is taken ([`PeriodOutcome::load_rejected`]). A negative utilisation (clock
//! jitter between two CPU-time readings) reads as 0.

use super::config::VspaceConfig;
use super::core_alloc::{CoreAllocation, CoreAllocator, GroupLoad};
use super::error::VspaceConfigError;
use super::thresholds::{ExplorationSample, SampleOutcome, ThresholdExplorer, Thresholds};
use crate::time::Duration;

/// What the caller measured over one period, under the allocation in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeriodMeasurement {
    /// CPU time each group used, in cores.
    pub load: GroupLoad,
    /// P95 latency of the latency-critical workload over the period, if the
    /// caller has one.
    pub p95: Option<Duration>,
}

/// What one period decided. The manager has applied it; the caller moves
/// threads to match `allocation` (when `changed`) and logs the rest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeriodOutcome {
    /// The allocation for the next period.
    pub allocation: CoreAllocation,
    /// True if it differs from the previous period's.
    pub changed: bool,
    /// True if the load was not finite and the allocation was kept.
    pub load_rejected: bool,
    /// What the explorer did with this period's sample; `None` when there was
    /// none (no P95, or the load was rejected). Carries the exploration round
    /// when one ran ([`SampleOutcome::Explored`]).
    pub sample: Option<SampleOutcome>,
}

/// vSPACE's per-period loop body. See the module documentation.
#[derive(Clone, Debug)]
pub struct VspaceManager {
    allocator: CoreAllocator,
    explorer: ThresholdExplorer,
    current: CoreAllocation,
    period: Duration,
}

impl VspaceManager {
    /// A manager for `config`, starting from
    /// [`CoreAllocator::initial`]. Refuses an invalid configuration and mode
    /// `off` (the caller runs no loop then).
    pub fn new(config: &VspaceConfig) -> Result<Self, VspaceConfigError> {
        config.validate()?;
        let allocator = CoreAllocator::new(config.mode, config.total_cores, config.margin)?;
        Ok(VspaceManager {
            current: allocator.initial(),
            explorer: ThresholdExplorer::new(config.thresholds)?,
            allocator,
            period: config.period(),
        })
    }

    /// The allocation in force.
    pub fn allocation(&self) -> CoreAllocation {
        self.current
    }

    /// The thresholds in force.
    pub fn thresholds(&self) -> Thresholds {
        self.explorer.thresholds()
    }

    /// The allocator (mode, cores, MARGIN).
    pub fn allocator(&self) -> &CoreAllocator {
        &self.allocator
    }

    /// The threshold explorer.
    pub fn explorer(&self) -> &ThresholdExplorer {
        &self.explorer
    }

    /// The threshold explorer, to [`resume`](ThresholdExplorer::resume) or
    /// [`explore`](ThresholdExplorer::explore) it early.
    pub fn explorer_mut(&mut self) -> &mut ThresholdExplorer {
        &mut self.explorer
    }

    /// How often the caller should call [`VspaceManager::on_period`].
    pub fn period(&self) -> Duration {
        self.period
    }

    /// One period: sample, maybe explore, allocate. See the module
    /// documentation.
    pub fn on_period(&mut self, measured: PeriodMeasurement) -> PeriodOutcome {
        if !measured.load.is_finite() {
            return PeriodOutcome {
                allocation: self.current,
                changed: false,
                load_rejected: true,
                sample: None,
            };
        }
        let load = GroupLoad {
            vcpu_util: measured.load.vcpu_util.max(0.0),
            nq_util: measured.load.nq_util.max(0.0),
        };
        // Both groups have at least one core in any allocation the
        // allocator returns, so the divisions are by 1 or more.
        let sample = measured.p95.map(|p95| {
            self.explorer.record(ExplorationSample {
                p95,
                vcpu_util: load.vcpu_util / self.current.vcpu_cores as f64,
                nq_util: load.nq_util / self.current.nq_cores as f64,
            })
        });
        let next = self
            .allocator
            .next(&self.current, load, self.explorer.thresholds());
        let changed = next != self.current;
        self.current = next;
        PeriodOutcome {
            allocation: next,
            changed,
            load_rejected: false,
            sample,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vspace::core_alloc::VspaceMode;
    use crate::vspace::thresholds::{RoundOutcome, ThresholdParams};

    fn measured(vcpu_util: f64, nq_util: f64, p95_us: Option<u64>) -> PeriodMeasurement {
        PeriodMeasurement {
            load: GroupLoad { vcpu_util, nq_util },
            p95: p95_us.map(Duration::from_micros),
        }
    }

    #[test]
    fn refuses_off_and_bad_configs() {
        assert!(VspaceManager::new(&VspaceConfig::default()).is_err());
        assert!(VspaceManager::new(&VspaceConfig::new(VspaceMode::Energy, 1)).is_err());
        let m = VspaceManager::new(&VspaceConfig::new(VspaceMode::Energy, 20)).unwrap();
        assert_eq!(m.period(), Duration::from_millis(100));
        assert_eq!(m.allocation(), m.allocator().initial());
    }

    /// A vSPACE-E run: starts on every core, shrinks through the margin,
    /// grows at once, and holds on a broken measurement.
    #[test]
    fn energy_mode_run() {
        let mut m = VspaceManager::new(&VspaceConfig::new(VspaceMode::Energy, 20)).unwrap();
        assert_eq!(
            (m.allocation().vcpu_cores, m.allocation().nq_cores),
            (10, 10)
        );
        // Th 0.7: ReqCore ceil(2.8 / 0.7) = 4 and ceil(0.7 / 0.7) = 1, both
        // below 10: ceil(1.1 × 4) = 5 and ceil(1.1 × 1) = 2.
        let o = m.on_period(measured(2.8, 0.7, None));
        assert!(o.changed && !o.load_rejected && o.sample.is_none());
        assert_eq!(
            (
                o.allocation.vcpu_cores,
                o.allocation.nq_cores,
                o.allocation.idle_cores
            ),
            (5, 2, 13)
        );
        // Same load: settled.
        assert!(!m.on_period(measured(2.8, 0.7, None)).changed);
        // Load up: ceil(4.9 / 0.7) = 7 at once.
        let o = m.on_period(measured(4.9, 0.7, None));
        assert_eq!(o.allocation.vcpu_cores, 7);
        // Broken measurement: kept.
        let o = m.on_period(measured(f64::NAN, 0.7, Some(100)));
        assert!(o.load_rejected && !o.changed && o.sample.is_none());
        assert_eq!(o.allocation.vcpu_cores, 7);
        // Negative reads as idle.
        let o = m.on_period(measured(-0.1, -0.1, None));
        assert_eq!((o.allocation.vcpu_cores, o.allocation.nq_cores), (1, 1));
    }

    /// Samples carry per-core utilisation of the allocation in force; a
    /// round's new thresholds already shape the same period's allocation.
    #[test]
    fn samples_feed_the_explorer_and_rounds_reshape_the_allocation() {
        let config = VspaceConfig {
            thresholds: ThresholdParams {
                samples_per_round: 2,
                allow_vio: 0.0,
                ..ThresholdParams::default()
            },
            ..VspaceConfig::new(VspaceMode::Energy, 20)
        };
        let mut m = VspaceManager::new(&config).unwrap();
        // Under 10 + 10 cores: per-core 4.0 / 10 = 0.4 and 2.0 / 10 = 0.2.
        let o = m.on_period(measured(4.0, 2.0, Some(5000)));
        assert_eq!(o.sample, Some(SampleOutcome::Collected));
        // That period allocated ceil(1.1 × 4 / 0.7) = 7 and
        // ceil(1.1 × 2 / 0.7) = 4. Second sample, under 7 + 4: 4.2 / 7 = 0.6
        // and 2.0 / 4 = 0.5, both violating.
        assert_eq!((o.allocation.vcpu_cores, o.allocation.nq_cores), (7, 4));
        let o = m.on_period(measured(4.2, 2.0, Some(5000)));
        let Some(SampleOutcome::Explored(r)) = o.sample else {
            panic!("{o:?}");
        };
        // decCount = 2. S_vCPU = .6, .4; S_NQ = .5, .2.
        // Step 1: diff .7 − .6 = .1 vs .7 − .5 = .2: TH'_vCPU = .6 (sample 2 leaves).
        // Step 2: diff .6 − .4 = .2 vs .7 − .2 = .5: TH'_vCPU = .4.
        // TH_vCPU = .3 × .7 + .7 × .4 = .49; TH_NQ stays .7.
        assert_eq!(r.outcome, RoundOutcome::Adjusted { steps: 2 });
        assert!((r.after.vcpu - 0.49).abs() < 1e-12, "{r:?}");
        assert!((r.after.nq - 0.7).abs() < 1e-12, "{r:?}");
        assert_eq!(m.thresholds(), r.after);
        // This period's allocation already uses 0.49: ceil(4.2 / 0.49) = 9.
        assert_eq!(o.allocation.vcpu_cores, 9);
    }

    #[test]
    fn resource_mode_pauses_best_effort_vms_when_no_core_is_spare() {
        let mut m = VspaceManager::new(&VspaceConfig::new(VspaceMode::Resource, 8)).unwrap();
        // From 4 + 4: ReqCore 1.4 / 0.7 = 2 and 0.7 / 0.7 = 1, shrinking
        // through the margin to ceil(2.2) = 3 and ceil(1.1) = 2.
        let o = m.on_period(measured(1.4, 0.7, None));
        assert_eq!((o.allocation.vcpu_cores, o.allocation.nq_cores), (3, 2));
        assert_eq!(o.allocation.be_cores, 3);
        assert!(!o.allocation.pause_be());
        let o = m.on_period(measured(8.0, 8.0, None));
        assert_eq!(o.allocation.be_cores, 0);
        assert!(o.allocation.pause_be());
    }
}
