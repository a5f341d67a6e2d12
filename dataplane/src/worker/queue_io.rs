//! The one interface between a queue worker and the world ([`QueueIo`]):
//! rings, kicks, calls, timers, the policy's slot (`docs/style.md` rule 2).
//!
//! A VM port's rings ([`crate::port::port_queues::PortQueues`]) and an
//! uplink's NIC queue (`crate::uplink::worker::UplinkQueue`) implement it;
//! tests implement it over scripted worlds on a virtual clock, and
//! [`super::fault_injector::FaultInjector`] wraps any of them to make timers
//! late, wake-ups spurious, kicks lost and passes short. Only a
//! [`super::QueueSet`] steps a policy's executor over it.

use super::pending_wait::PendingWait;
use super::ring_bases::RingBases;
use crate::metrics::WorkerStats;
use std::os::fd::RawFd;
pub use vadapt_policy::PassStats;
use vadapt_policy::{
    Budget, Duration, FreqHint, Instant, Policy, PolicyStatus, Retune, Step, Wake, WakeCause,
};

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// Why it ended.
    pub cause: WakeCause,
    /// How long it lasted.
    pub waited: Duration,
}

impl Wait {
    /// No wait at all ([`Wake::Now`]).
    pub const NONE: Wait = Wait {
        cause: WakeCause::Immediate,
        waited: Duration::ZERO,
    };
}

/// What the owner of the queues wants, checked after every pass.
#[derive(Debug)]
pub enum Control {
    /// Keep going.
    Continue,
    /// No more passes (the frontend failed, the uplink stops).
    Stop,
    /// Replace the policy (`vadapt set-policy`).
    Switch(Box<dyn Policy>),
    /// Change a parameter of the running policy (`vadapt retune`).
    Retune(Retune),
}

/// The world of a queue worker: a set of queues whose waits never block.
///
/// A wait is cut in three steps that follow the policy crate's
/// [`vadapt_policy::wait_protocol`]: [`QueueIo::begin_wait`] (notifications,
/// re-check, timer), [`QueueIo::poll_wait`] whenever the worker looks
/// (after its epoll set saw [`QueueIo::waiter_fd`] readable), and
/// [`QueueIo::end_wait`] once it has ended. A worker of its own and a pool
/// worker serving many sets run the same steps (see [`super::pool`]).
pub trait QueueIo: Send {
    /// The name the pool shows for it (a port, or an uplink's `port/queue`).
    fn name(&self) -> &str;
    /// Monotonic time now.
    fn now(&mut self) -> Instant;
    /// Service every queue once, at most `budget` per queue.
    fn service(&mut self, budget: Budget) -> PassStats;
    /// A descriptor readable when the queues need their worker (an epoll
    /// set of their own, which the worker's epoll set watches). `None`: a
    /// world on a virtual clock, whose waits end when polled.
    fn waiter_fd(&self) -> Option<RawFd>;
    /// Begins the wait `wake` asks for.
    fn begin_wait(&mut self, wake: Wake) -> PendingWait;
    /// Looks, without blocking, whether the wait `w` has ended; records
    /// why in `w.ready`.
    fn poll_wait(&mut self, w: &mut PendingWait);
    /// Ends the wait `w` (ready, or given up when the set is finished).
    fn end_wait(&mut self, w: PendingWait) -> Wait;
    /// Apply a CPU-frequency hint (no-op where the host has no cpufreq).
    fn set_freq(&mut self, hint: FreqHint);
    /// Stop, switch policy, retune it, or continue.
    fn control(&mut self) -> Control;
    /// A retune asked for by [`QueueIo::control`] was refused (the policy
    /// runs on unchanged); `error` says why.
    fn retune_refused(&mut self, _retune: &Retune, _error: &vadapt_policy::RetuneError) {}
    /// Called with every step before its wait begins, for metrics.
    fn observe(&mut self, _status: &PolicyStatus, _step: &Step) {}
    /// The policy to run: the port's parked one, or a new one.
    fn take_policy(&mut self) -> Box<dyn Policy>;
    /// Hands the policy back to the port for the next incarnation.
    fn park_policy(&mut self, policy: Box<dyn Policy>);
    /// Ends the queues for good; the rings' positions where they have
    /// guest rings, else none.
    fn into_bases(self: Box<Self>) -> RingBases;
    /// The counters a thread of the set's own publishes its id and CPU
    /// time in (none: nobody looks for the thread).
    fn worker_stats(&self) -> Option<&WorkerStats> {
        None
    }
}
