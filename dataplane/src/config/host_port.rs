//! The ports that live inside the daemon: sink and echo (`[[sink]]`,
//! `[[echo]]`, `--sink`, `--echo`) and TAP (`[[tap]]`, `--tap`).

use super::error::{field, ConfigError};
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
}

/// A TAP port to the host network stack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapPortConfig {
    /// Port name, and the TAP interface name (at most 15 bytes).
    pub name: String,
}

/// Parse a `--sink NAME[,mac=..]` or `--echo NAME[,mac=..]` spec.
pub fn parse_local_spec(flag: &str, spec: &str) -> Result<LocalPortConfig, ConfigError> {
    let mut it = spec.split(',');
    let name = it.next().unwrap_or_default().to_string();
    if name.is_empty() {
        return Err(field(flag, "missing port name"));
    }
    let mut mac = None;
    for kv in it {
        match kv.split_once('=') {
            Some(("mac", v)) => {
                mac = Some(v.parse().map_err(|e: vadapt_wire::MacParseError| {
                    field(format!("{flag} mac"), e.to_string())
                })?)
            }
            _ => return Err(field(flag, format!("unknown option `{kv}` (known: mac=)"))),
        }
    }
    Ok(LocalPortConfig { name, mac })
}
