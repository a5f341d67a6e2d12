//! A wait between two passes that a worker serving several ports does not
//! block in: begun by [`PortQueues::begin_wait`], checked without blocking
//! by [`PortQueues::poll_wait`] whenever the worker's epoll set says the
//! port's [`Waiter`](super::waiting::Waiter) is readable, and ended by
//! [`PortQueues::end_wait`].
//!
//! The three calls do what [`QueueIo::sleep`] and [`QueueIo::wait_kick`] do
//! in one blocking call for a worker of its own: both follow the policy
//! crate's [`wait_protocol`] (notifications, re-check, kick thresholds, what
//! ended the wait), and drain and count kicks the same way. A plain
//! sleep arms the port's timerfd instead of `clock_nanosleep`, since the
//! worker must also hear the other ports it serves.
//!
//! [`PortQueues::begin_wait`]: super::port_queues::PortQueues::begin_wait
//! [`PortQueues::poll_wait`]: super::port_queues::PortQueues::poll_wait
//! [`PortQueues::end_wait`]: super::port_queues::PortQueues::end_wait
//! [`QueueIo::sleep`]: crate::queue::drive::QueueIo::sleep
//! [`QueueIo::wait_kick`]: crate::queue::drive::QueueIo::wait_kick
//! [`wait_protocol`]: vadapt_policy::wait_protocol

use vadapt_policy::wait_protocol::WaitKind;
use vadapt_policy::{Instant, WakeCause};

/// A wait under way (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingWait {
    /// What kind of wait (as [`vadapt_policy::wait_protocol::begin_wait`]
    /// began it).
    pub kind: WaitKind,
    /// When the port's timer was asked to fire: a sleep's deadline, earlier
    /// by the mean lateness; a wait for a kick's deadline; the start of a
    /// wait that never blocked.
    pub target: Instant,
    /// When it began.
    pub start: Instant,
    /// Why it ended, once it has (`None`: still waiting).
    pub ready: Option<WakeCause>,
}

impl PendingWait {
    /// A wait that ended as it began (the re-check found work, or it was a
    /// poll): ready with `cause`, its target its start.
    pub fn ended_at_once(kind: WaitKind, cause: WakeCause, start: Instant) -> Self {
        PendingWait {
            kind,
            target: start,
            start,
            ready: Some(cause),
        }
    }

    /// A wait that blocks, begun at `start`, whose timer fires at `target`.
    pub fn blocked(kind: WaitKind, target: Instant, start: Instant) -> Self {
        PendingWait {
            kind,
            target,
            start,
            ready: None,
        }
    }

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
        if matches!(self.kind, WaitKind::Kick { .. }) && self.ready.is_none() {
            self.ready = Some(WakeCause::Recheck);
        }
    }
}
