//! The daemon points: each a policy and a single-thread guest load into the
//! real daemon's sink, what a round runs of them, and the counters read over
//! each one's window.

use super::daemon::{blocked_wakeups, join_guest, port_sum, spawn_guest, tmpdir, worker, SINK};
use super::error::{CalibrateError, Result};
use super::plan::{Cpus, Plan};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::Daemon;
use vadapt_guest::{GuestConfig, Load};
use vadapt_policy::config::NetapParams;
use vadapt_policy::PolicyConfig;

/// One daemon measurement: a policy and a single-thread guest load to a sink.
#[derive(Clone, Copy, Debug)]
pub(super) struct Point {
    /// Name, in progress lines and the summary.
    pub(super) name: &'static str,
    /// The worker's policy.
    pub(super) policy: PolicyConfig,
    /// The guest's load.
    pub(super) load: Load,
    /// Frame bytes.
    pub(super) size: u32,
}

/// Counter deltas over a point's measuring window.
#[derive(Clone, Debug, Serialize)]
pub(super) struct PointResult {
    /// The point's name.
    pub(super) name: &'static str,
    /// Frame bytes.
    pub(super) size: u32,
    /// Window length, s.
    pub(super) secs: f64,
    /// Packets the VM port sent into the switch.
    pub(super) tx_packets: u64,
    /// Their bytes.
    pub(super) tx_bytes: u64,
    /// Guest kicks.
    pub(super) kicks: u64,
    /// Worker passes, empty or not.
    pub(super) passes: u64,
    /// TSC cycles of the non-empty passes.
    pub(super) busy_cycles: u64,
    /// Packets moved in those passes.
    pub(super) busy_packets: u64,
    /// Worker CPU time, s.
    pub(super) cpu_s: f64,
    /// Times the worker woke from a blocking wait.
    pub(super) wakeups: u64,
    /// The worker's sleep overshoot p50 at the end of the window, ns.
    pub(super) overshoot_p50_ns: u64,
    /// Guest CPU per packet sent over the whole guest run, ns.
    pub(super) guest_ns_per_packet: f64,
}

/// Start a daemon with one VM port and a sink, drive `p` through it, and
/// stop it.
pub(super) fn run_point(p: &Point, plan: &Plan, cpus: Cpus) -> Result<PointResult> {
    let dir = tmpdir(p.name)?;
    let cfg = DaemonConfig {
        vm: vec![VmPortConfig::new("vm1", dir.join("vm1.sock"))],
        sink: vec![LocalPortConfig::new("sink0", Some(SINK))],
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

/// Run `p`'s guest against `daemon` and read the counters over the window.
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

/// NetAP held near a fixed 200 µs interval, without its kick safety net
/// or its ring guard (a calibration point measures the sleeps it asks for).
fn netap_near_200us() -> PolicyConfig {
    PolicyConfig::Netap(NetapParams {
        min_interval_us: 200,
        max_interval_us: 240,
        min_distance_us: 30,
        round_ms: 100,
        max_rounds: 0,
        kick_threshold_permille: 0,
        ring_guard: false,
        ..NetapParams::default()
    })
}

/// What a daemon point is for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Role {
    /// A row of the worker-cost fit.
    Fit,
    /// Busy-poll, closed loop: the guest's per-packet cost.
    Busy,
    /// Busy-poll, guest nearly silent: the cost of an empty pass.
    Idle,
    /// Interrupt mode: CPU per wake-up; the first such point gives the value.
    Wake,
}

/// Every daemon point of a round, in run order, with its role.
pub(super) fn daemon_points(quick: bool) -> Vec<(Point, Role)> {
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
pub(super) fn representative(
    runs: &[PointResult],
    key: impl Fn(&PointResult) -> f64,
) -> (PointResult, f64, f64) {
    let mut idx: Vec<usize> = (0..runs.len()).collect();
    idx.sort_by(|&a, &b| key(&runs[a]).total_cmp(&key(&runs[b])));
    let lo = key(&runs[idx[0]]);
    let hi = key(&runs[idx[idx.len() - 1]]);
    (runs[idx[(idx.len() - 1) / 2]].clone(), lo, hi)
}

/// TSC cycles per pass.
pub(super) fn per_pass_cycles(p: &PointResult) -> f64 {
    p.busy_cycles as f64 / p.passes.max(1) as f64
}

/// Worker CPU per wake-up, ns.
pub(super) fn per_wake_cpu_ns(p: &PointResult) -> f64 {
    p.cpu_s * 1e9 / p.wakeups.max(1) as f64
}

/// Packets the worker moved, Mpps.
pub(super) fn mpps(p: &PointResult) -> f64 {
    p.tx_packets as f64 / p.secs / 1e6
}
