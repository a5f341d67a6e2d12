//! Daemon configuration: the TOML file and the `--vm name=..,socket=..` specs,
//! with validation whose errors name the offending field.
//!
//! ```toml
//! control = "/run/vadapt/control.sock"
//! metrics = "127.0.0.1:9900"
//! cpus = [1]
//!
//! [policy]            # default for every VM port
//! kind = "netap"
//! round_ms = 1000
//!
//! [[vm]]
//! name = "vm1"
//! socket = "/run/vadapt/vm1.sock"
//! queues = 2
//! policy = { kind = "eekbp" }
//! mac = "52:54:00:00:00:01"  # the port owns it: no other source (port security)
//! allowed_macs = ["52:54:00:00:00:11"]
//! allowed_ips = ["10.0.0.5", "fd00::5/128"]  # IP source guard (ARP, IP, ND)
//!
//! [[vm]]              # QEMU listens: -chardev socket,path=..,server=on,wait=off
//! name = "vm2"
//! socket = "/run/vadapt/vm2.sock"
//! mode = "client"
//!
//! [[sink]]
//! name = "sink0"
//!
//! [[echo]]
//! name = "echo0"
//! ```

pub mod cores;
mod error;
mod host_port;
mod port_limits;
mod port_spec;
mod uplink_port;
mod value_error;
mod vlan_keys;
mod vm_port;

use error::field;
pub use error::{ConfigError, FieldError};
pub use host_port::{parse_local_spec, parse_tap_spec, LocalPortConfig, TapPortConfig};
pub use port_limits::{PortLimits, RateLimit, DEFAULT_BURST_KB, DEFAULT_KPKTS_BURST};
pub use port_spec::{HostPortSpec, PortSpec, VmOrHost};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
pub use uplink_port::{parse_uplink_spec, UplinkPortConfig, XskMode, MAX_UPLINK_QUEUES};
use vadapt_policy::PolicyConfig;
use vadapt_qemu::peer_text::PeerText;
use vadapt_wire::Mac;
pub use value_error::ValueError;
pub use vlan_keys::{Vid, VlanKeys, MAX_VID};
pub use vm_port::{
    parse_mac_list, parse_prefix_list, parse_vm_spec, SocketMode, UnsealedMemory, VmPortConfig,
    VmRole, MAX_ALLOWED_IPS, MAX_ALLOWED_MACS, MAX_MTU, MAX_QUEUE_PAIRS, MIN_MTU,
};

/// The whole daemon configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// VM ports.
    #[serde(default)]
    pub vm: Vec<VmPortConfig>,
    /// Sink ports (count and drop).
    #[serde(default)]
    pub sink: Vec<LocalPortConfig>,
    /// Echo ports (swap MACs, send back).
    #[serde(default)]
    pub echo: Vec<LocalPortConfig>,
    /// TAP ports.
    #[serde(default)]
    pub tap: Vec<TapPortConfig>,
    /// Uplink ports (AF_XDP on a NIC's queues).
    #[serde(default)]
    pub uplink: Vec<UplinkPortConfig>,
    /// Default policy of VM ports.
    #[serde(default = "default_policy")]
    pub policy: PolicyConfig,
    /// Control socket path (`vadapt stats`, `vadapt set-policy`).
    #[serde(default = "default_control")]
    pub control: PathBuf,
    /// Prometheus text endpoint address; off when absent.
    #[serde(default)]
    pub metrics: Option<SocketAddr>,
    /// Group given read/write access to the vhost-user sockets (mode 0660
    /// instead of 0600).
    #[serde(default)]
    pub socket_group: Option<String>,
    /// CPUs the queue workers are pinned to, round-robin; empty = not pinned.
    #[serde(default)]
    pub cpus: Vec<usize>,
    /// MAC table ageing time, seconds.
    #[serde(default = "default_ageing")]
    pub mac_ageing_s: u64,
    /// Most learned addresses in the switch's table,
    /// 1..=[`MAX_MAC_TABLE_SIZE`] (static ones, a port's own and a sink's
    /// or echo's, are not counted): past it a new source is not learned
    /// (`table_full`) and frames to it are flooded; default 8,192, OVS's
    /// `mac-table-size`.
    #[serde(default = "default_table_size")]
    pub mac_table_size: usize,
    /// Most addresses learned on one VM port at once (`port_limit`),
    /// 1..=[`MAX_MAC_TABLE_SIZE`]; a port's `max_learned` overrides it.
    /// TAP ports and uplinks, with networks behind them, are bounded by
    /// `mac_table_size` alone. Default 1,024.
    #[serde(default = "default_max_learned")]
    pub max_learned_per_port: usize,
    /// Frames queued per destination queue before drops, per queue pair.
    #[serde(default = "default_backlog")]
    pub backlog: usize,
    /// vSPACE core management (`[cores]`); off by default.
    #[serde(default)]
    pub cores: cores::CoresConfig,
    /// NetAP-ML model file for `netap-ml` policies (default: the built-in
    /// model); see [`crate::netap_ml_model`].
    #[serde(default)]
    pub netap_ml_model: Option<PathBuf>,
    /// Folder of the state file (`ports.toml`): the ports added and
    /// removed at run time, restored at start beside the file's ports
    /// (which win on a name clash); `None`: run-time ports are not kept.
    /// `vadapt serve` defaults it to `$STATE_DIRECTORY` (systemd's
    /// `StateDirectory=`), else `/var/lib/vadapt`. See
    /// `dataplane/src/daemon/port_state.rs`.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// Refuse to start when the state file cannot be used (unreadable,
    /// corrupt, a newer format) or a port in it cannot be restored, instead
    /// of moving the file aside or skipping the port (`--strict`).
    #[serde(default)]
    pub state_strict: bool,
}

/// The daemon's default policy: NetAP with the paper's constants.
pub fn default_policy() -> PolicyConfig {
    PolicyConfig::default_for(vadapt_policy::PolicyKind::Netap)
}

/// Default control socket path.
pub fn default_control() -> PathBuf {
    PathBuf::from("/run/vadapt/control.sock")
}

fn default_ageing() -> u64 {
    300
}

fn default_backlog() -> usize {
    1024
}

fn default_table_size() -> usize {
    8192
}

fn default_max_learned() -> usize {
    1024
}

/// Largest `mac_table_size` (and `max_learned_per_port`, a port's
/// `max_learned`): a million addresses, some 100 MB of table and worker
/// copies; no L2 domain a host serves needs more.
pub const MAX_MAC_TABLE_SIZE: usize = 1 << 20;

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            vm: Vec::new(),
            sink: Vec::new(),
            echo: Vec::new(),
            tap: Vec::new(),
            uplink: Vec::new(),
            policy: default_policy(),
            control: default_control(),
            metrics: None,
            socket_group: None,
            cpus: Vec::new(),
            mac_ageing_s: default_ageing(),
            mac_table_size: default_table_size(),
            max_learned_per_port: default_max_learned(),
            backlog: default_backlog(),
            cores: Default::default(),
            netap_ml_model: None,
            state_dir: None,
            state_strict: false,
        }
    }
}

impl DaemonConfig {
    /// Every port, VM ports first, each kind in its order.
    pub fn ports(&self) -> Vec<PortSpec> {
        let vms = self.vm.iter().map(|v| PortSpec::Vm(Box::new(v.clone())));
        let sinks = self.sink.iter().cloned().map(PortSpec::Sink);
        let echoes = self.echo.iter().cloned().map(PortSpec::Echo);
        let taps = self.tap.iter().cloned().map(PortSpec::Tap);
        let uplinks = self.uplink.iter().cloned().map(PortSpec::Uplink);
        vms.chain(sinks)
            .chain(echoes)
            .chain(taps)
            .chain(uplinks)
            .collect()
    }

    /// Add `port` to its kind's list.
    pub fn add_port(&mut self, port: PortSpec) {
        match port {
            PortSpec::Vm(v) => self.vm.push(*v),
            PortSpec::Sink(l) => self.sink.push(l),
            PortSpec::Echo(l) => self.echo.push(l),
            PortSpec::Tap(t) => self.tap.push(t),
            PortSpec::Uplink(u) => self.uplink.push(u),
        }
    }

    /// Remove the port named `name`, of whatever kind; whether there was one.
    pub fn remove_port(&mut self, name: &str) -> bool {
        let count =
            |c: &Self| c.vm.len() + c.sink.len() + c.echo.len() + c.tap.len() + c.uplink.len();
        let before = count(self);
        self.vm.retain(|v| v.name != name);
        self.sink.retain(|l| l.name != name);
        self.echo.retain(|l| l.name != name);
        self.tap.retain(|t| t.name != name);
        self.uplink.retain(|u| u.name != name);
        count(self) != before
    }

    /// The same settings, with no port.
    pub fn without_ports(&self) -> Self {
        DaemonConfig {
            vm: Vec::new(),
            sink: Vec::new(),
            echo: Vec::new(),
            tap: Vec::new(),
            uplink: Vec::new(),
            ..self.clone()
        }
    }

    /// Read and validate a TOML config file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let cfg = Self::read_file(path)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Read a TOML config file without validating it, for a caller that
    /// adds to it first (`vadapt serve` adds the command line's ports: a
    /// file with only `[policy]` is fine once `--vm` is given) and then
    /// calls [`validate`](Self::validate).
    pub fn read_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
            path: path.to_owned(),
            source,
        })?;
        Self::parse_toml(&text, path)
    }

    /// Parse and validate TOML text (`path` is only used in messages).
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let cfg = Self::parse_toml(text, path)?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn parse_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::ParseFile {
            path: path.to_owned(),
            message: e.to_string().trim_end().replace('\n', " "),
        })
    }

    /// Check every field; the error names the first bad one. No ports at
    /// all is valid: a daemon may start empty and have its ports added at
    /// run time (`vadapt add-port`, the libvirt hook), as a running one may
    /// lose its last port (`vadapt del-port`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_ports_and_settings()
    }

    /// Every check of the ports and settings: what a running daemon checks
    /// a port to add against, and a whole configuration at start-up.
    pub fn validate_ports_and_settings(&self) -> Result<(), ConfigError> {
        let mut names = HashSet::new();
        let all_names = self
            .vm
            .iter()
            .map(|v| ("vm", &v.name))
            .chain(self.sink.iter().map(|p| ("sink", &p.name)))
            .chain(self.echo.iter().map(|p| ("echo", &p.name)))
            .chain(self.tap.iter().map(|p| ("tap", &p.name)))
            .chain(self.uplink.iter().map(|p| ("uplink", &p.name)));
        for (kind, name) in all_names {
            if name.is_empty() || name.len() > 32 || !name.chars().all(is_name_char) {
                return Err(field(
                    format!("{kind}.name"),
                    FieldError::BadPortName(name.clone()),
                ));
            }
            if !names.insert(name.clone()) {
                return Err(field(
                    format!("{kind}.name"),
                    FieldError::NameUsedTwice(name.clone()),
                ));
            }
        }
        vm_port::check_socket_path("control", None, &self.control)?;
        let mut sockets = HashSet::new();
        let mut macs = HashSet::new();
        for vm in &self.vm {
            if !(1..=MAX_QUEUE_PAIRS).contains(&vm.queues) {
                return Err(field(
                    "vm.queues",
                    FieldError::PortOutOfRange {
                        value: vm.queues.into(),
                        port: vm.name.clone(),
                        lo: 1,
                        hi: MAX_QUEUE_PAIRS.into(),
                        unit: "",
                    },
                ));
            }
            vm_port::check_mtu("vm.mtu", &vm.name, vm.mtu)?;
            vm.limits.check("vm.limits.", &vm.name, vm.mtu)?;
            vm_port::check_socket_path("vm.socket", Some(&vm.name), &vm.socket)?;
            if !sockets.insert(vm.socket.clone()) {
                return Err(field(
                    "vm.socket",
                    FieldError::SocketUsedTwice(PeerText::from_path(&vm.socket)),
                ));
            }
            if let Some(p) = &vm.policy {
                p.validate()
                    .map_err(|e| field("vm.policy", FieldError::of_port(&vm.name, e.into())))?;
            }
            if vm.allowed_macs.len() > MAX_ALLOWED_MACS {
                return Err(field(
                    "vm.allowed_macs",
                    FieldError::TooMany {
                        count: vm.allowed_macs.len(),
                        items: "addresses",
                        port: vm.name.clone(),
                        max: MAX_ALLOWED_MACS,
                    },
                ));
            }
            if let Some(v) = vm.vlan {
                vlan_keys::parse_vid("vm.vlan", &v.to_string()).map_err(|e| match e {
                    ConfigError::Field { reason, .. } => {
                        field("vm.vlan", FieldError::of_port(&vm.name, *reason))
                    }
                    e => e,
                })?;
            }
            if vm.allowed_ips.len() > MAX_ALLOWED_IPS {
                return Err(field(
                    "vm.allowed_ips",
                    FieldError::TooMany {
                        count: vm.allowed_ips.len(),
                        items: "prefixes",
                        port: vm.name.clone(),
                        max: MAX_ALLOWED_IPS,
                    },
                ));
            }
            if !vm.allowed_ips.is_empty() && vm.owned_macs().is_empty() {
                return Err(field(
                    "vm.allowed_ips",
                    FieldError::AllowedIpsWithoutPortSecurity(vm.name.clone()),
                ));
            }
            if let Some(n) = vm.max_learned.filter(|&n| !table_size_ok(n)) {
                return Err(field(
                    "vm.max_learned",
                    FieldError::PortOutOfRange {
                        value: n as u64,
                        port: vm.name.clone(),
                        lo: 1,
                        hi: MAX_MAC_TABLE_SIZE as u64,
                        unit: " addresses",
                    },
                ));
            }
        }
        // Sink and echo MACs are pinned in the switch: each is unique, and
        // no VM port may claim one. Two VM ports may share a MAC: they are
        // one VM's source and destination ports while it live-migrates, and
        // a VM port's MAC is only a hint to the switch until the guest's
        // first frame (`Switch::learn_if_unknown`), so the port the guest
        // sends from is the one that gets its traffic.
        for (kind, mac) in self
            .sink
            .iter()
            .map(|p| ("sink.mac", p.mac))
            .chain(self.echo.iter().map(|p| ("echo.mac", p.mac)))
        {
            if let Some(m) = mac {
                if m.is_multicast() {
                    return Err(field(kind, FieldError::Multicast(m)));
                }
                if !macs.insert(m) {
                    return Err(field(kind, FieldError::MacUsedTwice(m)));
                }
            }
        }
        let mut owners: HashMap<Mac, Vec<&str>> = HashMap::new();
        for vm in &self.vm {
            let given = vm.mac.iter().map(|m| ("vm.mac", m));
            for (key, &m) in given.chain(vm.allowed_macs.iter().map(|m| ("vm.allowed_macs", m))) {
                if m.is_multicast() {
                    return Err(field(key, FieldError::Multicast(m)));
                }
                if macs.contains(&m) {
                    return Err(field(
                        key,
                        FieldError::MacOfLocalPort {
                            mac: m,
                            port: vm.name.clone(),
                        },
                    ));
                }
            }
            for m in vm.owned_macs() {
                owners.entry(m).or_default().push(&vm.name);
            }
        }
        // An owned address is static on its port; two ports own one only
        // while a VM migrates between them (the source port, and the
        // destination that takes the address when its guest speaks). A
        // third could be a tenant claiming another's address.
        let mut shared: Vec<_> = owners.into_iter().filter(|(_, o)| o.len() > 2).collect();
        shared.sort_unstable();
        if let Some((m, ports)) = shared.first() {
            return Err(field(
                "vm.mac",
                FieldError::MacSharedBy {
                    mac: *m,
                    ports: ports.iter().map(|p| p.to_string()).collect(),
                },
            ));
        }
        for t in &self.tap {
            if t.name.len() > 15 {
                return Err(field(
                    "tap.name",
                    FieldError::TapNameTooLong(t.name.clone()),
                ));
            }
            vm_port::check_mtu("tap.mtu", &t.name, t.mtu)?;
            t.vlan_keys().check("tap.", &t.name)?;
            t.limits.check("tap.limits.", &t.name, t.mtu)?;
        }
        let mut ifaces = HashSet::new();
        for u in &self.uplink {
            u.validate()?;
            if !ifaces.insert(u.iface.as_str()) {
                return Err(field(
                    "uplink.iface",
                    FieldError::IfaceUsedTwice(u.iface.clone()),
                ));
            }
        }
        self.policy
            .validate()
            .map_err(|e| field("policy", e.into()))?;
        if self.backlog == 0 || self.backlog > 65536 {
            return Err(field("backlog", FieldError::MustBe("1..=65536 frames")));
        }
        if self.mac_ageing_s == 0 {
            return Err(field(
                "mac_ageing_s",
                FieldError::MustBe("at least 1 second"),
            ));
        }
        check_table_size("mac_table_size", self.mac_table_size)?;
        check_table_size("max_learned_per_port", self.max_learned_per_port)?;
        if !self.cpus.is_empty() {
            // The daemon's own affinity: CPUs the machine lacks, or that a
            // cpuset or `taskset` excluded, would fail later in the worker.
            let allowed = vadapt_host::cputime::current_affinity()
                .map_err(|e| field("cpus", FieldError::Affinity(e)))?;
            check_cpus(&self.cpus, &allowed)?;
        }
        self.cores
            .validate()
            .map_err(|e| field("cores", e.into()))?;
        if !self.cores.cpus.is_empty() && !self.cpus.is_empty() {
            return Err(field("cpus", FieldError::CpusWithCoreManager));
        }
        if self.cores.mode != vadapt_policy::vspace::VspaceMode::Off {
            let allowed = vadapt_host::cputime::current_affinity()
                .map_err(|e| field("cores.cpus", FieldError::Affinity(e)))?;
            check_cpus(&self.cores.cpus, &allowed).map_err(|e| match e {
                ConfigError::Field { reason, .. } => field("cores.cpus", *reason),
                e => e,
            })?;
        }
        Ok(())
    }
}

/// Whether `n` is a table size or learning bound: 1..=[`MAX_MAC_TABLE_SIZE`].
fn table_size_ok(n: usize) -> bool {
    (1..=MAX_MAC_TABLE_SIZE).contains(&n)
}

/// Daemon setting `key`, a table size or learning bound `n`, is
/// [`table_size_ok`].
fn check_table_size(key: &str, n: usize) -> Result<(), ConfigError> {
    if table_size_ok(n) {
        Ok(())
    } else {
        Err(field(
            key,
            FieldError::OutOfRange {
                value: n as u64,
                lo: 1,
                hi: MAX_MAC_TABLE_SIZE as u64,
                unit: " addresses",
            },
        ))
    }
}

/// Every CPU of `cpus` must be one of `allowed` (the daemon's affinity).
fn check_cpus(cpus: &[usize], allowed: &[usize]) -> Result<(), ConfigError> {
    for &c in cpus {
        if !allowed.contains(&c) {
            return Err(field(
                "cpus",
                FieldError::CpuNotAllowed {
                    cpu: c,
                    allowed: cpu_list(allowed),
                },
            ));
        }
    }
    Ok(())
}

/// `0-3,6,8-9` for `[0, 1, 2, 3, 6, 8, 9]` (the kernel's cpulist format).
fn cpu_list(cpus: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(",")
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_gives_what_a_config_file_with_only_name_and_socket_gives() {
        let text = "[[vm]]\nname = \"a\"\nsocket = \"/tmp/a.sock\"\n";
        let c = DaemonConfig::from_toml(text, Path::new("x.toml")).unwrap();
        assert_eq!(c.vm, vec![VmPortConfig::new("a", "/tmp/a.sock")]);
    }

    fn base() -> DaemonConfig {
        DaemonConfig {
            vm: vec![parse_vm_spec("name=vm1,socket=/tmp/a.sock").unwrap()],
            ..DaemonConfig::default()
        }
    }

    #[test]
    fn relative_and_overlong_socket_paths_are_refused() {
        // A relative path meant the daemon's working directory (`/` under
        // systemd), whatever folder the config file or the caller was in.
        let e = parse_vm_spec("name=vx,socket=vx.sock")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--vm socket") && e.contains("must be absolute") && e.contains("`vx`"),
            "{e}"
        );
        let text = "[[vm]]\nname = \"a\"\nsocket = \"run/a.sock\"\n";
        let e = DaemonConfig::from_toml(text, Path::new("/etc/vadapt/vadapt.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("vm.socket") && e.contains("must be absolute"),
            "{e}"
        );
        let mut c = base();
        c.control = "control.sock".into();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("`control`") && e.contains("must be absolute"),
            "{e}"
        );
        // sun_path holds 107 bytes and a NUL.
        let long = format!("/{}", "s".repeat(crate::socket_file::MAX_PATH_BYTES));
        let e = parse_vm_spec(&format!("name=vx,socket={long}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("108 bytes") && e.contains("at most 107"), "{e}");
        let fits = format!("/{}", "s".repeat(crate::socket_file::MAX_PATH_BYTES - 1));
        assert!(parse_vm_spec(&format!("name=vx,socket={fits}")).is_ok());
        // A newline in the path does not reach the message as one.
        let e = parse_vm_spec("name=vx,socket=a\nERROR forged")
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n') && e.contains("a\\nERROR forged"), "{e}");
    }

    #[test]
    fn cpus_outside_the_affinity_are_refused_with_the_allowed_list() {
        assert!(check_cpus(&[0, 1], &[0, 1]).is_ok());
        let e = check_cpus(&[99], &[0, 1]).unwrap_err().to_string();
        assert!(
            e.contains("cpus") && e.contains("CPU 99") && e.contains("allows 0-1"),
            "{e}"
        );
        let e = check_cpus(&[2], &[0, 1, 3, 5, 6, 7])
            .unwrap_err()
            .to_string();
        assert!(e.contains("allows 0-1,3,5-7"), "{e}");
        // The real affinity: CPU 0..=available is what this test process has
        // unless a cpuset narrowed it; 99 is past a 2-core machine either way.
        let mut cfg = DaemonConfig::default();
        cfg.vm
            .push(parse_vm_spec("name=a,socket=/tmp/x.sock").unwrap());
        cfg.cpus = vec![libc::CPU_SETSIZE as usize + 1];
        assert!(cfg.validate().unwrap_err().to_string().contains("cpus"));
    }

    #[test]
    fn vm_spec_parses_all_keys() {
        let v = parse_vm_spec(
            "name=vm1,socket=/tmp/x.sock,queues=4,mac=52:54:00:00:00:01,policy=eekbp",
        )
        .unwrap();
        assert_eq!(v.name, "vm1");
        assert_eq!(v.queues, 4);
        assert_eq!(v.mac.unwrap().to_string(), "52:54:00:00:00:01");
        assert_eq!(v.policy.unwrap().kind(), vadapt_policy::PolicyKind::Eekbp);
    }

    #[test]
    fn vm_spec_errors_name_the_field() {
        let e = parse_vm_spec("name=vm1,socket=/x,queues=0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("queues"), "{e}");
        let e = parse_vm_spec("name=vm1,socket=/x,colour=red")
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
        let e = parse_vm_spec("socket=/x").unwrap_err().to_string();
        assert!(e.contains("name"), "{e}");
        let e = parse_vm_spec("name=a,socket=/x,policy=fast")
            .unwrap_err()
            .to_string();
        assert!(e.contains("policy") && e.contains("fast"), "{e}");
        let e = parse_vm_spec("name=a,socket=/x,mac=zz")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mac"), "{e}");
    }

    #[test]
    fn toml_unknown_key_names_key_and_line() {
        let text = "[[vm]]\nname = \"vm1\"\nsocket = \"/tmp/a\"\nqueuez = 2\n";
        let e = DaemonConfig::from_toml(text, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("queuez") && e.contains("line 4"), "{e}");
    }

    #[test]
    fn toml_full_example_parses() {
        let text = r#"
            control = "/tmp/c.sock"
            metrics = "127.0.0.1:9900"
            cpus = [1]
            [policy]
            kind = "netap"
            round_ms = 500
            [[vm]]
            name = "vm1"
            socket = "/tmp/vm1.sock"
            queues = 2
            policy = { kind = "eekbp" }
            [[sink]]
            name = "sink0"
            [[echo]]
            name = "echo0"
            mac = "02:00:00:00:00:01"
        "#;
        let c = DaemonConfig::from_toml(text, Path::new("x.toml")).unwrap();
        assert_eq!(c.vm[0].queues, 2);
        assert_eq!(c.sink[0].name, "sink0");
        match c.policy {
            PolicyConfig::Netap(p) => assert_eq!(p.round_ms, 500),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn duplicate_names_and_sockets_are_rejected() {
        let mut c = base();
        c.sink.push(parse_local_spec("--sink", "vm1").unwrap());
        assert!(c.validate().unwrap_err().to_string().contains("vm1"));
        let mut c = base();
        c.vm.push(parse_vm_spec("name=vm2,socket=/tmp/a.sock").unwrap());
        assert!(c.validate().unwrap_err().to_string().contains("vm.socket"));
    }

    #[test]
    fn vm_ports_may_share_a_mac_but_not_with_a_sink_or_echo() {
        let mac = "52:54:00:00:00:01";
        let mut c = base();
        c.vm = vec![
            parse_vm_spec(&format!("name=src,socket=/tmp/a.sock,mac={mac}")).unwrap(),
            parse_vm_spec(&format!("name=dst,socket=/tmp/b.sock,mac={mac}")).unwrap(),
        ];
        c.validate().expect("a migrating VM's two ports");
        c.echo
            .push(parse_local_spec("--echo", &format!("e0,mac={mac}")).unwrap());
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("vm.mac") && e.contains("src"), "{e}");
        let mut c = base();
        c.sink
            .push(parse_local_spec("--sink", "s0,mac=02:00:00:00:00:09").unwrap());
        c.echo
            .push(parse_local_spec("--echo", "e0,mac=02:00:00:00:00:09").unwrap());
        assert!(c.validate().unwrap_err().to_string().contains("used twice"));
    }

    #[test]
    fn owned_addresses_are_checked_and_at_most_two_ports_own_one() {
        let mac = "52:54:00:00:00:01";
        let vm = |name: &str, extra: &str| {
            parse_vm_spec(&format!("name={name},socket=/tmp/{name}.sock,{extra}")).unwrap()
        };
        let mut c = base();
        c.vm = vec![
            vm("src", &format!("mac={mac}")),
            vm("dst", &format!("mac={mac}")),
        ];
        c.validate().expect("a migrating VM's two ports");
        c.vm.push(vm("third", &format!("allowed_macs={mac}")));
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("owned by 3 ports") && e.contains("src, dst, third"),
            "{e}"
        );
        // A third port without security owns nothing: no conflict.
        c.vm[2] = vm("third", &format!("mac={mac},port_security=off"));
        c.validate().expect("port_security=off owns nothing");
        let mut c = base();
        c.vm = vec![vm("a", "allowed_macs=01:00:5e:00:00:01")];
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("vm.allowed_macs") && e.contains("multicast"),
            "{e}"
        );
        let mut c = base();
        c.echo
            .push(parse_local_spec("--echo", "e0,mac=02:00:00:00:00:09").unwrap());
        c.vm = vec![vm("a", "allowed_macs=02:00:00:00:00:09")];
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("vm.allowed_macs") && e.contains("echo"), "{e}");
        let mut c = base();
        c.vm[0].allowed_macs = (0..=MAX_ALLOWED_MACS as u8)
            .map(|i| Mac([2, 0, 0, 0, 1, i]))
            .collect();
        assert!(c.validate().unwrap_err().to_string().contains("at most 64"));
    }

    #[test]
    fn allowed_ips_need_port_security_and_are_bounded() {
        let text = "[[vm]]\nname=\"a\"\nsocket=\"/x\"\nmac=\"02:00:00:00:00:a1\"\nallowed_ips = [\"10.0.0.5\", \"fd00::/64\"]\n";
        let mut c = DaemonConfig::from_toml(text, Path::new("x.toml")).unwrap();
        c.validate().expect("a mac and allowed_ips");
        let got: Vec<String> = c.vm[0].allowed_ips.iter().map(|p| p.to_string()).collect();
        assert_eq!(got, ["10.0.0.5/32", "fd00::/64"]);
        let bad = text.replace("10.0.0.5", "10.0.0.5/24");
        let e = DaemonConfig::from_toml(&bad, Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("10.0.0.0/24"), "{e}");
        c.vm[0].port_security = false;
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("vm.allowed_ips") && e.contains("port security"),
            "{e}"
        );
        c.vm[0].port_security = true;
        c.vm[0].mac = None;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("no port security"));
        c.vm[0].mac = Some(Mac([2, 0, 0, 0, 0, 0xa1]));
        c.vm[0].allowed_ips = (0..=MAX_ALLOWED_IPS as u8)
            .map(|i| vadapt_wire::IpPrefix::host([10, 0, 0, i].into()))
            .collect();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("vm.allowed_ips") && e.contains("at most 64"),
            "{e}"
        );
    }

    #[test]
    fn table_bounds_come_from_toml_and_are_checked() {
        let c = DaemonConfig::default();
        assert_eq!((c.mac_table_size, c.max_learned_per_port), (8192, 1024));
        let text = "mac_table_size = 100\nmax_learned_per_port = 10\n[[vm]]\nname=\"a\"\nsocket=\"/x\"\nmax_learned = 3\nport_security = false\nallowed_macs = [\"02:00:00:00:00:b1\"]\n";
        let c = DaemonConfig::from_toml(text, Path::new("x.toml")).unwrap();
        assert_eq!((c.mac_table_size, c.max_learned_per_port), (100, 10));
        assert_eq!(c.vm[0].max_learned, Some(3));
        assert!(!c.vm[0].port_security);
        assert_eq!(c.vm[0].allowed_macs, vec![Mac([2, 0, 0, 0, 0, 0xb1])]);
        for (bad, key) in [
            ("mac_table_size = 0\n", "mac_table_size"),
            ("max_learned_per_port = 0\n", "max_learned_per_port"),
            ("mac_table_size = 2000000\n", "mac_table_size"),
            (
                "[[vm]]\nname=\"a\"\nsocket=\"/x\"\nmax_learned = 0\n",
                "vm.max_learned",
            ),
        ] {
            let e = DaemonConfig::from_toml(bad, Path::new("x.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_policy_parameter_is_named() {
        let text = "[policy]\nkind = \"netap\"\nmin_interval_us = 5000\n[[vm]]\nname=\"a\"\nsocket=\"/x\"\n";
        let e = DaemonConfig::from_toml(text, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("min_interval_us"), "{e}");
    }

    #[test]
    fn a_vm_mtu_comes_from_toml_and_is_checked_with_its_port() {
        let ok = "[[vm]]\nname=\"a\"\nsocket=\"/x\"\nmtu = 9000\n";
        let c = DaemonConfig::from_toml(ok, Path::new("x.toml")).unwrap();
        assert_eq!(c.vm[0].mtu, Some(9000));
        c.validate().unwrap();
        let e = DaemonConfig::from_toml(&ok.replace("9000", "60"), Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("vm.mtu") && e.contains("`a`") && e.contains("68"),
            "{e}"
        );
        let e = DaemonConfig::from_toml(&ok.replace("9000", "70000"), Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("mtu"), "{e}");
    }

    #[test]
    fn limits_come_flat_in_a_spec_and_as_a_table_in_toml() {
        let v = parse_vm_spec(
            "name=a,socket=/x,ingress_policing_rate=10000,ingress_policing_kpkts_rate=50,\
             storm_control_pps=100,storm_control_burst=20",
        )
        .unwrap();
        let want = PortLimits {
            ingress_policing_rate: 10_000,
            ingress_policing_kpkts_rate: 50,
            storm_control_pps: 100,
            storm_control_burst: 20,
            ..PortLimits::NONE
        };
        assert_eq!(v.limits, want);
        let text = "[[vm]]\nname=\"a\"\nsocket=\"/x\"\n[vm.limits]\ningress_policing_rate = 10000\n\
                    ingress_policing_kpkts_rate = 50\nstorm_control_pps = 100\nstorm_control_burst = 20\n";
        let c = DaemonConfig::from_toml(text, Path::new("x.toml")).unwrap();
        assert_eq!(c.vm[0].limits, want);
        // Checked with the port, in the field's spelling of each form.
        let e = parse_vm_spec("name=a,socket=/x,storm_control_burst=5")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--vm storm_control_burst") && e.contains("`a`"),
            "{e}"
        );
        let bad = text.replace("storm_control_pps = 100\n", "");
        let e = DaemonConfig::from_toml(&bad, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("vm.limits.storm_control_burst"), "{e}");
        let e = DaemonConfig::from_toml(
            &text.replace("storm_control_pps", "storm_pps"),
            Path::new("x.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("storm_pps"), "unknown key named: {e}");
        let e = parse_vm_spec("name=a,socket=/x,rate=5")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ingress_policing_rate"),
            "the known keys listed: {e}"
        );
        // No limits: nothing in the spec's JSON (add-port), equal to a port without.
        let plain = parse_vm_spec("name=a,socket=/x").unwrap();
        assert!(!serde_json::to_string(&plain).unwrap().contains("limits"));
        assert_eq!(plain, VmPortConfig::new("a", "/x"));
    }

    #[test]
    fn no_ports_is_valid() {
        // A daemon may start empty; its ports come with `vadapt add-port`.
        assert!(DaemonConfig::default().validate().is_ok());
        assert!(DaemonConfig::default().ports().is_empty());
    }
}
