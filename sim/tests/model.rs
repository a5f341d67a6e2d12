//! Whole-model tests: determinism, bad input, and the behaviours the model
//! exists for (ring stalls, notification suppression, line-rate cap, CPU
//! sharing), each on a small scenario so the suite stays fast.

use std::path::Path;
use vadapt_results::{Kind, ResultFile};
use vadapt_sim::calibration::MEASURED_TOML;
use vadapt_sim::{run_scenario, sweep, Scenario, ScenarioError, SimError};

/// A small scenario: `vms` VMs x `threads` senders on `cores` cores, `policy`
/// as a TOML value, `secs` simulated seconds.
fn small(
    vms: u32,
    threads: u32,
    cores: u32,
    policy: &str,
    secs: f64,
    extra_host: &str,
) -> Scenario {
    let text = format!(
        r#"
duration_s = {secs}
sample_ms = 250
[host]
cores = {cores}
{extra_host}
[[vms]]
count = {vms}
vcpus = {threads}
[vms.workload]
kind = "stream"
threads = {threads}
msg_size = 64
[[timeline]]
at_s = 0
{policy}
"#
    );
    Scenario::from_toml_str(&text, "small.toml").expect("test scenario is valid")
}

fn err(text: &str) -> (usize, String, String) {
    match Scenario::from_toml_str(text, "bad.toml") {
        Err(ScenarioError::Invalid {
            line, key, message, ..
        }) => (line, key, message),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

const GOOD: &str = r#"duration_s = 1
[host]
cores = 2
[[vms]]
vcpus = 1
[vms.workload]
kind = "stream"
threads = 1
[[timeline]]
at_s = 0
policy = "interrupt"
"#;

#[test]
fn same_seed_gives_byte_identical_output() {
    let sc = small(
        3,
        1,
        2,
        r#"policy = { kind = "netap", kick_threshold_permille = 0, round_ms = 100 }"#,
        2.0,
        "",
    );
    let dir = std::env::temp_dir().join(format!("vadapt-sim-det-{}", std::process::id()));
    let (a, b) = (dir.join("a"), dir.join("b"));
    run_scenario(&sc, 7).unwrap().write(&a).unwrap();
    run_scenario(&sc, 7).unwrap().write(&b).unwrap();
    let mut compared = 0;
    for f in [
        "timeseries.csv",
        "result.json",
        "throughput.png",
        "cpu.png",
        "intervals.png",
    ] {
        let (x, y) = (
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
        );
        assert!(!x.is_empty(), "{f} is empty");
        assert!(x == y, "{f} differs between two runs with the same seed");
        compared += 1;
    }
    assert_eq!(compared, 5);
    // result.json is the one result schema, kind `sim`: a row per sample and
    // per worker, as the lab reads them.
    let f = ResultFile::read_from(&a.join("result.json"))
        .unwrap()
        .unwrap();
    assert_eq!(f.kind, Kind::Sim);
    assert_eq!(f.params["seed"], 7.0);
    assert_eq!(f.table("samples").count(), 8);
    assert_eq!(f.table("workers").count(), 3);
    assert!(f
        .table("samples")
        .all(|r| r.policy == "netap" && r.run == 7));
    // A different seed changes the jittered wake-ups, hence the series.
    let c = run_scenario(&sc, 8).unwrap();
    assert_ne!(
        c.to_csv(),
        std::fs::read_to_string(a.join("timeseries.csv")).unwrap()
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sweep_results_do_not_depend_on_thread_count() {
    let sc = small(2, 1, 2, r#"policy = "interrupt""#, 1.0, "");
    let one = sweep(&sc, "interval", &[200.0, 2000.0, 6000.0], 1).unwrap();
    let two = sweep(&sc, "interval", &[200.0, 2000.0, 6000.0], 2).unwrap();
    assert_eq!(one, two);
    assert_eq!(one[2].param, Some(("interval".to_string(), 6000.0)));
}

#[test]
fn every_bundled_scenario_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let sc = Scenario::from_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(
                sc.calibration.machine.contains("EPYC"),
                "{} includes the default calibration",
                p.display()
            );
            n += 1;
        }
    }
    assert!(
        n >= 9,
        "expected the 8 NetAP scenarios and vspace-memcached, found {n}"
    );
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let text = GOOD.replace("threads = 1", "threads = 1\nthreadz = 2");
    let (line, key, msg) = err(&text);
    assert_eq!(line, 9, "{key}: {msg}");
    assert_eq!(key, "threadz");
    assert!(msg.contains("unknown field"), "{msg}");
}

#[test]
fn negative_rate_is_named_with_its_line() {
    let text = GOOD.replace("cores = 2", "cores = 2\nline_rate_gbps = -10.0");
    let (line, key, _) = err(&text);
    assert_eq!((line, key.as_str()), (4, "host.line_rate_gbps"));
    let rr = GOOD.replace(
        "kind = \"stream\"\nthreads = 1",
        "kind = \"rr\"\nrate_qps = [[0.0, 1000.0], [5.0, -3.0]]",
    );
    let (line, key, _) = err(&rr);
    assert_eq!((line, key.as_str()), (8, "vms[0].workload.rate_qps"));
}

#[test]
fn too_many_vcpus_are_refused() {
    let text = GOOD.replace("vcpus = 1", "vcpus = 17");
    let (line, key, msg) = err(&text);
    assert_eq!((line, key.as_str()), (5, "vms[0].vcpus"), "{msg}");
    assert!(msg.contains("cannot be placed"), "{msg}");
}

#[test]
fn unknown_policy_is_named_with_its_line() {
    let text = GOOD.replace("policy = \"interrupt\"", "policy = \"fastest\"");
    let (line, key, msg) = err(&text);
    assert_eq!((line, key.as_str()), (11, "timeline[0].policy"));
    assert!(msg.contains("unknown policy"), "{msg}");
    let text = GOOD.replace(
        "policy = \"interrupt\"",
        "policy = { kind = \"netap\", min_interval_us = 5000 }",
    );
    let (line, _, msg) = err(&text);
    assert_eq!(line, 11);
    assert!(msg.contains("min_interval_us"), "{msg}");
}

#[test]
fn spinning_policy_hits_the_event_cap() {
    let mut sc = small(1, 1, 2, r#"policy = "busy-poll""#, 1.0, "");
    sc.max_events_per_sim_s = 10_000;
    assert_eq!(
        run_scenario(&sc, 1),
        Err(SimError::EventCap {
            second: 0,
            cap: 10_000
        })
    );
}

#[test]
fn long_intervals_fill_the_ring_and_stall_the_guest() {
    // One sender fills a 256-entry ring in ~3.5 ms; sleeping 20 ms stalls it.
    let short = run_scenario(
        &small(1, 1, 2, "probe_fixed_interval_us = 1000", 1.0, ""),
        1,
    )
    .unwrap();
    let long = run_scenario(
        &small(1, 1, 2, "probe_fixed_interval_us = 20000", 1.0, ""),
        1,
    )
    .unwrap();
    let calls = |r: &vadapt_sim::SimResult| r.workers.iter().map(|w| w.calls).sum::<u64>();
    assert_eq!(calls(&short), 0, "no stall at 1 ms");
    assert!(calls(&long) > 0, "stalled guests ask for calls");
    assert!(long.mean_gbps_after(0.25) < 0.5 * short.mean_gbps_after(0.25));
    assert!(
        long.mean_after(0.25, |s| s.guest_cpu_pct) < 50.0,
        "stalled vCPUs halt"
    );
}

#[test]
fn polling_suppresses_kicks_and_interrupt_mode_kicks_at_most_once_per_pass() {
    let poll = run_scenario(&small(2, 1, 4, "probe_fixed_interval_us = 500", 1.0, ""), 1).unwrap();
    assert!(poll.workers.iter().all(|w| w.kicks == 0));
    let irq = run_scenario(&small(2, 1, 4, r#"policy = "interrupt""#, 1.0, ""), 1).unwrap();
    for w in &irq.workers {
        assert!(w.kicks > 0);
        // EVENT_IDX: one kick wakes the worker, which then takes many packets.
        assert!(w.kicks <= w.passes && w.kicks < w.packets, "{w:?}");
    }
}

#[test]
fn nic_line_rate_caps_throughput() {
    // 12 fast senders of large messages on 16 cores could push ~20 Gb/s.
    let mut sc = small(
        6,
        2,
        16,
        "probe_fixed_interval_us = 200",
        1.0,
        "line_rate_gbps = 1.0",
    );
    for vm in &mut sc.vms {
        if let vadapt_sim::scenario::Workload::Stream(s) = &mut vm.workload {
            s.msg_size = 8192;
        }
    }
    let r = run_scenario(&sc, 1).unwrap();
    let g = r.mean_gbps_after(0.25);
    assert!(g <= 1.0, "{g} Gb/s over a 1 Gb/s link");
    assert!(g > 0.85, "{g} Gb/s: the link should be nearly full");
}

#[test]
fn cores_are_time_shared_between_vcpus_and_workers() {
    // 6 busy senders on 2 cores: they share, and the total never exceeds 200 %.
    let r = run_scenario(
        &small(3, 2, 2, "probe_fixed_interval_us = 1000", 1.0, ""),
        1,
    )
    .unwrap();
    for s in r.samples.iter().skip(1) {
        let total = s.host_cpu_pct + s.guest_cpu_pct;
        assert!(total <= 200.0 + 1e-6, "{total}");
        assert!(
            s.guest_cpu_pct > 150.0,
            "guests use most of the cores: {}",
            s.guest_cpu_pct
        );
    }
    // Same load on 6 cores: more CPU for the guests, more throughput.
    let wide = run_scenario(
        &small(3, 2, 6, "probe_fixed_interval_us = 1000", 1.0, ""),
        1,
    )
    .unwrap();
    assert!(wide.mean_gbps_after(0.25) > 2.0 * r.mean_gbps_after(0.25));
}

#[test]
fn policy_timeline_switches_every_worker() {
    let mut sc = small(2, 1, 4, r#"policy = "interrupt""#, 2.0, "");
    let later = Scenario::from_toml_str(
        &GOOD.replace(
            "policy = \"interrupt\"",
            "policy = \"interrupt\"\n[[timeline]]\nat_s = 1\nprobe_fixed_interval_us = 700",
        ),
        "t.toml",
    )
    .unwrap();
    sc.timeline = later.timeline;
    let r = run_scenario(&sc, 1).unwrap();
    assert!(r.workers.iter().all(|w| w.policy == "fixed-700us"));
    let first = &r.samples[1];
    let last = r.samples.last().unwrap();
    assert!(first.kicks_per_s > 0.0 && last.kicks_per_s == 0.0);
}

/// Mean payload per descriptor chain over the run of a 1-VM, 1-thread
/// TCP-like sender of 64-byte messages costing `write_ns` each, a
/// 65,160-byte size goal and `coalesce`, served by `timeline` (a
/// `[[timeline]]` body).
fn payload_per_chain(coalesce: &str, write_ns: f64, timeline: &str) -> f64 {
    let text = format!(
        r#"
duration_s = 2.0
[host]
cores = 2
[[vms]]
vcpus = 1
[vms.workload]
kind = "stream"
threads = 1
msg_size = 64
segment_bytes = 65160
header_bytes = 78
send_msg_ns = {write_ns:?}
send_byte_ps = 0.0
xmit_segment_ns = 162.4
coalesce = "{coalesce}"
[[timeline]]
at_s = 0
{timeline}
[[periods]]
name = "all"
from_s = 0.5
to_s = 2.0
"#
    );
    let sc = Scenario::from_toml_str(&text, "coalesce.toml").expect("valid");
    let r = run_scenario(&sc, 1).unwrap();
    let p = &r.periods[0];
    let w = &r.workers[0];
    // Payload bytes of the period over the chains of the whole run, scaled
    // to the period: the run is steady after its first half second.
    let bytes = p.gbps / 8.0 * 1e9 * (p.to_s - p.from_s);
    bytes / (w.packets as f64 * (p.to_s - p.from_s) / r.duration_s)
}

#[test]
fn since_room_segments_follow_the_host_full_ones_do_not() {
    let interrupt = r#"policy = "interrupt""#;
    let slow_poll = "probe_fixed_interval_us = 2000";
    // A writer slower than the worker (5 µs a message): one message a
    // segment.
    let fast = payload_per_chain("since-room", 5000.0, interrupt);
    assert!((63.9..=1.5 * 64.0).contains(&fast), "{fast}");
    // A worker that comes every 2 ms: the ring (256 chains, about 0.2 ms of
    // writing at 0.9 µs a message and segment) fills, the queue stops and
    // the writes pile up to a full segment (1,018 messages); the TX call
    // posts the pile, and single messages fill the ring again. A cycle:
    // 255 one-message chains and one of 1,018, (255 + 1018) × 64 / 256 =
    // 318 bytes a chain.
    let slow = payload_per_chain("since-room", 750.0, slow_poll);
    assert!((300.0..340.0).contains(&slow), "{slow}");
    eprintln!("since-room: {fast:.0} B a chain (slow writer), {slow:.0} (slow poller)");
    // Full segments (1,018 messages) whatever the host does.
    for (w, t) in [(5000.0, interrupt), (750.0, slow_poll)] {
        let full = payload_per_chain("full", w, t);
        assert!((full - 65_152.0).abs() < 2_000.0, "{full}");
    }
}

#[test]
fn an_unknown_coalescing_rule_is_named() {
    let text = GOOD.replace("threads = 1", "threads = 1\ncoalesce = \"eager\"");
    let (line, key, msg) = err(&text);
    assert_eq!(
        (line, key.as_str()),
        (9, "vms[0].workload.coalesce"),
        "{msg}"
    );
    assert!(msg.contains("full, since-room"), "{msg}");
}

/// Messages per guest kick of six single-thread VMs on one vCPU core (their
/// workers on another), TCP-like writers of 64-byte messages coalescing
/// `since-room`, served in interrupt mode, with the vCPU core shared by
/// `vcpu_sched`, at this machine's measured costs (a kick: 9.9 µs of the
/// guest's CPU).
fn messages_per_kick(vcpu_sched: &str) -> f64 {
    let text = format!(
        r#"
duration_s = 1.0
[host]
cores = 2
vcpu_sched = "{vcpu_sched}"
[host.core_alloc]
kind = "isolated"
vcpu_cores = 1
nq_cores = 1
[[vms]]
count = 6
vcpus = 1
[vms.workload]
kind = "stream"
threads = 1
msg_size = 64
segment_bytes = 65160
send_msg_ns = 585.0
xmit_segment_ns = 162.4
coalesce = "since-room"
[[timeline]]
at_s = 0
policy = "interrupt"
[[periods]]
name = "all"
from_s = 0.2
to_s = 1.0
[calibration]
{MEASURED_TOML}
"#
    );
    let sc = Scenario::from_toml_str(&text, "slices.toml").expect("valid");
    let p = &run_scenario(&sc, 1).unwrap().periods[0];
    p.gbps / 8.0 * 1e9 / 64.0 / p.kicks_per_s
}

#[test]
fn a_sender_with_the_core_for_a_slice_posts_many_messages_a_kick() {
    // Processor sharing: each writer runs at a sixth of the core and posts
    // one message per wake-up of its worker, paying a kick for it.
    let shares = messages_per_kick("shares");
    // Slices: one writer has the core for 3 ms and posts while its worker
    // wakes up and drains.
    let slices = messages_per_kick("slices");
    eprintln!("messages a kick: shares {shares:.1}, slices {slices:.1}");
    assert!(shares < 2.0, "{shares}");
    assert!(slices > 5.0, "{slices}");
}

#[test]
fn an_unknown_vcpu_scheduler_is_named() {
    let text = GOOD.replace("cores = 2", "cores = 2\nvcpu_sched = \"fifo\"");
    let (line, key, msg) = err(&text);
    assert_eq!((line, key.as_str()), (4, "host.vcpu_sched"), "{msg}");
    assert!(msg.contains("shares, slices"), "{msg}");
}
