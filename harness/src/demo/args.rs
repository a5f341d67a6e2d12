//! The arguments of `vadapt demo`.

use clap::Args;
use std::path::PathBuf;
use vadapt_guest::Mode;

/// `tcp-stream` or `stream`: the guest's one-way modes.
fn parse_demo_mode(s: &str) -> Result<Mode, String> {
    match vadapt_guest::cli::parse_mode(s)? {
        m @ (Mode::TcpStream | Mode::Stream) => Ok(m),
        _ => Err(format!(
            "`{s}` is not a demo mode: use tcp-stream or stream"
        )),
    }
}

/// `vadapt demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The policy switched on at run time after the `--baseline` phase, or
    /// several separated by commas, run one after another on the same load
    /// (the duration is split evenly between all phases), e.g. `netap,eekbp`.
    /// `netap-ml` is told the workload (`--vms`, `--threads`, `--size`) for its model.
    #[arg(long, default_value = "netap", value_name = "LIST")]
    pub policy: String,
    /// The first phase, before `--policy` is switched on: `interrupt` (kernel
    /// vhost-net's behaviour, the papers' baseline), another policy, or
    /// `none` to start with `--policy` at once.
    #[arg(long, default_value = "interrupt", value_name = "POLICY")]
    pub baseline: String,
    /// Synthetic VMs on the switch.
    #[arg(long, default_value_t = 2)]
    pub vms: u32,
    /// Sender threads per VM (one queue pair each, up to 16).
    #[arg(long, default_value_t = 3)]
    pub threads: u32,
    /// Message size, bytes: application data per write in `tcp-stream`, L2 payload of each
    /// frame (the frame is 14 bytes more) in `stream`.
    #[arg(long, default_value_t = 64)]
    pub size: u32,
    /// What the guests send: `tcp-stream` (the papers' netperf TCP_STREAM workload:
    /// messages coalesced by TCP into TSO segments of up to 64 KiB, checksummed and cut into
    /// MSS frames by vadapt) or `stream` (one raw Ethernet frame per message: the
    /// packet-rate demo).
    #[arg(long, default_value = "tcp-stream", value_parser = parse_demo_mode, value_name = "MODE")]
    pub mode: Mode,
    /// Run time, seconds.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Output directory.
    #[arg(long, default_value = "demo-out")]
    pub out: PathBuf,
    /// Emulated cost of each guest kick and handled call, ns (0 = off).
    #[arg(long, default_value_t = vadapt_guest::config::DEFAULT_EXIT_COST_NS)]
    pub exit_cost_ns: u64,
    /// With `--mode tcp-stream`: emulated cost of each application write, ns (default: the
    /// guest's measured `send()` cost, as `vadapt guest` and `vadapt bench` B9 use; 0 with
    /// `--write-cost-ns-per-kib 0` = infinitely fast writers, every segment full). Refused
    /// with `--mode stream`.
    #[arg(long, value_name = "NS")]
    pub write_cost_ns: Option<u64>,
    /// With `--mode tcp-stream`: the part of each write's cost per KiB written, ns (default:
    /// the guest's). Refused with `--mode stream`.
    #[arg(long, value_name = "NS")]
    pub write_cost_ns_per_kib: Option<u64>,
    /// Pin the queue workers to these CPUs (default: let the scheduler share
    /// cores between guests and workers, as the NetAP paper's host did).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// No live view; only the summary.
    #[arg(long)]
    pub quiet: bool,
}

impl DemoArgs {
    /// The guests' write cost in `tcp-stream` mode: (ns per write, ns per KiB), the flags or
    /// the guest's defaults; `None` for raw frames.
    pub fn write_cost(&self) -> Option<(u64, u64)> {
        use vadapt_guest::config::{DEFAULT_WRITE_COST_NS, DEFAULT_WRITE_COST_NS_PER_KIB};
        (self.mode == Mode::TcpStream).then(|| {
            (
                self.write_cost_ns.unwrap_or(DEFAULT_WRITE_COST_NS),
                self.write_cost_ns_per_kib
                    .unwrap_or(DEFAULT_WRITE_COST_NS_PER_KIB),
            )
        })
    }
}
