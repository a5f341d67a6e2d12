//! The virtqueue fuzz drivers, one of each for both ring kinds: each is
//! generic over the device's contract ([`DeviceRing`]), and the targets
//! differ only in the ring they build from the fuzzer's bytes.
//!
//! * [`serve`] (targets `split_device` and `packed_device`): arbitrary
//!   bytes become a small guest memory holding a ring (descriptors,
//!   available ring or event structures, indirect tables, buffers); the
//!   device pops, copies, holds some buffers and gives them back in and out
//!   of order, until the ring is drained. Every segment handed out must lie
//!   inside guest memory; nothing may panic or loop.
//! * [`drive`] (targets `driver_device` and `packed_driver_device`):
//!   arbitrary bytes become driver and device operations on one ring; every
//!   buffer the driver adds must come back exactly once, and the device
//!   must never reject a buffer a correct driver built.

use std::collections::{HashMap, HashSet};

use vadapt_virtq::packed::{PackedDeviceQueue, PackedDriverQueue, PackedLayout, RingPos};
use vadapt_virtq::{
    AnyDriverQueue, Chain, ChainError, ChainErrorKind, DeviceQueue, DeviceRing, DriverQueue,
    GuestMemory, QueueLayout, RingFeatures, Seg,
};

/// Guest memory of the `*_device` targets: rings, tables and buffers.
const MEM: u64 = 1 << 16;

/// A packed ring position valid for `size` from two arbitrary bytes.
fn packed_start(size: u16, lo: u8, hi: u8) -> u16 {
    let v = u16::from_le_bytes([lo, hi]);
    RingPos {
        idx: (v & 0x7fff) % size,
        wrap: v & 0x8000 != 0,
    }
    .to_u16()
}

/// Guest memory holding `bytes` from address 0 (as much as fits).
fn memory_of(bytes: &[u8]) -> GuestMemory {
    let mem = GuestMemory::new_anonymous(MEM).unwrap();
    mem.write(0, &bytes[..bytes.len().min(MEM as usize)])
        .unwrap();
    mem
}

/// The `split_device` target: `[cfg, size, next_avail (2), ring bytes…]`,
/// a split ring of a power-of-two size up to 256 whose buffers are given
/// back as soon as they are popped. Returns the buffers popped without
/// error.
pub fn split_device(data: &[u8]) -> usize {
    let [cfg, sz, a0, a1, rest @ ..] = data else {
        return 0;
    };
    let size = 1u16 << (sz % 9); // 1..=256
    let features = RingFeatures::from_bits(u64::from(*cfg) << 28);
    let mem = memory_of(rest);
    let (layout, _) = QueueLayout::contiguous(size, 0);
    let next_avail = u16::from_le_bytes([*a0, *a1]);
    let mut q = DeviceQueue::new(&mem, layout, false, features, next_avail).unwrap();
    serve(&mut q, &mem, *cfg, 0)
}

/// The `packed_device` target: `[cfg, size (2), start (2), hold, ring
/// bytes…]`, a packed ring of any size up to 300 (not only powers of two)
/// whose buffers are given back as `hold` says. Returns the buffers popped
/// without error (for the seed's test).
pub fn packed_device(data: &[u8]) -> usize {
    let [cfg, s0, s1, a0, a1, hold, rest @ ..] = data else {
        return 0;
    };
    let size = 1 + u16::from_le_bytes([*s0, *s1]) % 300;
    let features = RingFeatures::from_bits(u64::from(*cfg) << 28);
    let mem = memory_of(rest);
    let (layout, _) = PackedLayout::contiguous(size, 0);
    let start = packed_start(size, *a0, *a1);
    let mut q = PackedDeviceQueue::new(&mem, layout, false, features, start).unwrap();
    let good = serve(&mut q, &mem, *cfg, *hold);
    assert_eq!(q.stray_used(), 0);
    assert_eq!(q.in_flight(), 0);
    good
}

/// Serves `q`, a ring over `mem` built from arbitrary bytes, until it is
/// drained (or `4 * size + 4` steps), checking every segment handed out.
/// `cfg` bit 0 picks how kicks are asked for; each two bits of `hold` say
/// what a step does with the buffers it holds: give them all back, in pop
/// order (0) or reversed (1), in one in-order batch (2, with IN_ORDER), or
/// keep them (3). Everything held is given back at the end. Returns the
/// buffers popped without error.
pub fn serve<D: DeviceRing>(q: &mut D, mem: &GuestMemory, cfg: u8, hold: u8) -> usize {
    let size = q.size();
    let in_order = q.features().in_order;
    let mut chain = Chain::with_capacity(size.into());
    let mut buf = [0u8; 1600];
    let mut held: Vec<(u16, u32)> = Vec::new();
    let mut good = 0;
    for i in 0..4 * u32::from(size) + 4 {
        match q.pop(mem, &mut chain) {
            Ok(None)
            | Err(ChainError {
                kind: ChainErrorKind::AvailIndexAhead,
                head: None,
            }) => {
                if held.is_empty() {
                    break;
                }
            }
            Ok(Some(id)) => {
                for s in chain.segments() {
                    assert!(mem.contains_host_range(s.ptr, s.len.into()));
                }
                assert!(chain.num_segments() <= 2 * usize::from(size));
                let n = chain.read_into(i as usize % 7, &mut buf);
                let w = chain.write_from(1, &buf[..n]);
                held.push((id, w as u32));
                good += 1;
            }
            Err(e) => held.extend(e.head.map(|h| (h, 0))),
        }
        match (hold >> ((i % 4) * 2)) & 3 {
            0 => held.drain(..).for_each(|(h, w)| q.push_used(h, w)),
            1 => held.drain(..).rev().for_each(|(h, w)| q.push_used(h, w)),
            2 if in_order && !held.is_empty() => {
                let (last, _) = held[held.len() - 1];
                assert!(q.push_used_batch_in_order(last, held.len() as u16));
                held.clear();
            }
            _ => {}
        }
        if i % 3 == 0 {
            q.flush_used();
            let _ = q.needs_call();
            let _ = q.avail_pending();
            let _ = if cfg & 1 != 0 {
                q.enable_notifications().is_ok()
            } else {
                q.set_kick_threshold(4)
            };
        }
    }
    held.drain(..).for_each(|(h, w)| q.push_used(h, w));
    q.flush_used();
    let _ = q.needs_call();
    good
}

/// The `driver_device` target: `[cfg, size, start (2), operations…]`, a
/// split ring of a power-of-two size up to 32.
pub fn split_driver_device(data: &[u8]) {
    let [cfg, sz, s0, s1, ops @ ..] = data else {
        return;
    };
    let size = 1u16 << (sz % 6);
    let f = RingFeatures::from_bits(u64::from(*cfg) << 28);
    let start = u16::from_le_bytes([*s0, *s1]);
    let mem = GuestMemory::new_anonymous(1 << 20).unwrap();
    let (layout, _) = QueueLayout::contiguous(size, 0);
    let drv = DriverQueue::new_at(&mem, layout, f, start).unwrap();
    let mut dev = DeviceQueue::new(&mem, layout, false, f, start).unwrap();
    drive(&mem, AnyDriverQueue::Split(drv), &mut dev, ops);
}

/// The `packed_driver_device` target: `[cfg, size, start (2),
/// operations…]`, a packed ring of any size up to 64.
pub fn packed_driver_device(data: &[u8]) {
    let [cfg, sz, s0, s1, ops @ ..] = data else {
        return;
    };
    let size = 1 + u16::from(*sz) % 64;
    let f = RingFeatures::from_bits(u64::from(*cfg) << 28);
    let at = packed_start(size, *s0, *s1);
    let mem = GuestMemory::new_anonymous(1 << 20).unwrap();
    let (layout, _) = PackedLayout::contiguous(size, 0);
    let drv = PackedDriverQueue::new_at(&mem, layout, f, at).unwrap();
    let mut dev = PackedDeviceQueue::new(&mem, layout, false, f, at).unwrap();
    drive(&mem, AnyDriverQueue::Packed(drv), &mut dev, ops);
    assert_eq!(dev.stray_used(), 0);
}

/// Runs `ops`, one byte an operation, on a driver and a device over the
/// same ring in `mem` (1 MiB: ring at 0, buffers from 64 KiB, indirect
/// tables from 512 KiB): low nibble 0–3 add a buffer of up to four
/// segments (indirect for odd ones, with `VIRTIO_F_INDIRECT_DESC`), 4–5
/// publish and kick, 6–9 pop up to `high nibble + 1` buffers and give them
/// back (in order, as one in-order batch or reversed, put back with
/// `unpop`, or held), 10–11 device notifications on and off, 12–13 driver
/// callbacks off and delayed-on, the rest take the used buffers back. At
/// the end everything is drained, and every buffer added must have come
/// back exactly once.
pub fn drive<D: DeviceRing>(mem: &GuestMemory, mut drv: AnyDriverQueue, dev: &mut D, ops: &[u8]) {
    let size = dev.size();
    let f = dev.features();
    let mut chain = Chain::with_capacity(size.into());
    let mut in_flight = HashSet::new();
    // Indirect tables: one 1 KiB slot per in-flight buffer, never reused early.
    let mut free_tables: Vec<u64> = (0..64).map(|k| 0x80000 + 0x400 * k).collect();
    let mut table_of = HashMap::new();
    let mut held: Vec<(u16, u32)> = Vec::new();
    for (i, op) in ops.iter().chain(&[0xff; 2]).enumerate() {
        let n = op >> 4;
        match op & 0xf {
            0..=3 => {
                let segs: Vec<Seg> = (0..=(n % 4))
                    .map(|k| Seg {
                        gpa: 0x10000 + 0x800 * ((i as u64 + u64::from(k)) % 128),
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
                for _ in 0..=n {
                    let Some(h) = dev.pop(mem, &mut chain).expect("valid buffer") else {
                        break;
                    };
                    held.push((h, chain.writable_len()));
                }
                match op & 3 {
                    0 => held.drain(..).for_each(|(h, w)| dev.push_used(h, w)),
                    1 if f.in_order && !held.is_empty() => {
                        let (last, _) = held[held.len() - 1];
                        dev.push_used_batch_in_order(last, held.len() as u16);
                        held.clear();
                    }
                    1 => held.drain(..).rev().for_each(|(h, w)| dev.push_used(h, w)),
                    2 => dev.unpop(held.drain(..).count() as u16),
                    _ => {} // hold them for a while
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
                let _ = drv.call_owed();
            }
            _ => {
                while let Some((h, _)) = drv.pop_used() {
                    assert!(in_flight.remove(&h));
                    free_tables.extend(table_of.remove(&h));
                }
            }
        }
    }
    // Drain everything: held buffers first (in order), then the rest.
    drv.publish();
    held.drain(..).for_each(|(h, w)| dev.push_used(h, w));
    while let Some(h) = dev.pop(mem, &mut chain).expect("valid buffer") {
        dev.push_used(h, 0)
    }
    dev.flush_used();
    while let Some((h, _)) = drv.pop_used() {
        assert!(in_flight.remove(&h))
    }
    assert!(in_flight.is_empty());
    assert_eq!(drv.num_free(), size);
    assert_eq!(drv.bad_used_entries(), 0);
}

#[cfg(test)]
mod tests {
    /// A small deterministic generator (xorshift64), so the tests need no
    /// dependency and fail the same way every time.
    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// The seed is a well-formed ring of 8 (a chain, a single buffer, an
    /// indirect table, a chain of three, then a descriptor not available):
    /// the device pops all four buffers.
    #[test]
    fn the_seed_ring_pops_four_buffers() {
        let seed = include_bytes!("../seeds/packed_device/eight-buffers-chained-indirect");
        assert_eq!(super::packed_device(seed), 4);
    }

    #[test]
    fn split_device_survives_random_rings() {
        for seed in 0..300 {
            let _ = super::split_device(&bytes(seed, 64 + (seed as usize * 37) % 5000));
        }
    }

    #[test]
    fn packed_device_survives_random_rings() {
        for seed in 0..300 {
            let mut b = bytes(seed, 64 + (seed as usize * 37) % 5000);
            // Every third input: flags that look available on lap 1.
            if seed % 3 == 0 {
                for d in b[6..].chunks_mut(16).filter(|d| d.len() == 16) {
                    d[15] &= 0x7f;
                    d[14] |= 0x80;
                }
            }
            let _ = super::packed_device(&b);
        }
    }

    #[test]
    fn driver_and_device_agree_on_random_operations() {
        for seed in 0..300 {
            let ops = bytes(seed, 8 + (seed as usize * 13) % 400);
            super::split_driver_device(&ops);
            super::packed_driver_device(&ops);
        }
    }
}
