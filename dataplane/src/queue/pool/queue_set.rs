//! One set of queues as a pool worker serves them — a VM port's rings
//! ([`PortQueues`](crate::queue::PortQueues)) or an uplink's NIC queue —
//! with its policy in its [`Executor`], the step it asked for and the wait
//! under way. It moves between workers whole, so the policy's state
//! (NetAP's search, EE-KBP's phase) and the rings' positions go with it.
//!
//! The same steps as [`crate::queue::drive::drive`], cut at the wait: a worker
//! calls [`QueueSet::poll`] and, when the wait has ended, [`QueueSet::run_pass`].

use super::pooled::PooledQueues;
use crate::queue::drive::Control;
use crate::queue::pending_wait::PendingWait;
use vadapt_policy::{Executor, Step, WakeCause};

/// A set of queues, its policy and wait (see the module docs).
pub struct QueueSet {
    /// The set's id in the pool's assignment (a VM port's switch id; see
    /// the uplink for its queues' ids).
    pub(crate) id: u64,
    pub(crate) queues: Box<dyn PooledQueues>,
    exec: Executor,
    step: Step,
    pending: PendingWait,
    /// The port's control said stop (its frontend failed): no more passes
    /// until the connection handler takes the set back.
    stopped: bool,
}

impl std::fmt::Debug for QueueSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSet")
            .field("id", &self.id)
            .field("port", &self.queues.name())
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl QueueSet {
    /// Takes the port's policy (as a worker thread of its own would) and
    /// begins its first wait.
    pub fn start(id: u64, queues: impl PooledQueues + 'static) -> Self {
        let mut queues: Box<dyn PooledQueues> = Box::new(queues);
        let policy = queues.take_policy();
        let (exec, step) = Executor::start(policy, queues.now());
        let pending = queues.begin_wait(step.wake);
        let mut set = QueueSet {
            id,
            queues,
            exec,
            step,
            pending,
            stopped: false,
        };
        set.announce();
        set
    }

    /// The port's name (an uplink's queue: `port/queue`).
    pub fn port_name(&self) -> &str {
        self.queues.name()
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
        // A policy switched during this life is the one parked, with its
        // state.
        self.queues.park_policy(self.exec.into_policy());
        self.queues.into_bases()
    }
}
