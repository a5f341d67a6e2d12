//! Rate limits for log lines a guest or frontend can provoke at will.
//!
//! A hostile guest can make every pass drop a chain and a frontend can
//! send a refused request in a loop: one line each would flood the log and
//! cost the daemon more than the attack. A [`LogLimit`] lets a few lines a
//! second through and says how many it held back; the counters keep the
//! totals.

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

#[cfg(test)]
mod tests {
    use super::*;

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
