//! The guest's vhost-user **frontend** (QEMU's role): connect to the backend, negotiate like
//! QEMU with a Linux virtio-net driver behind it, share one memfd of guest memory, and hand
//! out queue pairs. (The device side of a virtqueue, the backend's, is `vadapt_virtq::device`.)
//!
//! * `connection.rs`: the vhost-user conversation ([`Connection`]), in QEMU's order, under a
//!   watchdog (`watchdog.rs`, `vhost_timeout`), so that a backend that stops answering turns
//!   into an error, not a hang;
//! * `features.rs`: which features a Linux driver acknowledges ([`negotiate_features`]);
//! * `net_config.rs`: the device config space read ([`NetConfig`]);
//! * `memory_plan.rs`: where rings and buffers go in guest memory ([`plan_memory`]);
//! * `queue_pair.rs`: a queue pair built there ([`build_pair`]);
//! * `dirty_log.rs`: dirty-page logging as QEMU runs it during a migration, and a check
//!   that the backend logged every page it wrote ([`FrontendLog`], `--dirty-log`);
//! * `ctrl_queue.rs`: the control queue's commands: `VQ_PAIRS_SET`, the RSS config
//!   ([`RssRequest`]), any other ([`CtrlOutcome`]);
//! * `error.rs`: [`FrontendError`].

mod connection;
mod ctrl_queue;
mod dirty_log;
mod error;
mod features;
mod memory_plan;
mod net_config;
mod queue_pair;
mod watchdog;

pub use crate::config::RssRequest;
pub use connection::Connection;
pub use ctrl_queue::CtrlOutcome;
pub use dirty_log::FrontendLog;
pub use error::FrontendError;
pub use features::{has_feature, negotiate_features, tx_offloads, wanted_features};
pub use memory_plan::{
    plan_memory, tx_stride, CtrlPlan, MemoryPlan, PairPlan, TxBufs, CTRL_RING_SIZE,
};
pub use net_config::NetConfig;
pub use queue_pair::build_pair;
