//! Tests of the driver logic ([`crate::driver`]) and the loads ([`crate::app`]) against an in-process backend built on
//! `vadapt_virtq`'s device side: no vhost-user socket, no DPDK, so they run everywhere and
//! fast. The backend either busy-polls with notifications suppressed (like DPDK's PMD) or
//! sleeps on the kick eventfd (like kernel vhost-net), and either sinks or echoes frames.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vadapt_virtq::chain::Chain;
use vadapt_virtq::device::DeviceQueue;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::packed::{PackedDeviceQueue, VIRTIO_F_RING_PACKED};
use vadapt_virtq::RingFeatures;
use vadapt_virtq::{AnyDeviceQueue, AnyLayout, DeviceRing};
use vadapt_wire::ethernet::ETH_HDR_LEN;
use vadapt_wire::tcp_build::{BUF_HDRS_LEN, MSS, TSO_SIZE_GOAL};
use vadapt_wire::vnet_hdr::{VnetHdr, F_NEEDS_CSUM, GSO_TCPV4, HDR_LEN_MRG};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_net::{
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_MRG_RXBUF,
};
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};
use vmm_sys_util::eventfd::EventFd;

use crate::app::Worker;
use crate::clock::{Clock, ExitCost};
use crate::config::{GuestConfig, Mode};
use crate::driver::queue::QueuePair;
use crate::frontend::{build_pair, plan_memory, tx_offloads, TxBufs};
use crate::load::{Load, Pacing};
use crate::metrics::{Counts, GuestCounters, LatencyHistogram};
use crate::period_latency::PeriodLatency;
use crate::shared::{Shared, TcpStreamShared};
use crate::tcp_stream::payload_pattern;
use vadapt_qemu::server::vcpus::Vcpus;

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notify {
    /// Busy poll, notifications off (DPDK vhost PMD).
    BusyPoll,
    /// Sleep on the kick after an empty pass, notifications on (vhost-net).
    Interrupt,
    /// Busy poll with a pause after every pass: a slow backend, so the TX ring fills.
    Slow,
}

#[derive(Debug, Default)]
struct BackendStats {
    tx_packets: u64,
    /// Bytes of the TX buffers (virtio-net header included).
    tx_buffer_bytes: u64,
    /// TCP stream: segments whose sequence number did not follow the previous segment's.
    seq_breaks: u64,
    /// TCP stream: segments whose virtio-net header was not what their length asks for.
    bad_headers: u64,
    rx_packets: u64,
    calls: u64,
}

struct Backend {
    mem: GuestMemory,
    tx: AnyDeviceQueue,
    rx: AnyDeviceQueue,
    tx_kick: EventFd,
    tx_call: EventFd,
    rx_call: EventFd,
    echo: bool,
    /// Check every TX buffer as a TCP-stream segment.
    tcp: bool,
    notify: Notify,
    stop: Arc<AtomicBool>,
}

/// Reads a TCP-stream segment's headers from `chain`: its sequence number must follow the
/// previous one's, and its virtio-net header must ask for GSO exactly when it carries more
/// than one MSS.
fn check_segment(chain: &Chain, next_seq: &mut Option<u32>, st: &mut BackendStats) {
    let mut h = [0u8; BUF_HDRS_LEN];
    chain.read_into(0, &mut h);
    let payload = chain.readable_len() - BUF_HDRS_LEN as u32;
    let seq_at = HDR_LEN_MRG + ETH_HDR_LEN + 20 + 4;
    let seq = u32::from_be_bytes(h[seq_at..seq_at + 4].try_into().unwrap());
    if next_seq.is_some_and(|n| n != seq) {
        st.seq_breaks += 1;
    }
    *next_seq = Some(seq.wrapping_add(payload));
    let vnet = VnetHdr::read(&h).expect("BUF_HDRS_LEN > VnetHdr::LEN");
    let gso = vnet.gso_type == GSO_TCPV4 && u32::from(vnet.gso_size) == MSS;
    if vnet.flags != F_NEEDS_CSUM || gso != (payload > MSS) {
        st.bad_headers += 1;
    }
}

impl Backend {
    fn new(
        mem: &GuestMemory,
        pair: &QueuePair,
        features: u64,
        echo: bool,
        tcp: bool,
        notify: Notify,
    ) -> Self {
        let rf = RingFeatures::from_bits(features);
        let dq = |l| match l {
            AnyLayout::Split(l) => {
                AnyDeviceQueue::Split(DeviceQueue::new(mem, l, false, rf, 0).unwrap())
            }
            AnyLayout::Packed(l) => {
                AnyDeviceQueue::Packed(PackedDeviceQueue::new(mem, l, false, rf, 0x8000).unwrap())
            }
        };
        let mut tx = dq(pair.tx.vq.layout());
        if notify != Notify::Interrupt {
            // Before the guest starts: a polling backend suppresses kicks from the outset.
            tx.disable_notifications();
        }
        Backend {
            mem: mem.clone(),
            tx,
            rx: dq(pair.rx.vq.layout()),
            tx_kick: pair.tx.notify.kick.try_clone().unwrap(),
            tx_call: pair.tx.notify.call.try_clone().unwrap(),
            rx_call: pair.rx.notify.call.try_clone().unwrap(),
            echo,
            tcp,
            notify,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    fn run(mut self) -> BackendStats {
        let mut st = BackendStats::default();
        let mut chain = Chain::default();
        let mut pending: VecDeque<Vec<u8>> = VecDeque::new();
        let mut next_seq = None;
        loop {
            let mut moved = 0;
            while let Ok(Some(head)) = self.tx.pop(&self.mem, &mut chain) {
                st.tx_buffer_bytes += u64::from(chain.readable_len());
                if self.tcp {
                    check_segment(&chain, &mut next_seq, &mut st);
                }
                if self.echo {
                    let mut buf = vec![0u8; chain.readable_len() as usize];
                    chain.read_into(0, &mut buf);
                    pending.push_back(buf);
                }
                self.tx.push_used(head, 0);
                st.tx_packets += 1;
                moved += 1;
            }
            if moved > 0 {
                self.tx.flush_used();
                if self.tx.needs_call() {
                    self.tx_call.write(1).unwrap();
                    st.calls += 1;
                }
            }
            let mut delivered = 0;
            while let Some(pkt) = pending.front() {
                let Ok(Some(head)) = self.rx.pop(&self.mem, &mut chain) else {
                    break;
                };
                let mut out = pkt.clone();
                out[..HDR_LEN_MRG].fill(0);
                out[10] = 1; // num_buffers
                let f = HDR_LEN_MRG;
                let (dst, src) = (out[f..f + 6].to_vec(), out[f + 6..f + 12].to_vec());
                out[f..f + 6].copy_from_slice(&src);
                out[f + 6..f + 12].copy_from_slice(&dst);
                chain.write_from(0, &out);
                self.rx.push_used(head, out.len() as u32);
                pending.pop_front();
                st.rx_packets += 1;
                delivered += 1;
            }
            if delivered > 0 {
                self.rx.flush_used();
                if self.rx.needs_call() {
                    self.rx_call.write(1).unwrap();
                    st.calls += 1;
                }
            }
            if moved == 0 && delivered == 0 {
                if self.stop.load(Ordering::Relaxed) {
                    return st;
                }
                match self.notify {
                    Notify::BusyPoll => std::thread::yield_now(),
                    Notify::Slow => std::thread::sleep(Duration::from_micros(500)),
                    Notify::Interrupt => {
                        if !self.tx.enable_notifications().unwrap() && pending.is_empty() {
                            wait_readable(&self.tx_kick, 1);
                            let _ = self.tx_kick.read();
                        }
                        self.tx.disable_notifications();
                    }
                }
            } else if self.notify == Notify::Slow {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }
}

fn wait_readable(fd: &EventFd, timeout_ms: i32) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, timeout_ms) };
}

struct Outcome {
    guest: Counts,
    hist: LatencyHistogram,
    backend: BackendStats,
}

/// Runs one guest thread for 200 ms against the loopback backend.
fn run(features: u64, mode: Mode, load: Load, echo: bool, notify: Notify, ring: u16) -> Outcome {
    let vcpus = Arc::new(Vcpus::new());
    let counters = Arc::new(GuestCounters::new(1));
    let run = Run {
        features,
        mode,
        load,
        echo,
        notify,
        ring,
        write_ns: 0,
        pacing: Pacing::Exact,
    };
    run_with(run, vcpus, counters, None)
}

/// One TCP-stream thread whose writes cost `write_ns` each, for 200 ms.
fn run_tcp_writer(load: Load, notify: Notify, ring: u16, write_ns: u64) -> Outcome {
    let run = Run {
        features: V1 | TSO | bit(VIRTIO_RING_F_EVENT_IDX),
        mode: Mode::TcpStream,
        load,
        echo: false,
        notify,
        ring,
        write_ns,
        pacing: Pacing::Exact,
    };
    run_with(
        run,
        Arc::new(Vcpus::new()),
        Arc::new(GuestCounters::new(1)),
        None,
    )
}

/// What [`run_with`] runs.
struct Run {
    features: u64,
    mode: Mode,
    load: Load,
    echo: bool,
    notify: Notify,
    ring: u16,
    /// TCP stream: emulated cost of each write (ns).
    write_ns: u64,
    /// How a paced stream waits.
    pacing: Pacing,
}

/// As [`run`], with the vCPU registry, the counters and the per-period latencies given.
fn run_with(
    run: Run,
    vcpus: Arc<Vcpus>,
    counters: Arc<GuestCounters>,
    period_latency: Option<Arc<PeriodLatency>>,
) -> Outcome {
    let Run {
        features,
        mode,
        load,
        echo,
        notify,
        ring,
        write_ns,
        pacing,
    } = run;
    let cfg = GuestConfig {
        ring_size: ring,
        mode,
        load,
        ..GuestConfig::new("/unused")
    };
    let packed = features & (1 << VIRTIO_F_RING_PACKED) != 0;
    let plan = plan_memory(1, cfg.ring_size, TxBufs::for_config(&cfg), packed);
    let mem = GuestMemory::new_anonymous(plan.size).unwrap();
    let pair = build_pair(&mem, 0, &plan.pairs[0], &cfg, features, MAC).unwrap();
    let tcp = mode == Mode::TcpStream;
    let backend = Backend::new(&mem, &pair, features, echo, tcp, notify);
    let stop_backend = Arc::clone(&backend.stop);
    let backend = std::thread::spawn(move || backend.run());

    let shared = Arc::new(Shared {
        clock: Clock::start(),
        stop: Arc::new(AtomicBool::new(false)),
        abort: AtomicBool::new(false),
        deadline_ns: 200_000_000,
        answered: vec![AtomicU64::new(0)],
        counters: Arc::clone(&counters),
        mac: MAC,
        dst_mac: cfg.dst_mac,
        mode,
        load,
        pacing,
        threads: 1,
        pairs: 1,
        exit: ExitCost { ns: 0 },
        napi_budget: 64,
        tx_batch: 1,
        rr_timeout_ns: 2_000_000_000,
        frame_len: (ETH_HDR_LEN as u64) + u64::from(cfg.size),
        size: cfg.size,
        tcp: tcp.then(|| TcpStreamShared {
            offloads: tx_offloads(features),
            pattern: payload_pattern().into(),
            write_ns,
        }),
        vcpus,
        period_latency,
    });
    let result = Worker::new(0, Arc::new(Mutex::new(pair)), shared).run();
    stop_backend.store(true, Ordering::Relaxed);
    let backend = backend.join().unwrap();
    assert_eq!(result.error, None);
    Outcome {
        guest: counters.total(),
        hist: result.hist,
        backend,
    }
}

fn bit(b: u32) -> u64 {
    1 << b
}

const V1: u64 = 1 << VIRTIO_F_VERSION_1;
/// `VIRTIO_F_RING_PACKED`: the same driver over packed rings.
const PACKED: u64 = 1 << VIRTIO_F_RING_PACKED;

#[test]
fn busy_poll_backend_without_event_idx_gets_no_kick() {
    let o = run(
        V1,
        Mode::Stream,
        Load::ClosedLoop,
        false,
        Notify::BusyPoll,
        256,
    );
    assert!(o.guest.sent_packets > 0);
    // The guest drains before returning, so both sides agree exactly.
    assert_eq!(o.backend.tx_packets, o.guest.sent_packets);
    assert_eq!(o.guest.sent_bytes, o.guest.sent_packets * (14 + 64));
    // VRING_USED_F_NO_NOTIFY was set before the first packet: never a kick.
    assert_eq!(o.guest.tx_kicks, 0);
    assert_eq!(o.guest.rx_kicks, 0);
}

#[test]
fn busy_poll_backend_with_event_idx_gets_a_kick_per_index_wrap_at_most() {
    let f = V1 | bit(VIRTIO_RING_F_EVENT_IDX);
    let o = run(
        f,
        Mode::Stream,
        Load::ClosedLoop,
        false,
        Notify::BusyPoll,
        256,
    );
    assert_eq!(o.backend.tx_packets, o.guest.sent_packets);
    // avail_event stays where the backend left it (0): the guest crosses it once, then
    // once per 65536 packets (the 16-bit index wraps).
    assert!(
        o.guest.tx_kicks <= 1 + o.guest.sent_packets / 65536,
        "{:?}",
        o.guest
    );
}

#[test]
fn interrupt_backend_is_kicked_and_counts_everything() {
    let ev = bit(VIRTIO_RING_F_EVENT_IDX);
    for f in [V1, V1 | ev, V1 | PACKED, V1 | PACKED | ev] {
        let o = run(
            f,
            Mode::Stream,
            Load::ClosedLoop,
            false,
            Notify::Interrupt,
            256,
        );
        assert!(o.guest.sent_packets > 0);
        assert_eq!(o.backend.tx_packets, o.guest.sent_packets);
        assert!(
            o.guest.tx_kicks > 0,
            "a sleeping backend needs kicks: {:?}",
            o.guest
        );
    }
}

#[test]
fn slow_backend_fills_the_ring_and_wakes_the_queue_with_a_call() {
    let ev = bit(VIRTIO_RING_F_EVENT_IDX);
    for f in [V1, V1 | ev, V1 | PACKED, V1 | PACKED | ev] {
        let o = run(f, Mode::Stream, Load::ClosedLoop, false, Notify::Slow, 64);
        assert_eq!(o.backend.tx_packets, o.guest.sent_packets);
        assert!(o.guest.ring_full_stalls > 0, "{:?}", o.guest);
        // enable_cb_delayed asked for a call, and the backend's needs_call granted it.
        assert!(o.guest.tx_calls > 0, "{:?}", o.guest);
        assert!(o.backend.calls > 0);
    }
}

#[test]
fn request_response_through_an_echo_backend_times_every_reply() {
    let features = [
        V1,
        V1 | bit(VIRTIO_RING_F_EVENT_IDX),
        V1 | bit(VIRTIO_RING_F_EVENT_IDX) | bit(VIRTIO_NET_F_MRG_RXBUF),
        V1 | PACKED,
        V1 | PACKED | bit(VIRTIO_RING_F_EVENT_IDX) | bit(VIRTIO_NET_F_MRG_RXBUF),
    ];
    for f in features {
        for notify in [Notify::BusyPoll, Notify::Interrupt] {
            let o = run(
                f,
                Mode::RequestResponse,
                Load::ClosedLoop,
                true,
                notify,
                256,
            );
            let g = o.guest;
            assert!(g.sent_packets > 0);
            assert_eq!(g.lost_requests, 0);
            assert_eq!(o.backend.rx_packets, g.sent_packets);
            assert_eq!(g.recv_packets, g.sent_packets);
            assert_eq!(o.hist.summary().map(|l| l.count), Some(g.sent_packets));
            // Replies came with calls (NAPI re-enabled callbacks after each poll).
            assert!(g.rx_calls > 0, "{g:?}");
        }
    }
}

#[test]
fn fixed_rate_never_sends_ahead_of_the_pacer() {
    let pps = 20_000.0;
    let o = run(
        V1,
        Mode::Stream,
        Load::Rate { pps },
        false,
        Notify::Interrupt,
        256,
    );
    // 200 ms at 20 kpps: packets 0..=4000 are due by the deadline at most.
    assert!(o.guest.sent_packets <= 4001, "{:?}", o.guest);
    assert!(o.guest.sent_packets > 0);
    assert_eq!(o.backend.tx_packets, o.guest.sent_packets);
}

#[test]
fn burst_pacing_never_sends_ahead_of_the_pacer() {
    let pps = 300_000.0;
    let run = Run {
        features: V1,
        mode: Mode::Stream,
        load: Load::Rate { pps },
        echo: false,
        notify: Notify::Interrupt,
        ring: 256,
        write_ns: 0,
        pacing: Pacing::Burst,
    };
    let o = run_with(
        run,
        Arc::new(Vcpus::new()),
        Arc::new(GuestCounters::new(1)),
        None,
    );
    // 200 ms at 300 kpps: packets 0..=60000 are due by the deadline at most.
    assert!(o.guest.sent_packets <= 60_001, "{:?}", o.guest);
    assert!(o.guest.sent_packets > 0);
    assert_eq!(o.backend.tx_packets, o.guest.sent_packets);
}

#[test]
fn a_paused_guest_sends_nothing_until_resumed() {
    let vcpus = Arc::new(Vcpus::new());
    let counters = Arc::new(GuestCounters::new(1));
    vcpus.pause();
    let controller = {
        let (vcpus, counters) = (Arc::clone(&vcpus), Arc::clone(&counters));
        std::thread::spawn(move || {
            // The sending thread registers its tid, then blocks at its pause point.
            let tid = loop {
                if let Some(t) = vcpus.threads().first() {
                    break t.thread_id;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            assert!(std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
            std::thread::sleep(Duration::from_millis(80));
            let sent_while_paused = counters.total().sent_packets;
            vcpus.resume();
            sent_while_paused
        })
    };
    let run = Run {
        features: V1,
        mode: Mode::Stream,
        load: Load::ClosedLoop,
        echo: false,
        notify: Notify::Interrupt,
        ring: 256,
        write_ns: 0,
        pacing: Pacing::Exact,
    };
    let o = run_with(run, Arc::clone(&vcpus), counters, None);
    assert_eq!(controller.join().unwrap(), 0, "a paused vCPU sends nothing");
    assert!(o.guest.sent_packets > 0, "a resumed vCPU sends");
    assert_eq!(o.backend.tx_packets, o.guest.sent_packets);
    assert!(vcpus.threads().is_empty(), "the thread leaves when it ends");
}

#[test]
fn request_response_records_each_round_trip_for_the_period_too() {
    let period = Arc::new(PeriodLatency::new(1));
    let run = Run {
        features: V1,
        mode: Mode::RequestResponse,
        load: Load::ClosedLoop,
        echo: true,
        notify: Notify::Interrupt,
        ring: 256,
        write_ns: 0,
        pacing: Pacing::Exact,
    };
    let o = run_with(
        run,
        Arc::new(Vcpus::new()),
        Arc::new(GuestCounters::new(1)),
        Some(Arc::clone(&period)),
    );
    let mut taken = LatencyHistogram::new();
    period.take(&mut taken);
    assert!(!taken.is_empty());
    assert_eq!(Some(taken.len()), o.hist.summary().map(|l| l.count));
}

const TSO: u64 = (1 << VIRTIO_NET_F_CSUM) | (1 << VIRTIO_NET_F_HOST_TSO4);

#[test]
fn tcp_stream_closed_loop_sends_full_tso_segments_in_sequence() {
    // Two-descriptor chains, and one descriptor with an indirect table.
    for f in [V1 | TSO, V1 | TSO | bit(VIRTIO_RING_F_INDIRECT_DESC)] {
        let o = run(
            f,
            Mode::TcpStream,
            Load::ClosedLoop,
            false,
            Notify::BusyPoll,
            256,
        );
        let g = o.guest;
        assert!(g.sent_packets > 0);
        assert_eq!(o.backend.tx_packets, g.sent_packets);
        // Closed loop: every segment carries the size goal.
        assert_eq!(
            g.sent_payload_bytes,
            g.sent_packets * u64::from(TSO_SIZE_GOAL)
        );
        assert_eq!(
            o.backend.tx_buffer_bytes,
            g.sent_payload_bytes + g.sent_packets * BUF_HDRS_LEN as u64
        );
        assert_eq!(
            g.sent_bytes + g.sent_packets * HDR_LEN_MRG as u64,
            o.backend.tx_buffer_bytes
        );
        assert_eq!(g.sent_messages, g.sent_payload_bytes / 64);
        assert_eq!((o.backend.seq_breaks, o.backend.bad_headers), (0, 0));
    }
}

#[test]
fn tcp_stream_at_a_fixed_rate_sends_what_is_queued() {
    // 20 k messages/s of 64 bytes: the sender finds a few messages queued each time; each
    // message due is written once, paying the write cost once.
    for write_ns in [0, 3_000] {
        let o = run_tcp_writer(
            Load::Rate { pps: 20_000.0 },
            Notify::Interrupt,
            256,
            write_ns,
        );
        let g = o.guest;
        assert!(g.sent_messages > 0 && g.written_messages <= 4001, "{g:?}");
        assert!(g.sent_messages <= g.written_messages, "{g:?}");
        assert_eq!(g.write_ns, g.written_messages * write_ns, "{g:?}");
        assert_eq!(
            g.sent_payload_bytes,
            g.sent_messages * 64,
            "whole messages only"
        );
        assert!(g.sent_packets <= g.sent_messages);
        assert_eq!(o.backend.tx_packets, g.sent_packets);
        assert_eq!((o.backend.seq_breaks, o.backend.bad_headers), (0, 0));
    }
}

#[test]
fn tcp_stream_slow_writer_sends_small_segments_paying_per_write() {
    // 20 µs per 64-byte write: far slower than the backend. Each write goes out on its own
    // as long as the ring has room — the first one always does, into an empty ring.
    let write_ns = 20_000;
    let o = run_tcp_writer(Load::ClosedLoop, Notify::BusyPoll, 256, write_ns);
    let g = o.guest;
    assert!(g.sent_packets > 0, "{g:?}");
    assert_eq!(o.backend.tx_packets, g.sent_packets);
    // The cost was paid once per message written, and every message written is sent or
    // still queued (at most one segment's worth: the writer stops there).
    assert_eq!(g.write_ns, g.written_messages * write_ns, "{g:?}");
    assert!(g.sent_messages <= g.written_messages, "{g:?}");
    assert!(
        g.written_messages - g.sent_messages <= u64::from(TSO_SIZE_GOAL) / 64 + 1,
        "{g:?}"
    );
    // Not every segment full, unlike the free writer's.
    assert!(
        g.sent_payload_bytes < g.sent_packets * u64::from(TSO_SIZE_GOAL),
        "{g:?}"
    );
    assert_eq!((o.backend.seq_breaks, o.backend.bad_headers), (0, 0));
}

#[test]
fn tcp_stream_writer_coalesces_what_it_wrote_while_the_ring_was_full() {
    // 2 µs per write against a backend that sleeps 500 µs between passes: the ring stops,
    // the writes pile up, and the next segments carry many messages each.
    let o = run_tcp_writer(Load::ClosedLoop, Notify::Slow, 64, 2_000);
    let g = o.guest;
    assert!(g.ring_full_stalls > 0, "{g:?}");
    assert!(g.sent_packets < g.sent_messages, "{g:?}");
    assert_eq!(o.backend.tx_packets, g.sent_packets);
    assert!(g.sent_messages <= g.written_messages, "{g:?}");
    assert_eq!((o.backend.seq_breaks, o.backend.bad_headers), (0, 0));
}

#[test]
fn tcp_stream_without_tso_sends_mss_frames() {
    let o = run(
        V1 | (1 << VIRTIO_NET_F_CSUM),
        Mode::TcpStream,
        Load::ClosedLoop,
        false,
        Notify::BusyPoll,
        256,
    );
    let g = o.guest;
    assert!(g.sent_packets > 0);
    assert_eq!(g.sent_payload_bytes, g.sent_packets * u64::from(MSS));
    assert_eq!((o.backend.seq_breaks, o.backend.bad_headers), (0, 0));
}
