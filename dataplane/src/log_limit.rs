//! Rate limits for log lines a guest or frontend can provoke at will.
//!
//! A hostile guest can make every pass drop a chain and a frontend can
//! send a refused request in a loop: one line each would flood the log and
//! cost the daemon more than the attack. A [`LogLimit`] lets a few lines a
//! second through and says how many it held back; the counters keep the
//! totals. It is a bucket of lines that refills at a steady rate, rather
//! than a count per fixed window: over any stretch of time `t` it lets at
//! most its burst plus `rate × t` lines through (a window lets twice its
//! count through across a window's edge), and a peer that is busy but not
//! flooding (a few reconnects in a row) loses no line.
//!
//! A peer's lines are limited per port and per reason by the port's
//! [`LogLimits`], which lives as long as the port: not with a worker, a
//! control-queue thread or a connection, which the peer can end and start
//! again at will (a frontend restarts the control queue's thread with any
//! ring message, and reconnects as often as it likes). One limit per
//! reason, so that a flood of one kind of line cannot hide the first line
//! of another: [`PEER_BURST`] lines, then [`PEER_PER_SECOND`] a second.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A bucket of at most `per_window` lines that refills at `per_window`
/// lines per `window`: a burst of `per_window`, then that rate.
#[derive(Debug)]
pub struct LogLimit {
    /// The bucket's size, lines.
    per_window: u32,
    /// The time one line takes to come back (`window / per_window`).
    per_line: Duration,
    /// Lines left in the bucket.
    left: u32,
    /// When the bucket was last topped up (`None`: never asked, full).
    since: Option<Instant>,
    /// Lines held back since the last one written.
    held_back: u64,
}

impl LogLimit {
    /// Ten lines a second, the daemon's default for guest-provoked lines.
    pub fn per_second() -> Self {
        Self::new(10, Duration::from_secs(1))
    }

    /// A burst of `per_window` lines, then `per_window` per `window`.
    /// `per_window` is at least 1.
    pub fn new(per_window: u32, window: Duration) -> Self {
        let per_window = per_window.max(1);
        LogLimit {
            per_window,
            per_line: (window / per_window).max(Duration::from_nanos(1)),
            left: per_window,
            since: None,
            held_back: 0,
        }
    }

    /// May a line be written at `now`? `Some(n)`: yes, and `n` lines were
    /// held back since the last one written (say so in the line).
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        let since = *self.since.get_or_insert(now);
        let earned = now.saturating_duration_since(since).as_nanos() / self.per_line.as_nanos();
        if earned > 0 {
            let room = u128::from(self.per_window - self.left);
            if earned >= room {
                self.left = self.per_window;
                self.since = Some(now);
            } else {
                // `earned < per_window`: fits a u32, and the time of the
                // lines earned is kept, not the fraction of the next one.
                self.left += earned as u32;
                self.since = Some(since + self.per_line * earned as u32);
            }
        }
        if self.left > 0 {
            self.left -= 1;
            Some(std::mem::take(&mut self.held_back))
        } else {
            self.held_back += 1;
            None
        }
    }
}

/// Reasons one [`LogLimits`] keeps apart; lines of any further reason
/// share one limit (reasons are `'static` strings of the code, so this is
/// only reached by a mistake, never by a peer).
const MAX_REASONS: usize = 64;

/// A peer's lines of one reason that go through at once.
pub const PEER_BURST: u32 = 20;
/// A peer's lines of one reason a second, after the burst.
pub const PEER_PER_SECOND: u32 = 10;

/// The limits of one peer's lines, one [`LogLimit`] per reason:
/// [`PEER_BURST`] lines, then [`PEER_PER_SECOND`] a second (see the module
/// documentation).
/// Shared by the threads that serve the peer: one short lock per line
/// asked for, which happens only when there is something to say.
#[derive(Debug, Default)]
pub struct LogLimits {
    /// A leaf lock: taken under others (a connection's, a port's live
    /// socket), never held while another is taken, so it orders after
    /// every lock of the daemon.
    by_reason: Mutex<Vec<Reason>>,
}

/// One reason's limit and totals.
#[derive(Debug)]
struct Reason {
    reason: &'static str,
    limit: LogLimit,
    /// Lines allowed so far.
    written: u64,
    /// Lines held back so far.
    held_back: u64,
}

impl LogLimits {
    /// May a line for `reason` be written at `now`? As [`LogLimit::allow`]:
    /// `Some(n)`, and `n` lines of this reason were held back since the
    /// last one written.
    pub fn allow(&self, reason: &'static str, now: Instant) -> Option<u64> {
        let mut all = self.by_reason.lock().unwrap_or_else(|e| e.into_inner());
        let i = match all.iter().position(|r| r.reason == reason) {
            Some(i) => i,
            None if all.len() < MAX_REASONS => {
                let refill = Duration::from_secs(1) * PEER_BURST / PEER_PER_SECOND;
                all.push(Reason {
                    reason,
                    limit: LogLimit::new(PEER_BURST, refill),
                    written: 0,
                    held_back: 0,
                });
                all.len() - 1
            }
            None => all.len() - 1,
        };
        let r = &mut all[i];
        let allowed = r.limit.allow(now);
        match allowed {
            Some(_) => r.written += 1,
            None => r.held_back += 1,
        }
        allowed
    }

    /// Lines of `reason` written and held back so far.
    pub fn totals(&self, reason: &str) -> (u64, u64) {
        let all = self.by_reason.lock().unwrap_or_else(|e| e.into_inner());
        all.iter()
            .find(|r| r.reason == reason)
            .map_or((0, 0), |r| (r.written, r.held_back))
    }
}

/// The most lines of one reason a port's peers can have written over
/// `elapsed`: the burst, and the rate for every started second.
pub fn peer_lines_bound(elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs() + u64::from(elapsed.subsec_nanos() > 0);
    u64::from(PEER_BURST) + u64::from(PEER_PER_SECOND) * secs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_own_limit_and_totals() {
        let l = LogLimits::default();
        let t = Instant::now();
        for _ in 0..25 {
            l.allow("flood", t);
        }
        assert_eq!(l.allow("other", t), Some(0), "a flood of one reason");
        assert_eq!(
            l.totals("flood"),
            (PEER_BURST.into(), 25 - u64::from(PEER_BURST))
        );
        assert_eq!(l.totals("other"), (1, 0));
        let later = t + Duration::from_secs(1) / PEER_PER_SECOND;
        assert_eq!(l.allow("flood", later), Some(25 - u64::from(PEER_BURST)));
        assert_eq!(l.totals("never"), (0, 0));
    }

    #[test]
    fn reasons_past_the_table_share_the_last_limit() {
        let l = LogLimits::default();
        let t = Instant::now();
        let names: Vec<&'static str> = (0..MAX_REASONS + 5)
            .map(|i| &*Box::leak(format!("r{i}").into_boxed_str()))
            .collect();
        for n in &names {
            assert!(l.allow(n, t).is_some());
        }
        let all = l.by_reason.lock().unwrap();
        assert_eq!(all.len(), MAX_REASONS);
        assert_eq!(all[MAX_REASONS - 1].written, 6);
    }

    #[test]
    fn a_burst_then_the_rate_and_the_count_held_back() {
        // Two lines at once, then one every 500 ms.
        let mut l = LogLimit::new(2, Duration::from_secs(1));
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        assert_eq!(l.allow(t), Some(0));
        assert_eq!(l.allow(t), Some(0));
        assert_eq!(l.allow(t), None);
        assert_eq!(l.allow(ms(499)), None);
        assert_eq!(l.allow(ms(500)), Some(2));
        assert_eq!(l.allow(ms(700)), None);
        // The time since 500 ms counts, not since the line refused at 700.
        assert_eq!(l.allow(ms(1000)), Some(1));
        assert_eq!(l.allow(ms(1000)), None);
        // A long quiet time fills the bucket, no more.
        assert_eq!(l.allow(ms(60_000)), Some(1));
        assert_eq!(l.allow(ms(60_000)), Some(0));
        assert_eq!(l.allow(ms(60_000)), None);
    }

    #[test]
    fn a_flood_gets_the_burst_and_the_rate_never_more() {
        let mut l = LogLimit::per_second();
        let t = Instant::now();
        // 100,000 lines asked for over 10 s, evenly.
        let written = (0..100_000u64)
            .filter(|i| l.allow(t + Duration::from_micros(100 * i)).is_some())
            .count();
        assert!((100..=110).contains(&written), "{written}");
    }
}
