//! What a benchmark stores: one JSON file per benchmark (`<out>/<name>.json`)
//! holding flat per-run rows, and the statistics the report draws from them.
//!
//! A row is one measurement of one configuration in one run (round) of the
//! A/B/A/B schedule; figures are medians over the runs with min–max, and a
//! comparison is the median of per-run ratios (both sides measured in the
//! same round), never a ratio of medians taken at different times.
//!
//! The file shape (`{"rows": [...], ...}`) is what the lab's
//! `vadapt_lab.results.load_results` reads.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

use super::error::BenchError;

/// One measurement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Table within the benchmark (e.g. `dpdk-fe`, `guest`, `trace`).
    pub table: String,
    /// Who sends: `dpdk-virtio-user`, `guest`.
    pub sender: String,
    /// Who receives: `dpdk-vhost`, `vadapt`, `ovs-dpdk`.
    pub backend: String,
    /// vadapt policy, or the anchor's mode (`pmd`, `macswap`, ...).
    pub policy: String,
    /// Further condition (e.g. `in_order=1`, `25%`, `low`, a VM name).
    pub variant: String,
    /// Frame bytes (Ethernet header + payload, no virtio-net header).
    pub frame: u32,
    /// Run (round) index, from 0.
    pub run: u32,
    /// Measured values; names carry their unit (`mpps`, `cpu_s_per_mpkt`, `p99_us`, ...).
    #[serde(flatten)]
    pub m: BTreeMap<String, f64>,
}

impl Row {
    /// A row with these labels and no values yet.
    pub fn new(table: &str, sender: &str, backend: &str, policy: &str, variant: &str) -> Row {
        Row {
            table: table.into(),
            sender: sender.into(),
            backend: backend.into(),
            policy: policy.into(),
            variant: variant.into(),
            ..Row::default()
        }
    }

    /// Set `frame` and `run`.
    pub fn at(mut self, frame: u32, run: u32) -> Row {
        self.frame = frame;
        self.run = run;
        self
    }

    /// Record `v` under `k` (skipped when not finite: JSON has no NaN).
    pub fn set(&mut self, k: &str, v: f64) -> &mut Row {
        if v.is_finite() {
            self.m.insert(k.into(), v);
        }
        self
    }

    /// The configuration this row measures (everything but the run).
    pub fn key(&self) -> (String, String, String, String, String, u32) {
        (
            self.table.clone(),
            self.sender.clone(),
            self.backend.clone(),
            self.policy.clone(),
            self.variant.clone(),
            self.frame,
        )
    }

    /// `backend` plus `policy` as shown in tables: `vadapt busy-poll`, `DPDK vhost PMD`.
    pub fn label(&self) -> String {
        match self.backend.as_str() {
            "dpdk-vhost" => "DPDK vhost PMD".into(),
            "ovs-dpdk" => format!("OVS-DPDK {}", self.policy),
            _ => format!("vadapt {}", self.policy),
        }
    }
}

/// Outcome of one benchmark.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchFile {
    /// Benchmark name (`b1`..`b6`, `timer`).
    pub bench: String,
    /// One-line title.
    pub title: String,
    /// `ok`, `failed`, `skipped`, `interrupted`.
    pub status: String,
    /// Why it failed or was skipped (the exact error text).
    pub error: Option<String>,
    /// Lines worth showing under the table (skipped anchors, caveats).
    pub notes: Vec<String>,
    /// Commands that reproduce it: the bench invocation first, then the
    /// processes it ran (as run for the first run).
    pub commands: Vec<String>,
    /// Start, UTC (RFC 3339).
    pub started: String,
    /// Wall time, s.
    pub seconds: f64,
    /// `--quick`.
    pub quick: bool,
    /// Runs per figure.
    pub runs: u32,
    /// Seconds per measurement.
    pub run_seconds: f64,
    /// Extra scalar parameters (saturation rate used by b2, ...).
    pub params: BTreeMap<String, f64>,
    /// The measurements.
    pub rows: Vec<Row>,
}

impl BenchFile {
    /// Write to `<dir>/<bench>.json`.
    pub fn write(&self, dir: &Path) -> Result<(), BenchError> {
        let path = dir.join(format!("{}.json", self.bench));
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| BenchError::Failed(format!("cannot encode results: {e}")))?;
        std::fs::write(&path, text + "\n").map_err(BenchError::io(&path))
    }

    /// Read `<dir>/<bench>.json`, `None` when absent.
    pub fn read(dir: &Path, bench: &str) -> Result<Option<BenchFile>, BenchError> {
        let path = dir.join(format!("{bench}.json"));
        match std::fs::read_to_string(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(BenchError::Io { path, source: e }),
            Ok(s) => serde_json::from_str(&s)
                .map(Some)
                .map_err(|e| BenchError::Parse {
                    what: path.display().to_string(),
                    detail: e.to_string(),
                }),
        }
    }

    /// Rows of `table`.
    pub fn table<'a>(&'a self, table: &'a str) -> impl Iterator<Item = &'a Row> + 'a {
        self.rows.iter().filter(move |r| r.table == table)
    }
}

/// Median with the range of a set of runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Number of values.
    pub n: usize,
}

impl Spread {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// `12.3 (11.9–12.8)` with `prec` decimals; a single value alone.
    pub fn show(&self, prec: usize) -> String {
        if self.n == 1 || self.min == self.max {
            format!("{:.*}", prec, self.median)
        } else {
            format!(
                "{:.*} ({:.*}–{:.*})",
                prec, self.median, prec, self.min, prec, self.max
            )
        }
    }
}

/// Configurations in first-seen order, each with its rows.
pub fn group<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<Vec<&'a Row>> {
    let mut keys: Vec<(String, String, String, String, String, u32)> = Vec::new();
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

/// Spread of metric `k` over `rows`.
pub fn spread(rows: &[&Row], k: &str) -> Option<Spread> {
    let v: Vec<f64> = rows.iter().filter_map(|r| r.m.get(k).copied()).collect();
    Spread::of(&v)
}

/// Per-run ratio `num.k / den.k`, pairing rows by run index.
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

/// Cell text for an optional spread.
pub fn cell(s: Option<Spread>, prec: usize) -> String {
    s.map_or_else(|| "–".to_string(), |s| s.show(prec))
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
    fn spread_median_odd_even_and_empty() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[f64::NAN]).is_none());
        assert_eq!(s.show(1), "2.0 (1.0–3.0)");
        assert_eq!(Spread::of(&[5.0]).unwrap().show(2), "5.00");
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
    fn non_finite_values_are_not_stored_and_files_round_trip() {
        let mut r = row("x", 0, 1.0);
        r.set("bad", f64::INFINITY);
        assert!(!r.m.contains_key("bad"));
        let f = BenchFile {
            bench: "b9".into(),
            rows: vec![r],
            ..Default::default()
        };
        let dir = std::env::temp_dir().join(format!("vadapt-bench-res-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        f.write(&dir).unwrap();
        assert_eq!(BenchFile::read(&dir, "b9").unwrap().unwrap(), f);
        assert!(BenchFile::read(&dir, "nope").unwrap().is_none());
        let text = std::fs::read_to_string(dir.join("b9.json")).unwrap();
        // Flat rows: the lab reads `mpps` as a column.
        assert!(text.contains("\"mpps\": 1.0"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
