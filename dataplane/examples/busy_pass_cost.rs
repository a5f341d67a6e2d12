//! What a busy-poll worker's loop costs, per pass and per packet: the
//! daemon's own loop (a [`QueueSet`] over [`PortQueues`], the policy, the
//! executor, the counters, the control checks) serving one VM port's
//! transmit ring into a sink, with `FRAMES` frames made available before
//! each pass (0: every pass finds the ring empty, the idle cost of
//! polling; 8: about what busy-poll found per pass in B1 at 64 B). A
//! third argument, `packed` or `packed-in-order`, serves a packed ring
//! (with `VIRTIO_F_IN_ORDER` for the second) instead of a split one.
//!
//! `cargo build --release -p vadapt-dataplane --example busy_pass_cost`,
//! then, for instructions (which do not depend on the machine's load):
//!
//! ```sh
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!   target/release/examples/busy_pass_cost 8 200000 [packed|packed-in-order]
//! callgrind_annotate --inclusive=yes cg.out | grep -E 'run_to_stop|refill'
//! ```
//!
//! The loop's cost is `run_to_stop`'s inclusive count less `refill`'s (the
//! guest's side, made here between passes); divide by the passes and the
//! packets the program prints. The frame is 64 bytes behind a 12-byte
//! header, one descriptor per frame, as DPDK's virtio-user sends.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use vadapt_dataplane::config::VmPortConfig;
use vadapt_dataplane::metrics::PortStats;
use vadapt_dataplane::port::port_queues::PortQueues;
use vadapt_dataplane::port::VmPort;
use vadapt_dataplane::queue::ring::{Pair, Ring};
use vadapt_dataplane::switch::{Sink, Switch};
use vadapt_dataplane::worker::{
    Control, PassStats, PendingWait, QueueIo, QueueSet, RingBases, Wait,
};
use vadapt_host::cpufreq::CpuFreq;
use vadapt_policy::{Budget, FreqHint, Instant, Policy, PolicyConfig, Wake};
use vadapt_virtq::mock::{buf, readable, MockQueue};
use vadapt_virtq::packed::PackedMockQueue;
use vadapt_virtq::{AnyDeviceQueue, AnyDriverQueue, GuestMemory, RingFeatures};
use vadapt_wire::Mac;

/// Ring entries.
const SIZE: u16 = 256;
/// virtio-net header with `VIRTIO_F_VERSION_1`.
const HDR: usize = 12;
/// `VIRTIO_F_VERSION_1`, the only feature the port runs with here.
const VERSION_1: u64 = 1 << 32;

/// A non-blocking eventfd, for the ring's kick.
fn eventfd() -> std::fs::File {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd(2) has no memory arguments; the descriptor it returns
    // is new and owned by nothing else, so the File may own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: as above.
    unsafe { std::fs::File::from_raw_fd(fd) }
}

/// The guest: makes `n` frames available (taking back what was used).
#[inline(never)]
fn refill(driver: &mut AnyDriverQueue, n: u16, len: u32, next: &mut u64) {
    while driver.pop_used().is_some() {}
    for _ in 0..n.min(driver.num_free()) {
        driver
            .add(&[readable(buf(*next % u64::from(SIZE)), len)])
            .expect("a free descriptor");
        *next += 1;
    }
    driver.publish();
}

/// The worker's world with the guest's refill before every pass, for
/// `passes` passes.
struct Bench {
    queues: PortQueues,
    driver: AnyDriverQueue,
    frames: u16,
    len: u32,
    next: u64,
    passes: u64,
    packets: u64,
}

impl QueueIo for Bench {
    fn name(&self) -> &str {
        self.queues.name()
    }
    fn now(&mut self) -> Instant {
        self.queues.now()
    }
    fn service(&mut self, budget: Budget) -> PassStats {
        refill(&mut self.driver, self.frames, self.len, &mut self.next);
        self.passes = self.passes.saturating_sub(1);
        let s = self.queues.service(budget);
        self.packets += s.packets;
        s
    }
    fn waiter_fd(&self) -> Option<std::os::fd::RawFd> {
        QueueIo::waiter_fd(&self.queues)
    }
    fn begin_wait(&mut self, wake: Wake) -> PendingWait {
        QueueIo::begin_wait(&mut self.queues, wake)
    }
    fn poll_wait(&mut self, w: &mut PendingWait) {
        QueueIo::poll_wait(&mut self.queues, w)
    }
    fn end_wait(&mut self, w: PendingWait) -> Wait {
        QueueIo::end_wait(&mut self.queues, w)
    }
    fn set_freq(&mut self, hint: FreqHint) {
        self.queues.set_freq(hint);
    }
    fn control(&mut self) -> Control {
        if self.passes == 0 {
            return Control::Stop;
        }
        self.queues.control()
    }
    fn take_policy(&mut self) -> Box<dyn Policy> {
        self.queues.take_policy()
    }
    fn park_policy(&mut self, policy: Box<dyn Policy>) {
        self.queues.park_policy(policy);
    }
    fn into_bases(self: Box<Self>) -> RingBases {
        self.queues.into_bases()
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let frames: u16 = args.next().map_or(8, |a| a.parse().expect("FRAMES"));
    let passes: u64 = args.next().map_or(200_000, |a| a.parse().expect("PASSES"));
    let ring_kind = args.next().unwrap_or_else(|| "split".into());

    let (mem, driver, device): (GuestMemory, AnyDriverQueue, AnyDeviceQueue) =
        match ring_kind.as_str() {
            "split" => {
                let q = MockQueue::new(SIZE, RingFeatures::default());
                (
                    q.mem,
                    AnyDriverQueue::Split(q.driver),
                    AnyDeviceQueue::Split(q.device),
                )
            }
            "packed" | "packed-in-order" => {
                let f = RingFeatures {
                    in_order: ring_kind == "packed-in-order",
                    ..RingFeatures::default()
                };
                let q = PackedMockQueue::new(SIZE, f);
                (
                    q.mem,
                    AnyDriverQueue::Packed(q.driver),
                    AnyDeviceQueue::Packed(q.device),
                )
            }
            other => panic!("ring kind {other}: split, packed or packed-in-order"),
        };
    let sink_mac = Mac([2, 0, 0, 0, 0x5e, 1]);
    let mut pkt = vec![0u8; HDR + 64];
    pkt[HDR..HDR + 6].copy_from_slice(&sink_mac.0);
    pkt[HDR + 6..HDR + 12].copy_from_slice(&[2, 0, 0, 0, 0xfe, 1]);
    for i in 0..u64::from(SIZE) {
        mem.write(buf(i), &pkt).expect("frame fits its slot");
    }

    let switch = Arc::new(Switch::new(Duration::from_secs(300)));
    let port = VmPort::new(
        VmPortConfig::new("fe", "/nonexistent/fe.sock"),
        PolicyConfig::BusyPoll,
        1024,
        None,
        Arc::new(CpuFreq::unavailable("bench")),
        None,
    )
    .expect("a port");
    let id = switch.add_port(port.clone(), Arc::clone(&port.stats));
    port.attach(switch.ingress(id));
    let sink_stats = Arc::new(PortStats::new(
        "sink0",
        vadapt_dataplane::metrics::PortKind::Sink,
        1,
    ));
    let sink = switch.add_port(Arc::new(Sink::new(Arc::clone(&sink_stats))), sink_stats);
    switch.add_static(sink_mac, sink);

    let ring = Ring {
        q: device,
        // The worker waits on it with epoll (never here: busy-poll does not wait).
        kick: eventfd(),
        call: None,
        broken: false,
        log: None,
    };
    let pairs = vec![Pair {
        rx: None,
        tx: Some(ring),
    }];
    let queues = PortQueues::new(
        Arc::clone(&port),
        mem,
        pairs,
        VERSION_1,
        Arc::new(AtomicBool::new(false)),
    )
    .expect("the worker's world");
    let bench = Bench {
        queues,
        driver,
        frames,
        len: pkt.len() as u32,
        next: 0,
        passes,
        packets: 0,
    };
    let t = std::time::Instant::now();
    // The port's policy (busy-poll), stepped on this thread.
    let mut set = QueueSet::start(0, bench);
    set.run_to_stop();
    let spent = t.elapsed();
    let bench = set.into_queues();
    println!(
        "{passes} passes, {} packets ({frames} made available per pass, {ring_kind} ring): {:.1} ns/pass",
        bench.packets,
        spent.as_nanos() as f64 / passes as f64
    );
}
