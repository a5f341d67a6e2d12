//! Every counter the daemon keeps, and their export.
//!
//! Workers update these atomics once per service pass (never per packet);
//! `vadapt stats` and the Prometheus endpoint read them. Exported names:
//!
//! | name | labels | meaning |
//! |---|---|---|
//! | `vadapt_queue_packets_total` | port, queue, dir | packets; `dir="tx"` guest→host, `dir="rx"` host→guest (for sink/echo/tap ports: `rx` = taken from the switch, `tx` = emitted into it) |
//! | `vadapt_queue_bytes_total` | port, queue, dir | frame bytes (no virtio-net header) |
//! | `vadapt_queue_kicks_total` | port, queue | guest notifications received (kick eventfd counts) |
//! | `vadapt_queue_calls_total` | port, queue | interrupts sent to the guest (call eventfd writes) |
//! | `vadapt_queue_dropped_total` | port, queue, reason | packets/chains dropped, by reason |
//! | `vadapt_queue_offloads_total` | port, queue, kind | a sender's offloads at this port's egress (issue #15): `kind="segmented"` GSO frames cut into MSS frames in software, `kind="checksum"` partial checksums completed in software (the receiver does not take them), `kind="gso_whole"` GSO frames passed whole (a guest with `GUEST_TSO*`, a TAP) |
//! | `vadapt_queue_poll_interval_seconds` | port, queue | the policy's current interval (NetAP) or poll window (grow/shrink); 0 when it has none |
//! | `vadapt_worker_cpu_seconds_total` | worker | CPU time of the queue worker thread |
//! | `vadapt_worker_busy_cycles_total` | worker | TSC cycles spent in passes that moved packets |
//! | `vadapt_worker_passes_total` | worker | service passes |
//! | `vadapt_worker_wakeups_total` | worker, cause | waits that ended, by cause (timer, kick, recheck, timeout) |
//! | `vadapt_worker_sleep_overshoot_seconds` | worker | histogram of how late timed sleeps woke |
//! | `vadapt_port_connected` | port | 1 when a frontend is connected |
//! | `vadapt_netap_ml_predicted_interval_seconds` | port | NetAP-ML's predicted best interval (NetAP-ML ports only) |
//! | `vadapt_netap_ml_search_range_seconds` | port, end | NetAP's search range around it, `end="lo"` / `"hi"` (NetAP-ML ports only) |
//! | `vadapt_netap_ml_vms`, `vadapt_netap_ml_threads`, `vadapt_netap_ml_message_size_bytes` | port | the workload features the port's NetAP-ML predicts for (config, retune or the daemon's estimate, see [`crate::workload_estimate`]); 0 = unknown |
//! | `vadapt_cores_*` | group | the core manager's state when `[cores]` runs: group CPUs, utilisation, thresholds, run delay, periods, moves, QMP and guest agent errors, the per-NQ-core pool's workers and queue-set moves (see `encode_cores`) |
//!
//! With `[cores] queue_workers = "per-nq-core"` a pool thread serves several
//! ports, so `vadapt_worker_cpu_seconds_total` stays 0 for their workers; the
//! NQ group's CPU time is `vadapt_cores_utilization{group="nq"}`.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

/// Direction of a packet count, seen from the guest (see module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Guest to host (the guest's transmit queue); for local ports, emitted into the switch.
    Tx = 0,
    /// Host to guest; for local ports, taken from the switch.
    Rx = 1,
}

/// Why a packet or descriptor chain was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// A descriptor index or head was outside the queue.
    BadIndex,
    /// A buffer address/length was outside the guest's memory regions.
    BadAddress,
    /// A chain was longer than the queue (a loop).
    ChainLoop,
    /// Readable/writable descriptors in the wrong place for the queue's direction.
    WrongDirection,
    /// A malformed indirect table.
    BadIndirect,
    /// Frame longer than vadapt forwards.
    Oversize,
    /// Frame shorter than an Ethernet header.
    Undersize,
    /// Destination backlog full (the receiver is not keeping up).
    BacklogFull,
    /// The guest posted no receive buffers in time and its backlog overflowed.
    NoRxBuffer,
    /// The guest corrupted ring indices (avail index ran ahead by more than the ring size).
    RingCorrupt,
    /// The destination port has no frontend connected (or no receive queue running).
    PortDown,
    /// A virtio-net header the frame could not be handled by: a field out of
    /// range, an offload not negotiated, a GSO frame that is not the TCP
    /// segment its header says (see [`crate::offload::OffloadRefused`]).
    BadVnetHdr,
    /// Anything else the ring rejected.
    Other,
}

impl DropReason {
    /// Every reason, in export order.
    pub const ALL: [DropReason; 13] = [
        DropReason::BadIndex,
        DropReason::BadAddress,
        DropReason::ChainLoop,
        DropReason::WrongDirection,
        DropReason::BadIndirect,
        DropReason::Oversize,
        DropReason::Undersize,
        DropReason::BacklogFull,
        DropReason::NoRxBuffer,
        DropReason::RingCorrupt,
        DropReason::PortDown,
        DropReason::BadVnetHdr,
        DropReason::Other,
    ];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::BadIndex => "bad_index",
            DropReason::BadAddress => "bad_address",
            DropReason::ChainLoop => "chain_loop",
            DropReason::WrongDirection => "wrong_direction",
            DropReason::BadIndirect => "bad_indirect",
            DropReason::Oversize => "oversize",
            DropReason::Undersize => "undersize",
            DropReason::BacklogFull => "backlog_full",
            DropReason::NoRxBuffer => "no_rx_buffer",
            DropReason::RingCorrupt => "ring_corrupt",
            DropReason::PortDown => "port_down",
            DropReason::BadVnetHdr => "bad_vnet_hdr",
            DropReason::Other => "other",
        }
    }
}

/// Counters of one queue pair (or of a local port's single "queue").
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Packets, by [`Dir`].
    pub packets: [AtomicU64; 2],
    /// Frame bytes, by [`Dir`].
    pub bytes: [AtomicU64; 2],
    /// Kicks received (sum of kick eventfd counts), both queues of the pair.
    pub kicks: AtomicU64,
    /// Calls sent, both queues of the pair.
    pub calls: AtomicU64,
    /// Drops, indexed like [`DropReason::ALL`].
    pub drops: [AtomicU64; DropReason::ALL.len()],
    /// GSO frames cut into MSS frames in software at this port's egress,
    /// because its receiver does not take them whole (each counted once,
    /// not per segment).
    pub gso_frames: AtomicU64,
    /// Partial checksums completed in software at this port's egress
    /// (frames without GSO).
    pub csum_completed: AtomicU64,
    /// GSO frames passed whole to this port's receiver (a guest with
    /// `GUEST_TSO*`, a TAP).
    pub gso_whole: AtomicU64,
}

impl QueueStats {
    /// Add a batch of packets.
    pub fn add(&self, dir: Dir, packets: u64, bytes: u64) {
        if packets != 0 {
            self.packets[dir as usize].fetch_add(packets, Relaxed);
            self.bytes[dir as usize].fetch_add(bytes, Relaxed);
        }
    }

    /// Count `n` drops for `reason`.
    pub fn drop(&self, reason: DropReason, n: u64) {
        let i = DropReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.drops[i].fetch_add(n, Relaxed);
    }
}

/// Counters of one port.
#[derive(Debug)]
pub struct PortStats {
    /// Port name.
    pub name: String,
    /// `vm`, `sink`, `echo` or `tap`.
    pub kind: &'static str,
    /// True while a frontend is connected (always true for local ports).
    pub connected: AtomicBool,
    /// Current policy name (VM ports).
    pub policy: Mutex<String>,
    /// Current polling interval / window in µs, 0 if none.
    pub poll_interval_us: AtomicU64,
    /// NetAP-ML's predicted best interval, µs; 0 for other policies.
    pub predicted_us: AtomicU64,
    /// Lower end of the NetAP search range, µs; 0 for other policies.
    pub search_lo_us: AtomicU64,
    /// Upper end of the NetAP search range, µs; 0 for other policies.
    pub search_hi_us: AtomicU64,
    /// NetAP-ML's workload features last given to the port: VMs, threads
    /// per VM, message size (bytes); 0 = unknown.
    pub workload: [AtomicU64; 3],
    /// Per queue pair.
    pub queues: Vec<QueueStats>,
}

impl PortStats {
    /// New counters for a port with `queues` queue pairs.
    pub fn new(name: &str, kind: &'static str, queues: usize) -> Self {
        PortStats {
            name: name.to_string(),
            kind,
            connected: AtomicBool::new(kind != "vm"),
            policy: Mutex::new(String::new()),
            poll_interval_us: AtomicU64::new(0),
            predicted_us: AtomicU64::new(0),
            search_lo_us: AtomicU64::new(0),
            search_hi_us: AtomicU64::new(0),
            workload: Default::default(),
            queues: (0..queues.max(1)).map(|_| QueueStats::default()).collect(),
        }
    }
}

/// Counters of one queue worker thread.
#[derive(Debug)]
pub struct WorkerStats {
    /// Worker name (`<port>` or `<port>/<n>`).
    pub name: String,
    /// Linux thread id while running, 0 otherwise (for CPU time sampling).
    pub tid: AtomicI32,
    /// CPU nanoseconds of earlier incarnations of this worker (restarts).
    pub cpu_ns_retired: AtomicU64,
    /// TSC cycles in passes that moved packets.
    pub busy_cycles: AtomicU64,
    /// Packets moved in those passes.
    pub busy_packets: AtomicU64,
    /// Service passes.
    pub passes: AtomicU64,
    /// Wake-ups by cause: timer, kick, recheck, timeout.
    pub wakeups: [AtomicU64; 4],
    /// Overshoot of timed sleeps, ns (merged from the worker about once a second).
    pub overshoot_ns: Mutex<Histogram<u64>>,
}

/// Labels of [`WorkerStats::wakeups`].
pub const WAKE_CAUSES: [&str; 4] = ["timer", "kick", "recheck", "timeout"];

impl WorkerStats {
    /// New counters for worker `name`.
    pub fn new(name: &str) -> Self {
        WorkerStats {
            name: name.to_string(),
            tid: AtomicI32::new(0),
            cpu_ns_retired: AtomicU64::new(0),
            busy_cycles: AtomicU64::new(0),
            busy_packets: AtomicU64::new(0),
            passes: AtomicU64::new(0),
            wakeups: Default::default(),
            overshoot_ns: Mutex::new(new_overshoot_histogram()),
        }
    }

    /// CPU time used so far, ns (live thread + retired incarnations).
    pub fn cpu_ns(&self) -> u64 {
        let tid = self.tid.load(Relaxed);
        let live = if tid > 0 { thread_cpu_ns(tid) } else { 0 };
        self.cpu_ns_retired.load(Relaxed) + live
    }
}

/// Histogram for sleep overshoot: 1 ns .. 1 s, 3 significant digits.
pub fn new_overshoot_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1_000_000_000, 3).expect("static bounds are valid")
}

/// CPU time of thread `tid` of this process, ns (0 once it has exited).
pub fn thread_cpu_ns(tid: i32) -> u64 {
    u32::try_from(tid)
        .ok()
        .and_then(|t| vadapt_host::cputime::schedstat_cpu_time(t).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

/// All the daemon's counters.
#[derive(Debug, Default)]
pub struct Registry {
    ports: RwLock<Vec<Arc<PortStats>>>,
    workers: RwLock<Vec<Arc<WorkerStats>>>,
    cores: RwLock<Option<Arc<crate::cores::CoresStatus>>>,
}

impl Registry {
    /// Register a port's counters.
    pub fn add_port(&self, p: Arc<PortStats>) {
        self.ports.write().expect("poisoned").push(p);
    }

    /// Register a worker's counters.
    pub fn add_worker(&self, w: Arc<WorkerStats>) {
        self.workers.write().expect("poisoned").push(w);
    }

    /// Export the core manager's state (`vadapt_cores_*`).
    pub fn set_cores(&self, c: Arc<crate::cores::CoresStatus>) {
        *self.cores.write().expect("poisoned") = Some(c);
    }

    /// A consistent-enough copy of every counter, for `vadapt stats`.
    pub fn snapshot(&self) -> StatsSnapshot {
        let ports = self
            .ports
            .read()
            .expect("poisoned")
            .iter()
            .map(|p| PortSnapshot {
                name: p.name.clone(),
                kind: p.kind.to_string(),
                connected: p.connected.load(Relaxed),
                policy: p.policy.lock().map(|s| s.clone()).unwrap_or_default(),
                poll_interval_us: p.poll_interval_us.load(Relaxed),
                predicted_us: p.predicted_us.load(Relaxed),
                search_range_us: (p.search_lo_us.load(Relaxed), p.search_hi_us.load(Relaxed)),
                workload: [0, 1, 2].map(|i| p.workload[i].load(Relaxed)),
                queues: p
                    .queues
                    .iter()
                    .enumerate()
                    .map(|(i, q)| QueueSnapshot {
                        queue: i as u16,
                        tx_packets: q.packets[0].load(Relaxed),
                        tx_bytes: q.bytes[0].load(Relaxed),
                        rx_packets: q.packets[1].load(Relaxed),
                        rx_bytes: q.bytes[1].load(Relaxed),
                        kicks: q.kicks.load(Relaxed),
                        calls: q.calls.load(Relaxed),
                        gso_frames: q.gso_frames.load(Relaxed),
                        csum_completed: q.csum_completed.load(Relaxed),
                        gso_whole: q.gso_whole.load(Relaxed),
                        dropped: DropReason::ALL
                            .iter()
                            .zip(&q.drops)
                            .filter(|(_, c)| c.load(Relaxed) != 0)
                            .map(|(r, c)| (r.as_str().to_string(), c.load(Relaxed)))
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        let workers = self
            .workers
            .read()
            .expect("poisoned")
            .iter()
            .map(|w| {
                let h = w.overshoot_ns.lock().expect("poisoned");
                WorkerSnapshot {
                    name: w.name.clone(),
                    cpu_seconds: w.cpu_ns() as f64 / 1e9,
                    busy_cycles: w.busy_cycles.load(Relaxed),
                    busy_packets: w.busy_packets.load(Relaxed),
                    passes: w.passes.load(Relaxed),
                    wakeups: WAKE_CAUSES
                        .iter()
                        .zip(&w.wakeups)
                        .map(|(c, v)| (c.to_string(), v.load(Relaxed)))
                        .collect(),
                    sleeps: h.len(),
                    overshoot_p50_ns: h.value_at_quantile(0.5),
                    overshoot_p99_ns: h.value_at_quantile(0.99),
                }
            })
            .collect();
        StatsSnapshot { ports, workers }
    }

    /// Every counter in the OpenMetrics 1.0.0 text format (what
    /// `prometheus-client` writes: counter families named without `_total`,
    /// ending with `# EOF`). Served when a scraper asks for it.
    pub fn openmetrics_text(self: &Arc<Self>) -> String {
        let mut reg = prometheus_client::registry::Registry::default();
        reg.register_collector(Box::new(Collector(Arc::clone(self))));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &reg);
        out
    }

    /// Every counter in the Prometheus text format 0.0.4, the default of
    /// the metrics endpoint and the output of `vadapt stats --prometheus`.
    pub fn prometheus_text(self: &Arc<Self>) -> String {
        openmetrics_to_prometheus(&self.openmetrics_text())
    }
}

/// Rewrite an OpenMetrics text exposition as Prometheus text format 0.0.4.
///
/// The two differ, for what this registry writes, in three places: 0.0.4
/// names a counter family after its samples (`# TYPE x_total counter`, where
/// OpenMetrics writes `# TYPE x counter`), has no `# UNIT` lines, and has no
/// `# EOF` terminator. OpenMetrics' `unknown` type is 0.0.4's `untyped`.
/// Samples are the same in both.
pub fn openmetrics_to_prometheus(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    // A `# HELP` line waits for its `# TYPE` line, which decides the name.
    let mut help: Option<(&str, &str)> = None;
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take(), None);
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "unknown" => (name.to_string(), "untyped"),
                k => (name.to_string(), k),
            };
            flush_help(&mut out, help.take(), Some(&name));
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
            continue;
        }
        flush_help(&mut out, help.take(), None);
        out.push_str(line);
        out.push('\n');
    }
    flush_help(&mut out, help, None);
    out
}

fn flush_help(out: &mut String, help: Option<(&str, &str)>, name: Option<&str>) {
    if let Some((n, text)) = help {
        out.push_str("# HELP ");
        out.push_str(name.unwrap_or(n));
        out.push(' ');
        out.push_str(text);
        out.push('\n');
    }
}

/// `vadapt stats --json` output.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StatsSnapshot {
    /// Ports.
    pub ports: Vec<PortSnapshot>,
    /// Queue workers.
    pub workers: Vec<WorkerSnapshot>,
}

/// One port in [`StatsSnapshot`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PortSnapshot {
    /// Name.
    pub name: String,
    /// `vm`, `sink`, `echo`, `tap`.
    pub kind: String,
    /// Frontend connected.
    pub connected: bool,
    /// Policy name (VM ports).
    pub policy: String,
    /// Current interval / window, µs.
    pub poll_interval_us: u64,
    /// NetAP-ML's predicted best interval, µs (0: not NetAP-ML).
    #[serde(default)]
    pub predicted_us: u64,
    /// NetAP's search range, µs ((0, 0): not NetAP).
    #[serde(default)]
    pub search_range_us: (u64, u64),
    /// NetAP-ML's workload features: VMs, threads per VM, message size in
    /// bytes (0 = unknown).
    #[serde(default)]
    pub workload: [u64; 3],
    /// Queue pairs.
    pub queues: Vec<QueueSnapshot>,
}

/// One queue pair in [`StatsSnapshot`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct QueueSnapshot {
    /// Queue pair index.
    pub queue: u16,
    /// Guest→host packets.
    pub tx_packets: u64,
    /// Guest→host bytes.
    pub tx_bytes: u64,
    /// Host→guest packets.
    pub rx_packets: u64,
    /// Host→guest bytes.
    pub rx_bytes: u64,
    /// Kicks received.
    pub kicks: u64,
    /// Calls sent.
    pub calls: u64,
    /// GSO frames cut into MSS frames in software at this port's egress.
    #[serde(default)]
    pub gso_frames: u64,
    /// Partial checksums completed in software at this port's egress.
    #[serde(default)]
    pub csum_completed: u64,
    /// GSO frames passed whole to this port's receiver.
    #[serde(default)]
    pub gso_whole: u64,
    /// Drops by reason (only non-zero reasons).
    pub dropped: BTreeMap<String, u64>,
}

/// One worker in [`StatsSnapshot`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerSnapshot {
    /// Name.
    pub name: String,
    /// CPU seconds used.
    pub cpu_seconds: f64,
    /// TSC cycles in non-empty passes.
    pub busy_cycles: u64,
    /// Packets moved in non-empty passes.
    pub busy_packets: u64,
    /// Service passes.
    pub passes: u64,
    /// Wake-ups by cause.
    pub wakeups: BTreeMap<String, u64>,
    /// Timed sleeps measured.
    pub sleeps: u64,
    /// Median sleep overshoot, ns.
    pub overshoot_p50_ns: u64,
    /// 99th-percentile sleep overshoot, ns.
    pub overshoot_p99_ns: u64,
}

impl StatsSnapshot {
    /// Sum of a per-queue field over one port.
    pub fn port_total(&self, port: &str, f: impl Fn(&QueueSnapshot) -> u64) -> Option<u64> {
        self.ports
            .iter()
            .find(|p| p.name == port)
            .map(|p| p.queues.iter().map(&f).sum())
    }

    /// Human-readable table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<12} {:<5} {:<4} {:>3} {:>14} {:>16} {:>14} {:>16} {:>10} {:>10} {:>8}  policy",
            "port",
            "kind",
            "conn",
            "q",
            "tx_pkts",
            "tx_bytes",
            "rx_pkts",
            "rx_bytes",
            "kicks",
            "calls",
            "drops"
        );
        for p in &self.ports {
            for q in &p.queues {
                let drops: u64 = q.dropped.values().sum();
                let _ = writeln!(
                    s,
                    "{:<12} {:<5} {:<4} {:>3} {:>14} {:>16} {:>14} {:>16} {:>10} {:>10} {:>8}  {}{}",
                    p.name,
                    p.kind,
                    if p.connected { "yes" } else { "no" },
                    q.queue,
                    q.tx_packets,
                    q.tx_bytes,
                    q.rx_packets,
                    q.rx_bytes,
                    q.kicks,
                    q.calls,
                    drops,
                    p.policy,
                    if p.poll_interval_us > 0 {
                        format!(" ({} us)", p.poll_interval_us)
                    } else {
                        String::new()
                    } + &if p.predicted_us > 0 {
                        format!(
                            " [predicted {} us, search {}-{} us, workload {}/{}/{} B]",
                            p.predicted_us,
                            p.search_range_us.0,
                            p.search_range_us.1,
                            p.workload[0],
                            p.workload[1],
                            p.workload[2]
                        )
                    } else {
                        String::new()
                    }
                );
                for (r, n) in &q.dropped {
                    let _ = writeln!(s, "{:>24} dropped {r}: {n}", "");
                }
            }
        }
        let _ = writeln!(
            s,
            "\n{:<12} {:>10} {:>12} {:>10} {:>14} {:>14}",
            "worker", "cpu_s", "cycles/pkt", "passes", "overshoot_p50", "overshoot_p99"
        );
        for w in &self.workers {
            let cpp = if w.busy_packets > 0 {
                format!("{:.1}", w.busy_cycles as f64 / w.busy_packets as f64)
            } else {
                "-".into()
            };
            let _ = writeln!(
                s,
                "{:<12} {:>10.3} {:>12} {:>10} {:>12}ns {:>12}ns",
                w.name, w.cpu_seconds, cpp, w.passes, w.overshoot_p50_ns, w.overshoot_p99_ns
            );
        }
        s
    }
}

#[derive(Debug)]
struct Collector(Arc<Registry>);

impl prometheus_client::collector::Collector for Collector {
    fn encode(
        &self,
        mut enc: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use prometheus_client::metrics::MetricType;

        let ports = self.0.ports.read().expect("poisoned").clone();
        let workers = self.0.workers.read().expect("poisoned").clone();
        type Labels = Vec<(&'static str, String)>;
        let qlabels = |p: &PortStats, q: usize| -> Labels {
            vec![("port", p.name.clone()), ("queue", q.to_string())]
        };

        // Counters: prometheus-client appends `_total` to counter names.
        for (name, help, dirfield) in [
            ("vadapt_queue_packets", "Packets moved per queue.", true),
            ("vadapt_queue_bytes", "Frame bytes moved per queue.", false),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for p in &ports {
                for (qi, q) in p.queues.iter().enumerate() {
                    for (d, dir) in ["tx", "rx"].iter().enumerate() {
                        let mut l = qlabels(p, qi);
                        l.push(("dir", dir.to_string()));
                        let v = if dirfield { &q.packets[d] } else { &q.bytes[d] };
                        ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&l)?)?;
                    }
                }
            }
        }
        for (name, help, kicks) in [
            (
                "vadapt_queue_kicks",
                "Guest kicks received per queue pair.",
                true,
            ),
            (
                "vadapt_queue_calls",
                "Calls (interrupts) sent per queue pair.",
                false,
            ),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for p in &ports {
                for (qi, q) in p.queues.iter().enumerate() {
                    let v = if kicks { &q.kicks } else { &q.calls };
                    ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&qlabels(p, qi))?)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_queue_offloads",
                "Offloads at a port's egress, by kind: done in software, or passed whole.",
                None,
                MetricType::Counter,
            )?;
            for p in &ports {
                for (qi, q) in p.queues.iter().enumerate() {
                    for (kind, c) in [
                        ("segmented", &q.gso_frames),
                        ("checksum", &q.csum_completed),
                        ("gso_whole", &q.gso_whole),
                    ] {
                        let mut l = qlabels(p, qi);
                        l.push(("kind", kind.to_string()));
                        ConstCounter::new(c.load(Relaxed)).encode(m.encode_family(&l)?)?;
                    }
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_queue_dropped",
                "Packets or descriptor chains dropped, by reason.",
                None,
                MetricType::Counter,
            )?;
            for p in &ports {
                for (qi, q) in p.queues.iter().enumerate() {
                    for (r, c) in DropReason::ALL.iter().zip(&q.drops) {
                        let mut l = qlabels(p, qi);
                        l.push(("reason", r.as_str().to_string()));
                        ConstCounter::new(c.load(Relaxed)).encode(m.encode_family(&l)?)?;
                    }
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_queue_poll_interval_seconds",
                "Current polling interval (NetAP) or poll window (grow/shrink), seconds; 0 if none.",
                None,
                MetricType::Gauge,
            )?;
            for p in ports.iter().filter(|p| p.kind == "vm") {
                for qi in 0..p.queues.len() {
                    // Prometheus base units: seconds (the gauge is kept in µs).
                    let v = p.poll_interval_us.load(Relaxed) as f64 / 1e6;
                    ConstGauge::new(v).encode(m.encode_family(&qlabels(p, qi))?)?;
                }
            }
        }
        {
            // NetAP-ML ports only (those with a prediction).
            let ml: Vec<_> = ports
                .iter()
                .filter(|p| p.kind == "vm" && p.predicted_us.load(Relaxed) > 0)
                .collect();
            let port = |p: &PortStats| -> Labels { vec![("port", p.name.clone())] };
            let mut m = enc.encode_descriptor(
                "vadapt_netap_ml_predicted_interval_seconds",
                "NetAP-ML's predicted best polling interval, seconds.",
                None,
                MetricType::Gauge,
            )?;
            for p in &ml {
                let v = p.predicted_us.load(Relaxed) as f64 / 1e6;
                ConstGauge::new(v).encode(m.encode_family(&port(p))?)?;
            }
            let mut m = enc.encode_descriptor(
                "vadapt_netap_ml_search_range_seconds",
                "Ends of NetAP-ML's golden-section search range, seconds.",
                None,
                MetricType::Gauge,
            )?;
            for p in &ml {
                for (end, v) in [("lo", &p.search_lo_us), ("hi", &p.search_hi_us)] {
                    let mut l = port(p);
                    l.push(("end", end.to_string()));
                    let v = v.load(Relaxed) as f64 / 1e6;
                    ConstGauge::new(v).encode(m.encode_family(&l)?)?;
                }
            }
            for (i, name, help) in [
                (
                    0,
                    "vadapt_netap_ml_vms",
                    "VMs NetAP-ML predicts for; 0 = unknown.",
                ),
                (
                    1,
                    "vadapt_netap_ml_threads",
                    "Sender threads per VM NetAP-ML predicts for; 0 = unknown.",
                ),
                (
                    2,
                    "vadapt_netap_ml_message_size_bytes",
                    "Message size NetAP-ML predicts for, bytes; 0 = unknown.",
                ),
            ] {
                let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
                for p in &ml {
                    let v = p.workload[i].load(Relaxed) as i64;
                    ConstGauge::new(v).encode(m.encode_family(&port(p))?)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_port_connected",
                "1 while a frontend is connected to the port.",
                None,
                MetricType::Gauge,
            )?;
            for p in &ports {
                let l: Labels = vec![("port", p.name.clone())];
                ConstGauge::new(i64::from(p.connected.load(Relaxed)))
                    .encode(m.encode_family(&l)?)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_worker_cpu_seconds",
                "CPU time used by the queue worker thread.",
                None,
                MetricType::Counter,
            )?;
            for w in &workers {
                let l: Labels = vec![("worker", w.name.clone())];
                ConstCounter::new(w.cpu_ns() as f64 / 1e9).encode(m.encode_family(&l)?)?;
            }
        }
        for (name, help, which) in [
            (
                "vadapt_worker_busy_cycles",
                "TSC cycles spent in service passes that moved packets.",
                0,
            ),
            ("vadapt_worker_passes", "Service passes.", 1),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for w in &workers {
                let l: Labels = vec![("worker", w.name.clone())];
                let v = if which == 0 {
                    &w.busy_cycles
                } else {
                    &w.passes
                };
                ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&l)?)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_worker_wakeups",
                "Waits that ended, by cause.",
                None,
                MetricType::Counter,
            )?;
            for w in &workers {
                for (c, v) in WAKE_CAUSES.iter().zip(&w.wakeups) {
                    let l: Labels = vec![("worker", w.name.clone()), ("cause", c.to_string())];
                    ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&l)?)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_worker_sleep_overshoot_seconds",
                "How late timed sleeps woke up.",
                None,
                MetricType::Histogram,
            )?;
            const BOUNDS_NS: [u64; 10] = [
                1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
            ];
            for w in &workers {
                let h = w.overshoot_ns.lock().expect("poisoned");
                // prometheus-client takes per-bucket counts and accumulates
                // them itself; it writes `le="+Inf"` for f64::MAX (and `inf`,
                // valid in neither text format, for f64::INFINITY).
                let mut below = 0;
                let mut buckets: Vec<(f64, u64)> = BOUNDS_NS
                    .iter()
                    .map(|&b| {
                        let upto = h.count_between(0, b);
                        let n = upto - below;
                        below = upto;
                        (b as f64 / 1e9, n)
                    })
                    .collect();
                buckets.push((f64::MAX, h.len() - below));
                let sum = h.mean() * h.len() as f64 / 1e9;
                let l: Labels = vec![("worker", w.name.clone())];
                m.encode_family(&l)?
                    .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                        sum,
                        h.len(),
                        &buckets,
                        None,
                    )?;
            }
        }
        let cores = self.0.cores.read().expect("poisoned").clone();
        if let Some(c) = cores {
            encode_cores(&c.snapshot(), &mut enc)?;
        }
        Ok(())
    }
}

/// The core manager's `vadapt_cores_*` families.
fn encode_cores(
    c: &crate::cores::CoresSnapshot,
    enc: &mut prometheus_client::encoding::DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    use prometheus_client::encoding::EncodeMetric;
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    use prometheus_client::metrics::MetricType;
    type Labels = Vec<(&'static str, String)>;
    let group = |g: &str| -> Labels { vec![("group", g.to_string())] };
    let mut m = enc.encode_descriptor(
        "vadapt_cores_group_cpus",
        "CPUs of each vSPACE group (vcpu, nq, be, idle).",
        None,
        MetricType::Gauge,
    )?;
    for (g, v) in [
        ("vcpu", &c.sets.vcpu),
        ("nq", &c.sets.nq),
        ("be", &c.sets.be),
        ("idle", &c.sets.idle),
    ] {
        ConstGauge::new(v.len() as i64).encode(m.encode_family(&group(g))?)?;
    }
    let m = enc.encode_descriptor(
        "vadapt_cores_nq_workers",
        "Queue workers of the per-NQ-core pool (0 with a worker per port).",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(c.nq_workers.len() as i64).encode(m)?;
    let m = enc.encode_descriptor(
        "vadapt_cores_failed",
        "1 when the core manager stopped on an internal error (see `vadapt cores`), else 0.",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(i64::from(c.failed.is_some())).encode(m)?;
    let mut m = enc.encode_descriptor(
        "vadapt_cores_utilization",
        "CPU time of each group over the last period, in cores.",
        None,
        MetricType::Gauge,
    )?;
    for (g, v) in [("vcpu", c.util_vcpu), ("nq", c.util_nq), ("be", c.util_be)] {
        ConstGauge::new(v).encode(m.encode_family(&group(g))?)?;
    }
    let mut m = enc.encode_descriptor(
        "vadapt_cores_threshold",
        "Utilisation threshold per core of each group (Th_vCPU, Th_NQ).",
        None,
        MetricType::Gauge,
    )?;
    for (g, v) in [("vcpu", c.threshold_vcpu), ("nq", c.threshold_nq)] {
        ConstGauge::new(v).encode(m.encode_family(&group(g))?)?;
    }
    let mut m = enc.encode_descriptor(
        "vadapt_cores_run_delay_seconds",
        "Time the group's threads waited for a CPU while runnable (schedstat).",
        None,
        MetricType::Counter,
    )?;
    for (g, v) in [("vcpu", c.run_delay_vcpu_s), ("nq", c.run_delay_nq_s)] {
        ConstCounter::new(v).encode(m.encode_family(&group(g))?)?;
    }
    for (name, help, v) in [
        (
            "vadapt_cores_periods",
            "Core manager periods run.",
            c.periods,
        ),
        (
            "vadapt_cores_reallocations",
            "Periods whose core allocation changed.",
            c.reallocations,
        ),
        (
            "vadapt_cores_explorations",
            "Threshold exploration rounds (vSPACE Algorithm 3).",
            c.explorations,
        ),
        (
            "vadapt_cores_threads_moved",
            "Thread placements carried out.",
            c.threads_moved,
        ),
        (
            "vadapt_cores_threads_refused",
            "Thread placements the kernel refused.",
            c.threads_refused,
        ),
        (
            "vadapt_cores_qmp_errors",
            "Failed QMP exchanges with VMs.",
            c.qmp_errors,
        ),
        (
            "vadapt_cores_qga_errors",
            "Failed guest agent requests (vSPACE-Guest).",
            c.qga_errors,
        ),
        (
            "vadapt_cores_queue_set_moves",
            "Ports' queue sets moved between NQ workers (queue_workers = per-nq-core).",
            c.queue_set_moves,
        ),
    ] {
        let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(v).encode(m)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_the_documented_names_and_values() {
        let reg = Arc::new(Registry::default());
        let p = Arc::new(PortStats::new("vm1", "vm", 2));
        p.queues[1].add(Dir::Tx, 3, 192);
        p.queues[0].drop(DropReason::BadAddress, 2);
        reg.add_port(p);
        reg.add_worker(Arc::new(WorkerStats::new("vm1")));
        let t = reg.prometheus_text();
        for name in [
            "vadapt_queue_packets_total",
            "vadapt_queue_bytes_total",
            "vadapt_queue_kicks_total",
            "vadapt_queue_calls_total",
            "vadapt_queue_dropped_total",
            "vadapt_worker_cpu_seconds_total",
            "vadapt_queue_poll_interval_seconds",
            "vadapt_worker_sleep_overshoot_seconds_bucket",
        ] {
            assert!(t.contains(name), "{name} missing from:\n{t}");
        }
        assert!(
            t.contains(r#"vadapt_queue_packets_total{port="vm1",queue="1",dir="tx"} 3"#),
            "{t}"
        );
        assert!(
            t.contains(
                r#"vadapt_queue_dropped_total{port="vm1",queue="0",reason="bad_address"} 2"#
            ),
            "{t}"
        );
    }

    /// Every sample of the 0.0.4 text belongs to a family declared by a
    /// `# TYPE` line of that name (histograms: `_bucket`, `_sum`, `_count`),
    /// counters end in `_total`, and nothing OpenMetrics-only is left.
    #[test]
    fn text_004_declares_every_sample_family() {
        let reg = Arc::new(Registry::default());
        reg.add_port(Arc::new(PortStats::new("vm1", "vm", 2)));
        let w = Arc::new(WorkerStats::new("vm1"));
        w.overshoot_ns.lock().unwrap().record(3_000).unwrap();
        w.overshoot_ns.lock().unwrap().record(2_000_000).unwrap();
        reg.add_worker(w);
        let t = reg.prometheus_text();
        assert!(!t.contains("# EOF") && !t.contains("# UNIT"), "{t}");
        let mut types = BTreeMap::new();
        for l in t.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut it = l[7..].split(' ');
            types.insert(it.next().unwrap(), it.next().unwrap());
        }
        for (name, kind) in &types {
            if *kind == "counter" {
                assert!(name.ends_with("_total"), "{name}");
            }
            let help = format!("# HELP {name} ");
            assert!(t.contains(&help), "no HELP for {name}");
        }
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| types.get(f) == Some(&"histogram"))
                })
                .unwrap_or(name);
            assert!(types.contains_key(family), "sample {l} has no TYPE");
        }
        // Buckets are cumulative and end at +Inf with the count.
        let inf = t.lines().find(|l| l.contains(r#"le="+Inf""#)).unwrap();
        assert!(inf.ends_with(" 2"), "{inf}");
        let le3 = t.lines().find(|l| l.contains(r#"le="0.000005""#)).unwrap();
        assert!(le3.ends_with(" 1"), "{le3}");
    }

    #[test]
    fn conversion_renames_counter_families_only() {
        let om = "# HELP a_b Help text.\n# TYPE a_b counter\n# UNIT a_b seconds\na_b_total 1\n# HELP g G.\n# TYPE g gauge\ng 2\n# TYPE u unknown\nu 3\n# EOF\n";
        assert_eq!(
            openmetrics_to_prometheus(om),
            "# HELP a_b_total Help text.\n# TYPE a_b_total counter\na_b_total 1\n# HELP g G.\n# TYPE g gauge\ng 2\n# TYPE u untyped\nu 3\n"
        );
    }

    #[test]
    fn snapshot_reports_only_nonzero_drops_and_sums() {
        let reg = Registry::default();
        let p = Arc::new(PortStats::new("s", "sink", 1));
        p.queues[0].add(Dir::Rx, 5, 320);
        p.queues[0].drop(DropReason::Oversize, 1);
        reg.add_port(p);
        let s = reg.snapshot();
        assert_eq!(s.port_total("s", |q| q.rx_packets), Some(5));
        assert_eq!(s.ports[0].queues[0].dropped.len(), 1);
        let table = s.to_table();
        assert!(table.contains("oversize"));
        assert!(table.lines().next().unwrap().contains("conn"), "{table}");
        assert!(
            table
                .lines()
                .nth(1)
                .unwrap()
                .starts_with("s            sink  yes"),
            "{table}"
        );
        let json = serde_json::to_string(&s).unwrap();
        let back: StatsSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn netap_ml_gauges_are_exported_for_netap_ml_ports_only() {
        let reg = Arc::new(Registry::default());
        let ml = Arc::new(PortStats::new("ml", "vm", 1));
        ml.predicted_us.store(1200, Relaxed);
        ml.search_lo_us.store(700, Relaxed);
        ml.search_hi_us.store(1700, Relaxed);
        ml.workload[0].store(2, Relaxed);
        ml.workload[2].store(64, Relaxed);
        reg.add_port(ml);
        reg.add_port(Arc::new(PortStats::new("plain", "vm", 1)));
        let t = reg.prometheus_text();
        for line in [
            r#"vadapt_netap_ml_predicted_interval_seconds{port="ml"} 0.0012"#,
            r#"vadapt_netap_ml_search_range_seconds{port="ml",end="lo"} 0.0007"#,
            r#"vadapt_netap_ml_search_range_seconds{port="ml",end="hi"} 0.0017"#,
            r#"vadapt_netap_ml_vms{port="ml"} 2"#,
            r#"vadapt_netap_ml_threads{port="ml"} 0"#,
            r#"vadapt_netap_ml_message_size_bytes{port="ml"} 64"#,
            "# TYPE vadapt_netap_ml_message_size_bytes gauge",
        ] {
            assert!(t.contains(line), "{line} missing from:\n{t}");
        }
        assert!(!t.contains(r#"vadapt_netap_ml_vms{port="plain"}"#), "{t}");
    }

    #[test]
    fn netap_ml_prediction_and_range_show_in_the_table_and_json() {
        let reg = Registry::default();
        let p = Arc::new(PortStats::new("vm1", "vm", 1));
        p.poll_interval_us.store(1318, Relaxed);
        reg.add_port(Arc::clone(&p));
        assert!(!reg.snapshot().to_table().contains("predicted"));
        p.predicted_us.store(1200, Relaxed);
        p.search_lo_us.store(700, Relaxed);
        p.search_hi_us.store(1700, Relaxed);
        for (i, v) in [2, 3, 128].into_iter().enumerate() {
            p.workload[i].store(v, Relaxed);
        }
        let s = reg.snapshot();
        assert_eq!(
            (
                s.ports[0].predicted_us,
                s.ports[0].search_range_us,
                s.ports[0].workload
            ),
            (1200, (700, 1700), [2, 3, 128])
        );
        let table = s.to_table();
        assert!(
            table.contains("(1318 us) [predicted 1200 us, search 700-1700 us, workload 2/3/128 B]"),
            "{table}"
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<StatsSnapshot>(&json).unwrap(), s);
    }
}
