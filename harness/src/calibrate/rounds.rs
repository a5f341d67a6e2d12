//! The rounds: every measurement runs once per round, all of them
//! interleaved, so that a burst of load from another process on this shared
//! machine spoils one run of each point, not all of one point; each value is
//! then the median over rounds ([`over_rounds`], `points::representative`).

use super::error::Result;
use super::micro::{ping_pong, write_read_signalled, PingPong};
use super::plan::{Cpus, Plan, WAKE_GAPS_US, WAKE_GAP_US};
use super::points::{run_point, Point, PointResult, Role};
use super::stats::{median, quantile};
use std::time::Duration;

/// One round of the kernel-path micro-benchmarks, ns.
#[derive(Clone, Debug)]
pub(super) struct MicroRound {
    /// Per idle gap before the wake-up (µs): latency, waking write, TSC read on both sides.
    pub(super) by_gap: Vec<(u64, f64, f64, bool)>,
    /// IQR / median of the wake-up latencies at [`WAKE_GAP_US`].
    pub(super) jitter: f64,
    /// Median round trip at [`WAKE_GAP_US`].
    pub(super) rtt_ns: f64,
    /// Median round trip of the same-CPU ping-pong.
    pub(super) same_rtt_ns: f64,
    /// Median write to an eventfd nobody waits on.
    pub(super) plain_write_ns: f64,
    /// Median read of a signalled eventfd.
    pub(super) call_read_ns: f64,
}

/// One round of the micro-benchmarks: the wake-up ping-pong after each of
/// [`WAKE_GAPS_US`], the same-CPU ping-pong, and eventfd writes and reads.
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

/// What the rounds measured, in run order.
#[derive(Debug)]
pub(super) struct Rounds {
    /// The micro-benchmarks, one per round.
    pub(super) micro: Vec<MicroRound>,
    /// Per daemon point (in the order of `pts`), one run per round.
    pub(super) runs: Vec<Vec<PointResult>>,
}

/// Run `plan.rounds` rounds of the micro-benchmarks and every point of `pts`.
pub(super) fn run_rounds(
    plan: &Plan,
    cpus: Cpus,
    tsc_per_ns: f64,
    quick: bool,
    pts: &[(Point, Role)],
) -> Result<Rounds> {
    let rounds = plan.rounds;
    let mut micro = Vec::new();
    let mut runs: Vec<Vec<PointResult>> = vec![Vec::new(); pts.len()];
    for r in 0..rounds {
        eprintln!("calibrate: round {}/{rounds}: micro-benchmarks", r + 1);
        micro.push(micro_round(plan, cpus, tsc_per_ns, quick)?);
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
    Ok(Rounds { micro, runs })
}

/// Median of `f` over the micro rounds, with its range.
pub(super) fn over_rounds(
    rounds: &[MicroRound],
    f: impl Fn(&MicroRound) -> f64,
) -> (f64, f64, f64) {
    let mut v: Vec<f64> = rounds.iter().map(f).collect();
    let m = median(&mut v);
    (m, v[0], v[v.len() - 1])
}
