//! Receive ring service (switch → guest): take the frames other ports left
//! in a queue pair's [`Backlog`], write each behind a virtio-net header into
//! the guest's receive buffers — over several buffers with
//! `VIRTIO_NET_F_MRG_RXBUF` — give the buffers back used, and call the guest
//! as it asks.
//!
//! A frame that kept its sender's offload (a partial checksum, a TCP
//! segment of up to 64 KiB) goes whole to a guest that takes it, behind
//! the sender's checked header, as Linux's virtio-net expects from
//! vhost-net; to any other guest it goes cut and checksummed. Only such
//! frames take that path: a plain frame costs what it did before.
//!
//! No vhost-user connection or epoll here: the ring, the guest memory and
//! the backlog come in as arguments, so the tests drive it from the guest's
//! side over `vadapt_virtq::mock` (feature `test-utils`).

use super::ring::Ring;
use super::ring_pass::RingPass;
use crate::frames::{Backlog, FrameBatch};
use crate::net::{GuestOffloads, MAX_FRAME};
use crate::offload::{Cutter, OffloadRefused};
use vadapt_policy::Budget;
use vadapt_virtq::device::Chain;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::DeviceRing;
use vadapt_wire::vnet_hdr::{HDR_LEN_MRG, HDR_NUM_BUFFERS_OFFSET};
use vadapt_wire::{Offload, VnetHdr};

/// Most buffers one received frame may be merged over (MRG_RXBUF): a
/// 64 KiB GSO frame in Linux's smallest mergeable buffers (1518 bytes and
/// the header) takes 44.
pub const MAX_MERGE: usize = 64;

/// Frames a worker took out of one queue pair's [`Backlog`] and has not
/// delivered yet: the backlog is swapped out whole, under its lock, and
/// delivered from here over as many passes as the guest's buffers need.
///
/// This is how a port pushes back on the switch: while frames wait here
/// the backlog fills again, and only what overflows the backlog is dropped
/// (counted at the sender's [`crate::switch::Egress::deliver`]). The
/// uplink's transmit side uses it the same way, its TX ring's free slots
/// standing for the guest's buffers ([`crate::uplink::worker`]).
#[derive(Debug)]
pub struct RxPending {
    frames: FrameBatch,
    /// Index in `frames` of the next frame to deliver.
    next: usize,
    /// When that frame is being cut: its next segment (0: none delivered).
    cut_next: usize,
    /// Buffers the next frame needs before another try is worth a pass
    /// (0: any one): set when a whole frame ran out of buffers.
    need_buffers: u16,
}

impl RxPending {
    /// Room for a swap with `backlog` (the same capacity).
    pub fn for_backlog(backlog: &Backlog) -> Self {
        RxPending {
            frames: FrameBatch::new(backlog.capacity()),
            next: 0,
            cut_next: 0,
            need_buffers: 0,
        }
    }

    /// Frames taken from the backlog and not yet delivered.
    pub fn remaining(&self) -> usize {
        self.frames.len() - self.next
    }

    /// `true` if frames wait for the guest's buffers, here or still in
    /// `backlog`.
    pub fn frames_waiting(&self, backlog: &Backlog) -> bool {
        self.remaining() > 0 || backlog.has_frames()
    }

    /// `None` if no frame waits (here or in `backlog`), else how many
    /// receive buffers the guest must have posted for the next pass to move
    /// one: 1, or more for a whole frame that ran out of them (so that a
    /// worker waits for a kick rather than polling buffers it cannot use).
    pub fn buffers_wanted(&self, backlog: &Backlog) -> Option<u16> {
        self.frames_waiting(backlog)
            .then_some(self.need_buffers.max(1))
    }

    /// The frames taken, delivered or not.
    pub(crate) fn frames(&self) -> &FrameBatch {
        &self.frames
    }

    /// Where delivery stands: the next frame of [`RxPending::frames`], and
    /// its next segment when it is being cut (0: none delivered yet).
    pub(crate) fn cursor(&self) -> (usize, usize) {
        (self.next, self.cut_next)
    }

    /// Delivery has gone on to frame `next`, segment `cut_next`.
    pub(crate) fn set_cursor(&mut self, next: usize, cut_next: usize) {
        debug_assert!(next <= self.frames.len());
        self.next = next;
        self.cut_next = cut_next;
    }

    /// When everything taken was delivered, takes what `backlog` holds now.
    pub(crate) fn refill(&mut self, backlog: &Backlog) {
        if self.remaining() == 0 {
            self.frames.clear();
            self.next = 0;
            self.cut_next = 0;
            backlog.take_into(&mut self.frames);
        }
    }

    /// Forgets every undelivered frame; returns how many.
    pub(crate) fn discard(&mut self) -> u64 {
        let n = self.remaining() as u64;
        self.frames.clear();
        self.next = 0;
        self.cut_next = 0;
        n
    }
}

/// A worker's receive service: the negotiated header format, the scratch
/// chains one frame may be merged over, and a frame's worth of scratch for
/// the frames it cuts.
#[derive(Debug)]
pub struct RxService {
    /// Length of the virtio-net header written in front of every frame,
    /// bytes.
    hdr_len: usize,
    /// `VIRTIO_NET_F_MRG_RXBUF`: a frame may span several buffers.
    mrg_rxbuf: bool,
    /// Largest frame (not a GSO frame written whole) delivered, bytes:
    /// [`crate::net::max_frame`] of the port's MTU ([`MAX_FRAME`] by
    /// default). Longer ones are dropped (`over_mtu`).
    max_frame: usize,
    chains: Vec<Chain>,
    /// One segment (or one completed frame) of a frame being cut; grows to
    /// the largest segment met.
    scratch: Vec<u8>,
}

/// How writing one frame into the guest's buffers ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Put {
    /// Written.
    Written,
    /// Dropped (counted in the pass), its buffers given back empty; `stop`:
    /// the guest has no more buffers or the ring broke.
    Dropped { stop: bool },
    /// The guest has no buffers (or the ring broke): the frame waits; it
    /// had found `have` buffers before they ran out.
    Waiting { have: usize },
    /// Only when taking the frame whole: no set of buffers the guest can
    /// post holds it; the buffers taken were put back.
    TooBig,
}

impl Put {
    /// The frame is written or dropped: the next one comes after it.
    fn done_with_frame(&self) -> bool {
        matches!(self, Put::Written | Put::Dropped { .. })
    }

    /// The pass cannot go on: the guest is out of buffers, or the ring broke.
    fn stops_pass(&self) -> bool {
        matches!(
            self,
            Put::Dropped { stop: true } | Put::Waiting { .. } | Put::TooBig
        )
    }
}

impl RxService {
    /// A service writing `hdr_len`-byte headers, merging buffers if
    /// `mrg_rxbuf`.
    pub fn new(hdr_len: usize, mrg_rxbuf: bool) -> Self {
        RxService {
            hdr_len,
            mrg_rxbuf,
            max_frame: MAX_FRAME,
            chains: (0..MAX_MERGE).map(|_| Chain::with_capacity(64)).collect(),
            scratch: vec![0; MAX_FRAME],
        }
    }

    /// As it is, for a port whose frames may be up to `max_frame` bytes
    /// ([`crate::net::max_frame`] of its MTU).
    pub fn with_max_frame(mut self, max_frame: usize) -> Self {
        self.max_frame = max_frame;
        self
    }

    /// Delivers up to `budget.packets` frames of `pending` (refilled from
    /// `backlog` once it is empty) into `ring`'s buffers. Each frame gets a
    /// header whose `num_buffers`, if the header has one, is the number of
    /// buffers it spans: one without MRG_RXBUF, up to [`MAX_MERGE`] with it.
    /// Used entries are published once at the end, then the guest is called
    /// if it wants.
    ///
    /// A plain frame gets a zero header. A frame marked with an offload
    /// ([`crate::frames::Offloaded`]) goes whole, behind its checked header
    /// (`NEEDS_CSUM`, `gso_type`, `gso_size`, …), if `accept` takes it and
    /// the guest's buffers can hold it: when they run out first, the
    /// buffers are put back and the frame waits for more, as Linux vhost
    /// does. Otherwise (not accepted, or more than [`MAX_MERGE`] buffers —
    /// one without MRG_RXBUF — would be needed) it is cut in software
    /// ([`Cutter`]) and its frames go as plain frames, over as many passes
    /// as the buffers need.
    ///
    /// A frame longer than the port's `max_frame` — a plain frame, one
    /// with a partial checksum, a segment cut from a GSO frame — is dropped
    /// (`over_mtu`, the first length kept for the log); a GSO frame written
    /// whole is not held to it, as Linux's own receivers are not.
    ///
    /// With no running `ring` the frames are dropped (`port_down`). A plain
    /// frame that does not fit is dropped (`no_rx_buffer`) and the buffers
    /// taken for it are given back empty. When the guest has no buffers
    /// left, the frame in hand stays pending for a later pass (and
    /// `more_work` is `false`: only a kick will bring buffers). Readable
    /// chains are given back unused (`wrong_direction`); a ring whose
    /// `avail.idx` ran ahead is marked broken.
    pub fn serve(
        &mut self,
        ring: Option<&mut Ring>,
        mem: &GuestMemory,
        backlog: &Backlog,
        pending: &mut RxPending,
        budget: Budget,
        accept: GuestOffloads,
    ) -> RingPass {
        let mut pass = RingPass::default();
        pending.refill(backlog);
        if pending.remaining() == 0 {
            return pass;
        }
        let Some(ring) = ring else {
            // No running receive ring: the frames cannot go anywhere.
            pass.drops.port_down = pending.discard();
            return pass;
        };
        let mut out_of_buffers = false;
        pending.need_buffers = 0;
        'frames: while pending.next < pending.frames.len() && (pass.packets as u32) < budget.packets
        {
            let i = pending.next;
            let frame = pending.frames.get(i);
            let Some(kept) = pending.frames.offloaded(i) else {
                let step = self.put_plain(ring, mem, frame, &mut pass);
                if step.done_with_frame() {
                    pending.next += 1;
                }
                if step.stops_pass() {
                    out_of_buffers = true;
                    break;
                }
                continue;
            };
            if !matches!(kept.offload, Offload::Tcp(..)) && frame.len() > self.max_frame {
                pass.drops.over_mtu += 1;
                pass.drops.first_over_mtu.get_or_insert(frame.len());
                pending.next += 1;
                continue;
            }
            if pending.cut_next == 0 && accept.takes(&kept.offload) {
                match self.put(ring, mem, &kept.hdr, frame, true, &mut pass) {
                    Put::Written => {
                        pass.packets += 1;
                        pass.bytes += frame.len() as u64;
                        if matches!(kept.offload, Offload::Tcp(..)) {
                            pass.gso_whole += 1;
                        }
                        pending.next += 1;
                        continue;
                    }
                    Put::Dropped { stop } => {
                        pending.next += 1;
                        if stop {
                            out_of_buffers = true;
                            break;
                        }
                        continue;
                    }
                    Put::Waiting { have } => {
                        pending.need_buffers = u16::try_from(have + 1).unwrap_or(u16::MAX);
                        out_of_buffers = true;
                        break;
                    }
                    Put::TooBig => {} // cut it below
                }
            }
            let cutter = match Cutter::new(frame, kept.offload) {
                Ok(c) => c,
                Err(e) => {
                    // The ingress checked it: only a bug gets here.
                    pass.drops.bad_vnet_hdr += 1;
                    pass.drops
                        .first_bad_vnet_hdr
                        .get_or_insert(OffloadRefused::Segment(e));
                    pending.next += 1;
                    continue;
                }
            };
            if pending.cut_next == 0 {
                if cutter.segments() {
                    pass.gso_frames += 1;
                } else {
                    pass.csum_completed += 1;
                }
            }
            let mut scratch = std::mem::take(&mut self.scratch);
            while pending.cut_next < cutter.count() {
                if pass.packets as u32 >= budget.packets {
                    self.scratch = scratch;
                    break 'frames;
                }
                let n = cutter.write_vec(pending.cut_next, &mut scratch);
                let step = self.put_plain(ring, mem, &scratch[..n], &mut pass);
                if step.done_with_frame() {
                    pending.cut_next += 1;
                }
                if step.stops_pass() {
                    out_of_buffers = true;
                    break;
                }
            }
            self.scratch = scratch;
            if pending.cut_next < cutter.count() {
                break 'frames;
            }
            pending.cut_next = 0;
            pending.next += 1;
        }
        ring.q.flush_used();
        ring.log_used();
        pass.calls += u64::from(ring.call_if_needed());
        pass.more_work = pending.remaining() > 0 && !out_of_buffers;
        pass
    }

    /// Writes plain `frame` (no offload) into the guest's next buffers and
    /// counts it in `pass` if written; drops it if it is over the port's
    /// MTU.
    fn put_plain(
        &mut self,
        ring: &mut Ring,
        mem: &GuestMemory,
        frame: &[u8],
        pass: &mut RingPass,
    ) -> Put {
        if frame.len() > self.max_frame {
            pass.drops.over_mtu += 1;
            pass.drops.first_over_mtu.get_or_insert(frame.len());
            return Put::Dropped { stop: false };
        }
        let put = self.put(ring, mem, &VnetHdr::default(), frame, false, pass);
        if put == Put::Written {
            pass.packets += 1;
            pass.bytes += frame.len() as u64;
        }
        put
    }

    /// Writes `frame` behind `vnet` (and `num_buffers`) into the guest's
    /// next buffers. With `whole`, buffers that cannot hold the frame are
    /// put back ([`Put::Waiting`] if the guest may still post enough,
    /// [`Put::TooBig`] if it cannot), rather than given back empty.
    fn put(
        &mut self,
        ring: &mut Ring,
        mem: &GuestMemory,
        vnet: &VnetHdr,
        frame: &[u8],
        whole: bool,
        pass: &mut RingPass,
    ) -> Put {
        let hdr = self.hdr_len;
        let need = hdr + frame.len();
        let most = if self.mrg_rxbuf { MAX_MERGE } else { 1 };
        // Gather buffers until the frame fits.
        let mut got = 0usize;
        let mut room = 0usize;
        let mut out_of_buffers = false;
        // No chain was given back while gathering: the gathered ones may be put back.
        let mut clean = true;
        while room < need && got < most {
            match ring.q.pop(mem, &mut self.chains[got]) {
                Ok(Some(_)) => {
                    let c = &self.chains[got];
                    if c.has_readable() {
                        pass.drops.wrong_direction += 1;
                        ring.q.push_used(c.head(), 0);
                        clean = false;
                        continue;
                    }
                    room += c.writable_len() as usize;
                    got += 1;
                }
                Ok(None) => {
                    out_of_buffers = true;
                    break;
                }
                Err(e) => {
                    pass.drops.chain_errors.push(e.kind);
                    clean = false;
                    if ring.give_back_rejected(&e) {
                        pass.broke_ring = true;
                        break;
                    }
                }
            }
        }
        if room < need {
            if whole && clean && !ring.broken {
                ring.q.unpop(got as u16);
                // Waiting is for buffers the guest will still post: not
                // when a whole ring of them was too little.
                return if out_of_buffers && got < usize::from(ring.q.size()) {
                    Put::Waiting { have: got }
                } else {
                    Put::TooBig
                };
            }
            // Give back what we took, empty: the guest's driver drops a
            // zero-length buffer and reuses it.
            for c in &self.chains[..got] {
                ring.q.push_used(c.head(), 0);
            }
            let stop = out_of_buffers || ring.broken;
            if stop && got == 0 {
                return Put::Waiting { have: 0 };
            }
            pass.drops.no_rx_buffer += 1;
            return Put::Dropped { stop };
        }
        let mut h = [0u8; HDR_LEN_MRG];
        h[..VnetHdr::LEN].copy_from_slice(&vnet.to_bytes());
        if hdr > HDR_NUM_BUFFERS_OFFSET {
            h[HDR_NUM_BUFFERS_OFFSET..HDR_NUM_BUFFERS_OFFSET + 2]
                .copy_from_slice(&(got as u16).to_le_bytes());
        }
        let mut off = 0usize; // offset in (header ++ frame)
        for c in &mut self.chains[..got] {
            let cap = c.writable_len() as usize;
            let mut w = 0usize;
            if off < hdr {
                let n = (hdr - off).min(cap);
                c.write_from(0, &h[off..off + n]);
                w += n;
                off += n;
            }
            if w < cap && off < need {
                let n = (need - off).min(cap - w);
                c.write_from(w, &frame[off - hdr..off - hdr + n]);
                w += n;
                off += n;
            }
            ring.log_written(c, w);
            ring.q.push_used(c.head(), w as u32);
        }
        Put::Written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::ring::test_utils::{frame, ring, take_count, Guest, UNLIMITED as ALL};
    use vadapt_virtq::device::ChainErrorKind;
    use vadapt_virtq::mock::{buf, readable, writable};
    use vadapt_virtq::RingFeatures;
    use vadapt_wire::vnet_hdr::HDR_LEN_LEGACY;

    /// A guest that takes no offload.
    const NO_OFFLOADS: GuestOffloads = GuestOffloads {
        csum: false,
        tso4: false,
        tso6: false,
        ecn: false,
    };

    /// A backlog of capacity 16 holding `frames`, and its pending list.
    fn backlog(frames: &[Vec<u8>]) -> (Backlog, RxPending) {
        let b = Backlog::new(16);
        let mut batch = FrameBatch::new(16);
        for f in frames {
            assert!(batch.push(f));
        }
        let all: Vec<u16> = (0..frames.len() as u16).collect();
        assert_eq!(b.push(&batch, &all), (frames.len() as u64, 0));
        let pending = RxPending::for_backlog(&b);
        (b, pending)
    }

    /// The guest posts receive buffers of `len` bytes in slots `slots`.
    fn post(g: &mut Guest, slots: std::ops::Range<u64>, len: u32) -> Vec<u16> {
        let heads = slots
            .map(|i| g.driver.add(&[writable(buf(i), len)]).unwrap())
            .collect();
        g.driver.publish();
        heads
    }

    /// What the guest received: per used buffer, its head and the bytes written.
    fn received(g: &mut Guest, heads: &[u16]) -> Vec<(u16, Vec<u8>)> {
        std::iter::from_fn(|| g.driver.pop_used())
            .map(|(head, len)| {
                let slot = heads.iter().position(|&h| h == head).unwrap() as u64;
                let mut b = vec![0u8; len as usize];
                g.mem.read(buf(slot), &mut b).unwrap();
                (head, b)
            })
            .collect()
    }

    #[test]
    fn each_frame_fills_one_buffer_behind_its_header_without_mrg_rxbuf() {
        for hdr in [HDR_LEN_LEGACY, HDR_LEN_MRG] {
            let (mut r, mut g) = ring(16, RingFeatures::default());
            let mut rx = RxService::new(hdr, false);
            let frames = [frame(1, 60), frame(2, 1514)];
            let (bl, mut pending) = backlog(&frames);
            let heads = post(&mut g, 0..3, 2048);
            let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
            assert_eq!((pass.packets, pass.bytes), (2, 60 + 1514));
            assert!(!pass.more_work);
            assert_eq!(pass.drops, Default::default());
            let got = received(&mut g, &heads);
            assert_eq!(got.len(), 2);
            for ((_, bytes), f) in got.iter().zip(&frames) {
                let mut want = vec![0u8; hdr];
                if hdr == HDR_LEN_MRG {
                    want[HDR_NUM_BUFFERS_OFFSET] = 1; // num_buffers, little-endian
                }
                want.extend_from_slice(f);
                assert_eq!(bytes, &want, "header of {hdr} bytes");
            }
        }
    }

    #[test]
    fn with_mrg_rxbuf_a_frame_spans_buffers_and_says_how_many() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut rx = RxService::new(HDR_LEN_MRG, true);
        let f = frame(3, 1500);
        let (bl, mut pending) = backlog(std::slice::from_ref(&f));
        let heads = post(&mut g, 0..4, 512);
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!((pass.packets, pass.bytes), (1, 1500));
        let got = received(&mut g, &heads);
        let lens: Vec<usize> = got.iter().map(|(_, b)| b.len()).collect();
        assert_eq!(
            lens,
            [512, 512, 1512 - 1024],
            "three buffers, the last partly"
        );
        let all: Vec<u8> = got.into_iter().flat_map(|(_, b)| b).collect();
        assert_eq!(u16::from_le_bytes([all[10], all[11]]), 3, "num_buffers");
        assert_eq!(&all[HDR_LEN_MRG..], &f[..]);
        assert_eq!(g.driver.outstanding(), 1, "the fourth buffer is left");
    }

    #[test]
    fn a_jumbo_frame_spans_linux_sized_buffers_and_one_over_the_mtu_is_dropped() {
        let (mut r, mut g) = ring(64, RingFeatures::default());
        let mut rx = RxService::new(HDR_LEN_MRG, true).with_max_frame(crate::net::max_frame(9000));
        let jumbo = frame(3, 9014);
        let frames = [frame(1, 9019), jumbo.clone(), frame(2, 1600)];
        let (bl, mut pending) = backlog(&frames);
        // Linux's smallest mergeable buffers: 1536 bytes.
        let heads = post(&mut g, 0..16, 1536);
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!((pass.packets, pass.bytes), (2, 9014 + 1600));
        assert_eq!(
            (pass.drops.over_mtu, pass.drops.first_over_mtu),
            (1, Some(9019))
        );
        let got = received(&mut g, &heads);
        assert_eq!(got.len(), 6 + 2, "9026 bytes in six buffers, 1612 in two");
        let all: Vec<u8> = got[..6].iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(u16::from_le_bytes([all[10], all[11]]), 6, "num_buffers");
        assert_eq!(&all[HDR_LEN_MRG..], &jumbo[..]);
        // A port of the default MTU drops the jumbo frame as over its MTU.
        let mut rx = RxService::new(HDR_LEN_MRG, true);
        let (bl, mut pending) = backlog(std::slice::from_ref(&jumbo));
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!(pass.packets, 0);
        assert_eq!(
            (pass.drops.over_mtu, pass.drops.first_over_mtu),
            (1, Some(9014))
        );
        assert_eq!(pending.remaining(), 0);
    }

    #[test]
    fn a_frame_too_big_for_one_buffer_is_dropped_without_mrg_rxbuf() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut rx = RxService::new(HDR_LEN_MRG, false);
        let (bl, mut pending) = backlog(&[frame(4, 1000), frame(5, 100)]);
        let heads = post(&mut g, 0..2, 512);
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!(pass.packets, 1);
        assert_eq!(pass.drops.no_rx_buffer, 1);
        let got = received(&mut g, &heads);
        assert_eq!(got[0].1.len(), 0, "the buffer comes back empty");
        assert_eq!(&got[1].1[HDR_LEN_MRG..], &frame(5, 100)[..]);
    }

    #[test]
    fn with_no_buffers_frames_wait_for_a_later_pass() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut rx = RxService::new(HDR_LEN_MRG, true);
        let frames = [frame(6, 80), frame(7, 90), frame(8, 100)];
        let (bl, mut pending) = backlog(&frames);
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!(pass, RingPass::default(), "nothing moved, nothing dropped");
        assert_eq!(pending.remaining(), 3);
        assert!(pending.frames_waiting(&bl));
        // One buffer: one frame goes, the rest keep waiting; a kick, not
        // another pass, will bring buffers.
        let mut heads = post(&mut g, 0..1, 2048);
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!((pass.packets, pass.more_work), (1, false));
        assert_eq!(pending.remaining(), 2);
        heads.extend(post(&mut g, 1..3, 2048));
        let budget = Budget {
            packets: 1,
            bytes: u64::MAX,
        };
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, budget, NO_OFFLOADS);
        assert_eq!(
            (pass.packets, pass.more_work),
            (1, true),
            "budget, not buffers"
        );
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!(pass.packets, 1);
        assert!(!pending.frames_waiting(&bl));
        let got: Vec<Vec<u8>> = received(&mut g, &heads)
            .into_iter()
            .map(|(_, b)| b[HDR_LEN_MRG..].to_vec())
            .collect();
        assert_eq!(got, frames);
    }

    #[test]
    fn frames_are_dropped_when_no_receive_ring_runs() {
        let (_, g) = ring(16, RingFeatures::default());
        let mut rx = RxService::new(HDR_LEN_MRG, false);
        let (bl, mut pending) = backlog(&[frame(1, 60), frame(2, 60)]);
        let pass = rx.serve(None, &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!(pass.drops.port_down, 2);
        assert!(!pending.frames_waiting(&bl));
    }

    #[test]
    fn readable_and_bad_chains_are_given_back_and_counted() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut rx = RxService::new(HDR_LEN_MRG, false);
        let (bl, mut pending) = backlog(&[frame(1, 60)]);
        g.driver.add(&[readable(buf(0), 2048)]).unwrap();
        g.driver
            .add(&[writable(vadapt_virtq::mock::MEM_SIZE, 64)])
            .unwrap();
        let good = g.driver.add(&[writable(buf(2), 2048)]).unwrap();
        g.driver.publish();
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!(pass.packets, 1);
        assert_eq!(pass.drops.wrong_direction, 1);
        assert_eq!(
            pass.drops.chain_errors,
            vec![ChainErrorKind::AddressOutOfRange]
        );
        let used: Vec<(u16, u32)> = std::iter::from_fn(|| g.driver.pop_used()).collect();
        assert_eq!(used.len(), 3);
        assert_eq!(used[2], (good, (HDR_LEN_MRG + 60) as u32));
    }

    #[test]
    fn calls_follow_the_guests_flags() {
        let (mut r, mut g) = ring(16, RingFeatures::default());
        let mut rx = RxService::new(HDR_LEN_MRG, false);
        post(&mut g, 0..4, 2048);
        let (bl, mut pending) = backlog(&[frame(1, 60)]);
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!(pass.calls, 1);
        assert_eq!(take_count(r.call.as_ref().unwrap()), 1);
        g.driver.disable_cb(); // NAPI polling: no interrupts wanted
        let mut batch = FrameBatch::new(1);
        batch.push(&frame(2, 60));
        bl.push(&batch, &[0]);
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, ALL, NO_OFFLOADS);
        assert_eq!((pass.packets, pass.calls), (1, 0));
        assert_eq!(take_count(r.call.as_ref().unwrap()), 0);
    }
}
