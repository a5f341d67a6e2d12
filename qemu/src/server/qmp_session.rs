//! One QMP conversation, without the socket: a command line in, the messages to answer out.
//!
//! The wire format is QEMU's (`docs/interop/qmp-spec`): after the greeting
//! ([`greeting`]) the client sends one JSON object per line, `{"execute": NAME,
//! "arguments": {...}, "id": ANY}`, and gets `{"return": ...}` or `{"error": {"class": ...,
//! "desc": ...}}`, carrying the request's `id` when it had one. Events
//! (`{"event": ..., "timestamp": {...}}`) may come before a reply. The error classes and
//! messages are QEMU's own, so a client written against QEMU sees the same answers here:
//!
//! | input | answer |
//! |---|---|
//! | not JSON | `GenericError` "JSON parse error, ..." |
//! | JSON but not an object | `GenericError` "QMP input must be a JSON object" |
//! | no `execute` / an unknown member | `GenericError` "QMP input lacks member 'execute'" / "QMP input member 'x' is unexpected" |
//! | any command before `qmp_capabilities` | `CommandNotFound` "Expecting capabilities negotiation with 'qmp_capabilities'" |
//! | `qmp_capabilities` a second time | `CommandNotFound` "Capabilities negotiation is already complete, command ignored" |
//! | an unknown command | `CommandNotFound` "The command x has not been found" |
//! | an argument a command does not take | `GenericError` "Parameter 'x' is unexpected" |
//!
//! Commands: `qmp_capabilities` (no capability is offered, so `enable` must be empty),
//! `query-cpus-fast` (the live vCPU threads of [`Vcpus`], in QEMU's shape: `cpu-index`,
//! `thread-id`, `qom-path`, `target`, `props`), `stop` and `cont` (pause and resume the vCPUs;
//! a `STOP` or `RESUME` event precedes the reply when the state changed, as in QEMU),
//! `query-status` (`status` `running` or `paused`, `running`).
//!
//! Unlike QEMU, `query-cpus-fast` lists only the threads that exist: none before the run
//! starts or after it ends.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::server::vcpus::Vcpus;

/// QMP's greeting, the first line the server sends on each connection.
pub fn greeting() -> Value {
    json!({
        "QMP": {
            "version": {
                "qemu": {"micro": 0, "minor": 0, "major": 0},
                "package": "vadapt-guest",
            },
            "capabilities": [],
        }
    })
}

/// An error reply of class `class` (`GenericError`, `CommandNotFound`).
pub fn error(class: &str, desc: &str) -> Value {
    json!({"error": {"class": class, "desc": desc}})
}

/// The state of one QMP connection: before or after capabilities negotiation.
#[derive(Debug, Default)]
pub struct QmpSession {
    negotiated: bool,
}

/// A request that could not be dispatched: (error class, description).
type Refusal = (&'static str, String);

impl QmpSession {
    /// A fresh connection, in capabilities negotiation mode.
    pub fn new() -> QmpSession {
        QmpSession::default()
    }

    /// Answers one line (without its line end): the events it caused, then the reply.
    /// `now_unix` is the wall-clock time since the Unix epoch, for event timestamps. Never
    /// panics, whatever the bytes.
    pub fn handle(&mut self, line: &[u8], vcpus: &Vcpus, now_unix: Duration) -> Vec<Value> {
        let request: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => return vec![error("GenericError", &format!("JSON parse error, {e}"))],
        };
        let Value::Object(request) = request else {
            return vec![error("GenericError", "QMP input must be a JSON object")];
        };
        let id = request.get("id").cloned();
        let mut out = Vec::with_capacity(2);
        let reply = match self.dispatch(&request, vcpus, now_unix, &mut out) {
            Ok(ret) => json!({ "return": ret }),
            Err((class, desc)) => error(class, &desc),
        };
        out.push(with_id(reply, id));
        out
    }

    fn dispatch(
        &mut self,
        request: &Map<String, Value>,
        vcpus: &Vcpus,
        now_unix: Duration,
        events: &mut Vec<Value>,
    ) -> Result<Value, Refusal> {
        let generic = |desc: String| ("GenericError", desc);
        for (key, value) in request {
            match key.as_str() {
                "execute" if !value.is_string() => {
                    return Err(generic(
                        "QMP input member 'execute' must be a string".into(),
                    ))
                }
                "arguments" if !value.is_object() => {
                    return Err(generic(
                        "QMP input member 'arguments' must be an object".into(),
                    ))
                }
                "execute" | "arguments" | "id" => {}
                other => return Err(generic(format!("QMP input member '{other}' is unexpected"))),
            }
        }
        let Some(command) = request.get("execute").and_then(Value::as_str) else {
            return Err(generic("QMP input lacks member 'execute'".into()));
        };
        let empty = Map::new();
        let args = request
            .get("arguments")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let not_found = |desc: String| ("CommandNotFound", desc);
        match (self.negotiated, command) {
            (false, "qmp_capabilities") => {
                only_arguments(args, &["enable"])?;
                if let Some(enable) = args.get("enable") {
                    let Some(list) = enable.as_array() else {
                        return Err(generic(
                            "Invalid parameter type for 'enable', expected: array".into(),
                        ));
                    };
                    if let Some(cap) = list.first() {
                        return Err(generic(format!("Capability {cap} not available")));
                    }
                }
                self.negotiated = true;
                Ok(json!({}))
            }
            (false, _) => Err(not_found(
                "Expecting capabilities negotiation with 'qmp_capabilities'".into(),
            )),
            (true, "qmp_capabilities") => Err(not_found(
                "Capabilities negotiation is already complete, command ignored".into(),
            )),
            (true, "query-cpus-fast") => {
                only_arguments(args, &[])?;
                Ok(Value::Array(
                    vcpus
                        .threads()
                        .iter()
                        .map(|t| cpu_info(t.cpu_index, t.thread_id))
                        .collect(),
                ))
            }
            (true, "stop") => {
                only_arguments(args, &[])?;
                if vcpus.pause() {
                    events.push(event("STOP", now_unix));
                }
                Ok(json!({}))
            }
            (true, "cont") => {
                only_arguments(args, &[])?;
                if vcpus.resume() {
                    events.push(event("RESUME", now_unix));
                }
                Ok(json!({}))
            }
            (true, "query-status") => {
                only_arguments(args, &[])?;
                let paused = vcpus.is_paused();
                Ok(json!({
                    "status": if paused { "paused" } else { "running" },
                    "running": !paused,
                }))
            }
            (true, other) => Err(not_found(format!("The command {other} has not been found"))),
        }
    }
}

/// Refuses any argument not in `allowed`, as QEMU's generated unmarshalling does.
fn only_arguments(args: &Map<String, Value>, allowed: &[&str]) -> Result<(), Refusal> {
    match args.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(("GenericError", format!("Parameter '{k}' is unexpected"))),
        None => Ok(()),
    }
}

/// `reply` carrying the request's `id`, when it had one.
fn with_id(mut reply: Value, id: Option<Value>) -> Value {
    if let (Some(id), Some(obj)) = (id, reply.as_object_mut()) {
        obj.insert("id".into(), id);
    }
    reply
}

/// An event without data, stamped `now_unix`.
fn event(name: &str, now_unix: Duration) -> Value {
    json!({
        "timestamp": {"seconds": now_unix.as_secs(), "microseconds": now_unix.subsec_micros()},
        "event": name,
    })
}

/// One `query-cpus-fast` entry, shaped as QEMU's for a one-socket-per-vCPU machine.
fn cpu_info(cpu_index: u32, thread_id: u32) -> Value {
    json!({
        "cpu-index": cpu_index,
        "thread-id": thread_id,
        "qom-path": format!("/machine/unattached/device[{cpu_index}]"),
        "target": std::env::consts::ARCH,
        "props": {"core-id": 0, "thread-id": 0, "socket-id": cpu_index},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Duration = Duration::from_micros(1_700_000_000_000_123);

    fn ask(s: &mut QmpSession, v: &Vcpus, line: &str) -> Vec<Value> {
        s.handle(line.as_bytes(), v, NOW)
    }

    fn class(reply: &Value) -> &str {
        reply["error"]["class"].as_str().unwrap_or("")
    }

    #[test]
    fn the_greeting_is_qemus_shape() {
        let g = greeting();
        assert_eq!(g["QMP"]["version"]["qemu"]["major"], 0);
        assert_eq!(g["QMP"]["version"]["package"], "vadapt-guest");
        assert_eq!(g["QMP"]["capabilities"], json!([]));
    }

    #[test]
    fn commands_wait_for_capabilities_negotiation() {
        let v = Vcpus::new();
        let mut s = QmpSession::new();
        let r = ask(&mut s, &v, r#"{"execute": "query-cpus-fast"}"#);
        assert_eq!(class(&r[0]), "CommandNotFound");
        assert!(r[0]["error"]["desc"]
            .as_str()
            .unwrap()
            .contains("qmp_capabilities"));
        let r = ask(&mut s, &v, r#"{"execute": "qmp_capabilities", "id": 7}"#);
        assert_eq!(r, [json!({"return": {}, "id": 7})]);
        let r = ask(&mut s, &v, r#"{"execute": "qmp_capabilities"}"#);
        assert_eq!(class(&r[0]), "CommandNotFound");
    }

    #[test]
    fn query_cpus_fast_lists_the_vcpu_threads() {
        let v = Vcpus::new();
        v.register(0, 4242);
        v.register(1, 4243);
        let mut s = QmpSession::new();
        ask(&mut s, &v, r#"{"execute": "qmp_capabilities"}"#);
        let r = ask(&mut s, &v, r#"{"execute": "query-cpus-fast"}"#);
        let cpus = r[0]["return"].as_array().unwrap();
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[1]["cpu-index"], 1);
        assert_eq!(cpus[1]["thread-id"], 4243);
        assert_eq!(cpus[1]["qom-path"], "/machine/unattached/device[1]");
        assert_eq!(cpus[1]["target"], std::env::consts::ARCH);
        assert_eq!(cpus[1]["props"]["socket-id"], 1);
    }

    #[test]
    fn stop_and_cont_pause_and_announce_changes_only() {
        let v = Vcpus::new();
        let mut s = QmpSession::new();
        ask(&mut s, &v, r#"{"execute": "qmp_capabilities"}"#);
        let r = ask(&mut s, &v, r#"{"execute": "stop"}"#);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0]["event"], "STOP");
        assert_eq!(r[0]["timestamp"]["seconds"], 1_700_000_000);
        assert_eq!(r[0]["timestamp"]["microseconds"], 123);
        assert_eq!(r[1], json!({"return": {}}));
        assert!(v.is_paused());
        let r = ask(&mut s, &v, r#"{"execute": "query-status"}"#);
        assert_eq!(r[0]["return"]["status"], "paused");
        // Stopping a stopped VM succeeds without an event, as in QEMU.
        assert_eq!(
            ask(&mut s, &v, r#"{"execute": "stop"}"#),
            [json!({"return": {}})]
        );
        let r = ask(&mut s, &v, r#"{"execute": "cont"}"#);
        assert_eq!(r[0]["event"], "RESUME");
        assert!(!v.is_paused());
        let r = ask(&mut s, &v, r#"{"execute": "query-status"}"#);
        assert_eq!(
            r[0]["return"],
            json!({"status": "running", "running": true})
        );
    }

    #[test]
    fn bad_input_gets_qemus_errors() {
        let v = Vcpus::new();
        let mut s = QmpSession::new();
        let cases = [
            ("{", "GenericError", "JSON parse error"),
            ("\u{0}\u{ff}garbage", "GenericError", "JSON parse error"),
            ("[1, 2]", "GenericError", "must be a JSON object"),
            ("{}", "GenericError", "lacks member 'execute'"),
            (r#"{"execute": 3}"#, "GenericError", "must be a string"),
            (
                r#"{"execute": "stop", "arguments": []}"#,
                "GenericError",
                "must be an object",
            ),
            (
                r#"{"execute": "stop", "color": "red"}"#,
                "GenericError",
                "'color' is unexpected",
            ),
            (
                r#"{"execute": "qmp_capabilities", "arguments": {"enable": ["oob"]}}"#,
                "GenericError",
                "not available",
            ),
        ];
        for (line, want_class, want_desc) in cases {
            let r = ask(&mut s, &v, line);
            assert_eq!(r.len(), 1, "{line}");
            assert_eq!(class(&r[0]), want_class, "{line}");
            let desc = r[0]["error"]["desc"].as_str().unwrap();
            assert!(desc.contains(want_desc), "{line}: {desc}");
        }
        ask(&mut s, &v, r#"{"execute": "qmp_capabilities"}"#);
        let r = ask(&mut s, &v, r#"{"execute": "system_powerdown", "id": "x"}"#);
        assert_eq!(class(&r[0]), "CommandNotFound");
        assert_eq!(r[0]["id"], "x");
        assert_eq!(
            r[0]["error"]["desc"],
            "The command system_powerdown has not been found"
        );
        let r = ask(
            &mut s,
            &v,
            r#"{"execute": "stop", "arguments": {"now": true}}"#,
        );
        assert_eq!(class(&r[0]), "GenericError");
        assert!(!v.is_paused(), "a refused stop does not pause");
    }
}
