//! How long NetAP-ML's predictor takes: one 80-interval sweep (50..=4000 µs
//! step 50) of the built-in model, timed 200 times; prints the median and the
//! spread. `cargo run --release -p vadapt-policy --example netap_ml_cost`.

use std::time::Instant;
use vadapt_policy::netap_ml::{
    best_interval, builtin_model, PREDICT_FROM_US, PREDICT_STEP_US, PREDICT_TO_US,
};

fn main() {
    let forest = builtin_model().unwrap_or_else(|e| panic!("{e}"));
    let cases = [(3.0, 2.0, 128.0), (2.0, 5.0, 96.0), (4.0, 1.0, 192.0)];
    let mut times = Vec::new();
    let mut sink = 0u64;
    for k in 0..200 {
        let (v, t, s) = cases[k % cases.len()];
        let t0 = Instant::now();
        let (best, _) = best_interval(
            &forest,
            v,
            t,
            s,
            (PREDICT_FROM_US, PREDICT_TO_US, PREDICT_STEP_US),
        );
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        sink = sink.wrapping_add(best);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "80-interval sweep, {} trees: median {:.3} ms, min {:.3} ms, p90 {:.3} ms, max {:.3} ms (checksum {sink})",
        forest.trees(),
        times[times.len() / 2],
        times[0],
        times[times.len() * 9 / 10],
        times[times.len() - 1]
    );
    for (v, t, s) in cases {
        let (best, gbps) = best_interval(&forest, v, t, s, (50, 4000, 50));
        println!("  {v} VMs x {t} threads x {s} B: best {best} us, {gbps:.3} Gb/s predicted");
    }
}
