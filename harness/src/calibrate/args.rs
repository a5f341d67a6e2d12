//! The arguments of `vadapt calibrate`.

use clap::Args;
use std::path::PathBuf;

/// `vadapt calibrate`.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
    vadapt calibrate --out sim/calibration/measured.toml\n  \
    vadapt calibrate --quick --out /tmp/cal.toml\n  \
    vadapt calibrate --validate sim/scenarios/validate-1vm-1t.toml --validate-out /tmp/val")]
pub struct CalibrateArgs {
    /// Where to write the calibration file.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "sim/calibration/measured.toml"
    )]
    pub out: PathBuf,
    /// Measuring time per load point and round, seconds (each point also has a short warm-up).
    #[arg(long, value_name = "S", default_value_t = 1.5)]
    pub duration: f64,
    /// Rounds: every measurement runs once per round, interleaved, and the file takes the
    /// median (this machine is shared; one noisy round should not decide a value).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub rounds: usize,
    /// A short run (one round, 0.4 s per point, fewer samples; under 30 s), for tests and
    /// smoke checks.
    #[arg(long)]
    pub quick: bool,
    /// Emulated VM-exit cost added to the measured kick and call syscalls, ns: the synthetic
    /// guest's `--exit-cost-ns`; with `--validate`, the guests' exit cost.
    #[arg(long, value_name = "NS", default_value_t = vadapt_guest::config::DEFAULT_EXIT_COST_NS)]
    pub exit_cost_ns: u64,
    /// Do not calibrate: run each of these scenarios on the real daemon + synthetic guests and
    /// in the simulator, and print both side by side. Repeatable.
    #[arg(long, value_name = "SCENARIO")]
    pub validate: Vec<PathBuf>,
    /// With `--validate`: write validation.md, validation.json and PNG plots here.
    #[arg(long, value_name = "DIR", requires = "validate")]
    pub validate_out: Option<PathBuf>,
}
