//! The NIC's transmit side: a FIFO drained at line rate.
//!
//! Workers enqueue a pass's packets as one batch; the wire drains batches in
//! order at `line_rate` (fluid within a batch). Each frame costs 24 extra
//! bytes of wire time (preamble 8 + inter-frame gap 12 + FCS 4). The queue
//! holds at most `capacity` packets; a worker takes no more from its rings
//! than fit, which is how a saturated link pushes back on the guests.

use std::collections::VecDeque;

/// Wire overhead per frame, bytes (preamble + IFG + FCS).
pub const WIRE_OVERHEAD: u64 = 24;

#[derive(Clone, Debug)]
struct Batch {
    wire_left: f64,
    wire_total: f64,
    payload: f64,
    packets: u64,
    vm: usize,
}

/// NIC transmit queue and counters.
#[derive(Clone, Debug)]
pub struct Nic {
    bytes_per_ns: f64,
    capacity: u64,
    queued_packets: u64,
    backlog_wire: f64,
    queue: VecDeque<Batch>,
    /// Payload bytes put on the wire so far, per VM (fluid).
    pub sent_payload: Vec<f64>,
}

impl Nic {
    /// A NIC of `line_rate_bps` bits/s holding `capacity` packets, for `vms` VMs.
    pub fn new(line_rate_bps: f64, capacity: u32, vms: usize) -> Nic {
        Nic {
            bytes_per_ns: line_rate_bps / 8e9,
            capacity: u64::from(capacity),
            queued_packets: 0,
            backlog_wire: 0.0,
            queue: VecDeque::new(),
            sent_payload: vec![0.0; vms],
        }
    }

    /// Packets that still fit.
    pub fn free_packets(&self) -> u64 {
        self.capacity.saturating_sub(self.queued_packets)
    }

    /// Enqueue `packets` frames, `frame_bytes` in all, carrying `payload`
    /// bytes in all.
    /// Returns the time, ns from now, at which the batch's last bit leaves.
    pub fn enqueue(&mut self, vm: usize, packets: u64, frame_bytes: u64, payload: u64) -> f64 {
        if packets == 0 {
            return 0.0;
        }
        // Workers check the room at the start of their pass and enqueue at its
        // end, so concurrent passes may overshoot `capacity` by one batch each.
        let wire = (frame_bytes + packets * WIRE_OVERHEAD) as f64;
        self.queue.push_back(Batch {
            wire_left: wire,
            wire_total: wire,
            payload: payload as f64,
            packets,
            vm,
        });
        self.queued_packets += packets;
        self.backlog_wire += wire;
        self.backlog_wire / self.bytes_per_ns
    }

    /// Time until the oldest batch has left and its room is free, ns.
    pub fn time_to_room(&self) -> f64 {
        self.queue
            .front()
            .map_or(0.0, |b| b.wire_left / self.bytes_per_ns)
    }

    /// Time until the queue is empty at line rate, ns.
    pub fn drain_time(&self) -> f64 {
        self.backlog_wire / self.bytes_per_ns
    }

    /// Let `dt` ns of wire time pass.
    pub fn advance(&mut self, dt: f64) {
        let mut budget = dt * self.bytes_per_ns;
        while budget > 0.0 {
            let Some(b) = self.queue.front_mut() else {
                break;
            };
            let take = budget.min(b.wire_left);
            b.wire_left -= take;
            budget -= take;
            self.backlog_wire -= take;
            self.sent_payload[b.vm] += b.payload * take / b.wire_total;
            if b.wire_left <= 1e-9 {
                self.queued_packets -= b.packets;
                self.queue.pop_front();
            }
        }
        if self.queue.is_empty() {
            self.backlog_wire = 0.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_rate_caps_throughput() {
        // 10 Gb/s; offer 2 s worth of 1500-byte frames in 1 s.
        let mut nic = Nic::new(10e9, 10_000_000, 1);
        let per_s = 10e9 / 8.0 / (1500.0 + 24.0);
        let offered = (2.0 * per_s) as u64;
        nic.enqueue(0, offered, offered * 1500, offered * 1446);
        nic.advance(1e9);
        let sent_gbps = nic.sent_payload[0] * 8.0 / 1e9;
        let cap = 10.0 * 1446.0 / 1524.0;
        assert!(sent_gbps <= cap + 1e-6, "{sent_gbps} > {cap}");
        assert!(sent_gbps > 0.99 * cap);
        assert!(nic.free_packets() < 10_000_000);
    }

    #[test]
    fn capacity_bounds_queue_and_frees_after_drain() {
        let mut nic = Nic::new(10e9, 100, 2);
        let t = nic.enqueue(1, 100, 100 * 64, 100 * 10);
        assert_eq!(nic.free_packets(), 0);
        nic.advance(t + 1.0);
        assert_eq!(nic.free_packets(), 100);
        assert!((nic.sent_payload[1] - 1000.0).abs() < 1e-6);
        assert_eq!(nic.sent_payload[0], 0.0);
    }
}
