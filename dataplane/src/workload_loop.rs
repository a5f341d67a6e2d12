//! The daemon's NetAP-ML feature loop: once a second, while at least one VM
//! port runs `netap-ml`, it reads the VM ports' transmit counters, feeds
//! them to the policy crate's [`WorkloadEstimator`] and, when the estimate
//! changes, sends
//! `Retune::Workload` to every `netap-ml` port through the same path as
//! `vadapt retune` (`VmPort::retune`, i.e. the port's policy slot).
//!
//! What the estimate can and cannot see is in
//! [`vadapt_policy::workload_estimate`].
//!
//! Features the port's **start-up** configuration gives (`vms`, `threads`,
//! `msg_size` non-zero in `policy = { kind = "netap-ml", ... }`) are pinned:
//! the loop fills only the features left at 0, and a port whose three
//! features are all given gets no retune at all. An operator's `vadapt
//! retune --port P workload=V/T/S` holds until the estimate next changes.
//! A port switched to `netap-ml` at run time gets the current estimate on
//! the next window (its `set-policy` features are not pinned). Not seen: a
//! `set-policy` from `netap-ml` to `netap-ml` within one window, which
//! leaves the new instance on its own features until the estimate changes.

use crate::log_limit::LogLimit;
use crate::metrics::Dir;
use crate::port::{Roster, VmPort};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vadapt_policy::workload_estimate::{EstimatorParams, Features, PortTx, WorkloadEstimator};
use vadapt_policy::{PolicyConfig, Retune};

/// The estimator's window.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Features a configuration pins: `[vms, threads, msg_size]`, 0 = not pinned.
fn pinned(cfg: PolicyConfig) -> [u32; 3] {
    match cfg {
        PolicyConfig::NetapMl(p) => [p.vms, p.threads, p.msg_size],
        _ => [0; 3],
    }
}

/// The estimate with the pinned features put in.
pub fn merge(pinned: [u32; 3], f: Features) -> Features {
    let pick = |p: u32, e: u32| if p != 0 { p } else { e };
    Features {
        vms: pick(pinned[0], f.vms),
        threads: pick(pinned[1], f.threads),
        msg_size: pick(pinned[2], f.msg_size),
    }
}

/// What the loop keeps of one port.
#[derive(Debug)]
struct Followed {
    /// The features the port's configuration pins (as it was added).
    pinned: [u32; 3],
    /// The features last sent to it.
    sent: Option<Features>,
}

/// The loop's state (see the module docs).
#[derive(Debug)]
pub struct WorkloadLoop {
    roster: Arc<Roster>,
    /// The roster's generation `followed` was made at.
    seen: Option<u64>,
    /// Per port name.
    followed: HashMap<String, Followed>,
    est: WorkloadEstimator,
    refused: LogLimit,
}

impl WorkloadLoop {
    /// A loop over the ports of `roster` (as they come and go), reading
    /// their counters.
    pub fn new(roster: Arc<Roster>) -> Self {
        let mut l = WorkloadLoop {
            roster,
            seen: None,
            followed: HashMap::new(),
            est: WorkloadEstimator::new(EstimatorParams::default()),
            // A refused retune repeats every window: one line a minute.
            refused: LogLimit::new(1, Duration::from_secs(60)),
        };
        l.follow_roster();
        l
    }

    /// Ports added since the last look are followed, with their pinned
    /// features recorded in their stats (shown until an estimate replaces
    /// the unpinned ones); removed ones are forgotten.
    fn follow_roster(&mut self) {
        let generation = self.roster.generation();
        if self.seen == Some(generation) {
            return;
        }
        self.seen = Some(generation);
        let ports = self.roster.current();
        self.followed
            .retain(|name, _| ports.iter().any(|p| p.name() == name));
        for p in ports.iter() {
            self.followed.entry(p.name().to_owned()).or_insert_with(|| {
                let f = pinned(p.policy_config());
                for (i, v) in f.iter().enumerate() {
                    p.stats.workload[i].store(u64::from(*v), Ordering::Relaxed);
                }
                Followed {
                    pinned: f,
                    sent: None,
                }
            });
        }
    }

    /// One window, ending at `now`.
    pub fn step(&mut self, now: Instant) {
        self.follow_roster();
        let ports = self.roster.current();
        let mut ml = Vec::new();
        for p in ports.iter() {
            let Some(f) = self.followed.get_mut(p.name()) else {
                continue;
            };
            if matches!(p.policy_config(), PolicyConfig::NetapMl(_)) {
                ml.push(p);
            } else {
                // A later switch to netap-ml starts without our features.
                f.sent = None;
            }
        }
        if ml.is_empty() {
            // Start again from a baseline when a port turns to netap-ml.
            self.est = WorkloadEstimator::new(EstimatorParams::default());
            return;
        }
        let obs = self.est.observe(ports.iter().map(|p| tx_counters(p)));
        if let Some(f) = obs.changed {
            tracing::info!(
                vms = f.vms,
                threads = f.threads,
                msg_size = f.msg_size,
                "NetAP-ML workload estimate changed (active VM ports, active tx queues per VM, payload bytes per frame)"
            );
        }
        let Some(f) = self.est.reported() else {
            return;
        };
        for port in ml {
            let Some(followed) = self.followed.get_mut(port.name()) else {
                continue;
            };
            if followed.pinned.iter().all(|&v| v != 0) {
                continue;
            }
            let w = merge(followed.pinned, f);
            if followed.sent == Some(w) {
                continue;
            }
            let r = Retune::Workload {
                vms: w.vms,
                threads: w.threads,
                msg_size: w.msg_size,
            };
            match port.retune(r) {
                Ok(()) => {
                    followed.sent = Some(w);
                    for (j, v) in [w.vms, w.threads, w.msg_size].into_iter().enumerate() {
                        port.stats.workload[j].store(u64::from(v), Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    if let Some(held) = self.refused.allow(now) {
                        tracing::warn!(port = port.name(), error = %e, held_back = held,
                            "NetAP-ML workload estimate refused by the port's policy");
                    }
                }
            }
        }
    }
}

/// `port`'s cumulative guest→host counters, per queue pair.
fn tx_counters(port: &VmPort) -> PortTx {
    let tx = Dir::Tx as usize;
    PortTx {
        port: port.name().to_owned(),
        queues: port
            .stats
            .queues
            .iter()
            .map(|q| {
                (
                    q.packets[tx].load(Ordering::Relaxed),
                    q.bytes[tx].load(Ordering::Relaxed),
                )
            })
            .collect(),
    }
}

/// Run `l` every [`PERIOD`] on its own thread until `stop` is set.
pub fn spawn(mut l: WorkloadLoop, stop: Arc<AtomicBool>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("vadapt-workload".into())
        .spawn(move || {
            let mut next = Instant::now() + PERIOD;
            while !stop.load(Ordering::Relaxed) {
                let left = next.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    // Short sleeps so that a stop is seen quickly.
                    std::thread::sleep(left.min(Duration::from_millis(50)));
                    continue;
                }
                let now = Instant::now();
                l.step(now);
                // Fell behind: no burst of catch-up windows.
                next = (next + PERIOD).max(now);
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_features_win_over_the_estimate() {
        let f = Features {
            vms: 2,
            threads: 3,
            msg_size: 200,
        };
        assert_eq!(merge([0; 3], f), f);
        assert_eq!(
            merge([4, 0, 64], f),
            Features {
                vms: 4,
                threads: 3,
                msg_size: 64
            }
        );
    }
}
