//! A minimal, bounded QEMU guest agent client: how many vCPUs a VM has
//! online and how many queue pairs its NIC uses (vSPACE-Guest).
//!
//! The agent (`qemu-ga` inside the guest, reached through QEMU's
//! `-chardev socket,path=PATH,server=on,wait=off,id=qga0 -device
//! virtio-serial -device virtserialport,chardev=qga0,name=org.qemu.guest_agent.0`)
//! speaks line-delimited JSON like QMP, but with no greeting and no
//! capabilities negotiation. A client may find stale replies of an earlier
//! client in the channel, so it first synchronises:
//!
//! ```text
//!   us    -> 0xFF {"execute": "guest-sync-delimited", "arguments": {"id": N}}
//!   agent -> 0xFF {"return": N}              (anything before the 0xFF is stale)
//!   us    -> {"execute": "guest-get-vcpus"}
//!   agent -> {"return": [{"logical-id": 0, "online": true, "can-offline": false}, ...]}
//!   us    -> {"execute": "guest-set-vcpus", "arguments": {"vcpus": [{"logical-id": 1, "online": false}]}}
//!   agent -> {"return": 1}                   (how many entries it applied)
//!   us    -> {"execute": "guest-exec", "arguments": {"path": "ethtool", "arg": ["-L", "eth0", "combined", "2"], "capture-output": true}}
//!   agent -> {"return": {"pid": 123}}
//!   us    -> {"execute": "guest-exec-status", "arguments": {"pid": 123}}
//!   agent -> {"return": {"exited": true, "exitcode": 0}}
//! ```
//!
//! Every wait has a deadline ([`QgaLimits::timeout`]) and every line a length
//! bound ([`QgaLimits::max_line`]); an agent that hangs, dies or answers
//! garbage is a [`QgaError`], never a hang or a panic. `guest-set-vcpus`
//! only offlines a vCPU inside the guest: its host thread stays (the core
//! manager still pins it).

use crate::json_lines::{JsonLines, LineError};
use crate::peer_text::PeerText;
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most vCPUs a guest's list is taken to have when the VM's own count
/// is not known (the agent's list is
/// guest-controlled, so it is capped either way).
pub const MAX_VCPUS: usize = 1024;

/// Bounds on one guest agent connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QgaLimits {
    /// Longest wait for one reply (however many reads and stale lines it
    /// takes), and for one send.
    pub timeout: Duration,
    /// Longest line accepted, bytes.
    pub max_line: usize,
    /// Longest wait for a `guest-exec`'d program to exit.
    pub exec_timeout: Duration,
}

impl Default for QgaLimits {
    /// 2 s per reply (the core manager's QMP timeout), 1 MiB lines, 5 s for
    /// a program (`ethtool -L` takes milliseconds).
    fn default() -> Self {
        QgaLimits {
            timeout: Duration::from_secs(2),
            max_line: 1 << 20,
            exec_timeout: Duration::from_secs(5),
        }
    }
}

/// A guest agent exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum QgaError {
    /// Connecting to the socket failed (no such socket, QEMU not listening).
    #[error("failed to connect to the guest agent socket {path}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing a command failed (including a write timeout).
    #[error("failed to send `{command}`")]
    Send {
        /// The command.
        command: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading failed for a reason other than a timeout.
    #[error("failed to read from the guest agent socket")]
    Read(#[source] io::Error),
    /// No reply before the deadline (an agent that is not running inside
    /// the guest looks like this: QEMU accepts, nobody answers).
    #[error("no reply to `{command}` within {timeout:?}")]
    Timeout {
        /// The command.
        command: String,
        /// The deadline that passed.
        timeout: Duration,
    },
    /// The socket closed before a complete reply.
    #[error("the guest agent socket closed while we waited for the reply to `{command}`")]
    Closed {
        /// The command.
        command: String,
    },
    /// A line was longer than the limit.
    #[error("a guest agent message exceeded {limit} bytes")]
    LineTooLong {
        /// [`QgaLimits::max_line`].
        limit: usize,
    },
    /// The agent answered with an `error`.
    #[error("the guest agent refused `{command}`: {class}: {desc}")]
    CommandFailed {
        /// The command.
        command: String,
        /// Error class, e.g. `GenericError`, `CommandNotFound` (escaped).
        class: PeerText,
        /// The agent's description, escaped.
        desc: PeerText,
    },
    /// A reply did not have the documented shape.
    #[error("unexpected reply to `{command}`: {line}")]
    BadReply {
        /// The command.
        command: String,
        /// The reply, cut to 200 bytes, escaped.
        line: PeerText,
    },
    /// A program run by `guest-exec` failed or did not exit in time.
    #[error("`{program}` in the guest {outcome}")]
    Program {
        /// The command line.
        program: String,
        /// `exited with 1: STDERR` or `did not exit within 5s` (escaped:
        /// the program's output comes from the guest).
        outcome: PeerText,
    },
    /// The guest listed more distinct vCPUs than the VM can have.
    #[error("the guest agent listed {listed} vCPUs, more than the {cap} this VM may have")]
    TooManyVcpus {
        /// Distinct logical ids listed.
        listed: usize,
        /// The cap (the VM's vCPU count, or [`MAX_VCPUS`]).
        cap: usize,
    },
    /// An earlier error may have left the stream out of step; reconnect.
    #[error("the guest agent connection is unusable after an earlier error")]
    Unusable,
}

/// One vCPU as the guest sees it (`guest-get-vcpus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GuestVcpu {
    /// The guest's CPU number.
    pub logical_id: u32,
    /// Online now.
    pub online: bool,
    /// The guest lets it go offline (CPU 0 usually not).
    #[serde(default)]
    pub can_offline: bool,
}

/// A connected, synchronised guest agent client.
#[derive(Debug)]
pub struct QgaClient {
    lines: JsonLines,
    limits: QgaLimits,
    usable: bool,
}

/// The first 200 bytes of a line, escaped, for error messages.
fn excerpt(line: &[u8]) -> PeerText {
    PeerText::from_bytes(&line[..line.len().min(200)])
}

impl QgaClient {
    /// Connect to `path` with the default limits and synchronise.
    pub fn connect(path: &Path) -> Result<QgaClient, QgaError> {
        Self::connect_with(path, QgaLimits::default())
    }

    /// Connect to `path` and synchronise (`guest-sync-delimited`).
    pub fn connect_with(path: &Path, limits: QgaLimits) -> Result<QgaClient, QgaError> {
        let stream = UnixStream::connect(path).map_err(|source| QgaError::Connect {
            path: path.to_owned(),
            source,
        })?;
        QgaClient::from_stream(stream, limits)
    }

    /// As [`QgaClient::connect_with`], on a stream already connected to the
    /// agent (or to a test's or the fuzzer's end of a socket pair):
    /// synchronise (`guest-sync-delimited`).
    pub fn from_stream(stream: UnixStream, limits: QgaLimits) -> Result<QgaClient, QgaError> {
        let _ = stream.set_write_timeout(Some(limits.timeout));
        let mut c = QgaClient {
            lines: JsonLines::new(stream, limits.max_line),
            limits,
            usable: true,
        };
        c.sync()?;
        Ok(c)
    }

    fn sync(&mut self) -> Result<(), QgaError> {
        const COMMAND: &str = "guest-sync-delimited";
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // Any id a stale reply is unlikely to carry; the agent echoes it.
        let id = (now.as_nanos() as u64 ^ u64::from(std::process::id())) & ((1 << 52) - 1);
        let mut line = vec![0xFF];
        line.extend_from_slice(
            json!({"execute": COMMAND, "arguments": {"id": id}})
                .to_string()
                .as_bytes(),
        );
        self.send(COMMAND, line)?;
        let deadline = Instant::now() + self.limits.timeout;
        loop {
            let line = self.read_line(COMMAND, deadline)?;
            // The reply follows a 0xFF; before it, anything is stale.
            let Some(at) = line.iter().rposition(|&b| b == 0xFF) else {
                continue;
            };
            let v: Value = match serde_json::from_slice(&line[at + 1..]) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if v.get("return").and_then(Value::as_u64) == Some(id) {
                return Ok(());
            }
        }
    }

    fn send(&mut self, command: &str, mut line: Vec<u8>) -> Result<(), QgaError> {
        line.push(b'\n');
        let r = self.lines.stream_mut().write_all(&line);
        r.map_err(|source| {
            self.usable = false;
            QgaError::Send {
                command: command.to_string(),
                source,
            }
        })
    }

    /// Run `command` with `arguments` (`Value::Null`: none); its `return`.
    pub fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, QgaError> {
        if !self.usable {
            return Err(QgaError::Unusable);
        }
        let req = if arguments.is_null() {
            json!({"execute": command})
        } else {
            json!({"execute": command, "arguments": arguments})
        };
        self.send(command, req.to_string().into_bytes())?;
        let deadline = Instant::now() + self.limits.timeout;
        loop {
            let line = self.read_line(command, deadline)?;
            if line.trim_ascii().is_empty() {
                continue;
            }
            let bad = || QgaError::BadReply {
                command: command.to_string(),
                line: excerpt(&line),
            };
            let v: Value = serde_json::from_slice(&line).map_err(|_| {
                self.usable = false;
                bad()
            })?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                let s = |k: &str| PeerText::new(e.get(k).and_then(Value::as_str).unwrap_or(""));
                return Err(QgaError::CommandFailed {
                    command: command.to_string(),
                    class: s("class"),
                    desc: s("desc"),
                });
            }
            self.usable = false;
            return Err(bad());
        }
    }

    fn read_line(&mut self, command: &str, deadline: Instant) -> Result<Vec<u8>, QgaError> {
        let r = self.read_line_inner(command, deadline);
        if r.is_err() {
            self.usable = false;
        }
        r
    }

    fn read_line_inner(&mut self, command: &str, deadline: Instant) -> Result<Vec<u8>, QgaError> {
        self.lines.read_line(deadline).map_err(|e| match e {
            LineError::SetTimeout(e) | LineError::Read(e) => QgaError::Read(e),
            LineError::Timeout => QgaError::Timeout {
                command: command.to_string(),
                timeout: self.limits.timeout,
            },
            LineError::Closed => QgaError::Closed {
                command: command.to_string(),
            },
            LineError::TooLong { limit } => QgaError::LineTooLong { limit },
        })
    }

    /// The guest's vCPUs (`guest-get-vcpus`).
    pub fn get_vcpus(&mut self) -> Result<Vec<GuestVcpu>, QgaError> {
        const COMMAND: &str = "guest-get-vcpus";
        let r = self.execute(COMMAND, Value::Null)?;
        serde_json::from_value(r.clone()).map_err(|_| QgaError::BadReply {
            command: COMMAND.into(),
            line: excerpt(r.to_string().as_bytes()),
        })
    }

    /// Set vCPUs online or offline (`guest-set-vcpus`); how many entries
    /// the agent applied (it stops at the first failure).
    pub fn set_vcpus(&mut self, vcpus: &[(u32, bool)]) -> Result<usize, QgaError> {
        const COMMAND: &str = "guest-set-vcpus";
        let list: Vec<Value> = vcpus
            .iter()
            .map(|&(id, online)| json!({"logical-id": id, "online": online}))
            .collect();
        let r = self.execute(COMMAND, json!({ "vcpus": list }))?;
        r.as_u64().map(|n| n as usize).ok_or(QgaError::BadReply {
            command: COMMAND.into(),
            line: excerpt(r.to_string().as_bytes()),
        })
    }

    /// Run `program` with `args` in the guest (`guest-exec`, then
    /// `guest-exec-status` every 20 ms until it exits or
    /// [`QgaLimits::exec_timeout`] passes); Ok when it exited with 0.
    pub fn run(&mut self, program: &str, args: &[&str]) -> Result<(), QgaError> {
        let cmdline = std::iter::once(program)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        let r = self.execute(
            "guest-exec",
            json!({"path": program, "arg": args, "capture-output": true}),
        )?;
        let Some(pid) = r.get("pid").and_then(Value::as_i64) else {
            return Err(QgaError::BadReply {
                command: "guest-exec".into(),
                line: excerpt(r.to_string().as_bytes()),
            });
        };
        let deadline = Instant::now() + self.limits.exec_timeout;
        loop {
            let s = self.execute("guest-exec-status", json!({ "pid": pid }))?;
            if s.get("exited").and_then(Value::as_bool) == Some(true) {
                let code = s.get("exitcode").and_then(Value::as_i64).unwrap_or(-1);
                if code == 0 {
                    return Ok(());
                }
                let err = s
                    .get("err-data")
                    .and_then(Value::as_str)
                    .map(|b| format!(": {}", decode_base64_lossy(b)))
                    .unwrap_or_default();
                return Err(QgaError::Program {
                    program: cmdline,
                    outcome: PeerText::new(&format!("exited with {code}{err}")),
                });
            }
            if Instant::now() >= deadline {
                return Err(QgaError::Program {
                    program: cmdline,
                    outcome: PeerText::new(&format!(
                        "did not exit within {:?}",
                        self.limits.exec_timeout
                    )),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What [`set_online_vcpus`] changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuChange {
    /// vCPUs online before.
    pub before: usize,
    /// vCPUs online after.
    pub after: usize,
}

/// Which vCPUs to switch so that `want` are online (at least 1): the lowest
/// logical ids stay or come online, the others go offline where the guest
/// allows it. Pure, for the tests and the caller's log line.
pub fn vcpu_changes(vcpus: &[GuestVcpu], want: usize) -> Vec<(u32, bool)> {
    let mut sorted = vcpus.to_vec();
    sorted.sort_by_key(|v| v.logical_id);
    let want = want.max(1);
    let mut out = Vec::new();
    for (i, v) in sorted.iter().enumerate() {
        let online = i < want || !v.can_offline;
        if online != v.online && (online || v.can_offline) {
            out.push((v.logical_id, online));
        }
    }
    out
}

/// The guest's list with each logical id once (the first entry wins), in
/// id order; an error if more than `cap` ids remain. The list is the
/// guest's word: this bounds what a hostile one can make us send back.
pub fn checked_vcpus(mut vcpus: Vec<GuestVcpu>, cap: usize) -> Result<Vec<GuestVcpu>, QgaError> {
    vcpus.sort_by_key(|v| v.logical_id); // stable: the first of equal ids stays first
    vcpus.dedup_by_key(|v| v.logical_id);
    if vcpus.len() > cap {
        return Err(QgaError::TooManyVcpus {
            listed: vcpus.len(),
            cap,
        });
    }
    Ok(vcpus)
}

/// Bring `want` vCPUs of the guest behind `path` online (see
/// [`vcpu_changes`]); the guest's list is checked against `max_vcpus` (the
/// VM's vCPU count where known, else [`MAX_VCPUS`]) by [`checked_vcpus`].
pub fn set_online_vcpus(
    path: &Path,
    want: usize,
    max_vcpus: usize,
    limits: QgaLimits,
) -> Result<VcpuChange, QgaError> {
    let mut c = QgaClient::connect_with(path, limits)?;
    let vcpus = checked_vcpus(c.get_vcpus()?, max_vcpus)?;
    let before = vcpus.iter().filter(|v| v.online).count();
    let changes = vcpu_changes(&vcpus, want);
    if !changes.is_empty() {
        c.set_vcpus(&changes)?;
    }
    let after = checked_vcpus(c.get_vcpus()?, max_vcpus)?
        .iter()
        .filter(|v| v.online)
        .count();
    Ok(VcpuChange { before, after })
}

/// Set the active queue pairs of the guest's `iface` to `pairs` with
/// `ethtool -L IFACE combined N` through `guest-exec`.
pub fn set_queue_pairs(
    path: &Path,
    iface: &str,
    pairs: u16,
    limits: QgaLimits,
) -> Result<(), QgaError> {
    let n = pairs.max(1).to_string();
    QgaClient::connect_with(path, limits)?.run("ethtool", &["-L", iface, "combined", &n])
}

/// Base64 (standard alphabet) to text, skipping what does not decode: only
/// for error messages.
fn decode_base64_lossy(s: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.bytes().take(4096) {
        let Some(v) = ALPHABET.iter().position(|&a| a == c) else {
            continue;
        };
        bits = (bits << 6) | v as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    String::from_utf8_lossy(&out).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixListener;
    use std::thread::JoinHandle;
    use tempfile::TempDir as TestDir;

    /// A fake agent: answers each request line with `answer(request)`
    /// (`None`: stay silent), after writing `preamble` (stale bytes).
    fn fake_agent(
        path: &Path,
        preamble: &'static [u8],
        answer: impl Fn(&Value) -> Option<Vec<u8>> + Send + 'static,
    ) -> JoinHandle<Vec<Value>> {
        let l = UnixListener::bind(path).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(preamble).unwrap();
            let mut seen = Vec::new();
            let mut buf = Vec::new();
            let mut byte = [0u8; 1];
            while let Ok(1) = s.read(&mut byte) {
                if byte[0] != b'\n' {
                    buf.push(byte[0]);
                    continue;
                }
                let start = buf.iter().rposition(|&b| b == 0xFF).map_or(0, |i| i + 1);
                let req: Value = serde_json::from_slice(&buf[start..]).unwrap();
                buf.clear();
                if let Some(a) = answer(&req) {
                    if s.write_all(&a).is_err() {
                        break;
                    }
                }
                seen.push(req);
            }
            seen
        })
    }

    /// The agent's answer to `guest-sync-delimited`: 0xFF, then the id.
    fn sync_reply(req: &Value) -> Vec<u8> {
        let mut v = vec![0xFF];
        v.extend_from_slice(format!("{{\"return\": {}}}\n", req["arguments"]["id"]).as_bytes());
        v
    }

    /// Answers like qemu-ga for a guest with `n` vCPUs, CPU 0 pinned online.
    fn agent_like(n: u32) -> impl Fn(&Value) -> Option<Vec<u8>> {
        let online = std::sync::Mutex::new(vec![true; n as usize]);
        move |req| {
            let args = &req["arguments"];
            if req["execute"] == "guest-sync-delimited" {
                return Some(sync_reply(req));
            }
            let text: String = match req["execute"].as_str().unwrap() {
                "guest-get-vcpus" => {
                    let v: Vec<Value> = online
                        .lock()
                        .unwrap()
                        .iter()
                        .enumerate()
                        .map(|(i, &o)| json!({"logical-id": i, "online": o, "can-offline": i > 0}))
                        .collect();
                    format!("{}\n", json!({ "return": v }))
                }
                "guest-set-vcpus" => {
                    let list = args["vcpus"].as_array().unwrap();
                    for e in list {
                        let i = e["logical-id"].as_u64().unwrap() as usize;
                        online.lock().unwrap()[i] = e["online"].as_bool().unwrap();
                    }
                    format!("{}\n", json!({"return": list.len()}))
                }
                "guest-exec" => {
                    let ok = args["arg"][1] == "eth0";
                    format!("{}\n", json!({"return": {"pid": if ok { 7 } else { 8 }}}))
                }
                "guest-exec-status" => {
                    if args["pid"] == 7 {
                        "{\"return\": {\"exited\": true, \"exitcode\": 0}}\n".into()
                    } else {
                        // "no such device" in base64.
                        "{\"return\": {\"exited\": true, \"exitcode\": 1, \"err-data\": \"bm8gc3VjaCBkZXZpY2U=\"}}\n".into()
                    }
                }
                other => format!(
                    "{}\n",
                    json!({"error": {"class": "CommandNotFound", "desc": format!("The command {other} has not been found")}})
                ),
            };
            Some(text.into_bytes())
        }
    }

    fn sock(tag: &str) -> (TestDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(format!("{tag}.qga"));
        (d, p)
    }

    #[test]
    fn sync_skips_stale_replies_then_vcpus_go_offline_and_online() {
        let (_d, path) = sock("vcpus");
        let stale = b"{\"return\": 5}\n\xff{\"return\": 12345}\n";
        let h = fake_agent(&path, stale, agent_like(4));
        let ch = set_online_vcpus(&path, 2, MAX_VCPUS, QgaLimits::default()).unwrap();
        assert_eq!(
            ch,
            VcpuChange {
                before: 4,
                after: 2
            }
        );
        let seen = h.join().unwrap();
        let set: Vec<&Value> = seen
            .iter()
            .filter(|r| r["execute"] == "guest-set-vcpus")
            .collect();
        assert_eq!(
            set[0]["arguments"]["vcpus"],
            json!([{"logical-id": 2, "online": false}, {"logical-id": 3, "online": false}])
        );
        let (_d, path) = sock("vcpus2");
        let h = fake_agent(&path, b"", agent_like(4));
        // Already 4: nothing to set.
        assert_eq!(
            set_online_vcpus(&path, 9, MAX_VCPUS, QgaLimits::default()).unwrap(),
            VcpuChange {
                before: 4,
                after: 4
            }
        );
        assert!(h
            .join()
            .unwrap()
            .iter()
            .all(|r| r["execute"] != "guest-set-vcpus"));
    }

    #[test]
    fn vcpu_changes_keep_the_lowest_ids_and_what_cannot_go_offline() {
        let v = |id, online, can| GuestVcpu {
            logical_id: id,
            online,
            can_offline: can,
        };
        let vcpus = [
            v(3, false, true),
            v(0, true, false),
            v(1, true, true),
            v(2, false, true),
        ];
        assert_eq!(vcpu_changes(&vcpus, 3), vec![(2, true)]);
        assert_eq!(vcpu_changes(&vcpus, 1), vec![(1, false)]);
        assert_eq!(vcpu_changes(&vcpus, 0), vec![(1, false)], "at least one");
        let pinned = [v(0, true, false), v(1, true, false)];
        assert!(vcpu_changes(&pinned, 1).is_empty(), "cannot offline: left");
    }

    #[test]
    fn a_hostile_vcpu_list_is_deduplicated_and_capped() {
        let v = |id, online| GuestVcpu {
            logical_id: id,
            online,
            can_offline: true,
        };
        // 5,000 entries naming two ids: two remain, the first of each wins.
        let dup: Vec<_> = (0..5000).map(|i| v(i % 2, i < 2)).collect();
        let checked = checked_vcpus(dup, MAX_VCPUS).unwrap();
        assert_eq!(checked, [v(0, true), v(1, true)]);
        // 15,000 distinct ids against the VM's 4 or the default cap.
        let many: Vec<_> = (0..15_000).map(|i| v(i, true)).collect();
        assert!(matches!(
            checked_vcpus(many.clone(), 4),
            Err(QgaError::TooManyVcpus {
                listed: 15_000,
                cap: 4
            })
        ));
        assert!(matches!(
            checked_vcpus(many, MAX_VCPUS),
            Err(QgaError::TooManyVcpus { cap: MAX_VCPUS, .. })
        ));
    }

    #[test]
    fn ethtool_through_guest_exec_reports_the_exit_code_and_stderr() {
        let (_d, path) = sock("exec");
        let h = fake_agent(&path, b"", agent_like(1));
        set_queue_pairs(&path, "eth0", 2, QgaLimits::default()).unwrap();
        let seen = h.join().unwrap();
        assert_eq!(
            seen[1]["arguments"],
            json!({"path": "ethtool", "arg": ["-L", "eth0", "combined", "2"], "capture-output": true})
        );
        let (_d, path) = sock("exec2");
        let _h = fake_agent(&path, b"", agent_like(1));
        let e = set_queue_pairs(&path, "eth9", 2, QgaLimits::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`ethtool -L eth9 combined 2` in the guest exited with 1: no such device"
        );
    }

    #[test]
    fn refusals_silence_garbage_and_closing_are_errors_not_hangs() {
        // A refused command leaves the connection usable.
        let (_d, path) = sock("refuse");
        let _h = fake_agent(&path, b"", agent_like(1));
        let mut c = QgaClient::connect(&path).unwrap();
        let e = c.execute("guest-shutdown", Value::Null).unwrap_err();
        assert!(
            matches!(e, QgaError::CommandFailed { ref class, .. } if class == "CommandNotFound"),
            "{e}"
        );
        assert_eq!(c.get_vcpus().unwrap().len(), 1);
        // Silence: no agent in the guest (QEMU accepts, nobody answers).
        let (_d, path) = sock("silent");
        let _h = fake_agent(&path, b"", |_| None);
        let limits = QgaLimits {
            timeout: Duration::from_millis(100),
            ..QgaLimits::default()
        };
        let e = QgaClient::connect_with(&path, limits).unwrap_err();
        assert!(matches!(e, QgaError::Timeout { .. }), "{e}");
        // Garbage after the sync: a bad reply, then the client refuses more.
        let (_d, path) = sock("garbage");
        let _h = fake_agent(&path, b"", |req| {
            Some(if req["execute"] == "guest-sync-delimited" {
                sync_reply(req)
            } else {
                b"\x01not json\n".to_vec()
            })
        });
        let mut c = QgaClient::connect(&path).unwrap();
        assert!(matches!(c.get_vcpus(), Err(QgaError::BadReply { .. })));
        assert!(matches!(c.get_vcpus(), Err(QgaError::Unusable)));
        // A huge line is refused without reading it all.
        let (_d, path) = sock("huge");
        let _h = fake_agent(&path, b"", |req| {
            Some(if req["execute"] == "guest-sync-delimited" {
                sync_reply(req)
            } else {
                vec![b'x'; 4096]
            })
        });
        let limits = QgaLimits {
            max_line: 1024,
            ..QgaLimits::default()
        };
        let mut c = QgaClient::connect_with(&path, limits).unwrap();
        assert!(matches!(
            c.get_vcpus(),
            Err(QgaError::LineTooLong { limit: 1024 })
        ));
        // No socket at all.
        let (_d, path) = sock("none");
        assert!(matches!(
            QgaClient::connect(&path),
            Err(QgaError::Connect { .. })
        ));
    }
}
