//! Per-second rates of the daemon's VM ports from two stats snapshots: the
//! time series of `vadapt demo` and of `vadapt bench`'s B5, computed alike.

use serde::Serialize;
use vadapt_dataplane::config::DaemonConfig;
use vadapt_dataplane::metrics::StatsSnapshot;

/// One row of the time series: one VM, one second.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since start (end of the interval).
    pub t: f64,
    /// VM port name.
    pub vm: String,
    /// Policy in effect.
    pub policy: String,
    /// Guest→host throughput, Mbit/s (frame bytes).
    pub mbps: f64,
    /// Guest→host packets per second.
    pub pps: f64,
    /// Application payload the VM's guest sent, Mbit/s: known only where the guests run in
    /// this process (`vadapt demo` fills it from their counters), else `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_mbps: Option<f64>,
    /// Guest kicks received per second.
    pub kicks_per_s: f64,
    /// Calls sent per second.
    pub calls_per_s: f64,
    /// Worker CPU, percent of one core.
    pub worker_cpu_pct: f64,
    /// Polling interval (NetAP) or poll window, µs; 0 if none.
    pub interval_us: u64,
}

/// Per-VM rates between two snapshots `dt` seconds apart, `t` seconds after
/// the start, with `policy` in effect: one [`Sample`] per VM port of `cfg`.
pub fn rates(
    prev: &StatsSnapshot,
    now: &StatsSnapshot,
    dt: f64,
    t: f64,
    policy: &str,
    cfg: &DaemonConfig,
) -> Vec<Sample> {
    cfg.vm
        .iter()
        .map(|vm| {
            let d = |f: &dyn Fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64| {
                now.port_total(&vm.name, f)
                    .unwrap_or(0)
                    .saturating_sub(prev.port_total(&vm.name, f).unwrap_or(0))
                    as f64
            };
            let cpu = |s: &StatsSnapshot| {
                s.workers
                    .iter()
                    .find(|w| w.name == vm.name)
                    .map_or(0.0, |w| w.cpu_seconds)
            };
            let interval = now
                .ports
                .iter()
                .find(|p| p.name == vm.name)
                .map_or(0, |p| p.poll_interval_us);
            Sample {
                t: (t * 1000.0).round() / 1000.0,
                vm: vm.name.clone(),
                policy: policy.to_string(),
                mbps: d(&|q| q.tx_bytes) * 8.0 / 1e6 / dt,
                pps: d(&|q| q.tx_packets) / dt,
                payload_mbps: None,
                kicks_per_s: d(&|q| q.kicks) / dt,
                calls_per_s: d(&|q| q.calls) / dt,
                worker_cpu_pct: (cpu(now) - cpu(prev)).max(0.0) * 100.0 / dt,
                interval_us: interval,
            }
        })
        .collect()
}
