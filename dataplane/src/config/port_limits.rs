//! A port's rate limits on the frames its guest sends: ingress policing in
//! OVS's keys and units, and storm control.
//!
//! Ingress policing is OVS's `Interface` columns of the same names, with
//! their units and defaults (`vswitch.conf.db(5)`; `lib/netdev-dpdk.c` and
//! `lib/netdev-linux.c`, `netdev_*_set_policing`):
//!
//! | key | unit | 0 or absent |
//! |---|---|---|
//! | `ingress_policing_rate` | kbps (1000 bit/s) | no bit-rate limit |
//! | `ingress_policing_burst` | kb (1000 bits) | 8000 kb |
//! | `ingress_policing_kpkts_rate` | kpps (1000 packets/s) | no packet-rate limit |
//! | `ingress_policing_kpkts_burst` | kpkts (1000 packets) | 16 kpkts |
//! | `storm_control_pps` | packets/s | no storm control |
//! | `storm_control_burst` | packets | as many as `storm_control_pps` (one second's worth) |
//!
//! Storm control has no OVS column; its missing burst follows OVS's
//! userspace meters (`dpif-netdev.c`, `dp_netdev_meter_set`: a band with
//! no burst gets its rate's worth). How the limits are applied is
//! [`crate::policing`]'s.

use super::error::{field, ConfigError, FieldError};
use serde::{Deserialize, Serialize};

/// A port's limits (see the module documentation); every field 0: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PortLimits {
    /// Bits a second the guest may send, kbps (1000 bit/s), counting each
    /// frame without its 14-byte Ethernet header as OVS does; 0: no limit.
    pub ingress_policing_rate: u32,
    /// Burst of the bit rate, kb (1000 bits); 0: OVS's default, 8000 kb.
    pub ingress_policing_burst: u32,
    /// Frames a second the guest may send, kpps (1000 frames/s); 0: no limit.
    pub ingress_policing_kpkts_rate: u32,
    /// Burst of the frame rate, kpkts (1000 frames); 0: OVS's default, 16.
    pub ingress_policing_kpkts_burst: u32,
    /// Frames a second the guest may have flooded (broadcast, multicast,
    /// unknown unicast), packets/s; 0: no limit.
    pub storm_control_pps: u32,
    /// Burst of the flood rate, packets; 0: `storm_control_pps` (a second's worth).
    pub storm_control_burst: u32,
}

/// OVS's burst when `ingress_policing_burst` is 0, kb.
pub const DEFAULT_BURST_KB: u32 = 8000;
/// OVS's burst when `ingress_policing_kpkts_burst` is 0, kpkts.
pub const DEFAULT_KPKTS_BURST: u32 = 16;

/// A token bucket's size: `per_second` tokens a second, up to `burst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Tokens a second (bits/s or packets/s).
    pub per_second: u64,
    /// Most tokens held, in the same unit.
    pub burst: u64,
}

impl PortLimits {
    /// No limit at all.
    pub const NONE: PortLimits = PortLimits {
        ingress_policing_rate: 0,
        ingress_policing_burst: 0,
        ingress_policing_kpkts_rate: 0,
        ingress_policing_kpkts_burst: 0,
        storm_control_pps: 0,
        storm_control_burst: 0,
    };

    /// The keys, as a `--vm` spec and a `[vm.limits]` table spell them.
    pub const KEYS: [&'static str; 6] = [
        "ingress_policing_rate",
        "ingress_policing_burst",
        "ingress_policing_kpkts_rate",
        "ingress_policing_kpkts_burst",
        "storm_control_pps",
        "storm_control_burst",
    ];

    /// True when nothing is limited.
    pub fn is_unlimited(&self) -> bool {
        self.bits().is_none() && self.packets().is_none() && self.storm().is_none()
    }

    /// The bit-rate bucket, bits/s and bits, OVS's default burst filled in;
    /// `None` without `ingress_policing_rate`.
    pub fn bits(&self) -> Option<RateLimit> {
        let burst = match self.ingress_policing_burst {
            0 => DEFAULT_BURST_KB,
            b => b,
        };
        (self.ingress_policing_rate > 0).then(|| RateLimit {
            per_second: u64::from(self.ingress_policing_rate) * 1000,
            burst: u64::from(burst) * 1000,
        })
    }

    /// The frame-rate bucket, frames/s and frames, OVS's default burst
    /// filled in; `None` without `ingress_policing_kpkts_rate`.
    pub fn packets(&self) -> Option<RateLimit> {
        let burst = match self.ingress_policing_kpkts_burst {
            0 => DEFAULT_KPKTS_BURST,
            b => b,
        };
        (self.ingress_policing_kpkts_rate > 0).then(|| RateLimit {
            per_second: u64::from(self.ingress_policing_kpkts_rate) * 1000,
            burst: u64::from(burst) * 1000,
        })
    }

    /// The storm-control bucket, frames/s and frames; `None` without
    /// `storm_control_pps`.
    pub fn storm(&self) -> Option<RateLimit> {
        let burst = match self.storm_control_burst {
            0 => self.storm_control_pps,
            b => b,
        };
        (self.storm_control_pps > 0).then(|| RateLimit {
            per_second: u64::from(self.storm_control_pps),
            burst: u64::from(burst),
        })
    }

    /// Sets `key` (one of [`PortLimits::KEYS`]) from the text `value`, as a
    /// `--vm` spec gives it; `flag` names the spec in the error
    /// (`--vm`). `Ok(false)`: `key` is not a limit's.
    pub fn set_key(&mut self, flag: &str, key: &str, value: &str) -> Result<bool, ConfigError> {
        let slot = match key {
            "ingress_policing_rate" => &mut self.ingress_policing_rate,
            "ingress_policing_burst" => &mut self.ingress_policing_burst,
            "ingress_policing_kpkts_rate" => &mut self.ingress_policing_kpkts_rate,
            "ingress_policing_kpkts_burst" => &mut self.ingress_policing_kpkts_burst,
            "storm_control_pps" => &mut self.storm_control_pps,
            "storm_control_burst" => &mut self.storm_control_burst,
            _ => return Ok(false),
        };
        *slot = value.parse().map_err(|_| {
            field(
                format!("{flag} {key}"),
                FieldError::NotALimit {
                    value: value.to_owned(),
                    unit: unit(key),
                },
            )
        })?;
        Ok(true)
    }

    /// Checks the limits of port `port`, whose MTU is `mtu` (`None`: 1500);
    /// `prefix` starts the field the error names (`--vm ` or `vm.limits.`).
    /// Refused: a burst without its rate (it would do nothing, so it is a
    /// mistake), and a bit burst smaller than one full-sized frame of the
    /// port (every frame as long would be dropped, however slow).
    pub fn check(&self, prefix: &str, port: &str, mtu: Option<u16>) -> Result<(), ConfigError> {
        for (burst_key, burst, rate_key, rate) in [
            (
                "ingress_policing_burst",
                self.ingress_policing_burst,
                "ingress_policing_rate",
                self.ingress_policing_rate,
            ),
            (
                "ingress_policing_kpkts_burst",
                self.ingress_policing_kpkts_burst,
                "ingress_policing_kpkts_rate",
                self.ingress_policing_kpkts_rate,
            ),
            (
                "storm_control_burst",
                self.storm_control_burst,
                "storm_control_pps",
                self.storm_control_pps,
            ),
        ] {
            if burst > 0 && rate == 0 {
                return Err(field(
                    format!("{prefix}{burst_key}"),
                    FieldError::BurstWithoutRate {
                        port: port.to_owned(),
                        rate_key,
                    },
                ));
            }
        }
        if let Some(bits) = self.bits() {
            // The largest frame is MTU + 18 bytes; OVS counts it without
            // its 14-byte Ethernet header.
            let mtu = mtu.unwrap_or(1500);
            let frame_bits = (u64::from(mtu) + 4) * 8;
            if bits.burst < frame_bits {
                return Err(field(
                    format!("{prefix}ingress_policing_burst"),
                    FieldError::BurstBelowFrame {
                        burst_kb: bits.burst / 1000,
                        port: port.to_owned(),
                        mtu,
                        frame_bits,
                        least_kb: frame_bits.div_ceil(1000),
                    },
                ));
            }
        }
        Ok(())
    }
}

/// The unit of `key`'s value, for error messages.
fn unit(key: &str) -> &'static str {
    match key {
        "ingress_policing_rate" => "kbps",
        "ingress_policing_burst" => "kb",
        "ingress_policing_kpkts_rate" => "kpps",
        "ingress_policing_kpkts_burst" => "kpkts",
        "storm_control_pps" => "packets/s",
        _ => "packets",
    }
}

impl std::fmt::Display for PortLimits {
    /// One line: each limit with its burst as applied (defaults filled in),
    /// or `no limits`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(b) = self.bits() {
            parts.push(format!(
                "ingress {} kbps (burst {} kb)",
                b.per_second / 1000,
                b.burst / 1000
            ));
        }
        if let Some(p) = self.packets() {
            parts.push(format!(
                "ingress {} kpps (burst {} kpkts)",
                p.per_second / 1000,
                p.burst / 1000
            ));
        }
        if let Some(s) = self.storm() {
            parts.push(format!(
                "storm control {} pps (burst {})",
                s.per_second, s.burst
            ));
        }
        if parts.is_empty() {
            f.write_str("no limits")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_bursts_take_ovs_defaults_and_zero_is_no_limit() {
        assert!(PortLimits::NONE.is_unlimited());
        assert_eq!(PortLimits::default(), PortLimits::NONE);
        let l = PortLimits {
            ingress_policing_rate: 10_000,
            ingress_policing_kpkts_rate: 100,
            storm_control_pps: 500,
            ..PortLimits::NONE
        };
        assert_eq!(
            l.bits(),
            Some(RateLimit {
                per_second: 10_000_000,
                burst: 8_000_000
            })
        );
        assert_eq!(
            l.packets(),
            Some(RateLimit {
                per_second: 100_000,
                burst: 16_000
            })
        );
        assert_eq!(
            l.storm(),
            Some(RateLimit {
                per_second: 500,
                burst: 500
            })
        );
        assert_eq!(
            l.to_string(),
            "ingress 10000 kbps (burst 8000 kb), ingress 100 kpps (burst 16 kpkts), \
             storm control 500 pps (burst 500)"
        );
        assert_eq!(PortLimits::NONE.to_string(), "no limits");
        // The largest values stay in range (u32 kbps: 4.3 Tbit/s).
        let max = PortLimits {
            ingress_policing_rate: u32::MAX,
            ingress_policing_burst: u32::MAX,
            ..PortLimits::NONE
        };
        assert_eq!(max.bits().unwrap().per_second, u64::from(u32::MAX) * 1000);
    }

    #[test]
    fn keys_parse_with_their_unit_named_in_errors() {
        let mut l = PortLimits::NONE;
        for k in PortLimits::KEYS {
            assert!(l.set_key("--vm", k, "7").unwrap(), "{k}");
        }
        assert!(l.storm().is_some() && l.bits().is_some() && l.packets().is_some());
        assert!(!l.set_key("--vm", "mtu", "7").unwrap());
        let e = l
            .set_key("--vm", "ingress_policing_rate", "10M")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--vm ingress_policing_rate") && e.contains("kbps"),
            "{e}"
        );
        assert!(l.set_key("--vm", "storm_control_pps", "-1").is_err());
        assert!(l
            .set_key("--vm", "storm_control_pps", "4294967296")
            .is_err());
    }

    #[test]
    fn a_burst_without_its_rate_or_under_one_frame_is_refused() {
        let e = PortLimits {
            ingress_policing_burst: 100,
            ..PortLimits::NONE
        }
        .check("vm.limits.", "vm1", None)
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("vm.limits.ingress_policing_burst")
                && e.contains("`vm1`")
                && e.contains("ingress_policing_rate"),
            "{e}"
        );
        for l in [
            PortLimits {
                ingress_policing_kpkts_burst: 1,
                ..PortLimits::NONE
            },
            PortLimits {
                storm_control_burst: 1,
                ..PortLimits::NONE
            },
        ] {
            assert!(l.check("--vm ", "vm1", None).is_err(), "{l:?}");
        }
        // 12 kb < one 1504-byte frame (12 032 bits); 13 kb holds it.
        let small = PortLimits {
            ingress_policing_rate: 1000,
            ingress_policing_burst: 12,
            ..PortLimits::NONE
        };
        let e = small.check("--vm ", "vm1", None).unwrap_err().to_string();
        assert!(
            e.contains("--vm ingress_policing_burst") && e.contains("at least 13 kb"),
            "{e}"
        );
        let ok = PortLimits {
            ingress_policing_burst: 13,
            ..small
        };
        ok.check("--vm ", "vm1", None).unwrap();
        // A jumbo port needs more.
        assert!(ok.check("--vm ", "vm1", Some(9000)).is_err());
        PortLimits::NONE.check("--vm ", "vm1", Some(68)).unwrap();
    }
}
