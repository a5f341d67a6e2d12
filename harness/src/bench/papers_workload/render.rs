//! B9's stored rows read back: the NetAP ÷ interrupt ratios within each
//! round, issue 15's goal judged from them, and the tables of the report
//! (the daemon's figures, NetAP's settling, the simulator beside the daemon,
//! drops and the payload cross-check).

use super::super::table::{metric_table, table};
use super::FRAME_HDRS;
use super::{GOAL_BANDWIDTH, GOAL_CPU, GOAL_KICKS};
use vadapt_results::{cell, ratio, ResultFile, Row, Spread};
use vadapt_wire::tcp_build::MSS;

/// Rows of `table` for `policy` and `variant`.
fn rows<'a>(f: &'a ResultFile, table: &str, policy: &str, variant: &str) -> Vec<&'a Row> {
    f.rows
        .iter()
        .filter(|r| r.table == table && r.policy == policy && r.variant == variant)
        .collect()
}

/// The variants present in `table`, in first-seen order.
fn variants(f: &ResultFile, table: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in f.table(table) {
        if !v.contains(&r.variant) {
            v.push(r.variant.clone());
        }
    }
    v
}

/// NetAP ÷ interrupt within each round, in `table` for `variant`:
/// (bandwidth, kicks per GB, host CPU per GB).
pub fn netap_ratios(
    f: &ResultFile,
    table: &str,
    variant: &str,
) -> (Option<Spread>, Option<Spread>, Option<Spread>) {
    let n = rows(f, table, "netap", variant);
    let i = rows(f, table, "interrupt", variant);
    (
        ratio(&n, &i, "gbps"),
        ratio(&n, &i, "kicks_per_gb"),
        ratio(&n, &i, "cpu_s_per_gb"),
    )
}

/// Issue 15's goal over every (shape, size) the daemon measured: one text
/// per configuration, and the verdict — missed as soon as one measured ratio
/// misses, met when all three are measured everywhere, else `None`.
pub fn goal(f: &ResultFile) -> (Vec<String>, Option<bool>) {
    let mut parts = Vec::new();
    let (mut missed, mut missing) = (false, false);
    for v in variants(f, "tcp") {
        let (bw, k, cpu) = netap_ratios(f, "tcp", &v);
        let mut text = Vec::new();
        for (r, name, key, ok) in [
            (
                bw,
                "bandwidth",
                "gbps",
                (|x| x >= GOAL_BANDWIDTH) as fn(f64) -> bool,
            ),
            (k, "kicks/GB", "kicks_per_gb", |x| x <= GOAL_KICKS),
            (cpu, "CPU/GB", "cpu_s_per_gb", |x| x <= GOAL_CPU),
        ] {
            match r {
                Some(r) => {
                    missed |= !ok(r.median);
                    text.push(format!("{name} {}×", r.show(2)));
                }
                None => {
                    // No ratio (no rows, or interrupt's figure is 0): show both.
                    missing = true;
                    text.push(format!(
                        "{name} no ratio (netap {}, interrupt {})",
                        median(f, "tcp", "netap", &v, key),
                        median(f, "tcp", "interrupt", &v, key)
                    ));
                }
            }
        }
        parts.push(format!("{v}: {}", text.join(", ")));
    }
    let met = if missed {
        Some(false)
    } else if missing || parts.is_empty() {
        None
    } else {
        Some(true)
    };
    (parts, met)
}

/// The median of `key` over the rows of (`table`, `policy`, `variant`), as
/// text (three significant decimals at most), `–` without rows.
fn median(f: &ResultFile, table: &str, policy: &str, variant: &str, key: &str) -> String {
    let s = vadapt_results::spread(&rows(f, table, policy, variant), key);
    s.map_or_else(|| "–".into(), |s| format!("{:.3}", s.median))
}

/// Label columns of B9's tables.
fn shape_col(r: &Row) -> String {
    let g = |k: &str| r.m.get(k).copied().unwrap_or(0.0);
    let plural = |n: f64, one: &str| format!("{n:.0} {one}{}", if n == 1.0 { "" } else { "s" });
    format!(
        "{} × {}",
        plural(g("vms"), "VM"),
        plural(g("threads"), "thread")
    )
}

fn size_col(r: &Row) -> String {
    format!("{:.0} B", r.m.get("msg_bytes").copied().unwrap_or(0.0))
}

fn policy_col(r: &Row) -> String {
    r.policy.clone()
}

/// The B9 tables.
pub fn render(f: &ResultFile) -> String {
    let p = |k: &str| f.params.get(k).copied().unwrap_or(0.0);
    let mut s = format!(
        "\nSynthetic guests in `--mode tcp-stream` (closed loop, TSO segments of up to 64 KiB, \
         MSS {MSS}) into the sink, one queue pair per sender thread, exit cost {} ns, write cost \
         {} ns + {} ns/KiB per message; the daemon \
         cuts each segment into MSS frames. Per round each policy is switched in at run time, \
         warmed up {:.2} s ({:.2} s for NetAP, whose rounds last {} ms: its search takes 11 and the kick-driven check 1) and \
         measured over {:.2} s. Bandwidth is application payload from the daemon's VM-port \
         counters (frame bytes minus {FRAME_HDRS} header bytes per MSS frame); kicks and worker \
         CPU (`vadapt_worker_cpu_seconds_total`) per GB (10⁹ B) of that payload; sums over the \
         VMs. Ratio columns: × interrupt within the same round.\n\n",
        p("exit_cost_ns"),
        p("write_cost_ns"),
        p("write_cost_ns_per_kib"),
        p("warmup_s"),
        p("netap_warmup_s"),
        p("netap_round_ms"),
        f.run_seconds,
    );
    let rows: Vec<&Row> = f.table("tcp").collect();
    s.push_str(&metric_table(
        &rows,
        &[
            ("shape", shape_col),
            ("message", size_col),
            ("policy", policy_col),
        ],
        &[
            ("gbps", "Gbit/s", 2),
            ("kicks_per_gb", "kicks/GB", 1),
            ("cpu_s_per_gb", "CPU-s/GB", 3),
            ("worker_cpu_pct", "worker CPU %", 0),
            ("mpps", "MSS frames Mpps", 3),
        ],
        &[
            ("gbps", "Gbit/s × intr"),
            ("kicks_per_gb", "kicks × intr"),
            ("cpu_s_per_gb", "CPU/GB × intr"),
        ],
        |b, r| b.policy == "interrupt" && b.variant == r.variant,
    ));
    if let Some(w) = vadapt_results::spread(&rows, "worker_cpu_pct") {
        s.push_str(&format!(
            "\nWorker CPU (CPU 1) over every policy and configuration: {} % of a core.\n",
            w.show(0)
        ));
    }
    s.push_str(&convergence(f));
    s.push_str(&sim_table(f));
    s.push_str(&checks(f));
    s
}

/// NetAP's settling, per configuration.
fn convergence(f: &ResultFile) -> String {
    let mut lines = Vec::new();
    for v in variants(f, "tcp") {
        let n = rows(f, "tcp", "netap", &v);
        if n.is_empty() {
            continue;
        }
        let settled = n
            .iter()
            .filter(|r| r.m.get("converged") == Some(&1.0))
            .count();
        lines.push(format!(
            "{v}: interval {} µs, fixed through the window in {settled} of {} rounds",
            cell(vadapt_results::spread(&n, "interval_us"), 0),
            n.len()
        ));
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\nNetAP's polling interval at the end of each window (mean over VMs): {}.\n",
        lines.join("; ")
    )
}

/// Simulator beside daemon: NetAP ÷ interrupt for the three figures.
fn sim_table(f: &ResultFile) -> String {
    let vs = variants(f, "tcp");
    let mut out = Vec::new();
    for v in vs.iter().chain(
        variants(f, "sim")
            .iter()
            .filter(|v| !vs.contains(v))
            .collect::<Vec<_>>(),
    ) {
        let (db, dk, dc) = netap_ratios(f, "tcp", v);
        let (sb, sk, sc) = netap_ratios(f, "sim", v);
        let both = |k: &str| {
            format!(
                "{} / {}",
                median(f, "tcp", "interrupt", v, k),
                median(f, "sim", "interrupt", v, k)
            )
        };
        out.push(vec![
            v.clone(),
            cell(db, 2),
            cell(sb, 2),
            cell(dk, 3),
            cell(sk, 3),
            cell(dc, 2),
            cell(sc, 2),
            both("gbps"),
            both("cpu_s_per_gb"),
        ]);
    }
    if out.is_empty() {
        return String::new();
    }
    format!(
        "\nNetAP ÷ interrupt, the daemon beside the simulator (`vadapt sim`, the same shapes on a \
         2-core host with vCPUs and workers on separate cores, calibrated on this machine; \
         see the notes), and interrupt mode's absolute figures on both sides:\n\n{}",
        table(
            &[
                "configuration",
                "Gbit/s daemon",
                "Gbit/s sim",
                "kicks/GB daemon",
                "kicks/GB sim",
                "CPU/GB daemon",
                "CPU/GB sim",
                "interrupt Gbit/s daemon / sim",
                "interrupt CPU-s/GB daemon / sim",
            ],
            &out
        )
    )
}

/// Drops and the payload cross-check.
fn checks(f: &ResultFile) -> String {
    let dropped: f64 = f
        .table("tcp")
        .filter_map(|r| r.m.get("dropped"))
        .sum::<f64>();
    let ratios: Vec<&Row> = f.table("check").collect();
    let mut s = format!("\nDrops in the measured windows: {dropped:.0}.");
    if let Some(x) = vadapt_results::spread(&ratios, "daemon_over_guest_payload") {
        s.push_str(&format!(
            " Payload by the daemon's header arithmetic ÷ payload the guests reported, \
             over each configuration's whole run: {}.",
            x.show(4)
        ));
    }
    let segments: Vec<String> = ratios
        .iter()
        .filter_map(|r| {
            r.m.get("mean_segment_bytes")
                .map(|b| format!("{} {b:.0} B", r.variant))
        })
        .collect();
    if !segments.is_empty() {
        s.push_str(&format!(
            " Guests' mean TSO segment over each configuration's whole run (all policies): {}.",
            segments.join(", ")
        ));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::super::variant;
    use super::*;

    fn result(netap: [f64; 3], interrupt: [f64; 3]) -> ResultFile {
        let mut f = ResultFile {
            bench: "b9".into(),
            ..Default::default()
        };
        for run in 0..3 {
            for (p, [g, k, c]) in [("netap", netap), ("interrupt", interrupt)] {
                let mut r = Row::new("tcp", "guest", "vadapt", p, &variant(2, 3, 64)).at(0, run);
                r.set("gbps", g * (1.0 + f64::from(run)))
                    .set("kicks_per_gb", k)
                    .set("cpu_s_per_gb", c)
                    .set("vms", 2.0)
                    .set("threads", 3.0)
                    .set("msg_bytes", 64.0);
                f.rows.push(r);
            }
        }
        f
    }

    #[test]
    fn ratios_pair_rounds_and_the_goal_needs_all_three() {
        // Bandwidth 1.5×, kicks 1/100, CPU 0.4×: met.
        let f = result([15.0, 10.0, 0.4], [10.0, 1000.0, 1.0]);
        let (b, k, c) = netap_ratios(&f, "tcp", &variant(2, 3, 64));
        assert_eq!(b.unwrap().median, 1.5);
        assert_eq!(b.unwrap().n, 3);
        assert_eq!(k.unwrap().median, 0.01);
        assert_eq!(c.unwrap().median, 0.4);
        let (text, met) = goal(&f);
        assert_eq!(met, Some(true), "{text:?}");
        assert!(text[0].starts_with("2×3 64 B: bandwidth 1.50×"), "{text:?}");
        // Each bound alone misses.
        assert_eq!(
            goal(&result([11.0, 10.0, 0.4], [10.0, 1000.0, 1.0])).1,
            Some(false)
        );
        assert_eq!(
            goal(&result([15.0, 60.0, 0.4], [10.0, 1000.0, 1.0])).1,
            Some(false)
        );
        assert_eq!(
            goal(&result([15.0, 10.0, 0.6], [10.0, 1000.0, 1.0])).1,
            Some(false)
        );
        // Interrupt without kicks: no kick ratio, not judged while the rest holds.
        let (text, met) = goal(&result([15.0, 0.0, 0.4], [10.0, 0.0, 1.0]));
        assert_eq!(met, None);
        assert!(
            text[0].contains("kicks/GB no ratio (netap 0.000, interrupt 0.000)"),
            "{text:?}"
        );
        // No interrupt rows: not judged.
        let mut only = f.clone();
        only.rows.retain(|r| r.policy == "netap");
        assert_eq!(goal(&only).1, None);
        assert_eq!(goal(&ResultFile::default()).1, None);
    }

    #[test]
    fn render_shows_the_ratio_to_interrupt_and_the_sim_beside_it() {
        let mut f = result([15.0, 10.0, 0.4], [10.0, 1000.0, 1.0]);
        for run in 0..3 {
            for (p, g, k) in [("netap", 12.0, 5.0), ("interrupt", 10.0, 500.0)] {
                let mut r = Row::new("sim", "guest", "sim", p, &variant(2, 3, 64)).at(0, run);
                r.set("gbps", g)
                    .set("kicks_per_gb", k)
                    .set("cpu_s_per_gb", 1.0);
                f.rows.push(r);
            }
        }
        let t = render(&f);
        assert!(t.contains("| 2 VMs × 3 threads | 64 B | netap |"), "{t}");
        assert!(shape_col(&Row::default()).contains("0 VMs × 0 threads"));
        let mut one = Row::default();
        one.set("vms", 6.0).set("threads", 1.0);
        assert_eq!(shape_col(&one), "6 VMs × 1 thread");
        // Per-round ratio of bandwidth 1.50, kicks 0.01.
        assert!(t.contains("| 1.50 | 0.01 | 0.40 |"), "{t}");
        assert!(
            t.contains(
                "| 2×3 64 B | 1.50 | 1.20 | 0.010 | 0.010 | 0.40 | 1.00 | 20.000 / 10.000 | 1.000 / 1.000 |"
            ),
            "{t}"
        );
    }
}
