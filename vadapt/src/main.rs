//! `vadapt`: parse the command line, run the subcommand.

mod capture;
mod cli;
mod config_commands;
mod control_client;
mod exit;
mod fdb;
mod port_changes;
mod serve;
mod service_manager;
mod shell_docs;
mod stop_signals;
mod toml_manual;
mod trace;
mod watchdog;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    cli::init_logging(&cli.log_level);
    match cli.command {
        cli::Command::Serve(args) => serve::run(*args),
        cli::Command::Stats(args) => serve::stats(args),
        cli::Command::Fdb(args) => fdb::fdb(args),
        cli::Command::Trace(args) => trace::trace(args),
        cli::Command::Capture(args) => capture::capture(args),
        cli::Command::SetPolicy(args) => serve::set_policy(args),
        cli::Command::Retune(args) => serve::retune(args),
        cli::Command::Cores(args) => serve::cores(args),
        cli::Command::SetCores(args) => serve::set_cores(args),
        cli::Command::AddPort(args) => port_changes::add_port(args),
        cli::Command::DelPort(args) => port_changes::del_port(args),
        cli::Command::Reload(args) => port_changes::reload(args),
        cli::Command::SetLimits(args) => port_changes::set_limits(args),
        #[cfg(feature = "dev-tools")]
        cli::Command::Demo(args) => vadapt_harness::demo::run(args),
        #[cfg(feature = "dev-tools")]
        cli::Command::Calibrate(args) => vadapt_harness::calibrate::run(args),
        #[cfg(feature = "dev-tools")]
        cli::Command::Guest(args) => vadapt_guest::run_cli(args),
        #[cfg(feature = "dev-tools")]
        cli::Command::Sim(args) => vadapt_sim::run_cli(&args),
        #[cfg(feature = "dev-tools")]
        cli::Command::Bench(args) => vadapt_harness::bench::run(args),
        cli::Command::Config(c) => config_commands::run(c),
        cli::Command::Completions(args) => shell_docs::completions(args),
        cli::Command::Man(args) => shell_docs::man(args),
    }
}
