//! The control-socket protocol against a real daemon: one line in, one
//! JSON answer out (one daemon per fuzzing process, with two VM ports `a`
//! and `b`, a sink and an echo, and its core manager).
//!
//! In-process: each input is one connection served by the control
//! server's own per-connection code ([`control::answer`]: the bounded line
//! read, the parse, the daemon's handler, the answer line) on a
//! `UnixStream::pair()`, driven on this thread by a single-threaded tokio
//! runtime like the server's, with the harness as the client on the other
//! end. No connection reaches the daemon's socket or its server thread
//! (only the accept loop is left out), so an input costs no thread switch.
//!
//! The first byte of an input picks its form: the rest is either the raw
//! line sent, or decoded with `arbitrary` into a [`Req`] of known commands,
//! ports and parameter names that is sent as JSON. Checked for every input:
//! a request whose first line is UTF-8 gets exactly one line back, a JSON
//! [`Response`]; a request that parses gets the answer its command calls
//! for, never "bad request"; a line that is not UTF-8 gets no answer.

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vadapt_dataplane::config::{parse_local_spec, parse_vm_spec, DaemonConfig};
use vadapt_dataplane::control::{self, Handler, Request, Response, MAX_P95_US};
use vadapt_dataplane::Daemon;

/// The longest request line the daemon reads (`control::MAX_REQUEST`).
const MAX_REQUEST: usize = 64 * 1024;

/// A request built from known words, sent as one JSON object.
#[derive(Arbitrary, Debug)]
pub struct Req {
    /// `cmd`.
    pub cmd: Word,
    /// `port`.
    pub port: Option<Port>,
    /// `policy`: an object.
    pub policy: Option<Vec<(Word, Val)>>,
    /// `retune`: an object.
    pub retune: Option<Vec<(Word, Val)>>,
    /// More fields.
    pub extra: Vec<(Word, Val)>,
}

/// A port name: the daemon's, or any.
#[derive(Arbitrary, Debug)]
#[allow(missing_docs)]
pub enum Port {
    A,
    B,
    Sink,
    Other(String),
}

/// Words of the protocol: commands, policy kinds, parameter names.
#[derive(Arbitrary, Debug, Clone, Copy)]
#[allow(missing_docs)]
pub enum Word {
    Cmd,
    Stats,
    Metrics,
    SetPolicy,
    Retune,
    Port,
    Policy,
    Kind,
    Interrupt,
    BusyPoll,
    Netap,
    Growshrink,
    Eekbp,
    Param,
    SearchRange,
    KickThreshold,
    PollMax,
    Quota,
    LoUs,
    HiUs,
    Permille,
    Ns,
    Packets,
    MinIntervalUs,
    MaxIntervalUs,
    Ratio,
    MinDistanceUs,
    RoundMs,
    MinChange,
    MaxRounds,
    KickThresholdPermille,
    NotifyDuringSleep,
    KickProbe,
    KickProbeMargin,
    PollMaxNs,
    PollStartNs,
    PollGrow,
    PollShrink,
    EmptyPasses,
    Cores,
    SetCores,
    CoresReport,
    Mode,
    P95Us,
    ModeP,
    ModeE,
    ModeR,
    ModeOff,
}

impl Word {
    fn as_str(self) -> &'static str {
        match self {
            Word::Cmd => "cmd",
            Word::Stats => "stats",
            Word::Metrics => "metrics",
            Word::SetPolicy => "set-policy",
            Word::Retune => "retune",
            Word::Port => "port",
            Word::Policy => "policy",
            Word::Kind => "kind",
            Word::Interrupt => "interrupt",
            Word::BusyPoll => "busy-poll",
            Word::Netap => "netap",
            Word::Growshrink => "growshrink",
            Word::Eekbp => "eekbp",
            Word::Param => "param",
            Word::SearchRange => "search-range",
            Word::KickThreshold => "kick-threshold",
            Word::PollMax => "poll-max",
            Word::Quota => "quota",
            Word::LoUs => "lo_us",
            Word::HiUs => "hi_us",
            Word::Permille => "permille",
            Word::Ns => "ns",
            Word::Packets => "packets",
            Word::MinIntervalUs => "min_interval_us",
            Word::MaxIntervalUs => "max_interval_us",
            Word::Ratio => "ratio",
            Word::MinDistanceUs => "min_distance_us",
            Word::RoundMs => "round_ms",
            Word::MinChange => "min_change",
            Word::MaxRounds => "max_rounds",
            Word::KickThresholdPermille => "kick_threshold_permille",
            Word::NotifyDuringSleep => "notify_during_sleep",
            Word::KickProbe => "kick_probe",
            Word::KickProbeMargin => "kick_probe_margin",
            Word::PollMaxNs => "poll_max_ns",
            Word::PollStartNs => "poll_start_ns",
            Word::PollGrow => "poll_grow",
            Word::PollShrink => "poll_shrink",
            Word::EmptyPasses => "empty_passes",
            Word::Cores => "cores",
            Word::SetCores => "set-cores",
            Word::CoresReport => "cores-report",
            Word::Mode => "mode",
            Word::P95Us => "p95_us",
            Word::ModeP => "p",
            Word::ModeE => "e",
            Word::ModeR => "r",
            Word::ModeOff => "off",
        }
    }
}

/// A JSON value.
#[derive(Arbitrary, Debug)]
#[allow(missing_docs)]
pub enum Val {
    Word(Word),
    U64(u64),
    Small(u16),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
    Null,
}

impl Val {
    fn json(&self) -> Value {
        match self {
            Val::Word(w) => w.as_str().into(),
            Val::U64(n) => (*n).into(),
            Val::Small(n) => (*n).into(),
            Val::I64(n) => (*n).into(),
            Val::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Val::Bool(b) => (*b).into(),
            Val::Str(s) => s.as_str().into(),
            Val::Null => Value::Null,
        }
    }
}

fn object(fields: &[(Word, Val)]) -> Map<String, Value> {
    fields
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.json()))
        .collect()
}

impl Req {
    /// The request as one line of JSON.
    pub fn line(&self) -> Vec<u8> {
        let mut m = object(&self.extra);
        m.insert("cmd".into(), self.cmd.as_str().into());
        if let Some(p) = &self.port {
            let name = match p {
                Port::A => "a",
                Port::B => "b",
                Port::Sink => "s",
                Port::Other(s) => s,
            };
            m.insert("port".into(), name.into());
        }
        if let Some(p) = &self.policy {
            m.insert("policy".into(), object(p).into());
        }
        if let Some(r) = &self.retune {
            m.insert("retune".into(), object(r).into());
        }
        let mut line = serde_json::to_vec(&Value::Object(m)).expect("JSON");
        line.push(b'\n');
        line
    }
}

/// The line an input sends: first byte even, the rest as it is; odd, a
/// [`Req`] decoded from the rest.
pub fn input_line(data: &[u8]) -> Option<Vec<u8>> {
    let (mode, rest) = data.split_first()?;
    if mode % 2 == 0 {
        return Some(rest.to_vec());
    }
    Req::arbitrary_take_rest(Unstructured::new(rest))
        .ok()
        .map(|r| r.line())
}

/// The daemon under test, its control handler and socket.
pub struct Fixture {
    /// The daemon (never stopped: it lives as long as the fuzzer).
    pub daemon: Daemon,
    /// Its control socket (the tests' second opinion; inputs never use it).
    pub control: PathBuf,
    /// What answers its control requests, as the control server hands
    /// them over.
    pub dispatcher: control::Dispatcher,
    /// The runtime the inputs' connections are served on (this thread's).
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Fixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixture")
            .field("control", &self.control)
            .finish_non_exhaustive()
    }
}

extern "C" fn remove_fixture_dir() {
    let _ = std::fs::remove_dir_all(fixture_dir());
}

fn fixture_dir() -> PathBuf {
    std::env::temp_dir().join(format!("vadapt-fuzz-control-{}", std::process::id()))
}

/// The process's daemon, started on first use in a private temporary folder
/// (removed when the process exits normally).
pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = fixture_dir();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the fixture's folder");
        // SAFETY: registers a plain function with no arguments.
        unsafe { libc::atexit(remove_fixture_dir) };
        let mut cfg = DaemonConfig::default();
        for n in ["a", "b"] {
            let spec = format!(
                "name={n},socket={}",
                dir.join(format!("{n}.sock")).display()
            );
            cfg.vm.push(parse_vm_spec(&spec).expect("a VM spec"));
        }
        cfg.sink
            .push(parse_local_spec("--sink", "s").expect("a sink spec"));
        cfg.echo
            .push(parse_local_spec("--echo", "e").expect("an echo spec"));
        cfg.control = dir.join("control.sock");
        // The core manager runs (advise-only: the fuzzer moves no thread),
        // so `cores`, `set-cores` and `cores-report` reach it.
        let cpus: Vec<usize> = vadapt_host::cputime::current_affinity()
            .expect("this process's affinity")
            .into_iter()
            .take(2)
            .collect();
        if cpus.len() == 2 {
            cfg.cores.cpus = cpus;
        }
        cfg.cores.apply = vadapt_dataplane::cores::ApplyMethod::Advise;
        let control = cfg.control.clone();
        crate::ignore_sigpipe();
        let daemon = Daemon::start(cfg).expect("starting the daemon");
        let handler: Arc<dyn Handler> = Arc::new(Fenced(daemon.control_handler()));
        // What the control server runs on (`local_server::run`).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        Fixture {
            daemon,
            control,
            dispatcher: control::Dispatcher::new(handler),
            rt,
        }
    })
}

/// The daemon's handler, but for the requests that add and remove ports:
/// a fuzzed `add-port` would create socket files and TAP devices where the
/// input says, as root. Their parsing is fuzzed all the same (it is the
/// server's, before the handler); the daemon's tests run them. A capture
/// is not started either (its answer is a stream, not one line; the
/// handler's default refuses it): its request's parsing is fuzzed, and
/// `tests/interop/test_capture.py` runs it.
struct Fenced(Arc<dyn Handler>);

/// What [`Fenced`] answers the requests it keeps from the daemon.
const NOT_FUZZED: &str = "port changes are not fuzzed";

impl Handler for Fenced {
    fn handle(&self, req: Request) -> Response {
        match req {
            Request::AddPort { .. } | Request::DelPort { .. } | Request::Reload => {
                Response::Error {
                    error: NOT_FUZZED.into(),
                }
            }
            req => self.0.handle(req),
        }
    }
}

/// One connection: the client writes `line` and shuts its sending side
/// down, the server's code answers it; what the client read to the end.
fn exchange(f: &Fixture, line: &[u8]) -> std::io::Result<Vec<u8>> {
    f.rt.block_on(async {
        let (client, server) = tokio::net::UnixStream::pair()?;
        let (mut rd, mut wr) = client.into_split();
        let client = async {
            let _ = wr.write_all(line).await;
            let _ = wr.shutdown().await;
            let mut answer = Vec::new();
            rd.read_to_end(&mut answer).await.map(|_| answer)
        };
        // Its errors (a line that is not UTF-8, a client gone) end the
        // connection without an answer, as in the daemon.
        let server = control::answer(server, &f.dispatcher);
        let (_, answer) = tokio::join!(server, client);
        answer
    })
}

/// Send `line` as one control connection; check the answer.
pub fn run(line: &[u8]) {
    let answer = match exchange(fixture(), line) {
        Ok(a) => a,
        Err(e) => panic!("no answer to the end: {e}"),
    };

    // What the daemon reads: its first line, within its size limit.
    let line = &line[..line.len().min(MAX_REQUEST)];
    let first = match line.iter().position(|&b| b == b'\n') {
        Some(i) => &line[..=i],
        None => line,
    };
    let Ok(text) = std::str::from_utf8(first) else {
        assert!(answer.is_empty(), "an answer to a line that is not UTF-8");
        return;
    };
    assert!(
        answer.ends_with(b"\n") && answer.iter().filter(|&&b| b == b'\n').count() == 1,
        "not one line: {:?}",
        String::from_utf8_lossy(&answer)
    );
    let resp: Response = serde_json::from_slice(&answer).expect("the answer is a JSON Response");
    let Ok(req) = serde_json::from_str::<Request>(text) else {
        assert!(
            matches!(&resp, Response::Error { error } if error.starts_with("bad request")),
            "{resp:?}"
        );
        return;
    };
    let known = |port: &str| ["a", "b"].contains(&port);
    match (&req, &resp) {
        (Request::Stats, Response::Stats { .. })
        | (Request::Metrics, Response::Metrics { .. })
        | (Request::Fdb, Response::Fdb { .. })
        | (Request::Trace { .. }, Response::Trace { .. }) => {}
        // A frame that is none, or a port that is not there, is refused.
        (Request::Trace { .. }, Response::Error { error }) if !error.starts_with("bad request") => {
        }
        (Request::SetPolicy { port, .. } | Request::Retune { port, .. }, Response::Ok)
            if known(port) => {}
        (Request::Cores, Response::Cores { .. })
        | (Request::SetCores { .. } | Request::CoresReport { .. }, Response::Ok) => {}
        // A one-CPU machine runs no core manager (vSPACE needs two CPUs).
        (
            Request::Cores | Request::SetCores { .. } | Request::CoresReport { .. },
            Response::Error { error },
        ) if error.contains("core manager is not running") => {}
        // A sample past an hour is refused (it once overflowed the core
        // manager's µs-to-ns conversion and ended its thread).
        (Request::CoresReport { p95_us }, Response::Error { error })
            if *p95_us > MAX_P95_US && error.contains("more than an hour") => {}
        (
            Request::SetPolicy { port, .. } | Request::Retune { port, .. },
            Response::Error { error },
        ) if !error.starts_with("bad request") && (known(port) || error.contains("no VM port")) => {
        }
        (
            Request::AddPort { .. } | Request::DelPort { .. } | Request::Reload,
            Response::Error { error },
        ) if error == NOT_FUZZED => {}
        // Limits a VM port takes are set; others are refused, saying why
        // (a burst under one frame, a sink, a port that is not there).
        (Request::SetLimits { port, .. }, Response::Ok) if known(port) => {}
        (Request::SetLimits { .. }, Response::Error { error })
            if !error.starts_with("bad request") => {}
        (Request::Capture { .. }, Response::Error { error })
            if !error.starts_with("bad request") => {}
        _ => panic!("request {req:?} got {resp:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds are requests the daemon takes, and each gets its answer.
    #[test]
    fn seeds_are_answered() {
        let _one = crate::tests::serial();
        for seed in [
            &include_bytes!("../seeds/control/stats")[..],
            include_bytes!("../seeds/control/metrics"),
            include_bytes!("../seeds/control/set-policy"),
            include_bytes!("../seeds/control/retune"),
            include_bytes!("../seeds/control/cores"),
            include_bytes!("../seeds/control/set-cores"),
            include_bytes!("../seeds/control/cores-report"),
            include_bytes!("../seeds/control/fdb"),
            include_bytes!("../seeds/control/capture"),
        ] {
            let line = input_line(seed).unwrap();
            serde_json::from_slice::<Request>(&line).unwrap();
            run(&line);
        }
        // A P95 sample too large to be one is refused, and the core manager
        // lives on through its next periods (fuzzing found the overflow).
        let periods =
            || match vadapt_dataplane::control::request(&fixture().control, &Request::Cores) {
                Ok(Response::Cores { cores }) => Some(cores.periods),
                _ => None, // a one-CPU machine: no core manager
            };
        run(b"{\"cmd\":\"set-cores\",\"mode\":\"p\"}\n");
        let huge = format!("{{\"cmd\":\"cores-report\",\"p95_us\":{}}}\n", u64::MAX);
        run(huge.as_bytes());
        run(format!("{{\"cmd\":\"cores-report\",\"p95_us\":{MAX_P95_US}}}\n").as_bytes());
        // The input fuzzing found, as it found it.
        run(&input_line(include_bytes!("../seeds/control/p95-overflow")).unwrap());
        let before = periods();
        std::thread::sleep(std::time::Duration::from_millis(450));
        if let (Some(a), Some(b)) = (before, periods()) {
            assert!(b > a, "the core manager ran no period ({a} then {b})");
        }
        run(b"{\"cmd\":\"set-cores\",\"mode\":\"off\"}\n");
        // Built requests, garbage, and a line that is not UTF-8.
        for data in [&b"\x01abcdefgh"[..], b"\x00{not json\n", b"\x00\xff\xfe\n"] {
            run(&input_line(data).unwrap());
        }
    }
}
