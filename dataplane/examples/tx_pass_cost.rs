//! What one busy-poll transmit pass costs per packet, without a frontend or
//! a second core: the guest's ring is full (256 entries, one descriptor per
//! frame with the 12-byte header in front, as DPDK's virtio-user sends),
//! and each pass takes [`BURST`] frames through the worker's transmit
//! service and the switch into a sink — everything `busy cycles/pkt` in B1
//! counts except the policy and the counters.
//!
//! `cargo run --release -p vadapt-dataplane --example tx_pass_cost -- [FRAME] [PASSES]`
//! prints the median ns/packet of 20 runs. For instructions per packet,
//! which do not depend on the machine's load, run it under callgrind with
//! collection limited to the pass:
//!
//! ```sh
//! valgrind --tool=callgrind --collect-atstart=no \
//!   --toggle-collect='*TxService*serve*' \
//!   target/release/examples/tx_pass_cost 64 20000
//! ```
//!
//! and divide the total by the packets it prints. The guest's refill is
//! outside the pass, so neither figure counts it. Frames sit in guest
//! memory the same core wrote, so the cache misses of B1 (another core
//! wrote them) are not in the ns figure: it is the floor of the code.

use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::metrics::PortStats;
use vadapt_dataplane::queue::ring::Ring;
use vadapt_dataplane::queue::tx::{TxService, TX_BATCH};
use vadapt_dataplane::switch::Sink;
use vadapt_dataplane::switch::{FdbCache, Switch};
use vadapt_policy::busypoll::BURST;
use vadapt_policy::Budget;
use vadapt_virtq::mock::{buf, readable, MockQueue};
use vadapt_virtq::{DeviceRing, RingFeatures};
use vadapt_wire::Mac;

/// Ring entries.
const SIZE: u16 = 256;
/// virtio-net header with `VIRTIO_F_VERSION_1`.
const HDR: usize = 12;

fn main() {
    let mut args = std::env::args().skip(1);
    let frame: usize = args.next().map_or(64, |a| a.parse().expect("FRAME"));
    let passes: u64 = args.next().map_or(200_000, |a| a.parse().expect("PASSES"));

    let MockQueue {
        mem,
        mut driver,
        device,
        ..
    } = MockQueue::new(SIZE, RingFeatures::default());
    let mut ring = Ring {
        q: vadapt_virtq::AnyDeviceQueue::Split(device),
        // The pass never reads kicks and, without a call descriptor, calls nobody.
        kick: std::fs::File::open("/dev/null").expect("/dev/null"),
        call: None,
        broken: false,
        log: None,
    };
    // One frame per buffer slot: header, then a frame to the sink's MAC.
    let sink_mac = Mac([2, 0, 0, 0, 0x5e, 1]);
    let mut pkt = vec![0u8; HDR + frame];
    pkt[HDR..HDR + 6].copy_from_slice(&sink_mac.0);
    pkt[HDR + 6..HDR + 12].copy_from_slice(&[2, 0, 0, 0, 0xfe, 1]);
    for i in 0..u64::from(SIZE) {
        mem.write(buf(i), &pkt).expect("frame fits its slot");
    }
    let refill = |driver: &mut vadapt_virtq::DriverQueue| {
        while driver.pop_used().is_some() {}
        let mut i = 0;
        while driver.num_free() > 0 {
            driver
                .add(&[readable(buf(i % u64::from(SIZE)), (HDR + frame) as u32)])
                .expect("a free descriptor");
            i += 1;
        }
        driver.publish();
    };

    let switch = Switch::new(Duration::from_secs(300));
    let vm = switch.add_port(
        Arc::new(Sink::new(Arc::new(PortStats::new(
            "vm",
            vadapt_dataplane::metrics::PortKind::Sink,
            1,
        )))),
        Arc::new(PortStats::new(
            "vm",
            vadapt_dataplane::metrics::PortKind::Sink,
            1,
        )),
    );
    let sink_stats = Arc::new(PortStats::new(
        "sink0",
        vadapt_dataplane::metrics::PortKind::Sink,
        1,
    ));
    let sink = switch.add_port(Arc::new(Sink::new(Arc::clone(&sink_stats))), sink_stats);
    switch.add_static(sink_mac, sink);
    let mut fdb = FdbCache::default();
    let mut tx = TxService::new(HDR, TX_BATCH);
    let budget = Budget {
        packets: BURST,
        bytes: u64::MAX,
    };

    let mut runs = Vec::new();
    let mut packets = 0u64;
    for _ in 0..20 {
        let mut spent = Duration::ZERO;
        let mut n = 0u64;
        for _ in 0..passes / 20 {
            if ring.q.avail_pending().unwrap_or(0) < BURST as u16 {
                refill(&mut driver);
            }
            let t = Instant::now();
            let pass = tx.serve(&mut ring, &mem, budget, |b| {
                let _ = switch.forward(vm, 0, b, &mut fdb);
            });
            spent += t.elapsed();
            n += pass.packets;
        }
        packets += n;
        runs.push(spent.as_nanos() as f64 / n as f64);
    }
    runs.sort_by(f64::total_cmp);
    println!(
        "{frame}-byte frames, {BURST} per pass: median {:.1} ns/packet (min {:.1}, max {:.1}); {packets} packets",
        runs[runs.len() / 2],
        runs[0],
        runs[runs.len() - 1]
    );
}
