//! Changing a running policy's parameters without replacing it.
//!
//! A switch ([`crate::PolicyConfig::build`], then `Executor::switch`) starts a
//! policy from scratch; a retune keeps its state (NetAP's rounds and search,
//! grow/shrink's window) and changes one parameter. NetAP-ML uses it to hand
//! NetAP the search range around a predicted interval; the control socket's
//! `retune` request and `vadapt retune` reach it at run time.

use crate::error::ConfigError;
use serde::{Deserialize, Serialize};

/// One parameter change. Each names the policy it applies to; the others
/// refuse it with [`RetuneError::NotApplicable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "param", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Retune {
    /// NetAP: search `lo_us..=hi_us` from the next search on (the running
    /// search is not disturbed). NetAP-ML's predicted interval ± 500 µs.
    SearchRange {
        /// Shortest interval searched, µs.
        lo_us: u64,
        /// Longest interval searched, µs.
        hi_us: u64,
    },
    /// NetAP: the ring-full safety net, permille of the ring (0 = off, the
    /// paper's behaviour). Applies from the next sleep.
    KickThreshold {
        /// Fill level that lets a kick through, ‰.
        permille: u16,
    },
    /// grow/shrink: the longest poll window, ns (QEMU's `poll-max-ns`).
    PollMax {
        /// Nanoseconds.
        ns: u64,
    },
    /// EE-KBP: packets per queue per busy-poll pass.
    Quota {
        /// Packets.
        packets: u32,
    },
    /// Fixed interval: the sleep between drains, µs, from the next sleep.
    Interval {
        /// Microseconds.
        us: u64,
    },
    /// NetAP-ML: the workload its model predicts for (0 = unknown: 1 VM, 1
    /// thread, message size estimated). A predicted range that moved restarts
    /// the running search in it at the next pass.
    Workload {
        /// VMs sharing the host.
        vms: u32,
        /// Sender threads per VM.
        threads: u32,
        /// Message size, bytes.
        msg_size: u32,
    },
}

impl Retune {
    /// The parameter's name, as written in config files.
    pub fn param(&self) -> &'static str {
        match self {
            Retune::SearchRange { .. } => "search_range_us",
            Retune::KickThreshold { .. } => "kick_threshold_permille",
            Retune::PollMax { .. } => "poll_max_ns",
            Retune::Quota { .. } => "quota",
            Retune::Interval { .. } => "interval_us",
            Retune::Workload { .. } => "workload",
        }
    }
}

impl std::str::FromStr for Retune {
    type Err = String;

    /// `search-range=LO-HI` (µs), `kick-threshold=PERMILLE`, `poll-max=NS`,
    /// `quota=PACKETS`, `interval=US` or `workload=VMS/THREADS/MSG_SIZE`: the command-line
    /// form of `vadapt retune`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}` is not PARAM=VALUE"))?;
        let num = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|e| format!("`{v}` in `{s}`: {e}"))
        };
        let small = |v: &str, max: u64| {
            num(v).and_then(|n| {
                (n <= max)
                    .then_some(n)
                    .ok_or_else(|| format!("`{v}` in `{s}` is above {max}"))
            })
        };
        Ok(match k.trim() {
            "search-range" => {
                let (lo, hi) = v
                    .split_once('-')
                    .ok_or_else(|| format!("`{v}` is not LO-HI (µs)"))?;
                Retune::SearchRange {
                    lo_us: num(lo)?,
                    hi_us: num(hi)?,
                }
            }
            "kick-threshold" => Retune::KickThreshold {
                permille: small(v, u64::from(u16::MAX))? as u16,
            },
            "poll-max" => Retune::PollMax { ns: num(v)? },
            "workload" => {
                let parts: Vec<&str> = v.split('/').collect();
                let [vms, threads, msg_size] = parts[..] else {
                    return Err(format!("`{v}` is not VMS/THREADS/MSG_SIZE"));
                };
                let u32_of = |x: &str| small(x, u64::from(u32::MAX)).map(|n| n as u32);
                Retune::Workload {
                    vms: u32_of(vms)?,
                    threads: u32_of(threads)?,
                    msg_size: u32_of(msg_size)?,
                }
            }
            "quota" => Retune::Quota {
                packets: small(v, u64::from(u32::MAX))? as u32,
            },
            "interval" => Retune::Interval { us: num(v)? },
            other => {
                return Err(format!(
                    "unknown parameter `{other}` (known: search-range, kick-threshold, poll-max, quota, interval, workload)"
                ))
            }
        })
    }
}

impl Retune {
    /// The refusal of a policy named `policy` that has no such parameter.
    pub fn not_applicable(&self, policy: &'static str) -> RetuneError {
        RetuneError::NotApplicable {
            policy,
            param: self.param(),
        }
    }
}

/// Replace `params` by `new` if `validate` accepts it (a retune's common
/// step: the policy keeps its state, only the parameter changes).
pub fn apply<P>(
    params: &mut P,
    new: P,
    validate: impl Fn(&P) -> Result<(), ConfigError>,
) -> Result<(), RetuneError> {
    validate(&new)?;
    *params = new;
    Ok(())
}

/// Why a retune was refused; the running policy is unchanged.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RetuneError {
    /// The running policy has no such parameter.
    #[error("policy `{policy}` has no parameter `{param}`")]
    NotApplicable {
        /// The running policy.
        policy: &'static str,
        /// The parameter asked for.
        param: &'static str,
    },
    /// The new value is invalid for the policy.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_form_parses_and_names_what_is_wrong() {
        assert_eq!(
            "search-range=500-1500".parse(),
            Ok(Retune::SearchRange {
                lo_us: 500,
                hi_us: 1500
            })
        );
        assert_eq!(
            "kick-threshold=0".parse(),
            Ok(Retune::KickThreshold { permille: 0 })
        );
        assert_eq!("poll-max=32000".parse(), Ok(Retune::PollMax { ns: 32000 }));
        assert_eq!("quota=16".parse(), Ok(Retune::Quota { packets: 16 }));
        assert_eq!("interval=250".parse(), Ok(Retune::Interval { us: 250 }));
        assert_eq!(
            "workload=3/2/128".parse(),
            Ok(Retune::Workload {
                vms: 3,
                threads: 2,
                msg_size: 128
            })
        );
        assert!("workload=3/2"
            .parse::<Retune>()
            .unwrap_err()
            .contains("VMS/THREADS/MSG_SIZE"));
        assert!("search-range=500"
            .parse::<Retune>()
            .unwrap_err()
            .contains("LO-HI"));
        assert!("frob=1".parse::<Retune>().unwrap_err().contains("frob"));
        assert!("quota"
            .parse::<Retune>()
            .unwrap_err()
            .contains("PARAM=VALUE"));
        assert!("kick-threshold=70000".parse::<Retune>().is_err());
        let json = serde_json::to_string(&Retune::Quota { packets: 3 }).unwrap();
        assert_eq!(
            serde_json::from_str::<Retune>(&json).unwrap(),
            Retune::Quota { packets: 3 }
        );
    }
}
