//! Stopping: every moved thread put back, paused VMs resumed, within
//! [`RELEASE_DEADLINE`].

use super::*;

impl CoreManager {
    /// Stop managing, within [`RELEASE_DEADLINE`] whatever the peers do:
    /// every thread the manager moved gets back what it had (affinity or
    /// cgroup), paused best-effort VMs are resumed, and `vadapt cores`
    /// says so. Called when the manager's loop ends, normally or after a
    /// panic in a period.
    pub(super) fn release(&mut self) {
        self.set_mode(VspaceMode::Off);
        let report = self.applier.restore();
        for (task, why) in &report.failed {
            tracing::error!(
                pid = task.pid,
                tid = task.tid,
                error = %why,
                "core manager: cannot put a thread back as it was before vadapt moved it"
            );
        }
        if report.restored > 0 || !report.failed.is_empty() {
            tracing::info!(
                restored = report.restored,
                gone = report.gone,
                failed = report.failed.len(),
                "core manager: threads put back as they were"
            );
        }
        self.resume_all_now();
        let mut s = self.status.edit();
        s.mode = self.mode;
        s.sets = self.sets.clone();
        s.threads_restored += report.restored as u64;
        for vm in &mut s.vms {
            vm.paused = self.vms.iter().any(|m| m.name == vm.name && m.paused);
        }
    }

    /// Resume every VM that is, or may be, paused by us: each on a fresh
    /// QMP connection of its own thread with short waits, all within
    /// [`RELEASE_DEADLINE`]. A VM that does not answer in time is named in
    /// an ERROR line, with how to resume it by hand.
    pub(super) fn resume_all_now(&mut self) {
        let limits = QmpLimits {
            timeout: RELEASE_DEADLINE / 4,
            max_line: 1 << 16,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let mut waiting = Vec::new();
        for (i, vm) in self.vms.iter().enumerate() {
            let Some(socket) = vm.qmp.clone() else {
                continue;
            };
            // Whatever became of a `stop` (answered or not, its answer
            // taken or not), a `cont` to a running VM is harmless.
            if !vm.stop_sent {
                continue;
            }
            let tx = tx.clone();
            let spawned = std::thread::Builder::new()
                .name("vadapt-resume".into())
                .spawn(move || {
                    let _ = tx.send((i, vm_qmp::run_bounded(&socket, VmRun::Cont, limits)));
                });
            if spawned.is_ok() {
                waiting.push(i);
            }
        }
        drop(tx);
        let deadline = Instant::now() + RELEASE_DEADLINE;
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok((i, result)) = rx.recv_timeout(left) else {
                break;
            };
            waiting.retain(|&w| w != i);
            let vm = &mut self.vms[i];
            match result {
                Ok(()) | Err(RunFailure::Gone(_)) => {
                    vm.paused = false;
                    vm.stop_sent = false;
                    tracing::info!(vm = vm.name, "core manager: best-effort VM resumed");
                }
                Err(e @ RunFailure::Failed(_)) => tracing::error!(
                    vm = vm.name,
                    error = %vadapt_host::error_chain::error_chain(&e),
                    "core manager: cannot resume the best-effort VM; resume it with QMP `cont`"
                ),
            }
        }
        for i in waiting {
            tracing::error!(
                vm = self.vms[i].name,
                "core manager: the best-effort VM's QMP did not answer `cont` within {} ms; \
                 resume it with QMP `cont`",
                RELEASE_DEADLINE.as_millis()
            );
        }
    }
}
