//! The signals `vadapt serve` answers, from its first instant to its last.
//!
//! The handlers are installed before the configuration is read and before
//! any socket is bound, so that no signal finds the process with the
//! default action (which, for SIGTERM, kills it and leaves its sockets
//! behind). Each signal becomes an [`Event`] for the main thread:
//!
//! * SIGINT or SIGTERM sets the stop flag that start-up checks between
//!   ports (a stop during start-up undoes what was started) and that every
//!   thread of the daemon watches, and starts the **stop deadline** at the
//!   moment the signal arrived: whatever then blocks the orderly shutdown,
//!   the process removes the sockets it owns and exits with status 1 once
//!   [`STOP_DEADLINE`] has passed. Later signals change nothing.
//! * SIGHUP asks for a reload. One that arrives during start-up waits for
//!   start-up to finish, then reloads.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use vadapt_dataplane::socket_file::SocketLedger;

/// The longest an orderly shutdown may take after SIGINT or SIGTERM,
/// counted from the signal's arrival. 64 VM ports on a 2-core machine
/// kept busy by `stress-ng --cpu 2` and two compiling worktrees stopped in
/// at most 201 ms over 30 stops (`scripts/stop-latency.sh`,
/// docs/reliability.md, "Signals"), so this leaves a margin of more than 7×.
pub const STOP_DEADLINE: Duration = Duration::from_millis(1500);

/// What the main thread of `vadapt serve` is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// SIGINT or SIGTERM (`signal`) arrived at `at`.
    Stop {
        /// The signal's number.
        signal: i32,
        /// When it arrived.
        at: Instant,
    },
    /// SIGHUP: read the configuration again.
    Reload,
}

/// The installed handlers (see the module docs).
#[derive(Debug)]
pub struct StopSignals {
    stop: Arc<AtomicBool>,
    events: Receiver<Event>,
    /// The sockets to remove if the deadline passes; set once the daemon
    /// has started.
    ledger: Arc<OnceLock<SocketLedger>>,
}

impl StopSignals {
    /// Install the handlers and start the thread that turns signals into
    /// [`Event`]s.
    pub fn install() -> std::io::Result<StopSignals> {
        let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let stop = Arc::new(AtomicBool::new(false));
        let ledger = Arc::new(OnceLock::<SocketLedger>::new());
        let (tx, events) = std::sync::mpsc::channel();
        let (flag, sockets) = (Arc::clone(&stop), Arc::clone(&ledger));
        std::thread::Builder::new()
            .name("vadapt-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if signal == SIGHUP {
                        let _ = tx.send(Event::Reload);
                        continue;
                    }
                    let at = Instant::now();
                    flag.store(true, Ordering::Relaxed);
                    let _ = tx.send(Event::Stop { signal, at });
                    // The deadline runs here, whatever the main thread is
                    // blocked on; an orderly stop exits before it passes.
                    std::thread::sleep(STOP_DEADLINE);
                    tracing::error!(
                        "shutdown did not finish within {} ms of the signal; \
                         removing the daemon's sockets and exiting without it",
                        STOP_DEADLINE.as_millis()
                    );
                    if let Some(l) = sockets.get() {
                        l.remove_all();
                    }
                    std::process::exit(1);
                }
            })?;
        Ok(StopSignals {
            stop,
            events,
            ledger,
        })
    }

    /// The stop flag SIGINT and SIGTERM set: the daemon's own.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// The daemon has started: these are the sockets to remove if a stop
    /// misses its deadline.
    pub fn guard_sockets(&self, ledger: SocketLedger) {
        let _ = self.ledger.set(ledger);
    }

    /// The next signal, or `None` after `wait` without one.
    pub fn next(&self, wait: Duration) -> Option<Event> {
        match self.events.recv_timeout(wait) {
            Ok(e) => Some(e),
            Err(RecvTimeoutError::Timeout) => None,
            // The thread never ends while the process runs.
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(wait);
                None
            }
        }
    }
}
