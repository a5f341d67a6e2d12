//! QEMU's control protocols, both ends, in one place.
//!
//! vadapt's core manager (vSPACE) talks to each VM's QEMU over QMP (which
//! host thread runs each vCPU; `stop` and `cont`) and to the guest agent
//! inside it (online vCPUs, queue pairs); the synthetic guest serves the
//! same protocols so that the manager treats it as a VM. Every peer here is
//! untrusted:
//!
//! - [`json_lines`]: the one bounded reader of line-delimited JSON: a
//!   deadline over every line, a cap on its length.
//! - [`peer_cred`]: who is at the other end of a socket, from the kernel
//!   (`SO_PEERCRED`).
//! - [`peer_text`]: [`PeerText`](peer_text::PeerText), a peer's text
//!   escaped and capped before it reaches a log line.
//! - [`client`]: the QMP ([`qmp`]) and guest-agent ([`qga`]) clients.
//! - [`server`]: the synthetic guest's QMP and guest-agent servers over its
//!   emulated [`Vcpus`](server::vcpus::Vcpus).

#![deny(missing_docs)]
// Only `peer_cred` (getsockopt SO_PEERCRED) and the QMP server's wait for
// a connection (poll) call libc, each block explained.
#![deny(unsafe_code)]

pub mod client;
pub mod json_lines;
pub mod peer_cred;
pub mod peer_text;
pub mod server;

pub use client::{qga, qmp};
