//! The ports that live inside the daemon: sink and echo (`[[sink]]`,
//! `[[echo]]`, `--sink`, `--echo`) and TAP (`[[tap]]`, `--tap`).

use super::error::{field, ConfigError, FieldError};
use super::port_limits::PortLimits;
use super::vlan_keys::{parse_trunks, parse_vid, VlanKeys};
use super::vm_port::{check_mtu, MAX_MTU, MIN_MTU};
use serde::{Deserialize, Serialize};
use vadapt_wire::Mac;

/// A sink or echo port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalPortConfig {
    /// Port name, unique in the daemon.
    pub name: String,
    /// The port's MAC on the switch; default derived from the name.
    #[serde(default)]
    pub mac: Option<Mac>,
    /// Its VLAN (`vlan=N`): an access port; absent: VLAN 0, the untagged
    /// domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
}

impl LocalPortConfig {
    /// Port `name` with MAC `mac` (`None`: derived from the name), in the
    /// untagged domain.
    pub fn new(name: impl Into<String>, mac: Option<Mac>) -> Self {
        LocalPortConfig {
            name: name.into(),
            mac,
            vlan: None,
        }
    }
}

/// A TAP port to the host network stack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapPortConfig {
    /// Port name, and the TAP interface name (at most 15 bytes).
    pub name: String,
    /// The TAP interface's MTU, set with `SIOCSIFMTU` when the port opens
    /// ([`MIN_MTU`]..=[`MAX_MTU`]); frames over it plus 18
    /// bytes are dropped both ways (`over_mtu`). Absent: the interface is
    /// left as it is and 1500 is assumed. Per port, as a VM port's: a TAP
    /// that should carry a jumbo VM's frames gets the same `mtu`.
    #[serde(default)]
    pub mtu: Option<u16>,
    /// `vlan=N`: an access port of VLAN N (the host stack sees it
    /// untagged). Not with `trunks` or `native_vlan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// The VLANs carried tagged (802.1Q) to the host stack (a VLAN
    /// interface on the TAP takes them), `trunks=10:20:100-199` in a
    /// spec; empty (and no `vlan`): every VLAN.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trunks: Vec<u16>,
    /// The VLAN carried untagged; absent: VLAN 0, the untagged domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_vlan: Option<u16>,
    /// Rate limits on what the host sends into the switch through the TAP
    /// (a VM port's keys and units: see [`PortLimits`]), as a
    /// `[tap.limits]` table here and flat keys in a `--tap` spec; none by
    /// default. Changed at run time by `vadapt set-limits`.
    #[serde(default, skip_serializing_if = "PortLimits::is_unlimited")]
    pub limits: PortLimits,
}

impl TapPortConfig {
    /// TAP port `name` with the interface's MTU left alone, a trunk of
    /// every VLAN, no limits.
    pub fn new(name: impl Into<String>) -> Self {
        TapPortConfig {
            name: name.into(),
            mtu: None,
            vlan: None,
            trunks: Vec::new(),
            native_vlan: None,
            limits: PortLimits::NONE,
        }
    }

    /// Its VLAN keys.
    pub fn vlan_keys(&self) -> VlanKeys<'_> {
        VlanKeys {
            vlan: self.vlan,
            trunks: &self.trunks,
            native_vlan: self.native_vlan,
        }
    }
}

/// Parse a `--tap NAME[,mtu=N][,vlan=V | ,trunks=V:W-X][,native_vlan=V][,ingress_policing_rate=..,...]` spec.
pub fn parse_tap_spec(spec: &str) -> Result<TapPortConfig, ConfigError> {
    let mut it = spec.split(',');
    let name = it.next().unwrap_or_default().to_string();
    if name.is_empty() {
        return Err(field("--tap", FieldError::MissingName));
    }
    let mut t = TapPortConfig::new(name);
    for kv in it {
        match kv.split_once('=') {
            Some(("mtu", v)) => {
                t.mtu = Some(v.parse::<u16>().map_err(|_| {
                    field(
                        "--tap mtu",
                        FieldError::NotANumberIn {
                            value: v.to_owned(),
                            lo: MIN_MTU.into(),
                            hi: MAX_MTU.into(),
                        },
                    )
                })?)
            }
            Some(("vlan", v)) => t.vlan = Some(parse_vid("--tap vlan", v)?),
            Some(("trunks", v)) => t.trunks = parse_trunks("--tap trunks", v)?,
            Some(("native_vlan", v)) => t.native_vlan = Some(parse_vid("--tap native_vlan", v)?),
            Some((k, v)) if t.limits.set_key("--tap", k, v)? => {}
            _ => {
                return Err(field(
                    "--tap",
                    FieldError::UnknownOption {
                        option: kv.to_owned(),
                        known: format!(
                            "mtu=, vlan=, trunks=, native_vlan=, {}=",
                            PortLimits::KEYS.join("=, ")
                        ),
                    },
                ))
            }
        }
    }
    check_mtu("--tap mtu", &t.name, t.mtu)?;
    t.vlan_keys().check("--tap ", &t.name)?;
    t.limits.check("--tap ", &t.name, t.mtu)?;
    Ok(t)
}

/// Parse a `--sink NAME[,mac=..][,vlan=V]` or `--echo NAME[,mac=..][,vlan=V]` spec.
pub fn parse_local_spec(flag: &str, spec: &str) -> Result<LocalPortConfig, ConfigError> {
    let mut it = spec.split(',');
    let name = it.next().unwrap_or_default().to_string();
    if name.is_empty() {
        return Err(field(flag, FieldError::MissingName));
    }
    let mut mac = None;
    let mut vlan = None;
    for kv in it {
        match kv.split_once('=') {
            Some(("mac", v)) => {
                mac = Some(v.parse().map_err(|e: vadapt_wire::MacParseError| {
                    field(format!("{flag} mac"), e.into())
                })?)
            }
            Some(("vlan", v)) => vlan = Some(parse_vid(&format!("{flag} vlan"), v)?),
            _ => {
                return Err(field(
                    flag,
                    FieldError::UnknownOption {
                        option: kv.to_owned(),
                        known: "mac=, vlan=".to_owned(),
                    },
                ))
            }
        }
    }
    Ok(LocalPortConfig { name, mac, vlan })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tap_spec_takes_an_mtu() {
        assert_eq!(parse_tap_spec("tap0").unwrap(), TapPortConfig::new("tap0"));
        assert_eq!(parse_tap_spec("tap0,mtu=9000").unwrap().mtu, Some(9000));
        let e = parse_tap_spec("tap0,mtu=20").unwrap_err().to_string();
        assert!(e.contains("--tap mtu") && e.contains("`tap0`"), "{e}");
        assert!(parse_tap_spec("tap0,mtu=x").is_err());
        assert!(parse_tap_spec("tap0,mac=1").is_err());
    }

    #[test]
    fn tap_and_local_specs_take_vlan_keys() {
        let t = parse_tap_spec("tap0,trunks=10:20-22,native_vlan=5").unwrap();
        assert_eq!(
            (t.trunks.as_slice(), t.native_vlan),
            (&[10, 20, 21, 22][..], Some(5))
        );
        assert_eq!(parse_tap_spec("tap0,vlan=7").unwrap().vlan, Some(7));
        let e = parse_tap_spec("tap0,vlan=7,trunks=8")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tap vlan") && e.contains("trunks"), "{e}");
        assert!(parse_tap_spec("tap0,trunks=4095").is_err());
        assert_eq!(
            parse_local_spec("--echo", "e,vlan=9").unwrap().vlan,
            Some(9)
        );
        assert!(parse_local_spec("--sink", "s,vlan=0").is_err());
    }

    #[test]
    fn a_tap_spec_takes_the_limits_keys_checked_against_its_mtu() {
        let t =
            parse_tap_spec("tap0,ingress_policing_kpkts_rate=10,storm_control_pps=100").unwrap();
        assert_eq!(
            t.limits,
            PortLimits {
                ingress_policing_kpkts_rate: 10,
                storm_control_pps: 100,
                ..PortLimits::NONE
            }
        );
        let e =
            parse_tap_spec("tap0,mtu=9000,ingress_policing_rate=1000,ingress_policing_burst=20")
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("--tap ingress_policing_burst") && e.contains("`tap0`"),
            "{e}"
        );
        let e = parse_tap_spec("tap0,rate=5").unwrap_err().to_string();
        assert!(e.contains("storm_control_pps="), "the keys listed: {e}");
        // No limits: nothing in the spec's JSON (add-port).
        let plain = serde_json::to_string(&TapPortConfig::new("tap0")).unwrap();
        assert!(!plain.contains("limits"), "{plain}");
    }
}
