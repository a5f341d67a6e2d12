//! The core manager's metrics, declared here once and exported through the
//! daemon's metrics registry ([`CoresStatus`] is a
//! [`metrics::Exporter`](crate::metrics::Exporter), added when `[cores]`
//! runs). The metrics never see the core manager: it comes to them.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `vadapt_cores_group_cpus` | gauge | group | CPUs of each vSPACE group: `vcpu`, `nq` (queue workers), `be` (best-effort VMs), `idle` |
//! | `vadapt_cores_nq_workers` | gauge | - | Queue workers of the per-NQ-core pool (0 with a worker per port). |
//! | `vadapt_cores_failed` | gauge | - | 1 when the core manager stopped on an internal error (see `vadapt cores`), else 0. |
//! | `vadapt_cores_utilization` | gauge | group | CPU time of each group (`vcpu`, `nq`, `be`) over the last period, in cores; with `queue_workers = "per-nq-core"`, the pool's CPU time is `group="nq"` |
//! | `vadapt_cores_threshold` | gauge | group | Utilisation threshold per core of each group (Th_vCPU, Th_NQ). |
//! | `vadapt_cores_run_delay_seconds_total` | counter | group | Time the group's threads waited for a CPU while runnable (schedstat). |
//! | `vadapt_cores_periods_total` | counter | - | Core manager periods run. |
//! | `vadapt_cores_reallocations_total` | counter | - | Periods whose core allocation changed. |
//! | `vadapt_cores_explorations_total` | counter | - | Threshold exploration rounds (vSPACE Algorithm 3). |
//! | `vadapt_cores_threads_moved_total` | counter | - | Thread placements carried out. |
//! | `vadapt_cores_threads_refused_total` | counter | - | Thread placements the kernel refused. |
//! | `vadapt_cores_qmp_errors_total` | counter | - | Failed QMP exchanges with VMs. |
//! | `vadapt_cores_qga_errors_total` | counter | - | Failed guest agent requests (vSPACE-Guest). |
//! | `vadapt_cores_queue_set_moves_total` | counter | - | Ports' queue sets moved between NQ workers (queue_workers = per-nq-core). |

use super::status::{CoresSnapshot, CoresStatus};
use crate::metrics::{Exporter, Family, Kind};
use prometheus_client::encoding::DescriptorEncoder;
use std::fmt;

const GROUP: &[&str] = &["group"];

/// CPUs per group.
pub const GROUP_CPUS: Family = Family {
    name: "vadapt_cores_group_cpus",
    kind: Kind::Gauge,
    labels: GROUP,
    help: "CPUs of each vSPACE group (vcpu, nq, be, idle).",
    doc: "CPUs of each vSPACE group: `vcpu`, `nq` (queue workers), `be` (best-effort VMs), `idle`",
};

/// The per-NQ-core pool's size.
pub const NQ_WORKERS: Family = Family {
    name: "vadapt_cores_nq_workers",
    kind: Kind::Gauge,
    labels: &[],
    help: "Queue workers of the per-NQ-core pool (0 with a worker per port).",
    doc: "",
};

/// Whether the manager stopped.
pub const FAILED: Family = Family {
    name: "vadapt_cores_failed",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 when the core manager stopped on an internal error (see `vadapt cores`), else 0.",
    doc: "",
};

/// Each group's CPU time.
pub const UTILIZATION: Family = Family {
    name: "vadapt_cores_utilization",
    kind: Kind::Gauge,
    labels: GROUP,
    help: "CPU time of each group over the last period, in cores.",
    doc: "CPU time of each group (`vcpu`, `nq`, `be`) over the last period, in cores; with `queue_workers = \"per-nq-core\"`, the pool's CPU time is `group=\"nq\"`",
};

/// The thresholds.
pub const THRESHOLD: Family = Family {
    name: "vadapt_cores_threshold",
    kind: Kind::Gauge,
    labels: GROUP,
    help: "Utilisation threshold per core of each group (Th_vCPU, Th_NQ).",
    doc: "",
};

/// Run delay.
pub const RUN_DELAY: Family = Family {
    name: "vadapt_cores_run_delay_seconds",
    kind: Kind::Counter,
    labels: GROUP,
    help: "Time the group's threads waited for a CPU while runnable (schedstat).",
    doc: "",
};

/// A counter of the whole manager, without labels.
const fn total(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind: Kind::Counter,
        labels: &[],
        help,
        doc: "",
    }
}

/// Periods run.
pub const PERIODS: Family = total("vadapt_cores_periods", "Core manager periods run.");
/// Periods that changed the allocation.
pub const REALLOCATIONS: Family = total(
    "vadapt_cores_reallocations",
    "Periods whose core allocation changed.",
);
/// Exploration rounds.
pub const EXPLORATIONS: Family = total(
    "vadapt_cores_explorations",
    "Threshold exploration rounds (vSPACE Algorithm 3).",
);
/// Placements carried out.
pub const THREADS_MOVED: Family = total(
    "vadapt_cores_threads_moved",
    "Thread placements carried out.",
);
/// Placements refused.
pub const THREADS_REFUSED: Family = total(
    "vadapt_cores_threads_refused",
    "Thread placements the kernel refused.",
);
/// QMP errors.
pub const QMP_ERRORS: Family = total("vadapt_cores_qmp_errors", "Failed QMP exchanges with VMs.");
/// Guest agent errors.
pub const QGA_ERRORS: Family = total(
    "vadapt_cores_qga_errors",
    "Failed guest agent requests (vSPACE-Guest).",
);
/// Queue-set moves.
pub const QUEUE_SET_MOVES: Family = total(
    "vadapt_cores_queue_set_moves",
    "Ports' queue sets moved between NQ workers (queue_workers = per-nq-core).",
);

/// A counter without labels, and its value in a snapshot.
type Total = (&'static Family, fn(&CoresSnapshot) -> u64);

/// The counters without labels.
const TOTALS: [Total; 8] = [
    (&PERIODS, |c| c.periods),
    (&REALLOCATIONS, |c| c.reallocations),
    (&EXPLORATIONS, |c| c.explorations),
    (&THREADS_MOVED, |c| c.threads_moved),
    (&THREADS_REFUSED, |c| c.threads_refused),
    (&QMP_ERRORS, |c| c.qmp_errors),
    (&QGA_ERRORS, |c| c.qga_errors),
    (&QUEUE_SET_MOVES, |c| c.queue_set_moves),
];

/// Every family above, in the order they are written.
pub const ALL: [&Family; 14] = [
    &GROUP_CPUS,
    &NQ_WORKERS,
    &FAILED,
    &UTILIZATION,
    &THRESHOLD,
    &RUN_DELAY,
    &PERIODS,
    &REALLOCATIONS,
    &EXPLORATIONS,
    &THREADS_MOVED,
    &THREADS_REFUSED,
    &QMP_ERRORS,
    &QGA_ERRORS,
    &QUEUE_SET_MOVES,
];

impl Exporter for CoresStatus {
    fn encode(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        encode(&self.snapshot(), enc)
    }
}

/// The `vadapt_cores_*` families of one snapshot.
fn encode(c: &CoresSnapshot, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let mut m = GROUP_CPUS.encode(enc)?;
    for (g, v) in [
        ("vcpu", &c.sets.vcpu),
        ("nq", &c.sets.nq),
        ("be", &c.sets.be),
        ("idle", &c.sets.idle),
    ] {
        m.gauge(&[g], v.len() as i64)?;
    }
    NQ_WORKERS
        .encode(enc)?
        .gauge(&[], c.nq_workers.len() as i64)?;
    FAILED
        .encode(enc)?
        .gauge(&[], i64::from(c.failed.is_some()))?;
    let mut m = UTILIZATION.encode(enc)?;
    for (g, v) in [("vcpu", c.util_vcpu), ("nq", c.util_nq), ("be", c.util_be)] {
        m.gauge(&[g], v)?;
    }
    let mut m = THRESHOLD.encode(enc)?;
    for (g, v) in [("vcpu", c.threshold_vcpu), ("nq", c.threshold_nq)] {
        m.gauge(&[g], v)?;
    }
    let mut m = RUN_DELAY.encode(enc)?;
    for (g, v) in [("vcpu", c.run_delay_vcpu_s), ("nq", c.run_delay_nq_s)] {
        m.counter(&[g], v)?;
    }
    for (family, value) in TOTALS {
        family.encode(enc)?.counter(&[], value(c))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_doc_table_is_the_declarations() {
        crate::metrics::assert_doc_table(include_str!("export.rs"), &ALL);
    }

    #[test]
    fn every_family_is_exported_once_and_no_name_is_the_counters() {
        let (reg, _) = crate::metrics::registry_test_utils::registry();
        reg.add_exporter(Arc::new(CoresStatus::default()));
        let t = reg.openmetrics_text();
        for f in ALL {
            let typ = format!("# TYPE {} {}\n", f.name, f.kind.as_str());
            assert_eq!(t.matches(&typ).count(), 1, "{typ} in:\n{t}");
            assert!(t.contains(&format!("# HELP {} {}\n", f.name, f.help)));
            assert!(!crate::metrics::families::all()
                .iter()
                .any(|m| m.name == f.name));
        }
        assert!(
            t.contains("vadapt_cores_group_cpus{group=\"idle\"} 0\n"),
            "{t}"
        );
        assert!(t.contains("vadapt_cores_periods_total 0\n"), "{t}");
        let p = reg.prometheus_text();
        assert!(
            p.contains("# TYPE vadapt_cores_periods_total counter\n"),
            "{p}"
        );
        assert!(p.contains("vadapt_cores_failed 0\n"), "{p}");
    }
}
