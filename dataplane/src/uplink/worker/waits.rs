//! An uplink's NIC queue's waits, which never block: three steps that
//! follow the policy crate's wait protocol, as a VM port's do:
//! * a wait for a kick watches the AF_XDP socket (the NIC's interrupt) and
//!   the queue's wake eventfd (frames from the switch), in the queue's own
//!   epoll set, which the worker's epoll set watches;
//! * a timed sleep unwatches the socket and arms the queue's timer; a kick
//!   threshold (NetAP's safety net) is the backlog's fill.

use super::UplinkQueue;
use crate::clock::monotonic_now;
use crate::queue::waiting::Woken;
use crate::worker::{PendingWait, Wait};
use std::sync::atomic::{fence, Ordering};
use vadapt_policy::wait_protocol::{self, Begun, KickThreshold, Notifications, WaitKind, Woke};
use vadapt_policy::{Duration, Wake, WakeCause};

/// The waits of [`crate::worker::QueueIo`].
impl UplinkQueue {
    /// See [`crate::worker::QueueIo::begin_wait`].
    pub(super) fn begin(&mut self, wake: Wake) -> PendingWait {
        self.publish_counts();
        let start = monotonic_now();
        if matches!(wake, Wake::At { .. }) {
            // The NIC's interrupt suppressed while the queue sleeps.
            self.waiter.watch_kicks(false);
        }
        match wait_protocol::begin_wait(wake, self) {
            Begun::Ready { kind, cause } => PendingWait::ended_at_once(kind, cause, start),
            Begun::Blocked { kind, until } => {
                let left = until.saturating_since(start);
                // A stalled TX ring is retried soon (see `tx_retry`).
                let left = match kind {
                    WaitKind::Kick { .. } => self.tx_retry(left),
                    _ => left,
                };
                let until = start + left;
                let _ = self.waiter.arm_timer(left);
                PendingWait::blocked(kind, until, start)
            }
        }
    }

    /// See [`crate::worker::QueueIo::poll_wait`].
    pub(super) fn poll(&mut self, w: &mut PendingWait) {
        if w.ready.is_some() {
            return;
        }
        let port = std::sync::Arc::clone(&self.port);
        let slot = &port.queues[self.q];
        let woken = self.waiter.poll(&slot.wake).unwrap_or_else(|e| {
            tracing::error!(port = port.name(), queue = self.q, error = %e, "epoll_wait failed");
            // Treated as a wake-up: the pass looks for itself.
            Woken {
                wake: true,
                ..Woken::default()
            }
        });
        let kick = match w.kind {
            WaitKind::Sleep {
                kicks_armed: true, ..
            } => {
                let at = slot.wake_at.load(Ordering::Relaxed);
                at > 0 && slot.backlog.held() >= at
            }
            WaitKind::Kick { .. } => {
                if woken.kick {
                    port.stats.queues[self.q]
                        .kicks
                        .fetch_add(1, Ordering::Relaxed);
                }
                woken.kick || self.xsk.rx_ready()
            }
            _ => false,
        };
        let woke = Woke {
            kick,
            timer: woken.timer || monotonic_now() >= w.target,
            signal: woken.wake || self.stop.load(Ordering::Relaxed),
        };
        w.ready = w.kind.cause(woke);
    }

    /// See [`crate::worker::QueueIo::end_wait`].
    pub(super) fn end(&mut self, w: PendingWait) -> Wait {
        let cause = w.ready.unwrap_or(WakeCause::Recheck);
        if w.kind == WaitKind::Poll {
            return Wait {
                cause: WakeCause::Immediate,
                waited: Duration::ZERO,
            };
        }
        self.waiter.disarm_timer();
        wait_protocol::end_wait(w.kind, self);
        Wait {
            cause,
            waited: monotonic_now().saturating_since(w.start),
        }
    }
}

/// The NIC queue as the wait protocol drives it.
impl Notifications for UplinkQueue {
    /// The socket watched; the switch asked to wake the queue. True if
    /// frames already wait either way.
    fn enable_kicks(&mut self) -> bool {
        self.waiter.watch_kicks(true);
        self.has_work()
    }

    fn has_work(&mut self) -> bool {
        self.port.queues[self.q]
            .waiting
            .store(true, Ordering::Relaxed);
        // Pairs with the switch's fence in `deliver`: either it sees
        // `waiting` and wakes us, or we see its frames here.
        fence(Ordering::SeqCst);
        self.xsk.rx_ready() || self.tx_work()
    }

    fn disable_kicks(&mut self) {
        self.port.queues[self.q]
            .waiting
            .store(false, Ordering::Relaxed);
        self.waiter.watch_kicks(false);
    }

    /// `threshold` of the backlog: frames from the switch filling it wake
    /// the queue early.
    fn arm_kick_threshold(&mut self, threshold: KickThreshold) -> bool {
        if threshold.permille() == 0 {
            return false;
        }
        let slot = &self.port.queues[self.q];
        let at = (usize::from(threshold.permille()) * slot.backlog.capacity() / 1000).max(1);
        slot.wake_at.store(at, Ordering::Relaxed);
        // Pairs with the switch's fence in `deliver`.
        fence(Ordering::SeqCst);
        true
    }

    fn disarm_kick_threshold(&mut self) {
        self.port.queues[self.q].wake_at.store(0, Ordering::Relaxed);
    }
}
