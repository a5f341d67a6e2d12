//! What a scenario is, once parsed and checked: the host, the VMs with
//! their loads, the policies and when they change, the sweep.

use crate::calibration::Calibration;
use crate::cores::CoreMgmtSpec;
use crate::napi::NapiSpec;
use serde::Deserialize;
use vadapt_policy::{Duration, PolicyConfig};

/// A scenario file could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file (or an included file) could not be read.
    #[error("cannot read scenario file {file}")]
    Read {
        /// Path as given.
        file: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is malformed or a value is invalid.
    #[error("{file}:{line}: `{key}`: {message}")]
    Invalid {
        /// File the error is in.
        file: String,
        /// 1-based line of the offending key or value (0 if unknown).
        line: usize,
        /// Dotted path of the offending key, e.g. `vms[2].vcpus`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// The machine being simulated.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    /// Physical cores shared by all vCPU and worker threads.
    pub cores: u32,
    /// NIC line rate, bits per second.
    pub line_rate_bps: f64,
    /// NIC transmit queue capacity, packets; a worker takes no more packets
    /// than fit (back-pressure to the rings).
    pub nic_queue_packets: u32,
    /// Scheduler time slice when cores are oversubscribed, ns (CFS-like);
    /// each slice costs one context switch.
    pub sched_slice: Duration,
    /// Most vCPU threads the model places per core (all VMs together).
    pub max_vcpus_per_core: u32,
    /// Optional CPU-frequency states and power model.
    pub power: Option<PowerModel>,
    /// Core groups and their allocator (`[host.core_alloc]`; default:
    /// every thread time-shares every core).
    pub core_mgmt: CoreMgmtSpec,
    /// How stream senders share oversubscribed vCPU cores.
    pub vcpu_sched: VcpuSched,
    /// The NAPI-like receive path for request/response loads (`[host.napi]`,
    /// module [`crate::napi`]); none: packets reach the worker from the wire.
    pub napi: Option<NapiSpec>,
}

/// How stream senders' vCPU threads share the vCPU cores when more of them
/// are runnable than there are cores (`host.vcpu_sched`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VcpuSched {
    /// `"shares"` (default): processor sharing, every runnable thread at
    /// `cores / runnable` of a core at once (the fluid limit of CFS).
    #[default]
    Shares,
    /// `"slices"`: round robin, each runnable sender group at full speed
    /// for `sched_slice_us` while the others wait, as CFS runs CPU-bound
    /// threads; a blocked group hands its core to the next at once.
    Slices,
}

/// Per-core power at each CPU-frequency state. Arrays are indexed alike and
/// sorted by frequency, lowest first.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerModel {
    /// Frequency states, MHz, ascending.
    pub freqs_mhz: Vec<f64>,
    /// Power of an idle core at each state, watts.
    pub idle_w: Vec<f64>,
    /// Power of a busy core at each state, watts.
    pub active_w: Vec<f64>,
    /// Power of the rest of the server (fans, memory, uncore, disks), watts;
    /// a constant added to every instant (default 0: cores only).
    #[serde(default)]
    pub platform_w: f64,
    /// Idle states (C-states) on: an idle core that has stayed idle for
    /// `deep_residency_us` draws `idle_w`; off (or before that), it draws
    /// `shallow_idle_w` at its frequency. Default on.
    #[serde(default = "cstates_default")]
    pub cstates: bool,
    /// Power of an idle core in a shallow state (C0/C1: C-states off, or an
    /// idle gap shorter than the deep state's residency) at each frequency
    /// state, watts. Default: `idle_w` (no shallow state modelled).
    #[serde(default)]
    pub shallow_idle_w: Vec<f64>,
    /// How long a core must have been idle before it counts as in the deep
    /// state, µs (the deep C-state's target residency). Default 0.
    #[serde(default)]
    pub deep_residency_us: f64,
    /// Wake-up latency added when a worker's core leaves the deep state, µs
    /// (the deep C-state's exit latency). Default 0.
    #[serde(default)]
    pub deep_exit_us: f64,
}

fn cstates_default() -> bool {
    true
}

impl PowerModel {
    /// Power of one idle core at frequency state `freq` that has been idle
    /// for `idle_ns`, watts.
    pub fn idle_core_w(&self, freq: usize, idle_ns: f64) -> f64 {
        let shallow = !self.cstates || idle_ns < self.deep_residency_us * 1e3;
        match self.shallow_idle_w.get(freq) {
            Some(&w) if shallow => w,
            _ => self.idle_w[freq],
        }
    }
}

/// Closed-loop bulk senders (netperf TCP_STREAM-like) in one VM.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamLoad {
    /// Sender threads; each keeps one vCPU busy while the ring has room.
    pub threads: u32,
    /// Application message size, bytes.
    pub msg_size: u32,
    /// TCP payload per segment (one ring descriptor chain), bytes; the guest
    /// stack coalesces small messages up to this.
    pub segment_bytes: u32,
    /// Protocol header bytes added to each segment's payload to make the frame.
    pub header_bytes: u32,
    /// Guest CPU per `send()` call, ns.
    pub send_msg_ns: f64,
    /// Guest CPU per message byte (copy, checksum), picoseconds.
    pub send_byte_ps: f64,
    /// Guest CPU per segment handed to virtio-net (stack + descriptor), ns.
    pub xmit_segment_ns: f64,
    /// How messages smaller than `segment_bytes` are cut into segments.
    pub coalesce: Coalesce,
}

/// How a stream sender coalesces small messages into segments
/// (`workload.coalesce`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Coalesce {
    /// `"full"` (default): every segment carries `segment_bytes` worth of
    /// messages, as a sender always ahead of the ring (Nagle, or an
    /// infinitely fast writer) fills them.
    #[default]
    Full,
    /// `"since-room"`: the synthetic guest's `tcp-stream` rule with a write
    /// cost. Each message is posted as its own segment while the queue
    /// runs; once the ring is full the queue stops, the writes go on piling
    /// up until `segment_bytes` per thread are queued (then the threads
    /// block), and the TX call restarts the queue by posting what piled up.
    /// A sender slower than the host sends one message per segment, one
    /// faster sends full segments.
    SinceRoom,
}

/// Service-time distribution of a request/response server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ServiceDist {
    /// Always the mean.
    Const,
    /// Exponential with the given mean.
    Exp,
    /// Log-normal with the given mean and this sigma of the underlying normal.
    LogNormal {
        /// Sigma of ln(service time).
        sigma: f64,
    },
}

/// Open-loop request/response load (memcached-like) into one VM.
#[derive(Clone, Debug, PartialEq)]
pub struct RrLoad {
    /// Offered load, piecewise linear: (time s, requests per second) points,
    /// time ascending; constant before the first and after the last.
    pub rate_qps: Vec<(f64, f64)>,
    /// Service-time distribution.
    pub service: ServiceDist,
    /// Mean guest CPU per request, ns.
    pub service_mean_ns: f64,
    /// Server threads in the guest (at most the VM's vCPUs).
    pub server_threads: u32,
    /// Request frame size, bytes.
    pub request_bytes: u32,
    /// Response frame size, bytes.
    pub response_bytes: u32,
}

/// What runs in a VM.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Closed-loop senders.
    Stream(StreamLoad),
    /// Open-loop request/response clients outside, a server inside.
    Rr(RrLoad),
}

impl Workload {
    /// Its `kind` as the scenario file names it: `stream` or `rr`.
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Stream(_) => "stream",
            Workload::Rr(_) => "rr",
        }
    }
}

/// One VM (after `count` expansion).
#[derive(Clone, Debug, PartialEq)]
pub struct VmSpec {
    /// Name used in outputs.
    pub name: String,
    /// vCPU threads.
    pub vcpus: u32,
    /// Virtqueue size, descriptors (one descriptor chain per packet).
    pub ring_size: u32,
    /// Queue pairs, each served by its own worker thread.
    pub queues: u32,
    /// The load.
    pub workload: Workload,
}

/// A policy as a scenario names it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SimPolicy {
    /// One of the policy crate's policies.
    Policy(PolicyConfig),
    /// Sweep probe: sleep a fixed interval after every pass (NetAP's Figure 2).
    /// See [`vadapt_policy::fixed::FixedInterval`].
    FixedInterval {
        /// Sleep between passes, µs.
        interval_us: u64,
    },
}

impl SimPolicy {
    /// Short label for outputs.
    pub fn label(&self) -> String {
        match self {
            SimPolicy::Policy(p) => p.kind().as_str().to_string(),
            SimPolicy::FixedInterval { interval_us } => format!("fixed-{interval_us}us"),
        }
    }
}

/// From `at`, every worker runs `policy` (a fresh instance).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimelineEntry {
    /// Simulated time of the switch, ns since the start.
    pub at: Duration,
    /// The policy.
    pub policy: SimPolicy,
}

/// A named time window summarised in the result (e.g. the paper's
/// VirtIO / Adapting / Adapted periods).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Period {
    /// Label.
    pub name: String,
    /// Start, seconds.
    pub from_s: f64,
    /// End, seconds.
    pub to_s: f64,
}

/// How `vadapt sim sweep` runs each point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepSpec {
    /// Simulated time per point, ns.
    pub duration: Duration,
    /// Time excluded from the point's mean at its start, ns.
    pub warmup: Duration,
}

/// A validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Name (default: the file stem).
    pub name: String,
    /// Free-text description.
    pub description: String,
    /// File it came from.
    pub file: String,
    /// Simulated time, ns.
    pub duration: Duration,
    /// Default seed.
    pub seed: u64,
    /// Time-series sample period, ns.
    pub sample: Duration,
    /// Simulation fails if more events than this happen in one simulated second.
    pub max_events_per_sim_s: u64,
    /// The host.
    pub host: Host,
    /// Model costs.
    pub calibration: Calibration,
    /// VMs, `count` expanded.
    pub vms: Vec<VmSpec>,
    /// Policy switches, `at` ascending, first at 0.
    pub timeline: Vec<TimelineEntry>,
    /// Windows summarised in the result.
    pub periods: Vec<Period>,
    /// Sweep settings.
    pub sweep: SweepSpec,
}

impl Scenario {
    /// Total worker threads (one per queue pair of every VM).
    pub fn workers(&self) -> usize {
        self.vms.iter().map(|v| v.queues as usize).sum()
    }
}

#[cfg(test)]
mod power_tests {
    use super::PowerModel;

    fn xeon(cstates: bool) -> PowerModel {
        PowerModel {
            freqs_mhz: vec![1200.0, 2800.0],
            idle_w: vec![0.0, 0.0],
            active_w: vec![2.357, 5.5],
            platform_w: 170.0,
            cstates,
            shallow_idle_w: vec![0.893, 2.083],
            deep_residency_us: 400.0,
            deep_exit_us: 133.0,
        }
    }

    #[test]
    fn an_idle_core_is_shallow_until_the_deep_residency_then_deep() {
        let p = xeon(true);
        assert_eq!(p.idle_core_w(1, 100e3), 2.083);
        assert_eq!(p.idle_core_w(0, 100e3), 0.893);
        assert_eq!(p.idle_core_w(1, 400e3), 0.0);
    }

    #[test]
    fn without_cstates_an_idle_core_stays_shallow() {
        let p = xeon(false);
        assert_eq!(p.idle_core_w(1, 1e12), 2.083);
        assert_eq!(p.idle_core_w(0, f64::INFINITY), 0.893);
    }

    #[test]
    fn without_a_shallow_table_idle_is_idle_w() {
        let p = PowerModel {
            shallow_idle_w: vec![],
            ..xeon(false)
        };
        assert_eq!(p.idle_core_w(1, 0.0), 0.0);
    }
}
