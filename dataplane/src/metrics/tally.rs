//! What a queue worker counts on every pass — passes, busy cycles, and the
//! packets and bytes of each queue — added up in plain integers and
//! published to the shared atomics ([`WorkerStats`], [`QueueStats`]) every
//! [`PUBLISH_EVERY`] passes and whenever the worker is about to wait or stop.
//!
//! A locked add costs about 20 cycles on x86; a polling worker that moves a
//! few packets a pass paid five of them per pass (the pass, its cycles and
//! packets, a queue's packets and bytes), a tenth of its cycles per packet
//! at 64 B. DPDK's drivers keep such counts per queue in plain memory for
//! the same reason. A reader (`vadapt stats`, `/metrics`) sees them at most
//! [`PUBLISH_EVERY`] passes late while the worker polls — microseconds —
//! and complete once it waits.

use super::counters::{Dir, QueueStats, WorkerStats};
use std::sync::atomic::Ordering::Relaxed;

/// Passes between two publications while the worker does not wait.
pub const PUBLISH_EVERY: u32 = 64;

/// Counts of one worker not yet published.
#[derive(Debug, Default)]
pub struct PassTally {
    passes: u64,
    busy_cycles: u64,
    busy_packets: u64,
    /// Per queue pair: packets and bytes, by [`Dir`].
    queues: Vec<[[u64; 2]; 2]>,
    /// Passes since the last publication.
    since_publish: u32,
}

impl PassTally {
    /// A tally for a worker serving `pairs` queue pairs.
    pub fn new(pairs: usize) -> Self {
        PassTally {
            queues: vec![[[0; 2]; 2]; pairs],
            ..PassTally::default()
        }
    }

    /// Pair `pair` moved `packets` frames of `bytes` in direction `dir`.
    #[inline]
    pub fn moved(&mut self, pair: usize, dir: Dir, packets: u64, bytes: u64) {
        if let Some(q) = self.queues.get_mut(pair) {
            q[dir as usize][0] += packets;
            q[dir as usize][1] += bytes;
        }
    }

    /// One pass ended, which moved `packets` in `cycles` TSC cycles; returns
    /// `true` when it is time to [`publish`](Self::publish).
    #[inline]
    pub fn pass(&mut self, packets: u64, cycles: u64) -> bool {
        self.passes += 1;
        if packets > 0 {
            self.busy_packets += packets;
            self.busy_cycles += cycles;
        }
        self.since_publish += 1;
        self.since_publish >= PUBLISH_EVERY
    }

    /// Adds everything tallied to the shared counters and starts again from
    /// zero. `queues[i]` are the counters of pair `i` (pairs beyond them
    /// count in the last, as [`crate::port::VmPort`]'s do).
    pub fn publish(&mut self, worker: &WorkerStats, queues: &[QueueStats]) {
        self.since_publish = 0;
        if self.passes == 0 {
            return;
        }
        worker
            .passes
            .fetch_add(std::mem::take(&mut self.passes), Relaxed);
        if self.busy_packets > 0 {
            worker
                .busy_cycles
                .fetch_add(std::mem::take(&mut self.busy_cycles), Relaxed);
            worker
                .busy_packets
                .fetch_add(std::mem::take(&mut self.busy_packets), Relaxed);
        }
        let Some(last) = queues.len().checked_sub(1) else {
            return;
        };
        for (i, q) in self.queues.iter_mut().enumerate() {
            let stats = &queues[i.min(last)];
            for dir in [Dir::Tx, Dir::Rx] {
                let [packets, bytes] = std::mem::take(&mut q[dir as usize]);
                stats.add(dir, packets, bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(stats: &QueueStats, dir: Dir) -> (u64, u64) {
        (
            stats.packets[dir as usize].load(Relaxed),
            stats.bytes[dir as usize].load(Relaxed),
        )
    }

    #[test]
    fn nothing_is_published_before_publish_and_all_of_it_after() {
        let w = WorkerStats::new("w");
        let qs = [QueueStats::default(), QueueStats::default()];
        let mut t = PassTally::new(2);
        t.moved(0, Dir::Tx, 3, 180);
        t.moved(1, Dir::Rx, 2, 120);
        assert!(!t.pass(5, 1000));
        assert!(!t.pass(0, 77)); // an empty pass adds no busy cycles
        assert_eq!(w.passes.load(Relaxed), 0);
        assert_eq!(load(&qs[0], Dir::Tx), (0, 0));
        t.publish(&w, &qs);
        assert_eq!(w.passes.load(Relaxed), 2);
        assert_eq!(w.busy_cycles.load(Relaxed), 1000);
        assert_eq!(w.busy_packets.load(Relaxed), 5);
        assert_eq!(load(&qs[0], Dir::Tx), (3, 180));
        assert_eq!(load(&qs[1], Dir::Rx), (2, 120));
        assert_eq!(load(&qs[0], Dir::Rx), (0, 0));
        // Published once: a second publication adds nothing.
        t.publish(&w, &qs);
        assert_eq!(w.passes.load(Relaxed), 2);
        assert_eq!(load(&qs[0], Dir::Tx), (3, 180));
    }

    #[test]
    fn publication_is_due_every_publish_every_passes() {
        let w = WorkerStats::new("w");
        let qs = [QueueStats::default()];
        let mut t = PassTally::new(1);
        let due: Vec<u32> = (1..=3 * PUBLISH_EVERY)
            .filter(|_| {
                let due = t.pass(0, 0);
                if due {
                    t.publish(&w, &qs);
                }
                due
            })
            .collect();
        assert_eq!(due.len(), 3);
        assert_eq!(w.passes.load(Relaxed), u64::from(3 * PUBLISH_EVERY));
    }

    #[test]
    fn pairs_beyond_the_counters_count_in_the_last() {
        let w = WorkerStats::new("w");
        let qs = [QueueStats::default()];
        let mut t = PassTally::new(3);
        t.moved(2, Dir::Tx, 1, 60);
        t.moved(0, Dir::Tx, 1, 60);
        // A pair the tally was not made for is ignored, not a panic.
        t.moved(7, Dir::Tx, 1, 60);
        t.pass(2, 10);
        t.publish(&w, &qs);
        assert_eq!(load(&qs[0], Dir::Tx), (2, 120));
    }
}
