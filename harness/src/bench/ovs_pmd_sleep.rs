//! B6 — OVS-DPDK as an anchor: its PMD busy polling and its load-based PMD
//! sleep (`pmd-maxsleep`) under the B2–B4 loads. OVS is set up as `ovs.rs`
//! says (the recipe in docs/architecture.md, "Facts the code relies on"),
//! with one `dpdkvhostuser` port `vh0` and a flow that drops what the port
//! sends (its `n_packets` counts what OVS took).
//!
//! Two PMD modes: busy polling (`pmd-maxsleep=0`) and load-based sleep
//! (`pmd-maxsleep=500` µs). Loads: idle (1 packet/s, as B4) and the 10 % /
//! 50 % rates of B2 (absolute rates taken from B2's saturation in the same
//! output directory when present, else 1 Mpps). CPU is the PMD thread's
//! (`/proc/<pid>/task/*/comm` = `pmd…`).
//!
//! When OVS-DPDK is not installed the benchmark is skipped with a line saying
//! how to install it; when it cannot start, its exact failure is recorded.

use super::ctx::Ctx;
use super::error::BenchError;
use super::ovs::{self, Ovs};
use super::shared::{pct, per_mpkt};
use super::table::{label, metric_table};
use super::vadapt_proc::{GuestOpts, GuestProc};
use std::time::Instant;
use vadapt_results::{ResultFile, Row};

/// Title.
pub const TITLE: &str = "OVS-DPDK anchor: PMD busy polling and pmd-maxsleep";

/// PMD sleep settings measured, µs (0 = busy polling).
const MAXSLEEP: [u32; 2] = [0, 500];

/// Run B6.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    if let Some(msg) = ovs::unavailable() {
        ctx.say(&msg);
        f.notes.push(msg);
        f.status = "skipped".into();
        return Ok(());
    }
    let window = ctx.secs(4.0, 1.0);
    f.run_seconds = window.as_secs_f64();
    let sat = ResultFile::read(&ctx.out_dir(), "b2")
        .ok()
        .flatten()
        .and_then(|b| b.params.get("saturation_mpps").copied())
        .unwrap_or(10.0);
    f.params.insert("saturation_mpps".into(), sat);
    let mut ovs = Ovs::start(ctx, f, "b6-ovs")?;
    let socket = ovs.add_vhost_port(ctx, "vh0")?;
    ovs.set_flows(ctx, &["in_port=vh0,actions=drop"])?;
    let exit = vadapt_guest::config::DEFAULT_EXIT_COST_NS;
    for run in 0..ctx.runs {
        for ms in MAXSLEEP {
            ovs.set_maxsleep(ctx, ms)?;
            let mode = format!("maxsleep={ms}");
            ctx.say(&format!("{mode} round {}/{}", run + 1, ctx.runs));
            for (variant, rate) in [("idle", 1.0), ("10%", sat * 0.1e6), ("50%", sat * 0.5e6)] {
                let opts = GuestOpts {
                    rate: format!("{rate:.0}"),
                    ..GuestOpts::stream(64, window, exit)
                };
                let p0 = ovs.flow_packets(ctx)?;
                let c0 = ovs.pmd_cpu();
                let t0 = Instant::now();
                let g = GuestProc::spawn(ctx, "b6-guest", &socket, &opts)?.finish()?;
                let dt = t0.elapsed().as_secs_f64();
                let cpu = ovs.pmd_cpu() - c0;
                let pk = ovs.flow_packets(ctx)?.saturating_sub(p0);
                let table = if variant == "idle" { "idle" } else { "load" };
                let mut r = Row::new(table, "guest", "ovs-dpdk", &mode, variant).at(64, run);
                r.set("cpu_pct", cpu / dt * 100.0)
                    .set("mpps", pk as f64 / g.elapsed / 1e6)
                    .set(
                        "loss_pct",
                        pct(g.sent_packets.saturating_sub(pk), g.sent_packets),
                    );
                if table == "load" {
                    // Per-packet figures of a handful of idle packets mean nothing.
                    let mpkt = pk as f64 / 1e6;
                    r.set("cpu_s_per_mpkt", if pk > 0 { cpu / mpkt } else { f64::NAN })
                        .set("kicks_per_mpkt", per_mpkt(g.kicks, g.sent_packets));
                }
                f.rows.push(r);
            }
        }
    }
    Ok(())
}

/// Tables of B6.
pub fn render(f: &ResultFile) -> String {
    let rows: Vec<&Row> = f.rows.iter().collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\nOVS-DPDK PMD on CPU 1, synthetic guest (64 B, exit cost on) on CPU 0; loads as B4 (idle, 1 packet/s) \
         and B2 (percent of busy-poll saturation, {:.3} Mpps). CPU is the PMD thread's.\n\n",
        f.params.get("saturation_mpps").copied().unwrap_or(0.0)
    );
    s.push_str(&metric_table(
        &rows,
        &[("load", |r| r.variant.clone()), ("backend", label)],
        &[
            ("mpps", "Mpps", 3),
            ("cpu_pct", "PMD CPU %", 1),
            ("cpu_s_per_mpkt", "CPU-s/Mpkt", 3),
            ("kicks_per_mpkt", "kicks/Mpkt", 0),
            ("loss_pct", "loss %", 2),
        ],
        &[],
        |_, _| false,
    ));
    s
}
