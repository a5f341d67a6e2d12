//! The L2 switch between all ports of one daemon: MAC learning with ageing,
//! flooding of broadcast, multicast and unknown unicast.
//!
//! The forwarding table is shared; each worker keeps a private copy
//! ([`FdbCache`]) that it refreshes only when the table's generation changes,
//! so the per-packet lookup takes no lock. Learning writes to the shared table
//! only when a source MAC is new, moved, or has not been refreshed for a second.
//!
//! Between tenants (issue 37): a port's [`PortRules`] say which addresses
//! it owns (static, never taken by another port) and sends from (port
//! security: other sources are dropped, `spoofed_src`), and the table is
//! bounded overall and per port (`fdb.rs`); VLANs as OVS spells them
//! (`vlan.rs`) split it into broadcast domains. A port with `allowed_ips`
//! has an IP source guard too ([`SourceGuard`]: ARP, IPv4, IPv6 and ND
//! senders; other sources are dropped, `spoofed_ip`). [`Switch::forward`] returns
//! what it refused ([`Forwarded`]) for the sending port to count.
//!
//! Ports are [`Egress`]es: the switch hands each its frames. A port that
//! also sends into the switch holds an [`Ingress`] for its own id, never
//! the switch itself. The ports that live inside the daemon are here:
//! [`Sink`] (count and drop), [`Echo`] (swap MACs and send back) and
//! [`Tap`] (the host's network stack).
//!
//! A port can be captured while it runs (`vadapt capture`): a
//! [`CaptureSession`] puts a [`CaptureTap`] on it, which copies the frames
//! entering through the port and those handed to it, without ever making a
//! worker wait (`capture_tap.rs`).

mod capture;
mod capture_tap;
mod echo;
mod egress;
mod fdb;
mod fdb_listing;
mod forwarded;
mod frame_fate;
mod frame_spec;
mod ingress;
mod learning_switch;
mod port_rules;
mod sink;
mod source_guard;
mod tap;
mod trace;
mod vlan;

pub use capture::{CaptureError, CaptureSession};
pub use capture_tap::{
    CaptureDir, CaptureFilter, CaptureFilterError, CaptureTap, CapturedFrame, Crossed,
    BUFFER_BYTES, BUFFER_FRAMES, MAX_SNAPLEN,
};
pub use echo::Echo;
pub use egress::{Egress, PortId};
pub use fdb::{VlanMac, DEFAULT_TABLE_SIZE};
pub use fdb_listing::{EntryKind, FdbListing, FdbRow};
pub use forwarded::Forwarded;
pub use frame_spec::{FrameSpec, FrameSpecError};
pub use ingress::{Ingress, Sender};
pub use learning_switch::{FdbCache, Switch};
pub use port_rules::PortRules;
pub use sink::Sink;
pub use source_guard::{link_local, GuardRule, IpRefusal, SourceGuard};
pub use tap::{Tap, TapError};
pub use trace::{FrameTrace, TraceEgress, TraceError, TraceStep};
pub use vlan::{PortVlan, Retag, Vid, VidSet, MAX_VID};

#[cfg(test)]
mod churn_tests;
#[cfg(test)]
mod tenancy_tests;
#[cfg(test)]
pub(crate) mod test_utils;
#[cfg(test)]
mod trace_tests;
#[cfg(test)]
mod vlan_tests;
