//! The daemon's worker loop and the simulator carry out policy decisions
//! through the same executor: replaying the passes a simulated worker saw
//! through a `QueueSet` gives the same steps, policy by policy.
//!
//! The simulator records, for one queue, each pass (its end time, the wake
//! that preceded it, what it moved) and the step its executor answered. A
//! scripted `QueueIo` hands the set exactly those passes; every step the
//! set then carries out must equal the simulator's.
//!
//! The other direction, on a real world and on every path a set runs (a
//! thread of its own, the NQ pool, stepped): an uplink's NIC queue's passes,
//! fed to an executor as the simulator feeds one, give the steps its worker
//! got (`src/uplink/every_path_tests.rs`).

use std::path::Path;
use vadapt_dataplane::worker::{
    Control, PassStats, PendingWait, QueueIo, QueueSet, RingBases, Wait,
};
use vadapt_policy::wait_protocol::WaitKind;
use vadapt_policy::{
    Budget, FreqHint, Instant, Policy, PolicyConfig, PolicyKind, PolicyStatus, Step, Wake,
    WakeCause,
};
use vadapt_sim::scenario::SimPolicy;
use vadapt_sim::{trace_scenario, Scenario, TracedPass};

/// Replays a simulator trace.
struct Replay {
    passes: Vec<TracedPass>,
    /// Passes served so far.
    next: usize,
    now: Instant,
    steps: Vec<Step>,
    freq: Vec<FreqHint>,
    /// The policy, until the set takes it; then the one it parked.
    policy: Option<Box<dyn Policy>>,
}

impl QueueIo for Replay {
    fn name(&self) -> &str {
        "replay"
    }
    fn now(&mut self) -> Instant {
        self.now
    }
    fn service(&mut self, _budget: Budget) -> PassStats {
        let p = self.passes[self.next];
        self.now = p.now;
        self.next += 1;
        p.stats
    }
    fn waiter_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    fn begin_wait(&mut self, wake: Wake) -> PendingWait {
        PendingWait::begun(wake, self.now)
    }
    /// The wait ends as the simulator's did.
    fn poll_wait(&mut self, w: &mut PendingWait) {
        if !w.is_ready() {
            w.ready = Some(self.passes[self.next].wake);
        }
    }
    fn end_wait(&mut self, w: PendingWait) -> Wait {
        if w.kind == WaitKind::Poll {
            return Wait::NONE;
        }
        Wait {
            cause: w.ready.unwrap_or(WakeCause::Recheck),
            waited: self.passes[self.next].waited,
        }
    }
    fn set_freq(&mut self, hint: FreqHint) {
        self.freq.push(hint);
    }
    fn control(&mut self) -> Control {
        if self.next >= self.passes.len() {
            Control::Stop
        } else {
            Control::Continue
        }
    }
    fn observe(&mut self, _status: &PolicyStatus, step: &Step) {
        self.steps.push(*step);
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

fn scenario(kind: PolicyKind) -> (Scenario, PolicyConfig) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/scenarios/validate-1vm-1t.toml");
    let mut sc = Scenario::from_file(&path).expect("scenario parses");
    // One policy for the whole run, 1.5 s.
    sc.timeline.truncate(1);
    let mut cfg = PolicyConfig::default_for(kind);
    if let PolicyConfig::Netap(p) = &mut cfg {
        p.round_ms = 100; // several rounds within the run
    }
    sc.timeline[0].policy = SimPolicy::Policy(cfg);
    sc.periods.clear();
    sc.duration = vadapt_policy::Duration::from_millis(1500);
    (sc, cfg)
}

#[test]
fn drive_answers_the_simulators_steps_for_every_policy() {
    for kind in PolicyKind::ALL {
        let (sc, cfg) = scenario(kind);
        let trace = trace_scenario(&sc, 7, 0, 20_000).expect("simulation runs");
        assert!(
            trace.passes.len() > 50,
            "{kind}: only {} passes",
            trace.passes.len()
        );
        let first = trace.first.expect("first step");
        let mut set = QueueSet::start(
            0,
            Replay {
                passes: trace.passes.clone(),
                next: 0,
                now: Instant(0),
                steps: Vec::new(),
                freq: Vec::new(),
                policy: Some(cfg.build().unwrap()),
            },
        );
        set.run_to_stop();
        let io = set.into_queues();
        let policy = io.policy.as_ref().expect("parked");
        assert_eq!(policy.name(), kind.to_string(), "{kind}");
        // The set observes the first step, then one per served pass except
        // the last (it stops after that pass).
        let mut expected = vec![first];
        expected.extend(trace.passes.iter().map(|p| p.step));
        expected.truncate(io.steps.len());
        assert_eq!(io.steps.len(), trace.passes.len(), "{kind}");
        for (i, (d, s)) in io.steps.iter().zip(&expected).enumerate() {
            assert_eq!(d, s, "{kind}: step {i} differs (daemon vs simulator)");
        }
        let hints: Vec<_> = expected.iter().filter_map(|s| s.freq).collect();
        assert_eq!(io.freq, hints, "{kind}: frequency hints differ");
    }
}
