//! `vadapt calibrate`: measure on this host the costs the simulator charges,
//! and write them as a `vadapt_sim::Calibration` TOML file; with
//! `--validate`, run scenarios on the real daemon + synthetic guest and in the
//! simulator, side by side.
//!
//! # What is measured, and how
//!
//! Everything runs in this process: the real daemon ([`Daemon::start`]) with a
//! sink port, one synthetic guest ([`vadapt_guest::Guest`]) with one sender
//! thread, and a few micro-benchmarks of the kernel paths the data plane
//! uses. With two or more CPUs the queue worker is pinned to CPU 1 and the
//! guest to CPU 0, so the two do not time-share a core during the measurement
//! (the simulator models the sharing itself).
//!
//! | key | method |
//! |---|---|
//! | `per_packet_ns`, `per_byte_ps` | NetAP held at a ~200 µs interval (range 200–240 µs, no kick threshold), the guest paced so that each pass finds ~4, 16, 64 or 128 packets of 64 B (and ~64 of 1400 B). Per run: TSC cycles of the non-empty passes ÷ passes, against packets and frame bytes per pass; least-squares fit `cycles = a·packets + p·bytes + b` (every pass after a timed sleep finds packets at these rates, so passes ≈ non-empty passes). TSC rate from `CLOCK_MONOTONIC`. The intercept `b`, a pass right after a sleep with caches cold, is written as a comment. |
//! | `pass_overhead_ns` | busy-poll worker while the guest sends 100 pps: worker CPU time ÷ passes, the cost of a pass that finds nothing (which the model charges for every pass). |
//! | `nic_packet_ns` | 0: the sink port's hand-off is part of the worker's pass and so already in `per_packet_ns`. A TAP or a NIC costs more; see `default.toml`. |
//! | `kick_ns` | median duration of an `eventfd` write that wakes a thread blocked on the other CPU (the syscall a kick is here; back to back, see `wake_latency_ns`), **plus** `--exit-cost-ns` (default 2000 ns, the synthetic guest's emulated VM exit). On KVM a kick is a trapped doorbell write — a VM exit — which the guest emulates by busy-waiting that long; the model charges both. |
//! | `call_ns` | median duration of reading a signalled `eventfd` (how the guest takes a call) plus `--exit-cost-ns` (the guest's emulated interrupt entry). The wait before it is `wake_latency_ns`. |
//! | `wake_latency_ns` | two threads on different CPUs ping-pong through eventfds: A reads the TSC and writes B's eventfd; B, blocked in `read`, reads the TSC when it returns and answers. Median of the difference (TSC is invariant and shared); RTT/2 if the TSCs disagree. Back to back (A pings as soon as B's answer woke it, so B has been blocked for one wake-up): the loaded regime, a worker kicked again soon after it went to sleep, where the validation runs. The latencies after 20, 200 and 2000 µs of extra idling go into the file as comments, because in a VM a CPU that idles longer wakes slower and the model has one value. |
//! | `jitter` | interquartile range ÷ median of those wake latencies (a uniform draw in `[1-j, 1+j]·m` has IQR `j·m`), clamped to [0.05, 0.9]. |
//! | `wakeup_cpu_ns` | interrupt policy, guest paced at 200 kpps (one kick per pass, a few packets each): worker CPU time ÷ wake-ups, minus the run's own busy time in passes (TSC) and one `context_switch_ns`, both charged separately by the model. The same at 4 kpps is written as a comment: rare wake-ups cost several times more here. |
//! | `timer_overshoot_ns` | p50 of the NetAP worker's sleep overshoot from the daemon's counters (the worker sets its timer slack to 1 ns and asks to wake early by the running mean of its lateness, so the median is near 0); the kernel's raw lateness (a 200 µs `clock_nanosleep` with 1 ns slack) goes into the file as a comment, and is the value if the daemon recorded no sleep. |
//! | `context_switch_ns` | two threads pinned to one CPU ping-ponging through eventfds: half the round trip (one switch, one write, one read) minus a write nobody waits on and a read of a signalled eventfd. |
//!
//! Every measurement runs once per round (`--rounds`, default 5), all of them
//! interleaved, and each value is the median over rounds: this machine is
//! shared, and a burst of someone else's load should spoil one run of each
//! point rather than every run of one point. For a daemon point the run whose
//! key ratio is the median is kept whole, so its counters stay consistent.
//!
//! The guest's CPU per packet (busy-poll, closed loop, no kicks; the least of
//! the rounds, since other load only adds to it) is measured
//! too and written as a comment: it is a workload parameter of scenarios that
//! model the synthetic guest (`xmit_segment_ns`), not a calibration key.
//!
//! # The code
//!
//! This file measures and writes the calibration; `micro.rs` holds the
//! kernel-path micro-benchmarks and `validate.rs` the `--validate` runs. What
//! they share is below them — the arguments (`args.rs`), the error
//! (`error.rs`), quantiles and the fit (`stats.rs`), the daemon and guest
//! helpers (`daemon.rs`) — and none of them imports this file.

use crate::cli_util::{chain, fail};
use crate::machine::utc_now;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::clock::calibrate_tsc;
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::Daemon;
use vadapt_guest::{GuestConfig, Load};
use vadapt_policy::config::NetapParams;
use vadapt_policy::PolicyConfig;
use vadapt_sim::Calibration;

mod args;
mod daemon;
mod error;
mod micro;
mod stats;
mod validate;

pub use args::CalibrateArgs;
pub use error::CalibrateError;

use daemon::{blocked_wakeups, join_guest, port_sum, spawn_guest, tmpdir, worker, SINK};
use error::Result;
use micro::{nanosleep_overshoot, ping_pong, write_read_signalled, PingPong};
use stats::{least_squares, median, quantile};
use validate::validate_all;

/// Run `vadapt calibrate`.
pub fn run(a: CalibrateArgs) -> ExitCode {
    if !(a.duration.is_finite() && a.duration > 0.0 && a.duration <= 60.0) {
        return fail(format!(
            "invalid `--duration` {}: must be in (0, 60] seconds",
            a.duration
        ));
    }
    let r = if a.validate.is_empty() {
        calibrate(&a)
    } else {
        validate_all(&a)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(chain(&e)),
    }
}

// ------------------------------------------------------------------ timing

/// How long each part runs.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Warm-up before a point's counters are read.
    warm: Duration,
    /// Measuring time per daemon point.
    measure: Duration,
    /// Ping-pong round trips per micro-benchmark.
    pings: usize,
    /// Rounds of every measurement.
    rounds: usize,
}

impl Plan {
    fn new(a: &CalibrateArgs) -> Plan {
        if a.quick {
            Plan {
                warm: Duration::from_millis(200),
                measure: Duration::from_millis(400),
                pings: 300,
                rounds: 1,
            }
        } else {
            Plan {
                warm: Duration::from_millis(400),
                measure: Duration::from_secs_f64(a.duration),
                pings: 1000,
                rounds: a.rounds.max(1),
            }
        }
    }
}

// ------------------------------------------------------------ daemon points

/// Idle times before the measured wake-ups (µs), with the share of `Plan::pings` each gets
/// (long gaps get fewer round trips to bound the run time).
const WAKE_GAPS_US: [(u64, usize); 4] = [(0, 1), (20, 2), (200, 4), (2000, 20)];
/// The extra idle gap whose wake-up goes into the file: none, a worker kicked again as
/// soon as it went to sleep, as under load.
const WAKE_GAP_US: u64 = 0;

/// Which CPUs the worker and the guest use in calibration points.
#[derive(Clone, Copy, Debug)]
struct Cpus {
    worker: Option<usize>,
    guest: Option<usize>,
}

impl Cpus {
    fn detect() -> Cpus {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        if n >= 2 {
            Cpus {
                worker: Some(1),
                guest: Some(0),
            }
        } else {
            Cpus {
                worker: None,
                guest: None,
            }
        }
    }
}

/// One daemon measurement: a policy and a single-thread guest load to a sink.
#[derive(Clone, Copy, Debug)]
struct Point {
    name: &'static str,
    policy: PolicyConfig,
    load: Load,
    size: u32,
}

/// Counter deltas over a point's measuring window.
#[derive(Clone, Debug, Serialize)]
struct PointResult {
    name: &'static str,
    size: u32,
    secs: f64,
    tx_packets: u64,
    tx_bytes: u64,
    kicks: u64,
    passes: u64,
    busy_cycles: u64,
    busy_packets: u64,
    cpu_s: f64,
    wakeups: u64,
    overshoot_p50_ns: u64,
    /// Guest CPU per packet sent over the whole guest run, ns.
    guest_ns_per_packet: f64,
}

fn run_point(p: &Point, plan: &Plan, cpus: Cpus) -> Result<PointResult> {
    let dir = tmpdir(p.name)?;
    let cfg = DaemonConfig {
        vm: vec![VmPortConfig::new("vm1", dir.join("vm1.sock"))],
        sink: vec![LocalPortConfig {
            name: "sink0".into(),
            mac: Some(SINK),
        }],
        policy: p.policy,
        control: dir.join("control.sock"),
        cpus: cpus.worker.into_iter().collect(),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(cfg).map_err(CalibrateError::StartDaemon)?;
    let r = drive_point(&daemon, &dir, p, plan, cpus);
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn drive_point(
    daemon: &Daemon,
    dir: &Path,
    p: &Point,
    plan: &Plan,
    cpus: Cpus,
) -> Result<PointResult> {
    let mut g = GuestConfig::new(dir.join("vm1.sock"));
    g.threads = 1;
    g.size = p.size;
    g.load = p.load;
    g.dst_mac = SINK.0;
    // The backend's costs are measured here; the guest's emulated exits are
    // added to kick_ns / call_ns from their own measurement.
    g.exit_cost_ns = 0;
    g.duration = plan.warm + plan.measure + Duration::from_secs(5);
    let stop = Arc::new(AtomicBool::new(false));
    let h = spawn_guest("vm1", g, cpus.guest, &stop)?;
    let reg = daemon.registry();
    std::thread::sleep(plan.warm);
    let s0 = reg.snapshot();
    let t0 = Instant::now();
    std::thread::sleep(plan.measure);
    let s1 = reg.snapshot();
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let report = join_guest("vm1", h)?;
    let (w0, w1) = match (worker(&s0, "vm1"), worker(&s1, "vm1")) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            return Err(CalibrateError::Measure {
                what: "daemon counters",
                reason: "no worker named vm1 in the daemon's statistics".into(),
            })
        }
    };
    let d = |f: fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64| {
        port_sum(&s1, "vm1", f).saturating_sub(port_sum(&s0, "vm1", f))
    };
    Ok(PointResult {
        name: p.name,
        size: p.size,
        secs,
        tx_packets: d(|q| q.tx_packets),
        tx_bytes: d(|q| q.tx_bytes),
        kicks: d(|q| q.kicks),
        passes: w1.passes.saturating_sub(w0.passes),
        busy_cycles: w1.busy_cycles.saturating_sub(w0.busy_cycles),
        busy_packets: w1.busy_packets.saturating_sub(w0.busy_packets),
        cpu_s: (w1.cpu_seconds - w0.cpu_seconds).max(0.0),
        wakeups: blocked_wakeups(w1).saturating_sub(blocked_wakeups(w0)),
        overshoot_p50_ns: w1.overshoot_p50_ns,
        guest_ns_per_packet: if report.totals.sent_packets > 0 {
            report.cpu_seconds * 1e9 / report.totals.sent_packets as f64
        } else {
            f64::NAN
        },
    })
}

/// NetAP held near a fixed 200 µs interval, without its kick safety net.
fn netap_near_200us() -> PolicyConfig {
    PolicyConfig::Netap(NetapParams {
        min_interval_us: 200,
        max_interval_us: 240,
        min_distance_us: 30,
        round_ms: 100,
        max_rounds: 0,
        kick_threshold_permille: 0,
        ..NetapParams::default()
    })
}

// ------------------------------------------------------------ calibration

/// Everything measured, before it becomes a file.
#[derive(Debug)]
struct Measured {
    tsc_per_ns: f64,
    cal: Calibration,
    notes: BTreeMap<&'static str, String>,
    points: Vec<PointResult>,
    guest_ns_per_packet: f64,
    busy_poll_mpps: f64,
    busy_poll_ns_per_packet: f64,
    rounds: usize,
}

fn calibrate(a: &CalibrateArgs) -> Result<()> {
    let started = Instant::now();
    let plan = Plan::new(a);
    let cpus = Cpus::detect();
    let m = measure(a, &plan, cpus)?;
    let text = render(a, &m);
    // The file must be what the simulator reads: parse it back before writing.
    let back: Calibration =
        toml::from_str(&text).map_err(|e| CalibrateError::Roundtrip(e.to_string()))?;
    back.validate()
        .map_err(|e| CalibrateError::Roundtrip(e.to_string()))?;
    if let Some(parent) = a.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| CalibrateError::Write {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(&a.out, &text).map_err(|source| CalibrateError::Write {
        path: a.out.clone(),
        source,
    })?;
    print_summary(&m);
    println!(
        "wrote {} ({:.1} s)",
        a.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One round of the kernel-path micro-benchmarks, ns.
#[derive(Clone, Debug)]
struct MicroRound {
    /// Per idle gap before the wake-up (µs): latency, waking write, TSC read on both sides.
    by_gap: Vec<(u64, f64, f64, bool)>,
    /// IQR / median of the wake-up latencies at [`WAKE_GAP_US`].
    jitter: f64,
    /// Median round trip at [`WAKE_GAP_US`].
    rtt_ns: f64,
    /// Median round trip of the same-CPU ping-pong.
    same_rtt_ns: f64,
    /// Median write to an eventfd nobody waits on.
    plain_write_ns: f64,
    /// Median read of a signalled eventfd.
    call_read_ns: f64,
}

fn micro_round(plan: &Plan, cpus: Cpus, tsc_per_ns: f64, quick: bool) -> Result<MicroRound> {
    let ns = |c: f64| c / tsc_per_ns;
    let mut by_gap = Vec::new();
    let (mut jitter, mut rtt_ns) = (0.25, f64::NAN);
    for (gap_us, share) in WAKE_GAPS_US {
        let n = (plan.pings / share).max(50);
        let PingPong {
            write: mut w,
            wake: mut wk,
            rtt: mut rt,
        } = ping_pong(
            cpus.guest,
            cpus.worker,
            n,
            Some(Duration::from_micros(gap_us)),
        )?;
        let rtt = ns(median(&mut rt));
        // A TSC not shared between CPUs leaves few plausible samples: use RTT/2.
        let direct = wk.len() * 2 >= n;
        let lat = if direct {
            ns(median(&mut wk))
        } else {
            rtt / 2.0
        };
        if gap_us == WAKE_GAP_US {
            rtt_ns = rtt;
            if direct {
                let iqr = ns(quantile(&mut wk, 0.75) - quantile(&mut wk, 0.25));
                jitter = (iqr / lat).clamp(0.05, 0.9);
            }
        }
        by_gap.push((gap_us, lat, ns(median(&mut w)), direct));
    }
    let PingPong { rtt: mut srtt, .. } = ping_pong(cpus.guest, cpus.guest, plan.pings * 2, None)?;
    let (write, read) = write_read_signalled(if quick { 2000 } else { 20000 })?;
    Ok(MicroRound {
        by_gap,
        jitter,
        rtt_ns,
        same_rtt_ns: ns(median(&mut srtt)),
        plain_write_ns: ns(write),
        call_read_ns: ns(read),
    })
}

/// What a daemon point is for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    /// A row of the worker-cost fit.
    Fit,
    /// Busy-poll, closed loop: the guest's per-packet cost.
    Busy,
    /// Busy-poll, guest nearly silent: the cost of an empty pass.
    Idle,
    /// Interrupt mode: CPU per wake-up; the first such point gives the value.
    Wake,
}

fn daemon_points(quick: bool) -> Vec<(Point, Role)> {
    let netap = netap_near_200us();
    let fit = |name, pps, size| {
        (
            Point {
                name,
                policy: netap,
                load: Load::Rate { pps },
                size,
            },
            Role::Fit,
        )
    };
    let irq = |name, pps| {
        (
            Point {
                name,
                policy: PolicyConfig::Interrupt,
                load: Load::Rate { pps },
                size: 64,
            },
            Role::Wake,
        )
    };
    // ~200 µs intervals: 20, 80, 320 and 640 kpps give about 4, 16, 64 and 128 packets a pass.
    let mut v = vec![fit("netap200-4x64B", 20_000.0, 64)];
    if !quick {
        v.push(fit("netap200-16x64B", 80_000.0, 64));
    }
    v.push(fit("netap200-64x64B", 320_000.0, 64));
    v.push(fit("netap200-128x64B", 640_000.0, 64));
    v.push(fit("netap200-64x1400B", 320_000.0, 1400));
    v.push((
        Point {
            name: "busy-poll-closed",
            policy: PolicyConfig::BusyPoll,
            load: Load::ClosedLoop,
            size: 64,
        },
        Role::Busy,
    ));
    v.push((
        Point {
            name: "busy-poll-idle",
            policy: PolicyConfig::BusyPoll,
            load: Load::Rate { pps: 100.0 },
            size: 64,
        },
        Role::Idle,
    ));
    v.push(irq("interrupt-200kpps", 200_000.0));
    if !quick {
        v.push(irq("interrupt-4kpps", 4_000.0));
    }
    v
}

/// The run whose `key` is the median of `runs` (so a point's counters stay
/// consistent with each other), and the range of `key`.
fn representative(
    runs: &[PointResult],
    key: impl Fn(&PointResult) -> f64,
) -> (PointResult, f64, f64) {
    let mut idx: Vec<usize> = (0..runs.len()).collect();
    idx.sort_by(|&a, &b| key(&runs[a]).total_cmp(&key(&runs[b])));
    let lo = key(&runs[idx[0]]);
    let hi = key(&runs[idx[idx.len() - 1]]);
    (runs[idx[(idx.len() - 1) / 2]].clone(), lo, hi)
}

fn per_pass_cycles(p: &PointResult) -> f64 {
    p.busy_cycles as f64 / p.passes.max(1) as f64
}

fn per_wake_cpu_ns(p: &PointResult) -> f64 {
    p.cpu_s * 1e9 / p.wakeups.max(1) as f64
}

fn mpps(p: &PointResult) -> f64 {
    p.tx_packets as f64 / p.secs / 1e6
}

/// Median of `f` over the micro rounds, with its range.
fn over_rounds(rounds: &[MicroRound], f: impl Fn(&MicroRound) -> f64) -> (f64, f64, f64) {
    let mut v: Vec<f64> = rounds.iter().map(f).collect();
    let m = median(&mut v);
    (m, v[0], v[v.len() - 1])
}

fn range_note(n: usize, lo: f64, hi: f64, unit: &str) -> String {
    if n > 1 {
        format!("; median of {n} rounds, range {lo:.0}-{hi:.0} {unit}")
    } else {
        String::new()
    }
}

fn measure(a: &CalibrateArgs, plan: &Plan, cpus: Cpus) -> Result<Measured> {
    let mut notes = BTreeMap::new();
    let tsc_per_ns = calibrate_tsc(if a.quick { 50 } else { 200 });
    if !(tsc_per_ns.is_finite() && tsc_per_ns > 0.0) {
        return Err(CalibrateError::Measure {
            what: "TSC rate",
            reason: format!("{tsc_per_ns} cycles/ns"),
        });
    }
    let ns = |c: f64| c / tsc_per_ns;
    eprintln!("calibrate: TSC {tsc_per_ns:.3} GHz");

    // Rounds interleave every measurement, so that a burst of load from another
    // process on this shared machine spoils one run of each point, not all of
    // one point; each value is the median over rounds.
    let rounds = plan.rounds;
    let pts = daemon_points(a.quick);
    let mut micro = Vec::new();
    let mut runs: Vec<Vec<PointResult>> = vec![Vec::new(); pts.len()];
    for r in 0..rounds {
        eprintln!("calibrate: round {}/{rounds}: micro-benchmarks", r + 1);
        micro.push(micro_round(plan, cpus, tsc_per_ns, a.quick)?);
        for (i, (p, _)) in pts.iter().enumerate() {
            eprintln!(
                "calibrate: round {}/{rounds}: point {}/{} {}",
                r + 1,
                i + 1,
                pts.len(),
                p.name
            );
            runs[i].push(run_point(p, plan, cpus)?);
        }
    }

    // Kernel paths.
    let chosen = WAKE_GAPS_US
        .iter()
        .position(|g| g.0 == WAKE_GAP_US)
        .expect("the chosen gap is measured");
    let (wake_latency_ns, wl_lo, wl_hi) = over_rounds(&micro, |m| m.by_gap[chosen].1);
    let (jitter, ..) = over_rounds(&micro, |m| m.jitter);
    let (kick_syscall_ns, k_lo, k_hi) = over_rounds(&micro, |m| m.by_gap[chosen].2);
    let (rtt_ns, ..) = over_rounds(&micro, |m| m.rtt_ns);
    let direct = micro.iter().all(|m| m.by_gap[chosen].3);
    let mut by_gap = String::new();
    for (i, (g, _)) in WAKE_GAPS_US.iter().enumerate() {
        let (lat, ..) = over_rounds(&micro, |m| m.by_gap[i].1);
        let (w, ..) = over_rounds(&micro, |m| m.by_gap[i].2);
        let _ = write!(
            by_gap,
            "\n#   idle {g:>4} us before the wake-up: latency {lat:>6.0} ns, waking write {w:>5.0} ns"
        );
    }
    notes.insert(
        "wake_latency_ns",
        format!(
            "{} eventfd wake-ups of a thread blocked on another CPU, back to back (+{WAKE_GAP_US} us idle) \
             (the loaded regime: a worker woken by kicks or calls back to back){}{}; \
             the longer a CPU idles the longer its wake-up (a vCPU halted in this VM):{by_gap}",
            if direct {
                "median (TSC read on both sides) of"
            } else {
                "half the round trip (the CPUs' TSCs disagree) of"
            },
            if direct {
                format!(", round trip median {rtt_ns:.0} ns")
            } else {
                String::new()
            },
            range_note(rounds, wl_lo, wl_hi, "ns")
        ),
    );
    let (context_switch_ns, cs_lo, cs_hi) = over_rounds(&micro, |m| {
        (m.same_rtt_ns / 2.0 - m.plain_write_ns - m.call_read_ns).max(1.0)
    });
    let (same_rtt_ns, ..) = over_rounds(&micro, |m| m.same_rtt_ns);
    let (plain_write_ns, ..) = over_rounds(&micro, |m| m.plain_write_ns);
    let (read_ns, ..) = over_rounds(&micro, |m| m.call_read_ns);
    notes.insert(
        "context_switch_ns",
        format!(
            "eventfd ping-pong of two threads pinned to one CPU: half the round trip \
             ({same_rtt_ns:.0} ns: one switch, one write and one read) minus an eventfd write \
             nobody waits on ({plain_write_ns:.0} ns) and a read of a signalled one ({read_ns:.0} ns){}",
            range_note(rounds, cs_lo, cs_hi, "ns")
        ),
    );
    let (call_read_ns, ..) = over_rounds(&micro, |m| m.call_read_ns);

    // Daemon points: one representative run each.
    let mut points = Vec::new();
    let mut spread = Vec::new();
    for ((_, role), rs) in pts.iter().zip(&runs) {
        let (p, lo, hi) = match role {
            Role::Fit => representative(rs, per_pass_cycles),
            Role::Busy => representative(rs, mpps),
            Role::Idle => representative(rs, |p| p.cpu_s / p.passes.max(1) as f64),
            Role::Wake => representative(rs, per_wake_cpu_ns),
        };
        spread.push((lo, hi));
        points.push(p);
    }

    // Worker cost fit.
    let fit: Vec<(&PointResult, (f64, f64))> = pts
        .iter()
        .zip(points.iter().zip(spread.iter().copied()))
        .filter(|((_, role), _)| *role == Role::Fit)
        .map(|(_, p)| p)
        .collect();
    let rows: Vec<([f64; 3], f64)> = fit
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| p.passes > 0 && p.busy_packets > 0)
        .map(|p| {
            let passes = p.passes as f64;
            (
                [
                    p.busy_packets as f64 / passes,
                    p.tx_bytes as f64 / passes,
                    1.0,
                ],
                per_pass_cycles(p),
            )
        })
        .collect();
    if rows.len() < 3 {
        return Err(CalibrateError::Measure {
            what: "worker cost fit",
            reason: format!("only {} load points moved packets", rows.len()),
        });
    }
    let all_pkts: f64 = fit.iter().map(|(p, _)| p.busy_packets as f64).sum();
    let all_cycles: f64 = fit.iter().map(|(p, _)| p.busy_cycles as f64).sum();
    let mean_per_packet_ns = ns(all_cycles / all_pkts.max(1.0));
    let (mut per_packet_ns, mut per_byte_ps);
    let mut fit_note = String::new();
    // The slopes come from the fit; its intercept is the fixed cost of a pass
    // after a 200 µs sleep (caches and TLB cold in this VM), a note only: the
    // model's pass overhead is what every pass pays, busy-polling ones included.
    match least_squares(&rows) {
        Some([a1, p1, b1]) if a1 > 0.0 && p1 > 0.0 => {
            per_packet_ns = ns(a1);
            per_byte_ps = ns(p1) * 1000.0;
            let _ = write!(
                fit_note,
                " a = {:.1} ns, p = {:.1} ps, b = {:.0} ns (b: a pass right after a 200 us sleep)",
                ns(a1),
                ns(p1) * 1000.0,
                ns(b1)
            );
        }
        other => {
            // Noise can push a slope below zero; refit through the origin and say so.
            let two: Vec<([f64; 2], f64)> = rows.iter().map(|(x, y)| ([x[0], x[1]], *y)).collect();
            let _ = match other {
                Some([a1, p1, b1]) => write!(
                    fit_note,
                    " (3-term fit a = {:.1} ns, p = {:.1} ps, b = {:.0} ns had a non-positive slope; \
                     refit without b)",
                    ns(a1),
                    ns(p1) * 1000.0,
                    ns(b1)
                ),
                None => write!(fit_note, " (3-term fit singular; refit without b)"),
            };
            match least_squares(&two) {
                Some([a2, p2]) if a2 > 0.0 && p2 > 0.0 => {
                    per_packet_ns = ns(a2);
                    per_byte_ps = ns(p2) * 1000.0;
                }
                _ => {
                    per_packet_ns = mean_per_packet_ns;
                    per_byte_ps = 1.0;
                    fit_note
                        .push_str(" (refit failed too: mean cycles per packet, per_byte_ps = 1)");
                }
            }
        }
    }
    if !(per_packet_ns.is_finite() && per_packet_ns > 0.0) {
        per_packet_ns = mean_per_packet_ns.max(1.0);
    }
    if !(per_byte_ps.is_finite() && per_byte_ps > 0.0) {
        per_byte_ps = 1.0;
    }
    // Pass overhead: worker CPU per pass of a busy-polling worker whose guest sends
    // almost nothing (every pass empty, caches warm).
    let idle = points
        .iter()
        .find(|p| p.name == "busy-poll-idle")
        .filter(|p| p.passes > 0)
        .ok_or(CalibrateError::Measure {
            what: "pass overhead",
            reason: "the idle busy-poll worker made no pass".into(),
        })?;
    let pass_overhead_ns = (idle.cpu_s * 1e9 / idle.passes as f64).max(1.0);
    notes.insert(
        "pass_overhead_ns",
        format!(
            "busy-poll worker, guest sending 100 pps: CPU time / passes ({} passes in {:.1} s at {:.0} % CPU)",
            idle.passes,
            idle.secs,
            idle.cpu_s / idle.secs * 100.0
        ),
    );
    let mut fit_desc = String::new();
    for (p, (lo, hi)) in &fit {
        let _ = write!(
            fit_desc,
            "\n#   {:<18} {:>6.1} pkts/pass {:>6.0} cycles/pass {:>4.0} ns/pkt ({} passes){}",
            p.name,
            p.busy_packets as f64 / p.passes.max(1) as f64,
            per_pass_cycles(p),
            ns(p.busy_cycles as f64 / p.busy_packets.max(1) as f64),
            p.passes,
            if rounds > 1 {
                format!("; cycles/pass over rounds {lo:.0}-{hi:.0}")
            } else {
                String::new()
            }
        );
    }
    notes.insert("fit", format!("{fit_note}{fit_desc}"));

    // Timer overshoot: the NetAP worker's own counter, beside the kernel's raw lateness.
    let raw = nanosleep_overshoot(if a.quick { 100 } else { 1000 })?;
    let mut over: Vec<f64> = fit
        .iter()
        .filter(|(p, _)| p.overshoot_p50_ns > 0)
        .map(|(p, _)| p.overshoot_p50_ns as f64)
        .collect();
    let timer_overshoot_ns = if over.is_empty() {
        notes.insert(
            "timer_overshoot_ns",
            "the daemon recorded no sleep: median lateness of a 200 us clock_nanosleep with 1 ns timer slack".into(),
        );
        raw.max(1.0)
    } else {
        notes.insert(
            "timer_overshoot_ns",
            format!(
                "median over {} NetAP points of the worker's sleep-overshoot p50 (daemon counter \
                 vadapt_worker_sleep_overshoot_seconds; early wake-ups count as 1 ns). The worker sets \
                 its timer slack to 1 ns and asks to wake early by the running mean of its lateness; \
                 without that, a 200 us clock_nanosleep here ends a median {raw:.0} ns late",
                over.len()
            ),
        );
        median(&mut over).max(1.0)
    };

    // Interrupt mode: CPU per wake-up, under load (the value) and at a low rate (a note).
    let wake_points: Vec<(&PointResult, (f64, f64))> = pts
        .iter()
        .zip(points.iter().zip(spread.iter().copied()))
        .filter(|((_, role), _)| *role == Role::Wake)
        .map(|(_, p)| p)
        .collect();
    let mut per_wake = Vec::new();
    for (r, (lo, hi)) in &wake_points {
        if r.wakeups == 0 {
            return Err(CalibrateError::Measure {
                what: "wake-up CPU",
                reason: format!("the interrupt-mode worker never woke up in {}", r.name),
            });
        }
        let w = r.wakeups as f64;
        // The passes' own cost is taken from this run's busy cycles, not from the
        // fit: after a short idle (here) a pass is cheaper than after the fit's
        // 200 µs sleeps (caches stay warm), and the wake-up is what is left.
        let charged = ns(r.busy_cycles as f64) / w + context_switch_ns;
        per_wake.push((
            r.name,
            w / r.secs,
            per_wake_cpu_ns(r),
            charged,
            r.tx_packets as f64 / w,
            (*lo, *hi),
        ));
    }
    let (_, wakes_per_s, cpu, charged, pkts, (lo, hi)) = per_wake[0];
    let wakeup_cpu_ns = (cpu - charged).max(1.0);
    let mut others = String::new();
    for (name, wps, c, ch, _, _) in &per_wake[1..] {
        let _ = write!(
            others,
            "\n#   {name}: {wps:.0} wake-ups/s, {c:.0} ns of worker CPU each, {:.0} ns after the same subtraction",
            c - ch
        );
    }
    notes.insert(
        "wakeup_cpu_ns",
        format!(
            "interrupt policy, guest paced at 200 kpps ({wakes_per_s:.0} wake-ups/s, {pkts:.1} packets each): \
             worker CPU {cpu:.0} ns per wake-up minus this run's busy time in its passes and one \
             context switch, which the model charges separately ({charged:.0} ns){}{}",
            range_note(rounds, lo, hi, "ns (CPU per wake-up)"),
            if others.is_empty() {
                String::new()
            } else {
                format!(
                    ". Rarer wake-ups cost more here (a halted vCPU's wake-up is charged to the \
                     woken thread):{others}"
                )
            }
        ),
    );
    let busy = points.iter().find(|p| p.name == "busy-poll-closed");
    // The guest's CPU per packet is a workload parameter, not a host cost: other
    // tenants' load can only add to it, so the least of the rounds is its own cost.
    let guest_ns_per_packet = pts
        .iter()
        .zip(&runs)
        .filter(|((_, role), _)| *role == Role::Busy)
        .flat_map(|(_, rs)| rs.iter().map(|r| r.guest_ns_per_packet))
        .filter(|v| v.is_finite())
        .fold(f64::NAN, f64::min);
    let busy_poll_mpps = busy.map_or(f64::NAN, mpps);
    let busy_poll_ns_per_packet = busy.map_or(f64::NAN, |p| {
        ns(p.busy_cycles as f64 / p.busy_packets.max(1) as f64)
    });

    let exit = a.exit_cost_ns as f64;
    let cal = Calibration {
        machine: machine(),
        source: source(a),
        per_packet_ns,
        per_byte_ps,
        pass_overhead_ns,
        nic_packet_ns: 0.0,
        kick_ns: kick_syscall_ns + exit,
        call_ns: call_read_ns + exit,
        wake_latency_ns,
        wakeup_cpu_ns,
        timer_overshoot_ns,
        context_switch_ns,
        jitter,
    };
    notes.insert(
        "kick_ns",
        format!(
            "median eventfd write waking a thread blocked on another CPU (back to back, +{WAKE_GAP_US} us idle): \
             {kick_syscall_ns:.0} ns{}, + {exit:.0} ns emulated VM exit (--exit-cost-ns)",
            range_note(rounds, k_lo, k_hi, "ns")
        ),
    );
    notes.insert(
        "call_ns",
        format!(
            "median read of a signalled eventfd: {call_read_ns:.0} ns, + {exit:.0} ns emulated interrupt entry (--exit-cost-ns)"
        ),
    );
    Ok(Measured {
        tsc_per_ns,
        cal,
        notes,
        points,
        guest_ns_per_packet,
        busy_poll_mpps,
        busy_poll_ns_per_packet,
        rounds,
    })
}

fn first_line_of(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    })
}

/// CPU model, cores, hypervisor and kernel of this host.
fn machine() -> String {
    let model =
        first_line_of("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let virt = first_line_of("/proc/cpuinfo", "flags")
        .is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor"));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!(
        "{model}, {cores} cores{}, Linux {kernel}",
        if virt { " (virtual machine)" } else { "" }
    )
}

/// `git describe` of the working directory's repository, or "unknown".
fn git_rev() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn source(a: &CalibrateArgs) -> String {
    let cmd: Vec<String> = std::env::args().collect();
    let cmd = if cmd.is_empty() {
        format!("vadapt calibrate --out {}", a.out.display())
    } else {
        let mut c = cmd;
        c[0] = "vadapt".into();
        c.join(" ")
    };
    format!("`{cmd}` on {}, git {}", utc_now(), git_rev())
}

fn toml_str(s: &str) -> String {
    // TOML basic string: escape backslashes and quotes; control characters do not occur.
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn render(a: &CalibrateArgs, m: &Measured) -> String {
    let c = &m.cal;
    let note = |k: &str| m.notes.get(k).cloned().unwrap_or_default();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# vadapt simulator calibration MEASURED on this host by `vadapt calibrate`\n\
         # (real daemon + synthetic guest in one process; worker pinned to CPU 1 and guest to\n\
         # CPU 0 when there are two CPUs). Format: vadapt-sim's `Calibration`.\n\
         # Costs are of this machine: a userspace guest whose kicks and calls are eventfd\n\
         # syscalls, with the VM-exit part of kick_ns / call_ns the guest's emulated exit cost\n\
         # ({} ns). Methods: the module docs of harness/src/calibrate/mod.rs.\n\
         # TSC {:.4} GHz. {} round(s) of every measurement, interleaved, {} s per load point;\n\
         # each value is the median over rounds.{}",
        a.exit_cost_ns,
        m.tsc_per_ns,
        m.rounds,
        if a.quick { 0.4 } else { a.duration },
        if a.quick {
            " QUICK RUN: few samples, for tests only."
        } else {
            ""
        }
    );
    let _ = writeln!(s, "machine = {}", toml_str(&c.machine));
    let _ = writeln!(s, "source = {}\n", toml_str(&c.source));
    let _ = writeln!(
        s,
        "# Fit of the worker's TSC cycles per non-empty pass (NetAP near 200 us, paced guest):\n\
         # cycles/pass = a*packets + p*frame_bytes + b:{}",
        note("fit")
    );
    let _ = writeln!(
        s,
        "# Worker CPU per packet (ring walk, copy to a host buffer, switch, sink): a.\nper_packet_ns = {:.2}",
        c.per_packet_ns
    );
    let _ = writeln!(
        s,
        "# Worker CPU per frame byte: p (from the 1400-byte point against the 64-byte ones).\nper_byte_ps = {:.2}",
        c.per_byte_ps
    );
    let _ = writeln!(
        s,
        "# Worker CPU per pass, empty or not (ring index reads, policy, loop): {}.\npass_overhead_ns = {:.2}",
        note("pass_overhead_ns"),
        c.pass_overhead_ns
    );
    let _ = writeln!(
        s,
        "# NOT MEASURED, 0 by construction: the sink port's hand-off is inside the pass and so\n\
         # already in per_packet_ns. A TAP or NIC adds its own (default.toml: 300 ns placeholder).\nnic_packet_ns = 0.0"
    );
    let _ = writeln!(
        s,
        "# {}. On KVM a kick is a VM exit\n\
         # (trapped doorbell write, ioeventfd, VM entry): the emulated exit stands for that.\nkick_ns = {:.1}",
        note("kick_ns"),
        c.kick_ns
    );
    let _ = writeln!(s, "# {}.\ncall_ns = {:.1}", note("call_ns"), c.call_ns);
    let _ = writeln!(
        s,
        "# {}.\nwake_latency_ns = {:.1}",
        note("wake_latency_ns"),
        c.wake_latency_ns
    );
    let _ = writeln!(
        s,
        "# {}.\nwakeup_cpu_ns = {:.1}",
        note("wakeup_cpu_ns"),
        c.wakeup_cpu_ns
    );
    let _ = writeln!(
        s,
        "# {}.\ntimer_overshoot_ns = {:.1}",
        note("timer_overshoot_ns"),
        c.timer_overshoot_ns
    );
    let _ = writeln!(
        s,
        "# {}.\ncontext_switch_ns = {:.1}",
        note("context_switch_ns"),
        c.context_switch_ns
    );
    let _ = writeln!(
        s,
        "# Interquartile range / median of the wake-up latencies above (a uniform draw in\n\
         # [1-j, 1+j] x median has that IQR), clamped to [0.05, 0.9].\njitter = {:.3}",
        c.jitter
    );
    let _ = writeln!(
        s,
        "\n# Not calibration keys (workload facts of the synthetic guest, for scenarios that model it):\n\
         # guest CPU per 64-byte packet, busy-poll backend, closed loop, no kicks (least of the\n\
         #   rounds: other load only adds to it): {:.1} ns\n\
         #   (use as `xmit_segment_ns` with segment_bytes = msg_size, send_msg_ns = 0, header_bytes = 14);\n\
         # busy-poll closed-loop throughput, 1 thread, worker and guest on their own CPUs: {:.2} Mpps,\n\
         #   at {:.0} ns of worker TSC time per packet in its non-empty passes (caches hot: no sleeps).",
        m.guest_ns_per_packet,
        m.busy_poll_mpps,
        m.busy_poll_ns_per_packet
    );
    s
}

fn print_summary(m: &Measured) {
    let c = &m.cal;
    println!("machine: {}", c.machine);
    println!(
        "{:<20} {:>10}\n{:<20} {:>10.2}\n{:<20} {:>10.2}\n{:<20} {:>10.2}\n{:<20} {:>10.1}\n{:<20} {:>10.1}\n{:<20} {:>10.1}\n{:<20} {:>10.1}\n{:<20} {:>10.1}\n{:<20} {:>10.1}\n{:<20} {:>10.3}",
        "key", "value",
        "per_packet_ns", c.per_packet_ns,
        "per_byte_ps", c.per_byte_ps,
        "pass_overhead_ns", c.pass_overhead_ns,
        "kick_ns", c.kick_ns,
        "call_ns", c.call_ns,
        "wake_latency_ns", c.wake_latency_ns,
        "wakeup_cpu_ns", c.wakeup_cpu_ns,
        "timer_overshoot_ns", c.timer_overshoot_ns,
        "context_switch_ns", c.context_switch_ns,
        "jitter", c.jitter,
    );
    println!(
        "guest: {:.1} ns/packet; busy-poll closed loop {:.2} Mpps",
        m.guest_ns_per_packet, m.busy_poll_mpps
    );
    for p in &m.points {
        println!(
            "  {:<18} {:>9.0} pps {:>7.1} pkts/pass {:>6.0} ns/pkt busy  worker CPU {:>5.1}%  wake-ups/s {:>7.0}",
            p.name,
            p.tx_packets as f64 / p.secs,
            p.busy_packets as f64 / p.passes.max(1) as f64,
            p.busy_cycles as f64 / p.busy_packets.max(1) as f64 / m.tsc_per_ns,
            p.cpu_s / p.secs * 100.0,
            p.wakeups as f64 / p.secs
        );
    }
}
