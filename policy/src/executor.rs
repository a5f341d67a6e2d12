//! The one executor of policy decisions, shared by the daemon's queue worker
//! and the simulator's modelled worker.
//!
//! A policy answers *what* to do next; the executor owns the protocol around
//! it, so that every worker carries decisions out the same way:
//!
//! ```text
//!   (exec, step) = Executor::start(policy, now)
//!   loop {
//!       apply step.freq if Some           (only on change: Keep never shows)
//!       wait as step.wake says            (Now: not at all; else until a deadline;
//!                                          see crate::wait_protocol)
//!       exec.woke(cause, waited)
//!       service every queue once within step.budget
//!       step = exec.served(now, stats)    (or exec.switch(..) / exec.retune(..))
//!   }
//! ```
//!
//! It is sans-IO like the policies (smoltcp's `poll(timestamp)` style): time
//! comes in as arguments, and the I/O side only performs the [`Step`] it is
//! given. A policy answers in intervals ("sleep 400 µs"), as the papers do;
//! the executor turns each into a deadline on this crate's clock once
//! ([`Wake`]), as smoltcp's `poll_at()` answers with an instant, and the I/O
//! side waits until it. What used to be decided twice (and had drifted) is
//! decided here once: decisions are [`Decision::sanitized`]; a wait for a
//! kick is bounded by [`IDLE_RECHECK`]; a frequency hint is applied
//! only when it changes ([`Step::freq`]); a kick threshold in permille becomes
//! a descriptor count by [`kick_fill`]; a policy switch starts the new
//! policy at once; a retune reaches the running policy ([`Policy::retune`]).
//! How a worker then carries out a [`Wake`] — enable notifications and
//! re-check, arm the kick threshold, tell a kick from a timeout, turn
//! notifications off again — is written once too, in
//! [`crate::wait_protocol`].

use crate::interface::{
    Action, Budget, Decision, FreqHint, PassReport, Policy, PolicyStatus, WakeCause,
};
use crate::retune::{Retune, RetuneError};
use crate::time::{Duration, Instant};

/// What one service pass did: the policy-independent part of a
/// [`PassReport`], measured by the I/O side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassStats {
    /// Packets moved, both directions.
    pub packets: u64,
    /// Frame bytes moved, both directions.
    pub bytes: u64,
    /// Some queue still had work when its budget ran out.
    pub more_work: bool,
    /// Fullest guest-to-host ring at the start of the pass, permille.
    pub max_fill_permille: u16,
}

/// How the I/O side waits before the next pass: until an absolute time on
/// this crate's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Service again at once; guest notifications stay off ([`Action::Poll`]).
    Now,
    /// Sleep with guest notifications off until `at`; `kick_threshold` as in
    /// [`Action::Sleep`].
    At {
        /// When to service again.
        at: Instant,
        /// Fill level that lets a kick through, permille of the ring size.
        kick_threshold: Option<u16>,
    },
    /// Re-enable notifications, re-check the rings, and if they are still
    /// empty block until a kick or `until` ([`Action::WaitKick`], bounded by
    /// [`IDLE_RECHECK`]).
    Kick {
        /// The latest time to look at the rings again.
        until: Instant,
    },
}

impl Wake {
    /// `action` (sanitized, its kick wait bounded) decided at `now`.
    fn of(action: Action, now: Instant) -> Wake {
        match action {
            Action::Poll => Wake::Now,
            Action::Sleep {
                duration,
                kick_threshold,
            } => Wake::At {
                at: now + duration,
                kick_threshold,
            },
            Action::WaitKick { timeout } => Wake::Kick {
                until: now + timeout.unwrap_or(IDLE_RECHECK),
            },
        }
    }
}

/// What the I/O side does next: apply `freq` (if any), wait as `wake`
/// says, report the wake-up with [`Executor::woke`], service the queues
/// within `budget`, and report the pass with [`Executor::served`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// A CPU-frequency change to apply before waiting; `None` when the hint
    /// is [`FreqHint::Keep`] or the same as the one last applied.
    pub freq: Option<FreqHint>,
    /// How long to wait: the policy's decision, [`Decision::sanitized`],
    /// as a deadline.
    pub wake: Wake,
    /// Per-queue budget of the pass that follows.
    pub budget: Budget,
}

/// Where the executor is in its cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A [`Step`] was handed out; [`Executor::woke`] comes next.
    Waiting,
    /// Woken: the pass is running; [`Executor::served`] comes next.
    Serving {
        /// What ended the wait.
        cause: WakeCause,
        /// How long it lasted.
        waited: Duration,
    },
}

/// The longest a worker waits for a kick before it looks at its rings
/// again, whatever the policy asked ([`Action::WaitKick`] without a
/// timeout). A kick that never arrives (a frontend that misbehaves, or a lost
/// notification) then delays packets by at most this long instead of
/// stalling the queue for good. An idle worker pays about ten wake-ups a
/// second for it; a policy that sees a [`WakeCause::Timeout`] with nothing to
/// do simply waits again.
pub const IDLE_RECHECK: Duration = crate::interface::MAX_SLEEP;

/// Carries out one policy's decisions (see the module docs).
#[derive(Debug)]
pub struct Executor {
    policy: Box<dyn Policy>,
    /// The hint last applied ([`FreqHint::Keep`] before any).
    freq: FreqHint,
    phase: Phase,
    /// The step last handed out.
    step: Step,
}

impl Executor {
    /// Start `policy` at `now`; returns the executor and its first step.
    pub fn start(mut policy: Box<dyn Policy>, now: Instant) -> (Executor, Step) {
        let decision = policy.start(now);
        let mut e = Executor {
            policy,
            freq: FreqHint::Keep,
            phase: Phase::Waiting,
            step: Step {
                freq: None,
                wake: Wake::Now,
                budget: Budget {
                    packets: 0,
                    bytes: 0,
                },
            },
        };
        e.step = e.step_for(decision, now);
        let first = e.step;
        (e, first)
    }

    /// The wait of the current step ended: `cause`, after `waited`
    /// ([`WakeCause::Immediate`] and zero after [`Action::Poll`]).
    pub fn woke(&mut self, cause: WakeCause, waited: Duration) {
        debug_assert_eq!(self.phase, Phase::Waiting, "woke() twice without served()");
        self.phase = Phase::Serving { cause, waited };
    }

    /// The pass ended at `now` having done `stats`: feed the policy, return
    /// the next step. Called without [`Executor::woke`] (a worker that
    /// polled without waiting), the wake is taken as immediate.
    pub fn served(&mut self, now: Instant, stats: PassStats) -> Step {
        let (wake, waited) = match self.phase {
            Phase::Serving { cause, waited } => (cause, waited),
            Phase::Waiting => (WakeCause::Immediate, Duration::ZERO),
        };
        let report = PassReport {
            now,
            wake,
            waited,
            packets: stats.packets,
            bytes: stats.bytes,
            more_work: stats.more_work,
            max_fill_permille: stats.max_fill_permille,
        };
        let decision = self.policy.on_pass(&report);
        self.phase = Phase::Waiting;
        self.step = self.step_for(decision, now);
        self.step
    }

    /// Replace the policy by `policy`, started at `now`; returns its first
    /// step. The pass in progress, if any, is not reported to either policy.
    pub fn switch(&mut self, mut policy: Box<dyn Policy>, now: Instant) -> Step {
        let decision = policy.start(now);
        self.policy = policy;
        self.phase = Phase::Waiting;
        self.step = self.step_for(decision, now);
        self.step
    }

    /// Change a parameter of the running policy (see [`Retune`]). The
    /// current step stands; the change shows in the steps that follow.
    pub fn retune(&mut self, r: &Retune) -> Result<(), RetuneError> {
        self.policy.retune(r)
    }

    /// The running policy's status.
    pub fn status(&self) -> PolicyStatus {
        self.policy.status()
    }

    /// The running policy.
    pub fn policy(&self) -> &dyn Policy {
        self.policy.as_ref()
    }

    /// The step last handed out.
    pub fn step(&self) -> Step {
        self.step
    }

    /// Stop executing; the policy, with its state, is returned (a port keeps
    /// it across a frontend's reconnect).
    pub fn into_policy(self) -> Box<dyn Policy> {
        self.policy
    }

    /// The step for `decision`, made at `now`.
    fn step_for(&mut self, decision: Decision, now: Instant) -> Step {
        let d = decision.sanitized();
        let freq = (d.freq != FreqHint::Keep && d.freq != self.freq).then(|| {
            self.freq = d.freq;
            d.freq
        });
        Step {
            freq,
            wake: Wake::of(d.action, now),
            budget: self.policy.budget(),
        }
    }
}

/// The number of pending descriptors at which a ring of `ring_size` entries
/// lets a kick through for a kick threshold of `permille` (the ring-full
/// safety net of [`Action::Sleep`]): at least `permille` ‰ full, rounded up,
/// and at least one descriptor.
pub fn kick_fill(permille: u16, ring_size: u16) -> u16 {
    let n = (u32::from(permille) * u32::from(ring_size)).div_ceil(1000);
    n.clamp(1, u32::from(ring_size.max(1))) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{PolicyConfig, PolicyKind};

    fn stats(packets: u64, more_work: bool) -> PassStats {
        PassStats {
            packets,
            bytes: packets * 64,
            more_work,
            max_fill_permille: 0,
        }
    }

    #[test]
    fn kick_fill_rounds_up_and_stays_in_the_ring() {
        assert_eq!(kick_fill(750, 256), 192);
        assert_eq!(kick_fill(1, 256), 1); // 0.256 rounds up
        assert_eq!(kick_fill(999, 256), 256); // 255.744 rounds up
        assert_eq!(kick_fill(1000, 256), 256);
        assert_eq!(kick_fill(500, 3), 2);
        assert_eq!(kick_fill(0, 256), 1);
    }

    #[test]
    fn frequency_hints_are_applied_only_on_change() {
        let eekbp = PolicyConfig::default_for(PolicyKind::Eekbp)
            .build()
            .unwrap();
        let (mut e, first) = Executor::start(eekbp, Instant(0));
        let mut applied = Vec::from_iter(first.freq);
        let mut t = 0;
        for i in 0..50 {
            t += 1_000;
            e.woke(WakeCause::Kick, Duration(1_000));
            // Bursts of work, then nothing: EE-KBP asks for Max, then Min.
            let busy = i % 10 < 5;
            let s = e.served(Instant(t), stats(if busy { 64 } else { 0 }, busy));
            applied.extend(s.freq);
        }
        assert!(applied.len() >= 2, "{applied:?}");
        assert!(applied.windows(2).all(|w| w[0] != w[1]), "{applied:?}");
        assert!(!applied.contains(&FreqHint::Keep));
    }

    #[test]
    fn steps_are_sanitized_and_carry_the_budget() {
        let (mut e, s) = Executor::start(
            PolicyConfig::default_for(PolicyKind::Interrupt)
                .build()
                .unwrap(),
            Instant(0),
        );
        assert_eq!(s.budget, e.policy().budget());
        e.woke(WakeCause::Kick, Duration(5));
        let s = e.served(Instant(10), stats(3, false));
        // Interrupt mode waits for a kick without a timeout; the executor
        // bounds it, as a deadline from the pass's end.
        assert_eq!(
            s.wake,
            Wake::Kick {
                until: Instant(10) + IDLE_RECHECK
            }
        );
    }

    #[test]
    fn a_sleep_becomes_a_deadline_from_the_time_it_was_decided() {
        let fixed = PolicyConfig::default_for(PolicyKind::Netap)
            .build()
            .unwrap();
        let (mut e, _) = Executor::start(fixed, Instant(1_000));
        e.woke(WakeCause::Timer, Duration(5));
        let s = e.served(Instant(7_000), stats(10, false));
        match s.wake {
            Wake::At { at, .. } => {
                assert!(at > Instant(7_000), "{s:?}");
                assert!(at <= Instant(7_000) + crate::interface::MAX_SLEEP, "{s:?}");
            }
            other => panic!("NetAP sleeps after a pass: {other:?}"),
        }
    }

    #[test]
    fn switch_and_retune_reach_the_running_policy() {
        let (mut e, _) = Executor::start(
            PolicyConfig::default_for(PolicyKind::Netap)
                .build()
                .unwrap(),
            Instant(0),
        );
        assert!(e
            .retune(&Retune::SearchRange {
                lo_us: 500,
                hi_us: 1500
            })
            .is_ok());
        // The range is not one NetAP accepts: refused, policy unchanged.
        assert!(e
            .retune(&Retune::SearchRange {
                lo_us: 1500,
                hi_us: 500
            })
            .is_err());
        let s = e.switch(PolicyConfig::BusyPoll.build().unwrap(), Instant(1));
        assert_eq!(e.policy().name(), "busy-poll");
        assert_eq!(s.wake, Wake::Now);
        // A parameter busy-poll does not have.
        let err = e
            .retune(&Retune::SearchRange { lo_us: 1, hi_us: 2 })
            .unwrap_err();
        assert!(err.to_string().contains("busy-poll"), "{err}");
    }
}
