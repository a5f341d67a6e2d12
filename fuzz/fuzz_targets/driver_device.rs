//! Arbitrary bytes become a sequence of driver and device operations on
//! one queue; every buffer the driver adds must come back exactly once,
//! and the device must never reject a chain a correct driver built.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vadapt_virtq::{Chain, DeviceQueue, DriverQueue, GuestMemory, QueueLayout, RingFeatures, Seg};

fuzz_target!(|data: &[u8]| {
    let [cfg, sz, s0, s1, ops @ ..] = data else {
        return;
    };
    let size = 1u16 << (sz % 6);
    let f = RingFeatures::from_bits(u64::from(*cfg) << 28);
    let start = u16::from_le_bytes([*s0, *s1]);
    let mem = GuestMemory::new_anonymous(1 << 20).unwrap();
    let (layout, _) = QueueLayout::contiguous(size, 0);
    let mut drv = DriverQueue::new_at(&mem, layout, f, start).unwrap();
    let mut dev = DeviceQueue::new(&mem, layout, false, f, start).unwrap();
    let mut chain = Chain::with_capacity(size.into());
    let mut in_flight = std::collections::HashSet::new();
    // Indirect tables: one 1 KiB slot per in-flight buffer, never reused early.
    let mut free_tables: Vec<u64> = (0..64).map(|k| 0x80000 + 0x400 * k).collect();
    let mut table_of = std::collections::HashMap::new();
    for (i, op) in ops.iter().chain(&[0xff; 2]).enumerate() {
        let n = op >> 4;
        match op & 0xf {
            0..=3 => {
                let segs: Vec<Seg> = (0..=(n % 4))
                    .map(|k| Seg {
                        gpa: 0x10000 + 0x800 * ((i as u64 + k as u64) % 128),
                        len: u32::from(n) * 9,
                        writable: k >= (n & 3) / 2,
                    })
                    .collect();
                let table = free_tables
                    .last()
                    .copied()
                    .filter(|_| op & 1 == 1 && f.indirect);
                let r = match table {
                    Some(t) => drv.add_indirect(&segs, t),
                    None => drv.add(&segs),
                };
                if let Ok(h) = r {
                    assert!(in_flight.insert(h));
                    if let Some(t) = table {
                        free_tables.pop();
                        table_of.insert(h, t);
                    }
                }
            }
            4 | 5 => {
                drv.publish();
                let _ = drv.kick_prepare();
            }
            6..=9 => {
                let mut last = None;
                for _ in 0..=n {
                    let Some(h) = dev.pop(&mem, &mut chain).expect("valid chain") else {
                        break;
                    };
                    if op & 1 == 0 || !f.in_order {
                        dev.push_used(h, chain.writable_len())
                    }
                    last = Some((h, last.map_or(1, |(_, c)| c + 1)));
                }
                if let (Some((h, c)), true) = (last, op & 1 == 1 && f.in_order) {
                    dev.push_used_batch_in_order(h, c);
                }
                dev.flush_used();
                let _ = dev.needs_call();
            }
            10 => {
                let _ = dev.enable_notifications();
            }
            11 => dev.disable_notifications(),
            12 => drv.disable_cb(),
            13 => {
                let _ = drv.enable_cb_delayed();
            }
            _ => {
                while let Some((h, _)) = drv.pop_used() {
                    assert!(in_flight.remove(&h));
                    free_tables.extend(table_of.remove(&h));
                }
            }
        }
    }
    // Drain everything that was published.
    drv.publish();
    while let Some(h) = dev.pop(&mem, &mut chain).expect("valid chain") {
        dev.push_used(h, 0)
    }
    dev.flush_used();
    while let Some((h, _)) = drv.pop_used() {
        assert!(in_flight.remove(&h))
    }
    assert!(in_flight.is_empty());
    assert_eq!(drv.num_free(), size);
});
