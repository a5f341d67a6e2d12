//! `vadapt demo`: the embedded default run. A daemon in this process, k
//! synthetic guests on its switch sending to a sink (the NetAP paper's
//! netperf VMs and their external server), a live line per second, and
//! `demo-out/` with the time series, a summary and plots in the style of
//! NetAP's Figure 4 (bandwidth and polling interval over time).

use crate::cli_util::{chain, fail};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig, MAX_QUEUE_PAIRS};
use vadapt_dataplane::metrics::StatsSnapshot;
use vadapt_dataplane::net::Mac;
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, GuestReport, Load};
use vadapt_policy::{PolicyConfig, PolicyKind};

/// `vadapt demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Policy, or several separated by commas to run one after another on the
    /// same load (the duration is split evenly), e.g. `interrupt,netap`.
    #[arg(long, default_value = "netap", value_name = "LIST")]
    pub policy: String,
    /// Synthetic VMs on the switch.
    #[arg(long, default_value_t = 2)]
    pub vms: u32,
    /// Sender threads per VM (one queue pair each, up to 16).
    #[arg(long, default_value_t = 3)]
    pub threads: u32,
    /// Message size, bytes (the frame is 14 bytes more).
    #[arg(long, default_value_t = 64)]
    pub size: u32,
    /// Run time, seconds.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Output directory.
    #[arg(long, default_value = "demo-out")]
    pub out: PathBuf,
    /// Emulated cost of each guest kick and handled call, ns (0 = off).
    #[arg(long, default_value_t = vadapt_guest::config::DEFAULT_EXIT_COST_NS)]
    pub exit_cost_ns: u64,
    /// Pin the queue workers to these CPUs (default: let the scheduler share
    /// cores between guests and workers, as the NetAP paper's host did).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// No live view; only the summary.
    #[arg(long)]
    pub quiet: bool,
}

/// One row of the time series: one VM, one second.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since start (end of the interval).
    pub t: f64,
    /// VM port name.
    pub vm: String,
    /// Policy in effect.
    pub policy: String,
    /// Guest→host throughput, Mbit/s (frame bytes).
    pub mbps: f64,
    /// Guest→host packets per second.
    pub pps: f64,
    /// Guest kicks received per second.
    pub kicks_per_s: f64,
    /// Calls sent per second.
    pub calls_per_s: f64,
    /// Worker CPU, percent of one core.
    pub worker_cpu_pct: f64,
    /// Polling interval (NetAP) or poll window, µs; 0 if none.
    pub interval_us: u64,
}

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

fn parse_policies(s: &str) -> Result<Vec<PolicyKind>, String> {
    let v: Result<Vec<PolicyKind>, _> = s.split(',').map(|p| p.trim().parse()).collect();
    let v = v.map_err(|e| format!("invalid `--policy`: {e}"))?;
    if v.is_empty() {
        return Err("invalid `--policy`: empty".into());
    }
    Ok(v)
}

fn validate(a: &DemoArgs) -> Result<Vec<PolicyKind>, String> {
    if a.vms == 0 || a.vms > 16 {
        return Err(format!("invalid `--vms` {}: must be 1..=16", a.vms));
    }
    if a.threads == 0 || a.threads > 64 {
        return Err(format!("invalid `--threads` {}: must be 1..=64", a.threads));
    }
    if a.duration < 2 {
        return Err(format!(
            "invalid `--duration` {}: at least 2 seconds",
            a.duration
        ));
    }
    let p = parse_policies(&a.policy)?;
    if a.duration < 2 * p.len() as u64 {
        return Err("invalid `--duration`: at least 2 seconds per policy".into());
    }
    Ok(p)
}

/// Run the demo.
pub fn run(a: DemoArgs) -> ExitCode {
    let policies = match validate(&a) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    match demo(&a, &policies) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn demo(a: &DemoArgs, policies: &[PolicyKind]) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("vadapt-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let sink_mac = Mac([0x02, 0x00, 0x00, 0x00, 0x5e, 0x01]);
    let queues = a.threads.min(u32::from(MAX_QUEUE_PAIRS)) as u16;
    let cfg = DaemonConfig {
        vm: (1..=a.vms)
            .map(|i| VmPortConfig {
                name: format!("vm{i}"),
                socket: dir.join(format!("vm{i}.sock")),
                queues,
                mac: None,
                policy: None,
            })
            .collect(),
        sink: vec![LocalPortConfig {
            name: "server".into(),
            mac: Some(sink_mac),
        }],
        policy: PolicyConfig::default_for(policies[0]),
        control: dir.join("control.sock"),
        cpus: a.cpus.clone(),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(cfg.clone()).map_err(|e| chain(&e))?;
    let result = drive(a, policies, &cfg, &daemon, sink_mac);
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    let (samples, reports) = result?;
    let phases = summarize(&samples, policies);
    print_summary(a, &phases, &reports);
    write_outputs(&a.out, a, &samples, &phases, &reports)?;
    println!(
        "\nwrote {}/ (timeseries.csv, timeseries.json, summary.json, bandwidth.png, interval.png)",
        a.out.display()
    );
    Ok(())
}

type Run = (Vec<Sample>, Vec<GuestReport>);

fn drive(
    a: &DemoArgs,
    policies: &[PolicyKind],
    cfg: &DaemonConfig,
    daemon: &Daemon,
    sink_mac: Mac,
) -> Result<Run, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut guests = Vec::new();
    for vm in &cfg.vm {
        let mut g = GuestConfig::new(&vm.socket);
        g.threads = a.threads;
        g.size = a.size;
        g.load = Load::ClosedLoop;
        g.duration = Duration::from_secs(a.duration + 30);
        g.exit_cost_ns = a.exit_cost_ns;
        g.dst_mac = sink_mac.0;
        let guest = Guest::connect(g).map_err(|e| format!("{}: {}", vm.name, chain(&e)))?;
        let st = Arc::clone(&stop);
        let name = vm.name.clone();
        guests.push(
            std::thread::Builder::new()
                .name(format!("guest-{name}"))
                .spawn(move || guest.run(st))
                .map_err(|e| format!("cannot start guest thread: {e}"))?,
        );
    }
    if !a.quiet {
        println!(
            "vadapt demo: {} VMs x {} threads, {}-byte messages, closed loop, {} s, policy {}",
            a.vms,
            a.threads,
            a.size,
            a.duration,
            policies
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(" then ")
        );
        println!(
            "(exit cost emulated: {} ns per kick and per handled call)",
            a.exit_cost_ns
        );
    }
    let reg = daemon.registry();
    let phase_len = a.duration as f64 / policies.len() as f64;
    let mut phase = 0usize;
    let start = Instant::now();
    let mut prev = reg.snapshot();
    let mut prev_t = 0.0f64;
    let mut samples = Vec::new();
    let mut next = 1u64;
    while (next as f64) <= a.duration as f64 {
        let target = start + Duration::from_secs(next);
        std::thread::sleep(target.saturating_duration_since(Instant::now()));
        let t = start.elapsed().as_secs_f64();
        let snap = reg.snapshot();
        let dt = (t - prev_t).max(1e-6);
        let policy = policies[phase].as_str();
        let rows = rates(&prev, &snap, dt, t, policy, cfg);
        if !a.quiet {
            live_line(&rows, next, a.duration, policy);
        }
        samples.extend(rows);
        prev = snap;
        prev_t = t;
        let want = ((next as f64) / phase_len) as usize;
        if want > phase && want < policies.len() {
            phase = want;
            for vm in &cfg.vm {
                daemon.set_policy(&vm.name, PolicyConfig::default_for(policies[phase]))?;
            }
            if !a.quiet {
                println!("--- switching every VM port to {} ---", policies[phase]);
            }
        }
        next += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut reports = Vec::new();
    for g in guests {
        match g.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => return Err(chain(&e)),
            Err(_) => return Err("a guest thread panicked".into()),
        }
    }
    Ok((samples, reports))
}

/// Per-VM rates between two snapshots `dt` seconds apart (also used by `vadapt bench`'s B5).
pub(crate) fn rates(
    prev: &StatsSnapshot,
    now: &StatsSnapshot,
    dt: f64,
    t: f64,
    policy: &str,
    cfg: &DaemonConfig,
) -> Vec<Sample> {
    cfg.vm
        .iter()
        .map(|vm| {
            let d = |f: &dyn Fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64| {
                now.port_total(&vm.name, f)
                    .unwrap_or(0)
                    .saturating_sub(prev.port_total(&vm.name, f).unwrap_or(0))
                    as f64
            };
            let cpu = |s: &StatsSnapshot| {
                s.workers
                    .iter()
                    .find(|w| w.name == vm.name)
                    .map_or(0.0, |w| w.cpu_seconds)
            };
            let interval = now
                .ports
                .iter()
                .find(|p| p.name == vm.name)
                .map_or(0, |p| p.poll_interval_us);
            Sample {
                t: (t * 1000.0).round() / 1000.0,
                vm: vm.name.clone(),
                policy: policy.to_string(),
                mbps: d(&|q| q.tx_bytes) * 8.0 / 1e6 / dt,
                pps: d(&|q| q.tx_packets) / dt,
                kicks_per_s: d(&|q| q.kicks) / dt,
                calls_per_s: d(&|q| q.calls) / dt,
                worker_cpu_pct: (cpu(now) - cpu(prev)).max(0.0) * 100.0 / dt,
                interval_us: interval,
            }
        })
        .collect()
}

fn live_line(rows: &[Sample], sec: u64, total: u64, policy: &str) {
    let sum = |f: fn(&Sample) -> f64| rows.iter().map(f).sum::<f64>();
    let intervals: Vec<String> = rows
        .iter()
        .map(|r| {
            if r.interval_us > 0 {
                format!("{}={}us", r.vm, r.interval_us)
            } else {
                format!("{}=-", r.vm)
            }
        })
        .collect();
    println!(
        "[{sec:>3}/{total}s] {policy:<10} {:>7.3} Mpps {:>8.1} Mbit/s  kicks/s {:>8.0}  calls/s {:>7.0}  worker CPU {:>5.1}%  interval {}",
        sum(|r| r.pps) / 1e6,
        sum(|r| r.mbps),
        sum(|r| r.kicks_per_s),
        sum(|r| r.calls_per_s),
        sum(|r| r.worker_cpu_pct),
        intervals.join(" ")
    );
    let _ = std::io::stdout().flush();
}

/// Per-phase means, skipping each phase's first second (the switch-over).
pub fn summarize(samples: &[Sample], policies: &[PolicyKind]) -> Vec<PhaseSummary> {
    let mut out = Vec::new();
    for p in policies {
        let rows: Vec<&Sample> = samples.iter().filter(|s| s.policy == p.as_str()).collect();
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

fn print_summary(a: &DemoArgs, phases: &[PhaseSummary], reports: &[GuestReport]) {
    println!(
        "\nsummary ({} VMs x {} threads, {} B):",
        a.vms, a.threads, a.size
    );
    println!(
        "{:<11} {:>9} {:>10} {:>10} {:>12} {:>10} {:>11} {:>12}  final interval",
        "policy", "Mpps", "Mbit/s", "kicks/s", "kicks/Mpkt", "calls/s", "worker CPU", "CPU-s/GB"
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
            "{:<11} {:>9.3} {:>10.1} {:>10.0} {:>12.0} {:>10.0} {:>10.1}% {:>12.3}  {}",
            p.policy,
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
    let sent: u64 = reports.iter().map(|r| r.totals.sent_packets).sum();
    let stalls: u64 = reports.iter().map(|r| r.totals.ring_full_stalls).sum();
    let kicks: u64 = reports.iter().map(|r| r.totals.kicks).sum();
    println!("guests: {sent} packets sent, {kicks} kicks, {stalls} ring-full stalls");
}

fn write_outputs(
    out: &Path,
    a: &DemoArgs,
    samples: &[Sample],
    phases: &[PhaseSummary],
    reports: &[GuestReport],
) -> Result<(), String> {
    let io = |e: std::io::Error| format!("cannot write {}: {e}", out.display());
    std::fs::create_dir_all(out).map_err(io)?;
    let mut csv =
        String::from("t,vm,policy,mbps,pps,kicks_per_s,calls_per_s,worker_cpu_pct,interval_us\n");
    for s in samples {
        csv.push_str(&format!(
            "{},{},{},{:.3},{:.1},{:.1},{:.1},{:.2},{}\n",
            s.t,
            s.vm,
            s.policy,
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
        "exit_cost_ns": a.exit_cost_ns,
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
                .map(|s| (s.t, s.mbps))
                .collect(),
        })
        .collect();
    let mut total: BTreeMap<u64, f64> = BTreeMap::new();
    for s in samples {
        *total.entry((s.t * 1000.0) as u64).or_default() += s.mbps;
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
        "Bandwidth (guest to host)",
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
        let p = summarize(&samples, &[PolicyKind::Interrupt, PolicyKind::Netap]);
        assert_eq!(p[0].pps, 400.0);
        assert_eq!(p[1].pps, 1000.0);
        assert_eq!(p[1].worker_cpu_pct, 100.0);
        assert_eq!(p[0].kicks_per_mpkt, 20.0 / 400.0 * 1e6);
    }

    #[test]
    fn bad_knobs_are_named() {
        let mut a = DemoArgs {
            policy: "netap".into(),
            vms: 0,
            threads: 3,
            size: 64,
            duration: 30,
            out: "x".into(),
            exit_cost_ns: 0,
            cpus: vec![],
            quiet: true,
        };
        assert!(validate(&a).unwrap_err().contains("--vms"));
        a.vms = 2;
        a.policy = "netap,warp".into();
        assert!(validate(&a).unwrap_err().contains("warp"));
        a.policy = "interrupt,netap".into();
        a.duration = 3;
        assert!(validate(&a).unwrap_err().contains("--duration"));
    }
}
