//! `vadapt guest` without the rest of vadapt (quicker to build; `bench/dpdk_rxonly.sh` uses
//! it): `cargo run --release -p vadapt-guest --example guest -- --socket PATH ...`.

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
