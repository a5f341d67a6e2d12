//! Interrupt mode: what kernel vhost-net does.
//!
//! Wait for a kick; with notifications off, process until the rings are empty
//! or a weight limit is hit; when empty, re-enable notifications, re-check the
//! rings (the worker does that as part of [`Action::WaitKick`]) and wait again.
//! When the weight limit is hit with work left, vhost-net requeues its work
//! item instead of looping, which lets other work run; here that is one more
//! [`Action::Poll`] pass after the worker has had a chance to yield.
//!
//! Limits are vhost-net's (`drivers/vhost/net.c`): `VHOST_NET_PKT_WEIGHT` = 256
//! packets and `VHOST_NET_WEIGHT` = 0x80000 bytes per handler run.

use crate::interface::{Action, Budget, Decision, PassReport, Policy, PolicyStatus};
use crate::time::Instant;

/// vhost-net's `VHOST_NET_PKT_WEIGHT`.
pub const PKT_WEIGHT: u32 = 256;
/// vhost-net's `VHOST_NET_WEIGHT`, bytes.
pub const BYTE_WEIGHT: u64 = 0x80000;

/// Kick-driven servicing, like kernel vhost-net.
#[derive(Debug, Default, Clone)]
pub struct Interrupt;

impl Policy for Interrupt {
    fn name(&self) -> &'static str {
        "interrupt"
    }

    fn budget(&self) -> Budget {
        Budget {
            packets: PKT_WEIGHT,
            bytes: BYTE_WEIGHT,
        }
    }

    fn start(&mut self, _now: Instant) -> Decision {
        Decision::WAIT_KICK
    }

    fn on_pass(&mut self, pass: &PassReport) -> Decision {
        if pass.more_work {
            Decision {
                action: Action::Poll,
                ..Decision::WAIT_KICK
            }
        } else {
            Decision::WAIT_KICK
        }
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
    fn waits_for_kick_when_empty_and_polls_while_work_left() {
        let mut p = Interrupt;
        assert_eq!(p.start(Instant(0)), Decision::WAIT_KICK);
        let mut r = PassReport::empty(Instant(10), WakeCause::Kick, Duration(5));
        r.packets = 256;
        r.more_work = true;
        assert_eq!(p.on_pass(&r).action, Action::Poll);
        r.more_work = false;
        assert_eq!(p.on_pass(&r), Decision::WAIT_KICK);
    }
}
