//! Checksum and segmentation offloads (issue #15), the daemon's side: the
//! offload a frame's virtio-net header asks for, checked against what its
//! sender negotiated, kept with the frame through the switch, and the
//! software work an egress does when it cannot take the offload.
//!
//! The wire format they work on is `vadapt_wire`'s: the header, parsed and
//! checked against its frame (`vadapt_wire::vnet_hdr`), partial-checksum
//! completion (`vadapt_wire::checksum`) and the cutting of a TCP segment of
//! up to 64 KiB into MSS-sized frames (`vadapt_wire::tcp_cut`). The ring
//! services call this per frame, and the fuzz target `vnet_hdr` drives it
//! with arbitrary headers and frames. A header that fails is an error value
//! (the caller drops the frame and counts it under `reason="bad_vnet_hdr"`),
//! never a panic.
//!
//! * [`egress`] — the offload a frame keeps through the switch ([`keep`]),
//!   and its software fallback where the egress cannot take it ([`Cutter`]).
//! * [`into_batch`] — a frame with its header, whole in host memory (a TAP
//!   read), into a batch, its offload kept.
//! * [`tx_request`] — a transmitted header checked against what the
//!   frontend negotiated ([`OffloadRefused`]).

pub mod egress;
pub mod into_batch;
pub mod tx_request;

pub use egress::{keep, Cutter};
pub use into_batch::{push_frame, Pushed};
pub use tx_request::{tx_offload, OffloadRefused};
