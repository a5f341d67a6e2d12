//! Every `ChainErrorKind`, each from a hand-built bad ring.

mod common;

use std::collections::HashSet;
use vadapt_virtq::DeviceRing;

use common::*;
use vadapt_virtq::spec::{
    Descriptor, VIRTQ_DESC_F_INDIRECT as IND, VIRTQ_DESC_F_NEXT as NEXT,
    VIRTQ_DESC_F_WRITE as WRITE,
};
use vadapt_virtq::{ChainError, ChainErrorKind, GuestMemory, RingFeatures};

const SIZE: u16 = 8;

fn d(addr: u64, len: u32, flags: u16, next: u16) -> Descriptor {
    Descriptor {
        addr,
        len,
        flags,
        next,
    }
}

/// Writes `descs` at table indices 0.., publishes `head`, pops once.
fn pop_with(
    features: RingFeatures,
    descs: &[Descriptor],
    head: u16,
) -> (Setup, Result<Option<u16>, ChainError>) {
    let mut s = setup(SIZE, features);
    let r = raw(&s);
    for (i, desc) in descs.iter().enumerate() {
        r.set_desc(i as u16, *desc);
    }
    r.push_avail(head);
    let res = s.device.pop(&s.mem, &mut s.chain);
    (s, res)
}

fn expect(
    features: RingFeatures,
    descs: &[Descriptor],
    head: u16,
    kind: ChainErrorKind,
) -> ChainErrorKind {
    let (mut s, res) = pop_with(features, descs, head);
    let err = res.expect_err("chain must be rejected");
    assert_eq!(err.kind, kind);
    // The entry is consumed; the head, when valid, can be returned.
    assert_eq!(s.device.last_avail(), 1);
    if let Some(h) = err.head {
        assert_eq!(h, head);
        s.device.push_used(h, 0);
        assert_eq!(s.device.flush_used(), 1);
        assert_eq!(raw(&s).used_entry(0), (u32::from(h), 0));
    }
    // The queue goes on: a good chain pops next.
    let r = raw(&s);
    r.set_desc(7, d(buf(0), 64, 0, 0));
    r.push_avail(7);
    assert_eq!(s.device.pop(&s.mem, &mut s.chain), Ok(Some(7)));
    kind
}

#[test]
fn every_chain_error_kind_is_detected() {
    let ind = RingFeatures {
        indirect: true,
        ..Default::default()
    };
    let none = RingFeatures::default();
    let table = buf(100);
    let mut seen = HashSet::new();

    // Head index outside the table: not returnable.
    let (_, res) = pop_with(none, &[], SIZE);
    let err = res.unwrap_err();
    assert_eq!((err.head, err.kind), (None, ChainErrorKind::HeadOutOfRange));
    seen.insert(err.kind);

    seen.insert(expect(
        none,
        &[d(buf(0), 10, NEXT, SIZE)],
        0,
        ChainErrorKind::DescIndexOutOfRange,
    ));
    seen.insert(expect(
        none,
        &[d(MEM_SIZE - 10, 20, 0, 0)],
        0,
        ChainErrorKind::AddressOutOfRange,
    ));
    expect(
        none,
        &[d(u64::MAX - 5, 10, 0, 0)],
        0,
        ChainErrorKind::AddressOutOfRange,
    );
    expect(
        none,
        &[d(buf(0), 10, NEXT, 1), d(MEM_SIZE, 0, 0, 0)],
        0,
        ChainErrorKind::AddressOutOfRange,
    );
    seen.insert(expect(
        none,
        &[d(buf(0), 10, NEXT, 1), d(buf(1), 10, NEXT, 0)],
        0,
        ChainErrorKind::ChainTooLong,
    ));
    expect(
        none,
        &[d(buf(0), 10, NEXT, 0)],
        0,
        ChainErrorKind::ChainTooLong,
    );
    seen.insert(expect(
        none,
        &[d(buf(0), 10, NEXT | WRITE, 1), d(buf(1), 10, 0, 0)],
        0,
        ChainErrorKind::ReadableAfterWritable,
    ));
    seen.insert(expect(
        none,
        &[d(table, 32, IND, 0)],
        0,
        ChainErrorKind::IndirectNotNegotiated,
    ));
    seen.insert(expect(
        ind,
        &[d(table, 32, IND | NEXT, 1)],
        0,
        ChainErrorKind::IndirectWithNext,
    ));
    seen.insert(expect(
        ind,
        &[d(table, 0, IND, 0)],
        0,
        ChainErrorKind::IndirectTableEmpty,
    ));
    seen.insert(expect(
        ind,
        &[d(table, 20, IND, 0)],
        0,
        ChainErrorKind::IndirectTableMisaligned,
    ));
    seen.insert(expect(
        ind,
        &[d(table, 16 * (u32::from(SIZE) + 1), IND, 0)],
        0,
        ChainErrorKind::IndirectTableTooLarge,
    ));
    seen.insert(expect(
        ind,
        &[d(MEM_SIZE - 16, 32, IND, 0)],
        0,
        ChainErrorKind::IndirectTableOutOfRange,
    ));

    // Bad contents inside an indirect table.
    let with_table = |entries: &[Descriptor], kind| {
        let mut s = setup(SIZE, ind);
        let r = raw(&s);
        for (i, e) in entries.iter().enumerate() {
            s.mem.write(table + 16 * i as u64, &e.to_bytes()).unwrap();
        }
        r.set_desc(2, d(table, 16 * entries.len() as u32, IND, 0));
        r.push_avail(2);
        let err = s.device.pop(&s.mem, &mut s.chain).unwrap_err();
        assert_eq!(
            err,
            ChainError {
                head: Some(2),
                kind
            }
        );
        kind
    };
    seen.insert(with_table(
        &[d(buf(0), 10, IND, 0)],
        ChainErrorKind::NestedIndirect,
    ));
    with_table(
        &[d(buf(0), 10, NEXT, 2), d(buf(1), 1, 0, 0)],
        ChainErrorKind::DescIndexOutOfRange,
    );
    with_table(
        &[d(buf(0), 10, NEXT, 1), d(buf(1), 1, NEXT, 0)],
        ChainErrorKind::ChainTooLong,
    );
    with_table(
        &[d(buf(0), 10, WRITE | NEXT, 1), d(buf(1), 1, 0, 0)],
        ChainErrorKind::ReadableAfterWritable,
    );
    with_table(&[d(MEM_SIZE, 1, 0, 0)], ChainErrorKind::AddressOutOfRange);

    // avail.idx more than `size` ahead: nothing consumed, reported each time.
    let mut s = setup(SIZE, none);
    raw(&s).set_avail_idx(SIZE + 1);
    for _ in 0..2 {
        let err = s.device.pop(&s.mem, &mut s.chain).unwrap_err();
        assert_eq!(
            (err.head, err.kind),
            (None, ChainErrorKind::AvailIndexAhead)
        );
        assert_eq!(s.device.last_avail(), 0);
    }
    assert!(s.device.avail_pending().is_err());
    assert!(s.device.has_avail(), "a corrupt index is for pop to report");
    seen.insert(ChainErrorKind::AvailIndexAhead);

    // Length overflow needs buffers whose sum exceeds 4 GiB: a 3 GiB
    // mapping that is never touched (only the ring pages are).
    let big = GuestMemory::new_anonymous(3 << 30).unwrap();
    let (layout, _) = vadapt_virtq::QueueLayout::contiguous(SIZE, 0);
    let mut drv = vadapt_virtq::DriverQueue::new(&big, layout, none).unwrap();
    let mut dev = vadapt_virtq::DeviceQueue::new(&big, layout, false, none, 0).unwrap();
    let half = 0x8000_0000u32;
    drv.add(&[readable(1 << 20, half), readable(1 << 20, half)])
        .unwrap();
    drv.publish();
    let mut chain = vadapt_virtq::Chain::with_capacity(8);
    let err = dev.pop(&big, &mut chain).unwrap_err();
    assert_eq!(err.kind, ChainErrorKind::LengthOverflow);
    seen.insert(err.kind);

    let all: HashSet<_> = ChainErrorKind::ALL.into_iter().collect();
    assert_eq!(seen, all, "every kind must have a test");
}

#[test]
fn error_kind_indices_are_dense_and_names_unique() {
    let names: HashSet<_> = ChainErrorKind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(names.len(), ChainErrorKind::ALL.len());
    for (i, k) in ChainErrorKind::ALL.iter().enumerate() {
        assert_eq!(k.index(), i);
    }
}

#[test]
fn indirect_write_flag_on_the_table_descriptor_is_ignored() {
    let ind = RingFeatures {
        indirect: true,
        ..Default::default()
    };
    let mut s = setup(SIZE, ind);
    let table = buf(50);
    s.mem
        .write(table, &d(buf(0), 100, NEXT, 1).to_bytes())
        .unwrap();
    s.mem
        .write(table + 16, &d(buf(1), 200, WRITE, 0).to_bytes())
        .unwrap();
    let r = raw(&s);
    r.set_desc(3, d(table, 32, IND | WRITE, 0));
    r.push_avail(3);
    assert_eq!(s.device.pop(&s.mem, &mut s.chain), Ok(Some(3)));
    assert_eq!((s.chain.readable_len(), s.chain.writable_len()), (100, 200));
}
