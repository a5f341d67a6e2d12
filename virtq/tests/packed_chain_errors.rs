//! Packed ring: every chain error kind that applies, each from a
//! hand-built bad ring, and the queue going on afterwards.

use std::collections::HashSet;
use vadapt_virtq::DeviceRing;

use vadapt_virtq::mock::{buf, BUF_BASE, MEM_SIZE};
use vadapt_virtq::packed::{PackedDescriptor, PackedMockQueue, RingPos, VIRTQ_DESC_F_AVAIL};
use vadapt_virtq::spec::{
    VIRTQ_DESC_F_INDIRECT as IND, VIRTQ_DESC_F_NEXT as NEXT, VIRTQ_DESC_F_WRITE as WRITE,
};
use vadapt_virtq::{ChainErrorKind, RingFeatures};

const SIZE: u16 = 6;
const AV: u16 = VIRTQ_DESC_F_AVAIL; // available on lap 1

fn d(addr: u64, len: u32, id: u16, flags: u16) -> PackedDescriptor {
    PackedDescriptor {
        addr,
        len,
        id,
        flags: flags | AV,
    }
}

/// Writes `descs` at ring positions 0.., pops once, expects `kind`, the id
/// of the last descriptor, and that the queue goes on: the buffer returned,
/// a good one popped after it.
fn expect(f: RingFeatures, descs: &[PackedDescriptor], kind: ChainErrorKind) -> ChainErrorKind {
    let mut q = PackedMockQueue::new(SIZE, f);
    for (i, x) in descs.iter().enumerate() {
        q.set_desc(i as u16, *x);
    }
    let err = q
        .device
        .pop(&q.mem, &mut q.chain)
        .expect_err("must be rejected");
    assert_eq!(err.kind, kind);
    let consumed = descs.len() as u16;
    let at = RingPos::default().advance(u32::from(consumed), SIZE);
    assert_eq!(
        q.device.last_avail(),
        at.to_u16(),
        "the whole buffer consumed"
    );
    let id = err.head.expect("returnable");
    assert_eq!(id, descs.last().unwrap().id);
    q.device.push_used(id, 0);
    assert_eq!(q.device.flush_used(), 1);
    assert_eq!(
        q.desc(0).id,
        id,
        "used descriptor at the buffer's first position"
    );
    if consumed < SIZE {
        q.set_desc(consumed, d(buf(0), 64, 42, 0));
        assert_eq!(q.device.pop(&q.mem, &mut q.chain), Ok(Some(42)));
    }
    kind
}

#[test]
fn every_applicable_chain_error_kind_is_detected() {
    let ind = RingFeatures {
        indirect: true,
        ..Default::default()
    };
    let none = RingFeatures::default();
    let table = buf(100);
    let mut seen = HashSet::new();
    let e = |a, l, f| PackedDescriptor {
        addr: a,
        len: l,
        id: 0,
        flags: f,
    };

    seen.insert(expect(
        none,
        &[d(MEM_SIZE - 8, 64, 1, 0)],
        ChainErrorKind::AddressOutOfRange,
    ));
    // A bad first descriptor: the walk still goes to the chain's end.
    seen.insert(expect(
        none,
        &[
            d(u64::MAX, 64, 0, NEXT),
            d(buf(0), 1, 0, NEXT),
            d(buf(1), 1, 7, 0),
        ],
        ChainErrorKind::AddressOutOfRange,
    ));
    seen.insert(expect(
        none,
        &[d(buf(0), 64, 0, NEXT | WRITE), d(buf(1), 64, 2, 0)],
        ChainErrorKind::ReadableAfterWritable,
    ));
    seen.insert(expect(
        none,
        &[d(buf(0), u32::MAX, 0, NEXT), d(buf(1), 64, 3, 0)],
        ChainErrorKind::AddressOutOfRange,
    ));
    seen.insert(expect(
        none,
        &[d(table, 16, 4, IND)],
        ChainErrorKind::IndirectNotNegotiated,
    ));
    seen.insert(expect(
        ind,
        &[d(table, 16, 0, IND | NEXT), d(buf(0), 1, 5, 0)],
        ChainErrorKind::IndirectWithNext,
    ));
    seen.insert(expect(
        ind,
        &[d(table, 0, 6, IND)],
        ChainErrorKind::IndirectTableEmpty,
    ));
    seen.insert(expect(
        ind,
        &[d(table, 24, 7, IND)],
        ChainErrorKind::IndirectTableMisaligned,
    ));
    seen.insert(expect(
        ind,
        &[d(table, 16 * (u32::from(SIZE) + 1), 8, IND)],
        ChainErrorKind::IndirectTableTooLarge,
    ));
    seen.insert(expect(
        ind,
        &[d(MEM_SIZE - 16, 32, 9, IND)],
        ChainErrorKind::IndirectTableOutOfRange,
    ));
    // Every descriptor says NEXT: bounded by the ring, consumed whole.
    let all_next: Vec<_> = (0..SIZE).map(|i| d(buf(0), 1, 10 + i, NEXT)).collect();
    seen.insert(expect(none, &all_next, ChainErrorKind::ChainTooLong));

    // Inside indirect tables (each checked on its own ring).
    for (entries, kind) in [
        (vec![e(table, 16, IND)], ChainErrorKind::NestedIndirect),
        (
            vec![e(buf(0), 8, WRITE), e(buf(1), 8, 0)],
            ChainErrorKind::ReadableAfterWritable,
        ),
        (vec![e(MEM_SIZE, 1, 0)], ChainErrorKind::AddressOutOfRange),
        (
            vec![
                e(BUF_BASE, u32::MAX / 2 + 1, 0),
                e(BUF_BASE, u32::MAX / 2 + 1, 0),
            ],
            ChainErrorKind::AddressOutOfRange,
        ),
    ] {
        let mut r = PackedMockQueue::new(SIZE, ind);
        r.mem.write(table, &[0u8; 64]).unwrap();
        for (i, x) in entries.iter().enumerate() {
            r.mem.write(table + 16 * i as u64, &x.to_bytes()).unwrap();
        }
        r.set_desc(0, d(table, 16 * entries.len() as u32, 11, IND));
        let err = r.device.pop(&r.mem, &mut r.chain).unwrap_err();
        assert_eq!((err.head, err.kind), (Some(11), kind));
        seen.insert(kind);
    }

    // LengthOverflow needs buffers over 4 GiB in total inside guest memory:
    // the same check as the split ring's (`Chain::push`), tested there.
    for k in [
        ChainErrorKind::AddressOutOfRange,
        ChainErrorKind::ReadableAfterWritable,
        ChainErrorKind::IndirectNotNegotiated,
        ChainErrorKind::IndirectWithNext,
        ChainErrorKind::IndirectTableEmpty,
        ChainErrorKind::IndirectTableMisaligned,
        ChainErrorKind::IndirectTableTooLarge,
        ChainErrorKind::IndirectTableOutOfRange,
        ChainErrorKind::NestedIndirect,
        ChainErrorKind::ChainTooLong,
    ] {
        assert!(seen.contains(&k), "{k:?} not produced");
    }
}

#[test]
fn indirect_table_entries_ignore_next_and_id() {
    let ind = RingFeatures {
        indirect: true,
        ..Default::default()
    };
    let mut q = PackedMockQueue::new(SIZE, ind);
    let table = buf(100);
    let entries = [
        PackedDescriptor {
            addr: buf(0),
            len: 10,
            id: 999,
            flags: NEXT,
        },
        PackedDescriptor {
            addr: buf(1),
            len: 20,
            id: 0,
            flags: WRITE,
        },
    ];
    for (i, x) in entries.iter().enumerate() {
        q.mem.write(table + 16 * i as u64, &x.to_bytes()).unwrap();
    }
    // WRITE on the indirect descriptor itself is ignored (spec 2.8.7).
    q.set_desc(0, d(table, 32, 3, IND | WRITE));
    assert_eq!(q.device.pop(&q.mem, &mut q.chain), Ok(Some(3)));
    assert_eq!((q.chain.readable_len(), q.chain.writable_len()), (10, 20));
}

#[test]
fn more_available_than_the_ring_holds_is_a_corrupt_ring() {
    let mut q = PackedMockQueue::new(3, RingFeatures::default());
    for i in 0..3 {
        q.set_desc(i, d(buf(0), 1, i, 0));
    }
    for i in 0..3 {
        assert_eq!(q.device.pop(&q.mem, &mut q.chain), Ok(Some(i)));
    }
    // A hostile driver flips position 0 to "available" on lap 2 while the
    // device still holds all three buffers.
    q.set_desc(
        0,
        PackedDescriptor {
            addr: buf(0),
            len: 1,
            id: 0,
            flags: vadapt_virtq::packed::VIRTQ_DESC_F_USED,
        },
    );
    let err = q.device.pop(&q.mem, &mut q.chain).unwrap_err();
    assert_eq!(
        (err.head, err.kind),
        (None, ChainErrorKind::AvailIndexAhead)
    );
    assert!(q.device.avail_pending().is_err());
    assert!(q.device.has_avail(), "a corrupt ring is for pop to report");
    // Giving one back makes room again.
    q.device.push_used(0, 0);
    assert_eq!(q.device.pop(&q.mem, &mut q.chain), Ok(Some(0)));
}
