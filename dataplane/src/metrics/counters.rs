//! The counters: atomics of each port, queue pair and queue worker, which
//! the workers update once per service pass (never per packet).

use super::port_kind::PortKind;
use hdrhistogram::Histogram;
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
    /// An uplink queue: passes that found the AF_XDP fill ring empty (the
    /// NIC had no buffer for a frame arriving then).
    pub fill_ring_empty: AtomicU64,
    /// An uplink queue: passes that left frames waiting because the AF_XDP
    /// TX ring (or its free frames) was full. They stay queued for a later
    /// pass; only what overflows the port's backlog is dropped, as
    /// `backlog_full`.
    pub tx_ring_full: AtomicU64,
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
    /// Guest memory regions mapped for the frontend (VM ports; memory
    /// hotplug changes it).
    pub memory_regions: AtomicU64,
    /// Their bytes.
    pub memory_bytes: AtomicU64,
    /// Control-queue commands answered `VIRTIO_NET_OK` (VM ports that
    /// serve a control queue, see `crate::queue::ctrl_queue`).
    pub ctrl_accepted: AtomicU64,
    /// Control-queue commands answered `VIRTIO_NET_ERR`, and chains that
    /// carried no command to answer.
    pub ctrl_refused: AtomicU64,
    /// Times the frontend's dirty-page log shrank under the daemon (a
    /// SIGBUS survived) and logging ended for the port (VM ports, see
    /// `crate::migration`).
    pub dirty_log_shrank: AtomicU64,
    /// Source addresses of the port's frames the switch did not learn, by
    /// reason, indexed like [`NotLearned::ALL`]: once per source and
    /// second per worker while it keeps sending, not once per frame (see
    /// `crate::switch`'s learning).
    pub not_learned: [AtomicU64; NotLearned::ALL.len()],
    /// Per queue pair.
    pub queues: Vec<QueueStats>,
}

impl PortStats {
    /// New counters for a port with `queues` queue pairs.
    pub fn new(name: &str, kind: PortKind, queues: usize) -> Self {
        PortStats {
            name: name.to_string(),
            kind,
            connected: AtomicBool::new(kind != PortKind::Vm),
            policy: Mutex::new(String::new()),
            poll_interval_us: AtomicU64::new(0),
            predicted_us: AtomicU64::new(0),
            search_lo_us: AtomicU64::new(0),
            search_hi_us: AtomicU64::new(0),
            workload: Default::default(),
            memory_regions: AtomicU64::new(0),
            ctrl_accepted: AtomicU64::new(0),
            ctrl_refused: AtomicU64::new(0),
            dirty_log_shrank: AtomicU64::new(0),
            memory_bytes: AtomicU64::new(0),
            not_learned: Default::default(),
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
