//! vSPACE-Guest: each VM with an agent asked to match its groups' sizes.

use super::*;

impl CoreManager {
    /// vSPACE-Guest: each VM with an agent gets as many vCPUs online as its
    /// group has cores (the vCPU group, or the best-effort cores for a BE
    /// VM in mode R), and as many queue pairs as the NQ group has cores (at
    /// most its port's).
    pub(super) fn drive_guests(&mut self, now: Instant) {
        let mut notes = Vec::new();
        let mut errors = 0;
        for vm in &mut self.vms {
            let cores = if vm.role == VmRole::Be && self.mode == VspaceMode::Resource {
                self.sets.be.len()
            } else {
                self.sets.vcpu.len()
            };
            if cores == 0 || vm.paused {
                continue;
            }
            let target = GuestTarget {
                vcpus: cores,
                queue_pairs: (self
                    .sets
                    .nq
                    .len()
                    .clamp(1, usize::from(vm.queue_pairs.max(1))))
                    as u16,
                max_vcpus: if vm.vcpus.is_empty() {
                    qga::MAX_VCPUS
                } else {
                    vm.vcpus.len()
                },
            };
            match vm.guest.drive(&vm.name, now, target) {
                GuestOutcome::Nothing => {}
                GuestOutcome::Applied(line) => notes.push(line),
                GuestOutcome::Failed => errors += 1,
            }
        }
        self.status.edit().qga_errors += errors;
        for n in notes {
            self.note(n);
        }
    }
}
