//! The NAPI-like receive path in the engine (the model and its constants:
//! [`crate::napi`]; a queue's state: [`NapiRx`](super::nic_rx::NapiRx)):
//! the hardIRQ that a packet raises, the softIRQ's polls on the worker's
//! core, their deferral to ksoftirqd, and the hand-off to the VM's port,
//! where the worker takes the packets as it does from the wire without
//! NAPI.

use super::events::Event;
use super::workers::WorkerState;
use super::Engine;
use crate::napi::{AfterPoll, NapiContext, NapiSpec};
use vadapt_policy::wait_protocol::Woke;

impl Engine<'_> {
    /// The scenario's NAPI constants (only called where a queue has NAPI).
    fn napi_spec(&self) -> &NapiSpec {
        self.scenario
            .host
            .napi
            .as_ref()
            .expect("a queue with NAPI has [host.napi]")
    }

    /// Move the requests that arrived by now towards queue `q`'s worker:
    /// straight to its backlog, or with NAPI into the RX ring (dropped
    /// when it is full).
    pub(super) fn pull_arrivals(&mut self, q: usize) {
        let vm = self.queues[q].vm;
        let Some(load) = &self.vms[vm].request_response else {
            return;
        };
        let queues = f64::from(self.scenario.vms[vm].queues);
        let now = self.now;
        let cap = self.scenario.host.napi.as_ref().map(|n| n.rx_ring as usize);
        let queue = &mut self.queues[q];
        let Some(rr) = queue.request_response.as_mut() else {
            return;
        };
        match (&mut queue.napi, cap) {
            (Some(napi), Some(cap)) => {
                napi.counters.dropped_ring +=
                    rr.pull_arrivals_into(load, queues, now, &mut napi.ring, cap);
            }
            _ => rr.pull_arrivals(load, queues, now),
        }
    }

    /// Arm queue `q`'s RX interrupt: it fires at the next arrival (at once
    /// if packets wait in the ring), no sooner than the moderation's gap
    /// after the last.
    pub(super) fn arm_nic_interrupt(&mut self, q: usize) {
        let now = self.now;
        let Some(spec) = &self.scenario.host.napi else {
            return;
        };
        let gap = (spec.irq_gap_us * 1e3).round() as u64;
        let next = self.queues[q]
            .request_response
            .as_ref()
            .map_or(u64::MAX, |rr| rr.next_arrival);
        let Some(napi) = self.queues[q].napi.as_mut() else {
            return;
        };
        napi.generation += 1;
        let at = if napi.ring.is_empty() { next } else { now };
        if at != u64::MAX {
            let at = napi.last_irq.map_or(at, |t| at.max(t + gap));
            self.events.push(
                at.max(now),
                Event::NicInterrupt {
                    queue: q,
                    generation: napi.generation,
                },
            );
        }
    }

    /// Queue `q`'s RX interrupt armed as `generation` fires: a hardIRQ, and
    /// the softIRQ's first poll.
    pub(super) fn nic_interrupt(&mut self, q: usize, generation: u64) {
        let stale = self.queues[q]
            .napi
            .as_ref()
            .is_none_or(|n| n.generation != generation || n.running);
        if stale {
            return;
        }
        self.pull_arrivals(q);
        if self.queues[q]
            .napi
            .as_ref()
            .is_some_and(|n| n.ring.is_empty())
        {
            // Every packet that arrived was dropped (cannot happen with an
            // empty ring), or none did: wait for the next.
            self.arm_nic_interrupt(q);
            return;
        }
        self.raise_softirq(q);
    }

    /// A hardIRQ at now: softIRQ context, its first poll after the
    /// interrupt's own cost.
    fn raise_softirq(&mut self, q: usize) {
        let irq = self.napi_spec().irq_ns.unwrap_or(self.calibration.call_ns);
        let now = self.now;
        let napi = self.queues[q].napi.as_mut().expect("napi queue");
        napi.round.interrupt(now);
        napi.last_irq = Some(now);
        napi.counters.interrupts += 1;
        self.start_poll(q, irq);
    }

    /// Start a poll of queue `q`'s RX ring, after `extra_ns` of other
    /// interrupt-context work.
    fn start_poll(&mut self, q: usize, extra_ns: f64) {
        let per_packet = self.calibration.nic_packet_ns;
        let spec = self.napi_spec().clone();
        let napi = self.queues[q].napi.as_mut().expect("napi queue");
        let n = napi.round.poll_size(&spec, napi.ring.len() as u64);
        napi.polling = n;
        napi.running = true;
        napi.work_left = extra_ns + n as f64 * per_packet;
        napi.counters.polls += 1;
    }

    /// Queue `q`'s poll has used its CPU: its packets reach the VM's port
    /// (waking the worker), then the round goes on, completes, or goes to
    /// ksoftirqd.
    pub(super) fn end_poll(&mut self, q: usize) {
        let now = self.now;
        // Arrivals during the poll met the ring as it was, the polled
        // packets' descriptors still taken.
        self.pull_arrivals(q);
        let spec = self.napi_spec().clone();
        let queue = &mut self.queues[q];
        let napi = queue.napi.as_mut().expect("napi queue");
        let rr = queue
            .request_response
            .as_mut()
            .expect("napi on an rr queue");
        let n = napi.polling;
        for _ in 0..n {
            let a = napi.ring.pop_front().expect("polled packet");
            if rr.backlog.len() < spec.socket_queue as usize {
                rr.backlog.push_back(a);
            } else {
                napi.counters.dropped_socket += 1;
            }
        }
        napi.polling = 0;
        napi.running = false;
        if n > 0
            && matches!(
                queue.worker.state,
                WorkerState::WaitingForKick | WorkerState::Sleeping
            )
        {
            // The tap wakes its reader (vhost-net: a signal, no VM exit).
            self.wake_worker(q, Woke::SIGNAL);
        }
        let need_resched = self.queues[q].worker.state == WorkerState::Waking;
        let napi = self.queues[q].napi.as_mut().expect("napi queue");
        let left = napi.ring.len() as u64;
        let next = napi.round.after_poll(&spec, n, left, now, need_resched);
        if next == AfterPoll::Defer {
            napi.counters.deferrals += 1;
        }
        match next {
            AfterPoll::Poll | AfterPoll::Defer => self.start_poll(q, 0.0),
            AfterPoll::Complete => self.arm_nic_interrupt(q),
        }
    }

    /// Cores of each group taken by softIRQ context now, and ksoftirqd
    /// threads runnable: (softIRQ cores, ksoftirqd threads).
    pub(super) fn receive_demand(&self) -> (f64, f64) {
        let (mut softirq, mut ksoftirqd) = (0.0, 0.0);
        for n in self.queues.iter().filter_map(|q| q.napi.as_ref()) {
            if n.running {
                match n.round.context {
                    NapiContext::SoftIrq => softirq += 1.0,
                    NapiContext::Ksoftirqd => ksoftirqd += 1.0,
                    NapiContext::Idle => {}
                }
            }
        }
        (softirq, ksoftirqd)
    }
}
