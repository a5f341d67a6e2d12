//! The ring services over a packed ring (`VIRTIO_F_RING_PACKED`): the
//! same transmit and receive passes as over a split ring, the ring behind
//! [`AnyDeviceQueue`], driven by the packed driver of `vadapt-virtq`'s
//! mock. Sizes that are not powers of two, and laps over the wrap.

use super::ring::test_utils::{eventfd, frame, UNLIMITED};
use super::ring::Ring;
use super::rx::{RxPending, RxService};
use super::tx::TxService;
use crate::frames::{Backlog, FrameBatch};
use crate::net::GuestOffloads;
use vadapt_virtq::mock::{buf, readable, writable};
use vadapt_virtq::packed::{PackedDescriptor, PackedMockQueue};
use vadapt_virtq::{AnyDeviceQueue, GuestMemory, PackedDriverQueue, RingFeatures};
use vadapt_wire::vnet_hdr::HDR_LEN_MRG;

/// The guest's side of a packed ring: its memory and its driver.
struct Guest {
    mem: GuestMemory,
    driver: PackedDriverQueue,
}

/// A running packed ring of `size` entries, and the guest that drives it.
fn packed_ring(size: u16) -> (Ring, Guest) {
    packed_ring_with(size, RingFeatures::default()).0
}

/// [`packed_ring`] with `features`; also where its descriptors lie.
fn packed_ring_with(size: u16, features: RingFeatures) -> ((Ring, Guest), u64) {
    let PackedMockQueue {
        mem,
        driver,
        device,
        layout,
        ..
    } = PackedMockQueue::new(size, features);
    let ring = Ring {
        q: AnyDeviceQueue::Packed(device),
        kick: eventfd(),
        call: Some(eventfd()),
        broken: false,
        log: None,
    };
    ((ring, Guest { mem, driver }), layout.desc)
}

/// Frames sent by the guest reach the switch in order, whole, for many
/// laps of a ring of 7 (the buffer ids and the wrap counters move on).
#[test]
fn transmitted_frames_reach_the_switch_over_many_laps() {
    let (mut r, mut g) = packed_ring(7);
    let mut tx = TxService::new(HDR_LEN_MRG, 8);
    let mut n = 0u8;
    for lap in 0..20u8 {
        let mut sent = Vec::new();
        for k in 0..3u64 {
            let f = frame(lap.wrapping_mul(3).wrapping_add(k as u8), 60 + k as usize);
            let at = buf(k);
            g.mem.write(at, &[0; HDR_LEN_MRG]).unwrap();
            g.mem.write(at + HDR_LEN_MRG as u64, &f).unwrap();
            g.driver
                .add(&[
                    readable(at, HDR_LEN_MRG as u32),
                    readable(at + HDR_LEN_MRG as u64, f.len() as u32),
                ])
                .unwrap();
            sent.push(f);
        }
        g.driver.publish();
        let mut got = Vec::new();
        let pass = tx.serve(&mut r, &g.mem, UNLIMITED, |b| {
            got.extend((0..b.len()).map(|i| b.get(i).to_vec()));
        });
        assert_eq!(pass.packets, 3, "lap {lap}");
        assert_eq!(got, sent, "lap {lap}");
        assert!(!r.broken);
        let used = std::iter::from_fn(|| g.driver.pop_used()).count();
        assert_eq!(used, 3, "every buffer given back, lap {lap}");
        n = n.wrapping_add(3);
    }
    assert_eq!(n, 60);
}

/// Frames from the switch land in the guest's receive buffers behind
/// their header, with the lengths the packed driver reads back.
#[test]
fn received_frames_land_in_the_guests_buffers() {
    let (mut r, mut g) = packed_ring(7);
    let mut rx = RxService::new(HDR_LEN_MRG, false);
    let none = GuestOffloads {
        csum: false,
        tso4: false,
        tso6: false,
        ecn: false,
    };
    for lap in 0..10u8 {
        let frames = [frame(lap, 60), frame(lap.wrapping_add(100), 1514)];
        let bl = Backlog::new(16);
        let mut batch = FrameBatch::new(16);
        for f in &frames {
            assert!(batch.push(f));
        }
        bl.push(&batch, &[0, 1]);
        let mut pending = RxPending::for_backlog(&bl);
        let ids: Vec<u16> = (0..2u64)
            .map(|i| g.driver.add(&[writable(buf(i), 2048)]).unwrap())
            .collect();
        g.driver.publish();
        let pass = rx.serve(Some(&mut r), &g.mem, &bl, &mut pending, UNLIMITED, none);
        assert_eq!((pass.packets, pass.bytes), (2, 60 + 1514), "lap {lap}");
        for f in &frames {
            let (id, len) = g.driver.pop_used().expect("a used buffer");
            let slot = ids.iter().position(|&i| i == id).unwrap() as u64;
            assert_eq!(len as usize, HDR_LEN_MRG + f.len(), "lap {lap}");
            let mut b = vec![0u8; f.len()];
            g.mem.read(buf(slot) + HDR_LEN_MRG as u64, &mut b).unwrap();
            assert_eq!(&b, f, "lap {lap}");
        }
    }
}

/// With IN_ORDER a transmit pass gives its buffers back with one used
/// descriptor naming the last of them (spec 2.8.9), written where the
/// first one lay; the driver takes all of them back, in order, and over
/// laps of a ring whose size is not a power of two.
#[test]
fn in_order_transmit_gives_a_pass_back_with_one_used_descriptor() {
    let features = RingFeatures {
        in_order: true,
        ..RingFeatures::default()
    };
    let ((mut r, mut g), desc) = packed_ring_with(7, features);
    let mut tx = TxService::new(HDR_LEN_MRG, 8);
    let mut first_slot = 0u64;
    for lap in 0..10u8 {
        let mut ids = Vec::new();
        for k in 0..3u64 {
            let f = frame(lap.wrapping_add(k as u8), 60);
            let at = buf(k);
            g.mem.write(at, &[0; HDR_LEN_MRG]).unwrap();
            g.mem.write(at + HDR_LEN_MRG as u64, &f).unwrap();
            ids.push(
                g.driver
                    .add(&[readable(at, (HDR_LEN_MRG + f.len()) as u32)])
                    .unwrap(),
            );
        }
        g.driver.publish();
        let pass = tx.serve(&mut r, &g.mem, UNLIMITED, |_| {});
        assert_eq!(pass.packets, 3, "lap {lap}");
        let mut raw = [0u8; 16];
        g.mem.read(desc + 16 * first_slot, &mut raw).unwrap();
        let used = PackedDescriptor::from_bytes(raw);
        assert_eq!(
            used.id, ids[2],
            "lap {lap}: the batch's one used descriptor names its last buffer"
        );
        let back: Vec<u16> = std::iter::from_fn(|| g.driver.pop_used())
            .map(|(id, _)| id)
            .collect();
        assert_eq!(back, ids, "lap {lap}");
        assert_eq!(g.driver.bad_used_entries(), 0);
        first_slot = (first_slot + 3) % 7;
    }
}
