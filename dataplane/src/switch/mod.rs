//! The L2 switch between all ports of one daemon: MAC learning with ageing,
//! flooding of broadcast, multicast and unknown unicast.
//!
//! The forwarding table is shared; each worker keeps a private copy
//! ([`FdbCache`]) that it refreshes only when the table's generation changes,
//! so the per-packet lookup takes no lock. Learning writes to the shared table
//! only when a source MAC is new, moved, or has not been refreshed for a second.
//!
//! Ports are [`Egress`]es: the switch hands each its frames. A port that
//! also sends into the switch holds an [`Ingress`] for its own id, never
//! the switch itself. The ports that live inside the daemon are here:
//! [`Sink`] (count and drop), [`Echo`] (swap MACs and send back) and
//! [`Tap`] (the host's network stack).

mod echo;
mod egress;
mod ingress;
mod learning_switch;
mod sink;
mod tap;

pub use echo::Echo;
pub use egress::{Egress, PortId};
pub use ingress::{Ingress, Sender};
pub use learning_switch::{FdbCache, Switch};
pub use sink::Sink;
pub use tap::{Tap, TapError};

#[cfg(test)]
mod churn_tests;
#[cfg(test)]
pub(crate) mod test_utils;
