//! Time as the policy core sees it: plain nanosecond counts handed in by the caller.
//!
//! Policies never read a clock (`docs/style.md` rule 1). The data plane passes
//! `CLOCK_MONOTONIC` readings; the simulator passes simulated time. Both are
//! nanoseconds since an arbitrary epoch fixed by the caller.

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Sub};

/// A point in time, in nanoseconds since the caller's epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Instant(pub u64);

/// A span of time, in nanoseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Duration(pub u64);

impl Duration {
    /// Zero length.
    pub const ZERO: Duration = Duration(0);

    /// From nanoseconds.
    pub const fn from_nanos(ns: u64) -> Self {
        Duration(ns)
    }
    /// From microseconds (saturating: a length past `u64::MAX` ns, some
    /// 584 years, is `u64::MAX` ns, never a wrap to a short one).
    pub const fn from_micros(us: u64) -> Self {
        Duration(us.saturating_mul(1_000))
    }
    /// From milliseconds (saturating, as [`Duration::from_micros`]).
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms.saturating_mul(1_000_000))
    }
    /// From seconds (saturating, as [`Duration::from_micros`]).
    pub const fn from_secs(s: u64) -> Self {
        Duration(s.saturating_mul(1_000_000_000))
    }
    /// In nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// In whole microseconds (truncated).
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }
    /// In seconds, as a float (for reporting only).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl Instant {
    /// Time elapsed from `earlier` to `self`; zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        self.0 = self.0.saturating_add(d.0);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lengths too long for `u64` nanoseconds saturate: a control client's
    /// absurd P95 sample once overflowed `from_micros` and ended the core
    /// manager's thread.
    #[test]
    fn conversions_saturate_instead_of_wrapping() {
        assert_eq!(Duration::from_micros(3).as_nanos(), 3_000);
        assert_eq!(Duration::from_millis(3).as_nanos(), 3_000_000);
        assert_eq!(Duration::from_secs(3).as_nanos(), 3_000_000_000);
        for big in [u64::MAX, u64::MAX / 999, u64::MAX / 1_000 + 1] {
            assert_eq!(Duration::from_micros(big), Duration(u64::MAX));
            assert_eq!(Duration::from_millis(big), Duration(u64::MAX));
            assert_eq!(Duration::from_secs(big), Duration(u64::MAX));
        }
        assert_eq!(
            Duration::from_micros(u64::MAX / 1_000).as_nanos(),
            u64::MAX / 1_000 * 1_000
        );
    }
}
