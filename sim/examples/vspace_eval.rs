//! vSPACE evaluation (issue 13, evaluation 1): max QPS under the SLO per
//! core allocator, energy at 50 kQPS, cores lent to a best-effort VM.
//!
//! `cargo run --release -p vadapt-sim --example vspace_eval -- SCENARIO.toml`
//! (see `sim/scripts/vspace-eval.sh`). The scenario gives the host, the LC
//! VM and its RR load; each allocator is applied to it in turn
//! (`[host.core_alloc]` and the VM's queue pairs are overwritten), at each
//! constant load of `--qps`, for `--duration-s` simulated seconds of which
//! the first `--warmup-s` are not measured.
use clap::Parser;
use std::process::ExitCode;
use std::sync::Mutex;
use vadapt_policy::vspace::VspaceMode;
use vadapt_policy::Duration;
use vadapt_sim::cores::{CoreAllocSpec, CoreMgmtSpec};
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
    /// Only these allocators (labels as printed), comma-separated.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

struct Alloc {
    label: &'static str,
    queues: u32,
    alloc: CoreAllocSpec,
    be_vm: bool,
}

fn allocators() -> Vec<Alloc> {
    let v = |label, mode| Alloc {
        label,
        queues: 20,
        alloc: CoreAllocSpec::Vspace { mode },
        be_vm: mode == VspaceMode::Resource,
    };
    vec![
        Alloc {
            label: "20vCPU-20NQ",
            queues: 20,
            alloc: CoreAllocSpec::TimeSharing,
            be_vm: false,
        },
        Alloc {
            label: "20vCPU-1NQ",
            queues: 1,
            alloc: CoreAllocSpec::TimeSharing,
            be_vm: false,
        },
        Alloc {
            label: "16vCPU-4NQ-iso",
            queues: 20,
            alloc: CoreAllocSpec::Isolated {
                vcpu_cores: 16,
                nq_cores: 4,
            },
            be_vm: false,
        },
        Alloc {
            label: "CoreNap-like",
            queues: 20,
            alloc: CoreAllocSpec::CoreNapLike,
            be_vm: false,
        },
        Alloc {
            label: "Demeter-like(1NQ)",
            queues: 1,
            alloc: CoreAllocSpec::DemeterLike,
            be_vm: true,
        },
        Alloc {
            label: "Demeter-like(20NQ)",
            queues: 20,
            alloc: CoreAllocSpec::DemeterLike,
            be_vm: true,
        },
        v("vSPACE-P", VspaceMode::Performance),
        v("vSPACE-E", VspaceMode::Energy),
        v("vSPACE-R", VspaceMode::Resource),
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
}

fn point(base: &Scenario, a: &Alloc, kqps: f64, args: &Args) -> Result<Point, String> {
    let mut sc = base.clone();
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
        ..base.host.core_mgmt
    };
    for vm in &mut sc.vms {
        vm.queues = a.queues;
        if let Workload::Rr(r) = &mut vm.workload {
            r.rate_qps = vec![(0.0, qps)];
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
        .filter(|a| args.only.is_empty() || args.only.iter().any(|o| o == a.label))
        .collect();
    let jobs: Vec<(usize, f64)> = (0..allocs.len())
        .flat_map(|a| args.qps.iter().map(move |&q| (a, q)))
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
