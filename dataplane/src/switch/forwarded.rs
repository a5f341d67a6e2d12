//! What forwarding a batch refused: frames dropped by port security (by
//! MAC, and by IP for a port with `allowed_ips`), for their VLAN tag or by
//! storm control, and source addresses not learned. The switch returns it;
//! the port that sent the batch counts it ([`Forwarded::count_into`]) and,
//! for a VM port, logs the spoofed source (rate-limited).

use super::source_guard::IpRefusal;
use crate::metrics::{DropReason, NotLearned, PortStats};
use std::sync::atomic::Ordering::Relaxed;
use vadapt_wire::Mac;

/// What a batch's forwarding refused (see the module documentation). All
/// zero for almost every batch.
#[must_use = "count what forwarding refused (Forwarded::count_into)"]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// Frames dropped because their source is not an address the ingress
    /// port owns (`spoofed_src`).
    pub spoofed: u64,
    /// The source of the first of them.
    pub spoofed_src: Option<Mac>,
    /// Frames dropped by the ingress port's IP source guard (`spoofed_ip`).
    pub spoofed_ip: u64,
    /// Why the first of them was.
    pub spoofed_ip_first: Option<IpRefusal>,
    /// Sources not learned, by reason, indexed like [`NotLearned::ALL`]
    /// (once per source and second per worker, not per frame).
    pub not_learned: [u64; NotLearned::ALL.len()],
    /// Frames dropped for their VLAN tag (`vlan_tagged`,
    /// `vlan_not_allowed`), indexed by `VlanRefusal::index` (`switch/vlan.rs`).
    pub vlan: [u64; 2],
    /// Frames whose offload could not follow a tag's push or pop
    /// (`bad_vnet_hdr`).
    pub unretaggable: u64,
    /// Frames not flooded because the ingress port's storm control
    /// refused them (`storm`).
    pub storm: u64,
}

impl Forwarded {
    /// Nothing refused.
    pub fn is_quiet(&self) -> bool {
        self.spoofed == 0
            && self.spoofed_ip == 0
            && self.not_learned.iter().all(|&n| n == 0)
            && self.vlan == [0, 0]
            && self.unretaggable == 0
            && self.storm == 0
    }

    /// Add `other`'s counts (several batches of one pass).
    pub fn merge(&mut self, other: Forwarded) {
        self.spoofed += other.spoofed;
        self.spoofed_src = self.spoofed_src.or(other.spoofed_src);
        self.spoofed_ip += other.spoofed_ip;
        self.spoofed_ip_first = self.spoofed_ip_first.or(other.spoofed_ip_first);
        for (a, b) in self.not_learned.iter_mut().zip(other.not_learned) {
            *a += b;
        }
        self.vlan[0] += other.vlan[0];
        self.vlan[1] += other.vlan[1];
        self.unretaggable += other.unretaggable;
        self.storm += other.storm;
    }

    /// One frame refused by the IP source guard, for `why`.
    pub fn refuse_ip(&mut self, why: IpRefusal) {
        self.spoofed_ip += 1;
        self.spoofed_ip_first.get_or_insert(why);
    }

    /// Count it in the sending port's counters: the drops in queue
    /// `queue`'s (the last queue if there are fewer), the sources not
    /// learned in the port's.
    pub fn count_into(&self, stats: &PortStats, queue: usize) {
        if self.is_quiet() {
            return;
        }
        let q = &stats.queues[queue.min(stats.queues.len() - 1)];
        for (reason, n) in [
            (DropReason::SpoofedSrc, self.spoofed),
            (DropReason::VlanTagged, self.vlan[0]),
            (DropReason::VlanNotAllowed, self.vlan[1]),
            (DropReason::BadVnetHdr, self.unretaggable),
            (DropReason::Storm, self.storm),
        ] {
            if n > 0 {
                q.drop(reason, n);
            }
        }
        if self.spoofed_ip > 0 {
            q.drop(DropReason::SpoofedIp, self.spoofed_ip);
        }
        for (c, &n) in stats.not_learned.iter().zip(&self.not_learned) {
            if n > 0 {
                c.fetch_add(n, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_the_port_and_the_queue() {
        let stats = PortStats::new("p", crate::metrics::PortKind::Vm, 2);
        let mut f = Forwarded::default();
        assert!(f.is_quiet());
        f.merge(Forwarded {
            spoofed: 3,
            spoofed_src: Some(Mac([2, 0, 0, 0, 0, 1])),
            not_learned: [0, 2, 0],
            vlan: [5, 0],
            storm: 7,
            ..Forwarded::default()
        });
        f.merge(Forwarded {
            spoofed: 1,
            spoofed_src: Some(Mac([2, 0, 0, 0, 0, 2])),
            not_learned: [1, 0, 0],
            vlan: [0, 6],
            ..Forwarded::default()
        });
        let why = IpRefusal {
            rule: super::super::source_guard::GuardRule::Ipv4Source,
            addr: None,
        };
        f.refuse_ip(why);
        f.refuse_ip(why);
        assert_eq!(f.spoofed_src, Some(Mac([2, 0, 0, 0, 0, 1])), "the first");
        f.count_into(&stats, 7);
        let spoofed = DropReason::ALL
            .iter()
            .position(|r| *r == DropReason::SpoofedSrc)
            .unwrap();
        assert_eq!(stats.queues[1].drops[spoofed].load(Relaxed), 4);
        let at = |r| DropReason::ALL.iter().position(|x| *x == r).unwrap();
        assert_eq!(
            stats.queues[1].drops[at(DropReason::VlanTagged)].load(Relaxed),
            5
        );
        assert_eq!(
            stats.queues[1].drops[at(DropReason::VlanNotAllowed)].load(Relaxed),
            6
        );
        let spoofed_ip = DropReason::ALL
            .iter()
            .position(|r| *r == DropReason::SpoofedIp)
            .unwrap();
        assert_eq!(stats.queues[1].drops[spoofed_ip].load(Relaxed), 2);
        assert_eq!(
            stats.queues[1].drops[at(DropReason::Storm)].load(Relaxed),
            7
        );
        let got: Vec<u64> = stats.not_learned.iter().map(|c| c.load(Relaxed)).collect();
        assert_eq!(got, [1, 2, 0]);
    }
}
