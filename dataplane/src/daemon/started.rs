//! What start-up has started so far, undone if it fails.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// What `Daemon::start` has started so far. Dropped before
/// [`Started::complete`] (start-up failed), it stops those threads and
/// removes the socket files created, so a failed start leaves nothing behind.
#[derive(Default)]
pub(crate) struct Started {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) threads: Vec<JoinHandle<()>>,
    pub(crate) files: Vec<PathBuf>,
    /// Undone first, if start-up fails (the ports made so far).
    pub(crate) on_failure: Vec<Box<dyn FnOnce() + Send>>,
}

impl Started {
    /// Start-up succeeded: hand the threads over.
    pub(super) fn complete(mut self) -> Vec<JoinHandle<()>> {
        self.files.clear();
        self.on_failure.clear();
        std::mem::take(&mut self.threads)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.threads.is_empty() && self.files.is_empty() && self.on_failure.is_empty() {
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        for undo in self.on_failure.drain(..) {
            undo();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}
