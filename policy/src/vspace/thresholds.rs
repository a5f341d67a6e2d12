//! vSPACE's threshold explorer: the per-core utilisation each group may run
//! at before the SLO is at risk, learnt from SLO violations (vSPACE paper,
//! §4.3 and Algorithm 3).
//!
//! Every period the explorer receives a sample `s = [P95, util_vCPU, util_NQ]`
//! ([`ExplorationSample`]): the period's P95 latency and each group's
//! *average* utilisation per core (the group's CPU time in cores divided by
//! the cores it had that period). After `samples_per_round` samples (paper:
//! 1000, i.e. 100 s at 100 ms) it runs a round (lines 5–32):
//!
//! - `S_vio` are the samples whose P95 is above the SLO,
//!   `allowVioCount = ceil(count(S) × AllowVio)` and
//!   `decCount = count(S_vio) − allowVioCount`.
//! - If `decCount > 0`, the violating samples are sorted by each
//!   utilisation, highest first. `decCount` times, the top sample of each list
//!   is compared with the temporary thresholds `TH'`; the group whose
//!   `TH' − util` is smaller (the vCPU group on a tie) takes that sample's
//!   utilisation as its `TH'`, and the sample leaves both lists. The
//!   thresholds then move `Weight` (paper: 0.7) of the way to `TH'`.
//! - If no sample violated, both thresholds grow by `Reward` (paper: 1.03).
//! - Otherwise (some violations, within the allowance) they stay.
//! - `S` is cleared.
//!
//! Note what the pseudo-code does, kept here as written: `TH'` takes the
//! utilisation of a violating sample, which can be *above* the current
//! threshold when periods violated the SLO while running hotter than it
//! (a load spike the allocation had not caught up with). Such a round raises
//! that threshold. The next rounds pull it back if violations go on.
//!
//! Exploration halts once the thresholds are stable (§5.1: "Once stable
//! thresholds are obtained through threshold exploration, we halt the online
//! threshold exploration"); the thresholds then stay fixed.
//! [`ThresholdExplorer::resume`] starts exploring again.
//!
//! # Initial thresholds: 0.7 for both groups
//!
//! The paper gives no initial thresholds. 0.7 is chosen because:
//!
//! - **The explorer's two moves are lopsided.** A round without violations
//!   raises a threshold by 3 % (Reward); a round with too many moves it 70 %
//!   of the way (Weight) towards the utilisation of violating periods. A start
//!   too high costs about one round (100 s) of violations before it is pulled
//!   down; a start too low costs cores for `ln(0.95 / start) / ln(1.03)` rounds
//!   before reaching the ceiling: 11 rounds (18 min) from 0.7, 22 rounds
//!   (37 min) from 0.5.
//! - **It is below the knee of the latency curve.** For one server queue
//!   (M/M/1), P95 response time is `ln 20 / (μ(1 − ρ))` ≈ 3 / (μ(1 − ρ)):
//!   10 service times at ρ = 0.7, 30 at 0.9. For the paper's memcached
//!   (about 20 µs of CPU per request) that is 0.2 ms against 0.6 ms, with a
//!   1 ms SLO.
//! - **Both groups start equal** because nothing tells them apart before
//!   anything is measured; the explorer separates them.
//!
//! # Departures from the paper, and why
//!
//! - **Thresholds stay within `[min, max]`, default `[0.1, 0.95]`.** The
//!   paper bounds them nowhere, and Reward grows them without end. A
//!   threshold of 1 or more would never let a saturated group grow: its
//!   per-core utilisation cannot exceed 1, so `ceil(TotalUtil / Th)` never
//!   exceeds the cores it has. At 0.95 a fully busy group of `n` cores asks
//!   for `ceil(n / 0.95) > n`. The floor keeps a round whose violating
//!   periods were near idle (utilisation ≈ 0) from driving a threshold to 0,
//!   which would give that group every core.
//! - **"Stable" is defined here**, the paper does not: a round is stable when
//!   neither threshold moved by more than `stable_tolerance` (default 1 %) of
//!   its value; exploration halts after `stable_rounds` (default 3) stable
//!   rounds in a row (0 = never halt). A round without violations at the
//!   ceiling, or with violations within the allowance, changes nothing and is
//!   stable; a rewarded round below the ceiling (+3 %) is not.
//! - **AllowVio defaults to 0.05**: the paper gives no value. One period in
//!   twenty may miss the SLO, as a P95 target allows one request in twenty to.
//! - **The SLO is violated when P95 > SLO** (the paper does not say whether
//!   equality violates; a P95 exactly at the objective meets it).
//! - **A round with no sample keeps the thresholds** (only reachable through
//!   [`ThresholdExplorer::explore`]); the pseudo-code would reward them on no
//!   evidence.
//! - **Samples with a non-finite utilisation are rejected**
//!   ([`SampleOutcome::Rejected`]), so they cannot poison the sort.
//! - **Ties**: samples of equal utilisation keep their arrival order in the
//!   sorted lists; `ceil` ignores float error below 10⁻⁹ (`1000 × 0.05` asks
//!   for 50 allowed violations, not 51).

use super::error::{invalid, VspaceConfigError};
use crate::time::Duration;
use serde::{Deserialize, Serialize};

/// Per-core utilisation thresholds `Th` of the two groups: the average
/// utilisation of a group's cores that vSPACE aims not to exceed
/// (0.7 = 70 % of each core busy).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// `Th_vCPU`, fraction of a core.
    pub vcpu: f64,
    /// `Th_NQ`, fraction of a core.
    pub nq: f64,
}

/// Initial thresholds and Algorithm 3's constants. Defaults are the paper's
/// where it gives one; see the module documentation for the others.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdParams {
    /// `Th_vCPU` before any exploration, fraction of a core (0.7; not from
    /// the paper, see the module docs). Fixed if `explore` is false.
    pub initial_vcpu: f64,
    /// `Th_NQ` before any exploration, fraction of a core (0.7, as
    /// `initial_vcpu`).
    pub initial_nq: f64,
    /// Lowest threshold exploration may reach, fraction of a core (0.1;
    /// the paper has no bound).
    pub min: f64,
    /// Highest threshold exploration may reach, fraction of a core, below 1
    /// (0.95; the paper has no bound).
    pub max: f64,
    /// Explore the thresholds (Algorithm 3). False keeps the initial ones.
    pub explore: bool,
    /// The SLO: a period whose P95 latency is above this violates it, µs
    /// (paper: 1000 for memcached, 10 000 for nginx).
    pub slo_p95_us: u64,
    /// AllowVio: fraction of a round's samples that may violate the SLO
    /// before the thresholds are lowered, in `[0, 1]` (0.05; the paper gives
    /// no value).
    pub allow_vio: f64,
    /// Reward: factor on both thresholds after a round without violations,
    /// at least 1 (paper: 1.03).
    pub reward: f64,
    /// Weight: how far a correcting round moves the thresholds towards `TH'`,
    /// in `[0, 1]` (paper: 0.7).
    pub weight: f64,
    /// Samples collected before each round (paper: 1000, i.e. 100 s of
    /// 100 ms periods).
    pub samples_per_round: u32,
    /// A round is stable when neither threshold moved by more than this
    /// fraction of its value (0.01; the paper does not define stable).
    pub stable_tolerance: f64,
    /// Halt exploration after this many stable rounds in a row (3; 0 = never
    /// halt).
    pub stable_rounds: u32,
}

impl Default for ThresholdParams {
    fn default() -> Self {
        ThresholdParams {
            initial_vcpu: 0.7,
            initial_nq: 0.7,
            min: 0.1,
            max: 0.95,
            explore: true,
            slo_p95_us: 1000,
            allow_vio: 0.05,
            reward: 1.03,
            weight: 0.7,
            samples_per_round: 1000,
            stable_tolerance: 0.01,
            stable_rounds: 3,
        }
    }
}

impl ThresholdParams {
    /// Most samples per round; bounds the explorer's memory (24 bytes a
    /// sample).
    pub const MAX_SAMPLES_PER_ROUND: u32 = 100_000;
    /// Largest accepted Reward.
    pub const MAX_REWARD: f64 = 2.0;

    /// The initial thresholds.
    pub fn initial(&self) -> Thresholds {
        Thresholds {
            vcpu: self.initial_vcpu,
            nq: self.initial_nq,
        }
    }

    /// Check every parameter; the error names the first bad one as it is
    /// written in config files.
    pub fn validate(&self) -> Result<(), VspaceConfigError> {
        if self.max.is_nan() || self.max >= 1.0 {
            return Err(invalid(
                "thresholds.max",
                format!(
                    "must be below 1 (a group at a threshold of 1 could never grow), not {}",
                    self.max
                ),
            ));
        }
        if !(self.min > 0.0 && self.min <= self.max) {
            return Err(invalid(
                "thresholds.min",
                format!(
                    "must be above 0 and at most max ({}), not {}",
                    self.max, self.min
                ),
            ));
        }
        for (param, v) in [
            ("thresholds.initial_vcpu", self.initial_vcpu),
            ("thresholds.initial_nq", self.initial_nq),
        ] {
            if !(self.min..=self.max).contains(&v) {
                return Err(invalid(
                    param,
                    format!(
                        "must be within min..=max ({}..={}), not {v}",
                        self.min, self.max
                    ),
                ));
            }
        }
        if self.slo_p95_us == 0 || self.slo_p95_us > u64::MAX / 1000 {
            return Err(invalid(
                "thresholds.slo_p95_us",
                format!(
                    "must be at least 1 µs and fit in nanoseconds, not {}",
                    self.slo_p95_us
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.allow_vio) {
            return Err(invalid(
                "thresholds.allow_vio",
                format!("must be within 0..=1, not {}", self.allow_vio),
            ));
        }
        if !(1.0..=Self::MAX_REWARD).contains(&self.reward) {
            return Err(invalid(
                "thresholds.reward",
                format!(
                    "must be within 1..={} (paper: 1.03), not {}",
                    Self::MAX_REWARD,
                    self.reward
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.weight) {
            return Err(invalid(
                "thresholds.weight",
                format!("must be within 0..=1 (paper: 0.7), not {}", self.weight),
            ));
        }
        if !(1..=Self::MAX_SAMPLES_PER_ROUND).contains(&self.samples_per_round) {
            return Err(invalid(
                "thresholds.samples_per_round",
                format!(
                    "must be 1 to {} (paper: 1000), not {}",
                    Self::MAX_SAMPLES_PER_ROUND,
                    self.samples_per_round
                ),
            ));
        }
        if !(self.stable_tolerance >= 0.0 && self.stable_tolerance.is_finite()) {
            return Err(invalid(
                "thresholds.stable_tolerance",
                format!(
                    "must be a finite fraction >= 0, not {}",
                    self.stable_tolerance
                ),
            ));
        }
        Ok(())
    }

    fn slo(&self) -> Duration {
        Duration::from_micros(self.slo_p95_us)
    }
}

/// One period's sample, `s = [P95, util_vCPU, util_NQ]` of Algorithm 3.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplorationSample {
    /// P95 latency measured over the period.
    pub p95: Duration,
    /// Average utilisation of the vCPU group's cores over the period,
    /// fraction of a core (group CPU time in cores / cores it had).
    pub vcpu_util: f64,
    /// Average utilisation of the NQ group's cores, fraction of a core.
    pub nq_util: f64,
}

/// What [`ThresholdExplorer::record`] did with a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SampleOutcome {
    /// Appended to `S`; not enough samples for a round yet.
    Collected,
    /// Appended, and `S` was full: a round ran.
    Explored(ExplorationRound),
    /// Not appended: exploration has halted (or is disabled).
    Halted,
    /// Not appended: a utilisation was NaN or infinite.
    Rejected,
}

/// Which branch of Algorithm 3 a round took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoundOutcome {
    /// `decCount > 0` (lines 11–27): `steps` (= `decCount`) violating
    /// samples were consumed and the thresholds moved towards `TH'`.
    Adjusted {
        /// Iterations of the loop of lines 13–25.
        steps: usize,
    },
    /// No sample violated the SLO (lines 28–29): both thresholds × Reward.
    Rewarded,
    /// Violations within the allowance (or no sample): thresholds unchanged.
    Kept,
}

/// One exploration round, for logs and traces. The explorer has applied it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplorationRound {
    /// Thresholds before the round.
    pub before: Thresholds,
    /// Thresholds after the round (after the `[min, max]` clamp).
    pub after: Thresholds,
    /// `count(S)`.
    pub samples: usize,
    /// `count(S_vio)`.
    pub violations: usize,
    /// `allowVioCount`.
    pub allowed_violations: usize,
    /// Which branch the round took.
    pub outcome: RoundOutcome,
    /// Neither threshold moved by more than `stable_tolerance`.
    pub stable: bool,
    /// Exploration halted after this round.
    pub halted: bool,
}

/// The threshold explorer (Algorithm 3). See the module documentation.
#[derive(Clone, Debug)]
pub struct ThresholdExplorer {
    params: ThresholdParams,
    thresholds: Thresholds,
    /// `S`.
    samples: Vec<ExplorationSample>,
    /// Stable rounds in a row.
    stable_streak: u32,
    halted: bool,
    rounds: u64,
}

impl ThresholdExplorer {
    /// An explorer starting from `params`' initial thresholds; halted from the
    /// start if `params.explore` is false.
    pub fn new(params: ThresholdParams) -> Result<Self, VspaceConfigError> {
        params.validate()?;
        Ok(ThresholdExplorer {
            params,
            thresholds: params.initial(),
            samples: Vec::new(),
            stable_streak: 0,
            halted: !params.explore,
            rounds: 0,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &ThresholdParams {
        &self.params
    }

    /// The current thresholds (`TH_vCPU`, `TH_NQ`).
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds
    }

    /// True while samples are collected and rounds run.
    pub fn is_exploring(&self) -> bool {
        !self.halted
    }

    /// Samples collected towards the next round (`count(S)`).
    pub fn pending_samples(&self) -> usize {
        self.samples.len()
    }

    /// Rounds run since the explorer was built.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Lines 1–4: append a sample to `S`, then run a round (lines 5–32) if
    /// `S` holds `samples_per_round` samples.
    pub fn record(&mut self, sample: ExplorationSample) -> SampleOutcome {
        if self.halted {
            return SampleOutcome::Halted;
        }
        if !(sample.vcpu_util.is_finite() && sample.nq_util.is_finite()) {
            return SampleOutcome::Rejected;
        }
        self.samples.push(sample);
        if self.samples.len() >= self.params.samples_per_round as usize {
            SampleOutcome::Explored(self.explore())
        } else {
            SampleOutcome::Collected
        }
    }

    /// Lines 5–32: run a round on the samples collected so far ("notified of
    /// threshold exploration"), whether or not `S` is full, then clear `S`.
    pub fn explore(&mut self) -> ExplorationRound {
        let p = self.params;
        // Line 6.
        let before = self.thresholds;
        // Line 8.
        let slo = p.slo();
        let violating: Vec<&ExplorationSample> =
            self.samples.iter().filter(|s| s.p95 > slo).collect();
        // Lines 9–10.
        let allowed = ceil_count(self.samples.len() as f64 * p.allow_vio);
        let dec_count = violating.len().saturating_sub(allowed);

        let (mut after, outcome) = if dec_count > 0 {
            // Lines 11–27.
            let target = lower_towards_violations(before, &violating, dec_count);
            let w = p.weight;
            let after = Thresholds {
                vcpu: (1.0 - w) * before.vcpu + w * target.vcpu,
                nq: (1.0 - w) * before.nq + w * target.nq,
            };
            (after, RoundOutcome::Adjusted { steps: dec_count })
        } else if violating.is_empty() && !self.samples.is_empty() {
            // Lines 28–29.
            let after = Thresholds {
                vcpu: p.reward * before.vcpu,
                nq: p.reward * before.nq,
            };
            (after, RoundOutcome::Rewarded)
        } else {
            (before, RoundOutcome::Kept)
        };
        after.vcpu = after.vcpu.clamp(p.min, p.max);
        after.nq = after.nq.clamp(p.min, p.max);
        let samples = self.samples.len();
        let violations = violating.len();
        // Line 31.
        self.samples.clear();
        self.thresholds = after;
        self.rounds += 1;

        let moved = |a: f64, b: f64| (b - a).abs() > p.stable_tolerance * a.abs();
        let stable = !moved(before.vcpu, after.vcpu) && !moved(before.nq, after.nq);
        self.stable_streak = if stable { self.stable_streak + 1 } else { 0 };
        if p.stable_rounds > 0 && self.stable_streak >= p.stable_rounds {
            self.halted = true;
        }
        ExplorationRound {
            before,
            after,
            samples,
            violations,
            allowed_violations: allowed,
            outcome,
            stable,
            halted: self.halted,
        }
    }

    /// Start exploring again after a halt (say, after the workload changed),
    /// from the current thresholds, with an empty `S`.
    pub fn resume(&mut self) {
        self.samples.clear();
        self.stable_streak = 0;
        self.halted = false;
    }
}

/// Lines 12–25 of Algorithm 3: the temporary thresholds `TH'` after
/// `dec_count` steps over the violating samples. `dec_count` is at most
/// `violating.len()`, and each step consumes one sample, so both sorted lists
/// always have a top sample.
fn lower_towards_violations(
    start: Thresholds,
    violating: &[&ExplorationSample],
    dec_count: usize,
) -> Thresholds {
    debug_assert!(dec_count <= violating.len());
    // Line 12: descending by each utilisation; the sort is stable, so ties
    // keep arrival order.
    let mut by_vcpu: Vec<usize> = (0..violating.len()).collect();
    by_vcpu.sort_by(|&a, &b| violating[b].vcpu_util.total_cmp(&violating[a].vcpu_util));
    let mut by_nq: Vec<usize> = (0..violating.len()).collect();
    by_nq.sort_by(|&a, &b| violating[b].nq_util.total_cmp(&violating[a].nq_util));
    let mut removed = vec![false; violating.len()];
    let (mut top_vcpu, mut top_nq) = (0, 0);
    // Line 7.
    let mut target = start;
    // Lines 13, 24.
    for _ in 0..dec_count {
        // Line 14: the top samples still in the lists.
        while removed[by_vcpu[top_vcpu]] {
            top_vcpu += 1;
        }
        while removed[by_nq[top_nq]] {
            top_nq += 1;
        }
        let s_vcpu = violating[by_vcpu[top_vcpu]];
        let s_nq = violating[by_nq[top_nq]];
        // Lines 15–16.
        let diff_vcpu = target.vcpu - s_vcpu.vcpu_util;
        let diff_nq = target.nq - s_nq.nq_util;
        if diff_vcpu <= diff_nq {
            // Lines 18–19.
            target.vcpu = s_vcpu.vcpu_util;
            removed[by_vcpu[top_vcpu]] = true;
        } else {
            // Lines 21–22.
            target.nq = s_nq.nq_util;
            removed[by_nq[top_nq]] = true;
        }
    }
    target
}

/// `ceil(x)` for a count, ignoring float error below 10⁻⁹.
fn ceil_count(x: f64) -> usize {
    (x - 1e-9).ceil().max(0.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLO_US: u64 = 1000;

    fn params(samples_per_round: u32, allow_vio: f64) -> ThresholdParams {
        ThresholdParams {
            samples_per_round,
            allow_vio,
            ..ThresholdParams::default()
        }
    }

    fn ok(vcpu_util: f64, nq_util: f64) -> ExplorationSample {
        ExplorationSample {
            p95: Duration::from_micros(SLO_US / 2),
            vcpu_util,
            nq_util,
        }
    }

    fn vio(vcpu_util: f64, nq_util: f64) -> ExplorationSample {
        ExplorationSample {
            p95: Duration::from_micros(SLO_US + 1),
            vcpu_util,
            nq_util,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    fn feed(e: &mut ThresholdExplorer, samples: &[ExplorationSample]) -> Option<ExplorationRound> {
        let mut last = None;
        for (i, s) in samples.iter().enumerate() {
            match e.record(*s) {
                SampleOutcome::Explored(r) => {
                    assert_eq!(i, samples.len() - 1, "round before the last sample");
                    last = Some(r);
                }
                SampleOutcome::Collected => assert!(i < samples.len() - 1),
                other => panic!("{other:?}"),
            }
        }
        last
    }

    /// Algorithm 3, lines 5–32, step by step on a round of 10 samples.
    #[test]
    fn replays_algorithm_3() {
        let mut e = ThresholdExplorer::new(params(10, 0.1)).unwrap();
        // Line 6: TH = (0.7, 0.7). Line 7: TH' = (0.7, 0.7).
        let a = vio(0.80, 0.50);
        let b = vio(0.75, 0.65);
        let c = vio(0.60, 0.68);
        let d = vio(0.50, 0.40);
        let mut round = vec![a, ok(0.5, 0.5), b, ok(0.6, 0.4), c, ok(0.7, 0.6), d];
        round.extend([ok(0.3, 0.3); 3]);
        let r = feed(&mut e, &round).unwrap();
        // Line 8: S_vio = {a, b, c, d}. Line 9: allowVioCount = ceil(10 ×
        // 0.1) = 1. Line 10: decCount = 4 − 1 = 3.
        assert_eq!((r.samples, r.violations, r.allowed_violations), (10, 4, 1));
        assert_eq!(r.outcome, RoundOutcome::Adjusted { steps: 3 });
        // Line 12: S_vCPU = a .80, b .75, c .60, d .50;
        //          S_NQ   = c .68, b .65, a .50, d .40.
        // Step 1: diff_vCPU = .70 − .80 = −.10, diff_NQ = .70 − .68 = .02.
        //   −.10 <= .02: TH'_vCPU = .80, a leaves both lists.
        // Step 2: diff_vCPU = .80 − .75 = .05, diff_NQ = .70 − .68 = .02.
        //   .05 > .02: TH'_NQ = .68, c leaves both lists.
        // Step 3: diff_vCPU = .80 − .75 = .05, diff_NQ = .68 − .65 = .03.
        //   .05 > .03: TH'_NQ = .65, b leaves both lists.
        // Line 26: TH_vCPU = .3 × .70 + .7 × .80 = .77.
        // Line 27: TH_NQ   = .3 × .70 + .7 × .65 = .665.
        assert!(close(r.after.vcpu, 0.77), "{:?}", r.after);
        assert!(close(r.after.nq, 0.665), "{:?}", r.after);
        assert_eq!(e.thresholds(), r.after);
        assert!(!r.stable && !r.halted);
        // Line 31: S is cleared.
        assert_eq!(e.pending_samples(), 0);
    }

    /// Lines 28–29: a round without violation multiplies both by Reward.
    #[test]
    fn rewards_a_round_without_violations() {
        let mut e = ThresholdExplorer::new(params(4, 0.05)).unwrap();
        let r = feed(&mut e, &[ok(0.9, 0.9); 4]).unwrap();
        assert_eq!(r.outcome, RoundOutcome::Rewarded);
        assert_eq!(r.allowed_violations, 1);
        assert!(close(r.after.vcpu, 0.7 * 1.03) && close(r.after.nq, 0.7 * 1.03));
        assert!(!r.stable);
    }

    /// A closed loop where the SLO binds: the group runs at 85–100 % of its
    /// threshold (whole cores), and a period violates the SLO above 0.8 of a
    /// core. Rewarded rounds raise the thresholds until rounds violate too
    /// often; the violation branch then lowers `Th_vCPU` (its violating
    /// utilisations are nearest the threshold) and exploration halts below
    /// the 0.95 ceiling. Without the violation branch every round but the
    /// kept ones is rewarded and the thresholds end at the ceiling.
    #[test]
    fn thresholds_go_down_as_well_as_up_and_halt_below_the_ceiling() {
        const KNEE: f64 = 0.8;
        let mut e = ThresholdExplorer::new(params(100, 0.05)).unwrap();
        let mut rounds = Vec::new();
        let mut period = 0u32;
        while e.is_exploring() {
            let th = e.thresholds().vcpu;
            let util = th * (0.85 + 0.15 * f64::from(period % 100) / 99.0);
            period += 1;
            let p95 = if util > KNEE {
                SLO_US + 100
            } else {
                SLO_US / 2
            };
            if let SampleOutcome::Explored(r) = e.record(ExplorationSample {
                p95: Duration::from_micros(p95),
                vcpu_util: util,
                nq_util: 0.3,
            }) {
                rounds.push(r);
            }
            assert!(rounds.len() < 100, "never halted: {rounds:?}");
        }
        let lowered = rounds
            .iter()
            .filter(|r| matches!(r.outcome, RoundOutcome::Adjusted { .. }))
            .filter(|r| r.after.vcpu < r.before.vcpu)
            .count();
        let raised = rounds
            .iter()
            .filter(|r| r.after.vcpu > r.before.vcpu)
            .count();
        assert!(lowered > 0 && raised > 0, "{rounds:?}");
        let t = e.thresholds();
        // Halted near the knee: the hottest periods (which run at the
        // threshold) within 5 % of it.
        assert!(t.vcpu < 0.95 && t.vcpu > KNEE * 0.95, "{t:?}");
        assert!(t.vcpu < KNEE / 0.95, "{t:?}");
    }

    /// Violations within the allowance change nothing (neither branch).
    #[test]
    fn keeps_thresholds_with_violations_within_the_allowance() {
        let mut e = ThresholdExplorer::new(params(10, 0.1)).unwrap();
        let mut round = vec![vio(0.2, 0.2)];
        round.extend([ok(0.5, 0.5); 9]);
        let r = feed(&mut e, &round).unwrap();
        assert_eq!((r.violations, r.allowed_violations), (1, 1));
        assert_eq!(r.outcome, RoundOutcome::Kept);
        assert_eq!(r.after, r.before);
        assert!(r.stable);
    }

    /// AllowVio = 0: every violating sample is consumed; TH' ends at the
    /// lowest-utilisation choices. Exactly the paper's 1000 × 0.05 = 50.
    #[test]
    fn allowance_is_a_ceiling_of_the_sample_count() {
        let mut e = ThresholdExplorer::new(params(3, 0.0)).unwrap();
        let r = feed(&mut e, &[vio(0.4, 0.9), vio(0.5, 0.3), ok(0.1, 0.1)]).unwrap();
        assert_eq!(r.outcome, RoundOutcome::Adjusted { steps: 2 });
        // Step 1: diff_vCPU = .7 − .5 = .2, diff_NQ = .7 − .9 = −.2:
        //   TH'_NQ = .9, sample 1 leaves. Step 2: top vCPU .5 (sample 2),
        //   top NQ .3 (sample 2): diff .2 vs .6: TH'_vCPU = .5.
        assert!(close(r.after.vcpu, 0.3 * 0.7 + 0.7 * 0.5), "{:?}", r.after);
        assert!(
            close(r.after.nq, (0.3 * 0.7 + 0.7 * 0.9_f64).min(0.95)),
            "{:?}",
            r.after
        );
        assert_eq!(ceil_count(1000.0 * 0.05), 50);
        assert_eq!(ceil_count(1000.0 * 0.0501), 51);
        assert_eq!(ceil_count(0.0), 0);
    }

    /// A P95 exactly at the SLO meets it.
    #[test]
    fn slo_is_violated_only_above_it() {
        let mut e = ThresholdExplorer::new(params(1, 0.0)).unwrap();
        let at_slo = ExplorationSample {
            p95: Duration::from_micros(SLO_US),
            vcpu_util: 0.5,
            nq_util: 0.5,
        };
        let r = feed(&mut e, &[at_slo]).unwrap();
        assert_eq!(r.outcome, RoundOutcome::Rewarded);
    }

    /// The paper's timing: the first round runs on the 1000th sample.
    #[test]
    fn first_round_after_samples_per_round_samples() {
        let mut e = ThresholdExplorer::new(ThresholdParams::default()).unwrap();
        for _ in 0..999 {
            assert_eq!(e.record(ok(0.5, 0.5)), SampleOutcome::Collected);
        }
        assert_eq!(e.pending_samples(), 999);
        assert!(matches!(e.record(ok(0.5, 0.5)), SampleOutcome::Explored(_)));
        assert_eq!(e.rounds(), 1);
    }

    /// Violation-free rounds climb to the ceiling, then three stable rounds
    /// in a row halt exploration; `resume` starts it again.
    #[test]
    fn halts_once_stable_and_resumes() {
        let mut e = ThresholdExplorer::new(params(2, 0.05)).unwrap();
        let mut rounds = Vec::new();
        while e.is_exploring() {
            rounds.push(feed(&mut e, &[ok(0.5, 0.5); 2]).unwrap());
            assert!(rounds.len() < 100);
        }
        // 0.7 × 1.03^10 = 0.9407 after 10 rewarded rounds (each +3 %, not
        // stable). The 11th reaches the 0.95 ceiling, +0.99 %: stable, as are
        // the next two, which change nothing. Halted after the 13th.
        assert_eq!(rounds.len(), 13, "{rounds:?}");
        assert!(rounds[..10].iter().all(|r| !r.stable));
        assert!(rounds[10..].iter().all(|r| r.stable));
        assert!(rounds.last().unwrap().halted);
        assert!(close(e.thresholds().vcpu, 0.95));
        assert_eq!(e.record(ok(0.5, 0.5)), SampleOutcome::Halted);

        e.resume();
        assert!(e.is_exploring());
        assert_eq!(e.record(ok(0.5, 0.5)), SampleOutcome::Collected);
    }

    /// Exploration off: the initial thresholds are kept for good.
    #[test]
    fn explore_false_keeps_the_initial_thresholds() {
        let mut e = ThresholdExplorer::new(ThresholdParams {
            explore: false,
            ..ThresholdParams::default()
        })
        .unwrap();
        assert!(!e.is_exploring());
        assert_eq!(e.record(vio(0.1, 0.1)), SampleOutcome::Halted);
        assert_eq!(e.thresholds(), ThresholdParams::default().initial());
    }

    /// With stable_rounds = 0 exploration never halts.
    #[test]
    fn stable_rounds_zero_never_halts() {
        let mut e = ThresholdExplorer::new(ThresholdParams {
            samples_per_round: 1,
            stable_rounds: 0,
            ..ThresholdParams::default()
        })
        .unwrap();
        for _ in 0..50 {
            e.record(ok(0.5, 0.5));
        }
        assert!(e.is_exploring());
    }

    /// Garbage never panics and never leaves `[min, max]`.
    #[test]
    fn garbage_samples() {
        let mut e = ThresholdExplorer::new(params(3, 0.0)).unwrap();
        for u in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(e.record(vio(u, 0.5)), SampleOutcome::Rejected);
            assert_eq!(e.record(vio(0.5, u)), SampleOutcome::Rejected);
        }
        assert_eq!(e.pending_samples(), 0);
        // Violations at negative and huge utilisations.
        feed(&mut e, &[vio(-5.0, 1e300), vio(-1.0, -1.0), vio(0.0, 0.0)]);
        let t = e.thresholds();
        assert!(
            (0.1..=0.95).contains(&t.vcpu) && (0.1..=0.95).contains(&t.nq),
            "{t:?}"
        );
        // A round with no sample keeps the thresholds.
        let r = e.explore();
        assert_eq!((r.outcome, r.after), (RoundOutcome::Kept, t));
    }

    #[test]
    fn validate_names_the_bad_parameter() {
        let d = ThresholdParams::default();
        let cases = [
            (ThresholdParams { min: 0.0, ..d }, "thresholds.min"),
            (ThresholdParams { min: f64::NAN, ..d }, "thresholds.min"),
            (ThresholdParams { max: 1.0, ..d }, "thresholds.max"),
            (ThresholdParams { max: f64::NAN, ..d }, "thresholds.max"),
            (ThresholdParams { max: 0.05, ..d }, "thresholds.min"),
            (
                ThresholdParams {
                    initial_vcpu: 0.0,
                    ..d
                },
                "thresholds.initial_vcpu",
            ),
            (
                ThresholdParams {
                    initial_nq: 0.99,
                    ..d
                },
                "thresholds.initial_nq",
            ),
            (
                ThresholdParams { slo_p95_us: 0, ..d },
                "thresholds.slo_p95_us",
            ),
            (
                ThresholdParams {
                    allow_vio: 1.5,
                    ..d
                },
                "thresholds.allow_vio",
            ),
            (ThresholdParams { reward: 0.99, ..d }, "thresholds.reward"),
            (
                ThresholdParams {
                    reward: f64::INFINITY,
                    ..d
                },
                "thresholds.reward",
            ),
            (ThresholdParams { weight: -0.1, ..d }, "thresholds.weight"),
            (
                ThresholdParams {
                    samples_per_round: 0,
                    ..d
                },
                "thresholds.samples_per_round",
            ),
            (
                ThresholdParams {
                    stable_tolerance: f64::NAN,
                    ..d
                },
                "thresholds.stable_tolerance",
            ),
        ];
        for (p, name) in cases {
            match ThresholdExplorer::new(p) {
                Err(VspaceConfigError::InvalidParam { param, .. }) => assert_eq!(param, name),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(d.validate().is_ok());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn sample() -> impl Strategy<Value = ExplorationSample> {
            (0u64..3000, -0.5f64..1.5, -0.5f64..1.5).prop_map(|(p95_us, vcpu_util, nq_util)| {
                ExplorationSample {
                    p95: Duration::from_micros(p95_us),
                    vcpu_util,
                    nq_util,
                }
            })
        }

        fn explorer_params() -> impl Strategy<Value = ThresholdParams> {
            (
                0.0f64..=1.0,
                1.0f64..=1.5,
                0.0f64..=1.0,
                0.1f64..=0.95,
                0.1f64..=0.95,
            )
                .prop_map(|(allow_vio, reward, weight, initial_vcpu, initial_nq)| {
                    ThresholdParams {
                        allow_vio,
                        reward,
                        weight,
                        initial_vcpu,
                        initial_nq,
                        samples_per_round: 1,
                        ..ThresholdParams::default()
                    }
                })
        }

        proptest! {
            /// A round's thresholds stay in `[min, max]`; its step count is
            /// `count(S_vio) − allowVioCount` when positive; a round without
            /// violations never lowers a threshold; `S` is empty after it.
            #[test]
            fn rounds_follow_algorithm_3(
                p in explorer_params(),
                samples in proptest::collection::vec(sample(), 0..60),
            ) {
                let mut e = ThresholdExplorer::new(p).unwrap();
                e.samples = samples.clone();
                let r = e.explore();
                prop_assert!((p.min..=p.max).contains(&r.after.vcpu));
                prop_assert!((p.min..=p.max).contains(&r.after.nq));
                let slo = Duration::from_micros(p.slo_p95_us);
                let violations = samples.iter().filter(|s| s.p95 > slo).count();
                prop_assert_eq!(r.violations, violations);
                let allowed = ceil_count(samples.len() as f64 * p.allow_vio);
                match r.outcome {
                    RoundOutcome::Adjusted { steps } => {
                        prop_assert_eq!(steps, violations - allowed);
                        // TH' is the start or a violating sample's utilisation,
                        // so each new threshold lies between the old one and
                        // the nearest bound of the violating utilisations.
                        let lo = samples.iter().filter(|s| s.p95 > slo)
                            .map(|s| s.vcpu_util.min(s.nq_util)).fold(f64::INFINITY, f64::min);
                        let hi = samples.iter().filter(|s| s.p95 > slo)
                            .map(|s| s.vcpu_util.max(s.nq_util)).fold(f64::NEG_INFINITY, f64::max);
                        for (b, a) in [(r.before.vcpu, r.after.vcpu), (r.before.nq, r.after.nq)] {
                            prop_assert!(a >= b.min(lo).max(p.min) - 1e-12);
                            prop_assert!(a <= b.max(hi).min(p.max) + 1e-12);
                        }
                    }
                    RoundOutcome::Rewarded => {
                        prop_assert_eq!(violations, 0);
                        prop_assert!(r.after.vcpu >= r.before.vcpu);
                        prop_assert!(r.after.nq >= r.before.nq);
                    }
                    RoundOutcome::Kept => {
                        prop_assert!(violations <= allowed);
                        prop_assert_eq!(r.after, r.before);
                    }
                }
                prop_assert_eq!(e.pending_samples(), 0);
            }

            /// Under a stream of identical samples exploration halts, and the
            /// thresholds then stay put.
            #[test]
            fn constant_samples_halt_exploration(
                p in explorer_params(),
                s in sample(),
            ) {
                let mut e = ThresholdExplorer::new(p).unwrap();
                let mut n = 0;
                while e.is_exploring() {
                    e.record(s);
                    n += 1;
                    prop_assert!(n < 10_000, "still exploring after {} rounds", n);
                }
                let t = e.thresholds();
                for _ in 0..10 {
                    prop_assert_eq!(e.record(s), SampleOutcome::Halted);
                }
                prop_assert_eq!(e.thresholds(), t);
            }
        }
    }
}
