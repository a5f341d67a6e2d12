//! The simulation engine: fluid guests and CPU shares between discrete events.
//!
//! Between two events every rate is constant: each runnable thread runs at
//! its processor-sharing share, senders accumulate vCPU time towards their
//! next segment, workers burn down the CPU work of their current pass, and
//! the NIC drains at line rate. The next event is the earliest of: a timer on
//! the heap (sleep end, wake-up, guest resume, policy switch, sample), a
//! worker's pass completion, or a sender reaching the next ring index that
//! matters (a kick's event index, or a full ring). So the event count scales
//! with passes, kicks and stalls — not with packets.
//!
//! This file holds the [`Engine`]'s state and how it is built; its
//! behaviour is split by idea:
//!
//! * [`event_loop`]: the run loop — advance time, dispatch events, finish;
//! * [`passes`]: a worker's service pass, from its start to its report to
//!   the executor;
//! * [`waiting`]: carrying out an executor step — poll, sleep on a timer, or
//!   wait for a kick — and the kicks and timers that end a wait;
//! * [`policies`]: the timeline's policy switches;
//! * [`cpu`]: CPU shares, vCPU slices, and the control period's migrations;
//! * [`energy`]: frequencies and the energy integral;
//! * [`softirq`]: the NAPI-like receive path (`[host.napi]`);
//!
//! and its state into types of their own: [`events`], [`workers`],
//! [`queues`], [`nic_rx`], [`guests`], [`request_response`], [`core_control`],
//! [`sampling`], [`trace`].

mod core_control;
mod cpu;
mod energy;
mod error;
mod event_loop;
mod events;
mod guests;
mod nic_rx;
mod passes;
mod policies;
mod queues;
mod request_response;
mod sampling;
mod softirq;
mod trace;
mod waiting;
mod workers;

pub use error::SimError;
pub use trace::{Trace, TracedPass};

use crate::calibration::Calibration;
use crate::nic::Nic;
use crate::producer::Producer;
use crate::ring::Ring;
use crate::scenario::{Scenario, SimPolicy, VcpuSched, VmSpec, Workload};
use crate::sched::Scheduler;
use crate::vcpu_slices::Slices;
use core_control::CoreControl;
use events::{Event, EventBudget, EventQueue};
use guests::SimulatedVm;
use nic_rx::NapiRx;
use queues::{QueueCounters, SimulatedQueue};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use request_response::RequestResponseQueue;
use sampling::{ResponseLatencies, Sampler, Totals};
use vadapt_policy::fixed::FixedInterval;
use vadapt_policy::{Executor, Instant, Policy};
use workers::QueueWorker;

/// The CPU share each runnable thread gets now (processor sharing).
#[derive(Clone, Copy, Debug)]
struct CpuShares {
    /// The host's scheduler: all cores, the slice, the context switch.
    scheduler: Scheduler,
    /// CPU share of each runnable thread of the vCPU group, ≤ 1.
    vcpu: f64,
    /// CPU share of each running queue worker, ≤ 1 (`vcpu` when the groups
    /// share their cores).
    worker: f64,
}

/// Round-robin vCPU slices among senders (`host.vcpu_sched = "slices"`).
#[derive(Debug)]
struct VcpuSlicing {
    /// The rotation.
    slices: Slices,
    /// Sender threads of each queue on a core now.
    on_cpu: Vec<f64>,
    /// The part of a core a sender gets while it has one (context switches
    /// take the rest when the cores are oversubscribed).
    speed: f64,
}

/// One run of a scenario.
pub(crate) struct Engine<'s> {
    /// What to simulate.
    scenario: &'s Scenario,
    /// The costs of the model (the scenario's).
    calibration: &'s Calibration,
    /// Simulated time, ns.
    now: u64,
    /// End of the run, ns.
    end: u64,
    /// Events to come.
    events: EventQueue,
    /// Steps of the loop, and their cap per simulated second.
    event_budget: EventBudget,
    /// CPU shares of runnable threads.
    cpu: CpuShares,
    /// vCPU slices (`host.vcpu_sched = "slices"` only).
    slicing: Option<VcpuSlicing>,
    /// Core groups, their allocator and the preemption model.
    cores: CoreControl,
    /// The VMs, in scenario order.
    vms: Vec<SimulatedVm>,
    /// Every VM's queues, VM after VM.
    queues: Vec<SimulatedQueue>,
    /// The host NIC's transmit queue, shared by every worker.
    nic: Nic,
    /// Draws of timer and wake-up jitter.
    jitter_rng: SmallRng,
    /// Energy used, J (with `host.power` only).
    energy_joules: f64,
    /// Response latencies (request/response loads).
    latencies: ResponseLatencies,
    /// The time series.
    sampler: Sampler,
    /// The executor calls of one queue, when tracing (see [`Trace`]).
    trace: Option<Trace>,
}

/// Round a time in ns up to a whole ns, at least 0.
fn ns(x: f64) -> u64 {
    x.max(0.0).ceil() as u64
}

/// Build the policy `p` names.
fn build_policy(p: &SimPolicy) -> Result<Box<dyn Policy>, SimError> {
    match p {
        SimPolicy::Policy(c) => c.build().map_err(|e| SimError::BuildPolicy {
            policy: p.label(),
            reason: e.to_string(),
        }),
        SimPolicy::FixedInterval { interval_us } => Ok(Box::new(FixedInterval::new(*interval_us))),
    }
}

impl<'s> Engine<'s> {
    /// The engine of `scenario` with `seed`, at time 0: every worker has
    /// started the timeline's first policy, and the periodic events are
    /// scheduled.
    pub(crate) fn new(scenario: &'s Scenario, seed: u64) -> Result<Engine<'s>, SimError> {
        let vms = scenario.vms.iter().map(simulated_vm).collect();
        let queues = simulated_queues(scenario, seed)?;
        let mut engine = Engine::at_start(scenario, seed, vms, queues);
        engine.sampler.at_last_sample = engine.totals();
        engine.schedule_timeline_and_periods();
        Ok(engine)
    }

    /// The engine at time 0 over `vms` and `queues`, nothing scheduled yet.
    fn at_start(
        scenario: &'s Scenario,
        seed: u64,
        vms: Vec<SimulatedVm>,
        queues: Vec<SimulatedQueue>,
    ) -> Self {
        let calibration = &scenario.calibration;
        let host = &scenario.host;
        let slicing = (host.vcpu_sched == VcpuSched::Slices).then(|| VcpuSlicing {
            slices: Slices::default(),
            on_cpu: vec![0.0; queues.len()],
            speed: 1.0,
        });
        Engine {
            scenario,
            calibration,
            now: 0,
            end: scenario.duration.as_nanos(),
            events: EventQueue::default(),
            event_budget: EventBudget::new(scenario.max_events_per_sim_s),
            cpu: CpuShares {
                scheduler: Scheduler {
                    cores: f64::from(host.cores),
                    slice_ns: host.sched_slice.as_nanos() as f64,
                    context_switch_ns: calibration.context_switch_ns,
                },
                vcpu: 1.0,
                worker: 1.0,
            },
            slicing,
            cores: CoreControl::new(
                host.core_mgmt,
                host.cores,
                calibration.wakeup_cpu_ns + calibration.context_switch_ns,
                seed,
            ),
            vms,
            queues,
            nic: Nic::new(
                host.line_rate_bps,
                host.nic_queue_packets,
                scenario.vms.len(),
            ),
            jitter_rng: SmallRng::seed_from_u64(seed),
            energy_joules: 0.0,
            latencies: ResponseLatencies::new(scenario.periods.len()),
            sampler: Sampler::default(),
            trace: None,
        }
    }

    /// Schedule the timeline's policy switches, the first sample and (with
    /// request/response loads or a dynamic allocator) the first control
    /// period.
    fn schedule_timeline_and_periods(&mut self) {
        let sc = self.scenario;
        for (i, t) in sc.timeline.iter().enumerate().skip(1) {
            self.events
                .push(t.at.as_nanos(), Event::PolicySwitch { index: i });
        }
        self.events.push(sc.sample.as_nanos(), Event::Sample);
        let rr_any = self.vms.iter().any(|v| v.request_response.is_some());
        if rr_any || self.cores.allocator.is_dynamic() {
            self.events
                .push(sc.host.core_mgmt.period.as_nanos(), Event::ControlPeriod);
        }
    }

    /// The running totals a sample differences, now.
    fn totals(&self) -> Totals {
        Totals::take(
            self.now,
            &self.nic.sent_payload,
            &self.queues,
            &self.vms,
            self.energy_joules,
            self.latencies.served,
        )
    }

    /// `x` ns with the calibration's ± `jitter` noise, rounded up.
    fn jitter(&mut self, x: f64) -> u64 {
        let j = self.calibration.jitter;
        if j == 0.0 {
            return ns(x);
        }
        ns(x * self.jitter_rng.gen_range(1.0 - j..=1.0 + j))
    }

    /// Record the executor calls of `trace.queue` while running.
    pub(crate) fn with_trace(mut self, trace: Trace) -> Self {
        self.trace = Some(trace);
        self
    }
}

/// A VM at time 0: idle, with its request/response servers free.
fn simulated_vm(vm: &VmSpec) -> SimulatedVm {
    match &vm.workload {
        Workload::Rr(r) => SimulatedVm::new(Some(r.clone()), r.server_threads as usize),
        Workload::Stream(_) => SimulatedVm::new(None, 0),
    }
}

/// Every VM's queues at time 0, VM after VM, each worker started on the
/// timeline's first policy.
fn simulated_queues(scenario: &Scenario, seed: u64) -> Result<Vec<SimulatedQueue>, SimError> {
    let first = &scenario.timeline[0].policy;
    // Workers start at the top frequency.
    let top_freq = scenario
        .host
        .power
        .as_ref()
        .map_or(0, |p| p.freqs_mhz.len() - 1);
    let mut queues = Vec::new();
    for (vm_index, vm) in scenario.vms.iter().enumerate() {
        for _ in 0..vm.queues {
            let queue_number = queues.len() as u64;
            let executor = Executor::start(build_policy(first)?, Instant(0)).0;
            let (senders, request_response) = match &vm.workload {
                Workload::Stream(s) => {
                    // Spread threads (and the vCPUs that run them) over the queues.
                    let runnable = f64::from(s.threads.min(vm.vcpus)) / f64::from(vm.queues);
                    (Some(Producer::new(s, runnable)), None)
                }
                Workload::Rr(r) => (
                    None,
                    Some(RequestResponseQueue::new(r, vm.queues, seed, queue_number)),
                ),
            };
            queues.push(SimulatedQueue {
                vm: vm_index,
                ring: Ring::new(vm.ring_size),
                senders,
                napi: (scenario.host.napi.is_some() && request_response.is_some())
                    .then(NapiRx::new),
                request_response,
                worker: QueueWorker::new(executor, first.label(), top_freq),
                counters: QueueCounters::default(),
            });
        }
    }
    Ok(queues)
}
