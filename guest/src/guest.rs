//! The synthetic guest: connect once, run once, report.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::app::{Worker, WorkerResult};
use crate::clock::{Clock, ExitCost};
use crate::config::{ConfigError, GuestConfig, Mode};
use crate::cores_report;
use crate::frontend::{tx_offloads, Connection, FrontendError};
use crate::metrics::{
    CoresReportStats, GuestCounters, GuestReport, LatencyHistogram, RingKind, ThreadReport,
};
use crate::period_latency::PeriodLatency;
use crate::shared::{Shared, TcpStreamShared};
use crate::tcp_stream;
use vadapt_qemu::server::qmp_server::{QmpServer, QmpServerError};
use vadapt_qemu::server::vcpus::Vcpus;
use vadapt_wire::ethernet::ETH_HDR_LEN;

/// Why a guest could not connect or run.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// A knob is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Connecting to or negotiating with the backend failed.
    #[error(transparent)]
    Frontend(#[from] FrontendError),
    /// The QMP socket (`--qmp`) could not be set up.
    #[error(transparent)]
    Qmp(#[from] QmpServerError),
    /// The P95 reporting thread could not be started.
    #[error("cannot start the P95 reporting thread")]
    SpawnReporter(#[source] std::io::Error),
    /// A sending thread could not be started.
    #[error("cannot start sending thread {thread}")]
    Spawn {
        /// Thread number.
        thread: u32,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// How often the supervising thread checks the vhost-user socket and the threads (ms).
const WATCH_PERIOD_MS: i32 = 50;

/// A connected synthetic guest, ready to run.
#[derive(Debug)]
pub struct Guest {
    cfg: GuestConfig,
    frontend: Connection,
    pairs: Vec<Arc<Mutex<crate::driver::queue::QueuePair>>>,
    counters: Arc<GuestCounters>,
    vcpus: Arc<Vcpus>,
    /// Serves `--qmp` from connect until the guest is dropped (the end of [`Guest::run`]).
    qmp: Option<QmpServer>,
    /// Serves `--qga` likewise.
    qga: Option<QmpServer>,
}

impl Guest {
    /// Validates `cfg`, connects to the backend, negotiates features, shares memory and
    /// starts the queue pairs (RX rings filled). Traffic starts with [`Guest::run`].
    ///
    /// With `cfg.qmp`, the QMP socket is listening when this returns (and is removed when
    /// the guest is dropped); `query-cpus-fast` lists the sending threads once they run.
    pub fn connect(cfg: GuestConfig) -> Result<Guest, GuestError> {
        cfg.validate()?;
        let vcpus = Arc::new(Vcpus::new());
        // Before the backend: a QMP path in use is refused without touching the backend.
        let qmp = match &cfg.qmp {
            Some(path) => Some(QmpServer::bind(path, Arc::clone(&vcpus))?),
            None => None,
        };
        let (frontend, pairs) = Connection::connect(&cfg)?;
        vcpus.set_count(cfg.threads);
        let qga = match &cfg.qga {
            Some(path) => Some(QmpServer::bind_agent(
                path,
                Arc::clone(&vcpus),
                pairs.len() as u16,
            )?),
            None => None,
        };
        for p in &pairs {
            // Linux kicks after posting its first RX buffers (`virtnet_open`); the rings are
            // live now, so the kick means something to a backend that waits for one.
            p.rx.notify.kick();
        }
        let counters = Arc::new(GuestCounters::new(cfg.threads as usize));
        let pairs = pairs.into_iter().map(|p| Arc::new(Mutex::new(p))).collect();
        Ok(Guest {
            cfg,
            frontend,
            pairs,
            counters,
            vcpus,
            qmp,
            qga,
        })
    }

    /// The sending threads as vCPUs: their thread ids while they run, and the pause that QMP
    /// `stop` / `cont` (or the library user) set.
    pub fn vcpus(&self) -> Arc<Vcpus> {
        Arc::clone(&self.vcpus)
    }

    /// The QMP socket's path, when `--qmp` was given.
    pub fn qmp_path(&self) -> Option<&std::path::Path> {
        self.qmp.as_ref().map(QmpServer::path)
    }

    /// Where the guest agent socket (`--qga`) listens, if one was asked for.
    pub fn qga_path(&self) -> Option<&std::path::Path> {
        self.qga.as_ref().map(QmpServer::path)
    }

    /// Live counters (per thread and total), readable while [`Guest::run`] runs.
    pub fn counters(&self) -> Arc<GuestCounters> {
        Arc::clone(&self.counters)
    }

    /// Queue pairs in use (RX queue `2*i`, TX queue `2*i+1`).
    pub fn queue_pairs(&self) -> u16 {
        self.pairs.len() as u16
    }

    /// Queue pairs the backend offers.
    pub fn max_queue_pairs(&self) -> u16 {
        self.frontend.max_pairs
    }

    /// The device's MTU, if it offered one (`VIRTIO_NET_F_MTU`): the
    /// largest `--size` it takes, bytes.
    pub fn mtu(&self) -> Option<u16> {
        self.frontend.mtu
    }

    /// The guest's MAC address (from `--mac`, else the device, else the fallback).
    pub fn mac(&self) -> [u8; 6] {
        self.frontend.mac
    }

    /// Feature bits acknowledged to the backend.
    pub fn features(&self) -> u64 {
        self.frontend.features
    }

    /// What became of `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` (sent only with several pairs and a
    /// backend control queue).
    pub fn ctrl_mq(&self) -> crate::frontend::CtrlOutcome {
        self.frontend.ctrl_mq
    }

    /// Runs the configured workload until the duration passes or `stop` becomes true, then
    /// lets the backend consume what was posted (bounded), stops the rings and reports.
    ///
    /// If the backend goes away mid-run, the threads stop at once and the report carries
    /// `error: Some(..)`; every wait inside is bounded, so this returns in bounded time.
    pub fn run(mut self, stop: Arc<AtomicBool>) -> Result<GuestReport, GuestError> {
        let clock = Clock::start();
        let threads = self.cfg.threads;
        let shared = Arc::new(Shared {
            clock,
            stop,
            abort: AtomicBool::new(false),
            deadline_ns: self.cfg.duration.as_nanos().min(u128::from(u64::MAX)) as u64,
            answered: (0..threads).map(|_| AtomicU64::new(0)).collect(),
            counters: Arc::clone(&self.counters),
            mac: self.frontend.mac,
            dst_mac: self.cfg.dst_mac,
            mode: self.cfg.mode,
            load: self.cfg.load,
            pacing: self.cfg.pacing,
            threads,
            pairs: self.pairs.len() as u16,
            exit: ExitCost {
                ns: self.cfg.exit_cost_ns,
            },
            napi_budget: self.cfg.napi_budget,
            tx_batch: self.cfg.tx_batch,
            rr_timeout_ns: self.cfg.rr_timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            frame_len: (ETH_HDR_LEN as u64) + u64::from(self.cfg.size),
            size: self.cfg.size,
            tcp: (self.cfg.mode == Mode::TcpStream).then(|| TcpStreamShared {
                offloads: tx_offloads(self.frontend.features),
                pattern: tcp_stream::payload_pattern().into(),
                write_ns: self.cfg.write_cost_per_message_ns(),
            }),
            vcpus: Arc::clone(&self.vcpus),
            period_latency: self
                .cfg
                .cores_control
                .as_ref()
                .map(|_| Arc::new(PeriodLatency::new(threads as usize))),
        });

        let reporter_stop = Arc::new(AtomicBool::new(false));
        let reporter = match (&self.cfg.cores_control, &shared.period_latency) {
            (Some(control), Some(latency)) => {
                let (control, latency, stop) = (
                    control.clone(),
                    Arc::clone(latency),
                    Arc::clone(&reporter_stop),
                );
                let period = self.cfg.report_period;
                let spawned = std::thread::Builder::new()
                    .name("guest-p95".into())
                    .spawn(move || cores_report::run_reporter(&control, period, &latency, &stop));
                Some(spawned.map_err(GuestError::SpawnReporter)?)
            }
            _ => None,
        };

        let mut handles: Vec<JoinHandle<WorkerResult>> = Vec::with_capacity(threads as usize);
        for t in 0..threads {
            let pair = Arc::clone(&self.pairs[t as usize % self.pairs.len()]);
            let worker = Worker::new(t, pair, Arc::clone(&shared));
            let spawned = std::thread::Builder::new()
                .name(format!("guest-tx{t}"))
                .spawn(move || worker.run());
            match spawned {
                Ok(h) => handles.push(h),
                Err(source) => {
                    shared.abort.store(true, Ordering::Relaxed);
                    reporter_stop.store(true, Ordering::Relaxed);
                    for h in handles {
                        let _ = h.join();
                    }
                    if let Some(r) = reporter {
                        let _ = r.join();
                    }
                    return Err(GuestError::Spawn { thread: t, source });
                }
            }
        }

        let mut error = None;
        while !handles.iter().all(|h| h.is_finished()) {
            if let Some(log) = self.frontend.dirty_log.as_mut() {
                log.sync();
            }
            if error.is_none() && socket_hung_up(self.frontend.socket_fd(), WATCH_PERIOD_MS) {
                error = Some("the backend closed the vhost-user connection".to_string());
                shared.abort.store(true, Ordering::Relaxed);
            } else if error.is_some() {
                std::thread::sleep(Duration::from_millis(WATCH_PERIOD_MS as u64));
            }
        }
        reporter_stop.store(true, Ordering::Relaxed);
        let cores_reports = reporter.map(|r| {
            r.join().unwrap_or_else(|_| CoresReportStats {
                last_error: Some("the P95 reporting thread panicked".into()),
                ..CoresReportStats::default()
            })
        });
        let results: Vec<WorkerResult> = handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| WorkerResult {
                    thread: u32::MAX,
                    queue_pair: 0,
                    hist: LatencyHistogram::new(),
                    end_ns: 0,
                    cpu_ns: 0,
                    error: Some("a sending thread panicked".into()),
                })
            })
            .collect();
        if error.is_none() {
            error = results.iter().find_map(|r| r.error.clone());
        }
        if error.is_none() {
            if let Err(e) = self.frontend.stop_rings() {
                error = Some(error_chain(&e));
            }
        }
        // After GET_VRING_BASE the backend's log is complete.
        let f = &mut self.frontend;
        let dirty_log = f.dirty_log.as_mut().map(|l| l.check(&f.mem));
        Ok(GuestReport {
            dirty_log,
            ..self.report(results, error, cores_reports)
        })
    }

    fn report(
        &self,
        results: Vec<WorkerResult>,
        error: Option<String>,
        cores_reports: Option<CoresReportStats>,
    ) -> GuestReport {
        let end_ns = results.iter().map(|r| r.end_ns).max().unwrap_or(0);
        let mut all = LatencyHistogram::new();
        let threads = results
            .iter()
            .filter(|r| (r.thread as usize) < self.counters.threads.len())
            .map(|r| {
                all.merge(&r.hist);
                ThreadReport {
                    thread: r.thread,
                    queue_pair: r.queue_pair,
                    counts: self.counters.threads[r.thread as usize].snapshot(),
                    latency: r.hist.summary(),
                    cpu_seconds: r.cpu_ns as f64 / 1e9,
                }
            })
            .collect::<Vec<ThreadReport>>();
        let mut rx_queue_packets = vec![0; usize::from(self.queue_pairs())];
        for t in &threads {
            if let Some(n) = rx_queue_packets.get_mut(usize::from(t.queue_pair)) {
                *n += t.counts.recv_packets;
            }
        }
        GuestReport {
            rx_queue_packets,
            ctrl_rss: self.frontend.ctrl_rss,
            totals: self.counters.total(),
            latency: all.summary(),
            elapsed: Duration::from_nanos(end_ns),
            cpu_seconds: results.iter().map(|r| r.cpu_ns as f64 / 1e9).sum(),
            queue_pairs: self.queue_pairs(),
            features: self.frontend.features,
            ring: RingKind::of(self.frontend.features),
            mac: format_mac(self.frontend.mac),
            threads,
            cores_reports,
            dirty_log: None,
            error,
        }
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// An error and its causes on one line (`a: b: c`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Waits up to `timeout_ms` for the vhost-user socket to report a hang-up or data (the
/// backend never sends unsolicited messages on this socket, so readable means closed).
fn socket_hung_up(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd living across the call.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    n > 0 && p.revents & (libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_backend_that_never_answers_is_an_error_not_a_hang() {
        let dir = std::env::temp_dir().join(format!("vadapt-guest-mute-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mute.sock");
        let listener = UnixListener::bind(&path).unwrap();
        // Accept and hold the connection open without ever replying.
        let holder = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let cfg = GuestConfig {
            vhost_timeout: Duration::from_millis(100),
            ..GuestConfig::new(&path)
        };
        let err = Guest::connect(cfg).unwrap_err();
        let msg = error_chain(&err);
        assert!(
            msg.starts_with("vhost-user backend did not answer GET_FEATURES"),
            "{msg}"
        );
        drop(holder.join());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn formats_macs() {
        assert_eq!(format_mac([2, 0, 0xab, 0, 0, 0xff]), "02:00:ab:00:00:ff");
    }
}
