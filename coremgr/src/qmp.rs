//! A minimal, bounded QMP client: which host thread runs each vCPU of a
//! QEMU VM (vSPACE pins them).
//!
//! QMP (QEMU Machine Protocol) is line-delimited JSON over a unix socket
//! (QEMU's `-qmp unix:<path>,server=on,wait=off`). The exchange this client
//! makes:
//!
//! ```text
//!   QEMU -> {"QMP": {"version": {...}, "capabilities": [...]}}      greeting
//!   us   -> {"execute": "qmp_capabilities"}
//!   QEMU -> {"return": {}}
//!   us   -> {"execute": "query-cpus-fast"}
//!   QEMU -> {"event": "...", ...}                                    any time
//!   QEMU -> {"return": [{"cpu-index": 0, "thread-id": 1234, ...}, ...]}
//! ```
//!
//! Everything is bounded so that a QEMU that hangs, dies or misbehaves costs
//! the core manager one period, never its loop: each wait (the greeting, each
//! reply) has a deadline ([`QmpLimits::timeout`], 2 s by default) that covers
//! every read of it, so a socket that trickles bytes or streams events
//! forever still times out; a message longer than [`QmpLimits::max_line`]
//! (1 MiB) is refused without being read to its end; asynchronous
//! `{"event": ...}` messages are skipped. Each failure is a [`QmpError`].
//! After any error other than [`QmpError::CommandFailed`] and
//! [`QmpError::ParseReply`] the stream may be out of step, so the client
//! refuses further commands ([`QmpError::Unusable`]): reconnect.
//!
//! Plain `serde_json` rather than the `qapi` crate: two commands do not
//! warrant its generated schema, and its sync client has no deadlines.
//!
//! Sends use `write(2)`: a QEMU gone mid-write raises `SIGPIPE`, which Rust
//! programs (the daemon, the test harness) ignore, so it is [`QmpError::Send`].
//!
//! ```no_run
//! use std::path::Path;
//! use vadapt_coremgr::qmp;
//!
//! for t in qmp::vcpu_threads(Path::new("/run/vm0.qmp"))? {
//!     println!("vCPU {} runs on host thread {}", t.cpu_index, t.thread_id);
//! }
//! # Ok::<(), qmp::QmpError>(())
//! ```

use serde::Deserialize;
use std::io::{self, BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bounds on one QMP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmpLimits {
    /// Longest wait for the greeting or for one reply (however many reads and
    /// skipped events it takes), and for one send.
    pub timeout: Duration,
    /// Longest message accepted, bytes (without its line end).
    pub max_line: usize,
}

impl Default for QmpLimits {
    fn default() -> Self {
        QmpLimits {
            timeout: Duration::from_secs(2),
            max_line: 1 << 20,
        }
    }
}

/// A QMP exchange failed. See the module documentation.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// Connecting to the socket failed (no such socket, QEMU not listening).
    #[error("failed to connect to the QMP socket {path}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Setting the socket's read or write timeout failed.
    #[error("failed to set the QMP socket's timeouts")]
    SetTimeout(#[source] io::Error),
    /// Writing a command failed (including a write timeout, or QEMU gone).
    #[error("failed to send `{command}`")]
    Send {
        /// The command.
        command: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading failed for a reason other than a timeout.
    #[error("failed to read from the QMP socket")]
    Read(#[source] io::Error),
    /// Nothing complete arrived before the deadline.
    #[error("no {waiting_for} within {timeout:?}")]
    Timeout {
        /// What was expected: "greeting" or "reply to `<command>`".
        waiting_for: String,
        /// The deadline that passed.
        timeout: Duration,
    },
    /// QEMU closed the socket (e.g. it exited) before a complete message.
    #[error("QEMU closed the QMP socket while we waited for its {waiting_for}")]
    Closed {
        /// What was expected.
        waiting_for: String,
    },
    /// A message was longer than the limit; it was not read to its end.
    #[error("a QMP message exceeded {limit} bytes")]
    LineTooLong {
        /// [`QmpLimits::max_line`].
        limit: usize,
    },
    /// A line was not a JSON object.
    #[error("a QMP message is not a JSON object: {line}")]
    Malformed {
        /// The line, cut to 200 bytes.
        line: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The first message was not a QMP greeting.
    #[error("expected the QMP greeting, got: {line}")]
    NoGreeting {
        /// The message, cut to 200 bytes.
        line: String,
    },
    /// A message was neither a reply nor an event.
    #[error("unexpected message while waiting for the reply to `{command}`: {line}")]
    UnexpectedMessage {
        /// The command sent.
        command: String,
        /// The message, cut to 200 bytes.
        line: String,
    },
    /// QEMU answered with an `error` (e.g. `CommandNotFound`). The connection
    /// stays usable.
    #[error("QEMU refused `{command}`: {class}: {desc}")]
    CommandFailed {
        /// The command.
        command: String,
        /// QMP's error class, e.g. `GenericError`, `CommandNotFound`.
        class: String,
        /// QEMU's description.
        desc: String,
    },
    /// A `return` did not have the shape the command documents. The
    /// connection stays usable.
    #[error("failed to parse the reply to `{command}`")]
    ParseReply {
        /// The command.
        command: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// An earlier error may have left the stream out of step; reconnect.
    #[error("the QMP connection is unusable after an earlier error")]
    Unusable,
}

/// One vCPU and the host thread that runs it, from `query-cpus-fast`.
///
/// Under KVM each vCPU has a thread of its own; under TCG without MTTCG all
/// vCPUs report the same thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
pub struct VcpuThread {
    /// The vCPU's index (`cpu-index`).
    #[serde(rename = "cpu-index")]
    pub cpu_index: u32,
    /// The host thread id (`thread-id`): a tid of the QEMU process.
    #[serde(rename = "thread-id")]
    pub thread_id: u32,
}

/// A message from QEMU, as far as this client cares. Unknown keys are ignored.
#[derive(Deserialize)]
struct Message {
    #[serde(rename = "QMP")]
    greeting: Option<serde_json::Value>,
    #[serde(rename = "return")]
    ret: Option<serde_json::Value>,
    error: Option<ErrorBody>,
    event: Option<serde_json::Value>,
}

/// The body of an `{"error": ...}` reply.
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    class: String,
    #[serde(default)]
    desc: String,
}

/// The first 200 bytes of a line, for error messages.
fn excerpt(line: &[u8]) -> String {
    let cut = &line[..line.len().min(200)];
    String::from_utf8_lossy(cut).into_owned()
}

/// A QMP connection that has negotiated capabilities. See the module
/// documentation.
#[derive(Debug)]
pub struct QmpClient {
    reader: BufReader<UnixStream>,
    limits: QmpLimits,
    usable: bool,
}

impl QmpClient {
    /// Connect to `path` with [`QmpLimits::default`], read the greeting and
    /// leave capabilities negotiation mode.
    pub fn connect(path: &Path) -> Result<QmpClient, QmpError> {
        QmpClient::connect_with(path, QmpLimits::default())
    }

    /// As [`QmpClient::connect`], with `limits`.
    pub fn connect_with(path: &Path, limits: QmpLimits) -> Result<QmpClient, QmpError> {
        let stream = UnixStream::connect(path).map_err(|source| QmpError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        stream
            .set_write_timeout(Some(limits.timeout.max(Duration::from_millis(1))))
            .map_err(QmpError::SetTimeout)?;
        let mut client = QmpClient {
            reader: BufReader::new(stream),
            limits,
            usable: true,
        };
        let deadline = Instant::now() + limits.timeout;
        let line = client.read_message("greeting", deadline)?;
        let msg = parse(&line)?;
        if msg.greeting.is_none() {
            return Err(QmpError::NoGreeting {
                line: excerpt(&line),
            });
        }
        client.execute("qmp_capabilities")?;
        Ok(client)
    }

    /// As [`QmpClient::connect_with`], on a stream already connected to
    /// QEMU (or to a test's or the fuzzer's end of a socket pair): read the
    /// greeting and leave capabilities negotiation mode.
    pub fn from_stream(stream: UnixStream, limits: QmpLimits) -> Result<QmpClient, QmpError> {
        stream
            .set_write_timeout(Some(limits.timeout.max(Duration::from_millis(1))))
            .map_err(QmpError::SetTimeout)?;
        let mut client = QmpClient {
            reader: BufReader::new(stream),
            limits,
            usable: true,
        };
        let deadline = Instant::now() + limits.timeout;
        let line = client.read_message("greeting", deadline)?;
        if parse(&line)?.greeting.is_none() {
            return Err(QmpError::NoGreeting {
                line: excerpt(&line),
            });
        }
        client.execute("qmp_capabilities")?;
        Ok(client)
    }

    /// Run `command` (no arguments) and return its `return` value. Events
    /// that arrive meanwhile are skipped.
    pub fn execute(&mut self, command: &str) -> Result<serde_json::Value, QmpError> {
        if !self.usable {
            return Err(QmpError::Unusable);
        }
        let result = self.exchange(command);
        if let Err(e) = &result {
            if !matches!(
                e,
                QmpError::CommandFailed { .. } | QmpError::ParseReply { .. }
            ) {
                self.usable = false;
            }
        }
        result
    }

    /// The VM's vCPUs and their host threads, in `cpu-index` order.
    pub fn query_cpus_fast(&mut self) -> Result<Vec<VcpuThread>, QmpError> {
        const COMMAND: &str = "query-cpus-fast";
        let value = self.execute(COMMAND)?;
        let mut cpus: Vec<VcpuThread> =
            serde_json::from_value(value).map_err(|source| QmpError::ParseReply {
                command: COMMAND.to_string(),
                source,
            })?;
        cpus.sort_unstable();
        Ok(cpus)
    }

    fn exchange(&mut self, command: &str) -> Result<serde_json::Value, QmpError> {
        let mut request = serde_json::json!({ "execute": command }).to_string();
        request.push('\n');
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .map_err(|source| QmpError::Send {
                command: command.to_string(),
                source,
            })?;
        let deadline = Instant::now() + self.limits.timeout;
        let waiting_for = format!("reply to `{command}`");
        loop {
            let line = self.read_message(&waiting_for, deadline)?;
            let msg = parse(&line)?;
            if let Some(ret) = msg.ret {
                return Ok(ret);
            }
            if let Some(err) = msg.error {
                return Err(QmpError::CommandFailed {
                    command: command.to_string(),
                    class: err.class,
                    desc: err.desc,
                });
            }
            if msg.event.is_none() {
                return Err(QmpError::UnexpectedMessage {
                    command: command.to_string(),
                    line: excerpt(&line),
                });
            }
        }
    }

    /// The next non-blank line, without its line end, read before `deadline`.
    fn read_message(&mut self, waiting_for: &str, deadline: Instant) -> Result<Vec<u8>, QmpError> {
        loop {
            let line = self.read_line(waiting_for, deadline)?;
            if !line.trim_ascii().is_empty() {
                return Ok(line);
            }
        }
    }

    fn read_line(&mut self, waiting_for: &str, deadline: Instant) -> Result<Vec<u8>, QmpError> {
        let timeout = || QmpError::Timeout {
            waiting_for: waiting_for.to_string(),
            timeout: self.limits.timeout,
        };
        let mut line = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(timeout());
            }
            self.reader
                .get_ref()
                .set_read_timeout(Some(remaining))
                .map_err(QmpError::SetTimeout)?;
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(timeout());
                }
                Err(e) => return Err(QmpError::Read(e)),
            };
            if buf.is_empty() {
                return Err(QmpError::Closed {
                    waiting_for: waiting_for.to_string(),
                });
            }
            let (take, complete) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            if line.len() + take > self.limits.max_line {
                return Err(QmpError::LineTooLong {
                    limit: self.limits.max_line,
                });
            }
            line.extend_from_slice(&buf[..take]);
            self.reader.consume(if complete { take + 1 } else { take });
            if complete {
                return Ok(line);
            }
        }
    }
}

fn parse(line: &[u8]) -> Result<Message, QmpError> {
    serde_json::from_slice(line).map_err(|source| QmpError::Malformed {
        line: excerpt(line),
        source,
    })
}

/// Connect to the QMP socket at `path`, ask for the vCPU threads and
/// disconnect. See [`QmpClient::query_cpus_fast`].
pub fn vcpu_threads(path: &Path) -> Result<Vec<VcpuThread>, QmpError> {
    QmpClient::connect(path)?.query_cpus_fast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;
    use std::os::unix::net::UnixListener;
    use std::thread::JoinHandle;

    const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7"}, "capabilities": ["oob"]}}"#;
    /// QEMU 7.2's reply for a two-vCPU q35 VM.
    const CPUS: &str = r#"{"return": [{"thread-id": 4243, "props": {"core-id": 0, "thread-id": 0, "node-id": 0, "socket-id": 1}, "qom-path": "/machine/unattached/device[1]", "cpu-index": 1, "target": "x86_64"}, {"thread-id": 4242, "props": {"core-id": 0, "thread-id": 0, "node-id": 0, "socket-id": 0}, "qom-path": "/machine/unattached/device[0]", "cpu-index": 0, "target": "x86_64"}]}"#;
    const EVENT: &str = r#"{"timestamp": {"seconds": 1700000000, "microseconds": 1}, "event": "NIC_RX_FILTER_CHANGED", "data": {"path": "/machine/peripheral/net0/virtio-backend"}}"#;

    /// The server side of one connection, driven by a test's script.
    struct Peer(UnixStream, BufReader<UnixStream>);

    impl Peer {
        /// Send one line the way QEMU ends them (CRLF). Errors are ignored:
        /// the client may have hung up already, which some tests want.
        fn send(&mut self, line: &str) {
            let _ = self.0.write_all(format!("{line}\r\n").as_bytes());
        }

        /// The next command the client sent.
        fn expect(&mut self, command: &str) {
            let mut line = String::new();
            self.1.read_line(&mut line).unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["execute"], command, "{line}");
        }

        /// Read until the client hangs up.
        fn drain(&mut self) {
            let _ = io::copy(&mut self.1, &mut io::sink());
        }

        fn handshake(&mut self) {
            self.send(GREETING);
            self.expect("qmp_capabilities");
            self.send(r#"{"return": {}}"#);
        }
    }

    /// A fake QEMU: one connection on a socket in `dir`, served by `script`.
    fn serve(
        dir: &TestDir,
        script: impl FnOnce(&mut Peer) + Send + 'static,
    ) -> (PathBuf, JoinHandle<()>) {
        let path = dir.0.join("qmp.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let reader = BufReader::new(stream.try_clone().unwrap());
            script(&mut Peer(stream, reader));
        });
        (path, server)
    }

    fn quick() -> QmpLimits {
        QmpLimits {
            timeout: Duration::from_millis(200),
            ..QmpLimits::default()
        }
    }

    #[test]
    fn reads_vcpu_threads_skipping_events() {
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.send(GREETING);
            p.expect("qmp_capabilities");
            p.send(EVENT);
            p.send("");
            p.send(r#"{"return": {}}"#);
            p.expect("query-cpus-fast");
            p.send(EVENT);
            p.send(EVENT);
            p.send(CPUS);
            p.expect("query-cpus-fast");
            p.send(CPUS);
            p.drain();
        });
        let mut c = QmpClient::connect(&path).unwrap();
        let want = vec![
            VcpuThread {
                cpu_index: 0,
                thread_id: 4242,
            },
            VcpuThread {
                cpu_index: 1,
                thread_id: 4243,
            },
        ];
        assert_eq!(c.query_cpus_fast().unwrap(), want);
        assert_eq!(c.query_cpus_fast().unwrap(), want);
        drop(c);
        server.join().unwrap();
    }

    #[test]
    fn vcpu_threads_connects_queries_and_hangs_up() {
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.handshake();
            p.expect("query-cpus-fast");
            p.send(CPUS);
            p.drain();
        });
        assert_eq!(vcpu_threads(&path).unwrap().len(), 2);
        server.join().unwrap();
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.send("Welcome to the fridge");
            p.drain();
        });
        let e = QmpClient::connect_with(&path, quick()).unwrap_err();
        assert!(matches!(&e, QmpError::Malformed { line, .. } if line.contains("fridge")));
        server.join().unwrap();

        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.send(r#"{"return": {}}"#);
            p.drain();
        });
        let e = QmpClient::connect_with(&path, quick()).unwrap_err();
        assert!(matches!(e, QmpError::NoGreeting { .. }), "{e:?}");
        server.join().unwrap();

        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.handshake();
            p.expect("query-cpus-fast");
            p.send("[1, 2, 3]");
            p.drain();
        });
        let mut c = QmpClient::connect_with(&path, quick()).unwrap();
        let e = c.query_cpus_fast().unwrap_err();
        assert!(matches!(e, QmpError::Malformed { .. }), "{e:?}");
        // The stream may be out of step now: no further commands.
        assert!(matches!(c.query_cpus_fast(), Err(QmpError::Unusable)));
        drop(c);
        server.join().unwrap();
    }

    #[test]
    fn a_reply_of_the_wrong_shape_is_a_parse_error() {
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.handshake();
            p.expect("query-cpus-fast");
            p.send(r#"{"return": [{"cpu-index": 0, "thread-id": -1}]}"#);
            p.expect("query-cpus-fast");
            p.send(r#"{"something": "else"}"#);
            p.drain();
        });
        let mut c = QmpClient::connect_with(&path, quick()).unwrap();
        let e = c.query_cpus_fast().unwrap_err();
        assert!(matches!(e, QmpError::ParseReply { .. }), "{e:?}");
        // A complete reply was read: the stream is in step.
        let e = c.query_cpus_fast().unwrap_err();
        assert!(matches!(e, QmpError::UnexpectedMessage { .. }), "{e:?}");
        drop(c);
        server.join().unwrap();
    }

    #[test]
    fn silence_times_out() {
        // No greeting at all.
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| p.drain());
        let start = Instant::now();
        let e = QmpClient::connect_with(&path, quick()).unwrap_err();
        assert!(
            matches!(&e, QmpError::Timeout { waiting_for, .. } if waiting_for == "greeting"),
            "{e:?}"
        );
        assert!(start.elapsed() >= Duration::from_millis(200));
        server.join().unwrap();

        // A greeting, then no reply.
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.send(GREETING);
            p.drain();
        });
        let e = QmpClient::connect_with(&path, quick()).unwrap_err();
        assert!(
            matches!(&e, QmpError::Timeout { waiting_for, .. } if waiting_for.contains("qmp_capabilities")),
            "{e:?}"
        );
        server.join().unwrap();
    }

    #[test]
    fn an_endless_stream_of_events_still_times_out() {
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.handshake();
            p.expect("query-cpus-fast");
            // Events, a partial line, more events: until the client hangs up.
            while p.0.write_all(format!("{EVENT}\r\n").as_bytes()).is_ok() {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let mut c = QmpClient::connect_with(&path, quick()).unwrap();
        let start = Instant::now();
        let e = c.query_cpus_fast().unwrap_err();
        assert!(matches!(e, QmpError::Timeout { .. }), "{e:?}");
        // The deadline covers the whole wait, not each read.
        assert!(start.elapsed() < Duration::from_secs(2));
        drop(c);
        server.join().unwrap();
    }

    #[test]
    fn an_error_reply_is_typed_and_the_connection_survives() {
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.handshake();
            p.expect("query-cpus-fast");
            p.send(r#"{"error": {"class": "CommandNotFound", "desc": "The command query-cpus-fast has not been found"}}"#);
            p.expect("query-cpus-fast");
            p.send(CPUS);
            p.drain();
        });
        let mut c = QmpClient::connect_with(&path, quick()).unwrap();
        let e = c.query_cpus_fast().unwrap_err();
        match &e {
            QmpError::CommandFailed {
                command,
                class,
                desc,
            } => {
                assert_eq!(command, "query-cpus-fast");
                assert_eq!(class, "CommandNotFound");
                assert!(desc.contains("not been found"));
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("CommandNotFound"));
        assert_eq!(c.query_cpus_fast().unwrap().len(), 2);
        drop(c);
        server.join().unwrap();
    }

    #[test]
    fn close_mid_exchange_is_closed() {
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.handshake();
            p.expect("query-cpus-fast");
            // Half a reply, then QEMU exits.
            let _ = p.0.write_all(&CPUS.as_bytes()[..40]);
        });
        let mut c = QmpClient::connect_with(&path, quick()).unwrap();
        let e = c.query_cpus_fast().unwrap_err();
        assert!(matches!(e, QmpError::Closed { .. }), "{e:?}");
        server.join().unwrap();
        // Sending to the closed socket fails, it does not hang or panic
        // (forcing the client past its own refusal to reach the write).
        let mut c = c;
        c.usable = true;
        let e = c.query_cpus_fast().unwrap_err();
        assert!(
            matches!(e, QmpError::Send { .. } | QmpError::Closed { .. }),
            "{e:?}"
        );

        let dir = TestDir::new("qmp");
        let e = QmpClient::connect(&dir.0.join("absent.sock")).unwrap_err();
        assert!(matches!(e, QmpError::Connect { .. }), "{e:?}");
    }

    /// Against a real QEMU, paused (`-S`): `cargo test -p vadapt-coremgr --
    /// --ignored real_qemu`. Ignored by default because it starts a QEMU.
    #[test]
    #[ignore = "starts qemu-system-x86_64"]
    fn real_qemu_reports_its_vcpu_threads() {
        let dir = TestDir::new("qmp");
        let path = dir.0.join("qemu.qmp");
        let mut qemu = std::process::Command::new("qemu-system-x86_64")
            .args([
                "-S",
                "-nodefaults",
                "-display",
                "none",
                "-smp",
                "2",
                "-m",
                "64",
            ])
            .args(["-accel", "kvm", "-accel", "tcg", "-qmp"])
            .arg(format!("unix:{},server=on,wait=off", path.display()))
            .spawn()
            .expect("qemu-system-x86_64 is installed");
        let start = Instant::now();
        let threads = loop {
            match vcpu_threads(&path) {
                Ok(t) => break t,
                Err(QmpError::Connect { .. }) if start.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("{e}"),
            }
        };
        let pid = qemu.id();
        // Threads of the QEMU process, one per vCPU (KVM or MTTCG).
        let tasks: Vec<bool> = threads
            .iter()
            .map(|t| Path::new(&format!("/proc/{pid}/task/{}", t.thread_id)).exists())
            .collect();
        qemu.kill().unwrap();
        qemu.wait().unwrap();
        assert_eq!(
            threads.iter().map(|t| t.cpu_index).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_ne!(threads[0].thread_id, threads[1].thread_id);
        assert_eq!(tasks, [true, true], "{threads:?}");
    }

    #[test]
    fn a_huge_line_is_refused_unread() {
        let dir = TestDir::new("qmp");
        let (path, server) = serve(&dir, |p| {
            p.handshake();
            p.expect("query-cpus-fast");
            // 4 MiB of one JSON string and no line end: more than the limit.
            let _ = p.0.write_all(br#"{"return": ""#);
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..64 {
                if p.0.write_all(&chunk).is_err() {
                    return; // the client hung up, as it should
                }
            }
        });
        let mut c = QmpClient::connect(&path).unwrap();
        let e = c.query_cpus_fast().unwrap_err();
        assert!(
            matches!(e, QmpError::LineTooLong { limit } if limit == 1 << 20),
            "{e:?}"
        );
        drop(c);
        server.join().unwrap();
    }
}
