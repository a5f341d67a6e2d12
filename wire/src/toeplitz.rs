//! Receive-side scaling as NICs do it: the Toeplitz hash of a flow's
//! addresses and ports ([`toeplitz`]) over the input the RSS specification
//! defines ([`RssInput::of_frame`]), so that every frame of one flow lands
//! on one receive queue.
//!
//! The input is, in this order: source address, destination address, then
//! (TCP or UDP, not a fragment) source port and destination port, all in
//! network byte order. IPv4 and IPv6 directly after the Ethernet header or
//! one 802.1Q tag; anything else has no input and the caller picks a queue
//! another way. The default key is the one in Microsoft's RSS
//! specification, which Linux drivers and DPDK also use as their example.

use crate::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN};

/// The RSS specification's example key (40 bytes), the usual default.
pub const DEFAULT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The Toeplitz hash of `input` under `key`: for each set bit of the
/// input, from the most significant of its first byte, the 32 bits of the
/// key starting at that bit position are XORed into the result. Input
/// bits beyond the key's length less 32 are ignored (a 40-byte key covers
/// the 36 bytes of an IPv6 flow).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    // The key's 32-bit window at the current bit, and the next key byte.
    let Some(first) = key.get(..4) else {
        return 0;
    };
    let mut window = u32::from_be_bytes([first[0], first[1], first[2], first[3]]);
    for (i, &byte) in input.iter().enumerate() {
        let next = key.get(i + 4).copied();
        for bit in (0..8).rev() {
            if byte & (1 << bit) != 0 {
                hash ^= window;
            }
            let incoming = next.map_or(0, |n| (n >> bit) & 1);
            window = (window << 1) | u32::from(incoming);
        }
        if next.is_none() && i + 4 >= key.len() {
            // The key is used up: later input bits would hash zeros.
            break;
        }
    }
    hash
}

/// A flow's RSS input: up to 36 bytes, and what kind of flow it is (so
/// that a virtio-net device can hash only the types its driver enabled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RssInput {
    bytes: [u8; 36],
    len: u8,
    /// IPv6 (else IPv4).
    ipv6: bool,
    /// The L4 protocol whose ports are in the input (6 TCP, 17 UDP), 0
    /// when the input is the addresses alone.
    proto: u8,
}

/// The L4 protocol of an [`RssInput`] whose ports it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RssL4 {
    /// TCP (protocol 6), not a fragment.
    Tcp,
    /// UDP (protocol 17), not a fragment.
    Udp,
}

impl RssInput {
    /// The bytes to hash: addresses, then ports if [`RssInput::l4`].
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The addresses alone (8 bytes for IPv4, 32 for IPv6): the input of
    /// an IP-only hash type.
    pub fn addresses(&self) -> &[u8] {
        &self.bytes[..if self.ipv6 { 32 } else { 8 }]
    }

    /// True for an IPv6 flow, false for IPv4.
    pub fn is_ipv6(&self) -> bool {
        self.ipv6
    }

    /// The protocol whose ports [`RssInput::as_bytes`] ends with, if any.
    pub fn l4(&self) -> Option<RssL4> {
        match self.proto {
            6 => Some(RssL4::Tcp),
            17 => Some(RssL4::Udp),
            _ => None,
        }
    }

    /// The input of `frame`: addresses, and ports for TCP or UDP that is
    /// not a fragment; `None` for a frame that is not IP or is too short.
    pub fn of_frame(frame: &[u8]) -> Option<RssInput> {
        let mut l3 = 14;
        let mut ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
        if ethertype == ETHERTYPE_VLAN {
            ethertype = u16::from_be_bytes([*frame.get(16)?, *frame.get(17)?]);
            l3 = 18;
        }
        let ip = frame.get(l3..)?;
        let mut out = RssInput {
            bytes: [0; 36],
            len: 0,
            ipv6: ethertype == ETHERTYPE_IPV6,
            proto: 0,
        };
        let (proto, l4) = match ethertype {
            ETHERTYPE_IPV4 => {
                let ihl = usize::from(ip.first()? & 0x0f) * 4;
                if ihl < 20 || ip.len() < ihl {
                    return None;
                }
                out.bytes[..8].copy_from_slice(&ip[12..20]);
                out.len = 8;
                // More fragments, or an offset: the ports are not here.
                let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
                (if frag == 0 { ip[9] } else { 0 }, ihl)
            }
            ETHERTYPE_IPV6 => {
                if ip.len() < 40 {
                    return None;
                }
                out.bytes[..32].copy_from_slice(&ip[8..40]);
                out.len = 32;
                (ip[6], 40)
            }
            _ => return None,
        };
        const TCP: u8 = 6;
        const UDP: u8 = 17;
        if proto == TCP || proto == UDP {
            if let Some(ports) = ip.get(l4..l4 + 4) {
                let at = usize::from(out.len);
                out.bytes[at..at + 4].copy_from_slice(ports);
                out.len += 4;
                out.proto = proto;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RSS specification's verification table ("Verifying the RSS
    /// Hash Calculation"): IPv4 rows, with and without TCP ports.
    #[test]
    fn the_specifications_ipv4_vectors() {
        // Source, its port, destination, its port, hash of the addresses,
        // hash with the ports.
        type Row = ([u8; 4], u16, [u8; 4], u16, u32, u32);
        let rows: [Row; 5] = [
            (
                [66, 9, 149, 187],
                2794,
                [161, 142, 100, 80],
                1766,
                0x323e_8fc2,
                0x51cc_c178,
            ),
            (
                [199, 92, 111, 2],
                14230,
                [65, 69, 140, 83],
                4739,
                0xd718_262a,
                0xc626_b0ea,
            ),
            (
                [24, 19, 198, 95],
                12898,
                [12, 22, 207, 184],
                38024,
                0xd2d0_a5de,
                0x5c2b_394a,
            ),
            (
                [38, 27, 205, 30],
                48228,
                [209, 142, 163, 6],
                2217,
                0x8298_9176,
                0xafc7_327f,
            ),
            (
                [153, 39, 163, 191],
                44251,
                [202, 188, 127, 2],
                1303,
                0x5d18_09c5,
                0x10e8_28a2,
            ),
        ];
        for (src, sport, dst, dport, ip_only, with_tcp) in rows {
            let mut input = Vec::new();
            input.extend_from_slice(&src);
            input.extend_from_slice(&dst);
            assert_eq!(toeplitz(&DEFAULT_KEY, &input), ip_only, "{src:?}");
            input.extend_from_slice(&sport.to_be_bytes());
            input.extend_from_slice(&dport.to_be_bytes());
            assert_eq!(toeplitz(&DEFAULT_KEY, &input), with_tcp, "{src:?}:{sport}");
        }
    }

    fn ipv4_tcp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[14 + 6..14 + 8].copy_from_slice(&frag.to_be_bytes());
        f[14 + 9] = 6;
        f[14 + 12..14 + 16].copy_from_slice(&src);
        f[14 + 16..14 + 20].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn a_frames_input_is_its_addresses_and_ports_and_a_fragment_has_no_ports() {
        let f = ipv4_tcp([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766, 0);
        let i = RssInput::of_frame(&f).unwrap();
        assert_eq!(toeplitz(&DEFAULT_KEY, i.as_bytes()), 0x51cc_c178);
        assert_eq!(toeplitz(&DEFAULT_KEY, i.addresses()), 0x323e_8fc2);
        assert_eq!((i.l4(), i.is_ipv6()), (Some(RssL4::Tcp), false));
        let frag = ipv4_tcp([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766, 0x2000);
        let i = RssInput::of_frame(&frag).unwrap();
        assert_eq!(toeplitz(&DEFAULT_KEY, i.as_bytes()), 0x323e_8fc2);
        assert_eq!(i.l4(), None, "a fragment has no ports");
        let mut vlan = vec![0u8; 4];
        vlan[..2].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&vlan);
        tagged.extend_from_slice(&f[12..]);
        assert_eq!(RssInput::of_frame(&tagged), RssInput::of_frame(&f));
    }

    #[test]
    fn anything_else_has_no_input_and_nothing_panics() {
        assert_eq!(RssInput::of_frame(&[0u8; 13]), None);
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(RssInput::of_frame(&arp), None);
        for len in 0..80 {
            let mut f = vec![0xffu8; len];
            if len > 14 {
                f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            }
            let _ = RssInput::of_frame(&f);
            f.iter_mut().for_each(|b| *b = 0x4f);
            let _ = RssInput::of_frame(&f);
        }
        assert_eq!(toeplitz(&[1, 2], &[0xff]), 0, "a key shorter than 32 bits");
    }
}
