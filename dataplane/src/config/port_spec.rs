//! A port of any kind, as `vadapt add-port` names one and a reload
//! compares them.

use super::host_port::{LocalPortConfig, TapPortConfig};
use super::uplink_port::UplinkPortConfig;
use super::vm_port::VmPortConfig;
use serde::{Deserialize, Serialize};

/// One port of any kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "port", rename_all = "kebab-case")]
pub enum PortSpec {
    /// A VM port (`--vm`, `[[vm]]`).
    Vm(Box<VmPortConfig>),
    /// A sink (`--sink`, `[[sink]]`).
    Sink(LocalPortConfig),
    /// An echo port (`--echo`, `[[echo]]`).
    Echo(LocalPortConfig),
    /// A TAP port (`--tap`, `[[tap]]`).
    Tap(TapPortConfig),
    /// An uplink port (`--uplink`, `[[uplink]]`).
    Uplink(UplinkPortConfig),
}

impl PortSpec {
    /// The port's name, unique among every port of the daemon.
    pub fn name(&self) -> &str {
        match self {
            PortSpec::Vm(v) => &v.name,
            PortSpec::Sink(l) | PortSpec::Echo(l) => &l.name,
            PortSpec::Tap(t) => &t.name,
            PortSpec::Uplink(u) => &u.name,
        }
    }

    /// `vm`, `sink`, `echo`, `tap` or `uplink`.
    pub fn kind(&self) -> &'static str {
        match self {
            PortSpec::Vm(_) => "vm",
            PortSpec::Sink(_) => "sink",
            PortSpec::Echo(_) => "echo",
            PortSpec::Tap(_) => "tap",
            PortSpec::Uplink(_) => "uplink",
        }
    }
}
