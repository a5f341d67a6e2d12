//! vadapt-harness: the experiments of `vadapt`, the commands that start
//! processes and daemons, measure them and write reports.
//!
//! * [`bench`](mod@bench) — `vadapt bench`, the benchmark suite against DPDK and
//!   OVS-DPDK that regenerates BENCHMARKS.md;
//! * [`calibrate`] — `vadapt calibrate`, the simulator's cost calibration
//!   measured on this host, and `--validate` (real daemon against simulator);
//! * [`demo`] — `vadapt demo`, a daemon with synthetic guests, a live view
//!   and plots.
//!
//! Each exposes its `clap` arguments (re-used by the binary's command line)
//! and a `run` function returning the process [`std::process::ExitCode`]. The
//! `vadapt` binary is a thin dispatcher over them: the benchmark suite starts
//! `vadapt serve` and `vadapt guest` from [`std::env::current_exe`], so it
//! must run inside that binary.
//!
//! Below them, shared and importing none of them: [`machine`] (the machine
//! and versions for reports, UTC timestamps), [`rates`] (per-second rates of
//! the daemon's ports, for the demo and B5) and [`cli_util`] (error lines and
//! the exit code, also used by the binary's `serve`). Imports inside the crate
//! go one way; `scripts/check-imports.py` fails on a cycle between files.

#![deny(missing_docs)]

pub mod bench;
pub mod calibrate;
pub mod cli_util;
pub mod demo;
pub mod machine;
pub mod rates;
