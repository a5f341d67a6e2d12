//! Minimal driver used while `vadapt sim` is not wired into the binary:
//! `cargo run -p vadapt-sim --example simrun -- sim SCENARIO.toml --out DIR`.
use clap::Parser;
use std::process::ExitCode;

#[derive(Parser, Debug)]
enum Cli {
    /// Run the simulator.
    Sim(vadapt_sim::SimArgs),
}

fn main() -> ExitCode {
    let Cli::Sim(args) = Cli::parse();
    vadapt_sim::run_cli(&args)
}
