//! B5 — adaptation: the NetAP paper's timeline on its 2 VMs × 3 threads
//! load (64 B, closed loop, emulated exit cost on): every port on
//! `interrupt` first, then switched to `netap` at run time; throughput, kicks
//! and the polling interval sampled once a second from the daemon's stats
//! (with the demo's own per-second arithmetic, [`crate::rates`]).
//!
//! Rounds to converge: seconds after the switch until the interval of every
//! VM stops changing for the rest of the run (NetAP's search takes 11 rounds
//! of 1 s with the paper's constants). "During" is the phase before that,
//! "after" the phase from it on (when the interval never settles, the second
//! half of the NetAP phase, flagged `converged = 0`); "before" is the
//! interrupt phase without its first second.

use super::ctx::Ctx;
use super::error::BenchError;
use super::table::{metric_table, table};
use super::vadapt_proc::{Daemon, GuestOpts, GuestProc, VmPort};
use crate::rates::{rates, Sample};
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, VmPortConfig};
use vadapt_policy::PolicyKind;
use vadapt_results::{cell, spread, ResultFile, Row};

/// Title.
pub const TITLE: &str = "adaptation: interrupt, then NetAP at run time, 2 VMs × 3 threads";

const VMS: u32 = 2;
const THREADS: u32 = 3;

/// Run B5.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let before = ctx.secs(20.0, 4.0).as_secs();
    let after = ctx.secs(20.0, 12.0).as_secs();
    let total = before + after;
    f.run_seconds = total as f64;
    f.params.insert("interrupt_s".into(), before as f64);
    f.params.insert("netap_s".into(), after as f64);
    let exit = vadapt_guest::config::DEFAULT_EXIT_COST_NS;
    f.params.insert("exit_cost_ns".into(), exit as f64);
    for run in 0..ctx.runs {
        ctx.say(&format!(
            "round {}/{} ({before} s interrupt + {after} s netap)",
            run + 1,
            ctx.runs
        ));
        let ports: Vec<VmPort> = (1..=VMS)
            .map(|i| {
                VmPort::new(
                    &ctx.work,
                    &format!("vm{i}"),
                    THREADS as u16,
                    PolicyKind::Interrupt,
                )
            })
            .collect();
        let mut d = Daemon::spawn(ctx, &format!("b5-vadapt-{run}"), &ports)?;
        let opts = GuestOpts {
            threads: THREADS,
            ..GuestOpts::stream(64, Duration::from_secs(total + 3), exit)
        };
        if run == 0 {
            f.commands.push(ctx.show(&d.command));
            for p in &ports {
                f.commands
                    .push(ctx.show(&opts.argv("vadapt", &p.socket, ctx.frontend_cpu)));
            }
            f.commands.push(format!(
                "# at t = {before} s: vadapt set-policy --port vmN netap"
            ));
        }
        let cfg = DaemonConfig {
            vm: ports
                .iter()
                .map(|p| VmPortConfig {
                    queues: p.queues,
                    ..VmPortConfig::new(p.name.clone(), p.socket.clone())
                })
                .collect(),
            ..DaemonConfig::default()
        };
        let guests: Vec<GuestProc> = ports
            .iter()
            .map(|p| GuestProc::spawn(ctx, &format!("b5-guest-{}-{run}", p.name), &p.socket, &opts))
            .collect::<Result<_, _>>()?;
        // Let both guests connect before the clock starts.
        ctx.sleep(Duration::from_millis(500))?;
        let start = Instant::now();
        let mut prev = d.stats()?;
        let mut prev_t = 0.0;
        let mut samples: Vec<Sample> = Vec::new();
        let mut policy = PolicyKind::Interrupt;
        for sec in 1..=total {
            ctx.sleep(
                (start + Duration::from_secs(sec)).saturating_duration_since(Instant::now()),
            )?;
            let t = start.elapsed().as_secs_f64();
            let now = d.stats()?;
            samples.extend(rates(
                &prev,
                &now,
                (t - prev_t).max(1e-6),
                t,
                policy.as_str(),
                &cfg,
            ));
            prev = now;
            prev_t = t;
            if sec == before {
                policy = PolicyKind::Netap;
                for p in &ports {
                    d.set_policy(&p.name, policy)?;
                }
            }
        }
        // The guests run a little longer than the timeline; stop them now.
        drop(guests);
        for s in &samples {
            let mut r = Row::new("trace", "guest", "vadapt", &s.policy, &s.vm).at(64, run);
            r.set("t", s.t)
                .set("mbps", s.mbps)
                .set("mpps", s.pps / 1e6)
                .set("kicks_per_s", s.kicks_per_s)
                .set("calls_per_s", s.calls_per_s)
                .set("worker_cpu_pct", s.worker_cpu_pct)
                .set("interval_us", s.interval_us as f64);
            f.rows.push(r);
        }
        f.rows.extend(phases(&samples, before, run));
    }
    Ok(())
}

/// Seconds after the switch at which every VM's interval stops changing
/// (`None`: still moving in the last second).
pub fn converged_after(samples: &[Sample], switch_s: u64) -> Option<f64> {
    let mut vms: Vec<&str> = samples.iter().map(|s| s.vm.as_str()).collect();
    vms.sort_unstable();
    vms.dedup();
    let mut worst: f64 = 0.0;
    for vm in vms {
        let tr: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.vm == vm && s.t > switch_s as f64 + 0.5)
            .collect();
        let last = tr.last()?;
        if tr.len() < 2 {
            return None;
        }
        // First index from which the interval equals the final one.
        let mut k = tr.len() - 1;
        while k > 0 && tr[k - 1].interval_us == last.interval_us {
            k -= 1;
        }
        if k == tr.len() - 1 {
            // Changed in the very last second: not settled.
            return None;
        }
        worst = worst.max((tr[k].t - switch_s as f64).round());
    }
    Some(worst)
}

/// A phase: its name and which sample times belong to it.
type Window = (&'static str, Box<dyn Fn(f64) -> bool>);

/// Per-phase rows (sums over VMs, means over seconds) of one run.
pub fn phases(samples: &[Sample], switch_s: u64, run: u32) -> Vec<Row> {
    let sw = switch_s as f64;
    let conv = converged_after(samples, switch_s);
    // Not converged: "after" is the second half of the NetAP phase, so the
    // goal is still judged on NetAP's steady behaviour (and says so).
    let end = samples.iter().map(|s| s.t).fold(sw, f64::max);
    let settle = conv.map_or(((sw + end) / 2.0).floor(), |c| sw + c);
    let windows: [Window; 3] = [
        ("before", Box::new(move |t| t > 1.5 && t <= sw + 0.5)),
        (
            "during",
            Box::new(move |t| t > sw + 0.5 && t <= settle + 0.5),
        ),
        ("after", Box::new(move |t| t > settle + 0.5)),
    ];
    let mut out = Vec::new();
    for (name, inside) in windows {
        let sel: Vec<&Sample> = samples.iter().filter(|s| inside(s.t)).collect();
        let mut secs: Vec<u64> = sel.iter().map(|s| (s.t * 1000.0).round() as u64).collect();
        secs.sort_unstable();
        secs.dedup();
        if secs.is_empty() {
            continue;
        }
        let n = secs.len() as f64;
        let sum = |g: fn(&Sample) -> f64| sel.iter().map(|s| g(s)).sum::<f64>() / n;
        let policy = if name == "before" {
            "interrupt"
        } else {
            "netap"
        };
        let mut r = Row::new("phases", "guest", "vadapt", policy, name).at(64, run);
        let mpps = sum(|s| s.pps) / 1e6;
        let kicks = sum(|s| s.kicks_per_s);
        r.set("seconds", n)
            .set("mpps", mpps)
            .set("mbps", sum(|s| s.mbps))
            .set("kicks_per_s", kicks)
            .set(
                "kicks_per_mpkt",
                if mpps > 0.0 { kicks / mpps } else { f64::NAN },
            )
            .set("calls_per_s", sum(|s| s.calls_per_s))
            .set("worker_cpu_pct", sum(|s| s.worker_cpu_pct));
        if let Some(c) = conv {
            r.set("converge_s", c);
        }
        r.set("converged", if conv.is_some() { 1.0 } else { 0.0 });
        out.push(r);
    }
    out
}

/// The B5 tables.
pub fn render(f: &ResultFile) -> String {
    let rows: Vec<&Row> = f.table("phases").collect();
    let mut s = format!(
        "\n2 VMs × 3 threads (one queue pair each), 64 B, closed loop, exit cost {} ns; \
         {} s on `interrupt`, then `vadapt set-policy ... netap` for {} s. Sums over both VMs.\n\n",
        f.params.get("exit_cost_ns").copied().unwrap_or(0.0),
        f.params.get("interrupt_s").copied().unwrap_or(0.0),
        f.params.get("netap_s").copied().unwrap_or(0.0),
    );
    s.push_str(&metric_table(
        &rows,
        &[
            ("phase", |r| r.variant.clone()),
            ("policy", |r| r.policy.clone()),
        ],
        &[
            ("mpps", "Mpps", 3),
            ("mbps", "Mbit/s", 0),
            ("kicks_per_s", "kicks/s", 0),
            ("kicks_per_mpkt", "kicks/Mpkt", 0),
            ("worker_cpu_pct", "worker CPU %", 0),
            ("seconds", "s", 0),
        ],
        &[("mpps", "rate × before"), ("kicks_per_s", "kicks × before")],
        |b, _| b.variant == "before",
    ));
    let runs: Vec<u32> = {
        let mut v: Vec<u32> = f.table("phases").map(|r| r.run).collect();
        v.dedup();
        v
    };
    let conv: Vec<&Row> = f
        .table("phases")
        .filter(|r| r.variant == "during" || r.variant == "after")
        .collect();
    let converged = runs
        .iter()
        .filter(|run| {
            conv.iter()
                .any(|r| r.run == **run && r.m.contains_key("converge_s"))
        })
        .count();
    s.push_str(&format!(
        "\nRounds (1 s each) from the switch until every VM's interval stayed fixed: {} — \
         converged in {converged} of {} runs (NetAP's search with the paper's constants needs 11). \
         In a run that did not converge, \"after\" is the second half of the NetAP phase.\n",
        cell(
            spread(
                &conv
                    .iter()
                    .filter(|r| r.variant == "after")
                    .copied()
                    .collect::<Vec<_>>(),
                "converge_s"
            ),
            0
        ),
        runs.len()
    ));
    // The final interval of each VM in each run.
    let mut lines = Vec::new();
    for run in &runs {
        let mut vms: Vec<&Row> = f.table("trace").filter(|r| r.run == *run).collect();
        vms.sort_by(|a, b| a.variant.cmp(&b.variant));
        let mut last: Vec<(String, f64)> = Vec::new();
        for r in vms {
            let iv = r.m.get("interval_us").copied().unwrap_or(0.0);
            match last.iter_mut().find(|(v, _)| *v == r.variant) {
                Some(e) => e.1 = iv,
                None => last.push((r.variant.clone(), iv)),
            }
        }
        lines.push(vec![
            run.to_string(),
            last.iter()
                .map(|(v, iv)| format!("{v}: {iv:.0} µs"))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    if !lines.is_empty() {
        s.push('\n');
        s.push_str(&table(&["run", "final polling interval"], &lines));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smp(t: f64, vm: &str, policy: &str, pps: f64, kicks: f64, iv: u64) -> Sample {
        Sample {
            t,
            vm: vm.into(),
            policy: policy.into(),
            mbps: pps * 512.0 / 1e6,
            pps,
            payload_mbps: None,
            kicks_per_s: kicks,
            calls_per_s: 0.0,
            worker_cpu_pct: 10.0,
            interval_us: iv,
        }
    }

    fn timeline(final_change_at: u64) -> Vec<Sample> {
        let mut v = Vec::new();
        for sec in 1..=16u64 {
            for vm in ["vm1", "vm2"] {
                let (policy, iv, kicks) = if sec <= 4 {
                    ("interrupt", 0, 1e5)
                } else if sec < final_change_at {
                    ("netap", 100 + sec * 10, 10.0)
                } else {
                    ("netap", 999, 10.0)
                };
                v.push(smp(sec as f64, vm, policy, 1e6, kicks, iv));
            }
        }
        v
    }

    #[test]
    fn convergence_is_the_first_second_of_the_final_interval() {
        assert_eq!(converged_after(&timeline(12), 4), Some(8.0));
        // Changed in the last second: not converged.
        assert_eq!(converged_after(&timeline(16), 4), None);
    }

    #[test]
    fn without_convergence_after_is_the_second_half_of_netap() {
        let p = phases(&timeline(16), 4, 0);
        let after = p.iter().find(|r| r.variant == "after").unwrap();
        // NetAP from 5 to 16 s: "after" starts past (4 + 16) / 2 = 10 s.
        assert_eq!(after.m["seconds"], 6.0);
        assert_eq!(after.m["converged"], 0.0);
        assert!(!after.m.contains_key("converge_s"));
    }

    #[test]
    fn phases_split_before_during_after() {
        let p = phases(&timeline(12), 4, 0);
        let names: Vec<&str> = p.iter().map(|r| r.variant.as_str()).collect();
        assert_eq!(names, ["before", "during", "after"]);
        // Before: seconds 2..=4 (the first one skipped), both VMs summed.
        assert_eq!(p[0].m["seconds"], 3.0);
        assert_eq!(p[0].m["mpps"], 2.0);
        assert_eq!(p[0].m["kicks_per_s"], 2e5);
        assert_eq!(p[2].m["kicks_per_s"], 20.0);
        assert_eq!(p[2].m["seconds"], 4.0);
        assert_eq!(p[2].m["converge_s"], 8.0);
        let f = ResultFile {
            rows: p,
            runs: 1,
            ..Default::default()
        };
        let t = render(&f);
        assert!(t.contains("converged in 1 of 1 runs"), "{t}");
    }
}
