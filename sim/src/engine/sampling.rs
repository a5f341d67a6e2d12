//! What a run measures: response latencies, the time series (one sample per
//! `sample` interval, rates over the window since the last one), and the
//! per-worker summary at the end.

use super::guests::SimulatedVm;
use super::queues::SimulatedQueue;
use super::request_response::rate_at;
use crate::result::{LatHist, Sample, WorkerSummary};
use crate::scenario::Scenario;

/// Running totals of the counters a sample turns into rates.
#[derive(Clone, Debug, Default)]
pub(super) struct Totals {
    /// When they were taken, ns.
    pub(super) t: u64,
    /// Payload bytes sent on the wire, per VM.
    nic: Vec<f64>,
    /// Worker CPU time, ns.
    host: f64,
    /// vCPU time, ns.
    guest: f64,
    /// Guest kicks.
    kicks: u64,
    /// Calls into the guest.
    calls: u64,
    /// Worker wake-ups.
    wakeups: u64,
    /// Service passes.
    passes: u64,
    /// Energy, J.
    energy: f64,
    /// Responses that left the NIC.
    served: u64,
}

impl Totals {
    /// The totals at `t`, ns.
    pub(super) fn take(
        t: u64,
        nic_sent_payload: &[f64],
        queues: &[SimulatedQueue],
        vms: &[SimulatedVm],
        energy_joules: f64,
        served: u64,
    ) -> Self {
        Totals {
            t,
            nic: nic_sent_payload.to_vec(),
            // The NIC's softIRQ and ksoftirqd time (NAPI) is host CPU too.
            host: queues
                .iter()
                .map(|q| q.worker.busy_ns + q.napi.as_ref().map_or(0.0, |n| n.busy_ns))
                .sum(),
            guest: vms.iter().map(|v| v.guest_busy).sum(),
            kicks: queues.iter().map(|q| q.counters.kicks).sum(),
            calls: queues.iter().map(|q| q.counters.calls).sum(),
            wakeups: queues.iter().map(|q| q.counters.wakeups).sum(),
            passes: queues.iter().map(|q| q.counters.passes).sum(),
            energy: energy_joules,
            served,
        }
    }
}

/// Latencies of the responses that left the NIC, over three windows.
#[derive(Debug)]
pub(super) struct ResponseLatencies {
    /// Since the last sample.
    pub(super) since_sample: LatHist,
    /// Since the last control period.
    pub(super) since_control_period: LatHist,
    /// Per period of the scenario (`periods`), over the whole run.
    pub(super) per_period: Vec<LatHist>,
    /// Responses so far.
    pub(super) served: u64,
}

impl ResponseLatencies {
    /// Nothing recorded yet, for a scenario of `periods` periods.
    pub(super) fn new(periods: usize) -> Self {
        ResponseLatencies {
            since_sample: LatHist::default(),
            since_control_period: LatHist::default(),
            per_period: vec![LatHist::default(); periods],
            served: 0,
        }
    }

    /// A response to a request that arrived at `arrival` left at `depart`, ns.
    pub(super) fn record(&mut self, scenario: &Scenario, arrival: u64, depart: u64) {
        let lat_us = (depart - arrival) as f64 / 1000.0;
        self.since_sample.record(lat_us);
        self.since_control_period.record(lat_us);
        for (i, p) in scenario.periods.iter().enumerate() {
            let t = depart as f64 / 1e9;
            if t >= p.from_s && t < p.to_s {
                self.per_period[i].record(lat_us);
            }
        }
        self.served += 1;
    }
}

/// The time series, and the totals at its last sample.
#[derive(Debug, Default)]
pub(super) struct Sampler {
    /// Samples so far.
    pub(super) samples: Vec<Sample>,
    /// The totals at the last sample (or the start).
    pub(super) at_last_sample: Totals,
}

impl Sampler {
    /// Take a sample of the window from the last one to `now.t`; nothing if
    /// the window is empty.
    pub(super) fn record(
        &mut self,
        now: Totals,
        queues: &[SimulatedQueue],
        vms: &[SimulatedVm],
        scenario: &Scenario,
        latencies: &mut ResponseLatencies,
    ) {
        let last = &self.at_last_sample;
        let dt = (now.t - last.t) as f64 / 1e9;
        if dt <= 0.0 {
            return;
        }
        let nvm = scenario.vms.len();
        let mut vm_gbps = vec![0.0; nvm];
        for (v, g) in vm_gbps.iter_mut().enumerate() {
            *g = (now.nic[v] - last.nic[v]) * 8.0 / dt / 1e9;
        }
        let statuses: Vec<_> = queues.iter().map(|q| q.worker.executor.status()).collect();
        let intervals: Vec<Option<f64>> = statuses
            .iter()
            .map(|st| st.interval.map(|d| d.as_nanos() as f64 / 1000.0))
            .collect();
        let labels: Vec<&str> = queues
            .iter()
            .map(|q| q.worker.policy_label.as_str())
            .collect();
        let rr_any = vms.iter().any(|v| v.request_response.is_some());
        let offered = if rr_any {
            let t_s = now.t as f64 / 1e9;
            Some(
                vms.iter()
                    .filter_map(|v| v.request_response.as_ref())
                    .map(|r| rate_at(&r.rate_qps, t_s))
                    .sum(),
            )
        } else {
            None
        };
        let window = &latencies.since_sample;
        self.samples.push(Sample {
            t_s: now.t as f64 / 1e9,
            policy: labels.first().map_or(String::new(), |l| l.to_string()),
            gbps: vm_gbps.iter().sum(),
            vm_gbps,
            host_cpu_pct: (now.host - last.host) / 1e9 / dt * 100.0,
            guest_cpu_pct: (now.guest - last.guest) / 1e9 / dt * 100.0,
            kicks_per_s: (now.kicks - last.kicks) as f64 / dt,
            calls_per_s: (now.calls - last.calls) as f64 / dt,
            wakeups_per_s: (now.wakeups - last.wakeups) as f64 / dt,
            passes_per_s: (now.passes - last.passes) as f64 / dt,
            intervals_us: intervals,
            rounds: statuses.iter().map(|st| st.round).collect(),
            power_w: scenario
                .host
                .power
                .as_ref()
                .map(|_| (now.energy - last.energy) / dt),
            offered_qps: offered,
            served_qps: if rr_any {
                Some((now.served - last.served) as f64 / dt)
            } else {
                None
            },
            p50_us: if rr_any { window.quantile(0.5) } else { None },
            p99_us: if rr_any { window.quantile(0.99) } else { None },
        });
        latencies.since_sample = LatHist::default();
        self.at_last_sample = now;
    }
}

/// What each worker did over the run, in queue order.
pub(super) fn worker_summaries(
    queues: &[SimulatedQueue],
    scenario: &Scenario,
) -> Vec<WorkerSummary> {
    queues
        .iter()
        .map(|q| {
            let w = &q.worker;
            let st = w.executor.status();
            WorkerSummary {
                vm: scenario.vms[q.vm].name.clone(),
                workload: scenario.vms[q.vm].workload.kind().to_string(),
                policy: w.policy_label.clone(),
                final_interval_us: st.interval.map(|d| d.as_nanos() as f64 / 1000.0),
                settled_after_s: w.settled_at.map(|t| (t - w.policy_since) as f64 / 1e9),
                rounds: st.round,
                restarts: st.restarts,
                kicks: q.counters.kicks,
                calls: q.counters.calls,
                wakeups: q.counters.wakeups,
                passes: q.counters.passes,
                packets: q.counters.packets,
                cpu_s: w.busy_ns / 1e9,
            }
        })
        .collect()
}
