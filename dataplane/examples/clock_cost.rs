//! What one read of each of the data path's clocks costs on this machine:
//! `CLOCK_MONOTONIC` ([`monotonic_now`], std's `Instant::now` too),
//! `CLOCK_MONOTONIC_COARSE` ([`coarse_now`], the switch's) and the TSC
//! ([`cycles`], the busy-cycle counters and [`PassClock`]'s base).
//!
//! `cargo build --release -p vadapt-dataplane --example clock_cost`, then
//! `taskset -c 1 target/release/examples/clock_cost [READS]` (10^7 reads
//! of each by default; nanoseconds a read, wall time over the loop).

use std::hint::black_box;
use std::time::Instant;
use vadapt_dataplane::clock::{coarse_now, cycles, monotonic_now, PassClock};

/// Nanoseconds a call of `read`, over `n` calls.
fn per_read(n: u64, mut read: impl FnMut() -> u64) -> f64 {
    let t = Instant::now();
    let mut sum = 0u64;
    for _ in 0..n {
        sum = sum.wrapping_add(read());
    }
    black_box(sum);
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("READS: a number"))
        .unwrap_or(10_000_000);
    let tsc = vadapt_dataplane::clock::invariant_tsc()
        .then(|| vadapt_dataplane::clock::calibrate_tsc(20));
    let mut pass_clock = PassClock::new(tsc);
    println!("{n} reads each, ns a read:");
    println!(
        "  CLOCK_MONOTONIC        {:6.1}",
        per_read(n, || monotonic_now().0)
    );
    println!(
        "  CLOCK_MONOTONIC_COARSE {:6.1}",
        per_read(n, || coarse_now().0)
    );
    println!("  TSC (rdtsc)            {:6.1}", per_read(n, cycles));
    println!(
        "  PassClock ({})    {:6.1}",
        if tsc.is_some() { "TSC" } else { "vDSO" },
        per_read(n, || pass_clock.now().0)
    );
}
