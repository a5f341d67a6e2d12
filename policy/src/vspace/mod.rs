//! vSPACE: dynamic core management for the VM's vCPUs and its network
//! queues (vSPACE paper: Park et al., PACT '24, §4; cited in `docs/papers.md`).
//!
//! The host's managed cores are split into two groups that never share a
//! core: the **vCPU group** (the VM's vCPU threads) and the **NQ group**
//! (network-queue processing: here, vadapt's queue workers). Every period
//! (paper: 100 ms) the caller measures how busy each group was and this code
//! answers how many cores each gets next. Pure like the rest of the crate: no
//! I/O, no clock; the caller measures, calls, and moves threads.
//!
//! ```text
//!   manager = VspaceManager::new(&config)?          (mode P, E or R)
//!   every config.period():
//!       load  = CPU time of each group over the period, in cores
//!       p95   = the period's P95 latency, if known
//!       outcome = manager.on_period(PeriodMeasurement { load, p95 })
//!       sets  = CoreSets::place(&outcome.allocation, &cpus, &sets)?
//!       pin vCPU threads to sets.vcpu, queue workers to sets.nq,
//!       BE VMs to sets.be (pause them if outcome.allocation.pause_be()),
//!       lowest frequency on sets.idle
//! ```
//!
//! | file | what | paper |
//! |---|---|---|
//! | [`core_alloc`] | the allocator: modes P, E, R; [`GroupLoad`] in, [`CoreAllocation`] out | Algorithms 1, 2, §4.2 |
//! | [`thresholds`] | the threshold explorer and the initial thresholds | Algorithm 3, §4.3 |
//! | [`manager`] | one period: sample, explore, allocate | §4.1, §4.4 |
//! | [`placement`] | counts to CPU ids, moving as few CPUs as possible | (the paper's cpusets) |
//! | [`queue_assign`] | queue sets to the NQ group's workers, balanced and stable | (the paper's RSS/XPS; OVS-DPDK's rxq assignment) |
//! | [`config`] | [`VspaceConfig`]: mode, cores, period, MARGIN, explorer constants | §5.1 |
//!
//! Departures from the paper are listed in the module docs of
//! [`core_alloc`] and [`thresholds`]; the paper's constants are the defaults.
//!
//! **What the utilisation should measure.** The paper's NQ group ran
//! interrupt-driven vhost-net threads, whose CPU time is the work they do. A
//! queue worker that busy-polls reads 100 % of its core whatever its load, so
//! under `busy-poll` the NQ group could only grow. Pair vSPACE with the
//! `interrupt`, `netap` or `eekbp` policies, whose CPU time follows the load.

pub mod config;
pub mod core_alloc;
pub mod error;
pub mod manager;
pub mod placement;
pub mod queue_assign;
pub mod thresholds;

pub use config::VspaceConfig;
pub use core_alloc::{CoreAllocation, CoreAllocator, GroupLoad, VspaceMode};
pub use error::VspaceConfigError;
pub use manager::{PeriodMeasurement, PeriodOutcome, VspaceManager};
pub use placement::{CoreSets, PlacementError};
pub use queue_assign::{assign_queue_sets, QueueAssignment};
pub use thresholds::{
    ExplorationRound, ExplorationSample, RoundOutcome, SampleOutcome, ThresholdExplorer,
    ThresholdParams, Thresholds,
};
