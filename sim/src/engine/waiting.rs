//! How a queue worker waits: carrying out an executor step (poll, sleep on a
//! timer, or wait for a kick), and what ends a wait — a timer, a guest's
//! kick, a signal from the host port.
//!
//! This is the simulator's side of what the daemon's `vmport/queues.rs`
//! does with real rings and timers: the wait-for-kick protocol (enable
//! notifications, re-check the ring, disable them again) is in
//! [`Engine::wait_for_kick`], a step's deadline (the executor's [`Wake`])
//! becoming a timer event in [`Engine::arm_timer`].

use super::events::Event;
use super::workers::WorkerState;
use super::Engine;
use vadapt_policy::{kick_fill, FreqHint, Instant, Step, Wake, WakeCause};

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
        match step.wake {
            Wake::Now => self.start_pass(q, WakeCause::Immediate, 0, false),
            Wake::At { at, kick_threshold } => {
                let size = self.queues[q].ring.size();
                match kick_threshold {
                    Some(p) => {
                        let size = u16::try_from(size).unwrap_or(u16::MAX);
                        self.queues[q]
                            .ring
                            .enable_kick_at_fill(u64::from(kick_fill(p, size)))
                    }
                    None => self.queues[q].ring.disable_kick(),
                }
                let generation = self.queues[q]
                    .worker
                    .begin_wait(WorkerState::Sleeping, self.now);
                self.arm_timer(q, at, generation);
            }
            Wake::Kick { until } => self.wait_for_kick(q, until),
        }
    }

    /// The wait-for-kick protocol: enable kicks, re-check the ring (work
    /// that came before the kicks were enabled would never kick), and
    /// either start a pass at once or wait — for a kick, a request or
    /// response (request/response loads), or `until`.
    fn wait_for_kick(&mut self, q: usize, until: Instant) {
        self.queues[q].ring.enable_kick();
        if self.has_work(q) {
            self.queues[q].ring.disable_kick();
            self.start_pass(q, WakeCause::Recheck, 0, false);
            return;
        }
        let generation = self.queues[q]
            .worker
            .begin_wait(WorkerState::WaitingForKick, self.now);
        self.arm_timer(q, until, generation);
        if let Some(rr) = &self.queues[q].request_response {
            let rx = rr.next_arrival;
            let tx = rr.first_response_at();
            if rx != u64::MAX {
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

    /// Whether queue `q` has work: chains pending, requests arrived or
    /// responses ready.
    fn has_work(&mut self, q: usize) -> bool {
        let now = self.now;
        let vm = self.queues[q].vm;
        if self.queues[q].ring.pending() > 0 {
            return true;
        }
        if let (Some(rr), Some(load)) = (
            &mut self.queues[q].request_response,
            &self.vms[vm].request_response,
        ) {
            let queues = f64::from(self.scenario.vms[vm].queues);
            rr.pull_arrivals(load, queues, now);
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
        if w.generation != generation {
            return;
        }
        let cause = match w.state {
            WorkerState::Sleeping => WakeCause::Timer,
            WorkerState::WaitingForKick => WakeCause::Timeout,
            _ => return,
        };
        let waited = self.now - w.wait_start;
        self.queues[q].ring.disable_kick();
        self.start_pass(q, cause, waited, true);
    }

    /// Queue `q`'s worker, woken by a kick or a signal, runs.
    pub(super) fn wake_fired(&mut self, q: usize, generation: u64) {
        let w = &self.queues[q].worker;
        if w.generation != generation || w.state != WorkerState::Waking {
            return;
        }
        let waited = self.now - w.wait_start;
        self.start_pass(q, WakeCause::Kick, waited, true);
    }

    /// Wake queue `q`'s worker: it runs after the wake-up latency.
    fn wake_worker(&mut self, q: usize) {
        let lat = self.jitter(self.calibration.wake_latency_ns);
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
            WorkerState::WaitingForKick | WorkerState::Sleeping => self.wake_worker(q),
            WorkerState::Running | WorkerState::Waking => {}
        }
    }

    /// A request reached queue `q` while its worker waits for a kick (wait
    /// `generation`): the host port signals the worker, a wake-up without a
    /// VM exit.
    pub(super) fn request_arrived(&mut self, q: usize, generation: u64) {
        if self.still_waiting_for_kick(q, generation) {
            self.wake_worker(q);
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
