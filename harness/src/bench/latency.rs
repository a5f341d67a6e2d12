//! B3 — latency: the synthetic guest in request/response mode (one request
//! outstanding, paced) through an echo: vadapt's `echo` port under each
//! policy, and DPDK's vhost PMD with testpmd `macswap` as the reference.
//! Round-trip p50/p99/p99.9 as the guest times them.

use super::ctx::Ctx;
use super::error::BenchError;
use super::shared::POLICIES;
use super::table::{label, metric_table};
use super::testpmd;
use super::vadapt_proc::{GuestOpts, GuestProc, GuestResult, VmPort, ECHO_MAC};
use vadapt_policy::PolicyKind;
use vadapt_results::{ResultFile, Row};

/// Title.
pub const TITLE: &str = "latency: request/response through an echo, p50/p99/p99.9";

/// Request rates, requests per second: (name, rate).
pub const RATES: [(&str, u32); 2] = [("low", 1_000), ("medium", 20_000)];

/// Run B3.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let window = ctx.secs(4.0, 0.8);
    f.run_seconds = window.as_secs_f64();
    let exit = vadapt_guest::config::DEFAULT_EXIT_COST_NS;
    f.params.insert("exit_cost_ns".into(), exit as f64);
    let vm = VmPort::new(&ctx.work, "g", 1, PolicyKind::BusyPoll);
    let mut d = super::vadapt_proc::Daemon::spawn(ctx, "b3-vadapt", std::slice::from_ref(&vm))?;
    f.commands.push(ctx.show(&d.command));
    let be_sock = ctx.work.join("b3-dpdk.sock");
    let mut be = testpmd::vhost_backend(
        ctx,
        f,
        "b3-dpdk-macswap",
        &be_sock,
        &["--forward-mode=macswap".into()],
    )?;
    for run in 0..ctx.runs {
        for (name, rate) in RATES {
            ctx.say(&format!("{name} rate round {}/{}", run + 1, ctx.runs));
            let opts = GuestOpts {
                rate: rate.to_string(),
                mode: "rr",
                dst_mac: ECHO_MAC.into(),
                ..GuestOpts::stream(64, window, exit)
            };
            if run == 0 {
                f.commands
                    .push(ctx.show(&opts.argv("vadapt", &vm.socket, ctx.frontend_cpu)));
            }
            if let Some(be) = be.as_mut() {
                be.start()?;
                let res = GuestProc::spawn(ctx, "b3-guest-dpdk", &be_sock, &opts)?.finish()?;
                be.stop()?;
                f.rows
                    .push(row("dpdk-vhost", "macswap", name, rate, run, &res));
            }
            for p in POLICIES {
                d.set_policy(&vm.name, p)?;
                let res =
                    GuestProc::spawn(ctx, &format!("b3-guest-{}", p.as_str()), &vm.socket, &opts)?
                        .finish()?;
                f.rows
                    .push(row("vadapt", p.as_str(), name, rate, run, &res));
            }
        }
    }
    if let Some(b) = be.take() {
        b.quit();
    }
    Ok(())
}

fn row(backend: &str, policy: &str, variant: &str, rate: u32, run: u32, g: &GuestResult) -> Row {
    let mut r = Row::new("rr", "guest", backend, policy, variant).at(64, run);
    r.set("offered_rps", f64::from(rate));
    r.set("rps", g.recv_packets as f64 / g.elapsed);
    r.set("lost", g.lost_requests as f64);
    if let Some(l) = g.latency {
        r.set("p50_us", l.p50 as f64 / 1e3)
            .set("p99_us", l.p99 as f64 / 1e3)
            .set("p999_us", l.p999 as f64 / 1e3)
            .set("samples", l.count as f64);
    }
    r
}

/// The B3 table.
pub fn render(f: &ResultFile) -> String {
    let rows: Vec<&Row> = f.table("rr").collect();
    let mut s = format!(
        "\nOne request outstanding, 64 B frames, paced at {} requests/s, exit cost {} ns; \
         the guest times every round trip (HdrHistogram). DPDK's row is testpmd `macswap` on its vhost PMD.\n\n",
        RATES
            .iter()
            .map(|(n, r)| format!("{n} = {r}"))
            .collect::<Vec<_>>()
            .join(", "),
        f.params.get("exit_cost_ns").copied().unwrap_or(0.0)
    );
    s.push_str(&metric_table(
        &rows,
        &[("rate", |r| r.variant.clone()), ("backend", label)],
        &[
            ("p50_us", "p50 µs", 1),
            ("p99_us", "p99 µs", 1),
            ("p999_us", "p99.9 µs", 1),
            ("rps", "replies/s", 0),
            ("lost", "lost", 0),
        ],
        &[("p99_us", "p99 × busy-poll")],
        |b, r| b.policy == "busy-poll" && b.variant == r.variant,
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::super::vadapt_proc::Latency;
    use super::*;

    #[test]
    fn rows_convert_ns_to_us() {
        let g = GuestResult {
            recv_packets: 1000,
            elapsed: 1.0,
            latency: Some(Latency {
                p50: 12_000,
                p99: 40_000,
                p999: 90_000,
                count: 1000,
            }),
            ..Default::default()
        };
        let r = row("vadapt", "eekbp", "low", 1000, 2, &g);
        assert_eq!(r.m["p50_us"], 12.0);
        assert_eq!(r.m["p999_us"], 90.0);
        assert_eq!(r.m["rps"], 1000.0);
        assert_eq!(r.run, 2);
        let no = row(
            "vadapt",
            "eekbp",
            "low",
            1000,
            0,
            &GuestResult {
                elapsed: 1.0,
                ..Default::default()
            },
        );
        assert!(!no.m.contains_key("p99_us"));
        assert!(render(&ResultFile {
            rows: vec![r],
            ..Default::default()
        })
        .contains("| low | vadapt eekbp | 12.0 |"));
    }
}
