//! What the sending threads of one guest share: the clock and the end of the run, the knobs
//! of the load and of the driver, the counters, and which requests have been answered. The
//! guest builds it once per run; every thread's driver and load read it.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use crate::clock::{Clock, ExitCost};
use crate::config::Mode;
use crate::load::{Load, Pacing};
use crate::metrics::GuestCounters;
use crate::period_latency::PeriodLatency;
use vadapt_qemu::server::vcpus::Vcpus;
use vadapt_wire::tcp_build::TxOffloads;

/// What all threads of a guest share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub clock: Clock,
    /// Set by the caller to end the run.
    pub stop: Arc<AtomicBool>,
    /// Set by the guest when the backend went away (skip the drain, end at once).
    pub abort: AtomicBool,
    /// End of the sending phase (ns on `clock`).
    pub deadline_ns: u64,
    /// Per thread: 1 + sequence number of the newest request answered.
    pub answered: Vec<AtomicU64>,
    pub counters: Arc<GuestCounters>,
    pub mac: [u8; 6],
    /// Destination MAC of every frame.
    pub dst_mac: [u8; 6],
    pub mode: Mode,
    pub load: Load,
    pub pacing: Pacing,
    pub threads: u32,
    /// Queue pairs in use (fewer than `threads` means pairs are shared).
    pub pairs: u16,
    pub exit: ExitCost,
    pub napi_budget: u32,
    pub tx_batch: u16,
    pub rr_timeout_ns: u64,
    pub frame_len: u64,
    /// Message size (bytes of L2 payload for raw frames, of application data in TCP stream).
    pub size: u32,
    /// TCP stream: the offloads the device took and the payload every segment carries.
    pub tcp: Option<TcpStreamShared>,
    /// Where each thread registers as a vCPU, and the pause (QMP `stop` / `cont`).
    pub vcpus: Arc<Vcpus>,
    /// Request/response: each period's round trips, for `--cores-control`.
    pub period_latency: Option<Arc<PeriodLatency>>,
}

/// What the TCP-stream senders of a guest share.
#[derive(Debug)]
pub(crate) struct TcpStreamShared {
    pub offloads: TxOffloads,
    pub pattern: Arc<[u8]>,
    /// Emulated cost of one application write (ns); 0 = free writes.
    pub write_ns: u64,
}
