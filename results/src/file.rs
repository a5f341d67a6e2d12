//! A result file: one benchmark's or one simulation's metadata and rows, as
//! JSON on disk.

use crate::error::ResultError;
use crate::row::Row;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What wrote a result file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `vadapt bench`: measurements on this machine (also every file written
    /// before the field existed).
    #[default]
    Bench,
    /// `vadapt sim`: one simulated run.
    Sim,
}

/// The outcome of one benchmark or one simulation.
///
/// The JSON field names are the schema the lab and the committed results
/// (`docs/img/bench/results/`) use: do not rename them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultFile {
    /// What wrote the file (absent in older files: a benchmark).
    #[serde(default)]
    pub kind: Kind,
    /// Name: the benchmark (`b1`..`b6`, `timer`) or the simulated scenario.
    /// [`ResultFile::write`] stores the file as `<bench>.json`.
    pub bench: String,
    /// One-line title.
    pub title: String,
    /// `ok`, `failed`, `skipped`, `interrupted` (`running` while it runs).
    pub status: String,
    /// Why it failed or was skipped (the exact error text).
    pub error: Option<String>,
    /// Lines worth showing under the table (skipped anchors, caveats; a
    /// simulation's scenario file and calibration).
    pub notes: Vec<String>,
    /// Commands that reproduce it: the invocation first, then the processes
    /// it ran (as run for the first run).
    pub commands: Vec<String>,
    /// Start, UTC (RFC 3339); empty for a simulation, whose output does not
    /// depend on when it ran.
    pub started: String,
    /// Wall time, s (0 for a simulation, for the same reason).
    pub seconds: f64,
    /// `--quick`.
    pub quick: bool,
    /// Runs per figure.
    pub runs: u32,
    /// Time per measurement, s (simulated time for a simulation).
    pub run_seconds: f64,
    /// Extra scalar parameters, named with their unit (saturation rate used
    /// by b2; a simulation's seed, duration and energy, ...).
    pub params: BTreeMap<String, f64>,
    /// The measurements.
    pub rows: Vec<Row>,
}

impl ResultFile {
    /// `<dir>/<name>.json`, where [`ResultFile::write`] puts the file named `name`.
    pub fn path_in(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.json"))
    }

    /// Write to `<dir>/<bench>.json`; returns that path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, ResultError> {
        let path = Self::path_in(dir, &self.bench);
        self.write_to(&path)?;
        Ok(path)
    }

    /// Write to `path` (pretty JSON, ending in a newline). The text is a pure
    /// function of `self`: equal files give equal bytes.
    pub fn write_to(&self, path: &Path) -> Result<(), ResultError> {
        let text = serde_json::to_string_pretty(self).map_err(|source| ResultError::Encode {
            path: path.to_path_buf(),
            source,
        })?;
        std::fs::write(path, text + "\n").map_err(|source| ResultError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Read `<dir>/<name>.json`, `None` when absent.
    pub fn read(dir: &Path, name: &str) -> Result<Option<ResultFile>, ResultError> {
        Self::read_from(&Self::path_in(dir, name))
    }

    /// Read `path`, `None` when absent.
    pub fn read_from(path: &Path) -> Result<Option<ResultFile>, ResultError> {
        let text = match std::fs::read_to_string(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ResultError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
            Ok(s) => s,
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| ResultError::Parse {
                path: path.to_path_buf(),
                source,
            })
    }

    /// Rows of `table`.
    pub fn table<'a>(&'a self, table: &'a str) -> impl Iterator<Item = &'a Row> + 'a {
        self.rows.iter().filter(move |r| r.table == table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("vadapt-results-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn files_round_trip_and_absent_ones_read_as_none() {
        let mut r = Row::new("t", "guest", "vadapt", "x", "").at(64, 0);
        r.set("mpps", 1.0);
        let f = ResultFile {
            bench: "b9".into(),
            rows: vec![r],
            ..Default::default()
        };
        let dir = temp_dir("round-trip");
        assert_eq!(f.write(&dir).unwrap(), dir.join("b9.json"));
        assert_eq!(ResultFile::read(&dir, "b9").unwrap().unwrap(), f);
        assert!(ResultFile::read(&dir, "nope").unwrap().is_none());
        let text = std::fs::read_to_string(dir.join("b9.json")).unwrap();
        // Flat rows: the lab reads `mpps` as a column.
        assert!(text.contains("\"mpps\": 1.0"), "{text}");
        assert!(text.contains("\"kind\": \"bench\""), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_without_kind_is_a_benchmark_and_sim_is_spelled_sim() {
        let old = r#"{"bench": "b4", "title": "idle", "status": "ok", "error": null,
            "notes": [], "commands": [], "started": "", "seconds": 1.0, "quick": false,
            "runs": 3, "run_seconds": 3.0, "params": {},
            "rows": [{"table": "idle", "sender": "", "backend": "vadapt", "policy": "eekbp",
                      "variant": "", "frame": 0, "run": 0, "cpu_pct": 0.1}]}"#;
        let f: ResultFile = serde_json::from_str(old).unwrap();
        assert_eq!(f.kind, Kind::Bench);
        assert_eq!(f.table("idle").next().unwrap().m["cpu_pct"], 0.1);
        let sim = ResultFile {
            kind: Kind::Sim,
            ..f
        };
        let text = serde_json::to_string(&sim).unwrap();
        assert!(text.starts_with(r#"{"kind":"sim","bench":"b4""#), "{text}");
    }

    #[test]
    fn the_committed_benchmark_results_still_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/img/bench/results");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            // suite.json is the suite's own record (the harness's `SuiteInfo`), no result file.
            if p.extension().is_some_and(|x| x == "json") && !p.ends_with("suite.json") {
                let f = ResultFile::read_from(&p)
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
                    .unwrap();
                assert_eq!(f.kind, Kind::Bench, "{}", p.display());
                n += 1;
            }
        }
        assert!(n > 0, "no results in {}", dir.display());
    }

    #[test]
    fn a_file_that_is_not_a_result_names_itself() {
        let dir = temp_dir("bad");
        let p = dir.join("x.json");
        std::fs::write(&p, "{\"rows\": 1}").unwrap();
        let e = ResultFile::read_from(&p).unwrap_err();
        assert!(matches!(e, ResultError::Parse { .. }));
        assert!(e.to_string().contains("x.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
