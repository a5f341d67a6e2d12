//! Request/response: one request at a time per thread, in closed loop or paced, each waited
//! for (or counted lost after the timeout) before the next goes out.

use super::{Worker, MAX_SLEEP_NS};
use crate::driver::lock;
use crate::load::Pacer;
use std::sync::atomic::Ordering;

/// Longest sleep waiting for a reply when other threads share the queue pair (ns).
const SHARED_PAIR_SLEEP_NS: u64 = 100_000;

impl Worker {
    pub(super) fn request_response(&mut self, mut pacer: Option<Pacer>) {
        let pair = self.driver.pair();
        while !self.driver.should_stop() {
            if self.paused() {
                continue;
            }
            if let Some(p) = pacer.as_mut() {
                if p.due(self.shared.clock.now_ns()) == 0 {
                    let next = p.next_due_ns();
                    self.driver.idle_until(next, &mut self.endpoint);
                    continue;
                }
            }
            let req = self.endpoint.next_seq();
            let mut qp = lock(&pair);
            self.driver.softirq(&mut qp, true, &mut self.endpoint);
            if qp.tx.stopped {
                self.driver.wait_tx_wake(qp, true, &mut self.endpoint);
                continue;
            }
            if self.driver.xmit(&mut qp, 1, &mut self.endpoint) == 0 {
                self.driver.wait_tx_wake(qp, true, &mut self.endpoint);
                continue;
            }
            drop(qp);
            let limit = self.shared.clock.now_ns() + self.shared.rr_timeout_ns;
            loop {
                if self.shared.answered[self.id as usize].load(Ordering::Acquire) > req {
                    break;
                }
                if self.driver.error.is_some()
                    || self.shared.stop.load(Ordering::Relaxed)
                    || self.shared.abort.load(Ordering::Relaxed)
                {
                    return;
                }
                let now = self.shared.clock.now_ns();
                if now >= limit {
                    self.driver.counters().lost_requests.add(1);
                    break;
                }
                // On a shared pair another thread may take the call that carries our reply;
                // nothing wakes us then, so sleep in short slices.
                let slice = if self.shared_pair {
                    SHARED_PAIR_SLEEP_NS
                } else {
                    MAX_SLEEP_NS
                };
                self.driver
                    .wait_rx(limit.min(now + slice), &mut self.endpoint);
            }
        }
    }
}
