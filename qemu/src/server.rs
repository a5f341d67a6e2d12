//! The other end: QMP and guest-agent servers over emulated vCPUs, as the
//! synthetic guest serves them, so that the core manager finds, pauses and
//! resizes a synthetic guest exactly as it does a QEMU VM.
//!
//! - [`vcpus`]: the emulated vCPUs, their threads, pause and online states.
//! - [`qmp_server`]: the socket and its connections.
//! - [`qmp_session`]: what QMP says on one connection (`query-cpus-fast`,
//!   `stop`, `cont`, `query-status`).
//! - [`qga_session`]: what the guest agent says (`guest-sync-delimited`,
//!   `guest-get-vcpus`, `guest-set-vcpus`, `guest-exec` of `ethtool -L`).

pub mod qga_session;
pub mod qmp_server;
pub mod qmp_session;
pub mod vcpus;
