//! Statistics over rows: configurations in first-seen order, a metric's
//! spread over runs, and per-run ratios between two configurations.

use crate::row::{Row, RowKey};
use crate::spread::Spread;

/// Configurations in first-seen order, each with its rows.
pub fn group<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<Vec<&'a Row>> {
    let mut keys: Vec<RowKey> = Vec::new();
    let mut out: Vec<Vec<&Row>> = Vec::new();
    for r in rows {
        let k = r.key();
        match keys.iter().position(|x| *x == k) {
            Some(i) => out[i].push(r),
            None => {
                keys.push(k);
                out.push(vec![r]);
            }
        }
    }
    out
}

/// Spread of metric `k` over `rows` (rows without it are left out).
pub fn spread(rows: &[&Row], k: &str) -> Option<Spread> {
    let v: Vec<f64> = rows.iter().filter_map(|r| r.m.get(k).copied()).collect();
    Spread::of(&v)
}

/// Per-run ratio `num.k / den.k`, pairing rows by run index (runs missing on
/// either side, or with `den.k == 0`, are left out).
pub fn ratio(num: &[&Row], den: &[&Row], k: &str) -> Option<Spread> {
    let v: Vec<f64> = num
        .iter()
        .filter_map(|a| {
            let b = den.iter().find(|b| b.run == a.run)?;
            let (x, y) = (a.m.get(k)?, b.m.get(k)?);
            (*y != 0.0).then(|| x / y)
        })
        .collect();
    Spread::of(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(policy: &str, run: u32, mpps: f64) -> Row {
        let mut r = Row::new("t", "guest", "vadapt", policy, "").at(64, run);
        r.set("mpps", mpps);
        r
    }

    #[test]
    fn ratios_pair_runs_not_medians() {
        // Run 0 fast for both, run 1 slow for both: per-run ratios are 2 and 2,
        // while the ratio of medians would be something else.
        let a = [row("x", 0, 10.0), row("x", 1, 2.0), row("x", 2, 4.0)];
        let b = [row("y", 0, 5.0), row("y", 1, 1.0), row("y", 2, 8.0)];
        let (a, b): (Vec<&Row>, Vec<&Row>) = (a.iter().collect(), b.iter().collect());
        let r = ratio(&a, &b, "mpps").unwrap();
        assert_eq!(r.median, 2.0);
        assert_eq!(r.min, 0.5);
        assert_eq!(r.n, 3);
    }

    #[test]
    fn grouping_keeps_first_seen_order() {
        let rows = [row("b", 0, 1.0), row("a", 0, 1.0), row("b", 1, 1.0)];
        let g = group(rows.iter());
        assert_eq!(g.len(), 2);
        assert_eq!(g[0][0].policy, "b");
        assert_eq!(g[0].len(), 2);
    }

    #[test]
    fn spreads_skip_rows_without_the_metric() {
        let mut other = Row::new("t", "guest", "vadapt", "x", "").at(64, 3);
        other.set("p99_us", 1.0);
        let rows = [row("x", 0, 1.0), row("x", 1, 3.0), other];
        let refs: Vec<&Row> = rows.iter().collect();
        let s = spread(&refs, "mpps").unwrap();
        assert_eq!((s.median, s.n), (2.0, 2));
        assert!(spread(&refs, "gbps").is_none());
    }
}
