//! The registry: every port's and worker's counters, and a copy of them
//! for `vadapt stats`.

use super::counters::{PortSnapshot, WorkerSnapshot};
use super::counters::{PortStats, WorkerStats};
use super::family::Exporter;
use super::snapshot::StatsSnapshot;
use crate::lock_order::RwLock;
use std::sync::Arc;

/// All the daemon's counters.
#[derive(Debug, Default)]
pub struct Registry {
    ports: RwLock<Vec<Arc<PortStats>>>,
    workers: RwLock<Vec<Arc<WorkerStats>>>,
    exporters: RwLock<Vec<Arc<dyn Exporter>>>,
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

    /// Stop exporting port `name`'s counters and its worker's (the port
    /// was removed at run time): its series end with it.
    pub fn remove_port(&self, name: &str) {
        self.ports
            .write()
            .expect("poisoned")
            .retain(|p| p.name != name);
        self.workers
            .write()
            .expect("poisoned")
            .retain(|w| w.name != name && !w.name.starts_with(&format!("{name}/")));
    }

    /// Export `e`'s families too (the core manager's `vadapt_cores_*`),
    /// after the counters'.
    pub fn add_exporter(&self, e: Arc<dyn Exporter>) {
        self.exporters.write().expect("poisoned").push(e);
    }

    /// The ports' counters registered so far.
    pub fn ports(&self) -> Vec<Arc<PortStats>> {
        self.ports.read().expect("poisoned").clone()
    }

    /// The workers' counters registered so far.
    pub fn workers(&self) -> Vec<Arc<WorkerStats>> {
        self.workers.read().expect("poisoned").clone()
    }

    /// The exporters added so far.
    pub fn exporters(&self) -> Vec<Arc<dyn Exporter>> {
        self.exporters.read().expect("poisoned").clone()
    }

    /// A consistent-enough copy of every counter, for `vadapt stats`.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            ports: self.ports().iter().map(|p| PortSnapshot::of(p)).collect(),
            workers: self
                .workers()
                .iter()
                .map(|w| WorkerSnapshot::of(w))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::counters::{Dir, DropReason};
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn a_removed_port_and_its_worker_are_no_longer_reported() {
        let reg = Registry::default();
        for n in ["a", "b"] {
            reg.add_port(Arc::new(PortStats::new(
                n,
                crate::metrics::port_kind::PortKind::Vm,
                1,
            )));
            reg.add_worker(Arc::new(WorkerStats::new(n)));
        }
        reg.remove_port("a");
        let s = reg.snapshot();
        assert_eq!(s.ports.len(), 1);
        assert_eq!(s.ports[0].name, "b");
        assert_eq!(s.workers.len(), 1);
    }

    #[test]
    fn snapshot_reports_only_nonzero_drops_and_sums() {
        let reg = Registry::default();
        let p = Arc::new(PortStats::new(
            "s",
            crate::metrics::port_kind::PortKind::Sink,
            1,
        ));
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
        let p = Arc::new(PortStats::new(
            "vm1",
            crate::metrics::port_kind::PortKind::Vm,
            1,
        ));
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
