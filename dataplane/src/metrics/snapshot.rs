//! What `vadapt stats --json` prints: a copy of every counter.

use super::counters::{DropReason, NotLearned, PortStats, WorkerStats, WAKE_CAUSES};
use super::port_kind::PortKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

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
    /// What kind of port (`vm`, `sink`, `echo`, `tap`, `uplink` in JSON).
    pub kind: PortKind,
    /// Frontend connected.
    pub connected: bool,
    /// Policy name (VM ports and uplinks).
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
    /// Guest memory regions mapped for the frontend (VM ports).
    #[serde(default)]
    pub memory_regions: u64,
    /// Their bytes.
    #[serde(default)]
    pub memory_bytes: u64,
    /// Control-queue commands accepted (`VIRTIO_NET_OK`).
    #[serde(default)]
    pub ctrl_accepted: u64,
    /// Control-queue commands refused (`VIRTIO_NET_ERR`).
    #[serde(default)]
    pub ctrl_refused: u64,
    /// Times the frontend's dirty-page log shrank and logging ended.
    #[serde(default)]
    pub dirty_log_shrank: u64,
    /// Source addresses the switch did not learn, by reason (only
    /// non-zero reasons; see [`NotLearned`]).
    #[serde(default)]
    pub fdb_not_learned: BTreeMap<String, u64>,
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
    /// An uplink queue: passes that found the AF_XDP fill ring empty.
    #[serde(default)]
    pub fill_ring_empty: u64,
    /// An uplink queue: passes that left frames waiting because the AF_XDP
    /// TX ring was full (held, not dropped).
    #[serde(default)]
    pub tx_ring_full: u64,
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
            memory_regions: p.memory_regions.load(Relaxed),
            memory_bytes: p.memory_bytes.load(Relaxed),
            ctrl_accepted: p.ctrl_accepted.load(Relaxed),
            ctrl_refused: p.ctrl_refused.load(Relaxed),
            dirty_log_shrank: p.dirty_log_shrank.load(Relaxed),
            fdb_not_learned: NotLearned::ALL
                .iter()
                .zip(&p.not_learned)
                .filter(|(_, c)| c.load(Relaxed) != 0)
                .map(|(r, c)| (r.as_str().to_string(), c.load(Relaxed)))
                .collect(),
            queues: p
                .queues
                .iter()
                .enumerate()
                .map(|(i, q)| QueueSnapshot {
                    queue: i as u16,
                    tx_packets: q.packets[0].load(Relaxed),
                    tx_bytes: q.bytes[0].load(Relaxed),
                    rx_packets: q.packets[1].load(Relaxed),
                    rx_bytes: q.bytes[1].load(Relaxed),
                    kicks: q.kicks.load(Relaxed),
                    calls: q.calls.load(Relaxed),
                    gso_frames: q.gso_frames.load(Relaxed),
                    csum_completed: q.csum_completed.load(Relaxed),
                    gso_whole: q.gso_whole.load(Relaxed),
                    fill_ring_empty: q.fill_ring_empty.load(Relaxed),
                    tx_ring_full: q.tx_ring_full.load(Relaxed),
                    dropped: DropReason::ALL
                        .iter()
                        .zip(&q.drops)
                        .filter(|(_, c)| c.load(Relaxed) != 0)
                        .map(|(r, c)| (r.as_str().to_string(), c.load(Relaxed)))
                        .collect(),
                })
                .collect(),
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
            busy_cycles: w.busy_cycles.load(Relaxed),
            busy_packets: w.busy_packets.load(Relaxed),
            passes: w.passes.load(Relaxed),
            wakeups: WAKE_CAUSES
                .iter()
                .zip(&w.wakeups)
                .map(|(c, v)| (c.to_string(), v.load(Relaxed)))
                .collect(),
            sleeps: h.len(),
            overshoot_p50_ns: h.value_at_quantile(0.5),
            overshoot_p99_ns: h.value_at_quantile(0.99),
        }
    }
}
