//! The daemon's worker loop and the simulator carry out policy decisions
//! through the same executor: replaying the passes a simulated worker saw
//! through `worker::drive` gives the same steps, policy by policy.
//!
//! The simulator records, for one queue, each pass (its end time, the wake
//! that preceded it, what it moved) and the step its executor answered. A
//! scripted `QueueIo` hands `drive` exactly those passes; every step `drive`
//! then carries out must equal the simulator's.

use std::path::Path;
use vadapt_dataplane::queue::drive::{drive, Control, PassStats, QueueIo, Wait};
use vadapt_policy::{
    Budget, FreqHint, Instant, PolicyConfig, PolicyKind, PolicyStatus, Step, Wake,
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
}

impl Replay {
    fn wait(&mut self, wake: Wake) -> Wait {
        let p = &self.passes[self.next];
        assert!(
            !matches!(wake, Wake::Now),
            "pass {}: drive waited after a step that said not to",
            self.next
        );
        Wait {
            cause: p.wake,
            waited: p.waited,
        }
    }
}

impl QueueIo for Replay {
    fn now(&mut self) -> Instant {
        self.now
    }
    fn service(&mut self, _budget: Budget) -> PassStats {
        let p = self.passes[self.next];
        self.now = p.now;
        self.next += 1;
        p.stats
    }
    fn sleep(&mut self, at: Instant, kick_threshold: Option<u16>) -> Wait {
        self.wait(Wake::At { at, kick_threshold })
    }
    fn wait_kick(&mut self, until: Instant) -> Wait {
        self.wait(Wake::Kick { until })
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
        let mut io = Replay {
            passes: trace.passes.clone(),
            next: 0,
            now: Instant(0),
            steps: Vec::new(),
            freq: Vec::new(),
        };
        let policy = drive(&mut io, cfg.build().unwrap());
        assert_eq!(policy.name(), kind.to_string(), "{kind}");
        // drive observes the first step, then one per served pass except the
        // last (it stops after that pass).
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
