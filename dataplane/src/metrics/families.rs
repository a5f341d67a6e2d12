//! Every family the counters are exported as, declared once: the export
//! (`prometheus.rs`) writes these, and the module doc's table is checked
//! against [`ALL`]. The core manager declares its own (`vadapt_cores_*`,
//! see `crate::cores::export`).

use super::family::{Family, Kind};

const PORT_QUEUE: &[&str] = &["port", "queue"];
const PORT: &[&str] = &["port"];
const WORKER: &[&str] = &["worker"];

/// Packets per queue and direction.
pub const QUEUE_PACKETS: Family = Family {
    name: "vadapt_queue_packets",
    kind: Kind::Counter,
    labels: &["port", "queue", "dir"],
    help: "Packets moved per queue.",
    doc: "packets; `dir=\"tx\"` guest→host, `dir=\"rx\"` host→guest (for sink/echo/tap ports: `rx` = taken from the switch, `tx` = emitted into it)",
};

/// Frame bytes per queue and direction.
pub const QUEUE_BYTES: Family = Family {
    name: "vadapt_queue_bytes",
    kind: Kind::Counter,
    labels: &["port", "queue", "dir"],
    help: "Frame bytes moved per queue.",
    doc: "frame bytes (no virtio-net header)",
};

/// Kicks per queue pair.
pub const QUEUE_KICKS: Family = Family {
    name: "vadapt_queue_kicks",
    kind: Kind::Counter,
    labels: PORT_QUEUE,
    help: "Guest kicks received per queue pair.",
    doc: "guest notifications received (kick eventfd counts)",
};

/// Calls per queue pair.
pub const QUEUE_CALLS: Family = Family {
    name: "vadapt_queue_calls",
    kind: Kind::Counter,
    labels: PORT_QUEUE,
    help: "Calls (interrupts) sent per queue pair.",
    doc: "interrupts sent to the guest (call eventfd writes)",
};

/// Offloads at a port's egress, by kind.
pub const QUEUE_OFFLOADS: Family = Family {
    name: "vadapt_queue_offloads",
    kind: Kind::Counter,
    labels: &["port", "queue", "kind"],
    help: "Offloads at a port's egress, by kind: done in software, or passed whole.",
    doc: "a sender's offloads at this port's egress (issue #15): `kind=\"segmented\"` GSO frames cut into MSS frames in software, `kind=\"checksum\"` partial checksums completed in software (the receiver does not take them), `kind=\"gso_whole\"` GSO frames passed whole (a guest with `GUEST_TSO*`, a TAP)",
};

/// An uplink queue's AF_XDP ring events, by kind.
pub const QUEUE_XDP_EVENTS: Family = Family {
    name: "vadapt_queue_xdp_events",
    kind: Kind::Counter,
    labels: &["port", "queue", "kind"],
    help: "An uplink queue's AF_XDP ring events, by kind.",
    doc: "an uplink queue's AF_XDP rings (issue #27): `kind=\"fill_ring_empty\"` passes that found no buffer in the fill ring for the NIC, `kind=\"tx_ring_full\"` passes that left frames waiting because the TX ring was full (they stay queued; only what overflows the port's backlog is dropped, as `backlog_full`); wake-ups by the NIC are `vadapt_queue_kicks_total`, TX wake-ups of the kernel (`sendto`) `vadapt_queue_calls_total`",
};

/// Drops, by reason.
pub const QUEUE_DROPPED: Family = Family {
    name: "vadapt_queue_dropped",
    kind: Kind::Counter,
    labels: &["port", "queue", "reason"],
    help: "Packets or descriptor chains dropped, by reason.",
    doc: "packets/chains dropped, by reason",
};

/// A VM port's current interval or window.
pub const QUEUE_POLL_INTERVAL: Family = Family {
    name: "vadapt_queue_poll_interval_seconds",
    kind: Kind::Gauge,
    labels: PORT_QUEUE,
    help: "Current polling interval (NetAP) or poll window (grow/shrink), seconds; 0 if none.",
    doc: "the policy's current interval (NetAP) or poll window (grow/shrink); 0 when it has none",
};

/// NetAP-ML's prediction.
pub const NETAP_ML_PREDICTED_INTERVAL: Family = Family {
    name: "vadapt_netap_ml_predicted_interval_seconds",
    kind: Kind::Gauge,
    labels: PORT,
    help: "NetAP-ML's predicted best polling interval, seconds.",
    doc: "NetAP-ML's predicted best interval (NetAP-ML ports only)",
};

/// NetAP's search range.
pub const NETAP_ML_SEARCH_RANGE: Family = Family {
    name: "vadapt_netap_ml_search_range_seconds",
    kind: Kind::Gauge,
    labels: &["port", "end"],
    help: "Ends of NetAP-ML's golden-section search range, seconds.",
    doc: "NetAP's search range around it, `end=\"lo\"` / `\"hi\"` (NetAP-ML ports only)",
};

/// NetAP-ML's workload feature: VMs.
pub const NETAP_ML_VMS: Family = Family {
    name: "vadapt_netap_ml_vms",
    kind: Kind::Gauge,
    labels: PORT,
    help: "VMs NetAP-ML predicts for; 0 = unknown.",
    doc: "",
};

/// NetAP-ML's workload feature: threads per VM.
pub const NETAP_ML_THREADS: Family = Family {
    name: "vadapt_netap_ml_threads",
    kind: Kind::Gauge,
    labels: PORT,
    help: "Sender threads per VM NetAP-ML predicts for; 0 = unknown.",
    doc: "",
};

/// NetAP-ML's workload feature: message size.
pub const NETAP_ML_MESSAGE_SIZE: Family = Family {
    name: "vadapt_netap_ml_message_size_bytes",
    kind: Kind::Gauge,
    labels: PORT,
    help: "Message size NetAP-ML predicts for, bytes; 0 = unknown.",
    doc: "",
};

/// NetAP-ML's workload features, indexed like [`PortStats::workload`](super::PortStats::workload).
pub const NETAP_ML_WORKLOAD: [&Family; 3] =
    [&NETAP_ML_VMS, &NETAP_ML_THREADS, &NETAP_ML_MESSAGE_SIZE];

/// Whether a frontend is connected.
pub const PORT_CONNECTED: Family = Family {
    name: "vadapt_port_connected",
    kind: Kind::Gauge,
    labels: PORT,
    help: "1 while a frontend is connected to the port.",
    doc: "1 when a frontend is connected",
};

/// Guest memory mapped for a VM port's frontend.
pub const PORT_GUEST_MEMORY: Family = Family {
    name: "vadapt_port_guest_memory_bytes",
    kind: Kind::Gauge,
    labels: PORT,
    help: "Guest memory the VM port's frontend shared with vadapt (memory hotplug changes it).",
    doc: "guest memory mapped for the port's frontend, bytes",
};

/// Control-queue commands answered.
pub const PORT_CTRL_COMMANDS: Family = Family {
    name: "vadapt_port_ctrl_commands",
    kind: Kind::Counter,
    labels: &["port", "outcome"],
    help: "Control-queue commands of the VM port's guest, by answer.",
    doc: "control-queue commands answered (a frontend that gives the backend its control queue): `outcome=\"accepted\"` `VIRTIO_NET_OK`, `outcome=\"refused\"` `VIRTIO_NET_ERR` or a chain with no command",
};

/// Dirty-page logs that shrank under the daemon.
pub const PORT_DIRTY_LOG_SHRANK: Family = Family {
    name: "vadapt_port_dirty_log_shrank",
    kind: Kind::Counter,
    labels: PORT,
    help: "Times the VM port's frontend shrank its dirty-page log under vadapt; logging ended for the port each time.",
    doc: "times the frontend's dirty-page log shrank under the daemon (an unsealed log on an `unsealed_memory = \"accept\"` port; SIGBUS survived) and logging ended for the port",
};

/// Source addresses the switch did not learn, by reason.
pub const PORT_FDB_NOT_LEARNED: Family = Family {
    name: "vadapt_port_fdb_not_learned",
    kind: Kind::Counter,
    labels: &["port", "reason"],
    help: "Source addresses of the port's frames the switch did not learn, by reason (the frames are forwarded all the same).",
    doc: "source addresses of the port's frames the switch did not learn (the frames are forwarded all the same), once per source and second per worker: `reason=\"table_full\"` the table holds `mac_table_size` learned addresses, `reason=\"port_limit\"` the port holds its `max_learned_per_port`, `reason=\"owned_elsewhere\"` another port owns the address (its `mac=`, `allowed_macs=`, a sink's or echo's MAC)",
};

/// A queue worker's CPU time.
pub const WORKER_CPU: Family = Family {
    name: "vadapt_worker_cpu_seconds",
    kind: Kind::Counter,
    labels: WORKER,
    help: "CPU time used by the queue worker thread.",
    doc: "CPU time of the queue worker thread",
};

/// Cycles in passes that moved packets.
pub const WORKER_BUSY_CYCLES: Family = Family {
    name: "vadapt_worker_busy_cycles",
    kind: Kind::Counter,
    labels: WORKER,
    help: "TSC cycles spent in service passes that moved packets.",
    doc: "TSC cycles spent in passes that moved packets",
};

/// Service passes.
pub const WORKER_PASSES: Family = Family {
    name: "vadapt_worker_passes",
    kind: Kind::Counter,
    labels: WORKER,
    help: "Service passes.",
    doc: "service passes",
};

/// Wake-ups by cause.
pub const WORKER_WAKEUPS: Family = Family {
    name: "vadapt_worker_wakeups",
    kind: Kind::Counter,
    labels: &["worker", "cause"],
    help: "Waits that ended, by cause.",
    doc: "waits that ended, by cause (timer, kick, recheck, timeout)",
};

/// Sleep overshoot.
pub const WORKER_SLEEP_OVERSHOOT: Family = Family {
    name: "vadapt_worker_sleep_overshoot_seconds",
    kind: Kind::Histogram,
    labels: WORKER,
    help: "How late timed sleeps woke up.",
    doc: "histogram of how late timed sleeps woke",
};

/// Every family above, in the order the export writes them.
pub const ALL: [&Family; 23] = [
    &QUEUE_PACKETS,
    &QUEUE_BYTES,
    &QUEUE_KICKS,
    &QUEUE_CALLS,
    &QUEUE_OFFLOADS,
    &QUEUE_XDP_EVENTS,
    &QUEUE_DROPPED,
    &QUEUE_POLL_INTERVAL,
    &NETAP_ML_PREDICTED_INTERVAL,
    &NETAP_ML_SEARCH_RANGE,
    &NETAP_ML_VMS,
    &NETAP_ML_THREADS,
    &NETAP_ML_MESSAGE_SIZE,
    &PORT_CONNECTED,
    &PORT_GUEST_MEMORY,
    &PORT_CTRL_COMMANDS,
    &PORT_DIRTY_LOG_SHRANK,
    &PORT_FDB_NOT_LEARNED,
    &WORKER_CPU,
    &WORKER_BUSY_CYCLES,
    &WORKER_PASSES,
    &WORKER_WAKEUPS,
    &WORKER_SLEEP_OVERSHOOT,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_doc_table_is_the_declarations() {
        super::super::family::assert_doc_table(include_str!("mod.rs"), &ALL);
    }

    #[test]
    fn no_name_is_declared_twice() {
        let mut names: Vec<_> = ALL.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }
}
