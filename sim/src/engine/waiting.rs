//! How a queue worker waits: carrying out an executor step (poll, sleep on a
//! timer, or wait for a kick), and what ends a wait — a timer, a guest's
//! kick, a signal from the host port.
//!
//! The protocol itself — enable notifications, re-check the ring, arm a
//! kick threshold, classify what ended a wait, disable notifications again —
//! is the policy crate's [`wait_protocol`], which the daemon's
//! `port/port_queues.rs` follows with real rings and timers. This is the
//! simulator's side of it: the modelled ring as its [`Notifications`]
//! ([`QueueRing`]), a wait's deadline (the executor's
//! [`Wake`](vadapt_policy::Wake)) becoming a timer event in
//! [`Engine::arm_timer`], kicks and signals becoming wake-up events.

use super::events::Event;
use super::workers::WorkerState;
use super::Engine;
use vadapt_policy::wait_protocol::{self, Begun, KickThreshold, Notifications, WaitKind, Woke};
use vadapt_policy::{FreqHint, Instant, Step, WakeCause};

/// Queue `q`'s modelled ring as the wait protocol drives it.
struct QueueRing<'a, 'e> {
    engine: &'a mut Engine<'e>,
    q: usize,
}

impl Notifications for QueueRing<'_, '_> {
    /// The modelled ring sees no work while enabling: [`Engine::has_work`]
    /// looks.
    fn enable_kicks(&mut self) -> bool {
        self.engine.queues[self.q].ring.enable_kick();
        false
    }

    fn has_work(&mut self) -> bool {
        self.engine.has_work(self.q)
    }

    fn disable_kicks(&mut self) {
        self.engine.queues[self.q].ring.disable_kick();
    }

    /// Always armed: the modelled ring has EVENT_IDX.
    fn arm_kick_threshold(&mut self, threshold: KickThreshold) -> bool {
        let ring = &mut self.engine.queues[self.q].ring;
        let size = u16::try_from(ring.size()).unwrap_or(u16::MAX);
        ring.enable_kick_at_fill(u64::from(threshold.descriptors(size)));
        true
    }

    fn disarm_kick_threshold(&mut self) {
        self.engine.queues[self.q].ring.disable_kick();
    }
}

impl Engine<'_> {
    /// Carry out `step` for queue `q`'s worker: the frequency change and
    /// the wait (the pass follows).
    pub(super) fn carry_out(&mut self, q: usize, step: Step) {
        if let (Some(p), Some(f)) = (&self.scenario.host.power, step.freq) {
            let top = p.freqs_mhz.len() - 1;
            match f {
                FreqHint::Keep => {}
                FreqHint::Min => self.queues[q].worker.freq_index = 0,
                FreqHint::Max => self.queues[q].worker.freq_index = top,
            }
        }
        let begun = wait_protocol::begin_wait(step.wake, &mut QueueRing { engine: self, q });
        match begun {
            Begun::Ready { kind, cause } => {
                wait_protocol::end_wait(kind, &mut QueueRing { engine: self, q });
                self.start_pass(q, cause, 0, false);
            }
            Begun::Blocked {
                kind: kind @ WaitKind::Sleep { .. },
                until,
            } => {
                let generation =
                    self.queues[q]
                        .worker
                        .begin_wait(WorkerState::Sleeping, kind, self.now);
                self.arm_timer(q, until, generation);
            }
            Begun::Blocked { kind, until } => self.wait_for_kick(q, kind, until),
        }
    }

    /// Wait (`kind`, kicks enabled, the ring re-checked) for a kick, a
    /// request or response (request/response loads), or `until`.
    fn wait_for_kick(&mut self, q: usize, kind: WaitKind, until: Instant) {
        let generation =
            self.queues[q]
                .worker
                .begin_wait(WorkerState::WaitingForKick, kind, self.now);
        self.arm_timer(q, until, generation);
        if let Some(rr) = &self.queues[q].request_response {
            let rx = rr.next_arrival;
            let tx = rr.first_response_at();
            // With NAPI, requests reach the worker through the softIRQ,
            // which signals it (`end_poll`).
            if rx != u64::MAX && self.queues[q].napi.is_none() {
                self.events.push(
                    rx.max(self.now),
                    Event::RequestArrives {
                        queue: q,
                        generation,
                    },
                );
            }
            if let Some(t) = tx {
                self.events.push(
                    t.max(self.now),
                    Event::ResponsePosted {
                        queue: q,
                        generation,
                    },
                );
            }
        }
    }

    /// Arm queue `q`'s timer to fire at `deadline` (not before now), late
    /// by the timer slack (`timer_overshoot_ns`, jittered), for the wait
    /// `generation`.
    fn arm_timer(&mut self, q: usize, deadline: Instant, generation: u64) {
        let at = deadline.0.max(self.now) + self.jitter(self.calibration.timer_overshoot_ns);
        self.events.push(
            at,
            Event::Timer {
                queue: q,
                generation,
            },
        );
    }

    /// Whether queue `q` has work: chains pending, requests arrived (with
    /// NAPI: handed on by the softIRQ) or responses ready.
    fn has_work(&mut self, q: usize) -> bool {
        let now = self.now;
        if self.queues[q].ring.pending() > 0 {
            return true;
        }
        self.pull_arrivals(q);
        if let Some(rr) = &self.queues[q].request_response {
            return !rr.backlog.is_empty() || rr.first_response_at().is_some_and(|t| t <= now);
        }
        false
    }

    /// End queue `q`'s wait without a pass (a policy switch): events of the
    /// wait become stale, kicks are off.
    pub(super) fn cancel_wait(&mut self, q: usize) {
        self.queues[q].worker.generation += 1;
        self.queues[q].ring.disable_kick();
    }

    /// The timer of wait `generation` of queue `q` fired: a sleep ended, or
    /// a wait for a kick timed out.
    pub(super) fn timer_fired(&mut self, q: usize, generation: u64) {
        let w = &self.queues[q].worker;
        if w.generation != generation
            || !matches!(w.state, WorkerState::Sleeping | WorkerState::WaitingForKick)
        {
            return;
        }
        let (kind, waited) = (w.wait, self.now - w.wait_start);
        let Some(cause) = kind.cause(Woke::TIMER) else {
            return;
        };
        wait_protocol::end_wait(kind, &mut QueueRing { engine: self, q });
        self.start_pass(q, cause, waited, true);
    }

    /// Queue `q`'s worker, woken by a kick or a signal, runs.
    pub(super) fn wake_fired(&mut self, q: usize, generation: u64) {
        let w = &self.queues[q].worker;
        if w.generation != generation || w.state != WorkerState::Waking {
            return;
        }
        let (kind, waited) = (w.wait, self.now - w.wait_start);
        let cause = w.pass.wake.unwrap_or(WakeCause::Kick);
        wait_protocol::end_wait(kind, &mut QueueRing { engine: self, q });
        self.start_pass(q, cause, waited, true);
    }

    /// Wake queue `q`'s worker if `woke` ends its wait: it runs after the
    /// wake-up latency.
    pub(super) fn wake_worker(&mut self, q: usize, woke: Woke) {
        let Some(cause) = self.queues[q].worker.wait.cause(woke) else {
            return;
        };
        let idle_ns = self.now.saturating_sub(self.queues[q].worker.wait_start) as f64;
        let lat = self.jitter(self.calibration.wake_latency_ns) + self.cstate_exit_ns(idle_ns);
        self.queues[q].worker.pass.wake = Some(cause);
        let generation = self.queues[q].worker.begin_waking();
        self.events.push(
            self.now + lat,
            Event::Wake {
                queue: q,
                generation,
            },
        );
    }

    /// The guest kicked queue `q`: VM exit on its vCPU, wake the worker.
    pub(super) fn kick(&mut self, q: usize) {
        self.queues[q].counters.kicks += 1;
        let kick_ns = self.calibration.kick_ns;
        if let Some(p) = &mut self.queues[q].senders {
            p.debt += kick_ns;
        } else {
            let vm = self.queues[q].vm;
            self.vms[vm].guest_busy += kick_ns;
        }
        self.queues[q].ring.disable_kick();
        match self.queues[q].worker.state {
            WorkerState::WaitingForKick | WorkerState::Sleeping => self.wake_worker(q, Woke::KICK),
            WorkerState::Running | WorkerState::Waking => {}
        }
    }

    /// A request reached queue `q` while its worker waits for a kick (wait
    /// `generation`): the host port signals the worker, a wake-up without a
    /// VM exit.
    pub(super) fn request_arrived(&mut self, q: usize, generation: u64) {
        if self.still_waiting_for_kick(q, generation) {
            self.wake_worker(q, Woke::SIGNAL);
        }
    }

    /// The guest posted a response to queue `q` while its worker waits for a
    /// kick (wait `generation`), and kicked.
    pub(super) fn response_posted(&mut self, q: usize, generation: u64) {
        if self.still_waiting_for_kick(q, generation) {
            self.kick(q);
        }
    }

    /// Whether queue `q`'s worker is still in wait `generation`, waiting
    /// for a kick: an event scheduled for an older wait is stale.
    fn still_waiting_for_kick(&self, q: usize, generation: u64) -> bool {
        let w = &self.queues[q].worker;
        w.generation == generation && w.state == WorkerState::WaitingForKick
    }

    /// Post the segments queue `q`'s senders have finished, and kick if the
    /// ring asks for it.
    pub(super) fn post_finished_segments(&mut self, q: usize) {
        if self.queues[q].post_finished_segments() {
            self.kick(q);
        }
    }

    /// The TX call restarts queue `q`'s stopped senders (kicking if the
    /// ring asks for it), which then post what they have finished.
    pub(super) fn restart_stopped_queue(&mut self, q: usize) {
        if self.queues[q].restart_stopped_queue(self.calibration.call_ns) {
            self.kick(q);
        }
        self.post_finished_segments(q);
    }
}
