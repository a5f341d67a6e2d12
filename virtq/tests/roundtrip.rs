//! Driver <-> device round trips: TX, RX with mergeable-style multi-buffer
//! packets, indirect tables, IN_ORDER batching and 16-bit wrap-around.

mod common;

use common::*;
use vadapt_virtq::DeviceRing;
use vadapt_virtq::{Chain, RingFeatures};

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize * 31 + i * 7) as u8)
        .collect()
}

/// Sends `packets` TX packets of `len` bytes split header(12)+payload
/// through a queue, checking content and that each head comes back once.
fn tx_run(s: &mut Setup, packets: u32, len: usize) {
    let mut outstanding = std::collections::HashSet::new();
    let mut sent = 0u32;
    let mut received = 0u32;
    let mut out = vec![0u8; len];
    while received < packets {
        // Driver: fill what fits.
        while sent < packets && s.driver.num_free() >= 2 {
            let slot = u64::from(sent % 64);
            let data = pattern(sent, len);
            s.mem.write(buf(slot), &data).unwrap();
            let head = s
                .driver
                .add(&[
                    readable(buf(slot), 12),
                    readable(buf(slot) + 12, (len - 12) as u32),
                ])
                .unwrap();
            assert!(
                outstanding.insert(head),
                "head {head} reused while in flight"
            );
            sent += 1;
        }
        s.driver.publish();
        // Device: drain, check content.
        while let Some(head) = s.device.pop(&s.mem, &mut s.chain).unwrap() {
            assert!(s.chain.has_readable() && !s.chain.has_writable());
            assert_eq!(s.chain.readable_len() as usize, len);
            // Hints only: anywhere in, past or before the frame, nothing
            // faults and nothing changes.
            for skip in [0, 12, len - 1, len, usize::MAX] {
                s.chain.prefetch_readable(skip);
            }
            assert_eq!(s.chain.read_into(0, &mut out), len);
            assert_eq!(out, pattern(received, len), "packet {received}");
            let mut tail = [0u8; 4];
            assert_eq!(
                s.chain.read_into(len - 2, &mut tail),
                2,
                "read past the end is clipped"
            );
            received += 1;
            s.device.push_used(head, 0);
        }
        s.device.flush_used();
        while let Some((head, written)) = s.driver.pop_used() {
            assert_eq!(written, 0);
            assert!(outstanding.remove(&head), "head {head} returned twice");
        }
    }
    assert!(outstanding.is_empty());
    assert_eq!(s.driver.num_free(), s.layout.size);
    assert_eq!(s.driver.bad_used_entries(), 0);
}

#[test]
fn tx_round_trip() {
    let mut s = setup(16, RingFeatures::default());
    tx_run(&mut s, 200, 64);
}

#[test]
fn tx_round_trip_across_index_wrap() {
    for start in [65530u16, 65535, 32767] {
        let mut s = setup_at(8, RingFeatures::default(), start);
        tx_run(&mut s, 50, 100);
        assert_eq!(s.device.last_avail(), start.wrapping_add(50));
        assert_eq!(s.device.used_idx(), start.wrapping_add(50));
    }
    let mut s = setup_at(8, RingFeatures::all(), 65533);
    tx_run(&mut s, 50, 64);
}

#[test]
fn rx_mergeable_buffers() {
    // The device spreads a 4000-byte packet over three 1536-byte buffers,
    // the way virtio-net MRG_RXBUF does, and reports each buffer's length.
    for features in [RingFeatures::default(), RingFeatures::all()] {
        let mut s = setup(16, features);
        let mut heads = Vec::new();
        for i in 0..6 {
            heads.push(s.driver.add(&[writable(buf(i), 1536)]).unwrap());
        }
        s.driver.publish();
        let packet = pattern(7, 4000);
        let mut off = 0;
        let mut used = Vec::new();
        while off < packet.len() {
            let head = s.device.pop(&s.mem, &mut s.chain).unwrap().unwrap();
            assert!(s.chain.has_writable() && !s.chain.has_readable());
            let n = s.chain.write_from(0, &packet[off..]);
            assert_eq!(n, (packet.len() - off).min(1536));
            off += n;
            s.device.push_used(head, n as u32);
            used.push((head, n as u32));
        }
        s.device.flush_used();
        let mut back = Vec::new();
        while let Some((head, len)) = s.driver.pop_used() {
            let slot = heads.iter().position(|&h| h == head).unwrap() as u64;
            let mut b = vec![0u8; len as usize];
            s.mem.read(buf(slot), &mut b).unwrap();
            back.extend_from_slice(&b);
            assert!(used.contains(&(head, len)));
        }
        assert_eq!(back, packet, "{features:?}");
        assert_eq!(s.driver.outstanding(), 3);
    }
}

#[test]
fn rx_write_with_offset_spans_segments() {
    let mut s = setup(16, RingFeatures::default());
    s.driver
        .add(&[
            readable(buf(0), 10),
            writable(buf(1), 5),
            writable(buf(2), 5),
        ])
        .unwrap();
    s.driver.publish();
    s.device.pop(&s.mem, &mut s.chain).unwrap().unwrap();
    assert_eq!(s.chain.num_segments(), 3);
    assert_eq!(s.chain.write_from(3, b"abcdefgh"), 7, "clipped at the end");
    let mut a = [0u8; 5];
    let mut b = [0u8; 5];
    s.mem.read(buf(1), &mut a).unwrap();
    s.mem.read(buf(2), &mut b).unwrap();
    assert_eq!(&a, b"\0\0\0ab");
    assert_eq!(&b, b"cdefg");
}

#[test]
fn indirect_round_trip() {
    let f = RingFeatures {
        indirect: true,
        ..Default::default()
    };
    let mut s = setup(4, f);
    let segs = [
        readable(buf(0), 12),
        readable(buf(1), 52),
        writable(buf(2), 100),
    ];
    s.mem.write(buf(0), &pattern(1, 12)).unwrap();
    s.mem.write(buf(1), &pattern(2, 52)).unwrap();
    // More segments than the queue has descriptors: only indirect fits.
    let many: Vec<_> = (0..4).map(|i| readable(buf(10 + i), 8)).collect();
    let h1 = s.driver.add_indirect(&segs, buf(30)).unwrap();
    let h2 = s.driver.add_indirect(&many, buf(31)).unwrap();
    assert_eq!(s.driver.num_free(), 2);
    s.driver.publish();
    assert_eq!(s.device.pop(&s.mem, &mut s.chain), Ok(Some(h1)));
    assert_eq!((s.chain.readable_len(), s.chain.writable_len()), (64, 100));
    let mut out = [0u8; 64];
    assert_eq!(s.chain.read_into(0, &mut out), 64);
    assert_eq!(&out[..12], &pattern(1, 12)[..]);
    assert_eq!(&out[12..], &pattern(2, 52)[..]);
    s.device.push_used(h1, 7);
    assert_eq!(s.device.pop(&s.mem, &mut s.chain), Ok(Some(h2)));
    assert_eq!(s.chain.num_segments(), 4);
    s.device.push_used(h2, 0);
    s.device.flush_used();
    assert_eq!(s.driver.pop_used(), Some((h1, 7)));
    assert_eq!(s.driver.pop_used(), Some((h2, 0)));
    assert_eq!(s.driver.num_free(), 4);
    // Errors on the driver side.
    let too_many: Vec<_> = (0..5).map(|i| readable(buf(i), 8)).collect();
    assert!(s.driver.add_indirect(&too_many, buf(30)).is_err());
    assert!(s.driver.add_indirect(&segs, MEM_SIZE - 8).is_err());
}

#[test]
fn in_order_batch_uses_one_entry() {
    let f = RingFeatures {
        in_order: true,
        ..Default::default()
    };
    let mut s = setup(16, f);
    let r = raw(&s);
    for round in 0..5u64 {
        let mut heads = Vec::new();
        for i in 0..5 {
            // Three descriptors per packet, 15 per round: in order, the
            // chains move through the table and wrap from 15 to 0.
            heads.push(
                s.driver
                    .add(&[
                        readable(buf(i), 12),
                        readable(buf(i) + 12, 20),
                        readable(buf(i) + 32, 32),
                    ])
                    .unwrap(),
            );
        }
        s.driver.publish();
        let first = (round * 15 % 16) as u16;
        let expect: Vec<u16> = (0..5).map(|i| (first + 3 * i) % 16).collect();
        assert_eq!(heads, expect, "descriptors taken in table order");
        // Descriptors are used in table order: next = x + 1, wrapping to 0.
        let d = r.desc(heads[0]);
        assert_eq!(d.next, (heads[0] + 1) % 16);
        let start = s.device.used_idx();
        let mut last = 0;
        let mut n = 0;
        while let Some(h) = s.device.pop(&s.mem, &mut s.chain).unwrap() {
            last = h;
            n += 1;
        }
        assert_eq!(n, 5);
        assert!(s.device.push_used_batch_in_order(last, n));
        assert_eq!(s.device.flush_used(), 5);
        assert_eq!(r.used_idx(), start.wrapping_add(5));
        assert_eq!(
            r.used_entry(start),
            (u32::from(last), 0),
            "entry in the batch's first slot"
        );
        let got: Vec<_> = std::iter::from_fn(|| s.driver.pop_used()).collect();
        assert_eq!(got, heads.iter().map(|&h| (h, 0)).collect::<Vec<_>>());
        assert_eq!(s.driver.num_free(), 16);
    }
}

#[test]
fn in_order_mixes_batches_and_single_entries() {
    let f = RingFeatures {
        in_order: true,
        ..Default::default()
    };
    let mut s = setup(8, f);
    let heads: Vec<_> = (0..6)
        .map(|i| s.driver.add(&[writable(buf(i), 100)]).unwrap())
        .collect();
    s.driver.publish();
    for _ in 0..6 {
        s.device.pop(&s.mem, &mut s.chain).unwrap().unwrap();
    }
    // Batch of 2 (lengths reported as full writable size for the first,
    // 0 for the named last), then single entries with real lengths.
    s.device.push_used_batch_in_order(heads[1], 2);
    s.device.push_used(heads[2], 33);
    s.device.push_used_batch_in_order(heads[4], 2);
    s.device.flush_used();
    s.device.push_used(heads[5], 44);
    s.device.flush_used();
    let got: Vec<_> = std::iter::from_fn(|| s.driver.pop_used()).collect();
    assert_eq!(
        got,
        vec![
            (heads[0], 100),
            (heads[1], 0),
            (heads[2], 33),
            (heads[3], 100),
            (heads[4], 0),
            (heads[5], 44)
        ]
    );
}

#[test]
fn batch_in_order_refused_without_in_order() {
    let mut s = setup(8, RingFeatures::default());
    assert!(!s.device.push_used_batch_in_order(0, 1));
    assert_eq!(s.device.flush_used(), 0);
}

#[test]
fn copy_between_chains_of_two_queues() {
    // VM-to-VM switching: TX chain of one queue into RX chain of another.
    let mut a = setup(8, RingFeatures::default());
    let data = pattern(3, 300);
    a.mem.write(buf(0), &data[..100]).unwrap();
    a.mem.write(buf(1), &data[100..]).unwrap();
    a.driver
        .add(&[readable(buf(0), 100), readable(buf(1), 200)])
        .unwrap();
    a.driver.publish();
    a.device.pop(&a.mem, &mut a.chain).unwrap().unwrap();

    let mut b = setup(8, RingFeatures::default());
    b.driver
        .add(&[
            writable(buf(5), 50),
            writable(buf(6), 0),
            writable(buf(7), 1000),
        ])
        .unwrap();
    b.driver.publish();
    let mut rx = Chain::with_capacity(8);
    b.device.pop(&b.mem, &mut rx).unwrap().unwrap();
    assert_eq!(a.chain.copy_to_chain(10, &mut rx, 5), 290);
    let mut got = vec![0u8; 45];
    b.mem.read(buf(5) + 5, &mut got).unwrap();
    assert_eq!(&got[..], &data[10..55]);
    let mut got = vec![0u8; 245];
    b.mem.read(buf(7), &mut got).unwrap();
    assert_eq!(&got[..], &data[55..]);
}

#[test]
fn driver_rejects_bad_requests() {
    use vadapt_virtq::DriverError;
    let mut s = setup(4, RingFeatures::default());
    assert_eq!(s.driver.add(&[]), Err(DriverError::EmptyChain));
    assert_eq!(
        s.driver.add(&[writable(buf(0), 1), readable(buf(1), 1)]),
        Err(DriverError::ReadableAfterWritable)
    );
    let five: Vec<_> = (0..5).map(|i| readable(buf(i), 1)).collect();
    assert!(matches!(
        s.driver.add(&five),
        Err(DriverError::NoSpace { .. })
    ));
    assert_eq!(
        s.driver.add_indirect(&five, buf(20)),
        Err(DriverError::IndirectNotNegotiated)
    );
}
