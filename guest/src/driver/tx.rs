//! TX as Linux's `start_xmit` with `napi_tx` off: free completed buffers, add a batch, publish,
//! stop the queue when the ring runs low, kick when the device asks for one; restart a stopped
//! queue on the completion call; and the drain at the end of a run.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::queue::QueuePair;
use super::{lock, Added, Driver, Stack};

/// How long the end-of-run drain waits for the backend to consume what was posted (ns).
const DRAIN_TIMEOUT_NS: u64 = 1_000_000_000;

/// What one batch of adds put on the ring.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Batch {
    /// Buffers added.
    buffers: u32,
    /// Ethernet bytes (headers + payload).
    frame_bytes: u64,
    /// Application payload bytes.
    payload_bytes: u64,
    /// Application messages completed.
    messages: u64,
}

impl Batch {
    /// Counts one buffer that went on the ring.
    fn add(&mut self, frame_bytes: u64, payload_bytes: u64, messages: u64) {
        self.buffers += 1;
        self.frame_bytes += frame_bytes;
        self.payload_bytes += payload_bytes;
        self.messages += messages;
    }
}

impl Driver {
    /// Adds up to `want` buffers from `stack` (publishing and deciding on a kick every
    /// `tx_batch` buffers); stops the queue when the ring runs low. Returns buffers sent.
    pub(crate) fn xmit(&mut self, qp: &mut QueuePair, want: u32, stack: &mut impl Stack) -> u32 {
        qp.tx.reap();
        // One clock read per call, not per packet: in a VM `clock_gettime` took 60 % of the
        // guest's time at one read per packet (perf). A request is sent alone, so its stamp
        // is exact; stream packets of one burst share a stamp.
        let now = self.shared.clock.now_ns();
        let mut sent = 0;
        let mut nothing_queued = false;
        while sent < want && !qp.tx.stopped && !nothing_queued {
            let batch = u32::from(self.shared.tx_batch).min(want - sent);
            let mut b = Batch::default();
            let mut ring_full = false;
            for _ in 0..batch {
                match stack.add_next(&mut qp.tx, now) {
                    Ok(Added::Buffer {
                        frame_bytes,
                        payload_bytes,
                        messages,
                    }) => b.add(frame_bytes, payload_bytes, messages),
                    Ok(Added::RingFull) => {
                        ring_full = true;
                        break;
                    }
                    Ok(Added::NothingQueued) => {
                        nothing_queued = true;
                        break;
                    }
                    Err(e) => {
                        self.error = Some(e.to_string());
                        break;
                    }
                }
            }
            let kick = if b.buffers > 0 {
                qp.tx.publish()
            } else {
                false
            };
            sent += b.buffers;
            let c = self.counters();
            c.sent_packets.add(u64::from(b.buffers));
            c.sent_bytes.add(b.frame_bytes);
            c.sent_payload_bytes.add(b.payload_bytes);
            c.sent_messages.add(b.messages);
            if qp.tx.num_free() < self.stop_threshold || ring_full {
                self.stop_queue(qp);
            }
            // Linux kicks after the stop check, and always when the queue stopped.
            if kick {
                self.kick_tx(qp);
            }
            if self.error.is_some() {
                break;
            }
        }
        sent
    }

    /// Sends the replies collected by the current NAPI poll, with one publish and kick
    /// decision for the lot (as a NAPI poll's transmissions share `xmit_more`). Replies that
    /// find the queue stopped are dropped and counted, as a full qdisc would drop them.
    pub(super) fn xmit_echo(&mut self, qp: &mut QueuePair) {
        qp.tx.reap();
        let mut added = 0u64;
        let mut dropped = 0u64;
        for (dst, stamp) in std::mem::take(&mut self.echo) {
            if qp.tx.stopped {
                dropped += 1;
                continue;
            }
            match qp.tx.add(stamp, Some(dst)) {
                Ok(true) => added += 1,
                Ok(false) => {
                    dropped += 1;
                    self.stop_queue(qp);
                }
                Err(e) => {
                    self.error = Some(e.to_string());
                    break;
                }
            }
        }
        let c = self.counters();
        c.sent_packets.add(added);
        c.sent_bytes.add(added * self.shared.frame_len);
        c.sent_messages.add(added);
        c.sent_payload_bytes
            .add(added * u64::from(self.shared.size));
        c.tx_dropped.add(dropped);
        if added == 0 {
            return;
        }
        let kick = qp.tx.publish();
        if !qp.tx.stopped && qp.tx.num_free() < self.stop_threshold {
            self.stop_queue(qp);
        }
        if kick {
            self.kick_tx(qp);
        }
    }

    /// Kicks the TX queue: counted, and the exit paid.
    fn kick_tx(&self, qp: &QueuePair) {
        qp.tx.notify.kick();
        self.counters().tx_kicks.add(1);
        self.shared.exit.pay();
    }

    /// `netif_stop_subqueue` + `virtqueue_enable_cb_delayed`, as `start_xmit` does.
    fn stop_queue(&mut self, qp: &mut QueuePair) {
        qp.tx.stopped = true;
        self.counters().ring_full_stalls.add(1);
        if !qp.tx.vq.enable_cb_delayed() {
            // Completions already past the event point: free them and maybe restart at once.
            qp.tx.reap();
            if qp.tx.num_free() >= self.stop_threshold {
                qp.tx.stopped = false;
                qp.tx.vq.disable_cb();
            }
        }
    }

    /// Takes the TX completion call, if it came (counted, the exit paid), and restarts a
    /// stopped queue on it, as `skb_xmit_done`; with no call, restarts it past `timeout_at`
    /// (ns) only if the call is owed and room came free.
    pub(super) fn take_tx_call(&mut self, qp: &mut QueuePair, timeout_at: u64) {
        let calls = qp.tx.notify.take_calls();
        if calls > 0 {
            let c = self.counters();
            c.tx_calls.add(1);
            c.call_signals.add(calls);
            self.shared.exit.pay();
        }
        if !qp.tx.stopped {
            return; // another thread on this pair restarted it
        }
        if calls > 0 {
            // skb_xmit_done: callbacks off, queue woken; start_xmit frees the rest.
            qp.tx.vq.disable_cb();
            qp.tx.reap();
            qp.tx.stopped = false;
        } else if self.shared.clock.now_ns() >= timeout_at && qp.tx.vq.call_owed() {
            // The backend used buffers past the point we asked to be called at, and did not
            // call. (If it has not got there yet, it is slow, not silent: keep waiting for the
            // call, as Linux does; 64 KiB TSO segments on a 1024-entry ring take longer than
            // the timeout to consume.)
            qp.tx.reap();
            if qp.tx.num_free() >= self.stop_threshold {
                qp.tx.vq.disable_cb();
                qp.tx.stopped = false;
                self.counters().tx_wake_timeouts.add(1);
            }
        }
    }

    /// Waits (bounded) until the backend consumed everything posted, so that counts taken
    /// after the run agree on both sides.
    pub(crate) fn drain(&mut self) {
        let start = self.shared.clock.now_ns();
        let pair = Arc::clone(&self.pair);
        loop {
            {
                let mut qp = lock(&pair);
                qp.tx.reap();
                if qp.tx.in_flight() == 0 {
                    return;
                }
            }
            if self.shared.abort.load(Ordering::Relaxed)
                || self.shared.clock.now_ns() - start > DRAIN_TIMEOUT_NS
            {
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_counts_buffers_bytes_and_messages() {
        let mut b = Batch::default();
        b.add(1514, 1500, 1);
        b.add(54, 0, 0);
        assert_eq!(
            b,
            Batch {
                buffers: 2,
                frame_bytes: 1568,
                payload_bytes: 1500,
                messages: 1,
            }
        );
    }
}
