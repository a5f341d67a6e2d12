//! What the daemon's integration tests share: a scratch folder, a port's
//! counter totals, and counters once the workers have finished their passes.
//! (Each test file is a crate of its own that uses some of these.)
#![allow(dead_code)]

use std::time::Duration;
use vadapt_dataplane::metrics::{QueueSnapshot, StatsSnapshot};
use vadapt_dataplane::Daemon;

/// A fresh folder, removed with everything in it when dropped.
pub fn tmpdir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("vadapt-it-{tag}-"))
        .tempdir()
        .unwrap()
}

/// `f` summed over `port`'s queues.
///
/// # Panics
/// If there is no such port.
pub fn total(s: &StatsSnapshot, port: &str, f: impl Fn(&QueueSnapshot) -> u64) -> u64 {
    s.port_total(port, f)
        .unwrap_or_else(|| panic!("no port {port}"))
}

/// The daemon's counters once `want` holds, or after 5 s: counters settle
/// once the workers have finished their last passes.
pub fn settled(d: &Daemon, want: impl Fn(&StatsSnapshot) -> bool) -> StatsSnapshot {
    let mut s = d.registry().snapshot();
    for _ in 0..250 {
        if want(&s) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        s = d.registry().snapshot();
    }
    s
}
