//! The one-way stream: raw frames, one message per frame, or a TCP stream's segments; in
//! closed loop, or paced at a rate (each frame at its time, or a burst at a time).

use super::{Worker, BURST};
use crate::driver::lock;
use crate::driver::SPIN_BELOW_NS;
use crate::load::{Pacer, Pacing};
use crate::tcp_stream::TcpSender;

impl Worker {
    /// Raw frames: one message per frame, `want` frames a pass; paced, the frames due go out
    /// one at a time or, under [`Pacing::Burst`], a burst at a time. TCP stream: the messages
    /// due are written to the send queue, and a pass sends up to a burst of segments from it;
    /// in closed loop with free writes, every segment is full.
    pub(super) fn stream(&mut self, mut pacer: Option<Pacer>) {
        let pair = self.driver.pair();
        // Frames the pacer must have due before a pass sends them (1: each at its time).
        let pace_burst = match (&pacer, self.shared.pacing) {
            (Some(p), Pacing::Burst) => p.burst_len(SPIN_BELOW_NS, u64::from(BURST)),
            _ => 1,
        };
        while !self.driver.should_stop() {
            if self.paused() {
                continue;
            }
            let want = match (pacer.as_mut(), self.endpoint.tcp().is_some()) {
                (None, _) => BURST,
                (Some(p), true) => {
                    self.write_messages(p.due(self.shared.clock.now_ns()));
                    if !self.endpoint.tcp().is_some_and(TcpSender::has_data) {
                        let next = p.next_due_ns();
                        self.driver.idle_until(next, &mut self.endpoint);
                        continue;
                    }
                    BURST
                }
                (Some(p), false) => match p.due(self.shared.clock.now_ns()) {
                    n if n < pace_burst => {
                        // Not a whole burst yet: give them back and wait for the rest.
                        p.unsend(n);
                        if pace_burst == 1 {
                            self.driver.idle_until(p.next_due_ns(), &mut self.endpoint);
                        } else {
                            self.driver
                                .sleep_until(p.burst_due_ns(pace_burst), &mut self.endpoint);
                        }
                        continue;
                    }
                    n => {
                        // Take one burst now; the rest stays due for the next pass.
                        let want = n.min(u64::from(BURST));
                        p.unsend(n - want);
                        want as u32
                    }
                },
            };
            // Raw frames not sent are given back to the pacer; TCP keeps them queued.
            let raw_pacer = pacer.as_mut().filter(|_| self.endpoint.tcp().is_none());
            let mut qp = lock(&pair);
            self.driver.softirq(&mut qp, true, &mut self.endpoint);
            if qp.tx.stopped {
                if let Some(p) = raw_pacer {
                    p.unsend(u64::from(want));
                }
                self.driver.wait_tx_wake(qp, true, &mut self.endpoint);
                continue;
            }
            let sent = self.driver.xmit(&mut qp, want, &mut self.endpoint);
            drop(qp);
            if let Some(p) = raw_pacer {
                p.unsend(u64::from(want - sent));
            }
        }
        if let Some(p) = pacer {
            self.driver.counters().paced_skipped.add(p.skipped());
        }
    }
}
