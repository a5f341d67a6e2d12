//! What a port is to the switch: an [`Egress`] the switch hands frames
//! to, known by its [`PortId`].

use crate::frames::FrameBatch;

/// Index of a port on the switch.
pub type PortId = usize;

/// What a port does with frames the switch hands it.
pub trait Egress: Send + Sync + std::fmt::Debug {
    /// Take frames `which` of `frames`. `flow` is the ingress queue index,
    /// used to spread flows over the receiver's queues. A port that sends
    /// frames back (echo) does so through its own [`Ingress`](super::Ingress).
    fn deliver(&self, frames: &FrameBatch, which: &[u16], flow: u16);
}
