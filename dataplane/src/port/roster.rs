//! The VM ports a daemon runs now, and the uplinks' queue workers (which
//! vSPACE's NQ group covers as it covers VM ports' workers). Ports come and go at run time
//! (`vadapt add-port`, `del-port`, `reload`); whatever follows them (the
//! control socket, the core manager, NetAP-ML's workload loop) reads the
//! roster when it needs the list instead of keeping its own copy.
//!
//! Readers take a snapshot ([`Roster::current`]), a shared list that a
//! change replaces rather than edits, so that no reader holds a lock while
//! it works through the ports, and [`Roster::generation`] tells a reader
//! that keeps state per port whether anything changed since it last looked.

use super::vm_port::VmPort;
use crate::lock_order::RwLock;
use crate::metrics::WorkerStats;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The VM ports running now (see the module documentation).
#[derive(Debug, Default)]
pub struct Roster {
    ports: RwLock<Arc<Vec<Arc<VmPort>>>>,
    generation: AtomicU64,
    /// The uplinks' queue workers, by port name.
    nic_workers: RwLock<Vec<(String, Arc<WorkerStats>)>>,
}

impl Roster {
    /// A roster of `ports`.
    pub fn new(ports: Vec<Arc<VmPort>>) -> Self {
        Roster {
            ports: RwLock::new(Arc::new(ports)),
            generation: AtomicU64::new(0),
            nic_workers: RwLock::new(Vec::new()),
        }
    }

    /// Uplink `port`'s queue workers, from now on among the NQ group's
    /// threads.
    pub fn add_nic_workers(&self, port: &str, workers: &[Arc<WorkerStats>]) {
        let mut v = self.nic_workers.write().unwrap_or_else(|e| e.into_inner());
        v.extend(workers.iter().map(|w| (port.to_string(), Arc::clone(w))));
    }

    /// Uplink `port`'s queue workers leave (the port is removed).
    pub fn remove_nic_workers(&self, port: &str) {
        let mut v = self.nic_workers.write().unwrap_or_else(|e| e.into_inner());
        v.retain(|(p, _)| p != port);
    }

    /// The thread ids of the uplinks' queue workers running now.
    pub fn nic_worker_tids(&self) -> Vec<u32> {
        let v = self.nic_workers.read().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .map(|(_, w)| w.tid.load(Ordering::Acquire))
            .filter(|&t| t > 0)
            .map(|t| t as u32)
            .collect()
    }

    /// The ports now, in the order they were added.
    pub fn current(&self) -> Arc<Vec<Arc<VmPort>>> {
        Arc::clone(&self.ports.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Changes so far: a reader that saw this value has seen every port.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The port named `name`, if it runs.
    pub fn find(&self, name: &str) -> Option<Arc<VmPort>> {
        self.current().iter().find(|p| p.name() == name).cloned()
    }

    /// Add `port` at the end.
    pub fn add(&self, port: Arc<VmPort>) {
        self.replace(|v| v.push(port));
    }

    /// Remove the port named `name`; the port, if there was one.
    pub fn remove(&self, name: &str) -> Option<Arc<VmPort>> {
        let mut gone = None;
        self.replace(|v| {
            if let Some(i) = v.iter().position(|p| p.name() == name) {
                gone = Some(v.remove(i));
            }
        });
        gone
    }

    fn replace(&self, change: impl FnOnce(&mut Vec<Arc<VmPort>>)) {
        let mut ports = self.ports.write().unwrap_or_else(|e| e.into_inner());
        let mut v = Vec::clone(&ports);
        change(&mut v);
        *ports = Arc::new(v);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::VmPortConfig;
    use vadapt_host::cpufreq::CpuFreq;
    use vadapt_policy::PolicyConfig;

    fn port(name: &str) -> Arc<VmPort> {
        VmPort::new(
            VmPortConfig::new(name, format!("/nonexistent/{name}.sock")),
            PolicyConfig::BusyPoll,
            8,
            None,
            Arc::new(CpuFreq::unavailable("test")),
            None,
        )
        .unwrap()
    }

    #[test]
    fn uplink_workers_are_listed_while_their_port_runs() {
        let r = Roster::default();
        let w = Arc::new(WorkerStats::new("up0/0"));
        r.add_nic_workers("up0", &[Arc::clone(&w)]);
        assert!(r.nic_worker_tids().is_empty(), "not running yet");
        w.tid.store(4242, Ordering::Release);
        assert_eq!(r.nic_worker_tids(), [4242]);
        r.remove_nic_workers("up0");
        assert!(r.nic_worker_tids().is_empty());
    }

    #[test]
    fn a_snapshot_taken_before_a_change_stays_as_it_was() {
        let r = Roster::new(vec![port("a")]);
        let before = r.current();
        let g = r.generation();
        r.add(port("b"));
        assert!(r.generation() > g);
        assert_eq!(before.len(), 1);
        assert_eq!(r.current().len(), 2);
        assert!(r.find("b").is_some());
        assert_eq!(r.remove("a").map(|p| p.name().to_owned()), Some("a".into()));
        assert!(r.remove("a").is_none());
        let names: Vec<_> = r.current().iter().map(|p| p.name().to_owned()).collect();
        assert_eq!(names, ["b"]);
    }
}
