//! The daemon's vSPACE core manager: every period it measures the VMs'
//! vCPU threads and the queue workers, asks the policy crate's
//! [`VspaceManager`](vadapt_policy::vspace::VspaceManager) for the next
//! split of the managed CPUs, and moves the threads (`vadapt_host`).

pub mod export;
pub mod guest_side;
pub mod manager_loop;
pub mod peer_worker;
pub mod status;
pub mod vm_qmp;

pub use crate::config::cores::{ApplyMethod, CoresConfig, VmRole};
pub use status::{CoresSnapshot, CoresStatus, Placement};
