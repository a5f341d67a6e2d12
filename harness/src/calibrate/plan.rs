//! What a calibration run is given: how long each part runs ([`Plan`]), on
//! which CPUs ([`Cpus`]), and which idle gaps the wake-up micro-benchmark
//! measures.

use super::args::CalibrateArgs;
use std::time::Duration;

/// How long each part runs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    /// Warm-up before a point's counters are read.
    pub(super) warm: Duration,
    /// Measuring time per daemon point.
    pub(super) measure: Duration,
    /// Ping-pong round trips per micro-benchmark.
    pub(super) pings: usize,
    /// Rounds of every measurement.
    pub(super) rounds: usize,
}

impl Plan {
    /// The plan for `--quick`, or for `--duration` and `--rounds`.
    pub(super) fn new(a: &CalibrateArgs) -> Plan {
        if a.quick {
            Plan {
                warm: Duration::from_millis(200),
                measure: Duration::from_millis(400),
                pings: 300,
                rounds: 1,
            }
        } else {
            Plan {
                warm: Duration::from_millis(400),
                measure: Duration::from_secs_f64(a.duration),
                pings: 1000,
                rounds: a.rounds.max(1),
            }
        }
    }
}

/// Idle times before the measured wake-ups (µs), with the share of `Plan::pings` each gets
/// (long gaps get fewer round trips to bound the run time).
pub(super) const WAKE_GAPS_US: [(u64, usize); 4] = [(0, 1), (20, 2), (200, 4), (2000, 20)];
/// The extra idle gap whose wake-up goes into the file: none, a worker kicked again as
/// soon as it went to sleep, as under load.
pub(super) const WAKE_GAP_US: u64 = 0;

/// Which CPUs the worker and the guest use in calibration points.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cpus {
    /// The queue worker's CPU, if pinned.
    pub(super) worker: Option<usize>,
    /// The synthetic guest's CPU, if pinned.
    pub(super) guest: Option<usize>,
}

impl Cpus {
    /// CPU 1 for the worker and CPU 0 for the guest when there are two,
    /// else no pinning.
    pub(super) fn detect() -> Cpus {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        if n >= 2 {
            Cpus {
                worker: Some(1),
                guest: Some(0),
            }
        } else {
            Cpus {
                worker: None,
                guest: None,
            }
        }
    }
}
