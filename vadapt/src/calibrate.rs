//! `vadapt calibrate`: measure on this host the costs the simulator charges,
//! and write them as a `vadapt_sim::Calibration` TOML file; with
//! `--validate`, run scenarios on the real daemon + synthetic guest and in the
//! simulator, side by side.
//!
//! # What is measured, and how
//!
//! Everything runs in this process: the real daemon ([`Daemon::start`]) with a
//! sink port, one synthetic guest ([`Guest`]) with one sender thread, and a few
//! micro-benchmarks of the kernel paths the data plane uses. With two or more
//! CPUs the queue worker is pinned to CPU 1 and the guest to CPU 0, so the two
//! do not time-share a core during the measurement (the simulator models the
//! sharing itself).
//!
//! | key | method |
//! |---|---|
//! | `per_packet_ns`, `per_byte_ps`, `pass_overhead_ns` | NetAP held at a ~200 µs interval (range 200–240 µs, no kick threshold), the guest paced so that each pass finds ~4, 16, 64 or 128 packets of 64 B (and ~64 of 1400 B). Per run: TSC cycles of the non-empty passes ÷ passes, against packets and frame bytes per pass; least-squares fit `cycles = a·packets + p·bytes + b` (every pass after a timed sleep finds packets at these rates, so passes ≈ non-empty passes). TSC rate from `CLOCK_MONOTONIC`. |
//! | `nic_packet_ns` | 0: the sink port's hand-off is part of the worker's pass and so already in `per_packet_ns`. A TAP or a NIC costs more; see `default.toml`. |
//! | `kick_ns` | median duration of an `eventfd` write that wakes a thread blocked for 20 µs on the other CPU (the syscall a kick is here), **plus** `--exit-cost-ns` (default 2000 ns, the synthetic guest's emulated VM exit). On KVM a kick is a trapped doorbell write — a VM exit — which the guest emulates by busy-waiting that long; the model charges both. |
//! | `call_ns` | median duration of reading a signalled `eventfd` (how the guest takes a call) plus `--exit-cost-ns` (the guest's emulated interrupt entry). The wait before it is `wake_latency_ns`. |
//! | `wake_latency_ns` | two threads on different CPUs: A waits 20 µs (B blocked, its CPU idle), reads the TSC and writes B's eventfd; B, blocked in `read`, reads the TSC when it returns. Median of the difference (TSC is invariant and shared); RTT/2 if the TSCs disagree. 20 µs is the loaded regime, a worker kicked again soon after it went to sleep; the latencies after 0, 200 and 2000 µs of idling go into the file as comments, because in a VM a CPU that idles longer wakes slower (the model has one value). |
//! | `jitter` | interquartile range ÷ median of those wake latencies (a uniform draw in `[1-j, 1+j]·m` has IQR `j·m`), clamped to [0.05, 0.9]. |
//! | `wakeup_cpu_ns` | interrupt policy, guest paced at 200 kpps (one kick per pass, a few packets each): worker CPU time ÷ wake-ups, minus what the model charges per wake-up elsewhere (passes × `pass_overhead_ns`, packets × `per_packet_ns`, one `context_switch_ns`). The same at 4 kpps is written as a comment: rare wake-ups cost several times more here. |
//! | `timer_overshoot_ns` | p50 of the NetAP worker's sleep overshoot from the daemon's counters (the worker sets its timer slack to 1 ns); a direct `clock_nanosleep` measurement if the daemon recorded none. |
//! | `context_switch_ns` | two threads ping-ponging through two eventfds on one pinned CPU: half the round trip minus the eventfd write. |
//!
//! The guest's CPU per packet (busy-poll, closed loop, no kicks) is measured
//! too and written as a comment: it is a workload parameter of scenarios that
//! model the synthetic guest (`xmit_segment_ns`), not a calibration key.

use crate::cli::{chain, fail};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::clock::{calibrate_tsc, cycles};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::metrics::{StatsSnapshot, WorkerSnapshot};
use vadapt_dataplane::net::Mac;
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, GuestReport, Load};
use vadapt_policy::config::NetapParams;
use vadapt_policy::PolicyConfig;
use vadapt_sim::scenario::{SimPolicy, Workload};
use vadapt_sim::{Calibration, Scenario};

/// `vadapt calibrate`.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
    vadapt calibrate --out sim/calibration/measured.toml\n  \
    vadapt calibrate --quick --out /tmp/cal.toml\n  \
    vadapt calibrate --validate sim/scenarios/validate-1vm-1t.toml --validate-out /tmp/val")]
pub struct CalibrateArgs {
    /// Where to write the calibration file.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "sim/calibration/measured.toml"
    )]
    pub out: PathBuf,
    /// Measuring time per load point, seconds (each point also has a short warm-up).
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    pub duration: f64,
    /// A short run (0.4 s per point, fewer samples; under 30 s), for tests and smoke checks.
    #[arg(long)]
    pub quick: bool,
    /// Emulated VM-exit cost added to the measured kick and call syscalls, ns: the synthetic
    /// guest's `--exit-cost-ns`; with `--validate`, the guests' exit cost.
    #[arg(long, value_name = "NS", default_value_t = vadapt_guest::config::DEFAULT_EXIT_COST_NS)]
    pub exit_cost_ns: u64,
    /// Do not calibrate: run each of these scenarios on the real daemon + synthetic guests and
    /// in the simulator, and print both side by side. Repeatable.
    #[arg(long, value_name = "SCENARIO")]
    pub validate: Vec<PathBuf>,
    /// With `--validate`: write validation.md, validation.json and PNG plots here.
    #[arg(long, value_name = "DIR", requires = "validate")]
    pub validate_out: Option<PathBuf>,
}

/// Calibration or validation failed.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// The daemon did not start.
    #[error("cannot start the daemon")]
    StartDaemon(#[source] vadapt_dataplane::daemon::DaemonError),
    /// A synthetic guest failed to connect or run.
    #[error("synthetic guest `{vm}` failed")]
    Guest {
        /// VM port name.
        vm: String,
        /// The guest's error.
        #[source]
        source: vadapt_guest::GuestError,
    },
    /// A synthetic guest ended early or its thread panicked.
    #[error("synthetic guest `{vm}` did not finish: {reason}")]
    GuestEnded {
        /// VM port name.
        vm: String,
        /// What happened.
        reason: String,
    },
    /// A thread, eventfd or directory could not be set up.
    #[error("cannot set up {what}")]
    Setup {
        /// What.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A measurement produced nothing usable.
    #[error("measurement `{what}` is unusable: {reason}")]
    Measure {
        /// Which measurement.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The daemon refused a policy change.
    #[error("cannot change the policy: {0}")]
    SetPolicy(String),
    /// The output could not be written.
    #[error("cannot write {path}")]
    Write {
        /// File or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file written does not parse as a calibration (a bug here).
    #[error("the calibration written does not parse back: {0}")]
    Roundtrip(String),
    /// A validation scenario is invalid.
    #[error("invalid scenario")]
    Scenario(#[source] vadapt_sim::ScenarioError),
    /// A validation scenario describes something the real run cannot reproduce.
    #[error("{file}: cannot be run on the real daemon: {reason}")]
    Unsupported {
        /// Scenario file.
        file: String,
        /// Why.
        reason: String,
    },
    /// The simulation failed.
    #[error("simulation of {file} failed")]
    Sim {
        /// Scenario file.
        file: String,
        /// The cause.
        #[source]
        source: vadapt_sim::SimError,
    },
    /// A plot could not be drawn.
    #[error("cannot draw the validation plots")]
    Plot(#[source] vadapt_sim::WriteError),
}

type Result<T> = std::result::Result<T, CalibrateError>;

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
}

impl Plan {
    fn new(a: &CalibrateArgs) -> Plan {
        if a.quick {
            Plan {
                warm: Duration::from_millis(200),
                measure: Duration::from_millis(400),
                pings: 300,
            }
        } else {
            Plan {
                warm: Duration::from_millis(500),
                measure: Duration::from_secs_f64(a.duration),
                pings: 2000,
            }
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    quantile(v, 0.5)
}

/// The `q`-quantile of `v` (sorts `v`); NaN when empty.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i.min(v.len() - 1)]
}

// ------------------------------------------------------------ micro-benchmarks

/// A blocking eventfd, closed on drop.
struct Efd(File);

impl Efd {
    fn new() -> Result<Efd> {
        // SAFETY: eventfd takes no pointers; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(CalibrateError::Setup {
                what: "an eventfd".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(Efd(unsafe { File::from_raw_fd(fd) }))
    }

    fn signal(&self) {
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }

    fn wait(&self) -> u64 {
        let mut b = [0u8; 8];
        match (&self.0).read(&mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }
}

/// Samples of one ping-pong run, in TSC cycles.
#[derive(Debug, Default)]
struct PingPong {
    /// Duration of A's `write` that woke B.
    write: Vec<f64>,
    /// From just before A's write to B running after its `read`.
    wake: Vec<f64>,
    /// A's full round trip.
    rtt: Vec<f64>,
}

fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        if let Err(e) = vadapt_coremgr::cputime::pin_current_thread(c) {
            tracing::warn!(cpu = c, error = %e, "cannot pin a calibration thread");
        }
    }
}

/// Thread A on `cpu_a` pings thread B on `cpu_b` through eventfds `iters` times,
/// waiting `gap` before each ping so that B (and its CPU) has been idle that long.
fn ping_pong(
    cpu_a: Option<usize>,
    cpu_b: Option<usize>,
    iters: usize,
    gap: Option<Duration>,
) -> Result<PingPong> {
    let to_b = Arc::new(Efd::new()?);
    let to_a = Arc::new(Efd::new()?);
    let woke_at = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let b = {
        let (to_b, to_a, woke_at, stop) = (
            Arc::clone(&to_b),
            Arc::clone(&to_a),
            Arc::clone(&woke_at),
            Arc::clone(&stop),
        );
        std::thread::Builder::new()
            .name("calib-pong".into())
            .spawn(move || {
                pin(cpu_b);
                loop {
                    to_b.wait();
                    woke_at.store(cycles(), Ordering::Release);
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    to_a.signal();
                }
            })
            .map_err(|source| CalibrateError::Setup {
                what: "a ping-pong thread".into(),
                source,
            })?
    };
    let a = std::thread::Builder::new()
        .name("calib-ping".into())
        .spawn(move || {
            pin(cpu_a);
            let warm = iters / 10 + 5;
            let mut out = PingPong::default();
            for i in 0..iters + warm {
                if let Some(g) = gap {
                    idle_for(g);
                }
                let t0 = cycles();
                to_b.signal();
                let t1 = cycles();
                to_a.wait();
                let t2 = cycles();
                let tw = woke_at.load(Ordering::Acquire);
                if i >= warm {
                    out.write.push(t1.wrapping_sub(t0) as f64);
                    out.rtt.push(t2.wrapping_sub(t0) as f64);
                    // A TSC that is not shared between CPUs shows up as a negative or
                    // longer-than-the-round-trip wake-up: dropped, RTT/2 used instead.
                    if tw > t0 && tw < t2 {
                        out.wake.push((tw - t0) as f64);
                    }
                }
            }
            stop.store(true, Ordering::Release);
            to_b.signal();
            out
        })
        .map_err(|source| CalibrateError::Setup {
            what: "a ping-pong thread".into(),
            source,
        })?;
    let out = a.join().map_err(|_| CalibrateError::Measure {
        what: "ping-pong",
        reason: "the ping thread panicked".into(),
    })?;
    let _ = b.join();
    Ok(out)
}

/// Let `g` pass: spin below 100 µs (a sleep would overshoot by its timer slack), else sleep.
/// Only the other thread's CPU has to go idle, so spinning here is harmless.
fn idle_for(g: Duration) {
    if g < Duration::from_micros(100) {
        let t = Instant::now();
        while t.elapsed() < g {
            std::hint::spin_loop();
        }
    } else {
        std::thread::sleep(g);
    }
}

/// Median cycles of reading a signalled eventfd (the guest taking a call).
fn read_signalled(n: usize) -> Result<f64> {
    let e = Efd::new()?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        e.signal();
        let t0 = cycles();
        e.wait();
        v.push(cycles().wrapping_sub(t0) as f64);
    }
    Ok(median(&mut v))
}

/// Median lateness of a 200 µs `clock_nanosleep` with 1 ns timer slack, ns.
fn nanosleep_overshoot(n: usize) -> Result<f64> {
    std::thread::Builder::new()
        .name("calib-sleep".into())
        .spawn(move || {
            // SAFETY: PR_SET_TIMERSLACK takes an integer argument, no pointers.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
            let want = Duration::from_micros(200);
            let mut v: Vec<f64> = (0..n)
                .map(|_| {
                    let t = Instant::now();
                    std::thread::sleep(want);
                    t.elapsed().saturating_sub(want).as_nanos() as f64
                })
                .collect();
            median(&mut v)
        })
        .map_err(|source| CalibrateError::Setup {
            what: "a sleeping thread".into(),
            source,
        })?
        .join()
        .map_err(|_| CalibrateError::Measure {
            what: "timer overshoot",
            reason: "the sleeping thread panicked".into(),
        })
}

// ------------------------------------------------------------ daemon points

/// Idle times before the measured wake-ups (µs), with the share of `Plan::pings` each gets
/// (long gaps get fewer round trips to bound the run time).
const WAKE_GAPS_US: [(u64, usize); 4] = [(0, 1), (20, 1), (200, 2), (2000, 10)];
/// The idle gap whose wake-up goes into the file: a worker kicked while it keeps up with a
/// loaded guest has been idle for tens of microseconds.
const WAKE_GAP_US: u64 = 20;

const SINK: Mac = Mac([0x02, 0, 0, 0, 0x5e, 0x01]);

fn tmpdir(tag: &str) -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("vadapt-calib-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).map_err(|source| CalibrateError::Setup {
        what: format!("directory {}", d.display()),
        source,
    })?;
    Ok(d)
}

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

fn worker<'a>(s: &'a StatsSnapshot, name: &str) -> Option<&'a WorkerSnapshot> {
    s.workers.iter().find(|w| w.name == name)
}

/// Wake-ups that ended a blocked wait (timer, kick, timeout). A `recheck` found work
/// right after re-enabling notifications and never blocked, so it is not a wake-up
/// in the model's sense.
fn blocked_wakeups(w: &WorkerSnapshot) -> u64 {
    w.wakeups
        .iter()
        .filter(|(cause, _)| cause.as_str() != "recheck")
        .map(|(_, n)| n)
        .sum()
}

fn port_sum(
    s: &StatsSnapshot,
    port: &str,
    f: fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64,
) -> u64 {
    s.port_total(port, f).unwrap_or(0)
}

/// Start a guest on its own thread (pinned to `cpu`, which its sender threads
/// inherit).
fn spawn_guest(
    vm: &str,
    cfg: GuestConfig,
    cpu: Option<usize>,
    stop: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<std::result::Result<GuestReport, vadapt_guest::GuestError>>> {
    let guest = Guest::connect(cfg).map_err(|source| CalibrateError::Guest {
        vm: vm.to_string(),
        source,
    })?;
    let st = Arc::clone(stop);
    std::thread::Builder::new()
        .name(format!("guest-{vm}"))
        .spawn(move || {
            pin(cpu);
            guest.run(st)
        })
        .map_err(|source| CalibrateError::Setup {
            what: "a guest thread".into(),
            source,
        })
}

fn join_guest(
    vm: &str,
    h: std::thread::JoinHandle<std::result::Result<GuestReport, vadapt_guest::GuestError>>,
) -> Result<GuestReport> {
    match h.join() {
        Ok(Ok(r)) => match &r.error {
            Some(e) => Err(CalibrateError::GuestEnded {
                vm: vm.to_string(),
                reason: e.clone(),
            }),
            None => Ok(r),
        },
        Ok(Err(source)) => Err(CalibrateError::Guest {
            vm: vm.to_string(),
            source,
        }),
        Err(_) => Err(CalibrateError::GuestEnded {
            vm: vm.to_string(),
            reason: "its thread panicked".into(),
        }),
    }
}

fn run_point(p: &Point, plan: &Plan, cpus: Cpus) -> Result<PointResult> {
    let dir = tmpdir(p.name)?;
    let cfg = DaemonConfig {
        vm: vec![VmPortConfig {
            name: "vm1".into(),
            socket: dir.join("vm1.sock"),
            queues: 1,
            mac: None,
            policy: None,
        }],
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

/// Least squares: `rows` of (x, y); returns the coefficients or `None` when singular.
fn least_squares<const K: usize>(rows: &[([f64; K], f64)]) -> Option<[f64; K]> {
    let mut m = [[0.0f64; K]; K];
    let mut v = [0.0f64; K];
    for (x, y) in rows {
        for i in 0..K {
            v[i] += x[i] * y;
            for j in 0..K {
                m[i][j] += x[i] * x[j];
            }
        }
    }
    // Gauss-Jordan elimination with partial pivoting on the normal equations.
    for c in 0..K {
        let p = (c..K).max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs()))?;
        if m[p][c].abs() < 1e-12 {
            return None;
        }
        m.swap(c, p);
        v.swap(c, p);
        let (pivot, vc) = (m[c], v[c]);
        for (r, (row, vr)) in m.iter_mut().zip(v.iter_mut()).enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, px) in row.iter_mut().zip(pivot.iter()).skip(c) {
                    *x -= f * px;
                }
                *vr -= f * vc;
            }
        }
    }
    let mut out = [0.0; K];
    for (i, o) in out.iter_mut().enumerate() {
        *o = v[i] / m[i][i];
    }
    Some(out)
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
    eprintln!("calibrate: TSC {:.3} GHz; micro-benchmarks", tsc_per_ns);

    // Kernel paths: wake-up across CPUs after several idle times, context switch
    // on one CPU, eventfd costs.
    let mut wake_by_gap = Vec::new();
    let mut chosen = None;
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
        let rtt_ns = ns(median(&mut rt));
        // A TSC not shared between CPUs leaves few plausible samples: use RTT/2.
        let direct = wk.len() * 2 >= n;
        let lat = if direct {
            ns(median(&mut wk))
        } else {
            rtt_ns / 2.0
        };
        let jit = if direct {
            (ns(quantile(&mut wk, 0.75) - quantile(&mut wk, 0.25)) / lat).clamp(0.05, 0.9)
        } else {
            0.25
        };
        let write = ns(median(&mut w));
        wake_by_gap.push((gap_us, lat, write, direct));
        if gap_us == WAKE_GAP_US {
            chosen = Some((lat, jit, write, direct, rtt_ns, n));
        }
    }
    let Some((wake_latency_ns, jitter, kick_syscall_ns, direct, rtt_ns, n)) = chosen else {
        return Err(CalibrateError::Measure {
            what: "wake latency",
            reason: "no ping-pong at the chosen idle gap".into(),
        });
    };
    let mut by_gap = String::new();
    for (g, lat, w, _) in &wake_by_gap {
        let _ = write!(by_gap, "\n#   idle {g:>4} us before the wake-up: latency {lat:>6.0} ns, waking write {w:>5.0} ns");
    }
    notes.insert(
        "wake_latency_ns",
        format!(
            "{} of {n} eventfd wake-ups of a thread that had been blocked {WAKE_GAP_US} us on another CPU \
             (the loaded regime: a worker woken by kicks or calls back to back){}; \
             the longer a CPU idles the longer its wake-up (a vCPU halted in this VM):{by_gap}",
            if direct {
                "median, TSC read on both sides,"
            } else {
                "half the round trip (the CPUs' TSCs disagree)"
            },
            if direct {
                format!(", round trip median {rtt_ns:.0} ns")
            } else {
                String::new()
            },
        ),
    );
    let PingPong {
        write: mut sw,
        rtt: mut srtt,
        ..
    } = ping_pong(cpus.guest, cpus.guest, plan.pings * 2, None)?;
    let same_write_ns = ns(median(&mut sw));
    let same_rtt_ns = ns(median(&mut srtt));
    let context_switch_ns = (same_rtt_ns / 2.0 - same_write_ns).max(1.0);
    notes.insert(
        "context_switch_ns",
        format!(
            "eventfd ping-pong of two threads on one CPU: half the median round trip ({same_rtt_ns:.0} ns) minus the waking write ({same_write_ns:.0} ns)"
        ),
    );
    let call_read_ns = ns(read_signalled(if a.quick { 2000 } else { 20000 })?);

    // Daemon points: worker cost fit.
    let netap = netap_near_200us();
    let mut fit_points = vec![
        (4u32, 20_000.0, 64u32),
        (16, 80_000.0, 64),
        (64, 320_000.0, 64),
        (128, 640_000.0, 64),
        (64, 320_000.0, 1400),
    ];
    if a.quick {
        fit_points.retain(|p| p.0 != 16);
    }
    let names: [&'static str; 5] = [
        "netap200-4x64B",
        "netap200-16x64B",
        "netap200-64x64B",
        "netap200-128x64B",
        "netap200-64x1400B",
    ];
    let mut points = Vec::new();
    for (i, (_, pps, size)) in fit_points.iter().enumerate() {
        let name = match (*pps as u64, *size) {
            (20_000, _) => names[0],
            (80_000, _) => names[1],
            (320_000, 64) => names[2],
            (640_000, _) => names[3],
            _ => names[4],
        };
        eprintln!(
            "calibrate: point {}/{} {name}",
            i + 1,
            fit_points.len() + if a.quick { 2 } else { 3 }
        );
        points.push(run_point(
            &Point {
                name,
                policy: netap,
                load: Load::Rate { pps: *pps },
                size: *size,
            },
            plan,
            cpus,
        )?);
    }
    let rows: Vec<([f64; 3], f64)> = points
        .iter()
        .filter(|p| p.passes > 0 && p.busy_packets > 0)
        .map(|p| {
            let passes = p.passes as f64;
            (
                [
                    p.busy_packets as f64 / passes,
                    p.tx_bytes as f64 / passes,
                    1.0,
                ],
                p.busy_cycles as f64 / passes,
            )
        })
        .collect();
    if rows.len() < 3 {
        return Err(CalibrateError::Measure {
            what: "worker cost fit",
            reason: format!("only {} load points moved packets", rows.len()),
        });
    }
    let all_pkts: f64 = points.iter().map(|p| p.busy_packets as f64).sum();
    let all_cycles: f64 = points.iter().map(|p| p.busy_cycles as f64).sum();
    let mean_per_packet_ns = ns(all_cycles / all_pkts.max(1.0));
    let (mut per_packet_ns, mut per_byte_ps, mut pass_overhead_ns);
    let mut fit_note = String::new();
    match least_squares(&rows) {
        Some([a1, p1, b1]) if a1 > 0.0 && p1 > 0.0 && b1 > 0.0 => {
            per_packet_ns = ns(a1);
            per_byte_ps = ns(p1) * 1000.0;
            pass_overhead_ns = ns(b1);
        }
        other => {
            // Noise can push a small term below zero; refit without the pass term
            // and say so in the file.
            let two: Vec<([f64; 2], f64)> = rows.iter().map(|(x, y)| ([x[0], x[1]], *y)).collect();
            let _ = write!(
                fit_note,
                " (3-term fit {:?} had a non-positive term; refit through the origin)",
                other.map(|c| c.map(ns))
            );
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
            pass_overhead_ns = 1.0;
        }
    }
    // The fit's per-packet term is at the frame size the model adds bytes to:
    // nothing to subtract, `per_byte_ps` multiplies frame bytes in both.
    if !(per_packet_ns.is_finite() && per_packet_ns > 0.0) {
        per_packet_ns = mean_per_packet_ns.max(1.0);
    }
    if !(per_byte_ps.is_finite() && per_byte_ps > 0.0) {
        per_byte_ps = 1.0;
    }
    if !(pass_overhead_ns.is_finite() && pass_overhead_ns > 0.0) {
        pass_overhead_ns = 1.0;
    }
    let mut fit_desc = String::new();
    for p in &points {
        let _ = write!(
            fit_desc,
            "\n#   {:<18} {:>7.1} pkts/pass {:>7.0} cycles/pass {:>5.0} ns/pkt  ({} passes)",
            p.name,
            p.busy_packets as f64 / p.passes.max(1) as f64,
            p.busy_cycles as f64 / p.passes.max(1) as f64,
            ns(p.busy_cycles as f64 / p.busy_packets.max(1) as f64),
            p.passes
        );
    }
    notes.insert("fit", format!("{fit_note}{fit_desc}"));

    // Timer overshoot: the NetAP worker's own counter.
    let mut over: Vec<f64> = points
        .iter()
        .filter(|p| p.overshoot_p50_ns > 0)
        .map(|p| p.overshoot_p50_ns as f64)
        .collect();
    let timer_overshoot_ns = if over.is_empty() {
        let v = nanosleep_overshoot(if a.quick { 100 } else { 1000 })?.max(1.0);
        notes.insert(
            "timer_overshoot_ns",
            "the daemon recorded no sleep: median lateness of a 200 us clock_nanosleep with 1 ns timer slack".into(),
        );
        v
    } else {
        let v = median(&mut over);
        notes.insert(
            "timer_overshoot_ns",
            format!(
                "median over {} NetAP points of the worker's sleep-overshoot p50 (daemon counter vadapt_worker_sleep_overshoot_seconds; timer slack 1 ns)",
                over.len()
            ),
        );
        v
    };

    // Busy-poll, closed loop: the guest's own per-packet cost, and a capacity check.
    eprintln!(
        "calibrate: point {}/{} busy-poll closed loop",
        points.len() + 1,
        fit_points.len() + if a.quick { 2 } else { 3 }
    );
    let bp = run_point(
        &Point {
            name: "busy-poll-closed",
            policy: PolicyConfig::BusyPoll,
            load: Load::ClosedLoop,
            size: 64,
        },
        plan,
        cpus,
    )?;
    points.push(bp);

    // Interrupt mode: CPU per wake-up, under load (the value) and at a low rate (a note).
    let irq_points: &[(&'static str, f64)] = if a.quick {
        &[("interrupt-200kpps", 200_000.0)]
    } else {
        &[
            ("interrupt-200kpps", 200_000.0),
            ("interrupt-4kpps", 4_000.0),
        ]
    };
    let total = points.len() + 1 + irq_points.len();
    let mut per_wake = Vec::new();
    for (i, (name, pps)) in irq_points.iter().enumerate() {
        eprintln!("calibrate: point {}/{total} {name}", points.len() + 2 + i);
        let r = run_point(
            &Point {
                name,
                policy: PolicyConfig::Interrupt,
                load: Load::Rate { pps: *pps },
                size: 64,
            },
            plan,
            cpus,
        )?;
        if r.wakeups == 0 {
            return Err(CalibrateError::Measure {
                what: "wake-up CPU",
                reason: format!("the interrupt-mode worker never woke up at {pps} pps"),
            });
        }
        let w = r.wakeups as f64;
        let cpu = r.cpu_s * 1e9 / w;
        let charged = (r.passes as f64 * pass_overhead_ns + r.tx_packets as f64 * per_packet_ns)
            / w
            + context_switch_ns;
        per_wake.push((
            *name,
            r.wakeups as f64 / r.secs,
            cpu,
            charged,
            r.tx_packets as f64 / w,
        ));
        points.push(r);
    }
    let (_, wakes_per_s, cpu, charged, pkts) = per_wake[0];
    let wakeup_cpu_ns = (cpu - charged).max(1.0);
    let mut others = String::new();
    for (name, wps, c, ch, _) in &per_wake[1..] {
        let _ = write!(
            others,
            "\n#   {name}: {wps:.0} wake-ups/s, {c:.0} ns of worker CPU each, {:.0} ns after the same subtraction",
            c - ch
        );
    }
    notes.insert(
        "wakeup_cpu_ns",
        format!(
            "interrupt policy, guest paced at 200 kpps (one kick per pass, {wakes_per_s:.0} wake-ups/s, \
             {pkts:.1} packets each): worker CPU {cpu:.0} ns per wake-up minus the pass, packet and \
             context-switch costs the model charges separately ({charged:.0} ns). \
             Rarer wake-ups cost more here (a halted vCPU's wake-up is charged to the woken thread):{others}"
        ),
    );
    let busy = points.iter().find(|p| p.name == "busy-poll-closed");
    let guest_ns_per_packet = busy.map_or(f64::NAN, |p| p.guest_ns_per_packet);
    let busy_poll_mpps = busy.map_or(f64::NAN, |p| p.tx_packets as f64 / p.secs / 1e6);
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
        call_ns: call_read_ns / tsc_per_ns + exit,
        wake_latency_ns,
        wakeup_cpu_ns,
        timer_overshoot_ns,
        context_switch_ns,
        jitter,
    };
    notes.insert(
        "kick_ns",
        format!(
            "median eventfd write waking a thread blocked {WAKE_GAP_US} us on another CPU: {kick_syscall_ns:.0} ns, + {exit:.0} ns emulated VM exit (--exit-cost-ns)"
        ),
    );
    notes.insert(
        "call_ns",
        format!(
            "median read of a signalled eventfd: {:.0} ns, + {exit:.0} ns emulated interrupt entry (--exit-cost-ns)",
            call_read_ns / tsc_per_ns
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

/// UTC date and time, `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (H. Hinnant): proleptic Gregorian calendar.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
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
         # ({} ns). Methods: `vadapt calibrate --help` and vadapt/src/calibrate.rs.\n\
         # TSC {:.4} GHz.{}",
        a.exit_cost_ns,
        m.tsc_per_ns,
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
         # cycles/pass = a*packets + p*frame_bytes + b; per point:{}",
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
        "# Fixed worker CPU per non-empty pass (index reads, used.idx publish, policy): b.\npass_overhead_ns = {:.2}",
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
         # guest CPU per 64-byte packet, busy-poll backend, closed loop, no kicks: {:.1} ns\n\
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

// ------------------------------------------------------------ validation

/// Rates over one window, both sides computed alike.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Rates {
    /// Guest-to-host packets, millions per second.
    mpps: f64,
    /// Kicks received, per second.
    kicks_per_s: f64,
    /// Calls sent, per second.
    calls_per_s: f64,
    /// Queue-worker CPU, percent of one core, all workers.
    worker_cpu_pct: f64,
    /// Service passes, per second, all workers.
    passes_per_s: f64,
    /// Worker wake-ups from a blocked wait, per second, all workers.
    wakeups_per_s: f64,
}

/// One period of one scenario.
#[derive(Clone, Debug, Serialize)]
struct PeriodRow {
    scenario: String,
    period: String,
    policy: String,
    real: Rates,
    sim: Rates,
}

/// One scenario's outcome.
#[derive(Clone, Debug, Serialize)]
struct Validation {
    scenario: String,
    file: String,
    rows: Vec<PeriodRow>,
    /// Per-sample series: (t_s, real, sim).
    series: Vec<(f64, Rates, Rates)>,
}

/// What the real run needs from a scenario.
struct RealSetup {
    /// Per VM: (threads, message size, ring size).
    vms: Vec<(u32, u32, u16)>,
    /// Policy switches (time ns, policy); the first at 0.
    timeline: Vec<(u64, PolicyConfig)>,
    msg_size: u32,
}

fn real_setup(sc: &Scenario) -> Result<RealSetup> {
    let bad = |reason: String| CalibrateError::Unsupported {
        file: sc.file.clone(),
        reason,
    };
    let mut vms = Vec::new();
    let mut sizes = Vec::new();
    for vm in &sc.vms {
        let Workload::Stream(s) = &vm.workload else {
            return Err(bad(format!(
                "VM `{}` has a request/response load; only stream loads are reproduced",
                vm.name
            )));
        };
        if vm.queues != 1 {
            return Err(bad(format!(
                "VM `{}` has {} queues: the daemon runs one worker per VM port, so the scenario must say queues = 1",
                vm.name, vm.queues
            )));
        }
        if s.segment_bytes != s.msg_size {
            return Err(bad(format!(
                "VM `{}`: the synthetic guest sends one frame per message, so segment_bytes must equal msg_size",
                vm.name
            )));
        }
        if s.msg_size > vadapt_guest::config::MTU || s.msg_size < 46 {
            return Err(bad(format!(
                "VM `{}`: msg_size {} outside 46..=1500",
                vm.name, s.msg_size
            )));
        }
        let ring = u16::try_from(vm.ring_size).map_err(|_| bad("ring_size too large".into()))?;
        vms.push((s.threads, s.msg_size, ring));
        sizes.push(s.msg_size);
    }
    sizes.dedup();
    if sizes.len() != 1 {
        return Err(bad("all VMs must use the same msg_size".into()));
    }
    let mut timeline = Vec::new();
    for t in &sc.timeline {
        match t.policy {
            SimPolicy::Policy(p) => timeline.push((t.at.as_nanos(), p)),
            SimPolicy::FixedInterval { .. } => {
                return Err(bad("the fixed-interval probe is not a daemon policy".into()))
            }
        }
    }
    Ok(RealSetup {
        vms,
        timeline,
        msg_size: sizes[0],
    })
}

fn validate_all(a: &CalibrateArgs) -> Result<()> {
    let mut out = Vec::new();
    for path in &a.validate {
        let sc = Scenario::from_file(path).map_err(CalibrateError::Scenario)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if sc.host.cores as usize != cores {
            eprintln!(
                "warning: {} models {} cores, this host has {cores}",
                sc.file, sc.host.cores
            );
        }
        let setup = real_setup(&sc)?;
        eprintln!(
            "validate: {} — simulating {} s",
            sc.name,
            sc.duration.as_secs_f64()
        );
        let sim = vadapt_sim::run_scenario(&sc, sc.seed).map_err(|source| CalibrateError::Sim {
            file: sc.file.clone(),
            source,
        })?;
        eprintln!(
            "validate: {} — real daemon, {} s",
            sc.name,
            sc.duration.as_secs_f64()
        );
        let real = run_real(&sc, &setup, a.exit_cost_ns)?;
        out.push(compare(&sc, &setup, &sim, &real));
    }
    let md = markdown(&out, a);
    println!("{md}");
    if let Some(dir) = &a.validate_out {
        let werr = |path: PathBuf| move |source| CalibrateError::Write { path, source };
        std::fs::create_dir_all(dir).map_err(werr(dir.clone()))?;
        std::fs::write(dir.join("validation.md"), &md).map_err(werr(dir.join("validation.md")))?;
        let json = serde_json::to_string_pretty(&out).unwrap_or_default();
        std::fs::write(dir.join("validation.json"), json)
            .map_err(werr(dir.join("validation.json")))?;
        for v in &out {
            plot(dir, v)?;
        }
        println!(
            "wrote {}/ (validation.md, validation.json, PNGs)",
            dir.display()
        );
    }
    Ok(())
}

/// Counters of the real run at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct RealSnap {
    t: f64,
    packets: u64,
    kicks: u64,
    calls: u64,
    cpu_s: f64,
    passes: u64,
    wakeups: u64,
}

fn real_snap(s: &StatsSnapshot, t: f64, vms: usize) -> RealSnap {
    let mut r = RealSnap {
        t,
        ..RealSnap::default()
    };
    for i in 1..=vms {
        let n = format!("vm{i}");
        r.packets += port_sum(s, &n, |q| q.tx_packets);
        r.kicks += port_sum(s, &n, |q| q.kicks);
        r.calls += port_sum(s, &n, |q| q.calls);
        if let Some(w) = worker(s, &n) {
            r.cpu_s += w.cpu_seconds;
            r.passes += w.passes;
            r.wakeups += blocked_wakeups(w);
        }
    }
    r
}

fn rates(a: &RealSnap, b: &RealSnap) -> Rates {
    let dt = (b.t - a.t).max(1e-9);
    Rates {
        mpps: b.packets.saturating_sub(a.packets) as f64 / dt / 1e6,
        kicks_per_s: b.kicks.saturating_sub(a.kicks) as f64 / dt,
        calls_per_s: b.calls.saturating_sub(a.calls) as f64 / dt,
        worker_cpu_pct: (b.cpu_s - a.cpu_s).max(0.0) / dt * 100.0,
        passes_per_s: b.passes.saturating_sub(a.passes) as f64 / dt,
        wakeups_per_s: b.wakeups.saturating_sub(a.wakeups) as f64 / dt,
    }
}

fn run_real(sc: &Scenario, setup: &RealSetup, exit_cost_ns: u64) -> Result<Vec<RealSnap>> {
    let dir = tmpdir(&sc.name)?;
    let cfg = DaemonConfig {
        vm: (1..=setup.vms.len())
            .map(|i| VmPortConfig {
                name: format!("vm{i}"),
                socket: dir.join(format!("vm{i}.sock")),
                queues: 1,
                mac: None,
                policy: None,
            })
            .collect(),
        sink: vec![LocalPortConfig {
            name: "sink0".into(),
            mac: Some(SINK),
        }],
        policy: setup.timeline[0].1,
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(cfg).map_err(CalibrateError::StartDaemon)?;
    let r = drive_real(sc, setup, &daemon, &dir, exit_cost_ns);
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn drive_real(
    sc: &Scenario,
    setup: &RealSetup,
    daemon: &Daemon,
    dir: &Path,
    exit_cost_ns: u64,
) -> Result<Vec<RealSnap>> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut guests = Vec::new();
    for (i, (threads, size, ring)) in setup.vms.iter().enumerate() {
        let name = format!("vm{}", i + 1);
        let mut g = GuestConfig::new(dir.join(format!("{name}.sock")));
        g.threads = *threads;
        g.size = *size;
        g.ring_size = *ring;
        // One queue pair per VM: the threads share it, as the scenario's one queue says.
        g.queues = Some(1);
        g.load = Load::ClosedLoop;
        g.dst_mac = SINK.0;
        g.exit_cost_ns = exit_cost_ns;
        g.duration = Duration::from_nanos(sc.duration.as_nanos()) + Duration::from_secs(10);
        match spawn_guest(&name, g, None, &stop) {
            Ok(h) => guests.push((name, h)),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                for (n, h) in guests {
                    let _ = join_guest(&n, h);
                }
                return Err(e);
            }
        }
    }
    // Read the counters at every sample boundary, period edge and policy switch.
    let end = sc.duration.as_nanos();
    let step = sc.sample.as_nanos().max(1);
    let mut times: Vec<u64> = (0..=end / step).map(|k| k * step).collect();
    times.extend(setup.timeline.iter().map(|t| t.0));
    for p in &sc.periods {
        times.push((p.from_s * 1e9) as u64);
        times.push((p.to_s * 1e9) as u64);
    }
    times.retain(|t| *t <= end);
    times.sort_unstable();
    times.dedup();
    let reg = daemon.registry();
    let start = Instant::now();
    let mut snaps = Vec::new();
    let mut err = None;
    for t in times {
        let target = start + Duration::from_nanos(t);
        std::thread::sleep(target.saturating_duration_since(Instant::now()));
        let now = start.elapsed().as_secs_f64();
        snaps.push(real_snap(&reg.snapshot(), now, setup.vms.len()));
        for (at, p) in setup.timeline.iter().skip(1) {
            if *at == t {
                for i in 1..=setup.vms.len() {
                    if let Err(e) = daemon.set_policy(&format!("vm{i}"), *p) {
                        err = Some(CalibrateError::SetPolicy(e));
                    }
                }
            }
        }
        if err.is_some() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for (n, h) in guests {
        let r = join_guest(&n, h);
        if err.is_none() {
            if let Err(e) = r {
                err = Some(e);
            }
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(snaps),
    }
}

/// The snapshot taken closest to `t` seconds (every period edge has one).
fn at(snaps: &[RealSnap], t: f64, start: f64) -> RealSnap {
    // Snapshots carry the wall time they were taken at; match by scheduled order.
    let mut best = snaps[0];
    for s in snaps {
        if (s.t - start - t).abs() < (best.t - start - t).abs() {
            best = *s;
        }
    }
    best
}

/// Mean of `f` over the samples whose window ends in `(from_s, to_s]` (as the
/// simulator's period summaries are computed).
fn mean_in(
    sim: &vadapt_sim::SimResult,
    from_s: f64,
    to_s: f64,
    f: impl Fn(&vadapt_sim::result::Sample) -> f64,
) -> f64 {
    let v: Vec<f64> = sim
        .samples
        .iter()
        .filter(|s| s.t_s > from_s + 1e-9 && s.t_s <= to_s + 1e-9)
        .map(f)
        .collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn compare(
    sc: &Scenario,
    setup: &RealSetup,
    sim: &vadapt_sim::SimResult,
    real: &[RealSnap],
) -> Validation {
    let to_mpps = |gbps: f64| gbps * 1e9 / 8.0 / f64::from(setup.msg_size) / 1e6;
    let t0 = real.first().map_or(0.0, |s| s.t);
    let mut rows = Vec::new();
    for p in &sim.periods {
        let a = at(real, p.from_s, t0);
        let b = at(real, p.to_s, t0);
        let policy = setup
            .timeline
            .iter()
            .rev()
            .find(|(at, _)| (*at as f64) / 1e9 <= p.from_s + 1e-9)
            .map_or_else(String::new, |(_, pc)| pc.kind().as_str().to_string());
        rows.push(PeriodRow {
            scenario: sc.name.clone(),
            period: format!("{} ({}–{} s)", p.name, p.from_s, p.to_s),
            policy,
            real: rates(&a, &b),
            sim: Rates {
                mpps: to_mpps(p.gbps),
                kicks_per_s: p.kicks_per_s,
                calls_per_s: p.calls_per_s,
                worker_cpu_pct: p.host_cpu_pct,
                // Period summaries have neither: the mean of the samples inside, as for the rest.
                passes_per_s: mean_in(sim, p.from_s, p.to_s, |s| s.passes_per_s),
                wakeups_per_s: mean_in(sim, p.from_s, p.to_s, |s| s.wakeups_per_s),
            },
        });
    }
    let mut series = Vec::new();
    for s in &sim.samples {
        let b = at(real, s.t_s, t0);
        let a = at(real, s.t_s - sc.sample.as_secs_f64(), t0);
        if (b.t - a.t) > 1e-3 {
            series.push((
                s.t_s,
                rates(&a, &b),
                Rates {
                    mpps: to_mpps(s.gbps),
                    kicks_per_s: s.kicks_per_s,
                    calls_per_s: s.calls_per_s,
                    worker_cpu_pct: s.host_cpu_pct,
                    passes_per_s: s.passes_per_s,
                    wakeups_per_s: s.wakeups_per_s,
                },
            ));
        }
    }
    Validation {
        scenario: sc.name.clone(),
        file: sc.file.clone(),
        rows,
        series,
    }
}

fn err_pct(real: f64, sim: f64) -> String {
    if real.abs() < 1e-9 {
        if sim.abs() < 1e-9 {
            "0 %".into()
        } else {
            "—".into()
        }
    } else {
        format!("{:+.0} %", (sim - real) / real * 100.0)
    }
}

fn fmt_rate(x: f64) -> String {
    if x >= 1e5 {
        format!("{:.0}k", x / 1e3)
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

fn markdown(vs: &[Validation], a: &CalibrateArgs) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Real daemon + synthetic guests (exit cost {} ns) vs simulator; error = (sim − real) / real.\n",
        a.exit_cost_ns
    );
    let _ = writeln!(
        s,
        "| scenario | period | Mpps real | Mpps sim | err | kicks/s real | kicks/s sim | err | worker CPU real | worker CPU sim | err | calls/s real | calls/s sim | wake-ups/s real | wake-ups/s sim | passes/s real | passes/s sim |"
    );
    let _ = writeln!(
        s,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for v in vs {
        for r in &v.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} | {:.3} | {} | {} | {} | {} | {:.0} % | {:.0} % | {} | {} | {} | {} | {} | {} | {} |",
                r.scenario,
                r.period,
                r.real.mpps,
                r.sim.mpps,
                err_pct(r.real.mpps, r.sim.mpps),
                fmt_rate(r.real.kicks_per_s),
                fmt_rate(r.sim.kicks_per_s),
                err_pct(r.real.kicks_per_s, r.sim.kicks_per_s),
                r.real.worker_cpu_pct,
                r.sim.worker_cpu_pct,
                err_pct(r.real.worker_cpu_pct, r.sim.worker_cpu_pct),
                fmt_rate(r.real.calls_per_s),
                fmt_rate(r.sim.calls_per_s),
                fmt_rate(r.real.wakeups_per_s),
                fmt_rate(r.sim.wakeups_per_s),
                fmt_rate(r.real.passes_per_s),
                fmt_rate(r.sim.passes_per_s),
            );
        }
    }
    s
}

fn plot(dir: &Path, v: &Validation) -> Result<()> {
    use vadapt_sim::plot::{line_chart, Series};
    let pick = |f: fn(&Rates) -> f64| -> [Series<'static>; 2] {
        [
            Series {
                label: "real daemon",
                points: v.series.iter().map(|(t, r, _)| (*t, f(r))).collect(),
            },
            Series {
                label: "simulator",
                points: v.series.iter().map(|(t, _, s)| (*t, f(s))).collect(),
            },
        ]
    };
    line_chart(
        &dir.join(format!("validation-{}-mpps.png", v.scenario)),
        &format!("{}: throughput", v.scenario),
        "time (s)",
        "Mpps",
        &pick(|r| r.mpps),
        None,
        true,
    )
    .map_err(CalibrateError::Plot)?;
    line_chart(
        &dir.join(format!("validation-{}-cpu.png", v.scenario)),
        &format!("{}: queue-worker CPU", v.scenario),
        "time (s)",
        "% of a core",
        &pick(|r| r.worker_cpu_pct),
        None,
        true,
    )
    .map_err(CalibrateError::Plot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_plane() {
        let rows: Vec<([f64; 3], f64)> = [
            (4.0, 312.0),
            (16.0, 1248.0),
            (64.0, 4992.0),
            (64.0, 89600.0),
        ]
        .iter()
        .map(|&(n, b)| ([n, b, 1.0], 30.0 * n + 0.5 * b + 200.0))
        .collect();
        let c = least_squares(&rows).unwrap();
        assert!((c[0] - 30.0).abs() < 1e-6, "{c:?}");
        assert!((c[1] - 0.5).abs() < 1e-9, "{c:?}");
        assert!((c[2] - 200.0).abs() < 1e-6, "{c:?}");
        // Two identical rows cannot give three coefficients.
        assert!(least_squares(&rows[..1]).is_none());
    }

    #[test]
    fn quantiles_and_dates() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&mut v), 3.0);
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert_eq!(quantile(&mut v, 1.0), 5.0);
        assert!(median(&mut []).is_nan());
        let d = utc_now();
        assert!(d.ends_with(" UTC") && d.len() == 20, "{d}");
    }

    #[test]
    fn errors_are_relative_to_the_real_run() {
        assert_eq!(err_pct(100.0, 110.0), "+10 %");
        assert_eq!(err_pct(100.0, 50.0), "-50 %");
        assert_eq!(err_pct(0.0, 0.0), "0 %");
        assert_eq!(err_pct(0.0, 3.0), "—");
    }

    #[test]
    fn validation_rejects_what_the_daemon_cannot_reproduce() {
        let text = r#"
            duration_s = 2
            [host]
            cores = 2
            [[vms]]
            vcpus = 2
            queues = 2
            [vms.workload]
            kind = "stream"
            threads = 2
            msg_size = 64
            segment_bytes = 64
            [[timeline]]
            at_s = 0
            policy = "interrupt"
        "#;
        let sc = Scenario::from_toml_str(text, "t.toml").unwrap();
        let e = real_setup(&sc).err().unwrap().to_string();
        assert!(e.contains("queues = 1"), "{e}");
        let sc =
            Scenario::from_toml_str(&text.replace("queues = 2", "queues = 1"), "t.toml").unwrap();
        let s = real_setup(&sc).unwrap();
        assert_eq!(s.vms, vec![(2, 64, 256)]);
        assert_eq!(s.msg_size, 64);
        let sc = Scenario::from_toml_str(
            &text
                .replace("queues = 2", "queues = 1")
                .replace("segment_bytes = 64", "segment_bytes = 1448"),
            "t.toml",
        )
        .unwrap();
        assert!(real_setup(&sc)
            .err()
            .unwrap()
            .to_string()
            .contains("segment_bytes"));
    }
}
