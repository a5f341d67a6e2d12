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

mod counters;
pub mod http;
mod prometheus;
mod registry;
mod snapshot;
mod table;
mod text004;

pub use counters::{
    new_overshoot_histogram, thread_cpu_ns, Dir, DropReason, PortStats, QueueStats, WorkerStats,
    WAKE_CAUSES,
};
pub use registry::Registry;
pub use snapshot::{PortSnapshot, QueueSnapshot, StatsSnapshot, WorkerSnapshot};
pub use text004::openmetrics_to_prometheus;
