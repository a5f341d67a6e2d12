//! `--qmp PATH`: a QMP socket, so that the core manager finds this guest's vCPU threads, and
//! pauses it, exactly as it does a QEMU VM's (`vadapt_qemu::qmp`).
//!
//! What is said on a connection is [`crate::server::qmp_session`]; this module owns the socket:
//!
//! * **One client at a time**, as a QEMU `-qmp unix:PATH,server=on` chardev: later clients
//!   wait in the listen backlog until the current one leaves.
//! * **Bounded**: a client that sends no complete line for [`QmpServerLimits::idle_timeout`]
//!   is dropped, so a silent client delays the next by at most that long; a line longer than
//!   [`QmpServerLimits::max_line`] is answered with a `GenericError` and the connection
//!   closed (the stream cannot be resynchronised cheaply); blank lines are skipped.
//! * **Owned path**: [`QmpServer::bind`] replaces a stale socket file nobody listens on and
//!   refuses a live one or a file that is not a socket; dropping the server stops its thread
//!   (within [`POLL_SLICE`]) and removes the socket file.
//!
//! Lines go out ending in CRLF, as QEMU's do.
//!
//! The same server speaks the guest agent's dialect ([`QmpServer::bind_agent`], `--qga
//! PATH`): no greeting, and each line is answered by a [`QgaSession`].

use std::io::{self, ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::json_lines::{JsonLines, LineError};
use crate::server::qga_session::QgaSession;
use crate::server::qmp_session::{self, QmpSession};
use crate::server::vcpus::Vcpus;

/// Longest the server thread waits before it looks at its stop flag (accepting, reading).
pub const POLL_SLICE: Duration = Duration::from_millis(50);

/// Bounds on each QMP client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QmpServerLimits {
    /// Longest a client may go without completing a line before it is dropped.
    pub idle_timeout: Duration,
    /// Longest line accepted, bytes (without its line end).
    pub max_line: usize,
}

impl Default for QmpServerLimits {
    /// 2 s idle (the core manager's own QMP timeout), 64 KiB lines (a command is ~50 bytes).
    fn default() -> Self {
        QmpServerLimits {
            idle_timeout: Duration::from_secs(2),
            max_line: 64 * 1024,
        }
    }
}

/// Why the QMP socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum QmpServerError {
    /// Something other than a socket is at the path.
    #[error("--qmp {0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// Another process listens on the path.
    #[error("--qmp {0} is in use by another process")]
    InUse(PathBuf),
    /// A stale socket file could not be removed.
    #[error("cannot remove the stale socket --qmp {path}")]
    RemoveStale {
        /// The socket.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Binding or configuring the listening socket failed.
    #[error("cannot listen on --qmp {path}")]
    Bind {
        /// The socket.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The serving thread could not be started.
    #[error("cannot start the QMP server thread")]
    Spawn(#[source] io::Error),
}

/// A QMP socket served on a thread of its own until dropped. See the module documentation.
#[derive(Debug)]
pub struct QmpServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl QmpServer {
    /// Listens on `path` with [`QmpServerLimits::default`] and serves `vcpus`.
    pub fn bind(path: &Path, vcpus: Arc<Vcpus>) -> Result<QmpServer, QmpServerError> {
        QmpServer::bind_with(path, vcpus, QmpServerLimits::default())
    }

    /// As [`QmpServer::bind`], with `limits`.
    pub fn bind_with(
        path: &Path,
        vcpus: Arc<Vcpus>,
        limits: QmpServerLimits,
    ) -> Result<QmpServer, QmpServerError> {
        QmpServer::bind_dialect(path, vcpus, limits, Dialect::Qmp)
    }

    /// Listens on `path` as a QEMU guest agent for a guest using `pairs` queue pairs (see
    /// [`QgaSession`]), with [`QmpServerLimits::default`].
    pub fn bind_agent(
        path: &Path,
        vcpus: Arc<Vcpus>,
        pairs: u16,
    ) -> Result<QmpServer, QmpServerError> {
        QmpServer::bind_dialect(
            path,
            vcpus,
            QmpServerLimits::default(),
            Dialect::Agent { pairs },
        )
    }

    fn bind_dialect(
        path: &Path,
        vcpus: Arc<Vcpus>,
        limits: QmpServerLimits,
        dialect: Dialect,
    ) -> Result<QmpServer, QmpServerError> {
        remove_stale(path)?;
        let bind_err = |source| QmpServerError::Bind {
            path: path.to_path_buf(),
            source,
        };
        let listener = UnixListener::bind(path).map_err(bind_err)?;
        // From here on the file is ours: dropping `server` removes it, also on error.
        let mut server = QmpServer {
            path: path.to_path_buf(),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        listener.set_nonblocking(true).map_err(bind_err)?;
        let stop = Arc::clone(&server.stop);
        let thread = std::thread::Builder::new()
            .name("guest-qmp".into())
            .spawn(move || serve(&listener, &vcpus, limits, &stop, dialect))
            .map_err(QmpServerError::Spawn)?;
        server.thread = Some(thread);
        Ok(server)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for QmpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Clears `path` for binding: nothing there, or a socket file nobody listens on.
fn remove_stale(path: &Path) -> Result<(), QmpServerError> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(QmpServerError::NotASocket(path.to_path_buf()));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(QmpServerError::InUse(path.to_path_buf()));
    }
    std::fs::remove_file(path).map_err(|source| QmpServerError::RemoveStale {
        path: path.to_path_buf(),
        source,
    })
}

/// Which protocol a server speaks.
#[derive(Clone, Copy, Debug)]
enum Dialect {
    /// QMP: a greeting, then [`QmpSession`].
    Qmp,
    /// The guest agent: [`QgaSession`] for a guest using `pairs` queue pairs.
    Agent { pairs: u16 },
}

/// One connection's conversation in either dialect.
enum Session {
    Qmp(QmpSession),
    Agent(QgaSession),
}

/// The server thread: accept, serve to the end, accept the next; until `stop`.
fn serve(
    listener: &UnixListener,
    vcpus: &Vcpus,
    limits: QmpServerLimits,
    stop: &AtomicBool,
    dialect: Dialect,
) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = serve_client(stream, vcpus, limits, stop, dialect) {
                    tracing::debug!("QMP client: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_readable(listener, POLL_SLICE),
            Err(e) => {
                // EMFILE and the like: back off rather than spin, and keep serving.
                tracing::warn!("QMP accept failed: {e}");
                std::thread::sleep(POLL_SLICE);
            }
        }
    }
}

/// Waits until `listener` has a connection to accept, or `timeout`.
#[allow(unsafe_code)] // one poll(2), explained below
fn wait_readable(listener: &UnixListener, timeout: Duration) {
    let mut p = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd living across the call. The result needs no handling:
    // the caller tries `accept` again either way.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
}

/// How a client's connection ended, when not by its own hang-up.
#[derive(Debug, thiserror::Error)]
enum ClientEnd {
    #[error("dropped after {0:?} without a complete line")]
    Idle(Duration),
    #[error("dropped for a line longer than {0} bytes")]
    LineTooLong(usize),
    #[error("I/O failed")]
    Io(#[from] io::Error),
}

/// One connection: greeting, then a reply (and events) per line, until the client hangs
/// up, goes silent, oversteps a limit, or the server stops.
fn serve_client(
    mut stream: UnixStream,
    vcpus: &Vcpus,
    limits: QmpServerLimits,
    stop: &AtomicBool,
    dialect: Dialect,
) -> Result<(), ClientEnd> {
    // Accepted sockets do not inherit the listener's O_NONBLOCK on Linux, but say so.
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(limits.idle_timeout.max(POLL_SLICE)))?;
    let mut session = match dialect {
        Dialect::Qmp => {
            send(&mut stream, &[qmp_session::greeting()])?;
            Session::Qmp(QmpSession::new())
        }
        Dialect::Agent { pairs } => Session::Agent(QgaSession::new(pairs)),
    };
    let mut lines = JsonLines::new(stream, limits.max_line);
    let mut idle_since = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Short slices, to notice the server's stop; a line cut short by
        // one is completed by the next (clients may pipeline commands).
        let line = match lines.read_line(Instant::now() + POLL_SLICE) {
            Ok(line) => line,
            Err(LineError::Timeout) if idle_since.elapsed() >= limits.idle_timeout => {
                return Err(ClientEnd::Idle(limits.idle_timeout));
            }
            Err(LineError::Timeout) => continue,
            Err(LineError::Closed) => return Ok(()),
            Err(LineError::TooLong { limit }) => {
                let refusal = qmp_session::error("GenericError", "JSON message too long");
                let _ = send(lines.stream_mut(), &[refusal]);
                return Err(ClientEnd::LineTooLong(limit));
            }
            Err(LineError::Read(e) | LineError::SetTimeout(e)) => return Err(e.into()),
        };
        idle_since = Instant::now();
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let now_unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        match &mut session {
            Session::Qmp(q) => send(lines.stream_mut(), &q.handle(line, vcpus, now_unix))?,
            Session::Agent(a) => lines.stream_mut().write_all(&a.handle(line, vcpus))?,
        }
    }
}

/// Writes each message as one CRLF-terminated line.
fn send(stream: &mut UnixStream, messages: &[Value]) -> io::Result<()> {
    let mut out = String::new();
    for m in messages {
        out.push_str(&m.to_string());
        out.push_str("\r\n");
    }
    stream.write_all(out.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qmp::{self, QmpClient, QmpError, QmpLimits};
    use std::io::{BufRead, BufReader};
    use vadapt_host::TaskId;

    fn quick() -> QmpServerLimits {
        QmpServerLimits {
            idle_timeout: Duration::from_millis(300),
            max_line: 1024,
        }
    }

    /// A raw client: write lines, read CRLF lines as JSON.
    struct Raw {
        stream: UnixStream,
        reader: BufReader<UnixStream>,
    }

    impl Raw {
        fn connect(path: &Path) -> Raw {
            let stream = UnixStream::connect(path).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let reader = BufReader::new(stream.try_clone().unwrap());
            Raw { stream, reader }
        }

        fn send(&mut self, bytes: &[u8]) {
            self.stream.write_all(bytes).unwrap();
        }

        fn recv(&mut self) -> Value {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            assert!(line.ends_with("\r\n"), "{line:?}");
            serde_json::from_str(&line).unwrap()
        }

        /// Whether the server closed the connection: EOF before any byte, or a reset (a
        /// unix socket closed with our bytes unread resets).
        fn closed(&mut self) -> bool {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(n) => n == 0,
                Err(e) => e.kind() == ErrorKind::ConnectionReset,
            }
        }
    }

    /// "vCPU" threads that register their tids and count their passes through the pause
    /// point, as the sending threads do.
    struct FakeVcpus {
        vcpus: Arc<Vcpus>,
        passes: Arc<Vec<std::sync::atomic::AtomicU64>>,
        stop: Arc<AtomicBool>,
        threads: Vec<JoinHandle<()>>,
    }

    impl FakeVcpus {
        fn start(n: u32) -> FakeVcpus {
            let vcpus = Arc::new(Vcpus::new());
            let passes: Arc<Vec<_>> = Arc::new(
                (0..n)
                    .map(|_| std::sync::atomic::AtomicU64::new(0))
                    .collect(),
            );
            let stop = Arc::new(AtomicBool::new(false));
            let threads = (0..n)
                .map(|i| {
                    let (vcpus, passes, stop) =
                        (Arc::clone(&vcpus), Arc::clone(&passes), Arc::clone(&stop));
                    std::thread::spawn(move || {
                        vcpus.register(i, vadapt_host::cputime::current_tid());
                        while !stop.load(Ordering::Relaxed) {
                            if vcpus.wait_while_paused(Duration::from_millis(10)) {
                                continue;
                            }
                            passes[i as usize].fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        vcpus.unregister(i);
                    })
                })
                .collect();
            let f = FakeVcpus {
                vcpus,
                passes,
                stop,
                threads,
            };
            while f.vcpus.threads().len() < n as usize {
                std::thread::sleep(Duration::from_millis(1));
            }
            f
        }

        fn total(&self) -> u64 {
            self.passes.iter().map(|p| p.load(Ordering::Relaxed)).sum()
        }

        fn join(self) {
            self.stop.store(true, Ordering::Relaxed);
            self.vcpus.resume();
            for t in self.threads {
                t.join().unwrap();
            }
        }
    }

    #[test]
    fn the_core_managers_client_finds_the_live_vcpu_threads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.qmp");
        let fake = FakeVcpus::start(3);
        let server = QmpServer::bind(&path, Arc::clone(&fake.vcpus)).unwrap();
        // The very call the core manager makes, twice: clients are served one after another.
        for _ in 0..2 {
            let threads = qmp::vcpu_threads(&path).unwrap();
            assert_eq!(
                threads.iter().map(|t| t.cpu_index).collect::<Vec<_>>(),
                [0, 1, 2]
            );
            for t in &threads {
                assert!(
                    Path::new(&format!("/proc/self/task/{}", t.thread_id)).exists(),
                    "{t:?} is a thread of this process"
                );
                let me = std::process::id();
                let task = TaskId::of_process(Path::new("/proc"), me, t.thread_id).unwrap();
                assert_eq!(task.pid, me);
            }
        }
        fake.join();
        assert_eq!(qmp::vcpu_threads(&path).unwrap(), []);
        drop(server);
        assert!(!path.exists(), "the socket file is removed on drop");
    }

    #[test]
    fn stop_and_cont_really_pause_the_vcpus() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.qmp");
        let fake = FakeVcpus::start(2);
        let _server = QmpServer::bind(&path, Arc::clone(&fake.vcpus)).unwrap();
        let mut c = QmpClient::connect(&path).unwrap();
        assert_eq!(c.execute("stop").unwrap(), serde_json::json!({}));
        // Let any pass under way finish, then nothing moves.
        std::thread::sleep(Duration::from_millis(30));
        let before = fake.total();
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(fake.total(), before, "paused threads make no progress");
        assert_eq!(c.execute("query-status").unwrap()["status"], "paused");
        assert_eq!(c.execute("cont").unwrap(), serde_json::json!({}));
        let start = Instant::now();
        while fake.total() < before + 10 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "resumed threads run"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(c);
        fake.join();
    }

    #[test]
    fn garbage_and_unknown_commands_get_errors_and_the_connection_survives() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.qmp");
        let vcpus = Arc::new(Vcpus::new());
        let _server = QmpServer::bind_with(&path, Arc::clone(&vcpus), quick()).unwrap();
        let mut raw = Raw::connect(&path);
        assert_eq!(raw.recv(), qmp_session::greeting());
        raw.send(b"{\"execute\": \"stop\"}\n");
        assert_eq!(raw.recv()["error"]["class"], "CommandNotFound");
        assert!(!vcpus.is_paused());
        raw.send(b"\xff\xfe not json\r\n\n  \n");
        assert_eq!(raw.recv()["error"]["class"], "GenericError");
        // Two commands in one write, CRLF-terminated like QEMU's own lines.
        raw.send(b"{\"execute\": \"qmp_capabilities\"}\r\n{\"execute\": \"eject\", \"id\": 1}\r\n");
        assert_eq!(raw.recv(), serde_json::json!({"return": {}}));
        let r = raw.recv();
        assert_eq!(r["error"]["class"], "CommandNotFound");
        assert_eq!(r["id"], 1);
        // A command split across writes.
        raw.send(b"{\"execute\": \"query-");
        std::thread::sleep(Duration::from_millis(20));
        raw.send(b"status\"}\n");
        assert_eq!(raw.recv()["return"]["running"], true);

        // The core manager's client sees the same error, typed.
        drop(raw);
        let mut c = QmpClient::connect(&path).unwrap();
        let e = c.execute("eject").unwrap_err();
        assert!(
            matches!(&e, QmpError::CommandFailed { class, .. } if class == "CommandNotFound"),
            "{e:?}"
        );
    }

    #[test]
    fn an_overlong_line_is_refused_and_the_client_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.qmp");
        let _server = QmpServer::bind_with(&path, Arc::new(Vcpus::new()), quick()).unwrap();
        let mut raw = Raw::connect(&path);
        raw.recv();
        // Ignore write errors: the server may hang up before taking all of it.
        let _ = raw.stream.write_all(&[b'x'; 4096]);
        let r = raw.recv();
        assert_eq!(r["error"]["class"], "GenericError");
        assert!(raw.closed());
        // The next client is served.
        assert!(qmp::vcpu_threads(&path).is_ok());
    }

    #[test]
    fn a_silent_client_does_not_block_the_next_one_for_long() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.qmp");
        let _server = QmpServer::bind_with(&path, Arc::new(Vcpus::new()), quick()).unwrap();
        let mut silent = Raw::connect(&path);
        silent.recv();
        // Half a command, then nothing: dropped after the idle timeout (300 ms).
        silent.send(b"{\"execute\":");
        let start = Instant::now();
        let limits = QmpLimits {
            timeout: Duration::from_secs(3),
            ..QmpLimits::default()
        };
        let mut c = QmpClient::connect_with(&path, limits).unwrap();
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        assert_eq!(c.query_cpus_fast().unwrap(), []);
        assert!(silent.closed());
    }

    #[test]
    fn the_path_is_checked_before_binding() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        let e = QmpServer::bind(&file, Arc::new(Vcpus::new())).unwrap_err();
        assert!(matches!(e, QmpServerError::NotASocket(_)), "{e:?}");
        assert!(file.exists(), "not ours to remove");

        let live = dir.path().join("live.qmp");
        let first = QmpServer::bind(&live, Arc::new(Vcpus::new())).unwrap();
        let e = QmpServer::bind(&live, Arc::new(Vcpus::new())).unwrap_err();
        assert!(matches!(e, QmpServerError::InUse(_)), "{e:?}");
        drop(first);

        // A stale socket (its listener gone without removing it) is replaced.
        let stale = dir.path().join("stale.qmp");
        drop(UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        let _server = QmpServer::bind(&stale, Arc::new(Vcpus::new())).unwrap();
        assert!(qmp::vcpu_threads(&stale).is_ok());

        let e = QmpServer::bind(&dir.path().join("no/such/dir.qmp"), Arc::new(Vcpus::new()));
        assert!(matches!(e, Err(QmpServerError::Bind { .. })));
    }
}
