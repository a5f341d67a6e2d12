//! B6 — OVS-DPDK as an anchor (Debian `openvswitch-switch-dpdk`): its PMD
//! busy polling and its load-based PMD sleep (`pmd-maxsleep`) under the
//! B2–B4 loads, set up by DESIGN.md's verified recipe (ovsdb-server and
//! ovs-vswitchd run by hand, `--no-huge` through `dpdk-extra`).
//!
//! When OVS-DPDK is not installed the benchmark is skipped with a line saying
//! how to install it; when it cannot start, its exact failure is recorded.

use super::ctx::Ctx;
use super::error::BenchError;
use super::ovs::{self, OVS_DPDK};
use std::path::Path;
use vadapt_results::ResultFile;

/// Title.
pub const TITLE: &str = "OVS-DPDK anchor: PMD busy polling and pmd-maxsleep";

/// Why OVS-DPDK cannot be used here, if it cannot.
pub fn unavailable() -> Option<String> {
    let missing: Vec<&str> = ["ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-ofctl"]
        .into_iter()
        .filter(|p| crate::machine::which(p).is_none())
        .collect();
    if !Path::new(OVS_DPDK).is_file() || !missing.is_empty() {
        let what = if Path::new(OVS_DPDK).is_file() {
            missing.join(", ")
        } else {
            OVS_DPDK.to_string()
        };
        return Some(format!(
            "OVS-DPDK not installed ({what} missing): skipped (install with `apt-get install openvswitch-switch-dpdk`)"
        ));
    }
    None
}

/// Run B6.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    if let Some(msg) = unavailable() {
        ctx.say(&msg);
        f.notes.push(msg);
        f.status = "skipped".into();
        return Ok(());
    }
    ovs::run(ctx, f)
}

/// The B6 section.
pub fn render(f: &ResultFile) -> String {
    ovs::render(f)
}
