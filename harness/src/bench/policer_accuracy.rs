//! POLICER — policer accuracy (issue 37): how close the rate a policed VM
//! port delivers is to the rate configured, when its guest offers more.
//!
//! One daemon, one VM port under busy-poll (its worker on the backend CPU,
//! so that the policer, not the worker, limits what passes) and the sink.
//! For each limit, in turn within each round, the limit is set over the
//! control socket (`vadapt set-limits`: the buckets start full), the
//! synthetic guest streams to the sink in closed loop (as fast as it can,
//! on the frontend CPU), and after [`SETTLE`] — which empties the burst —
//! the counters are read across a window:
//! - **delivered**: frames (or bits, counted as OVS counts them: without
//!   the 14-byte Ethernet header) that reached the sink, a second;
//! - **offered**: frames the guest handed over, a second (passed plus
//!   `policed`), so a limit the guest could not exceed says so.
//!
//! Limits: packets a second (`ingress_policing_kpkts_rate`) at 10 k, 30 k,
//! 100 k, 300 k and 1 M, 64-byte frames; bits a second
//! (`ingress_policing_rate`) at 100 Mbit/s, 1 Gbit/s and 2 Gbit/s,
//! 1518-byte frames. The quick run measures 10 kpps, 1 Mpps and 1 Gbit/s.
//!
//! Bursts are a tenth of a second of the rate, at least OVS's defaults
//! (16 kpkts, 8000 kb): [`burst`]. A bucket is capped at its burst, so
//! tokens earned while the worker is off its CPU for longer than the burst
//! lasts are lost, as in OVS; with OVS's 8000 kb at 1 Gbit/s (8 ms) the
//! port delivered 0.50–0.69× on this shared 2-core machine (load 12 from
//! other builds, the worker given 1.2 s of CPU in 4 s), and 1.00× with 80
//! Mbit (measured before a frame short of tokens got a refill of its own,
//! `IngressPolicer::admit_or_refill`; the two causes were not separated).
//! The benchmark measures the policer, not the host's scheduler. The goal — delivered
//! within ±5 % of configured — is judged in the report ([`goal`]) on the
//! median of every limit the guest exceeded; one it did not is reported,
//! not judged.

use super::ctx::Ctx;
use super::error::BenchError;
use super::table::{label, metric_table, LabelCol};
use super::vadapt_proc::{Daemon, GuestOpts, GuestProc, VmPort};
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{PortLimits, DEFAULT_BURST_KB, DEFAULT_KPKTS_BURST};
use vadapt_policy::PolicyKind;
use vadapt_results::{spread, ResultFile, Row};

/// Title.
pub const TITLE: &str =
    "policer accuracy: delivered ÷ configured rate of a VM port whose guest offers more";

/// Issue 37: delivered within this many % of the configured rate.
pub const GOAL_ACCURACY_PCT: f64 = 5.0;

/// A limit is judged only where the guest offered at least this many
/// times it (else the policer had little or nothing to drop).
const OFFERED_OVER: f64 = 1.1;

/// Time from the guest's start to the window: the burst is spent.
const SETTLE: Duration = Duration::from_millis(500);

/// The burst for a rate of `rate` (kpps or kbps): a tenth of a second's
/// worth (kpkts or kb), at least OVS's default `floor`.
fn burst(rate: u32, floor: u32) -> u32 {
    (rate / 10).max(floor)
}

/// One configured limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// `ingress_policing_kpkts_rate`, kpps.
    Kpps(u32),
    /// `ingress_policing_rate`, kbps.
    Kbps(u32),
}

/// Every limit measured, in round order.
const LIMITS: [Limit; 8] = [
    Limit::Kpps(10),
    Limit::Kpps(30),
    Limit::Kpps(100),
    Limit::Kpps(300),
    Limit::Kpps(1000),
    Limit::Kbps(100_000),
    Limit::Kbps(1_000_000),
    Limit::Kbps(2_000_000),
];

/// The quick run's limits.
const QUICK_LIMITS: [Limit; 3] = [Limit::Kpps(10), Limit::Kpps(1000), Limit::Kbps(1_000_000)];

impl Limit {
    /// The port's limits, with their [`burst`].
    fn limits(self) -> PortLimits {
        match self {
            Limit::Kpps(k) => PortLimits {
                ingress_policing_kpkts_rate: k,
                ingress_policing_kpkts_burst: burst(k, DEFAULT_KPKTS_BURST),
                ..PortLimits::NONE
            },
            Limit::Kbps(k) => PortLimits {
                ingress_policing_rate: k,
                ingress_policing_burst: burst(k, DEFAULT_BURST_KB),
                ..PortLimits::NONE
            },
        }
    }

    /// The frame the guest sends, bytes.
    fn frame(self) -> u32 {
        match self {
            Limit::Kpps(_) => 64,
            Limit::Kbps(_) => 1518,
        }
    }

    /// The configured rate, in the unit it limits (frames/s or bits/s).
    fn per_second(self) -> f64 {
        match self {
            Limit::Kpps(k) | Limit::Kbps(k) => f64::from(k) * 1000.0,
        }
    }

    /// The rows' variant: the limit as an operator reads it.
    fn variant(self) -> String {
        match self {
            Limit::Kpps(k) if k >= 1000 => format!("{} Mpps", k / 1000),
            Limit::Kpps(k) => format!("{k} kpps"),
            Limit::Kbps(k) if k >= 1_000_000 => format!("{} Gbit/s", k / 1_000_000),
            Limit::Kbps(k) => format!("{} Mbit/s", k / 1000),
        }
    }
}

/// Run the policer benchmark.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let window = ctx.secs(2.0, 0.8);
    f.run_seconds = window.as_secs_f64();
    let vm = VmPort::new(&ctx.work, "pol", 1, PolicyKind::BusyPoll);
    let mut d = Daemon::spawn(ctx, "policer-vadapt", std::slice::from_ref(&vm))?;
    f.commands.push(ctx.show(&d.command));
    let limits: &[Limit] = if ctx.quick { &QUICK_LIMITS } else { &LIMITS };
    for run in 0..ctx.runs {
        for &limit in limits {
            ctx.say(&format!(
                "round {}/{}: {}",
                run + 1,
                ctx.runs,
                limit.variant()
            ));
            let r = turn(ctx, f, &mut d, &vm, limit, window, run)?;
            f.rows.push(r);
        }
    }
    d.set_limits(&vm.name, PortLimits::NONE)?;
    Ok(())
}

/// One limit's turn: set it, stream over it, read the window.
fn turn(
    ctx: &Ctx,
    f: &mut ResultFile,
    d: &mut Daemon,
    vm: &VmPort,
    limit: Limit,
    window: Duration,
    run: u32,
) -> Result<Row, BenchError> {
    d.set_limits(&vm.name, limit.limits())?;
    let opts = GuestOpts::stream(limit.frame(), SETTLE + window + SETTLE, 0);
    if f.commands.len() < 2 {
        f.commands.push(format!(
            "vadapt set-limits {} {}  # then:",
            vm.name,
            match limit {
                Limit::Kpps(k) =>
                    format!("--kpps {k} --kpkts-burst {}", burst(k, DEFAULT_KPKTS_BURST)),
                Limit::Kbps(k) =>
                    format!("--rate-kbps {k} --burst-kb {}", burst(k, DEFAULT_BURST_KB)),
            }
        ));
        f.commands
            .push(ctx.show(&opts.argv("vadapt", &vm.socket, ctx.frontend_cpu)));
    }
    let g = GuestProc::spawn(ctx, "policer-guest", &vm.socket, &opts)?;
    ctx.sleep(SETTLE)?;
    let s0 = d.stats()?;
    let t0 = Instant::now();
    ctx.sleep(window)?;
    let s1 = d.stats()?;
    let dt = t0.elapsed().as_secs_f64();
    g.finish()?;
    let count = |s: &vadapt_dataplane::metrics::StatsSnapshot,
                 port: &str,
                 k: &dyn Fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64| {
        s.port_total(port, k).unwrap_or(0)
    };
    let diff = |port: &str, k: &dyn Fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64| {
        count(&s1, port, k).saturating_sub(count(&s0, port, k)) as f64
    };
    let sunk = diff("sink0", &|q| q.rx_packets);
    let sunk_bytes = diff("sink0", &|q| q.rx_bytes);
    let passed = diff(&vm.name, &|q| q.tx_packets);
    let policed = diff(&vm.name, &|q| {
        q.dropped.get("policed").copied().unwrap_or(0)
    });
    let (delivered, offered) = match limit {
        Limit::Kpps(_) => (sunk / dt, (passed + policed) / dt),
        // Bits as the policer counts them: without the Ethernet header;
        // offered: every frame the guest handed over, all of one size.
        Limit::Kbps(_) => {
            let bits = |frames: f64| frames * f64::from(limit.frame() - 14) * 8.0;
            (
                (sunk_bytes - 14.0 * sunk) * 8.0 / dt,
                bits(passed + policed) / dt,
            )
        }
    };
    let configured = limit.per_second();
    let mut r = Row::new("policer", "guest", "vadapt", "busy-poll", &limit.variant())
        .at(limit.frame(), run);
    r.set("configured", configured)
        .set("delivered", delivered)
        .set("offered", offered)
        .set("delivered_ratio", delivered / configured)
        .set("offered_ratio", offered / configured)
        .set("error_pct", (delivered / configured - 1.0) * 100.0);
    Ok(r)
}

/// The limits measured, in the order they ran.
fn variants(f: &ResultFile) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in f.table("policer") {
        if !v.contains(&r.variant) {
            v.push(r.variant.clone());
        }
    }
    v
}

/// The goal's parts — each limit's delivered ÷ configured, median (min–max)
/// over rounds — and whether the median of every limit the guest exceeded
/// (median offered ≥ 1.1× configured) is within ±[`GOAL_ACCURACY_PCT`] %,
/// as the report judges every goal on medians (the min–max stays in the
/// parts); `None` when no limit was exceeded.
pub fn goal(f: &ResultFile) -> (Vec<String>, Option<bool>) {
    let mut parts = Vec::new();
    let mut met = None;
    for v in variants(f) {
        let rows: Vec<&Row> = f.table("policer").filter(|r| r.variant == v).collect();
        let (Some(ratio), Some(offered)) = (
            spread(&rows, "delivered_ratio"),
            spread(&rows, "offered_ratio"),
        ) else {
            continue;
        };
        if offered.median < OFFERED_OVER {
            parts.push(format!(
                "{v} {}× (not judged: offered only {}×)",
                ratio.show(3),
                offered.show(2)
            ));
            continue;
        }
        let ok = (ratio.median - 1.0).abs() * 100.0 <= GOAL_ACCURACY_PCT;
        met = Some(met.unwrap_or(true) && ok);
        parts.push(format!("{v} {}×", ratio.show(3)));
    }
    (parts, met)
}

/// The policer table.
pub fn render(f: &ResultFile) -> String {
    let rows: Vec<&Row> = f.table("policer").collect();
    let first: &[LabelCol<'_>] = &[
        ("limit", |r| r.variant.clone()),
        ("frame", |r| format!("{} B", r.frame)),
        ("backend", label),
    ];
    let mut s = String::from(
        "\nA VM port policed at each limit in turn (`vadapt set-limits`), the synthetic guest \
         streaming to the sink in closed loop; rates a second over the window, in frames \
         (packet limits) or bits without the Ethernet header (bit limits), as OVS counts them.\n\n",
    );
    s.push_str(&metric_table(
        &rows,
        first,
        &[
            ("configured", "configured /s", 0),
            ("offered", "offered /s", 0),
            ("delivered", "delivered /s", 0),
            ("delivered_ratio", "delivered ÷ configured", 3),
            ("offered_ratio", "offered ÷ configured", 2),
        ],
        &[],
        |_, _| false,
    ));
    let (parts, met) = goal(f);
    s.push_str(&format!(
        "\nIssue 37 asks delivered within ±{GOAL_ACCURACY_PCT} % of configured (the median over \
         rounds of each limit the guest exceeds, offering {OFFERED_OVER}× or more): {}.\n",
        match met {
            Some(true) => "**met**",
            Some(false) => "**missed**",
            None => "not judged (no limit exceeded)",
        }
    ));
    if !parts.is_empty() {
        s.push_str(&format!("Per limit: {}.\n", parts.join("; ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(variant: &str, run: u32, delivered_ratio: f64, offered_ratio: f64) -> Row {
        let mut r = Row::new("policer", "guest", "vadapt", "busy-poll", variant).at(64, run);
        r.set("delivered_ratio", delivered_ratio)
            .set("offered_ratio", offered_ratio)
            .set("configured", 10_000.0);
        r
    }

    #[test]
    fn limits_read_as_an_operator_writes_them() {
        let v: Vec<String> = LIMITS.iter().map(|l| l.variant()).collect();
        assert_eq!(
            v,
            [
                "10 kpps",
                "30 kpps",
                "100 kpps",
                "300 kpps",
                "1 Mpps",
                "100 Mbit/s",
                "1 Gbit/s",
                "2 Gbit/s"
            ]
        );
        assert_eq!(
            Limit::Kbps(100_000).limits().bits().unwrap().per_second,
            100_000_000
        );
        assert_eq!(
            Limit::Kpps(30).limits().packets().unwrap().per_second,
            30_000
        );
        // A tenth of a second, at least OVS's default burst.
        assert_eq!(Limit::Kpps(1000).limits().packets().unwrap().burst, 100_000);
        assert_eq!(Limit::Kpps(10).limits().packets().unwrap().burst, 16_000);
        assert_eq!(
            Limit::Kbps(1_000_000).limits().bits().unwrap().burst,
            100_000_000
        );
    }

    #[test]
    fn the_goal_judges_the_median_of_every_limit_the_guest_exceeded() {
        let mut f = ResultFile::default();
        for run in 0..3 {
            f.rows
                .push(row("10 kpps", run, 1.0 + 0.01 * f64::from(run), 50.0));
            // Not exceeded: reported, not judged.
            f.rows.push(row("1 Mpps", run, 0.8, 0.8));
        }
        let (parts, met) = goal(&f);
        assert_eq!(met, Some(true), "{parts:?}");
        assert!(parts[1].contains("not judged"), "{parts:?}");
        // One round 7 % under: the median holds.
        f.rows.push(row("30 kpps", 0, 1.0, 9.0));
        f.rows.push(row("30 kpps", 1, 0.93, 9.0));
        f.rows.push(row("30 kpps", 2, 1.01, 9.0));
        assert_eq!(goal(&f).1, Some(true));
        // A median 6 % over: missed.
        f.rows.push(row("300 kpps", 0, 1.06, 9.0));
        assert_eq!(goal(&f).1, Some(false));
        assert!(render(&f).contains("**missed**"));
        assert_eq!(goal(&ResultFile::default()), (Vec::new(), None));
    }
}
