//! Choosing and parameterising a policy: names, parameters, validation.
//!
//! The same [`PolicyConfig`] is read from the daemon's CLI (`--policy netap`),
//! its TOML config (`[policy] kind = "netap" ...`), the control socket
//! (`vadapt set-policy`) and simulator scenarios.

use crate::busypoll::BusyPoll;
use crate::eekbp::EeKbp;
pub use crate::eekbp::EekbpParams;
use crate::error::ConfigError;
use crate::fixed::FixedInterval;
pub use crate::fixed::FixedIntervalParams;
use crate::growshrink::GrowShrink;
pub use crate::growshrink::GrowShrinkParams;
use crate::interface::Policy;
use crate::interrupt::Interrupt;
use crate::netap::NetAp;
pub use crate::netap::NetapParams;
use crate::netap_ml::NetapMl;
pub use crate::netap_ml::NetapMlParams;
use crate::ring_guard::RingGuarded;
use crate::time::Duration;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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
    /// NetAP with its search narrowed by a random forest ([`NetapMl`]).
    NetapMl,
    /// One interval, no search: the NetAP paper's probe ([`FixedInterval`]),
    /// an instrument for sweeps, not a policy for production ports.
    FixedInterval,
}

impl PolicyKind {
    /// Every policy, in the order tables list them.
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::Interrupt,
        PolicyKind::BusyPoll,
        PolicyKind::Growshrink,
        PolicyKind::Netap,
        PolicyKind::NetapMl,
        PolicyKind::Eekbp,
        PolicyKind::FixedInterval,
    ];

    /// Command-line name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Interrupt => "interrupt",
            PolicyKind::BusyPoll => "busy-poll",
            PolicyKind::Netap => "netap",
            PolicyKind::Growshrink => "growshrink",
            PolicyKind::Eekbp => "eekbp",
            PolicyKind::NetapMl => "netap-ml",
            PolicyKind::FixedInterval => "fixed-interval",
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
            "netap-ml" | "netapml" => Ok(PolicyKind::NetapMl),
            "fixed-interval" => Ok(PolicyKind::FixedInterval),
            other => Err(ConfigError::UnknownPolicy(other.to_string())),
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
    /// See [`NetapMl`]; runs the built-in model.
    NetapMl(NetapMlParams),
    /// See [`FixedInterval`].
    FixedInterval(FixedIntervalParams),
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
            PolicyKind::NetapMl => PolicyConfig::NetapMl(NetapMlParams::default()),
            PolicyKind::FixedInterval => {
                PolicyConfig::FixedInterval(FixedIntervalParams::default())
            }
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
            PolicyConfig::NetapMl(_) => PolicyKind::NetapMl,
            PolicyConfig::FixedInterval(_) => PolicyKind::FixedInterval,
        }
    }

    /// Check every parameter; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            PolicyConfig::Interrupt | PolicyConfig::BusyPoll => Ok(()),
            PolicyConfig::Netap(p) => NetAp::validate(p),
            PolicyConfig::Growshrink(p) => GrowShrink::validate(p),
            PolicyConfig::Eekbp(p) => EeKbp::validate(p),
            PolicyConfig::NetapMl(p) => NetapMl::validate(p),
            PolicyConfig::FixedInterval(p) => FixedInterval::validate(p),
        }
    }

    /// Validate and build a fresh policy instance.
    ///
    /// Every adaptive policy is built behind the ring guard
    /// ([`RingGuarded`], issue 41), NetAP and NetAP-ML unless their
    /// `ring_guard` is off; the guard's shortest sleep is NetAP's smallest
    /// interval. Grow/shrink and EE-KBP never sleep with notifications off,
    /// so the guard never engages for them; it is there so that no adaptive
    /// policy can lose what interrupt mode would carry. The fixed interval
    /// is not adaptive and runs unguarded, as the paper's probe did.
    pub fn build(&self) -> Result<Box<dyn Policy>, ConfigError> {
        self.validate()?;
        let guarded = |p: Box<dyn Policy>, floor_us: u64| -> Box<dyn Policy> {
            Box::new(RingGuarded::new(p, Duration::from_micros(floor_us)))
        };
        let default_floor = NetapParams::default().min_interval_us;
        Ok(match *self {
            PolicyConfig::Interrupt => Box::new(Interrupt),
            PolicyConfig::BusyPoll => Box::new(BusyPoll),
            PolicyConfig::Netap(p) if p.ring_guard => {
                guarded(Box::new(NetAp::new(p)?), p.min_interval_us)
            }
            PolicyConfig::Netap(p) => Box::new(NetAp::new(p)?),
            PolicyConfig::Growshrink(p) => guarded(Box::new(GrowShrink::new(p)?), default_floor),
            PolicyConfig::Eekbp(p) => guarded(Box::new(EeKbp::new(p)?), default_floor),
            PolicyConfig::NetapMl(p) => {
                let inner = crate::netap_ml::build(p, crate::netap_ml::model())?;
                if p.netap.ring_guard {
                    guarded(inner, p.netap.min_interval_us)
                } else {
                    inner
                }
            }
            PolicyConfig::FixedInterval(p) => Box::new(FixedInterval::with(p)?),
        })
    }

    /// The name tables and phase labels show: the policy's name, and for
    /// the fixed interval its interval (`fixed-interval:250`), the form
    /// [`PolicyConfig::from_str`] reads back.
    pub fn label(&self) -> String {
        match self {
            PolicyConfig::FixedInterval(p) => format!("fixed-interval:{}", p.interval_us),
            other => other.kind().as_str().to_string(),
        }
    }
}

impl FromStr for PolicyConfig {
    type Err = ConfigError;
    /// A policy's name with its default parameters, or `fixed-interval:US`.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        if let Some(us) = s.strip_prefix("fixed-interval:") {
            let interval_us = us.parse().map_err(|e| ConfigError::InvalidParam {
                param: "interval_us",
                reason: format!("`{us}` in `{s}`: {e}"),
            })?;
            let c = PolicyConfig::FixedInterval(FixedIntervalParams { interval_us });
            c.validate()?;
            return Ok(c);
        }
        Ok(PolicyConfig::default_for(s.parse()?))
    }
}

/// Convert microseconds to a [`Duration`].
#[allow(dead_code)]
pub(crate) fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}
