//! A bound on the connections a local server (control socket, metrics
//! endpoint) holds at once, that idle clients cannot use to lock others out.
//!
//! Every connection is a task on the server's runtime with a deadline of its
//! own. When a new one arrives and the bound is reached, the **oldest** open
//! connection is aborted to make room: a client that answers in
//! milliseconds is never the oldest, so a crowd of idle or slow clients can
//! delay nobody by more than the time it takes to cycle through them, and
//! never holds more than `max` file descriptors.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::task::AbortHandle;

/// See the module docs.
#[derive(Debug)]
pub struct ConnLimit {
    name: &'static str,
    max: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    open: VecDeque<(u64, AbortHandle)>,
    evicted: u64,
}

/// A connection's place in a [`ConnLimit`]; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    limit: Arc<ConnLimit>,
    id: u64,
}

impl ConnLimit {
    /// At most `max` (≥ 1) connections at once for the server `name`.
    pub fn new(name: &'static str, max: usize) -> Arc<ConnLimit> {
        Arc::new(ConnLimit {
            name,
            max: max.max(1),
            inner: Mutex::new(Inner::default()),
        })
    }

    /// Run `conn` (one connection's whole life) as a task on the current
    /// runtime, holding a place until it ends; when full, the oldest open
    /// connection is aborted first.
    pub fn spawn<F>(self: &Arc<Self>, conn: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel::<Slot>();
        let task = tokio::spawn(async move {
            // Held until the task ends or is aborted (dropping it frees the place).
            let _slot = rx.await;
            conn.await;
        });
        // If the task is already gone, the slot comes back here and is dropped.
        let _ = tx.send(self.admit(task.abort_handle()));
    }

    fn admit(self: &Arc<Self>, abort: AbortHandle) -> Slot {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.open.len() >= self.max {
            if let Some((_, oldest)) = g.open.pop_front() {
                oldest.abort();
                g.evicted += 1;
                // Rate-limited: one line per power of two.
                if g.evicted.is_power_of_two() {
                    tracing::warn!(
                        server = self.name,
                        max = self.max,
                        evicted = g.evicted,
                        "too many open connections: closed the oldest"
                    );
                }
            }
        }
        g.next_id += 1;
        let id = g.next_id;
        g.open.push_back((id, abort));
        Slot {
            limit: Arc::clone(self),
            id,
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open
            .len()
    }

    /// Connections closed to make room so far.
    pub fn evicted(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).evicted
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut g = self.limit.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = g.open.iter().position(|(id, _)| *id == self.id) {
            g.open.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_oldest_connection_makes_room() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let limit = ConnLimit::new("test", 2);
            let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
            for i in 0..3 {
                let d = done_tx.clone();
                limit.spawn(async move {
                    // Says when it ends, by completion or abort.
                    struct Bye(usize, tokio::sync::mpsc::UnboundedSender<usize>);
                    impl Drop for Bye {
                        fn drop(&mut self) {
                            let _ = self.1.send(self.0);
                        }
                    }
                    let _bye = Bye(i, d);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                });
                tokio::task::yield_now().await;
            }
            // The first (oldest) was closed to make room for the third.
            assert_eq!(done.recv().await, Some(0));
            assert_eq!(limit.evicted(), 1);
            assert_eq!(limit.open(), 2);
        });
    }
}
