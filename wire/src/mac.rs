//! MAC addresses: parsed from and printed as `52:54:00:12:34:56` (also
//! with `-`), read from an Ethernet frame, or derived from a name, and
//! (de)serialized as that string.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

/// Error parsing a MAC address.
#[derive(Debug, thiserror::Error)]
#[error("invalid MAC address `{0}` (expected six hex bytes like 52:54:00:12:34:56)")]
pub struct MacParseError(String);

impl Mac {
    /// The broadcast address.
    pub const BROADCAST: Mac = Mac([0xff; 6]);

    /// True for group (broadcast or multicast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// A stable, locally administered unicast MAC derived from a port name.
    pub fn from_name(name: &str) -> Mac {
        // FNV-1a: stable across runs and platforms, unlike `DefaultHasher`.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let b = h.to_be_bytes();
        Mac([0x52, 0x54, 0x00, b[5], b[6], b[7]])
    }

    /// Destination MAC of an Ethernet frame (`None` if shorter than 6 bytes).
    pub fn dst_of(frame: &[u8]) -> Option<Mac> {
        frame.get(0..6).map(|s| Mac(s.try_into().expect("6 bytes")))
    }

    /// Source MAC of an Ethernet frame (`None` if shorter than 12 bytes).
    pub fn src_of(frame: &[u8]) -> Option<Mac> {
        frame
            .get(6..12)
            .map(|s| Mac(s.try_into().expect("6 bytes")))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Mac {
    type Err = MacParseError;
    fn from_str(s: &str) -> Result<Self, MacParseError> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in out.iter_mut() {
            let p = parts.next().ok_or_else(|| MacParseError(s.into()))?;
            if p.len() != 2 {
                return Err(MacParseError(s.into()));
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| MacParseError(s.into()))?;
        }
        if parts.next().is_some() {
            return Err(MacParseError(s.into()));
        }
        Ok(Mac(out))
    }
}

impl Serialize for Mac {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mac {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parse_and_print_roundtrip() {
        let m: Mac = "52:54:00:AB:cd:01".parse().unwrap();
        assert_eq!(m.to_string(), "52:54:00:ab:cd:01");
        assert!("52:54:00:ab:cd".parse::<Mac>().is_err());
        assert!("52:54:00:ab:cd:01:02".parse::<Mac>().is_err());
        assert!("52:54:00:ab:cd:zz".parse::<Mac>().is_err());
        assert!(!m.is_multicast());
        assert!(Mac::BROADCAST.is_multicast());
    }

    #[test]
    fn name_macs_are_stable_unicast_and_distinct() {
        let a = Mac::from_name("vm1");
        assert_eq!(a, Mac::from_name("vm1"));
        assert_ne!(a, Mac::from_name("vm2"));
        assert!(!a.is_multicast());
    }
}
