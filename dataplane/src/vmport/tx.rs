//! Transmit ring service (guest → switch): pop the guest's chains, copy each
//! frame out of guest memory into a host batch, drop what is malformed, give
//! every chain back used, call the guest as it asks, and hand full batches
//! to the switch.
//!
//! No vhost-user connection or epoll here: the ring, the guest memory and
//! the switch come in as arguments, so the tests drive it from the guest's
//! side over `vadapt_virtq::mock` (feature `test-utils`).

use super::ring::Ring;
use super::ring_pass::RingPass;
use crate::frames::FrameBatch;
use crate::net::{MAX_FRAME, MIN_FRAME};
use vadapt_policy::Budget;
use vadapt_virtq::device::Chain;
use vadapt_virtq::mem::GuestMemory;

/// Frames per transmit batch handed to the switch.
pub const TX_BATCH: usize = 64;

/// A worker's transmit service: the virtio-net header length and the
/// scratch space reused by every pass (one chain, one frame batch).
#[derive(Debug)]
pub struct TxService {
    /// Length of the virtio-net header in front of every frame, bytes.
    hdr_len: usize,
    chain: Chain,
    batch: FrameBatch,
}

impl TxService {
    /// A service for frames behind a `hdr_len`-byte header, handing the
    /// switch batches of at most `batch_frames` frames.
    pub fn new(hdr_len: usize, batch_frames: usize) -> Self {
        TxService {
            hdr_len,
            chain: Chain::with_capacity(64),
            batch: FrameBatch::new(batch_frames),
        }
    }

    /// Takes up to `budget` chains from `ring`, copies their frames into the
    /// batch and hands each full batch, and the last partial one, to
    /// `forward` (which sees it only during the call). Every chain taken is
    /// given back used (length 0), published before each `forward` and at
    /// the end, each time followed by a call if the guest wants one.
    ///
    /// Drops, still completing the chain: chains with a writable descriptor,
    /// frames shorter than the header plus [`MIN_FRAME`] or longer than
    /// [`MAX_FRAME`], chains the ring rejects. A ring whose `avail.idx` ran
    /// ahead is marked broken and the pass stops.
    pub fn serve(
        &mut self,
        ring: &mut Ring,
        mem: &GuestMemory,
        budget: Budget,
        mut forward: impl FnMut(&FrameBatch),
    ) -> RingPass {
        let mut pass = RingPass {
            // Sizes are powers of two: a shift instead of a division per pass.
            fill_permille: match ring.q.avail_pending() {
                Ok(n) => ((u32::from(n) * 1000) >> ring.q.size().trailing_zeros()) as u16,
                Err(_) => 1000,
            },
            ..RingPass::default()
        };
        let hdr = self.hdr_len;
        let mut taken = 0u32;
        loop {
            if taken >= budget.packets || pass.bytes >= budget.bytes {
                pass.more_work = ring.q.avail_pending().map(|n| n > 0).unwrap_or(false);
                break;
            }
            match ring.q.pop(mem, &mut self.chain) {
                Ok(None) => break,
                Ok(Some(head)) => {
                    taken += 1;
                    let c = &self.chain;
                    let total = c.readable_len() as usize;
                    if c.has_writable() {
                        pass.drops.wrong_direction += 1;
                    } else if total < hdr + MIN_FRAME {
                        pass.drops.undersize += 1;
                    } else if total - hdr > MAX_FRAME {
                        pass.drops.oversize += 1;
                    } else {
                        let len = total - hdr;
                        let slot = self.batch.next_slot().expect("batch flushed when full");
                        c.read_into(hdr, &mut slot[..len]);
                        self.batch.commit(len);
                        pass.packets += 1;
                        pass.bytes += len as u64;
                    }
                    ring.q.push_used(head, 0);
                    if self.batch.is_full() {
                        ring.q.flush_used();
                        pass.calls += u64::from(ring.call_if_needed());
                        forward(&self.batch);
                        self.batch.clear();
                    }
                }
                Err(e) => {
                    taken += 1;
                    pass.drops.chain_errors.push(e.kind);
                    if ring.give_back_rejected(&e) {
                        pass.broke_ring = true;
                        break;
                    }
                }
            }
        }
        ring.q.flush_used();
        pass.calls += u64::from(ring.call_if_needed());
        if !self.batch.is_empty() {
            forward(&self.batch);
            self.batch.clear();
        }
        pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Dir, DropReason, QueueStats};
    use crate::net::HDR_LEN_MRG;
    use crate::vmport::ring::test_utils::{frame, ring, take_count, Guest, UNLIMITED as ALL};
    use crate::vmport::ring_pass::test_utils::dropped;
    use std::sync::atomic::Ordering;
    use vadapt_virtq::device::ChainErrorKind;
    use vadapt_virtq::mock::{buf, readable, writable, MEM_SIZE};
    use vadapt_virtq::RingFeatures;

    /// The guest transmits `frame` behind a zero header, header and frame in
    /// two descriptors as Linux virtio-net sends them, from buffer slot `slot`.
    fn send(g: &mut Guest, slot: u64, frame: &[u8]) -> u16 {
        let at = buf(slot);
        g.mem.write(at, &[0; HDR_LEN_MRG]).unwrap();
        g.mem.write(at + HDR_LEN_MRG as u64, frame).unwrap();
        let segs = [
            readable(at, HDR_LEN_MRG as u32),
            readable(at + HDR_LEN_MRG as u64, frame.len() as u32),
        ];
        let head = g.driver.add(&segs).unwrap();
        g.driver.publish();
        head
    }

    /// Serves with `budget`; returns the pass and the frames forwarded, one
    /// `Vec` per batch.
    fn serve(
        tx: &mut TxService,
        r: &mut Ring,
        g: &Guest,
        budget: Budget,
    ) -> (RingPass, Vec<Vec<Vec<u8>>>) {
        let mut batches = Vec::new();
        let pass = tx.serve(r, &g.mem, budget, |b| {
            batches.push((0..b.len()).map(|i| b.get(i).to_vec()).collect());
        });
        (pass, batches)
    }

    /// Heads the guest got back used, with the length the device wrote.
    fn used(g: &mut Guest) -> Vec<(u16, u32)> {
        std::iter::from_fn(|| g.driver.pop_used()).collect()
    }

    #[test]
    fn frames_reach_the_switch_with_their_bytes_and_lengths() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        let frames = [frame(1, MIN_FRAME), frame(2, 60), frame(3, MAX_FRAME)];
        let heads: Vec<u16> = (0..3)
            .map(|i| send(&mut g, i, &frames[i as usize]))
            .collect();
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches, vec![frames.to_vec()]);
        assert_eq!(pass.packets, 3);
        assert_eq!(pass.bytes, (MIN_FRAME + 60 + MAX_FRAME) as u64);
        assert_eq!(pass.fill_permille, 3 * 1000 / 16);
        assert!(!pass.more_work);
        assert_eq!(pass.drops, Default::default());
        let back = used(&mut g);
        assert_eq!(back, heads.iter().map(|&h| (h, 0)).collect::<Vec<_>>());
    }

    #[test]
    fn malformed_frames_are_dropped_by_reason_and_their_chains_complete() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        send(&mut g, 0, &frame(1, MIN_FRAME - 1));
        send(&mut g, 1, &frame(2, MAX_FRAME + 1));
        g.driver.add(&[readable(buf(2), 12)]).unwrap(); // header only
        g.driver
            .add(&[readable(buf(3), 100), writable(buf(4), 100)])
            .unwrap();
        g.driver.add(&[readable(MEM_SIZE - 10, 100)]).unwrap(); // outside memory
        let good = frame(6, 64);
        send(&mut g, 6, &good);
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches, vec![vec![good]]);
        assert_eq!((pass.packets, pass.bytes), (1, 64));
        assert_eq!(pass.drops.undersize, 2);
        assert_eq!(pass.drops.oversize, 1);
        assert_eq!(pass.drops.wrong_direction, 1);
        assert_eq!(
            pass.drops.chain_errors,
            vec![ChainErrorKind::AddressOutOfRange]
        );
        assert!(!pass.broke_ring);
        let st = QueueStats::default();
        pass.count_into(&st, Dir::Tx);
        assert_eq!(st.packets[Dir::Tx as usize].load(Ordering::Relaxed), 1);
        assert_eq!(st.bytes[Dir::Tx as usize].load(Ordering::Relaxed), 64);
        for (reason, n) in [
            (DropReason::Undersize, 2),
            (DropReason::Oversize, 1),
            (DropReason::WrongDirection, 1),
            (DropReason::BadAddress, 1),
        ] {
            assert_eq!(dropped(&st, reason), n, "{reason:?}");
        }
        assert_eq!(used(&mut g).len(), 6, "every chain is given back");
        assert_eq!(g.driver.num_free(), 16);
    }

    #[test]
    fn a_guest_that_runs_avail_idx_ahead_breaks_the_ring() {
        let (mut r, g) = ring(8, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        g.raw().set_avail_idx(9);
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert!(batches.is_empty());
        assert!(pass.broke_ring && r.broken);
        assert_eq!(pass.fill_permille, 1000);
        assert_eq!(
            pass.drops.chain_errors,
            vec![ChainErrorKind::AvailIndexAhead]
        );
    }

    #[test]
    fn a_full_batch_goes_to_the_switch_mid_pass() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, 2);
        let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(i, 60 + usize::from(i))).collect();
        for (i, f) in frames.iter().enumerate() {
            send(&mut g, i as u64, f);
        }
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
        assert_eq!(batches.concat(), frames);
        assert_eq!(pass.packets, 5);
        // Each batch's chains were published and called for before it left.
        assert_eq!(pass.calls, 3);
    }

    #[test]
    fn the_budget_leaves_work_for_the_next_pass() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        for i in 0..8 {
            send(&mut g, i, &frame(i as u8, 100));
        }
        let budget = Budget {
            packets: 5,
            bytes: u64::MAX,
        };
        let (pass, _) = serve(&mut tx, &mut r, &g, budget);
        assert_eq!(
            (pass.packets, pass.more_work, pass.fill_permille),
            (5, true, 500)
        );
        let bytes = Budget {
            packets: u32::MAX,
            bytes: 150,
        };
        let (pass, _) = serve(&mut tx, &mut r, &g, bytes);
        assert_eq!((pass.packets, pass.more_work), (2, true), "stops once over");
        let (pass, _) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!((pass.packets, pass.more_work), (1, false));
    }

    #[test]
    fn calls_follow_no_interrupt() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        let callfd = r.call.as_ref().unwrap().try_clone().unwrap();
        g.driver.disable_cb();
        send(&mut g, 0, &frame(0, 60));
        let (pass, _) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!((pass.packets, pass.calls), (1, 0));
        assert_eq!(take_count(&callfd), 0);
        used(&mut g);
        assert!(g.driver.enable_cb());
        send(&mut g, 1, &frame(1, 60));
        let (pass, _) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(pass.calls, 1);
        assert_eq!(take_count(&callfd), 1);
        let (pass, _) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(pass.calls, 0, "an empty pass publishes nothing");
    }

    #[test]
    fn calls_follow_used_event_with_event_idx() {
        let f = RingFeatures {
            event_idx: true,
            ..RingFeatures::default()
        };
        let (mut r, mut g) = ring(16, f);
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        let one = |g: &mut Guest, slot| {
            send(g, slot, &frame(slot as u8, 60));
        };
        one(&mut g, 0);
        let (pass, _) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(pass.calls, 1, "the first publish after start always calls");
        // The guest wants a call once used.idx passes 3 (entry 3 used).
        g.raw().set_used_event(3);
        one(&mut g, 1);
        one(&mut g, 2);
        let (pass, _) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(pass.calls, 0, "used.idx 3 has not crossed used_event 3");
        one(&mut g, 3);
        let (pass, _) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(pass.calls, 1);
        assert_eq!(take_count(r.call.as_ref().unwrap()), 2);
    }
}
