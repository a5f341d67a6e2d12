//! vadapt-results: the one result schema that vadapt's benchmarks
//! (`vadapt bench`) and simulations (`vadapt sim`) write and the lab
//! (`vadapt_lab.results.load_results`) reads.
//!
//! A result file is JSON: metadata about the run (what, when, how, scalar
//! parameters) and a list of flat [`Row`]s, one measurement each:
//!
//! ```json
//! {
//!   "kind": "bench",
//!   "bench": "b1",
//!   "title": "saturation",
//!   "status": "ok",
//!   "params": {},
//!   "rows": [
//!     {"table": "dpdk-fe", "sender": "dpdk-virtio-user", "backend": "vadapt",
//!      "policy": "busy-poll", "variant": "in_order=1", "frame": 64, "run": 0,
//!      "mpps": 13.4, "cycles_per_pkt": 179.0}
//!   ]
//! }
//! ```
//!
//! Labels say which configuration a row measures; every other key of a row is
//! a metric whose name carries its unit (`mpps`, `p99_us`, `gbps`). Files
//! written before [`Kind`] existed have no `kind` and read as benchmarks.
//!
//! Figures are medians over runs with their range ([`Spread`]); a comparison
//! is the median of per-run ratios ([`ratio`]), both sides measured in the
//! same run, never a ratio of medians taken at different times.

#![deny(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod file;
mod row;
mod spread;
mod stats;

pub use error::ResultError;
pub use file::{Kind, ResultFile};
pub use row::{Row, RowKey};
pub use spread::{cell, Spread};
pub use stats::{group, ratio, spread};
