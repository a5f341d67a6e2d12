//! The echo responder: a guest that answers another guest's requests. The replies go out
//! from NAPI (see the driver); this loop only sleeps on the RX call and restarts a stopped TX
//! queue.

use super::{Worker, MAX_SLEEP_NS};
use crate::driver::lock;

impl Worker {
    /// Answers requests (from another guest in request/response mode) until the end: sleeps
    /// on the RX call, replies from NAPI, restarts a stopped TX queue.
    pub(super) fn respond(&mut self) {
        let pair = self.driver.pair();
        while !self.driver.should_stop() {
            if self.paused() {
                continue;
            }
            let qp = lock(&pair);
            if qp.tx.stopped {
                self.driver.wait_tx_wake(qp, true, &mut self.endpoint);
                continue;
            }
            drop(qp);
            let now = self.shared.clock.now_ns();
            self.driver.wait_rx(
                (now + MAX_SLEEP_NS).min(self.shared.deadline_ns),
                &mut self.endpoint,
            );
        }
    }
}
