//! The virtio-net driver of one sending thread, as the Linux driver runs on a vCPU. The
//! thread's load ([`crate::app`]) calls it to send and to take interrupts; the driver asks
//! the load, through `Stack`, for the next buffer and hands it what arrives.
//!
//! * **TX** (`tx.rs`) follows `start_xmit` with `napi_tx` off: free completed buffers
//!   (`free_old_xmit_skbs`), add one buffer per packet (virtio-net header + frame; in TCP
//!   stream one per segment), publish, and kick only when [`AnyDriverQueue::kick_prepare`] says
//!   so (`NO_NOTIFY` flag or EVENT_IDX `avail_event`). When fewer than `2 + MAX_SKB_FRAGS`
//!   (19) descriptors remain, the queue stops (a *ring-full stall*) and asks for a completion
//!   call with `enable_cb_delayed`; the thread then sleeps on the TX call eventfd. A stop
//!   whose call is owed (the backend used buffers past the event point) and does not come
//!   within 10 ms is ended by the guest and counted (`tx_wake_timeouts`): a Linux guest would
//!   wait for its watchdog instead, but a synthetic guest must not hang. A backend that has
//!   not reached the event point yet is waited for (in 10 ms slices, up to the end of the
//!   run).
//! * **RX** (`rx.rs`) is NAPI: RX calls are enabled; when the RX call eventfd is found
//!   signalled the thread pays the exit cost, disables callbacks and polls up to the budget
//!   (64); under budget it re-enables callbacks and, if entries arrived meanwhile (`enable_cb`
//!   false), polls again; at budget it stays scheduled and polls again on its next pass.
//!   Buffers are reposted when more than half the budget is free, as `try_fill_recv`. Replies
//!   a poll owes (echo mode) go out from the poll, as the kernel answers a ping in softirq.
//! * **Where interrupts are taken** (`wait.rs`). A vCPU takes an interrupt between any two
//!   instructions; this thread looks at its RX call eventfd once per burst of up to 64
//!   packets (one non-blocking `read`), and whenever it waits (for a TX completion, for the
//!   pacer, for a reply) it sleeps in `ppoll` on the call eventfds. The delay this adds is at
//!   most one burst (tens of microseconds at worst).
//! * **Exit cost.** Every kick and every handled call busy-waits [`ExitCost`] on this thread.
//!
//! The buffers themselves, their slots in guest memory and the eventfds are [`queue`].
//!
//! [`AnyDriverQueue::kick_prepare`]: vadapt_virtq::AnyDriverQueue::kick_prepare
//! [`ExitCost`]: crate::clock::ExitCost

pub mod queue;
mod rx;
mod tx;
mod wait;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::metrics::ThreadCounters;
use crate::shared::Shared;
use queue::{QueueError, QueuePair, RxPacket, TxQueue};
use vadapt_wire::stamped_frame::Stamp;

/// Linux stops a TX queue when fewer than `2 + MAX_SKB_FRAGS` descriptors are free.
const LINUX_STOP_THRESHOLD: u16 = 2 + 17;

/// Below this much idle time a thread spins instead of sleeping (ns): a sleep costs a
/// scheduler round trip of tens of microseconds on these machines. Under
/// [`Pacing::Burst`](crate::load::Pacing::Burst) a burst spans this much time, so that the
/// thread sleeps instead.
pub(crate) const SPIN_BELOW_NS: u64 = 100_000;

/// A reply owed to a received request (echo mode): its destination and the request's stamp.
pub(crate) type Reply = ([u8; 6], Stamp);

/// What the driver asks of the layer above it (the thread's application and its stack):
/// the next buffer to send, and what a received packet means.
pub(crate) trait Stack {
    /// Adds the next buffer to `tx`, stamped at `now_ns` (the clock is read once per call of
    /// [`Driver::xmit`], not per packet).
    fn add_next(&mut self, tx: &mut TxQueue, now_ns: u64) -> Result<Added, QueueError>;

    /// Takes a packet received in a NAPI poll; returns the reply to send from that poll, if
    /// one is owed.
    fn receive(&mut self, pkt: &RxPacket) -> Option<Reply>;
}

/// What one add to the TX ring did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// A buffer went on the ring.
    Buffer {
        /// Ethernet bytes (headers + payload).
        frame_bytes: u64,
        /// Application payload bytes.
        payload_bytes: u64,
        /// Application messages completed.
        messages: u64,
    },
    /// No slot or descriptor free: the queue must stop.
    RingFull,
    /// Nothing to send (TCP stream, send queue empty).
    NothingQueued,
}

/// The driver state of one thread: its queue pair (owned, or shared round-robin under a
/// mutex when the backend offers fewer pairs than there are threads), when its TX queue
/// stops, and the replies its last NAPI poll owes.
#[derive(Debug)]
pub(crate) struct Driver {
    /// Thread number (indexes the per-thread counters).
    id: u32,
    pair: Arc<Mutex<QueuePair>>,
    pair_index: u16,
    shared: Arc<Shared>,
    /// Free descriptors below which the TX queue stops.
    stop_threshold: u16,
    /// The first error the rings reported; it ends the thread's run.
    pub error: Option<String>,
    /// Echo mode: replies owed from the current NAPI poll.
    echo: Vec<Reply>,
}

impl Driver {
    /// The driver of thread `id` on `pair`.
    pub(crate) fn new(id: u32, pair: Arc<Mutex<QueuePair>>, shared: Arc<Shared>) -> Driver {
        let (pair_index, size) = {
            let p = lock(&pair);
            (p.index, p.tx.vq.size())
        };
        Driver {
            id,
            pair,
            pair_index,
            shared,
            stop_threshold: stop_threshold(size),
            error: None,
            echo: Vec::new(),
        }
    }

    /// The queue pair this thread drives.
    pub(crate) fn pair(&self) -> Arc<Mutex<QueuePair>> {
        Arc::clone(&self.pair)
    }

    /// Number of the queue pair this thread drives.
    pub(crate) fn pair_index(&self) -> u16 {
        self.pair_index
    }

    /// This thread's counters.
    pub(crate) fn counters(&self) -> &ThreadCounters {
        &self.shared.counters.threads[self.id as usize]
    }

    /// Whether the thread's run is over: an error, a stop request, the backend gone, or the
    /// end of the sending phase.
    pub(crate) fn should_stop(&self) -> bool {
        self.error.is_some()
            || self.shared.stop.load(Ordering::Relaxed)
            || self.shared.abort.load(Ordering::Relaxed)
            || self.shared.clock.now_ns() >= self.shared.deadline_ns
    }
}

/// Free descriptors below which a TX queue of `ring_size` stops: Linux's threshold, or half
/// the ring for small rings (tests), so that they stop instead of never starting.
fn stop_threshold(ring_size: u16) -> u16 {
    LINUX_STOP_THRESHOLD.min(ring_size / 2).max(1)
}

/// Locks a queue pair.
pub(crate) fn lock(pair: &Mutex<QueuePair>) -> MutexGuard<'_, QueuePair> {
    // A thread that panicked while holding the pair left it mid-update; the run is lost
    // anyway, and the report should still come out, so take the data as it is.
    pair.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_queue_stops_at_linux_threshold_or_half_a_small_ring() {
        assert_eq!(stop_threshold(1024), 19);
        assert_eq!(stop_threshold(256), 19);
        assert_eq!(stop_threshold(38), 19);
        assert_eq!(stop_threshold(16), 8);
        assert_eq!(stop_threshold(2), 1);
        assert_eq!(stop_threshold(1), 1);
    }
}
