//! Frequencies and energy (optional `[host.power]`): a worker's work goes
//! slower at a lower frequency, and power integrates the platform, busy,
//! idle and parked cores. A core a worker owns idles at that worker's
//! frequency, in a shallow state until it has been idle for the deep
//! state's residency (or always, with C-states off): the model behind
//! EE-KBP's frequency hints (the lab's `vadapt_lab/reproduce/eekbp.py`
//! writes the scenarios and cites each constant).

use super::workers::WorkerState;
use super::Engine;

impl Engine<'_> {
    /// Speed at frequency `index` relative to the top frequency (1 without
    /// `host.power`).
    pub(super) fn freq_factor(&self, index: usize) -> f64 {
        match &self.scenario.host.power {
            Some(p) => p.freqs_mhz[index] / p.freqs_mhz[p.freqs_mhz.len() - 1],
            None => 1.0,
        }
    }

    /// Extra wake-up latency of a worker after `idle_ns` idle on a
    /// core it owns: the deep idle state's exit latency once the core has
    /// been idle for its residency (C-states on), else 0.
    pub(super) fn cstate_exit_ns(&self, idle_ns: f64) -> u64 {
        let Some(p) = &self.scenario.host.power else {
            return 0;
        };
        let g = self.cores.allocator.groups;
        let owns_core = !g.shared && g.nq_cores as usize >= self.queues.len();
        if owns_core && p.cstates && idle_ns >= p.deep_residency_us * 1e3 {
            (p.deep_exit_us * 1e3).round() as u64
        } else {
            0
        }
    }

    /// Add the energy of the next `dt` ns at the current shares.
    pub(super) fn account_energy(&mut self, dt: f64) {
        let Some(p) = &self.scenario.host.power else {
            return;
        };
        let top = p.freqs_mhz.len() - 1;
        let mut busy = 0.0;
        let mut watts = p.platform_w;
        let g = self.cores.allocator.groups;
        // A worker that owns its core (isolated NQ group with a core per
        // worker, as the EE-KBP paper's isolcpus) leaves that core idle at
        // the worker's own frequency while it waits, deep or shallow by how
        // long it has waited.
        let own_cores = !g.shared && g.nq_cores as usize >= self.queues.len();
        let mut owned_idle = 0.0;
        for q in &self.queues {
            // The NIC's receive work (NAPI) on the worker's core.
            let rx = q.napi.as_ref().map_or(0.0, |n| n.cpu_rate(self.cpu.worker));
            busy += rx;
            watts += rx * p.active_w[q.worker.freq_index];
            if q.worker.state == WorkerState::Running {
                busy += self.cpu.worker;
                watts += self.cpu.worker * p.active_w[q.worker.freq_index];
            } else if own_cores {
                // Idle for the part of the core the receive path leaves.
                let idle_ns = self.now.saturating_sub(q.worker.wait_start) as f64;
                let left = (1.0 - rx).max(0.0);
                watts += left * p.idle_core_w(q.worker.freq_index, idle_ns);
                owned_idle += left;
            }
        }
        let (dv, _) = self.demand();
        let vcpu_busy = dv * self.cpu.vcpu;
        watts += vcpu_busy * p.active_w[top];
        // Cores of the groups that are not busy sit in a shallow idle state
        // at the top frequency (wake-ups keep landing on them); parked cores
        // are at the lowest frequency, in the lowest state; cores lent to a
        // CPU-bound best-effort VM are busy.
        let be = if self.scenario.host.core_mgmt.be_vm {
            f64::from(g.be_cores)
        } else {
            0.0
        };
        watts += be * p.active_w[top];
        let parked = f64::from(g.parked) + f64::from(g.be_cores) - be;
        let active = f64::from(g.vcpu_cores + g.nq_cores);
        let idle = (active - busy - vcpu_busy - owned_idle).max(0.0);
        watts +=
            idle * p.idle_core_w(top, f64::INFINITY) + parked * p.idle_core_w(0, f64::INFINITY);
        self.energy_joules += watts * dt / 1e9;
    }
}
