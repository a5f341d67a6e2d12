//! The machine and the versions a benchmark ran on, for the bench report,
//! and UTC timestamps (bench results, calibration files).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where and with what the suite ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub cores: usize,
    /// `uname -r`.
    pub kernel: String,
    /// `git rev-parse --short HEAD`, with `-dirty` when the tree has changes.
    pub vadapt_rev: String,
    /// Whether the vadapt binary is a release build.
    pub release_build: bool,
    /// DPDK version (testpmd's EAL banner or the Debian package), or why not.
    pub dpdk: String,
    /// OVS version, or why not.
    pub ovs: String,
    /// Date, UTC.
    pub date: String,
}

/// Full path of `prog` on `$PATH`.
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

fn run(prog: &str, args: &[&str], cwd: Option<&Path>) -> Option<String> {
    let mut c = Command::new(prog);
    c.args(args);
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    let o = c.output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// The first `model name` of a /proc/cpuinfo text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Collect everything (`repo` is the git work tree).
pub fn collect(repo: &Path) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let rev = run("git", &["rev-parse", "--short", "HEAD"], Some(repo));
    let dirty = run(
        "git",
        &["status", "--porcelain", "--untracked-files=no"],
        Some(repo),
    )
    .is_some_and(|s| !s.is_empty());
    let dpdk = run("dpkg-query", &["-W", "-f=${Version}", "dpdk"], None)
        .filter(|s| !s.is_empty())
        .map(|v| format!("{v} (Debian package `dpdk`)"))
        .unwrap_or_else(|| {
            if which("dpdk-testpmd").is_some() {
                "dpdk-testpmd present, version unknown".into()
            } else {
                "not installed".into()
            }
        });
    let ovs = run("ovs-vswitchd", &["--version"], None)
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "not installed".into());
    Machine {
        cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel: run("uname", &["-r"], None).unwrap_or_else(|| "unknown".into()),
        vadapt_rev: match rev {
            Some(r) if dirty => format!("{r}-dirty"),
            Some(r) => r,
            None => "unknown (not a git tree)".into(),
        },
        release_build: !cfg!(debug_assertions),
        dpdk,
        ovs,
        date: utc_now(),
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn now_is_iso_8601_utc() {
        let d = utc_now();
        assert!(
            d.ends_with('Z') && d.len() == 20 && d.as_bytes()[10] == b'T',
            "{d}"
        );
    }

    #[test]
    fn cpu_model_line() {
        let t = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B12\n";
        assert_eq!(cpu_model(t).as_deref(), Some("AMD EPYC 7B12"));
        assert_eq!(cpu_model("nothing"), None);
    }

    #[test]
    fn which_finds_sh_and_not_nonsense() {
        assert!(which("sh").is_some());
        assert!(which("no-such-program-vadapt").is_none());
    }
}
