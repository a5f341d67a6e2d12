//! The forwarding table: the port each MAC address of each VLAN is on, learned from
//! frames' sources or pinned (static), and its bounds.
//!
//! A guest chooses the source addresses of its frames, so learning is
//! bounded (issue 37): at most [`Fdb::capacity`] learned addresses in the
//! table (`mac_table_size`) and at most a port's own limit on each port
//! (`max_learned_per_port`). Past either, a new address is not learned
//! ([`NotLearned`]); the addresses already there keep working, and frames
//! to an address not in the table are flooded as before. Static addresses
//! (a port's owned `mac=` and `allowed_macs=`, a sink's or echo's MAC) are
//! not learned and count against neither bound: there are as many as the
//! configuration names.
//!
//! The table counts its learned addresses, overall and per port, as it
//! changes, so that a bound is checked without a scan: every change goes
//! through this type's methods, which keep the counts
//! ([`Fdb::counts_are_exact`]).

use super::egress::PortId;
use super::vlan::Vid;
use crate::metrics::NotLearned;
use std::collections::HashMap;
use vadapt_policy::{Duration, Instant};
use vadapt_wire::Mac;

/// Learned addresses the table holds by default (`mac_table_size`): OVS's
/// `other_config:mac-table-size` default.
pub const DEFAULT_TABLE_SIZE: usize = 8192;

/// An address in one VLAN: what the table is keyed by (the same MAC in
/// two VLANs is two addresses, as in OVS's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VlanMac {
    /// The VLAN (0: the untagged domain).
    pub vid: Vid,
    /// The address.
    pub mac: Mac,
}

impl VlanMac {
    /// `mac` in VLAN `vid`.
    pub fn new(vid: Vid, mac: Mac) -> Self {
        VlanMac { vid, mac }
    }
}

/// One address in the table.
#[derive(Clone, Copy, Debug)]
pub(super) struct FdbEntry {
    /// The port it is on.
    pub(super) port: PortId,
    /// When it was last learned or refreshed by a frame (learned), or
    /// pinned or moved (static).
    pub(super) seen: Instant,
    /// Static: pinned, never ages, not counted against the bounds.
    pub(super) is_static: bool,
}

/// The table and its counts (see the module documentation).
#[derive(Debug)]
pub(super) struct Fdb {
    entries: HashMap<VlanMac, FdbEntry>,
    /// Most learned entries.
    capacity: usize,
    /// Learned entries now.
    learned: usize,
    /// Learned entries now, by port (grown as ports appear).
    learned_on: Vec<usize>,
}

impl Default for Fdb {
    fn default() -> Self {
        Fdb::new(DEFAULT_TABLE_SIZE)
    }
}

impl Fdb {
    /// An empty table of at most `capacity` learned addresses.
    pub(super) fn new(capacity: usize) -> Self {
        Fdb {
            entries: HashMap::new(),
            capacity,
            learned: 0,
            learned_on: Vec::new(),
        }
    }

    /// Most learned addresses the table holds.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Learned addresses now.
    pub(super) fn learned(&self) -> usize {
        self.learned
    }

    /// Every address, learned and static.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Where `mac` is.
    pub(super) fn get(&self, mac: &VlanMac) -> Option<&FdbEntry> {
        self.entries.get(mac)
    }

    /// Every address and its entry.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&VlanMac, &FdbEntry)> {
        self.entries.iter()
    }

    fn learned_on_mut(&mut self, port: PortId) -> &mut usize {
        if self.learned_on.len() <= port {
            self.learned_on.resize(port + 1, 0);
        }
        &mut self.learned_on[port]
    }

    fn learned_on(&self, port: PortId) -> usize {
        self.learned_on.get(port).copied().unwrap_or(0)
    }

    /// A frame from `port` carried `mac` as its source at `now`: learn it
    /// there, refresh it, or move it from another port. `port_limit`: most
    /// learned addresses `port` may hold. `owner`: `port` owns `mac`, so
    /// it may take the address's static entry from another owner (a
    /// migrating VM's destination port, when its guest speaks); no other
    /// port ever takes a static entry.
    ///
    /// `Ok(true)`: the table changed (a new address, or one moved);
    /// `Ok(false)`: it was there already; `Err`: not learned, and why.
    pub(super) fn learn(
        &mut self,
        mac: VlanMac,
        port: PortId,
        now: Instant,
        port_limit: usize,
        owner: bool,
    ) -> Result<bool, NotLearned> {
        let here = self.learned_on(port);
        match self.entries.get_mut(&mac) {
            Some(e) if e.is_static && e.port == port => Ok(false),
            Some(e) if e.is_static && owner => {
                e.port = port;
                e.seen = now;
                Ok(true)
            }
            Some(e) if e.is_static => Err(NotLearned::OwnedElsewhere),
            Some(e) if e.port == port => {
                e.seen = now;
                Ok(false)
            }
            Some(_) if here >= port_limit => Err(NotLearned::PortLimit),
            Some(e) => {
                let from = std::mem::replace(&mut e.port, port);
                e.seen = now;
                *self.learned_on_mut(from) -= 1;
                *self.learned_on_mut(port) += 1;
                Ok(true)
            }
            None if self.learned >= self.capacity => Err(NotLearned::TableFull),
            None if here >= port_limit => Err(NotLearned::PortLimit),
            None => {
                self.entries.insert(
                    mac,
                    FdbEntry {
                        port,
                        seen: now,
                        is_static: false,
                    },
                );
                self.learned += 1;
                *self.learned_on_mut(port) += 1;
                Ok(true)
            }
        }
    }

    /// Learn `mac` on `port` only if the table does not have it anywhere
    /// (see `Switch::learn_if_unknown`), within the same bounds as
    /// [`Fdb::learn`]; whether the table changed.
    pub(super) fn learn_if_unknown(
        &mut self,
        mac: VlanMac,
        port: PortId,
        now: Instant,
        port_limit: usize,
    ) -> bool {
        match self.entries.get_mut(&mac) {
            Some(e) if e.port == port && !e.is_static => {
                e.seen = now;
                false
            }
            Some(_) => false,
            None => self.learn(mac, port, now, port_limit, false) == Ok(true),
        }
    }

    /// Pin `mac` to `port`. `take`: take the address from whatever has it,
    /// static or learned (a sink's or echo's address); otherwise an
    /// address static on another port stays there (the second owner of a
    /// migrating VM's address waits for its guest's first frame) and a
    /// learned one becomes static here (an owner outranks a guest that
    /// sent from its address first). Whether the table changed.
    pub(super) fn pin(&mut self, mac: VlanMac, port: PortId, now: Instant, take: bool) -> bool {
        let was = self.entries.get(&mac).copied();
        match was {
            Some(e) if e.is_static && (e.port == port || !take) => return false,
            Some(e) if !e.is_static => {
                self.learned -= 1;
                *self.learned_on_mut(e.port) -= 1;
            }
            _ => {}
        }
        self.entries.insert(
            mac,
            FdbEntry {
                port,
                seen: now,
                is_static: true,
            },
        );
        true
    }

    /// Port `port` is gone: its learned addresses go; each of its static
    /// ones goes to `next_owner(mac)`, another port that owns it, or goes
    /// too.
    pub(super) fn remove_port(
        &mut self,
        port: PortId,
        next_owner: impl Fn(VlanMac) -> Option<PortId>,
    ) {
        let mut gone_learned = 0;
        self.entries.retain(|mac, e| {
            if e.port != port {
                return true;
            }
            if !e.is_static {
                gone_learned += 1;
                return false;
            }
            match next_owner(*mac) {
                Some(o) => {
                    e.port = o;
                    true
                }
                None => false,
            }
        });
        self.learned -= gone_learned;
        if let Some(n) = self.learned_on.get_mut(port) {
            *n = 0;
        }
    }

    /// Forget every learned address of `port` (its static ones stay);
    /// whether any went.
    pub(super) fn forget_learned(&mut self, port: PortId) -> bool {
        let n = self.learned_on(port);
        if n == 0 {
            return false;
        }
        self.entries.retain(|_, e| e.is_static || e.port != port);
        self.learned -= n;
        self.learned_on[port] = 0;
        true
    }

    /// Drop learned addresses not seen for `ageing` at `now`; how many.
    pub(super) fn age(&mut self, now: Instant, ageing: Duration) -> usize {
        let learned_on = &mut self.learned_on;
        let before = self.entries.len();
        self.entries.retain(|_, e| {
            let keep = e.is_static || now.saturating_since(e.seen) < ageing;
            if !keep {
                learned_on[e.port] -= 1;
            }
            keep
        });
        let gone = before - self.entries.len();
        self.learned -= gone;
        gone
    }

    /// Whether the counts are those of the entries (the invariant every
    /// method keeps; for tests).
    #[cfg(test)]
    pub(super) fn counts_are_exact(&self) -> bool {
        let mut on = vec![0usize; self.learned_on.len()];
        let mut learned = 0;
        for e in self.entries.values().filter(|e| !e.is_static) {
            learned += 1;
            match on.get_mut(e.port) {
                Some(n) => *n += 1,
                None => return false,
            }
        }
        learned == self.learned && on == self.learned_on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(i: u32) -> VlanMac {
        let b = i.to_be_bytes();
        VlanMac::new(0, Mac([2, 0, b[0], b[1], b[2], b[3]]))
    }

    const T: Instant = Instant(1_000_000_000);

    #[test]
    fn learning_stops_at_the_table_size_and_at_the_port_limit() {
        let mut f = Fdb::new(10);
        for i in 0..4 {
            assert_eq!(f.learn(mac(i), 0, T, 4, false), Ok(true));
        }
        assert_eq!(f.learn(mac(99), 0, T, 4, false), Err(NotLearned::PortLimit));
        // Refreshing or re-learning what is there is no new address.
        assert_eq!(f.learn(mac(0), 0, T, 4, false), Ok(false));
        for i in 4..10 {
            assert_eq!(f.learn(mac(i), 1, T, 100, false), Ok(true));
        }
        assert_eq!(
            f.learn(mac(50), 2, T, 100, false),
            Err(NotLearned::TableFull)
        );
        assert_eq!((f.learned(), f.len()), (10, 10));
        // A move between ports is not a new address: the table may be full.
        assert_eq!(f.learn(mac(9), 2, T, 100, false), Ok(true));
        assert_eq!(f.get(&mac(9)).unwrap().port, 2);
        assert!(f.counts_are_exact());
        // Statics do not count: the full table still takes a pinned address.
        assert!(f.pin(mac(77), 3, T, true));
        assert_eq!((f.learned(), f.len()), (10, 11));
        // Ageing frees room.
        assert_eq!(
            f.age(T + Duration::from_secs(301), Duration::from_secs(300)),
            10
        );
        assert_eq!(f.learn(mac(50), 2, T, 100, false), Ok(true));
        assert!(f.counts_are_exact());
    }

    #[test]
    fn a_static_address_moves_only_to_another_owner() {
        let mut f = Fdb::new(10);
        let a = mac(1);
        assert!(f.pin(a, 0, T, false));
        assert_eq!(f.learn(a, 2, T, 10, false), Err(NotLearned::OwnedElsewhere));
        assert!(!f.learn_if_unknown(a, 2, T, 10));
        // A second owner's pin does not take it; its first frame does.
        assert!(!f.pin(a, 1, T, false));
        assert_eq!(f.get(&a).unwrap().port, 0);
        assert_eq!(f.learn(a, 1, T, 10, true), Ok(true));
        assert_eq!(f.get(&a).unwrap().port, 1);
        assert!(f.get(&a).unwrap().is_static);
        // The owner's pin takes an address a guest learned first.
        let b = mac(2);
        assert_eq!(f.learn(b, 2, T, 10, false), Ok(true));
        assert!(f.pin(b, 0, T, false));
        assert_eq!((f.get(&b).unwrap().port, f.learned()), (0, 0));
        assert!(f.counts_are_exact());
    }

    #[test]
    fn a_removed_port_hands_its_static_addresses_to_another_owner() {
        let mut f = Fdb::new(10);
        let (a, b) = (mac(1), mac(2));
        f.pin(a, 0, T, false);
        f.pin(b, 0, T, false);
        assert_eq!(f.learn(mac(3), 0, T, 10, false), Ok(true));
        f.remove_port(0, |m| (m == a).then_some(1));
        assert_eq!(f.get(&a).map(|e| (e.port, e.is_static)), Some((1, true)));
        assert!(f.get(&b).is_none() && f.get(&mac(3)).is_none());
        assert_eq!(f.learned(), 0);
        assert!(f.counts_are_exact());
    }

    #[test]
    fn forgetting_a_port_keeps_its_static_addresses() {
        let mut f = Fdb::new(10);
        f.pin(mac(1), 0, T, false);
        assert_eq!(f.learn(mac(2), 0, T, 10, false), Ok(true));
        assert!(f.forget_learned(0));
        assert!(!f.forget_learned(0));
        assert!(f.get(&mac(1)).is_some() && f.get(&mac(2)).is_none());
        assert!(f.counts_are_exact());
    }
}
