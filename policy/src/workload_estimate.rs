//! NetAP-ML's workload features estimated from a host's transmit counters
//! (issue #14, item 4). Pure, like the policies: the daemon's feature loop
//! (`vadapt_dataplane::workload_loop`) reads its VM ports' counters and
//! feeds them here.
//!
//! NetAP-ML's model wants (VMs, sender threads per VM, message size), the
//! features of its training grid (`docs/netap-ml.md`, §1). A
//! [`WorkloadEstimator`] is fed every VM port's cumulative transmit counters
//! ([`PortTx`]) once per window (the daemon uses 1 s) and works on the
//! difference to the previous window. It never reads
//! the clock; the caller decides what a window is.
//!
//! # How each feature is estimated, and where it is uncertain
//!
//! - **`vms`**: VM ports (any policy) whose guest sent at least
//!   [`EstimatorParams::min_packets`] packets in the window (guest→host,
//!   `tx`). The threshold keeps an idle guest out: ARP, neighbour discovery
//!   and DHCP renewals are a few packets a second, a sender thread thousands.
//!   Uncertain: a VM sending fewer packets than that counts as idle; a VM
//!   that only receives is not a sender and is not counted.
//! - **`threads`**: for each active VM, its queue pairs whose `tx` carried at
//!   least `min_packets` in the window; the feature is per VM, so the mean
//!   over active VMs, rounded half up, at least 1. A Linux guest's senders
//!   (XPS) and the synthetic guest's threads each use their own queue pair
//!   when the device has as many pairs as threads. Uncertain: threads that
//!   share a queue pair (fewer pairs than threads, or XPS off) are
//!   **undercounted**; one thread whose flows hash to several pairs is
//!   overcounted.
//! - **`msg_size`**: `tx` bytes ÷ `tx` packets over the active queues, minus
//!   [`HEADER_BYTES`] (54 = Ethernet 14 + IPv4 20 + TCP 20, the simulator's
//!   `header_bytes`, so the result is the TCP payload per segment), with a
//!   floor of one byte. The training grid's `msg_size` is the sender's message size
//!   (netperf `-m`). That is the payload per segment only when the sender
//!   does not coalesce: TCP senders put several small messages into one
//!   segment (up to ~1448 B), so for them this **overestimates**. For
//!   non-TCP frames the 54 is wrong by the header difference (40 B less for
//!   raw Ethernet frames, e.g. the synthetic guest's).
//!
//! # Hysteresis
//!
//! A change is reported only when the window's features differ from the
//! last reported ones (`vms` or `threads` by any integer, `msg_size` by more
//! than [`EstimatorParams::size_change`]) and the same new features (within
//! the same tolerance) held for [`EstimatorParams::hold_windows`]
//! consecutive windows. The first estimate is held the same way. Idle
//! windows (no active VM) report nothing and keep the last features, since
//! the model has nothing to say about no traffic.

use std::collections::BTreeMap;

/// Header bytes subtracted from the mean frame size: Ethernet 14, IPv4 20
/// and TCP 20, as the simulator's `header_bytes` that built the training grid.
pub const HEADER_BYTES: u64 = 54;

/// Tuning of a [`WorkloadEstimator`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EstimatorParams {
    /// Packets a queue (and so a VM) must send in one window to count as
    /// active. Default 100 (per 1-s window: above an idle guest's chatter).
    pub min_packets: u64,
    /// Relative change of `msg_size` that counts as a change (default 0.25).
    pub size_change: f64,
    /// Consecutive windows a new estimate must hold before it is reported
    /// (default 2).
    pub hold_windows: u32,
}

impl Default for EstimatorParams {
    fn default() -> Self {
        EstimatorParams {
            min_packets: 100,
            size_change: 0.25,
            hold_windows: 2,
        }
    }
}

/// NetAP-ML's workload features, as sent in `Retune::Workload`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Active VM ports.
    pub vms: u32,
    /// Active sender threads per active VM (mean, rounded).
    pub threads: u32,
    /// Estimated message size, bytes.
    pub msg_size: u32,
}

/// What one window gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// This window's features; `None` when no VM was active (or for the
    /// first snapshot, which only sets the baseline).
    pub window: Option<Features>,
    /// A change to report (send to the policies): set once per change, when
    /// it has held for `hold_windows` windows.
    pub changed: Option<Features>,
}

/// One VM port's cumulative guest→host (`tx`) counters, per queue pair.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortTx {
    /// The port's name (the same port must keep it from window to window).
    pub port: String,
    /// Per queue pair: (packets, bytes) sent by the guest since the port
    /// was created.
    pub queues: Vec<(u64, u64)>,
}

/// Per-port, per-queue `tx` (packets, bytes) at the previous window.
type Counters = BTreeMap<String, Vec<(u64, u64)>>;

/// Estimates NetAP-ML's features from successive counter snapshots (see the
/// module docs).
#[derive(Debug, Default)]
pub struct WorkloadEstimator {
    params: EstimatorParams,
    previous: Option<Counters>,
    reported: Option<Features>,
    /// A candidate that differs from `reported`, and for how many windows it held.
    candidate: Option<(Features, u32)>,
}

impl WorkloadEstimator {
    /// An estimator with `params`.
    pub fn new(params: EstimatorParams) -> Self {
        WorkloadEstimator {
            params,
            ..Default::default()
        }
    }

    /// The last reported features, if any.
    pub fn reported(&self) -> Option<Features> {
        self.reported
    }

    /// Feed every VM port's counters at the end of a window. Bounded work:
    /// one pass over the ports and their queues.
    pub fn observe(&mut self, ports: impl IntoIterator<Item = PortTx>) -> Observation {
        let now: Counters = ports.into_iter().map(|p| (p.port, p.queues)).collect();
        let window = self
            .previous
            .as_ref()
            .and_then(|prev| self.features(prev, &now));
        self.previous = Some(now);
        let Some(w) = window else {
            // An idle window breaks a candidate's run.
            self.candidate = None;
            return Observation::default();
        };
        let changed = self.hold(w);
        Observation {
            window: Some(w),
            changed,
        }
    }

    fn features(&self, prev: &Counters, now: &Counters) -> Option<Features> {
        let min = self.params.min_packets.max(1);
        let (mut vms, mut threads, mut packets, mut bytes) = (0u64, 0u64, 0u64, 0u64);
        for (port, queues) in now {
            // A port not seen before only sets its baseline.
            let Some(before) = prev.get(port) else {
                continue;
            };
            let mut active = 0u64;
            for (q, &(p, b)) in queues.iter().enumerate() {
                let (p0, b0) = before.get(q).copied().unwrap_or((p, b));
                let dp = p.saturating_sub(p0);
                if dp >= min {
                    active += 1;
                    packets += dp;
                    bytes += b.saturating_sub(b0);
                }
            }
            if active > 0 {
                vms += 1;
                threads += active;
            }
        }
        if vms == 0 {
            return None;
        }
        let frame = bytes / packets;
        Some(Features {
            vms: vms as u32,
            threads: ((threads + vms / 2) / vms).max(1) as u32,
            msg_size: frame.saturating_sub(HEADER_BYTES).max(1) as u32,
        })
    }

    /// Do `a` and `b` count as the same workload?
    fn same(&self, a: Features, b: Features) -> bool {
        let (x, y) = (f64::from(a.msg_size), f64::from(b.msg_size));
        a.vms == b.vms && a.threads == b.threads && (x - y).abs() <= self.params.size_change * y
    }

    fn hold(&mut self, w: Features) -> Option<Features> {
        if self.reported.is_some_and(|r| self.same(w, r)) {
            self.candidate = None;
            return None;
        }
        let held = match self.candidate {
            Some((c, n)) if self.same(w, c) => n + 1,
            _ => 1,
        };
        if held >= self.params.hold_windows.max(1) {
            self.reported = Some(w);
            self.candidate = None;
            Some(w)
        } else {
            self.candidate = Some((w, held));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// Feeds cumulative counters made of per-window increments.
    struct Feed {
        est: WorkloadEstimator,
        totals: Vec<(String, Vec<(u64, u64)>)>,
    }

    impl Feed {
        fn new(ports: &[(&str, usize)]) -> Self {
            let totals = ports
                .iter()
                .map(|(n, q)| (n.to_string(), vec![(0, 0); *q]))
                .collect();
            let mut f = Feed {
                est: WorkloadEstimator::new(EstimatorParams::default()),
                totals,
            };
            // The baseline.
            assert_eq!(f.window(&[]), Observation::default());
            f
        }

        /// One window in which `(port, queue)` sent `packets` frames of `frame` bytes.
        fn window(&mut self, sent: &[(usize, usize, u64, u64)]) -> Observation {
            for &(p, q, packets, frame) in sent {
                let c = &mut self.totals[p].1[q];
                c.0 += packets;
                c.1 += packets * frame;
            }
            let ports = self.totals.iter().map(|(n, q)| PortTx {
                port: n.clone(),
                queues: q.clone(),
            });
            self.est.observe(ports)
        }
    }

    const F: fn(u32, u32, u32) -> Features = |vms, threads, msg_size| Features {
        vms,
        threads,
        msg_size,
    };

    #[test]
    fn an_idle_port_is_not_counted() {
        let mut f = Feed::new(&[("a", 1), ("b", 1)]);
        // `b` sends only a few packets (ARP and the like).
        let o = f.window(&[(0, 0, 10_000, 1054), (1, 0, 5, 60)]);
        assert_eq!(o.window, Some(F(1, 1, 1000)));
        // No VM active: nothing to say.
        assert_eq!(f.window(&[(1, 0, 99, 60)]), Observation::default());
    }

    #[test]
    fn threads_are_active_queues_per_active_vm() {
        let mut f = Feed::new(&[("a", 4), ("b", 4)]);
        // `a` uses three queue pairs, `b` one: mean 2 per VM.
        let w = [
            (0, 0, 1000, 118),
            (0, 1, 1000, 118),
            (0, 2, 1000, 118),
            (1, 3, 500, 118),
        ];
        assert_eq!(f.window(&w).window, Some(F(2, 2, 64)));
        // `a` three, `b` two: 2.5 rounds up to 3.
        let w = [
            (0, 0, 1000, 118),
            (0, 1, 1000, 118),
            (0, 2, 1000, 118),
            (1, 0, 500, 118),
            (1, 1, 500, 118),
            (0, 3, 50, 118),
        ];
        assert_eq!(f.window(&w).window, Some(F(2, 3, 64)));
    }

    #[test]
    fn a_change_is_reported_once_after_it_held_for_two_windows() {
        let mut f = Feed::new(&[("a", 2)]);
        let one = [(0, 0, 1000, 1054)];
        assert_eq!(f.window(&one).changed, None);
        assert_eq!(f.window(&one).changed, Some(F(1, 1, 1000)));
        assert_eq!(f.window(&one).changed, None);
        // A second thread for one window only: not reported.
        let two = [(0, 0, 1000, 1054), (0, 1, 1000, 1054)];
        assert_eq!(f.window(&two).changed, None);
        assert_eq!(f.window(&one).changed, None);
        // For two windows: reported once.
        assert_eq!(f.window(&two).changed, None);
        assert_eq!(f.window(&two).changed, Some(F(1, 2, 1000)));
        assert_eq!(f.window(&two).changed, None);
        assert_eq!(f.est.reported(), Some(F(1, 2, 1000)));
    }

    #[test]
    fn a_size_change_below_the_threshold_is_ignored() {
        let mut f = Feed::new(&[("a", 1)]);
        f.window(&[(0, 0, 1000, 254)]);
        assert_eq!(f.window(&[(0, 0, 1000, 254)]).changed, Some(F(1, 1, 200)));
        // 240 B is +20 %: the same workload.
        for _ in 0..3 {
            assert_eq!(f.window(&[(0, 0, 1000, 294)]).changed, None);
        }
        // 300 B is +50 %: a change.
        assert_eq!(f.window(&[(0, 0, 1000, 354)]).changed, None);
        assert_eq!(f.window(&[(0, 0, 1000, 354)]).changed, Some(F(1, 1, 300)));
    }

    #[test]
    fn an_idle_window_breaks_a_candidate_and_keeps_the_report() {
        let mut f = Feed::new(&[("a", 1), ("b", 1)]);
        let one = [(0, 0, 1000, 118)];
        f.window(&one);
        assert_eq!(f.window(&one).changed, Some(F(1, 1, 64)));
        let both = [(0, 0, 1000, 118), (1, 0, 1000, 118)];
        assert_eq!(f.window(&both).changed, None);
        assert_eq!(f.window(&[]).changed, None);
        assert_eq!(f.window(&both).changed, None);
        assert_eq!(f.window(&both).changed, Some(F(2, 1, 64)));
    }

    #[test]
    fn a_port_added_later_only_sets_its_baseline_first() {
        let mut f = Feed::new(&[("a", 1)]);
        f.totals.push(("b".into(), vec![(1_000_000, 64_000_000)]));
        // `b`'s first counters are not a window's traffic.
        assert_eq!(f.window(&[(0, 0, 1000, 118)]).window, Some(F(1, 1, 64)));
        assert_eq!(
            f.window(&[(0, 0, 1000, 118), (1, 0, 1000, 118)]).window,
            Some(F(2, 1, 64))
        );
    }
}
