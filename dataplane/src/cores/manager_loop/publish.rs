//! What `vadapt cores` and the metrics show after each period.

use super::*;

impl CoreManager {
    pub(super) fn publish(
        &self,
        load: Option<&vadapt_host::thread_load::PeriodLoad>,
        outcome: Option<vadapt_policy::vspace::PeriodOutcome>,
    ) {
        let mut s = self.status.edit();
        s.mode = self.mode;
        s.cpus = self.cfg.cpus.clone();
        s.apply = match self.applier.mechanism() {
            Mechanism::Affinity => Placement::Affinity,
            Mechanism::Cpuset(_) => Placement::Cpuset,
            Mechanism::AdviseOnly { .. } => Placement::AdviseOnly,
        };
        s.advise_reason = match self.applier.availability() {
            vadapt_host::Availability::Unavailable { reason } => Some(reason),
            _ => None,
        };
        s.sets = self.sets.clone();
        s.periods += 1;
        if let Some(m) = &self.manager {
            let th = m.thresholds();
            s.threshold_vcpu = th.vcpu;
            s.threshold_nq = th.nq;
            s.exploring = m.explorer().is_exploring();
        }
        if let Some(l) = load {
            s.util_vcpu = l.vcpu.util;
            s.util_nq = l.nq.util;
            s.util_be = l.be.util;
        }
        s.run_delay_vcpu_s = self.run_delay[0].as_secs_f64();
        s.run_delay_nq_s = self.run_delay[1].as_secs_f64();
        if let Some(o) = outcome {
            if o.changed {
                s.reallocations += 1;
                let a = o.allocation;
                let what = format!(
                    "period {}: vcpu {} nq {} idle {} be {} (util vcpu {:.2} nq {:.2})",
                    s.periods,
                    a.vcpu_cores,
                    a.nq_cores,
                    a.idle_cores,
                    a.be_cores,
                    s.util_vcpu,
                    s.util_nq
                );
                s.note(what);
            }
            if let Some(SampleOutcome::Explored(round)) = o.sample {
                s.explorations += 1;
                let what = format!("period {}: thresholds explored: {round:?}", s.periods);
                s.note(what);
            }
        }
        s.vms = self
            .vms
            .iter()
            .map(|vm| VmCores {
                name: vm.name.clone(),
                role: vm.role,
                qmp: vm.qmp.as_ref().map(|p| p.display().to_string()),
                vcpu_tids: vm.vcpus.iter().map(|t| t.tid).collect(),
                qemu_pid: vm.qemu_pid,
                error: vm.error.clone(),
                paused: vm.paused,
                guest_vcpus: vm.guest.applied().0,
                guest_queue_pairs: vm.guest.applied().1,
                guest_error: vm.guest.error.clone(),
            })
            .collect();
        s.worker_tids = self
            .ports
            .iter()
            .map(|p| p.worker_stats.tid.load(Ordering::Acquire))
            .filter(|&t| t > 0)
            .map(|t| t as u32)
            .collect();
        if let Some(pool) = &self.nq_workers {
            s.worker_tids = pool.tids();
            s.nq_workers = pool.status();
            s.queue_set_moves = pool.moves();
        }
        s.worker_tids.extend(self.roster.nic_worker_tids());
    }
}
