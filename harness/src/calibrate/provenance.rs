//! Where a calibration came from: this host ([`machine`]) and the command,
//! time and revision ([`source`]), as the file's `machine` and `source`.

use super::args::CalibrateArgs;
use crate::machine::utc_now;

/// The value after `key:` on the first line of `path` that starts with `key`.
fn first_line_of(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    })
}

/// CPU model, cores, hypervisor and kernel of this host.
pub(super) fn machine() -> String {
    let model =
        first_line_of("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let virt = first_line_of("/proc/cpuinfo", "flags")
        .is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor"));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!(
        "{model}, {cores} cores{}, Linux {kernel}",
        if virt { " (virtual machine)" } else { "" }
    )
}

/// `git describe` of the working directory's repository, or "unknown".
fn git_rev() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The command line, the time and the git revision this file came from.
pub(super) fn source(a: &CalibrateArgs) -> String {
    let cmd: Vec<String> = std::env::args().collect();
    let cmd = if cmd.is_empty() {
        format!("vadapt calibrate --out {}", a.out.display())
    } else {
        let mut c = cmd;
        c[0] = "vadapt".into();
        c.join(" ")
    };
    format!("`{cmd}` on {}, git {}", utc_now(), git_rev())
}
