//! Rate limits on what a port's guest sends: OVS's ingress policing (bits/s
//! and frames/s, each with a burst) and storm control (floods/s).
//!
//! Pure state, told the time: a worker holds its port's [`PortPolicers`]
//! (no lock, no allocation per frame), refills them with its pass clock's
//! `now` once a pass, and asks them about each frame. The limits themselves
//! are configuration ([`crate::config::PortLimits`]); where the worker applies
//! them is `queue/` (policing as a frame is taken from the guest's transmit
//! ring, before it is copied; storm control where the switch would flood it,
//! [`crate::switch::Switch::forward_gated`]).

mod ingress_policer;
mod port_policers;
mod token_bucket;

pub use ingress_policer::{IngressPolicer, ETHERNET_HEADER};
pub use port_policers::PortPolicers;
pub use token_bucket::TokenBucket;
