//! Golden-section maximiser fed one observation per round: NetAP's Algorithm 2.
//!
//! The searcher proposes a point, the caller measures the objective there for
//! one round (NetAP: the bytes a queue worker moves in one second while it
//! polls every *point* microseconds) and hands the measurement back with
//! [`GoldenSection::observe`], which answers with the next point to measure or
//! with the point the search settled on. Nothing here knows about time or
//! queues, so the NetAP-ML extension can run it on a narrowed range
//! (± 500 µs around a predicted best) by passing that range to
//! [`GoldenSection::new`] or [`GoldenSection::set_range`].
//!
//! # Algorithm 2 of the NetAP paper, and where this departs from it
//!
//! The paper (§3.4.3) names its two interior points after the *end they are
//! measured from*, not after their value:
//!
//! ```text
//!   interval_low  = MinInterval + distance      (the upper interior point, R > 0.5)
//!   interval_high = MaxInterval − distance      (the lower interior point)
//! ```
//!
//! with `distance = R · (MaxInterval − MinInterval)` at first. Round 0
//! measures `interval_low`, round 1 `interval_high`. From then on each new
//! measurement is stored for the point just measured; `distance` is multiplied
//! by `R`; if `interval_low` did better the search keeps the upper part of the
//! bracket (`interval_high ← interval_low`, `interval_low ← old interval_high +
//! distance`, measure `interval_low` next), otherwise the lower part
//! (`interval_low ← interval_high`, `interval_high ← old interval_low −
//! distance`, measure `interval_high` next). One new measurement per round, as
//! the golden ratio lets the surviving point be reused. This module keeps the
//! paper's names for the two points ([`GoldenSection::points`]) and its
//! arithmetic: points are integers in the caller's unit, `distance` is carried
//! unrounded and rounded to the nearest unit when it is added or subtracted,
//! which reproduces the paper's table of distances for 100–4000 µs, R = 0.618:
//! 2410, 1490, 921, 569, 352, 217, 134, 83, 51, 32.
//!
//! Decisions, each pinned by a unit test:
//!
//! - **Stopping rule.** The pseudocode checks `distance <= MinDistance`
//!   *before* shrinking `distance`, which would make one more probe at
//!   distance 20 than the paper's text, its table of distances and its "11
//!   iterations" say. We follow the text: a distance is used only if, rounded,
//!   it is at least `min_distance`; when the next one would be smaller the
//!   search settles. With the paper's parameters that is exactly 11 probes
//!   (the first distance used twice).
//! - **What it settles on.** The paper returns the interval measured last. We
//!   settle on the *better* of the two final probes (equal to the paper's
//!   choice whenever the last probe won). For a unimodal objective this puts
//!   the settled point within `R · last distance < min_distance` of the true
//!   maximum, whereas the last probe alone can be a whole last distance away.
//! - **Ties** (including a queue that was idle for both rounds, so both
//!   probes measured 0 bytes): the paper's strict `perf_low > perf_high`
//!   sends ties towards the *smaller* interval. We break ties towards the
//!   *larger* point instead: equal throughput at a longer polling interval
//!   costs fewer wake-ups. An idle queue therefore drives NetAP to long
//!   intervals, the cheap choice; NetAP's restart-on-change (Algorithm 1)
//!   starts a new search when traffic returns.
//! - **A round with zero bytes** is an ordinary measurement of 0. A single idle
//!   round during a search makes its probe lose, as it would in the paper; the
//!   search does not try to detect it.
//! - **Optimum at a range edge.** The edges are never probed, but the
//!   bracket shrinks towards the edge and the settled point ends within
//!   `min_distance` of it, like any other optimum. [`GoldenSection::bracket`]
//!   tells a caller that narrowed the range (NetAP-ML) whether the search ended
//!   against an edge, i.e. whether the true optimum may lie outside.
//!
//! - **Integer rounding.** The paper's arithmetic (integer points, rounded
//!   distances, R = 0.618 rather than the exact 0.6180339…) makes the two
//!   points drift from their ideal places by up to about half a unit per
//!   probe; with small distances they can meet or swap. Comparisons therefore
//!   go by the points' values, not their names (identical to the paper while
//!   `interval_low > interval_high`), and two measurements of one point do not
//!   narrow the bracket. With the paper's parameters (100–4000 µs, 30 µs)
//!   and NetAP-ML's ± 500 µs ranges the settled point is within
//!   `min_distance` of the maximum of any unimodal objective (checked for
//!   every peak position); in general the drift can add up to about half a
//!   unit per probe (property test: at most one).
//!
//! The ratio must lie in (0.5, 1): the paper's naming assumes
//! `interval_low > interval_high`, i.e. `R > 0.5`. Only the golden ratio
//! 0.618… keeps the reused point where a fresh golden section would put it;
//! other ratios still shrink the bracket but are not golden-section search.

/// The searcher's parameters were invalid.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GoldenError {
    /// The range is empty: `lo` must be below `hi`.
    #[error("search range {lo}..={hi} is empty (lo must be below hi)")]
    EmptyRange {
        /// Lower end of the range.
        lo: u64,
        /// Upper end of the range.
        hi: u64,
    },
    /// The ratio is outside (0.5, 1).
    #[error("ratio {0} is outside (0.5, 1)")]
    Ratio(f64),
    /// The minimum distance is zero, so the search would never stop.
    #[error("minimum distance must be at least 1")]
    MinDistance,
}

/// What [`GoldenSection::observe`] asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Measure the objective at this point for the next round.
    Probe(u64),
    /// The search is over; stay at this point.
    Settled(u64),
}

impl Step {
    /// The point to use next, whether probing or settled.
    pub fn point(self) -> u64 {
        match self {
            Step::Probe(p) | Step::Settled(p) => p,
        }
    }
}

/// Which of the paper's two points the current round measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Selected {
    Low,
    High,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Round 0 of Algorithm 2: measuring `interval_low` (no `perf_high` yet).
    First,
    /// Later rounds: measuring the `selected` point.
    Search,
    /// Done, settled on this point.
    Settled(u64),
}

/// Golden-section maximiser over the integer range `lo..=hi`, one observation
/// per call. See the module documentation for the algorithm and its edge cases.
///
/// Allocation-free; every call is O(1).
#[derive(Clone, Debug)]
pub struct GoldenSection {
    /// Lower end of the searched range (caller's unit, e.g. µs).
    lo: u64,
    /// Upper end of the searched range (caller's unit).
    hi: u64,
    /// Range applied by the next [`GoldenSection::restart`].
    next_range: (u64, u64),
    /// Shrink ratio R, in (0.5, 1).
    ratio: f64,
    /// Stop once the next distance, rounded, would be below this (caller's unit).
    min_distance: u64,
    /// Current distance, unrounded (caller's unit).
    distance: f64,
    /// The paper's `interval_low` (= bracket low end + distance).
    low: u64,
    /// The paper's `interval_high` (= bracket high end − distance).
    high: u64,
    /// Objective measured at `low`.
    perf_low: u64,
    /// Objective measured at `high`.
    perf_high: u64,
    /// Point the current round measures.
    selected: Selected,
    phase: Phase,
    /// Where the maximum lies if the objective is unimodal (both ends inclusive).
    bracket: (u64, u64),
    /// Points proposed since the last (re)start.
    probes: u32,
}

fn check(lo: u64, hi: u64, ratio: f64, min_distance: u64) -> Result<(), GoldenError> {
    if lo >= hi {
        return Err(GoldenError::EmptyRange { lo, hi });
    }
    // `!(a < x && x < b)` also rejects NaN.
    if !(0.5 < ratio && ratio < 1.0) {
        return Err(GoldenError::Ratio(ratio));
    }
    if min_distance == 0 {
        return Err(GoldenError::MinDistance);
    }
    Ok(())
}

/// Round a non-negative distance to the nearest unit (halves away from zero,
/// as the paper's constants were: 1489.5 → 1490).
fn round(d: f64) -> u64 {
    d.round() as u64
}

impl GoldenSection {
    /// A search over `lo..=hi` with shrink ratio `ratio` (paper: 0.618) that
    /// stops when the next distance would be below `min_distance` (paper: 30).
    /// The search starts at once: [`GoldenSection::current`] is the first
    /// point to measure.
    pub fn new(lo: u64, hi: u64, ratio: f64, min_distance: u64) -> Result<Self, GoldenError> {
        check(lo, hi, ratio, min_distance)?;
        let mut g = GoldenSection {
            lo,
            hi,
            next_range: (lo, hi),
            ratio,
            min_distance,
            distance: 0.0,
            low: lo,
            high: hi,
            perf_low: 0,
            perf_high: 0,
            selected: Selected::Low,
            phase: Phase::First,
            bracket: (lo, hi),
            probes: 0,
        };
        g.restart();
        Ok(g)
    }

    /// How many points a full search over `lo..=hi` probes (paper's
    /// parameters: 11), independent of the observations.
    pub fn probe_count(
        lo: u64,
        hi: u64,
        ratio: f64,
        min_distance: u64,
    ) -> Result<u32, GoldenError> {
        check(lo, hi, ratio, min_distance)?;
        let mut d = ratio * (hi - lo) as f64;
        let mut n = 2;
        loop {
            d *= ratio;
            if round(d) < min_distance {
                return Ok(n);
            }
            n += 1;
        }
    }

    /// Use `lo..=hi` from the next [`GoldenSection::restart`] on; the running
    /// search is not disturbed.
    pub fn set_range(&mut self, lo: u64, hi: u64) -> Result<(), GoldenError> {
        check(lo, hi, self.ratio, self.min_distance)?;
        self.next_range = (lo, hi);
        Ok(())
    }

    /// Start a new search (Algorithm 2, round 0) and return its first point,
    /// the paper's `interval_low = lo + R · (hi − lo)`.
    pub fn restart(&mut self) -> u64 {
        (self.lo, self.hi) = self.next_range;
        self.distance = self.ratio * (self.hi - self.lo) as f64;
        self.low = self.clamp(self.lo + round(self.distance));
        self.high = self.hi;
        self.perf_low = 0;
        self.perf_high = 0;
        self.selected = Selected::Low;
        self.phase = Phase::First;
        self.bracket = (self.lo, self.hi);
        self.probes = 1;
        self.low
    }

    /// Feed the objective measured at [`GoldenSection::current`]; returns the
    /// next point to measure, or the point the search settled on. Once settled,
    /// further observations are ignored until [`GoldenSection::restart`].
    pub fn observe(&mut self, value: u64) -> Step {
        match self.phase {
            Phase::Settled(p) => Step::Settled(p),
            Phase::First => {
                // Rounds 0–1: both points use the first distance.
                self.perf_low = value;
                self.high = self.clamp(self.hi.saturating_sub(round(self.distance)));
                self.selected = Selected::High;
                self.phase = Phase::Search;
                self.probes += 1;
                Step::Probe(self.high)
            }
            Phase::Search => {
                match self.selected {
                    Selected::Low => self.perf_low = value,
                    Selected::High => self.perf_high = value,
                }
                // The paper's `interval_low` is the upper point (R > 0.5), so
                // its `perf_low > perf_high` asks "did the upper point win?".
                // Rounding can swap the two points once distances are a few
                // units, so compare by value, not by name; the two agree
                // whenever `interval_low > interval_high`.
                let (lower, upper, perf_lower, perf_upper) = if self.low >= self.high {
                    (self.high, self.low, self.perf_high, self.perf_low)
                } else {
                    (self.low, self.high, self.perf_low, self.perf_high)
                };
                // Ties go to the larger point (module docs).
                let upper_wins = perf_upper >= perf_lower;
                // Two measurements of one point say nothing about where the
                // maximum is (rounding can make the points meet).
                if lower == upper {
                } else if upper_wins {
                    self.bracket.0 = self.bracket.0.max(lower);
                } else {
                    self.bracket.1 = self.bracket.1.min(upper);
                }
                let next = self.distance * self.ratio;
                if round(next) < self.min_distance {
                    let p = if upper_wins { upper } else { lower };
                    self.phase = Phase::Settled(p);
                    return Step::Settled(p);
                }
                self.distance = next;
                self.probes += 1;
                let d = round(self.distance);
                if upper_wins {
                    // Keep the upper part: the winner becomes `interval_high`,
                    // `interval_low ← old interval_high + distance`.
                    self.high = upper;
                    self.perf_high = perf_upper;
                    self.low = self.clamp_bracket(lower + d);
                    self.selected = Selected::Low;
                    Step::Probe(self.low)
                } else {
                    // Keep the lower part: the winner becomes `interval_low`,
                    // `interval_high ← old interval_low − distance`.
                    self.low = lower;
                    self.perf_low = perf_lower;
                    self.high = self.clamp_bracket(upper.saturating_sub(d));
                    self.selected = Selected::High;
                    Step::Probe(self.high)
                }
            }
        }
    }

    fn clamp(&self, p: u64) -> u64 {
        p.clamp(self.lo, self.hi)
    }

    fn clamp_bracket(&self, p: u64) -> u64 {
        p.clamp(self.bracket.0, self.bracket.1)
    }

    /// The point being measured this round, or the settled point.
    pub fn current(&self) -> u64 {
        match self.phase {
            Phase::Settled(p) => p,
            Phase::First => self.low,
            Phase::Search => match self.selected {
                Selected::Low => self.low,
                Selected::High => self.high,
            },
        }
    }

    /// True once the search has settled.
    pub fn is_settled(&self) -> bool {
        matches!(self.phase, Phase::Settled(_))
    }

    /// Points proposed since the last (re)start, the current one included.
    pub fn probes(&self) -> u32 {
        self.probes
    }

    /// The paper's `(interval_low, interval_high)`. Before the second round
    /// `interval_high` is not yet defined and reads as `hi`.
    pub fn points(&self) -> (u64, u64) {
        (self.low, self.high)
    }

    /// Smallest range known to hold the maximum if the objective is unimodal,
    /// both ends inclusive. When the search has settled and an end of the
    /// bracket is still an end of [`GoldenSection::range`], the optimum may be
    /// at or beyond that edge.
    pub fn bracket(&self) -> (u64, u64) {
        self.bracket
    }

    /// The range of the running search, both ends inclusive.
    pub fn range(&self) -> (u64, u64) {
        (self.lo, self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Algorithm 2 hand-transcribed, with the paper's integer table of
    /// distances (§3.4.3) and the paper's strict `perf_low > perf_high` plus our
    /// documented tie-break. Returns every interval it asks to measure and the
    /// interval the search ends on, the best of the last two.
    fn paper_reference(f: impl Fn(u64) -> u64) -> (Vec<u64>, u64) {
        const TABLE: [u64; 10] = [2410, 1490, 921, 569, 352, 217, 134, 83, 51, 32];
        let (min_interval, max_interval) = (100u64, 4000u64);
        let mut visited = Vec::new();
        let mut k = 0;
        let mut distance = TABLE[k];
        let mut interval_low = min_interval + distance;
        visited.push(interval_low);
        let mut perf_low = f(interval_low);
        let mut interval_high = max_interval - distance;
        visited.push(interval_high);
        let mut perf_high = f(interval_high);
        loop {
            let low_better =
                perf_low > perf_high || (perf_low == perf_high && interval_low >= interval_high);
            k += 1;
            if k == TABLE.len() {
                return (
                    visited,
                    if low_better {
                        interval_low
                    } else {
                        interval_high
                    },
                );
            }
            distance = TABLE[k];
            if low_better {
                let temp = interval_high;
                interval_high = interval_low;
                interval_low = temp + distance;
                perf_high = perf_low;
                visited.push(interval_low);
                perf_low = f(interval_low);
            } else {
                let temp = interval_low;
                interval_low = interval_high;
                interval_high = temp - distance;
                perf_low = perf_high;
                visited.push(interval_high);
                perf_high = f(interval_high);
            }
        }
    }

    /// Drive `g` with objective `f` until it settles; returns the probes and the result.
    fn run(g: &mut GoldenSection, f: impl Fn(u64) -> u64) -> (Vec<u64>, u64) {
        let mut visited = vec![g.current()];
        loop {
            match g.observe(f(g.current())) {
                Step::Probe(p) => {
                    assert_eq!(p, g.current());
                    visited.push(p);
                }
                Step::Settled(p) => return (visited, p),
            }
            assert!(visited.len() < 100, "search does not terminate");
        }
    }

    fn paper() -> GoldenSection {
        GoldenSection::new(100, 4000, 0.618, 30).unwrap()
    }

    /// A tent: maximum `peak`, falling by `slope` per unit on either side.
    fn tent(peak: u64, slope: u64) -> impl Fn(u64) -> u64 {
        move |x| 1_000_000_000 - x.abs_diff(peak) * slope
    }

    #[test]
    fn paper_parameters_give_the_papers_distances_and_11_probes() {
        assert_eq!(GoldenSection::probe_count(100, 4000, 0.618, 30), Ok(11));
        // Always-improving upwards: every step keeps the upper part, so each
        // new point is the previous `interval_high` plus the next distance.
        let (visited, _) = run(&mut paper(), |x| x);
        assert_eq!(visited.len(), 11);
        assert_eq!(visited[0], 100 + 2410);
        assert_eq!(visited[1], 4000 - 2410);
        let (reference, _) = paper_reference(|x| x);
        assert_eq!(visited, reference);
    }

    #[test]
    fn visits_exactly_the_sequence_of_algorithm_2() {
        type Objective = Box<dyn Fn(u64) -> u64>;
        let functions: Vec<(&str, Objective)> = vec![
            ("increasing", Box::new(|x| x)),
            ("decreasing", Box::new(|x| 10_000 - x)),
            ("tent at 2500", Box::new(tent(2500, 3))),
            ("tent at 700", Box::new(tent(700, 1))),
            ("tent at 1777", Box::new(tent(1777, 10))),
            (
                "skewed",
                Box::new(|x| if x < 1200 { x * 10 } else { 12_000 + 4000 - x }),
            ),
        ];
        for (name, f) in functions {
            let (visited, settled) = run(&mut paper(), &f);
            let (ref_visited, ref_settled) = paper_reference(&f);
            assert_eq!(visited, ref_visited, "{name}");
            assert_eq!(settled, ref_settled, "{name}");
        }
    }

    #[test]
    fn hand_checked_sequence_for_a_peak_at_1000() {
        // Worked by hand from Algorithm 2 with the paper's distances:
        // 2510 vs 1590 -> 1590 better, keep lower part: high = 2510 - 1490 = 1020
        // 1590 vs 1020 -> 1020 better: high = 1590 - 921 = 669
        // 1020 vs 669 -> 1020 better (low wins): low = 669 + 569 = 1238
        // 1020 vs 1238 -> 1020 (high) better: high = 1238 - 352 = 886
        // 1020 vs 886 -> low wins: low = 886 + 217 = 1103
        // 1020 vs 1103 -> high wins: high = 1103 - 134 = 969
        // 1020 vs 969 -> low wins: low = 969 + 83 = 1052
        // 1020 vs 1052 -> high wins: high = 1052 - 51 = 1001
        // 1020 vs 1001 -> high wins: high = 1020 - 32 = 988
        // 1001 vs 988 -> 1001 is `interval_low` and better: settle on 1001.
        let (visited, settled) = run(&mut paper(), tent(1000, 1));
        assert_eq!(
            visited,
            [2510, 1590, 1020, 669, 1238, 886, 1103, 969, 1052, 1001, 988]
        );
        assert_eq!(settled, 1001);
    }

    #[test]
    fn settles_on_the_better_of_the_last_two_probes() {
        // Along the path of the previous test the last two probes are 1001
        // and 988. With 988 better, the paper's "return the last interval"
        // and our rule agree.
        let peak_1000 = tent(1000, 1);
        let (visited, settled) = run(
            &mut paper(),
            |x| if x == 988 { u64::MAX } else { peak_1000(x) },
        );
        assert_eq!(&visited[visited.len() - 2..], [1001, 988]);
        assert_eq!(settled, 988);
        // With 1001 better (the true peak is at 1000) the paper would stay at
        // 988, 12 µs off; we settle on 1001.
        let (visited, settled) = run(&mut paper(), tent(1000, 1));
        assert_eq!(&visited[visited.len() - 2..], [1001, 988]);
        assert_eq!(settled, 1001);
    }

    #[test]
    fn ties_go_to_the_larger_point_so_an_idle_queue_ends_at_long_intervals() {
        let (visited, settled) = run(&mut paper(), |_| 0);
        // The first comparison (2510 vs 1590) is a tie: keep the upper part.
        assert_eq!(visited[2], 1590 + 1490);
        assert!(settled > 4000 - 30, "settled at {settled}");
        let g = {
            let mut g = paper();
            run(&mut g, |_| 0);
            g
        };
        assert_eq!(g.bracket().1, 4000);
    }

    #[test]
    fn a_single_idle_round_makes_its_probe_lose() {
        let mut g = paper();
        assert_eq!(g.current(), 2510);
        assert_eq!(g.observe(0), Step::Probe(1590));
        // 1590 moved bytes, 2510 had an idle round: keep the lower part.
        assert_eq!(g.observe(5), Step::Probe(2510 - 1490));
    }

    #[test]
    fn optimum_at_either_edge_is_found_within_min_distance() {
        let mut g = paper();
        let (_, s) = run(&mut g, |x| 10_000 - x);
        assert!(s - 100 <= 30, "settled at {s}");
        assert_eq!(
            g.bracket().0,
            100,
            "bracket should still touch the lower edge"
        );
        let mut g = paper();
        let (_, s) = run(&mut g, |x| x);
        assert!(4000 - s <= 30, "settled at {s}");
        assert_eq!(g.bracket().1, 4000);
    }

    #[test]
    fn paper_and_netap_ml_ranges_find_every_peak_within_min_distance() {
        for (lo, hi) in [(100, 4000), (1000, 2000), (100, 1100), (3000, 4000)] {
            for peak in lo..=hi {
                for slope in [1, 7] {
                    let mut g = GoldenSection::new(lo, hi, 0.618, 30).unwrap();
                    let (_, s) = run(&mut g, tent(peak, slope));
                    assert!(
                        s.abs_diff(peak) <= 30,
                        "{lo}..={hi}: peak {peak} settled {s}"
                    );
                }
            }
        }
    }

    #[test]
    fn narrowed_range_and_restart() {
        // NetAP-ML: ±500 µs around a predicted best of 1500.
        let mut g = paper();
        g.set_range(1000, 2000).unwrap();
        // The running search still uses the old range...
        assert_eq!(g.range(), (100, 4000));
        // ...the next one the new range.
        assert_eq!(g.restart(), 1000 + 618);
        assert_eq!(g.observe(1), Step::Probe(2000 - 618));
        let (visited, s) = run(&mut g, tent(1234, 1));
        assert!(s.abs_diff(1234) <= 30, "settled at {s}");
        assert!(visited.iter().all(|p| (1000..=2000).contains(p)));
        assert_eq!(
            GoldenSection::probe_count(1000, 2000, 0.618, 30),
            Ok(1 + visited.len() as u32)
        );
        // Settled: observations are ignored until restart.
        assert_eq!(g.observe(123), Step::Settled(s));
        assert_eq!(g.current(), s);
        assert!(g.is_settled());
        assert_eq!(g.restart(), 1618);
        assert!(!g.is_settled());
        assert_eq!(g.probes(), 1);
    }

    #[test]
    fn range_smaller_than_min_distance_probes_twice_and_settles() {
        let mut g = GoldenSection::new(100, 130, 0.618, 30).unwrap();
        assert_eq!(g.current(), 119);
        assert_eq!(g.observe(1), Step::Probe(111));
        assert_eq!(g.observe(2), Step::Settled(111));
    }

    #[test]
    fn rejects_bad_parameters() {
        assert_eq!(
            GoldenSection::new(5, 5, 0.618, 1).err(),
            Some(GoldenError::EmptyRange { lo: 5, hi: 5 })
        );
        for r in [0.0, 0.5, 1.0, -1.0, f64::NAN, 2.0] {
            assert!(matches!(
                GoldenSection::new(0, 10, r, 1),
                Err(GoldenError::Ratio(_))
            ));
        }
        assert_eq!(
            GoldenSection::new(0, 10, 0.618, 0).err(),
            Some(GoldenError::MinDistance)
        );
        let mut g = paper();
        assert!(g.set_range(10, 3).is_err());
        assert_eq!(g.range(), (100, 4000));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// For any unimodal objective the search settles within
            /// `min_distance` plus the drift of integer rounding (at most one
            /// unit per probe) of the maximum. The maximum and the
            /// settled point stay inside the bracket; every probe stays inside the
            /// range.
            #[test]
            fn finds_the_maximum_of_unimodal_functions(
                lo in 0u64..10_000,
                width in prop_oneof![1u64..=4000, 1u64..100_000],
                min_distance in 1u64..300,
                peak_frac in prop_oneof![Just(0.0), Just(1.0), 0.0f64..=1.0],
                slope_up in 1u64..1000,
                slope_down in 1u64..1000,
                quadratic in any::<bool>(),
            ) {
                let hi = lo + width;
                let peak = lo + (peak_frac * width as f64).round() as u64;
                let f = move |x: u64| -> u64 {
                    let d = x.abs_diff(peak);
                    let slope = if x < peak { slope_up } else { slope_down };
                    let drop = if quadratic { d * d * slope } else { d * slope };
                    u64::MAX / 2 - drop
                };
                let mut g = GoldenSection::new(lo, hi, 0.618, min_distance).unwrap();
                let (visited, settled) = run(&mut g, f);
                prop_assert!(visited.iter().all(|p| (lo..=hi).contains(p)));
                let probes = GoldenSection::probe_count(lo, hi, 0.618, min_distance).unwrap();
                prop_assert_eq!(visited.len() as u32, probes);
                let (b0, b1) = g.bracket();
                prop_assert!(b0 <= peak && peak <= b1, "peak {} outside bracket {:?}", peak, (b0, b1));
                prop_assert!(b0 <= settled && settled <= b1);
                let bound = min_distance + u64::from(probes);
                prop_assert!(
                    settled.abs_diff(peak) <= bound,
                    "settled {} peak {} range {}..={} min_distance {} visited {:?}",
                    settled, peak, lo, hi, min_distance, visited
                );
            }

            /// Any sequence of observations terminates in `probe_count` steps.
            #[test]
            fn terminates_for_arbitrary_observations(
                values in proptest::collection::vec(any::<u64>(), 60),
                ratio in 0.51f64..0.99,
                min_distance in 1u64..100,
                width in 1u64..100_000,
            ) {
                let mut g = GoldenSection::new(0, width, ratio, min_distance).unwrap();
                let n = GoldenSection::probe_count(0, width, ratio, min_distance).unwrap();
                let mut steps = 0;
                for v in values {
                    steps += 1;
                    let s = g.observe(v);
                    prop_assert!(s.point() <= width);
                    if let Step::Settled(_) = s {
                        break;
                    }
                }
                let ok = if g.is_settled() { steps == n } else { steps < n };
                prop_assert!(ok, "steps {} probe count {}", steps, n);
                prop_assert!(g.probes() <= n);
            }
        }
    }
}
