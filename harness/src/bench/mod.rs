//! `vadapt bench`: the benchmark suite that regenerates BENCHMARKS.md.
//!
//! Each benchmark runs vadapt and its anchors (DPDK's
//! vhost PMD, OVS-DPDK) side by side on this machine, interleaved A/B/A/B
//! over `--runs` rounds, backend worker on CPU 1 and sender on CPU 0 (as
//! docs/architecture.md's facts pin them), and stores flat per-run rows in `<out>/<name>.json`
//! (a [`vadapt_results::ResultFile`] of kind `bench`). The report ([`report`]) turns every stored file into the
//! generated section of BENCHMARKS.md — medians with min–max, ratios taken
//! within a round, the issue-6 goals judged from the numbers — and the lab
//! (`python -m vadapt_lab.plots`) draws the figures.
//!
//! Every process a benchmark starts is a [`child::Child`]: own process group,
//! killed when dropped, so errors, panics and Ctrl-C leave nothing running.
//! A benchmark that fails keeps the rows it finished and names the failure;
//! the suite goes on with the next one (unless interrupted).
//!
//! A benchmark's file is named by the question it answers; its id — what
//! `--only` takes, the results file's name, the heading in BENCHMARKS.md —
//! stays the short one it was recorded under (`b1` is B1 in the report), so
//! that recorded results stay comparable:
//!
//! | id | file | question |
//! |---|---|---|
//! | `b1` | `saturation.rs` | how many packets a backend takes when the sender never waits |
//! | `capture` | `capture_cost.rs` | what a running `vadapt capture` costs B1's port, busy cycles a packet with and without |
//! | `b2` | `partial_load.rs` | what each packet costs at 10–75 % of saturation |
//! | `b3` | `latency.rs` | round-trip latency through an echo |
//! | `b4` | `idle.rs` | the backend's CPU with a connected, nearly silent guest |
//! | `b5` | `adaptation.rs` | how NetAP adapts when switched in at run time |
//! | `b6` | `ovs_pmd_sleep.rs` | what OVS-DPDK's PMD costs busy polling and with `pmd-maxsleep` |
//! | `b7` | `memory_per_port.rs` | the daemon's memory per VM port |
//! | `b8` | `vm_to_vm.rs` | forwarding between two VMs on one backend |
//! | `b9` | `papers_workload/` | the NetAP paper's TCP workload, on the daemon and in the simulator |
//! | `b10` | `nic_to_vm.rs` | what a packet from the NIC costs into a VM: AF_XDP uplink vs DPDK and the kernel |
//! | `policer` | `policer_accuracy.rs` | how close a policed port's delivered rate is to its configured one |
//! | `timer` | `timer.rs` | how late NetAP's timed sleeps wake |
//!
//! What several benchmarks use lives in `shared.rs`: no benchmark imports
//! another.
//!
//! Imports go one way, down: this file runs the suite (`suite.rs` lists the
//! benchmarks); the report imports the benchmarks for their `render`; a
//! benchmark imports only what is below it — [`ctx::Ctx`], `shared.rs`, [`table`] (the
//! markdown tables), the process wrappers ([`vadapt_proc`],
//! [`testpmd`], `ovs.rs`, [`child`], `veth_wire.rs`) — and never this file, the suite or the
//! report (`scripts/check-imports.py` checks it).

mod adaptation;
mod capture_cost;
pub mod child;
pub mod ctx;
pub mod error;
mod idle;
mod latency;
mod memory_per_port;
mod nic_to_vm;
mod ovs;
mod ovs_pmd_sleep;
mod papers_workload;
mod partial_load;
mod policer_accuracy;
pub mod report;
mod saturation;
mod shared;
mod suite;
pub mod table;
pub mod testpmd;
mod timer;
pub mod vadapt_proc;
mod veth_wire;
mod vm_to_vm;

use crate::cli_util::chain;
use crate::machine;
use clap::Args;
use ctx::Ctx;
use error::BenchError;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use suite::{names, Bench, SUITE};
use vadapt_results::ResultFile;

/// `vadapt bench`.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
    vadapt bench --quick                 # smoke test (about 11 minutes on 2 cores), writes only --out\n  \
    vadapt bench                         # full suite, rewrites BENCHMARKS.md\n  \
    vadapt bench --only b1,b4 --runs 5   # some benchmarks, more rounds\n  \
    vadapt bench --render --out DIR --markdown report.md   # the report of an earlier run's results\n\n\
    Build with `cargo build --release -p vadapt` first: a debug build measures the wrong thing.")]
pub struct BenchArgs {
    /// Short runs (≥ 3 rounds of 1–2 s): checks the harness, numbers are rough.
    /// Never rewrites BENCHMARKS.md (implies `--no-write`).
    #[arg(long)]
    pub quick: bool,
    /// Only these benchmarks (comma-separated): b1 b2 b3 b4 b5 b6 b7 b8 b9 b10 policer timer.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub only: Vec<String>,
    /// Directory for the raw JSON results and logs.
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
    /// Rounds per figure (each figure is the median of this many; at least 3).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub runs: u32,
    /// Do not rewrite BENCHMARKS.md nor redraw docs/img/bench/.
    #[arg(long)]
    pub no_write: bool,
    /// The BENCHMARKS.md to rewrite [default: BENCHMARKS.md at the git top level].
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Run nothing: rewrite the generated section of the report (`--markdown`)
    /// from the results already in `--out`, as the run that wrote them would
    /// have (e.g. the goals of a `--no-write` run, into a scratch file).
    #[arg(long, conflicts_with_all = ["quick", "only", "no_write"])]
    pub render: bool,
}

/// `--render`: the report of the results in `a.out` into `--markdown` (or
/// the repository's BENCHMARKS.md), the plots left as they are.
fn render_only(a: &BenchArgs) -> ExitCode {
    let suite = match report::SuiteInfo::read(&a.out) {
        Ok(s) => s,
        Err(e) => {
            return crate::cli_util::fail(format!(
                "{} (the results of a `vadapt bench` run are not there)",
                chain(&e)
            ))
        }
    };
    let root = repo_root();
    let md = a
        .markdown
        .clone()
        .unwrap_or_else(|| root.join("BENCHMARKS.md"));
    match report::rewrite(&md, &a.out, &root.join("docs/img/bench"), &suite) {
        Ok(()) => {
            println!(
                "rewrote the generated section of {} from {}",
                md.display(),
                a.out.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => crate::cli_util::fail(format!("cannot rewrite {}: {}", md.display(), chain(&e))),
    }
}

/// `--quick` never rewrites the report: a smoke run must not replace the
/// recorded full run, so naming a report to rewrite with it is an error.
fn check_write_flags(a: &BenchArgs) -> Result<(), String> {
    match (&a.markdown, a.quick, a.no_write) {
        (Some(_), true, _) => Err(
            "`--markdown` with `--quick`: a quick run never rewrites a report (drop one of them)"
                .into(),
        ),
        (Some(_), _, true) => Err(
            "`--markdown` with `--no-write`: nothing would be written (drop one of them)".into(),
        ),
        _ => Ok(()),
    }
}

/// Whether this run rewrites BENCHMARKS.md and its plots: a full run that
/// was not interrupted and not told `--no-write`.
fn rewrites_report(a: &BenchArgs, stopped: bool) -> bool {
    !a.quick && !a.no_write && !stopped
}

/// The repository's top level (for BENCHMARKS.md and docs/img/bench).
fn repo_root() -> PathBuf {
    std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Parse `--only` against the suite.
fn select(only: &[String]) -> Result<Vec<&'static Bench>, String> {
    if only.is_empty() {
        return Ok(SUITE.iter().collect());
    }
    let mut out = Vec::new();
    for n in only {
        let n = n.trim();
        let b = SUITE.iter().find(|b| b.name == n).ok_or_else(|| {
            format!(
                "invalid `--only`: `{n}` is not a benchmark (use {})",
                names().join(", ")
            )
        })?;
        if !out.iter().any(|x: &&Bench| x.name == b.name) {
            out.push(b);
        }
    }
    // Run in suite order whatever order was asked.
    out.sort_by_key(|b| SUITE.iter().position(|s| s.name == b.name));
    Ok(out)
}

/// Run one benchmark into its file; the file is written whatever happens.
fn run_one(ctx: &Ctx, b: &Bench, out: &Path) -> ResultFile {
    let mut f = ResultFile {
        bench: b.name.into(),
        title: b.title.into(),
        status: "running".into(),
        started: machine::utc_now(),
        quick: ctx.quick,
        runs: ctx.runs,
        commands: vec![ctx.invocation.replace("{}", b.name)],
        ..ResultFile::default()
    };
    let t = Instant::now();
    // A panic inside a step unwinds through its children's Drop (killing
    // them); catch it here so the suite still writes what it has.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (b.run)(ctx, &mut f)));
    f.seconds = (t.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    match r {
        Ok(Ok(())) => {
            if f.status == "running" {
                f.status = "ok".into();
            }
        }
        Ok(Err(BenchError::Interrupted)) => {
            f.status = "interrupted".into();
            f.error = Some("interrupted (SIGINT/SIGTERM)".into());
        }
        Ok(Err(e)) => {
            f.status = "failed".into();
            f.error = Some(chain(&e));
        }
        Err(p) => {
            f.status = "failed".into();
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            f.error = Some(format!("panicked: {msg}"));
        }
    }
    if let Err(e) = f.write(out) {
        eprintln!("vadapt bench: {}", chain(&e));
    }
    f
}

/// SIGINT/SIGTERM set `stop`: the first one stops the run cleanly (children
/// killed, results written); a second one exits at once (children still die,
/// through `PR_SET_PDEATHSIG`).
fn install_signals(stop: &Arc<AtomicBool>) -> std::io::Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registered first, so it sees the flag as the previous signal left it.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(stop))?;
        signal_hook::flag::register(sig, Arc::clone(stop))?;
    }
    Ok(())
}

/// `vadapt bench`.
pub fn run(a: BenchArgs) -> ExitCode {
    if a.render {
        return render_only(&a);
    }
    let benches = match select(&a.only) {
        Ok(b) => b,
        Err(e) => return crate::cli_util::fail(e),
    };
    if let Err(e) = check_write_flags(&a) {
        return crate::cli_util::fail(e);
    }
    if a.runs < 3 {
        return crate::cli_util::fail(format!(
            "invalid `--runs` {}: each figure is a median of at least 3 runs",
            a.runs
        ));
    }
    let stop = Arc::new(AtomicBool::new(false));
    if let Err(e) = install_signals(&stop) {
        return crate::cli_util::fail(format!("cannot install signal handler: {e}"));
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return crate::cli_util::fail(format!("cannot find my own binary: {e}")),
    };
    let work = std::env::temp_dir().join(format!("vadapt-bench-{}", std::process::id()));
    for d in [&a.out, &work] {
        if let Err(e) = std::fs::create_dir_all(d) {
            return crate::cli_util::fail(format!("cannot create {}: {e}", d.display()));
        }
    }
    let mut inv = String::from("vadapt bench --only {}");
    if a.quick {
        inv.push_str(" --quick");
    }
    if a.runs != 3 {
        inv.push_str(&format!(" --runs {}", a.runs));
    }
    let ctx = Ctx {
        exe,
        work: work.clone(),
        out: a.out.clone(),
        stop: Arc::clone(&stop),
        quick: a.quick,
        runs: a.runs,
        backend_cpu: 1,
        frontend_cpu: 0,
        invocation: inv,
    };
    let root = repo_root();
    let machine = machine::collect(&root);
    if !machine.release_build {
        println!("warning: this is a debug build; its numbers are not representative (cargo build --release -p vadapt)");
    }
    println!(
        "vadapt bench: {} on {} ({} cores), rev {}, {} rounds{}",
        benches.iter().map(|b| b.name).collect::<Vec<_>>().join(","),
        machine.cpu_model,
        machine.cores,
        machine.vadapt_rev,
        a.runs,
        if a.quick { ", quick" } else { "" }
    );
    let t0 = Instant::now();
    let mut failed = Vec::new();
    for b in &benches {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        println!("== {}: {}", b.name, b.title);
        let tb = Instant::now();
        let f = run_one(&ctx, b, &a.out);
        println!(
            "== {}: {} in {:.0} s{}",
            b.name,
            f.status,
            tb.elapsed().as_secs_f64(),
            f.error
                .as_deref()
                .map(|e| format!(": {}", e.lines().next().unwrap_or("")))
                .unwrap_or_default()
        );
        if f.status != "ok" && f.status != "skipped" {
            failed.push(b.name);
        }
    }
    let total = t0.elapsed().as_secs_f64();
    let leaked = child::kill_leftovers();
    if leaked > 0 {
        eprintln!("vadapt bench: killed {leaked} leftover process group(s)");
    }
    let suite = report::SuiteInfo {
        machine,
        seconds: total,
        quick: a.quick,
        runs: a.runs,
        ran: benches.iter().map(|b| b.name.to_string()).collect(),
    };
    if let Err(e) = suite.write(&a.out) {
        eprintln!("vadapt bench: {}", chain(&e));
    }
    println!(
        "suite took {:.0} s ({:.1} min); results in {}/",
        total,
        total / 60.0,
        a.out.display()
    );
    if a.quick {
        println!("--quick: BENCHMARKS.md and docs/img/bench/ left as they are (a smoke run never replaces the recorded full run)");
    }
    if rewrites_report(&a, stop.load(Ordering::Relaxed)) {
        let md = a
            .markdown
            .clone()
            .unwrap_or_else(|| root.join("BENCHMARKS.md"));
        let img = root.join("docs/img/bench");
        plots(&root, &a.out, &img);
        match report::rewrite(&md, &a.out, &img, &suite) {
            Ok(()) => println!("rewrote the generated section of {}", md.display()),
            Err(e) => eprintln!(
                "vadapt bench: cannot rewrite {}: {}",
                md.display(),
                chain(&e)
            ),
        }
    }
    if failed.is_empty() {
        let _ = std::fs::remove_dir_all(&work);
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "vadapt bench: {} did not finish (process logs kept in {})",
            failed.join(", "),
            work.display()
        );
        ExitCode::from(1)
    }
}

/// Draw the figures with the lab if its venv exists, else say how to get them.
fn plots(root: &Path, results: &Path, img: &Path) {
    let py = root.join(".venv/bin/python");
    if !py.is_file() {
        println!(
            "plots skipped: no lab venv at {} (run scripts/install-deps.sh, then `.venv/bin/python -m vadapt_lab.plots {} --out {}`)",
            py.display(),
            results.display(),
            img.display()
        );
        return;
    }
    let st = std::process::Command::new(&py)
        .args(["-m", "vadapt_lab.plots"])
        .arg(results)
        .arg("--out")
        .arg(img)
        .status();
    match st {
        Ok(s) if s.success() => println!("plots drawn in {}", img.display()),
        Ok(s) => eprintln!("vadapt bench: plotting failed ({s}); the tables are still written"),
        Err(e) => eprintln!("vadapt bench: cannot run {}: {e}", py.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::ctx::test_ctx;
    use super::*;
    use std::time::Duration;

    #[test]
    fn quick_never_names_a_report_to_rewrite() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: BenchArgs,
        }
        let parse = |args: &[&str]| Cli::parse_from([&["bench"], args].concat()).a;
        assert!(check_write_flags(&parse(&["--quick"])).is_ok());
        assert!(check_write_flags(&parse(&[])).is_ok());
        assert!(
            check_write_flags(&parse(&["--quick", "--markdown", "x.md"]))
                .unwrap_err()
                .contains("--quick")
        );
        assert!(check_write_flags(&parse(&["--no-write", "--markdown", "x.md"])).is_err());
        assert!(!rewrites_report(&parse(&["--quick"]), false));
        assert!(!rewrites_report(&parse(&["--no-write"]), false));
        assert!(!rewrites_report(&parse(&[]), true));
        assert!(rewrites_report(&parse(&[]), false));
    }

    #[test]
    fn render_writes_the_report_of_results_already_on_disk() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: BenchArgs,
        }
        let dir = tempfile::tempdir().unwrap();
        let md = dir.path().join("report.md");
        let parse = |args: &[&str]| Cli::try_parse_from([&["bench"], args].concat());
        let out = dir.path().to_str().unwrap();
        let a = parse(&["--render", "--out", out, "--markdown", md.to_str().unwrap()])
            .unwrap()
            .a;
        // No suite.json yet: a clear error, nothing written.
        assert_eq!(render_only(&a), ExitCode::from(2));
        assert!(!md.exists());
        report::SuiteInfo {
            runs: 3,
            ran: vec!["b1".into()],
            ..report::SuiteInfo::default()
        }
        .write(dir.path())
        .unwrap();
        let mut f = ResultFile {
            bench: "b1".into(),
            title: "saturation".into(),
            status: "ok".into(),
            runs: 3,
            ..ResultFile::default()
        };
        let mut r = vadapt_results::Row::new("dpdk-fe", "s", "vadapt", "busy-poll", "in_order=1");
        r.set("mpps", 17.5);
        f.rows.push(r.at(64, 0));
        f.write(dir.path()).unwrap();
        assert_eq!(render_only(&a), ExitCode::SUCCESS);
        let text = std::fs::read_to_string(&md).unwrap();
        assert!(
            text.contains(report::BEGIN) && text.contains("17.5"),
            "{text}"
        );
        // Nothing to run, so nothing that selects or writes runs.
        assert!(parse(&["--render", "--quick"]).is_err());
        assert!(parse(&["--render", "--only", "b1"]).is_err());
    }

    #[test]
    fn only_is_checked_and_ordered() {
        let s = select(&["timer".into(), "b1".into(), "b1".into()]).unwrap();
        assert_eq!(
            s.iter().map(|b| b.name).collect::<Vec<_>>(),
            ["b1", "timer"]
        );
        assert!(select(&["b99".into()]).unwrap_err().contains("b99"));
        assert_eq!(select(&[]).unwrap().len(), SUITE.len());
    }

    fn failing_step(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
        // Starts a process tree, records a finished measurement, then fails.
        let argv = vec![
            "sh".into(),
            "-c".into(),
            "sleep 60 & echo gc $!; sleep 60".into(),
        ];
        let mut c = child::Child::spawn(child::Spawn::new("tree", argv, &ctx.work), &ctx.stop)?;
        let (_, l) = c.wait_line("gc", 0, Duration::from_secs(10), |l| l.starts_with("gc "))?;
        f.params.insert("pid".into(), f64::from(c.pid()));
        f.params
            .insert("gc".into(), l[3..].trim().parse::<f64>().unwrap_or(0.0));
        f.rows
            .push(vadapt_results::Row::new("t", "s", "b", "p", "v"));
        Err(BenchError::Failed("step failed on purpose".into()))
    }

    fn blocking_step(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
        let argv = vec![
            "sh".into(),
            "-c".into(),
            "sleep 60 & echo gc $!; sleep 60".into(),
        ];
        let mut c = child::Child::spawn(child::Spawn::new("tree2", argv, &ctx.work), &ctx.stop)?;
        // Recorded before any wait: an early interrupt still leaves a pid to check.
        f.params.insert("pid".into(), f64::from(c.pid()));
        let (_, l) = c.wait_line("gc", 0, Duration::from_secs(10), |l| l.starts_with("gc "))?;
        f.params
            .insert("gc".into(), l[3..].trim().parse::<f64>().unwrap_or(0.0));
        // Blocks until the stop flag is seen, as a measurement would.
        c.wait_exit(Duration::from_secs(60))?;
        Ok(())
    }

    fn panicking_step(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
        let argv = vec!["sleep".into(), "60".into()];
        let c = child::Child::spawn(child::Spawn::new("sleeper", argv, &ctx.work), &ctx.stop)?;
        f.params.insert("pid".into(), f64::from(c.pid()));
        panic!("step panicked on purpose");
    }

    fn pids(f: &ResultFile) -> Vec<i32> {
        f.params.values().map(|v| *v as i32).collect()
    }

    #[test]
    fn a_failing_step_keeps_its_rows_names_the_error_and_leaves_no_process() {
        let ctx = test_ctx(Arc::new(AtomicBool::new(false)));
        let b = Bench {
            name: "selftest",
            title: "t",
            run: failing_step,
        };
        let f = run_one(&ctx, &b, &ctx.work);
        assert_eq!(f.status, "failed");
        assert!(f.error.as_deref().unwrap().contains("on purpose"));
        assert_eq!(f.rows.len(), 1);
        let ps = pids(&f);
        assert_eq!(ps.len(), 2);
        for p in ps {
            assert!(p > 0 && child::gone_soon(p), "process {p} left behind");
        }
        let stored = ResultFile::read(&ctx.work, "selftest").unwrap().unwrap();
        assert_eq!(stored.status, "failed");
    }

    #[test]
    fn an_interrupted_step_stops_and_leaves_no_process() {
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = test_ctx(Arc::clone(&stop));
        let b = Bench {
            name: "selftest-int",
            title: "t",
            run: blocking_step,
        };
        // Raise the flag as SIGINT would, while the step is waiting.
        let s2 = Arc::clone(&stop);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            s2.store(true, Ordering::Relaxed);
        });
        let f = run_one(&ctx, &b, &ctx.work);
        t.join().unwrap();
        assert_eq!(f.status, "interrupted", "{:?}", f.error);
        assert!(!pids(&f).is_empty());
        for p in pids(&f) {
            assert!(child::gone_soon(p), "process {p} left behind");
        }
    }

    #[test]
    fn a_real_sigterm_interrupts_a_running_step_and_leaves_no_process() {
        let stop = Arc::new(AtomicBool::new(false));
        install_signals(&stop).unwrap();
        let ctx = test_ctx(Arc::clone(&stop));
        let b = Bench {
            name: "selftest-sig",
            title: "t",
            run: blocking_step,
        };
        let t = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: raise(3) has no memory-safety preconditions; the
            // handler installed above only stores to an atomic (without it
            // this would end the test process: the test fails).
            unsafe {
                libc::raise(libc::SIGTERM);
            }
        });
        let f = run_one(&ctx, &b, &ctx.work);
        t.join().unwrap();
        assert_eq!(f.status, "interrupted", "{:?}", f.error);
        assert!(!pids(&f).is_empty());
        for p in pids(&f) {
            assert!(child::gone_soon(p), "process {p} left behind");
        }
    }

    #[test]
    fn a_panicking_step_is_reported_and_leaves_no_process() {
        let ctx = test_ctx(Arc::new(AtomicBool::new(false)));
        let b = Bench {
            name: "selftest-panic",
            title: "t",
            run: panicking_step,
        };
        let f = run_one(&ctx, &b, &ctx.work);
        assert_eq!(f.status, "failed");
        assert!(f.error.as_deref().unwrap().contains("panicked"));
        for p in pids(&f) {
            assert!(child::gone_soon(p), "process {p} left behind");
        }
    }
}
