//! Grow/shrink adaptive polling: QEMU's AioContext poll window.
//!
//! QEMU's event loop (`util/aio-posix.c`, `aio_poll` and
//! `adjust_polling_time`; tuned per IOThread with the `poll-max-ns`,
//! `poll-grow` and `poll-shrink` properties, `qapi/qom.json`) busy-polls its
//! handlers for up to `poll_ns` before it blocks in epoll/io_uring. After each
//! `aio_poll` it measures `block_ns`, the time from the start of the call
//! (polling included) until an event ended the wait, and adapts the window:
//!
//! ```text
//!   block_ns <= poll_ns          sweet spot: no change
//!   block_ns >  poll_max_ns      shrink: poll_ns = poll_shrink ? poll_ns / poll_shrink : 0
//!   poll_ns < poll_max_ns && block_ns < poll_max_ns
//!                                grow:   poll_ns = poll_ns ? poll_ns * poll_grow : 4000 ns,
//!                                        capped at poll_max_ns (poll_grow 0 means 2)
//! ```
//!
//! Here the same rules drive a queue worker:
//!
//! - After a pass that moved packets the worker polls ([`Decision::POLL`])
//!   while less than `poll_ns` has passed since that pass; then it re-enables
//!   notifications and waits for a kick ([`Decision::WAIT_KICK`]). With
//!   `poll_ns` = 0 it waits at once, like [`crate::interrupt::Interrupt`].
//! - A pass that found work during polling is QEMU's sweet spot: no change.
//! - When a wait ends (kick, re-check, timeout), `block_ns` = polling time
//!   before the wait + [`PassReport::waited`], as QEMU measures from the start
//!   of `aio_poll`, and the window is adjusted by the rules above.
//! - A pass that leaves work behind (`more_work`) polls again at once.
//!
//! QEMU 7.2 (installed on these machines) adapts one window per AioContext;
//! newer QEMU keeps one per handler. A worker here is one context, so there is
//! one window per worker. The grow start is a parameter (`poll_start_ns`,
//! default QEMU's 4000 ns).
//!
//! The budget is vhost-net's weight ([`PKT_WEIGHT`] packets, [`BYTE_WEIGHT`]
//! bytes per queue per pass), as QEMU's own virtio handlers process a ring
//! until it is empty and the weight keeps one busy queue from starving the
//! worker's others.

use crate::error::ConfigError;
use crate::interface::{Budget, Decision, PassReport, Policy, PolicyStatus, WakeCause, MAX_SLEEP};
use crate::interrupt::{BYTE_WEIGHT, PKT_WEIGHT};
use crate::retune::{self, Retune, RetuneError};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// Grow/shrink parameters (QEMU AioContext adaptive polling). Defaults are QEMU's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrowShrinkParams {
    /// Cap of the poll window, ns (QEMU `poll-max-ns`, default 32768 ≈ 32 µs).
    pub poll_max_ns: u64,
    /// First non-zero window when growing from 0, ns (QEMU hard-codes 4000,
    /// "start polling at 4 microseconds", in `adjust_polling_time`).
    pub poll_start_ns: u64,
    /// Growth factor (QEMU `poll-grow`, 0 = default 2).
    pub poll_grow: u64,
    /// Shrink divisor (QEMU `poll-shrink`, 0 = reset to 0).
    pub poll_shrink: u64,
}

impl Default for GrowShrinkParams {
    fn default() -> Self {
        GrowShrinkParams {
            poll_max_ns: 32_768,
            poll_start_ns: 4_000,
            poll_grow: 2,
            poll_shrink: 0,
        }
    }
}

/// Grow/shrink adaptive poll window. See the module documentation.
#[derive(Debug, Clone)]
pub struct GrowShrink {
    params: GrowShrinkParams,
    /// Current poll window, ns.
    poll_ns: u64,
    /// End of the last pass that moved packets: polling counts from here.
    idle_since: Instant,
    /// Polling time spent before the current wait began, ns.
    polled_before_wait_ns: u64,
    /// Times the window grew.
    grows: u64,
    /// Times the window shrank.
    shrinks: u64,
}

fn invalid(param: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidParam {
        param,
        reason: reason.into(),
    }
}

impl GrowShrink {
    /// Check every parameter; the error names the first bad one.
    ///
    /// `poll_max_ns` = 0 is accepted and disables polling (QEMU's meaning).
    /// `poll_grow` 0 means 2 and `poll_shrink` 0 means "reset to 0", as in
    /// QEMU; 1 for either freezes that direction, also as in QEMU.
    pub fn validate(p: &GrowShrinkParams) -> Result<(), ConfigError> {
        if p.poll_max_ns > MAX_SLEEP.as_nanos() {
            return Err(invalid(
                "poll_max_ns",
                format!(
                    "must be at most {} (polling longer than a worker may sleep makes no sense), got {}",
                    MAX_SLEEP.as_nanos(),
                    p.poll_max_ns
                ),
            ));
        }
        if p.poll_start_ns == 0 {
            return Err(invalid(
                "poll_start_ns",
                "must be at least 1 (a window grown from 0 to 0 never grows)",
            ));
        }
        Ok(())
    }

    /// A grow/shrink policy; the window starts at 0, as in QEMU.
    pub fn new(params: GrowShrinkParams) -> Result<Self, ConfigError> {
        Self::validate(&params)?;
        Ok(GrowShrink {
            params,
            poll_ns: 0,
            idle_since: Instant(0),
            polled_before_wait_ns: 0,
            grows: 0,
            shrinks: 0,
        })
    }

    /// Current poll window.
    pub fn poll_window(&self) -> Duration {
        Duration::from_nanos(self.poll_ns)
    }

    /// Times the window grew and shrank since the policy was built.
    pub fn adjustments(&self) -> (u64, u64) {
        (self.grows, self.shrinks)
    }

    /// QEMU's `adjust_polling_time`, line by line.
    fn adjust(&mut self, block_ns: u64) {
        let p = &self.params;
        if block_ns <= self.poll_ns {
            // Sweet spot.
        } else if block_ns > p.poll_max_ns {
            // poll_shrink 0 resets the window to 0.
            self.poll_ns = self.poll_ns.checked_div(p.poll_shrink).unwrap_or(0);
            self.shrinks += 1;
        } else if self.poll_ns < p.poll_max_ns && block_ns < p.poll_max_ns {
            let grow = if p.poll_grow == 0 { 2 } else { p.poll_grow };
            self.poll_ns = if self.poll_ns != 0 {
                self.poll_ns.saturating_mul(grow)
            } else {
                p.poll_start_ns
            };
            self.poll_ns = self.poll_ns.min(p.poll_max_ns);
            self.grows += 1;
        }
    }
}

impl Policy for GrowShrink {
    fn name(&self) -> &'static str {
        "growshrink"
    }

    fn budget(&self) -> Budget {
        Budget {
            packets: PKT_WEIGHT,
            bytes: BYTE_WEIGHT,
        }
    }

    fn start(&mut self, now: Instant) -> Decision {
        self.idle_since = now;
        self.polled_before_wait_ns = 0;
        Decision::WAIT_KICK
    }

    fn on_pass(&mut self, pass: &PassReport) -> Decision {
        match pass.wake {
            WakeCause::Kick | WakeCause::Recheck | WakeCause::Timeout => {
                self.adjust(
                    self.polled_before_wait_ns
                        .saturating_add(pass.waited.as_nanos()),
                );
            }
            // Polling (or a timer we never ask for): no adjustment.
            WakeCause::Immediate | WakeCause::Timer => {}
        }
        if pass.packets > 0 || pass.bytes > 0 || pass.more_work {
            self.idle_since = pass.now;
        }
        if pass.more_work {
            return Decision::POLL;
        }
        let polled = pass.now.saturating_since(self.idle_since).as_nanos();
        if polled < self.poll_ns {
            Decision::POLL
        } else {
            self.polled_before_wait_ns = polled;
            Decision::WAIT_KICK
        }
    }

    fn status(&self) -> PolicyStatus {
        PolicyStatus {
            interval: Some(self.poll_window()),
            round: None,
            settled: false,
            restarts: 0,
            ..PolicyStatus::default()
        }
    }

    fn retune(&mut self, r: &Retune) -> Result<(), RetuneError> {
        match *r {
            Retune::PollMax { ns } => {
                let new = GrowShrinkParams {
                    poll_max_ns: ns,
                    ..self.params
                };
                retune::apply(&mut self.params, new, Self::validate)?;
                // QEMU clamps the window when poll-max-ns is lowered.
                self.poll_ns = self.poll_ns.min(ns);
                Ok(())
            }
            _ => Err(r.not_applicable(self.name())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qemu() -> GrowShrink {
        GrowShrink::new(GrowShrinkParams::default()).unwrap()
    }

    fn woken(now: u64, waited: u64, packets: u64) -> PassReport {
        PassReport {
            packets,
            bytes: packets * 64,
            ..PassReport::empty(Instant(now), WakeCause::Kick, Duration(waited))
        }
    }

    fn polled(now: u64, packets: u64) -> PassReport {
        PassReport {
            packets,
            bytes: packets * 64,
            ..PassReport::empty(Instant(now), WakeCause::Immediate, Duration::ZERO)
        }
    }

    #[test]
    fn starts_without_polling_and_grows_on_short_blocks() {
        let mut p = qemu();
        assert_eq!(p.start(Instant(0)), Decision::WAIT_KICK);
        // A kick 1 µs later: block 1000 ns < poll_max: grow from 0 to 4000.
        assert_eq!(p.on_pass(&woken(2_000, 1_000, 1)), Decision::POLL);
        assert_eq!(p.poll_window(), Duration(4_000));
        // Polling inside the window finds nothing yet.
        assert_eq!(p.on_pass(&polled(5_000, 0)), Decision::POLL);
        // Window over (3000 + 1000 ns polled): wait.
        assert_eq!(p.on_pass(&polled(6_000, 0)), Decision::WAIT_KICK);
        // Kick after 10 µs blocked: block = 4000 polled + 10000 > 4000, < 32768: double.
        p.on_pass(&woken(17_000, 10_000, 1));
        assert_eq!(p.poll_window(), Duration(8_000));
        assert_eq!(p.adjustments(), (2, 0));
    }

    #[test]
    fn work_found_while_polling_is_the_sweet_spot() {
        let mut p = qemu();
        p.start(Instant(0));
        p.on_pass(&woken(1_000, 500, 1));
        assert_eq!(p.poll_window(), Duration(4_000));
        for t in (2_000..100_000).step_by(1_000) {
            assert_eq!(p.on_pass(&polled(t, 1)), Decision::POLL);
        }
        assert_eq!(p.poll_window(), Duration(4_000));
        assert_eq!(p.adjustments(), (1, 0));
    }

    #[test]
    fn grows_to_the_cap_and_shrinks_to_zero_on_a_long_block() {
        let mut p = qemu();
        p.start(Instant(0));
        let mut now = 0;
        for expected in [4_000, 8_000, 16_000, 32_000, 32_768, 0] {
            // Poll the window out, then a kick after 100 ns.
            now += 100;
            let mut d = p.on_pass(&woken(now, 100, 1));
            while d == Decision::POLL {
                now += 1_000;
                d = p.on_pass(&polled(now, 0));
            }
            assert_eq!(d, Decision::WAIT_KICK);
            assert_eq!(p.poll_window(), Duration(expected), "at {now}");
        }
        // At the cap any wait makes block_ns exceed poll_max_ns (polling alone
        // took poll_max_ns), so the sixth kick reset the window: QEMU
        // oscillates the same way.
        assert_eq!(p.adjustments(), (5, 1));
        // A block of 1 ms with the window at 0: shrink again, stays 0.
        p.on_pass(&woken(now + 1_000_000, 1_000_000, 1));
        assert_eq!(p.poll_window(), Duration::ZERO);
        assert_eq!(p.adjustments(), (5, 2));
        // And a short one grows it from 0 again.
        p.on_pass(&woken(now + 1_000_200, 100, 1));
        assert_eq!(p.poll_window(), Duration(4_000));
    }

    #[test]
    fn qemu_rules_exactly() {
        // Table of (poll_ns before, block_ns, poll_shrink, poll_grow, poll_ns after).
        let cases = [
            (0, 0, 0, 0, 0),                // sweet spot at 0
            (0, 1, 0, 0, 4_000),            // grow from 0
            (4_000, 4_000, 0, 0, 4_000),    // block == poll: sweet spot
            (4_000, 4_001, 0, 0, 8_000),    // grow x2 (poll_grow 0 means 2)
            (4_000, 4_001, 0, 3, 12_000),   // grow x3
            (30_000, 31_000, 0, 2, 32_768), // capped
            (8_000, 32_768, 0, 2, 8_000),   // block == max: neither
            (8_000, 32_769, 0, 2, 0),       // shrink, poll_shrink 0: reset
            (8_000, 32_769, 4, 2, 2_000),   // shrink /4
            (32_768, 32_767, 0, 2, 32_768), // already at max: no grow
        ];
        for (before, block, shrink, grow, after) in cases {
            let mut p = GrowShrink::new(GrowShrinkParams {
                poll_shrink: shrink,
                poll_grow: grow,
                ..GrowShrinkParams::default()
            })
            .unwrap();
            p.poll_ns = before;
            p.adjust(block);
            assert_eq!(
                p.poll_ns, after,
                "before {before} block {block} shrink {shrink} grow {grow}"
            );
        }
    }

    #[test]
    fn recheck_after_a_full_window_grows() {
        // Work arrived just after polling stopped: block = window + a little.
        let mut p = qemu();
        p.start(Instant(0));
        p.on_pass(&woken(100, 100, 1));
        assert_eq!(p.poll_window(), Duration(4_000));
        assert_eq!(p.on_pass(&polled(5_000, 0)), Decision::WAIT_KICK);
        let mut r = woken(5_100, 0, 1);
        r.wake = WakeCause::Recheck;
        p.on_pass(&r);
        assert_eq!(p.poll_window(), Duration(8_000));
    }

    #[test]
    fn more_work_polls_again_even_with_no_window() {
        let mut p = GrowShrink::new(GrowShrinkParams {
            poll_max_ns: 0,
            ..GrowShrinkParams::default()
        })
        .unwrap();
        p.start(Instant(0));
        let mut r = woken(10, 5, 256);
        r.more_work = true;
        assert_eq!(p.on_pass(&r), Decision::POLL);
        r.more_work = false;
        assert_eq!(p.on_pass(&r), Decision::WAIT_KICK);
        // poll_max 0: any block is "too long", the window stays 0.
        assert_eq!(p.poll_window(), Duration::ZERO);
    }

    #[test]
    fn validate() {
        let d = GrowShrinkParams::default();
        assert_eq!(GrowShrink::validate(&d), Ok(()));
        for (p, name) in [
            (
                GrowShrinkParams {
                    poll_max_ns: 200_000_000,
                    ..d
                },
                "poll_max_ns",
            ),
            (
                GrowShrinkParams {
                    poll_start_ns: 0,
                    ..d
                },
                "poll_start_ns",
            ),
        ] {
            match GrowShrink::new(p) {
                Err(ConfigError::InvalidParam { param, .. }) => assert_eq!(param, name),
                other => panic!("expected error on {name}, got {other:?}"),
            }
        }
    }
}
