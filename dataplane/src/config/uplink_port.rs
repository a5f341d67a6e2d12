//! The uplink port (`[[uplink]]`, `--uplink`): AF_XDP sockets on a NIC's
//! queues, on the switch like any port.

use super::error::{field, ConfigError, FieldError};
use super::port_limits::PortLimits;
use super::value_error::ValueError;
use super::vlan_keys::{parse_trunks, parse_vid, VlanKeys};
use super::vm_port::{check_mtu, MAX_MTU, MIN_MTU};
use serde::{Deserialize, Serialize};
use vadapt_policy::PolicyConfig;

/// How an uplink's AF_XDP sockets move frames to and from the NIC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum XskMode {
    /// Zero-copy where the driver has it, copy mode otherwise.
    #[default]
    Auto,
    /// The kernel copies frames between its buffers and the UMEM.
    Copy,
    /// The NIC reads and writes the UMEM itself; fails where the driver
    /// cannot.
    Zerocopy,
}

impl std::fmt::Display for XskMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XskMode::Auto => "auto",
            XskMode::Copy => "copy",
            XskMode::Zerocopy => "zerocopy",
        })
    }
}

impl std::str::FromStr for XskMode {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        match s {
            "auto" => Ok(XskMode::Auto),
            "copy" => Ok(XskMode::Copy),
            "zerocopy" => Ok(XskMode::Zerocopy),
            other => Err(ValueError::NotOneOf {
                value: other.to_owned(),
                expected: "auto, copy or zerocopy",
            }),
        }
    }
}

/// Most NIC queues an uplink serves.
pub const MAX_UPLINK_QUEUES: u16 = 64;

/// An uplink port: AF_XDP sockets on queues `0..queues` of `iface`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UplinkPortConfig {
    /// Port name, unique in the daemon.
    pub name: String,
    /// The network interface (a NIC, or one end of a veth pair).
    pub iface: String,
    /// NIC queues served, from queue 0, one queue worker each.
    #[serde(default = "one")]
    pub queues: u16,
    /// Zero-copy, copy, or zero-copy where the driver has it.
    #[serde(default)]
    pub mode: XskMode,
    /// Policy of the queue workers; default: the daemon's `policy`.
    #[serde(default)]
    pub policy: Option<PolicyConfig>,
    /// Largest frame taken either way is `mtu` + 18 bytes (1518 without);
    /// longer ones are counted drops (`over_mtu`). The interface's own MTU
    /// is left as it is.
    #[serde(default)]
    pub mtu: Option<u16>,
    /// CPUs the queue workers are pinned to, queue `q` to `cpus[q % len]`;
    /// empty: not pinned. A pinned worker's EE-KBP frequency hints drive
    /// its CPU's cpufreq (see docs/cpu-frequency.md). Not used when the NQ
    /// pool serves the queues (`queue_workers = "per-nq-core"`): it places
    /// its workers itself.
    #[serde(default)]
    pub cpus: Vec<usize>,
    /// The VLANs carried tagged (802.1Q) on the wire, `trunks=10:20:100-199`
    /// in a spec; empty: every VLAN, as an OVS port without `tag`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trunks: Vec<u16>,
    /// The VLAN carried untagged; absent: VLAN 0, the untagged domain of
    /// the VM ports without `vlan` (see [`crate::switch::PortVlan`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_vlan: Option<u16>,
    /// Rate limits on what the wire sends into the switch, all the NIC
    /// queues together (a VM port's keys and units: see [`PortLimits`]),
    /// as an `[uplink.limits]` table here and flat keys in an `--uplink`
    /// spec; none by default. Changed at run time by `vadapt set-limits`.
    #[serde(default, skip_serializing_if = "PortLimits::is_unlimited")]
    pub limits: PortLimits,
}

fn one() -> u16 {
    1
}

impl UplinkPortConfig {
    /// Uplink `name` on one queue of `iface`, auto mode, the daemon's policy.
    pub fn new(name: impl Into<String>, iface: impl Into<String>) -> Self {
        UplinkPortConfig {
            name: name.into(),
            iface: iface.into(),
            queues: 1,
            mode: XskMode::Auto,
            policy: None,
            mtu: None,
            cpus: Vec::new(),
            trunks: Vec::new(),
            native_vlan: None,
            limits: PortLimits::NONE,
        }
    }

    /// Its VLAN keys.
    pub fn vlan_keys(&self) -> VlanKeys<'_> {
        VlanKeys {
            vlan: None,
            trunks: &self.trunks,
            native_vlan: self.native_vlan,
        }
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.iface.is_empty() || self.iface.len() > 15 || self.iface.contains(['/', '\0', ' ']) {
            return Err(field(
                "uplink.iface",
                FieldError::NotAnInterface(self.iface.clone()),
            ));
        }
        if self.queues == 0 || self.queues > MAX_UPLINK_QUEUES {
            return Err(field(
                "uplink.queues",
                FieldError::NotInRange {
                    value: self.queues.into(),
                    lo: 1,
                    hi: MAX_UPLINK_QUEUES.into(),
                },
            ));
        }
        check_mtu("uplink.mtu", &self.name, self.mtu)?;
        self.vlan_keys().check("uplink.", &self.name)?;
        self.limits.check("uplink.limits.", &self.name, self.mtu)?;
        if let Some(p) = &self.policy {
            p.validate().map_err(|e| field("uplink.policy", e.into()))?;
        }
        Ok(())
    }
}

/// Parse a `--uplink name=up0,iface=eth1[,queues=N][,mode=copy|zerocopy|auto][,policy=..][,mtu=N][,cpus=A:B][,trunks=V:W-X][,native_vlan=V][,ingress_policing_rate=..,...]` spec.
pub fn parse_uplink_spec(spec: &str) -> Result<UplinkPortConfig, ConfigError> {
    let mut name = None;
    let mut iface = None;
    let mut cfg = UplinkPortConfig::new("", "");
    for kv in spec.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| field("--uplink", FieldError::NotKeyValue(kv.to_owned())))?;
        match k {
            "name" => name = Some(v.to_string()),
            "iface" => iface = Some(v.to_string()),
            "queues" => {
                cfg.queues = v
                    .parse()
                    .map_err(|_| field("--uplink queues", FieldError::NotANumber(v.to_owned())))?
            }
            "mode" => {
                cfg.mode = v
                    .parse()
                    .map_err(|e: ValueError| field("--uplink mode", e.into()))?
            }
            "policy" => {
                cfg.policy = Some(
                    v.parse::<PolicyConfig>()
                        .map_err(|e| field("--uplink policy", e.into()))?,
                )
            }
            "mtu" => {
                cfg.mtu = Some(v.parse::<u16>().map_err(|_| {
                    field(
                        "--uplink mtu",
                        FieldError::NotANumberIn {
                            value: v.to_owned(),
                            lo: MIN_MTU.into(),
                            hi: MAX_MTU.into(),
                        },
                    )
                })?)
            }
            "cpus" => {
                cfg.cpus = v
                    .split(':')
                    .map(|c| c.parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| field("--uplink cpus", FieldError::NotCpuList(v.to_owned())))?
            }
            "trunks" => cfg.trunks = parse_trunks("--uplink trunks", v)?,
            "native_vlan" => cfg.native_vlan = Some(parse_vid("--uplink native_vlan", v)?),
            k if cfg.limits.set_key("--uplink", k, v)? => {}
            other => {
                return Err(field(
                    "--uplink",
                    FieldError::UnknownKey {
                        key: other.to_owned(),
                        known: format!(
                            "name, iface, queues, mode, policy, mtu, cpus, trunks, native_vlan, {}",
                            PortLimits::KEYS.join(", ")
                        ),
                    },
                ))
            }
        }
    }
    cfg.iface = iface.ok_or_else(|| field("--uplink", FieldError::MissingIface))?;
    cfg.name = name.unwrap_or_else(|| cfg.iface.clone());
    cfg.validate()?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let u =
            parse_uplink_spec("name=up0,iface=eth1,queues=2,mode=copy,policy=busy-poll").unwrap();
        assert_eq!(
            (u.name.as_str(), u.iface.as_str(), u.queues),
            ("up0", "eth1", 2)
        );
        assert_eq!(u.mode, XskMode::Copy);
        assert_eq!(u.policy.unwrap().kind().to_string(), "busy-poll");
        assert_eq!(parse_uplink_spec("iface=eth1").unwrap().name, "eth1");
        for (bad, says) in [
            ("name=up0", "missing iface"),
            ("iface=eth1,queues=0", "1..=64"),
            ("iface=eth1,mode=fast", "auto, copy or zerocopy"),
            ("iface=a/b", "interface name"),
            ("iface=eth1,ring=3", "unknown key"),
            ("iface=eth1,mtu=20", "mtu"),
            ("iface=eth1,cpus=1,2", "not key=value"),
            ("iface=eth1,cpus=a", "CPU numbers"),
            ("iface=eth1,trunks=0", "VLAN id"),
            ("iface=eth1,native_vlan=5000", "VLAN id"),
            ("iface=eth1,storm_control_burst=5", "storm_control_burst"),
            ("iface=eth1,ingress_policing_kpkts_rate=x", "kpps"),
        ] {
            let e = parse_uplink_spec(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn limits_come_flat_in_a_spec_and_as_a_table_in_toml() {
        let want = PortLimits {
            ingress_policing_rate: 100_000,
            storm_control_pps: 500,
            ..PortLimits::NONE
        };
        let u = parse_uplink_spec("iface=eth1,ingress_policing_rate=100000,storm_control_pps=500")
            .unwrap();
        assert_eq!(u.limits, want);
        let u: UplinkPortConfig = toml::from_str(
            "name = \"up0\"\niface = \"eth1\"\n[limits]\ningress_policing_rate = 100000\n\
             storm_control_pps = 500\n",
        )
        .unwrap();
        assert_eq!(u.limits, want);
        let small = UplinkPortConfig {
            limits: PortLimits {
                ingress_policing_burst: 1,
                ..want
            },
            ..u
        };
        let e = small.validate().unwrap_err().to_string();
        assert!(e.contains("uplink.limits.ingress_policing_burst"), "{e}");
    }

    #[test]
    fn toml_takes_the_same_fields() {
        let u: UplinkPortConfig =
            toml::from_str("name = \"up0\"\niface = \"eth1\"\nmode = \"zerocopy\"\n").unwrap();
        assert_eq!((u.queues, u.mode), (1, XskMode::Zerocopy));
        assert!(
            toml::from_str::<UplinkPortConfig>("name = \"a\"\niface = \"b\"\nx = 1\n").is_err()
        );
    }
}
