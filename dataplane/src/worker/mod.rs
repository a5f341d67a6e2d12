//! The queue worker runtime: how a set of queues — a VM port's rings or an
//! uplink's NIC queue — is served, in one way wherever it runs.
//!
//! * [`queue_io`] — [`QueueIo`], what a worker's world must do, its waits
//!   cut in non-blocking steps ([`pending_wait`]).
//! * [`queue_set`] — [`QueueSet`], the queues with their policy's
//!   executor: the only thing that steps an executor.
//! * [`pool`] — [`NqWorkers`](pool::NqWorkers): threads serving queue
//!   sets, one per NQ core (vSPACE's NQ group), or one for one set (a
//!   thread of the set's own is a pool of one).
//! * [`runtime`] — [`Runtime`]: where an owner's sets are served (a thread
//!   of their own, the pool, or the owner's own thread), and [`Served`],
//!   a set being served, stepped and stopped the same way for every kind.
//! * `threads` — the default arrangement's threads: one per set, but
//!   never more busy threads than CPUs.
//! * [`ring_bases`] — [`RingBases`], where a stopped set left its rings.
//! * [`fault_injector`] — a [`QueueIo`] wrapper that injects faults, for
//!   tests and the soak.

pub mod fault_injector;
pub mod pending_wait;
pub mod pool;
pub mod queue_io;
pub mod queue_set;
pub mod ring_bases;
pub mod runtime;
mod threads;

pub use pending_wait::PendingWait;
pub use queue_io::{Control, PassStats, QueueIo, Wait};
pub use queue_set::QueueSet;
pub use ring_bases::{RingBase, RingBases};
pub use runtime::{Runtime, Served};
