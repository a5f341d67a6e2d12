//! `vadapt calibrate`: measure on this host the costs the simulator charges,
//! and write them as a `vadapt_sim::Calibration` TOML file; with
//! `--validate`, run scenarios on the real daemon + synthetic guest and in the
//! simulator, side by side.
//!
//! # What is measured, and how
//!
//! Everything runs in this process: the real daemon ([`Daemon::start`](vadapt_dataplane::Daemon::start)) with a
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
//! This file runs the command and writes the calibration. A run is: the plan
//! (`plan.rs`: how long, which CPUs), the rounds (`rounds.rs`: each one the
//! kernel-path micro-benchmarks of `micro.rs` and every daemon point of
//! `points.rs`), then `measure.rs`, which turns the rounds into each key and
//! its note, one step per key (or per keys measured together); the file is
//! `calibration_file.rs`, its `machine` and `source` `provenance.rs`.
//! `validate.rs` holds the `--validate` runs. What they share is below them —
//! the arguments (`args.rs`), the error (`error.rs`), quantiles and the fit
//! (`stats.rs`), the daemon and guest helpers (`daemon.rs`) — and none of them
//! imports this file.

use crate::cli_util::{chain, fail};
use std::process::ExitCode;
use std::time::Instant;
use vadapt_sim::Calibration;

mod args;
mod calibration_file;
mod daemon;
mod error;
mod measure;
mod micro;
mod plan;
mod points;
mod provenance;
mod rounds;
mod stats;
mod validate;

pub use args::CalibrateArgs;
pub use error::CalibrateError;

use calibration_file::{print_summary, render};
use error::Result;
use measure::measure;
use plan::{Cpus, Plan};
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

/// Measure, render the file, check that the simulator reads it back, and
/// write it to `--out`.
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
