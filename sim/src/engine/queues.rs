//! One simulated queue: its virtqueue ring, the guest load on it, the host
//! worker serving it, and its counters.

use super::nic_rx::NapiRx;
use super::request_response::RequestResponseQueue;
use super::workers::QueueWorker;
use crate::producer::Producer;
use crate::ring::Ring;

/// Counters of one queue, since the start of the run.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct QueueCounters {
    /// Guest kicks (VM exits).
    pub(super) kicks: u64,
    /// Calls (interrupts injected into the guest).
    pub(super) calls: u64,
    /// Worker wake-ups that cost a context switch.
    pub(super) wakeups: u64,
    /// Service passes.
    pub(super) passes: u64,
    /// Packets moved, both directions.
    pub(super) packets: u64,
    /// Payload bytes moved.
    pub(super) payload: u64,
}

/// One queue of one VM.
#[derive(Debug)]
pub(super) struct SimulatedQueue {
    /// Index of its VM.
    pub(super) vm: usize,
    /// The virtqueue ring.
    pub(super) ring: Ring,
    /// The guest's stream senders (stream loads).
    pub(super) senders: Option<Producer>,
    /// Requests and responses (request/response loads).
    pub(super) request_response: Option<RequestResponseQueue>,
    /// The NIC RX queue under NAPI (request/response loads with
    /// `[host.napi]`).
    pub(super) napi: Option<NapiRx>,
    /// The host's queue worker.
    pub(super) worker: QueueWorker,
    /// What happened on it.
    pub(super) counters: QueueCounters,
}
