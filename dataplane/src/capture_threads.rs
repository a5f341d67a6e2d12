//! The running captures' writer threads, kept by the control server so
//! that its end ends them cleanly: [`CaptureThreads::end_all`] asks every
//! writer to stop (each then writes its interface statistics block and
//! flushes, as any other ending does), waits for them a bounded time, shuts
//! down the connection of any writer still blocked on a client that does
//! not read (its write then fails at once), and joins them all.
//!
//! Without it a capture's thread outlived the control server, and the
//! process exited under it: the client's file ended without its
//! statistics block.

use crate::lock_order::{Mutex, MutexGuard};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest [`CaptureThreads::end_all`] waits for the writers to end on
/// their own (they look at the stop flag at least every 50 ms, unless
/// blocked writing to a client that does not read) before it shuts down
/// their connections.
pub const END_GRACE: Duration = Duration::from_secs(2);

/// How often [`CaptureThreads::end_all`] looks whether the writers ended.
const END_POLL: Duration = Duration::from_millis(10);

/// One writer: its thread and a handle on its client's connection.
#[derive(Debug)]
struct Writer {
    thread: JoinHandle<()>,
    conn: UnixStream,
}

/// The running captures' writers (see the module docs).
#[derive(Debug)]
pub struct CaptureThreads {
    /// Set by [`end_all`](Self::end_all): every writer ends at its next look.
    stopping: Arc<AtomicBool>,
    /// Taken alone, never with another lock held.
    writers: Mutex<Vec<Writer>>,
}

impl Default for CaptureThreads {
    fn default() -> Self {
        CaptureThreads {
            stopping: Arc::new(AtomicBool::new(false)),
            writers: Mutex::new(Vec::new()),
        }
    }
}

/// Why a writer could not be started.
#[derive(Debug, thiserror::Error)]
pub enum CaptureThreadError {
    /// The control server is ending: no new capture.
    #[error("the daemon is stopping")]
    Stopping,
    /// The connection could not be cloned for the registry.
    #[error("cannot keep a handle on the capture's connection")]
    CloneConn(#[source] std::io::Error),
    /// The thread could not be started.
    #[error("cannot start the capture's thread")]
    Spawn(#[source] std::io::Error),
}

impl CaptureThreads {
    /// The writers (a writer's panic poisons nothing here: it never holds it).
    fn lock(&self) -> MutexGuard<'_, Vec<Writer>> {
        self.writers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start `write` on a thread of its own, writing to `conn`. It gets the
    /// stop flag, which it must look at between writes and end at (a
    /// daemon that stops). When it returns, the connection is shut down
    /// (the client reads its end; the handle kept here would otherwise hold
    /// it open). Finished writers are forgotten here.
    pub fn spawn(
        &self,
        conn: UnixStream,
        write: impl FnOnce(&UnixStream, &AtomicBool) + Send + 'static,
    ) -> Result<(), CaptureThreadError> {
        let mut writers = self.lock();
        // Under the lock, so that `end_all` (which sets the flag, then
        // takes the lock) sees every writer started before it.
        if self.stopping.load(Ordering::Acquire) {
            return Err(CaptureThreadError::Stopping);
        }
        writers.retain(|w| !w.thread.is_finished());
        let kept = conn.try_clone().map_err(CaptureThreadError::CloneConn)?;
        let stopping = Arc::clone(&self.stopping);
        let thread = std::thread::Builder::new()
            .name("vadapt-capture".into())
            .spawn(move || {
                write(&conn, &stopping);
                let _ = conn.shutdown(std::net::Shutdown::Both);
            })
            .map_err(CaptureThreadError::Spawn)?;
        writers.push(Writer { thread, conn: kept });
        Ok(())
    }

    /// End every writer and join it: ask, wait up to `grace` for them to
    /// end, then shut down the connections of those still running (a
    /// client that does not read) and join them. Returns how many had to be
    /// cut off that way. New captures are refused from now on.
    pub fn end_all(&self, grace: Duration) -> usize {
        self.stopping.store(true, Ordering::Release);
        let writers = std::mem::take(&mut *self.lock());
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && writers.iter().any(|w| !w.thread.is_finished()) {
            std::thread::sleep(END_POLL);
        }
        let mut cut = 0;
        for w in writers {
            if !w.thread.is_finished() {
                cut += 1;
                // Its blocked write fails at once, and the writer ends.
                let _ = w.conn.shutdown(std::net::Shutdown::Both);
            }
            if w.thread.join().is_err() {
                tracing::warn!("a capture's thread panicked");
            }
        }
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn end_all_ends_a_writer_that_looks_at_the_flag_and_it_finishes_its_stream() {
        let t = CaptureThreads::default();
        let (ours, mut client) = UnixStream::pair().unwrap();
        t.spawn(ours, |mut conn, stop| {
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            conn.write_all(b"the end").unwrap();
        })
        .unwrap();
        assert_eq!(t.end_all(Duration::from_secs(60)), 0);
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"the end");
    }

    #[test]
    fn the_client_reads_the_end_of_a_finished_capture_while_others_run() {
        let t = CaptureThreads::default();
        let (ours, mut client) = UnixStream::pair().unwrap();
        t.spawn(ours, |mut conn, _| conn.write_all(b"done").unwrap())
            .unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"done");
        t.end_all(Duration::ZERO);
    }

    #[test]
    fn a_writer_blocked_on_a_client_that_does_not_read_is_cut_off() {
        let t = CaptureThreads::default();
        let (ours, _client) = UnixStream::pair().unwrap();
        t.spawn(ours, |mut conn, _stop| {
            // Never looks at the flag: fills the socket until it blocks.
            let chunk = [0u8; 4096];
            while conn.write_all(&chunk).is_ok() {}
        })
        .unwrap();
        assert_eq!(t.end_all(Duration::from_millis(100)), 1);
    }

    #[test]
    fn no_capture_starts_once_the_server_ends() {
        let t = CaptureThreads::default();
        t.end_all(Duration::ZERO);
        let (ours, _client) = UnixStream::pair().unwrap();
        assert!(matches!(
            t.spawn(ours, |_, _| {}),
            Err(CaptureThreadError::Stopping)
        ));
    }
}
