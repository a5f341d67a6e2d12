//! vadapt's data plane: a vhost-user-net backend with many ports on one L2
//! switch, whose queue workers run the policies of `vadapt-policy`.
//!
//! * [`config`] — the daemon's configuration (TOML and `--vm` specs).
//! * [`daemon`] — starts ports, sockets, control and metrics.
//! * [`vmport`] — a VM port: the vhost-user protocol and the worker's rings.
//! * [`worker`] — the policy loop over the narrow [`worker::QueueIo`] trait.
//! * [`switch`], [`ports`], [`frames`] — forwarding between ports.
//! * [`metrics`], [`control`] — counters, `vadapt stats`, Prometheus.
//! * [`net`] — virtio-net constants, header, config space, MACs.
//! * [`offload`] — the virtio-net header checked, checksum completion, TCP segmentation.
//! * [`workload_estimate`] — NetAP-ML's workload features from the counters;
//!   [`workload_loop`] sends them to the `netap-ml` ports.
//! * [`cores`] — vSPACE's core manager (its step in `cores/manager_loop/`,
//!   one peer thread per QMP socket and guest agent).
//! * [`migration`], [`uplink`] — named homes, empty until the live-migration
//!   and AF_XDP issues fill them.

#![deny(missing_docs)]

pub mod clock;
pub mod config;
pub mod conn_limit;
pub mod control;
pub mod cores;
pub mod daemon;
pub mod fault_injector;
pub mod frames;
pub mod local_server;
pub mod log_limit;
pub mod metrics;
pub mod migration;
pub mod net;
pub mod netap_ml_model;
pub mod nq_workers;
pub mod offload;
pub mod panic_message;
pub mod ports;
pub mod sigbus_guard;
pub mod socket_dir;
pub mod switch;
pub mod uplink;
pub mod vmport;
pub mod worker;
pub mod workload_estimate;
pub mod workload_loop;

pub use config::DaemonConfig;
pub use daemon::Daemon;
