//! A queue worker's service pass: what it takes from the ring (within the
//! step's budget and the NIC's room), the CPU work that costs, and at its
//! end what it hands on — chains used, packets to the NIC, requests to the
//! guest's servers — and its report to the executor.

use super::events::Event;
use super::request_response::sample_service;
use super::trace::TracedPass;
use super::workers::{PassInProgress, WorkerState};
use super::{ns, Engine};
use std::cmp::Reverse;
use vadapt_policy::{Instant, PassStats, WakeCause};

impl Engine<'_> {
    /// Start a pass of queue `q`'s worker, after a wait that `cause` ended
    /// and that lasted `waited` ns; `woke` says whether the worker was
    /// asleep (a wake-up costs CPU). A full NIC queue blocks the worker
    /// until it has room.
    pub(super) fn start_pass(&mut self, q: usize, cause: WakeCause, waited: u64, woke: bool) {
        let now = self.now;
        let vm = self.queues[q].vm;
        self.queues[q].ring.disable_kick();
        let budget = self.queues[q].worker.executor.step().budget;
        let size = self.queues[q].ring.size();
        let pending = self.queues[q].ring.pending();
        let fill_permille = (pending * 1000 / size).min(1000) as u16;
        let nic_free = self.nic.free_packets();
        if nic_free == 0 && (pending > 0 || self.queues[q].request_response.is_some()) {
            // Like vhost-net waiting for its socket to become writable: the
            // worker blocks until the link has drained a batch.
            let t = now + ns(self.nic.time_to_room()).max(1);
            let w = &mut self.queues[q].worker;
            let generation = w.begin_waking();
            w.pass.wake = Some(cause);
            w.pass.waited = waited;
            self.events.push(
                t,
                Event::NicRoom {
                    queue: q,
                    generation,
                    woke,
                },
            );
            return;
        }
        let mut info = PassInProgress {
            wake: Some(cause),
            waited,
            fill_permille,
            ..PassInProgress::default()
        };
        let mut per_byte_bytes = 0u64;
        // A pass that hands a request-response guest its requests ends with a
        // call, whose host side (`call_host_ns`) is the worker's.
        let mut calls_guest = false;
        let queue = &mut self.queues[q];
        if let Some(p) = &mut queue.senders {
            let by_bytes = p.chains_within(budget.bytes);
            let n = queue
                .ring
                .take(u64::from(budget.packets).min(nic_free).min(by_bytes));
            info.tx = n;
            (info.bytes, info.payload) = p.take(n);
            per_byte_bytes = info.bytes;
            info.more_work = queue.ring.pending() > 0;
        }
        self.pull_arrivals(q);
        if let (Some(rr), Some(load)) = (
            &mut self.queues[q].request_response,
            &self.vms[vm].request_response,
        ) {
            let rx = (rr.backlog.len() as u64).min(u64::from(budget.packets));
            let ready = rr.ready_responses(now);
            let tx = ready.min(u64::from(budget.packets)).min(nic_free);
            info.rx = rx;
            info.tx = tx;
            calls_guest = rx > 0;
            info.bytes = rx * u64::from(load.request_bytes) + tx * u64::from(load.response_bytes);
            info.payload = info.bytes;
            per_byte_bytes = info.bytes;
            info.more_work = rr.backlog.len() as u64 > rx || ready > tx;
            info.fill_permille = (ready * 1000 / size).min(1000) as u16;
        }
        let c = self.calibration;
        // With NAPI the softIRQ has done the received packets' hand-off
        // from the NIC (`nic_packet_ns`).
        let rx_nic_ns = if self.queues[q].napi.is_some() {
            0.0
        } else {
            c.nic_packet_ns
        };
        let mut work = c.pass_overhead_ns
            + info.tx as f64 * (c.per_packet_ns + c.nic_packet_ns)
            + info.rx as f64 * (c.per_packet_ns + rx_nic_ns)
            + per_byte_bytes as f64 * c.per_byte_ps / 1000.0;
        if calls_guest && c.call_host_ns > 0.0 {
            work += c.call_host_ns;
        }
        if woke {
            work += c.wakeup_cpu_ns + c.context_switch_ns;
            self.queues[q].counters.wakeups += 1;
        }
        let w = &mut self.queues[q].worker;
        w.state = WorkerState::Running;
        w.work_left = work;
        w.pass = info;
    }

    /// The pass of queue `q`'s worker has used its CPU work: hand on what it
    /// moved, report it to the executor, and carry out the step it answers
    /// (or install a policy switch that waited for the pass).
    pub(super) fn end_pass(&mut self, q: usize) {
        let now = self.now;
        let vm = self.queues[q].vm;
        let info = self.queues[q].worker.pass;
        let counters = &mut self.queues[q].counters;
        counters.passes += 1;
        counters.packets += info.tx + info.rx;
        counters.payload += info.payload;
        if self.queues[q].senders.is_some() {
            self.nic.enqueue(vm, info.tx, info.bytes, info.payload);
            if self.queues[q].ring.complete(info.tx) {
                self.queues[q].counters.calls += 1;
                let lat = self.jitter(self.calibration.wake_latency_ns);
                self.events.push(now + lat, Event::GuestResume { queue: q });
            }
        }
        if self.queues[q].request_response.is_some() {
            self.end_request_response_pass(q, info);
        }
        let executor = &mut self.queues[q].worker.executor;
        let (wake, waited) = (
            info.wake.unwrap_or(WakeCause::Immediate),
            vadapt_policy::Duration(info.waited),
        );
        let stats = PassStats {
            packets: info.tx + info.rx,
            bytes: info.bytes,
            more_work: info.more_work,
            max_fill_permille: info.fill_permille,
        };
        executor.woke(wake, waited);
        let mut step = executor.served(Instant(now), stats);
        let settled = executor.status().settled;
        if let Some(t) = self.trace.as_mut() {
            t.record(
                q,
                TracedPass {
                    now: Instant(now),
                    wake,
                    waited,
                    stats,
                    step,
                },
            );
        }
        let w = &mut self.queues[q].worker;
        if settled && w.settled_at.is_none() {
            w.settled_at = Some(now);
        }
        if let Some(p) = w.pending_policy.take() {
            step = self.install_policy(q, p);
        }
        self.carry_out(q, step);
    }

    /// The request/response side of a pass's end: responses leave through
    /// the NIC (their latencies recorded), requests reach the guest's
    /// server threads.
    fn end_request_response_pass(&mut self, q: usize, info: PassInProgress) {
        let now = self.now;
        let vm = self.queues[q].vm;
        let load = self.vms[vm].request_response.clone().expect("rr vm");
        // Responses leave through the NIC.
        let rr = self.queues[q].request_response.as_mut().expect("rr queue");
        let mut arrivals = Vec::with_capacity(info.tx as usize);
        for _ in 0..info.tx {
            let Reverse((_, a)) = rr.responses.pop().expect("ready response");
            arrivals.push(a);
        }
        let delivered: Vec<u64> = rr.backlog.drain(..info.rx as usize).collect();
        let resp = u64::from(load.response_bytes);
        let done = self
            .nic
            .enqueue(vm, info.tx, info.tx * resp, info.tx * resp);
        let depart = now + ns(done);
        for a in arrivals {
            self.latencies.record(self.scenario, a, depart);
        }
        if delivered.is_empty() {
            return;
        }
        // Requests reach the guest: one call for the batch, then the server
        // threads take them in arrival order.
        self.queues[q].counters.calls += 1;
        let start_at = now + ns(self.calibration.call_ns);
        let share = self.cpu.vcpu;
        for a in delivered {
            let rng = &mut self.queues[q].request_response.as_mut().expect("rr").rng;
            let s = sample_service(rng, &load);
            let run = s / share;
            let delay = self.preemption_delay(run);
            let servers = &mut self.vms[vm].servers;
            let (idx, free) = servers
                .iter()
                .enumerate()
                .min_by_key(|(_, &f)| f)
                .map(|(i, &f)| (i, f))
                .expect("at least one server");
            let start = free.max(start_at);
            let finish = start + ns(run + delay);
            servers[idx] = finish;
            if finish > start + ns(run) {
                self.vms[vm].gaps[idx].push_back((start + ns(run), finish));
            }
            self.queues[q]
                .request_response
                .as_mut()
                .expect("rr")
                .responses
                .push(Reverse((finish, a)));
        }
    }
}
