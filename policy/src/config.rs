//! Choosing and parameterising a policy: names, parameters, validation.
//!
//! The same [`PolicyConfig`] is read from the daemon's CLI (`--policy netap`),
//! its TOML config (`[policy] kind = "netap" ...`), the control socket
//! (`vadapt set-policy`) and simulator scenarios.

use crate::{busypoll::BusyPoll, eekbp::EeKbp, growshrink::GrowShrink, interrupt::Interrupt};
use crate::{netap::NetAp, Duration, Policy};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A parameter was out of its valid range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// The policy name is not one of [`PolicyKind::ALL`].
    #[error(
        "unknown policy `{0}` (expected one of: interrupt, busy-poll, netap, growshrink, eekbp)"
    )]
    UnknownPolicy(String),
    /// A parameter is invalid; `param` names it as written in config files.
    #[error("invalid policy parameter `{param}`: {reason}")]
    InvalidParam {
        /// Parameter name, e.g. `min_interval_us`.
        param: &'static str,
        /// Why it is invalid.
        reason: String,
    },
}

/// The policies vadapt knows, by command-line name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// Kick-driven, like kernel vhost-net ([`Interrupt`]).
    Interrupt,
    /// Never sleeps, like DPDK's vhost PMD ([`BusyPoll`]).
    #[serde(alias = "busypoll")]
    BusyPoll,
    /// Periodic polling with golden-section interval search ([`NetAp`]).
    Netap,
    /// QEMU AioContext-style adaptive poll window ([`GrowShrink`]).
    Growshrink,
    /// EE-KBP hybrid busy-poll / sleep-on-kick ([`EeKbp`]).
    Eekbp,
}

impl PolicyKind {
    /// Every policy, in the order tables list them.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Interrupt,
        PolicyKind::BusyPoll,
        PolicyKind::Growshrink,
        PolicyKind::Netap,
        PolicyKind::Eekbp,
    ];

    /// Command-line name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Interrupt => "interrupt",
            PolicyKind::BusyPoll => "busy-poll",
            PolicyKind::Netap => "netap",
            PolicyKind::Growshrink => "growshrink",
            PolicyKind::Eekbp => "eekbp",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PolicyKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "interrupt" => Ok(PolicyKind::Interrupt),
            "busy-poll" | "busypoll" => Ok(PolicyKind::BusyPoll),
            "netap" => Ok(PolicyKind::Netap),
            "growshrink" | "grow-shrink" => Ok(PolicyKind::Growshrink),
            "eekbp" | "ee-kbp" => Ok(PolicyKind::Eekbp),
            other => Err(ConfigError::UnknownPolicy(other.to_string())),
        }
    }
}

/// NetAP parameters (NetAP paper, Algorithms 1–2). Defaults are the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetapParams {
    /// Smallest polling interval searched, µs (paper: 100).
    pub min_interval_us: u64,
    /// Largest polling interval searched, µs (paper: 4000).
    pub max_interval_us: u64,
    /// Golden-section ratio R, in (0, 1) (paper: 0.618).
    pub ratio: f64,
    /// Search stops once the step is at most this, µs (paper: 30).
    pub min_distance_us: u64,
    /// Length of one adaptation round, ms (paper's best: 1000).
    pub round_ms: u64,
    /// Restart the search when a settled round's bytes differ from the
    /// previous round's by more than this fraction (paper: MinChange; 0.2).
    pub min_change: f64,
    /// Restart the search after this many rounds (paper: MaxRound). 0 = never.
    pub max_rounds: u32,
    /// Ring-full safety net: let a kick through when a guest-to-host ring is at
    /// least this permille full while the worker sleeps. 0 disables (paper behaviour).
    pub kick_threshold_permille: u16,
}

impl Default for NetapParams {
    fn default() -> Self {
        NetapParams {
            min_interval_us: 100,
            max_interval_us: 4000,
            ratio: 0.618,
            min_distance_us: 30,
            round_ms: 1000,
            min_change: 0.2,
            max_rounds: 300,
            kick_threshold_permille: 750,
        }
    }
}

/// Grow/shrink parameters (QEMU AioContext adaptive polling). Defaults are QEMU's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrowShrinkParams {
    /// Cap of the poll window, ns (QEMU `poll-max-ns`, default 32768 ≈ 32 µs).
    pub poll_max_ns: u64,
    /// First non-zero window when growing from 0, ns (QEMU hard-codes 4000,
    /// "start polling at 4 microseconds", in `adjust_polling_time`).
    pub poll_start_ns: u64,
    /// Growth factor (QEMU `poll-grow`, 0 = default 2).
    pub poll_grow: u64,
    /// Shrink divisor (QEMU `poll-shrink`, 0 = reset to 0).
    pub poll_shrink: u64,
}

impl Default for GrowShrinkParams {
    fn default() -> Self {
        GrowShrinkParams {
            poll_max_ns: 32_768,
            poll_start_ns: 4_000,
            poll_grow: 2,
            poll_shrink: 0,
        }
    }
}

/// EE-KBP parameters (EE-KBP paper, Algorithm 1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EekbpParams {
    /// Packets per queue per busy-poll pass (NAPI's default weight, 64).
    pub quota: u32,
    /// Consecutive empty passes before the worker goes to sleep (1 = at once).
    pub empty_passes: u32,
}

impl Default for EekbpParams {
    fn default() -> Self {
        EekbpParams {
            quota: 64,
            empty_passes: 1,
        }
    }
}

/// A policy with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PolicyConfig {
    /// See [`Interrupt`].
    Interrupt,
    /// See [`BusyPoll`].
    #[serde(alias = "busypoll")]
    BusyPoll,
    /// See [`NetAp`].
    Netap(NetapParams),
    /// See [`GrowShrink`].
    Growshrink(GrowShrinkParams),
    /// See [`EeKbp`].
    Eekbp(EekbpParams),
}

impl PolicyConfig {
    /// The policy `kind` with its default parameters.
    pub fn default_for(kind: PolicyKind) -> Self {
        match kind {
            PolicyKind::Interrupt => PolicyConfig::Interrupt,
            PolicyKind::BusyPoll => PolicyConfig::BusyPoll,
            PolicyKind::Netap => PolicyConfig::Netap(NetapParams::default()),
            PolicyKind::Growshrink => PolicyConfig::Growshrink(GrowShrinkParams::default()),
            PolicyKind::Eekbp => PolicyConfig::Eekbp(EekbpParams::default()),
        }
    }

    /// Which policy this is.
    pub fn kind(&self) -> PolicyKind {
        match self {
            PolicyConfig::Interrupt => PolicyKind::Interrupt,
            PolicyConfig::BusyPoll => PolicyKind::BusyPoll,
            PolicyConfig::Netap(_) => PolicyKind::Netap,
            PolicyConfig::Growshrink(_) => PolicyKind::Growshrink,
            PolicyConfig::Eekbp(_) => PolicyKind::Eekbp,
        }
    }

    /// Check every parameter; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            PolicyConfig::Interrupt | PolicyConfig::BusyPoll => Ok(()),
            PolicyConfig::Netap(p) => NetAp::validate(p),
            PolicyConfig::Growshrink(p) => GrowShrink::validate(p),
            PolicyConfig::Eekbp(p) => EeKbp::validate(p),
        }
    }

    /// Validate and build a fresh policy instance.
    pub fn build(&self) -> Result<Box<dyn Policy>, ConfigError> {
        self.validate()?;
        Ok(match *self {
            PolicyConfig::Interrupt => Box::new(Interrupt),
            PolicyConfig::BusyPoll => Box::new(BusyPoll),
            PolicyConfig::Netap(p) => Box::new(NetAp::new(p)?),
            PolicyConfig::Growshrink(p) => Box::new(GrowShrink::new(p)?),
            PolicyConfig::Eekbp(p) => Box::new(EeKbp::new(p)?),
        })
    }
}

impl FromStr for PolicyConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        Ok(PolicyConfig::default_for(s.parse()?))
    }
}

/// Convert microseconds to a [`Duration`].
#[allow(dead_code)]
pub(crate) fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}
