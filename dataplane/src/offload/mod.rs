//! Checksum and segmentation offloads (issue #15): the virtio-net header a
//! guest puts in front of each frame, checked against the frame it
//! describes, the offload kept with the frame through the switch, and the
//! software work an egress does when it cannot take the offload — completing a partial checksum, cutting a TCP
//! segment of up to 64 KiB into MSS-sized frames with their IP and TCP
//! headers fixed.
//!
//! Pure code over byte slices, no I/O and no allocation: the ring services
//! call it per frame, and the fuzz target `vnet_hdr` drives it with
//! arbitrary headers and frames. The guest is untrusted, so every field of
//! the header is checked before it is used to index the frame; a header that
//! fails is an error value (the caller drops the frame and counts it under
//! `reason="bad_vnet_hdr"`), never a panic.
//!
//! * [`vnet_hdr`] — the header's fields, parsed and checked ([`VnetHdr`],
//!   [`Offload`]).
//! * [`checksum`] — partial-checksum completion (the Internet checksum
//!   itself is `vadapt_virtq::inet_checksum`, shared with the guest).
//! * [`tcp_segment`] — software TCP segmentation for IPv4 and IPv6, the
//!   model being Linux's `tcp_gso_segment` and DPDK's `rte_gso`.
//! * [`egress`] — the offload a frame keeps through the switch ([`keep`]),
//!   and its software fallback where the egress cannot take it ([`Cutter`]).
//! * [`into_batch`] — a frame with its header, whole in host memory (a TAP
//!   read), into a batch, its offload kept.
//! * [`tx_request`] — a transmitted header checked against what the
//!   frontend negotiated ([`OffloadRefused`]).

pub mod checksum;
pub mod egress;
pub mod into_batch;
pub mod tcp_segment;
#[cfg(test)]
mod tcp_segment_tests;
#[cfg(test)]
pub(crate) mod test_frames;
pub mod tx_request;
pub mod vnet_hdr;

pub use checksum::complete_partial_checksum;
pub use egress::{keep, Cutter};
pub use into_batch::{push_frame, Pushed};
pub use tcp_segment::{SegmentError, TcpSegmenter};
pub use tx_request::{tx_offload, OffloadRefused};
pub use vnet_hdr::{ChecksumAt, Offload, TcpGso, VnetHdr, VnetHdrError};
