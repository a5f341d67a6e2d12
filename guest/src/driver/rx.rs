//! RX as NAPI: the RX call is the interrupt; a poll takes up to the budget, reposts buffers
//! as `try_fill_recv`, sends the replies it owes, and re-enables callbacks under budget.

use super::queue::QueuePair;
use super::{Driver, Stack};

impl Driver {
    /// The RX "interrupt": when `check_irq`, consume the RX call eventfd; run NAPI when a
    /// call came or NAPI is still scheduled.
    pub(crate) fn softirq(&mut self, qp: &mut QueuePair, check_irq: bool, stack: &mut impl Stack) {
        if check_irq {
            let n = qp.rx.notify.take_calls();
            if n > 0 {
                let c = self.counters();
                c.rx_calls.add(1);
                c.call_signals.add(n);
                self.shared.exit.pay();
                qp.rx.vq.disable_cb();
                qp.rx.napi_scheduled = true;
            }
        }
        if qp.rx.napi_scheduled {
            self.napi_poll(qp, stack);
        }
    }

    fn napi_poll(&mut self, qp: &mut QueuePair, stack: &mut impl Stack) {
        let budget = self.shared.napi_budget;
        let refill_at = refill_at(budget, qp.rx.vq.size());
        loop {
            let mut bytes = 0u64;
            let res = {
                let echo = &mut self.echo;
                qp.rx.poll(budget, |pkt| {
                    bytes += u64::from(pkt.frame_len);
                    if let Some(reply) = stack.receive(pkt) {
                        echo.push(reply);
                    }
                })
            };
            let c = self.counters();
            c.recv_packets.add(u64::from(res.packets));
            c.recv_bytes.add(bytes);
            c.rx_errors.add(u64::from(res.errors));
            if qp.rx.unposted() >= refill_at {
                match qp.rx.refill() {
                    Ok(true) => {
                        qp.rx.notify.kick();
                        self.counters().rx_kicks.add(1);
                        self.shared.exit.pay();
                    }
                    Ok(false) => {}
                    Err(e) => self.error = Some(e.to_string()),
                }
            }
            if !self.echo.is_empty() {
                self.xmit_echo(qp);
            }
            if res.packets + res.errors >= budget {
                qp.rx.napi_scheduled = true; // budget spent: poll again on the next pass
                return;
            }
            // napi_complete: re-enable, and poll again if entries slipped in meanwhile.
            if qp.rx.vq.enable_cb() {
                qp.rx.napi_scheduled = false;
                return;
            }
            qp.rx.vq.disable_cb();
        }
    }
}

/// Unposted RX buffers at which a poll reposts them: half of the budget or of the ring,
/// whichever is smaller, and at least one.
fn refill_at(budget: u32, ring_size: u16) -> usize {
    (budget.min(u32::from(ring_size)) / 2).max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_at_half_the_budget_or_half_a_small_ring() {
        assert_eq!(refill_at(64, 1024), 32);
        assert_eq!(refill_at(64, 16), 8);
        assert_eq!(refill_at(1, 1024), 1);
        assert_eq!(refill_at(0, 1024), 1);
    }
}
