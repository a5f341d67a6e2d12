//! A wait between two passes that a worker serving several ports does not
//! block in: begun by [`PortQueues::begin_wait`], checked without blocking
//! by [`PortQueues::poll_wait`] whenever the worker's epoll set says the
//! port's [`Waiter`](super::waiting::Waiter) is readable, and ended by
//! [`PortQueues::end_wait`].
//!
//! The three calls do what [`QueueIo::sleep`] and [`QueueIo::wait_kick`] do
//! in one blocking call for a worker of its own: the same notification
//! handling, re-check, kick thresholds, draining and counting. A plain
//! sleep arms the port's timerfd instead of `clock_nanosleep`, since the
//! worker must also hear the other ports it serves.
//!
//! [`PortQueues::begin_wait`]: super::port_queues::PortQueues::begin_wait
//! [`PortQueues::poll_wait`]: super::port_queues::PortQueues::poll_wait
//! [`PortQueues::end_wait`]: super::port_queues::PortQueues::end_wait
//! [`QueueIo::sleep`]: crate::queue::drive::QueueIo::sleep
//! [`QueueIo::wait_kick`]: crate::queue::drive::QueueIo::wait_kick

use vadapt_policy::{Instant, WakeCause};

/// What kind of wait is under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// [`vadapt_policy::Wake::Now`]: no wait; ready at once.
    Poll,
    /// [`vadapt_policy::Wake::At`] with notifications off.
    Sleep {
        /// When the sleep should end.
        deadline: Instant,
        /// When the timer was asked to fire (earlier by the mean lateness).
        target: Instant,
        /// A kick threshold is armed: a kick ends the sleep.
        armed: bool,
    },
    /// [`vadapt_policy::Wake::Kick`] with notifications on; the timer is
    /// armed for its deadline unless the re-check found work.
    Kick,
}

/// A wait under way (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingWait {
    /// What kind of wait.
    pub kind: WaitKind,
    /// When it began.
    pub start: Instant,
    /// Why it ended, once it has (`None`: still waiting).
    pub ready: Option<WakeCause>,
}

impl PendingWait {
    /// Whether the wait has ended and the port is due for a pass.
    pub fn is_ready(&self) -> bool {
        self.ready.is_some()
    }

    /// A worker that just took this port from another one re-checks its
    /// rings at once when it was waiting for a kick: a kick that arrived
    /// during the handoff is then seen even if its eventfd was drained. A
    /// sleep runs on: its timer and armed kicks are in the port's waiter,
    /// which moved with it.
    pub fn after_handoff(&mut self) {
        if matches!(self.kind, WaitKind::Kick) && self.ready.is_none() {
            self.ready = Some(WakeCause::Recheck);
        }
    }
}
