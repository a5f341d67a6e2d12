//! Rate limits for log lines a guest or frontend can provoke at will.
//!
//! A hostile guest can make every pass drop a chain and a frontend can
//! send a refused request in a loop: one line each would flood the log and
//! cost the daemon more than the attack. A [`LogLimit`] lets a few lines a
//! second through and says how many it held back; the counters keep the
//! totals.
//!
//! A peer's lines are limited per port and per reason by the port's
//! [`LogLimits`], which lives as long as the port: not with a worker, a
//! control-queue thread or a connection, which the peer can end and start
//! again at will (a frontend restarts the control queue's thread with any
//! ring message, and reconnects as often as it likes). One limit per
//! reason, so that a flood of one kind of line cannot hide the first line
//! of another.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most `per_window` lines per `window`.
#[derive(Debug)]
pub struct LogLimit {
    per_window: u32,
    window: Duration,
    start: Option<Instant>,
    used: u32,
    held_back: u64,
}

impl LogLimit {
    /// Ten lines a second, the daemon's default for guest-provoked lines.
    pub fn per_second() -> Self {
        Self::new(10, Duration::from_secs(1))
    }

    /// At most `per_window` lines per `window`.
    pub fn new(per_window: u32, window: Duration) -> Self {
        LogLimit {
            per_window,
            window,
            start: None,
            used: 0,
            held_back: 0,
        }
    }

    /// May a line be written at `now`? `Some(n)`: yes, and `n` lines were
    /// held back since the last one written (say so in the line).
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        if self
            .start
            .is_none_or(|s| now.saturating_duration_since(s) >= self.window)
        {
            self.start = Some(now);
            self.used = 0;
        }
        if self.used < self.per_window {
            self.used += 1;
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

/// The limits of one peer's lines, one [`LogLimit`] of
/// [`LogLimit::per_second`] per reason (see the module documentation).
/// Shared by the threads that serve the peer: one short lock per line
/// asked for, which happens only when there is something to say.
#[derive(Debug, Default)]
pub struct LogLimits {
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
                all.push(Reason {
                    reason,
                    limit: LogLimit::per_second(),
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
        assert_eq!(l.totals("flood"), (10, 15));
        assert_eq!(l.totals("other"), (1, 0));
        assert_eq!(l.allow("flood", t + Duration::from_secs(1)), Some(15));
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
    fn lines_per_window_and_the_count_held_back() {
        let mut l = LogLimit::new(2, Duration::from_secs(1));
        let t = Instant::now();
        assert_eq!(l.allow(t), Some(0));
        assert_eq!(l.allow(t), Some(0));
        assert_eq!(l.allow(t), None);
        assert_eq!(l.allow(t + Duration::from_millis(500)), None);
        assert_eq!(l.allow(t + Duration::from_secs(1)), Some(2));
        assert_eq!(l.allow(t + Duration::from_secs(1)), Some(0));
        assert_eq!(l.allow(t + Duration::from_secs(1)), None);
    }
}
