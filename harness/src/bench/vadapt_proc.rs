//! vadapt's own processes in a benchmark: the daemon (`vadapt serve`,
//! pinned to CPU 1 with its workers) and synthetic guests (`vadapt guest
//! --json`, pinned to CPU 0), started from this very binary.

use super::child::{wait_path, Child, Spawn};
use super::ctx::Ctx;
use super::error::BenchError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use vadapt_dataplane::config::PortLimits;
use vadapt_dataplane::control::{request, Request, Response};
use vadapt_dataplane::metrics::StatsSnapshot;
use vadapt_policy::{PolicyConfig, PolicyKind};

/// MAC of the daemon's sink port.
pub const SINK_MAC: &str = "02:00:00:00:5e:01";
/// MAC of the daemon's echo port.
pub const ECHO_MAC: &str = "02:00:00:00:5e:02";

/// A running `vadapt serve`.
#[derive(Debug)]
pub struct Daemon {
    /// The process.
    pub child: Child,
    /// Its control socket.
    pub control: PathBuf,
    /// The command line (for the report).
    pub command: Vec<String>,
}

/// How the daemon's queue workers serve its VM ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// A worker thread per port, all pinned to the backend CPU (`--cpus`):
    /// the daemon's default arrangement.
    PerPort,
    /// One worker for every port, pinned to the backend CPU: the backend
    /// CPU as vSPACE's only NQ core (`--cores-cpus` with the core manager
    /// off, `--queue-workers per-nq-core`).
    OnePerCore,
}

/// A VM port of the daemon.
#[derive(Debug, Clone)]
pub struct VmPort {
    /// Port name.
    pub name: String,
    /// vhost-user socket.
    pub socket: PathBuf,
    /// Queue pairs.
    pub queues: u16,
    /// Initial policy.
    pub policy: PolicyKind,
    /// More `key=value` keys of its `--vm` spec (port security, limits).
    pub keys: Vec<String>,
}

impl VmPort {
    /// Port `name` with a socket in `dir`.
    pub fn new(dir: &Path, name: &str, queues: u16, policy: PolicyKind) -> VmPort {
        VmPort {
            name: name.into(),
            socket: dir.join(format!("{name}.sock")),
            queues,
            policy,
            keys: Vec::new(),
        }
    }

    /// The same port with `keys` (`key=value`) added to its `--vm` spec.
    pub fn with_keys(mut self, keys: impl IntoIterator<Item = String>) -> VmPort {
        self.keys.extend(keys);
        self
    }
}

impl Daemon {
    /// Start a daemon with `vms`, a sink and an echo port, workers on CPU
    /// `ctx.backend_cpu` (the whole process pinned there too).
    pub fn spawn(ctx: &Ctx, name: &str, vms: &[VmPort]) -> Result<Daemon, BenchError> {
        Daemon::spawn_with(ctx, name, vms, Workers::PerPort)
    }

    /// [`Daemon::spawn`] with its queue workers arranged as `workers` says.
    pub fn spawn_with(
        ctx: &Ctx,
        name: &str,
        vms: &[VmPort],
        workers: Workers,
    ) -> Result<Daemon, BenchError> {
        let ports = [
            "--sink".into(),
            format!("sink0,mac={SINK_MAC}"),
            "--echo".into(),
            format!("echo0,mac={ECHO_MAC}"),
        ];
        Daemon::spawn_ports(ctx, name, vms, workers, &ports)
    }

    /// A daemon with `vms` and the other ports `ports` (`--uplink …`,
    /// `--tap …`) instead of the sink and the echo: a benchmark whose
    /// frames flood to every port but their source needs no third port.
    pub fn spawn_ports(
        ctx: &Ctx,
        name: &str,
        vms: &[VmPort],
        workers: Workers,
        ports: &[String],
    ) -> Result<Daemon, BenchError> {
        let control = ctx.work.join(format!("{name}-control.sock"));
        let mut argv: Vec<String> = vec![
            "taskset".into(),
            "-c".into(),
            ctx.backend_cpu.to_string(),
            ctx.exe.display().to_string(),
            "serve".into(),
            "--control".into(),
            control.display().to_string(),
            match workers {
                Workers::PerPort => "--cpus",
                Workers::OnePerCore => "--cores-cpus",
            }
            .into(),
            ctx.backend_cpu.to_string(),
        ];
        argv.extend(ports.iter().cloned());
        for v in vms {
            argv.push("--vm".into());
            // DPDK virtio-user (B1–B3's sender) shares guest memory that is
            // not sealed against shrinking; the bench's frontends are trusted.
            let mut spec = format!(
                "name={},socket={},queues={},policy={},unsealed_memory=accept",
                v.name,
                v.socket.display(),
                v.queues,
                v.policy.as_str()
            );
            for k in &v.keys {
                spec.push(',');
                spec.push_str(k);
            }
            argv.push(spec);
        }
        if workers == Workers::OnePerCore {
            argv.extend(["--queue-workers".into(), "per-nq-core".into()]);
        }
        let command = argv.clone();
        let mut s = Spawn::new(name, argv, &ctx.work);
        s.env.push(("RUST_LOG".into(), "info".into()));
        // An uplink's owner record goes here, not into the host's /run/vadapt.
        s.env
            .push(("RUNTIME_DIRECTORY".into(), ctx.work.display().to_string()));
        let mut child = Child::spawn(s, &ctx.stop)?;
        wait_path(&control, Duration::from_secs(20), &mut child)?;
        for v in vms {
            wait_path(&v.socket, Duration::from_secs(20), &mut child)?;
        }
        Ok(Daemon {
            child,
            control,
            command,
        })
    }

    /// One control request; when it fails and the daemon is gone, the
    /// daemon's exit is the error (with its last output).
    fn request(&mut self, req: &Request) -> Result<Response, BenchError> {
        self.child.check_alive()?;
        request(&self.control, req).map_err(|e| {
            std::thread::sleep(Duration::from_millis(200));
            match self.child.check_alive() {
                Err(dead) => dead,
                Ok(()) => e.into(),
            }
        })
    }

    /// Every counter.
    pub fn stats(&mut self) -> Result<StatsSnapshot, BenchError> {
        match self.request(&Request::Stats)? {
            Response::Stats { stats } => Ok(stats),
            Response::Error { error } => Err(BenchError::Refused(error)),
            other => Err(BenchError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// Set `port`'s rate limits (`vadapt set-limits`), all of them.
    pub fn set_limits(&mut self, port: &str, limits: PortLimits) -> Result<(), BenchError> {
        let req = Request::SetLimits {
            port: port.into(),
            limits,
        };
        match self.request(&req)? {
            Response::Ok => Ok(()),
            Response::Error { error } => Err(BenchError::Refused(error)),
            other => Err(BenchError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// Switch `port` to `policy` (default parameters).
    pub fn set_policy(&mut self, port: &str, policy: PolicyKind) -> Result<(), BenchError> {
        self.set_policy_config(port, PolicyConfig::default_for(policy))
    }

    /// Switch `port` to `policy` with its parameters.
    pub fn set_policy_config(
        &mut self,
        port: &str,
        policy: PolicyConfig,
    ) -> Result<(), BenchError> {
        let req = Request::SetPolicy {
            port: port.into(),
            policy,
        };
        match self.request(&req)? {
            Response::Ok => Ok(()),
            Response::Error { error } => Err(BenchError::Refused(error)),
            other => Err(BenchError::Refused(format!("unexpected answer {other:?}"))),
        }
    }
}

/// Counter deltas of one port and its worker(s) between two snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PortDelta {
    /// Guest→host packets.
    pub tx_packets: u64,
    /// Guest→host bytes.
    pub tx_bytes: u64,
    /// Host→guest packets.
    pub rx_packets: u64,
    /// Kicks received.
    pub kicks: u64,
    /// Calls sent.
    pub calls: u64,
    /// Drops (all reasons).
    pub dropped: u64,
    /// Worker CPU, seconds.
    pub cpu_seconds: f64,
    /// TSC cycles in non-empty passes.
    pub busy_cycles: u64,
    /// Packets in those passes.
    pub busy_packets: u64,
}

impl PortDelta {
    /// Busy cycles per packet (the same definition as testpmd's `--record-core-cycles`).
    pub fn cycles_per_packet(&self) -> Option<f64> {
        (self.busy_packets > 0).then(|| self.busy_cycles as f64 / self.busy_packets as f64)
    }
}

/// Workers serving `port`: named `<port>` or `<port>/<n>`.
fn is_worker_of(worker: &str, port: &str) -> bool {
    worker == port
        || worker
            .strip_prefix(port)
            .is_some_and(|r| r.starts_with('/'))
}

/// `b - a` for `port` (counters are cumulative).
pub fn delta(a: &StatsSnapshot, b: &StatsSnapshot, port: &str) -> PortDelta {
    let sum = |s: &StatsSnapshot, f: &dyn Fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64| {
        s.port_total(port, f).unwrap_or(0)
    };
    let d = |f: &dyn Fn(&vadapt_dataplane::metrics::QueueSnapshot) -> u64| {
        sum(b, f).saturating_sub(sum(a, f))
    };
    let w = |s: &StatsSnapshot| {
        s.workers
            .iter()
            .filter(|w| is_worker_of(&w.name, port))
            .fold((0.0, 0u64, 0u64), |acc, w| {
                (
                    acc.0 + w.cpu_seconds,
                    acc.1 + w.busy_cycles,
                    acc.2 + w.busy_packets,
                )
            })
    };
    let (wa, wb) = (w(a), w(b));
    PortDelta {
        tx_packets: d(&|q| q.tx_packets),
        tx_bytes: d(&|q| q.tx_bytes),
        rx_packets: d(&|q| q.rx_packets),
        kicks: d(&|q| q.kicks),
        calls: d(&|q| q.calls),
        dropped: d(&|q| q.dropped.values().sum()),
        cpu_seconds: (wb.0 - wa.0).max(0.0),
        busy_cycles: wb.1.saturating_sub(wa.1),
        busy_packets: wb.2.saturating_sub(wa.2),
    }
}

/// Options of one synthetic-guest run.
#[derive(Debug, Clone)]
pub struct GuestOpts {
    /// Sending threads.
    pub threads: u32,
    /// Frame bytes (Ethernet header + payload); the guest's `--size` is 14
    /// less. In `tcp-stream` mode no single frame size applies: application
    /// bytes per write, passed as `--size` unchanged ([`GuestOpts::tcp_stream`]).
    pub frame: u32,
    /// `closed`, or a rate such as `150000`.
    pub rate: String,
    /// `stream`, `tcp-stream` or `rr`.
    pub mode: &'static str,
    /// Run time.
    pub duration: Duration,
    /// Emulated VM-exit cost, ns.
    pub exit_cost_ns: u64,
    /// `tcp-stream` only: emulated cost of each application write, ns, and its part per KiB
    /// written (`--write-cost-ns`, `--write-cost-ns-per-kib`); not passed in other modes,
    /// which refuse them.
    pub write_cost_ns: (u64, u64),
    /// Destination MAC.
    pub dst_mac: String,
    /// `--pacing` of a paced stream: `exact` (the guest's default, not passed) or `burst`.
    pub pacing: &'static str,
    /// `--ring-size`, descriptors per virtqueue; `None` = the guest's default (256).
    pub ring_size: Option<u16>,
    /// The Linux scheduling policy the guest runs under on its CPU.
    pub sched: SchedPolicy,
}

/// A guest's Linux scheduling policy (`chrt`), for guests that share a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedPolicy {
    /// `SCHED_OTHER`, the default: no `chrt`.
    Other,
    /// `SCHED_FIFO` priority 1 (`chrt --fifo 1`): the guest preempts every
    /// normal task on its CPU when it wakes and keeps the CPU until it sleeps.
    Fifo,
}

impl SchedPolicy {
    /// The `chrt` words that put a command under this policy.
    fn chrt(self) -> &'static [&'static str] {
        match self {
            SchedPolicy::Other => &[],
            SchedPolicy::Fifo => &["chrt", "--fifo", "1"],
        }
    }

    /// Whether this process may start a command under the policy (a
    /// real-time one needs `CAP_SYS_NICE`): `chrt … true` is tried; the
    /// error says why not.
    pub fn available(self) -> Result<(), String> {
        let Some((chrt, args)) = self.chrt().split_first() else {
            return Ok(());
        };
        let out = std::process::Command::new(chrt)
            .args(args)
            .arg("true")
            .output()
            .map_err(|e| format!("cannot run `{chrt}`: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`{} true` failed: {}",
                self.chrt().join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl GuestOpts {
    /// One thread, closed-loop stream of `frame`-byte frames to the sink.
    pub fn stream(frame: u32, duration: Duration, exit_cost_ns: u64) -> GuestOpts {
        GuestOpts {
            threads: 1,
            frame,
            rate: "closed".into(),
            mode: "stream",
            duration,
            exit_cost_ns,
            write_cost_ns: (0, 0),
            dst_mac: SINK_MAC.into(),
            pacing: "exact",
            ring_size: None,
            sched: SchedPolicy::Other,
        }
    }

    /// Closed-loop TCP stream (`--mode tcp-stream`, one thread) of
    /// `message`-byte application writes to the sink: TSO segments of up to
    /// 64 KiB that the daemon cuts into MSS frames. Each write costs the
    /// guest's measured default (`vadapt_guest::config::DEFAULT_WRITE_COST_NS`
    /// and `..._PER_KIB`), so a sender faster than the daemon sends full
    /// segments and a slower one smaller ones, as netperf's does.
    pub fn tcp_stream(message: u32, duration: Duration, exit_cost_ns: u64) -> GuestOpts {
        GuestOpts {
            frame: message,
            mode: "tcp-stream",
            write_cost_ns: (
                vadapt_guest::config::DEFAULT_WRITE_COST_NS,
                vadapt_guest::config::DEFAULT_WRITE_COST_NS_PER_KIB,
            ),
            ..GuestOpts::stream(message, duration, exit_cost_ns)
        }
    }

    /// The guest's `--size`: L2 payload bytes, or application bytes per
    /// write in `tcp-stream` mode.
    fn size_arg(&self) -> u32 {
        if self.mode == "tcp-stream" {
            self.frame
        } else {
            self.frame.saturating_sub(14)
        }
    }

    /// The command line (`vadapt` stands for the binary; pinned to `cpu`,
    /// under [`GuestOpts::sched`]).
    pub fn argv(&self, exe: &str, socket: &Path, cpu: usize) -> Vec<String> {
        let mut argv: Vec<String> = self.sched.chrt().iter().map(|w| w.to_string()).collect();
        argv.extend([
            "taskset".into(),
            "-c".into(),
            cpu.to_string(),
            exe.into(),
            "guest".into(),
            "--socket".into(),
            socket.display().to_string(),
            "--threads".into(),
            self.threads.to_string(),
            "--size".into(),
            self.size_arg().to_string(),
            "--rate".into(),
            self.rate.clone(),
            "--mode".into(),
            self.mode.into(),
            "--duration".into(),
            format!("{}ms", self.duration.as_millis()),
            "--exit-cost-ns".into(),
            self.exit_cost_ns.to_string(),
            "--dst-mac".into(),
            self.dst_mac.clone(),
            "--json".into(),
        ]);
        if self.mode == "tcp-stream" {
            argv.extend([
                "--write-cost-ns".into(),
                self.write_cost_ns.0.to_string(),
                "--write-cost-ns-per-kib".into(),
                self.write_cost_ns.1.to_string(),
            ]);
        }
        if self.pacing != "exact" {
            argv.extend(["--pacing".into(), self.pacing.into()]);
        }
        if let Some(n) = self.ring_size {
            argv.extend(["--ring-size".into(), n.to_string()]);
        }
        argv
    }
}

/// Latency percentiles of a request/response run, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median, ns.
    pub p50: u64,
    /// 99th percentile, ns.
    pub p99: u64,
    /// 99.9th percentile, ns.
    pub p999: u64,
    /// Samples.
    pub count: u64,
}

/// The parts of a guest's JSON report the benchmarks read.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct GuestResult {
    /// Frames sent.
    pub sent_packets: u64,
    /// Frame bytes sent.
    pub sent_bytes: u64,
    /// Application payload bytes sent (in `tcp-stream`, TCP payload; older
    /// guests without the field read as 0).
    #[serde(default)]
    pub sent_payload_bytes: u64,
    /// Frames received.
    pub recv_packets: u64,
    /// Kicks (TX + RX).
    pub kicks: u64,
    /// Handled calls (TX + RX).
    pub calls: u64,
    /// Ring-full stalls.
    pub ring_full_stalls: u64,
    /// Rate mode: packets the pacer gave up.
    #[serde(default)]
    pub paced_skipped: u64,
    /// Requests without a reply.
    #[serde(default)]
    pub lost_requests: u64,
    /// Run time, s.
    pub elapsed: f64,
    /// Guest sending threads' CPU, s.
    pub cpu_seconds: f64,
    /// Round trips (rr mode).
    pub latency: Option<Latency>,
    /// Why the run ended early.
    pub error: Option<String>,
}

/// A started guest.
#[derive(Debug)]
pub struct GuestProc {
    child: Child,
    duration: Duration,
}

impl GuestProc {
    /// Start `opts` against `socket`, pinned to `ctx.frontend_cpu`.
    pub fn spawn(
        ctx: &Ctx,
        name: &str,
        socket: &Path,
        opts: &GuestOpts,
    ) -> Result<GuestProc, BenchError> {
        Self::spawn_with(ctx, name, socket, opts, &[])
    }

    /// [`spawn`](Self::spawn) with further guest arguments (`--mac ...`).
    pub fn spawn_with(
        ctx: &Ctx,
        name: &str,
        socket: &Path,
        opts: &GuestOpts,
        extra: &[String],
    ) -> Result<GuestProc, BenchError> {
        let mut argv = opts.argv(&ctx.exe.display().to_string(), socket, ctx.frontend_cpu);
        argv.extend(extra.iter().cloned());
        let mut s = Spawn::new(name, argv, &ctx.work);
        s.env.push(("RUST_LOG".into(), "warn".into()));
        Ok(GuestProc {
            child: Child::spawn(s, &ctx.stop)?,
            duration: opts.duration,
        })
    }

    /// End the run now (SIGINT: the guest stops sending, lets the backend
    /// take what it posted, and reports) and parse its report, as
    /// [`finish`](Self::finish) does.
    pub fn interrupt(self) -> Result<GuestResult, BenchError> {
        self.child.signal(libc::SIGINT);
        self.finish()
    }

    /// Wait for the end of the run and parse its report; a run that ended
    /// early or exited non-zero is an error naming why.
    pub fn finish(mut self) -> Result<GuestResult, BenchError> {
        let code = self
            .child
            .wait_exit(self.duration + Duration::from_secs(30))?;
        let lines = self.child.lines_since(0);
        let json: String = {
            // The report is the JSON object on stdout; logs go to stderr but
            // share the capture, so take from the first `{` line on.
            let start = lines.iter().position(|l| l.trim_start() == "{");
            let end = lines.iter().rposition(|l| l.trim_end() == "}");
            match (start, end) {
                (Some(s), Some(e)) if e >= s => lines[s..=e].join("\n"),
                _ => String::new(),
            }
        };
        let r: GuestResult = serde_json::from_str(&json).map_err(|e| BenchError::Parse {
            what: format!("{} report", self.child.name),
            detail: format!("{e}; exit code {code:?}\n{}", self.child.tail(30)),
        })?;
        if let Some(e) = &r.error {
            return Err(BenchError::Failed(format!(
                "{} ended early: {e}",
                self.child.name
            )));
        }
        if code != Some(0) {
            return Err(BenchError::Failed(format!(
                "{} exited with {code:?}\n{}",
                self.child.name,
                self.child.tail(30)
            )));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use vadapt_dataplane::metrics::{PortKind, PortSnapshot, QueueSnapshot, WorkerSnapshot};

    fn snap(pk: u64, cyc: u64, cpu: f64) -> StatsSnapshot {
        StatsSnapshot {
            ports: vec![PortSnapshot {
                name: "vm1".into(),
                kind: PortKind::Vm,
                queues: vec![
                    QueueSnapshot {
                        tx_packets: pk,
                        tx_bytes: pk * 64,
                        kicks: 3,
                        dropped: BTreeMap::from([("backlog_full".into(), 2)]),
                        ..Default::default()
                    },
                    QueueSnapshot {
                        queue: 1,
                        tx_packets: pk,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            workers: vec![
                WorkerSnapshot {
                    name: "vm1".into(),
                    cpu_seconds: cpu,
                    busy_cycles: cyc,
                    busy_packets: pk,
                    ..Default::default()
                },
                WorkerSnapshot {
                    name: "vm10".into(),
                    cpu_seconds: 100.0,
                    busy_cycles: 1,
                    busy_packets: 1,
                    ..Default::default()
                },
            ],
        }
    }

    #[test]
    fn delta_sums_queues_and_the_ports_own_workers() {
        let d = delta(&snap(100, 1000, 1.0), &snap(300, 5000, 1.5), "vm1");
        assert_eq!(d.tx_packets, 400);
        assert_eq!(d.tx_bytes, 200 * 64);
        assert_eq!(d.kicks, 0);
        assert_eq!(d.dropped, 0);
        assert_eq!(d.busy_cycles, 4000);
        assert_eq!(d.busy_packets, 200);
        assert_eq!(d.cycles_per_packet(), Some(20.0));
        assert!((d.cpu_seconds - 0.5).abs() < 1e-9);
        assert!(is_worker_of("vm1/2", "vm1") && !is_worker_of("vm10", "vm1"));
    }

    #[test]
    fn guest_argv_turns_frames_into_payload_and_pins() {
        let o = GuestOpts::stream(64, Duration::from_millis(1500), 0);
        let a = o.argv("/bin/vadapt", Path::new("/s"), 0);
        assert_eq!(&a[..3], &["taskset", "-c", "0"]);
        // A scheduling policy goes before the pinning (`chrt` execs `taskset`).
        let fifo = GuestOpts {
            sched: SchedPolicy::Fifo,
            ..o.clone()
        };
        let af = fifo.argv("/bin/vadapt", Path::new("/s"), 0);
        assert_eq!(&af[..4], &["chrt", "--fifo", "1", "taskset"]);
        assert_eq!(SchedPolicy::Other.available(), Ok(()));
        let at = |k: &str| a[a.iter().position(|x| x == k).unwrap() + 1].clone();
        assert_eq!(at("--size"), "50");
        assert_eq!(at("--duration"), "1500ms");
        assert_eq!(at("--dst-mac"), SINK_MAC);
        // TCP stream: `--size` is the application write, not a frame.
        let t = GuestOpts::tcp_stream(1024, Duration::from_secs(1), 0);
        let a = t.argv("/bin/vadapt", Path::new("/s"), 0);
        let at = |k: &str| a[a.iter().position(|x| x == k).unwrap() + 1].clone();
        assert_eq!(
            (at("--size").as_str(), at("--mode").as_str()),
            ("1024", "tcp-stream")
        );
        // It pays the guest's measured write cost, passed explicitly; raw frames refuse it.
        assert_eq!(
            (at("--write-cost-ns"), at("--write-cost-ns-per-kib")),
            (
                vadapt_guest::config::DEFAULT_WRITE_COST_NS.to_string(),
                vadapt_guest::config::DEFAULT_WRITE_COST_NS_PER_KIB.to_string()
            )
        );
        assert!(!o
            .argv("/bin/vadapt", Path::new("/s"), 0)
            .iter()
            .any(|x| x.starts_with("--write-cost")));
    }

    #[test]
    fn guest_report_parses() {
        let j = r#"{"sent_packets": 10, "sent_bytes": 640, "recv_packets": 0, "recv_bytes": 0,
          "kicks": 2, "tx_kicks": 2, "rx_kicks": 0, "calls": 1, "ring_full_stalls": 0,
          "latency": {"p50": 1000, "p99": 2000, "p999": 3000, "max": 4000, "mean": 1100, "count": 9},
          "elapsed": 1.5, "cpu_seconds": 0.3, "error": null, "threads": []}"#;
        let r: GuestResult = serde_json::from_str(j).unwrap();
        assert_eq!(r.sent_packets, 10);
        assert_eq!(r.latency.unwrap().p999, 3000);
        assert_eq!(r.elapsed, 1.5);
    }
}
