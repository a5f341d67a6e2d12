//! The one list of the ports a daemon runs now, of every kind: VM ports,
//! uplinks, TAP, sink and echo ports, each with its name, kind, switch id,
//! counters, queue workers' counters and handle ([`RunningPort`]). Ports
//! come and go at run time (`vadapt add-port`, `del-port`, `reload`);
//! whatever follows them reads this list, or a view derived from it, when
//! it needs it instead of keeping its own copy:
//!
//! * the control socket finds a port by name ([`Roster::find`],
//!   [`Roster::find_uplink`]);
//! * the core manager and NetAP-ML's workload loop follow the VM ports
//!   ([`Roster::current`]), and the core manager the uplinks' queue workers
//!   too ([`Roster::nic_worker_tids`]: vSPACE's NQ group covers them as it
//!   covers VM ports' workers);
//! * the counters' registry exports the running ports' and workers'
//!   counters, in the order the ports were added
//!   ([`RunningCounters`], which the roster is to
//!   [`crate::metrics::Registry`]).
//!
//! The daemon's port book (`daemon/port_book.rs`) makes and unmakes the
//! ports and is the only writer; it keeps beside this list only what no
//! reader may touch: the threads it joins when a port goes, and the
//! configuration.
//!
//! Readers take a snapshot ([`Roster::all`], [`Roster::current`]), a
//! shared list that a change replaces rather than edits, so that no reader
//! holds a lock while it works through the ports, and
//! [`Roster::generation`] tells a reader that keeps state per port whether
//! anything changed since it last looked.

use super::vm_port::VmPort;
use crate::lock_order::RwLock;
use crate::metrics::{PortKind, PortStats, RunningCounters, WorkerStats};
use crate::switch::PortId;
use crate::uplink::Uplink;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A port that runs, as the roster lists it.
#[derive(Debug, Clone)]
pub struct RunningPort {
    /// Its id on the switch.
    pub id: PortId,
    /// Its counters (its name and kind are theirs).
    pub stats: Arc<PortStats>,
    /// Its queue workers' counters: a VM port's one worker, an uplink's one
    /// per NIC queue, none for a TAP, sink or echo port.
    pub workers: Vec<Arc<WorkerStats>>,
    /// The port itself, for the kinds whose readers change it at run time.
    pub handle: PortHandle,
}

/// The handle of a [`RunningPort`].
#[derive(Debug, Clone)]
pub enum PortHandle {
    /// A VM port.
    Vm(Arc<VmPort>),
    /// An AF_XDP uplink.
    Uplink(Arc<Uplink>),
    /// A TAP, sink or echo port: nothing reads it through the roster.
    Host,
}

impl RunningPort {
    /// VM port `port`, attached to the switch: its id, counters and worker
    /// are its own.
    pub fn vm(port: Arc<VmPort>) -> Self {
        RunningPort {
            id: port.port_id(),
            stats: Arc::clone(&port.stats),
            workers: vec![Arc::clone(&port.worker_stats)],
            handle: PortHandle::Vm(port),
        }
    }

    /// Uplink `port`, attached to the switch, served by `workers`.
    pub fn uplink(port: Arc<Uplink>, workers: &[Arc<WorkerStats>]) -> Self {
        RunningPort {
            id: port.port_id(),
            stats: Arc::clone(&port.stats),
            workers: workers.to_vec(),
            handle: PortHandle::Uplink(port),
        }
    }

    /// A TAP, sink or echo port: switch port `id` counted in `stats`.
    pub fn host(id: PortId, stats: Arc<PortStats>) -> Self {
        RunningPort {
            id,
            stats,
            workers: Vec::new(),
            handle: PortHandle::Host,
        }
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        &self.stats.name
    }

    /// The port's kind.
    pub fn kind(&self) -> PortKind {
        self.stats.kind
    }
}

/// The running ports, and the views of them that readers take.
#[derive(Debug, Default)]
struct Listing {
    /// Every port, in the order they were added.
    all: Arc<Vec<RunningPort>>,
    /// The VM ports among them, in the same order (derived from `all`).
    vms: Arc<Vec<Arc<VmPort>>>,
}

impl Listing {
    fn of(all: Vec<RunningPort>) -> Self {
        let vms = all
            .iter()
            .filter_map(|p| match &p.handle {
                PortHandle::Vm(v) => Some(Arc::clone(v)),
                _ => None,
            })
            .collect();
        Listing {
            all: Arc::new(all),
            vms: Arc::new(vms),
        }
    }
}

/// The ports running now (see the module documentation).
#[derive(Debug, Default)]
pub struct Roster {
    listing: RwLock<Listing>,
    generation: AtomicU64,
}

impl Roster {
    /// A roster of the VM ports `ports`.
    pub fn new(ports: Vec<Arc<VmPort>>) -> Self {
        Roster {
            listing: RwLock::new(Listing::of(
                ports.into_iter().map(RunningPort::vm).collect(),
            )),
            generation: AtomicU64::new(0),
        }
    }

    /// Every port now, in the order they were added.
    pub fn all(&self) -> Arc<Vec<RunningPort>> {
        Arc::clone(&self.read().all)
    }

    /// The VM ports now, in the order they were added.
    pub fn current(&self) -> Arc<Vec<Arc<VmPort>>> {
        Arc::clone(&self.read().vms)
    }

    /// Changes so far: a reader that saw this value has seen every port.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The VM port named `name`, if it runs.
    pub fn find(&self, name: &str) -> Option<Arc<VmPort>> {
        self.current().iter().find(|p| p.name() == name).cloned()
    }

    /// The uplink named `name`, if it runs.
    pub fn find_uplink(&self, name: &str) -> Option<Arc<Uplink>> {
        self.all().iter().find_map(|p| match &p.handle {
            PortHandle::Uplink(u) if p.name() == name => Some(Arc::clone(u)),
            _ => None,
        })
    }

    /// The names of the ports whose policy can change: the VM ports, then
    /// the uplinks, each in the order they were added.
    pub fn policy_port_names(&self) -> Vec<String> {
        let all = self.all();
        let of = |vm: bool| {
            (all.iter())
                .filter(move |p| match p.handle {
                    PortHandle::Vm(_) => vm,
                    PortHandle::Uplink(_) => !vm,
                    PortHandle::Host => false,
                })
                .map(|p| p.name().to_owned())
        };
        of(true).chain(of(false)).collect()
    }

    /// The thread ids of the uplinks' queue workers running now.
    pub fn nic_worker_tids(&self) -> Vec<u32> {
        (self.all().iter())
            .filter(|p| p.kind() == PortKind::Uplink)
            .flat_map(|p| p.workers.iter())
            .map(|w| w.tid.load(Ordering::Acquire))
            .filter(|&t| t > 0)
            .map(|t| t as u32)
            .collect()
    }

    /// Add `port` at the end.
    pub fn add(&self, port: RunningPort) {
        self.replace(|v| v.push(port));
    }

    /// Remove the port named `name`; the port, if there was one.
    pub fn remove(&self, name: &str) -> Option<RunningPort> {
        let mut gone = None;
        self.replace(|v| {
            if let Some(i) = v.iter().position(|p| p.name() == name) {
                gone = Some(v.remove(i));
            }
        });
        gone
    }

    fn read(&self) -> crate::lock_order::RwLockReadGuard<'_, Listing> {
        self.listing.read().unwrap_or_else(|e| e.into_inner())
    }

    fn replace(&self, change: impl FnOnce(&mut Vec<RunningPort>)) {
        let mut listing = self.listing.write().unwrap_or_else(|e| e.into_inner());
        let mut v = Vec::clone(&listing.all);
        change(&mut v);
        *listing = Listing::of(v);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

impl RunningCounters for Roster {
    fn ports(&self) -> Vec<Arc<PortStats>> {
        self.all().iter().map(|p| Arc::clone(&p.stats)).collect()
    }

    fn workers(&self) -> Vec<Arc<WorkerStats>> {
        (self.all().iter())
            .flat_map(|p| p.workers.iter().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_uplink_spec, VmPortConfig};
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

    /// Uplink `iface` of one queue, served by worker `w`.
    fn uplink(iface: &str, w: &Arc<WorkerStats>) -> RunningPort {
        let cfg = parse_uplink_spec(&format!("iface={iface},name={iface}")).unwrap();
        let up = Uplink::new(cfg, 8, PolicyConfig::BusyPoll, None).unwrap();
        RunningPort::uplink(up, std::slice::from_ref(w))
    }

    #[test]
    fn uplink_workers_are_listed_while_their_port_runs() {
        let r = Roster::default();
        let w = Arc::new(WorkerStats::new("up0/0"));
        r.add(uplink("up0", &w));
        assert!(r.nic_worker_tids().is_empty(), "not running yet");
        w.tid.store(4242, Ordering::Release);
        assert_eq!(r.nic_worker_tids(), [4242]);
        assert!(r.find_uplink("up0").is_some());
        assert!(r.find("up0").is_none(), "not a VM port");
        r.remove("up0");
        assert!(r.nic_worker_tids().is_empty());
        assert!(r.find_uplink("up0").is_none());
    }

    #[test]
    fn a_snapshot_taken_before_a_change_stays_as_it_was() {
        let r = Roster::new(vec![port("a")]);
        let before = r.current();
        let g = r.generation();
        r.add(RunningPort::vm(port("b")));
        assert!(r.generation() > g);
        assert_eq!(before.len(), 1);
        assert_eq!(r.current().len(), 2);
        assert!(r.find("b").is_some());
        assert_eq!(r.remove("a").map(|p| p.name().to_owned()), Some("a".into()));
        assert!(r.remove("a").is_none());
        let names: Vec<_> = r.current().iter().map(|p| p.name().to_owned()).collect();
        assert_eq!(names, ["b"]);
    }

    /// The registry's view: every port's counters and every worker's, of
    /// every kind, in the order the ports were added; a removed port's
    /// series end with it.
    #[test]
    fn the_counters_follow_the_ports_in_the_order_they_were_added() {
        let r = Roster::default();
        r.add(RunningPort::vm(port("vm1")));
        let sink = Arc::new(PortStats::new("s", PortKind::Sink, 1));
        r.add(RunningPort::host(7, sink));
        let w = Arc::new(WorkerStats::new("up0/0"));
        r.add(uplink("up0", &w));
        r.add(RunningPort::vm(port("vm2")));
        let names = |v: Vec<Arc<PortStats>>| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(r.ports()), ["vm1", "s", "up0", "vm2"]);
        let workers: Vec<_> = r.workers().iter().map(|w| w.name.clone()).collect();
        assert_eq!(workers, ["vm1", "up0/0", "vm2"]);
        assert_eq!(
            r.policy_port_names(),
            ["vm1", "vm2", "up0"],
            "as before the one list"
        );
        r.remove("vm1");
        assert_eq!(names(r.ports()), ["s", "up0", "vm2"]);
        assert_eq!(r.workers().len(), 2);
    }
}
