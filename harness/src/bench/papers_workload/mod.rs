//! B9 — the papers' workload (issue 15): synthetic guests in TCP-stream mode
//! (`vadapt guest --mode tcp-stream`: what a Linux TCP sender with TSO puts
//! on the ring) into the sink, closed loop, emulated exit cost on, each
//! application write paying the guest's measured `send()` cost (its default
//! `--write-cost-ns` / `--write-cost-ns-per-kib`), in the NetAP paper's load
//! shapes — 2 VMs × 3 threads and 6 VMs × 1 thread, each
//! thread on its own queue pair — with 64- and 1024-byte messages, under
//! NetAP, interrupt, EE-KBP and busy-poll.
//!
//! One daemon and one set of guests per (shape, message size); within each
//! round every policy in turn is switched in at run time (`set-policy`),
//! given a warm-up — for NetAP long enough for its search to end (11 rounds
//! with the paper's constants) — and measured over a window from the
//! daemon's counters:
//!
//! * **bandwidth**: application payload, Gbit/s, from the VM ports' TX
//!   counters after the daemon cut the guests' TSO segments into MSS frames:
//!   frame bytes minus the 66 header bytes (Ethernet, IPv4, TCP with
//!   timestamps) of each frame;
//! * **kicks per GB** of that payload (`vadapt_queue_kicks_total`);
//! * **host CPU per GB**: the VM ports' worker CPU seconds
//!   (`vadapt_worker_cpu_seconds_total`) per GB of payload.
//!
//! Whether NetAP had settled is checked, not assumed: its interval must not
//! change on any VM during the window (`converged` in the rows).
//!
//! The same scenario runs in the simulator ([`sim`]) for NetAP and
//! interrupt, and the report sets its ratios beside the daemon's.
//!
//! This file runs B9 on the daemon; [`render`] reads its rows back (ratios,
//! the goal, the tables) and [`sim`] runs it in the simulator.

pub mod render;
mod sim;

use super::ctx::Ctx;
use super::error::BenchError;
use super::shared::Timing;
use super::vadapt_proc::{delta, Daemon, GuestOpts, GuestProc, PortDelta, VmPort};
use std::time::{Duration, Instant};
use vadapt_dataplane::metrics::StatsSnapshot;
use vadapt_policy::PolicyKind;
use vadapt_results::{ResultFile, Row};
use vadapt_wire::tcp_build::{FRAME_HDRS_LEN, MSS, TSO_SIZE_GOAL};

/// Title.
pub const TITLE: &str =
    "the papers' workload: TCP stream with TSO, 2 VMs × 3 threads and 6 VMs × 1 thread";

/// Load shapes: (VMs, sender threads per VM).
pub const SHAPES: [(u32, u32); 2] = [(2, 3), (6, 1)];
/// Application message sizes, bytes.
pub const SIZES: [u32; 2] = [64, 1024];
/// Policies, in the order each round measures them.
pub const POLICIES: [PolicyKind; 4] = [
    PolicyKind::Netap,
    PolicyKind::Interrupt,
    PolicyKind::Eekbp,
    PolicyKind::BusyPoll,
];

/// Header bytes of each MSS frame the daemon cuts from a guest's segment:
/// Ethernet 14 + IPv4 20 + TCP with the timestamps option 32 (the guest's).
pub const FRAME_HDRS: u64 = FRAME_HDRS_LEN as u64;

/// The guests' segments as the simulator takes them: every one the full size
/// goal (the model's senders always fill a segment, see [`NOTES`]).
const SEGMENTS: sim::Segments = sim::Segments {
    payload: TSO_SIZE_GOAL,
    frame_hdrs: FRAME_HDRS_LEN as u32,
    mss: MSS,
};

/// Issue 15's goal: NetAP's bandwidth at least this many times interrupt's,
pub const GOAL_BANDWIDTH: f64 = 1.2;
/// with at most this fraction of its kicks per GB,
pub const GOAL_KICKS: f64 = 0.05;
/// and at most this fraction of its host CPU per GB.
pub const GOAL_CPU: f64 = 0.5;

/// The variant label of a (shape, size): `2×3 64 B`.
pub fn variant(vms: u32, threads: u32, size: u32) -> String {
    format!("{vms}×{threads} {size} B")
}

/// What the numbers rest on, for the report.
const NOTES: [&str; 4] = [
    "Each application write costs the sending thread the guest's default write cost, busy-waited \
     (`--write-cost-ns` + `--write-cost-ns-per-kib` × size / 1 KiB: a loopback `send()` \
     measured on this machine, guest/README.md), and the guest sends after each write what was \
     written since the ring last had room, up to 65160 B. So the guests, not the daemon, can \
     set the rate, as the papers' netperf senders did: small messages cost more per byte, and a \
     writer slower than the daemon sends small segments (the check rows give the guests' mean \
     segment over each whole run).",
    "History: before the write cost, closed-loop senders filled every segment to the size goal \
     (45 × MSS = 65160 B) and spent nothing per write, so 64-byte and 1024-byte messages put the \
     same segments on the ring, the daemon's worker was the bottleneck, the rings never emptied \
     and no policy saw a kick: the papers' effect could not show.",
    "Simulator: the policy crate's NetAP and interrupt code over the model of this machine \
     (2 cores, guests and workers on separate ones, `sim/calibration/measured.toml`); it can \
     run every policy, B9 simulates the two the goal compares. Departures: the model charges \
     its per-packet cost once per descriptor chain, so B9 spreads it over each MSS frame's \
     bytes; a VM's threads share one queue in the model, where the daemon serves their queue \
     pairs with one worker; and the calibration has no software checksum or segmentation \
     cost, so compare the ratios, not the absolute figures. The model's senders pay the \
     guests' write cost, coalesce as they do (`coalesce = \"since-room\"`) and take the \
     guests' core in time slices (`vcpu_sched = \"slices\"`); before both (rev a67b906 and \
     earlier) the model's writers filled 65160-byte segments and all ran at once at a \
     fraction of the core, and the model put NetAP and interrupt mode level at 64 B.",
    "Each round runs the policies in the order netap, interrupt, eekbp, busy-poll on the same \
     daemon and guests; NetAP's interval is checked, not assumed, to stay fixed through its \
     window.",
];

/// Run B9.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let t = Timing::new(ctx.quick);
    let exit = vadapt_guest::config::DEFAULT_EXIT_COST_NS;
    f.run_seconds = t.window.as_secs_f64();
    f.params.insert("exit_cost_ns".into(), exit as f64);
    // What `GuestOpts::tcp_stream` passes to every guest.
    let write = GuestOpts::tcp_stream(SIZES[0], t.window, exit).write_cost_ns;
    f.params.insert("write_cost_ns".into(), write.0 as f64);
    f.params
        .insert("write_cost_ns_per_kib".into(), write.1 as f64);
    f.params
        .insert("netap_round_ms".into(), t.netap_round_ms as f64);
    f.params
        .insert("netap_warmup_s".into(), t.netap_warmup.as_secs_f64());
    f.params.insert("warmup_s".into(), t.warmup.as_secs_f64());
    f.notes.extend(NOTES.iter().map(|n| n.to_string()));
    let mut cases = Vec::new();
    for (vms, threads) in SHAPES {
        for size in SIZES {
            shape(ctx, f, &t, vms, threads, size, exit)?;
            cases.push(sim::Case {
                vms,
                threads,
                msg_bytes: size,
                write_cost_ns: write,
                variant: variant(vms, threads, size),
            });
        }
    }
    let policies: Vec<sim::Policy> = [PolicyKind::Netap, PolicyKind::Interrupt]
        .into_iter()
        .map(|p| sim::Policy {
            name: p.as_str(),
            config: t.policy(p),
            warmup: t.settle(p),
        })
        .collect();
    sim::run(ctx, f, &cases, &policies, SEGMENTS, t.window)
}

/// Every round of one (shape, size): one daemon, one guest per VM.
fn shape(
    ctx: &Ctx,
    f: &mut ResultFile,
    t: &Timing,
    vms: u32,
    threads: u32,
    size: u32,
    exit: u64,
) -> Result<(), BenchError> {
    let var = variant(vms, threads, size);
    let ports: Vec<VmPort> = (1..=vms)
        .map(|i| {
            VmPort::new(
                &ctx.work,
                &format!("vm{i}"),
                threads as u16,
                PolicyKind::Interrupt,
            )
        })
        .collect();
    let tag = format!("b9-{vms}x{threads}-{size}");
    let mut d = Daemon::spawn(ctx, &format!("{tag}-vadapt"), &ports)?;
    // The guests outlive every round; they are stopped (and report) at the end.
    let total = t.round(&POLICIES) * ctx.runs + Duration::from_secs(5);
    let opts = GuestOpts {
        threads,
        ..GuestOpts::tcp_stream(size, total, exit)
    };
    if f.commands.len() == 1 {
        f.commands.push(ctx.show(&d.command));
        for p in &ports {
            f.commands
                .push(ctx.show(&opts.argv("vadapt", &p.socket, ctx.frontend_cpu)));
        }
        f.commands.push(format!(
            "# per policy: vadapt set-policy --port vmN <policy> (netap with round_ms = {}), \
             {:.2} s warm-up ({:.2} s for netap), then a {:.2} s window; \
             the same for 6 VMs × 1 thread and 1024-byte messages",
            t.netap_round_ms,
            t.warmup.as_secs_f64(),
            t.netap_warmup.as_secs_f64(),
            t.window.as_secs_f64()
        ));
    }
    let first = d.stats()?;
    let guests: Vec<GuestProc> = ports
        .iter()
        .map(|p| GuestProc::spawn(ctx, &format!("{tag}-guest-{}", p.name), &p.socket, &opts))
        .collect::<Result<_, _>>()?;
    // Let every guest connect before the first policy's clock starts.
    ctx.sleep(Duration::from_millis(500))?;
    for run in 0..ctx.runs {
        for p in POLICIES {
            ctx.say(&format!(
                "{var}: {} round {}/{}",
                p.as_str(),
                run + 1,
                ctx.runs
            ));
            for port in &ports {
                d.set_policy_config(&port.name, t.policy(p))?;
            }
            ctx.sleep(t.settle(p))?;
            let s0 = d.stats()?;
            let t0 = Instant::now();
            ctx.sleep(t.window)?;
            let s1 = d.stats()?;
            let secs = t0.elapsed().as_secs_f64();
            let deltas: Vec<PortDelta> = ports.iter().map(|x| delta(&s0, &s1, &x.name)).collect();
            let mut r = Row::new("tcp", "guest", "vadapt", p.as_str(), &var).at(0, run);
            fill(&mut r, vms, threads, size, &Window::of(&deltas, secs));
            if p == PolicyKind::Netap {
                let names: Vec<&str> = ports.iter().map(|x| x.name.as_str()).collect();
                let (settled, mean_us) = intervals(&s0, &s1, &names);
                r.set("converged", if settled { 1.0 } else { 0.0 })
                    .set("interval_us", mean_us);
            }
            f.rows.push(r);
        }
    }
    // The guests' own count of what they sent, against the daemon's
    // header arithmetic over their whole run.
    let (mut guest_payload, mut guest_segments) = (0u64, 0u64);
    for g in guests {
        let report = g.interrupt()?;
        guest_payload += report.sent_payload_bytes;
        guest_segments += report.sent_packets;
    }
    let last = d.stats()?;
    let all: Vec<PortDelta> = ports
        .iter()
        .map(|x| delta(&first, &last, &x.name))
        .collect();
    let daemon_payload = Window::of(&all, 1.0).payload_bytes;
    if guest_payload > 0 {
        let mut r = Row::new("check", "guest", "vadapt", "all", &var).at(0, 0);
        r.set(
            "daemon_over_guest_payload",
            daemon_payload / guest_payload as f64,
        )
        .set(
            "mean_segment_bytes",
            guest_payload as f64 / guest_segments.max(1) as f64,
        );
        f.rows.push(r);
    }
    Ok(())
}

/// What the daemon counted over one window, summed over the VM ports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    /// Window length, s.
    pub secs: f64,
    /// Application payload bytes: frame bytes minus [`FRAME_HDRS`] per frame.
    pub payload_bytes: f64,
    /// MSS frames.
    pub frames: u64,
    /// Guest kicks.
    pub kicks: u64,
    /// Calls to the guests.
    pub calls: u64,
    /// Drops, all reasons.
    pub dropped: u64,
    /// Worker CPU, s.
    pub cpu_seconds: f64,
}

impl Window {
    /// The sum of `ports`' deltas over `secs` seconds.
    pub fn of(ports: &[PortDelta], secs: f64) -> Window {
        let mut w = Window {
            secs,
            ..Window::default()
        };
        for d in ports {
            w.payload_bytes += d.tx_bytes.saturating_sub(FRAME_HDRS * d.tx_packets) as f64;
            w.frames += d.tx_packets;
            w.kicks += d.kicks;
            w.calls += d.calls;
            w.dropped += d.dropped;
            w.cpu_seconds += d.cpu_seconds;
        }
        w
    }

    /// Payload, GB (10⁹ bytes).
    pub fn gb(&self) -> f64 {
        self.payload_bytes / 1e9
    }
}

/// `x / gb`, or NaN (not stored) without payload.
fn per_gb(x: f64, gb: f64) -> f64 {
    if gb > 0.0 {
        x / gb
    } else {
        f64::NAN
    }
}

/// A row's figures from one window.
fn fill(r: &mut Row, vms: u32, threads: u32, size: u32, w: &Window) {
    let gb = w.gb();
    r.set("vms", f64::from(vms))
        .set("threads", f64::from(threads))
        .set("msg_bytes", f64::from(size))
        .set("seconds", w.secs)
        .set("gbps", gb * 8.0 / w.secs.max(1e-9))
        .set("mpps", w.frames as f64 / w.secs.max(1e-9) / 1e6)
        .set("kicks_per_gb", per_gb(w.kicks as f64, gb))
        .set("calls_per_gb", per_gb(w.calls as f64, gb))
        .set("cpu_s_per_gb", per_gb(w.cpu_seconds, gb))
        .set("worker_cpu_pct", w.cpu_seconds / w.secs.max(1e-9) * 100.0)
        .set("dropped", w.dropped as f64);
}

/// Whether no port's interval changed between `a` and `b`, and the mean
/// interval at `b`, µs.
fn intervals(a: &StatsSnapshot, b: &StatsSnapshot, ports: &[&str]) -> (bool, f64) {
    let iv = |s: &StatsSnapshot, name: &str| {
        s.ports
            .iter()
            .find(|p| p.name == name)
            .map_or(0, |p| p.poll_interval_us)
    };
    let settled = ports.iter().all(|p| iv(a, p) == iv(b, p));
    let mean = ports.iter().map(|p| iv(b, p) as f64).sum::<f64>() / ports.len().max(1) as f64;
    (settled, mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(bytes: u64, frames: u64, kicks: u64, cpu: f64) -> PortDelta {
        PortDelta {
            tx_packets: frames,
            tx_bytes: bytes,
            kicks,
            cpu_seconds: cpu,
            ..PortDelta::default()
        }
    }

    #[test]
    fn window_takes_the_headers_off_every_frame_and_sums_ports() {
        // Two ports, 1000 MSS frames of 1514 B each: 1448 B of payload each.
        let w = Window::of(
            &[
                port(500 * 1514, 500, 10, 0.25),
                port(500 * 1514, 500, 30, 0.25),
            ],
            2.0,
        );
        assert_eq!(w.payload_bytes, 1000.0 * 1448.0);
        assert_eq!((w.frames, w.kicks), (1000, 40));
        let mut r = Row::default();
        fill(&mut r, 2, 3, 64, &w);
        let gb = 1000.0 * 1448.0 / 1e9;
        assert!((r.m["gbps"] - gb * 8.0 / 2.0).abs() < 1e-12);
        assert!((r.m["kicks_per_gb"] - 40.0 / gb).abs() < 1e-6);
        assert!((r.m["cpu_s_per_gb"] - 0.5 / gb).abs() < 1e-9);
        assert_eq!(r.m["worker_cpu_pct"], 25.0);
        // Nothing sent: no per-GB figure at all, rather than infinity.
        let mut z = Row::default();
        fill(&mut z, 2, 3, 64, &Window::of(&[port(0, 0, 5, 0.1)], 1.0));
        assert!(!z.m.contains_key("kicks_per_gb") && z.m["gbps"] == 0.0);
    }

    #[test]
    fn timing_fits_the_quick_budget() {
        for quick in [true, false] {
            let t = Timing::new(quick);
            // Three rounds over every configuration: ≤ 60 s quick, ≤ 6 min full.
            let all = t.round(&POLICIES) * 3 * (SHAPES.len() * SIZES.len()) as u32;
            assert!(
                all <= Duration::from_secs(if quick { 60 } else { 360 }),
                "{all:?}"
            );
        }
    }
}
