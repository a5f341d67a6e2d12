//! Parameter sweeps: one scenario, one parameter, many values, all cores.

use crate::engine::SimError;
use crate::output::{create_dir, write_file, WriteError};
use crate::result::SimResult;
use crate::run::run_scenario;
use crate::scenario::{Scenario, SimPolicy, TimelineEntry, VmSpec, Workload};
use serde::Serialize;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use vadapt_policy::{Duration, PolicyConfig};

/// Parameters a sweep can vary.
pub const PARAMS: &[&str] = &[
    "interval",
    "msg_size",
    "threads",
    "ring_size",
    "cores",
    "vms",
];

/// A sweep could not be set up or run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SweepError {
    /// `--param` is not `name=a..b:step` or `name=v1,v2,...`.
    #[error("bad --param `{0}`: expected NAME=FROM..TO:STEP or NAME=V1,V2,... with NAME one of interval, msg_size, threads, ring_size, cores, vms")]
    Parse(String),
    /// A value does not fit the parameter.
    #[error("value {value} is invalid for `{param}`")]
    Value {
        /// Parameter.
        param: String,
        /// Value.
        value: f64,
    },
    /// A point's simulation failed.
    #[error("sweep point {param}={value} failed")]
    Run {
        /// Parameter.
        param: String,
        /// Value.
        value: f64,
        /// Why.
        #[source]
        source: SimError,
    },
}

/// `NAME=FROM..TO:STEP` (inclusive) or `NAME=V1,V2,...`.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamRange {
    /// Parameter name, one of [`PARAMS`].
    pub name: String,
    /// Values in sweep order.
    pub values: Vec<f64>,
}

impl FromStr for ParamRange {
    type Err = SweepError;
    fn from_str(s: &str) -> Result<Self, SweepError> {
        let bad = || SweepError::Parse(s.to_string());
        let (name, spec) = s.split_once('=').ok_or_else(bad)?;
        if !PARAMS.contains(&name) {
            return Err(bad());
        }
        let values = if let Some((range, step)) = spec.split_once(':') {
            let (a, b) = range.split_once("..").ok_or_else(bad)?;
            let (a, b, step): (f64, f64, f64) = (
                a.parse().map_err(|_| bad())?,
                b.parse().map_err(|_| bad())?,
                step.parse().map_err(|_| bad())?,
            );
            if !(step > 0.0 && b >= a && (b - a) / step <= 100_000.0) {
                return Err(bad());
            }
            let n = ((b - a) / step + 1e-9).floor() as usize;
            (0..=n).map(|i| a + step * i as f64).collect()
        } else {
            spec.split(',')
                .map(|v| v.trim().parse::<f64>().map_err(|_| bad()))
                .collect::<Result<Vec<_>, _>>()?
        };
        if values.is_empty() {
            return Err(bad());
        }
        Ok(ParamRange {
            name: name.to_string(),
            values,
        })
    }
}

/// `sc` with `param` set to `value`, shortened to the sweep's duration.
/// `interval` replaces the timeline with the fixed-interval probe; `vms`
/// replaces the VMs by that many copies of the first one (named like the
/// copies of a `count` in the scenario file: its name without trailing
/// digits, then 0, 1, ...), so the first VM is the template of a VM-count sweep.
pub fn apply_param(sc: &Scenario, param: &str, value: f64) -> Result<Scenario, SweepError> {
    let bad = || SweepError::Value {
        param: param.to_string(),
        value,
    };
    if !(value.is_finite() && value >= 1.0 && value.fract() == 0.0) {
        return Err(bad());
    }
    let v = value as u64;
    let mut s = sc.clone();
    s.duration = sc.sweep.duration;
    s.periods.clear();
    match param {
        "interval" => {
            if v > 100_000 {
                return Err(bad());
            }
            s.timeline = vec![TimelineEntry {
                at: Duration::ZERO,
                policy: SimPolicy::FixedInterval { interval_us: v },
            }];
        }
        "msg_size" | "threads" => {
            for vm in &mut s.vms {
                if let Workload::Stream(st) = &mut vm.workload {
                    let x = u32::try_from(v).map_err(|_| bad())?;
                    if param == "msg_size" {
                        st.msg_size = x;
                    } else {
                        st.threads = x;
                        vm.vcpus = vm.vcpus.max(x);
                    }
                }
            }
        }
        "ring_size" => {
            let x = u32::try_from(v).map_err(|_| bad())?;
            if !x.is_power_of_two() || x > 32768 {
                return Err(bad());
            }
            for vm in &mut s.vms {
                vm.ring_size = x;
            }
        }
        "cores" => s.host.cores = u32::try_from(v).map_err(|_| bad())?,
        "vms" => {
            let n = u32::try_from(v).map_err(|_| bad())?;
            let template = s.vms.first().cloned().ok_or_else(bad)?;
            let vcpus = u64::from(n) * u64::from(template.vcpus);
            if n > 1024 || vcpus > u64::from(s.host.cores) * u64::from(s.host.max_vcpus_per_core) {
                return Err(bad());
            }
            let base = template.name.trim_end_matches(|c: char| c.is_ascii_digit());
            s.vms = (0..n)
                .map(|k| VmSpec {
                    name: if n > 1 {
                        format!("{base}{k}")
                    } else {
                        base.to_string()
                    },
                    ..template.clone()
                })
                .collect();
        }
        _ => return Err(bad()),
    }
    // Keep the previous timeline's switches only if they fit the shortened run.
    s.timeline.retain(|t| t.at < s.duration);
    Ok(s)
}

/// `sc` shortened to its sweep duration, running `policy` throughout.
pub fn with_policy(sc: &Scenario, policy: PolicyConfig) -> Scenario {
    let mut s = sc.clone();
    s.duration = sc.sweep.duration;
    s.periods.clear();
    s.timeline = vec![TimelineEntry {
        at: Duration::ZERO,
        policy: SimPolicy::Policy(policy),
    }];
    s
}

/// Run `sc` with `param` set to each of `values`, on `threads` threads.
/// Results come back in `values` order whatever the thread count.
pub fn sweep(
    sc: &Scenario,
    param: &str,
    values: &[f64],
    threads: usize,
) -> Result<Vec<SimResult>, SweepError> {
    let scenarios = values
        .iter()
        .map(|&v| apply_param(sc, param, v))
        .collect::<Result<Vec<_>, _>>()?;
    let results: Vec<Mutex<Option<Result<SimResult, SimError>>>> =
        values.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let threads = threads.clamp(1, values.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= scenarios.len() {
                    break;
                }
                let r = run_scenario(&scenarios[i], sc.seed);
                *results[i].lock().expect("no panics while holding the lock") = Some(r);
            });
        }
    });
    let mut out = Vec::with_capacity(values.len());
    for (i, m) in results.into_iter().enumerate() {
        let r = m.into_inner().expect("lock").expect("every point ran");
        let mut r = r.map_err(|source| SweepError::Run {
            param: param.to_string(),
            value: values[i],
            source,
        })?;
        r.param = Some((param.to_string(), values[i]));
        out.push(r);
    }
    Ok(out)
}

/// One sweep point's means over the window after warm-up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Parameter value.
    pub value: f64,
    /// Throughput, Gb/s.
    pub gbps: f64,
    /// Worker CPU, percent of a core.
    pub host_cpu_pct: f64,
    /// vCPU CPU, percent of a core.
    pub guest_cpu_pct: f64,
    /// Kicks per second.
    pub kicks_per_s: f64,
    /// Calls per second.
    pub calls_per_s: f64,
    /// Worker wake-ups per second.
    pub wakeups_per_s: f64,
}

impl SweepPoint {
    /// Means of `r` after `warmup_s`.
    pub fn from_result(value: f64, r: &SimResult, warmup_s: f64) -> SweepPoint {
        SweepPoint {
            value,
            gbps: r.mean_gbps_after(warmup_s),
            host_cpu_pct: r.mean_after(warmup_s, |s| s.host_cpu_pct),
            guest_cpu_pct: r.mean_after(warmup_s, |s| s.guest_cpu_pct),
            kicks_per_s: r.mean_after(warmup_s, |s| s.kicks_per_s),
            calls_per_s: r.mean_after(warmup_s, |s| s.calls_per_s),
            wakeups_per_s: r.mean_after(warmup_s, |s| s.wakeups_per_s),
        }
    }
}

/// A whole sweep, with the interrupt-mode baseline for comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepReport {
    /// Scenario name.
    pub scenario: String,
    /// Swept parameter.
    pub param: String,
    /// Seed.
    pub seed: u64,
    /// Calibration's machine.
    pub calibration_machine: String,
    /// Points in sweep order.
    pub points: Vec<SweepPoint>,
    /// The same scenario under the `interrupt` policy.
    pub baseline: Option<SweepPoint>,
    /// Value with the highest throughput.
    pub best_value: f64,
    /// Highest throughput, Gb/s.
    pub best_gbps: f64,
}

impl SweepReport {
    /// Summarise sweep results (and an optional baseline run).
    pub fn new(
        sc: &Scenario,
        param: &str,
        results: &[SimResult],
        baseline: Option<&SimResult>,
    ) -> SweepReport {
        let w = sc.sweep.warmup.as_secs_f64();
        let points: Vec<SweepPoint> = results
            .iter()
            .map(|r| SweepPoint::from_result(r.param.as_ref().map_or(0.0, |p| p.1), r, w))
            .collect();
        let best = points
            .iter()
            .fold(None::<&SweepPoint>, |b, p| match b {
                Some(b) if b.gbps >= p.gbps => Some(b),
                _ => Some(p),
            })
            .cloned();
        SweepReport {
            scenario: sc.name.clone(),
            param: param.to_string(),
            seed: sc.seed,
            calibration_machine: sc.calibration.machine.clone(),
            best_value: best.as_ref().map_or(0.0, |b| b.value),
            best_gbps: best.as_ref().map_or(0.0, |b| b.gbps),
            points,
            baseline: baseline.map(|r| SweepPoint::from_result(0.0, r, w)),
        }
    }

    /// CSV, one row per point.
    pub fn to_csv(&self) -> String {
        let mut out = format!(
            "{},gbps,host_cpu_pct,guest_cpu_pct,kicks_per_s,calls_per_s,wakeups_per_s\n",
            self.param
        );
        for p in self.baseline.iter().chain(&self.points) {
            let label = if self.baseline.as_ref() == Some(p) && p.value == 0.0 {
                "interrupt".to_string()
            } else {
                format!("{}", p.value)
            };
            out += &format!(
                "{label},{:.6},{:.3},{:.3},{:.1},{:.1},{:.1}\n",
                p.gbps,
                p.host_cpu_pct,
                p.guest_cpu_pct,
                p.kicks_per_s,
                p.calls_per_s,
                p.wakeups_per_s
            );
        }
        out
    }

    /// Write `sweep.csv`, `sweep.json` and `sweep.png` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), WriteError> {
        create_dir(dir)?;
        write_file(&dir.join("sweep.csv"), self.to_csv().as_bytes())?;
        let json = serde_json::to_string_pretty(self).map_err(WriteError::Json)?;
        write_file(&dir.join("sweep.json"), json.as_bytes())?;
        let unit = if self.param == "interval" {
            " (µs)"
        } else {
            ""
        };
        crate::plot::line_chart(
            &dir.join("sweep.png"),
            &format!("{}: throughput vs {}", self.scenario, self.param),
            &format!("{}{unit}", self.param),
            "Gb/s",
            &[crate::plot::Series {
                label: "fixed",
                points: self.points.iter().map(|p| (p.value, p.gbps)).collect(),
            }],
            self.baseline.as_ref().map(|b| ("interrupt mode", b.gbps)),
            true,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_lists() {
        let r: ParamRange = "interval=50..4000:50".parse().unwrap();
        assert_eq!(r.values.len(), 80);
        assert_eq!(r.values[0], 50.0);
        assert_eq!(*r.values.last().unwrap(), 4000.0);
        let r: ParamRange = "threads=1,2,6".parse().unwrap();
        assert_eq!(r.values, vec![1.0, 2.0, 6.0]);
        assert!("speed=1..2:1".parse::<ParamRange>().is_err());
        assert!("interval=10..1:1".parse::<ParamRange>().is_err());
        assert!("interval".parse::<ParamRange>().is_err());
        let r: ParamRange = "vms=1,2,3,6".parse().unwrap();
        assert_eq!(r.values, vec![1.0, 2.0, 3.0, 6.0]);
    }

    #[test]
    fn vms_copies_the_first_vm_and_refuses_what_does_not_fit() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/netap-3vm-2t.toml");
        let sc = Scenario::from_file(Path::new(path)).unwrap();
        let s = apply_param(&sc, "vms", 5.0).unwrap();
        let names: Vec<&str> = s.vms.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["vm0", "vm1", "vm2", "vm3", "vm4"]);
        assert!(s.vms.iter().all(|v| v.workload == sc.vms[0].workload));
        assert_eq!(apply_param(&sc, "vms", 1.0).unwrap().vms[0].name, "vm");
        // 6 cores x 8 vCPUs per core hold at most 24 VMs of 2 vCPUs.
        assert!(apply_param(&sc, "vms", 24.0).is_ok());
        assert!(apply_param(&sc, "vms", 25.0).is_err());
    }
}
