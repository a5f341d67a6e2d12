//! Rate limits on what a port sends into the switch: OVS's ingress
//! policing (bits/s and frames/s, each with a burst) and storm control
//! (floods/s), on VM, TAP and uplink ports alike.
//!
//! The buckets are pure state, told the time: a sender holds its port's
//! [`PortPolicers`] (no allocation per frame), refills them with its clock's
//! `now` once a pass, and asks them about each frame. The limits themselves
//! are configuration ([`crate::config::PortLimits`]); a port's
//! [`LimitsSlot`] carries them from the control socket to its senders, and
//! keeps the buckets between a sender's incarnations or shares them between
//! several senders (an uplink's queue workers). Where they are applied:
//! policing as a frame is taken from its source (a guest's transmit ring,
//! the TAP device, the uplink's RX ring), before it is copied into the
//! switch's batch; storm control where the switch would flood it
//! ([`crate::switch::Switch::forward_gated`]).

mod ingress_policer;
mod limits_slot;
mod port_policers;
mod token_bucket;

pub use ingress_policer::{IngressPolicer, ETHERNET_HEADER};
pub use limits_slot::LimitsSlot;
pub use port_policers::PortPolicers;
pub use token_bucket::TokenBucket;
