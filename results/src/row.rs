//! One measurement: the labels of the configuration it measures and its
//! metrics, each named with its unit.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A configuration: every label of a [`Row`] but the run (see [`Row::key`]).
pub type RowKey = (String, String, String, String, String, u32);

/// One measurement of one configuration in one run.
///
/// In JSON the metrics sit beside the labels (`#[serde(flatten)]`), so the
/// lab reads each metric as a column.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Table within the file: a benchmark's (`dpdk-fe`, `guest`, `trace`) or
    /// a simulation's (`samples`, `periods`, `workers`).
    pub table: String,
    /// Who sends: `dpdk-virtio-user`, `guest`; in a simulation the workload
    /// kind (`stream`, `rr`).
    pub sender: String,
    /// Who receives: `dpdk-vhost`, `vadapt`, `ovs-dpdk`; `sim` in a simulation.
    pub backend: String,
    /// vadapt policy, or the anchor's mode (`pmd`, `macswap`, ...).
    pub policy: String,
    /// Further condition (e.g. `in_order=1`, `25%`, `low`, a VM name, a
    /// scenario or period name).
    pub variant: String,
    /// Frame bytes (Ethernet header + payload, no virtio-net header); 0 where
    /// no single frame size applies (simulations).
    pub frame: u32,
    /// Run (round) index from 0; in a simulation the seed.
    pub run: u32,
    /// Measured values; names carry their unit (`mpps`, `cpu_s_per_mpkt`, `p99_us`, ...).
    #[serde(flatten)]
    pub m: BTreeMap<String, f64>,
}

impl Row {
    /// A row with these labels and no values yet.
    pub fn new(table: &str, sender: &str, backend: &str, policy: &str, variant: &str) -> Row {
        Row {
            table: table.into(),
            sender: sender.into(),
            backend: backend.into(),
            policy: policy.into(),
            variant: variant.into(),
            ..Row::default()
        }
    }

    /// Set `frame` (bytes) and `run`.
    pub fn at(mut self, frame: u32, run: u32) -> Row {
        self.frame = frame;
        self.run = run;
        self
    }

    /// Record `v` under `k` (skipped when not finite: JSON has no NaN).
    pub fn set(&mut self, k: &str, v: f64) -> &mut Row {
        if v.is_finite() {
            self.m.insert(k.into(), v);
        }
        self
    }

    /// Record `v` under `k` when there is one (and it is finite).
    pub fn set_some(&mut self, k: &str, v: Option<f64>) -> &mut Row {
        if let Some(v) = v {
            self.set(k, v);
        }
        self
    }

    /// The configuration this row measures (everything but the run).
    pub fn key(&self) -> RowKey {
        (
            self.table.clone(),
            self.sender.clone(),
            self.backend.clone(),
            self.policy.clone(),
            self.variant.clone(),
            self.frame,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_and_absent_values_are_not_stored() {
        let mut r = Row::new("t", "guest", "vadapt", "x", "").at(64, 2);
        r.set("mpps", 1.0)
            .set("bad", f64::INFINITY)
            .set("nan", f64::NAN)
            .set_some("none", None)
            .set_some("p99_us", Some(20.0));
        assert_eq!(r.m.keys().collect::<Vec<_>>(), ["mpps", "p99_us"]);
        assert_eq!((r.frame, r.run), (64, 2));
    }

    #[test]
    fn metrics_are_flat_columns_beside_the_labels() {
        let mut r = Row::new("t", "guest", "vadapt", "x", "v").at(64, 0);
        r.set("mpps", 1.0);
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"table":"t","sender":"guest","backend":"vadapt","policy":"x","variant":"v","frame":64,"run":0,"mpps":1.0}"#
        );
        assert_eq!(serde_json::from_str::<Row>(&text).unwrap(), r);
    }

    #[test]
    fn the_key_leaves_out_the_run() {
        let a = Row::new("t", "s", "b", "p", "v").at(64, 0);
        let b = Row::new("t", "s", "b", "p", "v").at(64, 1);
        assert_eq!(a.key(), b.key());
        assert_ne!(a.key(), Row::new("t", "s", "b", "p", "w").at(64, 0).key());
    }
}
