//! Busy polling: what DPDK's vhost PMD does. Never sleeps, never asks for a
//! kick; guest notifications stay off for good.
//!
//! The budget is DPDK's usual burst of 32 packets per queue per pass
//! (`MAX_PKT_BURST` in testpmd), so queues are served round-robin in small
//! batches.

use crate::interface::{Budget, Decision, PassReport, Policy, PolicyStatus};
use crate::time::Instant;

/// Packets per queue per pass, DPDK's default burst.
pub const BURST: u32 = 32;

/// Poll forever.
#[derive(Debug, Default, Clone)]
pub struct BusyPoll;

impl Policy for BusyPoll {
    fn name(&self) -> &'static str {
        "busy-poll"
    }

    fn budget(&self) -> Budget {
        Budget {
            packets: BURST,
            bytes: u64::MAX,
        }
    }

    fn start(&mut self, _now: Instant) -> Decision {
        Decision::POLL
    }

    fn on_pass(&mut self, _pass: &PassReport) -> Decision {
        Decision::POLL
    }

    fn status(&self) -> PolicyStatus {
        PolicyStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interface::WakeCause;
    use crate::time::Duration;

    #[test]
    fn always_polls() {
        let mut p = BusyPoll;
        assert_eq!(p.start(Instant(0)), Decision::POLL);
        let r = PassReport::empty(Instant(1), WakeCause::Immediate, Duration::ZERO);
        assert_eq!(p.on_pass(&r), Decision::POLL);
    }
}
