//! A simulated queue worker: the shared executor with the policy it runs,
//! what the worker is doing, and the pass in progress.

use crate::scenario::SimPolicy;
use vadapt_policy::wait_protocol::WaitKind;
use vadapt_policy::{Executor, WakeCause};

/// What a queue worker is doing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum WorkerState {
    /// In a service pass, burning down its CPU work.
    Running,
    /// Woken (by a kick, a signal or the NIC), not yet running.
    Waking,
    /// Sleeping until a timer (`Wake::At`).
    Sleeping,
    /// Waiting for a kick, with notifications enabled (`Wake::Kick`).
    WaitingForKick,
}

/// What the pass in progress found and did, reported to the executor at its
/// end.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PassInProgress {
    /// What ended the wait before the pass.
    pub(super) wake: Option<WakeCause>,
    /// How long that wait lasted, ns.
    pub(super) waited: u64,
    /// Chains (packets) moved guest → host.
    pub(super) tx: u64,
    /// Chains (packets) moved host → guest.
    pub(super) rx: u64,
    /// Bytes moved, headers included.
    pub(super) bytes: u64,
    /// Payload bytes moved.
    pub(super) payload: u64,
    /// Work was left when the pass ended.
    pub(super) more_work: bool,
    /// Ring fill at the start of the pass, ‰.
    pub(super) fill_permille: u16,
}

/// One queue worker: the daemon's executor over a policy, and the time and
/// CPU its steps take.
#[derive(Debug)]
pub(super) struct QueueWorker {
    /// The policy and the executor of its decisions (shared with the daemon).
    pub(super) executor: Executor,
    /// Label of the policy running.
    pub(super) policy_label: String,
    /// What the worker is doing.
    pub(super) state: WorkerState,
    /// Bumped at every new wait: events scheduled for an older wait are stale.
    pub(super) generation: u64,
    /// The current (or last) wait, as the wait protocol began it.
    pub(super) wait: WaitKind,
    /// CPU work left in the current pass, ns at the top frequency.
    pub(super) work_left: f64,
    /// The current (or blocked) pass.
    pub(super) pass: PassInProgress,
    /// When the current wait began, ns.
    pub(super) wait_start: u64,
    /// A policy switch that waits for the end of the current pass.
    pub(super) pending_policy: Option<SimPolicy>,
    /// Index of the worker's frequency in `host.power.freqs_mhz`.
    pub(super) freq_index: usize,
    /// CPU time used, ns.
    pub(super) busy_ns: f64,
    /// When the policy first reported itself settled, ns.
    pub(super) settled_at: Option<u64>,
    /// When the current policy was installed, ns.
    pub(super) policy_since: u64,
}

impl QueueWorker {
    /// A worker that has just started `executor` at time 0, asleep until
    /// its first step is carried out.
    pub(super) fn new(executor: Executor, policy_label: String, freq_index: usize) -> Self {
        QueueWorker {
            executor,
            policy_label,
            state: WorkerState::Sleeping,
            generation: 0,
            wait: WaitKind::Poll,
            work_left: 0.0,
            pass: PassInProgress::default(),
            wait_start: 0,
            pending_policy: None,
            freq_index,
            busy_ns: 0.0,
            settled_at: None,
            policy_since: 0,
        }
    }

    /// Start the wait `wait` in `state` at `now`; returns its generation.
    pub(super) fn begin_wait(&mut self, state: WorkerState, wait: WaitKind, now: u64) -> u64 {
        self.state = state;
        self.wait = wait;
        self.wait_start = now;
        self.generation += 1;
        self.generation
    }

    /// Become runnable soon (a kick or a signal); returns the generation of
    /// the wake-up.
    pub(super) fn begin_waking(&mut self) -> u64 {
        self.generation += 1;
        self.state = WorkerState::Waking;
        self.generation
    }
}
