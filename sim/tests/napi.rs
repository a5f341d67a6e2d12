//! The NAPI-like receive path (`[host.napi]`, module `vadapt_sim::napi`) in
//! whole runs: polls within the weight, deferral to ksoftirqd once the
//! softIRQ's budget is spent, and the softIRQ slowing the worker that
//! shares its core.

use vadapt_sim::napi::NapiTotals;
use vadapt_sim::{run_scenario, Scenario, SimResult};

/// One VM reflecting 64-byte requests at `rate` per second (Poisson), its
/// queue worker alone on a core of its own (isolated groups, as the EE-KBP
/// paper's isolcpus), running `policy`; `napi` adds `[host.napi]` with
/// these keys.
fn reflector(policy: &str, rate: f64, napi: Option<&str>) -> Scenario {
    let napi = napi.map_or(String::new(), |keys| format!("[host.napi]\n{keys}\n"));
    let text = format!(
        r#"
duration_s = 0.4
sample_ms = 100
[host]
cores = 2
[host.core_alloc]
kind = "isolated"
vcpu_cores = 1
nq_cores = 1
{napi}
[[vms]]
vcpus = 1
[vms.workload]
kind = "rr"
rate_qps = [[0.0, {rate}]]
service_dist = "const"
service_mean_us = 0.162
server_threads = 1
request_bytes = 64
response_bytes = 64
[[timeline]]
at_s = 0
policy = "{policy}"
[[periods]]
name = "measure"
from_s = 0.1
to_s = 0.4
"#
    );
    Scenario::from_toml_str(&text, "reflector.toml").expect("test scenario is valid")
}

fn run(sc: &Scenario) -> (SimResult, f64) {
    let r = run_scenario(sc, 1).expect("runs");
    let served = r.periods[0].served_qps.unwrap_or(0.0);
    (r, served)
}

fn napi(r: &SimResult) -> NapiTotals {
    r.napi.expect("a NAPI run reports its receive path")
}

#[test]
fn a_light_load_takes_an_interrupt_a_packet_and_never_defers() {
    let (r, served) = run(&reflector("interrupt", 10_000.0, Some("")));
    let n = napi(&r);
    assert!((served - 10_000.0).abs() < 1_000.0, "served {served}");
    // Packets 100 µs apart: each finds NAPI complete, interrupts, is polled.
    let packets = 10_000.0 * 0.4;
    assert!(n.interrupts as f64 > 0.8 * packets, "{n:?}");
    assert_eq!(n.deferrals, 0, "{n:?}");
    assert_eq!(n.dropped_ring + n.dropped_socket, 0, "{n:?}");
    // Without [host.napi] nothing is reported.
    assert!(run(&reflector("interrupt", 10_000.0, None))
        .0
        .napi
        .is_none());
}

#[test]
fn polls_respect_the_weight_and_an_overload_goes_to_ksoftirqd() {
    // 5 Mpps: more than the softIRQ's 300 ns a packet (`nic_packet_ns`)
    // can take, so the ring never empties.
    let (r, _) = run(&reflector("interrupt", 5_000_000.0, Some("weight = 16")));
    let n = napi(&r);
    // Every packet the ring kept was polled, at most 16 a poll.
    let received = 5_000_000.0 * 0.4 - n.dropped_ring as f64;
    assert!(
        (n.polls as f64) * 16.0 >= 0.95 * received,
        "{} polls for {received} packets",
        n.polls
    );
    // The ring never empties: budgets run out, ksoftirqd takes over, and
    // with the interrupt off there are few interrupts.
    assert!(n.deferrals > 0, "{n:?}");
    assert!((n.interrupts as f64) < 0.01 * received, "{n:?}");
    assert!(n.dropped_ring + n.dropped_socket > 0, "overloaded: {n:?}");
}

#[test]
fn the_softirq_slows_the_worker_on_its_core() {
    // An overload: the worker alone on its core, then the same worker with
    // the NIC's softIRQ and ksoftirqd on that core.
    let (alone, served_alone) = run(&reflector("interrupt", 3_000_000.0, None));
    let (shared, served_shared) = run(&reflector("interrupt", 3_000_000.0, Some("")));
    let worker_cpu = |r: &SimResult| r.workers[0].cpu_s;
    let n = napi(&shared);
    assert!(n.cpu_s > 0.05, "{n:?}");
    assert!(
        worker_cpu(&shared) < 0.8 * worker_cpu(&alone),
        "worker CPU {} with the softIRQ against {} alone",
        worker_cpu(&shared),
        worker_cpu(&alone)
    );
    // The core is the NQ group's one: worker + receive path <= one core.
    assert!(worker_cpu(&shared) + n.cpu_s <= 0.4 * 1.001, "{n:?}");
    assert!(
        served_shared < served_alone,
        "served {served_shared} with NAPI against {served_alone}"
    );
    // A polling worker (KBP) takes packets straight from the wire.
    let (_, served_kbp) = run(&reflector("busy-poll", 3_000_000.0, None));
    assert!(
        served_kbp > served_shared,
        "{served_kbp} vs {served_shared}"
    );
}
