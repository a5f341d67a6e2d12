//! A [`QueueIo`] wrapper that makes the world misbehave, as smoltcp's
//! `phy::FaultInjector` does for a network device: timers fire late, waits
//! end for no reason, kicks get lost, passes get cut short.
//!
//! Every policy must survive all of it: no queue may stall and no packet
//! accepted by a ring may be lost, whatever the timing. The tests below run
//! every policy in a [`super::QueueSet`] stepped without a thread over a
//! deterministic virtual guest wrapped in this injector; it wraps the
//! daemon's own worlds as well, on a thread of their own, in the pool and
//! stepped: a VM port's rings (`queue/fault_paths_tests.rs`) and an
//! uplink's NIC queue (`uplink/every_path_tests.rs`).

use super::pending_wait::PendingWait;
use super::queue_io::{Control, QueueIo, Wait};
use super::ring_bases::RingBases;
use crate::metrics::WorkerStats;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::os::fd::RawFd;
use vadapt_policy::wait_protocol::WaitKind;
use vadapt_policy::{
    Budget, Duration, FreqHint, Instant, PassStats, Policy, PolicyStatus, Retune, RetuneError,
    Step, Wake, WakeCause,
};

/// How often each fault happens, as probabilities per opportunity (0..=1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Faults {
    /// A sleep lasts longer than asked, by up to `max_late`.
    pub late_timer: f64,
    /// The longest extra a late timer adds.
    pub max_late: Duration,
    /// A sleep or a wait for a kick ends at once, with nothing having
    /// happened (a spurious wake-up).
    pub spurious_wake: f64,
    /// A wait for a kick never sees the kick: it lasts until its timeout.
    pub lost_kick: f64,
    /// A pass takes at most one packet per queue.
    pub short_pass: f64,
}

impl Faults {
    /// No faults: the wrapper is transparent.
    pub const NONE: Faults = Faults {
        late_timer: 0.0,
        max_late: Duration::ZERO,
        spurious_wake: 0.0,
        lost_kick: 0.0,
        short_pass: 0.0,
    };

    /// Every fault, often: what the tests put every policy and every
    /// path through.
    pub const ROUGH: Faults = Faults {
        late_timer: 0.3,
        max_late: Duration::from_millis(2),
        spurious_wake: 0.1,
        lost_kick: 0.3,
        short_pass: 0.2,
    };
}

/// What the injector did, for the tests' own checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injected {
    /// Late timers.
    pub late_timers: u64,
    /// Spurious wake-ups.
    pub spurious_wakes: u64,
    /// Kicks lost.
    pub lost_kicks: u64,
    /// Passes cut short.
    pub short_passes: u64,
}

/// The faults chosen for the wait under way, when it began.
#[derive(Clone, Copy, Debug, Default)]
struct WaitFaults {
    /// Ends at its first look, with nothing having happened.
    spurious: bool,
    /// A wait for a kick that sees none: the kind it was begun as (it runs
    /// as a sleep without kicks until its deadline).
    lost: Option<WaitKind>,
}

/// See the module docs.
#[derive(Debug)]
pub struct FaultInjector<Q> {
    inner: Q,
    faults: Faults,
    rng: SmallRng,
    wait: WaitFaults,
    /// What was injected so far.
    pub injected: Injected,
}

impl<Q: QueueIo> FaultInjector<Q> {
    /// Wrap `inner`; `seed` makes the faults repeatable.
    pub fn new(inner: Q, faults: Faults, seed: u64) -> Self {
        FaultInjector {
            inner,
            faults,
            rng: SmallRng::seed_from_u64(seed),
            wait: WaitFaults::default(),
            injected: Injected::default(),
        }
    }

    /// The wrapped world.
    pub fn inner(&self) -> &Q {
        &self.inner
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p.min(1.0))
    }
}

impl<Q: QueueIo> QueueIo for FaultInjector<Q> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn now(&mut self) -> Instant {
        self.inner.now()
    }

    fn service(&mut self, mut budget: Budget) -> PassStats {
        if self.chance(self.faults.short_pass) {
            self.injected.short_passes += 1;
            budget.packets = 1;
        }
        self.inner.service(budget)
    }

    fn waiter_fd(&self) -> Option<RawFd> {
        self.inner.waiter_fd()
    }

    fn begin_wait(&mut self, mut wake: Wake) -> PendingWait {
        self.wait = WaitFaults::default();
        let spurious = !matches!(wake, Wake::Now) && self.chance(self.faults.spurious_wake);
        let mut lost = false;
        if !spurious {
            match &mut wake {
                // The timer itself is late: the world arms it later.
                Wake::At { at, .. } if self.chance(self.faults.late_timer) => {
                    self.injected.late_timers += 1;
                    *at += Duration(self.rng.gen_range(0..=self.faults.max_late.as_nanos()));
                }
                Wake::Kick { .. } => lost = self.chance(self.faults.lost_kick),
                _ => {}
            }
        }
        let mut w = self.inner.begin_wait(wake);
        if w.is_ready() {
            return w;
        }
        if spurious {
            self.injected.spurious_wakes += 1;
            self.wait.spurious = true;
        } else if let (true, WaitKind::Kick { until }) = (lost, w.kind) {
            // The whole timeout, kicks unheard: whatever the guest does
            // meanwhile, no kick reaches the worker.
            self.injected.lost_kicks += 1;
            self.wait.lost = Some(w.kind);
            w.kind = WaitKind::Sleep {
                until,
                kicks_armed: false,
            };
        }
        w
    }

    fn poll_wait(&mut self, w: &mut PendingWait) {
        if w.is_ready() {
            return;
        }
        if std::mem::take(&mut self.wait.spurious) {
            w.ready = Some(match w.kind {
                WaitKind::Kick { .. } => WakeCause::Kick,
                _ => WakeCause::Timer,
            });
            return;
        }
        self.inner.poll_wait(w);
        if self.wait.lost.is_some() && w.ready.is_some() {
            // Only the wait's own timer (or a signal) ends it.
            w.ready = Some(WakeCause::Timeout);
        }
    }

    fn end_wait(&mut self, mut w: PendingWait) -> Wait {
        if let Some(kind) = self.wait.lost.take() {
            w.kind = kind;
        }
        self.wait = WaitFaults::default();
        self.inner.end_wait(w)
    }

    fn set_freq(&mut self, hint: FreqHint) {
        self.inner.set_freq(hint);
    }

    fn control(&mut self) -> Control {
        self.inner.control()
    }

    fn retune_refused(&mut self, retune: &Retune, error: &RetuneError) {
        self.inner.retune_refused(retune, error);
    }

    fn observe(&mut self, status: &PolicyStatus, step: &Step) {
        self.inner.observe(status, step);
    }

    fn take_policy(&mut self) -> Box<dyn Policy> {
        self.inner.take_policy()
    }

    fn park_policy(&mut self, policy: Box<dyn Policy>) {
        self.inner.park_policy(policy);
    }

    fn into_bases(self: Box<Self>) -> RingBases {
        Box::new(self.inner).into_bases()
    }

    fn worker_stats(&self) -> Option<&WorkerStats> {
        self.inner.worker_stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::queue_set::QueueSet;
    use std::collections::VecDeque;
    use vadapt_policy::{kick_fill, PolicyConfig, PolicyKind};

    /// A deterministic guest and ring on a virtual clock: `total` packets,
    /// one every `gap` ns (a full ring holds the guest back, nothing is
    /// dropped), a kick for every packet added while notifications are on
    /// or once the ring reaches a sleep's kick threshold. Each pass costs
    /// 1 µs.
    #[derive(Debug)]
    struct Guest {
        now: u64,
        size: u16,
        gap: u64,
        total: u64,
        produced: u64,
        next_arrival: u64,
        ring: VecDeque<u64>,
        served: u64,
        /// Longest time a packet sat on the ring, ns.
        worst_wait: u64,
        /// Give up here (a stalled worker would otherwise never end).
        deadline: u64,
        /// The policy, until the set takes it; then the one it parked.
        policy: Option<Box<dyn Policy>>,
        /// The kick threshold of the sleep under way, ‰.
        threshold: Option<u16>,
    }

    impl Guest {
        fn new(total: u64, gap: u64, policy: Box<dyn Policy>) -> Self {
            Guest {
                now: 0,
                size: 256,
                gap,
                total,
                produced: 0,
                next_arrival: gap,
                ring: VecDeque::new(),
                served: 0,
                worst_wait: 0,
                deadline: 60_000_000_000,
                policy: Some(policy),
                threshold: None,
            }
        }

        /// Add every packet due by `now` that fits.
        fn produce(&mut self) {
            while self.produced < self.total
                && self.next_arrival <= self.now
                && self.ring.len() < usize::from(self.size)
            {
                self.ring.push_back(self.next_arrival);
                self.produced += 1;
                self.next_arrival += self.gap;
            }
        }

        /// The next time the guest adds a packet, if it will.
        fn next_add(&self) -> Option<u64> {
            (self.produced < self.total && self.ring.len() < usize::from(self.size))
                .then_some(self.next_arrival.max(self.now))
        }

        /// A sleep until `deadline`, ended early by a kick once the ring
        /// fills to the threshold: why it ended.
        fn sleep(&mut self, deadline: Instant, kick_threshold: Option<u16>) -> WakeCause {
            let end = deadline.0.max(self.now);
            if let Some(p) = kick_threshold {
                let at = usize::from(kick_fill(p, self.size));
                while let Some(t) = self.next_add().filter(|&t| t <= end) {
                    self.now = t;
                    self.produce();
                    if self.ring.len() >= at {
                        return WakeCause::Kick;
                    }
                }
            }
            self.now = end;
            self.produce();
            WakeCause::Timer
        }

        /// A wait for a kick until `until`: why it ended.
        fn wait_kick(&mut self, until: Instant) -> WakeCause {
            self.produce();
            if !self.ring.is_empty() {
                return WakeCause::Recheck;
            }
            let limit = until.0.max(self.now);
            match self.next_add() {
                Some(t) if t <= limit => {
                    self.now = t;
                    self.produce();
                    WakeCause::Kick
                }
                _ => {
                    self.now = limit;
                    WakeCause::Timeout
                }
            }
        }
    }

    /// The guest's waits end when looked at: the virtual clock jumps to
    /// whatever ends them.
    impl QueueIo for Guest {
        fn name(&self) -> &str {
            "guest"
        }
        fn now(&mut self) -> Instant {
            Instant(self.now)
        }
        fn service(&mut self, budget: Budget) -> PassStats {
            self.produce();
            let fill = (self.ring.len() * 1000 / usize::from(self.size)) as u16;
            let n = self.ring.len().min(budget.packets as usize);
            for _ in 0..n {
                let t = self.ring.pop_front().expect("counted");
                // A packet added after it was due waited for room, not for us.
                self.worst_wait = self.worst_wait.max(self.now.saturating_sub(t));
            }
            self.served += n as u64;
            self.now += 1_000;
            self.produce();
            PassStats {
                packets: n as u64,
                bytes: n as u64 * 64,
                more_work: !self.ring.is_empty(),
                max_fill_permille: fill,
            }
        }
        fn waiter_fd(&self) -> Option<RawFd> {
            None
        }
        fn begin_wait(&mut self, wake: Wake) -> PendingWait {
            self.threshold = match wake {
                Wake::At { kick_threshold, .. } => kick_threshold,
                _ => None,
            };
            PendingWait::begun(wake, Instant(self.now))
        }
        fn poll_wait(&mut self, w: &mut PendingWait) {
            if w.is_ready() {
                return;
            }
            w.ready = Some(match w.kind {
                WaitKind::Poll => WakeCause::Immediate,
                WaitKind::Sleep { kicks_armed, .. } => {
                    let threshold = self.threshold.filter(|_| kicks_armed);
                    self.sleep(w.target, threshold)
                }
                WaitKind::Kick { .. } => self.wait_kick(w.target),
            });
        }
        fn end_wait(&mut self, w: PendingWait) -> Wait {
            Wait {
                cause: w.ready.unwrap_or(WakeCause::Recheck),
                waited: Duration(self.now.saturating_sub(w.start.0)),
            }
        }
        fn set_freq(&mut self, _hint: FreqHint) {}
        fn control(&mut self) -> Control {
            let done = self.produced == self.total && self.ring.is_empty();
            if done || self.now > self.deadline {
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

    /// Serves `io` in a set stepped on this thread until it stops; the
    /// world, its policy parked.
    fn run<Q: QueueIo + 'static>(io: Q) -> Box<Q> {
        let mut set = QueueSet::start(0, io);
        set.run_to_stop();
        set.into_queues()
    }

    fn policies() -> Vec<PolicyConfig> {
        PolicyKind::ALL
            .iter()
            .map(|&k| match PolicyConfig::default_for(k) {
                // Short rounds: several NetAP searches within a run.
                PolicyConfig::Netap(mut p) => {
                    p.round_ms = 20;
                    PolicyConfig::Netap(p)
                }
                PolicyConfig::NetapMl(mut p) => {
                    p.netap.round_ms = 20;
                    PolicyConfig::NetapMl(p)
                }
                c => c,
            })
            .collect()
    }

    #[test]
    fn every_policy_survives_every_fault_without_stall_or_loss() {
        for cfg in policies() {
            let mut total = Injected::default();
            for (gap, seed) in [(10_000, 1), (1_000, 2), (200_000, 3), (500, 4)] {
                let guest = Guest::new(20_000, gap, cfg.build().unwrap());
                let io = run(FaultInjector::new(guest, Faults::ROUGH, seed));
                let g = io.inner();
                let kind = cfg.kind();
                assert!(g.now <= g.deadline, "{kind} gap {gap}: stalled");
                assert_eq!(g.served, g.total, "{kind} gap {gap}: packets lost");
                // Late by a kick lost after IDLE_RECHECK, a late timer, a
                // policy's longest sleep: never more than a few hundred ms.
                assert!(
                    g.worst_wait < 250_000_000,
                    "{kind} gap {gap}: a packet waited {} ms",
                    g.worst_wait / 1_000_000
                );
                let inj = io.injected;
                total.late_timers += inj.late_timers;
                total.spurious_wakes += inj.spurious_wakes;
                total.lost_kicks += inj.lost_kicks;
                total.short_passes += inj.short_passes;
            }
            // Each fault this policy can meet was met: only NetAP sleeps on a
            // timer, busy-poll never waits, NetAP never waits for a kick.
            let kind = cfg.kind();
            assert!(total.short_passes > 0, "{kind}: {total:?}");
            if kind != PolicyKind::BusyPoll {
                assert!(total.spurious_wakes > 0, "{kind}: {total:?}");
            }
            if matches!(kind, PolicyKind::Netap | PolicyKind::NetapMl) {
                assert!(total.late_timers > 0, "{kind}: {total:?}");
            }
            if matches!(
                kind,
                PolicyKind::Interrupt | PolicyKind::Eekbp | PolicyKind::Growshrink
            ) {
                assert!(total.lost_kicks > 0, "{kind}: {total:?}");
            }
        }
    }

    #[test]
    fn no_faults_is_transparent() {
        for cfg in policies() {
            let guest = Guest::new(5_000, 2_000, cfg.build().unwrap());
            let io = run(FaultInjector::new(guest, Faults::NONE, 9));
            assert_eq!(io.inner().served, 5_000, "{}", cfg.kind());
            assert_eq!(io.injected, Injected::default());
        }
    }

    #[test]
    fn a_lost_last_kick_costs_at_most_the_idle_recheck() {
        // The guest's last packets arrive while the worker waits for a kick,
        // and every kick is lost: only the executor's bounded wait finds them.
        let faults = Faults {
            lost_kick: 1.0,
            ..Faults::NONE
        };
        let cfg = PolicyConfig::default_for(PolicyKind::Interrupt);
        let guest = Guest::new(10, 50_000_000, cfg.build().unwrap());
        let io = run(FaultInjector::new(guest, faults, 5));
        let g = io.inner();
        assert_eq!(g.served, 10);
        assert!(
            g.worst_wait <= vadapt_policy::IDLE_RECHECK.as_nanos() + 1_000,
            "{}",
            g.worst_wait
        );
        assert!(io.injected.lost_kicks > 0);
    }
}
