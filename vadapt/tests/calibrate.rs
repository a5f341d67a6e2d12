//! `vadapt calibrate --quick` writes a file the simulator reads as its
//! calibration, with every measured cost positive and finite. No timing
//! assertions: the values depend on the machine and its load.

use std::process::Command;
use vadapt_sim::{Calibration, Scenario};

/// A fresh folder, removed with everything in it when dropped.
fn tmpdir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("vadapt-it-{tag}-"))
        .tempdir()
        .unwrap()
}

#[test]
fn quick_calibration_is_a_valid_simulator_calibration() {
    let tmp = tmpdir("calibrate");
    let dir = tmp.path();
    let out = dir.join("measured.toml");
    let run = Command::new(env!("CARGO_BIN_EXE_vadapt"))
        .args(["--log-level", "warn", "calibrate", "--quick", "--out"])
        .arg(&out)
        .output()
        .expect("vadapt runs");
    assert!(
        run.status.success(),
        "vadapt calibrate failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&out).expect("calibration file written");
    let c: Calibration = toml::from_str(&text).expect("the file parses as a Calibration");
    c.validate().expect("every value in range");
    let measured = [
        ("per_packet_ns", c.per_packet_ns),
        ("per_byte_ps", c.per_byte_ps),
        ("pass_overhead_ns", c.pass_overhead_ns),
        ("kick_ns", c.kick_ns),
        ("call_ns", c.call_ns),
        ("wake_latency_ns", c.wake_latency_ns),
        ("wakeup_cpu_ns", c.wakeup_cpu_ns),
        ("timer_overshoot_ns", c.timer_overshoot_ns),
        ("context_switch_ns", c.context_switch_ns),
        ("jitter", c.jitter),
    ];
    for (key, v) in measured {
        assert!(v.is_finite() && v > 0.0, "{key} = {v}\n{text}");
    }
    // The sink port's hand-off is inside the measured pass: not a separate cost.
    assert_eq!(c.nic_packet_ns, 0.0);
    // kick and call include the default emulated exit cost of the synthetic guest.
    assert!(c.kick_ns >= 2000.0 && c.call_ns >= 2000.0, "{c:?}");
    assert!(
        c.machine.contains("cores") && c.machine.contains("Linux"),
        "{}",
        c.machine
    );
    assert!(c.source.contains("calibrate --quick"), "{}", c.source);
    // Every value carries a comment saying how it was measured.
    for key in [
        "per_packet_ns",
        "kick_ns",
        "wake_latency_ns",
        "wakeup_cpu_ns",
    ] {
        let line = text.lines().position(|l| l.starts_with(key)).unwrap();
        let above = text.lines().nth(line - 1).unwrap();
        assert!(above.starts_with('#'), "{key} has no comment above it");
    }

    // A scenario can include the file as written.
    let sc = "include = \"measured.toml\"\nduration_s = 1\n[host]\ncores = 2\n\
              [[vms]]\nvcpus = 1\n[vms.workload]\nkind = \"stream\"\n\
              [[timeline]]\nat_s = 0\npolicy = \"interrupt\"\n";
    let path = dir.join("uses-measured.toml");
    std::fs::write(&path, sc).unwrap();
    let sc = Scenario::from_file(&path).expect("scenario including the file parses");
    assert_eq!(sc.calibration, c);
}
