//! Core groups and allocators on a small request/response scenario: pinning
//! isolates the vCPUs from the queue workers' preemptions, vSPACE re-pins
//! every period, a best-effort VM gets what vSPACE-R lends, bad
//! `[host.core_alloc]` tables are named with their line.

use vadapt_sim::{run_scenario, Scenario, ScenarioError};

/// 8 cores, one RR VM of 8 vCPUs and 8 queue pairs at `kqps`, interrupt
/// mode, 2 s; `alloc` is the body of `[host.core_alloc]` (empty: none).
fn rr(kqps: f64, alloc: &str) -> Scenario {
    let table = if alloc.is_empty() {
        String::new()
    } else {
        format!("[host.core_alloc]\n{alloc}\n")
    };
    let text = format!(
        r#"
duration_s = 2
sample_ms = 500
[host]
cores = 8
{table}
[host.power]
freqs_mhz = [1000.0, 2000.0]
idle_w = [1.0, 1.2]
active_w = [2.6, 5.5]
[[vms]]
vcpus = 8
queues = 8
[vms.workload]
kind = "rr"
rate_qps = [[0.0, {qps}]]
service_dist = "exp"
service_mean_us = 20.0
server_threads = 8
[[timeline]]
at_s = 0
policy = "interrupt"
[[periods]]
name = "all"
from_s = 0.5
to_s = 2
"#,
        qps = kqps * 1000.0
    );
    Scenario::from_toml_str(&text, "rr.toml").expect("test scenario is valid")
}

#[test]
fn time_shared_vcpus_are_preempted_and_isolated_ones_are_not() {
    let shared = run_scenario(&rr(40.0, ""), 1).unwrap();
    let ev = shared.core_events;
    assert!(ev.preemptions > 100, "{ev:?}");
    assert!(ev.slice_waits <= ev.preemptions);
    assert_eq!(ev.migrations, 0);
    let iso = run_scenario(
        &rr(40.0, "kind = \"isolated\"\nvcpu_cores = 5\nnq_cores = 3"),
        1,
    )
    .unwrap();
    assert_eq!(iso.core_events.preemptions, 0);
    assert_eq!(iso.core_events.core_periods[0], 5 * iso.core_events.periods);
    assert_eq!(iso.core_events.core_periods[1], 3 * iso.core_events.periods);
    // Same load served either way.
    let served = |r: &vadapt_sim::SimResult| r.periods[0].served_qps.unwrap();
    assert!((served(&shared) - served(&iso)).abs() < 0.05 * served(&shared));
}

#[test]
fn vspace_energy_mode_parks_cores_and_resource_mode_lends_them() {
    let e = run_scenario(&rr(20.0, "kind = \"vspace\"\nmode = \"e\""), 1).unwrap();
    let ev = e.core_events;
    // A period every 100 ms before the end at 2 s; the allocation shrinks
    // from 4 + 4.
    assert_eq!(ev.periods, 19);
    assert!(ev.core_periods[3] > 0, "{ev:?}");
    assert!(ev.migrations > 0, "re-pinning moves threads: {ev:?}");
    assert_eq!(ev.preemptions, 0);
    assert_eq!(ev.be_core_s, 0.0);
    let r = run_scenario(
        &rr(20.0, "kind = \"vspace\"\nmode = \"R\"\nbe_vm = true"),
        1,
    )
    .unwrap();
    let evr = r.core_events;
    assert_eq!(evr.core_periods[3], 0);
    assert_eq!(evr.core_periods[2], ev.core_periods[3]);
    assert!(evr.be_core_s > 0.0);
    // The best-effort VM's busy cores cost power that parked cores do not.
    assert!(r.energy_j.unwrap() > e.energy_j.unwrap());
}

#[test]
fn corenap_like_time_shares_fewer_cores_than_the_host_has() {
    let r = run_scenario(&rr(20.0, "kind = \"corenap-like\""), 1).unwrap();
    let ev = r.core_events;
    assert_eq!(ev.core_periods[1], 0, "one shared group: {ev:?}");
    assert!(ev.core_periods[0] < 8 * ev.periods, "{ev:?}");
    assert!(ev.core_periods[3] > 0, "{ev:?}");
}

#[test]
fn time_sharing_on_fewer_cores_parks_the_rest_and_preempts_more() {
    let all = run_scenario(&rr(40.0, "kind = \"time-sharing\"\ncores = 8"), 1).unwrap();
    let r = run_scenario(&rr(40.0, "kind = \"time-sharing\"\ncores = 3"), 1).unwrap();
    let ev = r.core_events;
    assert_eq!(ev.core_periods[0], 3 * ev.periods, "{ev:?}");
    assert_eq!(ev.core_periods[3], 5 * ev.periods, "{ev:?}");
    assert_eq!(ev.migrations, 0);
    // The same workers' wake-ups land on fewer cores.
    assert!(ev.preemptions > all.core_events.preemptions, "{ev:?}");
    assert_eq!(all.core_events.core_periods[3], 0);
    // Parked cores draw less than idle ones of the group.
    assert!(r.energy_j.unwrap() < all.energy_j.unwrap());
}

#[test]
fn demeter_like_lends_every_core_it_does_not_give_the_lc_vm() {
    let r = run_scenario(&rr(20.0, "kind = \"demeter-like\"\nbe_vm = true"), 1).unwrap();
    let ev = r.core_events;
    assert_eq!(ev.core_periods[1], 0, "one shared group: {ev:?}");
    assert_eq!(ev.core_periods[3], 0, "nothing parked: {ev:?}");
    assert!(ev.core_periods[2] > 0, "{ev:?}");
    assert!(ev.be_core_s > 0.0, "{ev:?}");
}

#[test]
fn same_seed_same_core_events() {
    let sc = rr(40.0, "kind = \"vspace\"\nmode = \"p\"");
    assert_eq!(
        run_scenario(&sc, 3).unwrap().core_events,
        run_scenario(&sc, 3).unwrap().core_events
    );
}

fn bad(alloc: &str) -> (usize, String, String) {
    let text = format!(
        "duration_s = 1\n[host]\ncores = 4\n[host.core_alloc]\n{alloc}\n[[vms]]\nvcpus = 1\n[vms.workload]\nkind = \"stream\"\n[[timeline]]\nat_s = 0\npolicy = \"interrupt\"\n"
    );
    match Scenario::from_toml_str(&text, "bad.toml") {
        Err(ScenarioError::Invalid {
            line, key, message, ..
        }) => (line, key, message),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn bad_core_alloc_tables_are_named() {
    let (line, key, msg) = bad("kind = \"vspace\"\nmode = \"q\"");
    assert_eq!((line, key.as_str()), (6, "host.core_alloc.mode"), "{msg}");
    let (line, key, _) = bad("kind = \"magic\"");
    assert_eq!((line, key.as_str()), (5, "host.core_alloc.kind"));
    let (_, key, msg) = bad("kind = \"isolated\"\nvcpu_cores = 3\nnq_cores = 2");
    assert_eq!(key, "host.core_alloc", "{msg}");
    let (_, key, _) = bad("kind = \"vspace\"");
    assert_eq!(key, "host.core_alloc.mode");
    let (line, key, _) = bad("kind = \"time-sharing\"\ncores = 5");
    assert_eq!((line, key.as_str()), (6, "host.core_alloc.cores"));
}

/// vSPACE's explorer trace counts every round by its branch and follows
/// the thresholds: at a light load every round is rewarded, so they only
/// climb from 0.7. (The violation branch is the policy crate's tests'.)
#[test]
fn vspace_explorer_trace_counts_rounds_by_branch() {
    let mut sc = rr(20.0, "kind = \"vspace\"\nmode = \"e\"");
    sc.host.core_mgmt.samples_per_round = 4;
    let ev = run_scenario(&sc, 1).unwrap().core_events;
    let e = ev.explorer.expect("vSPACE reports its explorer");
    let t = e.trace;
    assert!(e.rounds >= 3, "{e:?}");
    assert_eq!(
        t.adjusted_rounds + t.rewarded_rounds + t.kept_rounds,
        e.rounds
    );
    assert_eq!(
        (t.rewarded_rounds, t.lowering_rounds, t.violating_samples),
        (e.rounds, 0, 0)
    );
    assert_eq!(t.th_vcpu_range, (0.7, e.th_vcpu));
    assert!(e.th_vcpu > 0.7, "{e:?}");
}
