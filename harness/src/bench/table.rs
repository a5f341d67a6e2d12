//! Markdown tables of benchmark results, shared by every benchmark's
//! `render` and by the report: [`table`] from cells, [`metric_table`] from
//! rows (median and min–max per configuration, per-round ratios to a base),
//! [`label`] for a row's backend and policy.

use std::fmt::Write;
use vadapt_results::{cell, group, ratio, spread, Row};

/// A markdown table from a header and rows of cells.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", header.join(" | "));
    let _ = writeln!(s, "|{}", header.iter().map(|_| "---|").collect::<String>());
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

/// `backend` plus `policy` as the tables show them: `vadapt busy-poll`,
/// `DPDK vhost PMD`, `OVS-DPDK pmd` (the lab's `plots.label` says the same).
pub fn label(r: &Row) -> String {
    match r.backend.as_str() {
        "dpdk-vhost" => "DPDK vhost PMD".into(),
        "ovs-dpdk" => format!("OVS-DPDK {}", r.policy),
        _ => format!("vadapt {}", r.policy),
    }
}

/// A leading column of [`metric_table`]: header and how a row shows it.
pub type LabelCol<'a> = (&'a str, fn(&Row) -> String);

/// A generic table: one line per configuration, one column per metric
/// (`(key, header, decimals)`), plus per-run ratio columns against the
/// configuration `base` picks (`(key, header)`).
pub fn metric_table(
    rows: &[&Row],
    first: &[LabelCol<'_>],
    cols: &[(&str, &str, usize)],
    ratios: &[(&str, &str)],
    base: impl Fn(&Row, &Row) -> bool,
) -> String {
    let mut header: Vec<&str> = first.iter().map(|(h, _)| *h).collect();
    header.extend(cols.iter().map(|(_, h, _)| *h));
    header.extend(ratios.iter().map(|(_, h)| *h));
    let groups = group(rows.iter().copied());
    let mut out = Vec::new();
    for g in &groups {
        let r0 = g[0];
        let mut line: Vec<String> = first.iter().map(|(_, f)| f(r0)).collect();
        for (k, _, p) in cols {
            line.push(cell(spread(g, k), *p));
        }
        let basis: Option<&Vec<&Row>> = groups.iter().find(|b| base(b[0], r0));
        for (k, _) in ratios {
            line.push(match basis {
                Some(b) if !std::ptr::eq(b[0], r0) => cell(ratio(g, b, k), 2),
                Some(_) => "1".into(),
                None => "–".into(),
            });
        }
        out.push(line);
    }
    table(&header, &out)
}

/// A row for the report's tests: 64-byte frames, sender `x`.
#[cfg(test)]
pub(crate) fn test_row(
    table: &str,
    backend: &str,
    policy: &str,
    variant: &str,
    run: u32,
    kv: &[(&str, f64)],
) -> Row {
    let mut r = Row::new(table, "x", backend, policy, variant).at(64, run);
    for (k, v) in kv {
        r.set(k, *v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::test_row as row;
    use super::*;

    #[test]
    fn metric_table_shows_spread_and_ratios() {
        let rows = [
            row("t", "dpdk-vhost", "pmd", "", 0, &[("mpps", 10.0)]),
            row("t", "vadapt", "busy-poll", "", 0, &[("mpps", 5.0)]),
            row("t", "dpdk-vhost", "pmd", "", 1, &[("mpps", 20.0)]),
            row("t", "vadapt", "busy-poll", "", 1, &[("mpps", 10.0)]),
        ];
        let refs: Vec<&Row> = rows.iter().collect();
        let t = metric_table(
            &refs,
            &[("backend", label)],
            &[("mpps", "Mpps", 1)],
            &[("mpps", "× DPDK")],
            |b, _| b.backend == "dpdk-vhost",
        );
        assert!(
            t.contains("| DPDK vhost PMD | 15.0 (10.0–20.0) | 1 |"),
            "{t}"
        );
        assert!(
            t.contains("| vadapt busy-poll | 7.5 (5.0–10.0) | 0.50 |"),
            "{t}"
        );
    }
}
