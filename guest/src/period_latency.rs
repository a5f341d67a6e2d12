//! Round trips of the current reporting period, for `--cores-control`
//! ([`crate::cores_report`]): the sending threads record each reply's round trip here as
//! well as in their own run-long histogram, and the reporter takes the lot every period.
//!
//! One histogram per thread, each behind its own mutex: a thread only contends with the
//! reporter, for the moment the reporter merges and clears that thread's histogram (once a
//! period).

use std::sync::{Mutex, MutexGuard};

use crate::metrics::LatencyHistogram;

/// Per-thread round-trip histograms of the current period.
#[derive(Debug)]
pub struct PeriodLatency {
    threads: Vec<Mutex<LatencyHistogram>>,
}

impl PeriodLatency {
    /// Empty histograms for `threads` threads.
    pub fn new(threads: usize) -> PeriodLatency {
        PeriodLatency {
            threads: (0..threads)
                .map(|_| Mutex::new(LatencyHistogram::new()))
                .collect(),
        }
    }

    fn lock(h: &Mutex<LatencyHistogram>) -> MutexGuard<'_, LatencyHistogram> {
        // A histogram is valid after every record: a panic elsewhere leaves it usable.
        h.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one round trip (ns) of thread `thread`; a thread number out of range is
    /// ignored.
    pub fn record(&self, thread: u32, ns: u64) {
        if let Some(h) = self.threads.get(thread as usize) {
            Self::lock(h).record(ns);
        }
    }

    /// Moves every round trip recorded since the last call into `into` (which is cleared
    /// first), and starts a new period.
    pub fn take(&self, into: &mut LatencyHistogram) {
        into.reset();
        for h in &self.threads {
            let mut h = Self::lock(h);
            into.merge(&h);
            h.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_collects_the_period_and_starts_a_new_one() {
        let p = PeriodLatency::new(2);
        let mut all = LatencyHistogram::new();
        p.take(&mut all);
        assert!(all.is_empty());
        for i in 1..=100u64 {
            p.record((i % 2) as u32, i * 1000);
        }
        p.record(7, 1); // no such thread
        p.take(&mut all);
        assert_eq!(all.len(), 100);
        let p95 = all.quantile(0.95).unwrap();
        assert!((94_900..=95_100).contains(&p95), "{p95}");
        p.record(0, 5);
        p.take(&mut all);
        assert_eq!(all.len(), 1, "the previous period is gone");
    }
}
