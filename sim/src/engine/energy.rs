//! Frequencies and energy (optional `[host.power]`): a worker's work goes
//! slower at a lower frequency, and power integrates busy, idle and parked
//! cores.

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

    /// Add the energy of the next `dt` ns at the current shares.
    pub(super) fn account_energy(&mut self, dt: f64) {
        let Some(p) = &self.scenario.host.power else {
            return;
        };
        let top = p.freqs_mhz.len() - 1;
        let mut busy = 0.0;
        let mut watts = 0.0;
        for q in &self.queues {
            if q.worker.state == WorkerState::Running {
                busy += self.cpu.worker;
                watts += self.cpu.worker * p.active_w[q.worker.freq_index];
            }
        }
        let (dv, _) = self.demand();
        let vcpu_busy = dv * self.cpu.vcpu;
        watts += vcpu_busy * p.active_w[top];
        // Cores of the groups that are not busy sit in a shallow idle state
        // at the top frequency (wake-ups keep landing on them); parked cores
        // are at the lowest frequency, in the lowest state; cores lent to a
        // CPU-bound best-effort VM are busy.
        let g = self.cores.allocator.groups;
        let be = if self.scenario.host.core_mgmt.be_vm {
            f64::from(g.be_cores)
        } else {
            0.0
        };
        watts += be * p.active_w[top];
        let parked = f64::from(g.parked) + f64::from(g.be_cores) - be;
        let active = f64::from(g.vcpu_cores + g.nq_cores);
        let idle = (active - busy - vcpu_busy).max(0.0);
        watts += idle * p.idle_w[top] + parked * p.idle_w[0];
        self.energy_joules += watts * dt / 1e9;
    }
}
