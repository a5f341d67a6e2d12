//! NetAP-ML: NetAP whose golden-section search runs in a narrow range around
//! the interval a random forest predicts best (NetAP-ML paper, §3).
//!
//! At start, and whenever NetAP restarts its search (workload change or
//! `max_rounds`), the policy asks the [`Forest`] for the throughput at every
//! interval from 50 to 4000 µs in steps of 50 (the paper's ML-Predictor: 80
//! evaluations) for the current workload features, takes the best, and hands
//! NetAP the range best ± `half_range_us` (paper: 500), clamped to NetAP's
//! `min_interval_us..=max_interval_us`. Everything else is [`NetAp`]
//! unchanged: rounds, restart rule, safety net.
//!
//! New features arriving by [`Retune::Workload`] (the daemon's estimate, a
//! few seconds after NetAP itself restarted on the old ones) are predicted
//! for at once; if the predicted range moved, the running search restarts in
//! it at the next pass, so the estimate does not wait for the next restart.
//!
//! # The features, and where they are uncertain
//!
//! The model wants (VMs, sender threads per VM, message size). A queue worker
//! sees none of them directly:
//! - **VMs and threads** come from the configuration (`vms`, `threads`) or at
//!   run time from a [`Retune::Workload`] sent by whoever knows them: an
//!   operator (`vadapt retune`), or the daemon, which estimates them once a
//!   second from its counters (VM ports that sent traffic; per such VM, its
//!   queue pairs that sent traffic, which undercounts threads sharing a
//!   queue pair) and sends a change after it held for two seconds
//!   ([`crate::workload_estimate`], fed by the daemon's `workload_loop`). The
//!   policy itself does not guess them: until told, it uses 1 and 1.
//! - **Message size**: `msg_size` from the configuration or a retune (the
//!   daemon's estimate sends guest→host bytes ÷ packets less 54 header
//!   bytes, the payload per TCP segment); when it is 0 the policy estimates
//!   it as bytes ÷ packets of the last round. That
//!   estimate is the *frame* size, which equals the application's message
//!   size only for unbatched datagrams; TCP senders coalesce small messages
//!   into segments (up to ~1448 B), so for them it overestimates, and the
//!   model then predicts for larger messages than the guest writes.
//!
//! # Departures from the paper
//!
//! - Ties in the prediction go to the longer interval (fewer wake-ups), as
//!   ties do in [`crate::golden`].
//! - The paper's ML-Predictor is a user-level process talking to vhost through
//!   files; here the model is evaluated inside the policy (80 predictions per
//!   restart, see [`crate::forest`] for the cost).

use crate::error::ConfigError;
use crate::forest::Forest;
use crate::interface::{Action, Budget, Decision, PassReport, Policy, PolicyStatus};
use crate::netap::{NetAp, NetapParams};
use crate::retune::{Retune, RetuneError};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, OnceLock};

/// Shortest interval the predictor evaluates, µs (paper: 50).
pub const PREDICT_FROM_US: u64 = 50;
/// Longest interval the predictor evaluates, µs (paper: 4000).
pub const PREDICT_TO_US: u64 = 4000;
/// Step between evaluated intervals, µs (paper: 50).
pub const PREDICT_STEP_US: u64 = 50;

/// NetAP-ML parameters. Defaults are the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetapMlParams {
    /// The NetAP underneath (its `min/max_interval_us` bound the narrowed range).
    pub netap: NetapParams,
    /// Half width of the search range around the predicted interval, µs (paper: 500).
    pub half_range_us: u64,
    /// VMs sharing the host (feature `vms`); 0 = unknown, taken as 1.
    pub vms: u32,
    /// Sender threads per VM (feature `threads`); 0 = unknown, taken as 1.
    pub threads: u32,
    /// Message size, bytes (feature `msg_size`); 0 = estimated from the
    /// last round's bytes per packet.
    pub msg_size: u32,
    /// If the model cannot be used, run plain NetAP instead of refusing to start.
    pub fallback_to_netap: bool,
}

impl Default for NetapMlParams {
    fn default() -> Self {
        NetapMlParams {
            netap: NetapParams::default(),
            half_range_us: 500,
            vms: 0,
            threads: 0,
            msg_size: 0,
            fallback_to_netap: false,
        }
    }
}

/// The workload the last prediction was made for, and what it gave.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Features `[vms, threads, msg_size, interval]` without the interval.
    pub vms: f64,
    /// Sender threads per VM.
    pub threads: f64,
    /// Message size, bytes.
    pub msg_size: f64,
    /// Interval with the highest predicted throughput, µs.
    pub best_us: u64,
    /// That throughput, in the model's unit (Gb/s).
    pub best_predicted: f64,
    /// The search range handed to NetAP, µs.
    pub range_us: (u64, u64),
}

/// NetAP-ML. See the module documentation.
#[derive(Debug, Clone)]
pub struct NetapMl {
    params: NetapMlParams,
    netap: NetAp,
    forest: Arc<Forest>,
    /// Bytes and packets of the round in progress (message-size estimate).
    bytes: u64,
    packets: u64,
    /// Bytes per packet of the last finished round, if it moved any.
    last_frame: Option<f64>,
    seen_round: u64,
    prediction: Option<Prediction>,
    /// A workload retune moved the predicted range: the running search
    /// restarts in it at the next pass.
    restart_pending: bool,
}

/// The model shipped in the repository (`policy/models/netap-ml.json`,
/// written by `python -m vadapt_lab.netap_ml train`), compiled into the
/// binary and parsed once; the error says why it cannot be used.
pub fn builtin_model() -> Result<Arc<Forest>, String> {
    static MODEL: OnceLock<Result<Arc<Forest>, String>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            Forest::from_json(BUILTIN_MODEL_JSON)
                .map(Arc::new)
                .map_err(|e| model_error("built-in model", &e))
        })
        .clone()
}

/// The model installed by [`install_model`], if any.
static INSTALLED: Mutex<Option<Result<Arc<Forest>, String>>> = Mutex::new(None);

/// Make every `netap-ml` policy built from now on ([`crate::PolicyConfig::build`])
/// use `model` instead of the built-in one: the daemon installs the file named by
/// its `netap_ml_model` setting at start-up, or the reason it could not be
/// read (then those policies fall back to NetAP or are refused, see
/// [`build`]). Policies already running keep their model.
pub fn install_model(model: Result<Arc<Forest>, String>) {
    *INSTALLED.lock().unwrap_or_else(|e| e.into_inner()) = Some(model);
}

/// The model `netap-ml` policies are built with: the installed one, else the built-in one.
pub fn model() -> Result<Arc<Forest>, String> {
    let installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    installed.unwrap_or_else(builtin_model)
}

/// A `netap-ml` policy on `model`; when the model is unusable, plain NetAP if
/// `fallback_to_netap` says so, else the reason as a [`ConfigError`] on `model`.
pub fn build(
    params: NetapMlParams,
    model: Result<Arc<Forest>, String>,
) -> Result<Box<dyn Policy>, ConfigError> {
    match model {
        Ok(forest) => Ok(Box::new(NetapMl::new(params, forest)?)),
        Err(_) if params.fallback_to_netap => {
            NetapMl::validate(&params)?;
            Ok(Box::new(NetAp::new(params.netap)?))
        }
        Err(reason) => Err(ConfigError::InvalidParam {
            param: "model",
            reason,
        }),
    }
}

/// The shipped model's text.
pub const BUILTIN_MODEL_JSON: &str = include_str!("../models/netap-ml.json");

/// `what: e` and its sources, one sentence.
pub fn model_error(what: &str, e: &dyn std::error::Error) -> String {
    let mut s = format!("{what}: {e}");
    let mut src = e.source();
    while let Some(c) = src {
        s += &format!(": {c}");
        src = c.source();
    }
    s
}

/// The interval in `from..=to` (step `step`) with the highest prediction for
/// `(vms, threads, msg_size)`; ties go to the longer interval.
pub fn best_interval(
    forest: &Forest,
    vms: f64,
    threads: f64,
    msg_size: f64,
    (from, to, step): (u64, u64, u64),
) -> (u64, f64) {
    let mut best = (from, f64::NEG_INFINITY);
    let mut i = from;
    while i <= to {
        let y = forest.predict(&[vms, threads, msg_size, i as f64]);
        if y >= best.1 {
            best = (i, y);
        }
        i += step.max(1);
    }
    best
}

impl NetapMl {
    /// Check the parameters; the error names the first bad one.
    pub fn validate(p: &NetapMlParams) -> Result<(), ConfigError> {
        NetAp::validate(&p.netap)?;
        if p.half_range_us == 0 || p.half_range_us > p.netap.max_interval_us {
            return Err(ConfigError::InvalidParam {
                param: "half_range_us",
                reason: format!(
                    "must be in 1..={} (max_interval_us), got {}",
                    p.netap.max_interval_us, p.half_range_us
                ),
            });
        }
        Ok(())
    }

    /// NetAP-ML with `forest` as its model.
    pub fn new(params: NetapMlParams, forest: Arc<Forest>) -> Result<Self, ConfigError> {
        Self::validate(&params)?;
        let mut p = NetapMl {
            params,
            netap: NetAp::new(params.netap)?,
            forest,
            bytes: 0,
            packets: 0,
            last_frame: None,
            seen_round: 0,
            prediction: None,
            restart_pending: false,
        };
        p.predict()?;
        Ok(p)
    }

    /// The last prediction and the range it gave.
    pub fn prediction(&self) -> Option<Prediction> {
        self.prediction
    }

    /// The NetAP underneath (rounds, search).
    pub fn netap(&self) -> &NetAp {
        &self.netap
    }

    fn features(&self) -> (f64, f64, f64) {
        let or_one = |v: u32| f64::from(v.max(1));
        let msg = if self.params.msg_size > 0 {
            f64::from(self.params.msg_size)
        } else {
            // No traffic seen yet: the smallest size of the paper's grid.
            self.last_frame.unwrap_or(64.0)
        };
        (or_one(self.params.vms), or_one(self.params.threads), msg)
    }

    /// Predict for the current features and set NetAP's range for its next
    /// (re)start.
    fn predict(&mut self) -> Result<(), ConfigError> {
        let (vms, threads, msg_size) = self.features();
        let (best_us, best_predicted) = best_interval(
            &self.forest,
            vms,
            threads,
            msg_size,
            (PREDICT_FROM_US, PREDICT_TO_US, PREDICT_STEP_US),
        );
        let n = &self.params.netap;
        let half = self.params.half_range_us;
        let lo = best_us.saturating_sub(half).max(n.min_interval_us);
        let hi = (best_us + half).min(n.max_interval_us);
        // The prediction can sit at or beyond an end of NetAP's range (e.g. 50
        // µs below a 100 µs minimum): keep a non-empty range at that end.
        let (lo, hi) = if lo >= hi {
            if best_us <= n.min_interval_us {
                (
                    n.min_interval_us,
                    (n.min_interval_us + half).min(n.max_interval_us),
                )
            } else {
                (
                    n.max_interval_us
                        .saturating_sub(half)
                        .max(n.min_interval_us),
                    n.max_interval_us,
                )
            }
        } else {
            (lo, hi)
        };
        self.netap.set_search_range(lo, hi)?;
        self.prediction = Some(Prediction {
            vms,
            threads,
            msg_size,
            best_us,
            best_predicted,
            range_us: (lo, hi),
        });
        Ok(())
    }
}

impl Policy for NetapMl {
    fn name(&self) -> &'static str {
        "netap-ml"
    }

    fn budget(&self) -> Budget {
        self.netap.budget()
    }

    fn start(&mut self, now: Instant) -> Decision {
        // The range was set by the last prediction; the search starts in it.
        self.bytes = 0;
        self.packets = 0;
        self.netap.start(now)
    }

    fn on_pass(&mut self, pass: &PassReport) -> Decision {
        if std::mem::take(&mut self.restart_pending) {
            // New features (a workload retune, e.g. the daemon's estimate
            // arriving a few seconds after NetAP restarted on the old ones):
            // search the new range from now. This pass ran at the old
            // interval, so it is not counted in the new search's first round.
            self.bytes = 0;
            self.packets = 0;
            return self.netap.start(pass.now);
        }
        self.bytes = self.bytes.saturating_add(pass.bytes);
        self.packets = self.packets.saturating_add(pass.packets);
        let d = self.netap.on_pass(pass);
        let Some(r) = self.netap.last_round().filter(|r| r.seq != self.seen_round) else {
            return d;
        };
        self.seen_round = r.seq;
        if self.packets > 0 {
            self.last_frame = Some(self.bytes as f64 / self.packets as f64);
        }
        self.bytes = 0;
        self.packets = 0;
        if r.restart.is_none() {
            return d;
        }
        // NetAP restarted its search on the old range: predict for the
        // workload now, and restart it in the new range from this pass.
        if self.predict().is_err() {
            return d;
        }
        self.netap.start(pass.now);
        match d.action {
            Action::Sleep { kick_threshold, .. } => {
                Decision::sleep(self.netap.interval(), kick_threshold)
            }
            _ => d,
        }
    }

    fn status(&self) -> PolicyStatus {
        PolicyStatus {
            predicted_us: self.prediction.map(|p| p.best_us),
            ..self.netap.status()
        }
    }

    fn retune(&mut self, r: &Retune) -> Result<(), RetuneError> {
        match *r {
            Retune::Workload {
                vms,
                threads,
                msg_size,
            } => {
                // A range that moved restarts the running search in it at
                // the next pass; an unchanged one leaves the search alone.
                self.params.vms = vms;
                self.params.threads = threads;
                self.params.msg_size = msg_size;
                self.predict()?;
                let moved = self
                    .prediction
                    .is_some_and(|p| p.range_us != self.netap.search().range());
                self.restart_pending |= moved;
                Ok(())
            }
            Retune::SearchRange { .. } => Err(r.not_applicable(self.name())),
            _ => self.netap.retune(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interface::WakeCause;
    use crate::time::Duration;

    /// vms <= 1.5: best at every interval up to 1225 µs (5 Gb/s, else 3);
    /// more VMs: best above 2975 µs.
    fn forest() -> Arc<Forest> {
        let h = |v: f64| format!("\"{:016x}\"", v.to_bits());
        let text = format!(
            r#"{{"format":"vadapt-netap-ml-forest","version":1,
            "features":["vms","threads","msg_size","interval_us"],"trees":[
            {{"feature":[0,3,-1,-1,3,-1,-1],"left":[1,2,-1,-1,5,-1,-1],"right":[4,3,-1,-1,6,-1,-1],
              "threshold_or_value":[{},{},{},{},{},{},{}]}}]}}"#,
            h(1.5),
            h(1225.0),
            h(5.0),
            h(3.0),
            h(2975.0),
            h(3.0),
            h(5.0)
        );
        Arc::new(Forest::from_json(&text).unwrap())
    }

    fn pass(now: Instant, bytes: u64, packets: u64) -> PassReport {
        PassReport {
            bytes,
            packets,
            ..PassReport::empty(now, WakeCause::Timer, Duration::ZERO)
        }
    }

    #[test]
    fn predicts_at_start_ties_to_the_longer_interval_and_narrows_the_search() {
        let mut p = NetapMl::new(NetapMlParams::default(), forest()).unwrap();
        let pr = p.prediction().unwrap();
        assert_eq!((pr.best_us, pr.best_predicted), (1200, 5.0));
        assert_eq!(pr.range_us, (700, 1700));
        p.start(Instant(0));
        // First probe of the golden section on 700..=1700.
        assert_eq!(p.netap().interval(), Duration::from_micros(1318));
        assert_eq!(p.netap().search().range(), (700, 1700));
        let s = p.status();
        assert_eq!(
            (s.predicted_us, s.search_range_us),
            (Some(1200), Some((700, 1700)))
        );
    }

    #[test]
    fn range_is_clamped_to_netap_bounds() {
        let params = NetapMlParams {
            vms: 2,
            ..NetapMlParams::default()
        };
        let p = NetapMl::new(params, forest()).unwrap();
        let pr = p.prediction().unwrap();
        assert_eq!(pr.best_us, 4000);
        assert_eq!(pr.range_us, (3500, 4000));
        let p = NetapMl::new(
            NetapMlParams {
                half_range_us: 0,
                ..params
            },
            forest(),
        );
        assert!(matches!(
            p,
            Err(ConfigError::InvalidParam {
                param: "half_range_us",
                ..
            })
        ));
    }

    #[test]
    fn a_workload_retune_restarts_the_search_in_the_new_range_at_the_next_pass() {
        let mut p = NetapMl::new(NetapMlParams::default(), forest()).unwrap();
        let mut now = Instant(0);
        p.start(now);
        // Into the search on the start-up range.
        for _ in 0..3_000 {
            now += Duration::from_micros(1000);
            p.on_pass(&pass(now, 1_000, 10));
        }
        assert_eq!(p.netap().search().range(), (700, 1700));
        let old_interval = p.netap().interval();
        p.retune(&Retune::Workload {
            vms: 3,
            threads: 2,
            msg_size: 128,
        })
        .unwrap();
        assert_eq!(p.prediction().unwrap().range_us, (3500, 4000));
        // Nothing moves before the next pass...
        assert_eq!(p.netap().search().range(), (700, 1700));
        assert_eq!(p.netap().interval(), old_interval);
        // ...which restarts the search in the new range and polls at once.
        now += Duration::from_micros(1000);
        let d = p.on_pass(&pass(now, 1_000, 10));
        assert_eq!(d, Decision::POLL);
        assert_eq!(p.netap().search().range(), (3500, 4000));
        assert!(p.netap().interval() >= Duration::from_micros(3500));
        // The same workload again: the range does not move, no restart.
        let interval = p.netap().interval();
        p.retune(&Retune::Workload {
            vms: 3,
            threads: 2,
            msg_size: 128,
        })
        .unwrap();
        now += Duration::from_micros(1000);
        p.on_pass(&pass(now, 1_000, 10));
        assert_eq!(p.netap().interval(), interval);
        assert_eq!(
            p.retune(&Retune::SearchRange { lo_us: 1, hi_us: 2 }),
            Err(RetuneError::NotApplicable {
                policy: "netap-ml",
                param: "search_range_us"
            })
        );
    }

    #[test]
    fn message_size_is_estimated_from_bytes_per_packet_when_not_given() {
        let mut p = NetapMl::new(NetapMlParams::default(), forest()).unwrap();
        assert_eq!(p.prediction().unwrap().msg_size, 64.0);
        let mut now = Instant(0);
        p.start(now);
        for _ in 0..1100 {
            now += Duration::from_micros(1000);
            p.on_pass(&pass(now, 1500, 1));
        }
        assert_eq!(p.last_frame, Some(1500.0));
        p.retune(&Retune::Workload {
            vms: 1,
            threads: 1,
            msg_size: 0,
        })
        .unwrap();
        assert_eq!(p.prediction().unwrap().msg_size, 1500.0);
    }

    #[test]
    fn an_unusable_model_is_refused_or_falls_back_to_netap_when_asked() {
        let e = build(NetapMlParams::default(), Err("no such file".into())).unwrap_err();
        assert_eq!(
            e,
            ConfigError::InvalidParam {
                param: "model",
                reason: "no such file".into()
            }
        );
        let fallback = NetapMlParams {
            fallback_to_netap: true,
            ..NetapMlParams::default()
        };
        let p = build(fallback, Err("no such file".into())).unwrap();
        assert_eq!(p.name(), "netap");
        assert_eq!(build(fallback, Ok(forest())).unwrap().name(), "netap-ml");
        // Bad parameters are refused even on the fallback path.
        let bad = NetapMlParams {
            half_range_us: 0,
            ..fallback
        };
        assert!(build(bad, Err("x".into())).is_err());
    }

    #[test]
    fn the_built_in_model_builds_and_predicts_within_netap_bounds() {
        let forest = builtin_model().unwrap();
        let (best, gbps) = best_interval(&forest, 3.0, 2.0, 128.0, (50, 4000, 50));
        assert!((50..=4000).contains(&best) && best % 50 == 0);
        assert!(gbps.is_finite() && gbps > 0.0);
    }
}
