//! A port of any kind, as `vadapt add-port` names one and a reload
//! compares them.

use super::host_port::{LocalPortConfig, TapPortConfig};
use super::port_limits::PortLimits;
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

/// A port the daemon makes by itself, with no vhost-user frontend: a
/// [`PortSpec`] of any kind but a VM port.
#[derive(Clone, Debug, PartialEq)]
pub enum HostPortSpec {
    /// A sink (`--sink`, `[[sink]]`).
    Sink(LocalPortConfig),
    /// An echo port (`--echo`, `[[echo]]`).
    Echo(LocalPortConfig),
    /// A TAP port (`--tap`, `[[tap]]`).
    Tap(TapPortConfig),
    /// An uplink port (`--uplink`, `[[uplink]]`).
    Uplink(UplinkPortConfig),
}

/// A [`PortSpec`] by what serves the port: a VM's frontend or the daemon.
// Made and taken apart once per port added, never stored: the size of the
// host variant does not matter (the VM variant is boxed as in `PortSpec`).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum VmOrHost {
    /// A VM port, served to its frontend over vhost-user.
    Vm(Box<VmPortConfig>),
    /// Any other port.
    Host(HostPortSpec),
}

impl HostPortSpec {
    /// The port's name, unique among every port of the daemon.
    pub fn name(&self) -> &str {
        match self {
            HostPortSpec::Sink(l) | HostPortSpec::Echo(l) => &l.name,
            HostPortSpec::Tap(t) => &t.name,
            HostPortSpec::Uplink(u) => &u.name,
        }
    }
}

impl PortSpec {
    /// This port as a VM port or a host port.
    pub fn into_vm_or_host(self) -> VmOrHost {
        match self {
            PortSpec::Vm(v) => VmOrHost::Vm(v),
            PortSpec::Sink(l) => VmOrHost::Host(HostPortSpec::Sink(l)),
            PortSpec::Echo(l) => VmOrHost::Host(HostPortSpec::Echo(l)),
            PortSpec::Tap(t) => VmOrHost::Host(HostPortSpec::Tap(t)),
            PortSpec::Uplink(u) => VmOrHost::Host(HostPortSpec::Uplink(u)),
        }
    }

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

    /// The port's rate limits: VM, TAP and uplink ports have them (on
    /// what they send into the switch); `None` for a sink or echo port.
    pub fn limits(&self) -> Option<PortLimits> {
        match self {
            PortSpec::Vm(v) => Some(v.limits),
            PortSpec::Tap(t) => Some(t.limits),
            PortSpec::Uplink(u) => Some(u.limits),
            PortSpec::Sink(_) | PortSpec::Echo(_) => None,
        }
    }

    /// The port's rate limits to change, where it has them ([`Self::limits`]).
    pub fn limits_mut(&mut self) -> Option<&mut PortLimits> {
        match self {
            PortSpec::Vm(v) => Some(&mut v.limits),
            PortSpec::Tap(t) => Some(&mut t.limits),
            PortSpec::Uplink(u) => Some(&mut u.limits),
            PortSpec::Sink(_) | PortSpec::Echo(_) => None,
        }
    }

    /// The port's configured MTU, if any (rate limits are checked against it).
    pub fn mtu(&self) -> Option<u16> {
        match self {
            PortSpec::Vm(v) => v.mtu,
            PortSpec::Tap(t) => t.mtu,
            PortSpec::Uplink(u) => u.mtu,
            PortSpec::Sink(_) | PortSpec::Echo(_) => None,
        }
    }
}
