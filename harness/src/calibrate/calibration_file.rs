//! The calibration as a file: the TOML `vadapt-sim` reads, each key with
//! how it was measured, and the summary printed after a run.

use super::args::CalibrateArgs;
use super::measure::Measured;
use std::fmt::Write as _;

/// `s` as a TOML basic string.
fn toml_str(s: &str) -> String {
    // TOML basic string: escape backslashes and quotes; control characters do not occur.
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The calibration file: every key with its method and figures as comments.
pub(super) fn render(a: &CalibrateArgs, m: &Measured) -> String {
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

/// The values and every point's figures, on stdout.
pub(super) fn print_summary(m: &Measured) {
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
