//! `vadapt demo`: the embedded default run. A daemon in this process, k
//! synthetic guests on its switch sending to a sink (the NetAP paper's
//! netperf VMs and their external server), a live line per second, and
//! `demo-out/` with the time series, a summary and plots in the style of
//! NetAP's Figure 4 (bandwidth and polling interval over time).
//!
//! The files: this one runs the demo and prints the live view; the
//! arguments are in `args.rs`, the per-policy summary in `summary.rs`, the
//! output folder in `output.rs`, and the per-second rates in
//! [`crate::rates`], which `vadapt bench`'s B5 uses too.

use crate::cli_util::{chain, fail};
use crate::rates::{rates, Sample};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig, MAX_QUEUE_PAIRS};
use vadapt_dataplane::metrics::StatsSnapshot;
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, GuestCounters, GuestReport, Load, Mode};
use vadapt_policy::netap_ml::NetapMlParams;
use vadapt_policy::PolicyConfig;
use vadapt_wire::tcp_build::{MSS, TSO_SIZE_GOAL};
use vadapt_wire::Mac;

mod args;
mod output;
mod summary;

pub use args::DemoArgs;

use output::write_outputs;
use summary::{print_summary, summarize};

/// The phases: `--baseline` (unless `none`, or already the first of
/// `--policy`), then `--policy`'s list.
/// A phase is a policy with its defaults, or `fixed-interval:US` (a sweep of
/// fixed intervals is one demo: `--baseline netap --policy
/// fixed-interval:250,fixed-interval:1000,…`).
fn parse_policies(policy: &str, baseline: &str) -> Result<Vec<PolicyConfig>, String> {
    let v: Result<Vec<PolicyConfig>, _> = policy.split(',').map(|p| p.trim().parse()).collect();
    let mut v = v.map_err(|e| format!("invalid `--policy`: {e}"))?;
    if v.is_empty() {
        return Err("invalid `--policy`: empty".into());
    }
    let mut labels: Vec<String> = v.iter().map(PolicyConfig::label).collect();
    labels.sort();
    labels.dedup();
    if labels.len() != v.len() {
        return Err("invalid `--policy`: a policy is named twice".into());
    }
    if baseline.trim() != "none" {
        let first: PolicyConfig = baseline
            .trim()
            .parse()
            .map_err(|e| format!("invalid `--baseline`: {e}"))?;
        if v[0] != first {
            v.insert(0, first);
        }
    }
    Ok(v)
}

/// `phase`, told the demo's workload where it takes one: NetAP-ML's
/// model predicts from the VMs, threads per VM and message size, which the demo knows
/// (a daemon is told them in its config or by `vadapt retune`).
fn policy_config(phase: PolicyConfig, a: &DemoArgs) -> PolicyConfig {
    match phase {
        PolicyConfig::NetapMl(p) => PolicyConfig::NetapMl(NetapMlParams {
            vms: a.vms,
            threads: a.threads,
            msg_size: a.size,
            ..p
        }),
        other => other,
    }
}

fn validate(a: &DemoArgs) -> Result<Vec<PolicyConfig>, String> {
    if a.vms == 0 || a.vms > 16 {
        return Err(format!("invalid `--vms` {}: must be 1..=16", a.vms));
    }
    if a.threads == 0 || a.threads > 64 {
        return Err(format!("invalid `--threads` {}: must be 1..=64", a.threads));
    }
    if a.duration < 2 {
        return Err(format!(
            "invalid `--duration` {}: at least 2 seconds",
            a.duration
        ));
    }
    if a.mode != Mode::TcpStream && (a.write_cost_ns.is_some() || a.write_cost_ns_per_kib.is_some())
    {
        return Err(
            "invalid `--write-cost-ns` / `--write-cost-ns-per-kib`: they apply to --mode \
             tcp-stream only"
                .into(),
        );
    }
    let p = parse_policies(&a.policy, &a.baseline)?;
    if a.duration < 2 * p.len() as u64 {
        return Err("invalid `--duration`: at least 2 seconds per policy".into());
    }
    Ok(p)
}

/// Run the demo.
pub fn run(a: DemoArgs) -> ExitCode {
    let policies = match validate(&a) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    match demo(&a, &policies) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn demo(a: &DemoArgs, policies: &[PolicyConfig]) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("vadapt-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let sink_mac = Mac([0x02, 0x00, 0x00, 0x00, 0x5e, 0x01]);
    let queues = a.threads.min(u32::from(MAX_QUEUE_PAIRS)) as u16;
    let cfg = DaemonConfig {
        vm: (1..=a.vms)
            .map(|i| VmPortConfig {
                queues,
                ..VmPortConfig::new(format!("vm{i}"), dir.join(format!("vm{i}.sock")))
            })
            .collect(),
        sink: vec![LocalPortConfig::new("server", Some(sink_mac))],
        policy: policy_config(policies[0], a),
        control: dir.join("control.sock"),
        cpus: a.cpus.clone(),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(cfg.clone()).map_err(|e| chain(&e))?;
    let result = drive(a, policies, &cfg, &daemon, sink_mac);
    daemon.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    let (samples, reports, end) = result?;
    let labels: Vec<String> = policies.iter().map(PolicyConfig::label).collect();
    let phases = summarize(&samples, &labels);
    print_summary(a, &phases, &reports);
    print_offloads(&end);
    write_outputs(&a.out, a, &samples, &phases, &reports)?;
    println!(
        "\nwrote {}/ (timeseries.csv, timeseries.json, summary.json, bandwidth.png, kicks.png, cpu.png, interval.png)",
        a.out.display()
    );
    Ok(())
}

/// The time series, the guests' reports, and the daemon's counters at the end.
type Run = (Vec<Sample>, Vec<GuestReport>, StatsSnapshot);

fn drive(
    a: &DemoArgs,
    policies: &[PolicyConfig],
    cfg: &DaemonConfig,
    daemon: &Daemon,
    sink_mac: Mac,
) -> Result<Run, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut guests = Vec::new();
    // Per VM, its guest's live counters: application payload is known only there.
    let mut counters: Vec<(String, Arc<GuestCounters>)> = Vec::new();
    // Emulated cost of one write in the guests (ns), for the header.
    let mut write_ns = 0;
    for vm in &cfg.vm {
        let mut g = GuestConfig::new(&vm.socket);
        g.threads = a.threads;
        g.size = a.size;
        g.mode = a.mode;
        g.load = Load::ClosedLoop;
        g.duration = Duration::from_secs(a.duration + 30);
        g.exit_cost_ns = a.exit_cost_ns;
        // The papers' netperf senders pay the guest kernel's cost per write; B9's guests pay
        // the same default.
        if let Some((ns, per_kib)) = a.write_cost() {
            (g.write_cost_ns, g.write_cost_ns_per_kib) = (ns, per_kib);
        }
        g.dst_mac = sink_mac.0;
        write_ns = g.write_cost_per_message_ns();
        let guest = Guest::connect(g).map_err(|e| format!("{}: {}", vm.name, chain(&e)))?;
        counters.push((vm.name.clone(), guest.counters()));
        let st = Arc::clone(&stop);
        let name = vm.name.clone();
        guests.push(
            std::thread::Builder::new()
                .name(format!("guest-{name}"))
                .spawn(move || guest.run(st))
                .map_err(|e| format!("cannot start guest thread: {e}"))?,
        );
    }
    if !a.quiet {
        let workload = if a.mode == Mode::TcpStream {
            format!(
                "TCP stream of {}-byte messages coalesced into TSO segments (up to {TSO_SIZE_GOAL} B, \
                 cut by vadapt into {MSS}-byte MSS frames)",
                a.size
            )
        } else {
            format!("raw {}-byte frames", a.size + 14)
        };
        println!(
            "vadapt demo: {} VMs x {} threads, {workload}, closed loop, {} s, policy {}",
            a.vms,
            a.threads,
            a.duration,
            policies
                .iter()
                .map(PolicyConfig::label)
                .collect::<Vec<_>>()
                .join(" then ")
        );
        println!(
            "(exit cost emulated: {} ns per kick and per handled call{})",
            a.exit_cost_ns,
            if a.mode == Mode::TcpStream {
                format!("; write cost: {write_ns} ns per {}-byte write", a.size)
            } else {
                String::new()
            }
        );
    }
    let reg = daemon.registry();
    let phase_len = a.duration as f64 / policies.len() as f64;
    let mut phase = 0usize;
    let start = Instant::now();
    let mut prev = reg.snapshot();
    let payload_of = |c: &GuestCounters| c.total().sent_payload_bytes;
    let mut prev_payload: Vec<u64> = counters.iter().map(|(_, c)| payload_of(c)).collect();
    let mut prev_t = 0.0f64;
    let mut samples = Vec::new();
    let mut next = 1u64;
    while (next as f64) <= a.duration as f64 {
        let target = start + Duration::from_secs(next);
        std::thread::sleep(target.saturating_duration_since(Instant::now()));
        let t = start.elapsed().as_secs_f64();
        let snap = reg.snapshot();
        let dt = (t - prev_t).max(1e-6);
        let policy = policies[phase].label();
        let policy = policy.as_str();
        let mut rows = rates(&prev, &snap, dt, t, policy, cfg);
        for (i, (vm, c)) in counters.iter().enumerate() {
            let now = payload_of(c);
            let mbps = now.saturating_sub(prev_payload[i]) as f64 * 8.0 / 1e6 / dt;
            prev_payload[i] = now;
            if let Some(row) = rows.iter_mut().find(|r| &r.vm == vm) {
                row.payload_mbps = Some(mbps);
            }
        }
        if !a.quiet {
            live_line(&rows, next, a.duration, policy);
        }
        samples.extend(rows);
        prev = snap;
        prev_t = t;
        let want = ((next as f64) / phase_len) as usize;
        if want > phase && want < policies.len() {
            phase = want;
            for vm in &cfg.vm {
                daemon
                    .set_policy(&vm.name, policy_config(policies[phase], a))
                    .map_err(|e| chain(&e))?;
            }
            if !a.quiet {
                println!(
                    "--- switching every VM port to {} ---",
                    policies[phase].label()
                );
            }
        }
        next += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut reports = Vec::new();
    for g in guests {
        match g.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => return Err(chain(&e)),
            Err(_) => return Err("a guest thread panicked".into()),
        }
    }
    Ok((samples, reports, reg.snapshot()))
}

/// What vadapt did with the guests' offload requests: TSO segments cut, partial checksums
/// completed, and every drop by reason (`bad_vnet_hdr` would be a refused header).
fn print_offloads(s: &StatsSnapshot) {
    let queues = || s.ports.iter().flat_map(|p| &p.queues);
    let gso: u64 = queues().map(|q| q.gso_frames).sum();
    let whole: u64 = queues().map(|q| q.gso_whole).sum();
    let csum: u64 = queues().map(|q| q.csum_completed).sum();
    let mut drops: std::collections::BTreeMap<&str, u64> = Default::default();
    for q in queues() {
        for (reason, n) in &q.dropped {
            *drops.entry(reason.as_str()).or_default() += n;
        }
    }
    let drops = if drops.is_empty() {
        "none".to_string()
    } else {
        drops
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "vadapt: {gso} GSO frames cut into MSS frames at an egress, {whole} passed whole, {csum} partial checksums completed, drops: {drops}"
    );
}

fn live_line(rows: &[Sample], sec: u64, total: u64, policy: &str) {
    let sum = |f: fn(&Sample) -> f64| rows.iter().map(f).sum::<f64>();
    let intervals: Vec<String> = rows
        .iter()
        .map(|r| {
            if r.interval_us > 0 {
                format!("{}={}us", r.vm, r.interval_us)
            } else {
                format!("{}=-", r.vm)
            }
        })
        .collect();
    println!(
        "[{sec:>3}/{total}s] {policy:<10} {:>7.3} Gbit/s payload {:>7.3} Mpps {:>8.1} Mbit/s on the wire  kicks/s {:>8.0}  calls/s {:>7.0}  worker CPU {:>5.1}%  interval {}",
        sum(|r| r.payload_mbps.unwrap_or(0.0)) / 1e3,
        sum(|r| r.pps) / 1e6,
        sum(|r| r.mbps),
        sum(|r| r.kicks_per_s),
        sum(|r| r.calls_per_s),
        sum(|r| r.worker_cpu_pct),
        intervals.join(" ")
    );
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use vadapt_policy::PolicyKind;

    /// A demo of `policy` against `baseline` with `vms` VMs of `threads`
    /// sender threads of `size`-byte messages, 30 s of TCP streams.
    fn args(policy: &str, baseline: &str, vms: u32, threads: u32, size: u32) -> DemoArgs {
        DemoArgs {
            policy: policy.into(),
            baseline: baseline.into(),
            vms,
            threads,
            size,
            mode: Mode::TcpStream,
            duration: 30,
            out: "x".into(),
            exit_cost_ns: 0,
            write_cost_ns: None,
            write_cost_ns_per_kib: None,
            cpus: vec![],
            quiet: true,
        }
    }

    #[test]
    fn bad_knobs_are_named() {
        let mut a = args("netap", "interrupt", 0, 3, 64);
        assert!(validate(&a).unwrap_err().contains("--vms"));
        a.vms = 2;
        a.policy = "netap,warp".into();
        assert!(validate(&a).unwrap_err().contains("warp"));
        a.policy = "interrupt,netap".into();
        a.duration = 3;
        assert!(validate(&a).unwrap_err().contains("--duration"));
        a.duration = 30;
        a.write_cost_ns = Some(1000);
        assert_eq!(validate(&a).map(|p| p.len()), Ok(2));
        // The baseline comes first, once; `none` drops it.
        a.policy = "eekbp".into();
        let kinds = |v: Vec<PolicyConfig>| v.iter().map(PolicyConfig::kind).collect::<Vec<_>>();
        assert_eq!(
            validate(&a).map(kinds),
            Ok(vec![PolicyKind::Interrupt, PolicyKind::Eekbp])
        );
        a.baseline = "none".into();
        assert_eq!(validate(&a).map(kinds), Ok(vec![PolicyKind::Eekbp]));
        a.baseline = "warp".into();
        assert!(validate(&a).unwrap_err().contains("--baseline"));
        a.baseline = "interrupt".into();
        a.policy = "netap,netap".into();
        assert!(validate(&a).unwrap_err().contains("twice"));
        a.policy = "eekbp".into();
        a.mode = Mode::Stream;
        assert!(validate(&a).unwrap_err().contains("--write-cost-ns"));
    }

    #[test]
    fn netap_ml_is_told_the_demos_workload() {
        let a = args("netap-ml", "netap", 4, 1, 192);
        let ml = PolicyConfig::default_for(PolicyKind::NetapMl);
        let PolicyConfig::NetapMl(p) = policy_config(ml, &a) else {
            panic!("not NetAP-ML");
        };
        assert_eq!((p.vms, p.threads, p.msg_size), (4, 1, 192));
        let netap = PolicyConfig::default_for(PolicyKind::Netap);
        assert_eq!(policy_config(netap, &a), netap);
    }

    #[test]
    fn a_sweep_of_fixed_intervals_is_one_demo_with_a_phase_each() {
        let a = args("fixed-interval:250,fixed-interval:1000", "netap", 1, 6, 64);
        let labels: Vec<String> = validate(&a)
            .unwrap()
            .iter()
            .map(PolicyConfig::label)
            .collect();
        assert_eq!(
            labels,
            ["netap", "fixed-interval:250", "fixed-interval:1000"]
        );
        let a = args("fixed-interval:0", "netap", 1, 6, 64);
        assert!(validate(&a).unwrap_err().contains("interval_us"));
    }
}
