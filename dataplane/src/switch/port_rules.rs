//! What the switch enforces for one port (issue 37): the addresses it
//! owns, how many it may learn, and its VLANs.
//!
//! A VM port with a configured `mac=` (or `allowed_macs=`) owns those
//! addresses, unless `port_security=off`: they are static on it from its
//! creation, so no other port takes them, not by sending from them and
//! not by `learn_if_unknown`; and the port's guest may send from them
//! alone (`spoofed_src` drops). The rules are given with the port
//! ([`Switch::add_port_with`](super::Switch::add_port_with)) and copied
//! into each worker's cache with the ports, so a frame's check reads no
//! lock: it is decided once per flow and kept in the flow's cached route.

use super::vlan::PortVlan;
use vadapt_wire::Mac;

/// One port's rules (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortRules {
    /// Addresses the port owns. Empty: none, and the port may send from
    /// any address (no port security: a sink, an echo, a TAP, an uplink, a
    /// VM port with `port_security=off` or without `mac=`). Otherwise its
    /// frames must carry one of them as their source.
    pub owned: Vec<Mac>,
    /// Most addresses learned on the port at once (`max_learned_per_port`,
    /// or the VM port's `max_learned`); `None`: only the table's size
    /// bounds it (a TAP or an uplink, with a network behind it).
    pub max_learned: Option<usize>,
    /// Its VLANs: an access port of the untagged domain by default (see
    /// [`PortVlan`]).
    pub vlan: PortVlan,
}

impl PortRules {
    /// No address owned, none enforced, no bound but the table's; an
    /// access port of the untagged domain.
    pub fn open() -> Self {
        PortRules::default()
    }

    /// As [`PortRules::open`], in VLAN mode `vlan`.
    pub fn open_in(vlan: PortVlan) -> Self {
        PortRules {
            vlan,
            ..PortRules::default()
        }
    }

    /// Whether the port owns `mac`.
    pub fn owns(&self, mac: Mac) -> bool {
        self.owned.contains(&mac)
    }

    /// Whether a frame from the port may carry `src` as its source.
    pub fn allows(&self, src: Mac) -> bool {
        self.owned.is_empty() || self.owns(src)
    }

    /// Most addresses the port may learn.
    pub fn learn_limit(&self) -> usize {
        self.max_learned.unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_that_owns_addresses_sends_from_them_alone() {
        let (a, b) = (Mac([2, 0, 0, 0, 0, 0xa]), Mac([2, 0, 0, 0, 0, 0xb]));
        assert!(PortRules::open().allows(a));
        let r = PortRules {
            owned: vec![a],
            max_learned: Some(4),
            ..PortRules::default()
        };
        assert!(r.allows(a) && !r.allows(b) && !r.allows(Mac::BROADCAST));
        assert_eq!(r.learn_limit(), 4);
        assert_eq!(PortRules::open().learn_limit(), usize::MAX);
    }
}
