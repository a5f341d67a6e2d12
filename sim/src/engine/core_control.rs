//! Core management: the core groups and their allocator, the control period
//! that measures and re-allocates, and the preemption of request/response
//! servers by queue workers in a time-shared group (the model is in the
//! `cores` module docs).

use crate::cores::{Allocator, CoreEvents, CoreMgmtSpec, Measured};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Running totals at a control period's end.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PeriodTotals {
    /// When, ns.
    pub(super) t: u64,
    /// vCPU time, ns.
    pub(super) guest: f64,
    /// Worker CPU time, ns.
    pub(super) host: f64,
    /// Worker wake-ups.
    pub(super) wakeups: u64,
}

/// The core groups, their allocator and what the last period measured.
pub(super) struct CoreControl {
    /// Core groups and their allocator.
    pub(super) allocator: Allocator,
    /// Totals at the last control period.
    at_last_period: PeriodTotals,
    /// Worker wake-ups per ns per core of the shared group, last period.
    wake_rate_per_core: f64,
    /// Mean worker CPU per wake-up over the last period, ns.
    pass_cpu_ns: f64,
    /// What core management did.
    pub(super) events: CoreEvents,
    /// Draws of the preemption model (apart from the workload's streams).
    preemption_rng: SmallRng,
}

impl CoreControl {
    /// `cores` cores managed as `spec` says; until a period is measured, a
    /// worker's run is one wake-up's CPU (`wakeup_cpu_ns + context_switch_ns`).
    pub(super) fn new(spec: CoreMgmtSpec, cores: u32, first_pass_cpu_ns: f64, seed: u64) -> Self {
        CoreControl {
            allocator: Allocator::new(spec, cores),
            at_last_period: PeriodTotals::default(),
            wake_rate_per_core: 0.0,
            pass_cpu_ns: first_pass_cpu_ns,
            events: CoreEvents::default(),
            preemption_rng: SmallRng::seed_from_u64(seed ^ 0x5EED_C0DE_0000_0001),
        }
    }

    /// End a control period with the totals `now` and the period's p95
    /// latency: measure, run the allocator, count. Returns the threads it
    /// moved (vCPUs, workers); nothing if the period is empty.
    pub(super) fn end_period(
        &mut self,
        now: PeriodTotals,
        p95_us: Option<f64>,
    ) -> Option<(u32, u32)> {
        let last = self.at_last_period;
        let dt = (now.t - last.t) as f64;
        if dt <= 0.0 {
            return None;
        }
        let dw = now.wakeups - last.wakeups;
        let g = self.allocator.groups;
        // Only workers sharing the vCPUs' cores preempt them.
        self.wake_rate_per_core = if g.shared {
            dw as f64 / dt / f64::from(g.vcpu_cores)
        } else {
            0.0
        };
        if dw > 0 {
            self.pass_cpu_ns = (now.host - last.host) / dw as f64;
        }
        let m = Measured {
            vcpu_util: (now.guest - last.guest) / dt,
            nq_util: (now.host - last.host) / dt,
            p95_us,
        };
        self.at_last_period = now;
        let (moved_v, moved_w) = self.allocator.on_period(m);
        let g = self.allocator.groups;
        let ev = &mut self.events;
        ev.periods += 1;
        ev.core_periods[0] += u64::from(g.vcpu_cores);
        ev.core_periods[1] += u64::from(g.nq_cores);
        ev.core_periods[2] += u64::from(g.be_cores);
        ev.core_periods[3] += u64::from(g.parked);
        ev.migrations += u64::from(moved_v + moved_w);
        Some((moved_v, moved_w))
    }

    /// Whether queue workers preempt request/response servers now: they
    /// share the vCPUs' cores and woke up in the last period.
    pub(super) fn workers_preempt_servers(&self) -> bool {
        self.allocator.groups.shared && self.wake_rate_per_core > 0.0
    }

    /// Extra time a request's service of `run` ns takes because queue
    /// workers preempt its vCPU, with `demand` = (vCPU threads, workers)
    /// runnable. Only when [`Self::workers_preempt_servers`].
    pub(super) fn preemption_delay(
        &mut self,
        run: f64,
        demand: (f64, f64),
        context_switch_ns: f64,
        slice_ns: f64,
    ) -> f64 {
        let cores = f64::from(self.allocator.groups.vcpu_cores);
        let (dv, dw) = demand;
        // A third runnable thread on the preempted core (besides the vCPU
        // and the worker), threads placed at random on the group's cores.
        let others = (dv + dw - 2.0).max(0.0);
        let p_queued = 1.0 - (1.0 - 1.0 / cores).powf(others);
        let lambda = self.wake_rate_per_core;
        let mut delay = 0.0;
        // Poisson arrivals of wake-ups on this core over the service time.
        let mut t = 0.0;
        loop {
            let u: f64 = self.preemption_rng.gen_range(f64::MIN_POSITIVE..1.0);
            t += -u.ln() / lambda;
            if t > run {
                break;
            }
            self.events.preemptions += 1;
            delay += 2.0 * context_switch_ns + self.pass_cpu_ns;
            if self.preemption_rng.gen::<f64>() < p_queued {
                self.events.slice_waits += 1;
                delay += slice_ns;
            }
        }
        delay
    }
}
