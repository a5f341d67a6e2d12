//! Arbitrary bytes become a small guest memory holding a queue (descriptor
//! table, available ring, indirect tables, buffers); the device pops,
//! copies, pushes and flushes until the ring is drained. Every segment
//! handed out must lie inside guest memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vadapt_virtq::{Chain, ChainErrorKind, DeviceQueue, GuestMemory, QueueLayout, RingFeatures};

const MEM: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let [cfg, sz, a0, a1, rest @ ..] = data else {
        return;
    };
    let size = 1u16 << (sz % 9); // 1..=256
    let features = RingFeatures::from_bits(u64::from(*cfg) << 28);
    let mem = GuestMemory::new_anonymous(MEM).unwrap();
    mem.write(0, &rest[..rest.len().min(MEM as usize)]).unwrap();
    let (layout, _) = QueueLayout::contiguous(size, 0);
    let next_avail = u16::from_le_bytes([*a0, *a1]);
    let mut q = DeviceQueue::new(&mem, layout, false, features, next_avail).unwrap();
    let mut chain = Chain::with_capacity(size.into());
    let mut buf = [0u8; 1600];
    for i in 0..4 * u32::from(size) + 4 {
        match q.pop(&mem, &mut chain) {
            Ok(None)
            | Err(vadapt_virtq::ChainError {
                kind: ChainErrorKind::AvailIndexAhead,
                ..
            }) => break,
            Ok(Some(head)) => {
                for s in chain.segments() {
                    assert!(mem.contains_host_range(s.ptr, s.len.into()));
                }
                let n = chain.read_into(i as usize % 7, &mut buf);
                let w = chain.write_from(1, &buf[..n]);
                q.push_used(head, w as u32);
            }
            Err(e) => e.head.into_iter().for_each(|h| q.push_used(h, 0)),
        }
        if i % 3 == 0 {
            q.flush_used();
            let _ = q.needs_call();
            let _ = if cfg & 1 != 0 {
                q.enable_notifications().is_ok()
            } else {
                q.set_kick_threshold(4)
            };
        }
    }
    q.flush_used();
    let _ = q.needs_call();
});
