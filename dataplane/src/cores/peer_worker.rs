//! One thread per peer, so that no peer stalls the core manager.
//!
//! The manager runs a period every 100 ms for every VM. Its peers (each
//! VM's QMP socket and guest agent) are untrusted and may answer late or
//! never; every exchange with them is bounded, but a bound of seconds is
//! still many periods. So each peer gets a [`PeerWorker`]: a thread that
//! carries out one request at a time, while the manager's period only
//! hands requests over and picks up replies, never waiting.
//!
//! ```text
//!   period:  worker.take()  → the reply of the last request, if it came
//!            worker.submit(req) if worker.idle()   (one request at a time)
//!   thread:  wait for a request → serve it (bounded waits) → post the reply
//! ```
//!
//! A slow peer thus delays only its own VM's actions, by its own bounded
//! waits, and the other VMs go on every period. Dropping the worker stops
//! its thread after the request it is serving, without waiting for it, so
//! a silent peer never holds up the daemon's stop.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

struct State<Req, Rep> {
    /// The request handed over and not yet taken by the thread.
    pending: Option<Req>,
    /// The thread is serving a request.
    busy: bool,
    /// Replies not yet taken by the manager.
    done: VecDeque<Rep>,
    stop: bool,
}

struct Shared<Req, Rep> {
    state: Mutex<State<Req, Rep>>,
    wake: Condvar,
}

impl<Req, Rep> Shared<Req, Rep> {
    fn lock(&self) -> MutexGuard<'_, State<Req, Rep>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A thread serving one peer's requests, one at a time. See the module
/// documentation.
pub struct PeerWorker<Req, Rep> {
    shared: Arc<Shared<Req, Rep>>,
    _thread: JoinHandle<()>,
}

impl<Req, Rep> std::fmt::Debug for PeerWorker<Req, Rep> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.shared.lock();
        f.debug_struct("PeerWorker")
            .field("pending", &s.pending.is_some())
            .field("busy", &s.busy)
            .field("replies", &s.done.len())
            .finish()
    }
}

impl<Req: Send + 'static, Rep: Send + 'static> PeerWorker<Req, Rep> {
    /// Start a thread named `name` that answers each request with `serve`.
    pub fn spawn(
        name: &str,
        mut serve: impl FnMut(Req) -> Rep + Send + 'static,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: None,
                busy: false,
                done: VecDeque::new(),
                stop: false,
            }),
            wake: Condvar::new(),
        });
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || loop {
                let req = {
                    let mut s = theirs.lock();
                    loop {
                        if s.stop {
                            return;
                        }
                        if let Some(req) = s.pending.take() {
                            s.busy = true;
                            break req;
                        }
                        s = theirs.wake.wait(s).unwrap_or_else(|e| e.into_inner());
                    }
                };
                let rep = serve(req);
                let mut s = theirs.lock();
                s.busy = false;
                s.done.push_back(rep);
            })?;
        Ok(PeerWorker {
            shared,
            _thread: thread,
        })
    }

    /// Whether no request is pending or being served.
    pub fn idle(&self) -> bool {
        let s = self.shared.lock();
        s.pending.is_none() && !s.busy
    }

    /// Hand `req` to the thread if it is idle; whether it was taken.
    pub fn submit(&self, req: Req) -> bool {
        let mut s = self.shared.lock();
        if s.pending.is_some() || s.busy {
            return false;
        }
        s.pending = Some(req);
        self.shared.wake.notify_one();
        true
    }

    /// The oldest reply not yet taken.
    pub fn take(&self) -> Option<Rep> {
        self.shared.lock().done.pop_front()
    }
}

impl<Req, Rep> Drop for PeerWorker<Req, Rep> {
    fn drop(&mut self) {
        // The thread ends after the request it serves; not joined, so a
        // peer that never answers holds up nothing but that thread, until
        // its exchange's deadline.
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn wait_reply<Req: Send + 'static, Rep: Send + 'static>(w: &PeerWorker<Req, Rep>) -> Rep {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(r) = w.take() {
                return r;
            }
            assert!(Instant::now() < deadline, "no reply");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn one_request_at_a_time_and_the_caller_never_waits() {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let w = PeerWorker::spawn("test-peer", move |n: u32| {
            // A peer that answers only when the test says so.
            release_rx.recv().unwrap();
            n * 2
        })
        .unwrap();
        assert!(w.idle());
        // None of these calls waits for the peer, which has not answered.
        assert!(w.submit(1));
        assert!(!w.submit(2), "busy: refused, not queued");
        assert!(!w.idle());
        assert!(w.take().is_none());
        release_tx.send(()).unwrap();
        assert_eq!(wait_reply(&w), 2);
        assert!(w.idle());
        assert!(w.submit(5));
        release_tx.send(()).unwrap();
        assert_eq!(wait_reply(&w), 10);
    }

    #[test]
    fn dropping_a_worker_stuck_on_a_peer_does_not_wait_for_it() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (started_tx, started) = mpsc::channel::<()>();
        let (release, rx) = mpsc::channel::<()>();
        let answered = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&answered);
        let w = PeerWorker::spawn("test-peer", move |()| {
            started_tx.send(()).unwrap();
            let _ = rx.recv_timeout(Duration::from_secs(30));
            flag.store(true, Ordering::SeqCst);
        })
        .unwrap();
        assert!(w.submit(()));
        started.recv().unwrap();
        drop(w);
        // The drop came back while the peer still had not answered.
        assert!(!answered.load(Ordering::SeqCst));
        drop(release);
    }
}
