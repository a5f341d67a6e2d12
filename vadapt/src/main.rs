//! `vadapt`: parse the command line, run the subcommand.

mod cli;
mod serve;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    cli::init_logging(&cli.log_level);
    match cli.command {
        cli::Command::Serve(args) => serve::run(args),
        cli::Command::Stats(args) => serve::stats(args),
        cli::Command::SetPolicy(args) => serve::set_policy(args),
    }
}
