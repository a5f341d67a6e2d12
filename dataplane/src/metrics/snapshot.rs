//! What `vadapt stats --json` prints: a copy of every counter. The copy of
//! each port, queue pair and worker ([`PortSnapshot`], [`QueueSnapshot`],
//! [`WorkerSnapshot`]) is declared with its counters (`counters.rs`); what
//! is made here is the rest: names, the policy, NetAP-ML's state, CPU time
//! and the sleep overshoot's quantiles.

use super::counters::{PortSnapshot, PortStats, QueueSnapshot, WorkerSnapshot, WorkerStats};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering::Relaxed;

/// `vadapt stats --json` output.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StatsSnapshot {
    /// Ports.
    pub ports: Vec<PortSnapshot>,
    /// Queue workers.
    pub workers: Vec<WorkerSnapshot>,
}

impl StatsSnapshot {
    /// Sum of a per-queue field over one port.
    pub fn port_total(&self, port: &str, f: impl Fn(&QueueSnapshot) -> u64) -> Option<u64> {
        self.ports
            .iter()
            .find(|p| p.name == port)
            .map(|p| p.queues.iter().map(&f).sum())
    }
}

impl PortSnapshot {
    /// A copy of a port's counters.
    pub fn of(p: &PortStats) -> Self {
        PortSnapshot {
            name: p.name.clone(),
            kind: p.kind,
            connected: p.connected.load(Relaxed),
            policy: p.policy.lock().map(|s| s.clone()).unwrap_or_default(),
            poll_interval_us: p.poll_interval_us.load(Relaxed),
            predicted_us: p.predicted_us.load(Relaxed),
            search_range_us: (p.search_lo_us.load(Relaxed), p.search_hi_us.load(Relaxed)),
            workload: [0, 1, 2].map(|i| p.workload[i].load(Relaxed)),
            queues: p
                .queues
                .iter()
                .enumerate()
                .map(|(i, q)| QueueSnapshot {
                    queue: i as u16,
                    ..QueueSnapshot::counters_of(q)
                })
                .collect(),
            ..PortSnapshot::counters_of(p)
        }
    }
}

impl WorkerSnapshot {
    /// A copy of a worker's counters.
    pub fn of(w: &WorkerStats) -> Self {
        let h = w.overshoot_ns.lock().expect("poisoned");
        WorkerSnapshot {
            name: w.name.clone(),
            cpu_seconds: w.cpu_ns() as f64 / 1e9,
            sleeps: h.len(),
            overshoot_p50_ns: h.value_at_quantile(0.5),
            overshoot_p99_ns: h.value_at_quantile(0.99),
            ..WorkerSnapshot::counters_of(w)
        }
    }
}
