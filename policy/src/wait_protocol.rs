//! How a queue worker carries out an executor's [`Wake`]: the protocol
//! around guest notifications (kicks), written once for the daemon's worker
//! and the simulator's.
//!
//! It is sans-IO like the executor: nothing here blocks or reads a clock.
//! The I/O side hands in its rings as [`Notifications`] and gets back what to
//! do; it keeps the real-time parts (epoll, timers, the simulator's events).
//!
//! ```text
//!   begun = begin_wait(step.wake, &mut rings)
//!   if begun is Blocked { kind, until }:
//!       block until `until`, a kick, or a wake signal (the I/O side's part)
//!       cause = kind.cause(what woke it)      (None: still waiting; block again)
//!   else Ready { kind, cause }: no block
//!   end_wait(kind, &mut rings)
//!   exec.woke(cause, waited)
//! ```
//!
//! The protocol:
//!
//! - [`Wake::Now`]: no wait, [`WakeCause::Immediate`].
//! - [`Wake::Kick`]: enable kicks, then re-check the rings — work a guest
//!   added between the worker's last look and the enable would never kick —
//!   and either pass at once ([`WakeCause::Recheck`]) or block until a kick
//!   or a wake signal ([`WakeCause::Kick`]) or the deadline
//!   ([`WakeCause::Timeout`]). Kicks go off again when the wait ends.
//! - [`Wake::At`]: a sleep with kicks off, except the ring-full safety net:
//!   a kick threshold in permille is armed as [`kick_fill`] descriptors on
//!   each ring ([`KickThreshold`]). It ends at the deadline or on a wake
//!   signal ([`WakeCause::Timer`]), or on a kick if a threshold was armed
//!   ([`WakeCause::Kick`]); the threshold is disarmed when it ends. A sleep
//!   without a threshold touches no ring: kicks are already off, since every
//!   wait turns off what it turned on.
//!
//! The worker's loop itself is not shared: the daemon's blocks in each wait
//! (`QueueIo` and `drive` in the data plane), the simulator's is event
//! driven and cannot block. What they share is what can be stepped: the
//! [`Executor`](crate::Executor) and this protocol.

use crate::executor::{kick_fill, Wake};
use crate::interface::WakeCause;
use crate::time::Instant;

/// The notification side of a worker's rings, as the wait protocol drives
/// it (the daemon's virtqueues, the simulator's modelled ring).
pub trait Notifications {
    /// Ask the guest to kick on every ring. Returns `true` if a ring already
    /// showed work while its kicks were enabled (the worker must pass
    /// rather than block).
    fn enable_kicks(&mut self) -> bool;

    /// The re-check after [`Notifications::enable_kicks`] found nothing:
    /// whether work is waiting that would not kick (frames that came
    /// meanwhile, requests, responses).
    fn has_work(&mut self) -> bool;

    /// Turn the kicks [`Notifications::enable_kicks`] asked for off again.
    fn disable_kicks(&mut self);

    /// Ask for a kick once a ring of `size` entries holds
    /// `threshold.descriptors(size)` pending descriptors. Returns `true` if
    /// a ring armed it: a kick can then end the sleep.
    fn arm_kick_threshold(&mut self, threshold: KickThreshold) -> bool;

    /// Turn a threshold armed by [`Notifications::arm_kick_threshold`] off
    /// again.
    fn disarm_kick_threshold(&mut self);
}

/// A sleep's kick threshold (`kick_threshold` of [`Wake::At`]), permille of a
/// ring's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KickThreshold {
    permille: u16,
}

impl KickThreshold {
    /// The threshold `permille` ‰ of a ring's size.
    pub fn new(permille: u16) -> KickThreshold {
        KickThreshold { permille }
    }

    /// The threshold, permille of a ring's size.
    pub fn permille(self) -> u16 {
        self.permille
    }

    /// The number of pending descriptors at which a ring of `ring_size`
    /// entries lets a kick through ([`kick_fill`]).
    pub fn descriptors(self, ring_size: u16) -> u16 {
        kick_fill(self.permille, ring_size)
    }
}

/// The kind of wait under way: how it may end, and what [`end_wait`] turns
/// off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// [`Wake::Now`]: no wait at all.
    Poll,
    /// [`Wake::At`]: a sleep until `until`, kicks off.
    Sleep {
        /// When the sleep ends.
        until: Instant,
        /// A kick threshold is armed: a kick ends the sleep.
        kicks_armed: bool,
    },
    /// [`Wake::Kick`]: a wait for a kick, kicks on.
    Kick {
        /// The latest time to look at the rings again.
        until: Instant,
    },
}

/// What a blocked worker saw when it woke (any combination).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Woke {
    /// A guest kicked a ring.
    pub kick: bool,
    /// The timer fired, or the deadline has passed.
    pub timer: bool,
    /// The host side signalled the worker (frames for a ring, a request),
    /// without a kick.
    pub signal: bool,
}

impl Woke {
    /// Woken by a kick only.
    pub const KICK: Woke = Woke {
        kick: true,
        timer: false,
        signal: false,
    };
    /// Woken by the timer only.
    pub const TIMER: Woke = Woke {
        kick: false,
        timer: true,
        signal: false,
    };
    /// Woken by a signal only.
    pub const SIGNAL: Woke = Woke {
        kick: false,
        timer: false,
        signal: true,
    };
}

impl WaitKind {
    /// What ended this wait, if `woke` ends it (`None`: it goes on; a kick
    /// that came during a sleep without a threshold, or a wake-up that saw
    /// nothing). A kick wins over the timer: the worker has work either way.
    pub fn cause(self, woke: Woke) -> Option<WakeCause> {
        match self {
            WaitKind::Poll => Some(WakeCause::Immediate),
            WaitKind::Sleep { kicks_armed, .. } => {
                if woke.kick && kicks_armed {
                    Some(WakeCause::Kick)
                } else if woke.timer || woke.signal {
                    Some(WakeCause::Timer)
                } else {
                    None
                }
            }
            WaitKind::Kick { .. } => {
                if woke.kick || woke.signal {
                    Some(WakeCause::Kick)
                } else if woke.timer {
                    Some(WakeCause::Timeout)
                } else {
                    None
                }
            }
        }
    }
}

/// A wait begun by [`begin_wait`]: what the I/O side does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begun {
    /// The wait is over before it blocked: pass at once for `cause`
    /// ([`WakeCause::Immediate`] after [`Wake::Now`], [`WakeCause::Recheck`]
    /// when the re-check found work), after [`end_wait`].
    Ready {
        /// The wait, to hand to [`end_wait`].
        kind: WaitKind,
        /// Why the pass comes.
        cause: WakeCause,
    },
    /// Block until `until` at the latest; [`WaitKind::cause`] says whether a
    /// wake-up ends the wait.
    Blocked {
        /// The wait, to classify wake-ups with and hand to [`end_wait`].
        kind: WaitKind,
        /// The deadline.
        until: Instant,
    },
}

impl Begun {
    /// The wait begun.
    pub fn kind(self) -> WaitKind {
        match self {
            Begun::Ready { kind, .. } | Begun::Blocked { kind, .. } => kind,
        }
    }
}

/// Begin carrying out `wake` on `rings` (see the module docs): kicks
/// enabled and the rings re-checked, or a kick threshold armed.
pub fn begin_wait(wake: Wake, rings: &mut impl Notifications) -> Begun {
    match wake {
        Wake::Now => Begun::Ready {
            kind: WaitKind::Poll,
            cause: WakeCause::Immediate,
        },
        Wake::At { at, kick_threshold } => {
            let kicks_armed =
                kick_threshold.is_some_and(|p| rings.arm_kick_threshold(KickThreshold::new(p)));
            Begun::Blocked {
                kind: WaitKind::Sleep {
                    until: at,
                    kicks_armed,
                },
                until: at,
            }
        }
        Wake::Kick { until } => {
            let kind = WaitKind::Kick { until };
            // Re-check after the enable: a guest that added work between
            // the worker's last look and the enable would never kick.
            if rings.enable_kicks() || rings.has_work() {
                Begun::Ready {
                    kind,
                    cause: WakeCause::Recheck,
                }
            } else {
                Begun::Blocked { kind, until }
            }
        }
    }
}

/// End the wait `kind`, however it ended: turn off the kicks it turned on.
pub fn end_wait(kind: WaitKind, rings: &mut impl Notifications) {
    match kind {
        WaitKind::Poll => {}
        WaitKind::Sleep { kicks_armed, .. } => {
            if kicks_armed {
                rings.disarm_kick_threshold();
            }
        }
        WaitKind::Kick { .. } => rings.disable_kicks(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rings of one size whose answers are scripted; records what the
    /// protocol did to them.
    #[derive(Debug, Default)]
    struct ScriptedRings {
        size: u16,
        /// `enable_kicks` sees work.
        work_at_enable: bool,
        /// `has_work` finds work.
        work_at_recheck: bool,
        /// The rings can take a kick threshold (EVENT_IDX).
        thresholds: bool,
        calls: Vec<String>,
    }

    impl Notifications for ScriptedRings {
        fn enable_kicks(&mut self) -> bool {
            self.calls.push("enable".into());
            self.work_at_enable
        }
        fn has_work(&mut self) -> bool {
            self.calls.push("recheck".into());
            self.work_at_recheck
        }
        fn disable_kicks(&mut self) {
            self.calls.push("disable".into());
        }
        fn arm_kick_threshold(&mut self, threshold: KickThreshold) -> bool {
            self.calls
                .push(format!("threshold {}", threshold.descriptors(self.size)));
            self.thresholds
        }
        fn disarm_kick_threshold(&mut self) {
            self.calls.push("disarm".into());
        }
    }

    fn rings() -> ScriptedRings {
        ScriptedRings {
            size: 256,
            thresholds: true,
            ..ScriptedRings::default()
        }
    }

    const UNTIL: Instant = Instant(5_000);

    #[test]
    fn work_that_came_before_the_enable_is_found_by_the_recheck() {
        let mut r = ScriptedRings {
            work_at_recheck: true,
            ..rings()
        };
        let begun = begin_wait(Wake::Kick { until: UNTIL }, &mut r);
        assert_eq!(
            begun,
            Begun::Ready {
                kind: WaitKind::Kick { until: UNTIL },
                cause: WakeCause::Recheck
            }
        );
        end_wait(begun.kind(), &mut r);
        assert_eq!(r.calls, ["enable", "recheck", "disable"]);
    }

    #[test]
    fn work_seen_by_the_enable_needs_no_recheck() {
        let mut r = ScriptedRings {
            work_at_enable: true,
            ..rings()
        };
        let begun = begin_wait(Wake::Kick { until: UNTIL }, &mut r);
        assert!(matches!(
            begun,
            Begun::Ready {
                cause: WakeCause::Recheck,
                ..
            }
        ));
        assert_eq!(r.calls, ["enable"]);
    }

    #[test]
    fn empty_rings_block_until_a_kick_or_the_deadline() {
        let mut r = rings();
        let begun = begin_wait(Wake::Kick { until: UNTIL }, &mut r);
        let kind = WaitKind::Kick { until: UNTIL };
        assert_eq!(begun, Begun::Blocked { kind, until: UNTIL });
        assert_eq!(kind.cause(Woke::KICK), Some(WakeCause::Kick));
        assert_eq!(kind.cause(Woke::SIGNAL), Some(WakeCause::Kick));
        assert_eq!(kind.cause(Woke::TIMER), Some(WakeCause::Timeout));
        assert_eq!(kind.cause(Woke::default()), None);
        end_wait(kind, &mut r);
        assert_eq!(r.calls, ["enable", "recheck", "disable"]);
    }

    #[test]
    fn a_kick_threshold_becomes_kick_fill_descriptors() {
        let mut r = rings();
        let wake = Wake::At {
            at: UNTIL,
            kick_threshold: Some(750),
        };
        let begun = begin_wait(wake, &mut r);
        let kind = WaitKind::Sleep {
            until: UNTIL,
            kicks_armed: true,
        };
        assert_eq!(begun, Begun::Blocked { kind, until: UNTIL });
        assert_eq!(kind.cause(Woke::KICK), Some(WakeCause::Kick));
        assert_eq!(kind.cause(Woke::TIMER), Some(WakeCause::Timer));
        end_wait(kind, &mut r);
        assert_eq!(
            r.calls,
            [
                format!("threshold {}", kick_fill(750, 256)),
                "disarm".into()
            ]
        );
    }

    #[test]
    fn a_sleep_without_a_threshold_leaves_kicks_off_and_ignores_them() {
        let mut r = rings();
        let wake = Wake::At {
            at: UNTIL,
            kick_threshold: None,
        };
        let kind = begin_wait(wake, &mut r).kind();
        assert_eq!(
            kind,
            WaitKind::Sleep {
                until: UNTIL,
                kicks_armed: false
            }
        );
        assert_eq!(kind.cause(Woke::KICK), None);
        assert_eq!(kind.cause(Woke::SIGNAL), Some(WakeCause::Timer));
        end_wait(kind, &mut r);
        assert!(r.calls.is_empty(), "{:?}", r.calls);
    }

    #[test]
    fn a_threshold_no_ring_can_take_lets_no_kick_end_the_sleep() {
        let mut r = ScriptedRings {
            thresholds: false,
            ..rings()
        };
        let wake = Wake::At {
            at: UNTIL,
            kick_threshold: Some(500),
        };
        let kind = begin_wait(wake, &mut r).kind();
        assert_eq!(kind.cause(Woke::KICK), None);
        end_wait(kind, &mut r);
        assert_eq!(r.calls, ["threshold 128"]);
    }

    #[test]
    fn a_poll_does_not_wait_or_touch_the_rings() {
        let mut r = rings();
        let begun = begin_wait(Wake::Now, &mut r);
        assert_eq!(
            begun,
            Begun::Ready {
                kind: WaitKind::Poll,
                cause: WakeCause::Immediate
            }
        );
        end_wait(begun.kind(), &mut r);
        assert!(r.calls.is_empty());
    }
}
