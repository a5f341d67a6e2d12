//! What the daemon's integration tests share: a scratch folder, a port's
//! counter totals, counters once the workers have finished their passes,
//! and a synthetic guest streaming to a MAC.
//! (Each test file is a crate of its own that uses some of these.)
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use vadapt_dataplane::metrics::{QueueSnapshot, StatsSnapshot};
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, GuestReport, Load, Mode};
use vadapt_wire::Mac;

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

/// A synthetic guest on `socket` streaming 64-byte frames to `dst` at
/// `load` for `ms` milliseconds, with no simulated exit cost.
pub fn stream_guest(socket: &Path, load: Load, dst: Mac, ms: u64) -> GuestConfig {
    let mut g = GuestConfig::new(socket);
    g.load = load;
    g.mode = Mode::Stream;
    g.dst_mac = dst.0;
    g.duration = Duration::from_millis(ms);
    g.exit_cost_ns = 0;
    g
}

/// Connect the guest `cfg` describes and run it until it is done or
/// `stop` is set; its report.
///
/// # Panics
/// If it cannot connect, or ends with an error.
pub fn run_guest(cfg: GuestConfig, stop: Arc<AtomicBool>) -> GuestReport {
    let g = Guest::connect(cfg).expect("guest connects");
    let r = g.run(stop).expect("guest runs");
    assert!(r.error.is_none(), "guest error: {:?}", r.error);
    r
}
