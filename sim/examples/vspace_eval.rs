//! vSPACE evaluation (issue 13, evaluation 1): max QPS under the SLO per
//! core allocator, energy at 50 kQPS, cores lent to a best-effort VM; and
//! (issue 39) Algorithm 3's threshold explorer under a load that crosses the
//! SLO.
//!
//! `cargo run --release -p vadapt-sim --example vspace_eval -- SCENARIO.toml`
//! (see `sim/scripts/vspace-eval.sh`). The scenario gives the host, the LC
//! VM and its RR load; each allocator is applied to it in turn
//! (`[host.core_alloc]` and the VM's queue pairs are overwritten), at each
//! constant load of `--qps`, for `--duration-s` simulated seconds of which
//! the first `--warmup-s` are not measured.
//!
//! With `--cycle`, each allocator runs once instead, its load following the
//! cycle (`time s:kQPS` points, linear between them, as the paper's §5.3
//! dynamic load goes 50 → 250 → 50 kQPS) over and over for the whole run.
//! The "# explorer" table then says what Algorithm 3 did: its rounds by
//! branch, the SLO-violating periods it saw, and the range its thresholds
//! went through. `--samples-per-round` shortens its rounds (paper: 1000
//! periods, 100 s) for smoke runs.
//!
//! `20vCPU-20NQ-on-K` (named in `--only`) time-shares the VM's vCPUs and
//! 20 queue workers on K cores with the rest parked: the fewest K that
//! holds the SLO at a load is where a CoreNap-like allocator that meets
//! the SLO would settle.
use clap::Parser;
use std::process::ExitCode;
use std::sync::Mutex;
use vadapt_policy::vspace::{ThresholdParams, VspaceMode};
use vadapt_policy::Duration;
use vadapt_sim::cores::{CoreAllocSpec, CoreMgmtSpec, ExplorerState};
use vadapt_sim::scenario::{Period, Workload};
use vadapt_sim::{run_scenario, Scenario};

#[derive(Parser, Debug)]
struct Args {
    /// Base scenario (one RR VM).
    scenario: std::path::PathBuf,
    /// Loads, kQPS, ascending.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "25,50,75,100,125,150,175,200,225,250,275,300"
    )]
    qps: Vec<f64>,
    /// Simulated seconds per point.
    #[arg(long, default_value_t = 4.0)]
    duration_s: f64,
    /// Seconds excluded at the start of each point.
    #[arg(long, default_value_t = 2.0)]
    warmup_s: f64,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Only these allocators (labels as printed), comma-separated; without
    /// it every allocator but the static time-shared `20vCPU-20NQ-on-K`
    /// (K = 4..9 cores, the rest parked), which run only when named.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// A load cycle instead of `--qps`: `time s:kQPS` points, the first at
    /// 0 s, times ascending, the last (the cycle's length) at the first's
    /// load; repeated for the whole run.
    #[arg(long, value_delimiter = ',', value_parser = parse_cycle_point)]
    cycle: Vec<(f64, f64)>,
    /// Algorithm 3's round: control periods with a P95 per exploration round
    /// (paper: 1000; at most `ThresholdParams::MAX_SAMPLES_PER_ROUND`).
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(ThresholdParams::MAX_SAMPLES_PER_ROUND)))]
    samples_per_round: u32,
}

/// One `time s:kQPS` point of `--cycle`.
fn parse_cycle_point(s: &str) -> Result<(f64, f64), String> {
    let (t, q) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}` is not time_s:kQPS"))?;
    let num = |v: &str| {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("`{v}` in `{s}` is not a number >= 0"))
    };
    Ok((num(t)?, num(q)?))
}

/// The RR load's `rate_qps` points (s, requests/s): `cycle` (s, kQPS)
/// repeated until `duration_s`.
fn repeat_cycle(cycle: &[(f64, f64)], duration_s: f64) -> Result<Vec<(f64, f64)>, String> {
    let (first, last) = match (cycle.first(), cycle.last()) {
        (Some(f), Some(l)) if cycle.len() >= 2 => (*f, *l),
        _ => return Err("--cycle needs at least two points".into()),
    };
    if first.0 != 0.0 || first.1 != last.1 || !cycle.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err(
            "--cycle starts at 0 s, its times ascend, and it ends at the load it starts at".into(),
        );
    }
    let len = last.0;
    let mut pts = vec![(0.0, first.1 * 1000.0)];
    let mut start = 0.0;
    while start < duration_s {
        pts.extend(cycle[1..].iter().map(|&(t, q)| (start + t, q * 1000.0)));
        start += len;
    }
    Ok(pts)
}

/// The mean of a piecewise-linear load over `[from, to]` s, in the load's
/// unit (trapezoids between the points).
fn mean_load(pts: &[(f64, f64)], from: f64, to: f64) -> f64 {
    let at = |t: f64| {
        let i = pts.partition_point(|p| p.0 <= t);
        match (i.checked_sub(1).map(|j| pts[j]), pts.get(i)) {
            (Some(a), Some(b)) => a.1 + (b.1 - a.1) * (t - a.0) / (b.0 - a.0),
            (Some(a), None) => a.1,
            (None, Some(b)) => b.1,
            (None, None) => 0.0,
        }
    };
    let mut knots: Vec<f64> = pts
        .iter()
        .map(|p| p.0)
        .filter(|&t| t > from && t < to)
        .collect();
    knots.insert(0, from);
    knots.push(to);
    let area: f64 = knots
        .windows(2)
        .map(|w| (at(w[0]) + at(w[1])) / 2.0 * (w[1] - w[0]))
        .sum();
    area / (to - from).max(f64::MIN_POSITIVE)
}

struct Alloc {
    label: &'static str,
    queues: u32,
    alloc: CoreAllocSpec,
    be_vm: bool,
    /// Run without `--only` (the static time-shared groups of 4 to 9 cores,
    /// which measure the CoreNap-like allocator's floor, run only when named).
    by_default: bool,
}

/// 20vCPU-20NQ time-shared on the first `cores` cores, the rest parked.
fn time_shared_on(label: &'static str, cores: u32) -> Alloc {
    Alloc {
        label,
        queues: 20,
        alloc: CoreAllocSpec::TimeSharingOn { cores },
        be_vm: false,
        by_default: false,
    }
}

fn allocators() -> Vec<Alloc> {
    let v = |label, mode| Alloc {
        label,
        queues: 20,
        alloc: CoreAllocSpec::Vspace { mode },
        be_vm: mode == VspaceMode::Resource,
        by_default: true,
    };
    vec![
        Alloc {
            label: "20vCPU-20NQ",
            queues: 20,
            alloc: CoreAllocSpec::TimeSharing,
            be_vm: false,
            by_default: true,
        },
        Alloc {
            label: "20vCPU-1NQ",
            queues: 1,
            alloc: CoreAllocSpec::TimeSharing,
            be_vm: false,
            by_default: true,
        },
        Alloc {
            label: "16vCPU-4NQ-iso",
            queues: 20,
            alloc: CoreAllocSpec::Isolated {
                vcpu_cores: 16,
                nq_cores: 4,
            },
            be_vm: false,
            by_default: true,
        },
        Alloc {
            label: "CoreNap-like",
            queues: 20,
            alloc: CoreAllocSpec::CoreNapLike,
            be_vm: false,
            by_default: true,
        },
        Alloc {
            label: "Demeter-like(1NQ)",
            queues: 1,
            alloc: CoreAllocSpec::DemeterLike,
            be_vm: true,
            by_default: true,
        },
        Alloc {
            label: "Demeter-like(20NQ)",
            queues: 20,
            alloc: CoreAllocSpec::DemeterLike,
            be_vm: true,
            by_default: true,
        },
        v("vSPACE-P", VspaceMode::Performance),
        v("vSPACE-E", VspaceMode::Energy),
        v("vSPACE-R", VspaceMode::Resource),
        time_shared_on("20vCPU-20NQ-on-4", 4),
        time_shared_on("20vCPU-20NQ-on-5", 5),
        time_shared_on("20vCPU-20NQ-on-6", 6),
        time_shared_on("20vCPU-20NQ-on-7", 7),
        time_shared_on("20vCPU-20NQ-on-8", 8),
        time_shared_on("20vCPU-20NQ-on-9", 9),
    ]
}

#[derive(Clone, Debug)]
struct Point {
    alloc: usize,
    kqps: f64,
    p95_us: f64,
    served_kqps: f64,
    power_w: f64,
    cores: [f64; 4],
    preempt_per_req: f64,
    slice_per_req: f64,
    migrations_per_s: f64,
    /// Algorithm 3 at the end of the point: "rounds, halted or exploring,
    /// Th_vCPU/Th_NQ", or "-" for allocators without it.
    explorer: String,
    /// Algorithm 3 over the point, for the "# explorer" table (vSPACE only).
    trace: Option<ExplorerState>,
}

/// One run of allocator `a`: at the constant load `kqps`, or, with
/// `--cycle`, under the cycle (then `kqps` is unused and the point reports
/// the cycle's mean load over the measured span).
fn point(base: &Scenario, a: &Alloc, kqps: f64, args: &Args) -> Result<Point, String> {
    let mut sc = base.clone();
    let rate_qps = if args.cycle.is_empty() {
        vec![(0.0, kqps * 1000.0)]
    } else {
        repeat_cycle(&args.cycle, args.duration_s)?
    };
    let kqps = mean_load(&rate_qps, args.warmup_s, args.duration_s) / 1000.0;
    let qps = kqps * 1000.0;
    sc.duration = Duration((args.duration_s * 1e9) as u64);
    sc.periods = vec![Period {
        name: "measure".into(),
        from_s: args.warmup_s,
        to_s: args.duration_s,
    }];
    sc.timeline.retain(|t| t.at < sc.duration);
    sc.host.core_mgmt = CoreMgmtSpec {
        alloc: a.alloc,
        be_vm: a.be_vm,
        samples_per_round: args.samples_per_round,
        ..base.host.core_mgmt
    };
    for vm in &mut sc.vms {
        vm.queues = a.queues;
        if let Workload::Rr(r) = &mut vm.workload {
            r.rate_qps = rate_qps.clone();
        }
    }
    let r = run_scenario(&sc, sc.seed).map_err(|e| e.to_string())?;
    let p = &r.periods[0];
    let ev = &r.core_events;
    let n = ev.periods.max(1) as f64;
    let span = args.duration_s - args.warmup_s;
    let reqs = (qps * args.duration_s).max(1.0);
    Ok(Point {
        alloc: 0,
        kqps,
        p95_us: p.p95_us.unwrap_or(f64::INFINITY),
        served_kqps: p.served_qps.unwrap_or(0.0) / 1000.0,
        power_w: p.power_w.unwrap_or(f64::NAN),
        cores: ev.core_periods.map(|c| c as f64 / n),
        preempt_per_req: ev.preemptions as f64 / reqs,
        slice_per_req: ev.slice_waits as f64 / reqs,
        migrations_per_s: ev.migrations as f64 / args.duration_s.max(span),
        explorer: ev.explorer.map_or("-".into(), |e| {
            format!(
                "{} rounds, {}, {:.3}/{:.3}",
                e.rounds,
                if e.exploring { "exploring" } else { "halted" },
                e.th_vcpu,
                e.th_nq
            )
        }),
        trace: ev.explorer,
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let base = match Scenario::from_file(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let allocs: Vec<Alloc> = allocators()
        .into_iter()
        .filter(|a| {
            if args.only.is_empty() {
                a.by_default
            } else {
                args.only.iter().any(|o| o == a.label)
            }
        })
        .collect();
    // Under a cycle, one run per allocator (its load is the cycle's).
    let loads: &[f64] = if args.cycle.is_empty() {
        &args.qps
    } else {
        &[0.0]
    };
    let jobs: Vec<(usize, f64)> = (0..allocs.len())
        .flat_map(|a| loads.iter().map(move |&q| (a, q)))
        .collect();
    let next = Mutex::new(0usize);
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..args.threads.max(1) {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().expect("lock");
                    *n += 1;
                    *n - 1
                };
                let Some(&(a, q)) = jobs.get(i) else { break };
                match point(&base, &allocs[a], q, &args) {
                    Ok(mut p) => {
                        p.alloc = a;
                        out.lock().expect("lock").push(p);
                    }
                    Err(e) => eprintln!("{} at {q} kQPS: {e}", allocs[a].label),
                }
            });
        }
    });
    let mut pts = out.into_inner().expect("lock");
    pts.sort_by(|x, y| {
        (x.alloc, x.kqps)
            .partial_cmp(&(y.alloc, y.kqps))
            .expect("finite")
    });
    let slo = base.host.core_mgmt.slo_us;
    if let Some(c) = args.cycle.last() {
        let shape: Vec<String> = args.cycle.iter().map(|(t, q)| format!("{t}:{q}")).collect();
        println!(
            "# load: the cycle {} (s:kQPS) every {} s; Algorithm 3 rounds of {} periods",
            shape.join(","),
            c.0,
            args.samples_per_round
        );
        println!();
    }
    println!("# points (P95 in µs; cores = mean per control period: vCPU|shared, NQ, BE, parked)");
    println!("| allocator | kQPS | served kQPS | P95 µs | power W | cores v/nq/be/parked | preempt/req | slice waits/req | migrations/s | Algorithm 3: rounds, state, Th vCPU/NQ |");
    println!("|---|---:|---:|---:|---:|---|---:|---:|---:|---|");
    for p in &pts {
        println!(
            "| {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.1}/{:.1}/{:.1}/{:.1} | {:.3} | {:.4} | {:.1} | {} |",
            allocs[p.alloc].label,
            p.kqps,
            p.served_kqps,
            p.p95_us,
            p.power_w,
            p.cores[0],
            p.cores[1],
            p.cores[2],
            p.cores[3],
            p.preempt_per_req,
            p.slice_per_req,
            p.migrations_per_s,
            p.explorer
        );
    }
    print_explorer(&allocs, &pts);
    if !args.cycle.is_empty() {
        return ExitCode::SUCCESS;
    }
    println!();
    println!("# summary (SLO: P95 <= {slo:.0} µs and >= 98 % of the offered load served)");
    println!("| allocator | max kQPS under SLO | power at 50 kQPS W | BE cores at 50 kQPS | BE cores at 150 kQPS |");
    println!("|---|---:|---:|---:|---:|");
    for (ai, a) in allocs.iter().enumerate() {
        let mine: Vec<&Point> = pts.iter().filter(|p| p.alloc == ai).collect();
        let ok = |p: &Point| p.p95_us <= slo && p.served_kqps >= 0.98 * p.kqps;
        let max = mine
            .iter()
            .take_while(|p| ok(p))
            .last()
            .map_or("none".to_string(), |p| format!("{:.0}", p.kqps));
        let at = |k: f64| mine.iter().find(|p| (p.kqps - k).abs() < 1e-9);
        let power = at(50.0).map_or("-".into(), |p| {
            format!(
                "{:.1}{}",
                p.power_w,
                if ok(p) { "" } else { " (SLO violated)" }
            )
        });
        let be = |k: f64| {
            at(k).map_or("-".into(), |p| {
                if a.be_vm {
                    format!("{:.2}", p.cores[2])
                } else {
                    "-".into()
                }
            })
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            a.label,
            max,
            power,
            be(50.0),
            be(150.0)
        );
    }
    ExitCode::SUCCESS
}

/// The "# explorer" table: what Algorithm 3 did in each vSPACE run.
fn print_explorer(allocs: &[Alloc], pts: &[Point]) {
    let runs: Vec<(&Point, &ExplorerState)> = pts
        .iter()
        .filter_map(|p| p.trace.as_ref().map(|e| (p, e)))
        .collect();
    if runs.is_empty() {
        return;
    }
    println!();
    println!("# explorer (Algorithm 3 over each run; Th as fractions of a core: min/max/final)");
    println!("| allocator | kQPS | rounds | state | violation-branch rounds | rewarded rounds | kept rounds | lowering rounds | SLO-violating periods | Th vCPU min/max/final | Th NQ min/max/final |");
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|");
    for (p, e) in runs {
        let t = &e.trace;
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {:.3}/{:.3}/{:.3} | {:.3}/{:.3}/{:.3} |",
            allocs[p.alloc].label,
            p.kqps,
            e.rounds,
            if e.exploring { "exploring" } else { "halted" },
            t.adjusted_rounds,
            t.rewarded_rounds,
            t.kept_rounds,
            t.lowering_rounds,
            t.violating_samples,
            t.th_vcpu_range.0,
            t.th_vcpu_range.1,
            e.th_vcpu,
            t.th_nq_range.0,
            t.th_nq_range.1,
            e.th_nq,
        );
    }
}
