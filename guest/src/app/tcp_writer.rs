//! A TCP stream in closed loop whose writes cost CPU time: the application writes one
//! message at a time, and the driver sends after each write, as a netperf sender over Linux's
//! TCP does.

use super::{Worker, BURST};
use crate::driver::lock;
use crate::tcp_stream::TcpSender;

impl Worker {
    /// TCP stream in closed loop with a write cost (the rule in [`crate::tcp_stream`]): the
    /// application writes one message at a time, and after each write the driver sends what
    /// is queued if the ring has room. While the queue is stopped the writes go on until a
    /// segment's worth is queued; then the thread sleeps until the TX call. Interrupts (and a
    /// TX call that restarts the queue) are looked at once per burst of writes.
    pub(super) fn tcp_writer(&mut self) {
        let pair = self.driver.pair();
        let queue_full = |w: &Worker| w.endpoint.tcp().is_none_or(TcpSender::send_queue_full);
        while !self.driver.should_stop() {
            if self.paused() {
                continue;
            }
            let mut qp = lock(&pair);
            self.driver.softirq(&mut qp, true, &mut self.endpoint);
            if qp.tx.stopped {
                // Sleep for the call only when the writer can write no more.
                let full = queue_full(self);
                self.driver.wait_tx_wake(qp, full, &mut self.endpoint);
                if full {
                    continue;
                }
            } else {
                drop(qp);
            }
            for _ in 0..BURST {
                let full = queue_full(self);
                if !full {
                    self.write_messages(1);
                }
                let mut qp = lock(&pair);
                if qp.tx.stopped {
                    if full {
                        break;
                    }
                    continue;
                }
                self.driver.xmit(&mut qp, BURST, &mut self.endpoint);
                if self.driver.error.is_some() {
                    break;
                }
            }
        }
    }
}
