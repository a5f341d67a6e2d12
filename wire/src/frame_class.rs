//! What a frame says about who sent it: its VLAN tags, its EtherType, and
//! the sender fields of ARP, IPv4, IPv6 and Neighbor Discovery
//! ([`classify`]). The switch's IP source guard reads it
//! (`allowed_ips`, issue 37).
//!
//! [`classify`] is total: any byte slice gives a [`FrameClass`], never a
//! panic, and every read is bounded by the slice. A frame too short or
//! inconsistent for its EtherType is [`L3::Malformed`], so that a caller
//! can refuse what it cannot read rather than guess.
//!
//! Its reach is deliberately small:
//! * up to [`MAX_TAGS`] VLAN tags (TPIDs 0x8100, 0x88a8, 0x9100); a third
//!   is [`L3::Malformed`];
//! * ARP for IPv4 over Ethernet only (other hardware or protocol types are
//!   [`L3::Malformed`]);
//! * IPv4's header with its options skipped by IHL, and UDP's ports when
//!   the packet is UDP and not a later fragment;
//! * IPv6's fixed header, then at most [`MAX_EXT_HEADERS`] extension
//!   headers (hop-by-hop, routing, destination options) to the upper
//!   layer; a fragment header ends the walk (its payload is not read), and
//!   a longer or truncated chain is [`L3::Malformed`];
//! * ICMPv6's type and code, and for a Neighbor Solicitation or
//!   Advertisement its target and the first link-layer address option.

use crate::mac::Mac;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Most VLAN tags read before the EtherType (802.1ad outer, 802.1Q inner).
pub const MAX_TAGS: usize = 2;
/// TPIDs read as a VLAN tag: 802.1Q, 802.1ad, and the older QinQ 0x9100.
pub const TPIDS: [u16; 3] = [0x8100, 0x88a8, 0x9100];
/// Most IPv6 extension headers walked before the upper layer.
pub const MAX_EXT_HEADERS: usize = 8;

/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IPv6 next header of ICMPv6.
pub const IPPROTO_ICMPV6: u8 = 58;
/// IPv6 next header of a fragment header.
pub const IPPROTO_FRAGMENT: u8 = 44;

/// ICMPv6 types the guard looks at (RFC 4861, RFC 2710, RFC 3810).
pub mod icmpv6 {
    /// MLDv1 listener report.
    pub const MLD_REPORT: u8 = 131;
    /// MLDv1 listener done.
    pub const MLD_DONE: u8 = 132;
    /// Router Solicitation.
    pub const ROUTER_SOLICITATION: u8 = 133;
    /// Router Advertisement.
    pub const ROUTER_ADVERTISEMENT: u8 = 134;
    /// Neighbor Solicitation.
    pub const NEIGHBOR_SOLICITATION: u8 = 135;
    /// Neighbor Advertisement.
    pub const NEIGHBOR_ADVERTISEMENT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
    /// MLDv2 listener report.
    pub const MLD2_REPORT: u8 = 143;
}

/// A frame, classified (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameClass {
    /// VLAN tags read, 0..=[`MAX_TAGS`].
    pub tags: u8,
    /// The EtherType after the tags (0 for a frame shorter than a header).
    pub ethertype: u16,
    /// Where the EtherType's payload starts, bytes from the frame's start;
    /// never past the frame's end.
    pub l3_offset: usize,
    /// What the payload says.
    pub l3: L3,
}

/// A frame's payload, as far as [`classify`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    /// ARP for IPv4 over Ethernet.
    Arp(ArpInfo),
    /// IPv4.
    Ipv4(Ipv4Info),
    /// IPv6.
    Ipv6(Ipv6Info),
    /// An EtherType this module does not read (RARP, LLDP, experimental…).
    Other,
    /// Too short or inconsistent for its EtherType, a runt, or a third tag.
    Malformed,
}

/// An ARP packet's fields (RFC 826).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpInfo {
    /// Operation: 1 request, 2 reply.
    pub op: u16,
    /// Sender hardware address.
    pub sender_mac: Mac,
    /// Sender protocol address (0.0.0.0 in an ARP probe, RFC 5227).
    pub sender_ip: Ipv4Addr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

/// An IPv4 packet's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Info {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol number.
    pub protocol: u8,
    /// UDP source and destination port, for UDP in the first (or only)
    /// fragment with room for them.
    pub udp_ports: Option<(u16, u16)>,
}

/// An IPv6 packet's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Info {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// The next header after the extension headers walked: the upper
    /// layer's protocol, or [`IPPROTO_FRAGMENT`] where a fragment header
    /// ended the walk.
    pub next_header: u8,
    /// ICMPv6's fields, when `next_header` is ICMPv6 and they are there.
    pub icmp: Option<Icmpv6Info>,
}

/// An ICMPv6 message's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icmpv6Info {
    /// Type.
    pub kind: u8,
    /// Code.
    pub code: u8,
    /// The target address of a Neighbor Solicitation or Advertisement.
    pub nd_target: Option<Ipv6Addr>,
    /// The first source or target link-layer address option of a
    /// Neighbor Solicitation or Advertisement (the one Linux uses).
    pub nd_lladdr: Option<Mac>,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

fn array<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// Classify `frame`, an Ethernet frame from its destination MAC on (see
/// the module documentation). Total: never panics, reads only inside
/// `frame`.
pub fn classify(frame: &[u8]) -> FrameClass {
    let mut at = 12;
    let mut tags = 0u8;
    let Some(mut ethertype) = be16(frame, at) else {
        return FrameClass {
            tags,
            ethertype: 0,
            l3_offset: frame.len(),
            l3: L3::Malformed,
        };
    };
    while TPIDS.contains(&ethertype) {
        if usize::from(tags) == MAX_TAGS {
            return FrameClass {
                tags,
                ethertype,
                l3_offset: (at + 2).min(frame.len()),
                l3: L3::Malformed,
            };
        }
        at += 4;
        tags += 1;
        match be16(frame, at) {
            Some(t) => ethertype = t,
            None => {
                return FrameClass {
                    tags,
                    ethertype,
                    l3_offset: frame.len(),
                    l3: L3::Malformed,
                }
            }
        }
    }
    let l3_offset = at + 2;
    let payload = frame.get(l3_offset..).unwrap_or_default();
    let l3 = match ethertype {
        ETHERTYPE_ARP => arp(payload).map_or(L3::Malformed, L3::Arp),
        crate::ethernet::ETHERTYPE_IPV4 => ipv4(payload).map_or(L3::Malformed, L3::Ipv4),
        crate::ethernet::ETHERTYPE_IPV6 => ipv6(payload).map_or(L3::Malformed, L3::Ipv6),
        _ => L3::Other,
    };
    FrameClass {
        tags,
        ethertype,
        l3_offset,
        l3,
    }
}

fn arp(p: &[u8]) -> Option<ArpInfo> {
    // Ethernet (1) and IPv4 (0x0800), 6- and 4-byte addresses.
    if be16(p, 0)? != 1 || be16(p, 2)? != 0x0800 || p.get(4..6)? != [6, 4] {
        return None;
    }
    Some(ArpInfo {
        op: be16(p, 6)?,
        sender_mac: Mac(array(p, 8)?),
        sender_ip: Ipv4Addr::from(array::<4>(p, 14)?),
        target_ip: Ipv4Addr::from(array::<4>(p, 24)?),
    })
}

fn ipv4(p: &[u8]) -> Option<Ipv4Info> {
    let vihl = *p.first()?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 || p.len() < ihl {
        return None;
    }
    let protocol = p[9];
    let first_fragment = be16(p, 6)? & 0x1fff == 0;
    let udp_ports = if protocol == IPPROTO_UDP && first_fragment {
        be16(p, ihl).zip(be16(p, ihl + 2))
    } else {
        None
    };
    Some(Ipv4Info {
        src: Ipv4Addr::from(array::<4>(p, 12)?),
        dst: Ipv4Addr::from(array::<4>(p, 16)?),
        protocol,
        udp_ports,
    })
}

fn ipv6(p: &[u8]) -> Option<Ipv6Info> {
    if p.first()? >> 4 != 6 || p.len() < 40 {
        return None;
    }
    let src = Ipv6Addr::from(array::<16>(p, 8)?);
    let dst = Ipv6Addr::from(array::<16>(p, 24)?);
    let mut next = p[6];
    let mut at = 40usize;
    let mut walked = 0;
    // Hop-by-hop (0), routing (43), destination options (60): each is
    // (next header, length in 8-byte units not counting the first 8).
    while matches!(next, 0 | 43 | 60) {
        if walked == MAX_EXT_HEADERS {
            return None;
        }
        let hdr = p.get(at..at.checked_add(2)?)?;
        next = hdr[0];
        at = at.checked_add((usize::from(hdr[1]) + 1) * 8)?;
        if at > p.len() {
            return None;
        }
        walked += 1;
    }
    let icmp = if next == IPPROTO_ICMPV6 {
        icmp6(p.get(at..)?)
    } else {
        None
    };
    Some(Ipv6Info {
        src,
        dst,
        next_header: next,
        icmp,
    })
}

fn icmp6(m: &[u8]) -> Option<Icmpv6Info> {
    let (&kind, &code) = (m.first()?, m.get(1)?);
    let mut info = Icmpv6Info {
        kind,
        code,
        nd_target: None,
        nd_lladdr: None,
    };
    if kind == icmpv6::NEIGHBOR_SOLICITATION || kind == icmpv6::NEIGHBOR_ADVERTISEMENT {
        info.nd_target = array::<16>(m, 8).map(Ipv6Addr::from);
        // Options from byte 24: (type, length in 8-byte units, data); a
        // zero length is invalid (RFC 4861 4.6) and ends the walk.
        let mut at = 24usize;
        while let Some(&[t, len]) = m.get(at..at + 2) {
            if len == 0 {
                break;
            }
            if t == 1 || t == 2 {
                info.nd_lladdr = array(m, at + 2).map(Mac);
                break;
            }
            at += usize::from(len) * 8;
        }
    }
    Some(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: Mac = Mac([2, 0, 0, 0, 0, 0xa]);

    fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&A.0);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn arp_payload(op: u16, sha: Mac, spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0, 1, 8, 0, 6, 4];
        p.extend_from_slice(&op.to_be_bytes());
        p.extend_from_slice(&sha.0);
        p.extend_from_slice(&spa);
        p.extend_from_slice(&[0; 6]);
        p.extend_from_slice(&tpa);
        p
    }

    #[test]
    fn arp_is_read_behind_two_tags() {
        let mut f = eth(0x88a8, &[0, 10, 0x81, 0x00, 0, 20, 0x08, 0x06]);
        f.extend(arp_payload(2, A, [10, 0, 0, 5], [10, 0, 0, 1]));
        let c = classify(&f);
        assert_eq!((c.tags, c.ethertype, c.l3_offset), (2, ETHERTYPE_ARP, 22));
        assert_eq!(
            c.l3,
            L3::Arp(ArpInfo {
                op: 2,
                sender_mac: A,
                sender_ip: Ipv4Addr::new(10, 0, 0, 5),
                target_ip: Ipv4Addr::new(10, 0, 0, 1),
            })
        );
        // A third tag is not read through.
        let f = eth(0x8100, &[0, 1, 0x91, 0x00, 0, 2, 0x81, 0x00, 0, 3, 8, 6]);
        assert_eq!(classify(&f).l3, L3::Malformed);
        // Truncated ARP, or not Ethernet/IPv4.
        let p = arp_payload(1, A, [0; 4], [1; 4]);
        assert_eq!(classify(&eth(ETHERTYPE_ARP, &p[..27])).l3, L3::Malformed);
        let mut q = p.clone();
        q[1] = 6;
        assert_eq!(classify(&eth(ETHERTYPE_ARP, &q)).l3, L3::Malformed);
    }

    #[test]
    fn ipv4_udp_ports_only_in_the_first_fragment() {
        let mut ip = vec![0x46, 0, 0, 0, 0, 0, 0, 0, 64, IPPROTO_UDP, 0, 0];
        ip.extend_from_slice(&[0, 0, 0, 0, 255, 255, 255, 255, 1, 2, 3, 4]); // + options
        ip.extend_from_slice(&68u16.to_be_bytes());
        ip.extend_from_slice(&67u16.to_be_bytes());
        let L3::Ipv4(v) = classify(&eth(0x0800, &ip)).l3 else {
            panic!("ipv4")
        };
        assert_eq!(v.src, Ipv4Addr::UNSPECIFIED);
        assert_eq!(v.dst, Ipv4Addr::BROADCAST);
        assert_eq!(v.udp_ports, Some((68, 67)));
        ip[7] = 1; // fragment offset 8 bytes
        let L3::Ipv4(v) = classify(&eth(0x0800, &ip)).l3 else {
            panic!("ipv4")
        };
        assert_eq!(v.udp_ports, None);
        assert_eq!(classify(&eth(0x0800, &ip[..23])).l3, L3::Malformed);
        ip[0] = 0x44; // IHL below 20
        assert_eq!(classify(&eth(0x0800, &ip)).l3, L3::Malformed);
    }

    fn ipv6(src: Ipv6Addr, next: u8, rest: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        p.extend_from_slice(&[next, 255]);
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(rest);
        eth(0x86dd, &p)
    }

    #[test]
    fn a_neighbor_advertisement_is_read_through_extension_headers() {
        let target: Ipv6Addr = "fd00::5".parse().unwrap();
        let mut na = vec![136, 0, 0, 0, 0x20, 0, 0, 0];
        na.extend_from_slice(&target.octets());
        na.extend_from_slice(&[2, 1]);
        na.extend_from_slice(&A.0);
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let want = Icmpv6Info {
            kind: 136,
            code: 0,
            nd_target: Some(target),
            nd_lladdr: Some(A),
        };
        let L3::Ipv6(v) = classify(&ipv6(src, IPPROTO_ICMPV6, &na)).l3 else {
            panic!("ipv6")
        };
        assert_eq!((v.src, v.icmp), (src, Some(want)));
        // Behind a hop-by-hop header of 8 bytes.
        let mut hbh = vec![IPPROTO_ICMPV6, 0, 1, 4, 0, 0, 0, 0];
        hbh.extend_from_slice(&na);
        let L3::Ipv6(v) = classify(&ipv6(src, 0, &hbh)).l3 else {
            panic!("ipv6")
        };
        assert_eq!(v.icmp, Some(want));
        // A chain longer than the walk, or truncated, is not read.
        let long: Vec<u8> = (0..=MAX_EXT_HEADERS)
            .flat_map(|_| [0u8, 0, 0, 0, 0, 0, 0, 0])
            .collect();
        assert_eq!(classify(&ipv6(src, 0, &long)).l3, L3::Malformed);
        assert_eq!(classify(&ipv6(src, 0, &hbh[..4])).l3, L3::Malformed);
        // A fragment header ends the walk.
        let L3::Ipv6(v) = classify(&ipv6(src, IPPROTO_FRAGMENT, &hbh)).l3 else {
            panic!("ipv6")
        };
        assert_eq!((v.next_header, v.icmp), (IPPROTO_FRAGMENT, None));
    }

    #[test]
    fn runts_and_other_ethertypes() {
        assert_eq!(classify(&[]).l3, L3::Malformed);
        assert_eq!(classify(&[0; 13]).l3, L3::Malformed);
        assert_eq!(classify(&eth(0x8100, &[0, 1])).l3, L3::Malformed);
        let c = classify(&eth(0x88b5, &[1, 2, 3]));
        assert_eq!((c.l3, c.l3_offset), (L3::Other, 14));
        assert_eq!(classify(&eth(0x0800, &[])).l3, L3::Malformed);
        assert_eq!(classify(&eth(0x86dd, &[0x60; 39])).l3, L3::Malformed);
    }

    proptest! {
        #[test]
        fn never_panics_and_stays_in_bounds(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            ethertype in prop::sample::select(vec![0x0806u16, 0x0800, 0x86dd, 0x8100, 0x88a8, 0x9100, 0x88b5]),
        ) {
            let c = classify(&bytes);
            prop_assert!(c.l3_offset <= bytes.len());
            // With a chosen EtherType, so the parsers are reached.
            let f = eth(ethertype, &bytes);
            let c = classify(&f);
            prop_assert!(c.l3_offset <= f.len());
            prop_assert!(usize::from(c.tags) <= MAX_TAGS);
        }
    }
}
