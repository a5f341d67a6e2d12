//! Timer precision (issue 4 item 5): how late NetAP's timed sleeps wake,
//! from the worker's overshoot histogram (stats `overshoot_p50_ns` /
//! `overshoot_p99_ns`), under a light load (the synthetic guest at 10 kpps).
//! A fresh daemon per round, so each round's histogram is its own.

use super::ctx::Ctx;
use super::error::BenchError;
use super::table::{label, metric_table};
use super::vadapt_proc::{Daemon, GuestOpts, GuestProc, VmPort};
use vadapt_policy::PolicyKind;
use vadapt_results::{ResultFile, Row};

/// Title.
pub const TITLE: &str = "timer precision: NetAP sleep overshoot under light load";

/// Offered load, packets per second.
const RATE: u32 = 10_000;

/// Run the timer benchmark.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let window = ctx.secs(5.0, 2.0);
    f.run_seconds = window.as_secs_f64();
    f.params.insert("rate_pps".into(), f64::from(RATE));
    let opts = GuestOpts {
        rate: RATE.to_string(),
        ..GuestOpts::stream(64, window, vadapt_guest::config::DEFAULT_EXIT_COST_NS)
    };
    for run in 0..ctx.runs {
        ctx.say(&format!("round {}/{}", run + 1, ctx.runs));
        let vm = VmPort::new(&ctx.work, "g", 1, PolicyKind::Netap);
        let mut d = Daemon::spawn(
            ctx,
            &format!("timer-vadapt-{run}"),
            std::slice::from_ref(&vm),
        )?;
        if run == 0 {
            f.commands.push(ctx.show(&d.command));
            f.commands
                .push(ctx.show(&opts.argv("vadapt", &vm.socket, ctx.frontend_cpu)));
        }
        GuestProc::spawn(ctx, &format!("timer-guest-{run}"), &vm.socket, &opts)?.finish()?;
        let st = d.stats()?;
        let w = st
            .workers
            .iter()
            .filter(|w| w.name == vm.name || w.name.starts_with("g/"))
            .max_by_key(|w| w.sleeps)
            .ok_or_else(|| BenchError::Failed("the daemon reports no worker for port g".into()))?;
        let mut r = Row::new("overshoot", "guest", "vadapt", "netap", "").at(64, run);
        r.set("sleeps", w.sleeps as f64)
            .set("p50_us", w.overshoot_p50_ns as f64 / 1e3)
            .set("p99_us", w.overshoot_p99_ns as f64 / 1e3)
            .set(
                "interval_us",
                st.ports
                    .iter()
                    .find(|p| p.name == vm.name)
                    .map_or(f64::NAN, |p| p.poll_interval_us as f64),
            );
        f.rows.push(r);
    }
    Ok(())
}

/// The timer table.
pub fn render(f: &ResultFile) -> String {
    let rows: Vec<&Row> = f.table("overshoot").collect();
    let mut s = format!(
        "\nNetAP worker, guest at {} packets/s; overshoot = wake-up time minus the deadline \
         (`clock_nanosleep` with minimal timer slack). Goal: a 100 µs interval must not become 150 µs, \
         i.e. p99 overshoot well under 50 µs.\n\n",
        f.params.get("rate_pps").copied().unwrap_or(0.0)
    );
    s.push_str(&metric_table(
        &rows,
        &[("worker", label)],
        &[
            ("p50_us", "overshoot p50 µs", 1),
            ("p99_us", "overshoot p99 µs", 1),
            ("sleeps", "timed sleeps", 0),
            ("interval_us", "interval at end µs", 0),
        ],
        &[],
        |_, _| false,
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_shows_microseconds() {
        let mut r = Row::new("overshoot", "guest", "vadapt", "netap", "");
        r.set("p50_us", 4.2)
            .set("p99_us", 30.0)
            .set("sleeps", 1000.0);
        let f = ResultFile {
            rows: vec![r],
            ..Default::default()
        };
        let t = render(&f);
        assert!(t.contains("| vadapt netap | 4.2 | 30.0 | 1000 |"), "{t}");
    }
}
