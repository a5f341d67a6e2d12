//! A configuration problem, naming the field as the user wrote it.

use super::cores::CoresConfigError;
use super::value_error::ValueError;
use std::path::PathBuf;

/// A configuration problem, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}")]
    ReadFile {
        /// File path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML for this schema (message has the line).
    #[error("{path}: {message}")]
    ParseFile {
        /// File path.
        path: PathBuf,
        /// toml's message, which names the key and the line.
        message: String,
    },
    /// A field has an invalid value.
    #[error("invalid `{field}`: {reason}")]
    Field {
        /// Field as written by the user, e.g. `vm.queues` or `--vm queues`.
        field: String,
        /// Why (boxed: the reasons hold what they name, and every error
        /// that carries a `ConfigError` stays small).
        reason: Box<FieldError>,
    },
}

/// Why a field's value is refused: the reason of a [`ConfigError::Field`],
/// written after the field's name. Values are kept as the user wrote them.
#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    /// A key every spec needs is not there.
    #[error("missing")]
    Missing,
    /// A spec without its port name.
    #[error("missing port name")]
    MissingName,
    /// An `--uplink` spec without `iface=`.
    #[error("missing iface=IFACE")]
    MissingIface,
    /// A part of a spec that is not `key=value`.
    #[error("`{0}` is not key=value")]
    NotKeyValue(String),
    /// A key the spec does not take.
    #[error("unknown key `{key}` (known: {known})")]
    UnknownKey {
        /// The key as written.
        key: String,
        /// The keys the spec takes, `, `-separated.
        known: String,
    },
    /// An option the spec does not take.
    #[error("unknown option `{option}` (known: {known})")]
    UnknownOption {
        /// The option as written.
        option: String,
        /// The options the spec takes, as `mtu=, vlan=`.
        known: String,
    },
    /// Not a number.
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// Not a number in `lo..=hi`.
    #[error("`{value}` is not a number {lo}..={hi}")]
    NotANumberIn {
        /// The value as written.
        value: String,
        /// Lowest allowed.
        lo: u64,
        /// Highest allowed.
        hi: u64,
    },
    /// Not a rate limit: a number 0..=`u32::MAX` in `unit`.
    #[error("`{value}` is not a number 0..={max} ({unit})", max = u32::MAX)]
    NotALimit {
        /// The value as written.
        value: String,
        /// The key's unit, e.g. `kbps`.
        unit: &'static str,
    },
    /// Neither `on` nor `off`.
    #[error("`{0}` is not on or off")]
    NotOnOff(String),
    /// Not CPU numbers separated by `:`.
    #[error("`{0}` is not CPU numbers separated by `:`")]
    NotCpuList(String),
    /// A value the key's type refuses.
    #[error(transparent)]
    Value(#[from] ValueError),
    /// Not a MAC address.
    #[error(transparent)]
    Mac(#[from] vadapt_wire::MacParseError),
    /// Not a policy, or a policy with invalid parameters.
    #[error(transparent)]
    Policy(#[from] vadapt_policy::ConfigError),
    /// Invalid `[cores]` settings.
    #[error(transparent)]
    Cores(#[from] CoresConfigError),
    /// What is wrong with port `port`'s value.
    #[error("port `{port}`: {reason}")]
    OfPort {
        /// The port.
        port: String,
        /// Why.
        reason: Box<FieldError>,
    },
    /// A number out of `lo..=hi` (`unit` after it, e.g. ` addresses`).
    #[error("{value}: must be {lo}..={hi}{unit}")]
    OutOfRange {
        /// The value.
        value: u64,
        /// Lowest allowed.
        lo: u64,
        /// Highest allowed.
        hi: u64,
        /// Its unit, with a leading space, or empty.
        unit: &'static str,
    },
    /// A number of port `port` out of `lo..=hi` (`unit` after it).
    #[error("{value} for port `{port}`: must be {lo}..={hi}{unit}")]
    PortOutOfRange {
        /// The value.
        value: u64,
        /// The port.
        port: String,
        /// Lowest allowed.
        lo: u64,
        /// Highest allowed.
        hi: u64,
        /// Its unit, with a leading space, or empty.
        unit: &'static str,
    },
    /// A number out of `lo..=hi` (worded as `is not`).
    #[error("{value} is not {lo}..={hi}")]
    NotInRange {
        /// The value.
        value: u64,
        /// Lowest allowed.
        lo: u64,
        /// Highest allowed.
        hi: u64,
    },
    /// A setting out of its range, as the range is said (e.g. `1..=65536
    /// frames`, `at least 1 second`).
    #[error("must be {0}")]
    MustBe(&'static str),
    /// Too many items in a list of port `port`.
    #[error("{count} {items} for port `{port}`: at most {max}")]
    TooMany {
        /// How many there are.
        count: usize,
        /// What they are (`addresses`, `prefixes`).
        items: &'static str,
        /// The port.
        port: String,
        /// The most allowed.
        max: usize,
    },
    /// Not a port name.
    #[error("`{0}` must be 1-32 characters of [A-Za-z0-9_.-]")]
    BadPortName(String),
    /// Two ports of one name.
    #[error("port name `{0}` is used twice")]
    NameUsedTwice(String),
    /// Two ports on one socket.
    #[error("{0} is used by two ports")]
    SocketUsedTwice(vadapt_qemu::peer_text::PeerText),
    /// An empty socket path (`whose`: ` for port `p``, or empty).
    #[error("empty{whose}")]
    EmptyPath {
        /// ` for port `NAME``, or empty.
        whose: String,
    },
    /// A relative socket path.
    #[error("{path}{whose} is relative: a socket path must be absolute")]
    RelativePath {
        /// The path, escaped.
        path: vadapt_qemu::peer_text::PeerText,
        /// ` for port `NAME``, or empty.
        whose: String,
    },
    /// A socket path too long for a Unix socket address.
    #[error("{path}{whose} is {len} bytes: a Unix socket path holds at most {max}")]
    PathTooLong {
        /// The path, escaped.
        path: vadapt_qemu::peer_text::PeerText,
        /// ` for port `NAME``, or empty.
        whose: String,
        /// Its length, bytes.
        len: usize,
        /// The most a Unix socket address holds, bytes.
        max: usize,
    },
    /// `allowed_ips` on a port without port security.
    #[error(
        "port `{0}` has allowed_ips but no port security: they need port_security on and a \
         mac= (or allowed_macs=)"
    )]
    AllowedIpsWithoutPortSecurity(String),
    /// A multicast MAC address where a port's own is wanted.
    #[error("{0} is a multicast address")]
    Multicast(vadapt_wire::Mac),
    /// One MAC address given twice.
    #[error("{0} is used twice")]
    MacUsedTwice(vadapt_wire::Mac),
    /// A VM port's MAC address that a sink or echo port has.
    #[error("{mac} of port `{port}` is a sink or echo port's")]
    MacOfLocalPort {
        /// The address.
        mac: vadapt_wire::Mac,
        /// The VM port.
        port: String,
    },
    /// A MAC address owned by more ports than a migration has.
    #[error(
        "{mac} is owned by {} ports ({}): only a migrating VM's source and destination ports \
         may share an address (or set port_security=off on a port)",
        .ports.len(),
        .ports.join(", ")
    )]
    MacSharedBy {
        /// The address.
        mac: vadapt_wire::Mac,
        /// The ports that own it.
        ports: Vec<String>,
    },
    /// A TAP device name longer than the kernel takes.
    #[error("`{0}` is longer than 15 bytes (IFNAMSIZ)")]
    TapNameTooLong(String),
    /// Not a network interface's name.
    #[error("`{0}` is not an interface name (1-15 bytes, no `/` or spaces)")]
    NotAnInterface(String),
    /// One interface served by two uplinks.
    #[error("`{0}` is served by two uplinks")]
    IfaceUsedTwice(String),
    /// `cpus` beside a core manager that places the workers.
    #[error("leave empty when [cores] manages CPUs (the core manager places the queue workers)")]
    CpusWithCoreManager,
    /// The daemon's own CPU affinity could not be read.
    #[error("cannot read this process's CPU affinity: {0}")]
    Affinity(vadapt_host::cputime::CpuTimeError),
    /// A CPU the daemon's affinity does not allow.
    #[error("CPU {cpu} is not available to vadapt (its affinity allows {allowed})")]
    CpuNotAllowed {
        /// The CPU.
        cpu: usize,
        /// The CPUs allowed, as a cpulist (`0-3,6`).
        allowed: String,
    },
    /// Not a VLAN id.
    #[error("`{value}` is not a VLAN id 1..={max}")]
    NotAVlanId {
        /// The value as written.
        value: String,
        /// The highest VLAN id.
        max: u16,
    },
    /// A VLAN id out of range.
    #[error("{vid} is not a VLAN id 1..={max} (0 and 4095 are reserved)")]
    ReservedVlanId {
        /// The VLAN id.
        vid: u16,
        /// The highest VLAN id.
        max: u16,
    },
    /// A range of VLAN ids whose end is below its start.
    #[error("range `{0}` runs backwards")]
    BackwardsRange(String),
    /// An access port's `vlan` beside the trunk keys.
    #[error(
        "port `{0}`: `vlan` makes an access port; it does not go with `trunks` or `native_vlan`"
    )]
    AccessWithTrunk(String),
    /// A burst without the rate it limits.
    #[error(
        "given for port `{port}` without `{rate_key}`: a burst limits nothing without its rate"
    )]
    BurstWithoutRate {
        /// The port.
        port: String,
        /// The rate's key.
        rate_key: &'static str,
    },
    /// A bit burst smaller than one frame of the port's MTU.
    #[error(
        "{burst_kb} kb for port `{port}` is less than one frame of its MTU {mtu} \
         ({frame_bits} bits): every such frame would be dropped; give at least {least_kb} kb \
         (a guest using TSO: 525 kb, a 64 KiB frame)"
    )]
    BurstBelowFrame {
        /// The burst, kb.
        burst_kb: u64,
        /// The port.
        port: String,
        /// Its MTU, bytes.
        mtu: u16,
        /// One full-sized frame, bits.
        frame_bits: u64,
        /// The smallest burst that passes such a frame, kb.
        least_kb: u64,
    },
}

impl FieldError {
    /// `reason`, said of port `port`.
    pub(crate) fn of_port(port: &str, reason: FieldError) -> Self {
        FieldError::OfPort {
            port: port.to_owned(),
            reason: Box::new(reason),
        }
    }
}

pub(crate) fn field(field: impl Into<String>, reason: FieldError) -> ConfigError {
    ConfigError::Field {
        field: field.into(),
        reason: Box::new(reason),
    }
}
