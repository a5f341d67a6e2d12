//! A guest's frame into the frame classifier (`vadapt_wire::frame_class`)
//! and the IP source guard of a port with `allowed_ips`
//! (`vadapt_dataplane::switch::SourceGuard`).
//!
//! Input: the port's configuration, then the frame. [`CONFIG_LEN`] bytes:
//! an IPv4 address (4) and prefix length (1, taken modulo 33), an IPv6
//! address (16) and prefix length (1, modulo 129), and the port's MAC (6,
//! its group bit cleared); host bits past the lengths are cleared. The
//! rest is the Ethernet frame, from its destination MAC.
//!
//! Checked beyond "no panic, nothing read out of bounds": the classifier's
//! L3 offset lies inside the frame and it reads at most two tags; a frame
//! the guard admits satisfies the rule of its kind, restated here from
//! the module documentation of `source_guard.rs` (an independent oracle,
//! not the guard's code); ARP, IPv4 or IPv6 that cannot be read is never
//! admitted, and any other EtherType always is; and one more 802.1Q tag
//! (where there is room for one) changes no verdict.
//!
//! The same frame into the switch's VLAN classifier
//! (`vadapt_dataplane::switch::PortVlan`), as an access port and as a
//! trunk of VLAN `v` (the MAC's last 12 bits) with native VLAN `v + 1`: an
//! access port takes exactly the untagged frames, in its VLAN; a trunk's
//! tagged frame, popped and pushed again, is the frame with its tag's
//! priority bits cleared.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use vadapt_dataplane::switch::{link_local, PortVlan, Retag, SourceGuard};
use vadapt_wire::frame_class::{classify, icmpv6, L3, MAX_TAGS};
use vadapt_wire::{IpPrefix, Mac};

/// Bytes of configuration before the frame.
pub const CONFIG_LEN: usize = 4 + 1 + 16 + 1 + 6;

/// The port an input describes.
struct Port {
    v4: IpPrefix,
    v6: IpPrefix,
    mac: Mac,
}

fn port(c: &[u8; CONFIG_LEN]) -> Port {
    let len4 = c[4] % 33;
    let mask4 = u32::MAX.checked_shl(32 - u32::from(len4)).unwrap_or(0);
    let a4 = u32::from_be_bytes([c[0], c[1], c[2], c[3]]) & mask4;
    let a6: [u8; 16] = c[5..21].try_into().expect("16 bytes");
    let len6 = c[21] % 129;
    let mask6 = u128::MAX.checked_shl(128 - u32::from(len6)).unwrap_or(0);
    let a6 = u128::from_be_bytes(a6) & mask6;
    let mut mac: [u8; 6] = c[22..28].try_into().expect("6 bytes");
    mac[0] &= !1;
    Port {
        v4: IpPrefix::new(IpAddr::V4(Ipv4Addr::from(a4)), len4).expect("masked"),
        v6: IpPrefix::new(IpAddr::V6(Ipv6Addr::from(a6)), len6).expect("masked"),
        mac: Mac(mac),
    }
}

/// Whether the rule for `frame`'s kind lets it through (the oracle).
fn rule_admits(p: &Port, frame: &[u8]) -> bool {
    let v6_ok = |a: Ipv6Addr| a == link_local(p.mac) || p.v6.contains(IpAddr::V6(a));
    match classify(frame).l3 {
        L3::Other => true,
        L3::Malformed => false,
        L3::Arp(a) => {
            a.sender_mac == p.mac
                && (a.sender_ip.is_unspecified() || p.v4.contains(IpAddr::V4(a.sender_ip)))
        }
        L3::Ipv4(v) => {
            p.v4.contains(IpAddr::V4(v.src))
                || (v.src.is_unspecified() && v.protocol == 17 && v.udp_ports == Some((68, 67)))
        }
        L3::Ipv6(v) => {
            let kind = v.icmp.map(|i| i.kind);
            let dad_or_mld = matches!(kind, Some(135 | 131 | 132 | 143));
            let src_ok = v6_ok(v.src) || (v.src.is_unspecified() && dad_or_mld);
            let router = matches!(kind, Some(icmpv6::ROUTER_ADVERTISEMENT | icmpv6::REDIRECT));
            let lladdr_ok = v.icmp.and_then(|i| i.nd_lladdr).is_none_or(|m| m == p.mac);
            let target_ok = match v.icmp {
                Some(i) if i.kind == icmpv6::NEIGHBOR_ADVERTISEMENT => {
                    i.nd_target.is_none_or(v6_ok)
                }
                _ => true,
            };
            src_ok && !router && lladdr_ok && target_ok
        }
    }
}

/// Run one input.
pub fn run(data: &[u8]) {
    let Some((config, frame)) = data.split_first_chunk::<CONFIG_LEN>() else {
        return;
    };
    let p = port(config);
    let guard = SourceGuard::new(&[p.v4, p.v6], &[p.mac]);
    let class = classify(frame);
    assert!(class.l3_offset <= frame.len(), "{class:?}");
    assert!(usize::from(class.tags) <= MAX_TAGS);
    let admitted = guard.admits(frame).is_ok();
    assert_eq!(admitted, rule_admits(&p, frame), "{class:?}");
    vlans(&p, frame);
    if usize::from(class.tags) < MAX_TAGS && frame.len() >= 12 {
        let mut tagged = frame.to_vec();
        tagged.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        let again = guard.admits(&tagged).is_ok();
        if frame.len() >= 14 {
            assert_eq!(again, admitted, "a tag changed the verdict");
        }
    }
}

/// The VLAN checks (module documentation).
fn vlans(p: &Port, frame: &[u8]) {
    let vid = u16::from_be_bytes([p.mac.0[4], p.mac.0[5]]) % 4094 + 1;
    let tagged = frame.len() >= 14 && matches!(frame[12..14], [0x81, 0] | [0x88, 0xa8] | [0x91, 0]);
    match PortVlan::Access(vid).classify(frame) {
        Ok(e) => assert!(!tagged && e.vid == vid && !e.tagged),
        Err(_) => assert!(tagged),
    }
    let native = vid % 4094 + 1;
    let trunk = PortVlan::Trunk {
        allowed: [vid].into_iter().collect(),
        native,
    };
    let Ok(e) = trunk.classify(frame) else {
        return;
    };
    assert!(e.vid == vid || e.vid == native, "{e:?}");
    if !e.tagged {
        assert_eq!(trunk.leave(e.vid, false), Some(Retag::Keep));
        return;
    }
    let pop = Retag::Pop;
    let mut popped = vec![0; pop.len(frame.len())];
    pop.edit(frame, &mut popped);
    let push = Retag::Push(e.vid);
    let mut again = vec![0; push.len(popped.len())];
    push.edit(&popped, &mut again);
    let mut expected = frame.to_vec();
    expected[14] &= 0x0f;
    if e.vid == native && frame[14] & 0x0f == 0 && frame[15] == 0 {
        // A priority tag: pushed again with the native VLAN's id.
        expected[14..16].copy_from_slice(&native.to_be_bytes());
    }
    assert_eq!(again, expected);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_run_and_the_oracle_agrees_on_them() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/seeds/source_guard");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            run(&data);
            n += 1;
        }
        assert!(n >= 3, "seeds: {n}");
    }
}
