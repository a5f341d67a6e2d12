//! Packed ring property tests: a driver and a device exchanging random
//! buffers over many laps agree on every id and length; arbitrary bytes in
//! the ring never panic either side nor make the device reach outside
//! guest memory.

use std::collections::HashMap;
use vadapt_virtq::DeviceRing;

use proptest::prelude::*;
use vadapt_virtq::mock::{buf, BUF_BASE, MEM_SIZE};
use vadapt_virtq::packed::{EventSuppression, PackedDescriptor, PackedMockQueue, RingPos};
use vadapt_virtq::{ChainErrorKind, RingFeatures, Seg};

#[derive(Clone, Debug)]
enum Op {
    Add {
        readable: u8,
        writable: u8,
        indirect: bool,
        len: u32,
    },
    Publish,
    Kick,
    /// Device pops up to `n` buffers and gives them back: batched if
    /// IN_ORDER and `batch`, else in reverse if `reverse`.
    Serve {
        n: u8,
        batch: bool,
        reverse: bool,
    },
    /// Device pops `n` and puts them back.
    Unpop(u8),
    DriverPop(u8),
    DisableCb,
    EnableCb,
    EnableCbDelayed,
    DeviceDisable,
    DeviceEnable,
    Threshold(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..3, 0u8..3, any::<bool>(), 0u32..300).prop_map(|(readable, writable, indirect, len)| Op::Add { readable, writable, indirect, len }),
        2 => Just(Op::Publish),
        1 => Just(Op::Kick),
        3 => (1u8..8, any::<bool>(), any::<bool>()).prop_map(|(n, batch, reverse)| Op::Serve { n, batch, reverse }),
        1 => (1u8..4).prop_map(Op::Unpop),
        2 => (1u8..8).prop_map(Op::DriverPop),
        1 => Just(Op::DisableCb),
        1 => Just(Op::EnableCb),
        1 => Just(Op::EnableCbDelayed),
        1 => Just(Op::DeviceDisable),
        1 => Just(Op::DeviceEnable),
        1 => (0u16..50).prop_map(Op::Threshold),
    ]
}

fn features() -> impl Strategy<Value = RingFeatures> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(event_idx, in_order, indirect)| {
        RingFeatures {
            event_idx,
            in_order,
            indirect,
        }
    })
}

#[derive(Default)]
struct Model {
    added: HashMap<u16, Vec<Seg>>,
    expected_len: HashMap<u16, u32>,
    next_table: u64,
}

fn segs_of(q: &PackedMockQueue) -> Vec<Seg> {
    q.chain
        .segments()
        .map(|g| Seg {
            gpa: g.gpa,
            len: g.len,
            writable: g.writable,
        })
        .collect()
}

fn serve(q: &mut PackedMockQueue, m: &mut Model, n: u8, batch: bool, reverse: bool) {
    let mut popped = Vec::new();
    for _ in 0..n {
        match q.device.pop(&q.mem, &mut q.chain) {
            Ok(Some(id)) => {
                assert_eq!(Some(&segs_of(q)), m.added.get(&id), "buffer {id} as added");
                let w = q.chain.writable_len();
                let fill = vec![0x5au8; w as usize];
                assert_eq!(q.chain.write_from(0, &fill), w as usize);
                popped.push((id, w));
            }
            Ok(None) => break,
            Err(e) => panic!("a valid driver produced a bad buffer: {e:?}"),
        }
    }
    if batch && q.device.features().in_order && !popped.is_empty() {
        let (last, _) = *popped.last().unwrap();
        for &(id, w) in &popped {
            m.expected_len.insert(id, if id == last { 0 } else { w });
        }
        assert!(q.device.push_used_batch_in_order(last, popped.len() as u16));
    } else {
        if reverse && !q.device.features().in_order {
            popped.reverse();
        }
        for &(id, w) in &popped {
            m.expected_len.insert(id, w);
            q.device.push_used(id, w);
        }
    }
    assert_eq!(q.device.flush_used() as usize, popped.len());
    let _ = q.device.needs_call();
}

fn driver_pop(q: &mut PackedMockQueue, m: &mut Model, n: u8) {
    for _ in 0..n {
        let Some((id, len)) = q.driver.pop_used() else {
            break;
        };
        assert!(
            m.added.remove(&id).is_some(),
            "id {id} returned but not in flight"
        );
        assert_eq!(m.expected_len.remove(&id), Some(len), "length of id {id}");
    }
}

fn add(
    q: &mut PackedMockQueue,
    m: &mut Model,
    readable: u8,
    writable: u8,
    indirect: bool,
    len: u32,
) {
    let at = u64::from(q.driver.avail_idx() % 64);
    let segs: Vec<Seg> = (0..(readable + writable).max(1))
        .map(|i| Seg {
            gpa: buf(u64::from(i) + 8 * at),
            len: len + u32::from(i),
            writable: i >= readable,
        })
        .collect();
    let r = if indirect && q.driver.features().indirect {
        // Tables recycled round-robin; at most `size` are in flight.
        let table = BUF_BASE + (1 << 20) + 512 * (m.next_table % 64);
        m.next_table += 1;
        q.driver.add_indirect(&segs, table)
    } else {
        q.driver.add(&segs)
    };
    if let Ok(id) = r {
        assert!(
            m.added.insert(id, segs).is_none(),
            "id {id} handed out twice"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn driver_and_device_agree_over_many_laps(
        size in 1u16..40,
        start_idx in any::<u16>(),
        start_wrap in any::<bool>(),
        f in features(),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let start = RingPos { idx: start_idx % size, wrap: start_wrap }.to_u16();
        let mut q = PackedMockQueue::starting_at(size, f, start);
        let mut m = Model::default();
        for o in ops {
            match o {
                Op::Add { readable, writable, indirect, len } => add(&mut q, &mut m, readable, writable, indirect, len),
                Op::Publish => q.driver.publish(),
                Op::Kick => { let _ = q.driver.kick_prepare(); }
                Op::Serve { n, batch, reverse } => serve(&mut q, &mut m, n, batch, reverse),
                Op::Unpop(n) => {
                    let mut k = 0;
                    while k < n && matches!(q.device.pop(&q.mem, &mut q.chain), Ok(Some(_))) { k += 1; }
                    q.device.unpop(u16::from(k));
                }
                Op::DriverPop(n) => driver_pop(&mut q, &mut m, n),
                Op::DisableCb => q.driver.disable_cb(),
                Op::EnableCb => { let _ = q.driver.enable_cb(); }
                Op::EnableCbDelayed => { let _ = q.driver.enable_cb_delayed(); let _ = q.driver.call_owed(); }
                Op::DeviceDisable => q.device.disable_notifications(),
                Op::DeviceEnable => { prop_assert!(q.device.enable_notifications().is_ok()); }
                Op::Threshold(n) => { let _ = q.device.enable_notifications_for(n); }
            }
            prop_assert!(q.device.avail_pending().is_ok());
            // The empty-pass check agrees with the count.
            prop_assert_eq!(q.device.has_avail(), q.device.avail_pending() != Ok(0));
        }
        q.driver.publish();
        serve(&mut q, &mut m, 255, false, false);
        driver_pop(&mut q, &mut m, 255);
        prop_assert!(m.added.is_empty(), "not returned: {:?}", m.added.keys());
        prop_assert_eq!(q.driver.num_free(), size);
        prop_assert_eq!(q.driver.bad_used_entries(), 0);
        prop_assert_eq!(q.device.stray_used(), 0);
        prop_assert_eq!(q.device.last_avail(), q.driver.avail_idx());
        prop_assert_eq!(q.device.used_idx(), q.driver.last_used());
    }
}

fn garbage_desc() -> impl Strategy<Value = PackedDescriptor> {
    let addr = prop_oneof![
        3 => 0u64..MEM_SIZE,
        2 => (0u64..16).prop_map(|k| BUF_BASE + 16 * k),
        1 => MEM_SIZE - 64..MEM_SIZE + 64,
        1 => any::<u64>(),
    ];
    let len = prop_oneof![3 => 0u32..4096, 1 => any::<u32>(), 1 => (0u32..8).prop_map(|n| n * 16)];
    // Flags: mostly NEXT/WRITE/INDIRECT with avail/used bits, sometimes anything.
    let flags = prop_oneof![
        6 => (0u16..8, 0u16..4).prop_map(|(low, au)| low | ((au & 1) << 7) | ((au >> 1) << 15)),
        1 => any::<u16>(),
    ];
    (addr, len, any::<u16>(), flags).prop_map(|(addr, len, id, flags)| PackedDescriptor {
        addr,
        len,
        id,
        flags,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn garbage_rings_never_escape_memory(
        size in 1u16..20,
        start_idx in any::<u16>(),
        start_wrap in any::<bool>(),
        f in features(),
        descs in proptest::collection::vec(garbage_desc(), 20),
        table in proptest::collection::vec(garbage_desc(), 16),
        events in any::<(u32, u32)>(),
        give_back in any::<u64>(),
    ) {
        let start = RingPos { idx: start_idx % size, wrap: start_wrap }.to_u16();
        let mut q = PackedMockQueue::starting_at(size, f, start);
        for i in 0..size {
            q.set_desc(i, descs[usize::from(i)]);
        }
        for (i, d) in table.iter().enumerate() {
            q.mem.write(BUF_BASE + 16 * i as u64, &d.to_bytes()).unwrap();
        }
        q.set_driver_event(EventSuppression::from_word(events.0));
        q.set_device_event(EventSuppression::from_word(events.1));
        let mut held = Vec::new();
        let mut pops = 0u32;
        for step in 0..(4 * u32::from(size) + 4) {
            match q.device.pop(&q.mem, &mut q.chain) {
                Ok(None) => break,
                Ok(Some(id)) => {
                    let (mut rl, mut wl, mut seen_w) = (0u64, 0u64, false);
                    for g in q.chain.segments() {
                        prop_assert!(q.mem.contains_host_range(g.ptr, u64::from(g.len)));
                        prop_assert_eq!(q.mem.translate(g.gpa, u64::from(g.len)), Some(g.ptr));
                        prop_assert!(!seen_w || g.writable, "readable after writable");
                        seen_w |= g.writable;
                        if g.writable { wl += u64::from(g.len) } else { rl += u64::from(g.len) }
                    }
                    prop_assert_eq!(rl, u64::from(q.chain.readable_len()));
                    prop_assert_eq!(wl, u64::from(q.chain.writable_len()));
                    prop_assert!(q.chain.num_segments() <= 2 * usize::from(size));
                    let mut sink = vec![0u8; 256];
                    q.chain.read_into(0, &mut sink);
                    q.chain.write_from(1, &sink[..100]);
                    held.push((id, q.chain.writable_len()));
                    pops += 1;
                }
                Err(e) => {
                    if e.kind == ChainErrorKind::AvailIndexAhead {
                        prop_assert!(e.head.is_none());
                        prop_assert_eq!(q.device.in_flight(), held.len());
                    }
                    if let Some(id) = e.head { held.push((id, 0)) }
                    pops += 1;
                }
            }
            // Give back some of what is held, sometimes out of order.
            if give_back >> (step % 64) & 1 == 1 {
                while let Some((id, w)) = held.pop() { q.device.push_used(id, w) }
            }
            q.device.flush_used();
            let _ = q.device.needs_call();
            // Whatever the ring holds, the empty-pass check never says
            // "nothing" while `pop` would find something (or an error).
            if !q.device.has_avail() {
                prop_assert_eq!(q.device.avail_pending(), Ok(0));
            }
            let _ = q.device.enable_notifications_for(3);
            // The driver reading whatever the device wrote never panics.
            let _ = q.driver.pop_used();
            let _ = q.driver.call_owed();
            let _ = q.driver.kick_prepare();
        }
        prop_assert!(pops <= 4 * u32::from(size) + 4);
        prop_assert_eq!(q.device.stray_used(), 0);
    }
}
