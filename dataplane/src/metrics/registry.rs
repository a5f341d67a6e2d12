//! The registry: every port's and worker's counters, and a copy of them
//! for `vadapt stats`.

use super::counters::{DropReason, PortStats, WorkerStats, WAKE_CAUSES};
use super::snapshot::{PortSnapshot, QueueSnapshot, StatsSnapshot, WorkerSnapshot};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock};

/// All the daemon's counters.
#[derive(Debug, Default)]
pub struct Registry {
    pub(super) ports: RwLock<Vec<Arc<PortStats>>>,
    pub(super) workers: RwLock<Vec<Arc<WorkerStats>>>,
    pub(super) cores: RwLock<Option<Arc<crate::cores::CoresStatus>>>,
}

impl Registry {
    /// Register a port's counters.
    pub fn add_port(&self, p: Arc<PortStats>) {
        self.ports.write().expect("poisoned").push(p);
    }

    /// Register a worker's counters.
    pub fn add_worker(&self, w: Arc<WorkerStats>) {
        self.workers.write().expect("poisoned").push(w);
    }

    /// Export the core manager's state (`vadapt_cores_*`).
    pub fn set_cores(&self, c: Arc<crate::cores::CoresStatus>) {
        *self.cores.write().expect("poisoned") = Some(c);
    }

    /// A consistent-enough copy of every counter, for `vadapt stats`.
    pub fn snapshot(&self) -> StatsSnapshot {
        let ports = self
            .ports
            .read()
            .expect("poisoned")
            .iter()
            .map(|p| PortSnapshot {
                name: p.name.clone(),
                kind: p.kind.to_string(),
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
                        tx_packets: q.packets[0].load(Relaxed),
                        tx_bytes: q.bytes[0].load(Relaxed),
                        rx_packets: q.packets[1].load(Relaxed),
                        rx_bytes: q.bytes[1].load(Relaxed),
                        kicks: q.kicks.load(Relaxed),
                        calls: q.calls.load(Relaxed),
                        gso_frames: q.gso_frames.load(Relaxed),
                        csum_completed: q.csum_completed.load(Relaxed),
                        gso_whole: q.gso_whole.load(Relaxed),
                        dropped: DropReason::ALL
                            .iter()
                            .zip(&q.drops)
                            .filter(|(_, c)| c.load(Relaxed) != 0)
                            .map(|(r, c)| (r.as_str().to_string(), c.load(Relaxed)))
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        let workers = self
            .workers
            .read()
            .expect("poisoned")
            .iter()
            .map(|w| {
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
            })
            .collect();
        StatsSnapshot { ports, workers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::counters::Dir;

    #[test]
    fn snapshot_reports_only_nonzero_drops_and_sums() {
        let reg = Registry::default();
        let p = Arc::new(PortStats::new("s", "sink", 1));
        p.queues[0].add(Dir::Rx, 5, 320);
        p.queues[0].drop(DropReason::Oversize, 1);
        reg.add_port(p);
        let s = reg.snapshot();
        assert_eq!(s.port_total("s", |q| q.rx_packets), Some(5));
        assert_eq!(s.ports[0].queues[0].dropped.len(), 1);
        let table = s.to_table();
        assert!(table.contains("oversize"));
        assert!(table.lines().next().unwrap().contains("conn"), "{table}");
        assert!(
            table
                .lines()
                .nth(1)
                .unwrap()
                .starts_with("s            sink  yes"),
            "{table}"
        );
        let json = serde_json::to_string(&s).unwrap();
        let back: StatsSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn netap_ml_prediction_and_range_show_in_the_table_and_json() {
        let reg = Registry::default();
        let p = Arc::new(PortStats::new("vm1", "vm", 1));
        p.poll_interval_us.store(1318, Relaxed);
        reg.add_port(Arc::clone(&p));
        assert!(!reg.snapshot().to_table().contains("predicted"));
        p.predicted_us.store(1200, Relaxed);
        p.search_lo_us.store(700, Relaxed);
        p.search_hi_us.store(1700, Relaxed);
        for (i, v) in [2, 3, 128].into_iter().enumerate() {
            p.workload[i].store(v, Relaxed);
        }
        let s = reg.snapshot();
        assert_eq!(
            (
                s.ports[0].predicted_us,
                s.ports[0].search_range_us,
                s.ports[0].workload
            ),
            (1200, (700, 1700), [2, 3, 128])
        );
        let table = s.to_table();
        assert!(
            table.contains("(1318 us) [predicted 1200 us, search 700-1700 us, workload 2/3/128 B]"),
            "{table}"
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<StatsSnapshot>(&json).unwrap(), s);
    }
}
