//! The switch's decision for one frame entering a port, in one place:
//! [`Switch::forward`](super::Switch::forward) acts on it for every frame,
//! and [`Switch::trace`](super::Switch::trace) (`vadapt trace`) explains it
//! for one frame, so the two cannot disagree.
//!
//! The order: the frame's VLAN from the ingress port's rule, then its
//! route (port security on the source MAC, then the table's lookup of the
//! destination in that VLAN; the caller supplies it, cached and learning on
//! the data path, read-only in a trace), then the IP source guard (not for a
//! frame port security already dropped), then hairpin. Where a frame to a
//! port or a flood leaves, and in which form, is each egress port's VLAN
//! rule ([`egress_form`]).

use super::egress::PortId;
use super::port_rules::PortRules;
use super::source_guard::IpRefusal;
use super::vlan::{Entered, Retag, Vid, VlanRefusal};
use vadapt_wire::Mac;

/// Where a flow's frames go, as the table says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// To this port (the ingress itself: dropped, like a learning bridge).
    Port(PortId),
    /// To every port but the ingress.
    Flood,
    /// Dropped: the source is not one the ingress port owns (`spoofed_src`).
    Spoofed,
}

impl Target {
    /// Where a frame to `dst` goes, the table's answer for it in the
    /// frame's VLAN being `known`: flooded if it is a group address or
    /// unknown.
    #[inline]
    pub(super) fn for_destination(dst: Mac, known: Option<PortId>) -> Target {
        match known {
            _ if dst.is_multicast() => Target::Flood,
            Some(p) => Target::Port(p),
            None => Target::Flood,
        }
    }
}

/// What becomes of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    /// Shorter than an Ethernet header's addresses (the ingress counted it).
    Runt,
    /// Refused by the ingress port's VLAN rule (`vlan_tagged`,
    /// `vlan_not_allowed`).
    Vlan(VlanRefusal),
    /// Its source MAC is not one the ingress port may send from
    /// (`spoofed_src`).
    Spoofed,
    /// Refused by the ingress port's IP source guard (`spoofed_ip`).
    Ip(IpRefusal),
    /// Its destination is on the port it came from: dropped.
    Hairpin,
    /// To this port, having entered as said.
    Port(PortId, Entered),
    /// To every port but the ingress, having entered as said.
    Flood(Entered),
}

/// The fate of `frame` entering port `ingress` under its `rules`; `route`
/// gives the [`Target`] of its addresses (destination then source, as they
/// lie at the start of the frame) in the VLAN it entered.
#[inline]
pub(super) fn decide(
    rules: &PortRules,
    ingress: PortId,
    frame: &[u8],
    route: impl FnOnce(&[u8; 12], Vid) -> Target,
) -> Fate {
    let Some(addrs) = frame.first_chunk::<12>() else {
        return Fate::Runt;
    };
    let entered = match rules.vlan.classify(frame) {
        Ok(e) => e,
        Err(why) => return Fate::Vlan(why),
    };
    let fate = match route(addrs, entered.vid) {
        Target::Spoofed => return Fate::Spoofed,
        Target::Port(p) if p == ingress => Fate::Hairpin,
        Target::Port(p) => Fate::Port(p, entered),
        Target::Flood => Fate::Flood(entered),
    };
    match rules.ip_guard.as_ref().map(|g| g.admits(frame)) {
        Some(Err(why)) => Fate::Ip(why),
        _ => fate,
    }
}

/// The form a frame that `entered` leaves by a port with `rules` in; `None`:
/// that port does not carry its VLAN.
#[inline]
pub(super) fn egress_form(rules: &PortRules, entered: Entered) -> Option<Retag> {
    rules.vlan.leave_entered(entered)
}
