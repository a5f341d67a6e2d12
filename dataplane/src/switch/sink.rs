//! The sink port: counts and drops every frame delivered to it.

use super::egress::Egress;
use crate::frames::FrameBatch;
use crate::metrics::{Dir, DropReason, PortStats};
use crate::offload::Cutter;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Counts and drops every frame. The frames were already copied out of guest
/// memory into a host buffer by the sending worker, as DPDK's vhost PMD copies
/// into mbufs, so a sink measures a real backend's receive cost.
#[derive(Debug)]
pub struct Sink {
    stats: Arc<PortStats>,
}

impl Sink {
    /// A sink counting into `stats`.
    pub fn new(stats: Arc<PortStats>) -> Self {
        Sink { stats }
    }
}

impl Egress for Sink {
    fn deliver(&self, frames: &FrameBatch, which: &[u16], _flow: u16) {
        let q = &self.stats.queues[0];
        if frames.has_offloads() {
            return sink_offloaded(q, frames, which);
        }
        let bytes: u64 = which
            .iter()
            .map(|&i| frames.frame_len(usize::from(i)) as u64)
            .sum();
        q.add(Dir::Rx, which.len() as u64, bytes);
    }
}

/// A sink takes no offload: a marked frame is cut and checksummed as any
/// such egress does ([`Cutter`]) into scratch space, and counted as the
/// frames it is cut into. The work is done, not just counted, so that a
/// sink still measures what a backend pays for the frames (B9's TSO stream
/// is cut here, in the sending worker, as it was at ingress before).
#[cold]
fn sink_offloaded(q: &crate::metrics::QueueStats, frames: &FrameBatch, which: &[u16]) {
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; crate::net::MAX_FRAME]);
    }
    let (mut packets, mut bytes) = (0, 0);
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        for &i in which {
            let i = usize::from(i);
            let f = frames.get(i);
            let Some(k) = frames.offloaded(i) else {
                packets += 1;
                bytes += f.len() as u64;
                continue;
            };
            match Cutter::new(f, k.offload) {
                Ok(c) => {
                    let counter = if c.segments() {
                        &q.gso_frames
                    } else {
                        &q.csum_completed
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    for s in 0..c.count() {
                        let n = c.write_vec(s, &mut scratch);
                        std::hint::black_box(&scratch[..n]);
                        packets += 1;
                        bytes += n as u64;
                    }
                }
                Err(_) => q.drop(DropReason::BadVnetHdr, 1),
            }
        }
    });
    q.add(Dir::Rx, packets, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::HostOffloads;
    use crate::offload::push_frame;

    #[test]
    fn a_sink_cuts_a_gso_frame_and_counts_its_segments() {
        use vadapt_wire::test_frames::{linux_tso4, tso_frame, LINUX_V4};
        let f = tso_frame(LINUX_V4, &[5; 10 * 1448]);
        let mut b = FrameBatch::new(4);
        push_frame(
            &linux_tso4(),
            &f,
            HostOffloads::ALL,
            crate::net::MAX_FRAME,
            &mut b,
            |_| {},
        );
        b.push(&[0u8; 60]);
        let ss = Arc::new(PortStats::new("sink", crate::metrics::PortKind::Sink, 1));
        Sink::new(ss.clone()).deliver(&b, &[0, 1], 0);
        let q = &ss.queues[0];
        assert_eq!(q.packets[1].load(Ordering::Relaxed), 11);
        assert_eq!(q.bytes[1].load(Ordering::Relaxed), 10 * 1514 + 60);
        assert_eq!(q.gso_frames.load(Ordering::Relaxed), 1);
    }
}
