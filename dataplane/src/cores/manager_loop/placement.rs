//! Putting the groups on their cores: which threads are managed, the
//! applier's moves, the pool of NQ workers resized to the NQ group, and the
//! idle cores' frequency.

use super::*;

impl CoreManager {
    /// One pool worker per CPU of the NQ group, when the group changed.
    pub(super) fn resize_pool(&mut self) {
        let Some(pool) = &self.nq_workers else { return };
        if self.pool_nq == self.sets.nq {
            return;
        }
        match pool.resize(&self.sets.nq) {
            Ok(moved) => {
                tracing::info!(
                    workers = self.sets.nq.len().max(1),
                    moved,
                    "core manager: queue workers follow the NQ group"
                );
                self.pool_nq = self.sets.nq.clone();
                self.note(format!(
                    "queue workers: {} (queue sets moved {moved})",
                    self.sets.nq.len().max(1)
                ));
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "core manager: cannot resize the queue workers; retried next period");
            }
        }
    }

    /// Every thread under management, with its group.
    pub(super) fn threads(&self) -> Vec<GroupThread> {
        let mut v = Vec::new();
        for vm in &self.vms {
            let group = if vm.role == VmRole::Be && self.mode == VspaceMode::Resource {
                ThreadGroup::Be
            } else {
                ThreadGroup::Vcpu
            };
            v.extend(vm.vcpus.iter().map(|&task| GroupThread { group, task }));
        }
        // Our own queue workers (VM ports', the pool's, and the uplinks'
        // NIC queues'); one that just exited is left out.
        let pid = std::process::id();
        let workers = self
            .ports
            .iter()
            .map(|p| p.worker_stats.tid.load(Ordering::Acquire))
            .filter(|&tid| tid > 0)
            .map(|tid| tid as u32)
            .chain(self.pool_tids())
            .chain(self.roster.nic_worker_tids());
        for tid in workers {
            if let Ok(task) = TaskId::of_process(&self.proc_root, pid, tid) {
                v.push(GroupThread {
                    group: ThreadGroup::Nq,
                    task,
                });
            }
        }
        v.sort();
        v.dedup();
        v
    }

    pub(super) fn pool_tids(&self) -> Vec<u32> {
        self.nq_workers
            .as_ref()
            .map(|p| p.tids())
            .unwrap_or_default()
    }

    pub(super) fn apply(&mut self, threads: &[GroupThread]) {
        if let Some((sets, applied)) = &self.applied {
            if *sets == self.sets && applied == threads {
                return;
            }
        }
        // The pool's workers pin themselves, each to its own NQ core: the
        // applier (which allows a thread the whole group) leaves them be.
        let pool = self.pool_tids();
        let placed: Vec<GroupThread> = threads
            .iter()
            .filter(|t| !pool.contains(&t.task.tid))
            .copied()
            .collect();
        let report = self.applier.apply(&self.sets, &placed);
        if !self.applier.is_advise_only() {
            set_frequencies(&self.sets, &self.freqs);
        }
        let (moved, refused) = (report.moved(), report.refused());
        {
            let mut s = self.status.edit();
            s.threads_moved += moved as u64;
            s.threads_refused += refused as u64;
        }
        if refused > 0 && moved == 0 && matches!(self.applier.mechanism(), Mechanism::Affinity) {
            let reason = report
                .threads
                .iter()
                .find_map(|t| match &t.outcome {
                    ThreadOutcome::Refused { reason } => Some(reason.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            tracing::warn!(%reason, "core manager: the kernel refuses to move the managed threads; advise-only from now on");
            self.applier
                .fall_back_to_advise_only(format!("thread placement refused: {reason}"));
        }
        for (group, error) in &report.group_errors {
            tracing::warn!(group = group.name(), %error, "core manager: cannot set the group's cpuset");
        }
        self.applied = Some((self.sets.clone(), threads.to_vec()));
    }
}

/// The lowest frequency on idle CPUs, the highest on the others (each
/// `CpuFreq` writes only when its value changes). Failures are logged.
pub(super) fn set_frequencies(sets: &CoreSets, freqs: &[CpuFreq]) {
    for f in freqs {
        let Some(cpu) = f.cpu() else { continue };
        let hint = if sets.idle.contains(&cpu) {
            FreqHint::Min
        } else {
            FreqHint::Max
        };
        if let Err(e) = f.apply(hint) {
            tracing::warn!(cpu, error = %error_chain(&e), "core manager: cannot set the CPU's frequency");
        }
    }
}
