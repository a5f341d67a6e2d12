//! The control socket: the operator commands talk to the running daemon
//! through it, one [`Request`] each:
//!
//! | request | `cmd` | sent by |
//! |---|---|---|
//! | [`Request::Stats`] | `stats` | `vadapt stats` |
//! | [`Request::Metrics`] | `metrics` | `vadapt stats --prometheus` |
//! | [`Request::SetPolicy`] | `set-policy` | `vadapt set-policy` |
//! | [`Request::Retune`] | `retune` | `vadapt retune` |
//! | [`Request::Cores`] | `cores` | `vadapt cores` |
//! | [`Request::SetCores`] | `set-cores` | `vadapt set-cores` |
//! | [`Request::CoresReport`] | `cores-report` | `vadapt cores report` (and the synthetic guest's `--cores-control`) |
//! | [`Request::AddPort`] | `add-port` | `vadapt add-port` |
//! | [`Request::DelPort`] | `del-port` | `vadapt del-port` |
//! | [`Request::Reload`] | `reload` | `vadapt reload` (and `SIGHUP` to `vadapt serve`, without the socket) |
//! | [`Request::SetLimits`] | `set-limits` | `vadapt set-limits` |
//! | [`Request::Fdb`] | `fdb` | `vadapt fdb` |
//! | [`Request::Trace`] | `trace` | `vadapt trace` |
//! | [`Request::Capture`] | `capture` | `vadapt capture` |
//!
//! The requests that only read ([`Request::only_reads`]: stats, metrics,
//! cores, fdb, trace) never wait on a port, a frontend or the port book.
//!
//! Protocol: the client sends one JSON [`Request`] on one line, the daemon
//! answers one JSON [`Response`] on one line and closes the connection.
//!
//! Except a capture that starts: its answer line ([`Response::Capturing`])
//! is followed by the capture itself, a pcapng stream, written by a thread
//! of its own until the capture ends (`crate::capture_stream`); the client
//! ends it early by shutting down its side of the connection (or closing
//! it), and then reads the stream to its end.

use crate::capture_stream::{write_capture, CaptureSpec, CaptureStartError};
use crate::capture_threads::{CaptureThreadError, CaptureThreads, END_GRACE};
use crate::config::{PortLimits, PortSpec};
use crate::conn_limit::ConnLimit;
use crate::metrics::StatsSnapshot;
use crate::socket_file::{self, Access, SocketFileError, SocketLedger};
use crate::switch::{CaptureSession, FdbListing, FrameSpec, FrameTrace};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use vadapt_policy::{PolicyConfig, Retune};

/// A request to the daemon.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// Every counter.
    Stats,
    /// Prometheus text of every counter.
    Metrics,
    /// Change the policy of a VM port's worker.
    SetPolicy {
        /// Port name.
        port: String,
        /// New policy.
        policy: PolicyConfig,
    },
    /// Change a parameter of a VM port's running policy.
    Retune {
        /// Port name.
        port: String,
        /// The change.
        retune: Retune,
    },
    /// The core manager's state (`vadapt cores`).
    Cores,
    /// Switch the core manager's mode (`vadapt set-cores --mode`).
    SetCores {
        /// The new mode.
        mode: vadapt_policy::vspace::VspaceMode,
    },
    /// A P95 latency sample of the latency-critical workload, for vSPACE's
    /// threshold explorer (`vadapt cores report`).
    CoresReport {
        /// P95 latency, µs (at most [`MAX_P95_US`]).
        p95_us: u64,
    },
    /// Add a port to the running daemon (`vadapt add-port`).
    AddPort {
        /// The port.
        port: PortSpec,
    },
    /// Remove a port from the running daemon (`vadapt del-port`).
    DelPort {
        /// Its name.
        port: String,
    },
    /// Read the configuration again and apply the difference in ports
    /// (`vadapt reload`, or `SIGHUP` to `vadapt serve`).
    Reload,
    /// Change a VM port's rate limits (`vadapt set-limits`): its worker
    /// applies them after its current pass; the frontend stays connected.
    SetLimits {
        /// Port name.
        port: String,
        /// The limits, all of them (a field 0 or absent: no such limit).
        limits: PortLimits,
    },
    /// The switch's forwarding table (`vadapt fdb`).
    Fdb,
    /// Where a frame entering a port would go, and why (`vadapt trace`):
    /// the switch's decision against its table and rules now; nothing is
    /// sent or learned.
    Trace {
        /// The port it enters.
        port: String,
        /// The frame.
        frame: FrameSpec,
    },
    /// Capture a port's frames (`vadapt capture`): answered with
    /// [`Response::Capturing`] and the capture's pcapng stream on the same
    /// connection (see the module docs).
    Capture {
        /// What to capture.
        spec: CaptureSpec,
    },
}

/// The largest P95 sample `cores-report` takes, µs: an hour. Anything
/// longer is no latency measurement, and the daemon refuses it rather than
/// let it drive the threshold explorer.
pub const MAX_P95_US: u64 = 3_600_000_000;

/// The daemon's answer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Response {
    /// Counters.
    Stats {
        /// The snapshot.
        stats: StatsSnapshot,
    },
    /// Prometheus text.
    Metrics {
        /// Exposition text.
        text: String,
    },
    /// The core manager's state.
    Cores {
        /// The state.
        cores: Box<crate::cores::CoresSnapshot>,
    },
    /// What a reload changed.
    Reloaded {
        /// The changes.
        report: ReloadReport,
    },
    /// The forwarding table.
    Fdb {
        /// Its addresses.
        fdb: FdbListing,
    },
    /// A frame's path.
    Trace {
        /// The path, check by check.
        trace: FrameTrace,
    },
    /// A capture started; its pcapng stream follows this line.
    Capturing {
        /// The port.
        port: String,
        /// The snap length, bytes.
        snaplen: u32,
    },
    /// Done.
    Ok,
    /// Failed; `error` says why.
    Error {
        /// One-line reason.
        error: String,
    },
}

/// What a reload changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// Ports added.
    pub added: Vec<String>,
    /// Ports removed.
    pub removed: Vec<String>,
    /// Ports whose configuration changed: removed and added again (their
    /// frontends reconnect).
    pub restarted: Vec<String>,
    /// Ports whose rate limits alone changed: applied in place (their
    /// frontends stay connected).
    #[serde(default)]
    pub limits_changed: Vec<String>,
    /// Ports added at run time (kept in the state file) that a port of the
    /// same name in the file replaced: the file's ports win. The state
    /// file keeps them (a start restores them if the file no longer names
    /// the port).
    #[serde(default)]
    pub replaced_run_time: Vec<String>,
    /// Ports left as they were (the ports added at run time, which a
    /// reload leaves alone, included).
    pub unchanged: usize,
    /// Settings that changed in the file but take a restart of the daemon
    /// (`policy`, `cpus`, `[cores]`, ...): not applied.
    pub need_restart: Vec<String>,
}

impl std::fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        write!(
            f,
            "added: {}; removed: {}; restarted (configuration changed): {}; unchanged: {}",
            list(&self.added),
            list(&self.removed),
            list(&self.restarted),
            self.unchanged
        )?;
        if !self.limits_changed.is_empty() {
            write!(
                f,
                "; rate limits changed in place: {}",
                self.limits_changed.join(", ")
            )?;
        }
        if !self.replaced_run_time.is_empty() {
            write!(
                f,
                "; run-time ports replaced by the file's of the same name: {}",
                self.replaced_run_time.join(", ")
            )?;
        }
        if !self.need_restart.is_empty() {
            write!(
                f,
                "; not applied until the daemon restarts: {}",
                self.need_restart.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Errors of the control channel.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Nothing listens at the path (daemon not running, or another path).
    #[error("cannot connect to the daemon's control socket {path} (is `vadapt serve` running? see --control)")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The exchange broke off.
    #[error("control socket I/O failed")]
    Io(#[from] std::io::Error),
    /// The answer was not valid JSON.
    #[error("malformed answer from the daemon")]
    Decode(#[from] serde_json::Error),
    /// The control socket could not be bound at its path (refused, in
    /// use by another daemon, its folder not made, ...).
    #[error("cannot create the control socket")]
    Socket(#[source] SocketFileError),
    /// The control socket's thread could not be started.
    #[error("cannot start the control socket's thread")]
    Spawn(#[source] std::io::Error),
    /// A capture's writer could not be started.
    #[error("cannot start the capture")]
    Capture(#[source] CaptureThreadError),
}

/// Send one request to the daemon at `path`.
pub fn request(path: &Path, req: &Request) -> Result<Response, ControlError> {
    let mut s = UnixStream::connect(path).map_err(|source| ControlError::Connect {
        path: path.to_owned(),
        source,
    })?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer)?;
    Ok(serde_json::from_str(&answer)?)
}

/// What the control server asks of the daemon.
pub trait Handler: Send + Sync {
    /// Answer one request.
    fn handle(&self, req: Request) -> Response;

    /// Start the capture `spec` asks for (a [`Request::Capture`], which
    /// [`handle`](Self::handle) never gets from the server). By default
    /// there is nothing to capture.
    fn capture(&self, spec: &CaptureSpec) -> Result<CaptureSession, CaptureStartError> {
        let _ = spec;
        Err(CaptureStartError::Unavailable)
    }
}

/// Bind the control socket (mode 0600, parent directory created) as
/// [`socket_file::bind`] says, keep it in `sockets`, and serve requests on a
/// thread until `stop` is set; the thread removes the socket as it ends
/// (through `sockets`: only if it is still the one bound).
pub fn serve(
    path: &Path,
    handler: Arc<dyn Handler>,
    stop: Arc<AtomicBool>,
    sockets: &SocketLedger,
) -> Result<std::thread::JoinHandle<()>, ControlError> {
    let access = Access {
        mode: 0o600,
        gid: None,
    };
    let (listener, owned) = socket_file::bind(path, access).map_err(ControlError::Socket)?;
    sockets.keep(owned);
    let (ledger, bound) = (sockets.clone(), path.to_owned());
    let spawned = std::thread::Builder::new()
        .name("vadapt-control".into())
        .spawn(move || {
            let dispatcher = Arc::new(Dispatcher::new(handler));
            let served = Arc::clone(&dispatcher);
            crate::local_server::run("control", &stop, |stop| async move {
                let listener = match tokio::net::UnixListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "control socket unusable");
                        return;
                    }
                };
                let limit = ConnLimit::new("control", MAX_CONNECTIONS);
                let dispatcher = served;
                while let Some(accepted) = stop.until_stopped(listener.accept()).await {
                    match accepted {
                        Ok((conn, _)) => {
                            let d = Arc::clone(&dispatcher);
                            limit.spawn(async move {
                                if let Err(e) = answer(conn, &d).await {
                                    tracing::debug!(error = %e, "control connection failed");
                                }
                            });
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "control socket accept failed");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            });
            // The running captures end with their statistics blocks
            // before the daemon goes on to exit.
            dispatcher.end_captures();
            ledger.release(&bound);
        });
    spawned.map_err(|e| {
        sockets.release(path);
        ControlError::Spawn(e)
    })
}

/// Most control connections open at once (see [`ConnLimit`]).
pub const MAX_CONNECTIONS: usize = 64;
/// Longest a client may take to send its request, and to take the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request line read.
const MAX_REQUEST: u64 = 64 * 1024;

/// Longest the answer to a request that changes ports or policies waits
/// for the work: past it the client is told the work goes on and where its
/// outcome will be (the daemon's log). Under the client's own 10-s timeout
/// ([`request`]).
pub const HANDLE_DEADLINE: Duration = Duration::from_secs(8);

/// Most requests that change something in their own threads at once; past
/// it a new one is refused at once. They wait on one another (the port
/// book's lock), so more would only pile threads behind a stuck one.
pub const MAX_CHANGES_IN_FLIGHT: usize = 8;

/// Hands each request to the daemon's [`Handler`] so that no request can
/// hold up another: those that only read (`stats`, `metrics`, `cores`,
/// `fdb`, `trace`)
/// are answered at once on the server's runtime, since they take no lock
/// a port operation holds while it waits; those that change ports or
/// policies, which may wait on a frontend, a worker or the port book, run
/// on a thread of their own with [`HANDLE_DEADLINE`].
pub struct Dispatcher {
    handler: Arc<dyn Handler>,
    changes: Arc<tokio::sync::Semaphore>,
    /// The running captures' writers, ended and joined when the server
    /// ends ([`Dispatcher::end_captures`]).
    captures: CaptureThreads,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("changes_free", &self.changes.available_permits())
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// Requests go to `handler`.
    pub fn new(handler: Arc<dyn Handler>) -> Self {
        Dispatcher {
            handler,
            changes: Arc::new(tokio::sync::Semaphore::new(MAX_CHANGES_IN_FLIGHT)),
            captures: CaptureThreads::default(),
        }
    }

    /// End every running capture cleanly (each writes its statistics
    /// block) and join its thread, within about [`END_GRACE`]: a client
    /// that does not read is cut off. New captures are refused from now on.
    pub fn end_captures(&self) {
        let cut = self.captures.end_all(END_GRACE);
        if cut > 0 {
            tracing::warn!(
                cut,
                "captures whose clients did not read were cut off at shutdown"
            );
        }
    }

    /// The answer to `req` (see the type's docs).
    pub async fn dispatch(&self, req: Request) -> Response {
        if req.only_reads() {
            return self.handler.handle(req);
        }
        let what = req.name();
        let Ok(permit) = Arc::clone(&self.changes).try_acquire_owned() else {
            return Response::Error {
                error: format!(
                    "`{what}` refused: {MAX_CHANGES_IN_FLIGHT} port or policy changes are \
                     still running (the daemon's log says which); try again later"
                ),
            };
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let handler = Arc::clone(&self.handler);
        let spawned = std::thread::Builder::new()
            .name("vadapt-control-req".into())
            .spawn(move || {
                let _permit = permit;
                let resp = handler.handle(req);
                if let Err(resp) = tx.send(resp) {
                    tracing::warn!(
                        request = what,
                        outcome = ?resp,
                        "control request finished after its client was answered (deadline {} s)",
                        HANDLE_DEADLINE.as_secs()
                    );
                }
            });
        if let Err(e) = spawned {
            return Response::Error {
                error: format!("cannot start a thread for `{what}`: {e}"),
            };
        }
        match tokio::time::timeout(HANDLE_DEADLINE, rx).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(_)) => Response::Error {
                error: format!("`{what}` failed inside the daemon; see its log"),
            },
            Err(_) => {
                tracing::warn!(
                    request = what,
                    "control request still running after {} s; its outcome will be logged",
                    HANDLE_DEADLINE.as_secs()
                );
                Response::Error {
                    error: format!(
                        "`{what}` is still running after {} s; its outcome will be in the \
                         daemon's log",
                        HANDLE_DEADLINE.as_secs()
                    ),
                }
            }
        }
    }
}

impl Request {
    /// The request's name on the wire (`cmd`).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Stats => "stats",
            Request::Metrics => "metrics",
            Request::SetPolicy { .. } => "set-policy",
            Request::Retune { .. } => "retune",
            Request::Cores => "cores",
            Request::SetCores { .. } => "set-cores",
            Request::CoresReport { .. } => "cores-report",
            Request::AddPort { .. } => "add-port",
            Request::DelPort { .. } => "del-port",
            Request::Reload => "reload",
            Request::SetLimits { .. } => "set-limits",
            Request::Fdb => "fdb",
            Request::Trace { .. } => "trace",
            Request::Capture { .. } => "capture",
        }
    }

    /// Whether the request only reads counters or state (never waits on a
    /// port, a frontend or the port book). A capture reads frames, and
    /// starting one takes the switch's lock once, as `trace` does.
    pub fn only_reads(&self) -> bool {
        matches!(
            self,
            Request::Stats
                | Request::Metrics
                | Request::Cores
                | Request::Fdb
                | Request::Trace { .. }
                | Request::Capture { .. }
        )
    }
}

/// Answer one control connection: read its request line (at most
/// 64 KiB, within [`REQUEST_TIMEOUT`]), hand it to `dispatcher`, write the
/// response line. What [`serve`] runs for each client; public so that the
/// fuzzer drives it in-process, on a socket pair of its own.
pub async fn answer(
    conn: tokio::net::UnixStream,
    dispatcher: &Dispatcher,
) -> Result<(), ControlError> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let timed_out = || ControlError::Io(std::io::ErrorKind::TimedOut.into());
    let (rd, mut wr) = conn.into_split();
    let mut line = String::new();
    // Bound the request size: a control client is local but still untrusted input.
    let mut reader = tokio::io::BufReader::new(rd.take(MAX_REQUEST));
    tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line))
        .await
        .map_err(|_| timed_out())??;
    let mut capture = None;
    let resp = match serde_json::from_str::<Request>(&line) {
        Ok(Request::Capture { spec }) => match dispatcher.handler.capture(&spec) {
            Ok(session) => {
                let resp = Response::Capturing {
                    port: spec.port.clone(),
                    snaplen: spec.snaplen,
                };
                capture = Some((session, spec));
                resp
            }
            Err(e) => Response::Error {
                error: e.to_string(),
            },
        },
        Ok(req) => dispatcher.dispatch(req).await,
        Err(e) => Response::Error {
            error: format!("bad request: {e}"),
        },
    };
    let mut out = serde_json::to_string(&resp)?;
    out.push('\n');
    tokio::time::timeout(REQUEST_TIMEOUT, wr.write_all(out.as_bytes()))
        .await
        .map_err(|_| timed_out())??;
    if let Some((session, spec)) = capture {
        let conn = reader
            .into_inner()
            .into_inner()
            .reunite(wr)
            .map_err(|e| ControlError::Io(std::io::Error::other(e.to_string())))?;
        let conn = conn.into_std()?;
        conn.set_nonblocking(false)?;
        conn.set_write_timeout(Some(CAPTURE_SEND_TIMEOUT))?;
        dispatcher
            .captures
            .spawn(conn, move |conn, stopping| {
                stream_capture(&session, &spec, conn, stopping);
            })
            .map_err(ControlError::Capture)?;
    }
    Ok(())
}

/// Longest a capture's writer waits for its client to take more of the
/// stream; past it the capture ends (a client that stopped reading).
pub const CAPTURE_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// A capture's thread: write it to `conn` until it ends (or `stopping`
/// is set), then log how.
fn stream_capture(
    session: &CaptureSession,
    spec: &CaptureSpec,
    conn: &UnixStream,
    stopping: &AtomicBool,
) {
    let gone = |wait: Duration| client_gone(conn, wait);
    let out = std::io::BufWriter::with_capacity(1 << 16, conn);
    match write_capture(session, spec, out, stopping, gone) {
        Ok(s) => tracing::info!(
            port = %spec.port,
            end = ?s.end,
            written = s.written,
            dropped = s.dropped,
            "capture ended"
        ),
        Err(e) => tracing::info!(port = %spec.port, error = %e, "capture ended: client gone"),
    }
}

/// Whether the client of `conn` has closed or shut down its side (or sent
/// anything, which a capture's client does not), waiting up to `wait`
/// for it to.
fn client_gone(conn: &UnixStream, wait: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: conn.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfd` is one valid pollfd for the duration of the call, and
    // its fd is `conn`'s, open while `conn` is borrowed.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0 && pfd.revents != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::Ordering;

    struct Echoer;
    impl Handler for Echoer {
        fn handle(&self, req: Request) -> Response {
            match req {
                Request::Stats => Response::Stats {
                    stats: StatsSnapshot::default(),
                },
                Request::Metrics => Response::Metrics { text: "x".into() },
                Request::Fdb => Response::Fdb {
                    fdb: FdbListing::default(),
                },
                Request::Trace { .. } => Response::Trace {
                    trace: FrameTrace::default(),
                },
                Request::Capture { .. } => Response::Error {
                    error: "not here".into(),
                },
                Request::SetPolicy { port, .. } if port == "vm1" => Response::Ok,
                Request::SetPolicy { port, .. }
                | Request::Retune { port, .. }
                | Request::SetLimits { port, .. } => Response::Error {
                    error: format!("no port {port}"),
                },
                Request::Cores | Request::SetCores { .. } | Request::CoresReport { .. } => {
                    Response::Error {
                        error: "no core manager".into(),
                    }
                }
                Request::AddPort { .. } | Request::DelPort { .. } | Request::Reload => {
                    Response::Error {
                        error: "no ports here".into(),
                    }
                }
            }
        }
    }

    #[test]
    fn idle_clients_never_block_a_request() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let stop = Arc::new(AtomicBool::new(false));
        let t = serve(
            &path,
            Arc::new(Echoer),
            stop.clone(),
            &SocketLedger::default(),
        )
        .unwrap();
        // More idle connections than the server keeps: the oldest are closed
        // to make room, and a real request is answered all the same.
        let idle: Vec<_> = (0..500)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        assert!(matches!(
            request(&path, &Request::Stats).unwrap(),
            Response::Stats { .. }
        ));
        // A slow client that sends half a line is cut off, not waited for.
        let mut slow = UnixStream::connect(&path).unwrap();
        slow.write_all(b"{\"cmd\":").unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut a = String::new();
        let n = BufReader::new(&slow).read_line(&mut a).unwrap_or(0);
        assert_eq!(n, 0, "a half request got an answer: {a}");
        drop(idle);
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }

    #[test]
    fn request_response_roundtrip_and_errors() {
        let dir = std::env::temp_dir().join(format!("vadapt-ctl-{}", std::process::id()));
        let path = dir.join("c.sock");
        let stop = Arc::new(AtomicBool::new(false));
        let t = serve(
            &path,
            Arc::new(Echoer),
            stop.clone(),
            &SocketLedger::default(),
        )
        .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(matches!(
            request(&path, &Request::Stats).unwrap(),
            Response::Stats { .. }
        ));
        let sp = Request::SetPolicy {
            port: "vm9".into(),
            policy: PolicyConfig::BusyPoll,
        };
        assert!(matches!(
            request(&path, &sp).unwrap(),
            Response::Error { .. }
        ));
        // Garbage gets an error answer, and the server keeps serving.
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"{not json\n").unwrap();
        let mut a = String::new();
        BufReader::new(s).read_line(&mut a).unwrap();
        assert!(a.contains("bad request"), "{a}");
        assert!(matches!(
            request(&path, &Request::Metrics).unwrap(),
            Response::Metrics { .. }
        ));
        // A second daemon on the same path is refused.
        assert!(serve(
            &path,
            Arc::new(Echoer),
            stop.clone(),
            &SocketLedger::default()
        )
        .is_err());
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(dir);
        let e = request(&path, &Request::Stats).unwrap_err().to_string();
        assert!(e.contains("vadapt serve"), "{e}");
    }
}
