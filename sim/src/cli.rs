//! `vadapt sim ...`: argument structs for the `vadapt` binary and their runner.

use crate::run::run_scenario;
use crate::scenario::Scenario;
use crate::sweep::{sweep, with_policy, ParamRange, SweepReport};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant as WallClock;
use vadapt_policy::{Duration, PolicyConfig};

/// `vadapt sim SCENARIO.toml --out DIR`, or `vadapt sim sweep ...`.
#[derive(clap::Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimArgs {
    /// Sub-command (`sweep`); without one, run the scenario once.
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    /// Scenario file (TOML).
    #[arg(required = true)]
    pub scenario: Option<PathBuf>,
    /// Directory for timeseries.csv, result.json and PNG plots.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override the scenario's simulated time, seconds.
    #[arg(long)]
    pub duration_s: Option<f64>,
}

/// Sub-commands of `vadapt sim`.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum SimCommand {
    /// Run a scenario for each value of one parameter, in parallel.
    Sweep(SweepArgs),
}

/// `vadapt sim sweep SCENARIO.toml --param interval=50..4000:50 --out DIR`.
#[derive(clap::Args, Debug, Clone)]
pub struct SweepArgs {
    /// Scenario file (TOML).
    pub scenario: PathBuf,
    /// Parameter and values: NAME=FROM..TO:STEP or NAME=V1,V2,...
    /// (interval µs, msg_size, threads, ring_size, cores, vms).
    #[arg(long)]
    pub param: ParamRange,
    /// Directory for sweep.csv, sweep.json and sweep.png.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Worker threads (default: available parallelism).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seed (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Skip the interrupt-mode baseline run.
    #[arg(long)]
    pub no_baseline: bool,
    /// Fix another parameter first, NAME=VALUE (repeatable), e.g. `--set threads=2`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("vadapt sim: {msg}");
    ExitCode::FAILURE
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s += &format!(": {c}");
        src = c.source();
    }
    s
}

/// Run `vadapt sim` as parsed; prints a summary, returns the exit status.
pub fn run_cli(args: &SimArgs) -> ExitCode {
    match &args.command {
        Some(SimCommand::Sweep(s)) => run_sweep(s),
        None => {
            let Some(path) = &args.scenario else {
                return fail("a scenario file is required");
            };
            let mut sc = match Scenario::from_file(path) {
                Ok(s) => s,
                Err(e) => return fail(chain(&e)),
            };
            if let Some(d) = args.duration_s {
                if !(d > 0.0 && d.is_finite()) {
                    return fail("--duration-s must be > 0");
                }
                sc.duration = Duration((d * 1e9) as u64);
            }
            let seed = args.seed.unwrap_or(sc.seed);
            let t0 = WallClock::now();
            let r = match run_scenario(&sc, seed) {
                Ok(r) => r,
                Err(e) => return fail(chain(&e)),
            };
            let wall = t0.elapsed().as_secs_f64();
            println!(
                "{}: {:.1} s simulated in {:.2} s wall ({:.0}x real time), {} events, seed {}",
                sc.name,
                sc.duration.as_secs_f64(),
                wall,
                sc.duration.as_secs_f64() / wall.max(1e-9),
                r.events,
                seed
            );
            println!("mean throughput {:.3} Gb/s", r.mean_gbps_after(0.0));
            for p in &r.periods {
                println!(
                    "  {:<10} {:>6.1}-{:<6.1}s  {:7.3} Gb/s  host {:6.1}%  guest {:6.1}%  kicks {:9.0}/s  calls {:8.0}/s{}",
                    p.name,
                    p.from_s,
                    p.to_s,
                    p.gbps,
                    p.host_cpu_pct,
                    p.guest_cpu_pct,
                    p.kicks_per_s,
                    p.calls_per_s,
                    p.p99_us.map_or(String::new(), |v| format!("  p99 {v:.0} µs"))
                );
            }
            if let Some(out) = &args.out {
                if let Err(e) = r.write(out) {
                    return fail(chain(&e));
                }
                println!("wrote {}", out.display());
            }
            ExitCode::SUCCESS
        }
    }
}

fn run_sweep(a: &SweepArgs) -> ExitCode {
    let mut sc = match Scenario::from_file(&a.scenario) {
        Ok(s) => s,
        Err(e) => return fail(chain(&e)),
    };
    if let Some(seed) = a.seed {
        sc.seed = seed;
    }
    for kv in &a.set {
        let Some((k, v)) = kv.split_once('=') else {
            return fail(format!("--set `{kv}`: expected NAME=VALUE"));
        };
        let Ok(v) = v.parse::<f64>() else {
            return fail(format!("--set `{kv}`: value is not a number"));
        };
        match crate::sweep::apply_param(&sc, k, v) {
            // apply_param shortens to the sweep duration; keep the full one
            // so later points shorten it the same way.
            Ok(s) => {
                sc = Scenario {
                    duration: sc.duration,
                    ..s
                }
            }
            Err(e) => return fail(chain(&e)),
        }
        if !a.set.is_empty() {
            sc.name = format!("{} ({kv})", sc.name);
        }
    }
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let t0 = WallClock::now();
    let results = match sweep(&sc, &a.param.name, &a.param.values, threads) {
        Ok(r) => r,
        Err(e) => return fail(chain(&e)),
    };
    let baseline = if a.no_baseline {
        None
    } else {
        match run_scenario(&with_policy(&sc, PolicyConfig::Interrupt), sc.seed) {
            Ok(r) => Some(r),
            Err(e) => return fail(chain(&e)),
        }
    };
    let wall = t0.elapsed().as_secs_f64();
    let report = SweepReport::new(&sc, &a.param.name, &results, baseline.as_ref());
    println!(
        "{}: {} points of {} s on {} threads in {:.1} s wall",
        sc.name,
        results.len(),
        sc.sweep.duration.as_secs_f64(),
        threads,
        wall
    );
    if let Some(b) = &report.baseline {
        println!("  interrupt baseline {:.3} Gb/s", b.gbps);
    }
    println!(
        "  best {}={} at {:.3} Gb/s{}",
        report.param,
        report.best_value,
        report.best_gbps,
        report.baseline.as_ref().map_or(String::new(), |b| format!(
            " ({:.0}% of interrupt mode)",
            100.0 * report.best_gbps / b.gbps.max(1e-12)
        ))
    );
    if let Some(out) = &a.out {
        if let Err(e) = report.write(out) {
            return fail(chain(&e));
        }
        println!("wrote {}", out.display());
    }
    ExitCode::SUCCESS
}
