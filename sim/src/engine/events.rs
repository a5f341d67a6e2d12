//! The event heap: what can happen at a given simulated time, in the order
//! it was scheduled, and the cap on events per simulated second.

use super::error::SimError;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Something scheduled to happen at a given time. Queue indices `queue`
/// count over all VMs' queues; `generation` is the worker's wait generation
/// when the event was scheduled: a worker that has moved on since (woken,
/// re-armed, switched policy) ignores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    /// A sleep ends, or a wait for a kick times out.
    Timer { queue: usize, generation: u64 },
    /// A kicked (or signalled) worker becomes runnable.
    Wake { queue: usize, generation: u64 },
    /// A called (halted) guest vCPU resumes sending.
    GuestResume { queue: usize },
    /// Request/response: a request reaches a worker waiting for a kick.
    RequestArrives { queue: usize, generation: u64 },
    /// Request/response: a response is posted to a worker waiting for a
    /// kick (the guest kicks).
    ResponsePosted { queue: usize, generation: u64 },
    /// The NIC queue has room again for a worker blocked on it; `woke`
    /// says whether the pass it blocked started with a wake-up.
    NicRoom {
        queue: usize,
        generation: u64,
        woke: bool,
    },
    /// Request/response with NAPI: the NIC queue's RX interrupt, armed as
    /// `generation`, fires (a packet arrived).
    NicInterrupt { queue: usize, generation: u64 },
    /// Timeline entry `index` takes effect.
    PolicySwitch { index: usize },
    /// Take a time-series sample.
    Sample,
    /// A core-management control period ends (request/response loads or a
    /// dynamic allocator only).
    ControlPeriod,
    /// A vCPU time slice ends (`host.vcpu_sched = "slices"`).
    SliceEnd { generation: u64 },
}

/// Events by time, ties broken by the order they were pushed in: the
/// sequence number makes the order (and so the run) deterministic.
#[derive(Debug, Default)]
pub(super) struct EventQueue {
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    /// Events pushed so far.
    sequence: u64,
}

impl EventQueue {
    /// Schedule `event` at `at`, ns.
    pub(super) fn push(&mut self, at: u64, event: Event) {
        self.sequence += 1;
        self.heap.push(Reverse((at, self.sequence, event)));
    }

    /// Time of the earliest event, ns; `u64::MAX` when there is none.
    pub(super) fn next_time(&self) -> u64 {
        self.heap.peek().map_or(u64::MAX, |r| r.0 .0)
    }

    /// The earliest event if it is due at `now`.
    pub(super) fn pop_due(&mut self, now: u64) -> Option<Event> {
        if self.heap.peek().is_some_and(|r| r.0 .0 <= now) {
            let Reverse((_, _, event)) = self.heap.pop().expect("peeked");
            Some(event)
        } else {
            None
        }
    }
}

/// Counts the loop's steps, and stops a run that spins: more than `cap`
/// steps within one simulated second.
#[derive(Debug)]
pub(super) struct EventBudget {
    /// Steps allowed per simulated second (`max_events_per_sim_s`).
    cap: u64,
    /// Steps so far.
    pub(super) total: u64,
    /// The simulated second of the last step.
    second: u64,
    /// Steps within `second`.
    in_second: u64,
}

impl EventBudget {
    /// A budget of `cap` steps per simulated second.
    pub(super) fn new(cap: u64) -> Self {
        EventBudget {
            cap,
            total: 0,
            second: 0,
            in_second: 0,
        }
    }

    /// Count one step at `now`, ns.
    pub(super) fn count(&mut self, now: u64) -> Result<(), SimError> {
        self.total += 1;
        let second = now / 1_000_000_000;
        if second != self.second {
            self.second = second;
            self.in_second = 0;
        }
        self.in_second += 1;
        if self.in_second > self.cap {
            return Err(SimError::EventCap {
                second,
                cap: self.cap,
            });
        }
        Ok(())
    }
}
