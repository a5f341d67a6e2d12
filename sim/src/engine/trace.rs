//! Recording the executor calls of one queue worker, for the data plane's
//! parity test.

use vadapt_policy::{Instant, PassStats, Step, WakeCause};

/// The executor calls of one simulated queue worker, in order: what each
/// pass reported and the step the executor answered. The daemon's worker
/// loop replayed over the same passes must answer the same steps (a test in
/// the data plane checks it).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The queue traced (index over all VMs' queues).
    pub queue: usize,
    /// Stop recording after this many passes.
    pub max_passes: usize,
    /// The first step, at time 0.
    pub first: Option<Step>,
    /// Every pass, in order.
    pub passes: Vec<TracedPass>,
}

/// One pass of a [`Trace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracedPass {
    /// End of the pass.
    pub now: Instant,
    /// What ended the wait before it.
    pub wake: WakeCause,
    /// How long that wait lasted.
    pub waited: vadapt_policy::Duration,
    /// What the pass did.
    pub stats: PassStats,
    /// The step the executor answered.
    pub step: Step,
}

impl Trace {
    /// Record `pass` if it is of the traced queue and the trace is not full.
    pub(super) fn record(&mut self, queue: usize, pass: TracedPass) {
        if self.queue == queue && self.passes.len() < self.max_passes {
            self.passes.push(pass);
        }
    }
}
