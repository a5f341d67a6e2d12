//! The frame `vadapt trace` asks about, as an operator writes it:
//! `src=MAC,dst=MAC[,vlan=N][,ip_src=IP][,ip_dst=IP][,arp]`, and the bytes
//! of that frame, which the switch's own decision is traced for.

use super::vlan::{Vid, MAX_VID};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use vadapt_wire::Mac;

/// A frame to trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameSpec {
    /// Source MAC.
    pub src: Mac,
    /// Destination MAC.
    pub dst: Mac,
    /// An 802.1Q tag with this VID (0: a priority tag); `None`: untagged.
    #[serde(default)]
    pub vlan: Option<Vid>,
    /// An IP packet (UDP) from this address, or with `arp` an ARP request
    /// whose sender it is; `None`: no IP (EtherType 0x88b5, experimental).
    #[serde(default)]
    pub ip_src: Option<IpAddr>,
    /// The packet's destination (default: 255.255.255.255 or ff02::1, or
    /// the ARP target 0.0.0.0).
    #[serde(default)]
    pub ip_dst: Option<IpAddr>,
    /// An ARP request instead of an IPv4 packet.
    #[serde(default)]
    pub arp: bool,
}

/// Why a frame spec is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameSpecError {
    /// A key this parser does not know, or one without its value.
    #[error("unknown frame key `{0}` (keys: src, dst, vlan, ip_src, ip_dst, arp)")]
    UnknownKey(String),
    /// A value that does not parse.
    #[error("invalid `{key}`: `{value}`")]
    Value {
        /// The key.
        key: &'static str,
        /// As written.
        value: String,
    },
    /// `src` or `dst` missing.
    #[error("a frame needs `src=MAC` and `dst=MAC`")]
    NoAddresses,
    /// The VID is out of range.
    #[error("`vlan` must be 0..={MAX_VID}, not {0}")]
    Vid(Vid),
    /// The two IP addresses are of two families, or ARP with IPv6.
    #[error("`ip_src` and `ip_dst` must both be IPv4 or both IPv6 (and IPv4 for `arp`)")]
    Family,
}

impl std::str::FromStr for FrameSpec {
    type Err = FrameSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mut src, mut dst) = (None, None);
        let mut spec = FrameSpec {
            src: Mac::BROADCAST,
            dst: Mac::BROADCAST,
            vlan: None,
            ip_src: None,
            ip_dst: None,
            arp: false,
        };
        for kv in s.split(',').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            fn parse<T: std::str::FromStr>(
                key: &'static str,
                v: &str,
            ) -> Result<T, FrameSpecError> {
                v.parse().map_err(|_| FrameSpecError::Value {
                    key,
                    value: v.to_owned(),
                })
            }
            match k {
                "src" => src = Some(parse("src", v)?),
                "dst" => dst = Some(parse("dst", v)?),
                "vlan" => spec.vlan = Some(parse("vlan", v)?),
                "ip_src" => spec.ip_src = Some(parse("ip_src", v)?),
                "ip_dst" => spec.ip_dst = Some(parse("ip_dst", v)?),
                "arp" if v.is_empty() => spec.arp = true,
                _ => return Err(FrameSpecError::UnknownKey(kv.to_owned())),
            }
        }
        let (Some(src), Some(dst)) = (src, dst) else {
            return Err(FrameSpecError::NoAddresses);
        };
        spec.src = src;
        spec.dst = dst;
        spec.check()?;
        Ok(spec)
    }
}

/// EtherTypes written.
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_EXPERIMENTAL: u16 = 0x88b5;
/// The shortest Ethernet frame without its FCS: shorter ones are padded.
const MIN_FRAME: usize = 60;

impl FrameSpec {
    /// Whether the spec describes a frame (a peer's request is checked
    /// again: it did not come through [`FromStr`](std::str::FromStr)).
    pub fn check(&self) -> Result<(), FrameSpecError> {
        if let Some(v) = self.vlan.filter(|&v| v > MAX_VID) {
            return Err(FrameSpecError::Vid(v));
        }
        let v6 = |a: Option<IpAddr>| a.map(|a| a.is_ipv6());
        match (v6(self.ip_src), v6(self.ip_dst)) {
            (Some(a), Some(b)) if a != b => return Err(FrameSpecError::Family),
            (Some(true), _) | (_, Some(true)) if self.arp => return Err(FrameSpecError::Family),
            (None, Some(_)) => return Err(FrameSpecError::Family),
            _ => {}
        }
        Ok(())
    }

    /// The frame's bytes: Ethernet header (with the tag), then the IP
    /// packet, the ARP request or a payload of zeros, padded to 60 bytes.
    pub fn build(&self) -> Result<Vec<u8>, FrameSpecError> {
        self.check()?;
        let mut f = Vec::with_capacity(96);
        f.extend_from_slice(&self.dst.0);
        f.extend_from_slice(&self.src.0);
        if let Some(vid) = self.vlan {
            f.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            f.extend_from_slice(&vid.to_be_bytes());
        }
        match (self.ip_src, self.arp) {
            (None, false) => f.extend_from_slice(&ETHERTYPE_EXPERIMENTAL.to_be_bytes()),
            (None, true) => self.arp_request(&mut f, Ipv4Addr::UNSPECIFIED),
            (Some(IpAddr::V4(src)), true) => self.arp_request(&mut f, src),
            (Some(IpAddr::V4(src)), false) => {
                let dst = match self.ip_dst {
                    Some(IpAddr::V4(d)) => d,
                    _ => Ipv4Addr::BROADCAST,
                };
                f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
                let at = f.len();
                f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
                f.extend_from_slice(&src.octets());
                f.extend_from_slice(&dst.octets());
                let sum = vadapt_wire::checksum::checksum(&f[at..], 0);
                f[at + 10..at + 12].copy_from_slice(&sum.to_be_bytes());
                f.extend_from_slice(&udp());
            }
            (Some(IpAddr::V6(src)), _) => {
                let dst = match self.ip_dst {
                    Some(IpAddr::V6(d)) => d,
                    _ => Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
                };
                f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
                f.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
                f.extend_from_slice(&src.octets());
                f.extend_from_slice(&dst.octets());
                f.extend_from_slice(&udp());
            }
        }
        f.resize(f.len().max(MIN_FRAME), 0);
        Ok(f)
    }

    fn arp_request(&self, f: &mut Vec<u8>, sender: Ipv4Addr) {
        let target = match self.ip_dst {
            Some(IpAddr::V4(t)) => t,
            _ => Ipv4Addr::UNSPECIFIED,
        };
        f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&self.src.0);
        f.extend_from_slice(&sender.octets());
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&target.octets());
    }
}

/// A UDP header, port 12345 to 9 (discard), no payload, no checksum.
fn udp() -> [u8; 8] {
    [0x30, 0x39, 0, 9, 0, 8, 0, 0]
}

impl std::fmt::Display for FrameSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "src={},dst={}", self.src, self.dst)?;
        if let Some(v) = self.vlan {
            write!(f, ",vlan={v}")?;
        }
        if let Some(a) = self.ip_src {
            write!(f, ",ip_src={a}")?;
        }
        if let Some(a) = self.ip_dst {
            write!(f, ",ip_dst={a}")?;
        }
        if self.arp {
            write!(f, ",arp")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vadapt_wire::frame_class::{classify, L3};

    #[test]
    fn specs_parse_print_and_refuse_what_is_no_frame() {
        let s: FrameSpec = "src=02:00:00:00:00:01,dst=ff:ff:ff:ff:ff:ff,vlan=7,ip_src=10.0.0.5,arp"
            .parse()
            .unwrap();
        assert_eq!(s.vlan, Some(7));
        assert!(s.arp);
        assert_eq!(s.to_string().parse::<FrameSpec>().unwrap(), s);
        let bad = |t: &str| t.parse::<FrameSpec>().unwrap_err();
        assert_eq!(bad("src=02:00:00:00:00:01"), FrameSpecError::NoAddresses);
        assert!(matches!(
            bad("src=zz,dst=ff:ff:ff:ff:ff:ff"),
            FrameSpecError::Value { key: "src", .. }
        ));
        let m = "src=02:00:00:00:00:01,dst=02:00:00:00:00:02";
        assert_eq!(bad(&format!("{m},vlan=4095")), FrameSpecError::Vid(4095));
        assert_eq!(
            bad(&format!("{m},ip_src=10.0.0.1,ip_dst=fd00::1")),
            FrameSpecError::Family
        );
        assert_eq!(
            bad(&format!("{m},ip_src=fd00::1,arp")),
            FrameSpecError::Family
        );
        assert!(matches!(
            bad(&format!("{m},colour=red")),
            FrameSpecError::UnknownKey(_)
        ));
    }

    #[test]
    fn built_frames_read_back_as_what_the_spec_says() {
        let m = "src=02:00:00:00:00:01,dst=02:00:00:00:00:02";
        let read = |t: &str| {
            let f = t.parse::<FrameSpec>().unwrap().build().unwrap();
            assert!(f.len() >= MIN_FRAME);
            (f.clone(), classify(&f).l3)
        };
        let (f, l3) = read(&format!("{m},ip_src=10.0.0.5,ip_dst=10.0.0.6"));
        assert_eq!(&f[..6], &[2, 0, 0, 0, 0, 2]);
        match l3 {
            L3::Ipv4(v) => assert_eq!((v.src, v.protocol), (Ipv4Addr::new(10, 0, 0, 5), 17)),
            l => panic!("{l:?}"),
        }
        assert_eq!(
            vadapt_wire::checksum::checksum(&f[14..34], 0),
            0,
            "header checksum"
        );
        match read(&format!("{m},vlan=9,ip_src=10.0.0.5,arp")).1 {
            L3::Arp(a) => assert_eq!(a.sender_ip, Ipv4Addr::new(10, 0, 0, 5)),
            l => panic!("{l:?}"),
        }
        let (f, _) = read(&format!("{m},vlan=9"));
        assert_eq!(&f[12..16], &[0x81, 0, 0, 9]);
        match read(&format!("{m},ip_src=fd00::5")).1 {
            L3::Ipv6(v) => assert_eq!(v.src, "fd00::5".parse::<Ipv6Addr>().unwrap()),
            l => panic!("{l:?}"),
        }
        assert!(matches!(read(m).1, L3::Other));
    }
}
