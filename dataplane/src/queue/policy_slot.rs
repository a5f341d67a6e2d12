//! A VM port's policy life cycle, in one place: the policy asked for, its
//! switches and retunes on their way to the worker, and the running
//! instance kept between worker incarnations.
//!
//! The worker's thread comes and goes with the frontend's rings (a vring
//! change restarts it); the policy's state (NetAP's rounds and search) must
//! not. So the worker takes the policy when it starts ([`PolicySlot::take`])
//! and parks it when it stops ([`PolicySlot::park`]); a switch requested
//! meanwhile makes the parked one stale, and the next worker builds the new
//! one. While a worker runs, it asks [`PolicySlot::control`] after every
//! pass for the next switch or retune.

use crate::worker::Control;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use vadapt_policy::{Policy, PolicyConfig, Retune, RetuneError};

/// Why a switch or retune was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyRequestError {
    /// The new policy's parameters are invalid.
    #[error(transparent)]
    Config(#[from] vadapt_policy::ConfigError),
    /// The running policy cannot take this retune.
    #[error(transparent)]
    Retune(#[from] RetuneError),
}

/// See the module docs.
#[derive(Debug)]
pub struct PolicySlot {
    /// The policy asked for (the config file's, or the last switch's).
    config: Mutex<PolicyConfig>,
    /// Bumped by every switch.
    gen: AtomicU64,
    /// Retunes not yet taken by a worker, oldest first.
    retunes: Mutex<Vec<Retune>>,
    /// Bumped by every retune (lets the worker skip the lock when idle).
    retune_gen: AtomicU64,
    /// The instance between worker incarnations, with the `gen` it was built for.
    parked: Mutex<Option<(u64, Box<dyn Policy>)>>,
}

impl PolicySlot {
    /// A slot starting with `config` (already validated).
    pub fn new(config: PolicyConfig) -> Self {
        PolicySlot {
            config: Mutex::new(config),
            gen: AtomicU64::new(0),
            retunes: Mutex::new(Vec::new()),
            retune_gen: AtomicU64::new(0),
            parked: Mutex::new(None),
        }
    }

    /// The policy asked for.
    pub fn config(&self) -> PolicyConfig {
        *self.config.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ask for `config` instead; a running worker switches after its
    /// current pass. Pending retunes belonged to the old policy: dropped.
    pub fn switch(&self, config: PolicyConfig) -> Result<(), PolicyRequestError> {
        config.validate()?;
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = config;
        self.retunes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.gen.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Change a parameter of the policy in place. Checked now against a
    /// fresh instance of the configured policy (so a bad value is refused
    /// to the caller), then queued for the running or next worker. Where
    /// the parameter is one of the config's, the config follows, so a later
    /// restart keeps it.
    pub fn retune(&self, r: Retune) -> Result<(), PolicyRequestError> {
        let mut config = self.config.lock().unwrap_or_else(|e| e.into_inner());
        config.build()?.retune(&r)?;
        *config = retuned_config(*config, &r);
        self.retunes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r);
        self.retune_gen.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The policy a starting worker runs: the parked one if no switch came
    /// since it was parked, else a new one from the config. A config that no
    /// longer builds (it was validated, so this is a bug) falls back to
    /// interrupt mode with an error line rather than leaving the port dead.
    pub fn take(&self, port: &str) -> (Box<dyn Policy>, WorkerView) {
        let gen = self.gen.load(Ordering::Acquire);
        let parked = self.parked.lock().unwrap_or_else(|e| e.into_inner()).take();
        let policy = match parked {
            Some((g, p)) if g == gen => p,
            _ => self.config().build().unwrap_or_else(|e| {
                tracing::error!(port, error = %e, "invalid policy; using interrupt");
                Box::new(vadapt_policy::interrupt::Interrupt)
            }),
        };
        let view = WorkerView {
            gen,
            retune_gen: self.retune_gen.load(Ordering::Acquire),
        };
        // Retunes queued while no worker ran were meant for this policy.
        let mut policy = policy;
        for r in self
            .retunes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            if let Err(e) = policy.retune(&r) {
                tracing::warn!(port, error = %e, "queued retune refused");
            }
        }
        (policy, view)
    }

    /// A stopping worker hands its policy back.
    pub fn park(&self, policy: Box<dyn Policy>, view: &WorkerView) {
        *self.parked.lock().unwrap_or_else(|e| e.into_inner()) = Some((view.gen, policy));
    }

    /// What a running worker does next about its policy: switch, retune, or
    /// nothing. Lock-free when nothing changed.
    pub fn control(&self, view: &mut WorkerView, port: &str) -> Option<Control> {
        let gen = self.gen.load(Ordering::Acquire);
        if gen != view.gen {
            view.gen = gen;
            let cfg = self.config();
            match cfg.build() {
                Ok(p) => {
                    tracing::info!(port, policy = %cfg.kind(), "policy switched");
                    return Some(Control::Switch(p));
                }
                Err(e) => tracing::error!(port, error = %e, "policy rejected"),
            }
        }
        let rg = self.retune_gen.load(Ordering::Acquire);
        if rg != view.retune_gen {
            let mut q = self.retunes.lock().unwrap_or_else(|e| e.into_inner());
            if q.is_empty() {
                view.retune_gen = rg;
            } else {
                let r = q.remove(0);
                tracing::info!(port, retune = ?r, "policy retuned");
                return Some(Control::Retune(r));
            }
        }
        None
    }
}

/// What a worker has seen of its slot.
#[derive(Clone, Copy, Debug)]
pub struct WorkerView {
    gen: u64,
    retune_gen: u64,
}

/// `config` with the retuned parameter, where it is one of the config's.
fn retuned_config(config: PolicyConfig, r: &Retune) -> PolicyConfig {
    match (config, *r) {
        (PolicyConfig::Netap(mut p), Retune::KickThreshold { permille }) => {
            p.kick_threshold_permille = permille;
            PolicyConfig::Netap(p)
        }
        (PolicyConfig::Growshrink(mut p), Retune::PollMax { ns }) => {
            p.poll_max_ns = ns;
            PolicyConfig::Growshrink(p)
        }
        (PolicyConfig::Eekbp(mut p), Retune::Quota { packets }) => {
            p.quota = packets;
            PolicyConfig::Eekbp(p)
        }
        (PolicyConfig::FixedInterval(mut p), Retune::Interval { us }) => {
            p.interval_us = us;
            PolicyConfig::FixedInterval(p)
        }
        (PolicyConfig::NetapMl(mut p), Retune::KickThreshold { permille }) => {
            p.netap.kick_threshold_permille = permille;
            PolicyConfig::NetapMl(p)
        }
        (
            PolicyConfig::NetapMl(mut p),
            Retune::Workload {
                vms,
                threads,
                msg_size,
            },
        ) => {
            p.vms = vms;
            p.threads = threads;
            p.msg_size = msg_size;
            PolicyConfig::NetapMl(p)
        }
        (c, _) => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vadapt_policy::PolicyKind;

    #[test]
    fn parked_policy_survives_a_restart_but_not_a_switch() {
        let s = PolicySlot::new(PolicyConfig::default_for(PolicyKind::Netap));
        let (p, view) = s.take("vm1");
        assert_eq!(p.name(), "netap");
        s.park(p, &view);
        let (p, view) = s.take("vm1");
        assert_eq!(p.name(), "netap");
        s.park(p, &view);
        s.switch(PolicyConfig::BusyPoll).unwrap();
        assert_eq!(s.take("vm1").0.name(), "busy-poll");
    }

    #[test]
    fn a_running_worker_gets_switches_then_retunes_in_order() {
        let s = PolicySlot::new(PolicyConfig::default_for(PolicyKind::Netap));
        let (_p, mut view) = s.take("vm1");
        assert!(s.control(&mut view, "vm1").is_none());
        let a = Retune::SearchRange {
            lo_us: 500,
            hi_us: 1500,
        };
        let b = Retune::KickThreshold { permille: 0 };
        s.retune(a).unwrap();
        s.retune(b).unwrap();
        assert!(matches!(s.control(&mut view, "vm1"), Some(Control::Retune(r)) if r == a));
        assert!(matches!(s.control(&mut view, "vm1"), Some(Control::Retune(r)) if r == b));
        assert!(s.control(&mut view, "vm1").is_none());
        // The config follows a retune of one of its parameters.
        match s.config() {
            PolicyConfig::Netap(p) => assert_eq!(p.kick_threshold_permille, 0),
            c => panic!("{c:?}"),
        }
        s.switch(PolicyConfig::default_for(PolicyKind::Eekbp))
            .unwrap();
        assert!(matches!(
            s.control(&mut view, "vm1"),
            Some(Control::Switch(p)) if p.name() == "eekbp"
        ));
    }

    #[test]
    fn bad_retunes_are_refused_to_the_caller() {
        let s = PolicySlot::new(PolicyConfig::default_for(PolicyKind::Netap));
        let e = s
            .retune(Retune::SearchRange {
                lo_us: 900,
                hi_us: 100,
            })
            .unwrap_err();
        assert!(e.to_string().contains("search_range_us"), "{e}");
        let e = s.retune(Retune::Quota { packets: 8 }).unwrap_err();
        assert!(e.to_string().contains("netap"), "{e}");
        let e = s.switch(PolicyConfig::default_for(PolicyKind::Eekbp));
        assert!(e.is_ok());
        assert!(s.retune(Retune::Quota { packets: 0 }).is_err());
        assert!(s.retune(Retune::Quota { packets: 8 }).is_ok());
    }

    #[test]
    fn retunes_queued_without_a_worker_reach_the_next_one() {
        let s = PolicySlot::new(PolicyConfig::default_for(PolicyKind::Netap));
        s.retune(Retune::SearchRange {
            lo_us: 500,
            hi_us: 1500,
        })
        .unwrap();
        let (p, mut view) = s.take("vm1");
        assert_eq!(p.name(), "netap");
        assert!(s.control(&mut view, "vm1").is_none());
    }
}
