//! Finding each VM's vCPU threads: a lookup handed to the VM's QMP worker
//! when due, and the replies taken a later period (thread ids not of the
//! VM's QEMU refused and counted).

use super::best_effort::settle_run;
use super::*;

impl CoreManager {
    /// Hand each VM whose lookup is due a lookup request, if its QMP
    /// worker is free. The reply is taken by a later period.
    pub(super) fn look_up_vcpus(&mut self, now: Instant) {
        for vm in &mut self.vms {
            let Some(socket) = vm.qmp.clone() else {
                continue;
            };
            let due = match vm.looked_up {
                None => true,
                Some(t) if vm.vcpus.is_empty() => now.duration_since(t) >= RETRY_LOOKUP,
                Some(t) => now.duration_since(t) >= REDISCOVER_EVERY,
            };
            if !due {
                continue;
            }
            if vm.qmp_worker.is_none() {
                let qmp = VmQmp {
                    socket,
                    pidfile: vm.qemu_pidfile.clone(),
                    proc_root: self.proc_root.clone(),
                };
                match qmp.spawn() {
                    Ok(w) => vm.qmp_worker = Some(w),
                    Err(e) => {
                        tracing::warn!(vm = vm.name, error = %e, "core manager: cannot start the VM's QMP thread; tried again next period");
                        continue;
                    }
                }
            }
            if vm
                .qmp_worker
                .as_ref()
                .is_some_and(|w| w.submit(QmpRequest::LookUp))
            {
                vm.looked_up = Some(now);
            }
        }
    }

    /// Take the replies the VMs' QMP workers have ready.
    pub(super) fn take_qmp_replies(&mut self, now: Instant) {
        let mut notes = Vec::new();
        let (mut errors, mut foreign) = (0, 0);
        for vm in &mut self.vms {
            while let Some(reply) = vm.qmp_worker.as_ref().and_then(PeerWorker::take) {
                match reply {
                    QmpReply::LookedUp(Ok(found)) => {
                        if !found.refused.is_empty() {
                            foreign += found.refused.len() as u64;
                            if vm
                                .foreign_warned
                                .is_none_or(|t| now.duration_since(t) >= FOREIGN_TID_WARN_EVERY)
                            {
                                vm.foreign_warned = Some(now);
                                let tids: Vec<u32> =
                                    found.refused.iter().take(16).copied().collect();
                                tracing::warn!(
                                    vm = vm.name,
                                    qemu_pid = found.process.pid,
                                    ?tids,
                                    refused = found.refused.len(),
                                    "core manager: QMP named thread ids that are not threads of the VM's QEMU; they are never moved"
                                );
                            }
                        }
                        if vm.vcpus != found.vcpus {
                            let tids: Vec<u32> = found.vcpus.iter().map(|t| t.tid).collect();
                            tracing::info!(
                                vm = vm.name,
                                qemu_pid = found.process.pid,
                                ?tids,
                                "core manager: vCPU threads found"
                            );
                            notes.push(format!("{}: vCPU threads {tids:?}", vm.name));
                        }
                        vm.qemu_pid = Some(found.process.pid);
                        vm.vcpus = found.vcpus;
                        vm.error = None;
                    }
                    QmpReply::LookedUp(Err(e)) => {
                        // One line, its causes included: what `vadapt cores` shows.
                        let e = vadapt_host::error_chain::error_chain(&e);
                        if vm.error.as_deref() != Some(&e) {
                            tracing::warn!(vm = vm.name, error = %e, "core manager: cannot find the VM's vCPU threads; its vCPUs are left where they are");
                        }
                        errors += 1;
                        vm.vcpus.clear();
                        vm.qemu_pid = None;
                        vm.error = Some(e);
                    }
                    QmpReply::Ran(run, result) => {
                        if let Some(line) = settle_run(vm, run, result, now) {
                            notes.push(line);
                        } else {
                            errors += 1;
                        }
                    }
                }
            }
        }
        {
            let mut s = self.status.edit();
            s.qmp_errors += errors;
            s.foreign_tids_refused += foreign;
        }
        for n in notes {
            self.note(n);
        }
    }
}
