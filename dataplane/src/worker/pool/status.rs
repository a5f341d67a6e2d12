//! What the pool shows of each worker (`vadapt cores`): a status type
//! that lives with its owner.

use serde::{Deserialize, Serialize};

/// One worker of the pool, as `vadapt cores` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NqWorkerStatus {
    /// Index in the pool (worker `i` runs on the NQ group's `i`-th CPU).
    pub index: usize,
    /// Thread id (0 until the thread has started).
    pub tid: u32,
    /// The CPU it is pinned to (`None`: not pinned, e.g. `apply = "advise"`).
    pub cpu: Option<usize>,
    /// The ports whose queues it serves.
    pub ports: Vec<String>,
}
