//! VM ports added and removed at run time: the manager follows the
//! daemon's roster at the start of each period.

use super::*;

impl CoreManager {
    /// Take up the VMs of ports added since the last period, and let go of
    /// those of ports removed: a removed VM that vSPACE-R may have paused is
    /// resumed (QMP `cont`, on a thread of its own with short waits, so the
    /// period does not wait for it), and its threads stay where they are
    /// until the manager stops, when every thread it moved is put back (if
    /// it still exists; see `vadapt_host::applier`).
    pub(super) fn follow_roster(&mut self) {
        let generation = self.roster.generation();
        if generation == self.roster_seen {
            return;
        }
        self.roster_seen = generation;
        self.ports = self.roster.current();
        let ports = Arc::clone(&self.ports);
        let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut self.vms)
            .into_iter()
            .partition(|vm| ports.iter().any(|p| p.name() == vm.name));
        self.vms = kept;
        for vm in gone {
            tracing::info!(
                vm = vm.name,
                "core manager: port removed; VM no longer managed"
            );
            self.note(format!("vm {} removed", vm.name));
            if vm.stop_sent || vm.paused {
                resume_in_background(&vm);
            }
        }
        for p in ports.iter() {
            if !self.vms.iter().any(|vm| vm.name == p.name()) {
                tracing::info!(vm = p.name(), "core manager: port added; VM managed");
                self.note(format!("vm {} added", p.name()));
                self.vms.push(ManagedVm::of(p));
            }
        }
    }
}

/// Resume `vm`, which we may have paused, without waiting for it: the
/// outcome goes to the log.
fn resume_in_background(vm: &ManagedVm) {
    let Some(socket) = vm.qmp.clone() else {
        return;
    };
    let name = vm.name.clone();
    let limits = QmpLimits {
        timeout: RELEASE_DEADLINE / 4,
        max_line: 1 << 16,
    };
    let spawned = std::thread::Builder::new()
        .name("vadapt-resume".into())
        .spawn(
            move || match vm_qmp::run_bounded(&socket, VmRun::Cont, limits) {
                Ok(()) | Err(RunFailure::Gone(_)) => {
                    tracing::info!(vm = name, "core manager: removed VM resumed")
                }
                Err(e @ RunFailure::Failed(_)) => tracing::error!(
                    vm = name,
                    error = %vadapt_host::error_chain::error_chain(&e),
                    "core manager: cannot resume the removed VM; resume it with QMP `cont`"
                ),
            },
        );
    if let Err(e) = spawned {
        tracing::error!(vm = vm.name, error = %e, "core manager: cannot resume the removed VM (no thread); resume it with QMP `cont`");
    }
}
