//! What start-up has started so far, undone if it fails.

use super::error::DaemonError;
use crate::socket_file::SocketLedger;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// What `Daemon::start` has started so far. Dropped before
/// [`Started::complete`] (start-up failed), it stops those threads and
/// removes every socket the daemon bound (each only if it is still the one
/// bound), so a failed start leaves nothing behind.
pub(crate) struct Started {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) threads: Vec<JoinHandle<()>>,
    /// The daemon's sockets (the ports' and the control socket's).
    pub(crate) sockets: SocketLedger,
    /// Undone first, if start-up fails (the ports made so far).
    pub(crate) on_failure: Vec<Box<dyn FnOnce() + Send>>,
    /// Start-up succeeded: nothing to undo.
    completed: bool,
}

impl Started {
    /// Nothing started yet; `stop` is the daemon's stop flag.
    pub(super) fn new(stop: Arc<AtomicBool>) -> Self {
        Started {
            stop,
            threads: Vec::new(),
            sockets: SocketLedger::default(),
            on_failure: Vec::new(),
            completed: false,
        }
    }

    /// `Err(StopRequested)` once the stop flag is set: start-up goes no
    /// further, and dropping `self` undoes it.
    pub(super) fn check_stop(&self) -> Result<(), DaemonError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(DaemonError::StopRequested);
        }
        Ok(())
    }

    /// Start-up succeeded: hand the threads over.
    pub(super) fn complete(mut self) -> Vec<JoinHandle<()>> {
        self.completed = true;
        self.on_failure.clear();
        std::mem::take(&mut self.threads)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.completed {
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        for undo in self.on_failure.drain(..) {
            undo();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The ports and the control thread removed theirs as they went;
        // whatever is left (none, unless one of them could not) goes now.
        self.sockets.remove_all();
    }
}

/// The test hook that widens start-up's window for signals: in debug builds
/// only, `VADAPT_TEST_START_PAUSE_MS` makes start-up pause that long after
/// each port, so that a test can send SIGTERM or SIGHUP while some ports
/// exist and others do not (`vadapt/tests/serve_signals.rs`). Release
/// builds ignore it.
pub(super) fn test_pause() {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("VADAPT_TEST_START_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        tracing::debug!(ms, "start-up paused (VADAPT_TEST_START_PAUSE_MS)");
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}
