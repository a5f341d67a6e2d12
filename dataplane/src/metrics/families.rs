//! The families of what is not a plain count, declared once: gauges in
//! seconds, flags, the workload, CPU time and a histogram, which the
//! export (`prometheus.rs`) writes by hand. The families of the counts are
//! declared with their counters (`counters.rs`); [`all`] lists both, and
//! the module doc's table is checked against it. The core manager declares
//! its own (`vadapt_cores_*`, see `crate::cores::export`).

use super::counters::{PortStats, QueueStats, WorkerStats};
use super::family::{Family, Kind};

const PORT: &[&str] = &["port"];
const WORKER: &[&str] = &["worker"];

/// A VM port's current interval or window.
pub const QUEUE_POLL_INTERVAL: Family = Family {
    name: "vadapt_queue_poll_interval_seconds",
    kind: Kind::Gauge,
    labels: &["port", "queue"],
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

/// A queue worker's CPU time.
pub const WORKER_CPU: Family = Family {
    name: "vadapt_worker_cpu_seconds",
    kind: Kind::Counter,
    labels: WORKER,
    help: "CPU time used by the queue worker thread.",
    doc: "CPU time of the queue worker thread",
};

/// Sleep overshoot.
pub const WORKER_SLEEP_OVERSHOOT: Family = Family {
    name: "vadapt_worker_sleep_overshoot_seconds",
    kind: Kind::Histogram,
    labels: WORKER,
    help: "How late timed sleeps woke up.",
    doc: "histogram of how late timed sleeps woke",
};

/// Every family of the counters, in the order the export writes them:
/// those declared with the counters (`counters.rs`) and those above.
pub fn all() -> Vec<&'static Family> {
    let mut all = QueueStats::families();
    all.extend([
        &QUEUE_POLL_INTERVAL,
        &NETAP_ML_PREDICTED_INTERVAL,
        &NETAP_ML_SEARCH_RANGE,
        &NETAP_ML_VMS,
        &NETAP_ML_THREADS,
        &NETAP_ML_MESSAGE_SIZE,
        &PORT_CONNECTED,
    ]);
    all.extend(PortStats::families());
    all.push(&WORKER_CPU);
    all.extend(WorkerStats::families());
    all.push(&WORKER_SLEEP_OVERSHOOT);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_doc_table_is_the_declarations() {
        super::super::family::assert_doc_table(include_str!("mod.rs"), &all());
    }

    #[test]
    fn no_name_is_declared_twice() {
        let all = all();
        let mut names: Vec<_> = all.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }
}
