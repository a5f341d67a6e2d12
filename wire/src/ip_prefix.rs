//! An IPv4 or IPv6 prefix ([`IpPrefix`]), as a VM port's `allowed_ips`
//! lists them: `10.0.0.0/24`, `fd00::5/128`, or a bare address for its
//! host prefix.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address and a prefix length (see the module documentation). Its
/// host bits are zero: [`IpPrefix::new`] and parsing refuse others, so
/// that `10.0.0.5/24` (a typo for `/32`, or for `10.0.0.0/24`?) is never
/// read as a guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

/// Why a string is not an [`IpPrefix`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpPrefixError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("`{0}` is not an IPv4 or IPv6 address")]
    BadAddress(String),
    /// The part after `/` is not a number up to the address's bits.
    #[error("`{text}`: the prefix length must be 0..={max}")]
    BadLength {
        /// The whole prefix as written.
        text: String,
        /// 32 or 128.
        max: u8,
    },
    /// Bits set past the prefix length.
    #[error("`{text}` has bits set past /{len}: write {network}/{len}, or the address alone")]
    HostBits {
        /// The whole prefix as written.
        text: String,
        /// Its length.
        len: u8,
        /// The network it would be with them cleared.
        network: IpAddr,
    },
}

fn bits(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn masked(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl IpPrefix {
    /// `addr/len`; `None` if `len` is past the address's bits or `addr`
    /// has bits set past it.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        (len <= bits(addr) && masked(addr, len) == addr).then_some(IpPrefix { addr, len })
    }

    /// The host prefix of `addr` (/32 or /128).
    pub fn host(addr: IpAddr) -> Self {
        IpPrefix {
            addr,
            len: bits(addr),
        }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length, bits.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether the prefix is `/0` (every address of its family).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `ip` is inside the prefix (never across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        bits(ip) == bits(self.addr) && masked(ip, self.len) == self.addr
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl std::str::FromStr for IpPrefix {
    type Err = IpPrefixError;
    fn from_str(s: &str) -> Result<Self, IpPrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| IpPrefixError::BadAddress(a.to_owned()))?;
        let max = bits(addr);
        let len = match l {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max && !l.starts_with('+'))
                .ok_or_else(|| IpPrefixError::BadLength {
                    text: s.to_owned(),
                    max,
                })?,
        };
        IpPrefix::new(addr, len).ok_or_else(|| IpPrefixError::HostBits {
            text: s.to_owned(),
            len,
            network: masked(addr, len),
        })
    }
}

impl Serialize for IpPrefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IpPrefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes_parse_print_and_contain() {
        assert_eq!(p("10.0.0.5").to_string(), "10.0.0.5/32");
        assert_eq!(p("fd00::5").to_string(), "fd00::5/128");
        assert!(p("10.0.0.0/24").contains("10.0.0.77".parse().unwrap()));
        assert!(!p("10.0.0.0/24").contains("10.0.1.1".parse().unwrap()));
        assert!(!p("10.0.0.0/24").contains("::a00:1".parse().unwrap()));
        assert!(p("0.0.0.0/0").contains("1.2.3.4".parse().unwrap()));
        assert!(p("fd00::/64").contains("fd00::1:2".parse().unwrap()));
        assert!(!p("fd00::/64").contains("fd01::1".parse().unwrap()));
        assert!(p("::/0").is_empty());
    }

    #[test]
    fn bad_prefixes_say_why() {
        let e = |s: &str| s.parse::<IpPrefix>().unwrap_err().to_string();
        assert!(
            e("10.0.0.5/24").contains("write 10.0.0.0/24"),
            "{}",
            e("10.0.0.5/24")
        );
        assert!(e("10.0.0.0/33").contains("0..=32"));
        assert!(e("fd00::/129").contains("0..=128"));
        assert!(e("10.0.0.0/+8").contains("0..=32"));
        assert!(e("10.0.0/8").contains("not an IPv4 or IPv6 address"));
        assert!(e("").contains("not an IPv4"));
    }
}
