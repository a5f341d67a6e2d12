//! The event loop: fluid guests and CPU shares between discrete events.
//!
//! Between two events every rate is constant: each runnable thread runs at
//! its processor-sharing share, senders accumulate vCPU time towards their
//! next segment, workers burn down the CPU work of their current pass, and
//! the NIC drains at line rate. The next event is the earliest of: a timer on
//! the heap (sleep end, wake-up, guest resume, policy switch, sample), a
//! worker's pass completion, or a sender reaching the next ring index that
//! matters (a kick's event index, or a full ring). So the event count scales
//! with passes, kicks and stalls — not with packets.

use crate::calibration::Calibration;
use crate::cores::{Allocator, CoreEvents, Measured};
use crate::nic::Nic;
use crate::producer::Producer;
use crate::result::{LatHist, Sample, SimResult, WorkerSummary};
use crate::ring::Ring;
use crate::scenario::{RrLoad, Scenario, ServiceDist, SimPolicy, VcpuSched, Workload};
use crate::sched::Scheduler;
use crate::vcpu_slices::Slices;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use vadapt_policy::fixed::FixedInterval;
use vadapt_policy::{
    kick_fill, Action, Executor, FreqHint, Instant, PassStats, Policy, Step, WakeCause,
};

/// The simulation could not run to its end.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SimError {
    /// More events than allowed happened within one simulated second: the
    /// scenario (or a policy) makes the model spin.
    #[error(
        "event cap hit: more than {cap} events in simulated second {second} \
         (max_events_per_sim_s; a policy polling an idle ring without sleeping does this)"
    )]
    EventCap {
        /// The simulated second, counted from 0.
        second: u64,
        /// The cap.
        cap: u64,
    },
    /// A policy could not be built.
    #[error("policy `{policy}` could not be built: {reason}")]
    BuildPolicy {
        /// Policy label.
        policy: String,
        /// Why.
        reason: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Sleep end or WaitKick timeout of worker `q`, valid for generation `gen`.
    Timer { q: usize, gen: u64 },
    /// A kicked worker becomes runnable.
    Wake { q: usize, gen: u64 },
    /// A called (halted) guest vCPU resumes sending.
    GuestResume { q: usize },
    /// RR: a request reaches a worker waiting for a kick.
    RrRx { q: usize, gen: u64 },
    /// RR: a response is posted to a worker waiting for a kick (the guest kicks).
    RrTx { q: usize, gen: u64 },
    /// The NIC queue has room again for a worker blocked on it.
    NicRoom { q: usize, gen: u64, woke: bool },
    /// Timeline entry `idx` takes effect.
    Switch { idx: usize },
    /// Take a time-series sample.
    Sample,
    /// A core-management control period ends (RR loads or a dynamic
    /// allocator only).
    Control,
    /// A vCPU time slice ends (`host.vcpu_sched = "slices"`).
    Slice { gen: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum WState {
    Running,
    Waking,
    Sleeping,
    WaitKick,
}

#[derive(Clone, Copy, Debug, Default)]
struct PassInfo {
    wake: Option<WakeCause>,
    waited: u64,
    tx: u64,
    rx: u64,
    bytes: u64,
    payload: u64,
    more_work: bool,
    fill_permille: u16,
}

#[derive(Debug)]
struct Worker {
    /// The policy and the executor of its decisions (shared with the daemon).
    exec: Executor,
    label: String,
    state: WState,
    gen: u64,
    work_left: f64,
    pass: PassInfo,
    wait_start: u64,
    pending: Option<SimPolicy>,
    freq_idx: usize,
    busy_ns: f64,
    settled_at: Option<u64>,
    policy_since: u64,
}

/// Request/response state of one queue.
#[derive(Debug)]
struct RrQ {
    rng: SmallRng,
    next_arrival: u64,
    backlog: VecDeque<u64>,
    /// Responses being served or posted: (ready time, request arrival time).
    tx: BinaryHeap<Reverse<(u64, u64)>>,
    lam_max: f64,
}

#[derive(Debug)]
struct QSim {
    vm: usize,
    ring: Ring,
    prod: Option<Producer>,
    rr: Option<RrQ>,
    w: Worker,
    kicks: u64,
    calls: u64,
    wakeups: u64,
    passes: u64,
    packets: u64,
    payload: u64,
}

impl VmSim {
    /// RR server threads running at `t`: not free yet (`free > t`, or
    /// `free >= t` when `at_end`) and not in a preemption gap.
    fn running(&self, t: u64, at_end: bool) -> f64 {
        self.servers
            .iter()
            .zip(&self.gaps)
            .filter(|(&f, g)| {
                // Gaps are disjoint and in time order, and those that ended
                // by the last advance are gone: only the first few can
                // hold `t`.
                (if at_end { f >= t } else { f > t })
                    && !g.iter().take_while(|&&(a, _)| a <= t).any(|&(_, b)| t < b)
            })
            .count() as f64
    }
}

#[derive(Debug)]
struct VmSim {
    guest_busy: f64,
    /// RR: when each server thread is next free, ns.
    servers: Vec<u64>,
    /// RR: per server thread, the windows (start, end), ns, in which it is
    /// preempted and does not run although `servers` says it is not free
    /// (the `cores` module's preemption model), in time order.
    gaps: Vec<VecDeque<(u64, u64)>>,
    rr: Option<RrLoad>,
}

/// Counters at the previous control period.
#[derive(Clone, Copy, Debug, Default)]
struct CtrlSnap {
    t: u64,
    guest: f64,
    host: f64,
    wakeups: u64,
}

/// Counters at the previous sample, for per-window rates.
#[derive(Clone, Debug, Default)]
struct Snap {
    t: u64,
    nic: Vec<f64>,
    host: f64,
    guest: f64,
    kicks: u64,
    calls: u64,
    wakeups: u64,
    passes: u64,
    energy: f64,
    served: u64,
}

pub(crate) struct Engine<'s> {
    sc: &'s Scenario,
    cal: &'s Calibration,
    now: u64,
    end: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    sched: Scheduler,
    /// CPU share of each runnable thread of the vCPU group, ≤ 1.
    share_v: f64,
    /// CPU share of each running queue worker, ≤ 1 (`share_v` when the
    /// groups share their cores).
    share_w: f64,
    /// Core groups and their allocator.
    alloc: Allocator,
    /// Counters at the last control period.
    ctrl: CtrlSnap,
    /// Latencies of the current control period.
    lat_ctrl: LatHist,
    /// Worker wake-ups per ns per core of the shared group, last period.
    wake_rate_per_core: f64,
    /// Mean worker CPU per wake-up over the last period, ns.
    pass_cpu_ns: f64,
    core_events: CoreEvents,
    /// Draws of the preemption model (apart from the workload's streams).
    pre_rng: SmallRng,
    vms: Vec<VmSim>,
    qs: Vec<QSim>,
    nic: Nic,
    rng: SmallRng,
    samples: Vec<Sample>,
    snap: Snap,
    energy_j: f64,
    lat_window: LatHist,
    lat_periods: Vec<LatHist>,
    served: u64,
    events: u64,
    events_in_second: u64,
    second: u64,
    /// The executor calls of one queue, when tracing (see [`Trace`]).
    trace: Option<Trace>,
    /// Round-robin vCPU slices among senders (`host.vcpu_sched = "slices"`).
    slices: Option<Slices>,
    /// With slices: sender threads of each queue on a core now.
    on_cpu: Vec<f64>,
    /// With slices: the part of a core a sender gets while it has one
    /// (context switches take the rest when the cores are oversubscribed).
    slice_speed: f64,
}

/// The executor calls of one simulated queue worker, in order: what each
/// pass reported and the step the executor answered. The daemon's worker
/// loop replayed over the same passes must answer the same steps (a test in
/// the data plane checks it).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The queue traced (index over all VMs' queues).
    pub queue: usize,
    /// Stop recording after this many passes.
    pub max_passes: usize,
    /// The first step, at time 0.
    pub first: Option<Step>,
    /// Every pass, in order.
    pub passes: Vec<TracedPass>,
}

/// One pass of a [`Trace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracedPass {
    /// End of the pass.
    pub now: Instant,
    /// What ended the wait before it.
    pub wake: WakeCause,
    /// How long that wait lasted.
    pub waited: vadapt_policy::Duration,
    /// What the pass did.
    pub stats: PassStats,
    /// The step the executor answered.
    pub step: Step,
}

fn ns(x: f64) -> u64 {
    x.max(0.0).ceil() as u64
}

fn build(p: &SimPolicy) -> Result<Box<dyn Policy>, SimError> {
    match p {
        SimPolicy::Policy(c) => c.build().map_err(|e| SimError::BuildPolicy {
            policy: p.label(),
            reason: e.to_string(),
        }),
        SimPolicy::FixedInterval { interval_us } => Ok(Box::new(FixedInterval::new(*interval_us))),
    }
}

fn rate_at(points: &[(f64, f64)], t_s: f64) -> f64 {
    match points.iter().position(|p| p.0 > t_s) {
        None => points.last().map_or(0.0, |p| p.1),
        Some(0) => points[0].1,
        Some(i) => {
            let (t0, q0) = points[i - 1];
            let (t1, q1) = points[i];
            q0 + (q1 - q0) * (t_s - t0) / (t1 - t0)
        }
    }
}

impl<'s> Engine<'s> {
    pub(crate) fn new(sc: &'s Scenario, seed: u64) -> Result<Engine<'s>, SimError> {
        let cal = &sc.calibration;
        let first = &sc.timeline[0].policy;
        let mut qs = Vec::new();
        let mut vms = Vec::new();
        let top_freq = sc.host.power.as_ref().map_or(0, |p| p.freqs_mhz.len() - 1);
        for (vi, vm) in sc.vms.iter().enumerate() {
            let (rr_load, servers) = match &vm.workload {
                Workload::Rr(r) => (Some(r.clone()), vec![0u64; r.server_threads as usize]),
                Workload::Stream(_) => (None, Vec::new()),
            };
            vms.push(VmSim {
                guest_busy: 0.0,
                gaps: vec![VecDeque::new(); servers.len()],
                servers,
                rr: rr_load,
            });
            for qi in 0..vm.queues {
                let qn = qs.len() as u64;
                let exec = Executor::start(build(first)?, Instant(0)).0;
                let (prod, rr) = match &vm.workload {
                    Workload::Stream(s) => {
                        // Spread threads (and the vCPUs that run them) over the queues.
                        let runnable = f64::from(s.threads.min(vm.vcpus)) / f64::from(vm.queues);
                        let _ = qi;
                        (Some(Producer::new(s, runnable)), None)
                    }
                    Workload::Rr(r) => {
                        let lam_max = r.rate_qps.iter().map(|p| p.1).fold(0.0, f64::max)
                            / f64::from(vm.queues);
                        let mut rq = RrQ {
                            rng: SmallRng::seed_from_u64(
                                seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(qn + 1)),
                            ),
                            next_arrival: 0,
                            backlog: VecDeque::new(),
                            tx: BinaryHeap::new(),
                            lam_max,
                        };
                        rq.next_arrival = next_arrival(&mut rq, r, f64::from(vm.queues), 0);
                        (None, Some(rq))
                    }
                };
                qs.push(QSim {
                    vm: vi,
                    ring: Ring::new(vm.ring_size),
                    prod,
                    rr,
                    w: Worker {
                        label: first.label(),
                        exec,
                        state: WState::Sleeping,
                        gen: 0,
                        work_left: 0.0,
                        pass: PassInfo::default(),
                        wait_start: 0,
                        pending: None,
                        freq_idx: top_freq,
                        busy_ns: 0.0,
                        settled_at: None,
                        policy_since: 0,
                    },
                    kicks: 0,
                    calls: 0,
                    wakeups: 0,
                    passes: 0,
                    packets: 0,
                    payload: 0,
                });
            }
        }
        let nvm = sc.vms.len();
        let mut e = Engine {
            sc,
            cal,
            now: 0,
            end: sc.duration.as_nanos(),
            heap: BinaryHeap::new(),
            seq: 0,
            sched: Scheduler {
                cores: f64::from(sc.host.cores),
                slice_ns: sc.host.sched_slice.as_nanos() as f64,
                context_switch_ns: cal.context_switch_ns,
            },
            share_v: 1.0,
            share_w: 1.0,
            alloc: Allocator::new(sc.host.core_mgmt, sc.host.cores),
            ctrl: CtrlSnap::default(),
            lat_ctrl: LatHist::default(),
            wake_rate_per_core: 0.0,
            pass_cpu_ns: cal.wakeup_cpu_ns + cal.context_switch_ns,
            core_events: CoreEvents::default(),
            pre_rng: SmallRng::seed_from_u64(seed ^ 0x5EED_C0DE_0000_0001),
            vms,
            qs,
            nic: Nic::new(sc.host.line_rate_bps, sc.host.nic_queue_packets, nvm),
            rng: SmallRng::seed_from_u64(seed),
            samples: Vec::new(),
            snap: Snap::default(),
            energy_j: 0.0,
            lat_window: LatHist::default(),
            lat_periods: vec![LatHist::default(); sc.periods.len()],
            served: 0,
            events: 0,
            events_in_second: 0,
            second: 0,
            trace: None,
            slices: (sc.host.vcpu_sched == VcpuSched::Slices).then(Slices::default),
            on_cpu: Vec::new(),
            slice_speed: 1.0,
        };
        e.on_cpu = vec![0.0; e.qs.len()];
        e.snap = e.snapshot();
        for (i, t) in sc.timeline.iter().enumerate().skip(1) {
            e.push(t.at.as_nanos(), Ev::Switch { idx: i });
        }
        e.push(sc.sample.as_nanos(), Ev::Sample);
        let rr_any = e.vms.iter().any(|v| v.rr.is_some());
        if rr_any || e.alloc.is_dynamic() {
            e.push(sc.host.core_mgmt.period.as_nanos(), Ev::Control);
        }
        Ok(e)
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    fn jitter(&mut self, x: f64) -> u64 {
        let j = self.cal.jitter;
        if j == 0.0 {
            return ns(x);
        }
        ns(x * self.rng.gen_range(1.0 - j..=1.0 + j))
    }

    fn freq_factor(&self, idx: usize) -> f64 {
        match &self.sc.host.power {
            Some(p) => p.freqs_mhz[idx] / p.freqs_mhz[p.freqs_mhz.len() - 1],
            None => 1.0,
        }
    }

    /// Runnable threads right now: (vCPU threads, queue workers).
    fn demand(&self) -> (f64, f64) {
        let (mut dv, mut dw) = (0.0, 0.0);
        for q in &self.qs {
            if q.w.state == WState::Running {
                dw += 1.0;
            }
            if let Some(p) = &q.prod {
                if !p.stalled {
                    dv += p.threads;
                }
            }
        }
        for v in &self.vms {
            dv += v.running(self.now, false);
        }
        (dv, dw)
    }

    fn group_sched(&self, cores: u32) -> Scheduler {
        Scheduler {
            cores: f64::from(cores),
            ..self.sched
        }
    }

    /// Each group's processor-sharing share for the threads runnable now.
    fn update_shares(&mut self) {
        let (dv, dw) = self.demand();
        let g = self.alloc.groups;
        if g.shared {
            let s = self.group_sched(g.vcpu_cores).share(dv + dw);
            self.share_v = s;
            self.share_w = s;
        } else {
            self.share_v = self.group_sched(g.vcpu_cores).share(dv);
            self.share_w = self.group_sched(g.nq_cores).share(dw);
        }
        self.assign_slices(dw);
    }

    /// With `host.vcpu_sched = "slices"`: which senders have a core now
    /// (the cores of the vCPU group not taken by running workers, when the
    /// groups share cores, nor by request/response servers).
    fn assign_slices(&mut self, running_workers: f64) {
        let Some(slices) = self.slices.as_mut() else {
            return;
        };
        let g = self.alloc.groups;
        let servers: f64 = self.vms.iter().map(|v| v.running(self.now, false)).sum();
        let taken = servers + if g.shared { running_workers } else { 0.0 };
        let cores = (f64::from(g.vcpu_cores) - taken).max(0.0);
        let runnable: Vec<f64> = self
            .qs
            .iter()
            .map(|q| {
                q.prod
                    .as_ref()
                    .filter(|p| !p.stalled)
                    .map_or(0.0, |p| p.threads)
            })
            .collect();
        let waiting = slices.assign(&runnable, cores, &mut self.on_cpu);
        self.slice_speed = if waiting {
            1.0 - (self.sched.context_switch_ns / self.sched.slice_ns).min(1.0)
        } else {
            1.0
        };
        if waiting {
            if let Some(gen) = slices.arm() {
                let at = self.now + self.sched.slice_ns as u64;
                self.push(at, Ev::Slice { gen });
            }
        }
    }

    /// vCPU time a queue's senders get per ns now.
    fn sender_rate(&self, q: usize) -> f64 {
        match (&self.qs[q].prod, &self.slices) {
            (None, _) => 0.0,
            (Some(_), Some(_)) => self.on_cpu[q] * self.slice_speed,
            (Some(p), None) => p.threads * self.share_v,
        }
    }

    /// Record the executor calls of `trace.queue` while running.
    pub(crate) fn with_trace(mut self, trace: Trace) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Run, and return the trace asked for with [`Engine::with_trace`].
    pub(crate) fn run_traced(mut self) -> Result<(SimResult, Option<Trace>), SimError> {
        if let Some(t) = self.trace.as_mut() {
            t.first = self.qs.get(t.queue).map(|q| q.w.exec.step());
        }
        let mut out = None;
        let r = self.run_inner(&mut out)?;
        Ok((r, out))
    }

    pub(crate) fn run(self) -> Result<SimResult, SimError> {
        let mut out = None;
        self.run_inner(&mut out)
    }

    fn run_inner(mut self, trace_out: &mut Option<Trace>) -> Result<SimResult, SimError> {
        let first = self.sc.timeline[0].policy;
        for q in 0..self.qs.len() {
            // Started at 0 when the worker was built: carry out its first step.
            let step = self.qs[q].w.exec.step();
            self.qs[q].w.label = first.label();
            self.execute(q, step);
        }
        self.update_shares();
        let cap = self.sc.max_events_per_sim_s;
        loop {
            let t_int = self.next_internal();
            let t_heap = self.heap.peek().map_or(u64::MAX, |r| r.0 .0);
            let t = t_int.min(t_heap).min(self.end);
            self.advance_to(t);
            if self.now >= self.end {
                break;
            }
            // Passes that completed, in queue order (deterministic).
            for q in 0..self.qs.len() {
                if self.qs[q].w.state == WState::Running && self.qs[q].w.work_left <= 1e-6 {
                    self.end_pass(q);
                }
            }
            while self.heap.peek().is_some_and(|r| r.0 .0 <= self.now) {
                let Reverse((_, _, ev)) = self.heap.pop().expect("peeked");
                self.handle(ev);
            }
            self.update_shares();
            self.events += 1;
            let sec = self.now / 1_000_000_000;
            if sec != self.second {
                self.second = sec;
                self.events_in_second = 0;
            }
            self.events_in_second += 1;
            if self.events_in_second > cap {
                return Err(SimError::EventCap { second: sec, cap });
            }
        }
        *trace_out = self.trace.take();
        Ok(self.finish())
    }

    /// Earliest pass completion or sender threshold, ns (absolute).
    fn next_internal(&self) -> u64 {
        let mut t = u64::MAX;
        for (i, q) in self.qs.iter().enumerate() {
            if q.w.state == WState::Running {
                let rate = self.share_w * self.freq_factor(q.w.freq_idx);
                t = t.min(self.now + ns(q.w.work_left / rate).max(1));
            }
            if let Some(p) = &q.prod {
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

    fn advance_to(&mut self, t: u64) {
        let dt = (t - self.now) as f64;
        self.now = t;
        if dt > 0.0 {
            self.account_energy(dt);
            if self.sc.host.core_mgmt.be_vm {
                self.core_events.be_core_s += f64::from(self.alloc.groups.be_cores) * dt / 1e9;
            }
            self.nic.advance(dt);
            for q in 0..self.qs.len() {
                let ff = self.freq_factor(self.qs[q].w.freq_idx);
                let w = &mut self.qs[q].w;
                if w.state == WState::Running {
                    w.work_left -= self.share_w * ff * dt;
                    w.busy_ns += self.share_w * dt;
                }
                let vm = self.qs[q].vm;
                let rate = self.sender_rate(q);
                if let Some(p) = &mut self.qs[q].prod {
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
                v.guest_busy += busy * self.share_v * dt;
            }
        }
        for v in &mut self.vms {
            for g in &mut v.gaps {
                while g.front().is_some_and(|w| w.1 <= t) {
                    g.pop_front();
                }
            }
        }
        for q in 0..self.qs.len() {
            self.sync_producer(q);
        }
    }

    fn account_energy(&mut self, dt: f64) {
        let Some(p) = &self.sc.host.power else { return };
        let top = p.freqs_mhz.len() - 1;
        let mut busy = 0.0;
        let mut watts = 0.0;
        for q in &self.qs {
            if q.w.state == WState::Running {
                busy += self.share_w;
                watts += self.share_w * p.active_w[q.w.freq_idx];
            }
        }
        let (dv, _) = self.demand();
        let vcpu_busy = dv * self.share_v;
        watts += vcpu_busy * p.active_w[top];
        // Cores of the groups that are not busy sit in a shallow idle state
        // at the top frequency (wake-ups keep landing on them); parked cores
        // are at the lowest frequency, in the lowest state; cores lent to a
        // CPU-bound best-effort VM are busy.
        let g = self.alloc.groups;
        let be = if self.sc.host.core_mgmt.be_vm {
            f64::from(g.be_cores)
        } else {
            0.0
        };
        watts += be * p.active_w[top];
        let parked = f64::from(g.parked) + f64::from(g.be_cores) - be;
        let active = f64::from(g.vcpu_cores + g.nq_cores);
        let idle = (active - busy - vcpu_busy).max(0.0);
        watts += idle * p.idle_w[top] + parked * p.idle_w[0];
        self.energy_j += watts * dt / 1e9;
    }

    /// Post the segments a sender has finished; kick, stop or stall as the
    /// ring says.
    fn sync_producer(&mut self, q: usize) {
        let qs = &mut self.qs[q];
        let Some(p) = &mut qs.prod else {
            return;
        };
        if p.stalled {
            return;
        }
        if let Some(pile) = p.pile.as_ref().filter(|pile| pile.stopped) {
            // Stopped: the writes pile up until every send queue is full.
            let full = pile.cap as f64 * pile.msg_cost;
            if p.progress + 1e-9 >= full {
                p.progress = full;
                p.stalled = true;
            }
            return;
        }
        let ready = (p.progress / p.seg_cost + 1e-9).floor() as u64;
        let n = ready.min(qs.ring.free());
        let mut kicked = false;
        if n > 0 {
            // Post up to the kick point first so a kick lands on its index.
            kicked = qs.ring.post(n);
            p.posted(n, p.payload);
            p.progress = (p.progress - n as f64 * p.seg_cost).max(0.0);
        }
        let ring_full = qs.ring.free() == 0;
        if let Some(pile) = p.pile.as_mut() {
            if ring_full {
                // The queue stops (Linux `netif_stop_subqueue`) and asks for
                // a call; the writers go on, piling up.
                pile.stopped = true;
                qs.ring.enable_call_delayed();
            }
        } else if ring_full && p.progress + 1e-9 >= p.seg_cost {
            // The next segment does not fit: the queue stops, the senders
            // block, the vCPUs halt; the guest asks for a call (virtio-net).
            p.progress = p.seg_cost;
            p.stalled = true;
            qs.ring.enable_call_delayed();
        }
        if kicked {
            self.kick(q);
        }
    }

    /// The TX call restarts a stopped queue: the piled-up writes go out as
    /// segments (`coalesce = "since-room"`), then the senders run on.
    fn restart_queue(&mut self, q: usize) {
        let qs = &mut self.qs[q];
        let Some(p) = &mut qs.prod else {
            return;
        };
        p.stalled = false;
        p.debt += self.cal.call_ns;
        let mut kicked = false;
        if let Some(pile) = p.pile.as_mut().filter(|pile| pile.stopped) {
            pile.stopped = false;
            let msgs = (p.progress / pile.msg_cost + 1e-9).floor() as u64;
            let (runs, msg_cost, xmit_ns) = (pile.segments(msgs), pile.msg_cost, pile.xmit_ns);
            p.progress = (p.progress - msgs as f64 * msg_cost).max(0.0);
            let mut room = qs.ring.free();
            for (segs, payload) in runs {
                // The call comes once 3/4 of the ring is used: there is room
                // for a pile (at most a segment a thread) on any ring larger
                // than four segments a thread; a smaller one drops the rest.
                let segs = segs.min(room);
                room -= segs;
                kicked |= qs.ring.post(segs);
                p.posted(segs, payload);
                p.debt += segs as f64 * xmit_ns;
            }
        }
        if kicked {
            self.kick(q);
        }
        self.sync_producer(q);
    }

    /// The guest kicked queue `q`: VM exit on its vCPU, wake the worker.
    fn kick(&mut self, q: usize) {
        self.qs[q].kicks += 1;
        let kick_ns = self.cal.kick_ns;
        if let Some(p) = &mut self.qs[q].prod {
            p.debt += kick_ns;
        } else {
            let vm = self.qs[q].vm;
            self.vms[vm].guest_busy += kick_ns;
        }
        self.qs[q].ring.disable_kick();
        match self.qs[q].w.state {
            WState::WaitKick | WState::Sleeping => {
                let lat = self.jitter(self.cal.wake_latency_ns);
                let w = &mut self.qs[q].w;
                w.gen += 1;
                w.state = WState::Waking;
                let gen = w.gen;
                self.push(self.now + lat, Ev::Wake { q, gen });
            }
            WState::Running | WState::Waking => {}
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Timer { q, gen } => {
                let w = &self.qs[q].w;
                if w.gen != gen {
                    return;
                }
                let cause = match w.state {
                    WState::Sleeping => WakeCause::Timer,
                    WState::WaitKick => WakeCause::Timeout,
                    _ => return,
                };
                let waited = self.now - w.wait_start;
                self.qs[q].ring.disable_kick();
                self.start_pass(q, cause, waited, true);
            }
            Ev::Wake { q, gen } => {
                let w = &self.qs[q].w;
                if w.gen != gen || w.state != WState::Waking {
                    return;
                }
                let waited = self.now - w.wait_start;
                self.start_pass(q, WakeCause::Kick, waited, true);
            }
            Ev::NicRoom { q, gen, woke } => {
                let w = &self.qs[q].w;
                if w.gen != gen || w.state != WState::Waking {
                    return;
                }
                let (cause, waited) = (w.pass.wake.unwrap_or(WakeCause::Immediate), w.pass.waited);
                self.start_pass(q, cause, waited, woke);
            }
            Ev::GuestResume { q } => self.restart_queue(q),
            Ev::RrRx { q, gen } | Ev::RrTx { q, gen } => {
                let w = &self.qs[q].w;
                if w.gen != gen || w.state != WState::WaitKick {
                    return;
                }
                if matches!(ev, Ev::RrTx { .. }) {
                    // The guest posted a response and kicked.
                    self.kick(q);
                } else {
                    // The host port signalled the worker: a wake-up, no VM exit.
                    let lat = self.jitter(self.cal.wake_latency_ns);
                    let w = &mut self.qs[q].w;
                    w.gen += 1;
                    w.state = WState::Waking;
                    let gen = w.gen;
                    self.push(self.now + lat, Ev::Wake { q, gen });
                }
            }
            Ev::Switch { idx } => {
                let p = self.sc.timeline[idx].policy;
                for q in 0..self.qs.len() {
                    match self.qs[q].w.state {
                        WState::Running | WState::Waking => self.qs[q].w.pending = Some(p),
                        WState::Sleeping | WState::WaitKick => {
                            self.qs[q].w.gen += 1;
                            self.qs[q].ring.disable_kick();
                            let step = self.install(q, p);
                            self.execute(q, step);
                        }
                    }
                }
            }
            Ev::Sample => {
                self.sample();
                self.push(self.now + self.sc.sample.as_nanos(), Ev::Sample);
            }
            Ev::Slice { gen } => {
                if let Some(s) = self.slices.as_mut() {
                    s.fire(gen);
                }
            }
            Ev::Control => {
                self.control();
                self.push(
                    self.now + self.sc.host.core_mgmt.period.as_nanos(),
                    Ev::Control,
                );
            }
        }
    }

    fn install(&mut self, q: usize, p: SimPolicy) -> Step {
        // Timeline policies were validated when the scenario was parsed.
        let policy = build(&p).expect("timeline policy validated at parse time");
        let w = &mut self.qs[q].w;
        let d = w.exec.switch(policy, Instant(self.now));
        w.label = p.label();
        w.settled_at = None;
        w.policy_since = self.now;
        d
    }

    fn has_work(&mut self, q: usize) -> bool {
        let now = self.now;
        let vm = self.qs[q].vm;
        if self.qs[q].ring.pending() > 0 {
            return true;
        }
        if let (Some(rr), Some(load)) = (&mut self.qs[q].rr, &self.vms[vm].rr) {
            let queues = f64::from(self.sc.vms[vm].queues);
            pull_arrivals(rr, load, queues, now);
            return !rr.backlog.is_empty() || rr.tx.peek().is_some_and(|r| r.0 .0 <= now);
        }
        false
    }

    /// Carry out `d`: the frequency change and the wait (the pass follows).
    fn execute(&mut self, q: usize, d: Step) {
        if let (Some(p), Some(f)) = (&self.sc.host.power, d.freq) {
            let top = p.freqs_mhz.len() - 1;
            match f {
                FreqHint::Keep => {}
                FreqHint::Min => self.qs[q].w.freq_idx = 0,
                FreqHint::Max => self.qs[q].w.freq_idx = top,
            }
        }
        match d.action {
            Action::Poll => self.start_pass(q, WakeCause::Immediate, 0, false),
            Action::Sleep {
                duration,
                kick_threshold,
            } => {
                let t = self.now + duration.as_nanos() + self.jitter(self.cal.timer_overshoot_ns);
                let size = self.qs[q].ring.size();
                match kick_threshold {
                    Some(p) => {
                        let size = u16::try_from(size).unwrap_or(u16::MAX);
                        self.qs[q]
                            .ring
                            .enable_kick_at_fill(u64::from(kick_fill(p, size)))
                    }
                    None => self.qs[q].ring.disable_kick(),
                }
                let w = &mut self.qs[q].w;
                w.state = WState::Sleeping;
                w.wait_start = self.now;
                w.gen += 1;
                let gen = w.gen;
                self.push(t, Ev::Timer { q, gen });
            }
            Action::WaitKick { timeout } => {
                self.qs[q].ring.enable_kick();
                if self.has_work(q) {
                    self.qs[q].ring.disable_kick();
                    self.start_pass(q, WakeCause::Recheck, 0, false);
                    return;
                }
                let w = &mut self.qs[q].w;
                w.state = WState::WaitKick;
                w.wait_start = self.now;
                w.gen += 1;
                let gen = w.gen;
                if let Some(to) = timeout {
                    let t = self.now + to.as_nanos() + self.jitter(self.cal.timer_overshoot_ns);
                    self.push(t, Ev::Timer { q, gen });
                }
                if let Some(rr) = &self.qs[q].rr {
                    let rx = rr.next_arrival;
                    let tx = rr.tx.peek().map(|r| r.0 .0);
                    if rx != u64::MAX {
                        self.push(rx.max(self.now), Ev::RrRx { q, gen });
                    }
                    if let Some(t) = tx {
                        self.push(t.max(self.now), Ev::RrTx { q, gen });
                    }
                }
            }
        }
    }

    fn start_pass(&mut self, q: usize, cause: WakeCause, waited: u64, woke: bool) {
        let now = self.now;
        let vm = self.qs[q].vm;
        self.qs[q].ring.disable_kick();
        let budget = self.qs[q].w.exec.step().budget;
        let size = self.qs[q].ring.size();
        let pending = self.qs[q].ring.pending();
        let fill_permille = (pending * 1000 / size).min(1000) as u16;
        let nic_free = self.nic.free_packets();
        if nic_free == 0 && (pending > 0 || self.qs[q].rr.is_some()) {
            // Like vhost-net waiting for its socket to become writable: the
            // worker blocks until the link has drained a batch.
            let t = now + ns(self.nic.time_to_room()).max(1);
            let w = &mut self.qs[q].w;
            w.state = WState::Waking;
            w.gen += 1;
            w.pass.wake = Some(cause);
            w.pass.waited = waited;
            let gen = w.gen;
            self.push(t, Ev::NicRoom { q, gen, woke });
            return;
        }
        let mut info = PassInfo {
            wake: Some(cause),
            waited,
            fill_permille,
            ..PassInfo::default()
        };
        let mut per_byte_bytes = 0u64;
        let qs = &mut self.qs[q];
        if let Some(p) = &mut qs.prod {
            let by_bytes = p.chains_within(budget.bytes);
            let n = qs
                .ring
                .take(u64::from(budget.packets).min(nic_free).min(by_bytes));
            info.tx = n;
            (info.bytes, info.payload) = p.take(n);
            per_byte_bytes = info.bytes;
            info.more_work = qs.ring.pending() > 0;
        }
        if let (Some(rr), Some(load)) = (&mut self.qs[q].rr, &self.vms[vm].rr) {
            let queues = f64::from(self.sc.vms[vm].queues);
            pull_arrivals(rr, load, queues, now);
            let rx = (rr.backlog.len() as u64).min(u64::from(budget.packets));
            let ready = rr.tx.iter().filter(|r| r.0 .0 <= now).count() as u64;
            let tx = ready.min(u64::from(budget.packets)).min(nic_free);
            info.rx = rx;
            info.tx = tx;
            info.bytes = rx * u64::from(load.request_bytes) + tx * u64::from(load.response_bytes);
            info.payload = info.bytes;
            per_byte_bytes = info.bytes;
            info.more_work = rr.backlog.len() as u64 > rx || ready > tx;
            info.fill_permille = (ready * 1000 / size).min(1000) as u16;
        }
        let c = self.cal;
        let pkts = (info.tx + info.rx) as f64;
        let mut work = c.pass_overhead_ns
            + pkts * (c.per_packet_ns + c.nic_packet_ns)
            + per_byte_bytes as f64 * c.per_byte_ps / 1000.0;
        if woke {
            work += c.wakeup_cpu_ns + c.context_switch_ns;
            self.qs[q].wakeups += 1;
        }
        let w = &mut self.qs[q].w;
        w.state = WState::Running;
        w.work_left = work;
        w.pass = info;
    }

    fn end_pass(&mut self, q: usize) {
        let now = self.now;
        let vm = self.qs[q].vm;
        let info = self.qs[q].w.pass;
        self.qs[q].passes += 1;
        self.qs[q].packets += info.tx + info.rx;
        self.qs[q].payload += info.payload;
        if self.qs[q].prod.is_some() {
            self.nic.enqueue(vm, info.tx, info.bytes, info.payload);
            if self.qs[q].ring.complete(info.tx) {
                self.qs[q].calls += 1;
                let lat = self.jitter(self.cal.wake_latency_ns);
                self.push(now + lat, Ev::GuestResume { q });
            }
        }
        if self.qs[q].rr.is_some() {
            self.end_rr_pass(q, info);
        }
        let exec = &mut self.qs[q].w.exec;
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
        exec.woke(wake, waited);
        let mut d = exec.served(Instant(now), stats);
        let st = exec.status();
        if let Some(t) = self.trace.as_mut().filter(|t| t.queue == q) {
            if t.passes.len() < t.max_passes {
                t.passes.push(TracedPass {
                    now: Instant(now),
                    wake,
                    waited,
                    stats,
                    step: d,
                });
            }
        }
        if st.settled && self.qs[q].w.settled_at.is_none() {
            self.qs[q].w.settled_at = Some(now);
        }
        if let Some(p) = self.qs[q].w.pending.take() {
            d = self.install(q, p);
        }
        self.execute(q, d);
    }

    fn end_rr_pass(&mut self, q: usize, info: PassInfo) {
        let now = self.now;
        let vm = self.qs[q].vm;
        let load = self.vms[vm].rr.clone().expect("rr vm");
        // Responses leave through the NIC.
        let rr = self.qs[q].rr.as_mut().expect("rr queue");
        let mut arrivals = Vec::with_capacity(info.tx as usize);
        for _ in 0..info.tx {
            let Reverse((_, a)) = rr.tx.pop().expect("ready response");
            arrivals.push(a);
        }
        let delivered: Vec<u64> = rr.backlog.drain(..info.rx as usize).collect();
        let resp = u64::from(load.response_bytes);
        let done = self
            .nic
            .enqueue(vm, info.tx, info.tx * resp, info.tx * resp);
        let depart = now + ns(done);
        for a in arrivals {
            let lat_us = (depart - a) as f64 / 1000.0;
            self.lat_window.record(lat_us);
            self.lat_ctrl.record(lat_us);
            for (i, p) in self.sc.periods.iter().enumerate() {
                let t = depart as f64 / 1e9;
                if t >= p.from_s && t < p.to_s {
                    self.lat_periods[i].record(lat_us);
                }
            }
            self.served += 1;
        }
        if delivered.is_empty() {
            return;
        }
        // Requests reach the guest: one call for the batch, then the server
        // threads take them in arrival order.
        self.qs[q].calls += 1;
        let start_at = now + ns(self.cal.call_ns);
        let share = self.share_v;
        for a in delivered {
            let s = sample_service(&mut self.qs[q].rr.as_mut().expect("rr").rng, &load);
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
            self.qs[q]
                .rr
                .as_mut()
                .expect("rr")
                .tx
                .push(Reverse((finish, a)));
        }
    }

    /// Extra time a request's service of `run` ns takes because queue
    /// workers preempt its vCPU (time-shared groups only; the model is in
    /// the `cores` module docs).
    fn preemption_delay(&mut self, run: f64) -> f64 {
        let g = self.alloc.groups;
        if !g.shared || self.wake_rate_per_core <= 0.0 {
            return 0.0;
        }
        let cores = f64::from(g.vcpu_cores);
        let (dv, dw) = self.demand();
        // A third runnable thread on the preempted core (besides the vCPU
        // and the worker), threads placed at random on the group's cores.
        let others = (dv + dw - 2.0).max(0.0);
        let p_queued = 1.0 - (1.0 - 1.0 / cores).powf(others);
        let lambda = self.wake_rate_per_core;
        let mut delay = 0.0;
        // Poisson arrivals of wake-ups on this core over the service time.
        let mut t = 0.0;
        loop {
            let u: f64 = self.pre_rng.gen_range(f64::MIN_POSITIVE..1.0);
            t += -u.ln() / lambda;
            if t > run {
                break;
            }
            self.core_events.preemptions += 1;
            delay += 2.0 * self.cal.context_switch_ns + self.pass_cpu_ns;
            if self.pre_rng.gen::<f64>() < p_queued {
                self.core_events.slice_waits += 1;
                delay += self.sched.slice_ns;
            }
        }
        delay
    }

    /// End of a control period: measure, run the allocator, re-pin.
    fn control(&mut self) {
        let now = self.now;
        let dt = (now - self.ctrl.t) as f64;
        if dt <= 0.0 {
            return;
        }
        let guest: f64 = self.vms.iter().map(|v| v.guest_busy).sum();
        let host: f64 = self.qs.iter().map(|q| q.w.busy_ns).sum();
        let wakeups: u64 = self.qs.iter().map(|q| q.wakeups).sum();
        let dw = wakeups - self.ctrl.wakeups;
        let g = self.alloc.groups;
        // Only workers sharing the vCPUs' cores preempt them.
        self.wake_rate_per_core = if g.shared {
            dw as f64 / dt / f64::from(g.vcpu_cores)
        } else {
            0.0
        };
        if dw > 0 {
            self.pass_cpu_ns = (host - self.ctrl.host) / dw as f64;
        }
        let m = Measured {
            vcpu_util: (guest - self.ctrl.guest) / dt,
            nq_util: (host - self.ctrl.host) / dt,
            p95_us: self.lat_ctrl.quantile(0.95),
        };
        self.ctrl = CtrlSnap {
            t: now,
            guest,
            host,
            wakeups,
        };
        self.lat_ctrl = LatHist::default();
        let (moved_v, moved_w) = self.alloc.on_period(m);
        let g = self.alloc.groups;
        let ev = &mut self.core_events;
        ev.periods += 1;
        ev.core_periods[0] += u64::from(g.vcpu_cores);
        ev.core_periods[1] += u64::from(g.nq_cores);
        ev.core_periods[2] += u64::from(g.be_cores);
        ev.core_periods[3] += u64::from(g.parked);
        ev.migrations += u64::from(moved_v + moved_w);
        // Migration: a moved worker refills its cache (more work in its
        // pass); a moved vCPU starts its next request later.
        let mig = self.sc.host.core_mgmt.migration_ns;
        let mut left = moved_w;
        for q in &mut self.qs {
            if left == 0 {
                break;
            }
            if q.w.state == WState::Running {
                q.w.work_left += mig;
                left -= 1;
            }
        }
        let mut left = moved_v as usize;
        for v in &mut self.vms {
            for f in v.servers.iter_mut() {
                if left == 0 {
                    break;
                }
                // The refill is CPU work of the moved thread, after its
                // current work.
                *f = (*f).max(now) + ns(mig);
                left -= 1;
            }
        }
        self.update_shares();
    }

    fn snapshot(&self) -> Snap {
        Snap {
            t: self.now,
            nic: self.nic.sent_payload.clone(),
            host: self.qs.iter().map(|q| q.w.busy_ns).sum(),
            guest: self.vms.iter().map(|v| v.guest_busy).sum(),
            kicks: self.qs.iter().map(|q| q.kicks).sum(),
            calls: self.qs.iter().map(|q| q.calls).sum(),
            wakeups: self.qs.iter().map(|q| q.wakeups).sum(),
            passes: self.qs.iter().map(|q| q.passes).sum(),
            energy: self.energy_j,
            served: self.served,
        }
    }

    fn sample(&mut self) {
        let s = self.snapshot();
        let dt = (s.t - self.snap.t) as f64 / 1e9;
        if dt <= 0.0 {
            return;
        }
        let nvm = self.sc.vms.len();
        let mut vm_gbps = vec![0.0; nvm];
        for (v, g) in vm_gbps.iter_mut().enumerate() {
            *g = (s.nic[v] - self.snap.nic[v]) * 8.0 / dt / 1e9;
        }
        let statuses: Vec<_> = self.qs.iter().map(|q| q.w.exec.status()).collect();
        let intervals: Vec<Option<f64>> = statuses
            .iter()
            .map(|st| st.interval.map(|d| d.as_nanos() as f64 / 1000.0))
            .collect();
        let labels: Vec<&str> = self.qs.iter().map(|q| q.w.label.as_str()).collect();
        let rr_any = self.vms.iter().any(|v| v.rr.is_some());
        let offered = if rr_any {
            let t_s = s.t as f64 / 1e9;
            Some(
                self.vms
                    .iter()
                    .filter_map(|v| v.rr.as_ref())
                    .map(|r| rate_at(&r.rate_qps, t_s))
                    .sum(),
            )
        } else {
            None
        };
        self.samples.push(Sample {
            t_s: s.t as f64 / 1e9,
            policy: labels.first().map_or(String::new(), |l| l.to_string()),
            gbps: vm_gbps.iter().sum(),
            vm_gbps,
            host_cpu_pct: (s.host - self.snap.host) / 1e9 / dt * 100.0,
            guest_cpu_pct: (s.guest - self.snap.guest) / 1e9 / dt * 100.0,
            kicks_per_s: (s.kicks - self.snap.kicks) as f64 / dt,
            calls_per_s: (s.calls - self.snap.calls) as f64 / dt,
            wakeups_per_s: (s.wakeups - self.snap.wakeups) as f64 / dt,
            passes_per_s: (s.passes - self.snap.passes) as f64 / dt,
            intervals_us: intervals,
            rounds: statuses.iter().map(|st| st.round).collect(),
            power_w: self
                .sc
                .host
                .power
                .as_ref()
                .map(|_| (s.energy - self.snap.energy) / dt),
            offered_qps: offered,
            served_qps: if rr_any {
                Some((s.served - self.snap.served) as f64 / dt)
            } else {
                None
            },
            p50_us: if rr_any {
                self.lat_window.quantile(0.5)
            } else {
                None
            },
            p99_us: if rr_any {
                self.lat_window.quantile(0.99)
            } else {
                None
            },
        });
        self.lat_window = LatHist::default();
        self.snap = s;
    }

    fn finish(mut self) -> SimResult {
        if self.snap.t < self.now {
            self.sample();
        }
        let workers = self
            .qs
            .iter()
            .map(|q| {
                let st = q.w.exec.status();
                WorkerSummary {
                    vm: self.sc.vms[q.vm].name.clone(),
                    workload: self.sc.vms[q.vm].workload.kind().to_string(),
                    policy: q.w.label.clone(),
                    final_interval_us: st.interval.map(|d| d.as_nanos() as f64 / 1000.0),
                    settled_after_s: q.w.settled_at.map(|t| (t - q.w.policy_since) as f64 / 1e9),
                    rounds: st.round,
                    restarts: st.restarts,
                    kicks: q.kicks,
                    calls: q.calls,
                    wakeups: q.wakeups,
                    passes: q.passes,
                    packets: q.packets,
                    cpu_s: q.w.busy_ns / 1e9,
                }
            })
            .collect();
        SimResult::assemble(
            self.sc,
            self.samples,
            workers,
            self.events,
            self.energy_j,
            self.lat_periods,
        )
        .with_core_events(self.core_events)
    }
}

fn next_arrival(rr: &mut RrQ, load: &RrLoad, queues: f64, from: u64) -> u64 {
    if rr.lam_max <= 0.0 {
        return u64::MAX;
    }
    // Thinning of a non-homogeneous Poisson process, rate λ(t)/queues.
    let mut t = from as f64;
    loop {
        let u: f64 = rr.rng.gen_range(f64::MIN_POSITIVE..1.0);
        t += -u.ln() / rr.lam_max * 1e9;
        if t > 1e18 {
            return u64::MAX;
        }
        let lam = rate_at(&load.rate_qps, t / 1e9) / queues;
        if rr.rng.gen::<f64>() * rr.lam_max <= lam {
            return t as u64;
        }
    }
}

fn pull_arrivals(rr: &mut RrQ, load: &RrLoad, queues: f64, now: u64) {
    while rr.next_arrival <= now {
        let a = rr.next_arrival;
        rr.backlog.push_back(a);
        rr.next_arrival = next_arrival(rr, load, queues, a);
    }
}

fn sample_service(rng: &mut SmallRng, load: &RrLoad) -> f64 {
    let m = load.service_mean_ns;
    match load.service {
        ServiceDist::Const => m,
        ServiceDist::Exp => {
            let u: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
            -u.ln() * m
        }
        ServiceDist::LogNormal { sigma } => {
            // Box-Muller; mu chosen so that the mean is m.
            let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
            let u2: f64 = rng.gen();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            let mu = m.ln() - sigma * sigma / 2.0;
            (mu + sigma * z).exp()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piecewise_rate() {
        let pts = [(0.0, 50.0), (10.0, 250.0), (20.0, 50.0)];
        assert_eq!(rate_at(&pts, 0.0), 50.0);
        assert_eq!(rate_at(&pts, 5.0), 150.0);
        assert_eq!(rate_at(&pts, 10.0), 250.0);
        assert_eq!(rate_at(&pts, 30.0), 50.0);
    }
}
