//! The run loop: jump to the next event, let time pass until it, end the
//! passes that completed, dispatch the events that are due, and finish with
//! the result.

use super::events::Event;
use super::sampling::worker_summaries;
use super::workers::WorkerState;
use super::{ns, Engine, SimError, Trace};
use crate::cores::CoreEvents;
use crate::napi::NapiTotals;
use crate::result::SimResult;
use vadapt_policy::WakeCause;

impl Engine<'_> {
    /// Run, and return the trace asked for with [`Engine::with_trace`].
    pub(crate) fn run_traced(mut self) -> Result<(SimResult, Option<Trace>), SimError> {
        if let Some(t) = self.trace.as_mut() {
            t.first = self.queues.get(t.queue).map(|q| q.worker.executor.step());
        }
        let mut out = None;
        let r = self.run_to_end(&mut out)?;
        Ok((r, out))
    }

    /// Run to the scenario's end.
    pub(crate) fn run(self) -> Result<SimResult, SimError> {
        let mut out = None;
        self.run_to_end(&mut out)
    }

    fn run_to_end(mut self, trace_out: &mut Option<Trace>) -> Result<SimResult, SimError> {
        let first = self.scenario.timeline[0].policy;
        for q in 0..self.queues.len() {
            // Started at 0 when the worker was built: carry out its first step.
            let step = self.queues[q].worker.executor.step();
            self.queues[q].worker.policy_label = first.label();
            self.carry_out(q, step);
            self.arm_nic_interrupt(q);
        }
        self.update_shares();
        loop {
            let t = self
                .next_internal_event()
                .min(self.events.next_time())
                .min(self.end);
            self.advance_to(t);
            if self.now >= self.end {
                break;
            }
            // Receive polls (NAPI) and passes that completed, in queue
            // order (deterministic).
            for q in 0..self.queues.len() {
                if self.queues[q]
                    .napi
                    .as_ref()
                    .is_some_and(|n| n.running && n.work_left <= 1e-6)
                {
                    self.end_poll(q);
                }
            }
            for q in 0..self.queues.len() {
                let w = &self.queues[q].worker;
                if w.state == WorkerState::Running && w.work_left <= 1e-6 {
                    self.end_pass(q);
                }
            }
            while let Some(event) = self.events.pop_due(self.now) {
                self.dispatch(event);
            }
            self.update_shares();
            self.event_budget.count(self.now)?;
        }
        *trace_out = self.trace.take();
        Ok(self.finish())
    }

    /// Earliest pass completion or sender threshold, ns (absolute): the
    /// events the fluid model makes, not on the heap.
    fn next_internal_event(&self) -> u64 {
        let mut t = u64::MAX;
        for (i, q) in self.queues.iter().enumerate() {
            let ff = self.freq_factor(q.worker.freq_index);
            if q.worker.state == WorkerState::Running && self.cpu.worker > 0.0 {
                let rate = self.cpu.worker * ff;
                t = t.min(self.now + ns(q.worker.work_left / rate).max(1));
            }
            if let Some(n) = &q.napi {
                // The softIRQ runs on the worker's core, at its frequency.
                let rate = n.cpu_rate(self.cpu.worker) * ff;
                if rate > 0.0 {
                    t = t.min(self.now + ns(n.work_left / rate).max(1));
                }
            }
            if let Some(p) = &q.senders {
                if p.stalled {
                    continue;
                }
                let rate = self.sender_rate(i);
                if rate <= 0.0 {
                    continue;
                }
                // Segments to the next index that matters: ring full, or a kick.
                let mut k = q.ring.free().max(1);
                if let Some(u) = q.ring.posts_until_kick() {
                    k = k.min(u);
                }
                let need = p.cpu_to_next(k);
                t = t.min(self.now + ns(need / rate).max(1));
            }
        }
        t
    }

    /// Let time pass until `t`, every rate constant: energy, the NIC's
    /// drain, workers' CPU work, senders' progress, servers' vCPU time; then
    /// post what senders finished.
    fn advance_to(&mut self, t: u64) {
        let dt = (t - self.now) as f64;
        self.now = t;
        if dt > 0.0 {
            self.account_energy(dt);
            if self.scenario.host.core_mgmt.be_vm {
                self.cores.events.be_core_s +=
                    f64::from(self.cores.allocator.groups.be_cores) * dt / 1e9;
            }
            self.nic.advance(dt);
            for q in 0..self.queues.len() {
                let ff = self.freq_factor(self.queues[q].worker.freq_index);
                let worker_share = self.cpu.worker;
                let w = &mut self.queues[q].worker;
                if w.state == WorkerState::Running {
                    w.work_left -= worker_share * ff * dt;
                    w.busy_ns += worker_share * dt;
                }
                if let Some(n) = &mut self.queues[q].napi {
                    let rate = n.cpu_rate(worker_share);
                    n.work_left -= rate * ff * dt;
                    n.busy_ns += rate * dt;
                }
                let vm = self.queues[q].vm;
                let rate = self.sender_rate(q);
                if let Some(p) = &mut self.queues[q].senders {
                    if !p.stalled {
                        let mut cpu = rate * dt;
                        self.vms[vm].guest_busy += cpu;
                        let paid = cpu.min(p.debt);
                        p.debt -= paid;
                        cpu -= paid;
                        p.progress += cpu;
                    }
                }
            }
            for v in &mut self.vms {
                let busy = v.running(t, true);
                v.guest_busy += busy * self.cpu.vcpu * dt;
            }
        }
        for v in &mut self.vms {
            v.drop_gaps_before(t);
        }
        for q in 0..self.queues.len() {
            self.post_finished_segments(q);
        }
    }

    /// Carry out what `event` says.
    fn dispatch(&mut self, event: Event) {
        match event {
            Event::Timer { queue, generation } => self.timer_fired(queue, generation),
            Event::Wake { queue, generation } => self.wake_fired(queue, generation),
            Event::NicRoom {
                queue,
                generation,
                woke,
            } => {
                let w = &self.queues[queue].worker;
                if w.generation != generation || w.state != WorkerState::Waking {
                    return;
                }
                let (cause, waited) = (w.pass.wake.unwrap_or(WakeCause::Immediate), w.pass.waited);
                self.start_pass(queue, cause, waited, woke);
            }
            Event::GuestResume { queue } => self.restart_stopped_queue(queue),
            Event::RequestArrives { queue, generation } => self.request_arrived(queue, generation),
            Event::ResponsePosted { queue, generation } => self.response_posted(queue, generation),
            Event::NicInterrupt { queue, generation } => self.nic_interrupt(queue, generation),
            Event::PolicySwitch { index } => self.switch_policy(index),
            Event::Sample => {
                self.sample();
                self.events
                    .push(self.now + self.scenario.sample.as_nanos(), Event::Sample);
            }
            Event::SliceEnd { generation } => {
                if let Some(s) = self.slicing.as_mut() {
                    s.slices.fire(generation);
                }
            }
            Event::ControlPeriod => {
                self.end_control_period();
                self.events.push(
                    self.now + self.scenario.host.core_mgmt.period.as_nanos(),
                    Event::ControlPeriod,
                );
            }
        }
    }

    /// Take a time-series sample of the window since the last one.
    fn sample(&mut self) {
        let totals = self.totals();
        self.sampler.record(
            totals,
            &self.queues,
            &self.vms,
            self.scenario,
            &mut self.latencies,
        );
    }

    /// The last sample, and the result.
    fn finish(mut self) -> SimResult {
        if self.sampler.at_last_sample.t < self.now {
            self.sample();
        }
        let workers = worker_summaries(&self.queues, self.scenario);
        SimResult::assemble(
            self.scenario,
            self.sampler.samples,
            workers,
            self.event_budget.total,
            self.energy_joules,
            self.latencies.per_period,
        )
        .with_core_events(CoreEvents {
            explorer: self.cores.allocator.explorer_state(),
            ..self.cores.events
        })
        .with_napi(
            self.queues
                .iter()
                .filter_map(|q| q.napi.as_ref().map(|n| n.totals()))
                .reduce(NapiTotals::plus),
        )
    }
}
