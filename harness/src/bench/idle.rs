//! B4 — idle: a connected guest that sends one packet per second (so the
//! port is up and the worker has a queue to watch), and the backend's CPU
//! over consecutive windows: vadapt's worker (stats `cpu_seconds` delta) per
//! policy, and the DPDK vhost PMD process (`/proc/<pid>/task/*/stat`), whose
//! forwarding lcore polls 100 % of the time by construction.
//!
//! Each backend gets one guest session cut into `--runs` windows; the
//! windows are the rounds of this benchmark (idle CPU does not drift with
//! the neighbours' load the way throughput does, so backends are measured
//! one after another rather than interleaved).

use super::child::process_cpu_seconds;
use super::ctx::Ctx;
use super::error::BenchError;
use super::shared::POLICIES;
use super::table::{label, metric_table};
use super::testpmd::{self, Testpmd};
use super::vadapt_proc::{delta, Daemon, GuestOpts, GuestProc, VmPort};
use std::time::{Duration, Instant};
use vadapt_policy::PolicyKind;
use vadapt_results::{ResultFile, Row};

/// Title.
pub const TITLE: &str = "idle: backend CPU with a connected guest sending 1 packet/s";

/// Time after the guest starts before the first window (connection, first packet).
const LEAD_IN: Duration = Duration::from_millis(700);

/// Run B4.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    // 10 s per backend in the full run, 3 s in the quick one.
    let window = ctx.secs(10.0 / f64::from(ctx.runs), 1.0);
    f.run_seconds = window.as_secs_f64();
    let session = LEAD_IN + window * ctx.runs + Duration::from_secs(2);
    let opts = GuestOpts {
        rate: "1".into(),
        ..GuestOpts::stream(64, session, vadapt_guest::config::DEFAULT_EXIT_COST_NS)
    };
    let vm = VmPort::new(&ctx.work, "g", 1, PolicyKind::Interrupt);
    let mut d = Daemon::spawn(ctx, "b4-vadapt", std::slice::from_ref(&vm))?;
    f.commands.push(ctx.show(&d.command));
    f.commands
        .push(ctx.show(&opts.argv("vadapt", &vm.socket, ctx.frontend_cpu)));
    if let Err(msg) = testpmd::available() {
        ctx.say(&msg);
        f.notes.push(msg);
    } else {
        let sock = ctx.work.join("b4-dpdk.sock");
        let mut be = Testpmd::spawn(
            ctx,
            "b4-dpdk-be",
            &format!("0@{},1@{}", ctx.frontend_cpu, ctx.backend_cpu),
            &testpmd::vhost_vdev(&sock),
            &["--forward-mode=rxonly".into()],
            Some(&sock),
        )?;
        f.commands.push(ctx.show(&be.child.argv));
        ctx.say("DPDK vhost PMD");
        be.start()?;
        let g = GuestProc::spawn(ctx, "b4-guest-dpdk", &sock, &opts)?;
        ctx.sleep(LEAD_IN)?;
        let pid = be.child.pid();
        windows(ctx, window, |run, dt, c0: &mut f64| {
            let c = process_cpu_seconds(pid).unwrap_or(0.0);
            if let Some(dt) = dt {
                let mut r = Row::new("idle", "guest", "dpdk-vhost", "pmd", "").at(64, run);
                r.set("cpu_pct", (c - *c0) / dt * 100.0);
                f.rows.push(r);
            }
            *c0 = c;
            Ok(())
        })?;
        // Enough windows: end the guest's session rather than wait it out.
        drop(g);
        be.stop()?;
        be.quit();
    }
    for p in POLICIES {
        ctx.say(p.as_str());
        d.set_policy(&vm.name, p)?;
        let g = GuestProc::spawn(ctx, &format!("b4-guest-{}", p.as_str()), &vm.socket, &opts)?;
        ctx.sleep(LEAD_IN)?;
        let mut prev = d.stats()?;
        windows(ctx, window, |run, dt, _: &mut f64| {
            let now = d.stats()?;
            if let Some(dt) = dt {
                let x = delta(&prev, &now, &vm.name);
                let mut r = Row::new("idle", "guest", "vadapt", p.as_str(), "").at(64, run);
                r.set("cpu_pct", x.cpu_seconds / dt * 100.0)
                    .set("wakeups_per_s", wakeups(&prev, &now, &vm.name) / dt)
                    .set("kicks_per_s", x.kicks as f64 / dt);
                f.rows.push(r);
            }
            prev = now;
            Ok(())
        })?;
        drop(g);
    }
    d.set_policy(&vm.name, PolicyKind::Interrupt)?;
    Ok(())
}

/// Call `sample(run, elapsed, state)` at the start (elapsed `None`) and at
/// the end of each of `ctx.runs` windows of length `w`.
fn windows(
    ctx: &Ctx,
    w: Duration,
    mut sample: impl FnMut(u32, Option<f64>, &mut f64) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let mut state = 0.0;
    sample(0, None, &mut state)?;
    let mut t = Instant::now();
    for run in 0..ctx.runs {
        ctx.sleep(w)?;
        let dt = t.elapsed().as_secs_f64();
        t = Instant::now();
        sample(run, Some(dt), &mut state)?;
    }
    Ok(())
}

fn wakeups(
    a: &vadapt_dataplane::metrics::StatsSnapshot,
    b: &vadapt_dataplane::metrics::StatsSnapshot,
    port: &str,
) -> f64 {
    let sum = |s: &vadapt_dataplane::metrics::StatsSnapshot| -> u64 {
        s.workers
            .iter()
            .filter(|w| w.name == port || w.name.starts_with(&format!("{port}/")))
            .map(|w| w.wakeups.values().sum::<u64>())
            .sum()
    };
    sum(b).saturating_sub(sum(a)) as f64
}

/// The B4 table.
pub fn render(f: &ResultFile) -> String {
    let rows: Vec<&Row> = f.table("idle").collect();
    let mut s = format!(
        "\nCPU in percent of one core, {} windows of {:.1} s per backend.\n\n",
        f.runs, f.run_seconds
    );
    s.push_str(&metric_table(
        &rows,
        &[("backend", label)],
        &[
            ("cpu_pct", "CPU % of a core", 2),
            ("wakeups_per_s", "worker wake-ups/s", 0),
            ("kicks_per_s", "kicks/s", 1),
        ],
        &[],
        |_, _| false,
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn windows_sample_runs_plus_one_times() {
        let ctx = super::super::ctx::test_ctx(Arc::new(AtomicBool::new(false)));
        let mut seen = Vec::new();
        windows(&ctx, Duration::from_millis(1), |run, dt, st| {
            *st += 1.0;
            seen.push((run, dt.is_some(), *st));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[0], (0, false, 1.0));
        assert_eq!((seen[3].0, seen[3].1), (2, true));
    }
}
