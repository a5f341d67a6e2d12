//! From measurements to the calibration: [`measure`] runs the rounds, then
//! turns them into each key's value and the note the file prints beside it,
//! one step per key (or per group of keys measured together), each by the
//! method the module docs of `calibrate` give for it.

use super::args::CalibrateArgs;
use super::error::{CalibrateError, Result};
use super::micro::nanosleep_overshoot;
use super::plan::{Cpus, Plan, WAKE_GAPS_US, WAKE_GAP_US};
use super::points::{
    daemon_points, mpps, per_pass_cycles, per_wake_cpu_ns, representative, Point, PointResult, Role,
};
use super::provenance::{machine, source};
use super::rounds::{over_rounds, run_rounds, MicroRound, Rounds};
use super::stats::{least_squares, median};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use vadapt_dataplane::clock::calibrate_tsc;
use vadapt_sim::Calibration;

/// The file's comment beside each key (and `fit` for the worker-cost fit),
/// by key.
pub(super) type Notes = BTreeMap<&'static str, String>;

/// Everything measured, before it becomes a file.
#[derive(Debug)]
pub(super) struct Measured {
    /// TSC cycles per ns.
    pub(super) tsc_per_ns: f64,
    /// The values written.
    pub(super) cal: Calibration,
    /// How each value was obtained.
    pub(super) notes: Notes,
    /// Each daemon point's representative run.
    pub(super) points: Vec<PointResult>,
    /// The guest's CPU per packet, busy-poll closed loop, ns (a comment).
    pub(super) guest_ns_per_packet: f64,
    /// Busy-poll closed-loop throughput, Mpps (a comment).
    pub(super) busy_poll_mpps: f64,
    /// Worker TSC time per packet of that run's non-empty passes, ns (a comment).
    pub(super) busy_poll_ns_per_packet: f64,
    /// Rounds of every measurement.
    pub(super) rounds: usize,
}

/// Measure everything on this host: the TSC rate, the rounds, and from them
/// every calibration key with its note.
pub(super) fn measure(a: &CalibrateArgs, plan: &Plan, cpus: Cpus) -> Result<Measured> {
    let mut notes = Notes::new();
    let tsc_per_ns = tsc_rate(a.quick)?;
    let rounds = plan.rounds;
    let pts = daemon_points(a.quick);
    let Rounds { micro, runs } = run_rounds(plan, cpus, tsc_per_ns, a.quick, &pts)?;
    let exit = a.exit_cost_ns as f64;
    let kernel = kernel_paths(&micro, rounds, exit, &mut notes);
    let (points, spread) = representatives(&pts, &runs);
    let fit = with_role(&pts, &points, &spread, Role::Fit);
    let worker = worker_cost(&fit, tsc_per_ns)?;
    let pass_overhead_ns = pass_overhead(&points, &mut notes)?;
    notes.insert(
        "fit",
        format!("{}{}", worker.note, fit_table(&fit, tsc_per_ns, rounds)),
    );
    let timer_overshoot_ns = timer_overshoot(&fit, a.quick, &mut notes)?;
    let wake_points = with_role(&pts, &points, &spread, Role::Wake);
    let wakeup_cpu_ns = wakeup_cpu(
        &wake_points,
        kernel.context_switch_ns,
        tsc_per_ns,
        rounds,
        &mut notes,
    )?;
    let guest = guest_figures(&pts, &runs, &points, tsc_per_ns);
    let cal = Calibration {
        machine: machine(),
        source: source(a),
        per_packet_ns: worker.per_packet_ns,
        per_byte_ps: worker.per_byte_ps,
        pass_overhead_ns,
        nic_packet_ns: 0.0,
        kick_ns: kernel.kick_syscall_ns + exit,
        call_ns: kernel.call_read_ns + exit,
        // Not measured: the daemon's calls are eventfd writes, counted in call_ns.
        call_host_ns: 0.0,
        wake_latency_ns: kernel.wake_latency_ns,
        wakeup_cpu_ns,
        timer_overshoot_ns,
        context_switch_ns: kernel.context_switch_ns,
        jitter: kernel.jitter,
    };
    Ok(Measured {
        tsc_per_ns,
        cal,
        notes,
        points,
        guest_ns_per_packet: guest.guest_ns_per_packet,
        busy_poll_mpps: guest.busy_poll_mpps,
        busy_poll_ns_per_packet: guest.busy_poll_ns_per_packet,
        rounds,
    })
}

/// The TSC rate, cycles per ns, checked to be a positive number.
fn tsc_rate(quick: bool) -> Result<f64> {
    let tsc_per_ns = calibrate_tsc(if quick { 50 } else { 200 });
    if !(tsc_per_ns.is_finite() && tsc_per_ns > 0.0) {
        return Err(CalibrateError::Measure {
            what: "TSC rate",
            reason: format!("{tsc_per_ns} cycles/ns"),
        });
    }
    eprintln!("calibrate: TSC {tsc_per_ns:.3} GHz");
    Ok(tsc_per_ns)
}

/// "; median of N rounds, range LO-HI UNIT" when there was more than one round.
fn range_note(n: usize, lo: f64, hi: f64, unit: &str) -> String {
    if n > 1 {
        format!("; median of {n} rounds, range {lo:.0}-{hi:.0} {unit}")
    } else {
        String::new()
    }
}

/// The kernel paths' keys, ns (from the micro-benchmarks).
#[derive(Debug)]
struct KernelPaths {
    wake_latency_ns: f64,
    jitter: f64,
    /// The eventfd write of a kick, without the emulated exit.
    kick_syscall_ns: f64,
    /// The eventfd read of a call, without the emulated interrupt entry.
    call_read_ns: f64,
    context_switch_ns: f64,
}

/// `wake_latency_ns`, `jitter`, `kick_ns` and `call_ns` (before the
/// emulated `exit` is added) and `context_switch_ns`, with their notes.
fn kernel_paths(micro: &[MicroRound], rounds: usize, exit: f64, notes: &mut Notes) -> KernelPaths {
    let chosen = WAKE_GAPS_US
        .iter()
        .position(|g| g.0 == WAKE_GAP_US)
        .expect("the chosen gap is measured");
    let (wake_latency_ns, wl_lo, wl_hi) = over_rounds(micro, |m| m.by_gap[chosen].1);
    let (jitter, ..) = over_rounds(micro, |m| m.jitter);
    let (kick_syscall_ns, k_lo, k_hi) = over_rounds(micro, |m| m.by_gap[chosen].2);
    let (rtt_ns, ..) = over_rounds(micro, |m| m.rtt_ns);
    let direct = micro.iter().all(|m| m.by_gap[chosen].3);
    let mut by_gap = String::new();
    for (i, (g, _)) in WAKE_GAPS_US.iter().enumerate() {
        let (lat, ..) = over_rounds(micro, |m| m.by_gap[i].1);
        let (w, ..) = over_rounds(micro, |m| m.by_gap[i].2);
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
    let (context_switch_ns, cs_lo, cs_hi) = over_rounds(micro, |m| {
        (m.same_rtt_ns / 2.0 - m.plain_write_ns - m.call_read_ns).max(1.0)
    });
    let (same_rtt_ns, ..) = over_rounds(micro, |m| m.same_rtt_ns);
    let (plain_write_ns, ..) = over_rounds(micro, |m| m.plain_write_ns);
    let (read_ns, ..) = over_rounds(micro, |m| m.call_read_ns);
    notes.insert(
        "context_switch_ns",
        format!(
            "eventfd ping-pong of two threads pinned to one CPU: half the round trip \
             ({same_rtt_ns:.0} ns: one switch, one write and one read) minus an eventfd write \
             nobody waits on ({plain_write_ns:.0} ns) and a read of a signalled one ({read_ns:.0} ns){}",
            range_note(rounds, cs_lo, cs_hi, "ns")
        ),
    );
    let (call_read_ns, ..) = over_rounds(micro, |m| m.call_read_ns);
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
    KernelPaths {
        wake_latency_ns,
        jitter,
        kick_syscall_ns,
        call_read_ns,
        context_switch_ns,
    }
}

/// One representative run per daemon point (by the key ratio of its role),
/// and the range of that ratio over the rounds.
fn representatives(
    pts: &[(Point, Role)],
    runs: &[Vec<PointResult>],
) -> (Vec<PointResult>, Vec<(f64, f64)>) {
    let mut points = Vec::new();
    let mut spread = Vec::new();
    for ((_, role), rs) in pts.iter().zip(runs) {
        let (p, lo, hi) = match role {
            Role::Fit => representative(rs, per_pass_cycles),
            Role::Busy => representative(rs, mpps),
            Role::Idle => representative(rs, |p| p.cpu_s / p.passes.max(1) as f64),
            Role::Wake => representative(rs, per_wake_cpu_ns),
        };
        spread.push((lo, hi));
        points.push(p);
    }
    (points, spread)
}

/// The representative runs of the points with `role`, each with its range.
fn with_role<'a>(
    pts: &[(Point, Role)],
    points: &'a [PointResult],
    spread: &[(f64, f64)],
    role: Role,
) -> Vec<(&'a PointResult, (f64, f64))> {
    pts.iter()
        .zip(points.iter().zip(spread.iter().copied()))
        .filter(|((_, r), _)| *r == role)
        .map(|(_, p)| p)
        .collect()
}

/// `per_packet_ns` and `per_byte_ps` from the fit, and how the fit went.
#[derive(Debug)]
struct WorkerCost {
    per_packet_ns: f64,
    per_byte_ps: f64,
    /// The coefficients, or why a simpler fit was used.
    note: String,
}

/// The worker-cost fit over the [`Role::Fit`] points:
/// `cycles/pass = a·packets + p·frame_bytes + b`.
fn worker_cost(fit: &[(&PointResult, (f64, f64))], tsc_per_ns: f64) -> Result<WorkerCost> {
    let ns = |c: f64| c / tsc_per_ns;
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
    Ok(WorkerCost {
        per_packet_ns,
        per_byte_ps,
        note: fit_note,
    })
}

/// The fit's points, one comment line each.
fn fit_table(fit: &[(&PointResult, (f64, f64))], tsc_per_ns: f64, rounds: usize) -> String {
    let ns = |c: f64| c / tsc_per_ns;
    let mut fit_desc = String::new();
    for (p, (lo, hi)) in fit {
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
    fit_desc
}

/// `pass_overhead_ns`: worker CPU per pass of a busy-polling worker whose
/// guest sends almost nothing (every pass empty, caches warm).
fn pass_overhead(points: &[PointResult], notes: &mut Notes) -> Result<f64> {
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
    Ok(pass_overhead_ns)
}

/// `timer_overshoot_ns`: the NetAP worker's own counter over the fit's
/// points, beside the kernel's raw lateness (measured here).
fn timer_overshoot(
    fit: &[(&PointResult, (f64, f64))],
    quick: bool,
    notes: &mut Notes,
) -> Result<f64> {
    let raw = nanosleep_overshoot(if quick { 100 } else { 1000 })?;
    let mut over: Vec<f64> = fit
        .iter()
        .filter(|(p, _)| p.overshoot_p50_ns > 0)
        .map(|(p, _)| p.overshoot_p50_ns as f64)
        .collect();
    Ok(if over.is_empty() {
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
    })
}

/// `wakeup_cpu_ns`: interrupt mode's CPU per wake-up under load (the first
/// of `wake_points`, the value), and at lower rates (the others, a note).
fn wakeup_cpu(
    wake_points: &[(&PointResult, (f64, f64))],
    context_switch_ns: f64,
    tsc_per_ns: f64,
    rounds: usize,
    notes: &mut Notes,
) -> Result<f64> {
    let ns = |c: f64| c / tsc_per_ns;
    let mut per_wake = Vec::new();
    for (r, (lo, hi)) in wake_points {
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
    Ok(wakeup_cpu_ns)
}

/// What the file gives as comments, not keys: workload facts of the
/// synthetic guest and of busy polling.
#[derive(Debug)]
struct GuestFigures {
    guest_ns_per_packet: f64,
    busy_poll_mpps: f64,
    busy_poll_ns_per_packet: f64,
}

/// The guest's CPU per packet and busy-poll's closed-loop figures.
fn guest_figures(
    pts: &[(Point, Role)],
    runs: &[Vec<PointResult>],
    points: &[PointResult],
    tsc_per_ns: f64,
) -> GuestFigures {
    let ns = |c: f64| c / tsc_per_ns;
    let busy = points.iter().find(|p| p.name == "busy-poll-closed");
    // The guest's CPU per packet is a workload parameter, not a host cost: other
    // tenants' load can only add to it, so the least of the rounds is its own cost.
    let guest_ns_per_packet = pts
        .iter()
        .zip(runs)
        .filter(|((_, role), _)| *role == Role::Busy)
        .flat_map(|(_, rs)| rs.iter().map(|r| r.guest_ns_per_packet))
        .filter(|v| v.is_finite())
        .fold(f64::NAN, f64::min);
    GuestFigures {
        guest_ns_per_packet,
        busy_poll_mpps: busy.map_or(f64::NAN, mpps),
        busy_poll_ns_per_packet: busy.map_or(f64::NAN, |p| {
            ns(p.busy_cycles as f64 / p.busy_packets.max(1) as f64)
        }),
    }
}
