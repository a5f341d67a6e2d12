//! The contract between a queue worker and a policy: what a worker reports
//! after a pass ([`PassReport`]), what a policy answers ([`Decision`]: an
//! [`Action`] and a [`FreqHint`]), and the [`Policy`] trait itself. Every
//! other module of the crate builds on these; this one depends on none but
//! [`crate::time`], [`crate::error`] and [`crate::retune`].

use crate::retune::{Retune, RetuneError};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// Upper bound on any sleep or wait timeout a policy may request.
///
/// A policy that asks for more is clamped by [`Decision::sanitized`]; it keeps a
/// buggy or mis-configured policy from parking a queue for long.
pub const MAX_SLEEP: Duration = Duration::from_millis(100);

/// What ended the wait that preceded a service pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WakeCause {
    /// The previous decision was [`Action::Poll`]: no wait at all.
    Immediate,
    /// A [`Action::Sleep`] ran to its end.
    Timer,
    /// A guest kick arrived (during [`Action::WaitKick`], or a safety-net kick
    /// during [`Action::Sleep`] with a `kick_threshold`).
    Kick,
    /// [`Action::WaitKick`] found work when it re-checked the rings after
    /// re-enabling notifications, so it never blocked.
    Recheck,
    /// [`Action::WaitKick`] hit its timeout without a kick.
    Timeout,
}

/// What one service pass over the worker's queues observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassReport {
    /// Time at the end of the pass.
    pub now: Instant,
    /// What ended the wait before this pass.
    pub wake: WakeCause,
    /// How long the worker waited before this pass (0 after [`Action::Poll`]).
    pub waited: Duration,
    /// Packets moved in this pass, all queues, both directions.
    pub packets: u64,
    /// Bytes moved in this pass (frame bytes, without virtio-net headers), all
    /// queues, both directions.
    pub bytes: u64,
    /// True when some queue still had available buffers when the pass left it
    /// (its budget ran out), i.e. polling again now would find work.
    pub more_work: bool,
    /// Highest fill level seen at the start of the pass over the worker's
    /// guest-to-host rings, in permille of the ring size (1000 = full).
    pub max_fill_permille: u16,
}

impl PassReport {
    /// A pass that moved nothing and found nothing, at `now`.
    pub fn empty(now: Instant, wake: WakeCause, waited: Duration) -> Self {
        PassReport {
            now,
            wake,
            waited,
            packets: 0,
            bytes: 0,
            more_work: false,
            max_fill_permille: 0,
        }
    }
}

/// How the worker waits before its next service pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Service the queues again right away. Guest notifications stay off.
    Poll,
    /// Sleep for `duration` with guest notifications off, then service.
    ///
    /// With `kick_threshold = Some(p)`, the worker asks the guest to kick
    /// once a ring is at least `p` permille full (with `VIRTIO_RING_F_EVENT_IDX`
    /// this is `avail_event = last_avail + p * size / 1000`) and wakes early on
    /// that kick: the ring-full safety net. Where the ring cannot express it
    /// (no EVENT_IDX) the worker sleeps on the timer only.
    Sleep {
        /// Time to sleep, nanoseconds; at most [`MAX_SLEEP`].
        duration: Duration,
        /// Fill level that lets a kick through, permille of the ring size.
        kick_threshold: Option<u16>,
    },
    /// Re-enable guest notifications, re-check the rings, and if they are
    /// still empty block until a kick (or `timeout`, if given).
    WaitKick {
        /// Longest time to block, at most [`MAX_SLEEP`]; `None` = until a kick.
        timeout: Option<Duration>,
    },
}

/// CPU-frequency hint for the worker's core (EE-KBP). Carried out by the core
/// manager where the host offers cpufreq's `userspace` governor; ignored where not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum FreqHint {
    /// Leave the frequency as it is.
    #[default]
    Keep,
    /// Lowest frequency: the worker is about to sleep.
    Min,
    /// Highest frequency: the worker has work.
    Max,
}

/// A policy's answer: what to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// How to wait before the next pass.
    pub action: Action,
    /// Frequency hint to apply before waiting.
    pub freq: FreqHint,
}

impl Decision {
    /// Poll again now, frequency unchanged.
    pub const POLL: Decision = Decision {
        action: Action::Poll,
        freq: FreqHint::Keep,
    };

    /// Block on a kick with no timeout, frequency unchanged.
    pub const WAIT_KICK: Decision = Decision {
        action: Action::WaitKick { timeout: None },
        freq: FreqHint::Keep,
    };

    /// Sleep for `duration` with notifications off.
    pub fn sleep(duration: Duration, kick_threshold: Option<u16>) -> Decision {
        Decision {
            action: Action::Sleep {
                duration,
                kick_threshold,
            },
            freq: FreqHint::Keep,
        }
    }

    /// The same decision with `freq` as its frequency hint.
    pub fn with_freq(mut self, freq: FreqHint) -> Decision {
        self.freq = freq;
        self
    }

    /// Clamp sleeps and timeouts to [`MAX_SLEEP`] and thresholds to 1000 permille.
    /// Workers apply this to every decision, so no policy can park a queue for long.
    pub fn sanitized(mut self) -> Decision {
        match &mut self.action {
            Action::Poll => {}
            Action::Sleep {
                duration,
                kick_threshold,
            } => {
                *duration = (*duration).min(MAX_SLEEP);
                if let Some(t) = kick_threshold {
                    *t = (*t).clamp(1, 1000);
                }
            }
            Action::WaitKick { timeout } => {
                if let Some(t) = timeout {
                    *t = (*t).min(MAX_SLEEP);
                }
            }
        }
        self
    }
}

/// How much one service pass may do per queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Most packets taken from one queue in one pass.
    pub packets: u32,
    /// Most bytes taken from one queue in one pass.
    pub bytes: u64,
}

/// What a policy reports about itself for metrics, logs and plots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyStatus {
    /// Current polling interval (NetAP) or poll window (grow/shrink), if any.
    pub interval: Option<Duration>,
    /// Current adaptation round (NetAP), if any.
    pub round: Option<u32>,
    /// True once an adaptive policy has settled on its interval.
    pub settled: bool,
    /// Number of times the adaptation restarted (NetAP).
    pub restarts: u32,
    /// Interval range, µs, of the running search (NetAP; NetAP-ML's narrowed range).
    #[serde(default)]
    pub search_range_us: Option<(u64, u64)>,
    /// Interval the model predicted best, µs (NetAP-ML).
    #[serde(default)]
    pub predicted_us: Option<u64>,
}

/// A queue-servicing policy. See the crate documentation for the cycle.
///
/// Implementations are deterministic functions of the reports they are fed:
/// no clocks, no randomness, no I/O.
pub trait Policy: Send + std::fmt::Debug {
    /// The policy's name as used on the command line (`interrupt`, `netap`, ...).
    fn name(&self) -> &'static str;

    /// Per-queue budget of one service pass.
    fn budget(&self) -> Budget;

    /// First decision, before any pass. `now` starts the policy's clock
    /// (NetAP's first round starts here).
    fn start(&mut self, now: Instant) -> Decision;

    /// Decide what to do after a service pass.
    fn on_pass(&mut self, pass: &PassReport) -> Decision;

    /// Current state for metrics and plots.
    fn status(&self) -> PolicyStatus;

    /// Change one parameter while running (see [`Retune`]); refused, with
    /// the policy unchanged, when it has no such parameter or the value is
    /// invalid.
    fn retune(&mut self, r: &Retune) -> Result<(), RetuneError> {
        Err(r.not_applicable(self.name()))
    }
}
