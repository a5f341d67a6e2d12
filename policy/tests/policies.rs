//! Property tests over every policy, built the way workers build them
//! ([`PolicyConfig::build`]), fed random pass reports.
//!
//! Liveness properties that hold for every policy:
//! - a pass that left work behind (`more_work`) is always followed by a poll,
//!   so no policy sleeps or waits on a kick while a ring still has buffers;
//! - every policy except busy-poll stops polling once the queues are idle
//!   (within a bounded number of passes that depends on its parameters);
//! - decisions need no clamping: `sanitized()` leaves them unchanged.
//!
//! Safety properties per policy are in the `*_invariants` tests.

use proptest::prelude::*;
use vadapt_policy::config::{EekbpParams, GrowShrinkParams, NetapParams};
use vadapt_policy::netap::NetAp;
use vadapt_policy::{
    Action, Decision, Duration, FreqHint, Instant, PassReport, Policy, PolicyConfig, PolicyKind,
    WakeCause, MAX_SLEEP,
};

fn wake_cause() -> impl Strategy<Value = WakeCause> {
    prop_oneof![
        Just(WakeCause::Immediate),
        Just(WakeCause::Timer),
        Just(WakeCause::Kick),
        Just(WakeCause::Recheck),
        Just(WakeCause::Timeout),
    ]
}

/// One pass, with the time step since the previous one.
#[derive(Clone, Debug)]
struct Step {
    dt_ns: u64,
    wake: WakeCause,
    waited_ns: u64,
    packets: u64,
    bytes_per_packet: u64,
    more_work: bool,
    fill: u16,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![0u64..2_000, 0u64..5_000_000, Just(1_000_000_000u64)],
        wake_cause(),
        0u64..10_000_000,
        prop_oneof![Just(0u64), 0u64..300],
        0u64..65_536,
        any::<bool>(),
        prop_oneof![0u16..=1000, Just(u16::MAX)],
    )
        .prop_map(
            |(dt_ns, wake, waited_ns, packets, bytes_per_packet, more_work, fill)| Step {
                dt_ns,
                wake,
                waited_ns,
                packets,
                bytes_per_packet,
                more_work,
                fill,
            },
        )
}

fn report(now: Instant, s: &Step) -> PassReport {
    PassReport {
        now,
        wake: s.wake,
        waited: Duration(s.waited_ns),
        packets: s.packets,
        bytes: s.packets * s.bytes_per_packet,
        more_work: s.more_work,
        max_fill_permille: s.fill,
    }
}

fn netap_params() -> impl Strategy<Value = NetapParams> {
    (
        0u64..3_000,
        1u64..8_000,
        0.55f64..0.75,
        1u64..300,
        1u64..2_000,
        0.0f64..1.0,
        prop_oneof![Just(0u32), 50u32..1_000],
        prop_oneof![Just(0u16), 1u16..=1000],
        any::<bool>(),
        any::<bool>(),
        0.0f64..0.5,
        any::<bool>(),
    )
        .prop_map(
            |(
                min,
                width,
                ratio,
                min_distance_us,
                round_ms,
                min_change,
                max_rounds,
                kick,
                notify_during_sleep,
                kick_probe,
                kick_probe_margin,
                ring_guard,
            )| {
                NetapParams {
                    min_interval_us: min,
                    max_interval_us: min + width,
                    ratio,
                    min_distance_us,
                    round_ms,
                    min_change,
                    max_rounds,
                    kick_threshold_permille: kick,
                    notify_during_sleep,
                    kick_probe,
                    kick_probe_margin,
                    ring_guard,
                }
            },
        )
        .prop_filter("valid", |p| NetAp::validate(p).is_ok())
}

fn growshrink_params() -> impl Strategy<Value = GrowShrinkParams> {
    (0u64..=10_000_000, 1u64..100_000, 0u64..5, 0u64..5).prop_map(
        |(poll_max_ns, poll_start_ns, poll_grow, poll_shrink)| GrowShrinkParams {
            poll_max_ns,
            poll_start_ns,
            poll_grow,
            poll_shrink,
        },
    )
}

fn eekbp_params() -> impl Strategy<Value = EekbpParams> {
    (1u32..512, 1u32..100).prop_map(|(quota, empty_passes)| EekbpParams {
        quota,
        empty_passes,
    })
}

/// Every policy kind, with its defaults or with random valid parameters.
fn config() -> impl Strategy<Value = PolicyConfig> {
    prop_oneof![
        proptest::sample::select(PolicyKind::ALL.to_vec()).prop_map(PolicyConfig::default_for),
        netap_params().prop_map(PolicyConfig::Netap),
        growshrink_params().prop_map(PolicyConfig::Growshrink),
        eekbp_params().prop_map(PolicyConfig::Eekbp),
    ]
}

/// True if `d` is already within the limits `sanitized` enforces.
fn is_sane(d: &Decision) -> bool {
    match d.action {
        Action::Poll => true,
        Action::Sleep {
            duration,
            kick_threshold,
        } => duration <= MAX_SLEEP && kick_threshold.is_none_or(|t| (1..=1000).contains(&t)),
        Action::WaitKick { timeout } => timeout.is_none_or(|t| t <= MAX_SLEEP),
    }
}

/// Feed `steps` to `policy`; returns every (report, decision) pair.
fn run(policy: &mut dyn Policy, steps: &[Step]) -> Vec<(PassReport, Decision)> {
    let mut now = Instant(1_000);
    let mut out = Vec::with_capacity(steps.len() + 1);
    let first = policy.start(now);
    out.push((
        PassReport::empty(now, WakeCause::Immediate, Duration::ZERO),
        first,
    ));
    for s in steps {
        now += Duration(s.dt_ns);
        let r = report(now, s);
        out.push((r, policy.on_pass(&r)));
    }
    out
}

proptest! {
    // Debug-build generation dominates the run time; 128 cases of up to 120
    // passes keep the suite at a few seconds.
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_reports_give_sane_decisions_and_more_work_always_polls(
        cfg in config(),
        steps in proptest::collection::vec(step(), 0..120),
    ) {
        let mut p = cfg.build().unwrap();
        prop_assert_eq!(p.name(), cfg.kind().as_str());
        prop_assert!(p.budget().packets > 0 && p.budget().bytes > 0);
        for (r, d) in run(p.as_mut(), &steps) {
            prop_assert!(is_sane(&d), "{:?}", d);
            prop_assert_eq!(d.sanitized(), d);
            if r.more_work {
                prop_assert_eq!(d.action, Action::Poll, "more_work after {:?}", r);
            }
        }
    }

    #[test]
    fn policies_are_deterministic(
        cfg in config(),
        steps in proptest::collection::vec(step(), 0..100),
    ) {
        let mut a = cfg.build().unwrap();
        let mut b = cfg.build().unwrap();
        let da = run(a.as_mut(), &steps);
        let db = run(b.as_mut(), &steps);
        prop_assert_eq!(da, db);
        prop_assert_eq!(a.status(), b.status());
    }

    /// After any history, a worker whose queues are idle stops polling: it is
    /// told to sleep or to wait for a kick within a bounded number of passes
    /// (busy-poll excepted, by design). Each idle pass follows the previous
    /// decision as a worker would: a poll takes 100 µs, a sleep ends on its timer.
    #[test]
    fn idle_queues_stop_polling(
        cfg in config(),
        history in proptest::collection::vec(step(), 0..100),
    ) {
        let mut p = cfg.build().unwrap();
        let log = run(p.as_mut(), &history);
        let mut now = log.last().unwrap().0.now;
        let mut last = log.last().unwrap().1;
        // Growshrink polls at most poll_max_ns (<= 10 ms here) = 100 passes of
        // 100 µs; EE-KBP at most empty_passes (< 100) passes.
        let bound = 250;
        let mut stopped = false;
        for _ in 0..bound {
            let (wake, waited) = match last.action {
                Action::Poll => (WakeCause::Immediate, Duration::ZERO),
                Action::Sleep { duration, .. } => (WakeCause::Timer, duration),
                Action::WaitKick { .. } => {
                    stopped = true;
                    break;
                }
            };
            now += waited + Duration::from_micros(100);
            last = p.on_pass(&PassReport::empty(now, wake, waited));
            if !matches!(last.action, Action::Poll) {
                stopped = true;
                break;
            }
        }
        prop_assert_eq!(stopped, cfg.kind() != PolicyKind::BusyPoll, "{:?}", last);
    }

    #[test]
    fn netap_invariants(
        params in netap_params(),
        steps in proptest::collection::vec(step(), 0..120),
    ) {
        let mut p = NetAp::new(params).unwrap();
        let min = Duration::from_micros(params.min_interval_us);
        let max = Duration::from_micros(params.max_interval_us);
        let kick = if params.notify_during_sleep {
            Some(1)
        } else {
            (params.kick_threshold_permille > 0).then_some(params.kick_threshold_permille)
        };
        let round_len = Duration::from_millis(params.round_ms);
        let mut now = Instant(0);
        p.start(now);
        let mut round_start = now;
        let mut seq = 0;
        for s in &steps {
            now += Duration(s.dt_ns);
            let r = report(now, s);
            let d = p.on_pass(&r);
            match d.action {
                Action::Poll => {
                    let full = !p.kick_driven() && kick.is_some_and(|k| r.max_fill_permille >= k);
                    prop_assert!(r.more_work || full, "polled without reason");
                }
                Action::Sleep { duration, kick_threshold } => {
                    prop_assert!(!p.kick_driven());
                    prop_assert!(min <= duration && duration <= max, "{:?}", duration);
                    prop_assert_eq!(kick_threshold, kick);
                }
                // Only the kick-driven check after a search, or the service
                // it chose, waits for kicks; never past MAX_SLEEP.
                Action::WaitKick { timeout } => {
                    prop_assert!(params.kick_probe && p.kick_driven());
                    prop_assert!(timeout.is_some_and(|t| t <= MAX_SLEEP));
                }
            }
            // A round closes exactly at the first pass at or after its end.
            let closed = now.saturating_since(round_start) >= round_len;
            let rec = p.last_round();
            prop_assert_eq!(rec.map_or(0, |r| r.seq), seq + u64::from(closed));
            if closed {
                seq += 1;
                round_start = now;
                let rec = rec.unwrap();
                prop_assert!(rec.length >= round_len);
                prop_assert!(rec.measured <= rec.bytes);
                if !p.kick_driven() {
                    prop_assert_eq!(Some(rec.next_interval), p.status().interval);
                }
            }
            let st = p.status();
            prop_assert!(params.max_rounds == 0 || st.round.unwrap() < params.max_rounds);
            // No polling interval to report while kick-driven.
            prop_assert_eq!(st.interval.is_none(), p.kick_driven());
            let i = st.interval.unwrap_or(min);
            prop_assert!(min <= i && i <= max);
        }
    }

    #[test]
    fn growshrink_invariants(
        params in growshrink_params(),
        steps in proptest::collection::vec(step(), 0..120),
    ) {
        let mut p = PolicyConfig::Growshrink(params).build().unwrap();
        for (r, d) in run(p.as_mut(), &steps) {
            let sleeps = matches!(d.action, Action::Sleep { .. });
            prop_assert!(!sleeps, "growshrink never sleeps on a timer");
            prop_assert_eq!(d.freq, FreqHint::Keep);
            let w = p.status().interval.unwrap();
            prop_assert!(w.as_nanos() <= params.poll_max_ns, "window {:?} after {:?}", w, r);
        }
    }

    #[test]
    fn eekbp_invariants(
        params in eekbp_params(),
        steps in proptest::collection::vec(step(), 0..120),
    ) {
        let mut p = PolicyConfig::Eekbp(params).build().unwrap();
        prop_assert_eq!(p.budget().packets, params.quota);
        let log = run(p.as_mut(), &steps);
        let mut prev: Option<Decision> = None;
        for (r, d) in &log {
            match d.action {
                Action::WaitKick { timeout } => {
                    prop_assert_eq!(timeout, None);
                    prop_assert_eq!(d.freq, FreqHint::Min);
                }
                Action::Poll => {
                    // Max only on the first poll after a wait.
                    let after_wait = matches!(prev.map(|p| p.action), Some(Action::WaitKick { .. }))
                        || matches!(r.wake, WakeCause::Kick | WakeCause::Recheck | WakeCause::Timeout);
                    if d.freq == FreqHint::Max {
                        prop_assert!(after_wait, "Max without a wake: {:?}", r);
                    } else {
                        prop_assert_eq!(d.freq, FreqHint::Keep);
                    }
                }
                Action::Sleep { .. } => prop_assert!(false, "EE-KBP never sleeps on a timer"),
            }
            prev = Some(*d);
        }
        prop_assert_eq!(p.status(), Default::default());
    }

    /// `build` accepts exactly what `validate` accepts, for any parameters.
    #[test]
    fn build_agrees_with_validate(
        min in 0u64..200_000, max in 0u64..200_000, ratio in -1.0f64..2.0,
        md in 0u64..100, round_ms in 0u64..100, min_change in -1.0f64..2.0,
        max_rounds in 0u32..40, kick in 0u16..1100, margin in -1.0f64..1.0,
        poll_max in 0u64..200_000_000, start in 0u64..10, quota in 0u32..3, empty in 0u32..3,
    ) {
        let cfgs = [
            PolicyConfig::Netap(NetapParams {
                min_interval_us: min, max_interval_us: max, ratio, min_distance_us: md, round_ms,
                min_change, max_rounds, kick_threshold_permille: kick,
                notify_during_sleep: false, kick_probe: true, kick_probe_margin: margin, ring_guard: true,
            }),
            PolicyConfig::Growshrink(GrowShrinkParams {
                poll_max_ns: poll_max, poll_start_ns: start, poll_grow: 0, poll_shrink: 0,
            }),
            PolicyConfig::Eekbp(EekbpParams { quota, empty_passes: empty }),
        ];
        for cfg in cfgs {
            let v = cfg.validate();
            let b = cfg.build();
            prop_assert_eq!(v.err(), b.err());
        }
    }
}

#[test]
fn every_kind_builds_with_defaults() {
    for kind in PolicyKind::ALL {
        let cfg = PolicyConfig::default_for(kind);
        let p = cfg.build().unwrap();
        assert_eq!(p.name(), kind.as_str());
    }
}

#[test]
fn netap_ml_default_config_builds_with_the_built_in_model() {
    let policy = vadapt_policy::PolicyConfig::default_for(vadapt_policy::PolicyKind::NetapMl)
        .build()
        .unwrap();
    assert_eq!(policy.name(), "netap-ml");
}
