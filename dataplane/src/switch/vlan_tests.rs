//! VLANs on the switch (issue 37): floods stay in their VLAN, the table is
//! keyed by (VLAN, MAC), trunks push and pop 802.1Q tags with a frame's
//! offloads following, and a guest's tagged frames go nowhere.

use super::test_utils::Recorder;
use super::*;
use crate::frames::{FrameBatch, Offloaded};
use crate::metrics::PortStats;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vadapt_wire::ethernet::ETHERTYPE_EXPERIMENTAL;
use vadapt_wire::test_frames::ethernet_frame;
use vadapt_wire::{ChecksumAt, Mac, Offload};

const A: Mac = Mac([2, 0, 0, 0, 0, 0xa]);
const B: Mac = Mac([2, 0, 0, 0, 0, 0xb]);

fn port(sw: &Switch, vlan: PortVlan) -> (PortId, Arc<Recorder>) {
    let rec = Arc::new(Recorder::default());
    let stats = Arc::new(PortStats::new("p", crate::metrics::PortKind::Vm, 1));
    let id = sw.add_port_with(rec.clone(), stats, PortRules::open_in(vlan));
    (id, rec)
}

fn trunk(allowed: &[Vid], native: Vid) -> PortVlan {
    PortVlan::Trunk {
        allowed: allowed.iter().copied().collect(),
        native,
    }
}

fn untagged(dst: Mac, src: Mac) -> Vec<u8> {
    ethernet_frame(dst, src, ETHERTYPE_EXPERIMENTAL, &[7; 46])
}

fn tagged(dst: Mac, src: Mac, tags: &[(u16, u16)]) -> Vec<u8> {
    let plain = untagged(dst, src);
    let mut f = plain[..12].to_vec();
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&plain[12..]);
    f
}

fn send(sw: &Switch, from: PortId, frames: &[Vec<u8>]) -> Forwarded {
    let mut b = FrameBatch::new(frames.len());
    for f in frames {
        assert!(b.push(f));
    }
    sw.forward(from, 0, &b, &mut FdbCache::default())
}

fn got(r: &Recorder) -> Vec<Vec<u8>> {
    std::mem::take(&mut *r.0.lock().unwrap())
}

#[test]
fn a_flood_stays_in_its_vlan() {
    let sw = Switch::new(Duration::from_secs(300));
    let (a10, _) = port(&sw, PortVlan::Access(10));
    let (_, b10) = port(&sw, PortVlan::Access(10));
    let (_, c20) = port(&sw, PortVlan::Access(20));
    let (_, d0) = port(&sw, PortVlan::default());
    assert!(send(&sw, a10, &[untagged(Mac::BROADCAST, A), untagged(B, A)]).is_quiet());
    assert_eq!(
        got(&b10).len(),
        2,
        "broadcast and unknown unicast, in VLAN 10"
    );
    assert!(got(&c20).is_empty() && got(&d0).is_empty());
}

#[test]
fn the_same_mac_in_two_vlans_is_two_addresses() {
    let sw = Switch::new(Duration::from_secs(300));
    let (a10, r10) = port(&sw, PortVlan::Access(10));
    let (a20, r20) = port(&sw, PortVlan::Access(20));
    let (x10, _) = port(&sw, PortVlan::Access(10));
    let (x20, _) = port(&sw, PortVlan::Access(20));
    let _ = send(&sw, a10, &[untagged(Mac::BROADCAST, A)]);
    let _ = send(&sw, a20, &[untagged(Mac::BROADCAST, A)]);
    assert_eq!(sw.lookup_in(10, A), Some(a10));
    assert_eq!(sw.lookup_in(20, A), Some(a20));
    assert_eq!(sw.lookup(A), None, "not in the untagged domain");
    got(&r10);
    got(&r20);
    let _ = send(&sw, x10, &[untagged(A, B)]);
    let _ = send(&sw, x20, &[untagged(A, B)]);
    assert_eq!(
        (got(&r10).len(), got(&r20).len()),
        (1, 1),
        "each to its own VLAN's A"
    );
    let rows = sw.listing(crate::clock::coarse_now()).entries;
    let mut vlans: Vec<u16> = rows.iter().filter(|r| r.mac == A).map(|r| r.vlan).collect();
    vlans.sort_unstable();
    assert_eq!(vlans, [10, 20]);
}

#[test]
fn tagged_frames_from_an_access_port_are_dropped_and_counted() {
    let sw = Switch::new(Duration::from_secs(300));
    let (guest, _) = port(&sw, PortVlan::Access(10));
    let (_, other) = port(&sw, PortVlan::Access(20));
    let (_, up) = port(&sw, PortVlan::trunk_all());
    // VLAN hopping: one tag, a double tag whose outer tag is the guest's
    // own VLAN, and an 802.1ad outer tag.
    let f = send(
        &sw,
        guest,
        &[
            tagged(Mac::BROADCAST, A, &[(0x8100, 20)]),
            tagged(Mac::BROADCAST, A, &[(0x8100, 10), (0x8100, 20)]),
            tagged(Mac::BROADCAST, A, &[(0x88a8, 20), (0x8100, 20)]),
            tagged(Mac::BROADCAST, A, &[(0x8100, 0)]),
        ],
    );
    assert_eq!(f.vlan, [4, 0]);
    assert!(got(&other).is_empty() && got(&up).is_empty());
    assert_eq!(sw.lookup_in(10, A), None, "nothing learned from them");
    let stats = sw.port_stats(guest).unwrap();
    f.count_into(&stats, 0);
    let at = crate::metrics::DropReason::ALL
        .iter()
        .position(|r| *r == crate::metrics::DropReason::VlanTagged)
        .unwrap();
    assert_eq!(
        stats.queues[0].drops[at].load(std::sync::atomic::Ordering::Relaxed),
        4
    );
}

#[test]
fn a_trunk_pushes_and_pops_tags_and_carries_only_its_vlans() {
    let sw = Switch::new(Duration::from_secs(300));
    let (vm10, r10) = port(&sw, PortVlan::Access(10));
    let (vm30, r30) = port(&sw, PortVlan::Access(30));
    let (vm40, r40) = port(&sw, PortVlan::Access(40));
    let (up, rup) = port(&sw, trunk(&[10, 20], 30));
    // Out by the trunk: VLAN 10 tagged, the native VLAN 30 untagged, VLAN
    // 40 not at all.
    let _ = send(&sw, vm10, &[untagged(Mac::BROADCAST, A)]);
    assert_eq!(got(&rup), [tagged(Mac::BROADCAST, A, &[(0x8100, 10)])]);
    let _ = send(&sw, vm30, &[untagged(Mac::BROADCAST, B)]);
    assert_eq!(got(&rup), [untagged(Mac::BROADCAST, B)]);
    let _ = send(&sw, vm40, &[untagged(Mac::BROADCAST, B)]);
    assert!(got(&rup).is_empty());
    // In by the trunk: a tag for VLAN 10 is popped for vm10 (and A, now
    // known there, is reached by unicast); untagged and priority-tagged
    // frames are the native VLAN's; VLANs it does not carry are dropped.
    let f = send(
        &sw,
        up,
        &[
            tagged(A, B, &[(0x8100, 0x6000 | 10)]),
            untagged(B, A),
            tagged(B, A, &[(0x8100, 0)]),
            tagged(Mac::BROADCAST, A, &[(0x8100, 40)]),
            tagged(Mac::BROADCAST, A, &[(0x8100, 21)]),
            tagged(Mac::BROADCAST, A, &[(0x88a8, 10), (0x8100, 10)]),
        ],
    );
    assert_eq!(f.vlan, [0, 3]);
    assert_eq!(got(&r10), [untagged(A, B)]);
    assert_eq!(
        got(&r30),
        [untagged(B, A), untagged(B, A)],
        "B is vm30's in VLAN 30"
    );
    assert!(got(&r40).is_empty());
    assert_eq!(sw.lookup_in(10, B), Some(up));
}

#[test]
fn a_tagged_frame_between_two_trunks_keeps_its_tag() {
    let sw = Switch::new(Duration::from_secs(300));
    let (t1, _) = port(&sw, PortVlan::trunk_all());
    let (_, r2) = port(&sw, trunk(&[5], 0));
    let f = tagged(Mac::BROADCAST, A, &[(0x8100, 5)]);
    let _ = send(&sw, t1, std::slice::from_ref(&f));
    assert_eq!(got(&r2), [f]);
}

#[test]
fn a_priority_tagged_frame_leaves_a_trunk_tagged_with_its_vlan() {
    // A priority tag (VID 0) on a trunk puts the frame in the trunk's
    // native VLAN, 30 here. Out by a trunk that carries VLAN 30 tagged,
    // the tag must name VLAN 30 (keeping its priority): left as VID 0,
    // the far side takes the frame into its own native VLAN, not 30.
    let sw = Switch::new(Duration::from_secs(300));
    let (t1, _) = port(&sw, trunk(&[10], 30));
    let (_, r2) = port(&sw, trunk(&[30], 0));
    let (_, r30) = port(&sw, PortVlan::Access(30));
    let (_, r10) = port(&sw, PortVlan::Access(10));
    let f = send(&sw, t1, &[tagged(Mac::BROADCAST, A, &[(0x8100, 0xa000)])]);
    assert!(f.is_quiet());
    assert_eq!(
        got(&r2),
        [tagged(Mac::BROADCAST, A, &[(0x8100, 0xa000 | 30)])]
    );
    assert_eq!(got(&r30), [untagged(Mac::BROADCAST, A)]);
    assert!(got(&r10).is_empty());
    // A priority tag from a trunk of native VLAN 0 is popped on the way
    // to a trunk whose native VLAN 0 is too.
    let (t0, _) = port(&sw, PortVlan::trunk_all());
    let _ = send(&sw, t0, &[tagged(Mac::BROADCAST, B, &[(0x8100, 0x2000)])]);
    assert_eq!(got(&r2), [untagged(Mac::BROADCAST, B)]);
}

/// An [`Egress`] that keeps each frame with its kept offload.
#[derive(Debug, Default)]
struct OffloadRecorder(Mutex<Vec<(Vec<u8>, Option<Offloaded>)>>);

impl Egress for OffloadRecorder {
    fn deliver(&self, frames: &FrameBatch, which: &[u16], _flow: u16) {
        let mut v = self.0.lock().unwrap();
        for &i in which {
            let i = usize::from(i);
            v.push((frames.get(i).to_vec(), frames.offloaded(i)));
        }
    }
}

#[test]
fn a_frame_with_offloads_keeps_them_right_through_a_push_and_a_pop() {
    let sw = Switch::new(Duration::from_secs(300));
    let (vm, _) = port(&sw, PortVlan::Access(10));
    let rec = Arc::new(OffloadRecorder::default());
    let stats = Arc::new(PortStats::new("t", crate::metrics::PortKind::Tap, 1));
    let up = sw.add_port_with(rec.clone(), stats, PortRules::open_in(trunk(&[10], 0)));
    let back = Arc::new(OffloadRecorder::default());
    let stats = Arc::new(PortStats::new("v2", crate::metrics::PortKind::Vm, 1));
    sw.add_port_with(
        back.clone(),
        stats,
        PortRules::open_in(PortVlan::Access(10)),
    );
    let mut o = Offloaded::plain(100);
    o.offload = Offload::Checksum(ChecksumAt {
        start: 34,
        offset: 16,
    });
    o.hdr.flags = 1;
    o.hdr.csum_start = 34;
    o.hdr.csum_offset = 16;
    let frame = untagged(Mac::BROADCAST, A);
    let mut b = FrameBatch::new(1);
    b.next_slot().unwrap()[..frame.len()].copy_from_slice(&frame);
    b.commit_offloaded(frame.len(), o);
    let _ = sw.forward(vm, 0, &b, &mut FdbCache::default());
    let (out, kept) = rec.0.lock().unwrap().pop().expect("out by the trunk");
    assert_eq!(out, tagged(Mac::BROADCAST, A, &[(0x8100, 10)]));
    let kept = kept.expect("offload kept");
    assert_eq!(kept.hdr.csum_start, 38);
    assert_eq!(
        kept.offload,
        Offload::Checksum(ChecksumAt {
            start: 38,
            offset: 16
        })
    );
    assert_eq!(
        back.0.lock().unwrap().pop().unwrap().1,
        Some(o),
        "untouched in VLAN 10"
    );
    // Back in through the trunk, popped: where it started.
    let mut b = FrameBatch::new(1);
    b.next_slot().unwrap()[..out.len()].copy_from_slice(&out);
    b.commit_offloaded(out.len(), kept);
    let _ = sw.forward(up, 0, &b, &mut FdbCache::default());
    let got: Vec<_> = std::mem::take(&mut *back.0.lock().unwrap());
    assert_eq!(got, [(frame, Some(o))]);
}

#[test]
fn a_pop_that_would_put_an_offset_in_the_header_drops_the_frame() {
    let sw = Switch::new(Duration::from_secs(300));
    let (up, _) = port(&sw, PortVlan::trunk_all());
    let (_, r) = port(&sw, PortVlan::Access(10));
    let f = tagged(Mac::BROADCAST, A, &[(0x8100, 10)]);
    let mut o = Offloaded::plain(f.len());
    o.offload = Offload::Checksum(ChecksumAt {
        start: 14,
        offset: 2,
    });
    let mut b = FrameBatch::new(1);
    b.next_slot().unwrap()[..f.len()].copy_from_slice(&f);
    b.commit_offloaded(f.len(), o);
    let refused = sw.forward(up, 0, &b, &mut FdbCache::default());
    assert_eq!(refused.unretaggable, 1);
    assert!(got(&r).is_empty());
}

#[test]
fn many_retagged_frames_are_delivered_in_scratch_sized_pieces() {
    let sw = Switch::new(Duration::from_secs(300));
    let (vm, _) = port(&sw, PortVlan::Access(7));
    let (_, rup) = port(&sw, PortVlan::trunk_all());
    let frames: Vec<Vec<u8>> = (0..200).map(|_| untagged(Mac::BROADCAST, A)).collect();
    assert!(send(&sw, vm, &frames).is_quiet());
    let out = got(&rup);
    assert_eq!(out.len(), 200);
    assert!(out
        .iter()
        .all(|f| *f == tagged(Mac::BROADCAST, A, &[(0x8100, 7)])));
}
