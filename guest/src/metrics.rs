//! Every counter the synthetic guest keeps, and the report built from them.
//!
//! Live counters ([`GuestCounters`]) are atomics readable while the guest runs (the demo's
//! one-line-per-second view reads them); each thread's block has a single writer, its own
//! sending thread, so an increment is a plain load + store rather than a locked read-modify-write
//! (which would cost more than the rest of the per-packet path).
//!
//! | JSON name (report) | meaning |
//! |---|---|
//! | `sent_packets`, `sent_bytes` | buffers made available on TX rings (raw frames; in TCP stream, segments of up to 64 KiB); bytes are Ethernet frame bytes (headers + payload), without the virtio-net header |
//! | `sent_messages`, `sent_payload_bytes` | application messages sent and their bytes: in raw modes one message per frame (its L2 payload); in TCP stream, messages whose last byte is on the ring and the TCP payload bytes |
//! | `written_messages`, `write_ns` | TCP stream with a write cost: application writes made (queued, sent or not) and the emulated write cost spent on them (ns, busy-wait) |
//! | `recv_packets`, `recv_bytes` | frames taken from RX rings (same byte convention) |
//! | `tx_kicks`, `rx_kicks`, `kicks` | notifications to the backend after filling the TX ring / refilling the RX ring, and their sum |
//! | `tx_calls`, `rx_calls`, `calls` | handled notifications from the backend (one per wake-up that found the call eventfd signalled), and their sum |
//! | `call_signals` | raw count of backend signals read from call eventfds (several signals can coalesce into one handled call) |
//! | `ring_full_stalls` | times a TX queue was stopped because its ring was (nearly) full |
//! | `stall_ns` | time the sending threads spent waiting for a stopped TX queue to restart (ns) |
//! | `tx_wake_timeouts` | times a stopped TX queue was restarted by the guest's own 10 ms timeout instead of a call: a call the backend owed (it used buffers past the event point) and did not send (a Linux guest would stall until its TX watchdog) |
//! | `rx_errors` | received buffers that could not be understood (bad length or `num_buffers`) |
//! | `lost_requests` | request/response requests whose reply did not come back within the timeout |
//! | `paced_skipped` | rate mode: packets the pacer gave up because the sender fell behind |
//! | `cpu_seconds` | CPU time of the sending threads (s), from `CLOCK_THREAD_CPUTIME_ID` |
//! | `tx_dropped` | echo mode: replies dropped because the TX queue was stopped |
//! | `latency` | request/response round-trip times (ns): p50, p95, p99, p99.9, max, count |

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// A counter with one writer thread and any number of reader threads.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning thread may call this (single writer: a load + store is not
    /// atomic against another writer).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Live counters of one sending thread.
#[derive(Debug, Default)]
pub struct ThreadCounters {
    /// Frames made available on the TX ring.
    pub sent_packets: Counter,
    /// Ethernet bytes of those frames (bytes).
    pub sent_bytes: Counter,
    /// Application messages sent.
    pub sent_messages: Counter,
    /// Application payload bytes sent (bytes).
    pub sent_payload_bytes: Counter,
    /// TCP stream with a write cost: application writes made.
    pub written_messages: Counter,
    /// Emulated write cost spent on them (ns).
    pub write_ns: Counter,
    /// Frames taken from the RX ring.
    pub recv_packets: Counter,
    /// Ethernet bytes of those frames (bytes).
    pub recv_bytes: Counter,
    /// Kicks after adding TX buffers.
    pub tx_kicks: Counter,
    /// Kicks after refilling RX buffers.
    pub rx_kicks: Counter,
    /// Handled TX-completion calls.
    pub tx_calls: Counter,
    /// Handled RX calls.
    pub rx_calls: Counter,
    /// Backend signals read from call eventfds.
    pub call_signals: Counter,
    /// Times the TX queue was stopped on a full ring.
    pub ring_full_stalls: Counter,
    /// Time spent waiting for a stopped TX queue to restart (ns).
    pub stall_ns: Counter,
    /// Times a stopped TX queue was restarted by timeout rather than by a call.
    pub tx_wake_timeouts: Counter,
    /// Received buffers that could not be understood.
    pub rx_errors: Counter,
    /// Requests without a reply within the timeout.
    pub lost_requests: Counter,
    /// Rate mode: packets given up by the pacer.
    pub paced_skipped: Counter,
    /// Echo mode: replies dropped because the TX queue was stopped.
    pub tx_dropped: Counter,
}

impl ThreadCounters {
    /// A consistent-enough copy (each field read once; fields may be a few packets apart).
    pub fn snapshot(&self) -> Counts {
        let mut c = Counts {
            sent_packets: self.sent_packets.get(),
            sent_bytes: self.sent_bytes.get(),
            sent_messages: self.sent_messages.get(),
            sent_payload_bytes: self.sent_payload_bytes.get(),
            written_messages: self.written_messages.get(),
            write_ns: self.write_ns.get(),
            recv_packets: self.recv_packets.get(),
            recv_bytes: self.recv_bytes.get(),
            kicks: 0,
            tx_kicks: self.tx_kicks.get(),
            rx_kicks: self.rx_kicks.get(),
            calls: 0,
            tx_calls: self.tx_calls.get(),
            rx_calls: self.rx_calls.get(),
            call_signals: self.call_signals.get(),
            ring_full_stalls: self.ring_full_stalls.get(),
            stall_ns: self.stall_ns.get(),
            tx_wake_timeouts: self.tx_wake_timeouts.get(),
            rx_errors: self.rx_errors.get(),
            lost_requests: self.lost_requests.get(),
            paced_skipped: self.paced_skipped.get(),
            tx_dropped: self.tx_dropped.get(),
        };
        c.kicks = c.tx_kicks + c.rx_kicks;
        c.calls = c.tx_calls + c.rx_calls;
        c
    }
}

/// Live counters of a whole guest: one block per sending thread.
#[derive(Debug)]
pub struct GuestCounters {
    /// Indexed by thread number.
    pub threads: Vec<ThreadCounters>,
}

impl GuestCounters {
    /// Zeroed counters for `threads` threads.
    pub fn new(threads: usize) -> GuestCounters {
        GuestCounters {
            threads: (0..threads).map(|_| ThreadCounters::default()).collect(),
        }
    }

    /// Sum over all threads.
    pub fn total(&self) -> Counts {
        self.threads
            .iter()
            .map(ThreadCounters::snapshot)
            .fold(Counts::default(), |a, b| a + b)
    }
}

/// Plain copy of the counters (see the module table for meanings and units).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Frames made available on TX rings.
    pub sent_packets: u64,
    /// Ethernet bytes sent (bytes).
    pub sent_bytes: u64,
    /// Application messages sent.
    pub sent_messages: u64,
    /// Application payload bytes sent (bytes).
    pub sent_payload_bytes: u64,
    /// TCP stream with a write cost: application writes made.
    pub written_messages: u64,
    /// Emulated write cost spent on them (ns).
    pub write_ns: u64,
    /// Frames taken from RX rings.
    pub recv_packets: u64,
    /// Ethernet bytes received (bytes).
    pub recv_bytes: u64,
    /// `tx_kicks + rx_kicks`.
    pub kicks: u64,
    /// Kicks after adding TX buffers.
    pub tx_kicks: u64,
    /// Kicks after refilling RX buffers.
    pub rx_kicks: u64,
    /// `tx_calls + rx_calls`.
    pub calls: u64,
    /// Handled TX-completion calls.
    pub tx_calls: u64,
    /// Handled RX calls.
    pub rx_calls: u64,
    /// Backend signals read from call eventfds.
    pub call_signals: u64,
    /// Times a TX queue was stopped on a full ring.
    pub ring_full_stalls: u64,
    /// Time spent waiting for a stopped TX queue to restart (ns).
    pub stall_ns: u64,
    /// Times a stopped TX queue was restarted by timeout rather than by a call.
    pub tx_wake_timeouts: u64,
    /// Received buffers that could not be understood.
    pub rx_errors: u64,
    /// Requests without a reply within the timeout.
    pub lost_requests: u64,
    /// Rate mode: packets given up by the pacer.
    pub paced_skipped: u64,
    /// Echo mode: replies dropped because the TX queue was stopped.
    pub tx_dropped: u64,
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            sent_packets: self.sent_packets + o.sent_packets,
            sent_bytes: self.sent_bytes + o.sent_bytes,
            sent_messages: self.sent_messages + o.sent_messages,
            sent_payload_bytes: self.sent_payload_bytes + o.sent_payload_bytes,
            written_messages: self.written_messages + o.written_messages,
            write_ns: self.write_ns + o.write_ns,
            recv_packets: self.recv_packets + o.recv_packets,
            recv_bytes: self.recv_bytes + o.recv_bytes,
            kicks: self.kicks + o.kicks,
            tx_kicks: self.tx_kicks + o.tx_kicks,
            rx_kicks: self.rx_kicks + o.rx_kicks,
            calls: self.calls + o.calls,
            tx_calls: self.tx_calls + o.tx_calls,
            rx_calls: self.rx_calls + o.rx_calls,
            call_signals: self.call_signals + o.call_signals,
            ring_full_stalls: self.ring_full_stalls + o.ring_full_stalls,
            stall_ns: self.stall_ns + o.stall_ns,
            tx_wake_timeouts: self.tx_wake_timeouts + o.tx_wake_timeouts,
            rx_errors: self.rx_errors + o.rx_errors,
            lost_requests: self.lost_requests + o.lost_requests,
            paced_skipped: self.paced_skipped + o.paced_skipped,
            tx_dropped: self.tx_dropped + o.tx_dropped,
        }
    }
}

/// Round-trip latency percentiles (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    /// Median (ns).
    pub p50: u64,
    /// 95th percentile (ns): vSPACE's SLO percentile.
    pub p95: u64,
    /// 99th percentile (ns).
    pub p99: u64,
    /// 99.9th percentile (ns).
    pub p999: u64,
    /// Largest sample (ns).
    pub max: u64,
    /// Mean (ns).
    pub mean: u64,
    /// Number of samples.
    pub count: u64,
}

/// Largest latency the histogram holds (ns): one minute; longer samples are clamped.
const LATENCY_MAX_NS: u64 = 60_000_000_000;

/// A latency histogram (ns, 3 significant digits) — HdrHistogram, as netperf-class tools use.
#[derive(Debug, Clone)]
pub struct LatencyHistogram(Histogram<u64>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram from 1 ns to one minute.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram(
            Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3).expect("valid histogram bounds"),
        )
    }

    /// Records one round trip (ns); values are clamped into 1 ns ..= one minute.
    pub fn record(&mut self, ns: u64) {
        self.0.saturating_record(ns.clamp(1, LATENCY_MAX_NS));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides, so `add` cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// The value at quantile `q` (0..=1, ns), or `None` with no sample.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        (!self.0.is_empty()).then(|| self.0.value_at_quantile(q))
    }

    /// Round trips recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether no round trip was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Forgets every sample, keeping the allocation.
    pub fn reset(&mut self) {
        self.0.reset();
    }

    /// Percentiles, or `None` with no sample.
    pub fn summary(&self) -> Option<LatencySummary> {
        let h = &self.0;
        (!h.is_empty()).then(|| LatencySummary {
            p50: h.value_at_quantile(0.5),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean() as u64,
            count: h.len(),
        })
    }
}

/// One thread's share of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadReport {
    /// Thread number.
    pub thread: u32,
    /// Queue pair the thread sent on (RX queue `2*pair`, TX queue `2*pair+1`).
    pub queue_pair: u16,
    /// The thread's counters.
    #[serde(flatten)]
    pub counts: Counts,
    /// Round trips this thread recorded (request/response mode).
    pub latency: Option<LatencySummary>,
    /// CPU time the thread used while sending (s): with `elapsed`, the guest's CPU share.
    pub cpu_seconds: f64,
}

/// Outcome of a control command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CtrlOutcome {
    /// Not sent: not asked for, one pair, or the features it needs not negotiated.
    NotNeeded,
    /// Not sent: the backend's queue count leaves no index for the control queue (QEMU
    /// handles the control queue itself and never gives it to a vhost-user backend, so many
    /// backends, DPDK's among them, have none). The pairs are enabled with
    /// `SET_VRING_ENABLE` either way.
    NoControlQueue,
    /// Sent and acknowledged with `VIRTIO_NET_OK`.
    Acked,
    /// Sent and refused (status byte other than `VIRTIO_NET_OK`).
    Refused(u8),
    /// Sent, and no answer within the timeout.
    NoAnswer,
}

/// What the P95 reporter (`--cores-control`, [`crate::cores_report`]) did over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CoresReportStats {
    /// Reports the daemon accepted.
    pub sent: u64,
    /// Reports that failed (connection, timeout, refusal).
    pub failed: u64,
    /// Periods without a completed round trip (nothing sent).
    pub empty_periods: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// What the dirty-page log showed over a run (`--dirty-log`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DirtyLogReport {
    /// Marks taken by the syncs (a page counts once per sync that found it).
    pub marks_synced: u64,
    /// Syncs run.
    pub syncs: u64,
    /// Pages holding device-written bytes (used rings, receive buffers)
    /// that changed over the run.
    pub device_pages_changed: u64,
    /// Of those, pages never marked: each one a page a migration would
    /// have left stale. 0 for a correct backend.
    pub device_pages_missed: u64,
}

/// Which virtqueue layout the guest drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RingKind {
    /// Split rings (virtio 1.2, 2.7).
    Split,
    /// Packed rings (virtio 1.2, 2.8; `VIRTIO_F_RING_PACKED` negotiated).
    Packed,
}

impl RingKind {
    /// The kind negotiated `features` give.
    pub fn of(features: u64) -> RingKind {
        if features & (1 << vadapt_virtq::packed::VIRTIO_F_RING_PACKED) != 0 {
            RingKind::Packed
        } else {
            RingKind::Split
        }
    }

    /// `split` or `packed`.
    pub fn name(self) -> &'static str {
        match self {
            RingKind::Split => "split",
            RingKind::Packed => "packed",
        }
    }
}

/// What a guest run did, in total and per thread; serialises to the `--json` output.
#[derive(Debug, Clone, Serialize)]
pub struct GuestReport {
    /// Sum of the threads' counters (flattened into the top level in JSON).
    #[serde(flatten)]
    pub totals: Counts,
    /// Round trips of all threads (request/response mode).
    pub latency: Option<LatencySummary>,
    /// Time from the start of the run to the end of the last thread (s in JSON).
    #[serde(serialize_with = "secs")]
    pub elapsed: Duration,
    /// CPU time of all sending threads (s).
    pub cpu_seconds: f64,
    /// Queue pairs in use.
    pub queue_pairs: u16,
    /// Virtio feature bits acknowledged to the backend.
    pub features: u64,
    /// The virtqueue kind those features give (`VIRTIO_F_RING_PACKED` or not).
    pub ring: RingKind,
    /// The guest's MAC address, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// Per-thread breakdown.
    pub threads: Vec<ThreadReport>,
    /// Frames taken from each receive queue (index: queue pair), summed over the threads
    /// that serve it: where the device steered what this guest received.
    pub rx_queue_packets: Vec<u64>,
    /// What became of `--rss-*`'s config on the control queue.
    pub ctrl_rss: CtrlOutcome,
    /// P95 reports to the daemon, with `--cores-control` (absent from JSON otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cores_reports: Option<CoresReportStats>,
    /// What the dirty-page log showed, with `--dirty-log` (absent from JSON otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty_log: Option<DirtyLogReport>,
    /// Why the run ended early (backend gone, vhost-user error), if it did.
    pub error: Option<String>,
}

impl GuestReport {
    /// Sent packets per second over the run.
    pub fn sent_pps(&self) -> f64 {
        per_sec(self.totals.sent_packets, self.elapsed)
    }

    /// Received packets per second over the run.
    pub fn recv_pps(&self) -> f64 {
        per_sec(self.totals.recv_packets, self.elapsed)
    }
}

fn per_sec(n: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_sum_threads_and_derive_kicks_and_calls() {
        let g = GuestCounters::new(2);
        g.threads[0].sent_packets.add(3);
        g.threads[1].sent_packets.add(4);
        g.threads[0].tx_kicks.add(1);
        g.threads[1].rx_kicks.add(2);
        g.threads[1].rx_calls.add(5);
        let t = g.total();
        assert_eq!(t.sent_packets, 7);
        assert_eq!(t.kicks, 3);
        assert_eq!(t.calls, 5);
    }

    #[test]
    fn latency_summary() {
        let mut h = LatencyHistogram::new();
        assert_eq!(h.summary(), None);
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let mut other = LatencyHistogram::new();
        other.record(0); // clamped to 1 ns
        h.merge(&other);
        let s = h.summary().unwrap();
        assert_eq!(s.count, 1001);
        // 3 significant digits: within 0.1 %.
        assert!((499_000..=501_000).contains(&s.p50), "{s:?}");
        assert!((989_000..=991_000).contains(&s.p99), "{s:?}");
        assert!(s.max >= 999_000);
    }

    #[test]
    fn report_json_is_flat() {
        let r = GuestReport {
            totals: Counts {
                sent_packets: 10,
                ..Counts::default()
            },
            latency: None,
            elapsed: Duration::from_millis(1500),
            cpu_seconds: 0.5,
            queue_pairs: 1,
            features: 1 << 34,
            ring: RingKind::of(1 << 34),
            mac: "02:00:00:00:00:01".into(),
            threads: vec![],
            rx_queue_packets: vec![3, 4],
            ctrl_rss: CtrlOutcome::Refused(1),
            cores_reports: None,
            dirty_log: None,
            error: None,
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["sent_packets"], 10);
        assert_eq!(v["rx_queue_packets"], serde_json::json!([3, 4]));
        assert_eq!(v["ctrl_rss"], serde_json::json!({"refused": 1}));
        assert_eq!(v["elapsed"], 1.5);
        assert_eq!(v["ring"], "packed");
        assert!((r.sent_pps() - 10.0 / 1.5).abs() < 1e-9);
    }
}
