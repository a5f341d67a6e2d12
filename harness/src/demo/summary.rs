//! The per-policy summary of a demo run: means per phase, printed as a table
//! with each later phase's ratio to the first (the baseline), and written to
//! `summary.json`.

use super::args::DemoArgs;
use crate::rates::Sample;
use serde::Serialize;
use std::collections::BTreeMap;
use vadapt_guest::GuestReport;

/// One policy phase, summed over VMs.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseSummary {
    /// Policy.
    pub policy: String,
    /// Seconds measured (the first second of a phase is skipped).
    pub seconds: f64,
    /// Aggregate throughput, Mbit/s.
    pub mbps: f64,
    /// Aggregate packets per second.
    pub pps: f64,
    /// Application payload the guests sent, Gbit/s.
    pub payload_gbps: f64,
    /// Kicks per second, all VMs.
    pub kicks_per_s: f64,
    /// Kicks per million packets.
    pub kicks_per_mpkt: f64,
    /// Calls per second.
    pub calls_per_s: f64,
    /// Worker CPU, percent of a core, all workers.
    pub worker_cpu_pct: f64,
    /// Worker CPU-seconds per GB moved.
    pub cpu_s_per_gb: f64,
    /// Last polling interval per VM, µs.
    pub final_interval_us: BTreeMap<String, u64>,
}

/// A later phase against the first (the baseline): each metric's ratio,
/// later / first (`None` where the first is 0).
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRatio {
    /// The later phase's policy.
    pub policy: String,
    /// The first phase's policy.
    pub baseline: String,
    /// Application payload Gbit/s.
    pub payload_gbps: Option<f64>,
    /// Packets per second.
    pub pps: Option<f64>,
    /// Mbit/s on the switch.
    pub mbps: Option<f64>,
    /// Kicks per second.
    pub kicks_per_s: Option<f64>,
    /// Kicks per million packets.
    pub kicks_per_mpkt: Option<f64>,
    /// Calls per second.
    pub calls_per_s: Option<f64>,
    /// Worker CPU.
    pub worker_cpu_pct: Option<f64>,
    /// Worker CPU-seconds per GB.
    pub cpu_s_per_gb: Option<f64>,
}

/// Every phase after the first, as ratios to the first.
pub fn ratios(phases: &[PhaseSummary]) -> Vec<PhaseRatio> {
    let Some(first) = phases.first() else {
        return Vec::new();
    };
    let r = |a: f64, b: f64| (b > 0.0).then(|| a / b);
    phases[1..]
        .iter()
        .map(|p| PhaseRatio {
            policy: p.policy.clone(),
            baseline: first.policy.clone(),
            payload_gbps: r(p.payload_gbps, first.payload_gbps),
            pps: r(p.pps, first.pps),
            mbps: r(p.mbps, first.mbps),
            kicks_per_s: r(p.kicks_per_s, first.kicks_per_s),
            kicks_per_mpkt: r(p.kicks_per_mpkt, first.kicks_per_mpkt),
            calls_per_s: r(p.calls_per_s, first.calls_per_s),
            worker_cpu_pct: r(p.worker_cpu_pct, first.worker_cpu_pct),
            cpu_s_per_gb: r(p.cpu_s_per_gb, first.cpu_s_per_gb),
        })
        .collect()
}

/// Per-phase means, skipping each phase's first second (the switch-over).
pub fn summarize(samples: &[Sample], policies: &[String]) -> Vec<PhaseSummary> {
    let mut out = Vec::new();
    for p in policies {
        let rows: Vec<&Sample> = samples.iter().filter(|s| &s.policy == p).collect();
        let mut secs: Vec<f64> = rows.iter().map(|s| s.t).collect();
        secs.dedup();
        let skip = secs.first().copied();
        let rows: Vec<&&Sample> = rows
            .iter()
            .filter(|s| Some(s.t) != skip || secs.len() == 1)
            .collect();
        let n = rows
            .iter()
            .map(|s| s.t)
            .fold(Vec::<f64>::new(), |mut v, t| {
                if v.last() != Some(&t) {
                    v.push(t);
                }
                v
            })
            .len()
            .max(1) as f64;
        let sum = |f: fn(&Sample) -> f64| rows.iter().map(|s| f(s)).sum::<f64>() / n;
        let mut last = BTreeMap::new();
        for s in &rows {
            last.insert(s.vm.clone(), s.interval_us);
        }
        let pps = sum(|s| s.pps);
        let mbps = sum(|s| s.mbps);
        let cpu = sum(|s| s.worker_cpu_pct);
        let kicks = sum(|s| s.kicks_per_s);
        out.push(PhaseSummary {
            policy: p.to_string(),
            seconds: n,
            mbps,
            pps,
            payload_gbps: sum(|s| s.payload_mbps.unwrap_or(0.0)) / 1e3,
            kicks_per_s: kicks,
            kicks_per_mpkt: if pps > 0.0 { kicks / pps * 1e6 } else { 0.0 },
            calls_per_s: sum(|s| s.calls_per_s),
            worker_cpu_pct: cpu,
            cpu_s_per_gb: if mbps > 0.0 {
                (cpu / 100.0) / (mbps / 8.0 / 1000.0)
            } else {
                0.0
            },
            final_interval_us: last,
        });
    }
    out
}

pub(super) fn print_summary(a: &DemoArgs, phases: &[PhaseSummary], reports: &[GuestReport]) {
    let mode = if a.mode == vadapt_guest::Mode::TcpStream {
        "TCP stream"
    } else {
        "raw frames"
    };
    println!(
        "\nsummary ({} VMs x {} threads, {} B messages, {mode}; Gbit/s of application payload, \
         Mpps and Mbit/s of frames on the switch):",
        a.vms, a.threads, a.size
    );
    println!(
        "{:<11} {:>8} {:>9} {:>10} {:>10} {:>12} {:>10} {:>11} {:>12}  final interval",
        "policy",
        "Gbit/s",
        "Mpps",
        "Mbit/s",
        "kicks/s",
        "kicks/Mpkt",
        "calls/s",
        "worker CPU",
        "CPU-s/GB"
    );
    for p in phases {
        let iv: Vec<String> = p
            .final_interval_us
            .iter()
            .map(|(vm, us)| {
                if *us > 0 {
                    format!("{vm}={us}us")
                } else {
                    format!("{vm}=-")
                }
            })
            .collect();
        println!(
            "{:<11} {:>8.3} {:>9.3} {:>10.1} {:>10.0} {:>12.0} {:>10.0} {:>10.1}% {:>12.3}  {}",
            p.policy,
            p.payload_gbps,
            p.pps / 1e6,
            p.mbps,
            p.kicks_per_s,
            p.kicks_per_mpkt,
            p.calls_per_s,
            p.worker_cpu_pct,
            p.cpu_s_per_gb,
            iv.join(" ")
        );
    }
    for q in ratios(phases) {
        let x = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}x"));
        println!(
            "{:<11} {:>8} {:>9} {:>10} {:>10} {:>12} {:>10} {:>11} {:>12}",
            format!("{}/{}", short(&q.policy), short(&q.baseline)),
            x(q.payload_gbps),
            x(q.pps),
            x(q.mbps),
            x(q.kicks_per_s),
            x(q.kicks_per_mpkt),
            x(q.calls_per_s),
            x(q.worker_cpu_pct),
            x(q.cpu_s_per_gb),
        );
    }
    let sum =
        |f: fn(&vadapt_guest::Counts) -> u64| reports.iter().map(|r| f(&r.totals)).sum::<u64>();
    println!(
        "guests: {} messages ({} B of payload) in {} {}, {} kicks, {} ring-full stalls",
        sum(|t| t.sent_messages),
        sum(|t| t.sent_payload_bytes),
        sum(|t| t.sent_packets),
        if a.mode == vadapt_guest::Mode::TcpStream {
            "TSO segments"
        } else {
            "frames"
        },
        sum(|t| t.kicks),
        sum(|t| t.ring_full_stalls)
    );
}

/// A policy's name cut to fit the ratio row's first column.
fn short(policy: &str) -> &str {
    match policy {
        "interrupt" => "intr",
        "busy-poll" => "busy",
        "growshrink" => "grow",
        p => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, vm: &str, policy: &str, pps: f64) -> Sample {
        Sample {
            t,
            vm: vm.into(),
            policy: policy.into(),
            mbps: pps * 64.0 * 8.0 / 1e6,
            pps,
            payload_mbps: None,
            kicks_per_s: 10.0,
            calls_per_s: 0.0,
            worker_cpu_pct: 50.0,
            interval_us: 100,
        }
    }

    #[test]
    fn summary_skips_first_second_of_each_phase_and_sums_vms() {
        let samples = vec![
            s(1.0, "vm1", "interrupt", 999.0),
            s(1.0, "vm2", "interrupt", 999.0),
            s(2.0, "vm1", "interrupt", 100.0),
            s(2.0, "vm2", "interrupt", 300.0),
            s(3.0, "vm1", "netap", 999.0),
            s(3.0, "vm2", "netap", 999.0),
            s(4.0, "vm1", "netap", 500.0),
            s(4.0, "vm2", "netap", 500.0),
        ];
        let p = summarize(&samples, &["interrupt".into(), "netap".into()]);
        assert_eq!(p[0].pps, 400.0);
        assert_eq!(p[1].pps, 1000.0);
        assert_eq!(p[1].worker_cpu_pct, 100.0);
        assert_eq!(p[0].kicks_per_mpkt, 20.0 / 400.0 * 1e6);
        let r = ratios(&p);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].policy.as_str(), r[0].baseline.as_str()),
            ("netap", "interrupt")
        );
        assert_eq!(r[0].pps, Some(2.5));
        assert_eq!(r[0].calls_per_s, None);
    }
}
