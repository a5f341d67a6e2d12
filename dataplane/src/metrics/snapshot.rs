//! What `vadapt stats --json` prints: a copy of every counter.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `vadapt stats --json` output.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StatsSnapshot {
    /// Ports.
    pub ports: Vec<PortSnapshot>,
    /// Queue workers.
    pub workers: Vec<WorkerSnapshot>,
}

/// One port in [`StatsSnapshot`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PortSnapshot {
    /// Name.
    pub name: String,
    /// `vm`, `sink`, `echo`, `tap`.
    pub kind: String,
    /// Frontend connected.
    pub connected: bool,
    /// Policy name (VM ports).
    pub policy: String,
    /// Current interval / window, µs.
    pub poll_interval_us: u64,
    /// NetAP-ML's predicted best interval, µs (0: not NetAP-ML).
    #[serde(default)]
    pub predicted_us: u64,
    /// NetAP's search range, µs ((0, 0): not NetAP).
    #[serde(default)]
    pub search_range_us: (u64, u64),
    /// NetAP-ML's workload features: VMs, threads per VM, message size in
    /// bytes (0 = unknown).
    #[serde(default)]
    pub workload: [u64; 3],
    /// Queue pairs.
    pub queues: Vec<QueueSnapshot>,
}

/// One queue pair in [`StatsSnapshot`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct QueueSnapshot {
    /// Queue pair index.
    pub queue: u16,
    /// Guest→host packets.
    pub tx_packets: u64,
    /// Guest→host bytes.
    pub tx_bytes: u64,
    /// Host→guest packets.
    pub rx_packets: u64,
    /// Host→guest bytes.
    pub rx_bytes: u64,
    /// Kicks received.
    pub kicks: u64,
    /// Calls sent.
    pub calls: u64,
    /// GSO frames cut into MSS frames in software at this port's egress.
    #[serde(default)]
    pub gso_frames: u64,
    /// Partial checksums completed in software at this port's egress.
    #[serde(default)]
    pub csum_completed: u64,
    /// GSO frames passed whole to this port's receiver.
    #[serde(default)]
    pub gso_whole: u64,
    /// Drops by reason (only non-zero reasons).
    pub dropped: BTreeMap<String, u64>,
}

/// One worker in [`StatsSnapshot`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerSnapshot {
    /// Name.
    pub name: String,
    /// CPU seconds used.
    pub cpu_seconds: f64,
    /// TSC cycles in non-empty passes.
    pub busy_cycles: u64,
    /// Packets moved in non-empty passes.
    pub busy_packets: u64,
    /// Service passes.
    pub passes: u64,
    /// Wake-ups by cause.
    pub wakeups: BTreeMap<String, u64>,
    /// Timed sleeps measured.
    pub sleeps: u64,
    /// Median sleep overshoot, ns.
    pub overshoot_p50_ns: u64,
    /// 99th-percentile sleep overshoot, ns.
    pub overshoot_p99_ns: u64,
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
