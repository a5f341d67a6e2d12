//! A wait between two passes that a worker never blocks in: begun by
//! [`QueueIo::begin_wait`], checked without blocking by
//! [`QueueIo::poll_wait`] whenever the worker looks (its epoll set saw the
//! queues' waiter readable), and ended by [`QueueIo::end_wait`]. Every
//! world follows the policy crate's [`wait_protocol`] (notifications,
//! re-check, kick thresholds, what ended the wait) through these three
//! calls, whether its worker serves it alone or with others.
//!
//! [`QueueIo::begin_wait`]: super::QueueIo::begin_wait
//! [`QueueIo::poll_wait`]: super::QueueIo::poll_wait
//! [`QueueIo::end_wait`]: super::QueueIo::end_wait
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

    /// What [`vadapt_policy::wait_protocol::begin_wait`] would begin for
    /// `wake` on queues whose kicks are always on and thresholds always
    /// armed, without blocking: for worlds on a virtual clock, which decide
    /// in [`super::QueueIo::poll_wait`] when the wait ends.
    pub fn begun(wake: vadapt_policy::Wake, start: Instant) -> Self {
        use vadapt_policy::Wake;
        match wake {
            Wake::Now => Self::ended_at_once(WaitKind::Poll, WakeCause::Immediate, start),
            Wake::At { at, kick_threshold } => Self::blocked(
                WaitKind::Sleep {
                    until: at,
                    kicks_armed: kick_threshold.is_some(),
                },
                at,
                start,
            ),
            Wake::Kick { until } => Self::blocked(WaitKind::Kick { until }, until, start),
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
