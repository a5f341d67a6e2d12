//! The ring service: a VM port's rings as a worker serves them, whatever
//! port they belong to. The port that owns them, and its
//! [`QueueIo`](crate::worker::QueueIo) over them, are [`crate::port`]'s; the
//! worker, which steps the policy, is [`crate::worker`]'s.
//!
//! * [`ring`] — a running ring with its kick and call eventfds, queue
//!   pairs, calling the guest and asking it for kicks;
//! * [`tx`] — transmit ring service: guest frames to the switch;
//! * [`rx`] — receive ring service: backlog frames into guest buffers;
//! * [`ring_pass`] — what a pass did and dropped, counted into the port's
//!   counters;
//! * [`waiting`] — epoll over kicks, wake-ups and a timer; early-wake
//!   compensation; draining kicks;
//! * [`eventfd_io`] — reading and writing kick and call eventfds.
//! * [`guest_offloads`] — which guest-side offloads the port's receiver
//!   takes now (negotiated, and `VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET`).
//! * [`ctrl_queue`] — the control virtqueue, when a frontend gives it to
//!   vadapt, each command answered by [`ctrl_command`] (the thread that
//!   serves it is the port's: `crate::port::ctrl_thread`).
//! * [`rss`] — the guest's receive-side scaling (`VIRTIO_NET_F_RSS`): its
//!   key, hash types and indirection table, and the queue they give a frame.
//! * [`policy_slot`] — a port's policy life cycle: switch, retune, park
//!   between worker incarnations.

pub mod ctrl_command;
pub mod ctrl_queue;
#[cfg(test)]
mod dirty_log_tests;
pub mod eventfd_io;
#[cfg(test)]
mod guest_offload_tests;
pub mod guest_offloads;
#[cfg(test)]
mod packed_ring_tests;
pub mod policy_slot;
pub mod ring;
pub mod ring_pass;
pub mod rss;
pub mod rx;
pub mod tx;
pub mod waiting;
