//! What start-up has started so far, undone if it fails.

use crate::socket_file::SocketLedger;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// What `Daemon::start` has started so far. Dropped before
/// [`Started::complete`] (start-up failed), it stops those threads and
/// removes every socket the daemon bound (each only if it is still the one
/// bound), so a failed start leaves nothing behind.
#[derive(Default)]
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
