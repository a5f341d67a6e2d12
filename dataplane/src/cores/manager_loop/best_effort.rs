//! vSPACE-R's best-effort VMs: `stop` and `cont` as wanted, on the VM's QMP
//! worker, retried with backoff until done or the VM is gone.

use super::*;

impl CoreManager {
    /// vSPACE-R wants the best-effort VMs paused (no core left for them)
    /// or running; [`CoreManager::run_stop_cont`] carries it out.
    pub(super) fn want_best_effort_paused(&mut self, pause: bool) {
        for vm in &mut self.vms {
            if vm.role == VmRole::Be && vm.want_paused != pause {
                vm.want_paused = pause;
                vm.run_retry = None;
            }
        }
    }

    /// `stop` or `cont` each VM whose state differs from what is wanted,
    /// on its QMP worker, in every mode: a failure is retried with backoff
    /// until it succeeds or the VM is gone.
    pub(super) fn run_stop_cont(&mut self, now: Instant) {
        for vm in &mut self.vms {
            if vm.paused == vm.want_paused || vm.qmp.is_none() {
                continue;
            }
            if vm.run_retry.is_some_and(|(at, _)| now < at) {
                continue;
            }
            let run = if vm.want_paused {
                VmRun::Stop
            } else {
                VmRun::Cont
            };
            if let Some(w) = &vm.qmp_worker {
                if w.submit(QmpRequest::Run(run)) && run == VmRun::Stop {
                    vm.stop_sent = true;
                }
            }
        }
    }
}

/// Record what a `stop` or `cont` did: a line for `vadapt cores` when the
/// VM is now as wanted, `None` when it failed (retried after a backoff
/// that doubles up to [`RUN_RETRY_MAX`]; each distinct error logged once).
pub(super) fn settle_run(
    vm: &mut ManagedVm,
    run: VmRun,
    result: Result<(), RunFailure>,
    now: Instant,
) -> Option<String> {
    let e = match (run, result) {
        (_, Ok(())) => {
            vm.paused = run == VmRun::Stop;
            vm.stop_sent = vm.paused;
            vm.run_retry = None;
            vm.run_error = None;
            let what = if vm.paused {
                "paused (no core left for it)"
            } else {
                "resumed"
            };
            tracing::info!(vm = vm.name, "core manager: best-effort VM {what}");
            return Some(format!(
                "{}: {}",
                vm.name,
                if vm.paused { "paused" } else { "resumed" }
            ));
        }
        // Nothing to resume: a VM that comes back at that socket is a new one.
        (VmRun::Cont, Err(RunFailure::Gone(_))) => {
            vm.paused = false;
            vm.stop_sent = false;
            vm.run_retry = None;
            vm.run_error = None;
            return Some(format!("{}: gone while paused", vm.name));
        }
        // The whole chain, as one line: each distinct one is logged once.
        (_, Err(e)) => vadapt_host::error_chain::error_chain(&e),
    };
    let wait = vm
        .run_retry
        .map_or(RUN_RETRY_FIRST, |(_, w)| (w * 2).min(RUN_RETRY_MAX));
    vm.run_retry = Some((now + wait, wait));
    if vm.run_error.as_deref() != Some(&e) {
        tracing::warn!(
            vm = vm.name,
            error = %e,
            "core manager: QMP `{}` failed; tried again with backoff (up to every {} s) until it works or the VM is gone",
            run.command(),
            RUN_RETRY_MAX.as_secs()
        );
        vm.run_error = Some(e);
    }
    None
}
