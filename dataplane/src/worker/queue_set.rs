//! One set of queues as a worker serves it — a VM port's rings or an
//! uplink's NIC queue — with its policy in its [`Executor`], the step it
//! asked for and the wait under way. It moves between workers whole, so the
//! policy's state (NetAP's search, EE-KBP's phase) and the rings' positions
//! go with it.
//!
//! This is the only place that steps an [`Executor`]: a worker calls
//! [`QueueSet::poll`] and, when the wait has ended, [`QueueSet::run_pass`],
//! whether it is a thread of the set's own (a pool of one), a pool worker
//! serving many sets, or a test stepping the set on its own thread
//! ([`QueueSet::step`]).

use super::pending_wait::PendingWait;
use super::queue_io::{Control, QueueIo};
use super::ring_bases::RingBases;
use vadapt_policy::{Executor, Step, WakeCause};

/// A set of queues, its policy and wait (see the module docs). `Q` is the
/// set's world; the pool holds sets of any world (`dyn QueueIo`).
pub struct QueueSet<Q: ?Sized + QueueIo = dyn QueueIo> {
    /// The set's id in the pool's assignment (a VM port's switch id; see
    /// the uplink for its queues' ids).
    pub(crate) id: u64,
    exec: Executor,
    step: Step,
    pending: PendingWait,
    /// The queues' control said stop (the frontend failed): no more passes
    /// until the owner takes the set back.
    stopped: bool,
    pub(crate) queues: Box<Q>,
}

impl<Q: ?Sized + QueueIo> std::fmt::Debug for QueueSet<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSet")
            .field("id", &self.id)
            .field("port", &self.queues.name())
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl<Q: QueueIo + 'static> QueueSet<Q> {
    /// Takes the queues' policy and begins its first wait.
    pub fn start(id: u64, queues: Q) -> Self {
        let mut queues = Box::new(queues);
        let policy = queues.take_policy();
        let (exec, step) = Executor::start(policy, queues.now());
        let pending = queues.begin_wait(step.wake);
        let mut set = QueueSet {
            id,
            exec,
            step,
            pending,
            stopped: false,
            queues,
        };
        set.announce();
        set
    }

    /// The same set, its world boxed as any world (for the pool).
    pub fn into_dyn(self) -> QueueSet {
        QueueSet {
            id: self.id,
            exec: self.exec,
            step: self.step,
            pending: self.pending,
            stopped: self.stopped,
            queues: self.queues,
        }
    }
}

impl<Q: ?Sized + QueueIo> QueueSet<Q> {
    /// The port's name (an uplink's queue: `port/queue`).
    pub fn port_name(&self) -> &str {
        self.queues.name()
    }

    /// The set's world.
    pub fn queues(&self) -> &Q {
        &self.queues
    }

    /// Whether the set stopped itself (see [`QueueSet::run_pass`]).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Whether the wait has ended, looking without blocking.
    pub fn poll(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        self.queues.poll_wait(&mut self.pending);
        self.pending.is_ready()
    }

    /// Called by the worker that just took the set from another one.
    pub fn after_handoff(&mut self) {
        self.pending.after_handoff();
    }

    /// Ends the wait, serves every queue once, asks the queues' control and
    /// begins the next wait (none once the control says stop).
    pub fn run_pass(&mut self) {
        let wait = self.queues.end_wait(self.pending);
        self.exec.woke(wait.cause, wait.waited);
        let pass = self.queues.service(self.step.budget);
        self.step = match self.queues.control() {
            Control::Continue => self.exec.served(self.queues.now(), pass),
            Control::Stop => {
                self.stopped = true;
                return;
            }
            Control::Switch(p) => self.exec.switch(p, self.queues.now()),
            Control::Retune(r) => {
                if let Err(e) = self.exec.retune(&r) {
                    self.queues.retune_refused(&r, &e);
                }
                self.exec.served(self.queues.now(), pass)
            }
        };
        self.pending = self.queues.begin_wait(self.step.wake);
        self.announce();
    }

    /// A worker with no thread (tests, the fuzzer): one pass if the wait
    /// has ended, or regardless when `force` (a worker woken early). False
    /// when the set stopped itself or no pass was made.
    pub fn step(&mut self, force: bool) -> bool {
        if self.stopped || !(self.poll() || force) {
            return false;
        }
        self.run_pass();
        true
    }

    /// Steps the set on this thread until its control says stop: for
    /// worlds on a virtual clock, whose waits end when polled (a real
    /// world's would be spun through).
    pub fn run_to_stop(&mut self) {
        while !self.stopped {
            self.step(false);
        }
    }

    /// What is done with every step before its wait.
    fn announce(&mut self) {
        self.queues.observe(&self.exec.status(), &self.step);
        if let Some(f) = self.step.freq {
            self.queues.set_freq(f);
        }
    }

    /// Ends the set for good and hands its world back: the wait under way
    /// is ended without a pass (notifications off, the port no longer
    /// marked waiting), and the policy is parked in the port's slot for the
    /// next incarnation.
    pub fn into_queues(mut self) -> Box<Q> {
        if !self.stopped {
            self.pending.ready = Some(WakeCause::Immediate);
            let _ = self.queues.end_wait(self.pending);
        }
        // A policy switched during this life is the one parked, with its
        // state.
        self.queues.park_policy(self.exec.into_policy());
        self.queues
    }

    /// [`QueueSet::into_queues`], then the rings' positions.
    pub fn finish(self) -> RingBases {
        self.into_queues().into_bases()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::queue_io::{PassStats, Wait};
    use vadapt_policy::wait_protocol::WaitKind;
    use vadapt_policy::{
        Budget, Duration, FreqHint, Instant, Policy, PolicyConfig, PolicyKind, Wake,
    };

    /// A scripted world: `work` packets arrive in total; each pass takes up to
    /// the budget; time advances by 1 µs per pass plus whatever waits last.
    #[derive(Default)]
    struct Fake {
        now: u64,
        work: u64,
        passes: u64,
        sleeps: Vec<u64>,
        kick_waits: u64,
        freq: Vec<FreqHint>,
        max_passes: u64,
        switch_at: Option<u64>,
        policy: Option<Box<dyn Policy>>,
    }

    impl QueueIo for Fake {
        fn name(&self) -> &str {
            "fake"
        }
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
        fn waiter_fd(&self) -> Option<std::os::fd::RawFd> {
            None
        }
        fn begin_wait(&mut self, wake: Wake) -> PendingWait {
            PendingWait::begun(wake, Instant(self.now))
        }
        fn poll_wait(&mut self, w: &mut PendingWait) {
            if w.is_ready() {
                return;
            }
            w.ready = Some(match w.kind {
                WaitKind::Poll => WakeCause::Immediate,
                WaitKind::Sleep { until, .. } => {
                    let d = until.saturating_since(Instant(self.now));
                    self.sleeps.push(d.as_nanos());
                    self.now += d.as_nanos();
                    WakeCause::Timer
                }
                WaitKind::Kick { .. } => {
                    self.kick_waits += 1;
                    self.now += 50_000;
                    self.work += 10;
                    WakeCause::Kick
                }
            });
        }
        fn end_wait(&mut self, w: PendingWait) -> Wait {
            Wait {
                cause: w.ready.unwrap_or(WakeCause::Recheck),
                waited: Duration(self.now - w.start.0),
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
        fn take_policy(&mut self) -> Box<dyn Policy> {
            self.policy.take().expect("taken once")
        }
        fn park_policy(&mut self, policy: Box<dyn Policy>) {
            self.policy = Some(policy);
        }
        fn into_bases(self: Box<Self>) -> RingBases {
            RingBases::default()
        }
    }

    fn run(io: Fake) -> Box<Fake> {
        let mut set = QueueSet::start(0, io);
        set.run_to_stop();
        set.into_queues()
    }

    #[test]
    fn interrupt_policy_drains_then_waits_for_kicks() {
        let io = run(Fake {
            work: 1000,
            max_passes: 20,
            policy: Some(PolicyConfig::Interrupt.build().unwrap()),
            ..Fake::default()
        });
        assert_eq!(io.policy.as_ref().unwrap().name(), "interrupt");
        // 1000 packets at 256 per pass: 4 passes of draining after the first kick.
        assert!(io.kick_waits >= 10, "{} kick waits", io.kick_waits);
        assert!(io.sleeps.is_empty());
    }

    #[test]
    fn every_policy_runs_and_stops_and_switch_takes_effect() {
        for kind in PolicyKind::ALL {
            let io = run(Fake {
                work: 5000,
                max_passes: 500,
                switch_at: Some(100),
                policy: Some(PolicyConfig::default_for(kind).build().unwrap()),
                ..Fake::default()
            });
            let parked = io.policy.as_ref().unwrap();
            assert_eq!(parked.name(), "busy-poll", "{kind} did not switch");
            assert_eq!(io.passes, 500);
        }
    }

    /// A set stopped by its owner before its control said stop ends its
    /// wait (notifications off) and parks the policy it runs.
    #[test]
    fn finishing_a_set_mid_wait_parks_its_policy() {
        let mut set = QueueSet::start(
            0,
            Fake {
                work: 0,
                max_passes: u64::MAX,
                policy: Some(PolicyConfig::Interrupt.build().unwrap()),
                ..Fake::default()
            },
        );
        for _ in 0..3 {
            set.step(false);
        }
        assert!(!set.is_stopped());
        let io = set.into_queues();
        assert_eq!(io.policy.as_ref().unwrap().name(), "interrupt");
    }
}
