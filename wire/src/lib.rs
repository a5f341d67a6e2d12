//! vadapt's wire format: the bytes a frame is made of, as the daemon, the
//! synthetic guest and the fuzzers read and write them. Pure code over byte
//! slices: no I/O, no allocation on the per-frame paths, nothing that knows
//! about ports, rings or features negotiated (those stay with their users).
//!
//! * [`mac`] — MAC addresses ([`Mac`]): parsing, printing, the addresses
//!   of an Ethernet frame, stable ones derived from a name.
//! * [`ethernet`] — the Ethernet header's length and the EtherTypes vadapt
//!   looks at.
//! * [`vnet_hdr`] — the virtio-net header in front of every frame on a
//!   virtqueue ([`VnetHdr`]), parsed and checked against its frame
//!   ([`Offload`]), and its lengths.
//! * [`checksum`] — the Internet checksum (RFC 1071) and the completion of
//!   a partial checksum a guest left.
//! * [`tcp`] — TCP's protocol number, flag bits and checksum field.
//! * [`tcp_build`] — building the headers of one TCP-stream segment as
//!   Linux's TCP and virtio-net driver hand it to the device
//!   ([`tcp_build::TcpFlow`]): the synthetic guest's TSO sender.
//! * [`tcp_cut`] — cutting one TCP segment of up to 64 KiB into MSS-sized
//!   frames with their headers fixed ([`TcpSegmenter`]): the host's
//!   software TSO.
//! * [`frame_class`] — what a frame says about its sender: VLAN tags,
//!   EtherType, ARP, IPv4, IPv6 and Neighbor Discovery fields
//!   ([`frame_class::classify`]), for the switch's IP source guard.
//! * [`ip_prefix`] — IPv4 and IPv6 prefixes ([`IpPrefix`]), as a port's
//!   `allowed_ips` lists them.
//! * [`rarp`] — the RARP frame that announces a migrated VM's MAC
//!   ([`rarp::rarp_announcement`]), sent for a guest that cannot announce.
//! * [`toeplitz`] — receive-side scaling's Toeplitz hash of a flow's
//!   addresses and ports, as NICs spread flows over their queues.
//! * [`rss_config`] — `struct virtio_net_rss_config`, the guest's RSS key
//!   and indirection table as its driver sends them on the control queue.
//! * [`stamped_frame`] — the synthetic guest's own frames: Ethernet with a
//!   [`stamped_frame::Stamp`] that times a reply against its request.
//! * `test_frames` (feature `test-utils`) — sample TCP frames as a Linux
//!   guest hands them to virtio-net, and a check of segments with
//!   `etherparse`'s own parser and checksum code, for other crates' tests
//!   and the fuzzers.
//!
//! The guest is untrusted: every field a parser here reads is checked
//! before it indexes a frame, and a frame that fails is an error value,
//! never a panic.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod checksum;
pub mod ethernet;
pub mod frame_class;
pub mod ip_prefix;
pub mod mac;
pub mod rarp;
pub mod rss_config;
pub mod stamped_frame;
pub mod tcp;
pub mod tcp_build;
pub mod tcp_cut;
#[cfg(test)]
mod tcp_cut_tests;
#[cfg(any(test, feature = "test-utils"))]
pub mod test_frames;
pub mod toeplitz;
pub mod vnet_hdr;
#[cfg(test)]
mod vnet_hdr_tests;

pub use checksum::complete_partial_checksum;
pub use ip_prefix::{IpPrefix, IpPrefixError};
pub use mac::{Mac, MacParseError};
pub use tcp_cut::{SegmentError, TcpSegmenter};
pub use vnet_hdr::{ChecksumAt, Offload, TcpGso, VnetHdr, VnetHdrError};
