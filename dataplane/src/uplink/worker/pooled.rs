//! An uplink's NIC queue as a pool worker serves it
//! ([`PooledQueues`]): the same waits as [`QueueIo::sleep`] and
//! [`QueueIo::wait_kick`] on a worker of its own, cut in three
//! non-blocking steps that follow the policy crate's wait protocol, as a
//! VM port's are:
//! * a wait for a kick watches the AF_XDP socket (the NIC's interrupt) and
//!   the queue's wake eventfd (frames from the switch), in the queue's own
//!   epoll set, which the pool worker's epoll set watches;
//! * a timed sleep unwatches the socket and arms the queue's timer; a kick
//!   threshold (NetAP's safety net) is the backlog's fill, as on a worker
//!   of its own.
//!
//! [`QueueIo::sleep`]: crate::queue::drive::QueueIo::sleep
//! [`QueueIo::wait_kick`]: crate::queue::drive::QueueIo::wait_kick

use super::UplinkQueue;
use crate::clock::monotonic_now;
use crate::queue::drive::Wait;
use crate::queue::pending_wait::PendingWait;
use crate::queue::pool::PooledQueues;
use crate::queue::waiting::Woken;
use std::sync::atomic::{fence, Ordering};
use vadapt_policy::wait_protocol::{self, Begun, KickThreshold, Notifications, WaitKind, Woke};
use vadapt_policy::{Duration, Policy, Wake, WakeCause};

impl PooledQueues for UplinkQueue {
    fn name(&self) -> &str {
        &self.label
    }

    fn waiter_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.waiter.as_raw_fd()
    }

    fn begin_wait(&mut self, wake: Wake) -> PendingWait {
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

    fn poll_wait(&mut self, w: &mut PendingWait) {
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

    fn end_wait(&mut self, w: PendingWait) -> Wait {
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

    fn take_policy(&mut self) -> Box<dyn Policy> {
        let port = std::sync::Arc::clone(&self.port);
        let (policy, view) = port.queues[self.q].policy.take(port.name());
        self.policy_view = Some(view);
        policy
    }

    fn park_policy(&mut self, policy: Box<dyn Policy>) {
        if let Some(view) = self.policy_view.take() {
            self.port.queues[self.q].policy.park(policy, &view);
        }
    }

    fn into_bases(self: Box<Self>) -> Vec<(usize, u16)> {
        // No guest rings: closing the socket (on drop) is all.
        Vec::new()
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
