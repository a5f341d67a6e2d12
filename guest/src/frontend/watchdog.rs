//! A bound in time on vhost-user exchanges, for a backend that stops answering.

use std::io;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Bounds a series of vhost-user exchanges in time. The `vhost` crate retries a receive that
/// fails with `EAGAIN` forever, so socket timeouts would only turn a hang into a busy loop;
/// instead, when the deadline passes, this shuts the socket down, which makes the pending
/// receive see end-of-file and fail.
pub(super) struct Watchdog {
    disarm: Option<mpsc::Sender<()>>,
    fired: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Arms the watchdog on `sock`: it fires after `timeout` unless disarmed first.
    pub(super) fn arm(sock: &UnixStream, timeout: Duration) -> io::Result<Watchdog> {
        let sock = sock.try_clone()?;
        let (tx, rx) = mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&fired);
        let thread = std::thread::Builder::new()
            .name("vhost-watchdog".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(timeout) {
                    flag.store(true, Ordering::SeqCst);
                    let _ = sock.shutdown(Shutdown::Both);
                }
            })?;
        Ok(Watchdog {
            disarm: Some(tx),
            fired,
            thread: Some(thread),
        })
    }

    /// Stops the watchdog; returns whether it fired (and so broke the socket).
    pub(super) fn disarm(mut self) -> bool {
        drop(self.disarm.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.fired.load(Ordering::SeqCst)
    }
}
