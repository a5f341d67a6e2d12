//! A VM port: what it keeps across frontend connections, its vhost-user
//! side (the socket, the frontend connected to it, the protocol), its rings
//! as its worker's world, and the list of the VM ports running now.
//!
//! * [`vm_port`] is what a port keeps across connections ([`VmPort`]:
//!   counters, the frames waiting for the guest, the policy), and how
//!   frames from the switch reach its worker.
//! * [`roster`] is the one list of running ports, of every kind
//!   ([`Roster`]), for what follows them as ports come and go (the
//!   counters' registry among them).
//! * [`port_queues`] is the port's rings as a
//!   [`QueueIo`](crate::worker::QueueIo): glue over the ring service of
//!   [`crate::queue`], which needs no vhost-user connection.
//! * [`ctrl_thread`] serves the port's control virtqueue, when a frontend
//!   gives it to vadapt, on a small thread of its own.
//! * [`frontend_socket`] is how the port reaches its frontend: vadapt
//!   listens (QEMU connects, `reconnect=1` surviving a vadapt restart), or
//!   vadapt connects to QEMU's socket and reconnects with backoff.
//! * [`handler`] speaks the vhost-user protocol (via the `vhost` crate),
//!   keeps the negotiated state (features, memory table, vrings) and starts
//!   and stops the port's queue set as rings start and stop (where it runs
//!   is [`crate::worker::Runtime`]'s).
//! * [`serve`](mod@serve) serves one frontend at a time on the port's
//!   socket, and resets the port when it goes away.
//! * `guest_memory` is the frontend's memory table and memory hotplug
//!   (`ADD_MEM_REG`, `REM_MEM_REG`).
//! * `raw_requests` takes the two requests the `vhost` crate does not
//!   dispatch: `SEND_RARP` (vadapt announces a migrated VM's MAC) and
//!   `SET_LOG_FD`.
//! * [`memory_file`] is which guest-memory files a port maps, and how it
//!   survives one that shrinks.
//! * [`log_base`] is the dirty-page log (`SET_LOG_BASE`), mapped as guest
//!   memory is: the same check, the same SIGBUS guard.
//! * `unshared_memory` is the one WARN line for a frontend whose guest
//!   memory is not shared (no memory table, or files it never wrote).

pub mod ctrl_thread;
#[cfg(test)]
mod fault_paths_tests;
pub mod frontend_socket;
mod guest_memory;
pub mod handler;
pub mod log_base;
pub mod memory_file;
pub mod port_queues;
mod raw_requests;
mod received_fds;
pub mod roster;
pub mod serve;
mod unshared_memory;
pub mod vm_port;

pub use roster::{PortHandle, Roster, RunningPort};
pub use vm_port::VmPort;
