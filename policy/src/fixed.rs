//! A fixed polling interval: NetAP's Algorithm 1 with the search off.
//!
//! NetAP's preliminary examination (its Figure 2) polled at a fixed interval
//! to map throughput against the interval; `vadapt sim sweep` does the same
//! with this policy, and NetAP-ML's training grid is that sweep. NetAP itself
//! cannot stand still (`NetapParams` rejects `min_interval_us ==
//! max_interval_us`). Each pass services the rings with vhost-net's per-pass
//! weights; while work is left it polls again, else it sleeps the interval
//! with notifications off and no ring-full safety net.

use crate::interface::{Budget, Decision, PassReport, Policy, PolicyStatus};
use crate::interrupt::{BYTE_WEIGHT, PKT_WEIGHT};
use crate::time::{Duration, Instant};

/// Sleep a fixed interval between drains.
#[derive(Debug, Clone)]
pub struct FixedInterval {
    interval: Duration,
}

impl FixedInterval {
    /// A policy sleeping `interval_us` µs between drains.
    pub fn new(interval_us: u64) -> Self {
        FixedInterval {
            interval: Duration::from_micros(interval_us),
        }
    }
}

impl Policy for FixedInterval {
    fn name(&self) -> &'static str {
        "fixed-interval"
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interface::{Action, WakeCause};

    #[test]
    fn drains_then_sleeps_the_interval() {
        let mut p = FixedInterval::new(250);
        let sleep = Action::Sleep {
            duration: Duration::from_micros(250),
            kick_threshold: None,
        };
        assert_eq!(p.start(Instant(0)).action, sleep);
        let mut r = PassReport::empty(Instant(1), WakeCause::Timer, Duration(1));
        r.more_work = true;
        assert_eq!(p.on_pass(&r).action, Action::Poll);
        r.more_work = false;
        assert_eq!(p.on_pass(&r).action, sleep);
        assert!(p.status().settled);
    }
}
