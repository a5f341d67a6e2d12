//! CPU time: the processor-sharing share of each runnable thread in its
//! core group, vCPU slices among senders, the preemption of request/response
//! servers by workers, and the threads a control period moves.

use super::core_control::PeriodTotals;
use super::events::Event;
use super::workers::WorkerState;
use super::{ns, Engine};
use crate::result::LatHist;
use crate::sched::Scheduler;

impl Engine<'_> {
    /// Runnable threads right now: (vCPU threads, queue workers).
    pub(super) fn demand(&self) -> (f64, f64) {
        let (mut dv, mut dw) = (0.0, 0.0);
        for q in &self.queues {
            if q.worker.state == WorkerState::Running {
                dw += 1.0;
            }
            if let Some(p) = &q.senders {
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

    /// The scheduler of a group of `cores` cores.
    fn group_scheduler(&self, cores: u32) -> Scheduler {
        Scheduler {
            cores: f64::from(cores),
            ..self.cpu.scheduler
        }
    }

    /// Each group's processor-sharing share for the threads runnable now.
    /// The NIC's receive work (NAPI, [`crate::napi`]) lands on the workers'
    /// group: softIRQ context takes a core from its threads while it runs,
    /// ksoftirqd is one more thread sharing them.
    pub(super) fn update_shares(&mut self) {
        let (dv, dw) = self.demand();
        let (softirq, ksoftirqd) = self.receive_demand();
        let g = self.cores.allocator.groups;
        if g.shared {
            let s = self
                .group_scheduler_without(g.vcpu_cores, softirq)
                .share(dv + dw + ksoftirqd);
            self.cpu.vcpu = s;
            self.cpu.worker = s;
        } else {
            self.cpu.vcpu = self.group_scheduler(g.vcpu_cores).share(dv);
            self.cpu.worker = self
                .group_scheduler_without(g.nq_cores, softirq)
                .share(dw + ksoftirqd);
        }
        self.assign_slices(dw);
    }

    /// The scheduler of a group of `cores` cores, `taken` of them running
    /// softIRQs (no thread runs there meanwhile).
    fn group_scheduler_without(&self, cores: u32, taken: f64) -> Scheduler {
        Scheduler {
            cores: (f64::from(cores) - taken).max(0.0),
            ..self.cpu.scheduler
        }
    }

    /// With `host.vcpu_sched = "slices"`: which senders have a core now
    /// (the cores of the vCPU group not taken by running workers, when the
    /// groups share cores, nor by request/response servers).
    fn assign_slices(&mut self, running_workers: f64) {
        let Some(slicing) = self.slicing.as_mut() else {
            return;
        };
        let g = self.cores.allocator.groups;
        let servers: f64 = self.vms.iter().map(|v| v.running(self.now, false)).sum();
        let taken = servers + if g.shared { running_workers } else { 0.0 };
        let cores = (f64::from(g.vcpu_cores) - taken).max(0.0);
        let runnable: Vec<f64> = self
            .queues
            .iter()
            .map(|q| {
                q.senders
                    .as_ref()
                    .filter(|p| !p.stalled)
                    .map_or(0.0, |p| p.threads)
            })
            .collect();
        let scheduler = self.cpu.scheduler;
        let waiting = slicing.slices.assign(&runnable, cores, &mut slicing.on_cpu);
        slicing.speed = if waiting {
            1.0 - (scheduler.context_switch_ns / scheduler.slice_ns).min(1.0)
        } else {
            1.0
        };
        if waiting {
            if let Some(generation) = slicing.slices.arm() {
                let at = self.now + scheduler.slice_ns as u64;
                self.events.push(at, Event::SliceEnd { generation });
            }
        }
    }

    /// vCPU time a queue's senders get per ns now.
    pub(super) fn sender_rate(&self, q: usize) -> f64 {
        match (&self.queues[q].senders, &self.slicing) {
            (None, _) => 0.0,
            (Some(_), Some(slicing)) => slicing.on_cpu[q] * slicing.speed,
            (Some(p), None) => p.threads * self.cpu.vcpu,
        }
    }

    /// Extra time a request's service of `run` ns takes because queue
    /// workers preempt its vCPU (time-shared groups only; the model is in
    /// the `cores` module docs).
    pub(super) fn preemption_delay(&mut self, run: f64) -> f64 {
        if !self.cores.workers_preempt_servers() {
            return 0.0;
        }
        let demand = self.demand();
        let scheduler = self.cpu.scheduler;
        self.cores.preemption_delay(
            run,
            demand,
            self.calibration.context_switch_ns,
            scheduler.slice_ns,
        )
    }

    /// End of a control period: measure, run the allocator, move threads.
    pub(super) fn end_control_period(&mut self) {
        let now = self.now;
        let totals = PeriodTotals {
            t: now,
            guest: self.vms.iter().map(|v| v.guest_busy).sum(),
            host: self.queues.iter().map(|q| q.worker.busy_ns).sum(),
            wakeups: self.queues.iter().map(|q| q.counters.wakeups).sum(),
        };
        let p95_us = self.latencies.since_control_period.quantile(0.95);
        let Some((moved_v, moved_w)) = self.cores.end_period(totals, p95_us) else {
            return;
        };
        self.latencies.since_control_period = LatHist::default();
        // Migration: a moved worker refills its cache (more work in its
        // pass); a moved vCPU starts its next request later.
        let mig = self.scenario.host.core_mgmt.migration_ns;
        let mut left = moved_w;
        for q in &mut self.queues {
            if left == 0 {
                break;
            }
            if q.worker.state == WorkerState::Running {
                q.worker.work_left += mig;
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
}
