//! vadapt's data plane: a vhost-user-net backend with many ports on one L2
//! switch, whose queue workers run the policies of `vadapt-policy`.
//!
//! Rooms, from the top down (a room imports only rooms below it;
//! `scripts/check-imports.py` checks it; `docs/architecture.md` draws the
//! layers and follows one frame through them):
//!
//! * [`daemon`] — config → ports → services, each a function; shutdown.
//! * [`control`] — the control socket's requests and answers.
//! * [`capture_stream`] — `vadapt capture`'s request and its writer: a
//!   port's captured frames from the switch's tap to the client as pcapng.
//! * [`cores`] — vSPACE's core manager (its step in `cores/manager_loop/`,
//!   one peer thread per QMP socket and guest agent).
//! * [`port`] — a VM port: the state that outlives a connection
//!   ([`port::VmPort`]), its vhost-user side (socket, protocol, guest
//!   memory), its rings as its worker's world
//!   ([`port::port_queues::PortQueues`]), the life of the connection's
//!   worker, and the one list of running ports ([`port::Roster`]).
//! * [`uplink`] — the AF_XDP uplink: a NIC's queues as ports of the switch,
//!   each served by a queue worker running the port's policy.
//! * [`workload_loop`] — NetAP-ML's workload features: the VM ports'
//!   counters through the policy crate's estimator to the `netap-ml` ports.
//! * [`queue`] — the ring service: transmit and receive passes over a
//!   VM port's rings, waiting, the control virtqueue, RSS, a port's
//!   policy slot.
//! * [`worker`] — the queue worker runtime: the [`worker::QueueIo`] trait,
//!   the [`worker::QueueSet`] that steps a policy's executor over it, and
//!   where sets run ([`worker::Runtime`]: a thread of their own, the NQ
//!   pool, or the caller's thread).
//! * [`switch`] — forwarding between ports (port security, VLANs, the
//!   bounded table, flooding); the ports that live inside the daemon (sink,
//!   echo, TAP).
//! * [`offload`], [`frames`] — the virtio-net header checked, checksum
//!   completion, TCP segmentation; host frame batches and the per-queue
//!   backlogs between the switch and a worker.
//! * [`net`] — virtio-net constants, header, config space, MACs.
//! * [`policing`] — a port's rate limits as its worker holds them: OVS's
//!   ingress policing and storm control, token buckets told the time.
//! * [`config`] — the daemon's configuration, every room's part of it
//!   (TOML and `--vm` specs): every room above reads it.
//! * [`metrics`] — counters, the snapshot, `vadapt stats`, Prometheus.
//! * [`migration`] — dirty-page logging in the data path (live migration).
//! * [`socket_file`], [`socket_dir`] — the sockets vadapt binds, and the
//!   one rule by which it removes them (only a socket it bound itself).
//! * Leaves that import no other room: [`clock`], [`conn_limit`],
//!   [`local_server`], [`lock_order`], [`log_limit`], [`netap_ml_model`],
//!   [`panic_message`], [`sigbus_guard`].

#![deny(missing_docs)]

pub mod capture_stream;
pub mod capture_threads;
pub mod clock;
pub mod config;
pub mod conn_limit;
pub mod control;
pub mod cores;
pub mod daemon;
pub mod frames;
pub mod local_server;
pub mod lock_order;
pub mod log_limit;
pub mod metrics;
pub mod migration;
pub mod net;
pub mod netap_ml_model;
pub mod offload;
pub mod panic_message;
pub mod policing;
pub mod port;
pub mod queue;
pub mod sigbus_guard;
pub mod socket_dir;
pub mod socket_file;
pub mod switch;
pub mod uplink;
pub mod worker;
pub mod workload_loop;

pub use config::DaemonConfig;
pub use daemon::{Daemon, DaemonError};
