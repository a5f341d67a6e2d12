//! vSPACE: dynamic core management for the VM's vCPUs and its network
//! queues (vSPACE paper, PACT '24, `papers/vspace.txt`).
//!
//! The host's managed cores are split into two groups that never share a
//! core: the **vCPU group** (the VM's vCPU threads) and the **NQ group**
//! (network-queue processing: here, vadapt's queue workers). Every period
//! (paper: 100 ms) the caller measures how busy each group was and this code
//! answers how many cores each gets next. Pure like the rest of the crate: no
//! I/O, no clock; the caller measures, calls, and moves threads.
//!
//! | file | what | paper |
//! |---|---|---|
//! | [`core_alloc`] | the allocator: modes P, E, R; [`GroupLoad`] in, [`CoreAllocation`] out | Algorithms 1, 2, §4.2 |
//! | [`thresholds`] | the threshold explorer and the initial thresholds | Algorithm 3, §4.3 |
//!
//! Departures from the paper are listed in the module docs of
//! [`core_alloc`] and [`thresholds`]; the paper's constants are the defaults.

pub mod core_alloc;
pub mod error;
pub mod thresholds;

pub use core_alloc::{CoreAllocation, CoreAllocator, GroupLoad, VspaceMode};
pub use error::VspaceConfigError;
pub use thresholds::{
    ExplorationRound, ExplorationSample, RoundOutcome, SampleOutcome, ThresholdExplorer,
    ThresholdParams, Thresholds,
};
