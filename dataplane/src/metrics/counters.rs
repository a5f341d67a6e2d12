//! The counters of each port, queue pair and queue worker, declared once
//! each (see [`declare_metrics!`]): the atomics the workers update once per
//! service pass (never per packet), the fields of the copy `vadapt stats`
//! prints, their Prometheus families and their table columns.

use super::declare::declare_metrics;
use super::port_kind::PortKind;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

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
    /// Frame longer than vadapt forwards at all (a GSO frame over 64 KiB).
    Oversize,
    /// Frame (not a GSO frame) longer than its port's MTU allows: sent by
    /// the guest or the host, or to be delivered to a port whose MTU is
    /// smaller (`mtu` + 18 bytes; 1518 without an `mtu`).
    OverMtu,
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
    /// Frame from the guest over its port's ingress policing rates
    /// (`ingress_policing_rate`, `ingress_policing_kpkts_rate`).
    Policed,
    /// Frame the switch would have flooded (broadcast, multicast, unknown
    /// unicast) over its ingress port's `storm_control_pps`.
    Storm,
    /// A frame from a guest whose source address is not its port's (port
    /// security: the port's `mac=` and `allowed_macs=`), dropped by the
    /// switch.
    SpoofedSrc,
    /// A VLAN-tagged frame (802.1Q, 802.1ad, double tags) sent into an
    /// access port: a guest cannot put itself into another VLAN.
    VlanTagged,
    /// A frame tagged with a VLAN its trunk port does not carry
    /// (`trunks=`), or with an outer tag other than 802.1Q.
    VlanNotAllowed,
    /// A frame from a guest whose ARP sender, IP source or Neighbor
    /// Discovery target is not one of its port's `allowed_ips` (the IP
    /// source guard), dropped by the switch.
    SpoofedIp,
    /// Anything else the ring rejected.
    Other,
}

impl DropReason {
    /// Every reason, in export order.
    pub const ALL: [DropReason; 20] = [
        DropReason::BadIndex,
        DropReason::BadAddress,
        DropReason::ChainLoop,
        DropReason::WrongDirection,
        DropReason::BadIndirect,
        DropReason::Oversize,
        DropReason::OverMtu,
        DropReason::Undersize,
        DropReason::BacklogFull,
        DropReason::NoRxBuffer,
        DropReason::RingCorrupt,
        DropReason::PortDown,
        DropReason::BadVnetHdr,
        DropReason::Policed,
        DropReason::Storm,
        DropReason::SpoofedSrc,
        DropReason::VlanTagged,
        DropReason::VlanNotAllowed,
        DropReason::SpoofedIp,
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
            DropReason::OverMtu => "over_mtu",
            DropReason::Undersize => "undersize",
            DropReason::BacklogFull => "backlog_full",
            DropReason::NoRxBuffer => "no_rx_buffer",
            DropReason::RingCorrupt => "ring_corrupt",
            DropReason::PortDown => "port_down",
            DropReason::BadVnetHdr => "bad_vnet_hdr",
            DropReason::Policed => "policed",
            DropReason::Storm => "storm",
            DropReason::SpoofedSrc => "spoofed_src",
            DropReason::VlanTagged => "vlan_tagged",
            DropReason::VlanNotAllowed => "vlan_not_allowed",
            DropReason::SpoofedIp => "spoofed_ip",
            DropReason::Other => "other",
        }
    }
}

/// Why the switch did not learn a frame's source address. The frame
/// itself is forwarded all the same: only the table does not take its
/// source (frames to that address keep being flooded, or keep going where
/// the table has it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotLearned {
    /// The table holds `mac_table_size` learned addresses already.
    TableFull,
    /// The port holds as many learned addresses as it may
    /// (`max_learned_per_port`, or the port's `max_learned`).
    PortLimit,
    /// Another port owns the address: a VM port's `mac=` or
    /// `allowed_macs=`, or a sink's or echo's MAC.
    OwnedElsewhere,
}

impl NotLearned {
    /// Every reason, in export order.
    pub const ALL: [NotLearned; 3] = [
        NotLearned::TableFull,
        NotLearned::PortLimit,
        NotLearned::OwnedElsewhere,
    ];

    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            NotLearned::TableFull => "table_full",
            NotLearned::PortLimit => "port_limit",
            NotLearned::OwnedElsewhere => "owned_elsewhere",
        }
    }

    /// Its index in [`NotLearned::ALL`] (and in [`PortStats::not_learned`]).
    pub fn index(self) -> usize {
        self as usize
    }
}

declare_metrics! {
    /// Counters of one queue pair (or of a local port's single "queue").
    #[derive(Debug)]
    pub struct QueueStats {}

    /// One queue pair in [`StatsSnapshot`](super::StatsSnapshot).
    #[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
    pub struct QueueSnapshot {
        /// Queue pair index.
        pub queue: u16,
        ..
    }

    by_dir {
        /// Packets, by [`Dir`].
        packets => tx_packets rx_packets, columns "tx_pkts" "rx_pkts" 14;
        family QUEUE_PACKETS (Counter "vadapt_queue_packets" ["port", "queue", "dir"]
            "Packets moved per queue."
            "packets; `dir=\"tx\"` guest→host, `dir=\"rx\"` host→guest (for sink/echo/tap ports: `rx` = taken from the switch, `tx` = emitted into it)")

        /// Frame bytes, by [`Dir`].
        bytes => tx_bytes rx_bytes, columns "tx_bytes" "rx_bytes" 16;
        family QUEUE_BYTES (Counter "vadapt_queue_bytes" ["port", "queue", "dir"]
            "Frame bytes moved per queue."
            "frame bytes (no virtio-net header)")
    }

    scalars {
        family QUEUE_KICKS (Counter "vadapt_queue_kicks" ["port", "queue"]
            "Guest kicks received per queue pair."
            "guest notifications received (kick eventfd counts)") {
            /// Kicks received (sum of kick eventfd counts), both queues of the pair.
            kicks, column "kicks" 10;
        }
        family QUEUE_CALLS (Counter "vadapt_queue_calls" ["port", "queue"]
            "Calls (interrupts) sent per queue pair."
            "interrupts sent to the guest (call eventfd writes)") {
            /// Calls sent, both queues of the pair.
            calls, column "calls" 10;
        }
        family QUEUE_OFFLOADS (Counter "vadapt_queue_offloads" ["port", "queue", "kind"]
            "Offloads at a port's egress, by kind: done in software, or passed whole."
            "a sender's offloads at this port's egress (issue #15): `kind=\"segmented\"` GSO frames cut into MSS frames in software, `kind=\"checksum\"` partial checksums completed in software (the receiver does not take them), `kind=\"gso_whole\"` GSO frames passed whole (a guest with `GUEST_TSO*`, a TAP)") {
            /// GSO frames cut into MSS frames in software at this port's egress,
            /// because its receiver does not take them whole (each counted once,
            /// not per segment).
            gso_frames = "segmented";
            /// Partial checksums completed in software at this port's egress
            /// (frames without GSO).
            csum_completed = "checksum";
            /// GSO frames passed whole to this port's receiver (a guest with
            /// `GUEST_TSO*`, a TAP).
            gso_whole = "gso_whole";
        }
        family QUEUE_XDP_EVENTS (Counter "vadapt_queue_xdp_events" ["port", "queue", "kind"]
            "An uplink queue's AF_XDP ring events, by kind."
            "an uplink queue's AF_XDP rings (issue #27): `kind=\"fill_ring_empty\"` passes that found no buffer in the fill ring for the NIC, `kind=\"tx_ring_full\"` passes that left frames waiting because the TX ring was full (they stay queued; only what overflows the port's backlog is dropped, as `backlog_full`); wake-ups by the NIC are `vadapt_queue_kicks_total`, TX wake-ups of the kernel (`sendto`) `vadapt_queue_calls_total`"
            only "uplink") {
            /// An uplink queue: passes that found the AF_XDP fill ring empty (the
            /// NIC had no buffer for a frame arriving then).
            fill_ring_empty = "fill_ring_empty";
            /// An uplink queue: passes that left frames waiting because the AF_XDP
            /// TX ring (or its free frames) was full. They stay queued for a later
            /// pass; only what overflows the port's backlog is dropped, as
            /// `backlog_full`.
            tx_ring_full = "tx_ring_full";
        }
    }

    maps {
        /// Drops, indexed like [`DropReason::ALL`].
        drops: [DropReason::ALL.len()] DropReason::ALL.map(DropReason::as_str)
            => dropped nonzero, column "drops" 8;
        family QUEUE_DROPPED (Counter "vadapt_queue_dropped" ["port", "queue", "reason"]
            "Packets or descriptor chains dropped, by reason."
            "packets/chains dropped, by reason")
    }
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

declare_metrics! {
    /// Counters of one port.
    #[derive(Debug)]
    pub struct PortStats {
        /// Port name.
        pub name: String,
        /// What kind of port.
        pub kind: PortKind,
        /// True while a frontend is connected (always true for local ports).
        pub connected: AtomicBool,
        /// Current policy name (VM ports and uplinks).
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

    /// One port in [`StatsSnapshot`](super::StatsSnapshot).
    #[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
    pub struct PortSnapshot {
        /// Name.
        pub name: String,
        /// `vm`, `sink`, `echo`, `tap`, `uplink`.
        pub kind: PortKind,
        /// Frontend connected.
        pub connected: bool,
        /// Policy name (VM ports and uplinks).
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
        ..
        /// Queue pairs.
        pub queues: Vec<QueueSnapshot>,
    }

    by_dir {}

    scalars {
        family _ () {
            /// Guest memory regions mapped for the frontend (VM ports; memory
            /// hotplug changes it).
            memory_regions;
        }
        family PORT_GUEST_MEMORY (Gauge "vadapt_port_guest_memory_bytes" ["port"]
            "Guest memory the VM port's frontend shared with vadapt (memory hotplug changes it)."
            "guest memory mapped for the port's frontend, bytes"
            only "vm") {
            /// The bytes of the guest memory regions mapped for the frontend.
            memory_bytes;
        }
        family PORT_CTRL_COMMANDS (Counter "vadapt_port_ctrl_commands" ["port", "outcome"]
            "Control-queue commands of the VM port's guest, by answer."
            "control-queue commands answered (a frontend that gives the backend its control queue): `outcome=\"accepted\"` `VIRTIO_NET_OK`, `outcome=\"refused\"` `VIRTIO_NET_ERR` or a chain with no command"
            only "vm") {
            /// Control-queue commands answered `VIRTIO_NET_OK` (VM ports that
            /// serve a control queue, see `crate::port::ctrl_thread`).
            ctrl_accepted = "accepted";
            /// Control-queue commands answered `VIRTIO_NET_ERR`, and chains that
            /// carried no command to answer.
            ctrl_refused = "refused";
        }
        family PORT_DIRTY_LOG_SHRANK (Counter "vadapt_port_dirty_log_shrank" ["port"]
            "Times the VM port's frontend shrank its dirty-page log under vadapt; logging ended for the port each time."
            "times the frontend's dirty-page log shrank under the daemon (an unsealed log on an `unsealed_memory = \"accept\"` port; SIGBUS survived) and logging ended for the port"
            only "vm") {
            /// Times the frontend's dirty-page log shrank under the daemon (a
            /// SIGBUS survived) and logging ended for the port (VM ports, see
            /// `crate::migration`).
            dirty_log_shrank;
        }
        family PORT_CAPTURE_DROPPED (Counter "vadapt_port_capture_dropped" ["port"]
            "Frames a running capture of the port did not keep, its buffer being full."
            "frames a `vadapt capture` of the port did not keep because its buffer was full (its writer behind); the frames themselves went on as ever") {
            /// Frames a `vadapt capture` of the port did not keep because its
            /// buffer was full (its writer behind); the frames themselves went
            /// on (see `crate::switch`'s capture tap).
            capture_dropped;
        }
    }

    maps {
        /// Source addresses of the port's frames the switch did not learn, by
        /// reason, indexed like [`NotLearned::ALL`]: once per source and
        /// second per worker while it keeps sending, not once per frame (see
        /// `crate::switch`'s learning).
        not_learned: [NotLearned::ALL.len()] NotLearned::ALL.map(NotLearned::as_str)
            => fdb_not_learned nonzero;
        family PORT_FDB_NOT_LEARNED (Counter "vadapt_port_fdb_not_learned" ["port", "reason"]
            "Source addresses of the port's frames the switch did not learn, by reason (the frames are forwarded all the same)."
            "source addresses of the port's frames the switch did not learn (the frames are forwarded all the same), once per source and second per worker: `reason=\"table_full\"` the table holds `mac_table_size` learned addresses, `reason=\"port_limit\"` the port holds its `max_learned_per_port`, `reason=\"owned_elsewhere\"` another port owns the address (its `mac=`, `allowed_macs=`, a sink's or echo's MAC)")
    }
}

impl PortStats {
    /// New counters for a port with `queues` queue pairs.
    pub fn new(name: &str, kind: PortKind, queues: usize) -> Self {
        PortStats {
            name: name.to_string(),
            kind,
            connected: AtomicBool::new(kind != PortKind::Vm),
            queues: (0..queues.max(1)).map(|_| QueueStats::default()).collect(),
            ..PortStats::default()
        }
    }
}

declare_metrics! {
    /// Counters of one queue worker thread.
    #[derive(Debug)]
    pub struct WorkerStats {
        /// Worker name (`<port>` or `<port>/<n>`).
        pub name: String,
        /// Linux thread id while running, 0 otherwise (for CPU time sampling).
        pub tid: AtomicI32,
        /// CPU nanoseconds of earlier incarnations of this worker (restarts).
        pub cpu_ns_retired: AtomicU64,
        /// Overshoot of timed sleeps, ns (merged from the worker about once a second).
        pub overshoot_ns: Mutex<Histogram<u64>> = Mutex::new(new_overshoot_histogram()),
    }

    /// One worker in [`StatsSnapshot`](super::StatsSnapshot).
    #[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
    pub struct WorkerSnapshot {
        /// Name.
        pub name: String,
        /// CPU seconds used.
        pub cpu_seconds: f64,
        ..
        /// Timed sleeps measured.
        pub sleeps: u64,
        /// Median sleep overshoot, ns.
        pub overshoot_p50_ns: u64,
        /// 99th-percentile sleep overshoot, ns.
        pub overshoot_p99_ns: u64,
    }

    by_dir {}

    scalars {
        family WORKER_BUSY_CYCLES (Counter "vadapt_worker_busy_cycles" ["worker"]
            "TSC cycles spent in service passes that moved packets."
            "TSC cycles spent in passes that moved packets") {
            /// TSC cycles in passes that moved packets.
            busy_cycles;
        }
        family _ () {
            /// Packets moved in those passes.
            busy_packets;
        }
        family WORKER_PASSES (Counter "vadapt_worker_passes" ["worker"]
            "Service passes."
            "service passes") {
            /// Service passes.
            passes;
        }
    }

    maps {
        /// Wake-ups by cause, indexed like [`WAKE_CAUSES`].
        wakeups: [WAKE_CAUSES.len()] WAKE_CAUSES => wakeups all;
        family WORKER_WAKEUPS (Counter "vadapt_worker_wakeups" ["worker", "cause"]
            "Waits that ended, by cause."
            "waits that ended, by cause (timer, kick, recheck, timeout)")
    }
}

/// Labels of [`WorkerStats::wakeups`].
pub const WAKE_CAUSES: [&str; 4] = ["timer", "kick", "recheck", "timeout"];

impl WorkerStats {
    /// New counters for worker `name`.
    pub fn new(name: &str) -> Self {
        WorkerStats {
            name: name.to_string(),
            ..WorkerStats::default()
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn json_fields(v: impl Serialize) -> BTreeSet<String> {
        let v = serde_json::to_value(v).unwrap();
        v.as_object().unwrap().keys().cloned().collect()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// The fields `vadapt stats --json` prints and the table's columns are
    /// what the interop tests, the docs and the lab scripts read: the
    /// declarations must not rename them.
    #[test]
    fn json_fields_and_table_columns_are_those_readers_know() {
        assert_eq!(
            json_fields(QueueSnapshot::default()),
            set(&[
                "queue",
                "tx_packets",
                "tx_bytes",
                "rx_packets",
                "rx_bytes",
                "kicks",
                "calls",
                "gso_frames",
                "csum_completed",
                "gso_whole",
                "fill_ring_empty",
                "tx_ring_full",
                "dropped",
            ])
        );
        assert_eq!(
            json_fields(PortSnapshot::default()),
            set(&[
                "name",
                "kind",
                "connected",
                "policy",
                "poll_interval_us",
                "predicted_us",
                "search_range_us",
                "workload",
                "memory_regions",
                "memory_bytes",
                "ctrl_accepted",
                "ctrl_refused",
                "dirty_log_shrank",
                "capture_dropped",
                "fdb_not_learned",
                "queues",
            ])
        );
        assert_eq!(
            json_fields(WorkerSnapshot::default()),
            set(&[
                "name",
                "cpu_seconds",
                "busy_cycles",
                "busy_packets",
                "passes",
                "wakeups",
                "sleeps",
                "overshoot_p50_ns",
                "overshoot_p99_ns",
            ])
        );
        let headers: Vec<_> = QueueSnapshot::columns().iter().map(|c| c.header).collect();
        assert_eq!(
            headers,
            ["tx_pkts", "tx_bytes", "rx_pkts", "rx_bytes", "kicks", "calls", "drops"]
        );
    }

    /// Each declared counter reaches the snapshot, the export and the
    /// table's column under its own name.
    #[test]
    fn a_declared_counter_is_copied_exported_and_shown() {
        let q = QueueStats::default();
        q.calls.store(7, Relaxed);
        q.add(Dir::Rx, 2, 120);
        q.drop(DropReason::Storm, 3);
        q.drop(DropReason::Other, 1);
        let s = QueueSnapshot::counters_of(&q);
        assert_eq!(
            (s.calls, s.rx_packets, s.rx_bytes, s.tx_packets),
            (7, 2, 120, 0)
        );
        assert_eq!(
            s.dropped.len(),
            2,
            "only the reasons not 0: {:?}",
            s.dropped
        );
        let calls = QueueStats::exports()
            .into_iter()
            .find(|e| e.family.name == "vadapt_queue_calls")
            .unwrap();
        assert_eq!((calls.samples)(&q), [(None, 7)]);
        let columns = QueueSnapshot::columns();
        let value = |h: &str| (columns.iter().find(|c| c.header == h).unwrap().value)(&s);
        assert_eq!(
            (value("calls"), value("rx_pkts"), value("drops")),
            (7, 2, 4)
        );
        let w = WorkerStats::default();
        w.wakeups[1].store(5, Relaxed);
        let ws = WorkerSnapshot::counters_of(&w);
        assert_eq!(
            ws.wakeups.len(),
            WAKE_CAUSES.len(),
            "every cause: {:?}",
            ws.wakeups
        );
        assert_eq!(ws.wakeups["kick"], 5);
    }
}
