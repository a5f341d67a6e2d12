//! Start-up, the services step: the core manager, NetAP-ML's workload
//! estimate, the metrics endpoint and the switch's MAC ageing, each a
//! thread over the ports; and the lines said once start-up can no longer
//! fail.

use super::error::DaemonError;
use super::ports::RunningVm;
use super::started::Started;
use crate::config::DaemonConfig;
use crate::config::SocketMode;
use crate::cores::manager_loop::{self, CoreManager};
use crate::cores::CoresStatus;
use crate::metrics::Registry;
use crate::port::Roster;
use crate::switch::Switch;
use crate::worker::pool::NqWorkers;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use vadapt_policy::PolicyKind;
use vadapt_qemu::peer_text::PeerText;

/// vSPACE's core manager, if `[cores]` names CPUs: its status, and the
/// line that describes it.
pub(super) fn core_manager(
    cfg: &DaemonConfig,
    roster: &Arc<Roster>,
    pool: &Option<Arc<NqWorkers>>,
    registry: &Registry,
    started: &mut Started,
) -> Result<(Option<Arc<CoresStatus>>, Option<String>), DaemonError> {
    if cfg.cores.cpus.is_empty() {
        return Ok((None, None));
    }
    let status = Arc::new(CoresStatus::default());
    let m = CoreManager::new(
        cfg.cores.clone(),
        Arc::clone(roster),
        Arc::clone(&status),
        std::path::Path::new("/proc"),
        std::path::Path::new("/sys"),
    );
    let m = match pool {
        Some(pool) => m.with_nq_workers(Arc::clone(pool)),
        None => m,
    };
    let line = m.describe();
    started.threads.push(
        manager_loop::spawn(m, Arc::clone(&started.stop)).map_err(|source| DaemonError::Port {
            port: "core manager".into(),
            source,
        })?,
    );
    registry.add_exporter(Arc::clone(&status) as _);
    Ok((Some(status), Some(line)))
}

/// NetAP-ML's features estimated from the counters (idle unless a port
/// runs netap-ml).
pub(super) fn workload_estimate(
    roster: &Arc<Roster>,
    started: &mut Started,
) -> Result<(), DaemonError> {
    let workload = crate::workload_loop::WorkloadLoop::new(Arc::clone(roster));
    started.threads.push(
        crate::workload_loop::spawn(workload, Arc::clone(&started.stop)).map_err(|source| {
            DaemonError::Port {
                port: "workload estimate".into(),
                source,
            }
        })?,
    );
    Ok(())
}

/// The Prometheus endpoint, if `--metrics` asks for one: the address bound.
pub(super) fn metrics_endpoint(
    cfg: &DaemonConfig,
    registry: &Arc<Registry>,
    started: &mut Started,
) -> Result<Option<SocketAddr>, DaemonError> {
    let Some(addr) = cfg.metrics else {
        return Ok(None);
    };
    let l = TcpListener::bind(addr).map_err(|source| DaemonError::Metrics { addr, source })?;
    let bound = l.local_addr().unwrap_or(addr);
    l.set_nonblocking(true)
        .map_err(|source| DaemonError::Metrics { addr, source })?;
    let (reg, st) = (Arc::clone(registry), Arc::clone(&started.stop));
    started.threads.push(
        std::thread::Builder::new()
            .name("vadapt-metrics".into())
            .spawn(move || crate::metrics::http::serve(l, reg, st))
            .expect("spawning a thread"),
    );
    Ok(Some(bound))
}

/// The switch forgets MACs not seen for its ageing time.
pub(super) fn mac_ageing(switch: &Arc<Switch>, started: &mut Started) {
    let (sw, st) = (Arc::clone(switch), Arc::clone(&started.stop));
    started.threads.push(
        std::thread::Builder::new()
            .name("vadapt-ageing".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                    sw.age(crate::clock::coarse_now());
                }
            })
            .expect("spawning a thread"),
    );
}

/// What is running, said once start-up can no longer fail.
pub(super) fn log_ready(
    cfg: &DaemonConfig,
    vms: &[RunningVm],
    metrics_addr: Option<SocketAddr>,
    cores_line: Option<String>,
) {
    let pinned: Vec<(String, usize, PolicyKind)> = vms
        .iter()
        .filter_map(|v| {
            Some((
                v.port.name().to_owned(),
                v.cpu?,
                v.port.policy_config().kind(),
            ))
        })
        .collect();
    // Every port is made alike: the first one's reason is every one's.
    let freq_note = vms
        .first()
        .and_then(|v| v.port.freq.unavailable_reason().map(str::to_owned));
    for port in vms.iter().map(|v| &v.port) {
        let what = match port.cfg.mode {
            SocketMode::Server => "VM port listening",
            SocketMode::Client => "VM port connecting to the frontend's socket",
        };
        tracing::info!(port = port.name(), socket = %PeerText::from_path(&port.cfg.socket), queues = port.cfg.queues,
            mac = %port.mac, policy = %port.policy_config().kind(), "{what}");
    }
    tracing::info!(path = %PeerText::from_path(&cfg.control), "control socket ready");
    if let Some(bound) = metrics_addr {
        tracing::info!(%bound, "Prometheus metrics at http://{bound}/metrics");
    }
    if let Some(line) = cores_line {
        tracing::info!("{line}");
    }
    if let Some(reason) = freq_note {
        tracing::info!("CPU-frequency hints (EE-KBP) are a no-op: {reason}");
    }
    for (cpu, ports) in busy_pollers_sharing_a_cpu(&pinned) {
        tracing::warn!(
            cpu,
            ports = %ports.join(", "),
            "busy-polling ports with a worker each share this CPU: the workers take turns \
             in scheduler ticks, and frames queued for one wait out the other's tick \
             (benchmark B8: a quarter lost, 4-5x the cycles per packet); give each its own \
             CPU in --cpus, or serve them with one worker (--cores-cpus {cpu} \
             --queue-workers per-nq-core)"
        );
    }
}

/// The CPUs that `--cpus` gives the workers of two or more busy-polling
/// ports, with those ports (`pinned`: port, CPU, initial policy).
pub(super) fn busy_pollers_sharing_a_cpu(
    pinned: &[(String, usize, vadapt_policy::PolicyKind)],
) -> Vec<(usize, Vec<String>)> {
    let mut by_cpu = std::collections::BTreeMap::<usize, Vec<String>>::new();
    for (port, cpu, kind) in pinned {
        if *kind == vadapt_policy::PolicyKind::BusyPoll {
            by_cpu.entry(*cpu).or_default().push(port.clone());
        }
    }
    by_cpu.into_iter().filter(|(_, p)| p.len() > 1).collect()
}
