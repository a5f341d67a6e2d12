//! What a pool worker serves: a port's queues whose waits do not block
//! ([`PooledQueues`]). A VM port's rings ([`crate::queue::PortQueues`]) are
//! one; an uplink's NIC queue (`crate::uplink::worker::UplinkQueue`) is
//! another, so that vSPACE's NQ group serves NIC queues as it serves VM
//! ports and moves them when it is resized.

use crate::queue::drive::{QueueIo, Wait};
use crate::queue::pending_wait::PendingWait;
use std::os::fd::RawFd;
use vadapt_policy::{Policy, Wake};

/// A set of queues a pool worker serves (see the module docs): the
/// [`QueueIo`] of a worker of its own, with its waits cut in three
/// non-blocking steps (see [`crate::queue::pending_wait`]) and its policy
/// taken from, and given back to, its port.
pub trait PooledQueues: QueueIo + Send {
    /// The name the pool shows for it (a port, or an uplink's `port/queue`).
    fn name(&self) -> &str;
    /// A descriptor readable when the queues need their worker (an epoll
    /// set of their own, which the worker's epoll set watches).
    fn waiter_fd(&self) -> RawFd;
    /// Begins the wait `wake` asks for.
    fn begin_wait(&mut self, wake: Wake) -> PendingWait;
    /// Looks, without blocking, whether the wait `w` has ended; records
    /// why in `w.ready`.
    fn poll_wait(&mut self, w: &mut PendingWait);
    /// Ends the wait `w` (which must be ready).
    fn end_wait(&mut self, w: PendingWait) -> Wait;
    /// The policy to run: the port's parked one, or a new one.
    fn take_policy(&mut self) -> Box<dyn Policy>;
    /// Hands the policy back to the port for the next incarnation.
    fn park_policy(&mut self, policy: Box<dyn Policy>);
    /// Ends the queues for good; the rings' positions (ring index, next
    /// avail) where they have guest rings, else none.
    fn into_bases(self: Box<Self>) -> Vec<(usize, u16)>;
}
