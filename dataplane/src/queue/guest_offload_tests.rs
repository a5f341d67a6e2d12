//! A TCP segment from one guest's transmit ring through the switch into
//! another guest's receive ring (issue #15): whole to a guest that takes
//! it, cut and checksummed to one that does not or turned it off, cut when
//! the guest's buffers cannot hold it, waiting when they ran out.

use super::guest_offloads::GuestOffloadState;
use super::ring::test_utils::{ring, Guest, UNLIMITED};
use super::ring::Ring;
use super::ring_pass::RingPass;
use super::rx::{RxPending, RxService};
use super::tx::{TxService, TX_BATCH};
use crate::frames::{Backlog, FrameBatch};
use crate::metrics::PortStats;
use crate::net::{
    GuestOffloads, HostOffloads, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_ECN,
    VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6,
};
use crate::switch::{Egress, FdbCache, Switch};
use std::sync::Arc;
use std::time::Duration;
use vadapt_virtq::mock::{buf, readable, writable};
use vadapt_virtq::RingFeatures;
use vadapt_wire::test_frames::{check_segments, linux_tso4, tso_frame, Shape, LINUX_V4};
use vadapt_wire::vnet_hdr::{F_NEEDS_CSUM, GSO_NONE, HDR_LEN_MRG};
use vadapt_wire::{Mac, VnetHdr};

/// The receiving port's side of [`Egress`], as `VmPort::deliver` does it:
/// into one backlog.
#[derive(Debug)]
struct ToBacklog(Backlog);

impl Egress for ToBacklog {
    fn deliver(&self, frames: &FrameBatch, which: &[u16], _flow: u16) {
        self.0.push(frames, which);
    }
}

/// Sender A (transmit ring, every host offload) and receiver B (receive
/// ring) on one switch; B's MAC is the test frames' destination.
struct Pair {
    a_ring: Ring,
    a: Guest,
    tx: TxService,
    b_ring: Ring,
    b: Guest,
    rx: RxService,
    pending: RxPending,
    sw: Switch,
    to_b: Arc<ToBacklog>,
    fdb: FdbCache,
    /// Where each receive buffer B posted is, by head.
    posted: std::collections::HashMap<u16, u64>,
}

const ALL_GUEST: u64 = VIRTIO_NET_F_GUEST_CSUM
    | VIRTIO_NET_F_GUEST_TSO4
    | VIRTIO_NET_F_GUEST_TSO6
    | VIRTIO_NET_F_GUEST_ECN;

impl Pair {
    fn new(mrg_rxbuf: bool) -> Self {
        let (a_ring, a) = ring(16, RingFeatures::default());
        let (b_ring, b) = ring(128, RingFeatures::default());
        let sw = Switch::new(Duration::from_secs(300));
        let stats = || Arc::new(PortStats::new("p", crate::metrics::PortKind::Vm, 1));
        let to_b = Arc::new(ToBacklog(Backlog::new(64)));
        let _a_port = sw.add_port(Arc::new(ToBacklog(Backlog::new(1))), stats());
        let b_port = sw.add_port(to_b.clone(), stats());
        sw.add_static(Mac([2, 0, 0, 0, 0, 2]), b_port);
        let pending = RxPending::for_backlog(&to_b.0);
        Pair {
            a_ring,
            a,
            tx: TxService::with_offloads(HDR_LEN_MRG, TX_BATCH, HostOffloads::ALL),
            b_ring,
            b,
            rx: RxService::new(HDR_LEN_MRG, mrg_rxbuf),
            pending,
            sw,
            to_b,
            fdb: FdbCache::default(),
            posted: Default::default(),
        }
    }

    /// A sends `frame` behind `vnet` and its pass goes through the switch.
    fn send(&mut self, vnet: &VnetHdr, frame: &[u8]) {
        let at = buf(0);
        let mut h = [0u8; HDR_LEN_MRG];
        h[..VnetHdr::LEN].copy_from_slice(&vnet.to_bytes());
        self.a.mem.write(at, &h).unwrap();
        self.a.mem.write(at + HDR_LEN_MRG as u64, frame).unwrap();
        let segs = [
            readable(at, HDR_LEN_MRG as u32),
            readable(at + HDR_LEN_MRG as u64, frame.len() as u32),
        ];
        self.a.driver.add(&segs).unwrap();
        self.a.driver.publish();
        let (sw, fdb) = (&self.sw, &mut self.fdb);
        let pass = self
            .tx
            .serve(&mut self.a_ring, &self.a.mem, UNLIMITED, |b| {
                let _ = sw.forward(0, 0, b, fdb);
            });
        assert!(
            pass.packets > 0 && pass.drops == Default::default(),
            "{pass:?}"
        );
        while self.a.driver.pop_used().is_some() {}
    }

    /// B posts `n` receive buffers of `len` bytes (one per 2 KiB slot, or
    /// as many slots as `len` needs), after those posted before.
    fn post(&mut self, first_slot: u64, n: u64, len: u32) {
        let stride = u64::from(len).div_ceil(2048);
        for i in 0..n {
            let slot = first_slot + i * stride;
            let head = self.b.driver.add(&[writable(buf(slot), len)]).unwrap();
            self.posted.insert(head, buf(slot));
        }
        self.b.driver.publish();
    }

    /// B's receive pass, taking `accept`.
    fn deliver(&mut self, accept: GuestOffloads) -> RingPass {
        let r = Some(&mut self.b_ring);
        self.rx.serve(
            r,
            &self.b.mem,
            &self.to_b.0,
            &mut self.pending,
            UNLIMITED,
            accept,
        )
    }

    /// What B received, one (header, frame) per packet: its used buffers
    /// in order, merged as `num_buffers` says.
    fn received(&mut self) -> Vec<(VnetHdr, u16, Vec<u8>)> {
        let mut bufs = Vec::new();
        while let Some((head, len)) = self.b.driver.pop_used() {
            let addr = self.posted[&head];
            let mut b = vec![0u8; len as usize];
            self.b.mem.read(addr, &mut b).unwrap();
            bufs.push(b);
        }
        let mut out = Vec::new();
        let mut it = bufs.into_iter();
        while let Some(first) = it.next() {
            let hdr = VnetHdr::read(&first).unwrap();
            let n = u16::from_le_bytes([first[10], first[11]]);
            let mut data = first[HDR_LEN_MRG..].to_vec();
            for _ in 1..n {
                data.extend_from_slice(&it.next().expect("num_buffers buffers"));
            }
            out.push((hdr, n, data));
        }
        out
    }
}

fn payload() -> Vec<u8> {
    (0..45 * 1448).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_tso_segment_crosses_whole_to_a_guest_with_guest_tso() {
    let mut p = Pair::new(true);
    let f = tso_frame(LINUX_V4, &payload());
    p.send(&linux_tso4(), &f);
    p.post(0, 64, 1536); // Linux's mergeable buffers
    let pass = p.deliver(GuestOffloads::from_bits(ALL_GUEST));
    assert_eq!((pass.packets, pass.bytes), (1, f.len() as u64));
    assert_eq!((pass.gso_whole, pass.gso_frames), (1, 0));
    assert_eq!(pass.drops, Default::default());
    let got = p.received();
    assert_eq!(got.len(), 1);
    let (hdr, n, data) = &got[0];
    assert_eq!(
        *hdr,
        linux_tso4(),
        "the sender's header, as vhost-net hands it"
    );
    assert_eq!(usize::from(*n), (HDR_LEN_MRG + f.len()).div_ceil(1536));
    assert_eq!(data, &f, "unchanged, partial checksum and all");
}

#[test]
fn a_guest_without_guest_tso_gets_it_cut_and_checksummed() {
    for accept in [0, VIRTIO_NET_F_GUEST_CSUM] {
        let mut p = Pair::new(true);
        let f = tso_frame(LINUX_V4, &payload());
        p.send(&linux_tso4(), &f);
        p.post(0, 64, 1536);
        let pass = p.deliver(GuestOffloads::from_bits(accept));
        assert_eq!((pass.packets, pass.gso_whole, pass.gso_frames), (45, 0, 1));
        let got = p.received();
        assert!(got
            .iter()
            .all(|(h, n, _)| *h == VnetHdr::default() && *n == 1));
        let segs: Vec<Vec<u8>> = got.into_iter().map(|(_, _, d)| d).collect();
        assert_eq!(check_segments(&segs, LINUX_V4, 1448), payload());
    }
}

#[test]
fn ctrl_guest_offloads_turns_whole_delivery_off_and_bad_bits_are_refused() {
    let state = GuestOffloadState::default();
    state.negotiate(ALL_GUEST | VIRTIO_NET_F_GUEST_TSO4);
    let mut p = Pair::new(true);
    let f = tso_frame(LINUX_V4, &payload());
    // `ethtool -K eth0 rx-gro-hw off`: Linux keeps only GUEST_CSUM.
    let (ack, _) = state.ctrl_command(5, 0, &VIRTIO_NET_F_GUEST_CSUM.to_le_bytes());
    assert_eq!(ack, crate::net::ctrl::OK);
    p.send(&linux_tso4(), &f);
    p.post(0, 64, 1536);
    let pass = p.deliver(state.accepted());
    assert_eq!((pass.packets, pass.gso_whole, pass.gso_frames), (45, 0, 1));
    p.received();
    // Bits never negotiated are refused and change nothing; turned back
    // on, the next frame crosses whole.
    let (ack, why) = state.ctrl_command(5, 0, &(ALL_GUEST | 1 << 20).to_le_bytes());
    assert_eq!(ack, crate::net::ctrl::ERR, "{why:?}");
    assert!(!state.accepted().tso4);
    assert_eq!(
        state.ctrl_command(5, 0, &ALL_GUEST.to_le_bytes()).0,
        crate::net::ctrl::OK
    );
    p.send(&linux_tso4(), &f);
    p.post(100, 64, 1536);
    let pass = p.deliver(state.accepted());
    assert_eq!((pass.packets, pass.gso_whole), (1, 1));
}

#[test]
fn without_mrg_rxbuf_a_big_buffer_takes_it_whole_and_small_ones_get_segments() {
    let mut p = Pair::new(false);
    let f = tso_frame(LINUX_V4, &payload());
    let accept = GuestOffloads::from_bits(ALL_GUEST);
    // Linux's "big packets" (GUEST_TSO without MRG_RXBUF): one 64 KiB chain.
    p.post(0, 1, 65_562);
    p.send(&linux_tso4(), &f);
    let pass = p.deliver(accept);
    assert_eq!((pass.packets, pass.gso_whole), (1, 1));
    assert_eq!(p.received()[0].2, f);
    // 2 KiB buffers cannot hold it: cut, one segment per buffer, none lost.
    p.post(40, 50, 2048);
    p.send(&linux_tso4(), &f);
    let pass = p.deliver(accept);
    assert_eq!((pass.packets, pass.gso_frames), (45, 1));
    assert_eq!(pass.drops, Default::default());
    let segs: Vec<Vec<u8>> = p.received().into_iter().map(|(_, _, d)| d).collect();
    assert_eq!(check_segments(&segs, LINUX_V4, 1448), payload());
}

#[test]
fn a_whole_frame_waits_for_buffers_rather_than_being_cut_or_dropped() {
    let mut p = Pair::new(true);
    let f = tso_frame(LINUX_V4, &payload());
    let accept = GuestOffloads::from_bits(ALL_GUEST);
    p.send(&linux_tso4(), &f);
    p.post(0, 10, 1536);
    let pass = p.deliver(accept);
    assert_eq!(pass, RingPass::default(), "nothing moved, nothing used");
    assert!(p.received().is_empty());
    assert_eq!(p.pending.remaining(), 1);
    assert_eq!(
        p.pending.buffers_wanted(&p.to_b.0),
        Some(11),
        "no use waking for fewer than one more buffer"
    );
    p.post(10, 40, 1536);
    let pass = p.deliver(accept);
    assert_eq!((pass.packets, pass.gso_whole), (1, 1));
    let got = p.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, f, "from the first buffers on, in order");
    assert_eq!(p.pending.buffers_wanted(&p.to_b.0), None);
}

#[test]
fn a_partial_checksum_stays_partial_for_guest_csum_and_is_completed_otherwise() {
    let shape = Shape {
        ipv6: true,
        ..LINUX_V4
    };
    let f = tso_frame(shape, b"a small write");
    let h = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_NONE,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 54,
        csum_offset: 16,
    };
    for (accept, partial) in [(VIRTIO_NET_F_GUEST_CSUM, true), (0, false)] {
        let mut p = Pair::new(true);
        p.send(&h, &f);
        p.post(0, 4, 1536);
        let pass = p.deliver(GuestOffloads::from_bits(accept));
        assert_eq!(
            (pass.packets, pass.csum_completed),
            (1, u64::from(!partial))
        );
        let (hdr, _, data) = p.received().remove(0);
        if partial {
            assert_eq!((hdr, &data), (h, &f));
        } else {
            assert_eq!(hdr, VnetHdr::default());
            assert_eq!(check_segments(&[data], shape, 1448), b"a small write");
        }
    }
}
