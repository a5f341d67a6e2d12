//! Every counter the daemon keeps, and their export.
//!
//! Workers update these atomics once per service pass (never per packet);
//! `vadapt stats` and the Prometheus endpoint read them. One idea per file:
//!
//! * `declare.rs`: how a counter is declared, once (`declare_metrics!`
//!   makes from that its atomic, its field in the snapshot, its family and
//!   how it is written into it, its table column), as Firecracker declares
//!   its metrics as the fields of serialized structs;
//! * `counters.rs`: the counters of a port, a queue pair, a queue worker,
//!   declared so;
//! * `port_kind.rs`: what kind of port a port's counters belong to;
//! * `registry.rs`: the [`Registry`] that exports them, read from the
//!   daemon's one list of running ports ([`RunningCounters`], a handle the
//!   list hands down), and the [`Exporter`]s of other parts (the core manager's `vadapt_cores_*`, declared in
//!   [`crate::cores::export`]), so that the metrics import no part of the
//!   daemon above them (only [`http`] uses two low helpers, `conn_limit`
//!   and `local_server`);
//! * `snapshot.rs`, `table.rs`: the copy `vadapt stats --json` prints, and
//!   its table, made of the declared fields and columns and of the rest;
//! * `family.rs`: how an exported family is described ([`Family`]);
//! * [`families`]: the families of what is not a plain count (gauges in
//!   seconds, flags, a histogram), and the list of every family;
//! * `prometheus.rs`: the export, OpenMetrics as `prometheus-client` writes
//!   it, and `text004.rs` the Prometheus text format 0.0.4 made from it;
//! * [`http`]: the scrape endpoint.
//!
//! Exported names (this table is checked against the declarations by a
//! unit test, which prints it as it should be):
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `vadapt_queue_packets_total` | counter | port, queue, dir | packets; `dir="tx"` guest→host, `dir="rx"` host→guest (for sink/echo/tap ports: `rx` = taken from the switch, `tx` = emitted into it) |
//! | `vadapt_queue_bytes_total` | counter | port, queue, dir | frame bytes (no virtio-net header) |
//! | `vadapt_queue_kicks_total` | counter | port, queue | guest notifications received (kick eventfd counts) |
//! | `vadapt_queue_calls_total` | counter | port, queue | interrupts sent to the guest (call eventfd writes) |
//! | `vadapt_queue_offloads_total` | counter | port, queue, kind | a sender's offloads at this port's egress (issue #15): `kind="segmented"` GSO frames cut into MSS frames in software, `kind="checksum"` partial checksums completed in software (the receiver does not take them), `kind="gso_whole"` GSO frames passed whole (a guest with `GUEST_TSO*`, a TAP) |
//! | `vadapt_queue_xdp_events_total` | counter | port, queue, kind | an uplink queue's AF_XDP rings (issue #27): `kind="fill_ring_empty"` passes that found no buffer in the fill ring for the NIC, `kind="tx_ring_full"` passes that left frames waiting because the TX ring was full (they stay queued; only what overflows the port's backlog is dropped, as `backlog_full`); wake-ups by the NIC are `vadapt_queue_kicks_total`, TX wake-ups of the kernel (`sendto`) `vadapt_queue_calls_total` |
//! | `vadapt_queue_dropped_total` | counter | port, queue, reason | packets/chains dropped, by reason |
//! | `vadapt_queue_poll_interval_seconds` | gauge | port, queue | the policy's current interval (NetAP) or poll window (grow/shrink); 0 when it has none |
//! | `vadapt_netap_ml_predicted_interval_seconds` | gauge | port | NetAP-ML's predicted best interval (NetAP-ML ports only) |
//! | `vadapt_netap_ml_search_range_seconds` | gauge | port, end | NetAP's search range around it, `end="lo"` / `"hi"` (NetAP-ML ports only) |
//! | `vadapt_netap_ml_vms` | gauge | port | VMs NetAP-ML predicts for; 0 = unknown. |
//! | `vadapt_netap_ml_threads` | gauge | port | Sender threads per VM NetAP-ML predicts for; 0 = unknown. |
//! | `vadapt_netap_ml_message_size_bytes` | gauge | port | Message size NetAP-ML predicts for, bytes; 0 = unknown. |
//! | `vadapt_port_connected` | gauge | port | 1 when a frontend is connected |
//! | `vadapt_port_guest_memory_bytes` | gauge | port | guest memory mapped for the port's frontend, bytes |
//! | `vadapt_port_ctrl_commands_total` | counter | port, outcome | control-queue commands answered (a frontend that gives the backend its control queue): `outcome="accepted"` `VIRTIO_NET_OK`, `outcome="refused"` `VIRTIO_NET_ERR` or a chain with no command |
//! | `vadapt_port_dirty_log_shrank_total` | counter | port | times the frontend's dirty-page log shrank under the daemon (an unsealed log on an `unsealed_memory = "accept"` port; SIGBUS survived) and logging ended for the port |
//! | `vadapt_port_capture_dropped_total` | counter | port | frames a `vadapt capture` of the port did not keep because its buffer was full (its writer behind); the frames themselves went on as ever |
//! | `vadapt_port_fdb_not_learned_total` | counter | port, reason | source addresses of the port's frames the switch did not learn (the frames are forwarded all the same), once per source and second per worker: `reason="table_full"` the table holds `mac_table_size` learned addresses, `reason="port_limit"` the port holds its `max_learned_per_port`, `reason="owned_elsewhere"` another port owns the address (its `mac=`, `allowed_macs=`, a sink's or echo's MAC) |
//! | `vadapt_worker_cpu_seconds_total` | counter | worker | CPU time of the queue worker thread |
//! | `vadapt_worker_busy_cycles_total` | counter | worker | TSC cycles spent in passes that moved packets |
//! | `vadapt_worker_passes_total` | counter | worker | service passes |
//! | `vadapt_worker_wakeups_total` | counter | worker, cause | waits that ended, by cause (timer, kick, recheck, timeout) |
//! | `vadapt_worker_sleep_overshoot_seconds` | histogram | worker | histogram of how late timed sleeps woke |
//!
//! The NetAP-ML families are exported for NetAP-ML ports only; the workload
//! features (`vadapt_netap_ml_vms`, `_threads`, `_message_size_bytes`) are
//! what the port's NetAP-ML predicts for: from the config, a retune or the
//! daemon's estimate (see [`crate::workload_loop`]).
//!
//! Where a thread serves several ports (more busy ports than CPUs, or
//! `[cores] queue_workers = "per-nq-core"`), `vadapt_worker_cpu_seconds_total`
//! of each port's worker is the thread time of that port's own polls and
//! passes, measured around them; a thread of one port's own is read whole.
//! The NQ group's CPU time is also `vadapt_cores_utilization{group="nq"}`.

mod counters;
mod declare;
pub mod families;
mod family;
pub mod http;
mod port_kind;
mod prometheus;
mod registry;
mod snapshot;
mod table;
mod tally;
mod text004;

pub use counters::{
    new_overshoot_histogram, thread_cpu_ns, Dir, DropReason, NotLearned, PortSnapshot, PortStats,
    QueueSnapshot, QueueStats, WorkerSnapshot, WorkerStats, WAKE_CAUSES,
};
pub use declare::{Column, Export, Sample};
#[cfg(test)]
pub(crate) use family::assert_doc_table;
pub use family::{Exporter, Family, Kind, Samples};
pub use port_kind::PortKind;
#[cfg(test)]
pub(crate) use registry::test_utils as registry_test_utils;
pub use registry::{Registry, RunningCounters};
pub use snapshot::StatsSnapshot;
pub use tally::{PassTally, PUBLISH_EVERY};
pub use text004::openmetrics_to_prometheus;
