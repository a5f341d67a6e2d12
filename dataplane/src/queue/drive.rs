//! The queue worker's loop, independent of what it serves.
//!
//! [`drive`] runs a [`Policy`] against a [`QueueIo`] — the one narrow
//! interface between a worker and the world (rings, kicks, calls, timers;
//! `docs/style.md` rule 2). The daemon implements it over vhost-user rings
//! ([`crate::queue`]); tests implement it with scripted fakes, and
//! [`crate::queue::fault_injector::FaultInjector`] wraps any of them to make timers
//! late, wake-ups spurious, kicks lost and passes short.

pub use vadapt_policy::PassStats;
use vadapt_policy::{
    Budget, Duration, Executor, FreqHint, Instant, Policy, PolicyStatus, Retune, Step, Wake,
    WakeCause,
};

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// Why it ended.
    pub cause: WakeCause,
    /// How long it lasted.
    pub waited: Duration,
}

/// What the owner of the worker wants, checked after every pass.
#[derive(Debug)]
pub enum Control {
    /// Keep going.
    Continue,
    /// Leave the loop.
    Stop,
    /// Replace the policy (`vadapt set-policy`).
    Switch(Box<dyn Policy>),
    /// Change a parameter of the running policy (`vadapt retune`).
    Retune(Retune),
}

/// The world of a queue worker.
pub trait QueueIo {
    /// Monotonic time now.
    fn now(&mut self) -> Instant;
    /// Service every queue once, at most `budget` per queue.
    fn service(&mut self, budget: Budget) -> PassStats;
    /// Sleep with notifications off until `deadline` (see [`Wake::At`] and
    /// [`vadapt_policy::wait_protocol`]).
    fn sleep(&mut self, deadline: Instant, kick_threshold: Option<u16>) -> Wait;
    /// Re-enable notifications, re-check, block for a kick until `until`
    /// at the latest (see [`Wake::Kick`] and
    /// [`vadapt_policy::wait_protocol`]).
    fn wait_kick(&mut self, until: Instant) -> Wait;
    /// Apply a CPU-frequency hint (no-op where the host has no cpufreq).
    fn set_freq(&mut self, hint: FreqHint);
    /// Stop, switch policy, retune it, or continue.
    fn control(&mut self) -> Control;
    /// A retune asked for by [`QueueIo::control`] was refused (the policy
    /// runs on unchanged); `error` says why.
    fn retune_refused(&mut self, _retune: &Retune, _error: &vadapt_policy::RetuneError) {}
    /// Called with every step before it is carried out, for metrics.
    fn observe(&mut self, _status: &PolicyStatus, _step: &Step) {}
}

/// Run `policy` until `io.control()` says stop; returns the policy in use
/// then. The loop only performs the I/O each [`Step`] of the policy crate's
/// [`Executor`] asks for: every decision is made there.
pub fn drive(io: &mut impl QueueIo, policy: Box<dyn Policy>) -> Box<dyn Policy> {
    let (mut exec, mut step) = Executor::start(policy, io.now());
    loop {
        io.observe(&exec.status(), &step);
        if let Some(f) = step.freq {
            io.set_freq(f);
        }
        let wait = match step.wake {
            Wake::Now => Wait {
                cause: WakeCause::Immediate,
                waited: Duration::ZERO,
            },
            Wake::At { at, kick_threshold } => io.sleep(at, kick_threshold),
            Wake::Kick { until } => io.wait_kick(until),
        };
        exec.woke(wait.cause, wait.waited);
        let pass = io.service(step.budget);
        step = match io.control() {
            Control::Continue => exec.served(io.now(), pass),
            Control::Stop => return exec.into_policy(),
            Control::Switch(p) => exec.switch(p, io.now()),
            Control::Retune(r) => {
                if let Err(e) = exec.retune(&r) {
                    io.retune_refused(&r, &e);
                }
                exec.served(io.now(), pass)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vadapt_policy::{PolicyConfig, PolicyKind};

    /// A scripted world: `work` packets arrive in total; each pass takes up to
    /// the budget; time advances by 1 µs per pass plus whatever waits last.
    #[derive(Debug, Default)]
    struct Fake {
        now: u64,
        work: u64,
        passes: u64,
        sleeps: Vec<u64>,
        kick_waits: u64,
        freq: Vec<FreqHint>,
        max_passes: u64,
        switch_at: Option<u64>,
    }

    impl QueueIo for Fake {
        fn now(&mut self) -> Instant {
            Instant(self.now)
        }
        fn service(&mut self, budget: Budget) -> PassStats {
            self.passes += 1;
            self.now += 1_000;
            let n = self.work.min(u64::from(budget.packets));
            self.work -= n;
            PassStats {
                packets: n,
                bytes: n * 64,
                more_work: self.work > 0,
                max_fill_permille: 0,
            }
        }
        fn sleep(&mut self, deadline: Instant, _t: Option<u16>) -> Wait {
            let d = deadline.saturating_since(Instant(self.now));
            self.sleeps.push(d.as_nanos());
            self.now += d.as_nanos();
            Wait {
                cause: WakeCause::Timer,
                waited: d,
            }
        }
        fn wait_kick(&mut self, _until: Instant) -> Wait {
            self.kick_waits += 1;
            self.now += 50_000;
            self.work += 10;
            Wait {
                cause: WakeCause::Kick,
                waited: Duration(50_000),
            }
        }
        fn set_freq(&mut self, hint: FreqHint) {
            self.freq.push(hint);
        }
        fn control(&mut self) -> Control {
            if Some(self.passes) == self.switch_at {
                return Control::Switch(PolicyConfig::BusyPoll.build().unwrap());
            }
            if self.passes >= self.max_passes {
                Control::Stop
            } else {
                Control::Continue
            }
        }
    }

    #[test]
    fn interrupt_policy_drains_then_waits_for_kicks() {
        let mut io = Fake {
            work: 1000,
            max_passes: 20,
            ..Fake::default()
        };
        let p = drive(&mut io, PolicyConfig::Interrupt.build().unwrap());
        assert_eq!(p.name(), "interrupt");
        // 1000 packets at 256 per pass: 4 passes of draining after the first kick.
        assert!(io.kick_waits >= 10, "{io:?}");
        assert!(io.sleeps.is_empty());
    }

    #[test]
    fn every_policy_runs_and_stops_and_switch_takes_effect() {
        for kind in PolicyKind::ALL {
            let mut io = Fake {
                work: 5000,
                max_passes: 500,
                switch_at: Some(100),
                ..Fake::default()
            };
            let p = drive(&mut io, PolicyConfig::default_for(kind).build().unwrap());
            assert_eq!(p.name(), "busy-poll", "{kind} did not switch");
            assert_eq!(io.passes, 500);
        }
    }
}
