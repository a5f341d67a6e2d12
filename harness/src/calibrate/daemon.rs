//! What calibration and validation share to run the real daemon with
//! synthetic guests: a fresh folder, the sink's MAC, guest threads, and the
//! daemon's counters.

use super::error::{CalibrateError, Result};
use super::micro::pin;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use vadapt_dataplane::metrics::{StatsSnapshot, WorkerSnapshot};
use vadapt_guest::{Guest, GuestConfig, GuestReport};
use vadapt_wire::Mac;

/// The sink port's MAC: where the synthetic guests send.
pub(super) const SINK: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x01]);

/// A fresh folder `vadapt-calib-TAG-PID` under the temporary directory.
pub(super) fn tmpdir(tag: &str) -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("vadapt-calib-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).map_err(|source| CalibrateError::Setup {
        what: format!("directory {}", d.display()),
        source,
    })?;
    Ok(d)
}

/// The worker named `name` in a snapshot.
pub(super) fn worker<'a>(s: &'a StatsSnapshot, name: &str) -> Option<&'a WorkerSnapshot> {
    s.workers.iter().find(|w| w.name == name)
}

/// Wake-ups that ended a blocked wait (timer, kick, timeout). A `recheck` found work
/// right after re-enabling notifications and never blocked, so it is not a wake-up
/// in the model's sense.
pub(super) fn blocked_wakeups(w: &WorkerSnapshot) -> u64 {
    w.wakeups
        .iter()
        .filter(|(cause, _)| cause.as_str() != "recheck")
        .map(|(_, n)| n)
        .sum()
}

/// A counter of `port` summed over its queues (0 when the port is absent).
pub(super) fn port_sum(
    s: &StatsSnapshot,
    port: &str,
    f: fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64,
) -> u64 {
    s.port_total(port, f).unwrap_or(0)
}

/// Start a guest on its own thread (pinned to `cpu`, which its sender threads
/// inherit).
pub(super) fn spawn_guest(
    vm: &str,
    cfg: GuestConfig,
    cpu: Option<usize>,
    stop: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<std::result::Result<GuestReport, vadapt_guest::GuestError>>> {
    let guest = Guest::connect(cfg).map_err(|source| CalibrateError::Guest {
        vm: vm.to_string(),
        source,
    })?;
    let st = Arc::clone(stop);
    std::thread::Builder::new()
        .name(format!("guest-{vm}"))
        .spawn(move || {
            pin(cpu);
            guest.run(st)
        })
        .map_err(|source| CalibrateError::Setup {
            what: "a guest thread".into(),
            source,
        })
}

/// Wait for a guest thread; a guest that ended with an error is an error.
pub(super) fn join_guest(
    vm: &str,
    h: std::thread::JoinHandle<std::result::Result<GuestReport, vadapt_guest::GuestError>>,
) -> Result<GuestReport> {
    match h.join() {
        Ok(Ok(r)) => match &r.error {
            Some(e) => Err(CalibrateError::GuestEnded {
                vm: vm.to_string(),
                reason: e.clone(),
            }),
            None => Ok(r),
        },
        Ok(Err(source)) => Err(CalibrateError::Guest {
            vm: vm.to_string(),
            source,
        }),
        Err(_) => Err(CalibrateError::GuestEnded {
            vm: vm.to_string(),
            reason: "its thread panicked".into(),
        }),
    }
}
