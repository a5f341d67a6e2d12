//! The fixed-interval sweep probe (NetAP's Figure 2). NOT a policy.
//!
//! NetAP's preliminary examination polled at a fixed interval to map
//! throughput against the interval. NetAP itself cannot do that
//! (`NetapParams` rejects `min_interval_us == max_interval_us`), so the
//! simulator has this probe: service the rings until they are empty (with
//! vhost-net's per-pass weights), then sleep the interval with notifications
//! off — Algorithm 1 of the paper with the search switched off.
//!
//! It belongs in the policy crate as `PolicyConfig::Fixed { interval_us }`
//! (the daemon could then run the same sweep); until then it lives here,
//! used only by sweeps and scenarios that say `probe_fixed_interval_us`.

use vadapt_policy::interrupt::{BYTE_WEIGHT, PKT_WEIGHT};
use vadapt_policy::{Budget, Decision, Duration, Instant, PassReport, Policy, PolicyStatus};

/// Sleep a fixed interval between drains.
#[derive(Debug, Clone)]
pub struct FixedInterval {
    interval: Duration,
}

impl FixedInterval {
    /// A probe sleeping `interval_us` µs.
    pub fn new(interval_us: u64) -> Self {
        FixedInterval {
            interval: Duration::from_micros(interval_us),
        }
    }
}

impl Policy for FixedInterval {
    fn name(&self) -> &'static str {
        "fixed-interval-probe"
    }
    fn budget(&self) -> Budget {
        Budget {
            packets: PKT_WEIGHT,
            bytes: BYTE_WEIGHT,
        }
    }
    fn start(&mut self, _now: Instant) -> Decision {
        Decision::sleep(self.interval, None)
    }
    fn on_pass(&mut self, pass: &PassReport) -> Decision {
        if pass.more_work {
            Decision::POLL
        } else {
            Decision::sleep(self.interval, None)
        }
    }
    fn status(&self) -> PolicyStatus {
        PolicyStatus {
            interval: Some(self.interval),
            settled: true,
            ..PolicyStatus::default()
        }
    }
}
