//! What a demo run leaves in its output folder: the time series (CSV and
//! JSON), the summary and the plots over time (bandwidth and polling
//! interval as NetAP's Figure 4, guest kicks and worker CPU), each with the
//! policy switch marked.

use super::args::DemoArgs;
use super::summary::PhaseSummary;
use crate::rates::Sample;
use std::collections::BTreeMap;
use std::path::Path;
use vadapt_guest::GuestReport;

/// Write `timeseries.csv`, `timeseries.json`, `summary.json` and the four
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
        // Each later phase against the first, as the printed table's last rows.
        "ratios": super::summary::ratios(phases),
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

/// Where the policy changed: the time of the last sample before each switch,
/// labelled with the policy switched on.
fn switches(samples: &[Sample]) -> Vec<(f64, String)> {
    let mut out = Vec::new();
    let mut last: Option<(&str, f64)> = None;
    for s in samples {
        if let Some((policy, t)) = last {
            if policy != s.policy && s.t > t {
                out.push((t, format!("{} on", s.policy)));
            }
        }
        last = Some((&s.policy, s.t));
    }
    out
}

/// Per VM, `(t, f(sample))`, and with `aggregate` their sum per sample time
/// as one more series.
fn per_vm<'a>(
    vms: &[&'a str],
    samples: &[Sample],
    f: impl Fn(&Sample) -> f64,
    aggregate: bool,
) -> Vec<vadapt_sim::plot::Series<'a>> {
    use vadapt_sim::plot::Series;
    let mut series: Vec<Series> = vms
        .iter()
        .map(|vm| Series {
            label: vm,
            points: samples
                .iter()
                .filter(|s| s.vm == *vm)
                .map(|s| (s.t, f(s)))
                .collect(),
        })
        .collect();
    if aggregate {
        let mut total: BTreeMap<u64, f64> = BTreeMap::new();
        for s in samples {
            *total.entry((s.t * 1000.0) as u64).or_default() += f(s);
        }
        series.push(Series {
            label: "all VMs",
            points: total
                .iter()
                .map(|(t, v)| (*t as f64 / 1000.0, *v))
                .collect(),
        });
    }
    series
}

/// The interval plotted: none (a gap) while the queue is kick-driven
/// (interrupt mode, NetAP's probe rounds), which reports 0.
fn plotted_interval(s: &Sample) -> f64 {
    if s.interval_us > 0 {
        s.interval_us as f64
    } else {
        f64::NAN
    }
}

fn plot(out: &Path, samples: &[Sample]) -> Result<(), String> {
    use vadapt_sim::plot::line_chart_marked;
    let mut vms: Vec<&str> = samples.iter().map(|s| s.vm.as_str()).collect();
    vms.sort();
    vms.dedup();
    let switches = switches(samples);
    let events: Vec<(f64, &str)> = switches.iter().map(|(t, l)| (*t, l.as_str())).collect();
    let charts: [(&str, &str, &str, Vec<vadapt_sim::plot::Series>, bool); 4] = [
        (
            "bandwidth.png",
            "Bandwidth (guest to host, application payload)",
            "Mbit/s",
            per_vm(&vms, samples, bandwidth, true),
            false,
        ),
        (
            "kicks.png",
            "Guest kicks (VM exits) per second",
            "kicks/s",
            per_vm(&vms, samples, |s| s.kicks_per_s, true),
            false,
        ),
        (
            "cpu.png",
            "Queue worker CPU",
            "% of a core",
            per_vm(&vms, samples, |s| s.worker_cpu_pct, true),
            false,
        ),
        (
            "interval.png",
            "Polling interval (gap: kick-driven)",
            "interval (us)",
            per_vm(&vms, samples, plotted_interval, false),
            true,
        ),
    ];
    for (file, title, y_label, series, marks) in charts {
        line_chart_marked(
            &out.join(file),
            title,
            "time (s)",
            y_label,
            &series,
            None,
            marks,
            &events,
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, vm: &str, policy: &str, interval_us: u64) -> Sample {
        Sample {
            t,
            vm: vm.into(),
            policy: policy.into(),
            mbps: 1.0,
            pps: 1.0,
            payload_mbps: None,
            kicks_per_s: 1.0,
            calls_per_s: 0.0,
            worker_cpu_pct: 1.0,
            interval_us,
        }
    }

    #[test]
    fn the_switch_is_marked_where_the_policy_changed_and_kick_driven_rounds_are_gaps() {
        let samples = vec![
            s(1.0, "vm1", "interrupt", 0),
            s(1.0, "vm2", "interrupt", 0),
            s(2.0, "vm1", "interrupt", 0),
            s(2.0, "vm2", "interrupt", 0),
            s(3.0, "vm1", "netap", 400),
            s(3.0, "vm2", "netap", 0),
        ];
        assert_eq!(switches(&samples), vec![(2.0, "netap on".to_string())]);
        assert!(plotted_interval(&samples[5]).is_nan());
        assert_eq!(plotted_interval(&samples[4]), 400.0);
        let dir = tempfile::tempdir().unwrap();
        plot(dir.path(), &samples).unwrap();
        for f in ["bandwidth.png", "kicks.png", "cpu.png", "interval.png"] {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
    }
}
