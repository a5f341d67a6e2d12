//! Packed ring: buffers through a driver and a device over many laps, with
//! sizes that are not powers of two, chains across the wrap, indirect
//! tables and IN_ORDER batches.

use vadapt_virtq::mock::{buf, readable, writable};
use vadapt_virtq::packed::{PackedMockQueue, RingPos, VIRTQ_DESC_F_AVAIL, VIRTQ_DESC_F_USED};
use vadapt_virtq::DeviceRing;
use vadapt_virtq::RingFeatures;

const PLAIN: RingFeatures = RingFeatures {
    event_idx: false,
    in_order: false,
    indirect: false,
};

fn with(in_order: bool, indirect: bool) -> RingFeatures {
    RingFeatures {
        event_idx: false,
        in_order,
        indirect,
    }
}

/// Serves everything available: checks what the device sees against
/// `expect` (readable bytes per buffer), writes `w` bytes back.
fn serve_all(q: &mut PackedMockQueue) -> Vec<(u16, u32, u32, usize)> {
    let mut got = Vec::new();
    while let Some(id) = q.device.pop(&q.mem, &mut q.chain).expect("valid buffer") {
        let (r, w) = (q.chain.readable_len(), q.chain.writable_len());
        for s in q.chain.segments() {
            assert!(q.mem.contains_host_range(s.ptr, u64::from(s.len)));
        }
        got.push((id, r, w, q.chain.num_segments()));
        q.device.push_used(id, w);
    }
    q.device.flush_used();
    got
}

#[test]
fn single_buffers_over_many_laps_of_odd_sizes() {
    for size in [1u16, 3, 5, 7, 100, 257] {
        let mut q = PackedMockQueue::new(size, PLAIN);
        let mut sent = 0u64;
        // Ten laps, in bursts of up to `size` buffers of varying count.
        for burst in 0..(10 * u64::from(size)) {
            let n = 1 + (burst % u64::from(size)) as u16;
            let mut ids = Vec::new();
            for k in 0..n {
                let len = 1 + ((sent + u64::from(k)) % 1500) as u32;
                ids.push((
                    q.driver.add(&[writable(buf(u64::from(k)), len)]).unwrap(),
                    len,
                ));
            }
            q.driver.publish();
            let got = serve_all(&mut q);
            assert_eq!(got.len(), usize::from(n), "size {size}");
            for (&(id, len), &(gid, _, w, _)) in ids.iter().zip(&got) {
                assert_eq!((gid, w), (id, len));
            }
            for &(id, len) in &ids {
                assert_eq!(q.driver.pop_used(), Some((id, len)), "size {size}");
            }
            assert_eq!(q.driver.pop_used(), None);
            assert_eq!(q.driver.num_free(), size);
            sent += u64::from(n);
        }
        assert_eq!(q.device.last_avail(), q.driver.avail_idx());
        assert_eq!(q.device.used_idx(), q.driver.last_used());
        assert_eq!(q.device.stray_used(), 0);
    }
}

#[test]
fn chains_cross_the_end_of_the_ring_and_flip_the_wrap_counter() {
    let mut q = PackedMockQueue::new(5, PLAIN);
    // Positions 0..3 once, then a 3-descriptor chain at 3, 4, 0.
    for _ in 0..3 {
        q.driver.add(&[readable(buf(0), 10)]).unwrap();
    }
    q.driver.publish();
    assert_eq!(serve_all(&mut q).len(), 3);
    while q.driver.pop_used().is_some() {}
    let id = q
        .driver
        .add(&[
            readable(buf(1), 7),
            writable(buf(2), 20),
            writable(buf(3), 30),
        ])
        .unwrap();
    // The third descriptor sits at 0 with the flipped wrap counter.
    let d = q.desc(0);
    assert_eq!(
        d.flags & (VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED),
        VIRTQ_DESC_F_USED
    );
    assert_eq!(d.id, id);
    q.driver.publish();
    let got = serve_all(&mut q);
    assert_eq!(got, vec![(id, 7, 50, 3)]);
    assert_eq!(
        RingPos::from_u16(q.device.last_avail()),
        RingPos {
            idx: 1,
            wrap: false
        }
    );
    // One used descriptor, at the chain's first position, with both flag
    // bits equal to the used wrap counter (still 1 there).
    let u = q.desc(3);
    assert_eq!((u.id, u.len), (id, 50));
    assert_eq!(
        u.flags & (VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED),
        VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED
    );
    assert_eq!(q.driver.pop_used(), Some((id, 50)));
    assert_eq!(
        RingPos::from_u16(q.driver.last_used()),
        RingPos {
            idx: 1,
            wrap: false
        }
    );
    // On the next lap used descriptors carry wrap 0: both bits clear.
    q.driver.add(&[readable(buf(0), 1)]).unwrap();
    q.driver.publish();
    serve_all(&mut q);
    assert_eq!(
        q.desc(1).flags & (VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED),
        0
    );
    assert!(q.driver.pop_used().is_some());
}

#[test]
fn starting_mid_ring_on_wrap_zero() {
    let start = RingPos {
        idx: 2,
        wrap: false,
    }
    .to_u16();
    let mut q = PackedMockQueue::starting_at(3, PLAIN, start);
    assert_eq!(q.driver.pop_used(), None, "a fresh ring has nothing used");
    for lap in 0..7u32 {
        let id = q
            .driver
            .add(&[readable(buf(0), 3), writable(buf(1), lap)])
            .unwrap();
        q.driver.publish();
        assert_eq!(serve_all(&mut q), vec![(id, 3, lap, 2)]);
        assert_eq!(q.driver.pop_used(), Some((id, lap)));
    }
}

#[test]
fn out_of_order_completion_skips_by_each_buffers_descriptors() {
    let mut q = PackedMockQueue::new(7, PLAIN);
    for lap in 0..20 {
        let a = q
            .driver
            .add(&[
                readable(buf(0), 1),
                readable(buf(1), 2),
                readable(buf(2), 3),
            ])
            .unwrap();
        let b = q.driver.add(&[writable(buf(3), 4)]).unwrap();
        let c = q
            .driver
            .add(&[readable(buf(4), 5), writable(buf(5), 6)])
            .unwrap();
        q.driver.publish();
        let mut popped = Vec::new();
        while let Some(id) = q.device.pop(&q.mem, &mut q.chain).unwrap() {
            popped.push((id, q.chain.writable_len()));
        }
        assert_eq!(
            popped.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![a, b, c]
        );
        // Reverse order, one flush.
        for &(id, w) in popped.iter().rev() {
            q.device.push_used(id, w + lap);
        }
        assert_eq!(q.device.flush_used(), 3);
        assert_eq!(q.driver.pop_used(), Some((c, 6 + lap)));
        assert_eq!(q.driver.pop_used(), Some((b, 4 + lap)));
        assert_eq!(q.driver.pop_used(), Some((a, lap)));
        assert_eq!(q.driver.pop_used(), None);
        assert_eq!(q.driver.num_free(), 7);
    }
}

#[test]
fn indirect_tables_in_the_ring_and_across_laps() {
    let mut q = PackedMockQueue::new(6, with(false, true));
    let table = buf(500);
    for lap in 0..15u64 {
        let segs = [
            readable(buf(lap), 12),
            readable(buf(lap + 1), 13),
            writable(buf(lap + 2), 100),
        ];
        let a = q
            .driver
            .add_indirect(&segs, table + 0x100 * (lap % 4))
            .unwrap();
        let b = q
            .driver
            .add(&[readable(buf(9), 9), writable(buf(10), 10)])
            .unwrap();
        q.driver.publish();
        let got = serve_all(&mut q);
        assert_eq!(got, vec![(a, 25, 100, 3), (b, 9, 10, 2)]);
        assert_eq!(q.driver.pop_used(), Some((a, 100)));
        assert_eq!(q.driver.pop_used(), Some((b, 10)));
    }
}

#[test]
fn in_order_batches_are_one_used_descriptor() {
    let mut q = PackedMockQueue::new(10, with(true, true));
    for lap in 0..12u32 {
        let a = q.driver.add(&[readable(buf(0), 60)]).unwrap();
        let b = q
            .driver
            .add(&[readable(buf(1), 61), readable(buf(2), 1)])
            .unwrap();
        let c = q
            .driver
            .add_indirect(&[readable(buf(3), 62), writable(buf(4), 5)], buf(400))
            .unwrap();
        let d = q.driver.add(&[readable(buf(5), 63)]).unwrap();
        q.driver.publish();
        let first = q.device.used_idx();
        let mut last = 0;
        let mut n = 0;
        while let Some(id) = q.device.pop(&q.mem, &mut q.chain).unwrap() {
            last = id;
            n += 1;
        }
        assert_eq!((last, n), (d, 4));
        assert!(q.device.push_used_batch_in_order(last, n));
        assert_eq!(q.device.flush_used(), 4);
        // One used descriptor at the batch's first position; the used
        // position moved by the batch's five descriptors.
        let f = RingPos::from_u16(first);
        assert_eq!(q.desc(f.idx).id, d);
        assert_eq!(RingPos::from_u16(q.device.used_idx()), f.advance(5, 10));
        assert_eq!(q.driver.pop_used(), Some((a, 0)));
        assert_eq!(q.driver.pop_used(), Some((b, 0)));
        assert_eq!(
            q.driver.pop_used(),
            Some((c, 5)),
            "lap {lap}: full writable length"
        );
        assert_eq!(q.driver.pop_used(), Some((d, 0)));
        assert_eq!(q.driver.pop_used(), None);
        assert_eq!(q.driver.num_free(), 10);
    }
    // Without IN_ORDER a batch is refused.
    let mut q = PackedMockQueue::new(4, PLAIN);
    assert!(!q.device.push_used_batch_in_order(0, 1));
}

#[test]
fn unpop_puts_buffers_back_for_the_next_pop() {
    let mut q = PackedMockQueue::new(5, PLAIN);
    let a = q
        .driver
        .add(&[writable(buf(0), 10), writable(buf(1), 10)])
        .unwrap();
    let b = q.driver.add(&[writable(buf(2), 10)]).unwrap();
    q.driver.publish();
    assert_eq!(q.device.avail_pending(), Ok(3), "descriptors");
    assert_eq!(q.device.pop(&q.mem, &mut q.chain), Ok(Some(a)));
    assert_eq!(q.device.pop(&q.mem, &mut q.chain), Ok(Some(b)));
    assert_eq!(q.device.avail_pending(), Ok(0));
    q.device.unpop(2);
    assert_eq!(q.device.avail_pending(), Ok(3));
    assert_eq!(q.device.in_flight(), 0);
    assert_eq!(serve_all(&mut q).len(), 2);
    assert_eq!(q.driver.pop_used(), Some((a, 20)));
    assert_eq!(q.driver.pop_used(), Some((b, 10)));
    // A stray id is ignored and counted.
    q.device.push_used(3, 0);
    assert_eq!(q.device.stray_used(), 1);
    assert_eq!(q.device.flush_used(), 0);
}

#[test]
fn largest_ring_wraps() {
    let mut q = PackedMockQueue::starting_at(
        32768,
        PLAIN,
        RingPos {
            idx: 32766,
            wrap: true,
        }
        .to_u16(),
    );
    let id = q
        .driver
        .add(&[
            readable(buf(0), 1),
            readable(buf(1), 1),
            readable(buf(2), 1),
        ])
        .unwrap();
    q.driver.publish();
    assert_eq!(serve_all(&mut q), vec![(id, 3, 0, 3)]);
    assert_eq!(q.driver.pop_used(), Some((id, 0)));
    assert_eq!(
        RingPos::from_u16(q.driver.last_used()),
        RingPos {
            idx: 1,
            wrap: false
        }
    );
}
