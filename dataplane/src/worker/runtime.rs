//! Where an owner's queue sets are served ([`Runtime`]), and a set being
//! served ([`Served`]). A VM port's connection and an uplink start and stop
//! their sets here, the same way whichever runtime serves them.

use super::pool::{NqWorkers, NqWorkersError};
use super::queue_io::QueueIo;
use super::queue_set::QueueSet;
use super::ring_bases::RingBases;
use std::sync::Arc;

/// Where queue sets are served.
#[derive(Clone, Debug, Default)]
pub enum Runtime {
    /// Each set on a thread of its own (a pool of one,
    /// [`NqWorkers::dedicated`]), unless there would be more such threads
    /// than CPUs: then sets share them, one thread per CPU
    /// (`worker/threads.rs`).
    #[default]
    Thread,
    /// The NQ workers' pool (`[cores] queue_workers = "per-nq-core"`).
    Pool(Arc<NqWorkers>),
    /// No thread: the owner steps the set on its own thread
    /// ([`Served::step`]), deterministically. For tests and the fuzzer.
    Stepped,
}

/// A set being served (see [`Runtime::serve`]).
#[derive(Debug)]
pub struct Served(Where);

#[derive(Debug)]
enum Where {
    /// By a pool's worker (a pool of one for a thread of the set's own).
    Pool { pool: Arc<NqWorkers>, id: u64 },
    /// By its owner.
    Stepped(Box<QueueSet>),
}

impl Runtime {
    /// Serves `queues` as set `id` (the pool's: [`Runtime::Thread`] gives
    /// it one of its own) from now on. `thread` names the thread
    /// of the set's own ([`Runtime::Thread`]), pinned to `cpu` if given
    /// (a thread already pinned there serves it too).
    pub fn serve(
        &self,
        id: u64,
        queues: impl QueueIo + 'static,
        thread: &str,
        cpu: Option<usize>,
    ) -> Result<Served, NqWorkersError> {
        let (pool, id) = match self {
            Runtime::Stepped => {
                let set = QueueSet::start(id, queues).into_dyn();
                return Ok(Served(Where::Stepped(Box::new(set))));
            }
            Runtime::Pool(pool) => (Arc::clone(pool), id),
            // The threads are the process's: ids of their own, as owners'
            // ids are unique only within a switch (tests run several).
            Runtime::Thread => (
                super::threads::thread_for(thread, cpu)?,
                super::threads::set_id(),
            ),
        };
        pool.attach(QueueSet::start(id, queues).into_dyn());
        Ok(Served(Where::Pool { pool, id }))
    }

    /// Whether the owner steps what is served ([`Runtime::Stepped`]).
    pub fn is_stepped(&self) -> bool {
        matches!(self, Runtime::Stepped)
    }
}

impl Served {
    /// With [`Runtime::Stepped`]: [`QueueSet::step`]. False elsewhere (a
    /// worker thread makes the passes).
    pub fn step(&mut self, force: bool) -> bool {
        match &mut self.0 {
            Where::Stepped(set) => set.step(force),
            Where::Pool { .. } => false,
        }
    }

    /// Stops serving the set, between two of its passes, and finishes it
    /// ([`QueueSet::finish`]): the rings' positions. `None`: its worker
    /// died, and the set with it. A thread of the set's own ends here.
    pub fn stop(self) -> Option<RingBases> {
        match self.0 {
            Where::Stepped(set) => Some(set.finish()),
            Where::Pool { pool, id } => pool.detach(id).map(QueueSet::finish),
        }
    }
}
