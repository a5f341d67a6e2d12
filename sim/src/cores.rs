//! Core groups: which cores the vCPU threads and the queue workers may run
//! on, the allocators that size the groups every control period, and what
//! sharing a core costs a request.
//!
//! # Groups and pinning
//!
//! Every simulated thread belongs to a group and runs only on its group's
//! cores, which are processor-shared among the group's runnable threads
//! ([`Scheduler`](crate::sched::Scheduler) per group):
//!
//! * **time-shared** ([`CoreAllocSpec::TimeSharing`], the default,
//!   [`CoreAllocSpec::TimeSharingOn`] and [`CoreAllocSpec::CoreNapLike`]):
//!   one group, vCPU threads and queue workers together on the *active*
//!   cores (all of them for time-sharing). The paper's static `20vCPU-20NQ` and `20vCPU-1NQ` are
//!   this with 20 or 1 queue pairs.
//! * **isolated** ([`CoreAllocSpec::Isolated`], [`CoreAllocSpec::Vspace`]):
//!   the vCPU group and the NQ group on disjoint cores, never sharing one
//!   (the paper's `nvCPU-mNQ` Isolation, and vSPACE).
//!
//! Cores outside the groups are *parked* (vSPACE-E's idle set, the
//! CoreNap-like allocator's inactive cores) or lent to a best-effort VM
//! (vSPACE-R).
//!
//! # What oversubscription costs
//!
//! Only a time-shared group pays these; in an isolated group no queue
//! worker ever runs on a vCPU's core.
//!
//! * **Wake-up preemption of a vCPU by a queue worker.** A worker waking
//!   from a sleep or a wait lands on one of its group's cores uniformly at
//!   random (its previous CPU: CFS's `select_task_rq_fair` keeps a wakee on
//!   `prev_cpu` when the waker's and wakee's cores share the LLC and it finds
//!   no idle sibling quickly — the model takes no idle search at all, an
//!   upper bound on collisions). If that core runs a vCPU serving a request,
//!   the worker preempts it: a worker that slept is placed at
//!   `min_vruntime − sched_latency/2` (`GENTLE_FAIR_SLEEPERS`), far more
//!   than `sched_wakeup_granularity` (1 ms × 4 on ≥ 8 CPUs) ahead of a
//!   running vCPU. So a request in service is preempted at the rate
//!   `worker wake-ups per second in the group ÷ the group's cores`, measured
//!   over the previous control period (a Poisson process over the
//!   request's service time).
//! * **What a preemption costs the request.** Two context switches
//!   (`context_switch_ns`, calibration) plus the preempting worker's run
//!   (its mean CPU per wake-up over the previous period). And, if the core
//!   has a *third* runnable thread queued, the preempted vCPU goes behind it
//!   and waits a whole scheduler slice: `host.sched_slice_us`, 3 ms by
//!   default = CFS's `sched_min_granularity_ns` (0.75 ms ×
//!   (1 + log2 8) on ≥ 8 CPUs, `kernel/sched/fair.c` before EEVDF). The
//!   probability of that third thread is `1 − (1 − 1/C)^(N − 2)` for `N`
//!   runnable threads of the group placed at random on its `C` cores.
//! * **Migrations.** When a control period re-pins the groups, every CPU
//!   that changes group ([`CoreSets::moved_from`]) moves one thread, which
//!   pays [`CoreMgmtSpec::migration_ns`] (cache refill on the new core): a
//!   running worker gets that much more work; a vCPU's next request
//!   starts that much later. Default 50 µs, a PLACEHOLDER: the cost of
//!   refilling L1/L2 with a few hundred KB of working set; Linux's own
//!   `sysctl_sched_migration_cost` (500 µs) is the time under which it
//!   deems a task still cache-hot, an upper bound. Time-sharing's balancer
//!   migrations (the paper's Figures 3 and 5 count hundreds of times more)
//!   are not modelled apart from the slice waits above.
//!
//! # Allocators (every control period, 100 ms by default)
//!
//! * [`CoreAllocSpec::Vspace`]: measures each group's CPU time over the
//!   period (vCPU threads: guest busy time; NQ: queue workers' busy time),
//!   the period's P95, calls [`VspaceManager::on_period`] — the policy
//!   crate's own — places the counts with [`CoreSets::place`] on CPUs
//!   `0..cores` and re-pins. In mode R the cores left over run the
//!   best-effort VM (CPU-bound: it keeps every lent core busy; it is paused
//!   when none is lent).
//! * [`CoreAllocSpec::CoreNapLike`]: CoreNap's paper is not available here;
//!   what the vSPACE paper says of it (§5.1: it "dynamically adjusts pCPUs
//!   for LC workload and packet processing to minimize active cores while
//!   satisfying the SLO", threads of the LC application and packet
//!   processing *share* pCPUs) is implemented as: active cores `A =
//!   max(ceil((vCPU + NQ CPU time) / 0.7), floor)`, where `floor` rises by
//!   one core in a period whose P95 exceeded the SLO and falls by one in a
//!   period whose P95 was under half the SLO; growth is immediate, shrinking
//!   is at most one core a period. vCPU threads and workers time-share the
//!   `A` cores (with the preemption costs above); the rest are parked.
//! * [`CoreAllocSpec::DemeterLike`], *our* definition for vSPACE-R's
//!   comparison (Demeter's paper is not available here; the vSPACE paper
//!   says it co-allocates the LC and BE VMs' pCPUs "overlooking packet
//!   processing", §5.2): the LC VM gets `A = max(ceil(vCPU CPU time / 0.7),
//!   floor)` time-shared cores (its queue workers' CPU time is not counted;
//!   `floor` moves with the P95 as in the CoreNap-like allocator), and every
//!   other core is lent to the best-effort VM. Demeter(1NQ) and (20NQ) are
//!   the same allocator over one queue pair or twenty.

use vadapt_policy::vspace::{
    CoreAllocation, CoreSets, ExplorationRound, PeriodMeasurement, RoundOutcome, SampleOutcome,
    ThresholdParams, VspaceConfig, VspaceManager, VspaceMode,
};
use vadapt_policy::Duration;

/// How the host's cores are given to the groups.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CoreAllocSpec {
    /// Every thread on every core (the default).
    TimeSharing,
    /// Every thread on the first `cores` cores, time-shared, the rest
    /// parked: a static CoreNap-like group, to measure how few time-shared
    /// cores hold the SLO at a load (vspace_eval's `20vCPU-20NQ-on-K`).
    TimeSharingOn {
        /// Cores of the one group.
        cores: u32,
    },
    /// Static isolation: `vcpu_cores` for the vCPU threads, the rest
    /// (`nq_cores`) for the queue workers, `cores − vcpu − nq` parked.
    Isolated {
        /// Cores of the vCPU group.
        vcpu_cores: u32,
        /// Cores of the NQ group.
        nq_cores: u32,
    },
    /// The CoreNap-like time-sharing allocator (module docs).
    CoreNapLike,
    /// The Demeter-like allocator for mode R's comparison (module docs):
    /// the LC VM's time-shared group sized by its vCPUs' load alone, the
    /// other cores lent to the best-effort VM.
    DemeterLike,
    /// vSPACE in mode P, E or R.
    Vspace {
        /// The mode.
        mode: VspaceMode,
    },
}

/// `[host.core_alloc]`: the allocator and the costs of moving threads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoreMgmtSpec {
    /// The allocator.
    pub alloc: CoreAllocSpec,
    /// Control period, ns (vSPACE's 100 ms).
    pub period: Duration,
    /// Latency SLO on the P95, µs (the CoreNap-like allocator's target;
    /// reported for vSPACE).
    pub slo_us: f64,
    /// Cache-refill cost of one thread migration, ns.
    pub migration_ns: f64,
    /// A CPU-bound best-effort VM runs on the cores vSPACE-R lends.
    pub be_vm: bool,
    /// vSPACE's Algorithm 3: control periods with a P95 per exploration
    /// round (paper: 1000, i.e. 100 s at 100 ms). Fewer make short runs
    /// reach a round; the evaluation of record keeps the paper's.
    pub samples_per_round: u32,
}

impl Default for CoreMgmtSpec {
    fn default() -> Self {
        CoreMgmtSpec {
            alloc: CoreAllocSpec::TimeSharing,
            period: Duration::from_millis(100),
            slo_us: 1000.0,
            migration_ns: 50_000.0,
            be_vm: false,
            samples_per_round: ThresholdParams::default().samples_per_round,
        }
    }
}

/// The groups in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Groups {
    /// vCPU threads and workers share `vcpu_cores` (then `nq_cores` is 0).
    pub shared: bool,
    /// Cores of the vCPU group (of the shared group when `shared`).
    pub vcpu_cores: u32,
    /// Cores of the NQ group (0 when `shared`).
    pub nq_cores: u32,
    /// Cores lent to the best-effort VM.
    pub be_cores: u32,
    /// Parked cores (lowest idle power).
    pub parked: u32,
}

/// Counters of scheduling events over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CoreEvents {
    /// Requests' vCPUs preempted by a queue worker.
    pub preemptions: u64,
    /// Of those, how many waited a whole scheduler slice.
    pub slice_waits: u64,
    /// Thread migrations by re-pinning.
    pub migrations: u64,
    /// Control periods run.
    pub periods: u64,
    /// Σ over control periods of the cores in each group (divide by
    /// `periods` for the mean): vCPU, NQ, best-effort, parked.
    pub core_periods: [u64; 4],
    /// Best-effort VM CPU time, core-seconds.
    pub be_core_s: f64,
    /// vSPACE's threshold explorer (Algorithm 3) at the end of the run;
    /// `None` for the other allocators.
    pub explorer: Option<ExplorerState>,
}

/// Where Algorithm 3 stood at the end of a run, and what its rounds did on
/// the way.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExplorerState {
    /// Exploration rounds completed (one per `samples_per_round` periods
    /// with a P95 report).
    pub rounds: u64,
    /// False once the explorer halted on stable thresholds (converged).
    pub exploring: bool,
    /// `Th_vCPU` in force, fraction of a core (initial 0.7).
    pub th_vcpu: f64,
    /// `Th_NQ` in force, fraction of a core (initial 0.7).
    pub th_nq: f64,
    /// What the rounds did.
    pub trace: ExplorerTrace,
}

/// What Algorithm 3's rounds did over a run: how often each branch ran, the
/// SLO violations they saw, and how far the thresholds went.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExplorerTrace {
    /// Rounds that took the violation branch (`decCount > 0`, lines 11–27):
    /// more periods violated the SLO than AllowVio allows.
    pub adjusted_rounds: u64,
    /// Rounds without a violation (lines 28–29: × Reward).
    pub rewarded_rounds: u64,
    /// Rounds with violations within the allowance (thresholds kept).
    pub kept_rounds: u64,
    /// Rounds that lowered a threshold.
    pub lowering_rounds: u64,
    /// Samples (periods) whose P95 was above the SLO, over every round.
    pub violating_samples: u64,
    /// Lowest and highest `Th_vCPU` in force over the run, the initial one
    /// included, fraction of a core.
    pub th_vcpu_range: (f64, f64),
    /// Lowest and highest `Th_NQ`, as `th_vcpu_range`.
    pub th_nq_range: (f64, f64),
}

impl ExplorerTrace {
    /// Nothing explored yet, from the initial thresholds.
    fn starting_at(th_vcpu: f64, th_nq: f64) -> Self {
        ExplorerTrace {
            adjusted_rounds: 0,
            rewarded_rounds: 0,
            kept_rounds: 0,
            lowering_rounds: 0,
            violating_samples: 0,
            th_vcpu_range: (th_vcpu, th_vcpu),
            th_nq_range: (th_nq, th_nq),
        }
    }

    /// Count one round.
    fn record(&mut self, r: &ExplorationRound) {
        match r.outcome {
            RoundOutcome::Adjusted { .. } => self.adjusted_rounds += 1,
            RoundOutcome::Rewarded => self.rewarded_rounds += 1,
            RoundOutcome::Kept => self.kept_rounds += 1,
        }
        if r.after.vcpu < r.before.vcpu || r.after.nq < r.before.nq {
            self.lowering_rounds += 1;
        }
        self.violating_samples += r.violations as u64;
        let widen = |(lo, hi): (f64, f64), v: f64| (lo.min(v), hi.max(v));
        self.th_vcpu_range = widen(self.th_vcpu_range, r.after.vcpu);
        self.th_nq_range = widen(self.th_nq_range, r.after.nq);
    }
}

/// What the allocator saw over one control period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Measured {
    pub vcpu_util: f64,
    pub nq_util: f64,
    pub p95_us: Option<f64>,
}

/// The allocator's state.
pub(crate) struct Allocator {
    spec: CoreMgmtSpec,
    total: u32,
    vspace: Option<(VspaceManager, CoreSets)>,
    /// What vSPACE's explorer did so far (vSPACE only).
    explorer_trace: Option<ExplorerTrace>,
    floor: u32,
    pub groups: Groups,
}

/// The vSPACE configuration of `spec` in `mode` over `total` cores: the
/// paper's constants, with `spec`'s control period and round length.
fn vspace_config(spec: &CoreMgmtSpec, mode: VspaceMode, total: u32) -> VspaceConfig {
    let mut cfg = VspaceConfig {
        period_ms: spec.period.as_nanos() / 1_000_000,
        ..VspaceConfig::new(mode, total as usize)
    };
    cfg.thresholds.samples_per_round = spec.samples_per_round;
    cfg
}

fn groups_of(a: &CoreAllocation) -> Groups {
    Groups {
        shared: false,
        vcpu_cores: a.vcpu_cores as u32,
        nq_cores: a.nq_cores as u32,
        be_cores: a.be_cores as u32,
        parked: a.idle_cores as u32,
    }
}

impl Allocator {
    /// The allocator of `spec` over `total` cores (CPUs `0..total`).
    pub(crate) fn new(spec: CoreMgmtSpec, total: u32) -> Allocator {
        let all = Groups {
            shared: true,
            vcpu_cores: total,
            nq_cores: 0,
            be_cores: 0,
            parked: 0,
        };
        let mut a = Allocator {
            spec,
            total,
            vspace: None,
            explorer_trace: None,
            floor: 1,
            groups: all,
        };
        match spec.alloc {
            CoreAllocSpec::TimeSharing
            | CoreAllocSpec::CoreNapLike
            | CoreAllocSpec::DemeterLike => {}
            CoreAllocSpec::TimeSharingOn { cores } => {
                let cores = cores.clamp(1, total);
                a.groups = Groups {
                    shared: true,
                    vcpu_cores: cores,
                    nq_cores: 0,
                    be_cores: 0,
                    parked: total - cores,
                }
            }
            CoreAllocSpec::Isolated {
                vcpu_cores,
                nq_cores,
            } => {
                a.groups = Groups {
                    shared: false,
                    vcpu_cores,
                    nq_cores,
                    be_cores: 0,
                    parked: total - vcpu_cores - nq_cores,
                }
            }
            CoreAllocSpec::Vspace { mode } => {
                let cfg = vspace_config(&spec, mode, total);
                // Validated when the scenario was parsed.
                let m = VspaceManager::new(&cfg).expect("vSPACE config validated at parse time");
                let th = m.thresholds();
                a.explorer_trace = Some(ExplorerTrace::starting_at(th.vcpu, th.nq));
                let cpus: Vec<usize> = (0..total as usize).collect();
                let sets = CoreSets::place(&m.allocation(), &cpus, &CoreSets::default())
                    .expect("the initial allocation covers every core");
                a.groups = groups_of(&m.allocation());
                a.vspace = Some((m, sets));
            }
        }
        a
    }

    /// vSPACE's threshold explorer as it stands; `None` for other allocators.
    pub(crate) fn explorer_state(&self) -> Option<ExplorerState> {
        let (m, _) = self.vspace.as_ref()?;
        let trace = self.explorer_trace?;
        let e = m.explorer();
        Some(ExplorerState {
            rounds: e.rounds(),
            exploring: e.is_exploring(),
            th_vcpu: e.thresholds().vcpu,
            th_nq: e.thresholds().nq,
            trace,
        })
    }

    /// True when the allocator acts every period.
    pub(crate) fn is_dynamic(&self) -> bool {
        matches!(
            self.spec.alloc,
            CoreAllocSpec::CoreNapLike | CoreAllocSpec::DemeterLike | CoreAllocSpec::Vspace { .. }
        )
    }

    /// One control period. Returns how many threads of the vCPU group and of
    /// the NQ group moved to another core (one per CPU that changed group).
    pub(crate) fn on_period(&mut self, m: Measured) -> (u32, u32) {
        let total = self.total;
        match self.spec.alloc {
            CoreAllocSpec::TimeSharing
            | CoreAllocSpec::TimeSharingOn { .. }
            | CoreAllocSpec::Isolated { .. } => (0, 0),
            CoreAllocSpec::DemeterLike => {
                let slo = self.spec.slo_us;
                if let Some(p95) = m.p95_us {
                    if p95 > slo {
                        self.floor = (self.floor.max(self.groups.vcpu_cores) + 1).min(total);
                    } else if p95 < slo / 2.0 {
                        self.floor = self.floor.saturating_sub(1).max(1);
                    }
                }
                // Packet processing is not counted: Demeter sizes the LC VM
                // by its own (vCPU) demand.
                let need = ((m.vcpu_util.max(0.0) / 0.7) - 1e-9).ceil().max(1.0) as u32;
                let prev = self.groups.vcpu_cores;
                let a = need.max(self.floor).min(total);
                self.groups.vcpu_cores = a;
                self.groups.be_cores = total - a;
                self.groups.parked = 0;
                (prev.saturating_sub(a), 0)
            }
            CoreAllocSpec::CoreNapLike => {
                let slo = self.spec.slo_us;
                if let Some(p95) = m.p95_us {
                    if p95 > slo {
                        self.floor = (self.floor.max(self.groups.vcpu_cores) + 1).min(total);
                    } else if p95 < slo / 2.0 {
                        self.floor = self.floor.saturating_sub(1).max(1);
                    }
                }
                let util = (m.vcpu_util + m.nq_util).max(0.0);
                let need = ((util / 0.7) - 1e-9).ceil().max(1.0) as u32;
                let prev = self.groups.vcpu_cores;
                let mut a = need.max(self.floor).min(total);
                if a < prev {
                    a = a.max(prev - 1);
                }
                self.groups.vcpu_cores = a;
                self.groups.parked = total - a;
                // Time-shared: threads follow the cores; a shrink moves the
                // threads of the parked core.
                let moved = prev.saturating_sub(a);
                (moved, 0)
            }
            CoreAllocSpec::Vspace { .. } => {
                let (mgr, prev) = self.vspace.as_mut().expect("vspace state");
                let out = mgr.on_period(PeriodMeasurement {
                    load: vadapt_policy::vspace::GroupLoad {
                        vcpu_util: m.vcpu_util,
                        nq_util: m.nq_util,
                    },
                    p95: m.p95_us.map(|us| Duration::from_micros(us.round() as u64)),
                });
                if let (Some(SampleOutcome::Explored(round)), Some(trace)) =
                    (out.sample, self.explorer_trace.as_mut())
                {
                    trace.record(&round);
                }
                let cpus: Vec<usize> = (0..total as usize).collect();
                let sets = CoreSets::place(&out.allocation, &cpus, prev)
                    .expect("the allocation covers every core");
                // Threads that lose their core move: one per CPU a group lost.
                let lost = |old: &[usize], new: &[usize]| {
                    old.iter().filter(|c| !new.contains(c)).count() as u32
                };
                let moved = (lost(&prev.vcpu, &sets.vcpu), lost(&prev.nq, &sets.nq));
                *prev = sets;
                self.groups = groups_of(&out.allocation);
                moved
            }
        }
    }
}
