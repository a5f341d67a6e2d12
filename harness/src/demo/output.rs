//! What a demo run leaves in its output folder: the time series (CSV and
//! JSON), the summary and the plots (bandwidth and polling interval over
//! time, as NetAP's Figure 4).

use super::args::DemoArgs;
use super::summary::PhaseSummary;
use crate::rates::Sample;
use std::collections::BTreeMap;
use std::path::Path;
use vadapt_guest::GuestReport;

/// Write `timeseries.csv`, `timeseries.json`, `summary.json` and the two
/// plots into `out`.
pub(super) fn write_outputs(
    out: &Path,
    a: &DemoArgs,
    samples: &[Sample],
    phases: &[PhaseSummary],
    reports: &[GuestReport],
) -> Result<(), String> {
    let io = |e: std::io::Error| format!("cannot write {}: {e}", out.display());
    std::fs::create_dir_all(out).map_err(io)?;
    let mut csv = String::from(
        "t,vm,policy,payload_mbps,mbps,pps,kicks_per_s,calls_per_s,worker_cpu_pct,interval_us\n",
    );
    for s in samples {
        csv.push_str(&format!(
            "{},{},{},{:.3},{:.3},{:.1},{:.1},{:.1},{:.2},{}\n",
            s.t,
            s.vm,
            s.policy,
            s.payload_mbps.unwrap_or(0.0),
            s.mbps,
            s.pps,
            s.kicks_per_s,
            s.calls_per_s,
            s.worker_cpu_pct,
            s.interval_us
        ));
    }
    std::fs::write(out.join("timeseries.csv"), csv).map_err(io)?;
    let json = |v: &dyn erased::Ser| v.to_json();
    std::fs::write(out.join("timeseries.json"), json(&samples)).map_err(io)?;
    let summary = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "vms": a.vms, "threads": a.threads, "size": a.size, "duration_s": a.duration,
        "mode": a.mode,
        "exit_cost_ns": a.exit_cost_ns,
        // What the guests paid per write (null for raw frames, which write no socket).
        "write_cost_ns": a.write_cost().map(|w| w.0),
        "write_cost_ns_per_kib": a.write_cost().map(|w| w.1),
        "phases": phases,
        "guests": reports,
    });
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap_or_default(),
    )
    .map_err(io)?;
    plot(out, samples).map_err(|e| format!("cannot draw plots: {e}"))?;
    Ok(())
}

mod erased {
    /// Serialize to pretty JSON without naming the type at the call site.
    pub trait Ser {
        fn to_json(&self) -> String;
    }
    impl<T: serde::Serialize> Ser for T {
        fn to_json(&self) -> String {
            serde_json::to_string_pretty(self).unwrap_or_default()
        }
    }
}

/// What the bandwidth plot shows: the application payload the guests sent (the papers'
/// netperf throughput), from the guests' counters.
fn bandwidth(s: &Sample) -> f64 {
    s.payload_mbps.unwrap_or(s.mbps)
}

fn plot(out: &Path, samples: &[Sample]) -> Result<(), String> {
    use vadapt_sim::plot::{line_chart, Series};
    let mut vms: Vec<&str> = samples.iter().map(|s| s.vm.as_str()).collect();
    vms.sort();
    vms.dedup();
    let mut bw: Vec<Series> = vms
        .iter()
        .map(|vm| Series {
            label: vm,
            points: samples
                .iter()
                .filter(|s| s.vm == *vm)
                .map(|s| (s.t, bandwidth(s)))
                .collect(),
        })
        .collect();
    let mut total: BTreeMap<u64, f64> = BTreeMap::new();
    for s in samples {
        *total.entry((s.t * 1000.0) as u64).or_default() += bandwidth(s);
    }
    bw.push(Series {
        label: "aggregate",
        points: total
            .iter()
            .map(|(t, v)| (*t as f64 / 1000.0, *v))
            .collect(),
    });
    line_chart(
        &out.join("bandwidth.png"),
        "Bandwidth (guest to host, application payload)",
        "time (s)",
        "Mbit/s",
        &bw,
        None,
        false,
    )
    .map_err(|e| e.to_string())?;
    let iv: Vec<Series> = vms
        .iter()
        .map(|vm| Series {
            label: vm,
            points: samples
                .iter()
                .filter(|s| s.vm == *vm)
                .map(|s| (s.t, s.interval_us as f64))
                .collect(),
        })
        .collect();
    line_chart(
        &out.join("interval.png"),
        "Polling interval",
        "time (s)",
        "interval (us)",
        &iv,
        None,
        true,
    )
    .map_err(|e| e.to_string())
}
