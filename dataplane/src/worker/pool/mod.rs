//! Queue workers as a pool with one worker per NQ core (vSPACE's NQ group),
//! each serving a set of ports' queues; and a thread of a set's own, which
//! is a pool of one ([`NqWorkers::dedicated`]).
//!
//! With `[cores] queue_workers = "per-nq-core"`, a VM port's running rings
//! are not given a thread of their own: they become a [`QueueSet`] (the
//! port's queue pairs and its policy instance) served by one worker of
//! [`NqWorkers`]. When the core manager resizes the NQ group,
//! [`NqWorkers::resize`] starts or ends workers so that there is one per NQ
//! core, pins worker `i` to the group's `i`-th CPU, and moves queue sets
//! between workers as [`assign_queue_sets`] says (count-balanced, stable:
//! see `vadapt_policy::vspace::queue_assign`).
//!
//! A move is an ordered handoff (see `worker_thread.rs`): the old worker
//! releases the set between two of its passes, then the new one takes it
//! and re-checks its rings. While a set is in transit (one channel round
//! trip) no thread serves it; the guest's descriptors wait in its rings and
//! frames for it in its backlogs, so nothing is lost unless a backlog
//! overflows, which its counters would show.
//!
//! The unit moved is a port, not a single queue as in OVS-DPDK: a port's
//! queue pairs share one policy instance (the port's policy slot), and the
//! policy must see all the port's traffic.

pub mod status;
mod worker_thread;

pub use status::NqWorkerStatus;

use super::queue_set::QueueSet;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use vadapt_policy::vspace::{assign_queue_sets, QueueAssignment};
use worker_thread::{Command, Inbox};

/// Why the pool could not change its workers.
#[derive(Debug, thiserror::Error)]
pub enum NqWorkersError {
    /// A worker's eventfd, epoll set or thread could not be created.
    #[error("cannot start queue worker {index}")]
    SpawnWorker {
        /// The worker's index.
        index: usize,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

struct WorkerHandle {
    inbox: Arc<Inbox>,
    tid: Arc<AtomicU32>,
    join: JoinHandle<()>,
    cpu: Option<usize>,
}

#[derive(Default)]
struct State {
    workers: Vec<WorkerHandle>,
    /// Where each set is (or was last, for sets detached since: a port that
    /// reconnects goes back to its worker).
    assignment: QueueAssignment,
    /// Sets being served, with their port's name.
    attached: BTreeMap<u64, String>,
}

/// The pool (see the module docs).
pub struct NqWorkers {
    state: Mutex<State>,
    /// Pin worker `i` to the `i`-th CPU given to [`NqWorkers::resize`].
    pin: bool,
    /// Queue sets moved between workers since start.
    moves: AtomicU64,
    /// A pool of one serving one set as a thread of its own, named this
    /// (see [`NqWorkers::dedicated`]).
    dedicated: Option<String>,
}

impl std::fmt::Debug for NqWorkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NqWorkers")
            .field("workers", &self.status().len())
            .finish_non_exhaustive()
    }
}

impl NqWorkers {
    /// A pool with one worker per CPU of `cpus` (at least one), pinned to
    /// them when `pin`.
    pub fn new(cpus: &[usize], pin: bool) -> Result<Arc<Self>, NqWorkersError> {
        let pool = Arc::new(NqWorkers {
            state: Mutex::new(State::default()),
            pin,
            moves: AtomicU64::new(0),
            dedicated: None,
        });
        pool.resize(cpus)?;
        Ok(pool)
    }

    /// A pool of one whose thread, named `name`, serves a set as a thread
    /// of its own would: pinned to `cpu` if given, its id and CPU time
    /// shown in the set's counters ([`QueueIo::worker_stats`]) as long as
    /// it has served that set alone. (Sets pinned to one CPU share it.)
    ///
    /// [`QueueIo::worker_stats`]: super::QueueIo::worker_stats
    pub fn dedicated(name: String, cpu: Option<usize>) -> Result<Arc<Self>, NqWorkersError> {
        let pool = Arc::new(NqWorkers {
            state: Mutex::new(State::default()),
            pin: cpu.is_some(),
            moves: AtomicU64::new(0),
            dedicated: Some(name),
        });
        pool.resize(&cpu.into_iter().collect::<Vec<_>>())?;
        Ok(pool)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many sets are attached.
    pub fn attached(&self) -> usize {
        self.lock().attached.len()
    }

    /// How many workers run.
    pub fn len(&self) -> usize {
        self.lock().workers.len()
    }

    /// Whether no worker runs (only after [`NqWorkers::shutdown`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue sets moved between workers since start.
    pub fn moves(&self) -> u64 {
        self.moves.load(Ordering::Relaxed)
    }

    /// The workers' thread ids (started ones).
    pub fn tids(&self) -> Vec<u32> {
        self.lock()
            .workers
            .iter()
            .map(|w| w.tid.load(Ordering::Acquire))
            .filter(|&t| t > 0)
            .collect()
    }

    /// Each worker with its CPU and the ports it serves.
    pub fn status(&self) -> Vec<NqWorkerStatus> {
        let st = self.lock();
        st.workers
            .iter()
            .enumerate()
            .map(|(index, w)| NqWorkerStatus {
                index,
                tid: w.tid.load(Ordering::Acquire),
                cpu: w.cpu,
                ports: st
                    .attached
                    .iter()
                    .filter(|(id, _)| st.assignment.get(id) == Some(&index))
                    .map(|(_, name)| name.clone())
                    .collect(),
            })
            .collect()
    }

    /// Serve `set` from now on, on the worker the assignment gives it.
    pub fn attach(&self, set: QueueSet) {
        let mut st = self.lock();
        st.attached.insert(set.id, set.port_name().to_string());
        let ids: Vec<u64> = st.attached.keys().copied().collect();
        let next = assign_queue_sets(&ids, st.workers.len(), &st.assignment);
        let id = set.id;
        // Adding a set never needs another to move (the caps only grow),
        // but whatever the assignment says is carried out.
        self.carry_out(&mut st, next, Some(Box::new(set)));
        debug_assert!(st.assignment.contains_key(&id));
    }

    /// Stop serving set `id` and hand it back, between two of its passes
    /// (`None`: not attached, or its worker died).
    pub fn detach(&self, id: u64) -> Option<QueueSet> {
        let mut st = self.lock();
        st.attached.remove(&id)?;
        let w = *st.assignment.get(&id)?;
        release(&st.workers[w], id).map(|b| *b)
    }

    /// One worker per CPU of `cpus` (at least one): start or end workers,
    /// move the queue sets the new assignment moves, and pin each worker to
    /// its CPU. Returns how many sets moved.
    pub fn resize(&self, cpus: &[usize]) -> Result<usize, NqWorkersError> {
        let k = cpus.len().max(1);
        let mut st = self.lock();
        while st.workers.len() < k {
            let index = st.workers.len();
            st.workers.push(spawn(index, self.dedicated.as_deref())?);
        }
        let ids: Vec<u64> = st.attached.keys().copied().collect();
        let next = assign_queue_sets(&ids, k, &st.assignment);
        let moved = self.carry_out(&mut st, next, None);
        while st.workers.len() > k {
            let w = st.workers.pop().expect("more than k");
            // Empty now: every set was moved off it above.
            for set in exit(w) {
                tracing::error!(
                    port = set.port_name(),
                    "queue set left on a removed worker; moved"
                );
                let ids: Vec<u64> = st.attached.keys().copied().collect();
                let next = assign_queue_sets(&ids, k, &st.assignment);
                self.carry_out(&mut st, next, Some(Box::new(set)));
            }
        }
        for (i, w) in st.workers.iter_mut().enumerate() {
            let cpu = cpus.get(i).copied().filter(|_| self.pin);
            if cpu != w.cpu {
                w.cpu = cpu;
                w.inbox.send(Command::Pin(cpu));
            }
        }
        Ok(moved)
    }

    /// Moves the attached sets whose worker changes in `next` (release
    /// from the old worker, then take on the new one), gives `new` to its
    /// worker, and records `next`. Returns how many sets moved.
    fn carry_out(
        &self,
        st: &mut State,
        next: QueueAssignment,
        new: Option<Box<QueueSet>>,
    ) -> usize {
        let mut moved = 0;
        for (&id, &to) in &next {
            let from = st.assignment.get(&id).copied();
            if new.as_ref().is_some_and(|s| s.id == id) || from == Some(to) {
                continue;
            }
            let Some(from) = from.filter(|&f| f < st.workers.len()) else {
                continue;
            };
            if let Some(set) = release(&st.workers[from], id) {
                st.workers[to].inbox.send(Command::Take(set));
                moved += 1;
            }
        }
        if let Some(set) = new {
            if let Some(&to) = next.get(&set.id) {
                st.workers[to].inbox.send(Command::Take(set));
            }
        }
        // Keep where detached sets were, for their return.
        for (id, w) in next {
            st.assignment.insert(id, w);
        }
        let k = st.workers.len();
        st.assignment.retain(|_, w| *w < k);
        self.moves.fetch_add(moved as u64, Ordering::Relaxed);
        moved
    }

    /// Ends every worker. Sets still attached are finished (their policy
    /// parked); the connection handlers detach theirs first.
    pub fn shutdown(&self) {
        let mut st = self.lock();
        st.attached.clear();
        for w in st.workers.drain(..) {
            for set in exit(w) {
                let _ = set.finish();
            }
        }
    }
}

/// Starts worker `index` (the thread of a set's own, named `dedicated`).
fn spawn(index: usize, dedicated: Option<&str>) -> Result<WorkerHandle, NqWorkersError> {
    let err = |source| NqWorkersError::SpawnWorker { index, source };
    let inbox = Arc::new(Inbox::new().map_err(err)?);
    let epoll = worker_thread::epoll_for(&inbox).map_err(err)?;
    let tid = Arc::new(AtomicU32::new(0));
    let (i2, t2) = (Arc::clone(&inbox), Arc::clone(&tid));
    let name = dedicated.map_or_else(|| format!("vadapt-nq-{index}"), str::to_string);
    let own = dedicated.is_some();
    let join = std::thread::Builder::new()
        .name(name)
        .spawn(move || worker_thread::run(index, i2, epoll, t2, own))
        .map_err(err)?;
    Ok(WorkerHandle {
        inbox,
        tid,
        join,
        cpu: None,
    })
}

/// Ask worker `w` for set `id` and wait for it.
fn release(w: &WorkerHandle, id: u64) -> Option<Box<QueueSet>> {
    let (tx, rx) = mpsc::channel();
    w.inbox.send(Command::Release(id, tx));
    match rx.recv() {
        Ok(set) => set,
        Err(_) => {
            tracing::error!(
                id,
                "queue worker died; its queue set is lost until the frontend reconnects"
            );
            None
        }
    }
}

/// End worker `w`; the sets it still held.
fn exit(w: WorkerHandle) -> Vec<QueueSet> {
    let (tx, rx) = mpsc::channel();
    w.inbox.send(Command::Exit(tx));
    let sets = rx.recv().unwrap_or_default();
    if w.join.join().is_err() {
        tracing::error!("queue worker panicked");
    }
    sets
}

impl Drop for NqWorkers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
