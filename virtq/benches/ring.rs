//! Ring fast path: the device pops 64-byte TX packets, copies each out,
//! pushes a used entry, and publishes once per batch of 32; the driver
//! refills. `device_*` times only the device side: one timed span drains
//! the whole 256-entry ring (8 batches), then the driver refills untimed.
//! `round_trip_*` times one device batch plus the driver's refill. Divide
//! criterion's "time" by the elements per iteration (256 and 32) for
//! ns/packet; the "thrpt" line already is packets per second.
//!
//! Quick run: `cargo bench -p vadapt-virtq --bench ring -- --warm-up-time 1 --measurement-time 3`

use std::time::{Duration, Instant};
use vadapt_virtq::DeviceRing;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use vadapt_virtq::{Chain, DeviceQueue, DriverQueue, GuestMemory, QueueLayout, RingFeatures, Seg};

const SIZE: u16 = 256;
const BATCH: u16 = 32;
const PKT: usize = 64;
const BUF_BASE: u64 = 1 << 20;

struct Rig {
    mem: GuestMemory,
    driver: DriverQueue,
    device: DeviceQueue,
    chain: Chain,
    slot_of: Vec<u64>,
    next_slot: u64,
}

impl Rig {
    fn new(features: RingFeatures) -> Rig {
        let mem = GuestMemory::new_anonymous(4 << 20).unwrap();
        let (layout, _) = QueueLayout::contiguous(SIZE, 0);
        let driver = DriverQueue::new(&mem, layout, features).unwrap();
        let device = DeviceQueue::new(&mem, layout, false, features, 0).unwrap();
        for i in 0..u64::from(SIZE) {
            mem.write(BUF_BASE + i * 2048, &[i as u8; PKT]).unwrap();
        }
        let mut rig = Rig {
            mem,
            driver,
            device,
            chain: Chain::with_capacity(SIZE.into()),
            slot_of: vec![0; SIZE.into()],
            next_slot: 0,
        };
        rig.refill();
        rig
    }

    /// Driver: reclaim used buffers and add as many packets as fit.
    fn refill(&mut self) {
        while self.driver.pop_used().is_some() {}
        while self.driver.num_free() > 0 {
            let gpa = BUF_BASE + (self.next_slot % u64::from(SIZE)) * 2048;
            self.next_slot += 1;
            let head = self
                .driver
                .add(&[Seg {
                    gpa,
                    len: PKT as u32,
                    writable: false,
                }])
                .unwrap();
            self.slot_of[head as usize] = gpa;
        }
        self.driver.publish();
    }

    /// Device: one batch. Returns packets moved.
    #[inline]
    fn device_batch(&mut self, out: &mut [u8; PKT], batched: bool) -> u16 {
        let mut n = 0;
        let mut last = 0;
        while n < BATCH {
            match self.device.pop(&self.mem, &mut self.chain) {
                Ok(Some(head)) => {
                    black_box(self.chain.read_into(0, out));
                    if !batched {
                        self.device.push_used(head, 0);
                    }
                    last = head;
                    n += 1;
                }
                _ => break,
            }
        }
        if batched && n > 0 {
            self.device.push_used_batch_in_order(last, n);
        }
        self.device.flush_used();
        black_box(self.device.needs_call());
        n
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("tx64");
    let cases = [
        ("plain", RingFeatures::default(), false),
        (
            "event_idx",
            RingFeatures {
                event_idx: true,
                ..Default::default()
            },
            false,
        ),
        (
            "in_order_batched",
            RingFeatures {
                in_order: true,
                ..Default::default()
            },
            true,
        ),
    ];
    for (name, features, batched) in cases {
        g.throughput(Throughput::Elements(u64::from(SIZE)));
        g.bench_function(format!("device_{name}"), |b| {
            let mut rig = Rig::new(features);
            let mut out = [0u8; PKT];
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let mut n = 0;
                    for _ in 0..SIZE / BATCH {
                        n += rig.device_batch(&mut out, batched);
                    }
                    spent += t.elapsed();
                    assert_eq!(n, SIZE);
                    rig.refill();
                }
                spent
            })
        });
        g.throughput(Throughput::Elements(u64::from(BATCH)));
        g.bench_function(format!("round_trip_{name}"), |b| {
            let mut rig = Rig::new(features);
            let mut out = [0u8; PKT];
            b.iter(|| {
                let n = rig.device_batch(&mut out, batched);
                rig.refill();
                n
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
