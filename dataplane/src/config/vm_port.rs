//! One VM port's configuration: the `[[vm]]` table and the `--vm` spec.

use super::error::{field, ConfigError, FieldError};
use super::port_limits::PortLimits;
use super::value_error::ValueError;
use super::vlan_keys::parse_vid;
use crate::socket_file::MAX_PATH_BYTES;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use vadapt_policy::PolicyConfig;
use vadapt_qemu::peer_text::PeerText;
use vadapt_wire::{IpPrefix, Mac};

pub use super::cores::VmRole;

/// Most queue pairs per VM port. Matches DPDK's `VHOST_MAX_QUEUE_PAIRS`-scale
/// limits and keeps per-port memory bounded.
pub const MAX_QUEUE_PAIRS: u16 = 16;

/// One VM port: a vhost-user socket that a frontend (QEMU, DPDK virtio-user,
/// the synthetic guest) connects to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmPortConfig {
    /// Port name, unique in the daemon.
    pub name: String,
    /// Path of the vhost-user socket: vadapt listens on it (`mode = "server"`)
    /// or connects to it (`mode = "client"`).
    pub socket: PathBuf,
    /// Which end of the socket vadapt is: `server` (default; start QEMU with
    /// `reconnect=1` on its chardev to survive a vadapt restart) or `client`
    /// (QEMU listens with `server=on,wait=off`; vadapt reconnects with
    /// backoff); see [`crate::port::frontend_socket`].
    #[serde(default)]
    pub mode: SocketMode,
    /// Queue pairs offered (`VIRTIO_NET_F_MQ`), 1..=16.
    #[serde(default = "one")]
    pub queues: u16,
    /// MAC offered in the config space; default derived from the name.
    #[serde(default)]
    pub mac: Option<Mac>,
    /// Policy of this port's worker; default: the daemon's `policy`.
    #[serde(default)]
    pub policy: Option<PolicyConfig>,
    /// Rate limits on what the guest sends: ingress policing (OVS's
    /// `ingress_policing_*` keys and units) and storm control, as a
    /// `[vm.limits]` table here and flat keys in a `--vm` spec; none by
    /// default. Changed at run time by `vadapt set-limits`.
    #[serde(default, skip_serializing_if = "PortLimits::is_unlimited")]
    pub limits: PortLimits,
    /// Offer `VIRTIO_F_RING_PACKED` (default): a frontend that asks for it
    /// (QEMU `packed=on`, DPDK virtio-user `packed_vq=1`) gets packed
    /// rings; `false` offers split rings only.
    #[serde(default = "yes")]
    pub packed: bool,
    /// Offer `VIRTIO_NET_F_RSS` (default): a driver that takes it steers
    /// received frames with its own Toeplitz key and indirection table,
    /// set through the control queue (see [`crate::queue::rss`]); `false`
    /// keeps vadapt's default steering for every frontend.
    #[serde(default = "yes")]
    pub rss: bool,
    /// Guest-memory files not sealed against shrinking: `refuse` (default)
    /// or `accept` (DPDK virtio-user, QEMU `memory-backend-file`); see
    /// [`crate::port::memory_file`]. The rule covers the dirty-page log
    /// (`SET_LOG_BASE`) as well as the guest's memory regions.
    #[serde(default)]
    pub unsealed_memory: UnsealedMemory,
    /// The VM's QMP socket (QEMU `-qmp unix:PATH,server=on,wait=off`), where
    /// the core manager (`[cores]`) finds its vCPU threads.
    #[serde(default)]
    pub qmp: Option<PathBuf>,
    /// The VM's QEMU pidfile (QEMU `-pidfile PATH`; libvirt's
    /// `/run/libvirt/qemu/<domain>.pid`). The process serving `qmp` must be
    /// the one it names. Without it, that process's command line must name
    /// the `qmp` socket. Either way only that process's threads are moved
    /// (see `vadapt_host::vm_process`).
    #[serde(default)]
    pub qemu_pidfile: Option<PathBuf>,
    /// The VM's guest agent socket (QEMU `-chardev socket,path=PATH,...`
    /// with a `virtserialport` named `org.qemu.guest_agent.0`), through
    /// which the core manager sets its online vCPUs and active queue pairs
    /// (vSPACE-Guest); absent: host side only.
    #[serde(default)]
    pub qga: Option<PathBuf>,
    /// The guest's interface behind this port, for `ethtool -L` through
    /// the guest agent; default `eth0`.
    #[serde(default)]
    pub guest_iface: Option<String>,
    /// `lc` (latency-critical, default) or `be` (best-effort: vSPACE-R lends
    /// it idle cores and pauses it through QMP when there are none).
    #[serde(default)]
    pub role: VmRole,
    /// The port's MTU, bytes of IP packet, [`MIN_MTU`]..=[`MAX_MTU`]:
    /// offered to the guest as `VIRTIO_NET_F_MTU` with the `mtu` field of
    /// the config space, and the largest frame the port takes from its
    /// guest or delivers to it is this plus 18 (Ethernet header and one
    /// VLAN tag). Absent: nothing offered, 1500
    /// ([`crate::net::DEFAULT_MTU`]).
    #[serde(default)]
    pub mtu: Option<u16>,
    /// Port security (`port_security=on|off`; default on): the port owns
    /// its `mac` and `allowed_macs`, which are static in the switch from
    /// the port's creation (no other port takes them, whatever it sends),
    /// and a frame from the guest with any other source is dropped
    /// (`spoofed_src`). Without `mac` and `allowed_macs` the port owns
    /// nothing and has no security. Off: the guest may send from any
    /// address, and the switch learns what it sends from (within
    /// `max_learned`).
    #[serde(default = "yes")]
    pub port_security: bool,
    /// More addresses the guest may send from besides `mac` (containers or
    /// VRRP in the guest), at most [`MAX_ALLOWED_MACS`]: with port
    /// security the port owns them as it owns `mac`. With them and no
    /// `mac`, the port has security too.
    #[serde(default)]
    pub allowed_macs: Vec<Mac>,
    /// IPv4 and IPv6 prefixes the guest may send from (a bare address is
    /// its host prefix), at most [`MAX_ALLOWED_IPS`]. Given, the port has
    /// an IP source guard: ARP, IPv4, IPv6 and Neighbor Discovery from the
    /// guest must use them as sender or source (with exceptions for DHCP,
    /// the MACs' IPv6 link-local addresses and duplicate address
    /// detection; see `crate::switch::SourceGuard`), and other frames are
    /// dropped (`spoofed_ip`). Needs port security (a `mac` or
    /// `allowed_macs`, and `port_security` on). Empty: no IP check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_ips: Vec<IpPrefix>,
    /// Most addresses the switch learns from this port's guest at once
    /// (1..=[`super::MAX_MAC_TABLE_SIZE`]); default: the daemon's
    /// `max_learned_per_port`. A port with security learns none: its
    /// addresses are its own, static.
    #[serde(default)]
    pub max_learned: Option<usize>,
    /// The port's VLAN (`vlan=N`, 1..=4094): an access port, whose frames
    /// are in VLAN N, untagged both ways; a tagged frame from the guest is
    /// dropped (`vlan_tagged`). Absent: VLAN 0, the untagged domain, with
    /// the same rule (see [`crate::switch::PortVlan`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
}

/// Most `allowed_macs` of one VM port: each is a static entry in the
/// switch, outside the table's bound, so their number is bounded here.
pub const MAX_ALLOWED_MACS: usize = 64;

/// Most `allowed_ips` of one VM port: each frame of a guarded port is
/// checked against all of them, so their number is bounded here.
pub const MAX_ALLOWED_IPS: usize = 64;

/// Smallest `mtu` a port takes: IPv4's minimum (RFC 791), as Linux's `ETH_MIN_MTU`.
pub const MIN_MTU: u16 = 68;
/// Largest `mtu` a port takes: the most the 16-bit config-space field
/// holds, as Linux's virtio-net `MAX_MTU`. Its frames (65 553 bytes) are
/// carried as GSO frames are (see [`crate::frames`]).
pub const MAX_MTU: u16 = u16::MAX;

/// Checks port `port`'s `mtu`; the error names the port and the `flag`
/// (`--vm mtu` or `vm.mtu`).
pub fn check_mtu(flag: &str, port: &str, mtu: Option<u16>) -> Result<(), ConfigError> {
    match mtu {
        Some(m) if m < MIN_MTU => Err(field(
            flag,
            FieldError::PortOutOfRange {
                value: m.into(),
                port: port.to_owned(),
                lo: MIN_MTU.into(),
                hi: MAX_MTU.into(),
                unit: "",
            },
        )),
        _ => Ok(()),
    }
}

/// Checks a socket path (`flag` is `--vm socket`, `vm.socket` or
/// `control`): absolute, and short enough for a Unix socket address
/// ([`MAX_PATH_BYTES`]). A relative path would resolve against the daemon's
/// working directory (`/` under systemd), not the config file's folder nor
/// the `vadapt add-port` caller's, so it is refused rather than guessed at.
/// The error names `port` when there is one, and shows the path escaped.
pub fn check_socket_path(flag: &str, port: Option<&str>, path: &Path) -> Result<(), ConfigError> {
    let whose = port.map(|p| format!(" for port `{p}`")).unwrap_or_default();
    let shown = PeerText::from_path(path);
    if path.as_os_str().is_empty() {
        return Err(field(flag, FieldError::EmptyPath { whose }));
    }
    if !path.is_absolute() {
        return Err(field(flag, FieldError::RelativePath { path: shown, whose }));
    }
    let len = path.as_os_str().len();
    if len > MAX_PATH_BYTES {
        return Err(field(
            flag,
            FieldError::PathTooLong {
                path: shown,
                whose,
                len,
                max: MAX_PATH_BYTES,
            },
        ));
    }
    Ok(())
}

fn one() -> u16 {
    1
}

fn yes() -> bool {
    true
}

impl VmPortConfig {
    /// Port `name` on `socket` with every other field at its default (as a
    /// config file that gives only `name` and `socket`): server mode, one
    /// queue pair, the daemon's policy, sealed memory only, no QMP or guest
    /// agent, latency-critical.
    pub fn new(name: impl Into<String>, socket: impl Into<PathBuf>) -> Self {
        VmPortConfig {
            name: name.into(),
            socket: socket.into(),
            mode: SocketMode::default(),
            queues: one(),
            mac: None,
            policy: None,
            limits: PortLimits::NONE,
            packed: true,
            rss: true,
            unsealed_memory: UnsealedMemory::default(),
            qmp: None,
            qemu_pidfile: None,
            qga: None,
            guest_iface: None,
            role: VmRole::default(),
            mtu: None,
            port_security: true,
            allowed_macs: Vec::new(),
            allowed_ips: Vec::new(),
            max_learned: None,
            vlan: None,
        }
    }

    /// The addresses the port owns (see
    /// [`port_security`](Self::port_security)): `mac` and `allowed_macs`,
    /// sorted, each once; none with port security off.
    pub fn owned_macs(&self) -> Vec<Mac> {
        if !self.port_security {
            return Vec::new();
        }
        let mut v: Vec<Mac> = self.mac.iter().chain(&self.allowed_macs).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// `allowed_macs=` of a `--vm` spec: addresses separated by `:`, as
/// `--uplink cpus=A:B` separates CPUs (`,` separates the spec's keys). An
/// address in the list may be written with `-`
/// (`02-00-00-00-00-b1:02-00-00-00-00-b2`) or with `:`, in which case the
/// list is read six bytes at a time (`02:00:00:00:00:b1:02:00:00:00:00:b2`).
pub fn parse_mac_list(v: &str) -> Result<Vec<Mac>, ValueError> {
    let bad = || ValueError::MacList(v.to_owned());
    let parts: Vec<&str> = v.split(':').collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < parts.len() {
        let one = if parts[i].contains('-') {
            i += 1;
            parts[i - 1].to_string()
        } else {
            let bytes = parts.get(i..i + 6).ok_or_else(bad)?;
            if bytes.iter().any(|b| b.contains('-')) {
                return Err(bad());
            }
            i += 6;
            bytes.join(":")
        };
        out.push(one.parse::<Mac>().map_err(|_| bad())?);
    }
    Ok(out)
}

/// `allowed_ips=` of a `--vm` spec: prefixes separated by `+`
/// (`10.0.0.5/32+fd00::5`), as `,` separates the spec's keys and IPv6
/// addresses hold `:`. A bare address is its host prefix.
pub fn parse_prefix_list(v: &str) -> Result<Vec<IpPrefix>, ValueError> {
    v.split('+')
        .map(|p| p.parse::<IpPrefix>().map_err(ValueError::from))
        .collect()
}

/// Which end of a VM port's vhost-user socket vadapt is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SocketMode {
    /// vadapt listens on the socket (QEMU's `-chardev socket,path=..`).
    #[default]
    Server,
    /// vadapt connects to the frontend's socket (QEMU's
    /// `-chardev socket,path=..,server=on,wait=off`), reconnecting with backoff.
    Client,
}

impl std::str::FromStr for SocketMode {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        match s {
            "server" => Ok(SocketMode::Server),
            "client" => Ok(SocketMode::Client),
            _ => Err(ValueError::expected(s, "`server` or `client`")),
        }
    }
}

impl std::fmt::Display for SocketMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SocketMode::Server => "server",
            SocketMode::Client => "client",
        })
    }
}

/// Whether a port maps guest-memory files not sealed against shrinking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnsealedMemory {
    /// Refuse them (the default): a frontend can then never shrink mapped memory.
    #[default]
    Refuse,
    /// Map them, and survive a shrink (the port is reset).
    Accept,
}

impl std::str::FromStr for UnsealedMemory {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        match s {
            "refuse" => Ok(UnsealedMemory::Refuse),
            "accept" => Ok(UnsealedMemory::Accept),
            _ => Err(ValueError::expected(s, "`refuse` or `accept`")),
        }
    }
}

/// Parse a `--vm name=vm1,socket=/run/vadapt/vm1.sock,queues=2,mac=..,policy=..` spec.
pub fn parse_vm_spec(spec: &str) -> Result<VmPortConfig, ConfigError> {
    let mut name = None;
    let mut socket = None;
    let mut queues = 1u16;
    let mut mac = None;
    let mut policy = None;
    let mut limits = PortLimits::NONE;
    let mut unsealed_memory = UnsealedMemory::default();
    let mut packed = true;
    let mut rss = true;
    let mut mode = SocketMode::default();
    let mut qmp = None;
    let mut qemu_pidfile = None;
    let mut qga = None;
    let mut guest_iface = None;
    let mut role = VmRole::default();
    let mut mtu = None;
    let mut port_security = true;
    let mut allowed_macs = Vec::new();
    let mut allowed_ips = Vec::new();
    let mut max_learned = None;
    let mut vlan = None;
    for kv in spec.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| field("--vm", FieldError::NotKeyValue(kv.to_owned())))?;
        match k {
            "name" => name = Some(v.to_string()),
            "socket" => socket = Some(PathBuf::from(v)),
            "queues" => {
                queues = v
                    .parse()
                    .map_err(|_| field("--vm queues", FieldError::NotANumber(v.to_owned())))?
            }
            "mac" => {
                mac = Some(
                    v.parse()
                        .map_err(|e: vadapt_wire::MacParseError| field("--vm mac", e.into()))?,
                )
            }
            "policy" => {
                policy = Some(
                    v.parse::<PolicyConfig>()
                        .map_err(|e| field("--vm policy", e.into()))?,
                )
            }
            "packed" => {
                packed = match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(field("--vm packed", FieldError::NotOnOff(v.to_owned()))),
                }
            }
            "rss" => {
                rss = match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(field("--vm rss", FieldError::NotOnOff(v.to_owned()))),
                }
            }
            "unsealed_memory" => {
                unsealed_memory = v
                    .parse()
                    .map_err(|e: ValueError| field("--vm unsealed_memory", e.into()))?
            }
            "mode" => {
                mode = v
                    .parse()
                    .map_err(|e: ValueError| field("--vm mode", e.into()))?
            }
            "qmp" => qmp = Some(PathBuf::from(v)),
            "qemu_pidfile" => qemu_pidfile = Some(PathBuf::from(v)),
            "qga" => qga = Some(PathBuf::from(v)),
            "guest_iface" => guest_iface = Some(v.to_string()),
            "role" => {
                role = v
                    .parse()
                    .map_err(|e: ValueError| field("--vm role", e.into()))?
            }
            "mtu" => {
                mtu = Some(v.parse::<u16>().map_err(|_| {
                    field(
                        "--vm mtu",
                        FieldError::NotANumberIn {
                            value: v.to_owned(),
                            lo: MIN_MTU.into(),
                            hi: MAX_MTU.into(),
                        },
                    )
                })?)
            }
            "port_security" => {
                port_security = match v {
                    "on" => true,
                    "off" => false,
                    _ => {
                        return Err(field(
                            "--vm port_security",
                            FieldError::NotOnOff(v.to_owned()),
                        ))
                    }
                }
            }
            "allowed_macs" => {
                allowed_macs =
                    parse_mac_list(v).map_err(|e| field("--vm allowed_macs", e.into()))?
            }
            "allowed_ips" => {
                allowed_ips =
                    parse_prefix_list(v).map_err(|e| field("--vm allowed_ips", e.into()))?
            }
            "max_learned" => {
                max_learned = Some(v.parse::<usize>().map_err(|_| {
                    field("--vm max_learned", FieldError::NotANumber(v.to_owned()))
                })?)
            }
            "vlan" => vlan = Some(parse_vid("--vm vlan", v)?),
            k if limits.set_key("--vm", k, v)? => {}
            other => {
                return Err(field(
                    "--vm",
                    FieldError::UnknownKey {
                        key: other.to_owned(),
                        known: format!(
                            "name, socket, mode, queues, mac, policy, packed, rss, unsealed_memory, qmp, qemu_pidfile, qga, guest_iface, role, mtu, port_security, allowed_macs, allowed_ips, max_learned, vlan, {}",
                            PortLimits::KEYS.join(", ")
                        ),
                    },
                ))
            }
        }
    }
    let name = name.ok_or_else(|| field("--vm name", FieldError::Missing))?;
    let socket = socket.ok_or_else(|| field("--vm socket", FieldError::Missing))?;
    check_socket_path("--vm socket", Some(&name), &socket)?;
    if !(1..=MAX_QUEUE_PAIRS).contains(&queues) {
        return Err(field(
            "--vm queues",
            FieldError::OutOfRange {
                value: queues.into(),
                lo: 1,
                hi: MAX_QUEUE_PAIRS.into(),
                unit: "",
            },
        ));
    }
    check_mtu("--vm mtu", &name, mtu)?;
    limits.check("--vm ", &name, mtu)?;
    Ok(VmPortConfig {
        name,
        socket,
        mode,
        queues,
        mac,
        policy,
        limits,
        packed,
        rss,
        unsealed_memory,
        qmp,
        qemu_pidfile,
        qga,
        guest_iface,
        role,
        mtu,
        port_security,
        allowed_macs,
        allowed_ips,
        max_learned,
        vlan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_modes_parse_and_print() {
        for m in [SocketMode::Server, SocketMode::Client] {
            assert_eq!(m.to_string().parse::<SocketMode>(), Ok(m));
        }
        assert!("both"
            .parse::<SocketMode>()
            .unwrap_err()
            .to_string()
            .contains("server"));
    }

    #[test]
    fn rss_is_on_unless_the_spec_says_off() {
        assert!(parse_vm_spec("name=a,socket=/s").unwrap().rss);
        assert!(!parse_vm_spec("name=a,socket=/s,rss=off").unwrap().rss);
        assert!(parse_vm_spec("name=a,socket=/s,rss=on").unwrap().rss);
        let e = parse_vm_spec("name=a,socket=/s,rss=yes").unwrap_err();
        assert!(e.to_string().contains("--vm rss"), "{e}");
    }

    #[test]
    fn port_security_keys_parse() {
        let v = parse_vm_spec("name=a,socket=/s,mac=02:00:00:00:00:a1").unwrap();
        assert!(v.port_security && v.allowed_macs.is_empty() && v.max_learned.is_none());
        assert_eq!(v.owned_macs(), vec![Mac([2, 0, 0, 0, 0, 0xa1])]);
        let v = parse_vm_spec(
            "name=a,socket=/s,mac=02:00:00:00:00:a1,allowed_macs=02-00-00-00-00-b2:02-00-00-00-00-b1,max_learned=8",
        )
        .unwrap();
        let (a1, b1, b2) = (
            Mac([2, 0, 0, 0, 0, 0xa1]),
            Mac([2, 0, 0, 0, 0, 0xb1]),
            Mac([2, 0, 0, 0, 0, 0xb2]),
        );
        assert_eq!(v.allowed_macs, vec![b2, b1]);
        assert_eq!(v.owned_macs(), vec![a1, b1, b2]);
        assert_eq!(v.max_learned, Some(8));
        let v = parse_vm_spec("name=a,socket=/s,mac=02:00:00:00:00:a1,port_security=off").unwrap();
        assert!(!v.port_security && v.owned_macs().is_empty());
        for bad in [
            "port_security=yes",
            "max_learned=many",
            "allowed_macs=zz",
            "allowed_ips=10.0.0.5/24",
            "allowed_ips=10.0.0.5;fd00::1",
        ] {
            let e = parse_vm_spec(&format!("name=a,socket=/s,{bad}"))
                .unwrap_err()
                .to_string();
            let key = bad.split('=').next().unwrap();
            assert!(e.contains(&format!("--vm {key}")), "{bad}: {e}");
        }
    }

    #[test]
    fn allowed_ips_are_separated_by_plus() {
        let v = parse_vm_spec(
            "name=a,socket=/s,mac=02:00:00:00:00:a1,allowed_ips=10.0.0.5/32+fd00::5+10.1.0.0/24",
        )
        .unwrap();
        let got: Vec<String> = v.allowed_ips.iter().map(|p| p.to_string()).collect();
        assert_eq!(got, ["10.0.0.5/32", "fd00::5/128", "10.1.0.0/24"]);
        let e = parse_prefix_list("10.0.0.5+fd00::/129")
            .unwrap_err()
            .to_string();
        assert!(e.contains("0..=128"), "{e}");
    }

    #[test]
    fn a_mac_list_is_separated_by_colons_each_written_either_way() {
        let (b1, b2) = (Mac([2, 0, 0, 0, 0, 0xb1]), Mac([2, 0, 0, 0, 0, 0xb2]));
        assert_eq!(parse_mac_list("02:00:00:00:00:b1"), Ok(vec![b1]));
        assert_eq!(parse_mac_list("02-00-00-00-00-b1"), Ok(vec![b1]));
        assert_eq!(
            parse_mac_list("02:00:00:00:00:b1:02:00:00:00:00:b2"),
            Ok(vec![b1, b2])
        );
        assert_eq!(
            parse_mac_list("02-00-00-00-00-b1:02:00:00:00:00:b2"),
            Ok(vec![b1, b2])
        );
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:b1:02",
            "02:00:00:00:00-b1",
            "zz:00:00:00:00:01",
        ] {
            assert!(parse_mac_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mtu_parses_and_is_checked_with_the_port_named() {
        assert_eq!(parse_vm_spec("name=a,socket=/s").unwrap().mtu, None);
        let v = parse_vm_spec("name=a,socket=/s,mtu=9000").unwrap();
        assert_eq!(v.mtu, Some(9000));
        assert_eq!(
            parse_vm_spec("name=a,socket=/s,mtu=68").unwrap().mtu,
            Some(68)
        );
        assert_eq!(
            parse_vm_spec("name=a,socket=/s,mtu=65535").unwrap().mtu,
            Some(65535)
        );
        for bad in ["67", "0", "65536", "-1", "jumbo"] {
            let e = parse_vm_spec(&format!("name=vmx,socket=/s,mtu={bad}"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("--vm mtu") && e.contains("68..=65535"),
                "{bad}: {e}"
            );
        }
        let e = parse_vm_spec("name=vmx,socket=/s,mtu=67")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`vmx`"), "names the port: {e}");
    }
}
