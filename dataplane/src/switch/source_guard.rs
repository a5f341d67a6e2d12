//! The IP source guard of a VM port with `allowed_ips` (issue 37): which
//! frames from its guest may enter the switch, by what they say about
//! their sender at L3 ([`SourceGuard::admits`]).
//!
//! Port security by MAC ([`PortRules::owned`](super::PortRules)) keeps a
//! guest from sending as another port's MAC; this keeps it from sending as
//! another VM's IP address: ARP cache poisoning, gratuitous ARP, IPv4 with
//! a forged source, and IPv6 Neighbor Discovery spoofing. The rules follow
//! OVN's `port_security` with IP addresses (an `ls_in_port_sec_ip` and
//! `ls_in_port_sec_nd` stage per port), which is what an operator coming
//! from OVS/OVN expects:
//!
//! * **ARP**: the sender hardware address is one of the port's MACs, and
//!   the sender IP is inside `allowed_ips`, or 0.0.0.0 (an ARP probe,
//!   RFC 5227). Gratuitous ARP is ARP: its sender IP must be allowed.
//! * **IPv4**: the source is inside `allowed_ips`, or the packet is a DHCP
//!   client's from 0.0.0.0 (UDP 68 → 67) before it has an address.
//! * **IPv6**: the source is inside `allowed_ips`, or is the link-local
//!   address (EUI-64, RFC 4291 appendix A) of one of the port's MACs, or
//!   is `::` in a Neighbor Solicitation (duplicate address detection,
//!   RFC 4862) or an MLD report or done (RFC 3590, sent before the
//!   link-local address is valid).
//! * **NDP**: a Neighbor Advertisement's target is inside `allowed_ips` or
//!   that link-local address; a Solicitation's or Advertisement's
//!   link-layer address option, if any, is one of the port's MACs.
//!   A Router Advertisement or a Redirect from the guest is dropped: a VM
//!   port is a host, not a router (OVN drops them too unless the port is
//!   a router port; a VM that routes is given `port_security=off`).
//! * **Anything else** (RARP, LLDP, experimental EtherTypes…) passes:
//!   OVN's port security with IP addresses checks only ARP, IPv4 and IPv6
//!   and admits the rest by MAC, which port security by MAC already did.
//! * A frame of ARP, IPv4 or IPv6 the classifier cannot read (truncated,
//!   an IPv6 extension-header chain longer than the classifier walks, a
//!   third VLAN tag) is dropped: what cannot be checked is not admitted.
//!
//! An IPv4 family given nothing in `allowed_ips` admits only probes and
//! DHCP; IPv6 with nothing given admits only link-local (and `::` as
//! above), so an IPv4-only VM keeps its IPv6 link-local neighbours.
//!
//! A fragmented IPv6 packet is checked by its source alone: a fragment
//! header ends the classifier's walk, and receivers drop Neighbor
//! Discovery that comes in fragments (RFC 6980).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use vadapt_wire::frame_class::{classify, icmpv6, IPPROTO_UDP, L3};
use vadapt_wire::{IpPrefix, Mac};

/// One port's guard (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceGuard {
    /// The port's `allowed_ips`.
    allowed: Vec<IpPrefix>,
    /// The link-local address of each of `macs`.
    link_locals: Vec<Ipv6Addr>,
    /// The MACs the port owns.
    macs: Vec<Mac>,
}

/// Which rule refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardRule {
    /// An ARP sender IP not allowed.
    ArpSenderIp,
    /// An ARP sender hardware address not the port's.
    ArpSenderMac,
    /// An IPv4 source not allowed (and not a DHCP client's 0.0.0.0).
    Ipv4Source,
    /// An IPv6 source not allowed, not the port's link-local, and not `::`
    /// in a DAD or MLD message.
    Ipv6Source,
    /// A Neighbor Advertisement for an address not allowed.
    NdTarget,
    /// A Neighbor Discovery link-layer address option not the port's.
    NdLinkLayer,
    /// A Router Advertisement or Redirect: the guest is not a router.
    RouterMessage,
    /// ARP, IPv4 or IPv6 that could not be read through.
    Unreadable,
}

/// Why the guard refused a frame: the rule, and the address it named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpRefusal {
    /// The rule.
    pub rule: GuardRule,
    /// The address refused (none for [`GuardRule::Unreadable`]).
    pub addr: Option<IpAddr>,
}

impl fmt::Display for IpRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.rule {
            GuardRule::ArpSenderIp => "ARP sender",
            GuardRule::ArpSenderMac => "ARP with another MAC as sender, for",
            GuardRule::Ipv4Source => "IPv4 source",
            GuardRule::Ipv6Source => "IPv6 source",
            GuardRule::NdTarget => "neighbor advertisement for",
            GuardRule::NdLinkLayer => "neighbor discovery with another MAC, from",
            GuardRule::RouterMessage => "router advertisement or redirect from",
            GuardRule::Unreadable => "ARP or IP frame that could not be read",
        };
        match self.addr {
            Some(a) => write!(f, "{what} {a}"),
            None => f.write_str(what),
        }
    }
}

/// The link-local address of `mac` (modified EUI-64, RFC 4291 appendix A).
pub fn link_local(mac: Mac) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

impl SourceGuard {
    /// The guard of a port that owns `macs` and may send from `allowed`.
    pub fn new(allowed: &[IpPrefix], macs: &[Mac]) -> Self {
        SourceGuard {
            allowed: allowed.to_vec(),
            link_locals: macs.iter().copied().map(link_local).collect(),
            macs: macs.to_vec(),
        }
    }

    fn allows(&self, ip: IpAddr) -> bool {
        self.allowed.iter().any(|p| p.contains(ip))
    }

    fn allows_v6(&self, ip: Ipv6Addr) -> bool {
        self.link_locals.contains(&ip) || self.allows(IpAddr::V6(ip))
    }

    /// Whether `frame` (Ethernet, from its destination MAC; tagged or not)
    /// may enter the switch from the port's guest. Reads only inside
    /// `frame`, never panics.
    pub fn admits(&self, frame: &[u8]) -> Result<(), IpRefusal> {
        let refuse = |rule, addr: IpAddr| {
            Err(IpRefusal {
                rule,
                addr: Some(addr),
            })
        };
        match classify(frame).l3 {
            L3::Other => Ok(()),
            L3::Malformed => Err(IpRefusal {
                rule: GuardRule::Unreadable,
                addr: None,
            }),
            L3::Arp(a) => {
                let ip = IpAddr::V4(a.sender_ip);
                if !self.macs.contains(&a.sender_mac) {
                    refuse(GuardRule::ArpSenderMac, ip)
                } else if a.sender_ip.is_unspecified() || self.allows(ip) {
                    Ok(())
                } else {
                    refuse(GuardRule::ArpSenderIp, ip)
                }
            }
            L3::Ipv4(v) => {
                let dhcp_client = v.src == Ipv4Addr::UNSPECIFIED
                    && v.protocol == IPPROTO_UDP
                    && v.udp_ports == Some((68, 67));
                if dhcp_client || self.allows(IpAddr::V4(v.src)) {
                    Ok(())
                } else {
                    refuse(GuardRule::Ipv4Source, IpAddr::V4(v.src))
                }
            }
            L3::Ipv6(v) => {
                let src = IpAddr::V6(v.src);
                let kind = v.icmp.map(|i| i.kind);
                if matches!(kind, Some(icmpv6::ROUTER_ADVERTISEMENT | icmpv6::REDIRECT)) {
                    return refuse(GuardRule::RouterMessage, src);
                }
                let unspecified_ok = matches!(
                    kind,
                    Some(
                        icmpv6::NEIGHBOR_SOLICITATION
                            | icmpv6::MLD_REPORT
                            | icmpv6::MLD_DONE
                            | icmpv6::MLD2_REPORT
                    )
                );
                if !(self.allows_v6(v.src) || (v.src.is_unspecified() && unspecified_ok)) {
                    return refuse(GuardRule::Ipv6Source, src);
                }
                let Some(icmp) = v.icmp else {
                    return Ok(());
                };
                if icmp.nd_lladdr.is_some_and(|m| !self.macs.contains(&m)) {
                    return refuse(GuardRule::NdLinkLayer, src);
                }
                match icmp.nd_target {
                    Some(t)
                        if icmp.kind == icmpv6::NEIGHBOR_ADVERTISEMENT && !self.allows_v6(t) =>
                    {
                        refuse(GuardRule::NdTarget, IpAddr::V6(t))
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: Mac = Mac([0x02, 0, 0, 0, 0, 0xa1]);
    const OTHER: Mac = Mac([0x02, 0, 0, 0, 0, 0xb2]);

    fn guard() -> SourceGuard {
        let allowed: Vec<IpPrefix> = ["10.0.0.5", "10.1.0.0/24", "fd00::5"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        SourceGuard::new(&allowed, &[OWN])
    }

    fn eth(src: Mac, ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&src.0);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn arp(sha: Mac, spa: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0, 1, 8, 0, 6, 4, 0, 2];
        p.extend_from_slice(&sha.0);
        p.extend_from_slice(&spa);
        p.extend_from_slice(&[0; 6]);
        p.extend_from_slice(&spa); // gratuitous: target = sender
        eth(OWN, 0x0806, &p)
    }

    fn ipv4(src: [u8; 4], proto: u8, ports: (u16, u16)) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, proto, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&[255; 4]);
        p.extend_from_slice(&ports.0.to_be_bytes());
        p.extend_from_slice(&ports.1.to_be_bytes());
        p.extend_from_slice(&[0, 8, 0, 0]);
        eth(OWN, 0x0800, &p)
    }

    fn icmp6(src: Ipv6Addr, kind: u8, target: Ipv6Addr, lladdr: Option<Mac>) -> Vec<u8> {
        let mut m = vec![kind, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&target.octets());
        if let Some(l) = lladdr {
            m.extend_from_slice(&[2, 1]);
            m.extend_from_slice(&l.0);
        }
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(m.len() as u16).to_be_bytes());
        p.extend_from_slice(&[58, 255]);
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&"ff02::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&m);
        eth(OWN, 0x86dd, &p)
    }

    fn rule(r: Result<(), IpRefusal>) -> Option<GuardRule> {
        r.err().map(|e| e.rule)
    }

    #[test]
    fn link_local_is_eui_64() {
        let ll = link_local(Mac([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        assert_eq!(ll, "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn arp_sender_must_be_allowed_probes_pass() {
        let g = guard();
        assert_eq!(rule(g.admits(&arp(OWN, [10, 0, 0, 5]))), None);
        assert_eq!(rule(g.admits(&arp(OWN, [10, 1, 0, 77]))), None);
        assert_eq!(rule(g.admits(&arp(OWN, [0, 0, 0, 0]))), None, "probe");
        let e = g.admits(&arp(OWN, [10, 0, 0, 6])).unwrap_err();
        assert_eq!(e.rule, GuardRule::ArpSenderIp);
        assert_eq!(e.to_string(), "ARP sender 10.0.0.6");
        assert_eq!(
            rule(g.admits(&arp(OTHER, [10, 0, 0, 5]))),
            Some(GuardRule::ArpSenderMac)
        );
        let mut short = arp(OWN, [10, 0, 0, 5]);
        short.truncate(30);
        assert_eq!(rule(g.admits(&short)), Some(GuardRule::Unreadable));
    }

    #[test]
    fn ipv4_source_must_be_allowed_but_a_dhcp_client() {
        let g = guard();
        assert_eq!(rule(g.admits(&ipv4([10, 0, 0, 5], 6, (1, 2)))), None);
        assert_eq!(
            rule(g.admits(&ipv4([10, 0, 0, 9], 6, (1, 2)))),
            Some(GuardRule::Ipv4Source)
        );
        assert_eq!(rule(g.admits(&ipv4([0; 4], 17, (68, 67)))), None, "DHCP");
        assert_eq!(
            rule(g.admits(&ipv4([0; 4], 17, (67, 68)))),
            Some(GuardRule::Ipv4Source)
        );
        assert_eq!(
            rule(g.admits(&ipv4([0; 4], 6, (68, 67)))),
            Some(GuardRule::Ipv4Source)
        );
    }

    #[test]
    fn ipv6_source_allowed_link_local_or_unspecified_for_dad() {
        let g = guard();
        let ll = link_local(OWN);
        let (own, other): (Ipv6Addr, Ipv6Addr) =
            ("fd00::5".parse().unwrap(), "fd00::6".parse().unwrap());
        let un = Ipv6Addr::UNSPECIFIED;
        let ns = icmpv6::NEIGHBOR_SOLICITATION;
        assert_eq!(rule(g.admits(&icmp6(own, 128, own, None))), None);
        assert_eq!(rule(g.admits(&icmp6(ll, 128, own, None))), None);
        assert_eq!(
            rule(g.admits(&icmp6(link_local(OTHER), 128, own, None))),
            Some(GuardRule::Ipv6Source)
        );
        assert_eq!(
            rule(g.admits(&icmp6(other, 128, own, None))),
            Some(GuardRule::Ipv6Source)
        );
        assert_eq!(rule(g.admits(&icmp6(un, ns, own, None))), None, "DAD");
        assert_eq!(
            rule(g.admits(&icmp6(un, icmpv6::MLD2_REPORT, own, None))),
            None
        );
        assert_eq!(
            rule(g.admits(&icmp6(un, 128, own, None))),
            Some(GuardRule::Ipv6Source)
        );
        // An NS for anyone is a question; its link-layer option must be ours.
        assert_eq!(rule(g.admits(&icmp6(ll, ns, other, Some(OWN)))), None);
        assert_eq!(
            rule(g.admits(&icmp6(ll, ns, other, Some(OTHER)))),
            Some(GuardRule::NdLinkLayer)
        );
    }

    #[test]
    fn neighbor_advertisements_advertise_our_addresses_only() {
        let g = guard();
        let na = icmpv6::NEIGHBOR_ADVERTISEMENT;
        let ll = link_local(OWN);
        let (own, other): (Ipv6Addr, Ipv6Addr) =
            ("fd00::5".parse().unwrap(), "fd00::6".parse().unwrap());
        assert_eq!(rule(g.admits(&icmp6(ll, na, own, Some(OWN)))), None);
        assert_eq!(rule(g.admits(&icmp6(own, na, ll, None))), None);
        let e = g.admits(&icmp6(ll, na, other, Some(OWN))).unwrap_err();
        assert_eq!(
            (e.rule, e.addr),
            (GuardRule::NdTarget, Some(IpAddr::V6(other)))
        );
        assert_eq!(
            rule(g.admits(&icmp6(own, na, own, Some(OTHER)))),
            Some(GuardRule::NdLinkLayer)
        );
        assert_eq!(
            rule(g.admits(&icmp6(Ipv6Addr::UNSPECIFIED, na, own, None))),
            Some(GuardRule::Ipv6Source)
        );
    }

    #[test]
    fn router_messages_are_refused_other_ethertypes_pass() {
        let g = guard();
        let ll = link_local(OWN);
        for k in [icmpv6::ROUTER_ADVERTISEMENT, icmpv6::REDIRECT] {
            assert_eq!(
                rule(g.admits(&icmp6(ll, k, ll, None))),
                Some(GuardRule::RouterMessage)
            );
        }
        assert_eq!(
            rule(g.admits(&icmp6(ll, icmpv6::ROUTER_SOLICITATION, ll, None))),
            None
        );
        assert_eq!(rule(g.admits(&eth(OWN, 0x88b5, &[1, 2, 3]))), None);
        assert_eq!(rule(g.admits(&eth(OWN, 0x8035, &[0; 28]))), None, "RARP");
    }

    #[test]
    fn tagged_frames_are_checked_behind_their_tags() {
        let g = guard();
        let mut f = arp(OWN, [10, 0, 0, 9]);
        f.splice(12..12, [0x81, 0x00, 0, 7]);
        assert_eq!(rule(g.admits(&f)), Some(GuardRule::ArpSenderIp));
        let mut f = arp(OWN, [10, 0, 0, 5]);
        f.splice(12..12, [0x88, 0xa8, 0, 7, 0x81, 0x00, 0, 8]);
        assert_eq!(rule(g.admits(&f)), None);
    }

    #[test]
    fn an_ipv4_only_port_keeps_ipv6_link_local() {
        let g = SourceGuard::new(&["10.0.0.5".parse().unwrap()], &[OWN]);
        let ll = link_local(OWN);
        let global: Ipv6Addr = "fd00::5".parse().unwrap();
        assert_eq!(rule(g.admits(&icmp6(ll, 128, global, None))), None);
        assert_eq!(
            rule(g.admits(&icmp6(global, 128, ll, None))),
            Some(GuardRule::Ipv6Source)
        );
        // And an IPv6-only port: IPv4 only for DHCP.
        let g = SourceGuard::new(&["fd00::5".parse().unwrap()], &[OWN]);
        assert_eq!(
            rule(g.admits(&ipv4([10, 0, 0, 5], 6, (1, 2)))),
            Some(GuardRule::Ipv4Source)
        );
        assert_eq!(rule(g.admits(&ipv4([0; 4], 17, (68, 67)))), None);
    }
}
