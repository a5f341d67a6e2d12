//! A port's policers as its worker holds them: built from the port's
//! [`PortLimits`], and changed in place when they change at run time.

use super::ingress_policer::IngressPolicer;
use super::token_bucket::TokenBucket;
use crate::config::{PortLimits, RateLimit};
use vadapt_policy::Instant;

/// The ingress policer and the storm-control bucket of one port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortPolicers {
    /// The limits they were built for.
    limits: PortLimits,
    /// Bits and frames a second, if limited.
    ingress: Option<IngressPolicer>,
    /// Floods a second, if limited (one token a frame the switch would flood).
    storm: Option<TokenBucket>,
}

impl PortPolicers {
    /// The policers `limits` ask for, full as of `now`.
    pub fn new(limits: PortLimits, now: Instant) -> Self {
        PortPolicers {
            limits,
            ingress: IngressPolicer::new(&limits, now),
            storm: storm_bucket(&limits, now),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> PortLimits {
        self.limits
    }

    /// True when something is limited: the worker then reads its clock.
    pub fn is_active(&self) -> bool {
        self.ingress.is_some() || self.storm.is_some()
    }

    /// Changes to `limits` as of `now`. A bucket whose rate and burst stay
    /// keeps its tokens; one that changes starts full, as OVS's policer does
    /// when its settings change (`netdev_dpdk_set_policing` builds a new meter).
    pub fn update(&mut self, limits: PortLimits, now: Instant) {
        if limits == self.limits {
            return;
        }
        if (limits.bits(), limits.packets()) != (self.limits.bits(), self.limits.packets()) {
            self.ingress = IngressPolicer::new(&limits, now);
        }
        if limits.storm() != self.limits.storm() {
            self.storm = storm_bucket(&limits, now);
        }
        self.limits = limits;
    }

    /// Counts the tokens earned up to `now` (once a pass).
    pub fn refill(&mut self, now: Instant) {
        if let Some(p) = &mut self.ingress {
            p.refill(now);
        }
        if let Some(s) = &mut self.storm {
            s.refill(now);
        }
    }

    /// Whether a frame the switch would flood may be flooded: a token
    /// taken from the storm bucket, or no storm control.
    pub fn admit_flood(&mut self) -> bool {
        self.storm.as_mut().is_none_or(|s| s.take(1))
    }

    /// The ingress policer and the storm bucket, each if limited, to be
    /// used at once by the ring service and the switch's flood gate.
    pub fn parts(&mut self) -> (Option<&mut IngressPolicer>, Option<&mut TokenBucket>) {
        (self.ingress.as_mut(), self.storm.as_mut())
    }
}

/// The storm-control bucket `limits` ask for, full as of `now`.
fn storm_bucket(limits: &PortLimits, now: Instant) -> Option<TokenBucket> {
    let r: RateLimit = limits.storm()?;
    Some(TokenBucket::new(r.per_second, r.burst, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_bucket_keeps_its_tokens_and_a_changed_one_starts_full() {
        let limits = PortLimits {
            ingress_policing_kpkts_rate: 1,
            storm_control_pps: 10,
            ..PortLimits::NONE
        };
        let mut p = PortPolicers::new(limits, Instant(0));
        assert!(p.is_active());
        let (ingress, storm) = p.parts();
        assert!(ingress.unwrap().admit(60));
        assert!(storm.unwrap().take(10));
        // The storm limit changes: its bucket starts full; the policer keeps
        // the frame it charged.
        p.update(
            PortLimits {
                storm_control_pps: 20,
                ..limits
            },
            Instant(0),
        );
        let (ingress, storm) = p.parts();
        assert_eq!(ingress.unwrap().frames().unwrap().tokens(), 15_999);
        assert_eq!(storm.unwrap().tokens(), 20);
        // Every limit removed: nothing active, nothing to refill.
        p.update(PortLimits::NONE, Instant(5));
        assert!(!p.is_active());
        assert_eq!(p, PortPolicers::default());
        assert_eq!(p.limits(), PortLimits::NONE);
    }
}
