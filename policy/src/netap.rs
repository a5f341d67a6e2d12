//! NetAP: periodic polling whose interval is searched round by round
//! (NetAP paper, Algorithms 1–2).
//!
//! Guest notifications stay suppressed for good: after every service pass the
//! worker sleeps for the current polling *interval*
//! ([`Action::Sleep`]) and polls again. Time is cut into *rounds* of
//! `round_ms` (paper's best: 1 s). The bytes moved in a round, both
//! directions, all the worker's queues, measure how good the round's interval
//! was; at the end of each round they are fed to the golden-section search
//! ([`GoldenSection`], Algorithm 2), which answers with the next interval to
//! try. With the paper's parameters (100–4000 µs, R 0.618, MinDistance 30 µs)
//! the search probes 11 intervals and then settles.
//!
//! The search restarts (Algorithm 1, "go to start") when
//! - it has settled and a round's bytes differ from the previous round's by
//!   more than `min_change` (relative to the previous round), i.e. the
//!   workload changed; or
//! - `max_rounds` rounds have passed since the search started (0 = never).
//!
//! # Departures from the paper, and why
//!
//! - **Notifications stay off while the worker sleeps.** Algorithm 1
//!   disables interrupts for packet arrivals at the top of each loop
//!   (line 8) and enables them again before the sleep (lines 23–25), so a
//!   guest's kick can still reach the host between polls. vadapt keeps
//!   guest notifications suppressed during the sleep as well: the polling
//!   interval alone paces the service, which is the mechanism the paper
//!   credits for avoiding VM exits. The one exception is the ring-full
//!   safety net below, which asks for a kick only past a fill threshold.
//!   `notify_during_sleep = true` is the paper's choice: every sleep lets
//!   the first frame's kick through and that kick ends the sleep (a kick
//!   threshold of 1‰: the first descriptor on rings of up to 1000 entries,
//!   the second on a 1024-entry ring), and a pass that found frames is
//!   followed by another at once, as the paper's pass loops "while queue has
//!   a packet". Under a steady stream that is kick-driven service with a
//!   kick per pass; docs/netap.md has the measured effect.
//! - **Ring-full safety net.** The paper sleeps whatever happens, so a burst
//!   that fills the ring during a long interval stalls the guest (or drops
//!   packets) until the timer fires. With `kick_threshold_permille` = p > 0
//!   every sleep carries `kick_threshold: Some(p)`: the worker asks the guest
//!   to kick once a ring is p‰ full and wakes early on that kick. And when a
//!   pass starts with a ring at least p‰ full, or leaves work behind
//!   (`more_work`), the policy polls again at once ([`Decision::POLL`])
//!   instead of sleeping, so a full ring is drained before the next sleep.
//!   p = 0 lets no kick through while sleeping (the paper lets every kick
//!   through, see the first item); `more_work` still polls again,
//!   because the paper's pass drains the rings completely while ours is
//!   bounded (next item). Under sustained overload, with rings p‰ full at
//!   every pass, NetAP therefore polls continuously like busy-poll, and the
//!   search sees about the same bytes at every interval (ties go to the
//!   longer interval, see [`crate::golden`]).
//! - **Bounded passes.** The paper's `handle_packets_in_the_queue` loops
//!   "while queue has a packet", unbounded: a guest that keeps the ring fed
//!   keeps the host thread forever and the other queues of the worker starve.
//!   The budget here is vhost-net's weight, 256 packets or 512 KiB per queue
//!   per pass ([`PKT_WEIGHT`], [`BYTE_WEIGHT`]); the `more_work` rule above
//!   makes up for it.
//! - **A kick-driven check after each search** (`kick_probe`). Periodic
//!   polling pays off when the ring holds more than the guest sends in one
//!   interval. When it does not — small raw frames at Mpps, where a
//!   256-entry ring fills in tens of µs — guest and host take turns instead
//!   of overlapping: the guest fills the ring and stops, its kick (or the
//!   timer) wakes the worker, the worker drains, the guest refills. Every
//!   interval of the search then moves about the same bytes, all fewer
//!   than interrupt mode, where the worker keeps serving while the guest
//!   keeps posting. So once a search settles, its first round at the
//!   settled interval is measured afresh (the search's own figure for that
//!   interval is the best of several noisy rounds, biased upwards) and the
//!   round after it is served kick-driven, by interrupt mode's rule (wait
//!   for a kick with notifications on; poll again while a pass leaves
//!   work). Kick-driven service is kept until the next restart if it moved
//!   more than `1 + kick_probe_margin` times the bytes of the periodic
//!   round; otherwise periodic polling at the settled interval resumes.
//!   While kick-driven, rounds are not compared for a restart on change:
//!   kick-driven service moves what the guests send as fast as the worker
//!   gets the CPU, so on a shared machine its rounds differ by more than
//!   MinChange (a closed-loop guest on this 2-core VM: 2.7–3.6 Mpps from
//!   one second to the next), and every such restart cost a whole periodic
//!   search. Instead every [`KICK_RECHECK_ROUNDS`] rounds one round runs
//!   periodic at the settled interval; if the last kick-driven round did
//!   not move more than `1 + kick_probe_margin` times its bytes, the
//!   workload has changed and the search starts again. MaxRound still
//!   applies.
//!   The measure is the paper's own (bytes per round), so NetAP does not
//!   settle on a service that moves fewer bytes than interrupt mode would in
//!   the same conditions (within the margin and the rounds' noise), at the
//!   price of one kick-driven round per search. `kick_probe = false` is the
//!   paper's behaviour.
//! - **A guard against rings that fill while the worker sleeps**
//!   (`ring_guard`, issue 41; [`crate::ring_guard`]). The paper's senders
//!   are Linux TCP senders: they block when the ring is full, so a sleep
//!   that is too long only shows as fewer bytes in the round, and the
//!   search moves away from it. A guest that polls its rings and never
//!   blocks (a DPDK application) drops what does not fit, and with
//!   notifications off it does not kick at the safety net's threshold
//!   either; every probe longer than its ring's fill time is loss, and the
//!   search probes milliseconds for about 11 rounds after every restart.
//!   Measured (a4bfa1b, 2-core VM, DPDK virtio-user `txonly`, 64 B): NetAP
//!   carried 0.04–0.47× DPDK's vhost PMD in B1's short rounds, and 0–15
//!   Mpps from one 2-s count to the next while it searched. So a NetAP
//!   built by [`crate::PolicyConfig::build`] sits behind the ring guard: a
//!   sleep after which a ring was at least 90 % full (or as full as the
//!   safety net's kick threshold, 75 % by default) turns NetAP's next
//!   sleeps into kick-driven waits (timed out where the sleep would have
//!   ended, so rounds and the search go on) for a hold of 1 s, doubling
//!   to 64 s while the ring keeps filling; then sleeps are capped by what
//!   the ring holds at the observed arrival rate (half of it), never below
//!   `min_interval_us`. Sleeps that the safety net's kick ended count
//!   too, when as a rule the pass after the kick found the ring near full:
//!   a fast guest that blocks (the synthetic guest, a Linux driver) kicks
//!   at 75 %, stops at a full ring before the worker has woken, and waits
//!   for its call, so NetAP, its every sleep cut by a kick, carried 0.36×
//!   (64 B) and 0.61× (1518 B) of interrupt mode's rate from B1's
//!   synthetic guest; the kick's pass gives the arrival rate, and the next
//!   sleeps are capped to end before the ring is half full (kick-driven
//!   below `min_interval_us`). A TCP sender that runs out of room now and
//!   then is left alone, and so is a sleep that ran to its end past the
//!   threshold from a guest that kicked there the last time (its kick
//!   raced the timer, or the worker woke late: on a busy host every guard
//!   action under B9's TCP senders). It applies during the search as after it:
//!   the search's probes are cut to the cap, so while capped it searches
//!   among intervals that the ring holds. Rings that stay below the safety
//!   net's threshold during every sleep — the papers' senders at the
//!   intervals they settle on — never engage it, and Algorithm 2's search
//!   runs unchanged (`tests/ring_guard.rs`). `ring_guard = false` is the
//!   paper's NetAP; docs/netap.md has the measurements.
//! - **Bytes per round are normalised** to `round_ms`: a round ends at the
//!   first pass at or after its deadline, so it can be longer than `round_ms`
//!   by up to one interval plus one pass (more if the worker is descheduled).
//!   The value fed to the search is `bytes · round_ms / actual length`, so a
//!   late wake-up does not read as extra throughput. [`RoundRecord`] keeps the
//!   raw count too.
//! - **Restart-on-change compares two rounds at the settled interval.** The
//!   paper compares the first settled round with the last search round, which
//!   ran at a different interval; we only compare rounds that both ran at the
//!   settled interval, so the search's own last step cannot trigger a restart.
//!   A change from 0 bytes to any traffic is a change (idle queue waking up).
//! - The search itself departs from Algorithm 2 only on ties, rounding and
//!   which of the last two probes it settles on; see [`crate::golden`].
//!
//! The first pass runs at once ([`Policy::start`] returns [`Decision::POLL`]),
//! as Algorithm 1 services the queues before its first sleep.

use crate::error::ConfigError;
use crate::golden::GoldenSection;
use crate::interface::{Action, Budget, Decision, PassReport, Policy, PolicyStatus, MAX_SLEEP};
use crate::interrupt::{BYTE_WEIGHT, PKT_WEIGHT};
use crate::retune::{self, Retune, RetuneError};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// NetAP parameters (NetAP paper, Algorithms 1–2). The interval range,
/// R, MinDistance and the round length default to the paper's values. The
/// paper names MinChange and MaxRound (Algorithm 1, lines 11 and 17) but
/// gives no values for them: 0.2 and 300 are vadapt's choices, as are the
/// ring-full safety net's threshold and the kick-driven check (the paper
/// has neither). docs/netap.md measures each of these choices.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetapParams {
    /// Smallest polling interval searched, µs (paper: 100).
    pub min_interval_us: u64,
    /// Largest polling interval searched, µs (paper: 4000).
    pub max_interval_us: u64,
    /// Golden-section ratio R, in (0, 1) (paper: 0.618).
    pub ratio: f64,
    /// Search stops once the step is at most this, µs (paper: 30).
    pub min_distance_us: u64,
    /// Length of one adaptation round, ms (paper's best: 1000).
    pub round_ms: u64,
    /// Restart the search when a settled round's bytes differ from the
    /// previous round's by more than this fraction (paper: MinChange, no
    /// value given; vadapt's default 0.2).
    pub min_change: f64,
    /// Restart the search after this many rounds (paper: MaxRound, no value
    /// given; vadapt's default 300). 0 = never.
    pub max_rounds: u32,
    /// Ring-full safety net: let a kick through when a guest-to-host ring is at
    /// least this permille full while the worker sleeps. 0: no kick at all
    /// while sleeping (the paper instead lets every kick through during the
    /// sleep); vadapt's default 750. Ignored with `notify_during_sleep`.
    pub kick_threshold_permille: u16,
    /// The paper's Algorithm 1 (lines 23–25): guest notifications on during
    /// every sleep, the first kick ends it. vadapt's default: false (the
    /// safety net above instead).
    pub notify_during_sleep: bool,
    /// After each search, serve one round kick-driven and keep that service
    /// if it moved more bytes than the settled interval (module docs).
    /// The paper has no such check: false. vadapt's default: true.
    pub kick_probe: bool,
    /// How much more the kick-driven round must move than the settled
    /// interval did for NetAP to keep it, as a fraction (vadapt's default
    /// 0.05: ties and noise stay with periodic polling, which costs no kicks).
    pub kick_probe_margin: f64,
    /// Build NetAP behind the ring guard ([`crate::ring_guard`]): a sleep
    /// after which a ring was near full (with no kick, or, as a rule, even
    /// after the safety net's kick) caps the next sleeps by what the ring
    /// holds at the observed arrival rate, and below `min_interval_us`
    /// turns them into kick-driven service.
    /// The paper has no such guard: false. vadapt's default: true.
    pub ring_guard: bool,
}

impl Default for NetapParams {
    fn default() -> Self {
        NetapParams {
            min_interval_us: 100,
            max_interval_us: 4000,
            ratio: 0.618,
            min_distance_us: 30,
            round_ms: 1000,
            min_change: 0.2,
            max_rounds: 300,
            kick_threshold_permille: 750,
            notify_during_sleep: false,
            kick_probe: true,
            kick_probe_margin: 0.05,
            ring_guard: true,
        }
    }
}

/// Longest accepted round, ms (one hour); keeps time arithmetic far from overflow.
const MAX_ROUND_MS: u64 = 3_600_000;

/// While kick-driven service is kept, one round in this many runs periodic
/// at the settled interval to check that kick-driven service still moves
/// more (module docs).
pub const KICK_RECHECK_ROUNDS: u32 = 30;

/// Shortest timeout of a kick-driven wait (a pass that closes a round late
/// still waits a little rather than spinning).
const MIN_KICK_WAIT: Duration = Duration::from_micros(10);

/// Why a search restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartReason {
    /// Settled, and the round's bytes changed by more than `min_change`.
    WorkloadChange,
    /// `max_rounds` rounds since the search started.
    MaxRounds,
}

/// One finished round, for traces and plots ([`NetAp::last_round`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// Rounds finished since the policy started, this one included (1 = first).
    pub seq: u64,
    /// Number of this round within its search (0 = first probe).
    pub round: u32,
    /// Polling interval this round ran at.
    pub interval: Duration,
    /// Bytes moved in the round, both directions, all queues.
    pub bytes: u64,
    /// Actual length of the round (at least `round_ms`).
    pub length: Duration,
    /// Bytes normalised to `round_ms`: what the search was fed.
    pub measured: u64,
    /// Interval the next round runs at.
    pub next_interval: Duration,
    /// True if the search is settled after this round.
    pub settled: bool,
    /// Set if the search restarted at the end of this round.
    pub restart: Option<RestartReason>,
    /// True if this round was served kick-driven (the check after a search,
    /// or the service it chose); `interval` is then the settled interval
    /// that was not used.
    #[serde(default)]
    pub kick_driven: bool,
}

/// How the worker waits between passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Service {
    /// Sleep for the interval (Algorithm 1).
    Periodic,
    /// Wait for a kick with notifications on, as interrupt mode does.
    KickDriven,
}

/// Where the kick-driven check of the running search stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KickProbe {
    /// The search has not settled yet (or the check is off).
    Waiting,
    /// This round runs periodic at the settled interval, to be measured
    /// afresh: the search's own measurement of that interval is the best of
    /// several noisy rounds, biased upwards.
    Periodic,
    /// This round is served kick-driven; the round before, at the settled
    /// interval, measured `periodic`.
    Running { periodic: u64 },
    /// Kick-driven service was kept; this round runs periodic at the settled
    /// interval to check it still loses to the last kick-driven round, which
    /// measured `kick`.
    Recheck { kick: u64 },
    /// Decided for this search.
    Done,
}

/// NetAP periodic polling with golden-section interval search.
/// See the module documentation.
#[derive(Debug, Clone)]
pub struct NetAp {
    params: NetapParams,
    search: GoldenSection,
    /// Length of a round.
    round_len: Duration,
    /// `kick_threshold` carried by every sleep; `None` when the safety net is off.
    kick: Option<u16>,
    /// How the worker waits between passes.
    service: Service,
    /// The kick-driven check of the running search.
    probe: KickProbe,
    /// Rounds served kick-driven since the check or the last recheck.
    kick_rounds: u32,
    /// Current polling interval, µs.
    interval_us: u64,
    /// Rounds finished in the current search.
    round: u32,
    /// When the current round started.
    round_start: Instant,
    /// When the current round ends (first pass at or after this closes it).
    next_round: Instant,
    /// Bytes moved so far in the current round.
    bytes: u64,
    /// Measured bytes of the previous round run at the settled interval.
    settled_prev: Option<u64>,
    /// Searches restarted since the policy was built.
    restarts: u32,
    /// Rounds finished since the policy started.
    seq: u64,
    last: Option<RoundRecord>,
    started: bool,
}

fn invalid(param: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidParam {
        param,
        reason: reason.into(),
    }
}

impl NetAp {
    /// Check every parameter; the error names the first bad one as it is
    /// written in config files.
    pub fn validate(p: &NetapParams) -> Result<(), ConfigError> {
        let max_sleep_us = MAX_SLEEP.as_micros();
        if p.min_interval_us >= p.max_interval_us {
            return Err(invalid(
                "min_interval_us",
                format!(
                    "must be below max_interval_us ({} >= {})",
                    p.min_interval_us, p.max_interval_us
                ),
            ));
        }
        if p.max_interval_us > max_sleep_us {
            return Err(invalid(
                "max_interval_us",
                format!("must be at most {max_sleep_us} (the longest sleep a worker takes)"),
            ));
        }
        if !(0.5 < p.ratio && p.ratio < 1.0) {
            return Err(invalid(
                "ratio",
                format!(
                    "must be in (0.5, 1), got {} (golden ratio: 0.618; Algorithm 2 assumes \
                     MinInterval + distance > MaxInterval - distance)",
                    p.ratio
                ),
            ));
        }
        if p.min_distance_us == 0 {
            return Err(invalid("min_distance_us", "must be at least 1"));
        }
        if p.round_ms == 0 || p.round_ms > MAX_ROUND_MS {
            return Err(invalid(
                "round_ms",
                format!("must be in 1..={MAX_ROUND_MS}, got {}", p.round_ms),
            ));
        }
        if p.round_ms * 1000 < p.max_interval_us {
            return Err(invalid(
                "round_ms",
                format!(
                    "a round must last at least one max_interval_us ({} µs), got {} ms",
                    p.max_interval_us, p.round_ms
                ),
            ));
        }
        if !(p.min_change >= 0.0 && p.min_change.is_finite()) {
            return Err(invalid(
                "min_change",
                format!("must be a finite fraction >= 0, got {}", p.min_change),
            ));
        }
        let probes = GoldenSection::probe_count(
            p.min_interval_us,
            p.max_interval_us,
            p.ratio,
            p.min_distance_us,
        )
        .map_err(|e| invalid("min_interval_us", e.to_string()))?;
        if p.max_rounds != 0 && p.max_rounds <= probes {
            return Err(invalid(
                "max_rounds",
                format!(
                    "must be 0 (never) or more than the {probes} rounds one search takes, got {}",
                    p.max_rounds
                ),
            ));
        }
        if !(p.kick_probe_margin >= 0.0 && p.kick_probe_margin.is_finite()) {
            return Err(invalid(
                "kick_probe_margin",
                format!(
                    "must be a finite fraction >= 0, got {}",
                    p.kick_probe_margin
                ),
            ));
        }
        if p.kick_threshold_permille > 1000 {
            return Err(invalid(
                "kick_threshold_permille",
                format!("must be at most 1000, got {}", p.kick_threshold_permille),
            ));
        }
        Ok(())
    }

    /// A NetAP policy searching `min_interval_us..=max_interval_us`.
    pub fn new(params: NetapParams) -> Result<Self, ConfigError> {
        Self::with_range(params, params.min_interval_us, params.max_interval_us)
    }

    /// A NetAP policy whose searches cover `lo_us..=hi_us` instead of the
    /// configured range (NetAP-ML: ± 500 µs around a predicted best).
    /// The other parameters are validated as for [`NetAp::new`].
    pub fn with_range(params: NetapParams, lo_us: u64, hi_us: u64) -> Result<Self, ConfigError> {
        Self::validate(&params)?;
        Self::check_range(lo_us, hi_us)?;
        let search = GoldenSection::new(lo_us, hi_us, params.ratio, params.min_distance_us)
            .map_err(|e| invalid("search_range_us", e.to_string()))?;
        Ok(NetAp {
            params,
            interval_us: search.current(),
            search,
            round_len: Duration::from_millis(params.round_ms),
            kick: Self::sleep_kick(&params),
            service: Service::Periodic,
            probe: KickProbe::Waiting,
            kick_rounds: 0,
            round: 0,
            round_start: Instant(0),
            next_round: Instant(0),
            bytes: 0,
            settled_prev: None,
            restarts: 0,
            seq: 0,
            last: None,
            started: false,
        })
    }

    /// The `kick_threshold` every sleep carries under `p`.
    fn sleep_kick(p: &NetapParams) -> Option<u16> {
        if p.notify_during_sleep {
            Some(1)
        } else {
            (p.kick_threshold_permille > 0).then_some(p.kick_threshold_permille)
        }
    }

    /// True while the worker is served kick-driven (the check after a search,
    /// or the service it chose) instead of sleeping for the interval.
    pub fn kick_driven(&self) -> bool {
        self.service == Service::KickDriven
    }

    fn check_range(lo_us: u64, hi_us: u64) -> Result<(), ConfigError> {
        let max_sleep_us = MAX_SLEEP.as_micros();
        if lo_us >= hi_us || hi_us > max_sleep_us {
            return Err(invalid(
                "search_range_us",
                format!("{lo_us}..={hi_us} must be non-empty and end at most at {max_sleep_us}"),
            ));
        }
        Ok(())
    }

    /// Search `lo_us..=hi_us` from the next restart on (NetAP-ML); the running
    /// search is not disturbed.
    pub fn set_search_range(&mut self, lo_us: u64, hi_us: u64) -> Result<(), ConfigError> {
        Self::check_range(lo_us, hi_us)?;
        self.search
            .set_range(lo_us, hi_us)
            .map_err(|e| invalid("search_range_us", e.to_string()))
    }

    /// The parameters this policy runs with.
    pub fn params(&self) -> &NetapParams {
        &self.params
    }

    /// The golden-section search (for traces: points, bracket, range).
    pub fn search(&self) -> &GoldenSection {
        &self.search
    }

    /// Current polling interval.
    pub fn interval(&self) -> Duration {
        Duration::from_micros(self.interval_us)
    }

    /// The most recently finished round, if any. A tracer that polls this
    /// after every pass sees each round once (compare [`RoundRecord::seq`]).
    pub fn last_round(&self) -> Option<RoundRecord> {
        self.last
    }

    fn begin_round(&mut self, now: Instant) {
        self.bytes = 0;
        self.round_start = now;
        self.next_round = now + self.round_len;
    }

    fn end_round(&mut self, now: Instant) {
        let length = now.saturating_since(self.round_start);
        // length >= round_len > 0 (validated), except for clocks that stood still.
        let measured = if length.as_nanos() == 0 {
            self.bytes
        } else {
            (u128::from(self.bytes) * u128::from(self.round_len.as_nanos())
                / u128::from(length.as_nanos()))
            .min(u128::from(u64::MAX)) as u64
        };
        let ran_at = self.interval_us;
        let ran_kick_driven = self.kick_driven();
        let was_settled = self.search.is_settled();
        let step = self.search.observe(measured);
        let mut restart = None;
        let margin = 1.0 + self.params.kick_probe_margin;
        match self.probe {
            KickProbe::Running { periodic } => {
                // The check's round: keep the service that moved more bytes.
                // Its bytes are not compared with the periodic round's for a
                // restart.
                if measured as f64 > periodic as f64 * margin {
                    self.service = Service::KickDriven;
                    self.kick_rounds = 0;
                } else {
                    self.service = Service::Periodic;
                    self.settled_prev = Some(periodic);
                }
                self.probe = KickProbe::Done;
            }
            KickProbe::Recheck { kick } => {
                // A periodic round among kick-driven ones: kick-driven service
                // stays while it still moves more; otherwise the workload has
                // changed, and the search starts again.
                if kick as f64 > measured as f64 * margin {
                    self.service = Service::KickDriven;
                    self.kick_rounds = 0;
                    self.probe = KickProbe::Done;
                } else {
                    restart = Some(RestartReason::WorkloadChange);
                }
            }
            // Kick-driven service moves what the guests send as fast as the
            // worker gets the CPU, so its rounds vary with the machine's noise
            // by more than MinChange: no restart on change. Every
            // KICK_RECHECK_ROUNDS rounds one periodic round at the settled
            // interval checks that kick-driven service still moves more.
            _ if was_settled && self.service == Service::KickDriven => {
                self.kick_rounds += 1;
                if self.kick_rounds >= KICK_RECHECK_ROUNDS {
                    self.service = Service::Periodic;
                    self.probe = KickProbe::Recheck { kick: measured };
                }
            }
            _ if was_settled => {
                if let Some(prev) = self.settled_prev {
                    let change = measured.abs_diff(prev) as f64;
                    if change > self.params.min_change * prev as f64 {
                        restart = Some(RestartReason::WorkloadChange);
                    }
                }
                self.settled_prev = Some(measured);
            }
            _ => {}
        }
        let round = self.round;
        self.round += 1;
        if restart.is_none() && self.params.max_rounds != 0 && self.round >= self.params.max_rounds
        {
            restart = Some(RestartReason::MaxRounds);
        }
        self.interval_us = if restart.is_some() {
            self.round = 0;
            self.restarts = self.restarts.saturating_add(1);
            self.settled_prev = None;
            self.service = Service::Periodic;
            self.probe = KickProbe::Waiting;
            self.search.restart()
        } else {
            step.point()
        };
        if restart.is_none() && self.params.kick_probe {
            match self.probe {
                // Settled: first a round at the settled interval...
                KickProbe::Waiting if self.search.is_settled() => self.probe = KickProbe::Periodic,
                // ...then one served kick-driven, to compare with it.
                KickProbe::Periodic => {
                    self.probe = KickProbe::Running { periodic: measured };
                    self.service = Service::KickDriven;
                }
                _ => {}
            }
        }
        self.seq += 1;
        self.last = Some(RoundRecord {
            seq: self.seq,
            round,
            interval: Duration::from_micros(ran_at),
            bytes: self.bytes,
            length,
            measured,
            next_interval: Duration::from_micros(self.interval_us),
            settled: self.search.is_settled(),
            restart,
            kick_driven: ran_kick_driven,
        });
        self.begin_round(now);
    }
}

impl Policy for NetAp {
    fn name(&self) -> &'static str {
        "netap"
    }

    fn budget(&self) -> Budget {
        Budget {
            packets: PKT_WEIGHT,
            bytes: BYTE_WEIGHT,
        }
    }

    /// Starts (or restarts) the first search and its first round at `now`;
    /// the first pass runs at once.
    fn start(&mut self, now: Instant) -> Decision {
        self.interval_us = self.search.restart();
        self.round = 0;
        self.settled_prev = None;
        self.service = Service::Periodic;
        self.probe = KickProbe::Waiting;
        self.started = true;
        self.begin_round(now);
        Decision::POLL
    }

    fn on_pass(&mut self, pass: &PassReport) -> Decision {
        if !self.started {
            // A worker that skipped `start`: begin the clock at this pass.
            self.start(pass.now);
        }
        self.bytes = self.bytes.saturating_add(pass.bytes);
        if pass.now >= self.next_round {
            self.end_round(pass.now);
        }
        let ring_full = self
            .kick
            .is_some_and(|threshold| pass.max_fill_permille >= threshold);
        match self.service {
            _ if pass.more_work => Decision::POLL,
            // Interrupt mode's rule, with a timeout at the round's end (at
            // most MAX_SLEEP) so rounds close, and the search can restart,
            // on an idle queue.
            Service::KickDriven => Decision {
                action: Action::WaitKick {
                    timeout: Some(
                        self.next_round
                            .saturating_since(pass.now)
                            .clamp(MIN_KICK_WAIT, MAX_SLEEP),
                    ),
                },
                ..Decision::WAIT_KICK
            },
            Service::Periodic if ring_full => Decision::POLL,
            Service::Periodic => Decision::sleep(self.interval(), self.kick),
        }
    }

    fn status(&self) -> PolicyStatus {
        PolicyStatus {
            // No polling interval while served kick-driven.
            interval: (!self.kick_driven()).then(|| self.interval()),
            round: Some(self.round),
            settled: self.search.is_settled(),
            restarts: self.restarts,
            search_range_us: Some(self.search.range()),
            predicted_us: None,
        }
    }

    fn retune(&mut self, r: &Retune) -> Result<(), RetuneError> {
        match *r {
            Retune::SearchRange { lo_us, hi_us } => Ok(self.set_search_range(lo_us, hi_us)?),
            Retune::KickThreshold { permille } => {
                let new = NetapParams {
                    kick_threshold_permille: permille,
                    ..self.params
                };
                retune::apply(&mut self.params, new, Self::validate)?;
                self.kick = Self::sleep_kick(&self.params);
                Ok(())
            }
            _ => Err(r.not_applicable(self.name())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::Step;
    use crate::interface::WakeCause;

    fn pass(now: Instant, bytes: u64) -> PassReport {
        PassReport {
            bytes,
            packets: bytes / 64,
            ..PassReport::empty(now, WakeCause::Timer, Duration::ZERO)
        }
    }

    /// A worker whose every pass moves `rate(interval)` bytes per µs of the
    /// interval slept before it (`rate(0)` while served kick-driven, waiting
    /// out each timeout), each pass taking 1 µs. Runs until `rounds` rounds
    /// have finished and returns the records.
    fn drive(
        p: &mut NetAp,
        now: &mut Instant,
        rounds: u64,
        rate: impl Fn(u64) -> u64,
    ) -> Vec<RoundRecord> {
        let mut records: Vec<RoundRecord> = Vec::new();
        let mut slept = Duration::ZERO;
        let mut seen = p.last_round().map_or(0, |r| r.seq);
        while records.len() < rounds as usize {
            *now += Duration::from_micros(1);
            let at = if p.kick_driven() {
                0
            } else {
                p.interval().as_micros()
            };
            let bytes = rate(at) * slept.as_micros();
            let d = p.on_pass(&pass(*now, bytes));
            if let Some(r) = p.last_round().filter(|r| r.seq != seen) {
                seen = r.seq;
                records.push(r);
            }
            slept = match d.action {
                Action::Sleep { duration, .. } => duration,
                Action::WaitKick {
                    timeout: Some(duration),
                } => duration,
                other => panic!("unexpected {other:?}"),
            };
            *now += slept;
        }
        records
    }

    fn expected_probes(rate: impl Fn(u64) -> u64) -> Vec<u64> {
        // The same search fed the per-µs rate: the normalised round bytes are
        // proportional to it (every round is about equally long).
        let mut g = GoldenSection::new(100, 4000, 0.618, 30).unwrap();
        let mut v = vec![g.current()];
        while let Step::Probe(x) = g.observe(rate(g.current())) {
            v.push(x);
        }
        v.push(g.current());
        v
    }

    #[test]
    fn validate_names_each_bad_parameter() {
        let d = NetapParams::default();
        let cases: Vec<(NetapParams, &str)> = vec![
            (
                NetapParams {
                    min_interval_us: 4000,
                    ..d
                },
                "min_interval_us",
            ),
            (
                NetapParams {
                    min_interval_us: 5000,
                    ..d
                },
                "min_interval_us",
            ),
            (
                NetapParams {
                    max_interval_us: 200_000,
                    ..d
                },
                "max_interval_us",
            ),
            (NetapParams { ratio: 0.0, ..d }, "ratio"),
            (NetapParams { ratio: 1.0, ..d }, "ratio"),
            (NetapParams { ratio: 0.4, ..d }, "ratio"),
            (
                NetapParams {
                    ratio: f64::NAN,
                    ..d
                },
                "ratio",
            ),
            (
                NetapParams {
                    min_distance_us: 0,
                    ..d
                },
                "min_distance_us",
            ),
            (
                NetapParams {
                    kick_probe_margin: -0.1,
                    ..d
                },
                "kick_probe_margin",
            ),
            (
                NetapParams {
                    kick_probe_margin: f64::NAN,
                    ..d
                },
                "kick_probe_margin",
            ),
            (NetapParams { round_ms: 0, ..d }, "round_ms"),
            (
                NetapParams {
                    round_ms: u64::MAX,
                    ..d
                },
                "round_ms",
            ),
            (NetapParams { round_ms: 3, ..d }, "round_ms"),
            (
                NetapParams {
                    min_change: -0.1,
                    ..d
                },
                "min_change",
            ),
            (
                NetapParams {
                    min_change: f64::NAN,
                    ..d
                },
                "min_change",
            ),
            (
                NetapParams {
                    min_change: f64::INFINITY,
                    ..d
                },
                "min_change",
            ),
            (
                NetapParams {
                    max_rounds: 11,
                    ..d
                },
                "max_rounds",
            ),
            (NetapParams { max_rounds: 1, ..d }, "max_rounds"),
            (
                NetapParams {
                    kick_threshold_permille: 1001,
                    ..d
                },
                "kick_threshold_permille",
            ),
        ];
        for (p, name) in cases {
            match NetAp::validate(&p) {
                Err(ConfigError::InvalidParam { param, .. }) => assert_eq!(param, name, "{p:?}"),
                other => panic!("{p:?}: expected error on {name}, got {other:?}"),
            }
            assert!(NetAp::new(p).is_err());
        }
        assert_eq!(NetAp::validate(&d), Ok(()));
        assert_eq!(
            NetAp::validate(&NetapParams {
                max_rounds: 0,
                kick_threshold_permille: 0,
                ..d
            }),
            Ok(())
        );
        assert_eq!(
            NetAp::validate(&NetapParams {
                max_rounds: 12,
                ..d
            }),
            Ok(())
        );
        assert!(NetAp::with_range(d, 2000, 1000).is_err());
        assert!(NetAp::with_range(d, 1000, 200_000).is_err());
    }

    #[test]
    fn first_pass_at_once_then_sleeps_the_first_probe_with_the_safety_net() {
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        assert_eq!(p.start(Instant(0)), Decision::POLL);
        let d = p.on_pass(&pass(Instant(1_000), 100));
        assert_eq!(d, Decision::sleep(Duration::from_micros(2510), Some(750)));
        let s = p.status();
        assert_eq!(s.interval, Some(Duration::from_micros(2510)));
        assert_eq!(s.round, Some(0));
        assert!(!s.settled);
        assert_eq!(p.last_round(), None);
    }

    #[test]
    fn rounds_follow_algorithm_2_and_settle_after_11() {
        let rate = |i: u64| 1_000_000 - i.abs_diff(1000) * 100;
        let expected = expected_probes(rate);
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        let mut now = Instant(0);
        p.start(now);
        let records = drive(&mut p, &mut now, 14, rate);
        let intervals: Vec<u64> = records.iter().map(|r| r.interval.as_micros()).collect();
        // 11 probes, then the settled interval for the remaining rounds
        // (the first of them served kick-driven, which moved less here).
        assert_eq!(&intervals[..11], &expected[..11]);
        assert!(
            intervals[11..].iter().all(|&i| i == expected[11]),
            "{intervals:?}"
        );
        let kick_driven: Vec<bool> = records.iter().map(|r| r.kick_driven).collect();
        assert_eq!(kick_driven.iter().filter(|&&k| k).count(), 1);
        assert!(records[12].kick_driven);
        assert!(!p.kick_driven());
        assert!(!records[9].settled);
        assert!(records[10].settled);
        assert!(p.status().settled);
        assert_eq!(p.status().restarts, 0);
        for (k, r) in records.iter().enumerate() {
            assert_eq!(r.seq, k as u64 + 1);
            assert_eq!(r.round, k as u32);
            assert!(r.length >= Duration::from_secs(1));
            assert!(r.measured <= r.bytes);
        }
        assert!(expected[11].abs_diff(1000) <= 30);
    }

    #[test]
    fn restarts_when_settled_throughput_changes_by_more_than_min_change() {
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        let mut now = Instant(0);
        p.start(now);
        let rate = |i: u64| 1_000_000 - i.abs_diff(1000) * 100;
        drive(&mut p, &mut now, 13, rate);
        assert!(p.status().settled);
        // +10 %: within min_change 0.2, no restart.
        let r = drive(&mut p, &mut now, 1, |i| rate(i) * 11 / 10);
        assert_eq!(r[0].restart, None);
        // The workload doubles: restart, back to the first probe.
        let r = drive(&mut p, &mut now, 1, |i| rate(i) * 22 / 10);
        assert_eq!(r[0].restart, Some(RestartReason::WorkloadChange));
        assert_eq!(r[0].next_interval, Duration::from_micros(2510));
        let s = p.status();
        assert_eq!((s.restarts, s.round, s.settled), (1, Some(0), false));
    }

    #[test]
    fn restarts_after_max_rounds() {
        let params = NetapParams {
            max_rounds: 15,
            ..NetapParams::default()
        };
        let mut p = NetAp::new(params).unwrap();
        let mut now = Instant(0);
        p.start(now);
        let records = drive(&mut p, &mut now, 16, |_| 1000);
        assert!(records[..14].iter().all(|r| r.restart.is_none()));
        assert_eq!(records[14].restart, Some(RestartReason::MaxRounds));
        assert_eq!(records[15].round, 0);
        assert_eq!(records[15].interval, Duration::from_micros(2510));
        assert_eq!(p.status().restarts, 1);
    }

    #[test]
    fn idle_queue_settles_long_and_restarts_when_traffic_arrives() {
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        let mut now = Instant(0);
        p.start(now);
        let records = drive(&mut p, &mut now, 13, |_| 0);
        assert!(p.status().settled);
        assert!(
            p.interval() >= Duration::from_micros(3970),
            "{:?}",
            p.interval()
        );
        assert!(records.iter().all(|r| r.restart.is_none()));
        let r = drive(&mut p, &mut now, 1, |_| 10);
        assert_eq!(r[0].restart, Some(RestartReason::WorkloadChange));
    }

    #[test]
    fn safety_net_polls_on_full_ring_or_leftover_work() {
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        p.start(Instant(0));
        let mut r = pass(Instant(10), 0);
        r.max_fill_permille = 750;
        assert_eq!(p.on_pass(&r), Decision::POLL);
        r.max_fill_permille = 749;
        assert!(matches!(
            p.on_pass(&r).action,
            Action::Sleep {
                kick_threshold: Some(750),
                ..
            }
        ));
        r.more_work = true;
        assert_eq!(p.on_pass(&r), Decision::POLL);

        // kick_threshold_permille = 0: the paper's behaviour, no kick, no
        // fill-based polling; leftover work (bounded pass) still polls.
        let mut p = NetAp::new(NetapParams {
            kick_threshold_permille: 0,
            ..NetapParams::default()
        })
        .unwrap();
        p.start(Instant(0));
        let mut r = pass(Instant(10), 0);
        r.max_fill_permille = 1000;
        assert_eq!(
            p.on_pass(&r),
            Decision::sleep(Duration::from_micros(2510), None)
        );
        r.more_work = true;
        assert_eq!(p.on_pass(&r), Decision::POLL);
    }

    #[test]
    fn keeps_kick_driven_service_when_its_round_moves_more_until_the_next_search() {
        let params = NetapParams {
            max_rounds: 20,
            ..NetapParams::default()
        };
        let mut p = NetAp::new(params).unwrap();
        let mut now = Instant(0);
        p.start(now);
        // Every interval moves 1000 B/µs, kick-driven service twice that.
        let rate = |i: u64| if i == 0 { 2000 } else { 1000 };
        let records = drive(&mut p, &mut now, 20, rate);
        // 11 probes, a round at the settled interval, then kick-driven.
        assert!(records[..12].iter().all(|r| !r.kick_driven));
        assert!(records[12..].iter().all(|r| r.kick_driven), "{records:?}");
        // Rounds served kick-driven compare among themselves: no restart
        // until MaxRound, then a new periodic search.
        assert!(records[..19].iter().all(|r| r.restart.is_none()));
        assert_eq!(records[19].restart, Some(RestartReason::MaxRounds));
        assert!(!p.kick_driven());
        assert_eq!(p.interval(), Duration::from_micros(2510));

        // While kick-driven: wait for a kick until the round ends, poll again
        // while a pass leaves work, no polling interval to report.
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        let mut now = Instant(0);
        p.start(now);
        drive(&mut p, &mut now, 13, rate);
        assert!(p.kick_driven());
        assert_eq!(p.status().interval, None);
        assert!(p.status().settled);
        // This pass closes the round with the kick-driven rate: no restart.
        let mut r = pass(now + Duration::from_micros(5), 2000 * 1_000_000);
        r.max_fill_permille = 1000;
        match p.on_pass(&r).action {
            Action::WaitKick { timeout: Some(t) } => assert!(t <= Duration::from_secs(1)),
            other => panic!("unexpected {other:?}"),
        }
        r.more_work = true;
        assert_eq!(p.on_pass(&r), Decision::POLL);
    }

    #[test]
    fn kick_driven_service_ignores_noise_and_is_rechecked_every_30_rounds() {
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        let mut now = Instant(0);
        p.start(now);
        drive(&mut p, &mut now, 13, |i| if i == 0 { 2000 } else { 1000 });
        assert!(p.kick_driven());
        // Kick-driven rounds that differ by ±30 % (beyond MinChange 0.2):
        // no restart; the 30th is followed by a periodic recheck round,
        // which still loses, so kick-driven service resumes.
        let k = std::cell::Cell::new(0u64);
        let noisy = |i: u64| {
            if i == 0 {
                k.set(k.get() + 1);
                if k.get() % 2 == 0 {
                    1400
                } else {
                    2600
                }
            } else {
                1000
            }
        };
        let n = KICK_RECHECK_ROUNDS as usize;
        let records = drive(&mut p, &mut now, n as u64 + 2, noisy);
        assert!(records.iter().all(|r| r.restart.is_none()), "{records:?}");
        let kinds: Vec<bool> = records.iter().map(|r| r.kick_driven).collect();
        assert!(kinds[..n].iter().all(|&k| k));
        assert!(!kinds[n], "the recheck round runs periodic");
        assert!(kinds[n + 1]);
        assert_eq!(p.status().restarts, 0);
        // The load falls: periodic now moves as much, so the recheck restarts
        // the search.
        let records = drive(&mut p, &mut now, n as u64 + 1, |_| 500);
        let at = records.iter().position(|r| r.restart.is_some()).unwrap();
        assert_eq!(records[at].restart, Some(RestartReason::WorkloadChange));
        assert!(!records[at].kick_driven);
        assert_eq!(records[at].next_interval, Duration::from_micros(2510));
        assert!(records[at + 1..].iter().all(|r| !r.kick_driven));
    }

    #[test]
    fn stays_periodic_when_kick_driven_gains_less_than_the_margin_or_the_check_is_off() {
        let rate = |i: u64| if i == 0 { 1040 } else { 1000 };
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        let mut now = Instant(0);
        p.start(now);
        let records = drive(&mut p, &mut now, 15, rate);
        assert!(records[12].kick_driven);
        assert!(!records[13].kick_driven && !records[14].kick_driven);
        assert!(!p.kick_driven());
        assert!(p.status().interval.is_some());

        // The paper's NetAP: no check, however much kicks would move.
        let mut p = NetAp::new(NetapParams {
            kick_probe: false,
            ..NetapParams::default()
        })
        .unwrap();
        let mut now = Instant(0);
        p.start(now);
        let records = drive(&mut p, &mut now, 14, |i| if i == 0 { 9000 } else { 1000 });
        assert!(records.iter().all(|r| !r.kick_driven));
    }

    #[test]
    fn notify_during_sleep_lets_the_first_kick_end_every_sleep_and_drains_what_it_finds() {
        let mut p = NetAp::new(NetapParams {
            notify_during_sleep: true,
            kick_threshold_permille: 0,
            ..NetapParams::default()
        })
        .unwrap();
        p.start(Instant(0));
        let mut r = pass(Instant(10), 0);
        assert_eq!(
            p.on_pass(&r),
            Decision::sleep(Duration::from_micros(2510), Some(1))
        );
        // A pass that found frames is followed by another at once.
        r.max_fill_permille = 4;
        assert_eq!(p.on_pass(&r), Decision::POLL);
    }

    #[test]
    fn bytes_of_every_pass_count_and_rounds_are_normalised() {
        let mut p = NetAp::new(NetapParams::default()).unwrap();
        p.start(Instant(0));
        let ms = |v: u64| Instant(Duration::from_millis(v).as_nanos());
        p.on_pass(&pass(ms(100), 1000));
        let mut kicked = pass(ms(200), 500);
        kicked.wake = WakeCause::Kick;
        p.on_pass(&kicked);
        let mut polled = pass(ms(300), 1500);
        polled.wake = WakeCause::Immediate;
        p.on_pass(&polled);
        assert_eq!(p.last_round(), None);
        // The round ends at the first pass after 1 s: at 1.5 s.
        p.on_pass(&pass(ms(1500), 3000));
        let r = p.last_round().unwrap();
        assert_eq!(r.bytes, 6000);
        assert_eq!(r.length, Duration::from_millis(1500));
        assert_eq!(r.measured, 4000);
        assert_eq!(r.next_interval, Duration::from_micros(1590));
        // The next round starts at the pass that closed the previous one.
        p.on_pass(&pass(ms(2499), 7));
        assert_eq!(p.last_round().unwrap().seq, 1);
        p.on_pass(&pass(ms(2500), 7));
        assert_eq!(p.last_round().unwrap().bytes, 14);
    }

    #[test]
    fn narrowed_range_for_netap_ml() {
        let mut p = NetAp::with_range(NetapParams::default(), 1000, 2000).unwrap();
        p.start(Instant(0));
        assert_eq!(p.interval(), Duration::from_micros(1618));
        p.set_search_range(1500, 2500).unwrap();
        assert_eq!(p.interval(), Duration::from_micros(1618));
        assert!(p.set_search_range(10, 5).is_err());
        p.start(Instant(0));
        assert_eq!(p.interval(), Duration::from_micros(2118));
    }
}
