//! Stand-alone `vadapt guest` for development, before the `vadapt` binary wires the
//! subcommand in: `cargo run -p vadapt-guest --example guest -- --socket PATH ...`.

use clap::Parser;

/// Synthetic guest: a vhost-user frontend with a netperf-style load.
#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    args: vadapt_guest::GuestArgs,
}

fn main() -> std::process::ExitCode {
    vadapt_guest::run_cli(Cli::parse().args)
}
