//! The guest agent's side of a connection into the core manager's client
//! ([`QgaClient`]): the input is everything the "agent" (inside the guest,
//! so fully guest-controlled) sends after the client's first request.
//!
//! The client opens with `guest-sync-delimited` and an id of its own
//! choosing (from the clock), and takes only a reply that echoes it; an
//! input cannot know it. So one agent thread per process (not per input)
//! reads each connection's sync request, writes the input with every `$ID`
//! replaced by that id, and shuts its sending side down; the client, on
//! the fuzzer's thread, makes the exchanges the core manager makes on one
//! connection ([`QgaClient::from_stream`], then `set_online_vcpus`'s
//! `guest-get-vcpus`, `guest-set-vcpus`, `guest-get-vcpus`, or
//! `set_queue_pairs`'s `guest-exec` of `ethtool -L` and
//! `guest-exec-status`). Every read ends at the input's end, so nothing
//! waits on a deadline.
//!
//! The first byte of an input picks the exchange (bit 7: queue pairs) and
//! the vCPUs wanted (low 4 bits, plus one); the rest is the stream.
//! Checked beyond "no crash, no hang": a peer's text in an error is cut to
//! its excerpt; a vCPU change names a vCPU the agent listed; once the
//! client calls itself unusable it refuses every command.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use vadapt_qemu::qga::{self, QgaClient, QgaError, QgaLimits};

/// Most stream bytes per input: what the socket's buffer takes at once
/// (the agent never waits on the client to write it).
pub const MAX_STREAM: usize = 64 << 10;

/// The longest excerpt of a peer's line in an error: 200 bytes of it,
/// escaped (each byte at most `MAX_ESCAPED_PER_BYTE` bytes).
const MAX_EXCERPT: usize = 200 * vadapt_qemu::peer_text::MAX_ESCAPED_PER_BYTE;

/// The daemon's limits (`cores::guest_side`), except no time for a
/// `guest-exec`'d program: one `guest-exec-status`, never a 20 ms sleep.
const LIMITS: QgaLimits = QgaLimits {
    timeout: Duration::from_secs(2),
    max_line: 1 << 20,
    exec_timeout: Duration::ZERO,
};

/// The agent thread's inbox: a connection's agent end and what it sends.
type Job = (UnixStream, Vec<u8>);

/// The agent thread: its inbox, and word from it that a job is done.
struct Agent {
    jobs: Sender<Job>,
    done: Receiver<()>,
}

/// The id in a sync request (`0xFF {"execute": ..., "arguments": {"id": N}}`).
fn sync_id(request: &[u8]) -> Option<u64> {
    let at = request.iter().position(|&b| b == 0xFF)?;
    let v: serde_json::Value = serde_json::from_slice(&request[at + 1..]).ok()?;
    v.pointer("/arguments/id")?.as_u64()
}

/// `stream` with every `$ID` replaced by `id`.
fn with_id(stream: &[u8], id: u64) -> Vec<u8> {
    let id = id.to_string();
    let mut out = Vec::with_capacity(stream.len());
    let mut rest = stream;
    while let Some(i) = rest.windows(3).position(|w| w == b"$ID") {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(id.as_bytes());
        rest = &rest[i + 3..];
    }
    out.extend_from_slice(rest);
    out
}

/// The agent: for each connection, read the sync request, send the input.
fn agent_loop(jobs: Receiver<Job>, done: Sender<()>) {
    for (stream, bytes) in jobs {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut request = Vec::new();
        // A sync request is ~80 bytes.
        let mut r = BufReader::new((&stream).take(4096));
        let id = match r.read_until(b'\n', &mut request) {
            Ok(_) => sync_id(&request).expect("the client opens with a sync request"),
            Err(e) => panic!("no sync request: {e}"),
        };
        let _ = (&stream).write_all(&with_id(&bytes, id));
        let _ = stream.shutdown(std::net::Shutdown::Write);
        drop(stream);
        let _ = done.send(());
    }
}

/// Hand `stream` and `bytes` to the agent thread (started on first use).
fn serve(stream: UnixStream, bytes: Vec<u8>) {
    agent()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .jobs
        .send((stream, bytes))
        .expect("the agent thread runs");
}

/// Wait until the agent thread is done with its job (and its end closed):
/// nothing of one input outlives it.
fn served() {
    let a = agent().lock().unwrap_or_else(|e| e.into_inner());
    a.done
        .recv_timeout(Duration::from_secs(10))
        .expect("the agent thread finishes its job");
}

fn agent() -> &'static Mutex<Agent> {
    static AGENT: OnceLock<Mutex<Agent>> = OnceLock::new();
    AGENT.get_or_init(|| {
        let (jobs, inbox) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("fuzz-qga-agent".into())
            .spawn(move || agent_loop(inbox, done_tx))
            .expect("spawning the agent thread");
        Mutex::new(Agent { jobs, done })
    })
}

/// Check one error.
fn check(e: &QgaError) {
    let _ = e.to_string();
    if let QgaError::BadReply { line, .. } = e {
        assert!(line.len() <= MAX_EXCERPT, "excerpt of {} bytes", line.len());
        assert!(!line.chars().any(char::is_control), "unescaped: {line:?}");
    }
}

/// The exchanges of one connection; the first error ends them.
fn exchanges(c: &mut QgaClient, mode: u8) -> Result<(), QgaError> {
    if mode & 0x80 != 0 {
        return c.run("ethtool", &["-L", "eth0", "combined", "2"]);
    }
    let vcpus = c.get_vcpus()?;
    let changes = qga::vcpu_changes(&vcpus, usize::from(mode & 0xf) + 1);
    for (id, _) in &changes {
        assert!(
            vcpus.iter().any(|v| v.logical_id == *id),
            "vCPU {id} not listed"
        );
    }
    if !changes.is_empty() {
        c.set_vcpus(&changes)?;
    }
    c.get_vcpus().map(|_| ())
}

/// Run one input (see the module docs).
pub fn run(data: &[u8]) {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let stream = &stream[..stream.len().min(MAX_STREAM)];
    crate::ignore_sigpipe();
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    // Kept open until the client is done: a client write after the agent
    // thread let its end go would fail, as no real agent makes it fail.
    let theirs_too = theirs.try_clone().expect("dup");
    serve(theirs, stream.to_vec());
    let client = QgaClient::from_stream(ours, LIMITS);
    served();
    let mut client = match client {
        Ok(c) => c,
        Err(e) => return check(&e),
    };
    let unusable = match exchanges(&mut client, mode) {
        Ok(()) => false,
        Err(e) => {
            check(&e);
            matches!(e, QgaError::Unusable)
        }
    };
    // One more command on what is left of the stream; a client that
    // called itself unusable stays so.
    match client.execute("guest-ping", serde_json::Value::Null) {
        Err(QgaError::Unusable) => {}
        Err(e) => {
            assert!(!unusable, "{e} from an unusable client");
            check(&e);
        }
        Ok(_) => assert!(!unusable, "an answer through an unusable client"),
    }
    drop(theirs_too);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_goes_where_the_input_says() {
        assert_eq!(with_id(b"a$IDb$ID$I", 42), b"a42b42$I");
        let req = b"\xff{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":77}}\n";
        assert_eq!(sync_id(req), Some(77));
    }

    /// The seeds get through the sync and every exchange.
    #[test]
    fn seeds_reach_every_command() {
        let _one = crate::tests::serial();
        for seed in [
            &include_bytes!("../seeds/qga/get-vcpus")[..],
            include_bytes!("../seeds/qga/stale-and-exec"),
        ] {
            run(seed);
            let (ours, theirs) = UnixStream::pair().unwrap();
            let keep = theirs.try_clone().unwrap();
            serve(theirs, seed[1..].to_vec());
            let mut c = QgaClient::from_stream(ours, LIMITS).expect("synchronised");
            served();
            // The program's failure is the guest's answer, as sent.
            match exchanges(&mut c, seed[0]) {
                Ok(()) | Err(QgaError::Program { .. }) => {}
                Err(e) => panic!("{e}"),
            }
            drop(keep);
        }
    }
}
