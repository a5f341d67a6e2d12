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
use crate::frames::{FrameBatch, Offloaded, SLOT};
use crate::net::{HostOffloads, MAX_FRAME, MAX_GSO_FRAME, MIN_FRAME};
use crate::offload::{keep, tx_offload, OffloadRefused};
use crate::policing::IngressPolicer;
use vadapt_policy::{Budget, Instant};
use vadapt_virtq::device::Chain;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::DeviceRing;
use vadapt_wire::{Offload, VnetHdr};

/// Frames per transmit batch handed to the switch.
pub const TX_BATCH: usize = 64;

/// Chains popped ahead of their copy: the descriptors of up to this many
/// frames are walked, and each frame's first bytes asked into the cache,
/// before the first of them is copied (see [`TxService::serve`]).
pub const GATHER: usize = 32;

/// Segments a gathered chain has room for before it allocates (Linux sends
/// a frame in 1–2 descriptors, a TSO frame in up to 19).
const GATHER_SEGMENTS: usize = 8;

/// A worker's transmit service: the virtio-net header format, the offloads
/// the guest may ask for, the largest frame it may send, and the scratch
/// space reused by every pass (the gathered chains, one frame batch).
#[derive(Debug)]
pub struct TxService {
    /// Length of the virtio-net header in front of every frame, bytes.
    hdr_len: usize,
    /// What the frontend negotiated: with none, headers are not even read.
    offloads: HostOffloads,
    /// Largest frame that is not a GSO frame, and largest segment of one,
    /// bytes without the virtio-net header: [`crate::net::max_frame`] of
    /// the port's MTU ([`MAX_FRAME`] by default).
    max_frame: usize,
    /// Chains popped but not yet copied, with their heads.
    gathered: Vec<(Chain, u16)>,
    batch: FrameBatch,
}

/// Publishes the used entries, calls the guest if it wants, and hands the
/// batch to the switch.
fn flush(
    ring: &mut Ring,
    batch: &mut FrameBatch,
    pass: &mut RingPass,
    forward: &mut impl FnMut(&FrameBatch),
) {
    ring.q.flush_used();
    ring.log_used();
    pass.calls += u64::from(ring.call_if_needed());
    forward(batch);
    batch.clear();
}

/// `pending` of a ring of `size` entries, permille. A split ring's size
/// is a power of two (a shift); a packed ring's may be any (a division).
fn fill_permille(pending: u16, size: u16) -> u16 {
    let n = u32::from(pending) * 1000;
    if size.is_power_of_two() {
        (n >> size.trailing_zeros()) as u16
    } else {
        (n / u32::from(size.max(1))) as u16
    }
}

impl TxService {
    /// A service for frames behind a `hdr_len`-byte header without
    /// offloads, handing the switch batches of at most `batch_frames` frames.
    pub fn new(hdr_len: usize, batch_frames: usize) -> Self {
        Self::with_offloads(hdr_len, batch_frames, HostOffloads::default())
    }

    /// As [`new`](Self::new), for a frontend that negotiated `offloads`.
    pub fn with_offloads(hdr_len: usize, batch_frames: usize, offloads: HostOffloads) -> Self {
        TxService {
            hdr_len,
            offloads,
            max_frame: MAX_FRAME,
            gathered: (0..GATHER)
                .map(|_| (Chain::with_capacity(GATHER_SEGMENTS), 0))
                .collect(),
            batch: FrameBatch::new(batch_frames),
        }
    }

    /// As it is, for a port whose frames may be up to `max_frame` bytes
    /// ([`crate::net::max_frame`] of its MTU).
    pub fn with_max_frame(mut self, max_frame: usize) -> Self {
        self.max_frame = max_frame.min(crate::net::LARGEST_FRAME);
        self
    }

    /// Takes up to `budget` chains from `ring`, copies their frames into the
    /// batch and hands each full batch, and the last partial one, to
    /// `forward` (which sees it only during the call). Every chain taken is
    /// given back used (length 0), in the order taken, published before
    /// each `forward` and at the end, each time followed by a call if the
    /// guest wants one.
    ///
    /// Chains are taken [`GATHER`] at a time: all their descriptors are
    /// walked, and each frame's first cache lines prefetched, before the
    /// first frame is copied. The guest wrote those lines from another
    /// core, so a copy right after its own walk would wait for them one
    /// frame at a time; gathered, the waits overlap (DPDK's vhost defers
    /// its small copies to the end of a burst for the same reason). The
    /// byte budget is checked on the frames gathered so far.
    ///
    /// With offloads negotiated, each frame's virtio-net header is checked
    /// ([`tx_offload`], and [`keep`]: a GSO frame must be the TCP segment it
    /// claims to be): a frame with a partial checksum or a TCP GSO frame (up
    /// to [`MAX_GSO_FRAME`], in the batch's side store) goes to the switch
    /// whole, marked with its checked offload; each egress takes it as it
    /// is or cuts it ([`crate::offload::Cutter`]). The pass counts a GSO
    /// frame as the MSS frames it stands for, as when it was cut here.
    ///
    /// A frame over a [`SLOT`] (a jumbo frame of a port with a large MTU)
    /// goes into the batch's side store, as a GSO frame does, and on as a
    /// plain frame.
    ///
    /// Drops, still completing the chain: chains with a writable descriptor,
    /// frames shorter than the header plus [`MIN_FRAME`], frames over the
    /// port's MTU (`over_mtu`: longer than `max_frame`, the first length
    /// kept for the log), GSO frames longer than [`MAX_GSO_FRAME`]
    /// (`oversize`), headers refused (`bad_vnet_hdr`, among them GSO frames
    /// whose segments would be over the MTU; the first refusal kept for the
    /// log), chains the ring rejects. A ring whose `avail.idx` ran ahead is marked broken and the
    /// pass stops.
    pub fn serve(
        &mut self,
        ring: &mut Ring,
        mem: &GuestMemory,
        budget: Budget,
        forward: impl FnMut(&FrameBatch),
    ) -> RingPass {
        self.serve_policed(ring, mem, budget, None, forward)
    }

    /// As [`serve`](Self::serve), with the port's ingress policer (refilled
    /// by the caller for this pass): a frame that passed every check above
    /// and does not conform to it, even after a refill to the policing's
    /// `now` ([`IngressPolicer::admit_or_refill`]), is dropped (`policed`)
    /// before it is copied, its chain completed as every dropped one's is.
    /// `None`: no limit, one branch a frame.
    pub fn serve_policed(
        &mut self,
        ring: &mut Ring,
        mem: &GuestMemory,
        budget: Budget,
        mut policer: Option<Policing<'_>>,
        mut forward: impl FnMut(&FrameBatch),
    ) -> RingPass {
        let mut pass = RingPass {
            fill_permille: match ring.q.avail_pending() {
                Ok(n) => fill_permille(n, ring.q.size()),
                Err(_) => 1000,
            },
            ..RingPass::default()
        };
        let hdr = self.hdr_len;
        let mut taken = 0u32;
        loop {
            // Gather.
            let (mut n, mut gathered_bytes) = (0, 0u64);
            let mut over_budget = false;
            let mut rejected = None;
            while n < GATHER {
                if taken >= budget.packets || pass.bytes + gathered_bytes >= budget.bytes {
                    over_budget = true;
                    break;
                }
                let (chain, head) = &mut self.gathered[n];
                match ring.q.pop(mem, chain) {
                    Ok(None) => break,
                    Ok(Some(h)) => {
                        taken += 1;
                        *head = h;
                        chain.prefetch_readable(hdr);
                        gathered_bytes +=
                            u64::from(chain.readable_len()).saturating_sub(hdr as u64);
                        n += 1;
                    }
                    Err(e) => {
                        taken += 1;
                        rejected = Some(e);
                        break;
                    }
                }
            }
            // Copy, in the order taken.
            let mut out = Out {
                ring: &mut *ring,
                batch: &mut self.batch,
                pass: &mut pass,
                forward: &mut forward,
                policer: policer.as_mut(),
            };
            let batched = out.ring.q.batches_used_in_order();
            for (chain, head) in &self.gathered[..n] {
                out.take(chain, hdr, self.offloads, self.max_frame);
                if !batched {
                    out.ring.q.push_used(*head, 0);
                }
                if out.batch.is_full() {
                    out.flush();
                }
            }
            if let Some(&(_, last)) = self.gathered[..n].last().filter(|_| batched) {
                // Every frame is copied out: one used descriptor for all.
                ring.q.push_used_batch_in_order(last, n as u16);
            }
            // A rejected chain is given back after the chains before it, so
            // that used entries stay in the order taken (IN_ORDER).
            if let Some(e) = rejected {
                pass.drops.chain_errors.push(e.kind);
                if ring.give_back_rejected(&e) {
                    pass.broke_ring = true;
                    break;
                }
                continue;
            }
            if over_budget {
                pass.more_work = ring.q.avail_pending().map(|n| n > 0).unwrap_or(false);
                break;
            }
            if n < GATHER {
                break; // the ring is empty
            }
        }
        ring.q.flush_used();
        ring.log_used();
        pass.calls += u64::from(ring.call_if_needed());
        if !self.batch.is_empty() {
            forward(&self.batch);
            self.batch.clear();
        }
        pass
    }
}

/// Where one pass puts what it copies: the ring (for publishing), the
/// batch, the pass's counts and the switch; what it is policed by.
struct Out<'a, 'p, F: FnMut(&FrameBatch)> {
    ring: &'a mut Ring,
    batch: &'a mut FrameBatch,
    pass: &'a mut RingPass,
    forward: &'a mut F,
    policer: Option<&'a mut Policing<'p>>,
}

/// A port's ingress policer as a pass applies it, with the worker's clock
/// for a refill when a frame is short of tokens.
pub struct Policing<'a> {
    /// The policer, refilled by the caller at the start of the pass.
    pub policer: &'a mut IngressPolicer,
    /// The worker's clock (read only when a frame is short of tokens).
    pub now: &'a mut dyn FnMut() -> Instant,
}

impl std::fmt::Debug for Policing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policing")
            .field("policer", &self.policer)
            .finish_non_exhaustive()
    }
}

impl<F: FnMut(&FrameBatch)> Out<'_, '_, F> {
    fn flush(&mut self) {
        flush(self.ring, self.batch, self.pass, self.forward);
    }

    /// Copies the frame of chain `c` (behind a `hdr`-byte header) into the
    /// batch, its offload checked and kept, or counts its drop.
    fn take(&mut self, c: &Chain, hdr: usize, offloads: HostOffloads, max_frame: usize) {
        let total = c.readable_len() as usize;
        if c.has_writable() {
            self.pass.drops.wrong_direction += 1;
            return;
        }
        if total < hdr + MIN_FRAME {
            self.pass.drops.undersize += 1;
            return;
        }
        let len = total - hdr;
        let offload = if offloads.any() {
            let mut b = [0u8; VnetHdr::LEN];
            c.read_into(0, &mut b);
            let vnet = VnetHdr::read(&b).expect("VnetHdr::LEN bytes");
            if vnet.is_plain() {
                Ok(Offload::None)
            } else {
                tx_offload(&vnet, len, offloads)
            }
        } else {
            Ok(Offload::None)
        };
        let is_gso = matches!(offload, Ok(Offload::Tcp(..)));
        match offload {
            Err(e) => refuse(self.pass, e),
            Ok(_) if is_gso && len > MAX_GSO_FRAME => self.pass.drops.oversize += 1,
            Ok(_) if !is_gso && len > max_frame => {
                self.pass.drops.over_mtu += 1;
                self.pass.drops.first_over_mtu.get_or_insert(len);
            }
            // Policed after the checks, so that only a frame that would go
            // on is charged, and before the copy, so that one dropped costs
            // no copy.
            Ok(_)
                if !self
                    .policer
                    .as_mut()
                    .is_none_or(|p| p.policer.admit_or_refill(len, &mut *p.now)) =>
            {
                self.pass.drops.policed += 1
            }
            Ok(offload @ Offload::Tcp(..)) => self.take_large(c, hdr, len, offload, max_frame),
            Ok(offload) if len > SLOT => self.take_large(c, hdr, len, offload, max_frame),
            Ok(Offload::None) => {
                let slot = self.batch.next_slot().expect("batch flushed when full");
                c.read_into(hdr, &mut slot[..len]);
                self.batch.commit(len);
                self.pass.packets += 1;
                self.pass.bytes += len as u64;
            }
            Ok(offload) => {
                let slot = self.batch.next_slot().expect("batch flushed when full");
                let frame = &mut slot[..len];
                c.read_into(hdr, frame);
                match keep(frame, offload, max_frame) {
                    Err(e) => refuse(self.pass, OffloadRefused::Segment(e)),
                    Ok(kept) => {
                        self.batch.commit_offloaded(len, kept);
                        self.pass.packets += 1;
                        self.pass.bytes += len as u64;
                    }
                }
            }
        }
    }

    /// Copies a frame that does not fit a slot (a GSO frame, a jumbo
    /// frame) into the batch's side store, flushing the batch first if the
    /// store is full; a GSO frame counts as the frames it stands for.
    fn take_large(
        &mut self,
        c: &Chain,
        hdr: usize,
        len: usize,
        offload: Offload,
        max_frame: usize,
    ) {
        if self.batch.next_large(len).is_none() {
            self.flush();
        }
        // Flushed, the side store holds at least one largest frame.
        let frame = self.batch.next_large(len).expect("an empty batch has room");
        c.read_into(hdr, frame);
        let kept = match offload {
            Offload::None => Ok(Offloaded::plain(len)),
            offload => keep(frame, offload, max_frame),
        };
        match kept {
            Err(e) => refuse(self.pass, OffloadRefused::Segment(e)),
            Ok(kept) => {
                self.batch.commit_large(kept);
                self.pass.packets += u64::from(kept.cut_frames);
                self.pass.bytes += u64::from(kept.cut_bytes);
            }
        }
    }
}

/// Counts a refused header; the first of the pass is kept for the log line.
fn refuse(pass: &mut RingPass, e: OffloadRefused) {
    pass.drops.bad_vnet_hdr += 1;
    pass.drops.first_bad_vnet_hdr.get_or_insert(e);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Dir, DropReason, QueueStats};
    use crate::offload::egress::cut_all;
    use crate::queue::ring::test_utils::{frame, ring, take_count, Guest, UNLIMITED as ALL};
    use crate::queue::ring_pass::test_utils::dropped;
    use std::sync::atomic::Ordering;
    use vadapt_virtq::device::ChainErrorKind;
    use vadapt_virtq::mock::{buf, readable, writable, MEM_SIZE};
    use vadapt_virtq::RingFeatures;
    use vadapt_wire::test_frames::{check_segments, tso_frame, Shape, LINUX_V4};
    use vadapt_wire::vnet_hdr::{F_NEEDS_CSUM, GSO_NONE, GSO_TCPV4, GSO_TCPV6, HDR_LEN_MRG};

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

    /// The guest transmits `frame` behind the header `vnet`, header and
    /// frame in two descriptors, the frame at buffer slot `slot` (a GSO frame
    /// spans many slots: the caller leaves them free).
    fn send_with(g: &mut Guest, slot: u64, vnet: &VnetHdr, frame: &[u8]) -> u16 {
        let at = buf(slot);
        let mut h = [0u8; HDR_LEN_MRG];
        h[..VnetHdr::LEN].copy_from_slice(&vnet.to_bytes());
        g.mem.write(at, &h).unwrap();
        g.mem.write(at + HDR_LEN_MRG as u64, frame).unwrap();
        let segs = [
            readable(at, HDR_LEN_MRG as u32),
            readable(at + HDR_LEN_MRG as u64, frame.len() as u32),
        ];
        let head = g.driver.add(&segs).unwrap();
        g.driver.publish();
        head
    }

    /// The header Linux's virtio-net driver writes for `frame`, a TCP segment
    /// of `shape` behind plain Ethernet, with its pseudo-header sum left in
    /// the checksum field.
    fn linux_hdr(shape: Shape, gso_type: u8, mss: u16) -> VnetHdr {
        let l4 = 14 + if shape.ipv6 { 40 } else { 20 };
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type,
            hdr_len: (l4 + 20 + shape.options) as u16,
            gso_size: mss,
            csum_start: l4 as u16,
            csum_offset: 16,
        }
    }

    #[test]
    fn a_tso_frame_goes_to_the_switch_whole_and_marked() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::with_offloads(HDR_LEN_MRG, 8, HostOffloads::ALL);
        let payload: Vec<u8> = (0..45 * 1448).map(|i| (i % 253) as u8).collect();
        let f = tso_frame(LINUX_V4, &payload);
        assert!(f.len() > MAX_FRAME);
        let h = linux_hdr(LINUX_V4, GSO_TCPV4, 1448);
        let head = send_with(&mut g, 0, &h, &f);
        let small = frame(1, 60);
        send_with(&mut g, 40, &VnetHdr::default(), &small);
        let mut got = Vec::new();
        let pass = tx.serve(&mut r, &g.mem, ALL, |b| {
            assert!(b.has_offloads());
            assert_eq!(b.get(0), &f[..], "the GSO frame, whole");
            assert_eq!(b.get(1), &small[..]);
            assert_eq!(b.offloaded(1), None, "a plain frame carries nothing");
            let k = b.offloaded(0).expect("marked");
            assert_eq!(k.hdr, h, "Linux's header, checked and rebuilt");
            got = cut_all(b);
        });
        assert_eq!(
            (pass.packets, pass.bytes),
            (46, 45 * 1514 + 60),
            "counted as the frames it stands for"
        );
        assert_eq!(pass.drops, Default::default());
        assert_eq!(got.len(), 46);
        assert!(got[..45].iter().all(|s| s.len() == 1514));
        assert_eq!(check_segments(&got[..45], LINUX_V4, 1448), payload);
        assert_eq!(used(&mut g)[0], (head, 0));
    }

    #[test]
    fn frames_over_the_policer_are_dropped_uncopied_and_their_chains_completed() {
        use crate::config::PortLimits;
        let (mut r, mut g) = ring(32, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        // 1 kpps with a burst of 1 kpkts, charged by the frame: the first
        // 1000 frames pass at one instant, then none.
        let limits = PortLimits {
            ingress_policing_kpkts_rate: 1,
            ingress_policing_kpkts_burst: 1,
            ..PortLimits::NONE
        };
        let mut policer = IngressPolicer::new(&limits, vadapt_policy::Instant(0)).unwrap();
        let mut passed = 0;
        for round in 0..100 {
            let heads: Vec<u16> = (0..12)
                .map(|i| send(&mut g, i, &frame(i as u8, 60)))
                .collect();
            // A frame the checks drop is not charged: it is undersize first.
            send(&mut g, 12, &frame(0, MIN_FRAME - 1));
            let mut got = 0;
            // The clock stands still: the burst is all there is.
            let mut now = || vadapt_policy::Instant(0);
            let policing = Policing {
                policer: &mut policer,
                now: &mut now,
            };
            let pass = tx.serve_policed(&mut r, &g.mem, ALL, Some(policing), |b| got += b.len());
            passed += got as u64;
            assert_eq!(pass.packets, got as u64);
            assert_eq!(pass.drops.policed, 12 - got as u64, "round {round}");
            assert_eq!(pass.drops.undersize, 1);
            let back = used(&mut g);
            assert_eq!(back.len(), 13, "every chain given back, round {round}");
            assert_eq!(
                back[..12],
                heads.iter().map(|&h| (h, 0)).collect::<Vec<_>>()[..]
            );
        }
        assert_eq!(passed, 1000);
        // The counters get the reason.
        let st = QueueStats::default();
        let mut pass = RingPass::default();
        pass.drops.policed = 3;
        pass.count_into(&st, Dir::Tx);
        assert_eq!(dropped(&st, DropReason::Policed), 3);
        // Time passes: a second earns 1000 frames again.
        // Time passes: a second earns 1000 frames again, refilled by the
        // pass itself when the first frame is short of tokens.
        send(&mut g, 0, &frame(1, 60));
        let mut now = || vadapt_policy::Instant(1_000_000_000);
        let policing = Policing {
            policer: &mut policer,
            now: &mut now,
        };
        let pass = tx.serve_policed(&mut r, &g.mem, ALL, Some(policing), |_| {});
        assert_eq!((pass.packets, pass.drops.policed), (1, 0));
    }

    #[test]
    fn gso_frames_beyond_the_side_store_flush_the_batch() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        // 8 slots: a side store of one largest GSO frame.
        let mut tx = TxService::with_offloads(HDR_LEN_MRG, 8, HostOffloads::ALL);
        let f = tso_frame(LINUX_V4, &[9; 40_000]);
        let h = linux_hdr(LINUX_V4, GSO_TCPV4, 1448);
        for i in 0..3 {
            send_with(&mut g, 30 * i, &h, &f);
        }
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(pass.packets, 3 * 28);
        assert_eq!(batches, vec![vec![f.clone()], vec![f.clone()], vec![f]]);
    }

    #[test]
    fn a_partial_checksum_is_kept_for_the_egress() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::with_offloads(
            HDR_LEN_MRG,
            TX_BATCH,
            HostOffloads {
                csum: true,
                ..HostOffloads::default()
            },
        );
        let shape = Shape {
            ipv6: true,
            ..LINUX_V4
        };
        let f = tso_frame(shape, b"small write");
        let h = linux_hdr(shape, GSO_NONE, 0);
        send_with(&mut g, 0, &h, &f);
        let mut got = Vec::new();
        let pass = tx.serve(&mut r, &g.mem, ALL, |b| {
            assert_eq!(b.get(0), &f[..], "partial, as the guest left it");
            let k = b.offloaded(0).expect("marked");
            assert_eq!(k.hdr, VnetHdr { hdr_len: 0, ..h });
            got = cut_all(b);
        });
        assert_eq!(pass.packets, 1);
        assert_ne!(got[0], f, "completed when cut");
        assert_eq!(check_segments(&got, shape, 1448), b"small write");
    }

    #[test]
    fn refused_headers_are_counted_drops_and_their_chains_complete() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let no_v6 = HostOffloads {
            tso6: false,
            ..HostOffloads::ALL
        };
        let mut tx = TxService::with_offloads(HDR_LEN_MRG, TX_BATCH, no_v6);
        let f = tso_frame(LINUX_V4, &[7; 3000]);
        let good = linux_hdr(LINUX_V4, GSO_TCPV4, 1448);
        let beyond = VnetHdr {
            csum_start: 3050, // field at 3066..3068, the frame is 3066 bytes
            ..good
        };
        send_with(&mut g, 0, &beyond, &f);
        send_with(
            &mut g,
            3,
            &VnetHdr {
                gso_size: 0,
                ..good
            },
            &f,
        );
        let v6 = tso_frame(
            Shape {
                ipv6: true,
                ..LINUX_V4
            },
            &[7; 3000],
        );
        send_with(
            &mut g,
            6,
            &VnetHdr {
                gso_type: GSO_TCPV6,
                ..good
            },
            &v6,
        );
        let mut udp = f.clone();
        udp[14 + 9] = 17;
        send_with(&mut g, 9, &good, &udp);
        send_with(&mut g, 12, &VnetHdr::default(), &frame(1, 60));
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches, vec![vec![frame(1, 60)]]);
        assert_eq!(pass.drops.bad_vnet_hdr, 4);
        assert!(matches!(
            pass.drops.first_bad_vnet_hdr,
            Some(OffloadRefused::Header(
                vadapt_wire::VnetHdrError::ChecksumBeyondFrame { .. }
            ))
        ));
        let st = QueueStats::default();
        pass.count_into(&st, Dir::Tx);
        assert_eq!(dropped(&st, DropReason::BadVnetHdr), 4);
        assert_eq!(used(&mut g).len(), 5, "every chain is given back");
    }

    #[test]
    fn without_offloads_the_header_is_not_read() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        let junk = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: 0x7f,
            hdr_len: u16::MAX,
            gso_size: 0,
            csum_start: u16::MAX,
            csum_offset: u16::MAX,
        };
        send_with(&mut g, 0, &junk, &frame(2, 100));
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches, vec![vec![frame(2, 100)]]);
        assert_eq!(pass.drops, Default::default());
    }

    #[test]
    fn a_gso_frame_beyond_64_kib_is_oversize() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::with_offloads(HDR_LEN_MRG, TX_BATCH, HostOffloads::ALL);
        let f = vec![0u8; MAX_GSO_FRAME + 1];
        send_with(&mut g, 0, &linux_hdr(LINUX_V4, GSO_TCPV4, 1448), &f);
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert!(batches.is_empty());
        assert_eq!(pass.drops.oversize, 1);
    }

    #[test]
    fn a_port_with_a_jumbo_mtu_takes_frames_up_to_it_and_drops_the_rest() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut tx = TxService::new(HDR_LEN_MRG, 4).with_max_frame(crate::net::max_frame(9000));
        let jumbo = frame(1, 9018);
        let over = frame(2, 9019);
        let small = frame(3, 60);
        let mid = frame(4, 4000);
        // Frames a few 2 KiB buffer slots apart: a jumbo one spans 5.
        send(&mut g, 0, &jumbo);
        send(&mut g, 5, &over);
        send(&mut g, 10, &small);
        send(&mut g, 11, &mid);
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches, vec![vec![jumbo, small, mid]]);
        assert_eq!((pass.packets, pass.bytes), (3, 9018 + 60 + 4000));
        assert_eq!(
            (pass.drops.over_mtu, pass.drops.first_over_mtu),
            (1, Some(9019))
        );
        assert_eq!(pass.drops.oversize, 0);
        assert_eq!(used(&mut g).len(), 4, "every chain is given back");
    }

    #[test]
    fn jumbo_frames_fill_the_side_store_and_flush_the_batch() {
        let (mut r, mut g) = ring(64, RingFeatures::default());
        // 4 slots: a side store of one largest GSO frame, 7 jumbo frames.
        let mut tx = TxService::new(HDR_LEN_MRG, 4).with_max_frame(crate::net::max_frame(9000));
        let frames: Vec<Vec<u8>> = (0..10).map(|i| frame(i, 9014)).collect();
        for (i, f) in frames.iter().enumerate() {
            send(&mut g, 5 * i as u64, f);
        }
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches.concat(), frames, "all of them, in order");
        assert!(batches.len() > 1);
        assert_eq!((pass.packets, pass.bytes), (10, 10 * 9014));
        assert_eq!(pass.drops, Default::default());
    }

    #[test]
    fn a_gso_frame_whose_segments_are_over_the_mtu_is_refused() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let f = tso_frame(LINUX_V4, &[7; 20_000]);
        // MSS 8948: 9014-byte segments, for a 9000-byte MTU only.
        let h = linux_hdr(LINUX_V4, GSO_TCPV4, 8948);
        let mut tx = TxService::with_offloads(HDR_LEN_MRG, TX_BATCH, HostOffloads::ALL);
        send_with(&mut g, 0, &h, &f);
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert!(batches.is_empty());
        assert_eq!(pass.drops.bad_vnet_hdr, 1, "a 1500-byte port refuses it");
        let mut tx = TxService::with_offloads(HDR_LEN_MRG, TX_BATCH, HostOffloads::ALL)
            .with_max_frame(crate::net::max_frame(9000));
        send_with(&mut g, 10, &h, &f);
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches, vec![vec![f]]);
        assert_eq!(
            pass.packets, 3,
            "cut into 8948 + 8948 + 2104 bytes of payload"
        );
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
        assert_eq!(pass.drops.over_mtu, 1);
        assert_eq!(pass.drops.first_over_mtu, Some(MAX_FRAME + 1));
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
            (DropReason::OverMtu, 1),
            (DropReason::WrongDirection, 1),
            (DropReason::BadAddress, 1),
        ] {
            assert_eq!(dropped(&st, reason), n, "{reason:?}");
        }
        assert_eq!(used(&mut g).len(), 6, "every chain is given back");
        assert_eq!(g.driver.num_free(), 16);
    }

    #[test]
    fn chains_go_back_in_the_order_taken_around_a_rejected_one() {
        let f = RingFeatures {
            in_order: true,
            ..RingFeatures::default()
        };
        let (mut r, mut g) = ring(128, f);
        let mut tx = TxService::new(HDR_LEN_MRG, TX_BATCH);
        let mut heads = Vec::new();
        let mut frames = Vec::new();
        // More than one gather's worth, with a chain the ring rejects in
        // the middle of the second.
        for i in 0..(GATHER + 8) as u64 {
            if i == GATHER as u64 + 3 {
                heads.push(g.driver.add(&[readable(MEM_SIZE - 10, 100)]).unwrap());
                continue;
            }
            let f = frame(i as u8, 60);
            heads.push(send(&mut g, i, &f));
            frames.push(f);
        }
        let (pass, batches) = serve(&mut tx, &mut r, &g, ALL);
        assert_eq!(batches.concat(), frames);
        assert_eq!(pass.packets, frames.len() as u64);
        assert_eq!(
            pass.drops.chain_errors,
            vec![ChainErrorKind::AddressOutOfRange]
        );
        let back: Vec<u16> = used(&mut g).into_iter().map(|(h, _)| h).collect();
        assert_eq!(
            back, heads,
            "used entries in the order the chains were made available"
        );
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
