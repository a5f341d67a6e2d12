//! The registry: the counters of the ports and workers running now, the
//! other exporters, and a copy of every counter for `vadapt stats`.
//!
//! The registry keeps no list of ports of its own: it reads the running
//! ports' counters, each time it is asked, from the daemon's one list of
//! running ports ([`RunningCounters`], which `crate::port::Roster` is,
//! handed down to this lower room as a handle).

use super::counters::{PortSnapshot, WorkerSnapshot};
use super::counters::{PortStats, WorkerStats};
use super::family::Exporter;
use super::snapshot::StatsSnapshot;
use crate::lock_order::RwLock;
use std::sync::Arc;

/// The counters of the ports and queue workers running now, as the list
/// of running ports gives them.
pub trait RunningCounters: std::fmt::Debug + Send + Sync {
    /// Every running port's counters, in the order the ports were added.
    fn ports(&self) -> Vec<Arc<PortStats>>;
    /// Every running queue worker's counters (VM ports' and uplinks'), in
    /// the order their ports were added.
    fn workers(&self) -> Vec<Arc<WorkerStats>>;
}

/// All the daemon's counters.
#[derive(Debug)]
pub struct Registry {
    running: Arc<dyn RunningCounters>,
    exporters: RwLock<Vec<Arc<dyn Exporter>>>,
}

impl Registry {
    /// The counters of the ports in `running`, as they come and go.
    pub fn new(running: Arc<dyn RunningCounters>) -> Self {
        Registry {
            running,
            exporters: RwLock::new(Vec::new()),
        }
    }

    /// Export `e`'s families too (the core manager's `vadapt_cores_*`),
    /// after the counters'.
    pub fn add_exporter(&self, e: Arc<dyn Exporter>) {
        self.exporters.write().expect("poisoned").push(e);
    }

    /// The running ports' counters.
    pub fn ports(&self) -> Vec<Arc<PortStats>> {
        self.running.ports()
    }

    /// The running workers' counters.
    pub fn workers(&self) -> Vec<Arc<WorkerStats>> {
        self.running.workers()
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

/// A list of counters that tests add to, standing in for the list of
/// running ports in the metrics' own tests.
#[cfg(test)]
pub(crate) mod test_utils {
    use super::*;

    /// The ports and workers added so far.
    #[derive(Debug, Default)]
    pub(crate) struct Counted {
        ports: std::sync::Mutex<Vec<Arc<PortStats>>>,
        workers: std::sync::Mutex<Vec<Arc<WorkerStats>>>,
    }

    impl Counted {
        /// Add a port's counters.
        pub(crate) fn add_port(&self, p: Arc<PortStats>) {
            self.ports.lock().unwrap().push(p);
        }

        /// Add a worker's counters.
        pub(crate) fn add_worker(&self, w: Arc<WorkerStats>) {
            self.workers.lock().unwrap().push(w);
        }
    }

    impl RunningCounters for Counted {
        fn ports(&self) -> Vec<Arc<PortStats>> {
            self.ports.lock().unwrap().clone()
        }
        fn workers(&self) -> Vec<Arc<WorkerStats>> {
            self.workers.lock().unwrap().clone()
        }
    }

    /// A registry over no ports yet, and what adds them.
    pub(crate) fn registry() -> (Arc<Registry>, Arc<Counted>) {
        let counted = Arc::new(Counted::default());
        (Arc::new(Registry::new(counted.clone())), counted)
    }
}

#[cfg(test)]
mod tests {
    use super::test_utils::registry;
    use super::*;
    use crate::metrics::counters::{Dir, DropReason};
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn snapshot_reports_only_nonzero_drops_and_sums() {
        let p = Arc::new(PortStats::new(
            "s",
            crate::metrics::port_kind::PortKind::Sink,
            1,
        ));
        p.queues[0].add(Dir::Rx, 5, 320);
        p.queues[0].drop(DropReason::Oversize, 1);
        let (reg, counted) = registry();
        counted.add_port(p);
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
        let p = Arc::new(PortStats::new(
            "vm1",
            crate::metrics::port_kind::PortKind::Vm,
            1,
        ));
        p.poll_interval_us.store(1318, Relaxed);
        let (reg, counted) = registry();
        counted.add_port(Arc::clone(&p));
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
