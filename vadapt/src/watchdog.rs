//! The service manager's watchdog (`WatchdogSec=` in the unit): `vadapt
//! serve`'s main loop sends `WATCHDOG=1` at half the interval systemd asks
//! for (`$WATCHDOG_USEC`), and only while the daemon is whole: every
//! service thread runs (control socket, core manager, MAC ageing, workload
//! estimate, metrics: [`Daemon::services_running`]) and every NQ pool
//! worker is a live thread of this process. When one is gone the pings
//! stop, one ERROR line says which, and systemd kills and restarts the
//! daemon. A main loop stuck on a lock stops them too. A VM port's own
//! worker thread is not watched: one that panics is logged, and its port
//! is served again when its frontend reconnects.

use crate::service_manager;
use std::time::{Duration, Instant};
use vadapt_dataplane::Daemon;

/// The pings' state; inert when the service manager asked for none.
#[derive(Debug)]
pub struct Watchdog {
    every: Option<Duration>,
    last: Option<Instant>,
    failed: bool,
}

impl Watchdog {
    /// From `$WATCHDOG_USEC` (and `$WATCHDOG_PID`, which must be ours).
    pub fn from_env() -> Self {
        let every = sd_notify::watchdog_enabled()
            .map(|d| d / 2)
            .filter(|d| !d.is_zero());
        if let Some(d) = every {
            tracing::info!(
                every_ms = d.as_millis() as u64,
                "service manager watchdog on"
            );
        }
        Watchdog {
            every,
            last: None,
            failed: false,
        }
    }

    /// The longest the main loop may wait before calling [`Watchdog::tick`].
    pub fn wait(&self, otherwise: Duration) -> Duration {
        self.every.map_or(otherwise, |d| d.min(otherwise))
    }

    /// Ping if one is due and the daemon is whole.
    pub fn tick(&mut self, daemon: &Daemon, now: Instant) {
        let Some(every) = self.every else { return };
        if self.failed || self.last.is_some_and(|l| now.duration_since(l) < every) {
            return;
        }
        match dead_part(daemon) {
            None => {
                service_manager::watchdog();
                self.last = Some(now);
            }
            Some(what) => {
                tracing::error!(
                    "{what}: no more watchdog pings, the service manager will restart vadapt"
                );
                self.failed = true;
            }
        }
    }
}

/// What is no longer running, if anything.
fn dead_part(daemon: &Daemon) -> Option<String> {
    if !daemon.services_running() {
        return Some(
            "a service thread (control socket, core manager, ageing, metrics) ended".into(),
        );
    }
    let pool = daemon.nq_workers()?;
    pool.tids()
        .into_iter()
        .find(|tid| !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists())
        .map(|tid| format!("NQ pool worker thread {tid} ended"))
}
