//! Policy switches of the timeline: a waiting worker switches at once, a
//! running (or waking) one at the end of its pass.

use super::workers::WorkerState;
use super::{build_policy, Engine};
use crate::scenario::SimPolicy;
use vadapt_policy::{Instant, Step};

impl Engine<'_> {
    /// Timeline entry `index` takes effect on every worker.
    pub(super) fn switch_policy(&mut self, index: usize) {
        let p = self.scenario.timeline[index].policy;
        for q in 0..self.queues.len() {
            match self.queues[q].worker.state {
                WorkerState::Running | WorkerState::Waking => {
                    self.queues[q].worker.pending_policy = Some(p)
                }
                WorkerState::Sleeping | WorkerState::WaitingForKick => {
                    self.cancel_wait(q);
                    let step = self.install_policy(q, p);
                    self.carry_out(q, step);
                }
            }
        }
    }

    /// Install `p` on queue `q`'s worker; returns the executor's first step
    /// under it.
    pub(super) fn install_policy(&mut self, q: usize, p: SimPolicy) -> Step {
        // Timeline policies were validated when the scenario was parsed.
        let policy = build_policy(&p).expect("timeline policy validated at parse time");
        let w = &mut self.queues[q].worker;
        let step = w.executor.switch(policy, Instant(self.now));
        w.policy_label = p.label();
        w.settled_at = None;
        w.policy_since = self.now;
        step
    }
}
