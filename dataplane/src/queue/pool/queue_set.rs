//! One VM port's running queues as a pool worker serves them: the rings
//! ([`PortQueues`]), the port's policy in its [`Executor`], the step it
//! asked for and the wait under way. It moves between workers whole, so
//! the policy's state (NetAP's search, EE-KBP's phase) and the rings'
//! positions go with it.
//!
//! The same steps as [`crate::queue::drive::drive`], cut at the wait: a worker
//! calls [`QueueSet::poll`] and, when the wait has ended, [`QueueSet::run_pass`].

use crate::queue::drive::{Control, QueueIo};
use crate::queue::pending_wait::PendingWait;
use crate::queue::policy_slot::WorkerView;
use crate::queue::port_queues::PortQueues;
use vadapt_policy::{Executor, Step, WakeCause};

/// A port's queues, policy and wait (see the module docs).
pub struct QueueSet {
    /// The set's id in the pool's assignment (the port's switch id).
    pub(crate) id: u64,
    pub(crate) queues: PortQueues,
    exec: Executor,
    step: Step,
    pending: PendingWait,
    view: WorkerView,
    /// The port's control said stop (its frontend failed): no more passes
    /// until the connection handler takes the set back.
    stopped: bool,
}

impl std::fmt::Debug for QueueSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSet")
            .field("id", &self.id)
            .field("port", &self.queues.port().name())
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl QueueSet {
    /// Takes the port's policy (as a worker thread of its own would) and
    /// begins its first wait.
    pub fn start(id: u64, mut queues: PortQueues) -> Self {
        let port = std::sync::Arc::clone(queues.port());
        let (policy, view) = port.policy.take(port.name());
        queues.policy_view = Some(view);
        let (exec, step) = Executor::start(policy, queues.now());
        let pending = queues.begin_wait(step.wake);
        let mut set = QueueSet {
            id,
            queues,
            exec,
            step,
            pending,
            view,
            stopped: false,
        };
        set.announce();
        set
    }

    /// The port's name.
    pub fn port_name(&self) -> &str {
        self.queues.port().name()
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

    /// Ends the wait, serves every queue once, asks the port's control and
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

    /// What `drive` does with every step before its wait.
    fn announce(&mut self) {
        self.queues.observe(&self.exec.status(), &self.step);
        if let Some(f) = self.step.freq {
            self.queues.set_freq(f);
        }
    }

    /// Ends the set for good: the wait under way is ended without a pass
    /// (notifications off, the port no longer marked waiting), the policy
    /// is parked in the port's slot for the next incarnation, and the
    /// rings' positions are returned (ring index, next avail).
    pub fn finish(mut self) -> Vec<(usize, u16)> {
        if !self.stopped {
            self.pending.ready = Some(WakeCause::Immediate);
            let _ = self.queues.end_wait(self.pending);
        }
        let port = std::sync::Arc::clone(self.queues.port());
        // The view as the port's control last updated it: a policy switched
        // during this life is the one parked, with its state.
        let view = self.queues.policy_view.unwrap_or(self.view);
        port.policy.park(self.exec.into_policy(), &view);
        self.queues.into_bases()
    }
}
