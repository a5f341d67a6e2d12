//! A VM port's queues and the workers that serve them: the I/O trait and
//! the loop that carries out a policy's steps ([`drive`]), the ring
//! service, waiting, the worker pool, and the port's state that outlives a
//! frontend connection ([`VmPort`]).
//!
//! * [`drive`] — [`QueueIo`](drive::QueueIo), what a worker's world must
//!   do, and the loop that carries out the policy crate's executor steps
//!   over it.
//! * [`port_queues`] — the port's rings as a `QueueIo`: glue over the
//!   modules below, which need no vhost-user connection:
//!   * [`ring`] — a running ring with its kick and call eventfds, queue
//!     pairs, calling the guest and asking it for kicks;
//!   * [`tx`] — transmit ring service: guest frames to the switch;
//!   * [`rx`] — receive ring service: backlog frames into guest buffers;
//!   * [`ring_pass`] — what a pass did and dropped, counted into the port's
//!     counters;
//!   * [`waiting`] — epoll over kicks, wake-ups and a timer; absolute
//!     sleeps; early-wake compensation; draining kicks;
//!   * [`pending_wait`] — the same waits begun and ended without blocking,
//!     for a worker serving several ports ([`pool`]);
//!   * [`eventfd_io`] — reading and writing kick and call eventfds.
//! * [`pool`] — the shared network-queue workers (vSPACE's NQ group): a
//!   worker thread serving the queue sets of several ports.
//! * [`vm_port`] — what a port keeps across connections, and how frames
//!   from the switch reach its worker.
//! * [`guest_offloads`] — which guest-side offloads the port's receiver
//!   takes now (negotiated, and `VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET`).
//! * [`ctrl_queue`] — the control virtqueue, when a frontend gives it to
//!   vadapt: a small thread answering each command with [`ctrl_command`].
//! * [`rss`] — the guest's receive-side scaling (`VIRTIO_NET_F_RSS`): its
//!   key, hash types and indirection table, and the queue they give a frame.
//! * [`policy_slot`] — the port's policy life cycle: switch, retune, park
//!   between worker incarnations.
//! * [`roster`] — the VM ports running now, for what follows them as
//!   ports come and go.
//! * [`fault_injector`] — a `QueueIo` wrapper that injects faults, for
//!   tests and the soak.

pub mod ctrl_command;
pub mod ctrl_queue;
#[cfg(test)]
mod dirty_log_tests;
pub mod drive;
pub mod eventfd_io;
pub mod fault_injector;
#[cfg(test)]
mod guest_offload_tests;
pub mod guest_offloads;
#[cfg(test)]
mod packed_ring_tests;
pub mod pending_wait;
pub mod policy_slot;
pub mod pool;
pub mod port_queues;
pub mod ring;
pub mod ring_pass;
pub mod roster;
pub mod rss;
pub mod rx;
pub mod tx;
pub mod vm_port;
pub mod waiting;

pub use roster::Roster;
pub use vm_port::VmPort;
