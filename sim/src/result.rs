//! What a run produced: a time series, per-period and per-worker summaries,
//! and writers for CSV, JSON and PNG.
//!
//! [`SimResult`] is the simulator's in-memory result; on disk, `result.json`
//! is the one result schema of `vadapt-results` (`kind` `sim`), which
//! `result_file.rs` builds ([`SimResult::to_result_file`]).

use crate::cores::CoreEvents;
use crate::napi::NapiTotals;
use crate::output::{create_dir, write_file};
use crate::plot::{line_chart, Series};
use crate::scenario::Scenario;
use std::fmt::Write as _;
use std::path::Path;

pub use crate::output::WriteError;

/// Latency histogram with log-spaced buckets (16 per power of two, ~4 %
/// resolution), µs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatHist {
    counts: Vec<u64>,
    total: u64,
}

const PER_OCTAVE: f64 = 16.0;

impl LatHist {
    /// Record one latency, µs.
    pub fn record(&mut self, us: f64) {
        let b = ((us.max(0.0) + 1.0).log2() * PER_OCTAVE) as usize;
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        self.total += 1;
    }
    /// The `q`-quantile, µs (upper edge of its bucket); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let target = ((q * self.total as f64).ceil() as u64).max(1);
        let mut acc = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= target {
                return Some(2f64.powf((b as f64 + 1.0) / PER_OCTAVE) - 1.0);
            }
        }
        None
    }
    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.total
    }
}

/// One time-series row: rates over the window that ends at `t_s`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// End of the window, s.
    pub t_s: f64,
    /// Policy of the first worker at the end of the window.
    pub policy: String,
    /// Payload throughput on the wire, all VMs, Gb/s.
    pub gbps: f64,
    /// Payload throughput on the wire per VM, Gb/s.
    pub vm_gbps: Vec<f64>,
    /// CPU used by queue workers, percent of one core.
    pub host_cpu_pct: f64,
    /// CPU used by vCPU threads, percent of one core.
    pub guest_cpu_pct: f64,
    /// Guest kicks (VM exits for notification), per second.
    pub kicks_per_s: f64,
    /// Calls (interrupts injected into guests), per second.
    pub calls_per_s: f64,
    /// Worker wake-ups from a blocked state, per second.
    pub wakeups_per_s: f64,
    /// Service passes, per second.
    pub passes_per_s: f64,
    /// Each worker's current interval (`PolicyStatus::interval`), µs.
    pub intervals_us: Vec<Option<f64>>,
    /// Each worker's adaptation round (`PolicyStatus::round`).
    pub rounds: Vec<Option<u32>>,
    /// Host power over the window (power model), W.
    pub power_w: Option<f64>,
    /// Offered request rate at `t_s` (RR loads), requests/s.
    pub offered_qps: Option<f64>,
    /// Responses sent in the window (RR loads), per second.
    pub served_qps: Option<f64>,
    /// Median response latency in the window (RR loads), µs.
    pub p50_us: Option<f64>,
    /// 99th-percentile response latency in the window (RR loads), µs.
    pub p99_us: Option<f64>,
}

/// Means over a scenario period.
#[derive(Clone, Debug, PartialEq)]
pub struct PeriodSummary {
    /// Period label.
    pub name: String,
    /// Start, s.
    pub from_s: f64,
    /// End, s.
    pub to_s: f64,
    /// Mean throughput, Gb/s.
    pub gbps: f64,
    /// Mean worker CPU, percent of a core.
    pub host_cpu_pct: f64,
    /// Mean vCPU CPU, percent of a core.
    pub guest_cpu_pct: f64,
    /// Mean kicks per second.
    pub kicks_per_s: f64,
    /// Mean calls per second.
    pub calls_per_s: f64,
    /// Mean power, W (power model only).
    pub power_w: Option<f64>,
    /// 95th-percentile latency over the period (RR loads), µs.
    pub p95_us: Option<f64>,
    /// 99th-percentile latency over the period (RR loads), µs.
    pub p99_us: Option<f64>,
    /// Responses sent in the period (RR loads), per second.
    pub served_qps: Option<f64>,
}

/// One worker at the end of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerSummary {
    /// VM the worker serves.
    pub vm: String,
    /// Its VM's workload kind (`stream`, `rr`).
    pub workload: String,
    /// Its policy at the end.
    pub policy: String,
    /// Its interval at the end, µs.
    pub final_interval_us: Option<f64>,
    /// Time from the policy's start to its first `settled` status, s.
    pub settled_after_s: Option<f64>,
    /// Adaptation round at the end.
    pub rounds: Option<u32>,
    /// Adaptation restarts.
    pub restarts: u32,
    /// Kicks received over the run.
    pub kicks: u64,
    /// Calls sent over the run.
    pub calls: u64,
    /// Wake-ups over the run.
    pub wakeups: u64,
    /// Service passes over the run.
    pub passes: u64,
    /// Packets moved over the run.
    pub packets: u64,
    /// CPU used, s.
    pub cpu_s: f64,
}

/// Everything a run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// Scenario name.
    pub scenario: String,
    /// Scenario file.
    pub file: String,
    /// Seed used.
    pub seed: u64,
    /// Swept parameter and value, if this run is a sweep point.
    pub param: Option<(String, f64)>,
    /// Calibration's `machine`.
    pub calibration_machine: String,
    /// Label of the scenario's first policy (its timeline's first entry).
    pub first_policy: String,
    /// The VMs' workload kinds (`stream`, `rr`), each once in VM order,
    /// joined with `+` (`stream+rr`).
    pub workload: String,
    /// Simulated time, s.
    pub duration_s: f64,
    /// Events processed.
    pub events: u64,
    /// Host energy over the run (power model), J.
    pub energy_j: Option<f64>,
    /// The time series.
    pub samples: Vec<Sample>,
    /// Per-period means.
    pub periods: Vec<PeriodSummary>,
    /// Per-worker summaries.
    pub workers: Vec<WorkerSummary>,
    /// Core groups over the run: scheduling events and cores per group
    /// (see the `cores` module).
    pub core_events: CoreEvents,
    /// The NAPI-like receive path over the run (`[host.napi]` only).
    pub napi: Option<NapiTotals>,
}

/// Each VM's workload kind once, in VM order, joined with `+`.
fn workload_kinds(sc: &Scenario) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for vm in &sc.vms {
        let k = vm.workload.kind();
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    kinds.join("+")
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

impl SimResult {
    pub(crate) fn assemble(
        sc: &Scenario,
        samples: Vec<Sample>,
        workers: Vec<WorkerSummary>,
        events: u64,
        energy_j: f64,
        lat_periods: Vec<LatHist>,
    ) -> SimResult {
        let periods = sc
            .periods
            .iter()
            .zip(lat_periods)
            .map(|(p, lat)| {
                let inside = || {
                    samples
                        .iter()
                        .filter(|s| s.t_s > p.from_s + 1e-9 && s.t_s <= p.to_s + 1e-9)
                };
                PeriodSummary {
                    name: p.name.clone(),
                    from_s: p.from_s,
                    to_s: p.to_s,
                    gbps: mean(inside().map(|s| s.gbps)),
                    host_cpu_pct: mean(inside().map(|s| s.host_cpu_pct)),
                    guest_cpu_pct: mean(inside().map(|s| s.guest_cpu_pct)),
                    kicks_per_s: mean(inside().map(|s| s.kicks_per_s)),
                    calls_per_s: mean(inside().map(|s| s.calls_per_s)),
                    power_w: sc
                        .host
                        .power
                        .as_ref()
                        .map(|_| mean(inside().filter_map(|s| s.power_w))),
                    p95_us: lat.quantile(0.95),
                    p99_us: lat.quantile(0.99),
                    served_qps: (lat.count() > 0).then(|| lat.count() as f64 / (p.to_s - p.from_s)),
                }
            })
            .collect();
        SimResult {
            scenario: sc.name.clone(),
            file: sc.file.clone(),
            seed: 0,
            param: None,
            calibration_machine: sc.calibration.machine.clone(),
            first_policy: sc
                .timeline
                .first()
                .map_or(String::new(), |t| t.policy.label()),
            workload: workload_kinds(sc),
            duration_s: sc.duration.as_secs_f64(),
            events,
            energy_j: sc.host.power.as_ref().map(|_| energy_j),
            samples,
            periods,
            workers,
            core_events: CoreEvents::default(),
            napi: None,
        }
    }

    pub(crate) fn with_napi(mut self, napi: Option<NapiTotals>) -> SimResult {
        self.napi = napi;
        self
    }

    pub(crate) fn with_core_events(mut self, ev: CoreEvents) -> SimResult {
        self.core_events = ev;
        self
    }

    /// Mean throughput of the samples whose window ends after `from_s`, Gb/s.
    pub fn mean_gbps_after(&self, from_s: f64) -> f64 {
        mean(
            self.samples
                .iter()
                .filter(|s| s.t_s > from_s + 1e-9)
                .map(|s| s.gbps),
        )
    }

    /// Mean of a sample field over windows ending after `from_s`.
    pub fn mean_after(&self, from_s: f64, f: impl Fn(&Sample) -> f64) -> f64 {
        mean(self.samples.iter().filter(|s| s.t_s > from_s + 1e-9).map(f))
    }

    /// The time series as CSV (one row per sample; per-VM and per-worker
    /// columns after the totals).
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "t_s,policy,gbps,host_cpu_pct,guest_cpu_pct,kicks_per_s,calls_per_s,wakeups_per_s,passes_per_s,power_w,offered_qps,served_qps,p50_us,p99_us",
        );
        let nvm = self.samples.first().map_or(0, |s| s.vm_gbps.len());
        let nw = self.samples.first().map_or(0, |s| s.intervals_us.len());
        for v in 0..nvm {
            let _ = write!(out, ",vm{v}_gbps");
        }
        for w in 0..nw {
            let _ = write!(out, ",w{w}_interval_us");
        }
        out.push('\n');
        let o = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.3}"));
        for s in &self.samples {
            let _ = write!(
                out,
                "{:.3},{},{:.6},{:.3},{:.3},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{}",
                s.t_s,
                s.policy,
                s.gbps,
                s.host_cpu_pct,
                s.guest_cpu_pct,
                s.kicks_per_s,
                s.calls_per_s,
                s.wakeups_per_s,
                s.passes_per_s,
                o(s.power_w),
                o(s.offered_qps),
                o(s.served_qps),
                o(s.p50_us),
                o(s.p99_us)
            );
            for g in &s.vm_gbps {
                let _ = write!(out, ",{g:.6}");
            }
            for i in &s.intervals_us {
                let _ = write!(out, ",{}", o(*i));
            }
            out.push('\n');
        }
        out
    }

    /// Write `timeseries.csv`, `result.json` (the run as a
    /// `vadapt_results::ResultFile` of kind `sim`, see
    /// [`SimResult::to_result_file`]) and PNG plots into `out_dir` (created if
    /// missing). Output is a pure function of the result, so equal results
    /// give byte-identical files.
    pub fn write(&self, out_dir: &Path) -> Result<(), WriteError> {
        create_dir(out_dir)?;
        write_file(&out_dir.join("timeseries.csv"), self.to_csv().as_bytes())?;
        self.to_result_file()
            .write_to(&out_dir.join("result.json"))
            .map_err(WriteError::ResultFile)?;
        plot_timeseries(self, out_dir)
    }
}

/// Plots of one run: throughput, CPU, and (when policies report one) intervals.
fn plot_timeseries(r: &SimResult, dir: &Path) -> Result<(), WriteError> {
    // A series of the samples where `f` has a value.
    let opt = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        r.samples
            .iter()
            .filter_map(|s| f(s).map(|v| (s.t_s, v)))
            .collect()
    };
    let t = |f: &dyn Fn(&Sample) -> f64| opt(&|s| Some(f(s)));
    let nw = r.samples.first().map_or(0, |s| s.intervals_us.len());
    let labels: Vec<String> = (0..nw).map(|w| format!("worker {w}")).collect();
    let intervals: Vec<Series<'_>> = (0..nw)
        .map(|w| Series {
            label: &labels[w],
            points: opt(&|s| s.intervals_us[w]),
        })
        .collect();
    let series = |label, points| Series { label, points };
    // (file, title, y label, series); charts whose series are all empty are skipped.
    let charts = [
        (
            "throughput.png",
            "throughput",
            "Gb/s",
            vec![series("all VMs", t(&|s| s.gbps))],
        ),
        (
            "cpu.png",
            "CPU",
            "% of a core",
            vec![
                series("queue workers", t(&|s| s.host_cpu_pct)),
                series("vCPUs", t(&|s| s.guest_cpu_pct)),
            ],
        ),
        (
            "intervals.png",
            "polling interval",
            "interval (µs)",
            intervals,
        ),
        (
            "latency.png",
            "latency",
            "µs",
            vec![
                series("p50", opt(&|s| s.p50_us)),
                series("p99", opt(&|s| s.p99_us)),
            ],
        ),
    ];
    for (file, title, y, mut s) in charts {
        s.retain(|s| !s.points.is_empty());
        if !s.is_empty() {
            line_chart(
                &dir.join(file),
                &format!("{}: {title}", r.scenario),
                "time (s)",
                y,
                &s,
                None,
                false,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_close() {
        let mut h = LatHist::default();
        for i in 1..=1000 {
            h.record(f64::from(i));
        }
        let p50 = h.quantile(0.5).unwrap();
        let p99 = h.quantile(0.99).unwrap();
        assert!((p50 / 500.0 - 1.0).abs() < 0.05, "{p50}");
        assert!((p99 / 990.0 - 1.0).abs() < 0.05, "{p99}");
        assert_eq!(LatHist::default().quantile(0.5), None);
    }
}
