//! One guest agent conversation, without the socket: a request line in, the bytes to
//! answer out. What the core manager's vSPACE-Guest asks a QEMU guest agent
//! (`vadapt_qemu::qga`), answered the way `qemu-ga` answers it:
//!
//! | command | answer |
//! |---|---|
//! | `guest-sync-delimited {id}` | 0xFF then `{"return": id}` (a client discards what precedes the 0xFF) |
//! | `guest-sync {id}`, `guest-ping` | `{"return": id}`, `{"return": {}}` |
//! | `guest-get-vcpus` | one entry per sending thread: `logical-id`, `online`, `can-offline` (all but vCPU 0) |
//! | `guest-set-vcpus {vcpus}` | applies entries in order, stops at the first failure, returns how many applied (an error if none) |
//! | `guest-exec {path, arg}` | `ethtool -L IFACE combined N` only; `{"pid": P}` |
//! | `guest-exec-status {pid}` | `{"exited": true, "exitcode": C, "err-data": base64}` |
//!
//! An offline vCPU's sending thread stops at its pause point ([`Vcpus::set_online`]), as a
//! Linux guest's offlined CPU runs nothing. The synthetic guest cannot change its queue
//! pairs while it runs (its threads are bound to their pairs), so `ethtool -L ... combined
//! N` exits 0 only when `N` is the pairs it already uses, and 1 with a message otherwise;
//! any other program exits 127. Never panics, whatever the bytes.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::server::qmp_session::error;
use crate::server::vcpus::Vcpus;

/// Programs run so far: pid → (exit code, stderr).
#[derive(Debug, Default)]
pub struct QgaSession {
    /// The queue pairs the guest uses.
    pairs: u16,
    runs: BTreeMap<i64, (i64, String)>,
    next_pid: i64,
}

impl QgaSession {
    /// A conversation for a guest using `pairs` queue pairs.
    pub fn new(pairs: u16) -> QgaSession {
        QgaSession {
            pairs,
            runs: BTreeMap::new(),
            next_pid: 1000,
        }
    }

    /// Answers one request line (without its line end; leading 0xFF bytes, which clients
    /// send to reset the agent's parser, are skipped): the bytes to write, line end included.
    pub fn handle(&mut self, line: &[u8], vcpus: &Vcpus) -> Vec<u8> {
        let start = line.iter().position(|&b| b != 0xFF).unwrap_or(line.len());
        let line = &line[start..];
        let mut out = Vec::new();
        let reply = match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(req)) => match self.dispatch(&req, vcpus, &mut out) {
                Ok(v) => json!({ "return": v }),
                Err((class, desc)) => error(class, &desc),
            },
            Ok(_) => error("GenericError", "QMP input must be a JSON object"),
            Err(e) => error("GenericError", &format!("JSON parse error, {e}")),
        };
        out.extend_from_slice(reply.to_string().as_bytes());
        out.extend_from_slice(b"\n");
        out
    }

    fn dispatch(
        &mut self,
        req: &Map<String, Value>,
        vcpus: &Vcpus,
        out: &mut Vec<u8>,
    ) -> Result<Value, (&'static str, String)> {
        let generic = |d: &str| ("GenericError", d.to_string());
        let Some(command) = req.get("execute").and_then(Value::as_str) else {
            return Err(generic("QMP input lacks member 'execute'"));
        };
        let empty = Map::new();
        let args = req
            .get("arguments")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        match command {
            "guest-sync-delimited" | "guest-sync" => {
                let id = args
                    .get("id")
                    .filter(|v| v.is_i64() || v.is_u64())
                    .ok_or(generic("Parameter 'id' is missing"))?;
                if command == "guest-sync-delimited" {
                    out.push(0xFF);
                }
                Ok(id.clone())
            }
            "guest-ping" => Ok(json!({})),
            "guest-get-vcpus" => Ok(Value::Array(
                vcpus
                    .online_states()
                    .into_iter()
                    .map(|(i, online)| json!({"logical-id": i, "online": online, "can-offline": i > 0}))
                    .collect(),
            )),
            "guest-set-vcpus" => {
                let list = args
                    .get("vcpus")
                    .and_then(Value::as_array)
                    .ok_or(generic("Parameter 'vcpus' is missing"))?;
                let mut applied = 0u64;
                for e in list {
                    let id = e.get("logical-id").and_then(Value::as_u64);
                    let online = e.get("online").and_then(Value::as_bool);
                    let (Some(id), Some(online)) = (id, online) else {
                        break;
                    };
                    let Ok(id) = u32::try_from(id) else { break };
                    if let Err(err) = vcpus.set_online(id, online) {
                        if applied == 0 {
                            return Err(generic(&err.to_string()));
                        }
                        break;
                    }
                    applied += 1;
                }
                Ok(json!(applied))
            }
            "guest-exec" => {
                let path = args.get("path").and_then(Value::as_str).unwrap_or("");
                let argv: Vec<&str> = args
                    .get("arg")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let result = self.run(path, &argv);
                let pid = self.next_pid;
                self.next_pid += 1;
                self.runs.insert(pid, result);
                Ok(json!({ "pid": pid }))
            }
            "guest-exec-status" => {
                let pid = args.get("pid").and_then(Value::as_i64).unwrap_or(-1);
                let Some((code, err)) = self.runs.get(&pid) else {
                    return Err(generic(&format!("Invalid parameter 'pid' ({pid})")));
                };
                let mut r = json!({"exited": true, "exitcode": code});
                if !err.is_empty() {
                    r["err-data"] = json!(base64(err.as_bytes()));
                }
                Ok(r)
            }
            other => Err((
                "CommandNotFound",
                format!("The command {other} has not been found"),
            )),
        }
    }

    /// What running `path argv` would do here: (exit code, stderr).
    fn run(&self, path: &str, argv: &[&str]) -> (i64, String) {
        let is_ethtool = path == "ethtool" || path.ends_with("/ethtool");
        match (is_ethtool, argv) {
            (true, ["-L", _iface, "combined", n]) => match n.parse::<u16>() {
                Ok(n) if n == self.pairs => (0, String::new()),
                Ok(n) => (
                    1,
                    format!(
                        "synthetic guest: cannot change from {} to {n} queue pairs while running\n",
                        self.pairs
                    ),
                ),
                Err(_) => (1, format!("ethtool: bad count '{n}'\n")),
            },
            _ => (
                127,
                format!("{path}: not emulated by the synthetic guest\n"),
            ),
        }
    }
}

/// Standard base64 with padding (qemu-ga's `out-data` / `err-data`).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in bytes.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(s: &mut QgaSession, v: &Vcpus, line: &str) -> Value {
        let out = s.handle(line.as_bytes(), v);
        let start = out.iter().rposition(|&b| b == 0xFF).map_or(0, |i| i + 1);
        serde_json::from_slice(&out[start..]).unwrap()
    }

    #[test]
    fn sync_is_delimited_and_vcpus_go_offline_and_back() {
        let v = Vcpus::new();
        v.set_count(3);
        let mut s = QgaSession::new(1);
        let raw = s.handle(
            b"\xff{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":42}}",
            &v,
        );
        assert_eq!(raw, b"\xff{\"return\":42}\n");
        let r = ask(
            &mut s,
            &v,
            r#"{"execute":"guest-set-vcpus","arguments":{"vcpus":[{"logical-id":2,"online":false},{"logical-id":0,"online":false},{"logical-id":1,"online":false}]}}"#,
        );
        assert_eq!(r, json!({"return": 1}), "stops at vCPU 0");
        assert_eq!(v.online_states(), vec![(0, true), (1, true), (2, false)]);
        assert!(v.wait_while_held(2, std::time::Duration::ZERO));
        assert!(!v.wait_while_held(1, std::time::Duration::ZERO));
        let r = ask(&mut s, &v, r#"{"execute":"guest-get-vcpus"}"#);
        assert_eq!(
            r["return"][2],
            json!({"logical-id": 2, "online": false, "can-offline": true})
        );
        let r = ask(
            &mut s,
            &v,
            r#"{"execute":"guest-set-vcpus","arguments":{"vcpus":[{"logical-id":7,"online":true}]}}"#,
        );
        assert_eq!(r["error"]["desc"], "vCPU 7 does not exist");
        ask(
            &mut s,
            &v,
            r#"{"execute":"guest-set-vcpus","arguments":{"vcpus":[{"logical-id":2,"online":true}]}}"#,
        );
        assert!(!v.wait_while_held(2, std::time::Duration::ZERO));
    }

    #[test]
    fn ethtool_succeeds_only_for_the_pairs_in_use_and_garbage_is_answered() {
        let v = Vcpus::new();
        let mut s = QgaSession::new(2);
        let exec = |s: &mut QgaSession, n: &str| {
            let r = ask(
                s,
                &v,
                &format!(
                    r#"{{"execute":"guest-exec","arguments":{{"path":"ethtool","arg":["-L","eth0","combined","{n}"]}}}}"#
                ),
            );
            let pid = r["return"]["pid"].as_i64().unwrap();
            ask(
                s,
                &v,
                &format!(r#"{{"execute":"guest-exec-status","arguments":{{"pid":{pid}}}}}"#),
            )["return"]
                .clone()
        };
        assert_eq!(exec(&mut s, "2"), json!({"exited": true, "exitcode": 0}));
        let r = exec(&mut s, "1");
        assert_eq!(r["exitcode"], 1);
        assert_eq!(
            r["err-data"],
            json!(base64(
                b"synthetic guest: cannot change from 2 to 1 queue pairs while running\n"
            ))
        );
        assert_eq!(base64(b"no such device"), "bm8gc3VjaCBkZXZpY2U=");
        assert_eq!(base64(b"ab"), "YWI=");
        for junk in [
            "",
            "[]",
            "{}",
            "\u{7f}{",
            r#"{"execute":"guest-exec-status"}"#,
            r#"{"execute":"guest-shutdown"}"#,
        ] {
            let r = ask(&mut s, &v, junk);
            assert!(r.get("error").is_some(), "{junk}: {r}");
        }
    }
}
