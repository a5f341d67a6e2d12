//! A token bucket that is told the time: `rate` tokens a second, up to
//! `burst`, in whatever unit the caller counts (bits, packets).
//!
//! It never reads a clock (`docs/style.md` rule 1): the caller hands it `now`, the
//! worker's pass clock in the daemon and a plain counter in the tests, which
//! therefore run simulated seconds in microseconds and assert exact counts.
//!
//! The semantics are those of the policer OVS-DPDK puts on a port's ingress
//! (`ingress_policing_rate`): DPDK's single-rate three-colour marker
//! (`rte_meter_srtcm`, RFC 2697) with no excess bucket, colour-blind, of which
//! only green passes. The bucket starts full; a cost conforms when the bucket
//! holds at least that many tokens, and is then taken; a cost larger than the
//! burst never conforms. Tokens earned while the bucket is full are lost.
//!
//! Arithmetic is exact: the fraction of a token earned between two refills
//! is kept (in billionths), so the rate delivered over any long run is the
//! configured one however often the bucket is refilled, and nothing
//! overflows for any `rate`, `burst` or time step a `u64` holds (the
//! product of rate and time is taken in `u128` when it does not fit a `u64`).

use vadapt_policy::Instant;

/// Nanoseconds a second: the bucket earns `rate` tokens per this many ns.
const NS_PER_SEC: u64 = 1_000_000_000;

/// See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    /// Tokens earned a second (the caller's unit: bits/s, packets/s).
    rate: u64,
    /// Most tokens held: the burst, in the same unit.
    burst: u64,
    /// Tokens held now, `<= burst`.
    tokens: u64,
    /// A token's part earned and not yet whole, in billionths of a token
    /// (`< NS_PER_SEC`); 0 while the bucket is full.
    part: u64,
    /// The time tokens were last counted up to.
    last: Instant,
}

impl TokenBucket {
    /// A full bucket earning `rate` tokens a second up to `burst`, as of `now`.
    pub fn new(rate: u64, burst: u64, now: Instant) -> Self {
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            part: 0,
            last: now,
        }
    }

    /// Tokens earned a second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Most tokens held.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Tokens held now (as of the last [`refill`](Self::refill)).
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Counts the tokens earned from the last refill up to `now`. A `now`
    /// earlier than the last one changes nothing (time never runs back for
    /// the bucket). Bounded work: a few integer operations.
    pub fn refill(&mut self, now: Instant) {
        let Some(dt) = now.0.checked_sub(self.last.0).filter(|&dt| dt > 0) else {
            return;
        };
        self.last = now;
        let missing = self.burst - self.tokens;
        if missing == 0 {
            return; // a full bucket earns nothing
        }
        // Billionths of a token earned: rate × ns, plus the part carried.
        let (whole, part) = match self
            .rate
            .checked_mul(dt)
            .and_then(|b| b.checked_add(self.part))
        {
            Some(b) => (u128::from(b / NS_PER_SEC), b % NS_PER_SEC),
            None => {
                // rate × dt ≤ (2^64 − 1)², so this sum fits a u128.
                let b = u128::from(self.rate) * u128::from(dt) + u128::from(self.part);
                let ns = u128::from(NS_PER_SEC);
                (b / ns, (b % ns) as u64)
            }
        };
        if whole >= u128::from(missing) {
            self.tokens = self.burst;
            self.part = 0;
        } else {
            // `whole < missing`, so it fits and the sum stays within the burst.
            self.tokens += whole as u64;
            self.part = part;
        }
        debug_assert!(self.tokens <= self.burst && self.part < NS_PER_SEC);
    }

    /// Whether `cost` tokens are there now.
    pub fn conforms(&self, cost: u64) -> bool {
        self.tokens >= cost
    }

    /// Takes `cost` tokens if they are there: whether the cost conformed.
    pub fn take(&mut self, cost: u64) -> bool {
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }

    /// [`refill`](Self::refill) to `now`, then [`take`](Self::take) `cost`.
    pub fn admit(&mut self, now: Instant, cost: u64) -> bool {
        self.refill(now);
        self.take(cost)
    }

    /// The earliest time `cost` tokens will be there if nothing is taken
    /// meanwhile: the deadline a caller waits until before trying again
    /// (now or earlier when they are there already). `None` when they never
    /// will be: `cost` is over the burst, or the bucket earns nothing.
    pub fn ready_at(&self, cost: u64) -> Option<Instant> {
        if cost <= self.tokens {
            return Some(self.last);
        }
        if cost > self.burst || self.rate == 0 {
            return None;
        }
        // Billionths of a token still to earn, then ns at `rate`, rounded up.
        let owed = u128::from(cost - self.tokens) * u128::from(NS_PER_SEC) - u128::from(self.part);
        let ns = owed.div_ceil(u128::from(self.rate));
        let at = u128::from(self.last.0) + ns;
        Some(Instant(u64::try_from(at).unwrap_or(u64::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn it_starts_full_and_a_cost_over_the_tokens_is_refused_whole() {
        let mut b = TokenBucket::new(1000, 10, Instant(0));
        assert_eq!(b.tokens(), 10);
        assert!(b.take(4));
        assert!(b.take(6));
        assert!(!b.take(1), "empty");
        assert_eq!(b.tokens(), 0);
        // 1000 tokens/s: one a millisecond.
        b.refill(Instant(3 * MS));
        assert_eq!(b.tokens(), 3);
        assert!(!b.take(4), "not all there: nothing taken");
        assert_eq!(b.tokens(), 3);
        assert!(b.take(3));
    }

    #[test]
    fn fractions_of_a_token_are_kept_between_refills() {
        // 3 tokens/s refilled every 100 ms: 0.3 each time, 3 after a second.
        let mut b = TokenBucket::new(3, 10, Instant(0));
        assert!(b.take(10));
        for i in 1..=10 {
            b.refill(Instant(i * 100 * MS));
        }
        assert_eq!(b.tokens(), 3);
    }

    #[test]
    fn a_full_bucket_earns_nothing_and_time_does_not_run_back() {
        let mut b = TokenBucket::new(1000, 5, Instant(10 * MS));
        b.refill(Instant(1000 * MS));
        assert_eq!(b.tokens(), 5, "capped at the burst");
        assert!(b.take(5));
        b.refill(Instant(500 * MS)); // earlier: ignored
        assert_eq!(b.tokens(), 0);
        b.refill(Instant(1002 * MS));
        assert_eq!(b.tokens(), 2);
    }

    #[test]
    fn a_cost_over_the_burst_never_conforms() {
        let mut b = TokenBucket::new(1_000_000, 100, Instant(0));
        assert!(!b.conforms(101));
        assert!(!b.admit(Instant(u64::MAX), 101));
        assert_eq!(b.ready_at(101), None);
        assert!(b.admit(Instant(u64::MAX), 100));
    }

    #[test]
    fn ready_at_is_the_deadline_when_the_cost_is_there() {
        let mut b = TokenBucket::new(1000, 10, Instant(0));
        assert!(b.take(10));
        assert_eq!(b.ready_at(0), Some(Instant(0)));
        let at = b.ready_at(4).unwrap();
        assert_eq!(at, Instant(4 * MS));
        b.refill(Instant(at.0 - 1));
        assert!(!b.conforms(4), "one ns early");
        b.refill(at);
        assert!(b.conforms(4));
        assert_eq!(
            TokenBucket::new(0, 3, Instant(0)).ready_at(2),
            Some(Instant(0))
        );
        let mut dry = TokenBucket::new(0, 3, Instant(0));
        assert!(dry.take(3));
        assert_eq!(dry.ready_at(1), None, "a bucket of rate 0 never refills");
    }

    #[test]
    fn extreme_rates_and_times_do_not_overflow() {
        // 100 Gbit/s in bits, refilled after 10 years: full, not wrapped.
        let g100 = 100_000_000_000u64;
        let mut b = TokenBucket::new(g100, g100, Instant(0));
        assert!(b.take(g100));
        b.refill(Instant(10 * 365 * 86_400 * NS_PER_SEC));
        assert_eq!(b.tokens(), g100);
        // Everything at its largest.
        let mut m = TokenBucket::new(u64::MAX, u64::MAX, Instant(0));
        assert!(m.take(u64::MAX));
        m.refill(Instant(1));
        assert_eq!(m.tokens(), u64::MAX / NS_PER_SEC);
        m.refill(Instant(u64::MAX));
        assert_eq!(m.tokens(), u64::MAX);
        assert!(m.ready_at(u64::MAX).is_some());
    }

    /// A sender offering `offered` costs of `cost` tokens a second, evenly
    /// spaced, for `secs` simulated seconds: the tokens that passed in all;
    /// and, from the first cost refused (the burst spent) to the end, the
    /// tokens that passed and those the rate earned meanwhile.
    fn delivered(rate: u64, burst: u64, cost: u64, offered: u64, secs: u64) -> (u64, u64, u64) {
        let mut b = TokenBucket::new(rate, burst, Instant(0));
        let (n, end) = (offered * secs, u128::from(secs * NS_PER_SEC));
        let (mut all, mut steady, mut dry_at) = (0u64, 0u64, None);
        for i in 0..n {
            let t = (u128::from(i) * end / u128::from(n)) as u64;
            if b.admit(Instant(t), cost) {
                all += cost;
                if dry_at.is_some() {
                    steady += cost;
                }
            } else {
                dry_at.get_or_insert(t);
            }
        }
        let dry_at = u128::from(dry_at.expect("the sender outran the rate"));
        let earned = u128::from(rate) * (end - dry_at) / u128::from(NS_PER_SEC);
        (all, steady, earned as u64)
    }

    /// `got` is within 1 % of `want`.
    fn within_one_percent(got: u64, want: u64) -> bool {
        got.abs_diff(want) as f64 / want as f64 <= 0.01
    }

    proptest! {
        /// Whatever the rate, burst and refill steps, a greedy taker that
        /// empties the bucket at every step takes at most the burst plus
        /// what the rate earned since the first step (the bucket was full
        /// until then), and exactly that while no step could fill the
        /// bucket from empty (nothing earned lost, fractions included).
        #[test]
        fn a_greedy_taker_gets_the_burst_plus_the_rate_times_the_time(
            rate in 1u64..=200_000_000_000,
            burst in 1u64..=1_000_000_000_000,
            steps in proptest::collection::vec(1u64..=50 * MS, 1..200),
        ) {
            let mut b = TokenBucket::new(rate, burst, Instant(0));
            let (mut now, mut first, mut taken, mut capped) = (0u64, None, 0u128, false);
            for dt in steps {
                now += dt;
                let start = *first.get_or_insert(now);
                // A step that may earn the whole burst fills the bucket,
                // and what it earned past full is lost.
                let ns = u128::from(NS_PER_SEC);
                capped |= now != start
                    && u128::from(rate) * u128::from(dt) + ns > u128::from(burst) * ns;
                b.refill(Instant(now));
                let t = b.tokens();
                prop_assert!(b.take(t));
                taken += u128::from(t);
                let earned = u128::from(rate) * u128::from(now - start) / u128::from(NS_PER_SEC);
                prop_assert!(taken <= u128::from(burst) + earned);
                if !capped {
                    prop_assert_eq!(taken, u128::from(burst) + earned);
                }
            }
        }
    }

    #[test]
    fn packets_from_10_kpps_to_1_mpps_within_one_percent() {
        // One token a frame, offered at twice the rate for 3 s, OVS's
        // default burst of 16 kpkts: once the burst is spent, the rate.
        for pps in [10_000u64, 50_000, 100_000, 250_000, 500_000, 1_000_000] {
            let burst = 16_000;
            let (all, steady, earned) = delivered(pps, burst, 1, 2 * pps, 3);
            assert!(
                within_one_percent(steady, earned),
                "{pps} pps: {steady} of {earned}"
            );
            assert!(
                within_one_percent(all, 3 * pps + burst),
                "{pps} pps: {all} in 3 s"
            );
        }
    }

    #[test]
    fn bits_at_several_frame_sizes_within_one_percent() {
        // OVS counts a frame's bits without its 14-byte Ethernet header;
        // offered at 1.5 × the rate for 3 s, OVS's default burst of 8000 kb:
        // once the burst is spent, the rate.
        for (kbps, frame) in [
            (10_000u64, 64u64),
            (100_000, 512),
            (1_000_000, 1514),
            (10_000_000, 1514),
            (100_000_000, 9014),
        ] {
            let (rate, cost, burst) = (kbps * 1000, (frame - 14) * 8, 8_000_000);
            let offered = (rate * 3 / 2).div_ceil(cost);
            let (all, steady, earned) = delivered(rate, burst, cost, offered, 3);
            assert!(
                within_one_percent(steady, earned),
                "{kbps} kbps, {frame} B: {steady} bits of {earned}"
            );
            assert!(
                within_one_percent(all, 3 * rate + burst),
                "{kbps} kbps, {frame} B: {all} bits in 3 s"
            );
        }
    }

    #[test]
    fn a_burst_passes_at_once_and_then_the_rate_holds() {
        // 1000 pps with a burst of 50: 50 frames at one instant pass, the
        // 51st not; then one a millisecond.
        let mut b = TokenBucket::new(1000, 50, Instant(0));
        let at_once = (0..60).filter(|_| b.admit(Instant(0), 1)).count();
        assert_eq!(at_once, 50);
        let later = (1..=100u64)
            .filter(|&ms| b.admit(Instant(ms * MS), 1))
            .count();
        assert_eq!(later, 100);
        assert!(!b.admit(Instant(100 * MS), 1));
    }
}
