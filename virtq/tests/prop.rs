//! Property tests: random driver behaviour against the device, and random
//! garbage rings against the device's checks.

mod common;

use std::collections::HashMap;
use vadapt_virtq::DeviceRing;

use common::*;
use proptest::prelude::*;
use vadapt_virtq::spec::Descriptor;
use vadapt_virtq::{ChainErrorKind, RingFeatures, Seg};

#[derive(Clone, Debug)]
enum Op {
    /// Add a buffer: `readable` + `writable` segments, maybe indirect.
    Add {
        readable: u8,
        writable: u8,
        indirect: bool,
        len: u32,
    },
    Publish,
    Kick,
    /// Device pops up to `n` chains and publishes them, IN_ORDER-batched
    /// if `batch` and negotiated.
    Serve {
        n: u8,
        batch: bool,
    },
    DriverPop(u8),
    DisableCb,
    EnableCb,
    DeviceDisable,
    DeviceEnable,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u8..3, any::<bool>(), 0u32..300).prop_map(|(readable, writable, indirect, len)| Op::Add {
            readable,
            writable,
            indirect,
            len
        }),
        2 => Just(Op::Publish),
        1 => Just(Op::Kick),
        3 => (1u8..8, any::<bool>()).prop_map(|(n, batch)| Op::Serve { n, batch }),
        2 => (1u8..8).prop_map(Op::DriverPop),
        1 => Just(Op::DisableCb),
        1 => Just(Op::EnableCb),
        1 => Just(Op::DeviceDisable),
        1 => Just(Op::DeviceEnable),
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

/// Where the device records what it expects the driver to get back.
struct Model {
    /// Segments of each in-flight head, as the driver added them.
    added: HashMap<u16, Vec<Seg>>,
    /// Heads the device has used, with the length the driver must see.
    expected_len: HashMap<u16, u32>,
    next_table: u64,
}

fn serve(s: &mut Setup, m: &mut Model, n: u8, batch: bool) {
    let mut popped = Vec::new();
    for _ in 0..n {
        match s.device.pop(&s.mem, &mut s.chain) {
            Ok(Some(head)) => {
                let segs: Vec<Seg> = s
                    .chain
                    .segments()
                    .map(|g| Seg {
                        gpa: g.gpa,
                        len: g.len,
                        writable: g.writable,
                    })
                    .collect();
                assert_eq!(
                    Some(&segs),
                    m.added.get(&head),
                    "chain of head {head} as added"
                );
                for g in s.chain.segments() {
                    assert!(s.mem.contains_host_range(g.ptr, u64::from(g.len)));
                }
                // Fill the writable part, as an RX path would.
                let w = s.chain.writable_len();
                let fill = vec![0xa5u8; w as usize];
                assert_eq!(s.chain.write_from(0, &fill), w as usize);
                popped.push((head, w));
            }
            Ok(None) => break,
            Err(e) => panic!("valid driver produced a bad chain: {e:?}"),
        }
    }
    if batch && s.device.features().in_order && !popped.is_empty() {
        let (last, _) = *popped.last().unwrap();
        for &(h, w) in &popped {
            m.expected_len.insert(h, if h == last { 0 } else { w });
        }
        assert!(s.device.push_used_batch_in_order(last, popped.len() as u16));
    } else {
        for &(h, w) in &popped {
            m.expected_len.insert(h, w);
            s.device.push_used(h, w);
        }
    }
    s.device.flush_used();
    let _ = s.device.needs_call();
}

fn driver_pop(s: &mut Setup, m: &mut Model, n: u8) {
    for _ in 0..n {
        let Some((head, len)) = s.driver.pop_used() else {
            break;
        };
        assert!(
            m.added.remove(&head).is_some(),
            "head {head} returned but not in flight"
        );
        assert_eq!(
            m.expected_len.remove(&head),
            Some(len),
            "length of head {head}"
        );
    }
}

fn add(s: &mut Setup, m: &mut Model, readable: u8, writable: u8, indirect: bool, len: u32) {
    let mut segs = Vec::new();
    for i in 0..(readable + writable).max(1) {
        let gpa = buf(u64::from(i) + 8 * u64::from(s.driver.avail_idx() % 64));
        segs.push(Seg {
            gpa,
            len: len + u32::from(i),
            writable: i >= readable,
        });
    }
    let r = if indirect && s.driver.features().indirect {
        // Indirect tables in their own area, recycled round-robin (at most
        // `size` tables are in flight).
        let table = (BUF_BASE + (1 << 20)) + 512 * (m.next_table % 256);
        m.next_table += 1;
        s.driver.add_indirect(&segs, table)
    } else {
        s.driver.add(&segs)
    };
    if let Ok(head) = r {
        assert!(
            m.added.insert(head, segs).is_none(),
            "head {head} handed out twice"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_driver_ops_return_every_buffer_once(
        size_log in 0u32..5,
        f in features(),
        start in any::<u16>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let size = 1u16 << size_log;
        let mut s = setup_at(size, f, start);
        let mut m = Model { added: HashMap::new(), expected_len: HashMap::new(), next_table: 0 };
        for o in ops {
            match o {
                Op::Add { readable, writable, indirect, len } => add(&mut s, &mut m, readable, writable, indirect, len),
                Op::Publish => s.driver.publish(),
                Op::Kick => { let _ = s.driver.kick_prepare(); }
                Op::Serve { n, batch } => serve(&mut s, &mut m, n, batch),
                Op::DriverPop(n) => driver_pop(&mut s, &mut m, n),
                Op::DisableCb => s.driver.disable_cb(),
                Op::EnableCb => { let _ = s.driver.enable_cb(); }
                Op::DeviceDisable => s.device.disable_notifications(),
                Op::DeviceEnable => { prop_assert!(s.device.enable_notifications().is_ok()); }
            }
            // The empty-pass check agrees with the count.
            prop_assert_eq!(s.device.has_avail(), s.device.avail_pending() != Ok(0));
        }
        // Drain: everything added comes back exactly once.
        s.driver.publish();
        serve(&mut s, &mut m, 255, false);
        driver_pop(&mut s, &mut m, 255);
        prop_assert!(m.added.is_empty(), "not returned: {:?}", m.added.keys());
        prop_assert_eq!(s.driver.num_free(), size);
        prop_assert_eq!(s.driver.bad_used_entries(), 0);
        prop_assert_eq!(s.device.last_avail(), s.driver.avail_idx());
    }
}

fn garbage_desc(size: u16) -> impl Strategy<Value = Descriptor> {
    let addr = prop_oneof![
        3 => 0u64..MEM_SIZE,
        2 => (0u64..16).prop_map(|k| BUF_BASE + 16 * k),
        1 => MEM_SIZE - 64..MEM_SIZE + 64,
        1 => any::<u64>(),
    ];
    let len = prop_oneof![3 => 0u32..4096, 1 => any::<u32>(), 1 => (0u32..8).prop_map(|n| n * 16)];
    // Mostly plausible flags (NEXT/WRITE), sometimes INDIRECT combinations.
    let flags = prop_oneof![6 => 0u16..4, 1 => 4u16..8];
    // Mostly in-range `next`, sometimes just past the end.
    let next = prop_oneof![4 => 0..size, 1 => size..size + 2];
    (addr, len, flags, next).prop_map(|(addr, len, flags, next)| Descriptor {
        addr,
        len,
        flags,
        next,
    })
}

/// A queue size and garbage for its descriptor table, an indirect-table
/// area and the available ring.
#[allow(clippy::type_complexity)]
fn garbage_ring() -> impl Strategy<Value = (u16, Vec<Descriptor>, Vec<Descriptor>, Vec<u16>)> {
    (0u32..4).prop_flat_map(|size_log| {
        let size = 1u16 << size_log;
        (
            Just(size),
            proptest::collection::vec(garbage_desc(size), size as usize),
            proptest::collection::vec(garbage_desc(8), 16),
            proptest::collection::vec(prop_oneof![4 => 0..size, 1 => size..size + 4], 16),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn garbage_rings_never_escape_memory(
        (size, descs, table, heads) in garbage_ring(),
        f in features(),
        start in any::<u16>(),
        ahead in 0u16..24,
    ) {
        let mut s = setup_at(size, f, start);
        let r = raw(&s);
        for i in 0..size {
            r.set_desc(i, descs[i as usize]);
        }
        // Indirect tables pointing at low memory may land here.
        for (i, d) in table.iter().enumerate() {
            s.mem.write(BUF_BASE + 16 * i as u64, &d.to_bytes()).unwrap();
        }
        for (i, h) in heads.iter().enumerate() {
            r.set_avail_entry(start.wrapping_add(i as u16), *h);
        }
        r.set_avail_idx(start.wrapping_add(ahead));
        // Anything made available, or an index run ahead, is seen.
        prop_assert_eq!(s.device.has_avail(), ahead > 0);
        let mut popped = 0u32;
        for _ in 0..(3 * u32::from(size) + 3) {
            match s.device.pop(&s.mem, &mut s.chain) {
                Ok(None) => break,
                Ok(Some(head)) => {
                    prop_assert!(head < size);
                    let mut seen_w = false;
                    let (mut rl, mut wl) = (0u64, 0u64);
                    for g in s.chain.segments() {
                        prop_assert!(s.mem.contains_host_range(g.ptr, u64::from(g.len)));
                        prop_assert_eq!(s.mem.translate(g.gpa, u64::from(g.len)), Some(g.ptr));
                        prop_assert!(!seen_w || g.writable, "readable after writable");
                        seen_w |= g.writable;
                        if g.writable { wl += u64::from(g.len) } else { rl += u64::from(g.len) }
                    }
                    prop_assert_eq!(rl, u64::from(s.chain.readable_len()));
                    prop_assert_eq!(wl, u64::from(s.chain.writable_len()));
                    prop_assert!(s.chain.num_segments() <= 2 * size as usize);
                    let mut sink = vec![0u8; 256];
                    s.chain.read_into(0, &mut sink);
                    s.chain.write_from(1, &sink[..100]);
                    s.device.push_used(head, s.chain.writable_len());
                    popped += 1;
                }
                Err(e) => {
                    if e.kind == ChainErrorKind::AvailIndexAhead {
                        prop_assert!(ahead > size);
                        break;
                    }
                    if let Some(h) = e.head {
                        prop_assert!(h < size);
                        s.device.push_used(h, 0);
                    }
                    popped += 1;
                }
            }
            s.device.flush_used();
            let _ = s.device.needs_call();
        }
        if ahead <= size {
            prop_assert_eq!(popped, u32::from(ahead), "every published entry consumed once");
        }
    }
}
