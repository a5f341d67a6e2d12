//! A VM port's queues as a worker serves them: the ring service, waiting,
//! and the port's state that outlives a frontend connection ([`VmPort`]).
//! The worker itself, which steps the policy over them, is
//! [`crate::worker`].
//!
//! * [`port_queues`] — the port's rings as a
//!   [`QueueIo`](crate::worker::QueueIo): glue over the modules below,
//!   which need no vhost-user connection:
//!   * [`ring`] — a running ring with its kick and call eventfds, queue
//!     pairs, calling the guest and asking it for kicks;
//!   * [`tx`] — transmit ring service: guest frames to the switch;
//!   * [`rx`] — receive ring service: backlog frames into guest buffers;
//!   * [`ring_pass`] — what a pass did and dropped, counted into the port's
//!     counters;
//!   * [`waiting`] — epoll over kicks, wake-ups and a timer; early-wake
//!     compensation; draining kicks;
//!   * [`eventfd_io`] — reading and writing kick and call eventfds.
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

pub mod ctrl_command;
pub mod ctrl_queue;
#[cfg(test)]
mod dirty_log_tests;
pub mod eventfd_io;
#[cfg(test)]
mod fault_paths_tests;
#[cfg(test)]
mod guest_offload_tests;
pub mod guest_offloads;
#[cfg(test)]
mod packed_ring_tests;
pub mod policy_slot;
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
