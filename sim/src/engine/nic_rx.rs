//! One queue's NIC RX queue under the NAPI-like receive path: the ring,
//! the poll in progress and what it has done (the engine's side is
//! `softirq.rs`, the model [`crate::napi`]).

use crate::napi::{NapiContext, NapiRound, NapiTotals};
use std::collections::VecDeque;

/// One queue's NIC RX queue under NAPI.
#[derive(Debug)]
pub(super) struct NapiRx {
    /// The round's account and where the work runs.
    pub(super) round: NapiRound,
    /// Arrival times of the packets in the RX ring, ns (those of the poll
    /// in progress included: their descriptors are not free yet).
    pub(super) ring: VecDeque<u64>,
    /// Packets the poll in progress takes.
    pub(super) polling: u64,
    /// When the last interrupt fired, ns.
    pub(super) last_irq: Option<u64>,
    /// A hardIRQ or poll is in progress.
    pub(super) running: bool,
    /// CPU work left of it, ns at the top frequency.
    pub(super) work_left: f64,
    /// CPU time used, ns.
    pub(super) busy_ns: f64,
    /// Bumped whenever the interrupt is (re-)armed: an older
    /// `NicInterrupt` event is stale.
    pub(super) generation: u64,
    /// What happened (`cpu_s` is filled in at the end, from `busy_ns`).
    pub(super) counters: NapiTotals,
}

impl NapiRx {
    /// An empty RX queue, its interrupt enabled.
    pub(super) fn new() -> Self {
        NapiRx {
            round: NapiRound::default(),
            ring: VecDeque::new(),
            polling: 0,
            last_irq: None,
            running: false,
            work_left: 0.0,
            busy_ns: 0.0,
            generation: 0,
            counters: NapiTotals::default(),
        }
    }

    /// What it did over the run.
    pub(super) fn totals(&self) -> NapiTotals {
        NapiTotals {
            cpu_s: self.busy_ns / 1e9,
            ..self.counters
        }
    }

    /// The part of a core its work gets now: all of one in softIRQ
    /// context, a processor share (`thread_share`) in ksoftirqd, none idle.
    pub(super) fn cpu_rate(&self, thread_share: f64) -> f64 {
        match (self.running, self.round.context) {
            (false, _) | (true, NapiContext::Idle) => 0.0,
            (true, NapiContext::SoftIrq) => 1.0,
            (true, NapiContext::Ksoftirqd) => thread_share,
        }
    }
}
