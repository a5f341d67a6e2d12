//! A fixed polling interval: NetAP's Algorithm 1 with the search off.
//!
//! NetAP's preliminary examination (its Figure 2) polled at a fixed interval
//! to map throughput against the interval, and its Table 2 judges the search
//! against the best of those intervals; `vadapt sim sweep` does the same with
//! this policy, and NetAP-ML's training grid is that sweep. The daemon runs it
//! too (`fixed-interval`, `fixed-interval:US`, `vadapt retune … interval=US`),
//! so the same sweep can be taken on the real data plane. NetAP itself
//! cannot stand still (`NetapParams` rejects `min_interval_us ==
//! max_interval_us`). Each pass services the rings with vhost-net's per-pass
//! weights; while work is left it polls again, else it sleeps the interval
//! with notifications off and no ring-full safety net.
//!
//! It is an instrument, not a policy for production ports: like the paper's
//! probe it has no ring guard, so a sender that never blocks (a DPDK
//! application) loses whatever its ring cannot hold for one interval.

use crate::error::ConfigError;
use crate::interface::{Budget, Decision, PassReport, Policy, PolicyStatus, MAX_SLEEP};
use crate::interrupt::{BYTE_WEIGHT, PKT_WEIGHT};
use crate::retune::{Retune, RetuneError};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// The fixed-interval policy's one parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FixedIntervalParams {
    /// Sleep between drains, µs (1 to [`MAX_SLEEP`]).
    pub interval_us: u64,
}

impl Default for FixedIntervalParams {
    /// 1 ms: the middle of the NetAP paper's Figure 2 sweep (50–4000 µs),
    /// near the intervals its Table 2 found best; the paper has no default.
    fn default() -> Self {
        FixedIntervalParams { interval_us: 1000 }
    }
}

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

    /// Check `p`: an interval the worker can sleep (1 µs to [`MAX_SLEEP`]).
    pub fn validate(p: &FixedIntervalParams) -> Result<(), ConfigError> {
        let max = MAX_SLEEP.as_micros();
        if p.interval_us == 0 || p.interval_us > max {
            return Err(ConfigError::InvalidParam {
                param: "interval_us",
                reason: format!("{} is not within 1..={max} µs", p.interval_us),
            });
        }
        Ok(())
    }

    /// The policy `p` describes, validated.
    pub fn with(p: FixedIntervalParams) -> Result<Self, ConfigError> {
        Self::validate(&p)?;
        Ok(Self::new(p.interval_us))
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
    /// `interval=US`: the next sleep is the new interval (a sweep on a
    /// running port, as the paper's Figure 2 was taken).
    fn retune(&mut self, r: &Retune) -> Result<(), RetuneError> {
        match *r {
            Retune::Interval { us } => {
                Self::validate(&FixedIntervalParams { interval_us: us })?;
                self.interval = Duration::from_micros(us);
                Ok(())
            }
            _ => Err(r.not_applicable(self.name())),
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

    #[test]
    fn intervals_it_cannot_sleep_are_refused_and_a_retune_moves_the_next_sleep() {
        assert!(FixedInterval::with(FixedIntervalParams { interval_us: 0 }).is_err());
        assert!(FixedInterval::with(FixedIntervalParams {
            interval_us: 100_001
        })
        .is_err());
        let mut p = FixedInterval::with(FixedIntervalParams::default()).unwrap();
        p.retune(&Retune::Interval { us: 50 }).unwrap();
        let r = PassReport::empty(Instant(1), WakeCause::Timer, Duration(1));
        assert_eq!(
            p.on_pass(&r).action,
            Action::Sleep {
                duration: Duration::from_micros(50),
                kick_threshold: None,
            }
        );
        assert_eq!(p.status().interval, Some(Duration::from_micros(50)));
        assert!(p.retune(&Retune::Interval { us: 0 }).is_err());
        assert_eq!(p.status().interval, Some(Duration::from_micros(50)));
        assert!(matches!(
            p.retune(&Retune::Quota { packets: 8 }),
            Err(RetuneError::NotApplicable { .. })
        ));
    }
}
