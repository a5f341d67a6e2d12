//! `vadapt calibrate --validate`: a scenario on the real daemon + synthetic
//! guests and in the simulator, the same periods measured on both sides.

use super::args::CalibrateArgs;
use super::daemon::{blocked_wakeups, join_guest, port_sum, spawn_guest, tmpdir, worker, SINK};
use super::error::{CalibrateError, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::metrics::StatsSnapshot;
use vadapt_dataplane::Daemon;
use vadapt_guest::{GuestConfig, Load};
use vadapt_policy::config::FixedIntervalParams;
use vadapt_policy::PolicyConfig;
use vadapt_sim::scenario::{SimPolicy, Workload};
use vadapt_sim::Scenario;

/// Rates over one window, both sides computed alike.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Rates {
    /// Guest-to-host packets, millions per second.
    mpps: f64,
    /// Kicks received, per second.
    kicks_per_s: f64,
    /// Calls sent, per second.
    calls_per_s: f64,
    /// Queue-worker CPU, percent of one core, all workers.
    worker_cpu_pct: f64,
    /// Service passes, per second, all workers.
    passes_per_s: f64,
    /// Worker wake-ups from a blocked wait, per second, all workers.
    wakeups_per_s: f64,
}

/// One period of one scenario.
#[derive(Clone, Debug, Serialize)]
struct PeriodRow {
    scenario: String,
    period: String,
    policy: String,
    real: Rates,
    sim: Rates,
}

/// One scenario's outcome.
#[derive(Clone, Debug, Serialize)]
struct Validation {
    scenario: String,
    file: String,
    rows: Vec<PeriodRow>,
    /// Per-sample series: (t_s, real, sim).
    series: Vec<(f64, Rates, Rates)>,
}

/// What the real run needs from a scenario.
struct RealSetup {
    /// Per VM: (threads, message size, ring size).
    vms: Vec<(u32, u32, u16)>,
    /// Policy switches (time ns, policy); the first at 0.
    timeline: Vec<(u64, PolicyConfig)>,
    msg_size: u32,
}

fn real_setup(sc: &Scenario) -> Result<RealSetup> {
    let bad = |reason: String| CalibrateError::Unsupported {
        file: sc.file.clone(),
        reason,
    };
    let mut vms = Vec::new();
    let mut sizes = Vec::new();
    for vm in &sc.vms {
        let Workload::Stream(s) = &vm.workload else {
            return Err(bad(format!(
                "VM `{}` has a request/response load; only stream loads are reproduced",
                vm.name
            )));
        };
        if vm.queues != 1 {
            return Err(bad(format!(
                "VM `{}` has {} queues: the daemon runs one worker per VM port, so the scenario must say queues = 1",
                vm.name, vm.queues
            )));
        }
        if s.segment_bytes != s.msg_size {
            return Err(bad(format!(
                "VM `{}`: the synthetic guest sends one frame per message, so segment_bytes must equal msg_size",
                vm.name
            )));
        }
        if s.msg_size > vadapt_guest::config::MTU || s.msg_size < 46 {
            return Err(bad(format!(
                "VM `{}`: msg_size {} outside 46..=1500",
                vm.name, s.msg_size
            )));
        }
        let ring = u16::try_from(vm.ring_size).map_err(|_| bad("ring_size too large".into()))?;
        vms.push((s.threads, s.msg_size, ring));
        sizes.push(s.msg_size);
    }
    sizes.dedup();
    if sizes.len() != 1 {
        return Err(bad("all VMs must use the same msg_size".into()));
    }
    let mut timeline = Vec::new();
    for t in &sc.timeline {
        let policy = match t.policy {
            SimPolicy::Policy(p) => p,
            // The simulator's probe is the daemon's fixed-interval policy.
            SimPolicy::FixedInterval { interval_us } => {
                PolicyConfig::FixedInterval(FixedIntervalParams { interval_us })
            }
        };
        timeline.push((t.at.as_nanos(), policy));
    }
    Ok(RealSetup {
        vms,
        timeline,
        msg_size: sizes[0],
    })
}

pub(super) fn validate_all(a: &CalibrateArgs) -> Result<()> {
    let mut out = Vec::new();
    for path in &a.validate {
        let sc = Scenario::from_file(path).map_err(CalibrateError::Scenario)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if sc.host.cores as usize != cores {
            eprintln!(
                "warning: {} models {} cores, this host has {cores}",
                sc.file, sc.host.cores
            );
        }
        let setup = real_setup(&sc)?;
        eprintln!(
            "validate: {} — simulating {} s",
            sc.name,
            sc.duration.as_secs_f64()
        );
        let sim = vadapt_sim::run_scenario(&sc, sc.seed).map_err(|source| CalibrateError::Sim {
            file: sc.file.clone(),
            source,
        })?;
        eprintln!(
            "validate: {} — real daemon, {} s",
            sc.name,
            sc.duration.as_secs_f64()
        );
        let real = run_real(&sc, &setup, a.exit_cost_ns)?;
        out.push(compare(&sc, &setup, &sim, &real));
    }
    let md = markdown(&out, a);
    println!("{md}");
    if let Some(dir) = &a.validate_out {
        let werr = |path: PathBuf| move |source| CalibrateError::Write { path, source };
        std::fs::create_dir_all(dir).map_err(werr(dir.clone()))?;
        std::fs::write(dir.join("validation.md"), &md).map_err(werr(dir.join("validation.md")))?;
        let json = serde_json::to_string_pretty(&out).unwrap_or_default();
        std::fs::write(dir.join("validation.json"), json)
            .map_err(werr(dir.join("validation.json")))?;
        for v in &out {
            plot(dir, v)?;
        }
        println!(
            "wrote {}/ (validation.md, validation.json, PNGs)",
            dir.display()
        );
    }
    Ok(())
}

/// Counters of the real run at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct RealSnap {
    t: f64,
    packets: u64,
    kicks: u64,
    calls: u64,
    cpu_s: f64,
    passes: u64,
    wakeups: u64,
}

fn real_snap(s: &StatsSnapshot, t: f64, vms: usize) -> RealSnap {
    let mut r = RealSnap {
        t,
        ..RealSnap::default()
    };
    for i in 1..=vms {
        let n = format!("vm{i}");
        r.packets += port_sum(s, &n, |q| q.tx_packets);
        r.kicks += port_sum(s, &n, |q| q.kicks);
        r.calls += port_sum(s, &n, |q| q.calls);
        if let Some(w) = worker(s, &n) {
            r.cpu_s += w.cpu_seconds;
            r.passes += w.passes;
            r.wakeups += blocked_wakeups(w);
        }
    }
    r
}

fn rates(a: &RealSnap, b: &RealSnap) -> Rates {
    let dt = (b.t - a.t).max(1e-9);
    Rates {
        mpps: b.packets.saturating_sub(a.packets) as f64 / dt / 1e6,
        kicks_per_s: b.kicks.saturating_sub(a.kicks) as f64 / dt,
        calls_per_s: b.calls.saturating_sub(a.calls) as f64 / dt,
        worker_cpu_pct: (b.cpu_s - a.cpu_s).max(0.0) / dt * 100.0,
        passes_per_s: b.passes.saturating_sub(a.passes) as f64 / dt,
        wakeups_per_s: b.wakeups.saturating_sub(a.wakeups) as f64 / dt,
    }
}

fn run_real(sc: &Scenario, setup: &RealSetup, exit_cost_ns: u64) -> Result<Vec<RealSnap>> {
    let dir = tmpdir(&sc.name)?;
    let cfg = DaemonConfig {
        vm: (1..=setup.vms.len())
            .map(|i| VmPortConfig::new(format!("vm{i}"), dir.join(format!("vm{i}.sock"))))
            .collect(),
        sink: vec![LocalPortConfig::new("sink0", Some(SINK))],
        policy: setup.timeline[0].1,
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(cfg).map_err(CalibrateError::StartDaemon)?;
    let r = drive_real(sc, setup, &daemon, &dir, exit_cost_ns);
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn drive_real(
    sc: &Scenario,
    setup: &RealSetup,
    daemon: &Daemon,
    dir: &Path,
    exit_cost_ns: u64,
) -> Result<Vec<RealSnap>> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut guests = Vec::new();
    for (i, (threads, size, ring)) in setup.vms.iter().enumerate() {
        let name = format!("vm{}", i + 1);
        let mut g = GuestConfig::new(dir.join(format!("{name}.sock")));
        g.threads = *threads;
        g.size = *size;
        g.ring_size = *ring;
        // One queue pair per VM: the threads share it, as the scenario's one queue says.
        g.queues = Some(1);
        g.load = Load::ClosedLoop;
        g.dst_mac = SINK.0;
        g.exit_cost_ns = exit_cost_ns;
        g.duration = Duration::from_nanos(sc.duration.as_nanos()) + Duration::from_secs(10);
        match spawn_guest(&name, g, None, &stop) {
            Ok(h) => guests.push((name, h)),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                for (n, h) in guests {
                    let _ = join_guest(&n, h);
                }
                return Err(e);
            }
        }
    }
    // Read the counters at every sample boundary, period edge and policy switch.
    let end = sc.duration.as_nanos();
    let step = sc.sample.as_nanos().max(1);
    let mut times: Vec<u64> = (0..=end / step).map(|k| k * step).collect();
    times.extend(setup.timeline.iter().map(|t| t.0));
    for p in &sc.periods {
        times.push((p.from_s * 1e9) as u64);
        times.push((p.to_s * 1e9) as u64);
    }
    times.retain(|t| *t <= end);
    times.sort_unstable();
    times.dedup();
    let reg = daemon.registry();
    let start = Instant::now();
    let mut snaps = Vec::new();
    let mut err = None;
    for t in times {
        let target = start + Duration::from_nanos(t);
        std::thread::sleep(target.saturating_duration_since(Instant::now()));
        let now = start.elapsed().as_secs_f64();
        snaps.push(real_snap(&reg.snapshot(), now, setup.vms.len()));
        for (at, p) in setup.timeline.iter().skip(1) {
            if *at == t {
                for i in 1..=setup.vms.len() {
                    if let Err(e) = daemon.set_policy(&format!("vm{i}"), *p) {
                        err = Some(CalibrateError::SetPolicy(e));
                    }
                }
            }
        }
        if err.is_some() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for (n, h) in guests {
        let r = join_guest(&n, h);
        if err.is_none() {
            if let Err(e) = r {
                err = Some(e);
            }
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(snaps),
    }
}

/// The snapshot taken closest to `t` seconds (every period edge has one).
fn at(snaps: &[RealSnap], t: f64, start: f64) -> RealSnap {
    // Snapshots carry the wall time they were taken at; match by scheduled order.
    let mut best = snaps[0];
    for s in snaps {
        if (s.t - start - t).abs() < (best.t - start - t).abs() {
            best = *s;
        }
    }
    best
}

/// Mean of `f` over the samples whose window ends in `(from_s, to_s]` (as the
/// simulator's period summaries are computed).
fn mean_in(
    sim: &vadapt_sim::SimResult,
    from_s: f64,
    to_s: f64,
    f: impl Fn(&vadapt_sim::result::Sample) -> f64,
) -> f64 {
    let v: Vec<f64> = sim
        .samples
        .iter()
        .filter(|s| s.t_s > from_s + 1e-9 && s.t_s <= to_s + 1e-9)
        .map(f)
        .collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn compare(
    sc: &Scenario,
    setup: &RealSetup,
    sim: &vadapt_sim::SimResult,
    real: &[RealSnap],
) -> Validation {
    let to_mpps = |gbps: f64| gbps * 1e9 / 8.0 / f64::from(setup.msg_size) / 1e6;
    let t0 = real.first().map_or(0.0, |s| s.t);
    let mut rows = Vec::new();
    for p in &sim.periods {
        let a = at(real, p.from_s, t0);
        let b = at(real, p.to_s, t0);
        let policy = setup
            .timeline
            .iter()
            .rev()
            .find(|(at, _)| (*at as f64) / 1e9 <= p.from_s + 1e-9)
            .map_or_else(String::new, |(_, pc)| pc.kind().as_str().to_string());
        rows.push(PeriodRow {
            scenario: sc.name.clone(),
            period: format!("{} ({}–{} s)", p.name, p.from_s, p.to_s),
            policy,
            real: rates(&a, &b),
            sim: Rates {
                mpps: to_mpps(p.gbps),
                kicks_per_s: p.kicks_per_s,
                calls_per_s: p.calls_per_s,
                worker_cpu_pct: p.host_cpu_pct,
                // Period summaries have neither: the mean of the samples inside, as for the rest.
                passes_per_s: mean_in(sim, p.from_s, p.to_s, |s| s.passes_per_s),
                wakeups_per_s: mean_in(sim, p.from_s, p.to_s, |s| s.wakeups_per_s),
            },
        });
    }
    let mut series = Vec::new();
    for s in &sim.samples {
        let b = at(real, s.t_s, t0);
        let a = at(real, s.t_s - sc.sample.as_secs_f64(), t0);
        if (b.t - a.t) > 1e-3 {
            series.push((
                s.t_s,
                rates(&a, &b),
                Rates {
                    mpps: to_mpps(s.gbps),
                    kicks_per_s: s.kicks_per_s,
                    calls_per_s: s.calls_per_s,
                    worker_cpu_pct: s.host_cpu_pct,
                    passes_per_s: s.passes_per_s,
                    wakeups_per_s: s.wakeups_per_s,
                },
            ));
        }
    }
    Validation {
        scenario: sc.name.clone(),
        file: sc.file.clone(),
        rows,
        series,
    }
}

fn err_pct(real: f64, sim: f64) -> String {
    if real.abs() < 1e-9 {
        if sim.abs() < 1e-9 {
            "0 %".into()
        } else {
            "—".into()
        }
    } else {
        format!("{:+.0} %", (sim - real) / real * 100.0)
    }
}

fn fmt_rate(x: f64) -> String {
    if x >= 1e5 {
        format!("{:.0}k", x / 1e3)
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

fn markdown(vs: &[Validation], a: &CalibrateArgs) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Real daemon + synthetic guests (exit cost {} ns) vs simulator; error = (sim − real) / real.\n",
        a.exit_cost_ns
    );
    let _ = writeln!(
        s,
        "| scenario | period | Mpps real | Mpps sim | err | kicks/s real | kicks/s sim | err | worker CPU real | worker CPU sim | err | calls/s real | calls/s sim | wake-ups/s real | wake-ups/s sim | passes/s real | passes/s sim |"
    );
    let _ = writeln!(
        s,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for v in vs {
        for r in &v.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} | {:.3} | {} | {} | {} | {} | {:.0} % | {:.0} % | {} | {} | {} | {} | {} | {} | {} |",
                r.scenario,
                r.period,
                r.real.mpps,
                r.sim.mpps,
                err_pct(r.real.mpps, r.sim.mpps),
                fmt_rate(r.real.kicks_per_s),
                fmt_rate(r.sim.kicks_per_s),
                err_pct(r.real.kicks_per_s, r.sim.kicks_per_s),
                r.real.worker_cpu_pct,
                r.sim.worker_cpu_pct,
                err_pct(r.real.worker_cpu_pct, r.sim.worker_cpu_pct),
                fmt_rate(r.real.calls_per_s),
                fmt_rate(r.sim.calls_per_s),
                fmt_rate(r.real.wakeups_per_s),
                fmt_rate(r.sim.wakeups_per_s),
                fmt_rate(r.real.passes_per_s),
                fmt_rate(r.sim.passes_per_s),
            );
        }
    }
    s
}

fn plot(dir: &Path, v: &Validation) -> Result<()> {
    use vadapt_sim::plot::{line_chart, Series};
    let pick = |f: fn(&Rates) -> f64| -> [Series<'static>; 2] {
        [
            Series {
                label: "real daemon",
                points: v.series.iter().map(|(t, r, _)| (*t, f(r))).collect(),
            },
            Series {
                label: "simulator",
                points: v.series.iter().map(|(t, _, s)| (*t, f(s))).collect(),
            },
        ]
    };
    line_chart(
        &dir.join(format!("validation-{}-mpps.png", v.scenario)),
        &format!("{}: throughput", v.scenario),
        "time (s)",
        "Mpps",
        &pick(|r| r.mpps),
        None,
        true,
    )
    .map_err(CalibrateError::Plot)?;
    line_chart(
        &dir.join(format!("validation-{}-cpu.png", v.scenario)),
        &format!("{}: queue-worker CPU", v.scenario),
        "time (s)",
        "% of a core",
        &pick(|r| r.worker_cpu_pct),
        None,
        true,
    )
    .map_err(CalibrateError::Plot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_relative_to_the_real_run() {
        assert_eq!(err_pct(100.0, 110.0), "+10 %");
        assert_eq!(err_pct(100.0, 50.0), "-50 %");
        assert_eq!(err_pct(0.0, 0.0), "0 %");
        assert_eq!(err_pct(0.0, 3.0), "—");
    }

    #[test]
    fn validation_rejects_what_the_daemon_cannot_reproduce() {
        let text = r#"
            duration_s = 2
            [host]
            cores = 2
            [[vms]]
            vcpus = 2
            queues = 2
            [vms.workload]
            kind = "stream"
            threads = 2
            msg_size = 64
            segment_bytes = 64
            [[timeline]]
            at_s = 0
            policy = "interrupt"
        "#;
        let sc = Scenario::from_toml_str(text, "t.toml").unwrap();
        let e = real_setup(&sc).err().unwrap().to_string();
        assert!(e.contains("queues = 1"), "{e}");
        let sc =
            Scenario::from_toml_str(&text.replace("queues = 2", "queues = 1"), "t.toml").unwrap();
        let s = real_setup(&sc).unwrap();
        assert_eq!(s.vms, vec![(2, 64, 256)]);
        assert_eq!(s.msg_size, 64);
        let sc = Scenario::from_toml_str(
            &text
                .replace("queues = 2", "queues = 1")
                .replace("segment_bytes = 64", "segment_bytes = 1448"),
            "t.toml",
        )
        .unwrap();
        assert!(real_setup(&sc)
            .err()
            .unwrap()
            .to_string()
            .contains("segment_bytes"));
    }
}
